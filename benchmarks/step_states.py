"""A compiled training step timed in the two states of issue 29, xtpu against
JAX, one fresh process a figure: the harness of
``benchmarks/transformer_block.py`` and ``benchmarks/model_steps.py``.

States: ``keep`` (the caller keeps each step's outputs until the next step
returns, as a training loop that feeds the weights back does) and ``drop``
(the caller drops them at once).  Per step: the median time of ``steps``
steps after :data:`WARMUP` warm-up steps, and minor page faults
(``ru_minflt``) per step; per process: peak RSS (``ru_maxrss``) and the first trace + compile
(xtpu: ``lower(...).compile()``; JAX: ``jit(...).lower(...).compile()``;
neither includes imports nor the first execution).  The machine's 1-minute
load average is kept beside each figure (the mean of before and after the
run): on a shared machine, compare the two sides of one round, not runs.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["run_loop", "run_side", "run_rounds", "print_table", "STATES", "WARMUP"]

STATES = ("keep", "drop")

#: Calls before the timed ones: a steady state.  xtpu's transformer step
#: (benchmarks/transformer.py) took 23,000-26,000 page faults in its first
#: call and 300-3,600 in each of the next 5-8 while malloc's heap settled on
#: the step's pattern of short-lived arrays (at R = 1 too, one thread), then
#: 0-8 a call; the ResNet block and the transformer block settle after 1-2.
WARMUP = 10


def run_loop(
    call: Callable[[], Any],
    compile_s: float,
    loss_of: Callable[[Any], float],
    state: str,
    steps: int,
    warmup: int = WARMUP,
) -> dict:
    """Time ``call`` (one step) in ``state`` (module doc): a dict of the
    median step time (s), page faults per step, peak RSS (bytes), the
    compile time given (s) and the loss ``loss_of`` reads from an output,
    after ``warmup`` calls (at least 1)."""
    for _ in range(max(1, warmup)):
        kept = call()
    loss = loss_of(kept)
    if state == "drop":
        kept = None
    times = []
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
        t = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t)
        if state == "keep":
            kept = out  # the previous outputs die after the step returned
        out = None
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / steps
    del kept
    return {
        "time": statistics.median(times),
        "faults": faults,
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "compile": compile_s,
        "loss": loss,
    }


def run_side(script: str, side: str, args: Sequence[str]) -> dict:
    """Run ``script --side side *args`` in a fresh process (JAX's with 8 CPU
    devices) and return the dict it prints last, with the load average."""
    env = dict(os.environ)
    if side == "jax":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
        env["JAX_PLATFORMS"] = "cpu"
    load = os.getloadavg()[0]
    cmd = [sys.executable, os.path.abspath(script), "--side", side, *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        sys.exit(f"the {side} side of {' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got["load"] = (load + os.getloadavg()[0]) / 2  # the 1-minute load average around the run
    return got


def run_rounds(
    script: str, rows: Sequence[tuple], sides: Sequence[str], rounds: int, args_of: Callable[[tuple], list]
) -> dict[tuple, list[dict]]:
    """``rounds`` rounds of :func:`run_side`: in each, every row (``(model,
    R, state)``) on every side in turn, ``script --side side
    *args_of(row)``; the runs by ``(*row, side)``."""
    got: dict[tuple, list[dict]] = {}
    for _ in range(rounds):
        for row in rows:
            for side in sides:
                got.setdefault((*row, side), []).append(run_side(script, side, args_of(row)))
    return got


def print_table(title: str, got: dict[tuple, list[dict]], rows: Sequence[tuple], sides: Sequence[str]) -> None:
    """The medians over the rounds of ``got[(*row, side)]`` for each row
    (``(model, R, state)``) and side, with xtpu / JAX for time and compile."""
    print(title)
    print("| model | R | state | side | step | / JAX | faults/step | peak RSS | trace+compile | / JAX | loss | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        med = {}
        for side in sides:
            runs = got[(*row, side)]
            med[side] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        jax_t = med.get("jax", {}).get("time")
        jax_c = med.get("jax", {}).get("compile")
        for side in sides:
            m = med[side]
            ratio = f"{m['time'] / jax_t:.2f}" if jax_t else "-"
            cratio = f"{m['compile'] / jax_c:.2f}" if jax_c else "-"
            print(
                f"| {' | '.join(map(str, row))} | {side} | {m['time'] * 1e3:.1f} ms | {ratio} | {m['faults']:.0f} | "
                f"{m['rss'] / 2**20:.0f} MB | {m['compile'] * 1e3:.0f} ms | {cratio} | {m['loss']:.5f} | "
                f"{m['load']:.1f} |"
            )
