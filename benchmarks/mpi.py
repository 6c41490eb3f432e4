"""The MPI backend, measured: ``python benchmarks/mpi.py`` (starts ``mpiexec -n 2`` itself).

1. All-reduce bus bandwidth, 2 ranks, one replica each, float32 buffers of
   1 KB .. 64 MB: xtpu's MPI path (``HybridCommunicator.all_reduce``: the
   operands exchanged point to point, then reduced in replica order, bit for
   bit the threads backend's sum) against ``mpi4py``'s ``Allreduce`` on the
   same buffers. Bus bandwidth is NCCL's: ``bytes * 2 (P - 1) / P / time``.
   Target: xtpu >= 80% of raw MPI.
2. The MLP step of benchmarks/run.py (per replica x[64,256] @ W[256,256] ->
   tanh -> @ W2 -> mean, the hand-written gradient of W summed over the
   replicas) at R = 2: 2 ranks (one replica each) against 2 threads of one
   process. Target: ranks <= 0.6x the threads' time (real parallelism; the
   GIL caps threads near one core). Also in a local pool of 2 processes
   started by a plain ``python`` process (runtime/mpi_pool.py), where the
   inputs travel from rank 0 and the outputs back to it.

Times are the best of several timed loops (``time.perf_counter``; xtpu's and
mpi4py's loops interleaved); the R = 1 step of one process is printed as the
floor of a rank's step (a rank runs one such replica plus the exchanges). BLAS runs
one thread per replica in both backends (OPENBLAS_NUM_THREADS=1 for the
ranks; the threads backend limits BLAS to one thread while replicas run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SIZES = [1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 26]  # bytes: 1 KB .. 64 MB


def best_time(fn, repeats: int, inner: int, sync=None) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        if sync is not None:
            sync()
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t) / inner)
    return min(samples)


def best_times(fns, repeats: int, inner: int, sync=None) -> list[float]:
    """``best_time`` of each of ``fns``, their timed loops interleaved (so
    that a busy moment of the shared machine hits them alike)."""
    for fn in fns:
        fn()
    samples = [[] for _ in fns]
    for _ in range(repeats):
        for fn, got in zip(fns, samples):
            if sync is not None:
                sync()
            t = time.perf_counter()
            for _ in range(inner):
                fn()
            got.append((time.perf_counter() - t) / inner)
    return [min(got) for got in samples]


def _inner(nbytes: int) -> int:
    return max(1, min(200, (1 << 22) // nbytes))


def mlp_inputs(R: int):
    import run as bench_run

    rng = np.random.default_rng(0)
    B, D = bench_run.B, bench_run.D
    xs = [rng.standard_normal((B, D)).astype(np.float32) for _ in range(R)]
    w = (rng.standard_normal((D, D)) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((D, D)) * 0.05).astype(np.float32)
    return [[x, w, w2] for x in xs]


def bench_mlp_step(repeats: int, sync=None, R: int = 2) -> tuple[float, np.ndarray | None]:
    import run as bench_run

    import xtpu

    inputs = mlp_inputs(2)[:R]
    compiled = xtpu.lower(bench_run.mlp_step, inputs).compile()
    out = compiled(inputs)
    return best_time(lambda: compiled(inputs), repeats, 20, sync), (np.asarray(out[1][1]) if R == 2 else None)


def worker(repeats: int) -> None:
    """Under mpiexec -n 2: the all-reduces, then the MLP step."""
    import xtpu
    from xtpu.runtime.mpi_communicator import HybridCommunicator
    from xtpu.runtime.workers import AbortSignal

    xtpu.distributed.initialize()
    w = xtpu.runtime.mpi.world()
    MPI = w.MPI
    comm = MPI.COMM_WORLD
    P, rank = w.size, w.rank
    hybrid = HybridCommunicator(w, P, AbortSignal(), 60.0)
    hybrid.prepare([None])
    rows = []
    for nbytes in SIZES:
        x = np.random.default_rng(rank).standard_normal(nbytes // 4).astype(np.float32)
        out = np.empty_like(x)
        inner = _inner(nbytes)
        t_raw, t_x = best_times(
            [lambda: comm.Allreduce(x, out, op=MPI.SUM), lambda: hybrid.all_reduce(rank, x, None)],
            repeats,
            inner,
            comm.Barrier,
        )
        got = hybrid.all_reduce(rank, x, None)
        comm.Allreduce(x, out, op=MPI.SUM)
        bus = nbytes * 2 * (P - 1) / P
        rows.append(
            {
                "bytes": nbytes,
                "raw_GBps": bus / t_raw / 1e9,
                "xtpu_GBps": bus / t_x / 1e9,
                "max_diff": float(np.max(np.abs(got - out))),
            }
        )
    t_step, gw = bench_mlp_step(repeats, comm.Barrier)
    if rank == 0:
        print(json.dumps({"allreduce": rows, "mlp_ranks_s": t_step, "mlp_gw": gw.tolist()}), flush=True)


def pool_worker(repeats: int) -> None:
    """A plain process with a local pool of 2 (runtime/mpi_pool.py): the MLP step."""
    import xtpu

    xtpu.distributed.initialize(num_processes=2)
    t_step, gw = bench_mlp_step(repeats)
    print(json.dumps({"mlp_pool_s": t_step, "mlp_gw": gw.tolist()}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pool-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.repeats)
        return
    if args.pool_worker:
        pool_worker(args.repeats)
        return
    from xtpu.tools.launch import find_mpiexec

    t_threads, gw_threads = bench_mlp_step(args.repeats)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):  # as in a rank
        t_one, _ = bench_mlp_step(args.repeats, R=1)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("XTPU_BACKEND", None)
    proc = subprocess.run(
        [
            find_mpiexec(),
            "-n",
            "2",
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            "--repeats",
            str(args.repeats),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode:
        sys.exit(f"mpiexec failed:\n{proc.stdout}\n{proc.stderr}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--pool-worker", "--repeats", str(args.repeats)],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode:
        sys.exit(f"the local pool failed:\n{proc.stdout}\n{proc.stderr}")
    pool = json.loads(proc.stdout.strip().splitlines()[-1])
    print("all-reduce bus bandwidth, 2 ranks x 1 replica, float32 (GB/s):")
    print(f"  {'size':>8}  {'mpi4py Allreduce':>16}  {'xtpu MPI path':>13}  {'xtpu / raw':>10}  {'max |diff|':>10}")
    for row in res["allreduce"]:
        b = row["bytes"]
        size = f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB"
        print(
            f"  {size:>8}  {row['raw_GBps']:16.3f}  {row['xtpu_GBps']:13.3f}  {row['xtpu_GBps'] / row['raw_GBps']:9.0%}  {row['max_diff']:10.2g}"
        )
    same = np.array_equal(np.asarray(res["mlp_gw"], np.float32), gw_threads)
    ratio = res["mlp_ranks_s"] / t_threads
    print("MLP step, R = 2 (x[64,256] per replica), every replica's outputs on every rank:")
    print(
        f"  2 threads: {t_threads * 1e3:.2f} ms   2 ranks: {res['mlp_ranks_s'] * 1e3:.2f} ms   "
        f"ranks / threads: {ratio:.2f}x (target <= 0.6x)   same gradient bits: {same}"
    )
    same_pool = np.array_equal(np.asarray(pool["mlp_gw"], np.float32), gw_threads)
    print(
        f"  local pool of 2 processes (plain python, outputs to rank 0): {pool['mlp_pool_s'] * 1e3:.2f} ms   "
        f"pool / threads: {pool['mlp_pool_s'] / t_threads:.2f}x   same gradient bits: {same_pool}"
    )
    print(
        f"  one replica alone (R = 1, one process; the floor of a rank's step): {t_one * 1e3:.2f} ms "
        f"= {t_one / t_threads:.2f}x the threads' time"
    )


if __name__ == "__main__":
    main()
