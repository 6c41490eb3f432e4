"""Tests of the runtime's concurrency layer: errors, channels, collectives,
workers. Semantics of the collectives follow the StableHLO spec."""

import os
import threading
import time

import numpy as np
import pytest

from xtpu.runtime.channels import ChannelClosed, ChannelTable
from xtpu.runtime.communicator import (
    ThreadCommunicator,
    normalize_replica_groups,
)
from xtpu.runtime.errors import (
    Aborted,
    HostComputeError,
    RuntimeTimeoutError,
    XtpuRuntimeError,
)
from xtpu.runtime.mpi_communicator import MPICommunicator
from xtpu.runtime.workers import (
    AbortSignal,
    default_timeout,
    pool_size,
    run_workers,
    will_block,
)

NS = [1, 2, 4, 8]
#: $XTPU_STRESS_SCALE multiplies the iterations of the repeated-use tests
#: for runs outside the suite (issue 25).
SCALE = int(os.environ.get("XTPU_STRESS_SCALE", "1"))
SLACK = 1.5  # scheduling slack on a loaded 2-core machine (seconds), as test_fault_injection uses


def run_all(n, body, timeout=5.0, **kw):
    """Run ``body(comm, replica)`` on n participants; returns the results."""
    sig = AbortSignal()
    comm = ThreadCommunicator(n, sig, timeout=timeout)
    tasks = [(f"replica {r}", (lambda r=r: body(comm, r))) for r in range(n)]
    return run_workers(tasks, sig, **kw)


def operands(n, shape=(4, 6), dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(n)]


def groups_for(n):
    """All-in-one, and for n >= 4 two subgroups listed out of order."""
    out = [[list(range(n))]]
    if n >= 4:
        half = n // 2
        out.append([list(range(n - 1, half - 1, -1)), list(range(half))])
    return out


def member(groups, r):
    for g in groups:
        if r in g:
            return g, g.index(r)
    raise AssertionError


# -- errors -------------------------------------------------------------------


def test_error_str_names_replica_op_location():
    err = RuntimeTimeoutError(
        "timed out after 2.0 s waiting for replicas [5, 7] in group [0, 1]",
        replica=3,
        op="ccl.all_reduce",
        location="train.py:41",
    )
    assert str(err) == (
        "replica 3, op ccl.all_reduce (at train.py:41): timed out after 2.0 s "
        "waiting for replicas [5, 7] in group [0, 1]"
    )
    assert isinstance(err, XtpuRuntimeError) and isinstance(err, RuntimeError)
    plain = XtpuRuntimeError("boom")
    assert str(plain) == "boom"
    plain.add_context(cluster="c0", key="k", logical_core=1)
    assert str(plain) == "logical core 1, cluster 'c0', key 'k': boom"
    plain.add_context(cluster="other")  # innermost value wins
    assert plain.cluster == "c0"


def test_host_compute_error_chains_cause():
    try:
        raise KeyError("x")
    except KeyError as exc:
        err = HostComputeError.from_exception(exc, cluster="0", replica=2)
    assert err.__cause__.args == ("x",)
    assert "replica 2" in str(err) and "KeyError" in str(err)


def test_default_timeout_env(monkeypatch):
    monkeypatch.delenv("XTPU_TIMEOUT", raising=False)
    assert default_timeout() == 60.0
    monkeypatch.setenv("XTPU_TIMEOUT", "2.5")
    assert default_timeout() == 2.5
    assert ChannelTable(AbortSignal()).timeout == 2.5
    monkeypatch.setenv("XTPU_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="XTPU_TIMEOUT"):
        default_timeout()


# -- collectives against numpy ------------------------------------------------------


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_all_reduce(n, reduction):
    xs = operands(n, dtype=np.float64)
    fn = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
    for groups in groups_for(n):
        res = run_all(n, lambda c, r: c.all_reduce(r, xs[r], groups, reduction))
        for r in range(n):
            g, _ = member(groups, r)
            ref = xs[min(g)].copy()
            for p in sorted(g)[1:]:
                ref = fn(ref, xs[p])
            np.testing.assert_array_equal(res[r], ref)
            assert res[r].dtype == np.float64 and res[r].shape == xs[r].shape


@pytest.mark.parametrize("n", [3, 8])
def test_all_reduce_sums_in_ascending_replica_order_bitwise(n):
    xs = [x * 10.0 ** (i % 5) for i, x in enumerate(operands(n, shape=(257,), seed=1))]
    groups = [list(range(n - 1, -1, -1))]  # listed backwards on purpose
    res = run_all(n, lambda c, r: c.all_reduce(r, xs[r], groups, "add"))
    ref = xs[0].copy()
    for v in xs[1:]:
        ref = ref + v
    for out in res:
        assert out.tobytes() == ref.tobytes()
    assert all(out is res[0] for out in res)  # one computation, shared


def test_all_reduce_results_are_readonly_and_do_not_alias_inputs():
    xs = operands(2)
    res = run_all(2, lambda c, r: c.all_reduce(r, xs[r], None, "add"))
    for r in range(2):
        assert not res[r].flags.writeable
        assert not np.shares_memory(res[r], xs[r])
    # A group of one returns its operand as a read-only view, without a copy
    # (the operand itself stays writeable) ...
    solo = run_all(1, lambda c, r: c.all_reduce(r, xs[0], [[0]]))[0]
    assert np.shares_memory(solo, xs[0]) and not solo.flags.writeable and xs[0].flags.writeable
    np.testing.assert_array_equal(solo, xs[0])
    # ... and a program's output never aliases its caller's input.
    import xtpu

    x = np.arange(6, dtype=np.float32)
    (out,) = xtpu.replicate(lambda v: xtpu.cross_replica_sum(v), [[x]])[0]
    assert not np.shares_memory(out, x)
    np.testing.assert_array_equal(out, x)


def test_all_reduce_integers_and_scalars():
    res = run_all(4, lambda c, r: c.all_reduce(r, np.int32(r + 1), [[0, 1, 2, 3]], "mul"))
    assert all(out.shape == () and out.dtype == np.int32 and out == 24 for out in res)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dim", [0, 1])
def test_all_gather(n, dim):
    xs = operands(n, shape=(2, 3))
    for groups in groups_for(n):
        res = run_all(n, lambda c, r: c.all_gather(r, xs[r], groups, dim))
        for r in range(n):
            g, _ = member(groups, r)
            np.testing.assert_array_equal(res[r], np.concatenate([xs[p] for p in g], axis=dim))


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("dim", [0, 1])
def test_reduce_scatter(n, dim):
    xs = operands(n, shape=(8, 8), dtype=np.float64)
    for groups in groups_for(n):
        res = run_all(n, lambda c, r: c.reduce_scatter(r, xs[r], groups, dim, "add"))
        for r in range(n):
            g, pos = member(groups, r)
            total = sum(xs[p] for p in sorted(g))
            np.testing.assert_array_equal(res[r], np.split(total, len(g), axis=dim)[pos])


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("split,concat", [(0, 0), (0, 1), (1, 0)])
def test_all_to_all(n, split, concat):
    xs = operands(n, shape=(8, 8))
    for groups in groups_for(n):
        res = run_all(n, lambda c, r: c.all_to_all(r, xs[r], groups, split, concat))
        for r in range(n):
            g, pos = member(groups, r)
            parts = [np.split(xs[p], len(g), axis=split)[pos] for p in g]
            np.testing.assert_array_equal(res[r], np.concatenate(parts, axis=concat))


@pytest.mark.parametrize("n", NS)
def test_collective_permute_ring(n):
    xs = operands(n)
    pairs = [[i, (i + 1) % n] for i in range(n)]
    res = run_all(n, lambda c, r: c.collective_permute(r, xs[r], pairs))
    for r in range(n):
        np.testing.assert_array_equal(res[r], xs[(r - 1) % n])
        # a copy between replicas; the one pair [0, 0] of n = 1 is its operand, read-only
        assert np.shares_memory(res[r], xs[(r - 1) % n]) == (n == 1) and not res[r].flags.writeable


def test_collective_permute_non_targets_get_zeros():
    xs = operands(4)
    res = run_all(4, lambda c, r: c.collective_permute(r, xs[r], [[0, 2], [2, 1]]))
    np.testing.assert_array_equal(res[1], xs[2])
    np.testing.assert_array_equal(res[2], xs[0])
    for r in (0, 3):  # 0 is only a source, 3 is in no pair
        np.testing.assert_array_equal(res[r], np.zeros_like(xs[r]))
        assert res[r].dtype == xs[r].dtype


def test_barrier():
    order = []

    def body(c, r):
        order.append(("before", r))
        c.barrier(r)
        order.append(("after", r))

    run_all(4, body)
    assert [k for k, _ in order[:4]] == ["before"] * 4


# -- reuse, independence ------------------------------------------------------------


def test_collectives_reusable_many_times_and_groups_independent():
    n, steps = 8, 60 * SCALE
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]

    def body(c, r):
        outs = []
        # the second group does fewer, different collectives: groups do not
        # wait for each other
        for i in range(steps if r < 4 else steps // 3):
            outs.append(float(c.all_reduce(r, np.float64(r * 1000 + i), groups)))
            outs.append(c.all_gather(r, np.array([r, i]), groups, 0).tolist())
        return outs

    res = run_all(n, body)
    for r in range(n):
        g = groups[r // 4]
        for i in range(steps if r < 4 else steps // 3):
            assert res[r][2 * i] == sum(p * 1000 + i for p in g)
            assert res[r][2 * i + 1] == [v for p in g for v in (p, i)]


# -- validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "groups, match",
    [
        ([[0, 1], [1, 2, 3]], r"participant 1 appears in groups \[0, 1\] and \[1, 2, 3\]"),
        ([[0, 1], [2, 5]], r"ids \[5\] out of range"),
        ([[0, 1], [2]], r"participants \[3\] are in no group"),
        ([[0, 1, 2, 3], []], r"group 1 is empty"),
    ],
)
def test_bad_replica_groups_raise_value_error(groups, match):
    comm = ThreadCommunicator(4, AbortSignal(), timeout=0.3)
    with pytest.raises(ValueError, match=match):
        comm.all_reduce(0, np.ones(2), groups)
    with pytest.raises(ValueError, match="must partition"):
        normalize_replica_groups(groups, 4)


def test_bad_dimensions_and_pairs_raise_value_error():
    comm = ThreadCommunicator(4, AbortSignal(), timeout=0.3)
    with pytest.raises(ValueError, match="does not divide evenly into 4 parts"):
        comm.reduce_scatter(0, np.ones((6,)), None, 0)
    with pytest.raises(ValueError, match="out of range for an operand of rank 1"):
        comm.all_gather(0, np.ones((6,)), None, 1)
    with pytest.raises(ValueError, match=r"targets \[1\] appear more than once"):
        comm.collective_permute(0, np.ones(2), [[0, 1], [2, 1]])
    with pytest.raises(ValueError, match="unknown reduction"):
        comm.all_reduce(0, np.ones(2), None, "avg")


def test_mismatched_shapes_name_replicas_and_shapes():
    def body(c, r):
        return c.all_reduce(r, np.ones((2, 3) if r != 1 else (3, 3), np.float32), None)

    with pytest.raises(XtpuRuntimeError, match=r"replica 1 has float32\[3, 3\]") as info:
        run_all(2, body)
    assert "replica 0 has float32[2, 3]" in str(info.value)


def test_different_collectives_are_reported():
    def body(c, r):
        if r == 0:
            return c.all_reduce(r, np.ones(2), None)
        return c.all_gather(r, np.ones(2), None, 0)

    with pytest.raises(XtpuRuntimeError, match="called different collectives"):
        run_all(2, body)


# -- timeouts and aborts ------------------------------------------------------------------


def test_missing_participant_times_out_naming_it():
    timeout = 0.3

    def body(c, r):
        if r in (2, 3):
            return None  # never arrives
        return c.all_reduce(r, np.ones(2), [[0, 1, 2, 3]])

    t0 = time.monotonic()
    with pytest.raises(RuntimeTimeoutError) as info:
        run_all(4, body, timeout=timeout)
    elapsed = time.monotonic() - t0
    assert elapsed < timeout + SLACK
    msg = str(info.value)
    assert "timed out after 0.3 s in ccl.all_reduce" in msg
    assert "replicas [2, 3] of group [0, 1, 2, 3] never arrived" in msg
    assert info.value.replica in (0, 1) and info.value.op == "ccl.all_reduce"


def test_every_waiting_participant_times_out():
    sig = AbortSignal()
    comm = ThreadCommunicator(3, sig, timeout=0.3)
    errors = []

    def wait(r):
        try:
            comm.all_gather(r, np.ones(1), None, 0)
        except RuntimeTimeoutError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wait, args=(r,)) for r in (0, 1)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert time.monotonic() - t0 < 0.3 + SLACK
    assert sorted(e.replica for e in errors) == [0, 1]
    assert all("replicas [2] of group [0, 1, 2] never arrived" in str(e) for e in errors)


def test_channel_timeout_names_key_and_replica():
    table = ChannelTable(AbortSignal(), timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(RuntimeTimeoutError) as info:
        table.recv("host_compute_channel_0_retvals", 1)
    assert time.monotonic() - t0 < 0.3 + SLACK
    assert str(info.value) == ("no message on channel 'host_compute_channel_0_retvals' for replica 1 after 0.3 s")
    assert info.value.replica == 1
    assert info.value.key == "host_compute_channel_0_retvals"
    # per-call timeout
    with pytest.raises(RuntimeTimeoutError, match="after 0.05 s"):
        table.recv("k", 0, timeout=0.05)


def _blocked(fn):
    """Run fn in a thread; return (thread, box) where box gets the outcome."""
    box = {}

    def target():
        t0 = time.monotonic()
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc
        box["elapsed"] = time.monotonic() - t0

    t = threading.Thread(target=target)
    t.start()
    return t, box


def test_abort_wakes_channel_and_collective_waiters_promptly():
    sig = AbortSignal()
    table = ChannelTable(sig, timeout=10.0)
    comm = ThreadCommunicator(3, sig, timeout=10.0)
    waiters = [
        _blocked(lambda: table.recv("k", 0)),
        _blocked(lambda: comm.all_reduce(0, np.ones(2), None)),
        _blocked(lambda: comm.collective_permute(1, np.ones(2), [[2, 1]])),
        _blocked(lambda: sig.wait(10.0)),
    ]
    time.sleep(0.1)
    boom = ValueError("boom")
    assert sig.abort(boom) and not sig.abort(ValueError("second"))
    for t, box in waiters:
        t.join(2)
        assert not t.is_alive()
        assert box["elapsed"] < SLACK  # woken by the abort, not by the 10 s timeout
    for _t, box in waiters[:3]:
        assert isinstance(box["error"], Aborted) and box["error"].reason is boom
    # after an abort every new wait fails at once too
    with pytest.raises(Aborted):
        table.recv("other", 3)
    with pytest.raises(Aborted):
        table.send("other", 3, (1,))
    # reset makes everything usable again
    sig.reset()
    table.reset()
    comm.reset()
    table.send("k", 0, (np.ones(1),))
    assert table.recv("k", 0)[0].tolist() == [1.0]


def test_reset_waits_for_the_wakers_of_the_abort_it_clears():
    """Issue 25: abort() sets the flag, then runs the wakers outside its
    lock; a waiter that polls the flag could end the run and the next run
    reset the signal while they ran, and a late waker then acted on the new
    run (a host worker parked for good: a 60 s collective timeout, or a
    collective's waiter of the new run woken with a spurious Aborted).
    reset() waits until the wakers of the abort it clears have run."""
    sig = AbortSignal()
    gate, events = threading.Event(), []

    def slow_waker():  # a waker the scheduler suspends
        gate.wait(10)
        events.append("waker")

    sig.add_waker(slow_waker)
    aborter = threading.Thread(target=sig.abort, args=(ValueError("boom"),))
    aborter.start()
    deadline = time.monotonic() + 5
    while not sig.is_set and time.monotonic() < deadline:  # a poller sees the flag before the wakers ran
        time.sleep(0.001)
    assert sig.is_set

    def next_run():
        sig.reset()
        events.append("reset")

    resetter = threading.Thread(target=next_run)
    resetter.start()
    resetter.join(0.3)
    assert resetter.is_alive() and events == []  # the reset waits for the waker
    gate.set()
    aborter.join(5)
    resetter.join(5)
    assert events == ["waker", "reset"]
    assert not sig.is_set and sig.exception is None


def test_reading_another_threads_frame_pauses_the_collector(monkeypatch):
    """Issue 25: in CPython 3.11 before 3.11.9 a collection inside
    sys._current_frames() can deadlock the process against a thread that
    ends (gh-106883); a fuzz worker froze so twice in 1,000 programs. The
    runtime reads frames (where a timed-out worker is stuck) with the
    collector paused, and switches it back on after."""
    import gc
    import sys

    from xtpu.runtime import gc_pause, host
    from xtpu.runtime import workers as workers_module

    enabled_during = []
    real = sys._current_frames

    def spy():
        enabled_during.append(gc.isenabled())
        return real()

    monkeypatch.setattr(sys, "_current_frames", spy)
    started, release = threading.Event(), threading.Event()

    def parked():
        started.set()
        release.wait(10)

    t = threading.Thread(target=parked)
    t.start()
    started.wait(5)
    try:
        assert gc.isenabled()
        frame = gc_pause.thread_frame(t.ident)
        assert frame is not None and frame.f_code.co_name in ("wait", "parked")
        assert gc_pause.thread_frame(None) is None
        # the runtime's readers go through it: a worker's current op, a run's overall timeout
        assert workers_module.thread_frame is gc_pause.thread_frame and host.thread_frame is gc_pause.thread_frame
        assert enabled_during == [False] and gc.isenabled()
        gc.disable()  # a program that disabled the collector keeps it disabled
        try:
            gc_pause.thread_frame(t.ident)
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        release.set()
        t.join(5)


# -- channels ---------------------------------------------------------------------------------


def test_channel_fifo_per_key_and_replica():
    table = ChannelTable(AbortSignal(), timeout=1.0)
    for i in range(3):
        table.send("a", 0, (i,))
        table.send("a", 1, (10 + i,))
        table.send("b", 0, [20 + i])  # any sequence becomes a tuple
    assert [table.recv("a", 0) for _ in range(3)] == [(0,), (1,), (2,)]
    assert [table.recv("b", 0) for _ in range(3)] == [(20,), (21,), (22,)]
    assert [table.recv("a", 1) for _ in range(3)] == [(10,), (11,), (12,)]


def test_channel_recv_blocks_until_send_from_other_thread():
    table = ChannelTable(AbortSignal(), timeout=5.0)
    t, box = _blocked(lambda: table.recv("k", 2))
    time.sleep(0.05)
    table.send("k", 2, ("x", 1))
    t.join(2)
    assert box["result"] == ("x", 1)


def test_channel_close_drains_then_raises_closed():
    table = ChannelTable(AbortSignal(), timeout=5.0)
    table.send("k", 0, (1,))
    table.close("k", 0)
    assert table.recv("k", 0) == (1,)
    with pytest.raises(ChannelClosed):
        table.recv("k", 0)
    with pytest.raises(ChannelClosed):  # stays closed
        table.recv("k", 0)
    with pytest.raises(XtpuRuntimeError, match="send on closed channel 'k' for replica 0"):
        table.send("k", 0, (2,))
    # a host worker blocked in recv learns that the device side finished
    t, box = _blocked(lambda: table.recv("args", 1))
    time.sleep(0.05)
    table.close_all()
    t.join(2)
    assert isinstance(box["error"], ChannelClosed) and box["elapsed"] < SLACK
    with pytest.raises(ChannelClosed):  # channels first used after close_all
        table.recv("never_used", 5)
    assert not issubclass(ChannelClosed, XtpuRuntimeError)


# -- run_workers -----------------------------------------------------------------------------------


def test_run_workers_returns_results_in_order_and_reuses_threads():
    sig = AbortSignal()
    tasks = [(f"t{i}", (lambda i=i: i * i)) for i in range(16)]
    assert run_workers(tasks, sig) == [i * i for i in range(16)]
    before = pool_size()
    for _ in range(50 * SCALE):
        run_workers(tasks, sig)
    assert pool_size() <= before + 4
    assert run_workers([], sig) == []


def test_run_workers_wraps_first_error_and_wakes_blocked_tasks():
    sig = AbortSignal()
    comm = ThreadCommunicator(4, sig, timeout=30.0)

    def failing():
        time.sleep(0.05)
        raise ValueError("boom")

    tasks = [("device replica 0", failing)] + [
        (f"device replica {r}", (lambda r=r: comm.all_reduce(r, np.ones(2), None))) for r in (1, 2, 3)
    ]
    t0 = time.monotonic()
    with pytest.raises(XtpuRuntimeError, match=r"^device replica 0: ValueError: boom$") as info:
        run_workers(tasks, sig)
    assert time.monotonic() - t0 < 0.05 + SLACK  # not the 30 s timeout
    assert isinstance(info.value.__cause__, ValueError)
    assert sig.is_set and isinstance(sig.exception, ValueError)
    with pytest.raises(Aborted):  # must be reset before the next run
        run_workers(tasks, sig)


def test_run_workers_keeps_xtpu_errors_and_reports_the_first():
    sig = AbortSignal()
    table = ChannelTable(sig, timeout=30.0)

    def first():
        raise HostComputeError("bad host value", cluster="0", replica=0)

    def second():
        table.recv("never", 0)  # woken by the abort: its Aborted is discarded

    with pytest.raises(HostComputeError, match="bad host value"):
        run_workers([("host", first), ("device", second)], sig)


def test_run_workers_hands_off_when_a_task_blocks():
    # Task 0 waits for task 1 through a channel; with a single runner thread
    # task 1 only starts because recv hands the pending tasks to a new runner.
    sig = AbortSignal()
    table = ChannelTable(sig, timeout=5.0)
    tasks = [
        ("consumer", lambda: table.recv("k", 0)[0]),
        ("producer", lambda: table.send("k", 0, (42,))),
    ]
    assert run_workers(tasks, sig, eager_threads=1) == [42, None]
    # the same through a collective, 8 participants, one runner at the start
    res = run_all(8, lambda c, r: float(c.all_reduce(r, np.float64(r), None)), eager_threads=1)
    assert res == [28.0] * 8


def test_run_workers_overall_timeout_names_unfinished_tasks():
    sig = AbortSignal()
    tasks = [("sleepy", lambda: sig.wait(10.0)), ("quick", lambda: None)]
    with pytest.raises(RuntimeTimeoutError, match="unfinished workers: 'sleepy'"):
        run_workers(tasks, sig, timeout=0.2)


def test_run_workers_abandons_a_task_that_ignores_the_abort():
    # Host code blocked outside any channel cannot be woken: past the
    # overall timeout the call raises, describing where the task is, and
    # the task, when it ends, neither aborts nor runs anything of a later call.
    sig = AbortSignal()
    release = threading.Event()

    def stuck():
        release.wait(10.0)
        raise ValueError("late")

    def describe(index, frame):
        where = []
        while frame is not None:
            where.append(frame.f_code.co_name)
            frame = frame.f_back
        return {"replica": index, "op": "stuck" if "stuck" in where else None}

    start = time.monotonic()
    with pytest.raises(RuntimeTimeoutError, match="unfinished workers: 'a'") as info:
        run_workers(
            [("a", stuck), ("b", lambda: None), ("c", lambda: None)],
            sig,
            timeout=0.2,
            abort_grace=0.1,
            eager_threads=1,
            describe=describe,
        )
    assert time.monotonic() - start < 0.2 + 0.1 + SLACK
    assert (info.value.replica, info.value.op) == (0, "stuck")
    sig.reset()
    release.set()  # the abandoned task raises now
    deadline = time.monotonic() + 2
    while "a" in {t.name for t in threading.enumerate()} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not sig.is_set
    assert run_workers([("d", lambda: 4)], sig) == [4]


def test_will_block_outside_run_workers_is_a_noop(monkeypatch):
    """Outside run_workers there is no call whose tasks could wait: will_block
    starts no runner (issue 25: the test used to assert nothing)."""
    from xtpu.runtime import workers

    started = []
    monkeypatch.setattr(workers, "_start", lambda job: started.append(job))
    threads, spawned = threading.active_count(), pool_size()
    will_block()
    will_block()
    assert started == [] and pool_size() == spawned and threading.active_count() == threads

    # The same call inside a task with a task still pending does start a runner
    # (so the check above is the one that can fail).
    sig = AbortSignal()
    monkeypatch.undo()
    gate = threading.Event()

    def first():
        monkeypatch.setattr(workers, "_start", lambda job: (started.append(job), gate.set()))
        will_block()
        monkeypatch.undo()
        return 1

    run_workers([("a", first), ("b", lambda: 2)], sig, eager_threads=1)
    assert started and gate.is_set()


# -- MPI -----------------------------------------------------------------------------------------


def test_mpi_communicator_single_process():
    pytest.importorskip("mpi4py")
    comm = MPICommunicator(timeout=5.0)
    r, n = comm.rank, comm.num_participants
    x = np.full((n, 2), float(r + 1))
    total = comm.all_reduce(r, x, None, "add")
    np.testing.assert_array_equal(total, np.full((n, 2), n * (n + 1) / 2))
    np.testing.assert_array_equal(comm.all_gather(r, x[:1], None, 0)[:, 0], np.arange(1, n + 1))
    assert comm.reduce_scatter(r, x, None, 0).shape == (1, 2)
    assert comm.all_to_all(r, x, None, 0, 0).shape == x.shape
    pairs = [[i, (i + 1) % n] for i in range(n)]
    np.testing.assert_array_equal(comm.collective_permute(r, x, pairs), np.full((n, 2), float((r - 1) % n + 1)))
    comm.barrier(r)


def test_collective_permute_groups_meet_apart():
    # Pairs that connect participants {0, 1} and {2, 3} separately (the halo
    # exchange of two replicas' logical cores): 0 and 1 complete their
    # permute while 2 and 3 never call it (their replica took another branch).
    xs = operands(4)
    pairs = [[0, 1], [1, 0], [2, 3], [3, 2]]

    def body(c, r):
        return c.collective_permute(r, xs[r], pairs) if r < 2 else None

    res = run_all(4, body, timeout=2.0)
    np.testing.assert_array_equal(res[0], xs[1])
    np.testing.assert_array_equal(res[1], xs[0])


def test_halo_exchange_in_a_branch_some_replicas_skip():
    # Found by the fuzzer (seed 25): the halo permute of a split value inside
    # an xtpu.cond at 4 replicas x 2 logical cores waited for (or met) the
    # replicas that took the other branch.
    import xtpu

    def comp(x):
        s = xtpu.split_to_logical_devices(x, [2, 1])
        return xtpu.cond(xtpu.math.reduce_sum(x) > 0.0, lambda: s[1:5] + s[0:4], lambda: s[0:4] * 3.0)

    ins = [[np.arange(16, dtype=np.float32).reshape(8, 2) * (-1.0) ** r] for r in range(4)]
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=4)
    out = xtpu.replicate(comp, ins, device_assignment=da)
    for r, (x,) in enumerate(ins):
        want = x[1:5] + x[0:4] if x.sum() > 0 else x[0:4] * 3.0
        np.testing.assert_array_equal(out[r][0], want)
