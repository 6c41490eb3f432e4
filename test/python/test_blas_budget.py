"""The core budget (runtime/blas_budget.py): BLAS threads per replica from
the cores and the replicas running at once, overridable as TF's
``tf.config.threading.set_intra_op_parallelism_threads``."""

import numpy as np
import pytest
from threadpoolctl import threadpool_info

import xtpu
from xtpu.runtime import blas_budget


@pytest.fixture(autouse=True)
def reset(monkeypatch):
    monkeypatch.delenv("XTPU_INTRA_OP_THREADS", raising=False)
    yield
    xtpu.config.threading.set_intra_op_parallelism_threads(0)


def blas_threads():
    """Threads of numpy's BLAS, the one xtpu's kernels call (scipy, loaded
    by other tests, brings a BLAS of its own that xtpu need not limit)."""
    return [m["num_threads"] for m in threadpool_info() if m["user_api"] == "blas" and "numpy" in m["filepath"]]


@pytest.mark.parametrize(
    "budget,workers,expected",
    [
        (16, 1, 16),
        (16, 2, 8),
        (16, 8, 2),
        (16, 32, 1),
        (2, 2, 1),
        (2, 8, 1),
        (3, 2, 1),
        (8, 3, 2),
    ],
)
def test_threads_per_worker_shares_the_budget(budget, workers, expected):
    xtpu.config.threading.set_intra_op_parallelism_threads(budget)
    assert xtpu.config.threading.get_intra_op_parallelism_threads() == budget
    assert blas_budget.threads_per_worker(workers) == expected


def test_default_budget_is_every_core_and_one_worker_leaves_blas_alone(monkeypatch):
    assert blas_budget.threads_per_worker(1) is None
    monkeypatch.setattr(blas_budget, "cores", lambda: 16)
    assert blas_budget.threads_per_worker(2) == 8
    assert blas_budget.threads_per_worker(8) == 2
    monkeypatch.setenv("XTPU_INTRA_OP_THREADS", "4")
    assert blas_budget.threads_per_worker(1) == 4 and blas_budget.threads_per_worker(2) == 2


def test_bad_settings_are_errors(monkeypatch):
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="num_threads must be an integer >= 0"):
            xtpu.config.threading.set_intra_op_parallelism_threads(bad)
    monkeypatch.setenv("XTPU_INTRA_OP_THREADS", "many")
    with pytest.raises(ValueError, match="XTPU_INTRA_OP_THREADS must be a whole number"):
        blas_budget.threads_per_worker(2)


@pytest.mark.parametrize("inter_op, per_replica", [(2, 1), (1, 2)])
def test_a_run_holds_blas_at_the_budget_and_restores_it(inter_op, per_replica):
    # A thread per replica: 2 cores / 2 replicas; sequential (one thread for
    # both replicas, runtime/sequential.py): the whole budget.
    if not blas_threads():
        pytest.skip("numpy has no BLAS that threadpoolctl controls")
    before = blas_threads()
    seen = []

    def host(v):
        return v

    def step(x):
        y = x @ x
        return xtpu.outside_compilation(host, y)

    xs = [[np.eye(4, dtype=np.float32) * (r + 1)] for r in range(2)]
    xtpu.config.threading.set_intra_op_parallelism_threads(2)
    import xtpu.runtime.blas_budget as bb

    real = bb._Limit.__enter__

    def spy(self):
        real(self)
        seen.append((self.n, blas_threads()))

    bb._Limit.__enter__ = spy
    xtpu.config.threading.set_inter_op_parallelism_threads(inter_op)
    try:
        out = xtpu.replicate(step, xs)
    finally:
        bb._Limit.__enter__ = real
        xtpu.config.threading.set_inter_op_parallelism_threads(0)
    for r in range(2):
        np.testing.assert_array_equal(out[r][0], xs[r][0] @ xs[r][0])
    assert seen and seen[0][0] == per_replica and set(seen[0][1]) == {per_replica}
    assert blas_threads() == before


def test_the_count_a_user_set_between_runs_is_the_one_restored():
    # The limit reads each library's count at the first run in, so a count
    # the user changed (threadpoolctl) since the last run comes back, not
    # the one of the process's start.
    from threadpoolctl import threadpool_limits

    if not blas_threads():
        pytest.skip("numpy has no BLAS that threadpoolctl controls")
    xtpu.config.threading.set_intra_op_parallelism_threads(1)
    lim = blas_budget.limit(2)  # 1 core // 2 workers: one thread
    with threadpool_limits(limits=2, user_api="blas"):
        with lim:
            assert set(blas_threads()) == {1}
            with lim:  # counted: the inner exit leaves the limit on
                pass
            assert set(blas_threads()) == {1}
        assert set(blas_threads()) == {2}
        with threadpool_limits(limits=1, user_api="blas"):
            with lim:  # already at the limit: nothing to set or restore
                assert set(blas_threads()) == {1}
                assert blas_budget._restore == [] or all(c.get_num_threads() == 1 for c, _ in blas_budget._restore)
            assert set(blas_threads()) == {1}
        assert set(blas_threads()) == {2}


def test_a_limit_set_on_one_thread_is_restored_when_the_last_run_out_is_another():
    # threadpoolctl (3.6 and later) lets one thread set OpenBLAS's count and
    # silently ignores the others: replicate called from 8 threads left BLAS
    # at one thread for good (issue 25, test_concurrent_replicate_calls_from_threads
    # at XTPU_STRESS_SCALE=10). Run A enters on one thread, run B on another,
    # A leaves, then B (the last out) restores the count A's thread found.
    import threading

    from threadpoolctl import threadpool_limits

    if not blas_threads():
        pytest.skip("numpy has no BLAS that threadpoolctl controls")
    xtpu.config.threading.set_intra_op_parallelism_threads(1)
    lim = blas_budget.limit(2)  # 1 core // 2 workers: one thread
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}
    before = blas_threads()

    def run_a():
        with lim:
            seen["a"] = blas_threads()
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def run_b():
        a_in.wait(10)
        with lim:
            b_in.set()
            a_out.wait(10)
            seen["b"] = blas_threads()

    with threadpool_limits(limits=3, user_api="blas"):  # the main thread controls BLAS now
        assert set(blas_threads()) == {3}
        threads = [threading.Thread(target=f) for f in (run_a, run_b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert set(seen["a"]) == {1} and set(seen["b"]) == {1}  # held on both threads
        assert set(blas_threads()) == {3}  # restored from B's thread
        assert blas_budget._users == 0 and blas_budget._restore == []
    assert blas_threads() == before  # and the main thread's own limit still restores


@pytest.mark.parametrize("matmul", [True, False])
def test_a_program_that_calls_no_blas_leaves_its_count_alone(monkeypatch, matmul):
    # Setting BLAS's count and back costs ~10 us a call: a program with no
    # dot_general, convolution or linear-algebra op does not touch it.
    if not blas_threads():
        pytest.skip("numpy has no BLAS that threadpoolctl controls")
    calls = []
    real = blas_budget._set_threads
    monkeypatch.setattr(blas_budget, "_set_threads", lambda c, n: (calls.append(n), real(c, n)))
    xtpu.config.threading.set_intra_op_parallelism_threads(4)  # 2 replicas: 2 threads each (or 4 sequentially)

    def step(x):
        y = x @ x if matmul else x * x
        return xtpu.cross_replica_sum(y)

    xs = [[np.eye(4, dtype=np.float32) * (r + 1)] for r in range(2)]
    with threadpool_limits_blas(3):
        out = xtpu.replicate(step, xs)
        assert set(blas_threads()) == {3}  # restored (or never changed)
    np.testing.assert_array_equal(out[0][0], np.eye(4, dtype=np.float32) * 5)
    assert (calls != []) is matmul
    if matmul:
        assert calls[0] in (2, 4) and calls[-1] == 3  # 2 per replica on threads, 4 sequentially


def threadpool_limits_blas(n):
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=n, user_api="blas")
