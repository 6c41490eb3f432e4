"""Large reductions split over threads (runtime/communicator.py's
``reduce_in_order``): every element is still reduced left to right, so the
result is the one-thread result bit for bit; small or non-contiguous ones
stay on one thread."""

import numpy as np
import pytest

import xtpu
from xtpu.runtime import communicator as comm


def left_fold(values, fn):
    out = values[0].copy()
    for v in values[1:]:
        out = fn(out, v)
    return out


@pytest.fixture
def two_cores(monkeypatch):
    """xtpu may use 2 cores: the process's, whatever ``XTPU_INTRA_OP_THREADS`` says."""
    from xtpu.runtime import blas_budget

    monkeypatch.setattr(blas_budget, "cores", lambda: 2)
    monkeypatch.delenv("XTPU_INTRA_OP_THREADS", raising=False)
    assert blas_budget.budget() == 2


def spy_chunks(monkeypatch):
    seen = []
    real = comm._reduce_chunks

    def spy(values):
        k = real(values)
        seen.append(k)
        return k

    monkeypatch.setattr(comm, "_reduce_chunks", spy)
    return seen


@pytest.mark.filterwarnings("ignore:overflow encountered")  # the chunks' threads have numpy's default errstate
@pytest.mark.parametrize(
    "reduction, fn, dtype",
    [
        ("add", np.add, np.float32),
        ("add", np.add, np.int32),
        ("mul", np.multiply, np.float64),
        ("max", np.maximum, np.float32),
        ("min", np.minimum, np.float32),
    ],
)
def test_a_split_reduction_is_the_left_fold_bit_for_bit(two_cores, monkeypatch, reduction, fn, dtype):
    seen = spy_chunks(monkeypatch)
    rng = np.random.default_rng(0)
    n = max(comm.PARALLEL_REDUCE_OPS // 3, 2 * comm.PARALLEL_REDUCE_MIN_CHUNK) + 17  # over both thresholds, odd
    values = [(rng.standard_normal(n) * 1000).astype(dtype) for _ in range(4)]
    if dtype == np.float32:
        values[2][5] = np.nan  # max / min propagate NaN, as StableHLO's maximum
        values[1][-1] = np.float32(3e38)  # add overflows to inf the same way
        values[3][-1] = np.float32(3e38)
    if dtype == np.int32:
        values[0][0] = np.iinfo(np.int32).max  # integer add wraps the same way
    with np.errstate(over="ignore"):
        got = comm.reduce_in_order(values, reduction)
        want = left_fold(values, fn)
    assert seen == [2]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert got.tobytes() == want.tobytes()


def test_small_and_strided_reductions_stay_on_one_thread(two_cores, monkeypatch):
    seen = spy_chunks(monkeypatch)
    rng = np.random.default_rng(1)
    small = [rng.standard_normal(1000).astype(np.float32) for _ in range(8)]
    assert comm.reduce_in_order(small, "add").tobytes() == left_fold(small, np.add).tobytes()
    big = [rng.standard_normal((2, comm.PARALLEL_REDUCE_OPS)).astype(np.float32) for _ in range(3)]
    strided = [b[:, ::2] for b in big]  # not contiguous
    assert comm.reduce_in_order(strided, "add").tobytes() == left_fold(strided, np.add).tobytes()
    assert seen == [1, 1]


def test_one_core_never_splits(monkeypatch):
    from xtpu.runtime import blas_budget

    monkeypatch.setattr(blas_budget, "cores", lambda: 1)
    values = [np.ones(comm.PARALLEL_REDUCE_OPS, np.float32)] * 3
    assert comm._reduce_chunks(values) == 1


@pytest.mark.parametrize("inter_op", [1, 2, 8])
def test_cross_replica_sum_of_large_operands_matches_numpy_in_every_mode(two_cores, monkeypatch, inter_op):
    seen = spy_chunks(monkeypatch)
    rng = np.random.default_rng(2)
    n = 2 * comm.PARALLEL_REDUCE_MIN_CHUNK + 3
    xs = [[rng.standard_normal(n).astype(np.float32)] for _ in range(8)]
    xtpu.config.threading.set_inter_op_parallelism_threads(inter_op)
    try:
        out = xtpu.replicate(lambda x: xtpu.cross_replica_sum(x), xs)
    finally:
        xtpu.config.threading.set_inter_op_parallelism_threads(0)
    want = left_fold([x for (x,) in xs], np.add)
    for r in range(8):
        assert out[r][0].tobytes() == want.tobytes()
    assert 2 in seen


def _blocks_sum(inputs, groups, inter_op):
    def step(x):
        return xtpu.cross_replica_sum(x * 1.0, groups)

    xtpu.config.threading.set_inter_op_parallelism_threads(inter_op)
    try:
        c = xtpu.lower(step, inputs).compile()
        return c.executable.replica_execution[0], [o[0] for o in c(inputs)]
    finally:
        xtpu.config.threading.set_inter_op_parallelism_threads(0)


@pytest.mark.parametrize(
    "R, groups",
    [
        (8, None),
        (5, None),
        (5, [[3, 1, 0, 2, 4]]),
        (6, [[0, 1, 2], [3, 4, 5]]),
        (6, [[0, 2, 4], [1, 3, 5]]),
    ],
)
def test_blocks_sum_in_replica_order_bit_for_bit(R, groups):
    # Replicas in blocks of several per thread meet once per all-reduce;
    # each group's sum is still the left fold in replica order (whatever
    # order the group lists them in), bit for bit the thread-per-replica
    # result.  (Folding the first block's terms before the meeting was
    # tried: no gain on the 8-replica MLP step, 936-980 us either way.)
    rng = np.random.default_rng(R)
    inputs = [[(rng.standard_normal(1000) * 10.0 ** rng.integers(-3, 4, 1000)).astype(np.float32)] for _ in range(R)]
    mode, blocks = _blocks_sum(inputs, groups, 2)
    assert mode == "blocks"
    _, threads = _blocks_sum(inputs, groups, R)
    members = groups or [list(range(R))]
    for g in members:
        want = left_fold([inputs[r][0] for r in sorted(g)], np.add)
        for r in g:
            assert blocks[r].tobytes() == want.tobytes() == threads[r].tobytes()
