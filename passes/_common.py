"""Helpers shared by xtpu's passes: source locations, string values, ancestry,
and what the outside-compilation passes ask about clusters and host values."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

from xdsl.dialects.builtin import (
    CallSiteLoc,
    FileLineColLoc,
    FusedLoc,
    IntegerAttr,
    NameLoc,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.traits import IsTerminator
from xdsl.utils.exceptions import DiagnosticException

from xtpu.dialects.by_identity import memo
from xtpu.dialects.fusion import FusionRegionOp
from xtpu.dialects.ir_walk import isa, walk_ops
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.tensor_spec import StringType
from xtpu.dialects.tpu import CLUSTER_ATTR, OutsideCompilationOp, ReplicaIdOp, ReplicateOp, YieldOp

OpT = TypeVar("OpT", bound=Operation)


def source_line(loc: Attribute) -> str | None:
    """``file:line`` of the first file location inside ``loc`` (the file's
    base name, as every xtpu error names the user's line), else None."""
    if isinstance(loc, FileLineColLoc):
        return f"{os.path.basename(loc.filename.data)}:{loc.line.data}"
    if isinstance(loc, NameLoc):
        return source_line(loc.location)
    if isinstance(loc, CallSiteLoc):
        return source_line(loc.callee)
    if isinstance(loc, FusedLoc):
        for inner in loc.locations.data:
            if (text := source_line(inner)) is not None:
                return text
    return None


def refuse_fused(root: Operation, pass_name: str) -> None:
    """Raise when ``root`` holds a ``fusion.region``: ``pass_name`` reads
    the ops one by one and runs before ``hlo-fuse-elementwise``, the last
    pass of the pipeline (a region hides its ops)."""
    for o in root.walk():
        if isinstance(o, FusionRegionOp):
            raise DiagnosticException(
                f"'fusion.region' op{at(o)} is formed by hlo-fuse-elementwise, the last pass: "
                f"{pass_name} runs before it"
            )


def at(op: Operation) -> str:
    """`` (at file:line)`` for an op with a file location, else ``""``."""
    text = source_line(op.location)
    return f" (at {text})" if text is not None else ""


def is_string(t: Attribute) -> bool:
    """Whether ``t`` is a tensor of ``!hlo.string`` (or the element type itself)."""
    return memo(_STRING_TYPES, t, _is_string)


def _is_string(t: Attribute) -> bool:
    return isa(t.element_type if isa(t, TensorType) else t, StringType)


_STRING_TYPES: dict[int, tuple[Attribute, bool]] = {}
""":func:`is_string` per type object: a program's values share a few type
objects, and the passes ask of every value."""


def has_string_values(op: Operation) -> bool:
    """Whether ``op`` has an operand or a result of string element type."""
    for v in op.operands:
        if is_string(v.type):
            return True
    for r in op.results:
        if is_string(r.type):
            return True
    return False


def enclosing(op: Operation, cls: type[OpT]) -> OpT | None:
    """The closest proper ancestor of ``op`` that is a ``cls``, if any."""
    p = op.parent_op()
    while p is not None:
        if isa(p, cls):
            return p  # type: ignore[return-value]
        p = p.parent_op()
    return None


def defined_inside(value: SSAValue, op: Operation) -> bool:
    """Whether ``value`` is defined by an op or block nested in ``op``."""
    owner = value.owner
    return op.is_ancestor(owner) and owner is not op


# --------------------------------------------------------------------------
# Outside-compilation clusters
# --------------------------------------------------------------------------


def in_cluster(op: Operation) -> bool:
    """Whether ``op`` is a ``tpu.outside_compilation`` or lies inside one."""
    return isa(op, OutsideCompilationOp) or enclosing(op, OutsideCompilationOp) is not None


def device_uses(value: SSAValue) -> list:
    """The uses of ``value`` by ops that run on the device (not in a cluster)."""
    return [u for u in value.uses if not in_cluster(u.operation)]


def dissolve_clusters(op: Operation) -> list[str]:
    """Inline every ``tpu.outside_compilation`` nested in ``op``'s regions in
    place: its ops move, in order, to just before it and its results become
    the values its ``tpu.yield`` yields.  For code that runs on the host
    already (TF: an outside-compiled op inside host-placed control flow is on
    the host; nested outside compilation is flattened), where the cluster
    boundary means nothing.  Returns the dissolved clusters' names, in
    program order."""
    names = []
    for inner in [o for o in walk_ops(op)[1:] if isa(o, OutsideCompilationOp)]:
        names.append(inner.cluster.data)
        block = inner.parent_block()
        assert block is not None
        term = inner.body.block.last_op
        assert isinstance(term, YieldOp)
        for r, v in zip(inner.results, term.values, strict=True):
            r.replace_all_uses_with(v)
        for o in list(inner.body.block.ops):
            if o is not term:
                o.detach()
                block.insert_op_before(o, inner)
        block.erase_op(inner)
    return names


def has_side_effects(op: Operation) -> bool:
    """Whether ``op`` or an op nested in it has ``SIDE_EFFECTS`` (print, summaries)."""
    return any(getattr(type(o), "SIDE_EFFECTS", False) for o in walk_ops(op))


def captured_values(op: Operation) -> list[SSAValue]:
    """Values used inside ``op``'s regions but defined outside ``op``, in
    order of first use."""
    seen: dict[SSAValue, None] = {}
    for region in op.regions:
        for inner in region.walk():
            for v in inner.operands:
                if not defined_inside(v, op):
                    seen.setdefault(v, None)
    return list(seen)


class HostComputable:
    """Values the host can compute by itself, so they never need to travel:
    constants (``hlo.constant``, ``hlo.string_constant``, ``hlo.iota``), the
    replica id, and region-free ``hlo`` ops without side effects whose
    operands are all such values.  Answers are memoized: build one per pass
    run, before the IR changes."""

    def __init__(self) -> None:
        self._memo: dict[SSAValue, bool] = {}

    def __call__(self, value: SSAValue) -> bool:
        known = self._memo.get(value)
        if known is not None:
            return known
        op = value.owner
        ok = isinstance(op, Operation) and self._op_ok(op)
        self._memo[value] = ok
        return ok

    def _op_ok(self, op: Operation) -> bool:
        if isinstance(op, ReplicaIdOp):
            return True
        if not isinstance(op, PrimitiveOp) or op.dialect_name() != "hlo" or op.regions:
            return False
        if op.SIDE_EFFECTS or op.has_trait(IsTerminator):
            return False
        return all(self(v) for v in op.operands)

    def chain(self, values: list[SSAValue]) -> list[Operation]:
        """The ops that compute ``values`` (all computable), dependencies
        first, each once."""
        out: dict[Operation, None] = {}

        def visit(op: Operation) -> None:
            if op in out:
                return
            for v in op.operands:
                visit(v.owner)  # type: ignore[arg-type]
            out[op] = None

        for v in values:
            assert self(v), v
            visit(v.owner)  # type: ignore[arg-type]
        return list(out)


def clone_into(ops: list[Operation], block: Block, mapping: dict[SSAValue, SSAValue]) -> None:
    """Append clones of ``ops`` (dependencies first) to ``block``, mapping
    their operands and recording their results in ``mapping``."""
    for op in ops:
        block.add_op(op.clone(value_mapper=mapping))


def erase_if_dead(ops: list[Operation]) -> None:
    """Erase the ops of ``ops`` (dependencies first) whose results nothing
    uses any more, users before the ops they use."""
    for op in reversed(ops):
        if op.parent is not None and all(not r.uses for r in op.results):
            op.parent.erase_op(op)  # type: ignore[union-attr]


def remap_operands(op: Operation, mapping: dict[SSAValue, SSAValue]) -> None:
    """Replace operands of ``op`` and of every op nested in it by ``mapping``."""
    for inner in op.walk():
        for idx, operand in enumerate(inner.operands):
            new = mapping.get(operand)
            if new is not None:
                inner.operands[idx] = new


def host_replicate(
    block: Block, operands: list[SSAValue], n: int, names: list[str], location: Attribute
) -> ReplicateOp:
    """``tpu.replicate(operands) {n, placement = "host"}`` around ``block``
    (which ends in ``tpu.yield``), named after the clusters it runs: ``n``
    results per yielded value, replica-major as the device replicate's."""
    term = block.last_op
    assert isinstance(term, YieldOp)
    op = ReplicateOp.create(
        operands=operands,
        result_types=[v.type for v in term.values for _ in range(n)],
        properties={"n": IntegerAttr(n, i64), "placement": StringAttr("host")},
        regions=[Region(block)],
    )
    op.attributes[CLUSTER_ATTR] = StringAttr(",".join(names))
    op.location = location
    return op


def prefix_tiled(sizes: Sequence[int], counts: Sequence[int]) -> bool:
    """Whether tiling dimensions ``sizes`` by ``counts`` cuts their
    row-major order into contiguous chunks, in tile order: every dimension
    before the first partly tiled one is cut into single rows, every one
    after it is whole (the reshape rules of tpu-propagate-sharding and
    tpu-spmd-partition)."""
    j = next((i for i, (n, t) in enumerate(zip(sizes, counts)) if n != t), len(sizes))
    return all(t == 1 for t in counts[j + 1 :])


def chunk_tiling(sizes: Sequence[int], chunks: int) -> tuple[int, ...] | None:
    """The prefix tiling of dimensions ``sizes`` into ``chunks`` contiguous
    row-major chunks, if there is one."""
    out, rem = [], chunks
    for n in sizes:
        if rem % n == 0:
            out.append(n)
            rem //= n
        elif n % rem == 0:
            out.append(rem)
            rem = 1
        else:
            return None
    return tuple(out) if rem == 1 else None
