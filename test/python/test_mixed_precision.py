"""Mixed precision (issue 28): TF's policy API, autocast variables, loss scaling.

References: TF 2.21's ``tf.keras.mixed_precision`` semantics (policy names
and dtypes, AutoCastVariable reads, float32 gradients and updates) and a
numpy reference of the same step computed with the same roundings.
"""

import ml_dtypes
import numpy as np
import pytest

import xtpu
from xtpu.keras import mixed_precision as mp

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture
def mixed_bfloat16():
    mp.set_global_policy("mixed_bfloat16")
    try:
        yield mp.global_policy()
    finally:
        mp.set_global_policy("float32")


@pytest.mark.parametrize(
    "name, compute, variable",
    [
        ("mixed_bfloat16", "bfloat16", "float32"),
        ("mixed_float16", "float16", "float32"),
        ("float32", "float32", "float32"),
        ("bfloat16", "bfloat16", "bfloat16"),
        ("float64", "float64", "float64"),
    ],
)
def test_policy_dtypes(name, compute, variable):
    p = mp.Policy(name)
    assert (p.name, p.compute_dtype, p.variable_dtype) == (name, compute, variable)
    assert repr(p) == f'<Policy "{name}">'


def test_unknown_policy_is_tf_error():
    with pytest.raises(ValueError, match="Cannot convert value mixed_int8 to a mixed precision Policy"):
        mp.Policy("mixed_int8")


def test_global_policy_default_and_set():
    assert mp.global_policy().name == "float32"
    mp.set_global_policy("mixed_bfloat16")
    try:
        assert mp.global_policy() == mp.Policy("mixed_bfloat16")
    finally:
        mp.set_global_policy(None)
    assert mp.global_policy().name == "float32"


def make_model(strategy):
    rng = np.random.RandomState(0)
    with strategy.scope():
        w = xtpu.Variable(rng.randn(8, 4).astype(np.float32), name="w")
        b = xtpu.Variable(np.zeros(4, np.float32), name="b")
        opt = xtpu.optimizers.SGD(0.1, momentum=0.9)
    return w, b, opt


def step_fn(w, b, opt, compute):
    def step(x, y):
        with xtpu.GradientTape() as tape:
            h = xtpu.cast(x, compute) @ w + b
            loss = xtpu.reduce_sum(xtpu.square(xtpu.cast(h, "float32") - y))
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
        return loss

    return step


def test_autocast_variables_read_as_bfloat16_and_update_in_float32(mixed_bfloat16):
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    w, b, opt = make_model(strategy)
    assert w.dtype == "float32" or np.dtype(w.dtype) == np.float32
    w0, b0 = w.numpy().copy(), b.numpy().copy()
    rng = np.random.RandomState(1)
    xs = [rng.randn(3, 8).astype(np.float32) for _ in range(2)]
    ys = [rng.randn(3, 4).astype(np.float32) for _ in range(2)]
    step = step_fn(w, b, opt, "bfloat16")
    strategy.run(step, args=(xtpu.PerReplica(xs), xtpu.PerReplica(ys)))
    assert w.numpy().dtype == np.float32 and b.numpy().dtype == np.float32
    # numpy reference with the same roundings: bf16 operands, f32
    # accumulation rounded to bf16, bf16 add of the bias, f32 loss; the
    # gradient of h is rounded to bf16 at the cast, contracted in f32.
    wb, bb = w0.astype(BF16), b0.astype(BF16)
    gw = np.zeros_like(w0)
    gb = np.zeros_like(b0)
    for x, y in zip(xs, ys):
        xb = x.astype(BF16)
        h = (xb.astype(np.float32) @ wb.astype(np.float32)).astype(BF16)
        h = (h.astype(np.float32) + bb.astype(np.float32)).astype(BF16)
        dh = (2 * (h.astype(np.float32) - y)).astype(BF16)
        gw += (xb.astype(np.float32).T @ dh.astype(np.float32)).astype(BF16).astype(np.float32)
        gb += dh.astype(np.float32).sum(axis=0).astype(BF16).astype(np.float32)
    # SGD with momentum, first step: v = -lr g; w += v (in float32)
    np.testing.assert_allclose(w.numpy(), w0 - np.float32(0.1) * gw, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), b0 - np.float32(0.1) * gb, rtol=1e-6, atol=1e-6)


def test_lowered_mixed_step_shows_bf16_compute_f32_variables_and_accumulation(mixed_bfloat16):
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    w, b, opt = make_model(strategy)
    step = step_fn(w, b, opt, "bfloat16")

    @xtpu.function
    def train(x, y):
        return strategy.run(step, args=(x, y))

    x = xtpu.PerReplica([np.ones((3, 8), np.float32)] * 2)
    y = xtpu.PerReplica([np.ones((3, 4), np.float32)] * 2)
    text = train.lower(x, y).as_text()
    # float32 variables cross into the computation ...
    assert "tensor<8x4xf32>" in text
    # ... are read as bfloat16 ...
    assert "(tensor<8x4xf32>) -> tensor<8x4xbf16>" in text
    # ... multiplied in bfloat16 with float32 accumulation, rounded once
    assert "(tensor<3x8xbf16>, tensor<8x4xbf16>) -> tensor<3x4xf32>" in text
    assert "(tensor<3x4xf32>) -> tensor<3x4xbf16>" in text
    # the gradient of w is contracted in float32 from bf16 operands, cast
    # back to float32 and summed over the replicas in float32
    assert "(tensor<3x8xbf16>, tensor<3x4xbf16>) -> tensor<8x4xf32>" in text
    assert "tpu.cross_replica_sum" in text and ": tensor<8x4xf32>" in text


def test_variables_outside_a_scope_or_policy_do_not_autocast(mixed_bfloat16):
    v = xtpu.Variable(np.ones(3, np.float32))  # a host variable
    assert v._autocast is None
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=1))
    with strategy.scope():
        n = xtpu.Variable(np.ones(3, np.float32), trainable=False)
        i = xtpu.Variable(np.ones(3, np.int32))
    assert n._autocast is None and i._autocast is None
    mp.set_global_policy("float32")
    with strategy.scope():
        f = xtpu.Variable(np.ones(3, np.float32))
    assert f._autocast is None


def test_loss_scale_optimizer_float16_skips_non_finite_steps():
    mp.set_global_policy("mixed_float16")
    try:
        strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
        with strategy.scope():
            w = xtpu.Variable(np.ones(4, np.float32), name="w")
            opt = mp.LossScaleOptimizer(xtpu.optimizers.SGD(0.5), initial_scale=2.0**10, dynamic_growth_steps=2)

        def step(x):
            with xtpu.GradientTape() as tape:
                loss = xtpu.cast(xtpu.reduce_sum(w * xtpu.cast(x, "float16")), "float32")
                scaled = opt.get_scaled_loss(loss)
            (g,) = opt.get_unscaled_gradients(tape.gradient(scaled, [w]))
            opt.apply_gradients([(g, w)])
            return loss

        x = np.full(4, 0.25, np.float32)
        strategy.run(step, args=(x,))
        # the gradient of the sum over 2 replicas: 2 * 0.25 per element
        np.testing.assert_allclose(w.numpy(), 1 - 0.5 * 0.5)
        assert float(opt.loss_scale.numpy()) == 2.0**10
        strategy.run(step, args=(x,))  # second finite step: the scale doubles
        assert float(opt.loss_scale.numpy()) == 2.0**11
        before = w.numpy().copy()
        strategy.run(step, args=(np.full(4, np.inf, np.float32),))  # inf gradients: skipped, scale halves
        np.testing.assert_array_equal(w.numpy(), before)
        assert float(opt.loss_scale.numpy()) == 2.0**10
    finally:
        mp.set_global_policy("float32")


def test_gather_of_an_autocast_variable_reads_float32_rows(mixed_bfloat16):
    """TF's ``AutoCastVariable.sparse_read``: a gather from an autocast
    variable gathers the float32 rows and casts them to bfloat16 (the IR:
    ``hlo.gather`` on f32, then ``hlo.convert``), so the rows' gradient is
    summed in float32: 64 cotangents of 0.1 (0.10009765625 in bfloat16)
    added on one row give 6.40625 exactly (a bfloat16 sum of them gives
    6.15625).  The same holds for ``nn.embedding_lookup``."""
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=1))
    with strategy.scope():
        table = xtpu.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) + 0.001, name="table")
    ids = np.zeros(64, np.int32)
    ct = np.float32(0.1)

    def step(ids):
        with xtpu.GradientTape() as tape:
            rows = xtpu.gather(table, ids)
            looked = xtpu.nn.embedding_lookup(table, ids)
            loss = xtpu.reduce_sum(xtpu.cast(rows, xtpu.float32) * ct) + xtpu.reduce_sum(
                xtpu.cast(looked, xtpu.float32) * ct
            )
        (g,) = tape.gradient(loss, [table])
        return rows, g

    @xtpu.function
    def run(ids):
        return strategy.run(step, args=(ids,))

    rows, g = (np.asarray(v) for v in run(ids))
    assert rows.dtype == BF16
    np.testing.assert_array_equal(
        rows.view(np.uint16), np.repeat(table.numpy()[:1], 64, 0).astype(BF16).view(np.uint16)
    )
    row = np.float32(ct.astype(BF16)) * 64  # 6.40625, exact in float32
    np.testing.assert_array_equal(g[0], np.full(3, 2 * row, np.float32))
    np.testing.assert_array_equal(g[1:], 0)
    text = run.lower(ids).as_text()
    assert "hlo.gather" in text and "(tensor<4x3xf32>, tensor<64xi32>) -> tensor<64x3xf32>" in text
    assert "(tensor<64x3xf32>) -> tensor<64x3xbf16>" in text
