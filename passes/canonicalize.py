"""``hlo-canonicalize``: algebraic identities, common subexpressions and dead
code, before outside compilation is extracted.

Semantics follow the simplifications that TensorFlow's TPU bridge runs before
it extracts outside compilation (``tf-replicated-clustering-bridge-v2``:
``canonicalize`` and ``cse`` come before ``tf-mark-ops-for-outside-compilation``
and ``tf-tpu-extract-head-tail-outside-compilation``), on StableHLO's ops: the
identities are those of MLIR's ``stablehlo`` / ``arith`` folders that are exact
for every value (``x * 1``, ``x / 1``, ``x - 0``, ``x + (-0.0)`` for floats,
``x + 0`` for integers; a ``convert``, ``reshape``, ``broadcast_in_dim`` or
``transpose`` that changes nothing; a float ``convert`` back to the dtype
an exact widening came from, ``convert(convert(x, float32), bfloat16)``
for a bfloat16 ``x``, as XLA's algebraic simplifier removes the pair), with the constant seen through
``broadcast_in_dim`` and ``reshape`` of a splat.  A value the gradient traces
as ``ones * w`` is then ``w`` itself: when ``w`` is a replica input, a host
cluster that uses it needs nothing from the device and runs in the head.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xtpu.dialects.hlo import (
    AddOp,
    BroadcastInDimOp,
    ConstantOp,
    ConvertOp,
    DivideOp,
    MultiplyOp,
    ReshapeOp,
    SubtractOp,
    TransposeOp,
)
from xtpu.dialects.ir_walk import isa
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.dialects.tpu import OutsideCompilationOp
from xtpu.passes._common import has_side_effects, walk_ops
from xtpu.passes.fold_host_constants import pure

_SPLAT_BYTES = 1 << 16
"""Largest constant decoded to see whether it is a splat."""


class _Splats:
    """The one element of a splat constant, decoded once per constant op."""

    def __init__(self) -> None:
        self._of: dict[Operation, tuple[str, object, bool] | None] = {}

    def __call__(self, v: SSAValue) -> tuple[str, object, bool] | None:
        """``(dtype kind, element as a Python number, sign bit)`` when ``v``
        is a splat constant, also through ``broadcast_in_dim`` / ``reshape``
        of one, else None."""
        op = v.owner
        while isa(op, (BroadcastInDimOp, ReshapeOp)):
            op = op.operands[0].owner
        if not isa(op, ConstantOp):
            return None
        if op not in self._of:
            c = _splat_of(op)
            kind = c.dtype.kind if c is not None else ""
            self._of[op] = None if c is None else (kind, c.item(), kind == "f" and bool(np.signbit(c)))
        return self._of[op]

    def is_(self, v: SSAValue, value: float, negative_zero: bool | None = None) -> bool:
        c = self(v)
        if c is None or c[0] not in "biuf" or c[1] != value:
            return False
        if negative_zero is not None and c[0] == "f":
            return c[2] == negative_zero
        return True


def _splat_of(op: ConstantOp) -> np.ndarray | None:
    spec = TensorSpec.of_type(op.results[0].type)
    if spec.size * 16 > _SPLAT_BYTES:
        return None
    arr = np.asarray(type(op).kernel(**op.params())())
    if arr.size == 0:
        return None
    flat = arr.reshape(-1)
    raw = flat.view(np.uint8).reshape(arr.size, -1)
    if not (raw == raw[0]).all():
        return None  # not every element has the same bits
    return np.asarray(flat[0])


def _float(v: SSAValue) -> bool:
    return TensorSpec.of_type(v.type).dtype.startswith(("float", "bfloat"))


#: float widenings that keep every value: ``(from, to)``.
_EXACT_WIDENINGS = frozenset(
    {("bfloat16", "float32"), ("bfloat16", "float64"), ("float16", "float32"), ("float16", "float64")}
    | {("float32", "float64")}
)


def _widens_exactly(x: SSAValue, y: SSAValue) -> bool:
    """Whether ``y`` (a convert of ``x``) holds every value of ``x`` exactly,
    so that converting it back to ``x``'s dtype gives ``x``."""
    return (TensorSpec.of_type(x.type).dtype, TensorSpec.of_type(y.type).dtype) in _EXACT_WIDENINGS


_IDENTITY_OPS = (MultiplyOp, DivideOp, AddOp, SubtractOp, ConvertOp, ReshapeOp, BroadcastInDimOp, TransposeOp)


@functools.cache
def _identity_kind(cls: type[Operation]) -> type[Operation] | None:
    """The class of :data:`_IDENTITY_OPS` an op of class ``cls`` is, if any
    (once per class: ``isinstance`` against xDSL's abstract classes is slow)."""
    return next((k for k in _IDENTITY_OPS if issubclass(cls, k)), None)


def identity_operand(op: Operation, splats: _Splats) -> SSAValue | None:
    """The operand ``op`` equals for every value of it, if an identity
    applies (its type is the result's)."""
    kind = _identity_kind(type(op))
    if kind is None or len(op.results) != 1:
        return None
    rtype = op.results[0].type
    # Only an operand of the result's type can be the result (tested first:
    # it is cheaper than the constant or the dimensions).
    found: SSAValue | None = None
    if kind is MultiplyOp:
        lhs, rhs = op.operands
        found = (
            lhs
            if _same_type(lhs, rtype) and splats.is_(rhs, 1)
            else rhs
            if _same_type(rhs, rtype) and splats.is_(lhs, 1)
            else None
        )
    elif kind is DivideOp:
        lhs, rhs = op.operands
        found = lhs if _same_type(lhs, rtype) and splats.is_(rhs, 1) else None
    elif kind is AddOp:
        lhs, rhs = op.operands
        # x + (+0.0) is +0.0 for x = -0.0: only -0.0 is the float identity.
        neg = True if _float(op.results[0]) else None
        found = (
            lhs
            if _same_type(lhs, rtype) and splats.is_(rhs, 0, neg)
            else rhs
            if _same_type(rhs, rtype) and splats.is_(lhs, 0, neg)
            else None
        )
    elif kind is SubtractOp:
        lhs, rhs = op.operands
        if _same_type(lhs, rtype):
            found = lhs if splats.is_(rhs, 0, False if _float(op.results[0]) else None) else None
    elif kind is ConvertOp:
        found = op.operands[0]
        inner = found.owner
        if isinstance(inner, ConvertOp) and _widens_exactly(inner.operands[0], found):
            found = inner.operands[0]  # convert(convert(x, wider), x's type) is x (XLA's algsimp)
    elif kind is ReshapeOp:
        found = op.operands[0]
    elif kind is BroadcastInDimOp:
        if _same_type(op.operands[0], rtype):
            dims = tuple(op.params()["broadcast_dimensions"])  # type: ignore[attr-defined]
            found = op.operands[0] if dims == tuple(range(len(dims))) else None
    elif kind is TransposeOp:
        if _same_type(op.operands[0], rtype):
            perm = tuple(op.params()["permutation"])  # type: ignore[attr-defined]
            found = op.operands[0] if perm == tuple(range(len(perm))) else None
    if found is not None and _same_type(found, rtype):
        return found
    return None


def _same_type(v: SSAValue, t: Attribute) -> bool:
    return v.type is t or v.type == t


def _same_form(a: Operation, b: Operation) -> bool:
    """Whether ``a`` and ``b`` (same name and operands) have equal
    properties, attributes and result types, all hashable: CSE merges them."""
    if a.properties != b.properties or a.attributes != b.attributes or a.result_types != b.result_types:
        return False
    try:  # an op with an unhashable attribute is never merged
        hash((tuple(b.properties.values()), tuple(b.attributes.values())))
    except TypeError:
        return False
    return True


@dataclass
class _Simplifier:
    splats: _Splats = field(default_factory=_Splats)

    def block(self, block: Block, seen: dict) -> None:
        """Identities and CSE over ``block``, in order; ``seen`` holds the
        pure ops that dominate it, on the same side (device or host)."""
        seen = dict(seen)
        for op in list(block.ops):
            if isa(op, OutsideCompilationOp):
                self.block(op.body.block, {})  # host code: its own scope
                continue
            if op.regions:
                for region in op.regions:
                    for inner in region.blocks:
                        self.block(inner, seen)
                continue
            if not pure(op):
                continue
            same = identity_operand(op, self.splats)
            if same is None:
                # Ops are bucketed by name and operands (hashing an xDSL
                # attribute hashes its whole contents), then compared.
                key = (op.name, tuple(op.operands))
                bucket = seen.get(key, ())
                earlier = next((e for e in bucket if _same_form(e, op)), None)
                if earlier is None:
                    seen[key] = (*bucket, op)
                    continue
                new = list(earlier.results)
            else:
                new = [same]
            for old, v in zip(op.results, new, strict=True):
                old.replace_all_uses_with(v)
            block.erase_op(op)


def _may_raise(op: Operation) -> bool:
    """Host-only ops (strings) raise on bad values (``hlo.string_to_number``
    of a non-number); removing one would hide the error eager code raises."""
    return any(getattr(type(o), "HOST_ONLY", False) for o in walk_ops(op))


def _dead(op: Operation) -> bool:
    if not op.results or any(r.first_use is not None for r in op.results):
        return False
    if isa(op, OutsideCompilationOp) or (op.regions and op.dialect_name() == "hlo"):
        return not has_side_effects(op) and not _may_raise(op)
    return pure(op) and not _may_raise(op)


def eliminate_dead_code(root: Operation) -> bool:
    """Erase the ops whose results nothing uses and that have no side
    effects: pure ``hlo`` ops, ``hlo.if`` / ``hlo.while`` and
    ``tpu.outside_compilation`` without side effects in them; host-only ops
    (and what holds them) stay, as they may raise (eager code raises too) (users before
    what they use, inner blocks first).  Ops without results stay."""
    changed = False
    for block in reversed([b for o in walk_ops(root) for r in o.regions for b in r.blocks]):  # inner first
        for op in reversed(list(block.ops)):
            if op.parent is block and _dead(op):
                block.erase_op(op)
                changed = True
    return changed


@dataclass(frozen=True)
class Canonicalize(ModulePass):
    """Simplify ``hlo`` code before outside compilation is extracted.

    Every pure ``hlo`` op (no regions, no side effects) that is an identity
    is replaced by its operand: ``multiply`` by one (either side),
    ``divide`` by one, ``subtract`` of ``+0``, ``add`` of ``-0.0`` (floats;
    ``x + 0.0`` is not ``x`` for ``x = -0.0``) or of ``0`` (integers), and
    ``convert`` / ``reshape`` / ``broadcast_in_dim`` / ``transpose`` whose
    result type is the operand's (and whose dimensions are in order), and
    a ``convert`` of an exactly widening ``convert`` back to the original
    type (bfloat16 / float16 -> float32 / float64 -> back, float32 ->
    float64 -> back: ``x`` itself, a NaN's payload included, as XLA's
    algebraic simplifier gives it).  The
    constant is an ``hlo.constant`` whose elements all have the same bits,
    also through ``broadcast_in_dim`` / ``reshape`` of one.  Then equal pure
    ops (same name, operands, properties, attributes and types) are merged
    into the first (CSE), within a block and the regions it dominates, and
    never across a ``tpu.outside_compilation`` boundary (host and device
    values stay where they are).  Last, dead code goes: pure ops, region
    ops and clusters without side effects whose results nothing uses, but
    not host-only ops (a string that does not parse raises, as eagerly).
    TF: ``canonicalize`` and ``cse`` in ``tf-replicated-clustering-bridge-v2``,
    before outside compilation is marked and extracted.
    """

    name = "hlo-canonicalize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        # One sweep in program order sees every operand already simplified.
        simplifier = _Simplifier()
        for func in op.body.block.ops:
            for region in func.regions:
                for block in region.blocks:
                    simplifier.block(block, {})
        eliminate_dead_code(op)
