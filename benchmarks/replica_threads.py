"""How many threads should run a step's replicas: ``python benchmarks/replica_threads.py``.

The measurements behind ``runtime/sequential.py``'s cost model.  For each
workload and replica count R it times the compiled step with its replicas
on one thread (sequential), on a thread per core (blocks of replicas) and
on a thread per replica, alternating the three for ``--rounds`` rounds
(medians of the best of ``--repeats`` timed loops), and marks the choice
xtpu makes by itself (``*``) and the fastest.  Workloads:

- ``mlp BxD``: benchmarks/run.py's MLP step (x[B,D] @ W[D,D] -> tanh -> @ W2
  -> mean, the hand-written gradient of W, summed over the replicas);
- ``crs N``: a cross-replica sum of N float32;
- ``elementwise N``: 10 tanh-and-scale steps on N float32, then a sum.

The machine is shared: before each round it waits (up to ``--quiet-wait``
seconds) until no other process is running, retakes a figure (up to
``--tries`` times) when other processes used more than a tenth of a core
while it was taken (/proc/stat against this process's CPU time), and says
when it could not get a quiet one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from jax_compare import alone, best, blas_kernels, inner_for, mlp_data, xtpu_mlp_step  # noqa: E402


def others_running() -> int:
    """Runnable tasks on the machine besides this process (/proc/loadavg)."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, running - 1)


def wait_quiet(limit: float) -> bool:
    """Wait until no other task ran in 5 samples 0.1 s apart; False after ``limit`` s."""
    end = time.monotonic() + limit
    calm = 0
    while time.monotonic() < end:
        calm = calm + 1 if others_running() == 0 else 0
        if calm >= 5:
            return True
        time.sleep(0.1)
    return False


def workloads(quick: bool):
    import xtpu

    mlp_step = xtpu_mlp_step

    def elementwise(x):
        for _ in range(10):
            x = xtpu.math.tanh(x) * 1.5
        return xtpu.cross_replica_sum(x)

    sizes = [(64, 256)] if quick else [(64, 256), (256, 1024)]
    for B, D in sizes:
        for R in (2, 8):
            xs, w, w2 = mlp_data(R, B, D)
            yield f"mlp {B}x{D} R={R}", mlp_step, [[x, w, w2] for x in xs]
    for R in (2, 8):
        rng = np.random.default_rng(1)
        yield (
            f"crs 1e6 R={R}",
            lambda x: xtpu.cross_replica_sum(x),
            [[rng.standard_normal(1_000_000).astype(np.float32)] for _ in range(R)],
        )
    if not quick:
        for R in (2, 8):
            yield f"elementwise 1e5 R={R}", elementwise, [[np.ones(100_000, np.float32)] for _ in range(R)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quiet-wait", type=float, default=30.0)
    ap.add_argument("--tries", type=int, default=5, help="times a figure is retaken while others use the CPU")
    ap.add_argument("--quick", action="store_true", help="the small MLP and the sums only (a slice for CI)")
    args = ap.parse_args(argv)
    import xtpu
    from xtpu.runtime import blas_budget

    cores = blas_budget.cores()
    print(
        f"replicas on 1 thread / {cores} threads (blocks) / a thread each, on {cores} cores, "
        f"medians of {args.rounds} rounds"
    )
    print(blas_kernels())
    print(f"  {'workload':<22} {'1 thread':>11} {f'{cores} threads':>11} {'R threads':>11}  xtpu picks")
    noisy = False
    setting = xtpu.config.threading.set_inter_op_parallelism_threads
    for name, fn, inputs in workloads(args.quick):
        c = xtpu.lower(fn, inputs).compile()
        R = len(inputs)
        picked = c.executable.replica_threads
        choices = [1, cores, R] if cores < R else [1, R]
        times: dict[int, list[float]] = {w: [] for w in choices}
        try:
            for _ in range(args.rounds):
                noisy |= not wait_quiet(args.quiet_wait)
                for w in choices:
                    setting(w)
                    t = time.perf_counter()
                    c(inputs)
                    inner = inner_for(time.perf_counter() - t)
                    v, quiet = alone(lambda: best(lambda: c(inputs), args.repeats, inner), args.tries)
                    noisy |= not quiet
                    times[w].append(v)
        finally:
            setting(0)
        med = {w: statistics.median(v) for w, v in times.items()}
        fastest = min(med, key=med.get)

        def cell(w: int) -> str:
            if w not in med:
                return "-"
            v = med[w]
            txt = f"{v * 1e3:.3f} ms" if v >= 1e-3 else f"{v * 1e6:.1f} us"
            return txt + ("*" if w == picked else " ") + ("<" if w == fastest else " ")

        print(
            f"  {name:<22} {cell(1):>13} {cell(cores) if cores < R else '-':>13} {cell(R):>13}  "
            f"{picked} thread{'s' if picked > 1 else ''}"
        )
    print("  (* xtpu's choice, < the fastest)")
    if noisy:
        print("note: other processes were running during some rounds; the figures are noisy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
