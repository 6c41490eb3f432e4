"""Generate TF 2.21's answers for issue 28's bfloat16 tests (test_dtypes_tf.py).

Run with TensorFlow's Python (not part of the suite):
``/work/tfvenv/bin/python test/data/gen_bf16_tf.py`` writes
``test/data/bf16_tf.npz`` next to this file.  bfloat16 arrays are stored as
their uint16 bit patterns (numpy's file format has no bfloat16).

Cases (TF on CPU, eager):
* ``cast_*``: ``tf.cast`` of float32 values to bfloat16 (ties, overflow,
  subnormals, NaN, signed zeros) and float16;
* ``matmul_*``: ``tf.linalg.matmul`` of bfloat16 operands (exact-sum and
  random operands) and of the float32 widening of the same operands;
* ``sum_ones``: ``tf.reduce_sum`` of 2048 bfloat16 ones;
* ``policy``: ``tf.keras.mixed_precision.Policy('mixed_bfloat16')``'s
  compute and variable dtypes, and the dtype of the gradient of a float32
  variable read as bfloat16 inside a Keras layer (TF's AutoCastVariable).
"""

import json
import os

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))


def bits(t):
    return t.numpy().view(np.uint16)


def main():
    out = {}
    one = 0x3F800000
    specials = np.array(
        [
            one | 0x8000,
            one | 0x18000,
            one | 0x8001,
            one | 0x7FFF,
            0x7F7FFFFF,
            0x00008000,
            0x00018000,
            0x80008000,
            0x7F800000,
            0xFF800000,
            0x7FC00000,
            0x80000000,
        ],
        np.uint32,
    ).view(np.float32)
    rng = np.random.RandomState(0)
    values = np.concatenate(
        [specials, (rng.randn(500) * 1e3).astype(np.float32), (rng.randn(500) * 1e-39).astype(np.float32)]
    )
    out["cast_in"] = values
    out["cast_bf16"] = bits(tf.cast(tf.constant(values), tf.bfloat16))
    out["cast_f16"] = tf.cast(tf.constant(values), tf.float16).numpy().view(np.uint16)

    exact_a = (rng.randint(-8, 9, size=(5, 64)) * 2.0 ** rng.randint(-3, 3, size=(5, 64))).astype(np.float32)
    exact_b = (rng.randint(-8, 9, size=(64, 7)) * 2.0 ** rng.randint(-3, 3, size=(64, 7))).astype(np.float32)
    rand_a = rng.randn(16, 96).astype(np.float32)
    rand_b = rng.randn(96, 24).astype(np.float32)
    for name, a, b in (("exact", exact_a, exact_b), ("random", rand_a, rand_b)):
        ta, tb = tf.cast(a, tf.bfloat16), tf.cast(b, tf.bfloat16)
        out[f"matmul_{name}_a"] = bits(ta)
        out[f"matmul_{name}_b"] = bits(tb)
        out[f"matmul_{name}_bf16"] = bits(tf.linalg.matmul(ta, tb))
        out[f"matmul_{name}_f32"] = tf.linalg.matmul(tf.cast(ta, tf.float32), tf.cast(tb, tf.float32)).numpy()

    out["sum_ones"] = bits(tf.reduce_sum(tf.ones([2048], tf.bfloat16)))

    policy = tf.keras.mixed_precision.Policy("mixed_bfloat16")
    layer = tf.keras.layers.Dense(3, dtype=policy)
    x = tf.ones([2, 4])
    with tf.GradientTape() as tape:
        y = layer(x)
        loss = tf.reduce_sum(tf.cast(y, tf.float32))
    grads = tape.gradient(loss, layer.trainable_variables)
    info = {
        "compute_dtype": policy.compute_dtype,
        "variable_dtype": policy.variable_dtype,
        "output_dtype": str(y.dtype.name),
        "kernel_dtype": str(layer.kernel.dtype),
        "gradient_dtypes": [str(g.dtype.name) for g in grads],
        "tf_version": tf.__version__,
    }
    out["policy"] = np.array(json.dumps(info))
    np.savez(os.path.join(HERE, "bf16_tf.npz"), **out)
    print(info)


if __name__ == "__main__":
    main()
