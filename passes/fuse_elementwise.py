"""``hlo-fuse-elementwise``: elementwise ops and the reductions reading them
become ``fusion.region`` ops, one kernel each.

After XLA's instruction fusion (``xla/service/instruction_fusion.cc``: loop
fusion of elementwise producers into their consumers, and input fusion of
those into a reduction), in MLIR's terms a region op isolated from above
(dialects/fusion.py).  In each block, in order, an op that may be fused joins
the groups of the fused ops whose results it reads, as long as the group
stays a single-entry region: every value the group reads from outside is
defined before the group's first op (so the region op, put where the first
member was, has its operands and no cycle arises through an op left
outside).  A reduction ends its chain: an op reading a reduction's result
does not join its group (XLA: a reduce is the root of an input fusion), and
the group is of kind ``input``; a group of elementwise ops only is ``loop``.
A group of one op stays as it was.  Results used outside the group are the
region's results (XLA's multi-output fusion).

What joins: ``hlo`` elementwise ops (unary, binary, ``hlo.compare``,
``hlo.select``, ``hlo.convert``), ``hlo.broadcast_in_dim`` and
``hlo.reduce``, with static shapes and no string values.  What never joins:
collectives (``ccl.*``, ``tpu.cross_replica_sum``), host transfers and
host-only ops, ops with side effects, ops with regions, ops of dynamic
shape (``hlo.set_dimension_size`` and values of unknown size), host code
(a ``tpu.outside_compilation`` cluster, a host ``tpu.replicate``, an
outlined host function), and ops whose operands are all
constants (the runtime folds those once, runtime/plan.py).  Those
constant-derived ops move to the start of the block first, as MLIR's
canonicalizer hoists constants, so that a broadcast scalar traced in the
middle of a chain does not cut it in two (a region reads only values
defined before it).  The fused ops
are the same ops, in the same order, on the same values: running a region
op's body op by op gives the unfused program's bits.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import Pure

from xtpu.dialects import hlo
from xtpu.dialects.dynamic_shapes import DYNAMIC_SHAPE_OPS
from xtpu.dialects.fusion import FusionRegionOp, FusionYieldOp
from xtpu.dialects.ir_walk import has_trait, isa
from xtpu.dialects.tpu import host_context
from xtpu.passes._common import in_cluster, is_string, walk_ops

#: The op classes that may join a fusion region (module doc).
FUSIBLE = (
    hlo.ElementwiseUnary,
    hlo.ElementwiseBinary,
    hlo.CompareOp,
    hlo.SelectOp,
    hlo.ConvertOp,
    hlo.BroadcastInDimOp,
    hlo.ReduceOp,
)
_CONSTANTS = (hlo.ConstantOp, hlo.IotaOp)
_DYNAMIC = tuple(DYNAMIC_SHAPE_OPS)


def _static(t) -> bool:
    return isa(t, TensorType) and all(d >= 0 for d in t.get_shape()) and not is_string(t)


@functools.cache
def _class_fusible(cls: type[Operation]) -> bool:
    """The half of :func:`fusible` that holds for every op of ``cls``."""
    return (
        issubclass(cls, FUSIBLE)
        and cls.has_trait(Pure)
        and not getattr(cls, "HOST_ONLY", False)
        and not getattr(cls, "SIDE_EFFECTS", False)
    )


def fusible(op: Operation) -> bool:
    """Whether ``op`` may join a fusion region (module doc)."""
    return _fusible_in(op, {}) and not in_cluster(op)


def _fusible_in(op: Operation, static: dict[int, bool]) -> bool:
    """:func:`fusible` but for the cluster test; ``static`` caches
    :func:`_static` by the type's identity (for one module)."""
    if not _class_fusible(type(op)) or op.regions:
        return False
    for v in (*op.operands, *op.results):
        t = v.type
        s = static.get(id(t))
        if s is None:
            s = static[id(t)] = _static(t)
        if not s:
            return False
    return True


@dataclass(eq=False)
class _Group:
    members: list[Operation]
    first: int
    #: Ops of the block outside the group whose results it reads (constants aside), by id.
    reads: set[int]
    reduces: bool = False


class FuseElementwise(ModulePass):
    """Group elementwise ops, broadcasts, converts, selects and the
    reductions reading them into ``fusion.region`` ops (XLA's loop and input
    fusion, as TF's XLA compiler does for a TPU program), one kernel each at
    run time.  Never fused: collectives, host
    transfers, ops with side effects or regions, dynamic shapes, ops in
    host code (the module doc has the rules)."""

    name = "hlo-fuse-elementwise"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        blocks = [
            b for o in walk_ops(op) if o.regions and not isa(o, FusionRegionOp) for r in o.regions for b in r.blocks
        ]
        for block in blocks:
            # Host code (clusters, host replicates, outlined host functions)
            # is left op by op: it runs a few small ops, some of them inline
            # on a device worker (runtime/host.py).
            if block.first_op is not None and host_context(block.first_op) is None:
                fuse_block(block)


def fuse_block(block: Block) -> None:
    """Form the fusion regions of ``block`` in place (module doc): the
    pass on one block (passes/batch_replicas.py runs it on a batched body).

    Ops and values are kept in sets and dicts by their ``id`` (xDSL hashes
    them in Python, a call per lookup); the block holds them all alive."""
    ops = list(block.ops)
    index = {id(o): i for i, o in enumerate(ops)}
    # The ops of a block are in a cluster when the block is.
    parent = block.parent_op()
    in_cluster_block = parent is not None and in_cluster(parent)
    static: dict[int, bool] = {}
    may_fuse: set[int] = set()
    # Values of a dynamic size (hlo.set_dimension_size's results and what
    # is computed from them) stay out of fusion.
    dynamic: set[int] = set()
    # Values computed from constants only: the runtime folds them once
    # (runtime/plan.py), so they stay out of fusion.
    constant: set[int] = set()
    constant_ops: set[int] = set()
    # Constants, and ops that may fuse computed from them only, go to the
    # block's start (module doc), in order, before the first op that stays.
    hoisted: list[Operation] = []
    moved: set[int] = set()
    first_kept: Operation | None = None
    for o in ops:
        is_constant = isa(o, _CONSTANTS)
        if isa(o, _DYNAMIC) or (dynamic and any(id(v) in dynamic for v in o.operands)):
            dynamic.update(map(id, o.results))
        if is_constant or (
            o.operands and not o.regions and has_trait(o, Pure) and all(id(v) in constant for v in o.operands)
        ):
            constant.update(map(id, o.results))
        fuses = not in_cluster_block and _fusible_in(o, static)
        if fuses:
            may_fuse.add(id(o))
        if is_constant:
            constant_ops.add(id(o))
        if is_constant or (
            fuses and all(id(r) in constant for r in o.results) and all(id(v.owner) in moved for v in o.operands)
        ):
            moved.add(id(o))
            hoisted.append(o)
        elif first_kept is None:
            first_kept = o
    group_of: dict[int, _Group] = {}
    groups: list[_Group] = []

    def producers(o: Operation) -> set[int]:
        """The ops of the block (constants aside) whose results ``o`` reads, by id."""
        return {p for p in (id(v.owner) for v in o.operands) if p in index and p not in constant_ops}

    def joined(gs: list[_Group], o: Operation) -> tuple[int, set[int]] | None:
        """(first, reads) of ``gs`` and ``o`` as one group, if it is a
        single-entry region: everything it reads defined before its first op."""
        inside = set(map(id, gs))
        reads = {p for g in gs for p in g.reads if id(group_of.get(p)) not in inside}
        reads |= {p for p in producers(o) if id(group_of.get(p)) not in inside}
        first = min(g.first for g in gs)
        if any(index[p] > first for p in reads):
            return None
        return first, reads

    if first_kept is not None:
        at = index[id(first_kept)]
        late = [o for o in hoisted if index[id(o)] > at]
        for o in late:
            o.detach()
            block.insert_op_before(o, first_kept)
        if late:
            # The block's new order, without reading it again.
            late_ids = set(map(id, late))
            ops = [*ops[:at], *late, *(o for o in ops[at:] if id(o) not in late_ids)]
            index = {id(o): i for i, o in enumerate(ops)}
    if len(may_fuse) < 2:
        return  # no group of two ops
    for o in ops:
        if id(o) not in may_fuse or id(o.results[0]) in dynamic or id(o.results[0]) in constant:
            continue
        cands: list[_Group] = []
        for v in o.operands:
            p = v.owner
            g = group_of.get(id(p))  # a block argument is in no group
            if g is not None and not isa(p, hlo.ReduceOp) and g not in cands:
                cands.append(g)
        chosen: list[_Group] = []
        got = joined(cands, o) if cands else None
        if got is not None:
            chosen = cands
        else:
            for g in cands:
                got = joined([g], o)
                if got is not None:
                    chosen = [g]
                    break
        if not chosen:
            g = _Group([o], index[id(o)], producers(o))
            groups.append(g)
        else:
            chosen.sort(key=lambda g: -len(g.members))
            g = chosen[0]
            for other in chosen[1:]:
                g.members += other.members
                g.reduces |= other.reduces
                for m in other.members:
                    group_of[id(m)] = g
                groups.remove(other)
            g.members.append(o)
            g.first, g.reads = got
        g.reduces |= isa(o, hlo.ReduceOp)
        group_of[id(o)] = g
    for g in groups:
        _drop_trailing_broadcasts(g)
        if len(g.members) > 1:
            _outline(block, sorted(g.members, key=lambda m: index[id(m)]), "input" if g.reduces else "loop")


def _drop_trailing_broadcasts(g: _Group) -> None:
    """A ``broadcast_in_dim`` read only outside its group stays out of the
    region: a region's results are materialised, a broadcast outside it is a
    view (a gather's in-range mask stays a row-broadcast ``select`` reads
    cheaply)."""
    changed = True
    while changed:
        changed = False
        inside = set(map(id, g.members))
        for m in list(g.members):
            if isa(m, hlo.BroadcastInDimOp) and all(id(u.operation) not in inside for u in m.results[0].uses):
                g.members.remove(m)
                changed = True


def _outline(block: Block, members: list[Operation], kind: str) -> None:
    """Replace ``members`` (in block order) by one ``fusion.region`` put
    where the first was."""
    inside = set(map(id, members))  # by id, as in fuse_block
    inputs: dict[int, SSAValue] = {}  # in order, once each
    for m in members:
        for v in m.operands:
            if id(v.owner) not in inside:
                inputs.setdefault(id(v), v)
    outputs = [r for m in members for r in m.results if any(id(u.operation) not in inside for u in r.uses)]
    if not outputs:  # dead ops: left as they are
        return
    body = Block(arg_types=[v.type for v in inputs.values()])
    for a, v in zip(body.args, inputs.values()):
        a.name_hint = v.name_hint
    # ``create``: the generic constructor (``build`` checks each argument
    # against the op's definition: a third of this pass's time); the
    # module is verified after the pipeline.
    fused = FusionRegionOp.create(
        operands=list(inputs.values()),
        result_types=[r.type for r in outputs],
        properties={"kind": StringAttr(kind)},
        regions=[Region(body)],
    )
    compute = [m for m in members if not isa(m, (hlo.BroadcastInDimOp, hlo.ConvertOp))] or members
    fused.location = compute[0].location
    for r, new in zip(outputs, fused.results):
        for use in list(r.uses):
            if id(use.operation) not in inside:
                use.operation.operands[use.index] = new
        if r.name_hint:
            new.name_hint = r.name_hint
    # The members move into the body as they are (no clones): their
    # operands from outside become the body's arguments.  The body is
    # filled before the region op joins the block (xDSL checks each op
    # added against the block's ancestors).
    before = members[0].prev_op
    mapping: dict[int, SSAValue] = dict(zip(inputs, body.args))
    for m in members:
        m.detach()
        for i, v in enumerate(m.operands):
            arg = mapping.get(id(v))
            if arg is not None:
                m.operands[i] = arg
        body.add_op(m)
    body.add_op(FusionYieldOp.create(operands=outputs))
    if before is not None:
        block.insert_op_after(fused, before)
    elif block.first_op is not None:
        block.insert_op_before(fused, block.first_op)
    else:
        block.add_op(fused)
