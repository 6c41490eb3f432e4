"""ccl-combine-all-reduce and ccl-decompose-all-reduce run: the rewritten
programs give the bits of the programs without the pass (and of numpy),
over 1, 2, 4, 8 replicas, with groups, in random dependency patterns."""

import numpy as np
import pytest

import xtpu
from xtpu.passes import DEFAULT_PIPELINE

BASE = ",".join(p for p in DEFAULT_PIPELINE if p != "ccl-combine-all-reduce")
COMBINE = BASE + ",ccl-combine-all-reduce"


def _groups(n, size):
    k = n // size
    return [[j * k + i for j in range(size)] for i in range(k)]


def _random_step(seed, n):
    """A step of several cross_replica_sums over random groups and dtypes,
    some feeding others through elementwise ops."""
    rng = np.random.default_rng(seed)
    sizes = [s for s in (1, 2, 4, 8) if n % s == 0]
    plan = []
    for i in range(int(rng.integers(3, 9))):
        size = int(rng.choice(sizes))
        groups = None if size == n else _groups(n, size)
        source = int(rng.integers(-1, i)) if i else -1  # -1: an input
        plan.append((groups, source, int(rng.integers(0, 2))))

    def step(xf, xi):
        vals = []
        for groups, source, use_int in plan:
            if source >= 0 and vals[source].dtype == (np.int32 if use_int else np.float32):
                x = vals[source] * 3 + (xi if use_int else xf)
            else:
                x = xi if use_int else xf
            vals.append(xtpu.cross_replica_sum(x, groups))
        return vals

    return step


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("seed", range(4))
def test_combined_program_gives_the_same_bits(n, seed):
    rng = np.random.default_rng(100 + seed)
    inputs = [
        [rng.standard_normal((3, 2)).astype(np.float32), rng.integers(-50, 50, (5,)).astype(np.int32)] for _ in range(n)
    ]
    lowered = xtpu.lower(_random_step(seed, n), inputs)
    want = lowered.compile(BASE)(inputs)
    combined = lowered.compile(COMBINE)
    got = combined(inputs)
    for a, b in zip(want, got):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and np.array_equal(x, y)
    before = lowered.compile(BASE).as_text().count("ccl.all_reduce")
    after = combined.as_text().count("ccl.all_reduce")
    assert after < before if n > 1 else after <= before


def test_fifty_gradient_sums_are_one_collective_by_default():
    """The default pipeline combines a step's 50 gradient all-reduces into
    one; the results are numpy's sums."""
    rng = np.random.default_rng(0)
    shapes = [(16,), (16, 16), (4, 4, 4), (8,), (2, 3)] * 10
    n = 4
    inputs = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(n)]

    def step(*grads):
        return [xtpu.cross_replica_sum(g) for g in grads]

    compiled = xtpu.lower(step, inputs).compile()
    assert "ccl-combine-all-reduce" in compiled.stages
    assert compiled.as_text().count("ccl.all_reduce") == 1
    out = compiled(inputs)
    for i in range(len(shapes)):
        total = inputs[0][i] + inputs[1][i] + inputs[2][i] + inputs[3][i]
        for r in range(n):
            np.testing.assert_array_equal(out[r][i], total)


def test_strategy_gradients_are_combined_and_train_alike():
    """A TPUStrategy step whose gradients are all-reduced leaf by leaf
    (ReplicaContext.all_reduce) compiles to one collective and matches numpy."""
    from xtpu.distribute.strategy import get_replica_context

    n = 2
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=n))
    xs = [np.full((3,), r + 1, np.float32) for r in range(n)]

    def step(x):
        grads = {"w": x * 2.0, "b": x[0:1] * 3.0, "k": xtpu.reshape(x, (3, 1)) * 0.5}
        return get_replica_context().all_reduce("MEAN", grads)

    out = strategy.run(step, args=(xtpu.PerReplica(xs),))
    mean = np.mean(xs, axis=0)
    for r in range(n):
        np.testing.assert_allclose(out["w"].values[r], mean * 2.0, rtol=1e-6)
        np.testing.assert_allclose(out["b"].values[r], mean[:1] * 3.0, rtol=1e-6)
        np.testing.assert_allclose(out["k"].values[r], mean.reshape(3, 1) * 0.5, rtol=1e-6)


@pytest.mark.parametrize("n, size", [(2, 2), (4, 2), (4, 4), (8, 4), (8, 8)])
@pytest.mark.parametrize("elements", [1, 7, 64])
def test_decomposed_all_reduce_gives_the_same_bits(n, size, elements):
    rng = np.random.default_rng(elements)
    groups = None if size == n else _groups(n, size)
    inputs = [
        [rng.standard_normal((elements,)).astype(np.float64), rng.integers(-9, 9, (elements, 2)).astype(np.int64)]
        for _ in range(n)
    ]

    def step(x, i):
        return xtpu.cross_replica_sum(x, groups), xtpu.cross_replica_sum(i, groups)

    lowered = xtpu.lower(step, inputs)
    decomposed = lowered.compile(BASE + ",ccl-decompose-all-reduce{threshold-bytes=1}")
    assert "ccl.reduce_scatter" in decomposed.as_text() and "ccl.all_reduce" not in decomposed.as_text()
    want = lowered.compile(BASE)(inputs)
    for a, b in zip(want, decomposed(inputs)):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and np.array_equal(x, y)
    members = groups or [list(range(n))]
    for g in members:
        total = sum(inputs[r][1] for r in g)
        for r in g:
            np.testing.assert_array_equal(want[r][1], total)


def test_combined_gradients_match_finite_differences():
    """Gradients taken through cross_replica_sums (their VJP is another
    cross_replica_sum) still match finite differences after combining."""
    n = 2
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((3,)) for _ in range(n)]
    ys = [rng.standard_normal((2, 2)) for _ in range(n)]

    def step(x, y):
        with xtpu.GradientTape() as tape:
            tape.watch([x, y])
            sx = xtpu.cross_replica_sum(x)
            sy = xtpu.cross_replica_sum(y)
            loss = xtpu.math.reduce_sum(sx * sx) + xtpu.math.reduce_sum(sy * sy * sy)
        return tape.gradient(loss, [x, y])

    compiled = xtpu.lower(step, [[x, y] for x, y in zip(xs, ys)]).compile(COMBINE)
    out = compiled([[x, y] for x, y in zip(xs, ys)])

    def total(xv, yv):
        sx, sy = sum(xv), sum(yv)
        return n * (np.sum(sx * sx) + np.sum(sy**3))

    eps = 1e-6
    for r in range(n):
        for which, vals in ((0, xs), (1, ys)):
            g = np.zeros_like(vals[r])
            for idx in np.ndindex(vals[r].shape):
                up = [v.copy() for v in vals]
                dn = [v.copy() for v in vals]
                up[r][idx] += eps
                dn[r][idx] -= eps
                args_up = (up, ys) if which == 0 else (xs, up)
                args_dn = (dn, ys) if which == 0 else (xs, dn)
                g[idx] = (total(*args_up) - total(*args_dn)) / (2 * eps)
            np.testing.assert_allclose(out[r][which], g, rtol=1e-6, atol=1e-8)


def test_all_reduces_in_a_loop_body_are_combined():
    """A training loop's body (hlo.while region, as strategy.run with
    steps_per_run builds) gets its all-reduces combined too; the loop gives
    numpy's values."""

    def step(a, b):
        def body(i, a, b):
            return i + 1, a + xtpu.cross_replica_sum(a) * 0.5, b + xtpu.cross_replica_sum(b * 2.0)

        _, a, b = xtpu.while_loop(lambda i, a, b: i < 3, body, (np.int32(0), a, b))
        return a, b

    n = 4
    inputs = [[np.full((2,), r + 1.0, np.float32), np.arange(3, dtype=np.float32).reshape(3, 1) - r] for r in range(n)]
    compiled = xtpu.lower(step, inputs).compile()
    assert compiled.as_text().count("ccl.all_reduce") == 1
    a = [x[0].copy() for x in inputs]
    b = [x[1].copy() for x in inputs]
    for _ in range(3):
        sa, sb = sum(a), sum(2.0 * v for v in b)
        a = [v + sa * np.float32(0.5) for v in a]
        b = [v + sb for v in b]
    out = compiled(inputs)
    for r in range(n):
        np.testing.assert_array_equal(out[r][0], a[r])
        np.testing.assert_array_equal(out[r][1], b[r])


def test_outputs_that_are_views_never_alias_the_inputs():
    """The slices the combiner leaves as outputs are views of one shared
    buffer; the runtime checks them against the inputs by memory owner
    (O(1) each) and still copies any view of an input, also of an input in
    a foreign buffer."""
    base = np.arange(24, dtype=np.float32)
    x = base[4:16].reshape(3, 4)
    foreign = np.frombuffer(bytearray(base.tobytes()), np.float32)[:12].reshape(3, 4)

    def f(a, b):
        return a[0:2], xtpu.reshape(b, (12,))[3:8], xtpu.cross_replica_sum(a)[1:], xtpu.cross_replica_sum(b)[:1]

    out = xtpu.replicate(f, [[x, foreign], [x, foreign]])
    for o in out:
        np.testing.assert_array_equal(o[0], x[0:2])
        np.testing.assert_array_equal(o[1], foreign.reshape(12)[3:8])
        np.testing.assert_array_equal(o[2], 2 * x[1:])
        np.testing.assert_array_equal(o[3], 2 * foreign[:1])
        for v in o:
            assert not np.shares_memory(v, base) and not np.shares_memory(v, foreign)
