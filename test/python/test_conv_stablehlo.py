"""The windowed ops and StableHLO: ``hlo.convolution``, ``hlo.reduce_window``
and ``hlo.select_and_scatter`` exported (MLIR's parser and verifier accept
them; XLA's CPU client runs them with 2 replicas equal to xtpu's runtime) and
imported (JAX's convolutions and pooling through ``from_jax``, eagerly and in
``xtpu.replicate`` with 2 replicas, values and gradients equal to JAX's).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import xla_reference as X  # noqa: E402  (before jax: it asks for 8 CPU devices)

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

from test_conv_ops import CONV_CASES, RW_CASES, conv_case_params  # noqa: E402
from test_from_jax import check_from_jax  # noqa: E402

import xtpu  # noqa: E402
from xtpu.core.tracing import bind  # noqa: E402
from xtpu.dialects.hlo_window import ConvolutionOp, ReduceWindowOp  # noqa: E402
from xtpu.experimental import StableHLOImportError, call_stablehlo, from_jax  # noqa: E402

# ---- export: XLA runs xtpu's windowed ops equal to xtpu ----------------------------


def _replica_inputs(shapes, dtype, replicas=2, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(replicas)]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}-{c[6][:8]}-g{c[7]}-b{c[8]}")
def test_convolution_and_its_gradients_run_on_xla_equal_to_xtpu(case):
    """Each convolution of test_conv_ops (strides, padding with negative
    cuts, lhs / rhs dilation, feature and batch groups, 1-3 spatial
    dimensions, permuted dimension numbers) and its two gradient
    convolutions, float64 over 2 replicas."""
    xs, ws = case[:2]
    params = conv_case_params(case)

    def step(x, w):
        with xtpu.GradientTape() as tape:
            tape.watch([x, w])
            (y,) = bind(ConvolutionOp, [x, w], **params)
            loss = xtpu.reduce_sum(y * y)
        gx, gw = tape.gradient(loss, [x, w])
        return y, gx, gw

    inputs = _replica_inputs([xs, ws], np.float64)
    compiled = xtpu.lower(step, inputs).compile()
    text = compiled.as_text(dialect="stablehlo")
    assert text.count('"stablehlo.convolution"') == 3
    X.check_against_xtpu(compiled, inputs, text)


@pytest.mark.parametrize("case", RW_CASES, ids=lambda c: f"{c[1]}-{c[0]}-{c[2]}")
def test_reduce_window_and_its_gradient_run_on_xla_equal_to_xtpu(case):
    """add / max / min windows with strides, dilations and padding; the
    gradient of max / min (without dilations) is a select_and_scatter."""
    xs, kind, win, st, bd, wd, pad = case
    params = dict(
        computation=kind, window_dimensions=win, window_strides=st, base_dilations=bd, window_dilations=wd, padding=pad
    )
    with_grad = kind == "add" or all(v == 1 for v in bd + wd)

    def step(x):
        init = xtpu.constant({"add": 0.0, "max": -np.inf, "min": np.inf}[kind], x.dtype)
        with xtpu.GradientTape() as tape:
            tape.watch(x)
            (y,) = bind(ReduceWindowOp, [x, init], **params)
            loss = xtpu.reduce_sum(y * y)
        return (y, tape.gradient(loss, x)) if with_grad else (y,)

    inputs = _replica_inputs([xs], np.float64, seed=3)
    compiled = xtpu.lower(step, inputs).compile()
    text = compiled.as_text(dialect="stablehlo")
    if with_grad and kind != "add":
        assert '"stablehlo.select_and_scatter"' in text
    X.check_against_xtpu(compiled, inputs, text)


def _cnn_step(x, w1, w2, summed=True):
    """xtpu.nn's convolutions and pooling, their gradients (summed over the replicas)."""
    with xtpu.GradientTape() as tape:
        tape.watch([x, w1, w2])
        h = xtpu.nn.relu(xtpu.nn.conv2d(x, w1, strides=1, padding="SAME"))
        p = xtpu.nn.max_pool2d(h, 2, 2, "SAME")
        q = xtpu.nn.avg_pool2d(h, 3, 2, "SAME")
        d = xtpu.nn.depthwise_conv2d(p, w2, [1, 1, 1, 1], "VALID")
        t = xtpu.nn.conv2d_transpose(q, w1, [2, 6, 7, 3], 2, "SAME")
        loss = xtpu.reduce_sum(d * d) + xtpu.reduce_sum(t) + xtpu.reduce_mean(q)
    grads = tape.gradient(loss, [x, w1, w2])
    return [loss, d, t] + [xtpu.cross_replica_sum(g) if summed else g for g in grads]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cnn_layers_and_gradients_run_on_xla_equal_to_xtpu(dtype):
    inputs = _replica_inputs([(2, 6, 7, 3), (3, 3, 3, 5), (2, 2, 5, 2)], dtype, seed=5)
    compiled = xtpu.lower(_cnn_step, inputs).compile()
    text = compiled.as_text(dialect="stablehlo")
    for name in ("convolution", "reduce_window", "select_and_scatter"):
        assert f'"stablehlo.{name}"' in text, name
    X.check_against_xtpu(compiled, inputs, text)


def test_exported_windowed_ops_import_back_and_run_the_same():
    """xtpu -> StableHLO -> xtpu: the imported program (through the tracer,
    eagerly) gives the compiled program's values."""
    inputs = _replica_inputs([(2, 6, 7, 3), (3, 3, 3, 5), (2, 2, 5, 2)], np.float64, replicas=1, seed=6)
    compiled = xtpu.lower(lambda *a: _cnn_step(*a, summed=False), inputs).compile()
    want = compiled(inputs)[0]
    got = call_stablehlo(compiled.as_text(dialect="stablehlo"), *inputs[0])
    for j, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12, err_msg=f"output {j}")


# Written by hand: a reversed window and the raw form of the dimension numbers
# (which MLIR prints when the compact one does not apply), run by XLA and xtpu.
REVERSED_WINDOW = """
func.func @main(%x: tensor<1x4x5x2xf64>, %w: tensor<2x3x2x3xf64>) -> tensor<1x3x3x3xf64> {
  %0 = "stablehlo.convolution"(%x, %w) <{batch_group_count = 1 : i64,
      dimension_numbers = #stablehlo.conv<raw input_batch_dimension = 0, input_feature_dimension = 3,
        input_spatial_dimensions = [1, 2], kernel_input_feature_dimension = 2, kernel_output_feature_dimension = 3,
        kernel_spatial_dimensions = [0, 1], output_batch_dimension = 0, output_feature_dimension = 3,
        output_spatial_dimensions = [1, 2]>,
      feature_group_count = 1 : i64, lhs_dilation = array<i64: 1, 1>, padding = dense<0> : tensor<2x2xi64>,
      rhs_dilation = array<i64: 1, 1>, window_reversal = array<i1: true, false>, window_strides = array<i64: 1, 1>}>
      : (tensor<1x4x5x2xf64>, tensor<2x3x2x3xf64>) -> tensor<1x3x3x3xf64>
  return %0 : tensor<1x3x3x3xf64>
}
"""


def test_a_reversed_window_and_raw_dimension_numbers_import_as_xla_runs_them():
    x, w = _replica_inputs([(1, 4, 5, 2), (2, 3, 2, 3)], np.float64, replicas=1, seed=8)[0]
    (want,) = X.run(REVERSED_WINDOW, [[x, w]])[0]
    got = call_stablehlo(REVERSED_WINDOW, x, w)  # one result: the value itself
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    jdn = lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    plain = lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=jdn)
    assert not np.allclose(want, plain)  # the reversal matters


def test_an_unsupported_window_body_is_refused_naming_the_op():
    """A windowed product (``cumprod``'s lowering on CPU) is not among xtpu's reduce_window kinds."""
    with pytest.raises(StableHLOImportError, match=r"'stablehlo.reduce_window' op .* reduces its windows by mul"):
        from_jax(lambda v: lax.reduce_window(v, jnp.float32(1), lax.mul, (2,), (1,), "VALID"))(np.ones(4, np.float32))


# ---- import: JAX's convolutions and pooling through from_jax -------------------------


def _conv(x, w):
    return lax.conv_general_dilated(
        x, w, (1, 2), ((1, 1), (2, 0)), rhs_dilation=(1, 2), dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def _max_pool(x, w):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), ((0, 0), (0, 1), (0, 1), (0, 0)))


def _avg_pool(x, w):
    return lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 2, 1, 1), "SAME") / 9.0


def _cnn(x, w):
    h = jax.nn.relu(lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))
    p = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    g = lax.conv_general_dilated(
        p, w[:, :, :1, :], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=4
    )
    return jnp.mean(g * g), _avg_pool(h, w)


JAX_WINDOWED = {
    "conv": _conv,
    "max_pool": _max_pool,
    "avg_pool": _avg_pool,
    "cnn": _cnn,
    "cumsum": lambda x, w: jnp.cumsum(x, axis=2),  # a reduce_window add on CPU
}


def _jax_inputs(r):
    rng = np.random.default_rng(20 + r)
    return [rng.standard_normal((2, 6, 7, 4)).astype(np.float32), rng.standard_normal((3, 3, 4, 4)).astype(np.float32)]


@pytest.mark.parametrize("kind", sorted(JAX_WINDOWED))
def test_jax_convolution_and_pooling_through_from_jax_equal_jax(kind):
    check_from_jax(kind, JAX_WINDOWED[kind], [_jax_inputs(r) for r in range(2)])
