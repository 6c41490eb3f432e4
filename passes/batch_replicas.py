"""``tpu-batch-replicas``: the replicate body for a block of replicas as
one program on stacked values (JAX's ``vmap`` over the replica axis).

A thread of the runtime that runs a block of ``k`` replicas
(runtime/sequential.py) runs the replicate body once per replica, op by
op: ``k`` times the Python calls of one replica, each on a ``k``-th of the
data.  :func:`batch_body` rewrites the body (after the other passes, fusion
regions inlined) into one program over values with a leading axis of the
``k`` replicas, by a batching rule per op kind, as JAX's batching rules do:
a value is *batched* (``[k, *shape]``, replica ``j`` at index ``j``) or
*unbatched* (the same for every replica: constants, iotas, arguments every
replica gets as one array, and what is computed from those only).

* elementwise ops (``hlo`` unary and binary ops, ``compare``, ``select``,
  ``convert``, ``is_finite``, ``stop_gradient``): the same op, an unbatched
  operand broadcast first (once, right after its definition);
* ``broadcast_in_dim``, ``reshape``, ``transpose``, ``reverse``,
  ``slice``, ``pad``, ``concatenate``, ``reduce``, ``variadic_reduce``,
  ``reduce_window``: their dimensions shifted by one;
* ``dot_general``: the replica axis is one more batching dimension of both
  sides, an unbatched side (a mirrored weight) broadcast (a stride-0
  view): ``[k, B, D] @ [D, F]`` is ``k`` BLAS products of ``B`` rows, each
  the unbatched program's call (one product of ``k * B`` rows would not
  be: a BLAS may round a row differently among more rows);
* ``gather`` and ``scatter``: StableHLO's batching dimensions (a gather
  from an unbatched table: one more index batch dimension);
* collectives (``ccl.*``): the same op on stacked values; when every
  replica gets the same result (an all-reduce or all-gather over one group
  of all the replicas) its row 0 is taken, unbatched, so that what follows
  runs once per block (and an unbatched operand is not stacked at all); the
  attributes ``tpu.batched_operand`` / ``tpu.batched_result`` say which,
  and the runtime splits the stack into the replicas' operands;
* anything else (ops with regions, ``tpu.replica_id``, random bits,
  sorting, host transfers, convolutions): not batched.

The fusion pass's grouping then runs on the batched body.  Every op
computes each replica's slice with the same kernel on the same values, so
a replica's results are the unbatched program's bit for bit (the runtime's
test_batching.py checks it; ``hlo.scatter`` runs a leading batching
dimension as each element's scatter for that).

As a pass (``xtpu-opt -p 'tpu-batch-replicas{replicas=4}'``), for reading
the rewrite: each device ``tpu.replicate`` gets a ``func.func
@batched_replicas_<i>`` beside ``@main`` holding its batched body (every
argument batched); the replicate itself is unchanged.  The runtime calls
:func:`batch_body` itself, for the block sizes its threads run
(runtime/batching.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType, UnitAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from xtpu.dialects import ccl, hlo, tpu
from xtpu.dialects.autodiff import StopGradientOp
from xtpu.dialects.ccl import COLLECTIVES
from xtpu.dialects.fusion import FusionRegionOp, FusionYieldOp
from xtpu.dialects.hlo_indexing import GatherOp, ScatterOp, VariadicReduceOp
from xtpu.dialects.hlo_math import IsFiniteOp, ReverseOp
from xtpu.dialects.hlo_window import ReduceWindowOp
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.dialects.tpu import BATCHED_OPERAND_ATTR, BATCHED_RESULT_ATTR
from xtpu.passes._common import at
from xtpu.passes.fuse_elementwise import fuse_block

__all__ = ["BatchReplicas", "Unbatchable", "batch_body"]

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


def _same_for_every_replica(op: Operation, replicas: int | None) -> bool:
    """Whether every replica gets the same result of collective ``op``: an
    all-reduce or all-gather over one group of all ``replicas``."""
    if replicas is None or not isinstance(op, (ccl.AllReduceOp, ccl.AllGatherOp)):
        return False
    groups = [list(g) for g in op.params()["replica_groups"]]
    return not groups or (len(groups) == 1 and sorted(groups[0]) == list(range(replicas)))


class Unbatchable(Exception):
    """The block has an op without a batching rule (the message names it)."""


def _spec(v: SSAValue) -> TensorSpec:
    return TensorSpec.of_type(v.type)


def batch_body(body: Block, k: int, batched_args: Sequence[bool] | None = None) -> tuple[Block, list[bool]]:
    """The batched program of ``body`` (a ``tpu.replicate`` body after the
    passes) for ``k`` replicas (module doc): the batched body, in a
    ``func.func`` of a module of its own, whose argument ``i`` is
    ``[k, *shape]`` of the body's (unbatched where ``batched_args[i]`` is
    False), and per output whether it is batched.  ``batched_args[i]`` False:
    argument ``i`` is one value for all ``k`` replicas (a mirrored
    variable: the same array given to each), passed unbatched.

    Raises:
      Unbatchable: an op of ``body`` has no batching rule, or its values are
        not static tensors.
    """
    flags = [True] * len(body.args) if batched_args is None else list(batched_args)
    out_block = Block(arg_types=[_stacked_type(a.type, k) if f else a.type for a, f in zip(body.args, flags)])
    env: dict[SSAValue, tuple[SSAValue, bool]] = {a: (b, f) for a, b, f in zip(body.args, out_block.args, flags)}
    for a, arg in zip(body.args, out_block.args):
        arg.name_hint = a.name_hint
    parent = body.parent_op()
    b = _Builder(out_block, k, parent.num_replicas if isinstance(parent, tpu.ReplicateOp) else None)
    ops = list(body.ops)
    for op in ops[:-1]:
        b.op(op, env)
    term = ops[-1]
    outs = [env[v] for v in term.operands]
    out_block.add_op(func.ReturnOp(*[v for v, _ in outs]))
    fn = func.FuncOp.from_region(
        "batched_replicas", [a.type for a in out_block.args], [v.type for v, _ in outs], Region(out_block)
    )
    ModuleOp([fn])  # the block's home: the fusion pass reads its parents
    _erase_dead(out_block)
    fuse_block(out_block)
    return out_block, [flag for _, flag in outs]


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
    def __init__(self, block: Block, k: int, replicas: int | None):
        self.block = block
        self.k = k
        self.replicas = replicas
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
            raise Unbatchable(f"'{op.name}' op{at(op)} has regions")
        operands = [env[v] for v in op.operands]
        if isinstance(op, COLLECTIVES):
            # The operand as it is (an unbatched one: every replica's is that
            # value) when every replica gets the same result (an all-reduce or
            # all-gather over one group of all the replicas), then taken
            # unbatched (row 0: what follows runs once per block); else
            # stacked, result stacked.  The attributes tell the runtime.
            ((v, operand_batched),) = operands
            same = _same_for_every_replica(op, self.replicas)
            if not same:
                v, operand_batched = self.stacked(v, operand_batched), True
            attrs = dict(op.attributes)
            if operand_batched:
                attrs[BATCHED_OPERAND_ATTR] = UnitAttr()
            if not same:
                attrs[BATCHED_RESULT_ATTR] = UnitAttr()
            result_type = op.results[0].type
            if operand_batched:
                result_type = _stacked_type(result_type, self.k)
            new = self.add(
                op.create(operands=[v], result_types=[result_type], properties=dict(op.properties), attributes=attrs)
            )
            (r,) = op.results
            out = new.results[0]
            out.name_hint = r.name_hint
            if same and operand_batched:  # one row for all
                shape = _spec(r).shape
                row = self.add(
                    hlo.SliceOp.make(
                        [out],
                        start_indices=(0,) * (len(shape) + 1),
                        limit_indices=(1, *shape),
                        strides=(1,) * (len(shape) + 1),
                    )
                )
                out = self.add(hlo.ReshapeOp.make([row.results[0]], shape=tuple(shape))).results[0]
            env[r] = (out, not same)
            return
        rule = _RULES.get(type(op))
        if rule is None:
            rule = next((f for c, f in _BASE_RULES if isinstance(op, c)), None)
        if rule is None:
            raise Unbatchable(f"'{op.name}' op{at(op)} has no batching rule")
        if not any(f for _, f in operands):
            # Unbatched operands: the op as it is, once for every replica.
            new = self.add(op.clone(value_mapper={o: v for o, (v, _) in zip(op.operands, operands)}))
            for r, nr in zip(op.results, new.results):
                env[r] = (nr, False)
            return
        for r in op.results:
            _stacked_type(r.type, self.k)  # static tensors only
        new = rule(self, op, operands, op.params())
        for r, nr in zip(op.results, new.results):
            nr.name_hint = r.name_hint
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
    # The replica axis is one more batching dimension, the first, of both
    # sides; an unbatched side (a mirrored weight) is stacked as a
    # broadcast (a stride-0 view, not a copy).  Each replica's product is
    # then its own BLAS call on the same matrices as the unbatched
    # program's: ``[k, B, D] @ [D, F]`` is ``k`` products of ``B`` rows,
    # not one of ``k * B`` rows, whose rows a BLAS may round differently
    # (OpenBLAS's float32 GEMM does: a row's bits depend on its place in
    # the call's row blocks).
    (x, fx), (y, fy) = operands
    for key in ("lhs_batching_dimensions", "rhs_batching_dimensions"):
        p[key] = (0, *_shift(p[key]))
    for key in ("lhs_contracting_dimensions", "rhs_contracting_dimensions"):
        p[key] = _shift(p[key])
    return b.add(type(op).make([b.stacked(x, fx), b.stacked(y, fy)], **p))


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


@dataclass(frozen=True)
class BatchReplicas(ModulePass):
    """Add, for each device ``tpu.replicate``, ``func.func
    @batched_replicas_<i>``: its body for a block of ``replicas`` replicas
    run as one program on stacked values (module doc): what TF's ``pfor``
    (``tf.vectorized_map``) does to a loop's iterations, done to the
    replicas a thread runs.

    Raises (``DiagnosticException``): ``replicas`` < 1; an op of a body has
    no batching rule (the op and its source line named).
    """

    name = "tpu-batch-replicas"
    replicas: int = 2

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.replicas < 1:
            raise DiagnosticException(f"tpu-batch-replicas: replicas must be >= 1, got {self.replicas}")
        reps = [o for o in op.walk() if isinstance(o, tpu.ReplicateOp) and not o.on_host]
        for i, rep in enumerate(reps):
            try:
                block, _ = batch_body(rep.body.block, self.replicas)
            except Unbatchable as e:
                raise DiagnosticException(f"tpu-batch-replicas: {e}") from None
            fn = block.parent_op()
            fn.detach()
            fn.sym_name = StringAttr(f"batched_replicas_{i}")
            op.body.block.add_op(fn)
