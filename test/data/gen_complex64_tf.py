"""Generate TF 2.21's answers for the complex64 tests (issue 28, test_complex64.py).

Run with TensorFlow's Python (not part of the suite):
``/work/tfvenv/bin/python test/data/gen_complex64_tf.py`` writes
``test/data/complex64_tf.npz`` next to this file.  Every array is stored
with its dtype (numpy's file format has complex64).

Cases (TF on CPU, eager):
* ``special``: complex64 values whose parts are NaN (with payload and
  sign), inf, -inf, -0.0, subnormals, the largest float32; ``finite_x`` /
  ``finite_y``: random finite values;
* ``unary_<op>`` / ``binary_<op>``: TF's elementwise ops on them (``add``,
  ``subtract``, ``multiply``, ``divide``, ``negative``, ``exp``, ``log``,
  ``sqrt``, ``square``, ``reciprocal``, ``abs``, ``conj``, ``real``,
  ``imag``, ``sign``, ``tanh``, ``sin``, ``cos``, ``rsqrt``, ``log1p``,
  ``pow``, ``equal``, ``not_equal``);
* ``special_<op>``: the ops that only move or pick parts, on ``special``
  (``negative``, ``conj``, ``real``, ``imag``, ``complex`` of the parts,
  ``cast`` to float32 / int32 / bool, ``cast`` of float32 / int32 / bool to
  complex64, ``equal`` with itself);
* ``sum`` / ``mean`` / ``prod`` over an axis, ``matmul`` (plain and
  ``adjoint_b``), ``einsum``;
* ``refused``: for each op TF refuses on complex64 (``less``, ``maximum``,
  ``floor``, ``argmax``, ``sort``, ``reduce_max``), whether it raised;
* ``grad_<op>``: ``tape.gradient`` of ``reduce_sum(real(f(z)) * w)`` with
  respect to a complex64 ``z`` (TF's convention: the conjugate of the
  derivative times the upstream gradient).
"""

import json
import os

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))


def parts(re, im):
    z = np.empty(np.shape(re), np.complex64)
    z.real = re
    z.imag = im
    return z


def main():
    out = {}
    f32 = np.array(
        [0x7FC00000, 0xFFC00001, 0x7F800000, 0xFF800000, 0x80000000, 0x00000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF]
        + [0x3F800000, 0xC0400000],
        np.uint32,
    ).view(np.float32)
    re = np.repeat(f32, f32.size)
    im = np.tile(f32, f32.size)
    special = parts(re, im)  # every pair of special parts, 121 values
    out["special"] = special
    rng = np.random.RandomState(0)
    fx = parts(rng.randn(24).astype(np.float32) * 2, rng.randn(24).astype(np.float32) * 2)
    fy = parts(rng.randn(24).astype(np.float32) * 2, rng.randn(24).astype(np.float32) * 2)
    out["finite_x"], out["finite_y"] = fx, fy

    x, y = tf.constant(fx), tf.constant(fy)
    unary = {
        "negative": tf.math.negative,
        "exp": tf.math.exp,
        "log": tf.math.log,
        "sqrt": tf.math.sqrt,
        "square": tf.math.square,
        "reciprocal": tf.math.reciprocal,
        "abs": tf.math.abs,
        "conj": tf.math.conj,
        "real": tf.math.real,
        "imag": tf.math.imag,
        "sign": tf.math.sign,
        "tanh": tf.math.tanh,
        "sin": tf.math.sin,
        "cos": tf.math.cos,
        "rsqrt": tf.math.rsqrt,
        "log1p": tf.math.log1p,
    }
    for name, fn in unary.items():
        out[f"unary_{name}"] = fn(x).numpy()
    binary = {
        "add": tf.math.add,
        "subtract": tf.math.subtract,
        "multiply": tf.math.multiply,
        "divide": tf.math.divide,
        "pow": tf.math.pow,
        "equal": tf.math.equal,
        "not_equal": tf.math.not_equal,
    }
    for name, fn in binary.items():
        out[f"binary_{name}"] = fn(x, y).numpy()
    out["binary_equal_self"] = tf.math.equal(x, tf.constant(np.where(np.arange(24) % 2 == 0, fx, fy))).numpy()

    s = tf.constant(special)
    out["special_negative"] = tf.math.negative(s).numpy()
    out["special_conj"] = tf.math.conj(s).numpy()
    out["special_real"] = tf.math.real(s).numpy()
    out["special_imag"] = tf.math.imag(s).numpy()
    out["special_complex"] = tf.complex(tf.constant(re), tf.constant(im)).numpy()
    out["special_add_zero"] = tf.math.add(s, tf.zeros_like(s)).numpy()
    out["special_to_float32"] = tf.cast(s, tf.float32).numpy()
    out["special_to_bool"] = tf.cast(s, tf.bool).numpy()
    finite_special = special[np.isfinite(special.real) & (np.abs(special.real) < 2**31)]
    out["finite_special"] = finite_special
    out["finite_special_to_int32"] = tf.cast(tf.constant(finite_special), tf.int32).numpy()
    out["float32_to_complex64"] = tf.cast(tf.constant(f32), tf.complex64).numpy()
    ints = np.array([0, -1, 7, 2**31 - 1, -(2**31)], np.int32)
    out["int32_in"] = ints
    out["int32_to_complex64"] = tf.cast(tf.constant(ints), tf.complex64).numpy()
    out["bool_to_complex64"] = tf.cast(tf.constant([True, False]), tf.complex64).numpy()

    m = parts(rng.randn(3, 4).astype(np.float32), rng.randn(3, 4).astype(np.float32))
    n = parts(rng.randn(4, 5).astype(np.float32), rng.randn(4, 5).astype(np.float32))
    k = parts(rng.randn(5, 4).astype(np.float32), rng.randn(5, 4).astype(np.float32))
    out["m"], out["n"], out["k"] = m, n, k
    out["sum"] = tf.reduce_sum(m, axis=1).numpy()
    out["mean"] = tf.reduce_mean(m, axis=0).numpy()
    out["prod"] = tf.reduce_prod(m, axis=1).numpy()
    out["matmul"] = tf.linalg.matmul(m, n).numpy()
    out["matmul_adjoint_b"] = tf.linalg.matmul(m, k, adjoint_b=True).numpy()
    out["einsum"] = tf.einsum("ij,jk->ik", m, n).numpy()

    refused = {}
    for name, fn in {
        "less": lambda: tf.math.less(x, y),
        "maximum": lambda: tf.math.maximum(x, y),
        "floor": lambda: tf.math.floor(x),
        "argmax": lambda: tf.math.argmax(x),
        "sort": lambda: tf.sort(x),
        "reduce_max": lambda: tf.reduce_max(x),
    }.items():
        try:
            fn()
            refused[name] = False
        except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError, TypeError, ValueError):
            refused[name] = True
    out["refused"] = np.array(json.dumps(refused))

    w = parts(rng.randn(24).astype(np.float32), rng.randn(24).astype(np.float32))
    out["grad_w"] = w
    grads = {
        "multiply": lambda z: z * y,
        "divide": lambda z: z / y,
        "exp": tf.math.exp,
        "log": tf.math.log,
        "sqrt": tf.math.sqrt,
        "square": tf.math.square,
        "conj": tf.math.conj,
        "reciprocal": tf.math.reciprocal,
    }
    z = tf.Variable(fx)
    for name, fn in grads.items():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.math.real(fn(z) * w))
        out[f"grad_{name}"] = tape.gradient(loss, z).numpy()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.math.abs(z) * tf.math.real(w))
    out["grad_abs"] = tape.gradient(loss, z).numpy()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.math.imag(z) * tf.math.real(w))
    out["grad_imag"] = tape.gradient(loss, z).numpy()
    a = tf.Variable(fx.real.copy())
    b = tf.Variable(fx.imag.copy())
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.math.real(tf.complex(a, b) * w))
    ga, gb = tape.gradient(loss, [a, b])
    out["grad_complex_re"], out["grad_complex_im"] = ga.numpy(), gb.numpy()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.math.real(tf.cast(a, tf.complex64) * w))
    out["grad_cast_real_to_complex"] = tape.gradient(loss, a).numpy()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(z, tf.float32) * tf.math.real(w))
    out["grad_cast_complex_to_real"] = tape.gradient(loss, z).numpy()
    mv = tf.Variable(m)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.math.real(tf.linalg.matmul(mv, n) * tf.constant(m @ n)))
    out["grad_matmul"] = tape.gradient(loss, mv).numpy()

    info = {"tf_version": tf.__version__, "refused": refused}
    np.savez(os.path.join(HERE, "complex64_tf.npz"), **out)
    print(info)


if __name__ == "__main__":
    main()
