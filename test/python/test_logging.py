"""xtpu logs through the standard ``logging`` module: trace, compile, cache,
pass and worker events with their times; ``XTPU_LOG`` for users;
``Compiled.stages.times``."""

import logging
import re
import subprocess
import sys
import time

import numpy as np

import xtpu
from xtpu.core.pipeline import parse_pipeline
from xtpu.passes import DEFAULT_PIPELINE
from xtpu.replication.program import default_pipeline

INPUTS = [[np.float32(1)], [np.float32(2)]]


HANDLERS_AFTER_A_RUN = """
import logging, numpy as np, xtpu
xtpu.replicate(lambda x: xtpu.cross_replica_sum(x * 3.0), [[np.float32(1)], [np.float32(2)]])
names = ["root"] + sorted(n for n in logging.root.manager.loggerDict if n == "xtpu" or n.startswith("xtpu."))
for n in names:
    lg = logging.getLogger(None if n == "root" else n)
    if isinstance(lg, logging.Logger):
        print(n, lg.level, [type(h).__name__ for h in lg.handlers])
"""


def test_the_library_only_adds_a_null_handler(monkeypatch):
    """In a fresh interpreter without XTPU_LOG, after a whole compile and run:
    the ``xtpu`` logger has exactly one handler, a NullHandler, and no level
    of its own; no other logger got a handler (issue 25: any extra handler
    used to pass)."""
    monkeypatch.delenv("XTPU_LOG", raising=False)
    proc = subprocess.run([sys.executable, "-c", HANDLERS_AFTER_A_RUN], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert rows.pop("root") == "30 []" and rows.pop("xtpu") == "0 ['NullHandler']"
    assert rows and all(row == "0 []" for row in rows.values()), rows


def test_trace_compile_cache_and_pass_events_carry_their_times(caplog, monkeypatch):
    monkeypatch.delenv("XTPU_INTER_OP_THREADS", raising=False)  # xtpu's own choice of threads

    def step(x):
        return xtpu.cross_replica_sum(x * 3.0)

    with caplog.at_level(logging.DEBUG, logger="xtpu"):
        first = xtpu.replicate(step, INPUTS)
        second = xtpu.replicate(step, INPUTS)
    assert [r[0] for r in first] == [9.0, 9.0] and [r[0] for r in second] == [9.0, 9.0]
    messages = [(r.name, r.getMessage()) for r in caplog.records]
    compile_msgs = [m for name, m in messages if name == "xtpu.compile"]
    assert len([m for m in compile_msgs if m.startswith("cache miss: step (test_logging.py:")]) == 1
    assert len([m for m in compile_msgs if m.startswith("cache hit: step (test_logging.py:")]) == 1
    assert len([m for m in compile_msgs if re.match(r"traced step \(test_logging\.py:\d+\) in \d+\.\d ms$", m)]) == 1
    pass_msgs = [m for name, m in messages if name == "xtpu.passes"]
    pipeline = [p.name for p in parse_pipeline(default_pipeline())]
    assert [m.split()[1] for m in pass_msgs] == pipeline
    assert (
        len(
            [m for m in compile_msgs if re.match(rf"compiled for 2 replicas in \d+\.\d ms, passes={len(pipeline)}$", m)]
        )
        == 1
    )
    assert all(re.match(r"pass \S+ in \d+\.\d\d ms$", m) for m in pass_msgs)
    runs = [m for name, m in messages if name == "xtpu.runtime" and m.startswith("run:")]
    # A step this small runs its replicas in one thread (runtime/sequential.py).
    assert runs.count("run: 2 replicas on 1 thread: replicas [0, 1]") == 2
    assert len([m for m in runs if re.match(r"run: 2 replicas on 1 thread finished in \d+\.\d\d ms$", m)]) == 2


def test_each_run_of_a_thread_per_replica_logs_its_workers(caplog):
    xtpu.config.threading.set_inter_op_parallelism_threads(2)
    try:
        with caplog.at_level(logging.DEBUG, logger="xtpu.runtime"):
            out = xtpu.replicate(lambda x: xtpu.cross_replica_sum(x * 3.0), INPUTS)
    finally:
        xtpu.config.threading.set_inter_op_parallelism_threads(0)
    assert [r[0] for r in out] == [9.0, 9.0]
    runs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("run:")]
    assert runs.count("run: 2 workers start: device replica 0, device replica 1") == 1
    assert len([m for m in runs if re.match(r"run: 2 workers finished in \d+\.\d\d ms$", m)]) == 1


def test_nothing_is_formatted_at_the_default_level(caplog):
    with caplog.at_level(logging.WARNING, logger="xtpu"):
        xtpu.replicate(lambda x: x + 1.0, INPUTS)
    assert caplog.records == []


def test_stages_carry_each_pass_time_beside_its_text():
    def f(x):
        return xtpu.cross_replica_sum(x) * 2.0

    lowered = xtpu.lower(f, INPUTS)
    start = time.perf_counter()
    compiled = lowered.compile()
    wall = time.perf_counter() - start
    stages = compiled.stages
    assert list(stages.times) == list(stages) == [p.name for p in parse_pipeline(default_pipeline())]
    assert set(DEFAULT_PIPELINE) <= set(stages)
    assert all(0 < t for t in stages.times.values())
    assert sum(stages.times.values()) <= wall
    assert "ccl.all_reduce" in stages["tpu-lower-cross-replica-sum"]
    assert re.search(r"'tpu-lower-cross-replica-sum: \d+\.\d ms'", repr(stages))


def test_xtpu_log_debug_prints_the_events_to_stderr(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "import numpy as np, xtpu\n"
        "def f(x):\n"
        "    return x * 2.0\n"
        "for _ in range(2):\n"
        "    print(xtpu.replicate(f, [[np.float32(1)]])[0][0])\n"
    )
    import os

    env = dict(os.environ, XTPU_LOG="debug")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "2.0\n2.0\n"
    err = p.stderr
    assert re.search(r"xtpu INFO .* xtpu\.compile: cache miss: f \(prog\.py:2\)", err)
    assert re.search(r"xtpu INFO .* xtpu\.compile: traced f \(prog\.py:2\) in \d", err)
    assert re.search(r"xtpu DEBUG .* xtpu\.passes: pass tpu-outline-outside-compilation in \d", err)
    assert re.search(r"xtpu DEBUG .* xtpu\.compile: cache hit: f \(prog\.py:2\)", err)
    env["XTPU_LOG"] = "loud"
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and "XTPU_LOG='loud' is not one of debug, info, warning, error; ignored" in p.stderr
    env.pop("XTPU_LOG")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert p.stderr == ""


def test_host_workers_log_their_start_and_stop(caplog):
    def f(x):
        y = xtpu.math.tanh(x)
        return xtpu.outside_compilation(lambda v: v + 1.0, y) * 2.0

    with caplog.at_level(logging.DEBUG, logger="xtpu.runtime"):
        compiled = xtpu.lower(f, INPUTS).compile()
        out = compiled(INPUTS)
        compiled.executable.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sum("stopped" in r.getMessage() for r in caplog.records) < 2:
            time.sleep(0.01)
    np.testing.assert_allclose([o[0] for o in out], (np.tanh([1.0, 2.0]) + 1.0) * 2.0, rtol=1e-6)
    messages = [r.getMessage() for r in caplog.records if r.name == "xtpu.runtime"]
    for r in (0, 1):
        assert f"host worker for cluster '0', replica {r} started" in messages
        assert f"host worker for cluster '0', replica {r} stopped" in messages
