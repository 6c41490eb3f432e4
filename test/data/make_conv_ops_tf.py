"""Writes conv_ops_tf.npz: TensorFlow 2.21's values and gradients for xtpu's
convolution, pooling and batch-norm ops (test_conv_ops.py reads it).

Run with TF's interpreter (not part of the suite):
  /work/tfvenv/bin/python test/data/make_conv_ops_tf.py

Each case: an op of ``tf.nn`` with keyword arguments (JSON), float64 inputs,
(float32 where TF has no float64 kernel), a cotangent ``ct`` of the output, and TF's output and gradients of
``sum(ct * out)`` with respect to every input (tf.GradientTape).  Dilated
and grouped conv2d gradients have no CPU kernel in TF; those cases keep TF's
forward value only and their gradients are checked against JAX in the tests.
"""

import json
import os

import numpy as np
import tensorflow as tf

rng = np.random.default_rng(27)
CASES = []


def case(op, shapes, grads=True, **kwargs):
    CASES.append((op, shapes, kwargs, grads))


# conv2d: strides, SAME (odd pixel at the end) / VALID / explicit, NHWC / NCHW, dilations, groups.
case("conv2d", [(2, 7, 6, 3), (3, 3, 3, 4)], strides=1, padding="SAME")
case("conv2d", [(2, 7, 6, 3), (3, 2, 3, 4)], strides=[1, 2, 2, 1], padding="SAME")
case("conv2d", [(2, 8, 7, 3), (3, 3, 3, 5)], strides=[2, 3], padding="VALID")
case("conv2d", [(1, 6, 6, 2), (2, 3, 2, 3)], strides=1, padding=[[0, 0], [1, 2], [0, 1], [0, 0]])
case("conv2d", [(2, 9, 8, 3), (3, 3, 3, 2)], strides=1, padding="SAME", dilations=2, grads=False)
case("conv2d", [(2, 9, 8, 3), (2, 3, 3, 2)], strides=1, padding="VALID", dilations=[1, 2], grads=False)
case("conv2d", [(2, 6, 6, 4), (3, 3, 2, 6)], strides=1, padding="SAME", grads=False)  # two groups: no CPU gradient
# NCHW has no CPU kernel in TF: computed as NHWC and transposed below.
case("conv2d", [(2, 3, 7, 6), (3, 3, 3, 4)], strides=[1, 1, 2, 1], padding="SAME", data_format="NCHW")
case("conv1d", [(2, 9, 3), (3, 3, 4)], stride=2, padding="SAME")
case("conv1d", [(2, 9, 3), (2, 3, 2)], stride=1, padding="VALID")
case("conv3d", [(1, 5, 4, 6, 2), (2, 3, 2, 2, 3)], strides=[1, 1, 2, 1, 1], padding="SAME")
case("conv3d", [(1, 5, 4, 6, 2), (3, 2, 3, 2, 2)], strides=[1, 2, 1, 2, 1], padding="VALID")
case("depthwise_conv2d", [(2, 6, 7, 3), (3, 3, 3, 2)], strides=[1, 1, 1, 1], padding="SAME")
case("depthwise_conv2d", [(2, 7, 7, 2), (3, 2, 2, 3)], strides=[1, 2, 2, 1], padding="VALID")
case("separable_conv2d", [(2, 6, 6, 3), (3, 3, 3, 2), (1, 1, 6, 4)], strides=[1, 1, 1, 1], padding="SAME")
case("conv2d_transpose", [(2, 4, 3, 4), (3, 3, 2, 4)], output_shape=[2, 7, 6, 2], strides=2, padding="SAME")
case("conv2d_transpose", [(2, 3, 3, 4), (3, 2, 2, 4)], output_shape=[2, 7, 6, 2], strides=[2, 2], padding="VALID")
case("conv2d_transpose", [(1, 5, 5, 3), (3, 3, 2, 3)], output_shape=[1, 5, 5, 2], strides=1, padding="SAME")
# pooling
case("max_pool2d", [(2, 6, 7, 3)], ksize=2, strides=2, padding="VALID")
case("max_pool2d", [(2, 7, 7, 3)], ksize=3, strides=2, padding="SAME")
case("max_pool2d", [(2, 7, 7, 3)], ksize=[1, 3, 2, 1], strides=[1, 1, 2, 1], padding="SAME")
case("avg_pool2d", [(2, 6, 7, 3)], ksize=2, strides=2, padding="VALID")
case("avg_pool2d", [(2, 7, 7, 3)], ksize=3, strides=2, padding="SAME")
case("avg_pool2d", [(1, 5, 6, 2)], ksize=[2, 3], strides=[1, 2], padding="SAME")
case("max_pool", [(2, 9, 3)], ksize=3, strides=2, padding="SAME")
case("avg_pool", [(2, 9, 3)], ksize=2, strides=1, padding="SAME")
case("max_pool", [(1, 5, 4, 6, 2)], ksize=2, strides=2, padding="SAME", data_format="NDHWC")
case("avg_pool", [(1, 5, 4, 6, 2)], ksize=[2, 2, 3], strides=[1, 2, 2], padding="SAME", data_format="NDHWC")
case("max_pool1d", [(2, 8, 3)], ksize=2, strides=2, padding="VALID")
case("avg_pool3d", [(1, 4, 5, 3, 2)], ksize=2, strides=1, padding="VALID")
# fused batch norm
case("fused_batch_norm", [(4, 3, 3, 5), (5,), (5,)], is_training=True, epsilon=0.001)
case("fused_batch_norm", [(4, 3, 3, 5), (5,), (5,), (5,), (5,)], is_training=False, epsilon=0.01)


def run(op, args, kwargs):
    if op == "fused_batch_norm":
        x, scale, offset, *mv = args
        mean, var = mv if mv else (None, None)
        return tf.compat.v1.nn.fused_batch_norm(x, scale, offset, mean=mean, variance=var, **kwargs)
    if kwargs.get("data_format") == "NCHW" and op == "conv2d":
        kw = dict(kwargs, data_format="NHWC", strides=[1, 1, 2, 1] if kwargs["strides"] == [1, 1, 2, 1] else 1)
        kw["strides"] = [1, kwargs["strides"][2], kwargs["strides"][3], 1]
        y = tf.nn.conv2d(tf.transpose(args[0], [0, 2, 3, 1]), args[1], **kw)
        return tf.transpose(y, [0, 3, 1, 2])
    return getattr(tf.nn, op)(*args, **kwargs)


arrays = {}
specs = []
for i, (op, shapes, kwargs, grads) in enumerate(CASES):
    # TF's 3-D pooling and fused batch norm kernels take float32 only.
    dtype = np.float32 if ("pool" in op and len(shapes[0]) == 5) or "batch_norm" in op else np.float64
    ins = [rng.standard_normal(s).astype(dtype) for s in shapes]
    if op == "fused_batch_norm" and len(ins) == 5:
        ins[4] = np.abs(ins[4]) + 0.5  # a variance
    ts = [tf.constant(a) for a in ins]
    with tf.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        out = run(op, ts, kwargs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        cts = [rng.standard_normal(o.shape).astype(dtype) for o in outs]
        loss = tf.add_n([tf.reduce_sum(c * o) for c, o in zip(cts, outs)])
    for j, a in enumerate(ins):
        arrays[f"{i}/in{j}"] = a
    for j, (o, c) in enumerate(zip(outs, cts)):
        arrays[f"{i}/out{j}"] = o.numpy()
        arrays[f"{i}/ct{j}"] = c
    if grads:
        for j, g in enumerate(tape.gradient(loss, ts)):
            if g is not None:  # TF gives none to inference batch norm's mean and variance
                arrays[f"{i}/grad{j}"] = g.numpy()
    specs.append(
        {
            "op": op,
            "kwargs": kwargs,
            "inputs": len(ins),
            "outputs": len(outs),
            "grads": grads,
            "dtype": np.dtype(dtype).name,
        }
    )

arrays["cases"] = np.array(json.dumps(specs))
arrays["tf_version"] = np.array(tf.__version__)
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conv_ops_tf.npz")
np.savez_compressed(path, **arrays)
print(f"wrote {len(specs)} cases to {path} (TF {tf.__version__})")
