"""Replica batching in the runtime: a thread's block of replicas run as
one program on stacked values.

The rewrite of the body is ``tpu-batch-replicas``'s ``batch_body``
(passes/batch_replicas.py, with the rules); the compiler hands it to the
executable (``Executable(..., batcher=...)``): the runtime and the passes
do not import each other.  Here: whether batching pays for a program
(:func:`worth_batching`), the plan that stacks a block's arguments and
splits its results (:class:`BatchedPlan`), and a collective's kernel on
stacked values (:func:`split_kernel`).  docs/runtime.md has the figures.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.ir import Block, Operation

from xtpu.dialects import ccl, hlo, tpu
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype
from xtpu.runtime import communicator, sequential
from xtpu.runtime.buffers import recycled

__all__ = [
    "Batcher",
    "BatchedPlan",
    "all_reduce_of_rows",
    "calls_saved",
    "enabled",
    "split_kernel",
    "stack",
    "worth_batching",
]

#: The rewrite (passes/batch_replicas.py's ``batch_body``): the body, the
#: block size and which arguments are batched -> (the batched body, which
#: outputs are batched); raises when the body has an op without a rule.
Batcher = Callable[[Block, int, Sequence[bool]], tuple[Block, list[bool]]]

_NOT_CALLS = sequential.COLLECTIVES + (hlo.ConstantOp, hlo.IotaOp)


#: A block runs batched when one replica's ops take at most this long each
#: on average (the cost model's estimate, runtime/sequential.py): large
#: values lose more in cache, op after op over the block, than batching
#: saves in calls (at x[256,1024], op after op over a block of 4 took 85 ms
#: where replica after replica took 43).
MAX_SECONDS_PER_OP = 100e-6
#: What a kernel call costs besides its work (numpy's and the plan's
#: Python), which batching saves ``k - 1`` times per op; and the speed of
#: the copy that stacks a batched argument, as measured inside a step (4 x
#: 64 KB stacked in 107 us of thread CPU: the arguments are not in cache;
#: alone, 13-24 us).  At that speed the forward-only MLP step of
#: benchmarks/run.py (5 calls saved per replica, 64 KB stacked) runs
#: replica by replica, which measured 0.88x its batched time (each replica's
#: products are their own BLAS calls either way), and the training steps
#: (9-23 calls) batched, 0.87-0.95x their unbatched time.
CALL_SECONDS = 5e-6
COPY_BYTES_PER_SECOND = 2.4e9


def calls_saved(body: Operation) -> int:
    """The calls per replica that running blocks of the replicas of
    ``body`` (a ``tpu.replicate``) batched would save: its ops that are not
    constants or collectives, or 0 when its ops are too large for batching
    to pay (:data:`MAX_SECONDS_PER_OP`).  A property of the program: the
    executor asks once."""
    flops, elements = sequential.work(body)
    n = sum(1 for _ in body.walk()) - 1
    seconds = elements * sequential.SECONDS_PER_ELEMENT + flops / sequential.BLAS_FLOPS_PER_CORE
    if n <= 0 or seconds / n > MAX_SECONDS_PER_OP:
        return 0
    return max(0, sum(1 for op in body.body.block.ops if not isinstance(op, _NOT_CALLS)) - 1)


def worth_batching(body: Operation, arg_batched: Sequence[bool], calls: int | None = None) -> bool:
    """Whether running blocks of the replicas of ``body`` batched should
    pay: the calls it saves (:func:`calls_saved`, :data:`CALL_SECONDS` each)
    outweigh stacking the batched arguments (a cross-replica sum alone saves
    no call and would copy its operand)."""
    calls = calls_saved(body) if calls is None else calls
    copy = 0.0
    for a, f in zip(body.body.block.args, arg_batched):
        if f:
            spec = TensorSpec.of_type(a.type)
            copy += spec.size * np.dtype(numpy_dtype(spec.dtype)).itemsize / COPY_BYTES_PER_SECOND
    return calls * CALL_SECONDS > copy


def enabled() -> bool:
    """Whether blocks of replicas may run batched: ``$XTPU_BATCH_REPLICAS``
    unset or ``1`` (``0``: replica by replica, as before; for comparing)."""
    v = os.environ.get("XTPU_BATCH_REPLICAS", "1")
    if v not in ("0", "1"):
        raise ValueError(f"XTPU_BATCH_REPLICAS must be 0 or 1, got {v!r}")
    return v == "1"


def repeated(x: np.ndarray, k: int) -> np.ndarray:
    """``x`` ``k`` times along a new first axis: a read-only view (stride
    0) of ``x``'s memory, made directly (``np.broadcast_to`` costs 2.4 us,
    this 0.3 us: a collective's result in a batched body)."""
    try:
        v = np.ndarray((k, *x.shape), x.dtype, x, 0, (0, *x.strides))
    except (TypeError, ValueError, BufferError):  # not one contiguous buffer
        return np.broadcast_to(x, (k, *x.shape))
    v.flags.writeable = False
    return v


def stack(values: Sequence[Any]) -> np.ndarray:
    """The replicas' values of one argument as one ``[k, ...]`` array."""
    return np.stack([np.asarray(v) for v in values])


def split_kernel(
    together: Callable[[Sequence[Any]], Sequence[Any]], k: int, operand_batched: bool, result_batched: bool
) -> Callable[[Any], Any]:
    """A collective's kernel in a batched body (passes/batch_replicas.py)
    from ``together`` (the block's tuple of ``k`` operands -> its tuple of
    results): the operand split into the replicas' (or, unbatched, the one
    value for each); the results stacked (read-only, as each replica's
    result is), or, the same for every replica (``result_batched`` False),
    the first, broadcast (a view) when the operand was stacked."""

    def run(x: Any) -> Any:
        rows = tuple(x[j, ...] for j in range(k)) if operand_batched else (x,) * k
        res = together(rows)
        if not result_batched:
            first = np.asarray(res[0])
            return repeated(first, k) if operand_batched else res[0]
        out = np.stack([np.asarray(r) for r in res])
        out.flags.writeable = False  # as each replica's result is (runtime/communicator.py)
        return out

    return run


#: Largest operand (one replica's bytes) :func:`all_reduce_of_rows` reduces
#: with one ``accumulate`` (which writes every partial result: k x it).
ROWS_REDUCE_BYTES = 1 << 16


def all_reduce_of_rows(op: Operation, k: int, num_replicas: int, general: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The kernel of ``op`` in a batched body when one block holds all
    ``num_replicas`` replicas (``k`` of them): an all-reduce over one group of
    every replica, its operand stacked and its result the same for each, of
    a small operand is ``ufunc.accumulate`` over the replica axis, whose
    last row is the left-to-right reduction of the rows
    (runtime/communicator.py's ``reduce_in_order``: the same bits), one
    call instead of a call per replica (a step's loss or metric all-reduce:
    a cross-replica sum of a scalar at 8 replicas took 10 us); an operand
    that is one value for every replica is reduced as ``k`` copies of it.
    Anything else, and bfloat16 (ml_dtypes' loops), is ``general``."""
    if not isinstance(op, ccl.AllReduceOp) or k != num_replicas or tpu.BATCHED_RESULT_ATTR in op.attributes:
        return general
    p = op.params()
    fn = communicator.REDUCTIONS.get(p["computation"])
    groups = communicator.normalize_replica_groups([list(g) for g in p["replica_groups"]], num_replicas)
    if fn is None or groups != (tuple(range(num_replicas)),):
        return general
    stacked = tpu.BATCHED_OPERAND_ATTR in op.attributes  # else one value, every replica's operand

    def run(x: Any) -> Any:
        x = np.asarray(x)
        rows = x if stacked else repeated(x, k)
        if (
            rows.shape[:1] != (k,)
            or x.dtype.kind not in "biuf"
            or x.dtype.itemsize * (rows.size // k) > ROWS_REDUCE_BYTES
        ):
            return general(x)
        acc = fn.accumulate(rows, axis=0, dtype=x.dtype)
        out = acc[k - 1 :].reshape(acc.shape[1:])  # the last row, a view (0-d for scalar rows), not a copy
        if stacked:
            return repeated(out, k)
        out.flags.writeable = False  # as an all-reduce's result is (runtime/communicator.py)
        return out

    return run


class BatchedPlan:
    """A thread's plan for a block of ``k`` replicas run batched: takes the
    grouped plan's arguments (per argument, the block's ``k`` values) and
    gives its results (per output, the ``k`` replicas' values), running
    ``inner`` (a :class:`~xtpu.runtime.plan.Plan` of the batched body) once
    on the stacked arguments; unbatched arguments are passed as replica 0's
    value, unbatched results copied to each replica."""

    def __init__(self, inner: Any, k: int, arg_batched: Sequence[bool], out_batched: Sequence[bool]):
        self.inner = inner
        self.k = k
        self.arg_batched = list(arg_batched)
        self.out_batched = list(out_batched)
        self.name = inner.name
        self._copies = threading.local()  # blocks of the same size share the plan

    def _copy(self, o: np.ndarray, i: int, j: int) -> np.ndarray:
        """Replica ``j``'s own copy of unbatched output ``i``: an array of
        an earlier call that nobody holds any more (runtime/buffers.py's
        recycling: no allocation, no page faults), else a new one."""
        pools = getattr(self._copies, "pools", None)
        if pools is None:
            pools = self._copies.pools = {}
        pool = pools.setdefault((i, j), [])
        if pool and (pool[0].shape != o.shape or pool[0].dtype != o.dtype):
            pool.clear()
        dst = recycled(pool, o.shape, o.dtype)
        np.copyto(dst, o)
        return dst

    def __getattr__(self, name: str) -> Any:  # ops, buffer_sets, failed_op, ...: the inner plan's
        return getattr(self.inner, name)

    def run(self, args: Sequence[Sequence[Any]], K: tuple) -> tuple:
        k = self.k
        outs = self.inner.run([stack(a) if f else a[0] for a, f in zip(args, self.arg_batched)], K)
        res = []
        for i, (o, f) in enumerate(zip(outs, self.out_batched)):
            if f:
                res.append(tuple(o[j, ...] for j in range(k)))  # views (0-d too), flags kept
            else:
                # One value for every replica: shared when read-only (an
                # all-reduce's, as replica by replica), else a copy each.
                o = np.asarray(o)
                res.append(
                    (o,) * k if not o.flags.writeable else (o,) + tuple(self._copy(o, i, j) for j in range(1, k))
                )
        return tuple(res)
