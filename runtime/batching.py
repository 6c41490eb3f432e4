"""Replica batching: a block of replicas run as one program on stacked values.

A thread that runs a block of ``k`` replicas (runtime/sequential.py) runs
the replicate body once per replica, op by op: ``k`` times the Python calls
of one replica, each on a ``k``-th of the data.  At 8 replicas of the
transformer step on 2 threads that is 4 x 405 kernel calls per thread and
step, most of them microseconds of numpy work each.  Batched, the thread
runs the body once on values with a leading axis of the ``k`` replicas
(JAX's ``vmap`` over the replica axis; XLA's SPMD programs on a TPU core
likewise run one program over a batch): a quarter of the calls, each on
four times the data.

:func:`batch_block` rewrites the body (after the compiler's passes, fusion
regions inlined) into that program, by a batching rule per op kind, as
JAX's batching rules do: a value is *batched* (``[k, *shape]``, replica
``j`` at index ``j``) or *unbatched* (the same for every replica:
constants, iotas and what is computed from them only).

* elementwise ops (``hlo`` unary and binary ops, ``compare``, ``select``,
  ``convert``, ``stop_gradient``): the same op, unbatched operands
  broadcast first;
* ``broadcast_in_dim``, ``reshape``, ``transpose``, ``slice``, ``pad``,
  ``concatenate``, ``reduce``, ``dot_general`` (a new leading batch
  dimension), ``gather`` and ``scatter`` (StableHLO's batching dimensions):
  the op with its dimensions shifted by one;
* collectives (``ccl.*``): left as they are; the executor gives them a
  kernel that splits the stack into the ``k`` replicas' operands and meets
  the other threads (runtime/executor.py);
* anything else (regions, ``tpu.replica_id``, random bits, sorting, host
  transfers): the block is not batched; it runs replica by replica as
  before.

The fusion pass then runs on the batched body, so its regions are formed
on the batched ops.  Each op computes each replica's slice with the same
numpy functions on the same values, so a replica's results are the
unbatched program's to the last bit, except where the kernel's own order of
operations depends on the array's layout: numpy's pairwise sums and BLAS's
blocking see a ``[k, n]`` array as ``k`` rows of ``n``, as the unbatched
program's ``[n]``; what the test suite checks is that every program's
results in the batched mode equal the thread-per-replica mode's
(test_batching.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue

from xtpu.dialects import ccl, hlo
from xtpu.dialects.autodiff import StopGradientOp
from xtpu.dialects.fusion import FusionRegionOp, FusionYieldOp
from xtpu.dialects.hlo_indexing import GatherOp, ScatterOp, VariadicReduceOp
from xtpu.dialects.hlo_math import IsFiniteOp, ReverseOp
from xtpu.dialects.hlo_window import ReduceWindowOp
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.passes.fuse_elementwise import fuse_block

__all__ = ["Batched", "BatchedPlan", "Unbatchable", "batch_block", "enabled", "split_kernel", "stack"]


def enabled() -> bool:
    """Whether blocks of replicas may run batched: ``$XTPU_BATCH_REPLICAS``
    unset or ``1`` (``0``: replica by replica, as before; for comparing)."""
    v = os.environ.get("XTPU_BATCH_REPLICAS", "1")
    if v not in ("0", "1"):
        raise ValueError(f"XTPU_BATCH_REPLICAS must be 0 or 1, got {v!r}")
    return v == "1"


COLLECTIVES = (ccl.AllReduceOp, ccl.AllGatherOp, ccl.ReduceScatterOp, ccl.AllToAllOp, ccl.CollectivePermuteOp)
_ELEMENTWISE = (
    hlo.ElementwiseUnary,
    hlo.ElementwiseBinary,
    hlo.CompareOp,
    hlo.SelectOp,
    hlo.ConvertOp,
    StopGradientOp,
    IsFiniteOp,
)
_NO_OPERANDS = (hlo.ConstantOp, hlo.IotaOp)


class Unbatchable(Exception):
    """The block has an op without a batching rule (the message names it)."""


class Batched:
    """The batched program of a block of ``k`` replicas.

    Attributes:
      block: the batched body (in its own module): argument ``i`` is
        ``[k, *shape]`` of the body's argument ``i``; its terminator gives
        the outputs, batched or not as :attr:`out_batched` says.
      out_batched: per output, whether it is stacked.
      collectives: the collective ops of :attr:`block` (their operands and
        results stacked).
    """

    def __init__(self, module: ModuleOp, block: Block, out_batched: list[bool], k: int):
        self.module = module
        self.block = block
        self.out_batched = out_batched
        self.k = k
        self.collectives = [op for op in block.ops if isinstance(op, COLLECTIVES)]


def _spec(v: SSAValue) -> TensorSpec:
    return TensorSpec.of_type(v.type)


def batch_block(body: Block, k: int, batched_args: Sequence[bool] | None = None) -> Batched:
    """The batched program of ``body`` (a ``tpu.replicate`` body after the
    passes) for ``k`` replicas (module doc).  ``batched_args[i]`` False:
    argument ``i`` is one value for all ``k`` replicas (a mirrored
    variable: the same array given to each), passed unbatched.

    Raises:
      Unbatchable: an op of ``body`` has no batching rule, or its values are
        not static tensors.
    """
    flags = [True] * len(body.args) if batched_args is None else list(batched_args)
    out_block = Block(arg_types=[_stacked_type(a.type, k) if f else a.type for a, f in zip(body.args, flags)])
    env: dict[SSAValue, tuple[SSAValue, bool]] = {a: (b, f) for a, b, f in zip(body.args, out_block.args, flags)}
    b = _Builder(out_block, k)
    ops = list(body.ops)
    for op in ops[:-1]:
        b.op(op, env)
    term = ops[-1]
    outs = [env[v] for v in term.operands]
    out_block.add_op(func.ReturnOp(*[v for v, _ in outs]))
    fn = func.FuncOp.from_region(
        "batched_replicas", [a.type for a in out_block.args], [v.type for v, _ in outs], Region(out_block)
    )
    module = ModuleOp([fn])
    _erase_dead(out_block)
    fuse_block(out_block)
    return Batched(module, out_block, [flag for _, flag in outs], k)


def _erase_dead(block: Block) -> None:
    """Erase the ops whose results nothing reads (every op here is pure),
    collectives aside: every thread's block meets at each of them."""
    for op in reversed(list(block.ops)[:-1]):
        if op.results and not isinstance(op, COLLECTIVES) and not any(r.uses for r in op.results):
            block.erase_op(op)


def _stacked_type(t: Any, k: int) -> TensorType:
    if not isinstance(t, TensorType) or any(d < 0 for d in t.get_shape()):
        raise Unbatchable(f"a value of type {t} (not a static tensor)")
    return TensorType(t.element_type, [k, *t.get_shape()])


class _Builder:
    def __init__(self, block: Block, k: int):
        self.block = block
        self.k = k
        self.broadcasts: dict[SSAValue, SSAValue] = {}

    def add(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op

    def stacked(self, v: SSAValue, batched: bool) -> SSAValue:
        """``v`` as a batched value: an unbatched one broadcast to ``[k, ...]``
        once, right after its definition (so that the fusion regions the
        broadcast's users form read it from before their first op; of a
        constant, the plan folds it once)."""
        if batched:
            return v
        got = self.broadcasts.get(v)
        if got is not None:
            return got
        s = _spec(v)
        owner = v.owner
        if isinstance(owner, hlo.BroadcastInDimOp):
            # A broadcast of a broadcast: one op from the first one's operand
            # (the first is removed when nothing else reads it).
            src = owner.operands[0]
            dims = tuple(d + 1 for d in owner.params()["broadcast_dimensions"])
            op = hlo.BroadcastInDimOp.make([src], broadcast_dimensions=dims, shape=(self.k, *s.shape))
        else:
            op = hlo.BroadcastInDimOp.make(
                [v], broadcast_dimensions=tuple(range(1, len(s.shape) + 1)), shape=(self.k, *s.shape)
            )
        if isinstance(owner, Operation):
            self.block.insert_op_after(op, owner)
        elif self.block.first_op is not None:
            self.block.insert_op_before(op, self.block.first_op)
        else:
            self.block.add_op(op)
        self.broadcasts[v] = op.results[0]
        return op.results[0]

    def op(self, op: Operation, env: dict) -> None:
        if isinstance(op, FusionRegionOp):  # inlined: the fusion pass forms regions on the batched ops
            inner = op.body.block
            local = dict(env)
            for a, v in zip(inner.args, op.operands):
                local[a] = env[v]
            body = list(inner.ops)
            for o in body[:-1]:
                self.op(o, local)
            assert isinstance(body[-1], FusionYieldOp)
            for r, v in zip(op.results, body[-1].operands):
                env[r] = local[v]
            return
        if op.regions:
            raise Unbatchable(f"'{op.name}' has regions")
        operands = [env[v] for v in op.operands]
        if isinstance(op, COLLECTIVES):
            vals = [self.stacked(v, f) for v, f in operands]
            new = self.add(
                op.create(
                    operands=vals,
                    result_types=[_stacked_type(r.type, self.k) for r in op.results],
                    properties=dict(op.properties),
                    attributes=dict(op.attributes),
                )
            )
            for r, nr in zip(op.results, new.results):
                env[r] = (nr, True)
            return
        rule = _RULES.get(type(op))
        if rule is None:
            rule = next((f for c, f in _BASE_RULES if isinstance(op, c)), None)
        if rule is None:
            raise Unbatchable(f"'{op.name}' has no batching rule")
        if not any(f for _, f in operands):
            if isinstance(op, COLLECTIVES):  # pragma: no cover - handled above
                raise Unbatchable(op.name)
            # Unbatched operands: the op as it is, once for every replica.
            new = self.add(op.clone(value_mapper={o: v for o, (v, _) in zip(op.operands, operands)}))
            for r, nr in zip(op.results, new.results):
                env[r] = (nr, False)
            return
        for r in op.results:
            _stacked_type(r.type, self.k)  # static tensors only
        new = rule(self, op, operands, op.params())
        for r, nr in zip(op.results, new.results):
            env[r] = (nr, True)


def _shift(dims: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(d) + 1 for d in dims)


def _elementwise(b: _Builder, op, operands, p):
    return b.add(type(op).make([b.stacked(v, f) for v, f in operands], **p))


def _broadcast_in_dim(b: _Builder, op, operands, p):
    ((v, _),) = operands
    p["broadcast_dimensions"] = (0, *_shift(p["broadcast_dimensions"]))
    p["shape"] = (b.k, *p["shape"])
    return b.add(type(op).make([v], **p))


def _reshape(b: _Builder, op, operands, p):
    ((v, _),) = operands
    p["shape"] = (b.k, *p["shape"])
    return b.add(type(op).make([v], **p))


def _transpose(b: _Builder, op, operands, p):
    ((v, _),) = operands
    p["permutation"] = (0, *_shift(p["permutation"]))
    return b.add(type(op).make([v], **p))


def _slice(b: _Builder, op, operands, p):
    ((v, _),) = operands
    p["start_indices"] = (0, *p["start_indices"])
    p["limit_indices"] = (b.k, *p["limit_indices"])
    p["strides"] = (1, *p["strides"])
    return b.add(type(op).make([v], **p))


def _pad(b: _Builder, op, operands, p):
    (v, _), (pad, pad_batched) = operands
    if pad_batched:
        raise Unbatchable("'hlo.pad' with a padding value that differs between replicas")
    v = b.stacked(*operands[0])
    for key in ("edge_padding_low", "edge_padding_high", "interior_padding"):
        p[key] = (0, *p[key])
    return b.add(type(op).make([v, pad], **p))


def _concatenate(b: _Builder, op, operands, p):
    p["dimension"] = int(p["dimension"]) + 1
    return b.add(type(op).make([b.stacked(v, f) for v, f in operands], **p))


def _reduce(b: _Builder, op, operands, p):
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    if any(f for _, f in inits):
        raise Unbatchable("'hlo.reduce' with initial values that differ between replicas")
    p["dimensions"] = _shift(p["dimensions"])
    return b.add(type(op).make([b.stacked(v, f) for v, f in inputs] + [v for v, _ in inits], **p))


def _dot_general(b: _Builder, op, operands, p):
    (x, fx), (y, fy) = operands
    nb = len(p["lhs_batching_dimensions"])
    if fx and fy:  # the replica axis: one more batching dimension, the first
        p["lhs_batching_dimensions"] = (0, *_shift(p["lhs_batching_dimensions"]))
        p["rhs_batching_dimensions"] = (0, *_shift(p["rhs_batching_dimensions"]))
        p["lhs_contracting_dimensions"] = _shift(p["lhs_contracting_dimensions"])
        p["rhs_contracting_dimensions"] = _shift(p["rhs_contracting_dimensions"])
        return b.add(type(op).make([x, y], **p))
    # One side the same for every replica (a mirrored weight): the replica
    # axis is one more free dimension of the other side, so ``[k, B, D] @
    # [D, F]`` is one product of ``k * B`` rows, not ``k`` products; the
    # result's dimensions are batch, lhs free, rhs free: the replica axis is
    # moved to the front when it is not there.
    side = "lhs" if fx else "rhs"
    p[f"{side}_batching_dimensions"] = _shift(p[f"{side}_batching_dimensions"])
    p[f"{side}_contracting_dimensions"] = _shift(p[f"{side}_contracting_dimensions"])
    new = b.add(type(op).make([x, y], **p))
    rank = len(_spec(new.results[0]).shape)
    at = nb if fx else nb + len(_spec(x).shape) - nb - len(p["lhs_contracting_dimensions"])
    if at == 0:
        return new
    perm = (at, *[d for d in range(rank) if d != at])
    return b.add(hlo.TransposeOp.make([new.results[0]], permutation=perm))


def _gather(b: _Builder, op, operands, p):
    (x, fx), (idx, fi) = operands
    idx = b.stacked(idx, fi)
    p["offset_dims"] = _shift(p["offset_dims"])
    p["index_vector_dim"] = int(p["index_vector_dim"]) + 1
    p["start_indices_batching_dims"] = _shift(p.get("start_indices_batching_dims") or ())
    if fx:  # each replica's own operand: the replica axis is a batching dimension of both
        p["collapsed_slice_dims"] = _shift(p["collapsed_slice_dims"])
        p["start_index_map"] = _shift(p["start_index_map"])
        p["operand_batching_dims"] = (0, *_shift(p.get("operand_batching_dims") or ()))
        p["start_indices_batching_dims"] = (0, *p["start_indices_batching_dims"])
        p["slice_sizes"] = (1, *p["slice_sizes"])
    # else one operand for all: the replica axis is one more index batch dimension
    return b.add(type(op).make([x, idx], **p))


def _scatter(b: _Builder, op, operands, p):
    (x, fx), (idx, fi), (upd, fu) = operands
    x, idx, upd = b.stacked(x, fx), b.stacked(idx, fi), b.stacked(upd, fu)
    p["update_window_dims"] = _shift(p["update_window_dims"])
    p["inserted_window_dims"] = _shift(p["inserted_window_dims"])
    p["scatter_dims_to_operand_dims"] = _shift(p["scatter_dims_to_operand_dims"])
    p["input_batching_dims"] = (0, *_shift(p.get("input_batching_dims") or ()))
    p["scatter_indices_batching_dims"] = (0, *_shift(p.get("scatter_indices_batching_dims") or ()))
    p["index_vector_dim"] = int(p["index_vector_dim"]) + 1
    return b.add(type(op).make([x, idx, upd], **p))


def _reverse(b: _Builder, op, operands, p):
    ((v, _),) = operands
    p["dimensions"] = _shift(p["dimensions"])
    return b.add(type(op).make([v], **p))


def _reduce_window(b: _Builder, op, operands, p):
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    if any(f for _, f in inits):
        raise Unbatchable("'hlo.reduce_window' with initial values that differ between replicas")
    for key, one in (("window_dimensions", 1), ("window_strides", 1), ("base_dilations", 1), ("window_dilations", 1)):
        if p.get(key) is not None:
            p[key] = (one, *p[key])
    if p.get("padding") is not None:
        p["padding"] = ((0, 0), *[tuple(q) for q in p["padding"]])
    return b.add(type(op).make([b.stacked(v, f) for v, f in inputs] + [v for v, _ in inits], **p))


_RULES: dict[type, Callable] = {
    VariadicReduceOp: _reduce,
    ReverseOp: _reverse,
    ReduceWindowOp: _reduce_window,
    hlo.BroadcastInDimOp: _broadcast_in_dim,
    hlo.ReshapeOp: _reshape,
    hlo.TransposeOp: _transpose,
    hlo.SliceOp: _slice,
    hlo.PadOp: _pad,
    hlo.ConcatenateOp: _concatenate,
    hlo.ReduceOp: _reduce,
    hlo.DotGeneralOp: _dot_general,
    GatherOp: _gather,
    ScatterOp: _scatter,
}
_BASE_RULES: list[tuple[Any, Callable]] = [(_ELEMENTWISE, _elementwise), (_NO_OPERANDS, _elementwise)]


def stack(values: Sequence[Any]) -> np.ndarray:
    """The replicas' values of one argument as one ``[k, ...]`` array."""
    return np.stack([np.asarray(v) for v in values])


def split_kernel(together: Callable[[Sequence[Any]], Sequence[Any]], k: int) -> Callable[[Any], np.ndarray]:
    """A collective's kernel on stacked values from ``together`` (the
    block's tuple of operands -> its tuple of results)."""

    def run(x: Any) -> np.ndarray:
        x = np.asarray(x)
        return np.stack([np.asarray(r) for r in together(tuple(x[j] for j in range(k)))])

    return run


class BatchedPlan:
    """A thread's plan for a block of ``k`` replicas run batched: takes the
    grouped plan's arguments (per argument, the block's ``k`` values) and
    gives its results (per output, the ``k`` replicas' values), running
    ``inner`` (a :class:`~xtpu.runtime.plan.Plan` of the batched body) once
    on the stacked arguments; unbatched arguments are passed as replica 0's
    value, unbatched results copied to each replica."""

    def __init__(self, inner: Any, batched: Batched, arg_batched: Sequence[bool]):
        self.inner = inner
        self.batched = batched
        self.k = batched.k
        self.arg_batched = list(arg_batched)
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:  # ops, buffer_sets, failed_op, ...: the inner plan's
        return getattr(self.inner, name)

    def kernels(self, factory: Callable[[Operation], Any]) -> tuple:
        return self.inner.kernels(factory)

    def run(self, args: Sequence[Sequence[Any]], K: tuple) -> tuple:
        k = self.k
        outs = self.inner.run([stack(a) if f else a[0] for a, f in zip(args, self.arg_batched)], K)
        res = []
        for o, f in zip(outs, self.batched.out_batched):
            if f:
                res.append(tuple(o[j] for j in range(k)))
            else:
                o = np.asarray(o)
                res.append((o,) + tuple(o.copy() for _ in range(k - 1)))
        return tuple(res)
