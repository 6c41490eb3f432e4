"""``ccl-combine-all-reduce``: independent small all-reduces become one.

After XLA's ``AllReduceCombiner`` (``xla/hlo/transforms/collectives/
all_reduce_combiner.cc``): all-reduces of one block with the same
``replica_groups``, reduction and element type, none depending on another,
are merged into one all-reduce of their operands flattened and concatenated
(TF's batch all-reduce packs gradients the same way), as long as the combined
buffer stays within ``threshold-bytes``; each original result is a slice of
it, reshaped back.  A step that all-reduces 50 small gradients then meets the
other replicas once instead of 50 times.  The reductions are elementwise, so
every element is combined from the same operands in the same order: results
are bit for bit those of the separate all-reduces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import Pure

from xtpu.dialects import hlo
from xtpu.dialects.ccl import AllReduceOp
from xtpu.dialects.ir_walk import has_trait, isa
from xtpu.dialects.tensor_spec import NUMERIC_DTYPES, TensorSpec, numpy_dtype
from xtpu.dialects.tpu import ReplicateOp
from xtpu.passes._common import enclosing, walk_ops

DEFAULT_THRESHOLD_BYTES = 1024 * 1024
"""The combined buffer's largest size.  XLA's GPU default is 30 MiB; on
xtpu's threads backend combining pays up to about 1 MiB in all and costs
beyond (the concatenation and slices copy buffers that a rendezvous does not):
``benchmarks/all_reduce_passes.py``."""


def all_reduce_spec(op: AllReduceOp) -> TensorSpec | None:
    """The operand's spec if ``op`` is an all-reduce these passes may
    rewrite: a non-empty numeric tensor, and, in a replica split over
    logical cores, groups already over participants (after
    ``tpu-spmd-partition``; before it the groups name replicas and the
    operand may still be sharded)."""
    t = op.operand.type
    if not isinstance(t, TensorType):
        return None
    try:
        spec = TensorSpec.of_type(t)
    except (ValueError, TypeError):
        return None
    if spec.dtype not in NUMERIC_DTYPES or spec.size == 0:
        return None
    rep = enclosing(op, ReplicateOp)
    if rep is not None and rep.num_cores > 1:
        ids = sorted(i for g in op.params()["replica_groups"] for i in g)
        if ids == list(range(rep.num_replicas)):
            return None
    return spec


def nbytes(spec: TensorSpec) -> int:
    return spec.size * numpy_dtype(spec.dtype).itemsize


def _used_values(op: Operation) -> list[SSAValue]:
    """The values ``op`` or any op nested in it uses."""
    values: list[SSAValue] = list(op.operands)
    if op.regions:
        for inner in walk_ops(op)[1:]:
            values.extend(inner.operands)
    return values


def _operand_owners(op: Operation) -> list[Operation]:
    """Ops whose results ``op`` or any op nested in it uses."""
    return [v.owner for v in _used_values(op) if isa(v.owner, Operation)]


@dataclass
class _Group:
    members: list[AllReduceOp]
    specs: list[TensorSpec]
    bits: int
    size: int


@dataclass
class _BlockPlan:
    """Groups of one block, found in one walk over its ops."""

    threshold: int
    groups: list[_Group] = field(default_factory=list)

    def plan(self, block: Block) -> None:
        # id(op) -> bits of the all-reduces it depends on (by id: xDSL
        # hashes an op in Python; a block argument's owner is no op here).
        deps: dict[int, int] = {}
        bit_count = 0
        open_groups: dict[tuple, _Group] = {}

        def close(g: _Group) -> None:
            open_groups.pop(next(k for k, v in open_groups.items() if v is g))
            self.groups.append(g)

        for op in block.ops:
            d = 0
            for v in _used_values(op):
                d |= deps.get(id(v.owner), 0)
            spec = all_reduce_spec(op) if isa(op, AllReduceOp) else None
            if spec is None:
                deps[id(op)] = d
                if not has_trait(op, Pure):
                    # A side effect (a host channel, a collective of another
                    # kind that is not pure): nothing moves across it.
                    for g in list(open_groups.values()):
                        close(g)
                continue
            # Groups this one depends on are closed: their combined
            # all-reduce must come before it.
            for g in list(open_groups.values()):
                if g.bits & d:
                    close(g)
            p = op.params()
            key = (p["computation"], p["replica_groups"], spec.dtype)
            bit = 1 << bit_count
            bit_count += 1
            deps[id(op)] = d | bit
            size = nbytes(spec)
            g = open_groups.get(key)
            if g is not None and g.size + size <= self.threshold:
                g.members.append(op)
                g.specs.append(spec)
                g.bits |= bit
                g.size += size
                continue
            if g is not None:
                close(g)
            open_groups[key] = _Group([op], [spec], bit, size)
        self.groups.extend(open_groups.values())


def _dependents_between(members: list[AllReduceOp]) -> list[Operation]:
    """Ops between the first and last member that use a member's result,
    directly or through each other, in block order."""
    first, last = members[0], members[-1]
    tainted: set[Operation] = set(members)
    moved: list[Operation] = []
    op = first.next_op
    while op is not None and op is not last:
        if op not in tainted and any(o in tainted for o in _operand_owners(op)):
            tainted.add(op)
            moved.append(op)
        op = op.next_op
    return moved


def combine(group: _Group) -> None:
    """Replace the group's all-reduces by one over their flattened operands,
    at the last member; ops that used an earlier member's result move after
    it (none of them feeds a later member: the members are independent)."""
    members, specs = group.members, group.specs
    block = members[-1].parent_block()
    assert block is not None
    moved = _dependents_between(members)
    new: list[Operation] = []
    flats: list[SSAValue] = []
    for m, s in zip(members, specs):
        if s.shape == (s.size,):
            flats.append(m.operand)
        else:
            r = hlo.ReshapeOp.make([m.operand], shape=(s.size,))
            new.append(r)
            flats.append(r.results[0])
    cat = hlo.ConcatenateOp.make(flats, dimension=0)
    p = members[0].params()
    ar = AllReduceOp.make(
        [cat.results[0]], replica_groups=p["replica_groups"], computation=p["computation"], channel_id=p["channel_id"]
    )
    ar.location = members[0].location
    new += [cat, ar]
    outs: list[SSAValue] = []
    offset = 0
    for s in specs:
        sl = hlo.SliceOp.make([ar.results[0]], start_indices=(offset,), limit_indices=(offset + s.size,), strides=(1,))
        new.append(sl)
        out = sl.results[0]
        if s.shape != (s.size,):
            r = hlo.ReshapeOp.make([out], shape=s.shape)
            new.append(r)
            out = r.results[0]
        outs.append(out)
        offset += s.size
    anchor: Operation = members[-1]
    for op in new:
        block.insert_op_after(op, anchor)
        anchor = op
    for op in moved:
        op.detach()
        block.insert_op_after(op, anchor)
        anchor = op
    for m, out in zip(members, outs):
        m.results[0].replace_all_uses_with(out)
        m.detach()
        m.erase()


@dataclass(frozen=True)
class CombineAllReduce(ModulePass):
    """Merge independent ``ccl.all_reduce`` ops into one over a flattened,
    concatenated buffer (XLA's ``AllReduceCombiner``; TF's batch all-reduce).

    In each block, in order: all-reduces with equal ``replica_groups``,
    reduction and element type join one group while none depends on another
    member (through any chain of ops) and the group's operands total at most
    ``threshold_bytes``; an op that is not pure (a host channel, for
    instance) ends every group, so nothing moves across a side effect.  A
    group of two or more becomes ``hlo.reshape`` of each operand to 1-D,
    ``hlo.concatenate``, one ``ccl.all_reduce`` (the first member's channel
    id and location), then ``hlo.slice`` + ``hlo.reshape`` per original
    result, placed at the last member; ops between the members that used an
    earlier member's result move after it.  All-reduces of empty or string
    tensors, and those of a replica split over logical cores before
    ``tpu-spmd-partition`` (groups of replica ids), are left alone.

    Options:
      threshold_bytes: the combined buffer's largest size in bytes (an
        all-reduce larger than it stays alone); must be positive.
    """

    name = "ccl-combine-all-reduce"

    threshold_bytes: int = DEFAULT_THRESHOLD_BYTES

    def __post_init__(self) -> None:
        if self.threshold_bytes <= 0:
            raise ValueError(f"threshold-bytes must be positive, got {self.threshold_bytes}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        blocks = {id(ar.parent_block()): ar.parent_block() for ar in walk_ops(op) if isa(ar, AllReduceOp)}
        for block in blocks.values():
            if block is None:
                continue
            plan = _BlockPlan(self.threshold_bytes)
            plan.plan(block)
            for g in plan.groups:
                if len(g.members) > 1:
                    combine(g)
