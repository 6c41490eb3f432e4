"""How a step's replicas share threads: one thread for all of them, a
thread per replica, or a thread per core running a block of replicas.

The threads backend gives each replica a thread (runtime/executor.py).
When a replica's work between two collectives is small, those threads cost
more than they give: on 2 cores, the MLP step of ``benchmarks/run.py`` at 8
replicas spent more time in thread hand-offs (8 threads started, woken at
every all-reduce, taking turns on the GIL) than in its matmuls, and numpy
running the 8 replicas one after the other was 1.8x faster.  So a thread
can run a *block* of replicas: the replicate body compiled once for ``m``
replicas by :class:`~xtpu.runtime.plan.Plan` runs the ops between two
collectives for each of them in turn (replica after replica, so a
replica's values are still in cache for its next op); a collective is one
call that has the block's
operands and, when other threads run other blocks, meets them once
(``ThreadCommunicator.meet``); the last to arrive computes every group's
result with the same functions as the threads' rendezvous
(``runtime/communicator.py``).  With ``W`` threads running at once, BLAS
gets ``budget // W`` threads for each matmul (``runtime/blas_budget.py``).

How many threads (``W``) is TF's
``tf.config.threading.set_inter_op_parallelism_threads`` (threads for
independent operations: here, the replicas) or ``$XTPU_INTER_OP_THREADS``:

* ``1``: one thread runs every replica (sequential);
* ``n >= 2``: ``min(n, R)`` threads, each a block of replicas (``R``: a
  thread per replica, as without this module);
* ``0`` (the default): xtpu chooses per program with
  :func:`preferred_threads`, a cost model from the program's static shapes:
  one thread when the step's work is small and mostly matmuls, else a
  thread per core, each running a block of replicas (a thread per replica
  when there are no more replicas than cores); constants measured on this
  machine with benchmarks/replica_threads.py.

The choice is a property of the program and the settings, never of
timing, so a program's results are the same on every run.  All choices
give the same values; a matmul's last bits can differ between them, because
OpenBLAS's result depends on its thread count.  Programs that need a
thread per replica keep it whatever the setting: replicas split over
logical cores, host transfers (outside compilation), infeed, and the MPI
backend (whose ranks give BLAS the threads of the choice one process would
make, so that they agree with it bit for bit).  An ``hlo.if`` or
``hlo.while`` whose regions hold a collective runs its regions for all
replicas at once (``together_kernel`` in dialects/hlo_control.py) while
the replicas agree on its predicate, so it runs on one thread or a thread
per replica, never in blocks; when the replicas disagree, the step runs
again with a thread per replica (the program is pure: nothing it did is
lost or done twice), which gives today's results, errors and timeouts.

Errors are today's: when a kernel raises in a block, the step runs again
with a thread per replica, whose error names the replica, the op and the
user's source line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.ir import Operation

from xtpu.dialects import ccl, tpu
from xtpu.dialects.hlo import DotGeneralOp
from xtpu.dialects.infeed import InfeedDequeueTupleOp
from xtpu.dialects.ir_walk import isa, walk_ops
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.runtime import communicator as _comm
from xtpu.runtime.plan import CONSTANT_OPS
from xtpu.runtime.thread_settings import inter_op

__all__ = [
    "set_inter_op_parallelism_threads",
    "get_inter_op_parallelism_threads",
    "ineligible",
    "preferred_threads",
    "replica_threads",
    "blocks",
    "together_kernel",
    "COLLECTIVES",
]

#: The collectives, run once for all replicas in the sequential mode.
COLLECTIVES = ccl.COLLECTIVES


def set_inter_op_parallelism_threads(num_threads: int) -> None:
    """TF's ``tf.config.threading.set_inter_op_parallelism_threads``: the
    threads that run a step's replicas: 1 runs them one after the other in
    one thread, ``n >= 2`` on at most ``n`` threads, each running a block of
    replicas, 0 (default) lets xtpu choose per program (module doc).

    Raises:
        ValueError: ``num_threads`` is negative or not an integer.
    """
    inter_op.set(num_threads)


def get_inter_op_parallelism_threads() -> int:
    """What :func:`set_inter_op_parallelism_threads` set (0: xtpu chooses)."""
    return inter_op.explicit


def _setting() -> int:
    return inter_op.value()


def ineligible(body: Operation, num_cores: int, has_host: bool, ops: Sequence[Operation] | None = None) -> str | None:
    """Why the replicate body ``body`` cannot run sequentially, or None.

    Args:
      body: the device ``tpu.replicate`` op.
      num_cores: logical cores per replica.
      has_host: the program has outside-compilation host functions.
      ops: ``walk_ops(body)``, when the caller has it.
    """
    if num_cores > 1:
        return "its replicas are split over logical cores"
    if has_host:
        return "it has outside-compilation clusters"
    for op in walk_ops(body) if ops is None else ops:
        if op is body:
            continue
        if isa(op, (tpu.SendToHostOp, tpu.RecvFromHostOp, InfeedDequeueTupleOp)):
            return f"it has '{op.name}'"
        if isa(op, COLLECTIVES):
            parent = op.parent_op()
            while parent is not None and parent is not body:
                if not hasattr(type(parent), "together_kernel"):
                    return f"'{op.name}' is inside '{parent.name}'"
                parent = parent.parent_op()
    return None


#: The cost model's constants, measured on the 2-core machine of
#: ``benchmarks/jax_compare.py`` (numpy 2.4, float32): a BLAS matmul's
#: floating-point operations per second on one core, an elementwise op's
#: seconds per element, what the threads' hand-offs cost per replica, and
#: the work of a step under which one thread runs every replica.
BLAS_FLOPS_PER_CORE = 50e9
SECONDS_PER_ELEMENT = 0.3e-9
HANDOFF_SECONDS = 100e-6
SMALL_STEP_SECONDS = 2e-3


def work(body: Operation, ops: Sequence[Operation] | None = None) -> tuple[float, float]:
    """(matmul floating-point operations, elements the other ops write)
    of one replica of ``body``: every op once (a loop body counts once),
    collectives and constants not counted (both modes run them alike);
    ``ops``: ``walk_ops(body)``, when the caller has it."""
    flops = elements = 0.0
    for op in walk_ops(body) if ops is None else ops:
        if op is body or isa(op, COLLECTIVES + CONSTANT_OPS) or op.regions:
            continue
        sizes = []
        for r in op.results:
            try:
                sizes.append(float(TensorSpec.of_type(r.type).size))
            except Exception:  # a non-tensor result (a token): no work
                continue
        if isa(op, DotGeneralOp):
            x = TensorSpec.of_type(op.operands[0].type).shape
            k = math.prod(x[d] for d in op.params()["lhs_contracting_dimensions"])
            flops += 2.0 * sum(sizes) * float(k)
        else:
            elements += sum(sizes)
    return flops, elements


def collectives_in_regions(body: Operation, ops: Sequence[Operation] | None = None) -> bool:
    """Whether a collective of ``body`` sits inside an ``hlo.if`` /
    ``hlo.while``: then the replicas run all in one thread or each in its
    own, because every replica's predicate decides the region; ``ops``:
    ``walk_ops(body)``, when the caller has it."""
    return any(isa(op, COLLECTIVES) and op.parent_op() is not body for op in (walk_ops(body) if ops is None else ops))


def preferred_threads(body: Operation, replicas: int, cores: int, ops: Sequence[Operation] | None = None) -> int:
    """The cost model (module doc): how many threads run the ``replicas``.

    * one thread when the whole step's work is small (every replica's
      matmuls on one core and the rest under ``SMALL_STEP_SECONDS``) and
      mostly matmuls (the work BLAS does not parallelise, elementwise ops,
      reductions, data movement, is no more than the threads' hand-offs or a
      quarter of the matmuls): BLAS still uses every core, and more threads
      would cost more in hand-offs than they give;
    * else a thread per core, each running its block of replicas with one
      core's share of BLAS (a thread per replica when there are no
      more replicas than cores, or when a collective sits in a region).

    Measured with benchmarks/replica_threads.py on 2 cores: the MLP step
    x[64,256] (about 0.7 ms of work a replica) at 2 replicas 0.30-0.32 ms on
    one thread against 0.36-0.53 on two; at 8 replicas, under load, 1.62 ms
    on one thread, 1.19 on two (quiet: 1.60, 1.67, 1.62 on 8); x[256,1024]
    at 8 replicas 70, 40.5 and 45.4 ms; a cross-replica sum of 1e6 floats
    at 8 replicas 0.83, 0.92 and 1.22 ms; 10 elementwise steps on 1e5
    floats at 2 replicas 0.58 ms on one thread, 0.40-0.43 on two, at 8
    replicas 3.4, 2.8 and 3.3 ms.

    ``ops``: ``walk_ops(body)``, when the caller has it.
    """
    if replicas <= 1:  # one replica runs in one thread whatever its work
        return 1
    flops, elements = work(body, ops)
    t_other = elements * SECONDS_PER_ELEMENT
    t_blas = flops / BLAS_FLOPS_PER_CORE
    if replicas * (t_blas + t_other) <= SMALL_STEP_SECONDS and t_other <= max(HANDOFF_SECONDS, 0.25 * t_blas):
        return 1
    if replicas <= cores or collectives_in_regions(body, ops):
        return replicas
    return cores


def replica_threads(replicas: int, reason: str | None, preferred: int, groups: bool) -> int:
    """The threads that run this process's ``replicas`` in a run: ``reason``
    from :func:`ineligible` (not None: one each), ``preferred`` from
    :func:`preferred_threads`, ``groups``: a thread may run a block of the
    replicas while others run the rest (no collective sits in a region);
    under the current setting."""
    if reason is not None or replicas <= 1:
        return replicas
    n = _setting()
    if n == 0:
        return preferred
    w = min(n, replicas)
    return w if w in (1, replicas) or groups else replicas


def blocks(replicas: Sequence[int], threads: int) -> list[list[int]]:
    """``replicas`` in ``threads`` contiguous blocks whose sizes differ by
    at most one, in order (thread ``w`` runs block ``w``)."""
    q, r = divmod(len(replicas), threads)
    out, i = [], 0
    for w in range(threads):
        size = q + (1 if w < r else 0)
        out.append(list(replicas[i : i + size]))
        i += size
    return out


# ---------------------------------------------------------------------------
# Collectives with every replica's operand at hand.


def together_kernel(op: Operation, num_replicas: int) -> Callable[[Sequence[Any]], tuple]:
    """The kernel of collective ``op`` in the sequential mode: the tuple of
    the ``R`` replicas' operands -> the tuple of their results, each group's
    computed as the threads' rendezvous computes it (bit for bit).

    Raises:
      ValueError: invalid groups, pairs or dimensions (as the communicator).
    """
    R = num_replicas
    p = op.params()
    name = op.name
    if isinstance(op, ccl.CollectivePermuteOp):
        pairs = _comm.normalize_source_target_pairs([list(q) for q in p["source_target_pairs"]], R)
        plan = _comm.permute_plan(pairs)
        members = {r for g, _ in plan for r in g}

        def permute(values: Sequence[Any]) -> tuple:
            values = [np.asarray(v) for v in values]
            out: list[Any] = [None] * R
            for group, sources in plan:
                if len(group) == 1:  # a single [x, x] pair: its operand
                    out[group[0]] = _comm._readonly(values[group[0]].view())
                    continue
                for r, res in zip(group, _comm.permute_results([values[r] for r in group], sources)):
                    out[r] = res
            for r in range(R):
                if r not in members:
                    out[r] = _comm._readonly(np.zeros_like(values[r]))
            return tuple(out)

        return permute
    groups = _comm.normalize_replica_groups([list(g) for g in p["replica_groups"]], R)
    orders = [sorted(range(len(g)), key=g.__getitem__) for g in groups]
    if isinstance(op, ccl.AllReduceOp):
        reduction = p["computation"]
        if reduction not in _comm.REDUCTIONS:
            raise ValueError(f"{name}: unknown reduction {reduction!r}; expected one of {sorted(_comm.REDUCTIONS)}")
        compute = lambda vals, order: _comm.all_reduce_results(vals, order, reduction)  # noqa: E731
    elif isinstance(op, ccl.AllGatherOp):
        dim = p["all_gather_dim"]
        compute = lambda vals, order: _comm.all_gather_results(  # noqa: E731
            vals, _comm._check_dim(name, "dim", dim, vals[0], None)
        )
    elif isinstance(op, ccl.ReduceScatterOp):
        dim, reduction = p["scatter_dimension"], p["computation"]
        compute = lambda vals, order: _comm.reduce_scatter_results(  # noqa: E731
            vals, order, reduction, _comm._check_dim(name, "dim", dim, vals[0], len(vals))
        )
    elif isinstance(op, ccl.AllToAllOp):
        split, concat = p["split_dimension"], p["concat_dimension"]
        compute = lambda vals, order: _comm.all_to_all_results(  # noqa: E731
            vals,
            _comm._check_dim(name, "split_dimension", split, vals[0], len(vals)),
            _comm._check_dim(name, "concat_dimension", concat, vals[0], None),
        )
    else:
        raise NotImplementedError(f"'{name}' has no sequential kernel")

    def collective(values: Sequence[Any]) -> tuple:
        values = [np.asarray(v) for v in values]
        out: list[Any] = [None] * R
        for group, order in zip(groups, orders):
            if len(group) == 1:  # a group of one: its operand, no copy
                out[group[0]] = _comm._readonly(values[group[0]].view())
                continue
            for r, res in zip(group, compute([values[r] for r in group], order)):
                out[r] = res
        return tuple(out)

    return collective
