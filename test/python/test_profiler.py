"""xtpu.profiler: Chrome trace-event JSON of compiles and runs
(runtime/profiler.py), checked against what the program runs."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import xtpu
from xtpu.runtime.errors import HostComputeError


def host(v):
    return v + 1.0


def step(x):
    y = xtpu.math.tanh(x @ x)
    return xtpu.cross_replica_sum(xtpu.outside_compilation(host, y))


XS = [[np.eye(4, dtype=np.float32) * (r + 1)] for r in range(2)]


def load(logdir):
    (path,) = glob.glob(os.path.join(logdir, "*.trace.json"))
    with open(path) as f:
        return json.load(f)["traceEvents"]


def test_trace_has_a_span_per_plan_run_op_and_pass_and_a_track_per_thread(tmp_path):
    want = xtpu.replicate(step, XS)
    with xtpu.profiler.trace(str(tmp_path)):
        assert xtpu.profiler.is_tracing()
        got = xtpu.replicate(lambda x: step(x), XS)  # a new computation: traced and compiled here
    assert not xtpu.profiler.is_tracing()
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a[0], b[0])
    events = load(tmp_path)
    spans = [e for e in events if e["ph"] == "X"]
    plans = sorted(e["name"] for e in spans if e["cat"] == "plan")
    assert plans == ["device replica 0", "device replica 1", "host_0 replica 0", "host_0 replica 1", "main"]
    ops = [e for e in spans if e["cat"] == "op"]
    for name in ("hlo.dot_general", "hlo.tanh", "ccl.all_reduce", "tpu.recv_from_host"):
        assert sum(e["name"] == name for e in ops) == 2, name  # one per replica
    assert sum(e["name"] == "hlo.add" for e in ops) >= 2  # the host clusters' v + 1.0
    dots = [e for e in ops if e["name"] == "hlo.dot_general"]
    assert all(e["args"]["location"].startswith("test_profiler.py:") for e in dots)
    compiled = {e["name"] for e in spans if e["cat"] == "compile"}
    from xtpu.passes import DEFAULT_PIPELINE

    assert set(DEFAULT_PIPELINE) <= compiled
    # Each device op lies inside its replica's plan span, on the same track.
    for d in dots:
        outer = [p for p in spans if p["cat"] == "plan" and p["tid"] == d["tid"] and p["name"].startswith("device")]
        assert any(p["ts"] <= d["ts"] and d["ts"] + d["dur"] <= p["ts"] + p["dur"] + 1 for p in outer)
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {e["tid"] for e in spans} <= set(names)
    # A host cluster's span is on its host worker's track, or inside its
    # device worker's span when the device worker ran the short host
    # function itself (runtime/host.py, HostWorker.serve_waiting).
    for h in (p for p in spans if p["cat"] == "plan" and p["name"].startswith("host_0 replica ")):
        r = h["name"].split()[-1]
        devices = [p for p in spans if p["cat"] == "plan" and p["name"] == f"device replica {r}"]
        assert names[h["tid"]] == f"xtpu-host-0-replica-{r}" or any(
            p["tid"] == h["tid"] and p["ts"] <= h["ts"] and h["ts"] + h["dur"] <= p["ts"] + p["dur"] + 1
            for p in devices
        ), (h, names[h["tid"]])


def test_errors_keep_their_op_under_the_profiler(tmp_path):
    def bad(x):
        return xtpu.outside_compilation(
            lambda v: xtpu.strings.to_number(xtpu.strings.format("{}", v), out_type=xtpu.int32), x
        )

    with xtpu.profiler.trace(str(tmp_path)):
        with pytest.raises(HostComputeError, match=r"op hlo.string_to_number"):
            xtpu.replicate(bad, [[np.float32(0.5)]])
    assert any(e.get("name") == "hlo.string_to_number" for e in load(tmp_path))


def test_start_twice_and_stop_without_start_are_errors(tmp_path):
    with pytest.raises(RuntimeError, match="no trace is being recorded"):
        xtpu.profiler.stop_trace()
    xtpu.profiler.start_trace(str(tmp_path))
    try:
        with pytest.raises(RuntimeError, match="already being recorded"):
            xtpu.profiler.start_trace(str(tmp_path))
    finally:
        path = xtpu.profiler.stop_trace()
    assert os.path.exists(path) and json.load(open(path))["traceEvents"]


def test_xtpu_profile_traces_a_whole_process(tmp_path):
    script = "import numpy as np, xtpu\nprint(xtpu.replicate(lambda x: x * 2.0, [[np.float32(3)]]))\n"
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=dict(os.environ, XTPU_PROFILE=str(tmp_path)),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    events = load(tmp_path)
    assert any(e.get("name") == "hlo.multiply" for e in events)
    assert any(e.get("cat") == "compile" for e in events)


def test_ops_inside_loop_bodies_have_their_own_spans(tmp_path):
    def step(x):
        def body(i, v):
            return i + 1, xtpu.math.tanh(v @ v)

        _, y = xtpu.while_loop(lambda i, v: i < 3, body, (0, x))
        return xtpu.cross_replica_sum(y)

    xs = [[np.eye(4, dtype=np.float32) * 0.5] for _ in range(2)]
    want = xtpu.replicate(step, xs)
    with xtpu.profiler.trace(str(tmp_path)):
        got = xtpu.replicate(step, xs)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a[0], b[0])
    ops = [e["name"] for e in load(tmp_path) if e.get("cat") == "op"]
    assert ops.count("hlo.while") == 2
    assert ops.count("hlo.dot_general") == 2 * 3  # 3 iterations per replica
