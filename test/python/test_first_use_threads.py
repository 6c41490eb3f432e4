"""The first use of xtpu from 8 threads at once (issue 25, item 1): 10 fresh
interpreters, each starting 8 threads on replicate, lower/compile,
TPUStrategy.run and xtpu.function together (first_use_threads.py); no
error, no hang, and every thread's result equals the same call made alone."""

import json
import os
import pathlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

SCRIPT = pathlib.Path(__file__).with_name("first_use_threads.py")
RUNS = 10 * int(os.environ.get("XTPU_STRESS_SCALE", "1"))  # $XTPU_STRESS_SCALE=10: 100 interpreters


def _run_once(i):
    env = dict(os.environ)
    env.pop("XTPU_LOG", None)
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300, env=env)
    return i, proc


def test_eight_threads_make_their_first_xtpu_calls_at_once():
    with ThreadPoolExecutor(2) as pool:  # two interpreters at a time on the 2-core machine
        runs = list(pool.map(_run_once, range(RUNS)))
    assert len(runs) == RUNS
    for i, proc in runs:
        assert proc.returncode == 0, f"run {i}: {proc.stderr[-3000:]}"
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        assert report["errors"] == [], f"run {i}: " + "\n".join(report["errors"])
        assert report["mismatches"] == [], f"run {i}: {report['mismatches']}"
        # The single thread's values are numpy's (so equal results are right ones).
        alone = report["alone"]
        assert alone["replicate"] == [[3.0, 9.0, 15.0, 21.0]] * 2  # (x + x + 1) * 3, summed over 2 replicas
        assert alone["lower_compile"] == [15.0, 57.0]  # sum(x * x) + 1
        assert alone["strategy_run"] == [[-1.0, 0.0, 3.0, 8.0]] * 2
        assert alone["function"] == [[0.0, 0.0, 1.0, 3.0], [0.0, 1.0, 3.0, 5.0]]
