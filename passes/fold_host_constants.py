"""``tpu-fold-host-constants``: host code whose inputs are all constants is
evaluated at compile time, so an outside-compilation cluster of constants
leaves no host code behind.

Semantics follow TensorFlow's TPU bridge, which folds such clusters with its
canonicalizer's constant folding: ``tf-replicated-clustering-bridge-v2``
canonicalizes before ``tf-mark-ops-for-outside-compilation``, and the
canonicalizer folds an op of constants by running its CPU kernel
(``tensorflow/compiler/mlir/tensorflow/transforms/constant_fold.cc``).  The
seed's ``outside_compilation(computation_with_string_ops, 1)`` becomes the
constant ``11.0`` there, and ``outside_compilation(lambda v: v * 3.0 + 1.0,
constant(2.0))`` the constant ``7.0``.  xtpu folds with the op's own kernel
(``PrimitiveOp.kernel``), the one the host worker would run, so the value is
bit for bit what the host would have computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import IsTerminator

from xtpu.dialects.hlo import ConstantOp
from xtpu.dialects.hlo_host import StringConstantOp
from xtpu.dialects.ir_walk import isa
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype
from xtpu.dialects.tpu import OutsideCompilationOp, ReplicateOp, YieldOp
from xtpu.passes._common import has_side_effects, in_cluster, is_string, walk_ops

FOLD_BYTES = 1 << 16
"""Largest value (bytes; a string counts its characters) folded into the IR:
a bigger one stays host code rather than grow the module."""

_CONSTANTS = (ConstantOp, StringConstantOp)


_PURE_CLASS: dict[type, bool] = {}


def _pure_class(cls: type) -> bool:
    known = _PURE_CLASS.get(cls)
    if known is None:
        known = _PURE_CLASS[cls] = (
            issubclass(cls, PrimitiveOp)
            and cls.name.startswith("hlo.")
            and not cls.SIDE_EFFECTS
            and not cls.has_trait(IsTerminator)
            and cls.kernel.__func__ is not PrimitiveOp.kernel.__func__  # type: ignore[attr-defined]
        )
    return known


def pure(op: Operation) -> bool:
    """Whether ``op`` is an ``hlo`` op without regions or side effects whose
    value only its operands decide (strings included): ``hlo.print``,
    summaries, host-variable updates and infeed are not; they stay."""
    return _pure_class(type(op)) and not op.regions


def _value_of(op: Operation) -> Any:
    return type(op).kernel(**op.params())()  # type: ignore[attr-defined]


def _small(op: Operation) -> bool:
    for r in op.results:
        spec = TensorSpec.of_type(r.type)
        if spec.dtype != "string" and spec.size * np.dtype(numpy_dtype(spec.dtype)).itemsize > FOLD_BYTES:
            return False
    return True


def _constant_op(value: Any, result: SSAValue) -> Operation | None:
    """An ``hlo.constant`` / ``hlo.string_constant`` of ``value`` with
    ``result``'s type, or None when ``value`` does not fit it."""
    spec = TensorSpec.of_type(result.type)
    if spec.dtype == "string":
        arr = np.asarray(value, dtype=object)
        if arr.shape != spec.shape or sum(len(str(s)) for s in arr.reshape(-1)) > FOLD_BYTES:
            return None
        const: Operation = StringConstantOp.make([], value=arr)
    else:
        arr = np.asarray(value)
        if arr.shape != spec.shape:
            return None
        const = ConstantOp.make([], value=arr.astype(numpy_dtype(spec.dtype), copy=False))
    return const if const.results[0].type == result.type else None


@dataclass
class _Folder:
    values: dict[Operation, Any]
    folded: int = 0

    def constant(self, v: SSAValue) -> Any:
        op = v.owner
        if not isinstance(op, _CONSTANTS):
            return None
        if op not in self.values:
            self.values[op] = _value_of(op)
        return self.values[op]

    def fold_op(self, op: Operation) -> bool:
        """Replace ``op`` by constants when its operands are constants and its
        kernel runs (an op that raises is left to the run, which reports the
        error with the replica and the source line)."""
        if not op.operands or not op.results or not pure(op) or not _small(op):
            return False
        args = []
        for v in op.operands:
            if not isinstance(v.owner, _CONSTANTS):
                return False
            args.append(self.constant(v))
        try:
            with np.errstate(all="ignore"):
                out = type(op).kernel(**op.params())(*args)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - left to the run, which names the op
            return False
        outs = (out,) if len(op.results) == 1 else tuple(out)
        consts = [_constant_op(v, r) for v, r in zip(outs, op.results, strict=True)]
        if any(c is None for c in consts):
            return False
        block = op.parent_block()
        assert block is not None
        for c, r in zip(consts, op.results, strict=True):
            assert c is not None
            c.location = op.location
            block.insert_op_before(c, op)
            c.results[0].name_hint = r.name_hint
            r.replace_all_uses_with(c.results[0])
        operands = [v.owner for v in op.operands]
        block.erase_op(op)
        for o in operands:
            if isa(o, _CONSTANTS) and not o.results[0].uses and o.parent is not None:
                o.parent.erase_op(o)  # type: ignore[union-attr]
        self.folded += 1
        return True

    def fold_block(self, block: Block, host: bool) -> None:
        for op in list(block.ops):
            if op.parent is not block:
                continue  # erased as a dead operand
            if isa(op, OutsideCompilationOp):
                self.fold_block(op.body.block, True)
                _dissolve_if_constant(op)
            elif op.regions:
                for region in op.regions:
                    for inner in region.blocks:
                        self.fold_block(inner, host)
            elif host or (isa(op, PrimitiveOp) and type(op).HOST_ONLY):
                self.fold_op(op)


def _dissolve_if_constant(cluster: OutsideCompilationOp) -> bool:
    """Inline a cluster left with constants only (no side effects) before it:
    its results become the constants.  Not when a string result would reach
    device code (it stays host code, as a head cluster)."""
    term = cluster.body.block.last_op
    assert isinstance(term, YieldOp)
    if has_side_effects(cluster):
        return False
    if any(not isinstance(o, _CONSTANTS) for o in cluster.body.block.ops if o is not term):
        return False
    for r in cluster.results:
        if is_string(r.type) and any(not in_cluster(u.operation) for u in r.uses):
            return False
    block = cluster.parent_block()
    assert block is not None
    for r, v in zip(cluster.results, term.values, strict=True):
        r.replace_all_uses_with(v)
    for o in list(cluster.body.block.ops):
        if o is not term:
            o.detach()
            block.insert_op_before(o, cluster)
    block.erase_op(cluster)
    return True


@dataclass(frozen=True)
class FoldHostConstants(ModulePass):
    """Evaluate host code of constants at compile time.

    In each device ``tpu.replicate`` body (its ``hlo.if`` / ``hlo.while``
    regions included), an op inside a ``tpu.outside_compilation`` cluster,
    or a host-only op (``HOST_ONLY``: strings) outside one, is replaced by
    ``hlo.constant`` / ``hlo.string_constant`` ops of its results when all
    its operands are such constants and it is pure: an ``hlo`` op without
    regions or ``SIDE_EFFECTS`` (``hlo.print``, summaries and
    ``hlo.host_variable_update`` stay, as do their operands).  The value is
    the op's kernel run on the constants' values, what the host worker would
    compute; an op whose kernel raises (``hlo.string_to_number`` of a
    non-number, say) is left for the run to report, and results over
    :data:`FOLD_BYTES` are not folded.  A cluster left with only constants
    is inlined where it was: its results become those constants, so the
    program has no host code for it.  Not when it yields a string that
    device code uses (strings never live on the device).  Device ops
    outside clusters are left alone (the runtime folds them when it plans
    the program, as XLA does).  TF: the canonicalizer's constant folding
    in ``tf-replicated-clustering-bridge-v2``.
    """

    name = "tpu-fold-host-constants"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        folder = _Folder({})
        for rep in [r for r in walk_ops(op) if isa(r, ReplicateOp) and not r.on_host]:
            folder.fold_block(rep.body.block, False)
