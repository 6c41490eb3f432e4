"""The ways a step's replicas share threads (runtime/sequential.py) under
attack: uneven blocks, groups that span blocks, odd dtypes and sizes,
diverging loops, failures, the profiler, alternating modes and concurrent
callers.  Every mode must give the threads mode's values bit for bit (one
BLAS thread) and its errors."""

import glob
import json
import os
import threading

import numpy as np
import pytest
from xdsl.utils.exceptions import VerifyException

import xtpu
from xtpu.runtime import batching, blas_budget
from xtpu.runtime.errors import XtpuRuntimeError
from xtpu.runtime.executor import Executable

FALLBACKS = []  # the steps a sequential or blocks run handed to a thread per replica


@pytest.fixture(autouse=True)
def one_blas_thread(monkeypatch):
    blas_budget.set_intra_op_parallelism_threads(1)
    run_threads = Executable._run_threads
    run_grouped = Executable._run_grouped
    inside = threading.local()

    def grouped(self, *a):
        inside.on = True
        try:
            return run_grouped(self, *a)
        finally:
            inside.on = False

    def threads(self, *a):
        if getattr(inside, "on", False):
            FALLBACKS.append(a)
        return run_threads(self, *a)

    monkeypatch.setattr(Executable, "_run_grouped", grouped)
    monkeypatch.setattr(Executable, "_run_threads", threads)
    FALLBACKS.clear()
    yield
    blas_budget.set_intra_op_parallelism_threads(0)
    xtpu.config.threading.set_inter_op_parallelism_threads(0)


def set_threads(n):
    xtpu.config.threading.set_inter_op_parallelism_threads(n)


def flat(outs):
    """Per replica, per output: a flat list of numpy arrays (None kept)."""
    got = []
    for per in outs:
        if per is None or isinstance(per, np.ndarray):
            got.append(per)
        else:
            got.extend(flat(per) if isinstance(per, (list, tuple)) else [np.asarray(per)])
    return got


def assert_bitwise(a, b):
    a, b = flat(a), flat(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if x is None or y is None:
            assert x is None and y is None
            continue
        x, y = np.asarray(x), np.asarray(y)
        assert (x.dtype, x.shape, x.flags.writeable) == (y.dtype, y.shape, y.flags.writeable)
        assert x.tobytes() == y.tobytes()


def kind_of(w, R):
    return "sequential" if w == 1 else "threads" if w >= R else "blocks"


def every_mode(c, inputs, widths=None, blocks=True, diverges=False):
    """Runs ``c`` with a thread per replica, then sequentially and on each
    of ``widths`` threads (blocks), asserting each equals the threads' run
    bit for bit and ran in its mode to the end (no rerun with a thread per
    replica, unless ``diverges``); returns the threads' run."""
    R = len(inputs)
    set_threads(R)
    assert c.executable.replica_execution[0] == "threads"
    want = c(inputs)
    for w in widths or [1] + [n for n in (2, 3) if n < R]:
        set_threads(w)
        expected = kind_of(w, R) if blocks or w == 1 else "threads"
        assert c.executable.replica_execution[0] == expected, (w, c.executable.replica_execution)
        FALLBACKS.clear()
        assert_bitwise(c(inputs), want)
        if expected != "threads" and c.executable.device_plan.ops:
            assert w in c.executable._grouped
            assert bool(FALLBACKS) == diverges, (w, "the step ran again with a thread per replica")
    return want


@pytest.mark.parametrize("R,w", [(3, 2), (5, 2), (7, 2), (8, 3)])
def test_uneven_blocks_equal_the_threads_and_numpy(R, w):
    rng = np.random.default_rng(R)
    inputs = [
        [rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)]
        for _ in range(R)
    ]

    def step(x, m):
        h = xtpu.math.tanh(x @ m)
        return xtpu.cross_replica_sum(h), h * 2.0

    c = xtpu.lower(step, inputs).compile()
    want = every_mode(c, inputs, widths=[w, 1])
    assert len(c.executable._grouped[w]) == w
    sizes = [len(b) for b, _, _ in c.executable._grouped[w]]
    assert sum(sizes) == R and max(sizes) - min(sizes) <= 1
    hs = [np.tanh(x @ m) for x, m in inputs]
    for r in range(R):
        np.testing.assert_allclose(want[r][0], sum(hs), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(want[r][1], hs[r] * 2.0, rtol=1e-6)


GROUPS = [[0, 5], [1, 4], [2, 7], [3, 6]]


def test_groups_and_pairs_that_span_blocks():
    R = 8
    rng = np.random.default_rng(1)
    inputs = [[rng.standard_normal((4, 2)).astype(np.float32)] for _ in range(R)]
    cycle, partial = [[0, 3], [3, 5], [5, 0]], [[1, 6], [7, 2]]

    def step(x):
        s = xtpu.cross_replica_sum(x, group_assignment=GROUPS)
        t = xtpu.all_to_all(x, concat_dimension=0, split_dimension=0, split_count=2, group_assignment=GROUPS)
        p = xtpu.collective_permute(x, cycle + partial)
        g = xtpu.collectives.all_gather(x, 0, R)  # ReplicaContext.all_gather's op
        return s, t, p, g

    c = xtpu.lower(step, inputs).compile()
    want = every_mode(c, inputs, widths=[1, 2, 3, 5])
    xs = [a[0] for a in inputs]
    partner = {a: b for g in GROUPS for a, b in (g, g[::-1])}
    source = {t: s for s, t in cycle + partial}
    for r in range(R):
        s, t, p, g = want[r]
        np.testing.assert_array_equal(s, xs[min(r, partner[r])] + xs[max(r, partner[r])])
        grp = next(g_ for g_ in GROUPS if r in g_)
        i = grp.index(r)
        np.testing.assert_array_equal(t, np.concatenate([xs[grp[0]][2 * i : 2 * i + 2], xs[grp[1]][2 * i : 2 * i + 2]]))
        np.testing.assert_array_equal(p, xs[source[r]] if r in source else np.zeros_like(xs[r]))
        np.testing.assert_array_equal(g, np.concatenate(xs))


def test_collectives_in_a_row_zero_size_operands_int_and_bool():
    R = 6
    inputs = [
        [
            np.arange(6, dtype=np.int32).reshape(3, 2) * (r + 1),
            np.zeros((0, 3), np.float32),
            np.array([r % 2 == 0, r % 3 == 0]),
        ]
        for r in range(R)
    ]

    def step(i, z, b):
        a = xtpu.cross_replica_sum(i)
        a = xtpu.cross_replica_sum(a * 2, group_assignment=[[0, 5], [1, 4], [2, 3]])
        a = xtpu.cross_replica_sum(a - 1)
        zs = xtpu.cross_replica_sum(z)
        zg = xtpu.collectives.all_gather(z, 1, R)
        zp = xtpu.collective_permute(z, [[0, 5], [5, 0], [2, 3]])
        zt = xtpu.all_to_all(
            z, concat_dimension=0, split_dimension=1, split_count=3, group_assignment=[[0, 2, 4], [1, 3, 5]]
        )
        bp = xtpu.collective_permute(b, [[r, (r + 2) % R] for r in range(R)])
        bg = xtpu.collectives.all_gather(b, 0, R)
        return a, zs, zg, bp, bg, zp, zt

    c = xtpu.lower(step, inputs).compile()
    want = every_mode(c, inputs)
    base = np.arange(6, dtype=np.int32).reshape(3, 2)
    total = base * 21
    for r in range(R):
        a, zs, zg, bp, bg, zp, zt = want[r]
        assert zp.shape == (0, 3) and zt.shape == (0, 1)
        assert a.dtype == np.int32 and bp.dtype == np.bool_ and bg.dtype == np.bool_
        second = [total * 2 * 2 for q in range(R)]
        np.testing.assert_array_equal(a, sum(s - 1 for s in second))
        assert zs.shape == (0, 3) and zg.shape == (0, 3 * R)
        np.testing.assert_array_equal(bp, inputs[(r - 2) % R][2])
        np.testing.assert_array_equal(bg, np.concatenate([x[2] for x in inputs]))


def test_programs_without_outputs_run_in_every_mode():
    inputs = [[np.float32(r)] for r in range(5)]
    c = xtpu.lower(lambda x: None, inputs).compile()
    assert every_mode(c, inputs) == [None] * 5
    d = xtpu.lower(lambda x: (xtpu.cross_replica_sum(x), x + 1.0, x * x), inputs).compile()
    want = every_mode(d, inputs)
    for r in range(5):
        np.testing.assert_array_equal(flat(want[r]), [np.float32(10.0), np.float32(r + 1), np.float32(r * r)])


def test_loops_whose_replicas_diverge_after_k_trips_fall_back_in_every_mode():
    # Replica r loops 1 + r // 2 times, each trip a sum over pairs that leave
    # the loop together; a sequential run sees the conditions differ after
    # the first trip and reruns with a thread per replica.  Blocks never run
    # a collective in a region.
    R = 6

    def step(v, n):
        def body(i, a):
            a = xtpu.cond(a[0] > 0.0, lambda: a * 1.5, lambda: a - 1.0)
            return i + 1, xtpu.cross_replica_sum(a, group_assignment=[[0, 1], [2, 3], [4, 5]])

        return xtpu.while_loop(lambda i, a: i < n, body, (0, v))[1]

    inputs = [[np.full(2, r + 1, np.float32), np.int32(1 + r // 2)] for r in range(R)]
    c = xtpu.lower(step, inputs).compile()
    want = every_mode(c, inputs, widths=[1, 2, 3, 4], blocks=False, diverges=True)
    for r in range(R):
        p = r // 2
        a = np.float32(2 * p + 1) * 1.5 + np.float32(2 * p + 2) * 1.5
        for _ in range(p):
            a = a * 1.5 * 2
        np.testing.assert_allclose(want[r][0], np.full(2, a, np.float32), rtol=1e-6)


def test_nested_loops_and_branches_with_collectives():
    R = 4

    def step(v):
        def inner(j, a):
            return j + 1, xtpu.cross_replica_sum(a) * 0.25

        def body(i, a):
            a = xtpu.while_loop(lambda j, b: j < i, inner, (0, a))[1]
            a = xtpu.cond(
                i % 2 == 0, lambda: xtpu.cross_replica_sum(a, group_assignment=[[0, 3], [1, 2]]), lambda: a + 1.0
            )
            return i + 1, a

        return xtpu.cond(v[0] > -100.0, lambda: xtpu.while_loop(lambda i, a: i < 3, body, (0, v))[1], lambda: v)

    inputs = [[np.array([r + 1.0, -r], np.float32)] for r in range(R)]
    c = xtpu.lower(step, inputs).compile()
    want = every_mode(c, inputs, blocks=False)
    a = [x[0].astype(np.float64) for x in inputs]
    for i in range(3):
        for _ in range(i):
            a = [sum(a) * 0.25 for _ in range(R)]
        a = [a[0] + a[3], a[1] + a[2], a[1] + a[2], a[0] + a[3]] if i % 2 == 0 else [x + 1.0 for x in a]
    for r in range(R):
        np.testing.assert_allclose(want[r][0], a[r], rtol=1e-6)


def failing_kernels(monkeypatch, exe, replica, error):
    original = Executable._device_kernel

    def failing(self, op, r, core=0):
        k = original(self, op, r, core)
        if op.name == "hlo.tanh" and r == replica:

            def boom(v):
                raise error

            return boom
        return k

    monkeypatch.setattr(Executable, "_device_kernel", failing)
    exe.device_kernels = [
        exe.device_plan.kernels(lambda op, r=r: exe._device_kernel(op, r)) for r in range(exe.num_replicas)
    ]
    exe._grouped = {}
    # Blocks replica by replica: a batched block runs one kernel for all its
    # replicas, so a failure of one replica's kernel cannot be injected
    # there (test_batching.py has a batched block's failure and rerun).
    exe._batchable = False
    return original


def restore(monkeypatch, exe, original):
    monkeypatch.setattr(Executable, "_device_kernel", original)
    exe.device_kernels = [
        exe.device_plan.kernels(lambda op, r=r: exe._device_kernel(op, r)) for r in range(exe.num_replicas)
    ]
    exe._grouped = {}


R5 = [[np.full(3, r, np.float32)] for r in range(5)]


def crs_tanh(x):
    return xtpu.cross_replica_sum(xtpu.math.tanh(x))  # the failing line


def test_a_failing_kernel_in_the_last_replica_of_a_block_names_it_in_every_mode(monkeypatch):
    c = xtpu.lower(crs_tanh, R5).compile()
    exe = c.executable
    original = failing_kernels(monkeypatch, exe, 4, FloatingPointError("replica 4 overflowed"))
    seen = []
    for w in (5, 1, 2, 3, 4):
        set_threads(w)
        with pytest.raises(XtpuRuntimeError) as info:
            c(R5)
        e = info.value
        assert (e.replica, e.op) == (4, "hlo.tanh") and "replica 4 overflowed" in str(e)
        seen.append(e.location)
    assert len(set(seen)) == 1 and "test_sequential_adversarial.py" in seen[0]
    restore(monkeypatch, exe, original)
    want = sum(np.tanh(x[0]) for x in R5)
    for w in (2, 1, 5, 3):  # the executable keeps working, in every mode
        set_threads(w)
        assert c.executable.replica_execution[0] == kind_of(w, 5)
        np.testing.assert_allclose(c(R5)[3][0], want, rtol=1e-6)


class Interrupt(BaseException):
    """A KeyboardInterrupt-like exception: not an Exception."""


@pytest.mark.parametrize("w", [1, 2, 5])
def test_base_exceptions_are_not_swallowed_by_the_fallback(monkeypatch, w):
    c = xtpu.lower(crs_tanh, R5).compile()
    exe = c.executable
    original = failing_kernels(monkeypatch, exe, 1, Interrupt("stop"))
    set_threads(w)
    calls = []
    run_threads = Executable._run_threads
    monkeypatch.setattr(Executable, "_run_threads", lambda self, *a: calls.append(a) or run_threads(self, *a))
    with pytest.raises(BaseException) as info:
        c(R5)
    assert type(info.value) is Interrupt, info.value  # as with a thread per replica: itself, unwrapped
    assert len(calls) == (w == 5)  # no rerun with a thread per replica
    restore(monkeypatch, exe, original)
    np.testing.assert_allclose(c(R5)[0][0], sum(np.tanh(x[0]) for x in R5), rtol=1e-6)


def load_trace(logdir):
    (path,) = glob.glob(os.path.join(logdir, "*.trace.json"))
    with open(path) as f:
        return json.load(f)["traceEvents"]


@pytest.mark.parametrize("w", [1, 2])
def test_the_profiler_has_a_span_per_op_per_replica_and_a_track_per_thread(tmp_path, w):
    R = 4

    def step(x):
        def body(i, v):
            return i + 1, xtpu.cross_replica_sum(xtpu.math.tanh(v)) * 0.25

        y = xtpu.math.exp(x)
        return xtpu.cross_replica_sum(y), xtpu.while_loop(lambda i, v: i < 3, body, (0, y))[1]

    inputs = [[np.full(2, r * 0.1, np.float32)] for r in range(R)]
    c = xtpu.lower(step, inputs).compile()
    set_threads(R)
    want = c(inputs)
    set_threads(w)
    with xtpu.profiler.trace(str(tmp_path)):
        got = c(inputs)
    assert_bitwise(got, want)
    events = load_trace(str(tmp_path))
    spans = [e for e in events if e["ph"] == "X"]
    ops = [e["name"] for e in spans if e["cat"] == "op"]
    # The while holds a collective: never blocks, so 2 threads means one each.
    kind = c.executable.replica_execution[0]
    assert kind == ("sequential" if w == 1 else "threads")
    assert ops.count("hlo.exponential") == R
    assert ops.count("hlo.tanh") == 3 * R  # inside the loop body, per trip per replica
    plans = [e for e in spans if e["cat"] == "plan" and e["name"] != "main"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {e["tid"] for e in spans} <= set(names)
    assert len({p["tid"] for p in plans}) == (1 if w == 1 else R)


@pytest.mark.parametrize("batched", [False, True])
def test_the_profiler_in_blocks_mode(tmp_path, monkeypatch, batched):
    R = 5
    inputs = [[np.full(2, r * 0.1, np.float32)] for r in range(R)]
    monkeypatch.setenv("XTPU_BATCH_REPLICAS", "1" if batched else "0")
    c = xtpu.lower(lambda x: xtpu.cross_replica_sum(xtpu.math.tanh(x)) * 2.0, inputs).compile()
    monkeypatch.setattr(batching, "CALL_SECONDS", 1.0)  # batched even so small a body
    set_threads(2)
    want = c(inputs)
    assert c.executable.replica_execution[0] == "blocks"
    with xtpu.profiler.trace(str(tmp_path)):
        got = c(inputs)
    assert_bitwise(got, want)
    events = load_trace(str(tmp_path))
    spans = [e for e in events if e["ph"] == "X"]
    ops = [e for e in spans if e["cat"] == "op" and e["name"] != "tpu.replicate"]  # @main's
    # A span per op per replica; batched, per op per block (its replicas at once).
    assert sum(e["name"] == "hlo.tanh" for e in ops) == (2 if batched else R)
    assert sum(e["name"] == "hlo.multiply" for e in ops) == (2 if batched else R)
    assert sum(e["name"] == "ccl.all_reduce" for e in ops) == 2  # one call per block
    plans = [e for e in spans if e["cat"] == "plan" and e["name"] != "main"]
    assert sorted(len(json.loads(p["name"].split("replicas ")[1])) for p in plans) == [2, 3]
    assert len({p["tid"] for p in plans}) == 2
    for o in ops:  # each op inside its block's plan span, on its track
        assert any(p["tid"] == o["tid"] and p["ts"] <= o["ts"] <= p["ts"] + p["dur"] + 1 for p in plans)


def test_alternating_modes_on_one_executable():
    R = 6
    rng = np.random.default_rng(6)
    inputs = [[rng.standard_normal((4, 4)).astype(np.float32)] for _ in range(R)]
    c = xtpu.lower(lambda x: xtpu.cross_replica_sum(x @ x, group_assignment=GROUPS[:2] + [[2, 3]]), inputs).compile()
    set_threads(R)
    want = c(inputs)
    for w in (1, 2, 6, 3, 1, 4, 2, 5, 0, 2, 1):
        set_threads(w)
        assert_bitwise(c(inputs), want)
    sq = [x[0] @ x[0] for x in inputs]
    np.testing.assert_allclose(want[5][0], sq[0] + sq[5], rtol=1e-5)


def test_two_python_threads_call_one_program_in_blocks_mode():
    R = 5
    c = xtpu.lower(lambda x: (xtpu.cross_replica_sum(x), x * 3.0), [[np.zeros(3, np.float32)]] * R).compile()
    set_threads(2)
    assert c.executable.replica_execution[0] == "blocks"
    errors, barrier = [], threading.Barrier(2)

    def caller(seed):
        try:
            barrier.wait()
            for k in range(20):
                inputs = [[np.full(3, seed * 100 + k * 10 + r, np.float32)] for r in range(R)]
                out = c(inputs)
                total = sum(x[0] for x in inputs)
                for r in range(R):
                    np.testing.assert_array_equal(out[r][0], total)
                    np.testing.assert_array_equal(out[r][1], inputs[r][0] * 3.0)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=caller, args=(s,)) for s in (1, 2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not any(t.is_alive() for t in ts)
    assert not errors, errors
    # Again while a third thread changes the mode between (and during) runs.
    done = threading.Event()

    def flipper():
        k = 0
        while not done.is_set():
            set_threads((1, 2, 3, 5)[k % 4])
            k += 1

    barrier.reset()
    ts = [threading.Thread(target=caller, args=(s,)) for s in (3, 4)]
    flip = threading.Thread(target=flipper)
    flip.start()
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    done.set()
    flip.join(5)
    assert not any(t.is_alive() for t in ts + [flip])
    assert not errors, errors
    assert 2 in c.executable._grouped  # which other modes ran depends on timing


def test_the_environment_variable_chooses_blocks(monkeypatch):
    R = 5
    inputs = [[np.full(2, r, np.float32)] for r in range(R)]
    c = xtpu.lower(lambda x: xtpu.cross_replica_sum(x) * 2.0, inputs).compile()
    set_threads(0)
    for env, kind, w in (("3", "blocks", 3), ("100", "threads", 5), ("1", "sequential", 1)):
        monkeypatch.setenv("XTPU_INTER_OP_THREADS", env)
        assert c.executable.replica_execution == (kind, f"inter-op parallelism threads = {env}")
        assert c.executable.replica_threads == w
        out = c(inputs)
        for r in range(R):
            np.testing.assert_array_equal(out[r][0], np.full(2, 20.0, np.float32))
    assert {1, 3} <= set(c.executable._grouped)


def test_a_loop_whose_replicas_diverge_into_a_collective_times_out_alike_in_every_mode(monkeypatch):
    # Replica 2 loops twice, the others once: its second all-reduce waits for
    # replicas that never come.  Every mode gives the threads' timeout, which
    # names the replica, the op and the missing replicas; the sequential run
    # sees the conditions differ and reruns with a thread per replica.
    def step(v, n):
        def body(i, a):
            return i + 1, xtpu.cross_replica_sum(a)

        return xtpu.while_loop(lambda i, a: i < n, body, (0, v))[1]

    inputs = [[np.float32(r), np.int32(1 + (r == 2))] for r in range(4)]
    c = xtpu.lower(step, inputs).compile(timeout=0.3)
    fallbacks = []
    run_threads = Executable._run_threads
    monkeypatch.setattr(Executable, "_run_threads", lambda self, *a: fallbacks.append(a) or run_threads(self, *a))
    messages = []
    for w in (4, 1, 2):
        set_threads(w)
        assert c.executable.replica_execution[0] == ("sequential" if w == 1 else "threads")
        with pytest.raises(XtpuRuntimeError, match="timed out") as info:
            c(inputs)
        assert (info.value.replica, info.value.op) == (2, "ccl.all_reduce")
        messages.append(str(info.value).replace("0.3 s", ""))
    assert len(fallbacks) == 3 and len(set(messages)) == 1, messages
    assert "replicas [0, 1, 3] of group [0, 1, 2, 3] never arrived" in messages[0]
    inputs = [[np.float32(r), np.int32(2)] for r in range(4)]
    for w in (1, 2, 4):  # still works, agreeing replicas run sequentially again
        set_threads(w)
        assert flat(c(inputs)) == [np.float32(24.0)] * 4


def test_collectives_in_a_loop_condition_and_branches_with_several_results():
    R = 4

    def step(v):
        def cond(i, a, b):
            return xtpu.reduce_sum(xtpu.cross_replica_sum(a)) < 200.0  # every replica's decision alike

        def body(i, a, b):
            a, b = xtpu.cond(
                i % 2 == 0, lambda: (xtpu.cross_replica_sum(a), b + 1), lambda: (a * 2.0, xtpu.cross_replica_sum(b))
            )
            return i + 1, a, b

        return xtpu.while_loop(cond, body, (0, v, xtpu.cast(v, xtpu.int32)))[1:]

    inputs = [[np.array([r + 1.0, 1.0], np.float32)] for r in range(R)]
    c = xtpu.lower(step, inputs).compile()
    want = every_mode(c, inputs, blocks=False)
    a, b = [x[0].astype(np.float64) for x in inputs], [x[0].astype(np.int32) for x in inputs]
    i = 0
    while sum(x.sum() for x in a) < 200.0:
        a, b = ([sum(a)] * R, [y + 1 for y in b]) if i % 2 == 0 else ([x * 2 for x in a], [sum(b)] * R)
        i += 1
    for r in range(R):
        np.testing.assert_array_equal(want[r][0], a[r].astype(np.float32))
        np.testing.assert_array_equal(want[r][1], b[r])


def test_a_kernel_failing_inside_a_loop_with_a_collective_names_its_replica_in_every_mode(monkeypatch):
    def step(x):
        def body(i, v):
            return i + 1, xtpu.cross_replica_sum(xtpu.math.tanh(v))  # the failing line

        return xtpu.while_loop(lambda i, v: i < 2, body, (0, x))[1]

    c = xtpu.lower(step, R5).compile()
    original = failing_kernels(monkeypatch, c.executable, 3, ZeroDivisionError("replica 3 divided"))
    for w in (5, 1, 2):
        set_threads(w)
        with pytest.raises(XtpuRuntimeError) as info:
            c(R5)
        assert (info.value.replica, info.value.op) == (3, "hlo.tanh") and "replica 3 divided" in str(info.value)
        assert "test_sequential_adversarial.py" in info.value.location
    restore(monkeypatch, c.executable, original)
    set_threads(1)
    s = sum(np.tanh(x[0]) for x in R5)
    np.testing.assert_allclose(c(R5)[4][0], 5 * np.tanh(s), rtol=1e-6)


def test_outputs_never_alias_the_inputs_in_any_mode():
    # A group of one returns its operand (a read-only view): the caller
    # still gets a fresh, writable array.
    R = 4
    inputs = [[np.full(3, r, np.float32)] for r in range(R)]
    c = xtpu.lower(lambda x: (xtpu.cross_replica_sum(x, group_assignment=[[r] for r in range(R)]),), inputs).compile()
    for w in (4, 1, 2):
        set_threads(w)
        out = c(inputs)
        for r in range(R):
            for o in out[r]:
                assert not np.shares_memory(o, inputs[r][0]) and o.flags.writeable
                np.testing.assert_array_equal(o, inputs[r][0])


def test_a_collective_the_runtime_rejects_fails_alike_in_every_mode():
    # ``and`` of floats parses; the verifier refuses it (issue 25: StableHLO's
    # and takes integers and booleans), so this module is run unverified: the
    # threads' communicator rejects it at run time, naming the replica; the
    # sequential and blocks modes build their kernel of it before running
    # and must give that same error.
    from xdsl.parser import Parser

    from xtpu.dialects import make_context

    module = Parser(
        make_context(),
        """
builtin.module {
  func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>, %c: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
    %r:3 = tpu.replicate([%a, %b, %c] as %x: tensor<2xf32>) {n = 3 : i64} {
      %s = ccl.all_reduce %x applies and groups = dense<[[0, 1, 2]]> : tensor<1x3xi64> : tensor<2xf32>
      tpu.yield %s : tensor<2xf32>
    }
    func.return %r#0, %r#1, %r#2 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
  }
}
""",
    ).parse_module()
    with pytest.raises(VerifyException, match="applies and to integer or boolean tensors only"):
        module.verify()
    exe = Executable(module, timeout=5)
    errors = []
    for w in (3, 1, 2, 1):
        set_threads(w)
        with pytest.raises(XtpuRuntimeError, match="ufunc 'bitwise_and' not supported") as info:
            exe.run([np.ones(2, np.float32)] * 3)
        errors.append((info.value.replica, info.value.op, str(info.value)))
    assert len(set(errors)) == 1 and errors[0][1] == "ccl.all_reduce" and errors[0][0] in (0, 1, 2), errors


def test_gather_and_scatter_over_groups_that_span_blocks_in_ir():
    from xdsl.parser import Parser

    from xtpu.dialects import make_context

    R, G = 8, "dense<[[0, 5], [1, 4], [2, 7], [3, 6]]> : tensor<4x2xi64>"
    args = ", ".join(f"%a{r}: tensor<4x2xf32>" for r in range(R))
    types = lambda t: ", ".join([t] * R)  # noqa: E731
    module = Parser(
        make_context(),
        f"""
builtin.module {{
  func.func @main({args}) -> ({types("tensor<8x2xf32>")}, {types("tensor<2x2xf32>")}, {types("tensor<4x2xf32>")}) {{
    %r:24 = tpu.replicate([{", ".join(f"%a{r}" for r in range(R))}] as %x: tensor<4x2xf32>) {{n = 8 : i64}} {{
      %g = ccl.all_gather %x dim = 0 groups = {G} : (tensor<4x2xf32>) -> tensor<8x2xf32>
      %s = ccl.reduce_scatter %x applies min dim = 0 groups = {G} : (tensor<4x2xf32>) -> tensor<2x2xf32>
      %m = ccl.all_reduce %x applies max groups = {G} : tensor<4x2xf32>
      tpu.yield %g, %s, %m : tensor<8x2xf32>, tensor<2x2xf32>, tensor<4x2xf32>
    }}
    func.return {", ".join(f"%r#{i}" for i in range(3 * R))} : {types("tensor<8x2xf32>")}, {types("tensor<2x2xf32>")}, {types("tensor<4x2xf32>")}
  }}
}}
""",
    ).parse_module()
    module.verify()
    exe = Executable(module, timeout=5)
    rng = np.random.default_rng(8)
    xs = [rng.standard_normal((4, 2)).astype(np.float32) for _ in range(R)]
    set_threads(R)
    want = exe.run(xs)
    for w in (1, 2, 3, 5):
        set_threads(w)
        assert exe.replica_execution[0] == kind_of(w, R)
        assert_bitwise(exe.run(xs), want)
    for group in GROUPS:
        lo, hi = group
        for i, r in enumerate(group):
            np.testing.assert_array_equal(want[r], np.concatenate([xs[lo], xs[hi]]))
            np.testing.assert_array_equal(want[R + r], np.minimum(xs[lo], xs[hi])[2 * i : 2 * i + 2])
            np.testing.assert_array_equal(want[2 * R + r], np.maximum(xs[lo], xs[hi]))


def test_replica_ids_in_blocks_are_each_replicas_own():
    R = 7
    inputs = [[np.float32(10 * r)] for r in range(R)]

    def step(x):
        rid = xtpu.replica_id()
        return rid, xtpu.collective_permute(x + xtpu.cast(rid, xtpu.float32), [[r, (r + 3) % R] for r in range(R)])

    c = xtpu.lower(step, inputs).compile()
    want = every_mode(c, inputs, widths=[1, 2, 3, 4])
    for r in range(R):
        assert int(want[r][0]) == r
        s = (r - 3) % R
        assert float(want[r][1]) == 10 * s + s


def test_replica_context_all_gather_and_all_reduce_under_a_strategy_in_every_mode():
    R = 5
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(R)]
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=R))

    def step(x):
        ctx = xtpu.get_replica_context()
        return ctx.all_gather(x, 1), ctx.all_reduce("SUM", x * x)

    runs = {}
    for w in (R, 1, 2, 3):
        set_threads(w)
        gathered, total = strategy.run(step, args=(xtpu.PerReplica(xs),))
        runs[w] = [np.asarray(v) for v in strategy.experimental_local_results(gathered)] + [
            np.asarray(v) for v in strategy.experimental_local_results(total)
        ]
    assert not FALLBACKS
    for w in (1, 2, 3):
        assert_bitwise(runs[w], runs[R])
    for r in range(R):
        np.testing.assert_array_equal(runs[R][r], np.concatenate(xs, 1))
        np.testing.assert_allclose(runs[R][R + r], sum(x * x for x in xs), rtol=1e-6)


def test_loops_without_collectives_run_per_replica_in_blocks_with_different_trip_counts():
    R = 5

    def step(v, n):
        i, a = xtpu.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, xtpu.math.tanh(a) + 1.0), (0, v))
        b = xtpu.cond(i > 2, lambda: a * 2.0, lambda: a - 2.0)
        return i, xtpu.cross_replica_sum(b)

    inputs = [[np.full(3, r * 0.5, np.float32), np.int32(r)] for r in range(R)]
    c = xtpu.lower(step, inputs).compile()
    want = every_mode(c, inputs)  # blocks too: no collective sits in a region
    bs = []
    for v, n in inputs:
        a = v
        for _ in range(n):
            a = np.tanh(a) + np.float32(1.0)
        bs.append(a * 2 if n > 2 else a - 2)
    for r in range(R):
        assert int(want[r][0]) == r
        np.testing.assert_allclose(want[r][1], sum(bs), rtol=1e-5)


def test_read_only_broadcast_and_strided_inputs_in_every_mode():
    R = 5
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    inputs = [
        [np.broadcast_to(np.float32(r), (4, 3)), base[:, ::2] * (r + 1), np.asfortranarray(base[:, :3])]
        for r in range(R)
    ]

    def step(a, b, f):
        s = xtpu.cross_replica_sum(a)
        g = xtpu.collective_permute(b, [[r, (r + 1) % R] for r in range(R)])
        return s + f, g

    c = xtpu.lower(step, inputs).compile()
    want = every_mode(c, inputs)
    for r in range(R):
        np.testing.assert_array_equal(want[r][0], np.full((4, 3), sum(range(R)), np.float32) + base[:, :3])
        np.testing.assert_array_equal(want[r][1], base[:, ::2] * ((r - 1) % R + 1))
    for x in inputs:  # the inputs are unchanged
        np.testing.assert_array_equal(x[2], base[:, :3])


def test_the_rerun_of_a_diverged_step_gives_blas_the_threads_modes_threads(monkeypatch):
    # Without a BLAS setting the threads mode gives each of the R threads
    # budget // R BLAS threads; the rerun of a diverged sequential step runs
    # R threads too and must do the same (the same bits, no oversubscription).
    blas_budget.set_intra_op_parallelism_threads(0)
    monkeypatch.setattr(blas_budget, "cores", lambda: 4)
    seen = []
    limit = blas_budget.limit
    monkeypatch.setattr(
        blas_budget, "limit", lambda workers, split=False: seen.append(workers) or limit(workers, split)
    )

    def step(v, n):
        def body(i, a):
            return i + 1, xtpu.cross_replica_sum(a, group_assignment=[[0, 1], [2, 3]])

        # A matmul: a program that calls no BLAS leaves BLAS's count alone.
        v = xtpu.reshape(xtpu.matmul(xtpu.reshape(v, [1, 1]), np.full((1, 1), 2.0, np.float32)), [])
        return xtpu.while_loop(lambda i, a: i < n, body, (0, v))[1]

    inputs = [[np.float32(r), np.int32(1 + r // 2)] for r in range(4)]
    c = xtpu.lower(step, inputs).compile()
    assert c.executable._blas
    set_threads(4)
    want = c(inputs)
    set_threads(1)
    del seen[:]
    assert_bitwise(c(inputs), want)
    assert len(FALLBACKS) == 1 and seen == [1, 4], seen  # the sequential try, then a thread per replica
    assert blas_budget.threads_per_worker(4) == 1


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_a_program_returning_its_input_gives_a_copy_in_every_mode(threads):
    # An output is a value: writing into it leaves the caller's input alone.
    xs = [[np.arange(6, dtype=np.float32).reshape(2, 3) + r] for r in range(4)]
    c = xtpu.lower(lambda x: x, xs).compile()
    xtpu.config.threading.set_inter_op_parallelism_threads(threads)
    try:
        out = c(xs)
    finally:
        xtpu.config.threading.set_inter_op_parallelism_threads(0)
    for r in range(4):
        got = out[r][0] if isinstance(out[r], (list, tuple)) else out[r]
        assert got is not xs[r][0] and not np.shares_memory(got, xs[r][0])
        np.testing.assert_array_equal(got, np.arange(6, dtype=np.float32).reshape(2, 3) + r)
