"""User-level collectives (issue 12): ``xtpu.all_to_all``,
``xtpu.collective_permute``, ``ReplicaContext.all_gather`` /
``all_reduce``, against numpy references of TF's documented semantics,
with 1, 2, 4, 8 replicas and groups; gradients against finite differences
of the sum of every replica's loss."""

import numpy as np
import pytest

import xtpu
from xtpu.distribute.strategy import get_replica_context


def ref_all_to_all(xs, concat, split, groups):
    """TF's AllToAll doc: replica ``g[i]`` gets block ``i`` of every member
    of its group, concatenated in group order."""
    out = [None] * len(xs)
    for g in groups:
        for i, r in enumerate(g):
            out[r] = np.concatenate([np.split(xs[s], len(g), axis=split)[i] for s in g], axis=concat)
    return out


def ref_permute(xs, pairs):
    out = [np.zeros_like(x) for x in xs]
    for s, t in pairs:
        out[t] = xs[s]
    return out


def _inputs(n, shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(n)]


def _groups(n, size):
    """Groups of ``size`` replicas, not contiguous: [[0, 2], [1, 3]] for 4, 2."""
    k = n // size
    return [[j * k + i for j in range(size)] for i in range(k)]


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("concat, split", [(0, 0), (1, 0), (0, 1), (2, 1)])
def test_all_to_all_matches_numpy(n, concat, split):
    xs = _inputs(n, (8, 8, 3))
    out = xtpu.replicate(lambda x: xtpu.all_to_all(x, concat, split, n), [[x] for x in xs])
    for o, r in zip(out, ref_all_to_all(xs, concat, split, [list(range(n))])):
        np.testing.assert_array_equal(o[0], r)


@pytest.mark.parametrize("n, size", [(4, 2), (8, 2), (8, 4)])
def test_all_to_all_within_groups(n, size):
    groups = _groups(n, size)
    xs = [np.arange(48, dtype=np.int32).reshape(4, 12) + 100 * r for r in range(n)]
    out = xtpu.replicate(lambda x: xtpu.all_to_all(x, 0, 1, size, groups), [[x] for x in xs])
    for o, r in zip(out, ref_all_to_all(xs, 0, 1, groups)):
        np.testing.assert_array_equal(o[0], r)


def test_all_to_all_tf_doc_example():
    # tpu_ops.all_to_all doc: replica 0 has [[A, B]], replica 1 [[C, D]];
    # concat 0, split 1, split_count 2 -> [[A], [C]] and [[B], [D]].
    a, b, c, d = 1.0, 2.0, 3.0, 4.0
    out = xtpu.replicate(
        lambda x: xtpu.all_to_all(x, 0, 1, 2), [[np.array([[a, b]], np.float32)], [np.array([[c, d]], np.float32)]]
    )
    np.testing.assert_array_equal(out[0][0], [[a], [c]])
    np.testing.assert_array_equal(out[1][0], [[b], [d]])


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_collective_permute_matches_numpy(n):
    xs = _inputs(n, (3, 2))
    shift = [[r, (r + 1) % n] for r in range(n)]
    partial = [[r, (r + 1) % n] for r in range(0, n - 1, 2)] or [[0, 0]]
    for pairs in (shift, partial):
        out = xtpu.replicate(lambda x: xtpu.collective_permute(x, pairs), [[x] for x in xs])
        for o, r in zip(out, ref_permute(xs, pairs)):
            np.testing.assert_array_equal(o[0], r)


def test_collective_permute_without_pairs_gives_zeros():
    """StableHLO: a process that is no pair's target gets zeros (not x * 0,
    which is NaN for inf)."""
    xs = [[np.array([1.0, np.inf], np.float32), np.array([True])] for _ in range(2)]
    out = xtpu.replicate(
        lambda x, b: (xtpu.collective_permute(x, []), xtpu.collective_permute(b, np.zeros((0, 2), np.int32))), xs
    )
    for o in out:
        np.testing.assert_array_equal(o[0], [0.0, 0.0])
        np.testing.assert_array_equal(o[1], [False])


def test_collective_permute_takes_an_int_array_and_bool_values():
    pairs = np.array([[1, 0], [0, 1]], np.int32)
    xs = [np.array([True, False]), np.array([False, False])]
    out = xtpu.replicate(lambda x: xtpu.collective_permute(x, pairs), [[x] for x in xs])
    np.testing.assert_array_equal(out[0][0], xs[1])
    np.testing.assert_array_equal(out[1][0], xs[0])


@pytest.mark.parametrize(
    "call, err, match",
    [
        (lambda x: xtpu.all_to_all(x, 0, 0, 0), ValueError, "split_count 0 must at least be one"),
        (
            lambda x: xtpu.all_to_all(x, 0, 0, 2),
            ValueError,
            "split_count 2 must equal the size of the second dimension of group_assignment 4",
        ),
        (lambda x: xtpu.all_to_all(x, 2, 0, 4), ValueError, "concat_dimension 2 is out of range of input rank 2"),
        (lambda x: xtpu.all_to_all(x, 0, -1, 4), ValueError, "split_dimension -1 is out of range of input rank 2"),
        (lambda x: xtpu.all_to_all(x, 0, 1, 4), ValueError, "input dimension 6 not divisible by split_count 4"),
        (lambda x: xtpu.all_to_all(x, 0, 0, 2, [[0, 1], [1, 2]]), ValueError, r"lists replicas \[1\] more than once"),
        (lambda x: xtpu.all_to_all(x, 0, 0, 2, [[0, 1]]), ValueError, r"misses replicas \[2, 3\]"),
        (
            lambda x: xtpu.collective_permute(x, [[0, 1], [2, 1]]),
            ValueError,
            r"Target 1 appears more than once in instruction's source-target pairs",
        ),
        (lambda x: xtpu.collective_permute(x, [[0, 1], [0, 2]]), ValueError, r"Source 0 appears more than once"),
        (lambda x: xtpu.collective_permute(x, [[0, 4]]), ValueError, r"must be < 4 \(the replicas\), got \[0, 4\]"),
        (lambda x: xtpu.collective_permute(x, [[-1, 0]]), ValueError, "must be >= 0"),
        (
            lambda x: xtpu.collective_permute(x, [0, 1]),
            ValueError,
            r"must be a list of lists of integer ids, got \[0, 1\]",
        ),
        (lambda x: xtpu.collective_permute(x, [[0, 1, 2]]), ValueError, r"shape \[num_pairs, 2\]"),
        (lambda x: xtpu.collective_permute(x, [[0, 1], [2]]), ValueError, r"shape \[num_pairs, 2\]"),
        (lambda x: xtpu.collective_permute(x, [[0, 1.5]]), ValueError, r"must hold integer ids, got 1.5"),
        (lambda x: xtpu.all_to_all(x, 0, 0, 2, [[0, 1], [2]]), ValueError, "every group must have the same size"),
    ],
)
def test_tf_errors(call, err, match):
    xs = [[np.zeros((8, 6), np.float32)] for _ in range(4)]
    with pytest.raises(err, match=match):
        xtpu.replicate(call, xs)


def test_eager_calls_raise_as_cross_replica_sum_does():
    x = np.ones((4, 4), np.float32)
    with pytest.raises(RuntimeError, match="all_to_all must be called inside a replicated computation"):
        xtpu.all_to_all(x, 0, 1, 1)
    with pytest.raises(RuntimeError, match="collective_permute must be called inside a replicated computation"):
        xtpu.collective_permute(x, [[0, 0]])


def test_refused_in_an_outside_compilation_cluster():
    def f(x):
        return xtpu.outside_compilation(lambda v: xtpu.collective_permute(v, [[0, 1], [1, 0]]), x)

    with pytest.raises(ValueError, match="collective_permute cannot run inside outside_compilation cluster"):
        xtpu.replicate(f, [[np.float32(1)], [np.float32(2)]])


def _logical(replicas):
    return xtpu.DeviceAssignment.build(
        xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=replicas
    )


@pytest.mark.parametrize("n, groups", [(2, None), (4, None), (4, [[0, 3], [1, 2]])])
def test_all_to_all_with_logical_cores(n, groups):
    """Two logical cores per replica, the operand split over them: one
    cross_replica_sum that tpu-spmd-partition partitions."""
    size = n if groups is None else 2
    xs = [np.arange(32, dtype=np.float32).reshape(8, 4) * (r + 1) - r for r in range(n)]

    def f(x):
        x = xtpu.split_to_logical_devices(x, [2, 1])
        return xtpu.all_to_all(x, 1, 0, size, groups)

    out = xtpu.replicate(f, [[x] for x in xs], device_assignment=_logical(n))
    for o, r in zip(out, ref_all_to_all(xs, 1, 0, groups or [list(range(n))])):
        np.testing.assert_array_equal(o[0], r)


@pytest.mark.parametrize("pairs", [[[0, 1], [1, 2], [2, 3], [3, 0]], [[2, 0]]])
def test_collective_permute_with_logical_cores(pairs):
    xs = [np.arange(8, dtype=np.int32).reshape(4, 2) + 10 * r for r in range(4)]

    def f(x, b):
        x = xtpu.split_to_logical_devices(x, [2, 1])
        return xtpu.collective_permute(x, pairs), xtpu.collective_permute(b, pairs)

    bs = [np.array([r % 2 == 0, True]) for r in range(4)]
    out = xtpu.replicate(f, [[x, b] for x, b in zip(xs, bs)], device_assignment=_logical(4))
    for o, r, rb in zip(out, ref_permute(xs, pairs), ref_permute(bs, pairs)):
        np.testing.assert_array_equal(o[0], r)
        np.testing.assert_array_equal(o[1], rb)
        assert o[1].dtype == np.bool_


def test_traced_ops_are_the_ccl_ops():
    xs = [[np.zeros((4, 2), np.float32)]] * 4
    text = xtpu.lower(lambda x: xtpu.all_to_all(x, 1, 0, 2, [[0, 3], [1, 2]]), xs).as_text()
    assert "ccl.all_to_all %input0 split = 0 concat = 1 groups = dense<[[0, 3], [1, 2]]>" in text
    assert "tensor<4x2xf32>) -> tensor<2x4xf32>" in text
    text = xtpu.lower(lambda x: xtpu.collective_permute(x, [[0, 1], [1, 0]]), xs[:2]).as_text()
    assert "ccl.collective_permute %input0 pairs = dense<[[0, 1], [1, 0]]>" in text


# -- gradients ---------------------------------------------------------------


def _replica_grads(collective, xs, ws, da=None):
    """Each replica's gradient of its loss sum(w * c(x)**2): the cotangent
    flows through the transposed collective, so replica r gets the
    derivative of the sum over replicas of the losses w.r.t. its x."""

    def f(x, w):
        with xtpu.GradientTape() as tape:
            tape.watch(x)
            loss = xtpu.math.reduce_sum(w * collective(x) ** 2)
        return tape.gradient(loss, x)

    return [o[0] for o in xtpu.replicate(f, [[x, w] for x, w in zip(xs, ws)], device_assignment=da)]


def _fd_grads(ref, xs, ws, eps=1e-6):
    def total(vals):
        return sum(float(np.sum(w * y**2)) for w, y in zip(ws, ref(vals)))

    grads = []
    for r, x in enumerate(xs):
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            up = [v.copy() for v in xs]
            dn = [v.copy() for v in xs]
            up[r][idx] += eps
            dn[r][idx] -= eps
            g[idx] = (total(up) - total(dn)) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("n, groups", [(2, None), (4, None), (4, [[0, 2], [1, 3]])])
def test_all_to_all_gradient_against_finite_differences(n, groups):
    size = n if groups is None else len(groups[0])
    xs = _inputs(n, (4, 2), np.float64, seed=1)
    ws = _inputs(n, (4 // size, 2 * size), np.float64, seed=2)
    got = _replica_grads(lambda x: xtpu.all_to_all(x, 1, 0, size, groups), xs, ws)
    want = _fd_grads(lambda v: ref_all_to_all(v, 1, 0, groups or [list(range(n))]), xs, ws)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("pairs", [[[0, 1], [1, 2], [2, 3], [3, 0]], [[0, 2], [3, 1]]])
def test_collective_permute_gradient_against_finite_differences(pairs):
    xs = _inputs(4, (3,), np.float64, seed=3)
    ws = _inputs(4, (3,), np.float64, seed=4)
    got = _replica_grads(lambda x: xtpu.collective_permute(x, pairs), xs, ws)
    want = _fd_grads(lambda v: ref_permute(v, pairs), xs, ws)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)


# -- TPUStrategy's ReplicaContext -------------------------------------------


def _strategy(n, da=None):
    if da is not None:
        return xtpu.TPUStrategy(device_assignment=da)
    return xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=n))


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("axis", [0, 1])
def test_replica_context_all_gather_and_all_reduce(n, axis):
    xs = _inputs(n, (2, 3))

    def step(x):
        ctx = get_replica_context()
        return (
            ctx.all_gather({"a": x, "b": (x * 2,)}, axis),
            ctx.all_reduce(xtpu.ReduceOp.MEAN, x),
            ctx.all_reduce("sum", [x]),
        )

    strategy = _strategy(n)
    gathered, mean, (total,) = strategy.run(step, args=(xtpu.PerReplica(xs),))
    local = strategy.experimental_local_results
    for r in range(n):
        np.testing.assert_array_equal(local(gathered["a"])[r], np.concatenate(xs, axis))
        np.testing.assert_array_equal(local(gathered["b"][0])[r], np.concatenate([2 * x for x in xs], axis))
        np.testing.assert_allclose(local(mean)[r], np.mean(xs, axis=0), rtol=1e-6)
        np.testing.assert_allclose(local(total)[r], np.sum(xs, axis=0), rtol=1e-6)


def test_replica_context_all_gather_with_logical_cores():
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=4)
    xs = [np.arange(8, dtype=np.float32).reshape(4, 2) * (r + 1) for r in range(4)]

    def step(x):
        x = xtpu.split_to_logical_devices(x, [2, 1])
        ctx = get_replica_context()
        return ctx.all_gather(x, 1), ctx.all_reduce("SUM", x)

    gathered, total = _strategy(4, da).run(step, args=(xtpu.PerReplica(xs),))
    for r in range(4):
        np.testing.assert_array_equal(gathered.values[r], np.concatenate(xs, 1))
        np.testing.assert_array_equal(total.values[r], np.sum(xs, axis=0))


def test_replica_context_default_context_and_errors():
    x = np.arange(6.0).reshape(2, 3)
    ctx = get_replica_context()
    # TF's default replica context: one replica, the value itself.
    np.testing.assert_array_equal(ctx.all_gather(x, 1), x)
    np.testing.assert_array_equal(ctx.all_reduce("MEAN", x), x)
    with pytest.raises(ValueError, match="all_gather axis 2 is out of range for a tensor of rank 2"):
        ctx.all_gather(x, 2)
    with pytest.raises(ValueError, match="all_reduce needs xtpu.ReduceOp.SUM or MEAN"):
        ctx.all_reduce(xtpu.VariableAggregation.ONLY_FIRST_TOWER, x)
    with pytest.raises(ValueError, match="all_gather axis -1 is out of range"):
        _strategy(2).run(lambda v: get_replica_context().all_gather(v, -1), args=(np.zeros((2,), np.float32),))


def test_replica_context_all_gather_gradient_against_finite_differences():
    n = 4
    xs = _inputs(n, (2, 2), np.float64, seed=5)
    ws = _inputs(n, (2, 2 * n), np.float64, seed=6)

    def step(x, w):
        with xtpu.GradientTape() as tape:
            tape.watch(x)
            loss = xtpu.math.reduce_sum(w * get_replica_context().all_gather(x, 1) ** 2)
        return tape.gradient(loss, x)

    out = _strategy(n).run(step, args=(xtpu.PerReplica(xs), xtpu.PerReplica(ws)))
    want = _fd_grads(lambda v: [np.concatenate(v, 1)] * n, xs, ws)
    for r in range(n):
        np.testing.assert_allclose(out.values[r], want[r], rtol=1e-6, atol=1e-8)


def test_gradients_with_logical_cores_against_finite_differences():
    n = 4
    xs = _inputs(n, (4, 2), np.float64, seed=7)
    ws = _inputs(n, (2, 4), np.float64, seed=8)
    groups = [[0, 2], [1, 3]]
    got = _replica_grads(lambda x: xtpu.all_to_all(x, 1, 0, 2, groups), xs, ws, _logical(n))
    want = _fd_grads(lambda v: ref_all_to_all(v, 1, 0, groups), xs, ws)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)
    pairs = [[0, 3], [3, 1], [1, 0]]
    ws = _inputs(n, (4, 2), np.float64, seed=9)
    got = _replica_grads(lambda x: xtpu.collective_permute(x, pairs), xs, ws, _logical(n))
    want = _fd_grads(lambda v: ref_permute(v, pairs), xs, ws)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)
