"""The all-reduce passes, measured: ``python benchmarks/all_reduce_passes.py``.

1. ccl-combine-all-reduce: a step that sums 50 small gradients over the
   replicas (``cross_replica_sum`` per gradient, as ``CrossShardOptimizer``
   does, then an SGD update) compiled without and with the pass; target:
   the combined step is faster.  Also the step's number of collectives.
   Then 8 or 16 all-reduces of 4 KB .. 4 MB each, combined without a
   size limit: where combining stops paying (the pass's default
   ``threshold-bytes``).
2. ccl-decompose-all-reduce: one all-reduce of 1 KB .. 16 MB float32
   without and with the decomposition into reduce-scatter + all-gather.

Each figure is the median of several timed loops (wall clock,
``time.perf_counter``) on the threads backend, or with ``--backend mpi``
under ``mpiexec -n P`` (``xtpu.distributed``; rank 0 prints).  Both passes
are backend-agnostic: they only rewrite the IR.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

import xtpu
from xtpu.passes import DEFAULT_PIPELINE

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import loop_times  # noqa: E402 - benchmarks/run.py, next to this file

BASE = ",".join(p for p in DEFAULT_PIPELINE if p != "ccl-combine-all-reduce")


def median_time(fn, repeats: int, inner: int) -> float:
    """Seconds per call of ``fn``: the median of ``repeats`` loops of ``inner`` calls."""
    return statistics.median(loop_times(fn, repeats, inner))


def grad_shapes(k: int) -> list[tuple[int, ...]]:
    """Shapes of ``k`` small gradients: biases and small kernels."""
    shapes = [(16,), (16, 16), (32,), (8, 16), (4, 4, 4)]
    return [shapes[i % len(shapes)] for i in range(k)]


def sgd_step(*grads_and_weights):
    k = len(grads_and_weights) // 2
    grads, weights = grads_and_weights[:k], grads_and_weights[k:]
    return [w - 0.1 * xtpu.cross_replica_sum(g) for g, w in zip(grads, weights)]


def bench_combine(replicas: int, k: int, repeats: int, inner: int) -> None:
    rng = np.random.default_rng(0)
    shapes = grad_shapes(k)
    weights = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    inputs = [[rng.standard_normal(s).astype(np.float32) for s in shapes] + weights for _ in range(replicas)]
    lowered = xtpu.lower(sgd_step, inputs)
    before = lowered.compile(BASE)
    after = lowered.compile(BASE + ",ccl-combine-all-reduce")
    for a, b in zip(before(inputs), after(inputs)):
        for x, y in zip(a, b):
            assert np.array_equal(x, y), "the combined step must give the same bits"
    n_before = before.as_text().count("ccl.all_reduce")
    n_after = after.as_text().count("ccl.all_reduce")
    t_before = median_time(lambda: before(inputs), repeats, inner)
    t_after = median_time(lambda: after(inputs), repeats, inner)
    print(
        f"combine  R={replicas} {k} gradients: {n_before} all-reduces {t_before * 1e3:8.3f} ms  ->  "
        f"{n_after} all-reduce {t_after * 1e3:8.3f} ms  ({t_before / t_after:4.2f}x faster)"
    )


def bench_combine_size(replicas: int, k: int, nbytes: int, repeats: int, inner: int) -> None:
    n = nbytes // 4
    inputs = [[np.full((n,), r + 1.0 + i, np.float32) for i in range(k)] for r in range(replicas)]
    lowered = xtpu.lower(lambda *xs: [xtpu.cross_replica_sum(x) for x in xs], inputs)
    before = lowered.compile(BASE)
    after = lowered.compile(BASE + ",ccl-combine-all-reduce{threshold-bytes=1000000000000}")
    t_before = median_time(lambda: before(inputs), repeats, inner)
    t_after = median_time(lambda: after(inputs), repeats, inner)
    print(
        f"combine  R={replicas} {k} x {nbytes:>8} B ({k * nbytes >> 10:>6} KiB in all): {t_before * 1e3:8.3f} ms  ->  "
        f"{t_after * 1e3:8.3f} ms  ({t_before / t_after:4.2f}x)"
    )


def bench_decompose(replicas: int, nbytes: int, repeats: int, inner: int) -> None:
    n = nbytes // 4
    xs = [[np.full((n,), r + 1, np.float32)] for r in range(replicas)]
    lowered = xtpu.lower(lambda x: xtpu.cross_replica_sum(x), xs)
    before = lowered.compile(BASE)
    after = lowered.compile(BASE + ",ccl-decompose-all-reduce{threshold-bytes=1}")
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(before(xs), after(xs)))
    t_before = median_time(lambda: before(xs), repeats, inner)
    t_after = median_time(lambda: after(xs), repeats, inner)
    print(
        f"decompose R={replicas} {nbytes:>9} B: all-reduce {t_before * 1e3:8.3f} ms, "
        f"reduce-scatter + all-gather {t_after * 1e3:8.3f} ms  ({t_before / t_after:4.2f}x)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="fewer sizes and loops")
    ap.add_argument(
        "--backend",
        choices=("threads", "mpi"),
        default="threads",
        help="mpi: run under mpiexec -n P, replicas spread over the ranks",
    )
    args = ap.parse_args()
    if args.backend == "mpi":
        import builtins

        import xtpu.replication.distributed

        xtpu.distributed.initialize()
        if xtpu.distributed.process_index() != 0:
            globals()["print"] = lambda *a, **k: None
        else:
            globals()["print"] = builtins.print
    inner = 3 if args.quick else 10
    for r in (2, 8):
        bench_combine(r, 50, args.repeats, inner)
    for r in (2, 8):
        for k, size in ((16, 1 << 12), (16, 1 << 16), (8, 1 << 18), (4, 1 << 22)):
            bench_combine_size(r, k, size, args.repeats, max(1, inner // (1 + k * size // (1 << 20))))
    sizes = [1 << 10, 1 << 16, 1 << 20] + ([] if args.quick else [1 << 24])
    for r in (2, 8):
        for size in sizes:
            bench_decompose(r, size, args.repeats, max(1, inner // (1 + size // (1 << 20))))


if __name__ == "__main__":
    main()
