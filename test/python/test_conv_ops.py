"""xtpu.nn's convolution, pooling and batch-norm ops against TensorFlow and JAX.

* TF 2.21's values and gradients (``test/data/conv_ops_tf.npz``, written by
  ``test/data/make_conv_ops_tf.py``): strides, SAME / VALID / explicit
  padding, dilations, groups, NHWC / NCHW, 1-3 D; each case eagerly (values,
  and gradients on an ``xtpu.GradientTape``) and compiled with 1 and 2
  replicas (values and ``xtpu.gradients``).
* JAX's ``lax.conv_general_dilated`` / ``reduce_window`` for the hlo ops and
  for the gradients TF's CPU kernels lack (dilated and grouped convolutions).
* The cross-replica batch norm against the batch norm of the whole batch.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import xla_reference  # noqa: E402, F401  (before jax: 8 CPU devices for the tests that run XLA after this file)

import xtpu  # noqa: E402
from xtpu.dialects.hlo_window import ConvDimensionNumbers, ConvolutionOp, ReduceWindowOp  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "conv_ops_tf.npz")

with np.load(DATA) as _z:
    REF = {k: _z[k] for k in _z.files}
CASES = json.loads(str(REF["cases"]))


def _case_id(i):
    c = CASES[i]
    return f"{i}-{c['op']}-" + "-".join(f"{k}={v}" for k, v in sorted(c["kwargs"].items()) if k != "output_shape")


def _tol(c):
    return (2e-5, 2e-5) if c["dtype"] == "float32" else (1e-9, 1e-9)


def _op(c):
    return getattr(xtpu.nn, c["op"])


def _outputs(c, args):
    out = _op(c)(*args, **c["kwargs"])
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _inputs(i):
    c = CASES[i]
    return [REF[f"{i}/in{j}"] for j in range(c["inputs"])], [REF[f"{i}/ct{j}"] for j in range(c["outputs"])]


def _loss(outs, cts):
    total = None
    for o, ct in zip(outs, cts):
        term = xtpu.math.reduce_sum(xtpu.math.multiply(o, ct))
        total = term if total is None else xtpu.math.add(total, term)
    return total


def _check(i, outs, grads=None, scale=1.0):
    c = CASES[i]
    rtol, atol = _tol(c)
    for j, o in enumerate(outs):
        np.testing.assert_allclose(np.asarray(o), REF[f"{i}/out{j}"] * scale, rtol=rtol, atol=atol)
    if grads is not None and c["grads"]:
        for j, g in enumerate(grads):
            key = f"{i}/grad{j}"
            if key in REF:
                np.testing.assert_allclose(np.asarray(g), REF[key], rtol=rtol, atol=atol)


@pytest.mark.parametrize("i", range(len(CASES)), ids=_case_id)
def test_eager_values_and_gradients_match_tensorflow(i):
    c = CASES[i]
    ins, cts = _inputs(i)
    xs = [xtpu.constant(a) for a in ins]
    with xtpu.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        outs = _outputs(c, xs)
        loss = _loss(outs, cts)
    grads = tape.gradient(loss, xs) if c["grads"] else None
    _check(i, outs, grads)


@pytest.mark.parametrize("i", range(len(CASES)), ids=_case_id)
def test_compiled_over_1_and_2_replicas_match_tensorflow(i):
    """Replica 0 gets TF's inputs; replica 1 the same with the first input
    scaled by -2 (conv, pooling of a negated input differ: checked against
    xtpu's own eager run)."""
    c = CASES[i]
    ins, cts = _inputs(i)

    def step(*args):
        n = len(ins)
        xs, ct = list(args[:n]), list(args[n:])
        outs = _outputs(c, xs)
        grads = xtpu.gradients(_loss(outs, ct), xs) if c["grads"] else []
        return [*outs, *[g for g in grads if g is not None]]

    (one,) = xtpu.replicate(step, [[*ins, *cts]])
    nout = c["outputs"]
    _check(i, one[:nout], one[nout:] if c["grads"] else None)
    other = [ins[0] * -2.0, *ins[1:]]
    two = xtpu.replicate(step, [[*ins, *cts], [*other, *cts]])
    for a, b in zip(two[0], one):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    eager = _outputs(c, [xtpu.constant(a) for a in other])
    rtol, atol = _tol(c)
    for a, b in zip(two[1][:nout], eager):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# --------------------------------------------------------------------------
# hlo level, against JAX (also the gradients TF's CPU kernels lack)
# --------------------------------------------------------------------------

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
lax = jax.lax

NHWC = "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]"
NCHW = "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]"
CONV_CASES = [
    ((2, 5, 6, 3), (3, 3, 3, 4), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), NHWC, 1, 1),
    ((2, 7, 6, 3), (3, 2, 3, 4), (2, 3), ((1, 0), (2, -1)), (1, 1), (1, 1), NHWC, 1, 1),
    ((2, 7, 6, 3), (3, 2, 3, 4), (1, 2), ((1, 2), (0, 1)), (2, 1), (1, 2), NHWC, 1, 1),
    ((2, 4, 7, 6), (6, 2, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (2, 1), NCHW, 2, 1),
    ((4, 3, 7, 6), (6, 3, 3, 3), (1, 2), ((1, 1), (1, 1)), (1, 1), (1, 1), NCHW, 1, 2),
    ((2, 5, 6, 4), (3, 3, 1, 8), (2, 2), ((1, 1), (1, 1)), (1, 1), (1, 1), NHWC, 4, 1),
    ((2, 9, 3), (3, 3, 5), (2,), ((1, 1),), (1,), (2,), "[b, 0, f]x[0, i, o]->[b, 0, f]", 1, 1),
    (
        (1, 4, 5, 6, 2),
        (2, 2, 3, 2, 3),
        (1, 2, 1),
        ((0, 1), (1, 0), (1, 1)),
        (1, 1, 1),
        (1, 1, 2),
        "[b, 0, 1, 2, f]x[0, 1, 2, i, o]->[b, 0, 1, 2, f]",
        1,
        1,
    ),
    (
        (2, 3, 3, 2),
        (2, 4, 2, 2),
        (1, 1),
        ((0, 0), (0, 0)),
        (1, 1),
        (1, 1),
        "[f, 0, b, 1]x[1, o, 0, i]->[0, f, 1, b]",
        1,
        1,
    ),
]


def conv_case_params(case) -> dict:
    """hlo.convolution's params of a CONV_CASES entry."""
    _, _, strides, pad, ld, rd, dn_text, fgc, bgc = case
    return dict(
        dimension_numbers=ConvDimensionNumbers.from_text(dn_text),
        window_strides=strides,
        padding=pad,
        lhs_dilation=ld,
        rhs_dilation=rd,
        feature_group_count=fgc,
        batch_group_count=bgc,
    )


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}-{c[6][:8]}-g{c[7]}-b{c[8]}")
def test_convolution_and_its_gradients_match_jax(case):
    xs, ws, strides, pad, ld, rd, dn_text, fgc, bgc = case
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    params = conv_case_params(case)
    dn = params["dimension_numbers"]
    jdn = lax.ConvDimensionNumbers(dn.lhs, dn.rhs, dn.out)

    def f(a, b):
        return lax.conv_general_dilated(a, b, strides, pad, ld, rd, jdn, fgc, bgc)

    ref, vjp = jax.vjp(f, x, w)
    (got,) = ConvolutionOp.eager([x, w], **params)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
    ct = rng.standard_normal(ref.shape)
    gx, gw = ConvolutionOp.vjp([ct], [x, w], [got], **params)
    jx, jw = vjp(ct)
    np.testing.assert_allclose(np.asarray(gx), jx, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(np.asarray(gw), jw, rtol=1e-9, atol=1e-9)


RW_CASES = [
    ((2, 6, 7, 3), "max", (1, 2, 2, 1), (1, 2, 2, 1), (1,) * 4, (1,) * 4, ((0, 0), (0, 0), (0, 1), (0, 0))),
    ((2, 6, 7, 3), "max", (1, 3, 3, 1), (1, 2, 1, 1), (1,) * 4, (1,) * 4, ((0, 0), (1, 1), (1, 1), (0, 0))),
    ((2, 6, 7, 3), "add", (1, 3, 3, 1), (1, 2, 1, 1), (1, 2, 1, 1), (1, 1, 2, 1), ((0, 0), (1, 1), (1, -1), (0, 0))),
    ((5, 7), "min", (2, 3), (2, 1), (1, 1), (1, 1), ((1, 0), (0, 2))),
    ((6, 5), "max", (2, 2), (1, 2), (2, 1), (1, 2), ((0, 0), (1, 1))),
]


@pytest.mark.parametrize("case", RW_CASES, ids=lambda c: f"{c[1]}-{c[0]}-{c[2]}")
def test_reduce_window_and_its_gradient_match_jax(case):
    xs, kind, win, st, bd, wd, pad = case
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs)
    init = {"add": 0.0, "max": -np.inf, "min": np.inf}[kind]
    comp = {"add": lax.add, "max": lax.max, "min": lax.min}[kind]
    params = dict(
        computation=kind, window_dimensions=win, window_strides=st, base_dilations=bd, window_dilations=wd, padding=pad
    )
    ref, vjp = jax.vjp(lambda a: lax.reduce_window(a, init, comp, win, st, pad, bd, wd), x)
    (got,) = ReduceWindowOp.eager([x, np.float64(init)], **params)
    np.testing.assert_array_equal(got, ref)
    ct = rng.standard_normal(ref.shape)
    if kind != "add" and any(v != 1 for v in bd + wd):
        with pytest.raises(NotImplementedError, match="dilations"):
            ReduceWindowOp.vjp([ct], [x, np.float64(init)], [got], **params)
        return
    gx, _ = ReduceWindowOp.vjp([ct], [x, np.float64(init)], [got], **params)
    np.testing.assert_allclose(np.asarray(gx), vjp(ct)[0], rtol=1e-12, atol=1e-12)


def test_max_pool_gradient_goes_to_the_first_maximum():
    """Ties: TF's MaxPoolGrad (select GE) gives a window's cotangent to its
    first maximum in row-major order."""
    x = np.zeros((1, 2, 2, 1))
    t = xtpu.constant(x)
    with xtpu.GradientTape() as tape:
        tape.watch(t)
        y = xtpu.nn.max_pool2d(t, 2, 2, "VALID")
    g = tape.gradient(y, t)
    np.testing.assert_array_equal(np.asarray(g)[0, :, :, 0], [[1.0, 0.0], [0.0, 0.0]])


# --------------------------------------------------------------------------
# Cross-replica batch norm, errors
# --------------------------------------------------------------------------


def _batch_norm(x, scale, offset, eps):
    m = x.mean(axis=(0, 1, 2))
    v = x.var(axis=(0, 1, 2))
    return (x - m) / np.sqrt(v + eps) * scale + offset, m, v


def test_sync_batch_normalization_uses_the_global_batch():
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((2, 3, 3, 4)) for _ in range(4)]
    scale, offset = rng.uniform(0.5, 1.5, 4), rng.standard_normal(4)

    def step(x):
        return list(xtpu.nn.sync_batch_normalization(x, scale, offset, 1e-3))

    out = xtpu.replicate(step, [[x] for x in xs])
    want_y, want_m, want_v = _batch_norm(np.concatenate(xs), scale, offset, 1e-3)
    for r in range(4):
        np.testing.assert_allclose(out[r][0], want_y[2 * r : 2 * r + 2], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(out[r][1], want_m, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(out[r][2], want_v, rtol=1e-10, atol=1e-12)

    def grouped(x):
        return list(xtpu.nn.sync_batch_normalization(x, scale, offset, 1e-3, group_assignment=[[0, 2], [1, 3]]))

    out = xtpu.replicate(grouped, [[x] for x in xs])
    for group in ([0, 2], [1, 3]):
        want_y, want_m, _ = _batch_norm(np.concatenate([xs[r] for r in group]), scale, offset, 1e-3)
        for k, r in enumerate(group):
            np.testing.assert_allclose(out[r][0], want_y[2 * k : 2 * k + 2], rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(out[r][1], want_m, rtol=1e-10, atol=1e-12)


def test_sync_batch_normalization_gradient_is_that_of_the_global_batch_norm():
    """The gradient with respect to each replica's input equals the global
    batch norm's gradient on its slice (the moments' gradients cross the
    replicas through cross_replica_sum's rule)."""
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((2, 2, 2, 3)) for _ in range(2)]
    cts = [rng.standard_normal((2, 2, 2, 3)) for _ in range(2)]

    def step(x, ct):
        y, _, _ = xtpu.nn.sync_batch_normalization(x, None, None, 1e-3)
        return xtpu.gradients(xtpu.math.reduce_sum(xtpu.math.multiply(y, ct)), [x])[0]

    got = xtpu.replicate(step, [[x, c] for x, c in zip(xs, cts)])
    _, vjp = jax.vjp(lambda a: (a - a.mean((0, 1, 2))) / jax.numpy.sqrt(a.var((0, 1, 2)) + 1e-3), np.concatenate(xs))
    (want,) = vjp(np.concatenate(cts))
    np.testing.assert_allclose(np.concatenate([np.asarray(g[0]) for g in got]), want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: xtpu.nn.conv2d(np.zeros((1, 4, 4, 3)), np.zeros((3, 3, 2, 4)), 1, "SAME"), ValueError, "multiple"),
        (lambda: xtpu.nn.conv2d(np.zeros((1, 4, 4, 3)), np.zeros((3, 3, 3, 4)), 1, "FULL"), ValueError, "padding"),
        (
            lambda: xtpu.nn.conv2d(np.zeros((1, 4, 4, 3)), np.zeros((3, 3, 3, 4)), [2, 1, 1, 1], "SAME"),
            ValueError,
            "batch and channel",
        ),
        (
            lambda: xtpu.nn.conv2d(np.zeros((1, 4, 4, 3)), np.zeros((3, 3, 3, 4)), 1, [[0, 0], [1, 1], [1, 1]]),
            ValueError,
            "pairs",
        ),
        (
            lambda: xtpu.nn.conv2d(np.zeros((1, 4, 4, 3)), np.zeros((3, 3, 3, 4)), 1, "SAME", "NWHC"),
            ValueError,
            "data_format",
        ),
        (
            lambda: xtpu.nn.conv2d(np.zeros((1, 4, 4, 3), np.int32), np.zeros((3, 3, 3, 4), np.int32), 1, "SAME"),
            TypeError,
            "float",
        ),
        (
            lambda: xtpu.nn.conv2d(np.zeros((1, 4, 4, 3)), np.zeros((3, 3, 3, 4)), 2, "SAME", dilations=2),
            ValueError,
            "strides",
        ),
        (lambda: xtpu.nn.max_pool2d(np.zeros((1, 4, 4)), 2, 2, "SAME"), ValueError, "rank 4"),
        (lambda: xtpu.nn.avg_pool2d(np.zeros((1, 4, 4, 1)), [2, 2, 2], 2, "SAME"), ValueError, "length"),
        (
            lambda: xtpu.nn.conv2d_transpose(np.zeros((1, 2, 2, 4)), np.zeros((3, 3, 2, 4)), [1, 5, 5, 2], 2, "SAME"),
            ValueError,
            "output_shape",
        ),
        (
            lambda: xtpu.nn.fused_batch_norm(np.zeros((2, 2, 2, 3)), np.ones(3), np.zeros(3), is_training=False),
            ValueError,
            "mean and variance",
        ),
    ],
)
def test_errors_name_the_op_and_the_values(call, error, match):
    with pytest.raises(error, match=match):
        call()


# --------------------------------------------------------------------------
# bfloat16 / float16: TPU accumulation (float32, rounded once)
# --------------------------------------------------------------------------


def _integer_valued(rng, shape, dtype, top=8):
    """Small integers: every product and partial sum is exact in float32."""
    return rng.integers(-top, top + 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_convolution_accumulates_in_float32_and_rounds_once(dtype):
    """Sums of 576 products of integers up to 8 (16 for float16's 11 bits):
    exact in float32, not in bfloat16 / float16, so
    a kernel accumulating in the operands' type (rounding each partial sum)
    gives other values; xtpu's equals JAX's float64 result rounded once, bit
    for bit, for the result and both gradients, eagerly and compiled."""
    from xtpu.dialects.tensor_spec import numpy_dtype

    dt = numpy_dtype(dtype)
    rng = np.random.default_rng(11)
    top = 16 if dtype == "float16" else 8
    x = _integer_valued(rng, (2, 6, 7, 64), dt, top)
    w = _integer_valued(rng, (3, 3, 64, 8), dt, top)
    ct = _integer_valued(rng, (2, 4, 5, 8), dt)
    x64, w64, ct64 = (a.astype(np.float64) for a in (x, w, ct))
    dn = ("NHWC", "HWIO", "NHWC")
    want, vjp = jax.vjp(lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "VALID", dimension_numbers=dn), x64, w64)
    want_gx, want_gw = vjp(ct64)
    assert np.abs(np.asarray(want)).max() < 2**24  # exact in float32

    def once(v):
        return np.asarray(v).astype(np.float32).astype(dt)

    # A kernel that rounds each partial sum (over the 9 taps) to the low precision differs.
    stepwise = np.zeros(want.shape, dt)
    for i in range(3):
        for j in range(3):
            tap = np.einsum("nhwc,co->nhwo", x64[:, i : i + 4, j : j + 5, :], w64[i, j])
            stepwise = (stepwise.astype(np.float32) + tap.astype(np.float32)).astype(dt)
    assert not np.array_equal(stepwise, once(want))

    def step(a, b, c):
        with xtpu.GradientTape() as tape:
            tape.watch([a, b])
            y = xtpu.nn.conv2d(a, b, 1, "VALID")
            loss = xtpu.reduce_sum(y * c)
        ga, gb = tape.gradient(loss, [a, b])
        return y, ga, gb

    eager = step(xtpu.constant(x), xtpu.constant(w), xtpu.constant(ct))
    compiled = xtpu.replicate(step, [[x, w, ct]])[0]
    for got in (eager, compiled):
        for g, ref, what in zip(got, (want, want_gx, want_gw), ("result", "input gradient", "kernel gradient")):
            g = np.asarray(g)
            assert g.dtype == dt, what
            np.testing.assert_array_equal(g.view(np.uint16), once(ref).view(np.uint16), err_msg=what)


def test_bfloat16_convolution_with_a_float32_result_is_the_exact_sum():
    """``preferred_element_type=float32`` (TF's / JAX's mixed precision): the
    float32 sum, exact here, with no rounding to bfloat16."""
    from ml_dtypes import bfloat16

    rng = np.random.default_rng(12)
    x = _integer_valued(rng, (1, 5, 5, 32), bfloat16)
    w = _integer_valued(rng, (3, 3, 32, 4), bfloat16)
    params = dict(dimension_numbers=ConvDimensionNumbers.from_text(NHWC), preferred_element_type="float32")
    (got,) = ConvolutionOp.eager([x, w], **params)
    want = lax.conv_general_dilated(
        x.astype(np.float64), w.astype(np.float64), (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.asarray(want).astype(np.float32))
    with pytest.raises(Exception, match="wider float"):
        ConvolutionOp.eager([x, w], dimension_numbers=params["dimension_numbers"], preferred_element_type="float16")
