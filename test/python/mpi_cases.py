"""Programs run under ``mpiexec -n P`` by test_mpi.py and in one process.

``python mpi_cases.py OUT_DIR`` runs every case (under MPI: with the MPI
backend, ``XTPU_BACKEND=mpi``) and writes this rank's per-replica outputs to
``OUT_DIR/rank<k>.pkl``; test_mpi.py compares every rank's with
:func:`run_cases` in the pytest process (threads backend), bit for bit.  It
also runs, on every rank, test functions of the suite that check their own
results against numpy (the seed examples and the logical-device end-to-end
cases), so they pass on P ranks as on threads.
"""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import xtpu  # noqa: E402


def _host(v):
    # Host-only string ops: soft placement runs them on the replica's host.
    return xtpu.strings.to_number(xtpu.strings.format("{}", v * 2.0))


def _floats(n, shape, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def four_replicas(x):
    total = xtpu.cross_replica_sum(x)
    pairs = xtpu.cross_replica_sum(x * 3.0, group_assignment=[[0, 2], [1, 3]])
    halves = xtpu.cross_replica_sum(x - 1.0, group_assignment=[[0, 1], [2, 3]])
    host = xtpu.outside_compilation(_host, x[0])
    scalar = xtpu.cross_replica_sum(x[1])  # a 0-d operand stays 0-d
    return total, pairs, halves, xtpu.replica_id(), host + total[0], scalar


def eight_replicas_collectives(x):
    out = [xtpu.cross_replica_sum(x, group_assignment=[[0, 3, 5, 6], [1, 2, 4, 7]])]
    if hasattr(xtpu, "all_to_all"):
        out.append(xtpu.all_to_all(x, concat_dimension=0, split_dimension=0, split_count=8))
        out.append(xtpu.collective_permute(x, [[r, (r + 3) % 8] for r in range(8)]))
        out.append(xtpu.collective_permute(x[0, 0], [[r, (r + 5) % 8] for r in range(0, 8, 2)]))  # 0-d, some get 0
    return tuple(out)


def seed_computation(x):
    x = x + 1
    return xtpu.math.reduce_mean(x)


def run_cases() -> dict:
    """Every case's per-replica outputs (numpy), by name."""
    x = np.array([1.0, 2.0, 3.0], np.float32)
    y = np.array([4.0, 5.0, 6.0], np.float32)
    out = {"seed_replicate": xtpu.replicate(seed_computation, inputs=[[x], [y]])}
    out["four_replicas"] = xtpu.replicate(four_replicas, [[v] for v in _floats(4, (5,), 1)])
    out["eight_replicas"] = xtpu.replicate(eight_replicas_collectives, [[v] for v in _floats(8, (8, 3), 2)])
    # A step run many times: the same program, fresh inputs.
    compiled = xtpu.lower(four_replicas, [[v] for v in _floats(4, (5,), 3)]).compile()
    out["repeated"] = [compiled([[v] for v in _floats(4, (5,), s)]) for s in range(4, 9)]
    out["host_variable"] = host_variable_case()
    # Groups that one rank meets whole and another only in part (3 ranks:
    # replicas 0-1, 2-3, 4-5): every rank still gets every replica's sum.
    out["six_replicas_groups"] = xtpu.replicate(
        lambda x: xtpu.cross_replica_sum(x, [[0, 1, 2], [3, 4, 5]]), [[v] for v in _floats(6, (4,), 5)]
    )
    # No device program at all: soft placement moves every op to the host.
    out["host_only"] = xtpu.replicate(_host_only, [[np.int32(4)], [np.int32(7)]])
    return out


def _host_only(x):
    return xtpu.strings.to_number(xtpu.strings.format("{}0", x))


def host_variable_case() -> list:
    """A host variable (made outside any strategy scope) that every
    replica's outside compilation adds to: one variable, whatever rank runs
    the replica (TF: it lives on task 0's host). Its value after each call,
    as every rank reads it; sums of small integers, so exact in any order."""
    v = xtpu.Variable(np.zeros((2,), np.float32))

    def step(x):
        xtpu.outside_compilation(lambda a: v.assign_add(a), x)
        return x * 2.0

    values = []
    for call in range(2):
        xtpu.replicate(step, [[np.full((2,), r + 1 + call, np.float32)] for r in range(4)])
        values.append(np.array(v.numpy()))
    return values


def run_suite_functions() -> list[str]:
    """Test functions that assert against numpy themselves, run here on
    every rank; returns their names."""
    import pytest
    import test_api
    import test_logical_devices_runtime as ld

    funcs = [
        test_api.test_seed_replicate_example,
        test_api.test_seed_outside_compilation_example_replicated_and_eager,
        test_api.test_cross_replica_sum_over_all_replicas_and_groups,
        ld.test_cross_replica_all_reduce_per_logical_core,
        ld.test_lowered_cross_replica_sum_sums_over_replicas_per_core,
        ld.test_all_gather_within_a_replica_rebuilds_the_global_value,
        ld.test_replica_and_logical_core_ids_and_output_owners,
        ld.test_outside_compilation_is_served_once_per_replica_and_seen_by_every_core,
        ld.test_replicate_with_two_cores_per_replica_matches_the_eager_run,
        lambda: ld.test_elementwise_on_rows_split_over_two_cores(2),
        lambda: ld.test_dot_with_a_split_contracting_dim_all_reduced_over_the_replicas_cores(2),
    ]
    # GSPMD-style partitioned programs (collective permutes of halos,
    # reduce-scatters) over 2 replicas x 8 logical cores, against 1 core.
    import test_spmd_programs as spmd

    funcs += [
        (lambda n=name: spmd.test_runtime_runs_the_partitioned_program(n))
        for name in ("concat_split", "stencil_halo", "pad_halo", "dot_reduce_scatter", "reduce_scatter_result")
    ]
    ran = []
    for f in funcs:
        try:
            f()
        except pytest.skip.Exception:
            continue
        ran.append(getattr(f, "__name__", "lambda"))
    return ran


def local_outputs_case(rank: int, size: int) -> None:
    """outputs="local": only this rank's replicas' outputs, None elsewhere."""
    xtpu.distributed.initialize(outputs="local")
    try:
        out = xtpu.replicate(lambda v: xtpu.cross_replica_sum(v), [[np.float32(r)] for r in range(4)])
    finally:
        xtpu.distributed.initialize(outputs="all")
    mine = xtpu.distributed.local_replicas(4)
    for r in range(4):
        if r in mine:
            assert float(out[r][0]) == 6.0, out
        else:
            assert out[r][0] is None, out


def replica_execution_case() -> None:
    """Under MPI a rank runs a thread per replica whatever the inter-op
    setting, and says so (it said "sequential" or "blocks" when the setting
    asked for them)."""
    xs = [[v] for v in _floats(4, (5,), 6)]
    c = xtpu.lower(lambda x: xtpu.cross_replica_sum(x * 2.0), xs).compile()
    for threads in (1, 2, 4):
        xtpu.config.threading.set_inter_op_parallelism_threads(threads)
        try:
            kind, why = c.executable.replica_execution
        finally:
            xtpu.config.threading.set_inter_op_parallelism_threads(0)
        assert kind == "threads" and why.startswith("the MPI backend runs a thread per replica"), (threads, kind, why)


def main(out_dir: str) -> int:
    rank = xtpu.distributed.process_index()
    size = xtpu.distributed.process_count()
    results = run_cases()
    ran = run_suite_functions()
    if size > 1:
        local_outputs_case(rank, size)
    replica_execution_case()
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(results, f)
    print(f"rank {rank} of {size}: cases {sorted(results)}; suite functions {len(ran)}", flush=True)
    from xtpu.runtime import mpi

    pool = mpi.world().pool_client if mpi.world() is not None else None
    if pool is not None:  # the local pool: test_mpi.py checks that they end with this process
        print(f"pool workers {pool.worker_pids}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
