"""A device worker runs a short host function itself when it waits for the
answer before the host worker took the request (runtime/host.py,
HostWorker.serve_waiting / runs_inline): which functions qualify, where they
run (told by xtpu.profiler's tracks), and that values, errors and aborts are
those of the host worker."""

import glob
import json
import os
import time

import numpy as np
import pytest

import xtpu
from xtpu.runtime.errors import HostComputeError
from xtpu.runtime.host import INLINE_BYTES, runs_inline


def host_plans(compiled):
    return [w.plan.block for w in compiled.executable.host_workers]


def small_math(x):
    return xtpu.outside_compilation(lambda v: xtpu.math.tanh(v * 3.0) + 1.0, x * 2.0) * 2.0


def to_number(x):
    return (
        xtpu.outside_compilation(
            lambda v: xtpu.strings.to_number(xtpu.strings.format("{}", v), out_type=xtpu.float32), x * 2.0
        )
        * 2.0
    )


def host_cond(x):
    return xtpu.outside_compilation(lambda v: xtpu.cond(v > 0.0, lambda: v + 1.0, lambda: v - 1.0), x * 2.0) * 2.0


def big_matmul(x):
    return xtpu.outside_compilation(lambda v: v @ v, x * 2.0) * 2.0


def two_clusters(x):
    # Each cluster takes a device value (a + 1.0, a - 1.0): one that needs
    # none would join the cluster it reads from.
    a = xtpu.outside_compilation(lambda v: v * 3.0, x * 2.0)
    s = xtpu.outside_compilation(lambda v: xtpu.strings.format("{}", v), a + 1.0)  # stays on the host
    return xtpu.outside_compilation(lambda v, t: xtpu.strings.to_number(t) + v, a - 1.0, s) * 2.0


@pytest.mark.parametrize(
    "fn, x, inline",
    [
        (small_math, np.float32(1), [True]),
        (to_number, np.float32(1), [False]),  # strings: host-only ops
        (host_cond, np.float32(1), [False]),  # a region: may loop
        (big_matmul, np.ones((129, 129), np.float32), [False]),  # values of 65 KB
        (big_matmul, np.ones((128, 128), np.float32), [True]),  # 64 KB
    ],
)
def test_which_host_functions_run_inline(fn, x, inline):
    assert 128 * 128 * 4 <= INLINE_BYTES < 129 * 129 * 4
    compiled = xtpu.lower(fn, [[x]]).compile()
    assert [runs_inline(b) for b in host_plans(compiled)] == inline


def test_a_wait_for_another_clusters_value_keeps_the_function_on_its_worker():
    compiled = xtpu.lower(two_clusters, [[np.float32(1)]]).compile()
    blocks = host_plans(compiled)
    assert len(blocks) == 3
    # the first is plain math; the second formats a string; the third waits
    # on the second's host-to-host channel
    assert [runs_inline(b) for b in blocks] == [True, False, False]
    out = compiled(
        [
            [np.float32(1)],
        ]
    )
    assert float(out[0][0]) == 24.0  # a = 6, "7" -> 7, (7 + 5) * 2


def trace_of(tmp_path, fn, inputs):
    with xtpu.profiler.trace(str(tmp_path)):
        out = xtpu.replicate(lambda x: fn(x), inputs)
    (path,) = glob.glob(os.path.join(str(tmp_path), "*.trace.json"))
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in events if e["ph"] == "X"]
    return out, names, spans


@pytest.mark.parametrize(
    "fn, host_op, inline", [(small_math, "hlo.tanh", True), (to_number, "hlo.string_to_number", False)]
)
def test_where_the_host_function_ran(tmp_path, fn, host_op, inline):
    inputs = [[np.float32(r + 1)] for r in range(2)]
    out, names, spans = trace_of(tmp_path, fn, inputs)
    want = [fn_eager(fn, x[0]) for x in inputs]
    np.testing.assert_allclose([float(o[0]) for o in out], want, rtol=1e-6)
    # The host function's op (recorded before its answer is sent: a host
    # worker's plan span may end after the trace stopped).
    ops = [s for s in spans if s["cat"] == "op" and s["name"] == host_op]
    assert len(ops) == 2  # one per replica
    devices = [s for s in spans if s["cat"] == "plan" and s["name"].startswith("device replica ")]
    for op in ops:
        track = names[op["tid"]]
        if inline:  # inside a device worker's span, on its track
            assert any(
                d["tid"] == op["tid"] and d["ts"] <= op["ts"] and op["ts"] + op["dur"] <= d["ts"] + d["dur"] + 1
                for d in devices
            ), track
        else:
            assert track.startswith("xtpu-host-0-replica-"), track
    if not inline:
        assert sorted(names[op["tid"]] for op in ops) == ["xtpu-host-0-replica-0", "xtpu-host-0-replica-1"]


def fn_eager(fn, x):
    """The same math in numpy (the host functions above, run eagerly)."""
    if fn is small_math:
        return float((np.tanh(np.float32(x) * 2 * 3) + 1) * 2)
    return float(np.float32(x) * 2 * 2)


def test_an_error_in_another_replicas_host_function_aborts_one_that_serves_inline():
    def step(x):
        a = xtpu.outside_compilation(lambda v: v + 1.0, x * 2.0)  # inline
        b = xtpu.outside_compilation(
            lambda v: xtpu.strings.to_number(xtpu.strings.format("{}", v), out_type=xtpu.int32), a - 1.0
        )  # a device value: a cluster that needs none would join the one it reads from
        return xtpu.cross_replica_sum(b * 2)

    compiled = xtpu.lower(step, [[np.float32(1)], [np.float32(2)]]).compile(timeout=30)
    assert [runs_inline(b) for b in host_plans(compiled)][0] is True
    assert [int(o[0]) for o in compiled([[np.float32(1)], [np.float32(2)]])] == [12, 12]  # (2 + 4) * 2
    start = time.monotonic()
    with pytest.raises(HostComputeError) as info:
        compiled([[np.float32(1)], [np.float32(1.25)]])  # 2.5 is no int32
    assert time.monotonic() - start < 5  # aborted at once, not after the 30 s timeout
    assert info.value.replica == 1 and info.value.op == "hlo.string_to_number"
    for _ in range(3):  # and the program goes on serving, inline and not
        assert [int(o[0]) for o in compiled([[np.float32(2)], [np.float32(3)]])] == [20, 20]  # (4 + 6) * 2


def test_a_quiet_request_wakes_its_worker_when_its_answer_is_awaited():
    """ChannelTable.quiet_requests: a send wakes no one while the worker
    reading the request sends the awaited answer; the wait for the answer
    wakes it (here the worker cannot serve inline: serve_waiting is False)."""
    import threading

    from xtpu.runtime.channels import ChannelTable
    from xtpu.runtime.workers import AbortSignal

    table = ChannelTable(AbortSignal(), timeout=5.0)

    class Worker:  # reads "c_args", answers on "c_retvals"; a device may serve it
        key = "c_args"
        serves_inline = True

        def serve_waiting(self):
            return False

    table.set_server("c_retvals", 0, Worker())
    table.quiet_requests("c_args", 0, "c_retvals")
    box = {}

    def worker():
        box["request"] = table.recv("c_args", 0)
        box["at"] = time.monotonic()
        table.send("c_retvals", 0, ("answer",))

    t = threading.Thread(target=worker)
    t.start()
    time.sleep(0.05)  # the worker waits
    sent = time.monotonic()
    table.send("c_args", 0, ("request",))
    time.sleep(0.2)
    assert "request" not in box  # not woken by the quiet send
    assert table.recv("c_retvals", 0) == ("answer",)  # the wait for the answer woke it
    t.join(5)
    assert box["request"] == ("request",) and box["at"] - sent >= 0.2
    # a sender that does not wait for the answer makes every send wake
    table.quiet_requests("c_args", 0, None)
    t = threading.Thread(target=worker)
    box.clear()
    t.start()
    time.sleep(0.05)
    table.send("c_args", 0, ("again",))
    t.join(5)
    assert box["request"] == ("again",)
    assert table.recv("c_retvals", 0) == ("answer",)


def test_a_keyboard_interrupt_in_an_inline_host_function_reaches_the_caller():
    compiled = xtpu.lower(small_math, [[np.float32(1)]]).compile(timeout=30)
    (w,) = compiled.executable.host_workers
    assert runs_inline(w.plan.block)
    i = next(i for i, op in enumerate(w.plan.ops) if op.name == "hlo.tanh")
    kernels = w.kernels

    def interrupted(*args):
        raise KeyboardInterrupt

    w.kernels = kernels[:i] + (interrupted,) + kernels[i + 1 :]
    with pytest.raises(KeyboardInterrupt):
        compiled([[np.float32(1)]])
    w.kernels = kernels
    assert float(compiled([[np.float32(1)]])[0][0]) == pytest.approx(fn_eager(small_math, 1.0))


def tail_math(x):  # the cluster's answer is the step's output: a tail host replicate
    return xtpu.outside_compilation(lambda v: xtpu.math.tanh(v * 3.0) + 1.0, x * 2.0)


def tail_strings(x):
    return xtpu.outside_compilation(
        lambda v: xtpu.strings.to_number(xtpu.strings.format("{}", v), out_type=xtpu.float32) + 1.0, x * 2.0
    )


def _wrap_host_replicate_kernel(compiled, op_name, wrap):
    """Replace ``op_name``'s kernel in every replica of the program's one
    host replicate by ``wrap(replica, kernel)``; returns the restore."""
    ((plan, ks),) = compiled.executable.host_replicates.values()
    i = next(i for i, op in enumerate(plan.ops) if op.name == op_name)
    saved = list(ks)
    for r, kernels in enumerate(ks):
        ks[r] = kernels[:i] + (wrap(r, kernels[i]),) + kernels[i + 1 :]
    return plan, saved, ks


@pytest.mark.parametrize("fn, op_name, inline", [(tail_math, "hlo.tanh", True), (tail_strings, "hlo.add", False)])
def test_a_tail_host_replicate_that_cannot_block_runs_on_the_calling_thread(fn, op_name, inline):
    import threading

    inputs = [[np.float32(r + 1)] for r in range(3)]
    compiled = xtpu.lower(fn, inputs).compile(timeout=30)
    ((plan, _),) = compiled.executable.host_replicates.values()
    assert runs_inline(plan.block) is inline
    threads = {}

    def record(r, kernel):
        def run(*args):
            threads[r] = threading.get_ident()
            return kernel(*args)

        return run

    _wrap_host_replicate_kernel(compiled, op_name, record)
    out = compiled(inputs)
    want = [np.tanh(np.float32(2 * x[0] * 3)) + 1 if fn is tail_math else 2 * x[0] + 1 for x in inputs]
    np.testing.assert_allclose([float(o[0]) for o in out], want, rtol=1e-6)
    assert sorted(threads) == [0, 1, 2]
    me = threading.get_ident()
    if inline:  # no thread hand-off: every replica on the caller's thread
        assert set(threads.values()) == {me}
    else:  # pool threads, under the executable's timeout
        assert me not in threads.values()


@pytest.mark.parametrize("fn, op_name", [(tail_math, "hlo.tanh"), (tail_strings, "hlo.add")])
def test_an_error_in_a_tail_host_replicate_names_the_replica_inline_or_not(fn, op_name):
    inputs = [[np.float32(r + 1)] for r in range(2)]
    compiled = xtpu.lower(fn, inputs).compile(timeout=30)

    def failing(r, kernel):
        def run(*args):
            if r == 1:
                raise FloatingPointError("injected")
            return kernel(*args)

        return run

    _, saved, ks = _wrap_host_replicate_kernel(compiled, op_name, failing)
    with pytest.raises(HostComputeError, match="FloatingPointError: injected") as info:
        compiled(inputs)
    assert info.value.replica == 1 and info.value.op == op_name
    ks[:] = saved  # the next run is whole
    want = [np.tanh(np.float32(2 * x[0] * 3)) + 1 if fn is tail_math else 2 * x[0] + 1 for x in inputs]
    np.testing.assert_allclose([float(o[0]) for o in compiled(inputs)], want, rtol=1e-6)
