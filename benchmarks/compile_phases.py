"""Where the trace + compile time of ``benchmarks/run.py``'s steps goes:
``python benchmarks/compile_phases.py [--repeats 40]``.

For the 8-replica steps of run.py (the GradientTape training step, the same
step written out, the forward-only step, the MLP step), ``xtpu.lower(...)
.compile()`` is split into its phases: the trace (``xtpu.lower``), the
module's copy that ``compile()`` runs the passes on, each pass of the
default pipeline, the verification after the last pass, and the runtime's
``Executable`` (plans, kernels, fused kernels).  Each figure is the least
CPU time of the process (``time.process_time``) over ``--repeats`` compiles
in this process (a shared machine's CPU time is steadier than its wall
clock; the least is the run the neighbours disturbed least), so the phases
of one row need not add up to its total exactly.  The machine's load is
printed beside them.  Issue 29: compiling these steps may not get slower
than at 4cc2b06, before the fusion pipeline.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import run as bench  # benchmarks/ is on the path of a script run from it
from xdsl.dialects.builtin import ModuleOp

import xtpu
from xtpu.runtime import executor

STEPS = {
    "GradientTape step": bench.tape_train_step,
    "written-out step": bench.handwritten_train_step,
    "forward-only step": bench.forward_only_step,
    "MLP step": bench.mlp_step,
}


class _Timer:
    """CPU seconds spent in a wrapped function (outermost calls only)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.depth = 0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            self.depth += 1
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.seconds += time.process_time() - start

        return timed


#: Phase name -> (class, method) whose calls it times.
PHASES = {
    "copy (module.clone)": (ModuleOp, "clone"),
    "verify": (ModuleOp, "verify"),
    "Executable": (executor.Executable, "__init__"),
}


def measure(step, inputs, repeats: int) -> dict[str, float]:
    """Least CPU seconds of each phase of ``lower(step).compile()``."""
    timers = {name: _Timer() for name in PHASES}
    saved = {name: vars(cls).get(method) for name, (cls, method) in PHASES.items()}
    for name, (cls, method) in PHASES.items():
        setattr(cls, method, timers[name].wrap(getattr(cls, method)))
    best: dict[str, float] = {}
    try:
        for k in range(repeats + 3):  # three to warm up
            for t in timers.values():
                t.seconds = 0.0
            start = time.process_time()
            lowered = xtpu.lower(step, inputs)
            traced = time.process_time()
            compiled = lowered.compile()
            end = time.process_time()
            got = {"trace": traced - start, **{name: t.seconds for name, t in timers.items()}}
            # A pass's time is its wall time (Stages.times): CPU time is not kept per pass.
            got.update({f"pass {name}": s for name, s in compiled.stages.times.items()})
            got["total"] = end - start
            if k >= 3:
                for name, s in got.items():
                    best[name] = min(best.get(name, s), s)
    finally:
        for name, (cls, method) in PHASES.items():
            if saved[name] is None:
                delattr(cls, method)  # inherited: the base's again
            else:
                setattr(cls, method, saved[name])
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((bench.B, bench.D)).astype(np.float32) for _ in range(bench.R)]
    w = (rng.standard_normal((bench.D, bench.D)) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((bench.D, bench.D)) * 0.05).astype(np.float32)
    inputs = [[x, w, w2] for x in xs]
    rows = {name: measure(step, inputs, args.repeats) for name, step in STEPS.items()}
    phases = list(next(iter(rows.values())))
    print(
        f"trace + compile phases, least CPU ms over {args.repeats} compiles ({bench.R} replicas, x[{bench.B},{bench.D}])"
    )
    print(f"{'phase':48s}" + "".join(f"{name:>20s}" for name in rows))
    for phase in phases:
        print(f"{phase:48s}" + "".join(f"{r.get(phase, float('nan')) * 1e3:20.3f}" for r in rows.values()))
    print("load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
