"""``tpu-extract-head-tail-outside-compilation``: outside-compilation clusters
that need nothing from the device run before it, and clusters whose results
the device does not need run after it.

Semantics follow TensorFlow's MLIR bridge pass
``tf-tpu-extract-head-tail-outside-compilation``
(``tensorflow/compiler/mlir/tensorflow/transforms/extract_head_tail_outside_compilation.cc``,
tests in ``tests/tpu_extract_head_tail_outside_compilation.mlir``): head and
tail outside-compiled ops move out of the TPU computation into a
``tf_device.launch`` on the replica's host, so the device program neither
starts by waiting for the host nor ends by waiting for it.  xtpu's host launch
is a ``tpu.replicate`` with ``placement = "host"``: the runtime runs it once
per replica, before (head) or after (tail) the device replicate.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from xtpu.dialects.ir_walk import isa
from xtpu.dialects.tpu import OutsideCompilationOp, ReplicateOp, YieldOp
from xtpu.passes._common import (
    HostComputable,
    captured_values,
    clone_into,
    erase_if_dead,
    has_side_effects,
    host_replicate,
    is_string,
    remap_operands,
    walk_ops,
)


def _nested_effects(op: Operation) -> bool:
    """Whether a region of ``op`` holds a cluster with side effects."""
    return any(isinstance(o, OutsideCompilationOp) and has_side_effects(o) for o in op.walk() if o is not op)


def _nested_clusters(body: Block) -> list[OutsideCompilationOp]:
    return [o for op in body.ops for o in op.walk() if isinstance(o, OutsideCompilationOp)]


@dataclass
class _Split:
    """Which clusters of one device replicate body run before / after it."""

    body: Block
    computable: HostComputable

    def __post_init__(self) -> None:
        self.clusters = _nested_clusters(self.body)
        self.top = [op for op in self.body.ops if isinstance(op, OutsideCompilationOp)]
        self.effects = {c: has_side_effects(c) for c in self.clusters}
        self.captured = {c: captured_values(c) for c in self.top}

    def head(self) -> list[OutsideCompilationOp]:
        """Top-level clusters that use only replica inputs, host-computable
        values and results of earlier head clusters; a cluster with side
        effects never moves ahead of one that stays."""
        heads: list[OutsideCompilationOp] = []
        blocked = False
        for op in self.body.ops:
            if not isinstance(op, OutsideCompilationOp):
                blocked = blocked or _nested_effects(op)
                continue
            eff = self.effects[op]
            ok = not (eff and blocked) and all(self._head_input(v, heads) for v in self.captured[op])
            if ok:
                heads.append(op)
            elif eff:
                blocked = True
        return heads

    def _head_input(self, v: SSAValue, heads: list) -> bool:
        if isinstance(v, BlockArgument):
            return v.owner is self.body
        return self.computable(v) or v.owner in heads

    def tail(self, heads: list) -> list[OutsideCompilationOp]:
        """Top-level clusters, walking from the end, whose results only the
        body's yield and later tail clusters use; a cluster with side effects
        never moves behind one that stays."""
        tails: list[OutsideCompilationOp] = []
        term = self.body.last_op
        blocked = False
        for op in reversed(list(self.body.ops)):
            if op is term or op in heads:
                continue
            if not isinstance(op, OutsideCompilationOp):
                blocked = blocked or _nested_effects(op)
                continue
            eff = self.effects[op]
            ok = (
                not (eff and blocked)
                and all(self._tail_use(u.operation, tails) for r in op.results for u in r.uses)
                and not any(self._device_string(v) for v in self.captured[op])
            )
            if ok:
                tails.insert(0, op)
            elif eff:
                blocked = True
        return tails

    def _tail_use(self, user: Operation, tails: list) -> bool:
        if user is self.body.last_op:
            return True
        return any(t.is_ancestor(user) for t in tails)

    def _device_string(self, v: SSAValue) -> bool:
        """A string the device would have to hand over (outlining rejects it)."""
        if not is_string(v.type) or isinstance(v, BlockArgument):
            return False
        return not self.computable(v) and not isinstance(v.owner, OutsideCompilationOp)

    def solve(self) -> tuple[list[OutsideCompilationOp], list[OutsideCompilationOp]]:
        """Head and tail clusters.  A value that a moved cluster hands to a
        cluster staying on the device never crosses the device: a head
        result becomes a replica input, which host code reads on the host,
        and a staying cluster's result that a tail cluster uses is kept on
        the host (``tpu-outline-outside-compilation``)."""
        heads = self.head()
        return heads, self.tail(heads)


def _group(values, j: int, n: int) -> list[SSAValue]:
    return list(values[j * n : (j + 1) * n])


def _move_clusters(clusters: list[OutsideCompilationOp], block: Block, mapping: dict[SSAValue, SSAValue]) -> None:
    """Move the clusters' ops into ``block`` (their operands mapped) and map
    their results to the values they yield; the emptied clusters stay."""
    for c in clusters:
        term = c.body.block.last_op
        assert isinstance(term, YieldOp)
        for inner in list(c.body.block.ops):
            remap_operands(inner, mapping)
            if inner is term:
                continue
            inner.detach()
            block.add_op(inner)
        for r, v in zip(c.results, term.values, strict=True):
            mapping[r] = v


def _merge_into_producers(block: Block, computable: HostComputable) -> None:
    """Merge each cluster of ``block`` that needs no device value into the
    latest earlier cluster of ``block`` whose results it uses.

    Such a cluster ``B`` (no side effects) uses only replica inputs, values
    the host computes itself and results of earlier clusters of the block;
    on its own it would still cost a device round trip (an empty ``_args``
    message and its ``_retvals``).  Its ops move to the end of ``A``, the last
    of those earlier clusters, whose results grow by ``B``'s: the device
    receives them with ``A``'s, and ``B``'s channels are gone.  TF's bridge
    gets the same count by emitting no send for a host compute without
    device operands."""
    clusters = [o for o in block.ops if isa(o, OutsideCompilationOp)]
    for b in clusters:
        if b.parent is not block or has_side_effects(b):
            continue
        producers: list[OutsideCompilationOp] = []
        device = False
        for v in captured_values(b):
            if isinstance(v, BlockArgument) and v.owner is block:
                continue
            owner = v.owner
            if isinstance(owner, OutsideCompilationOp) and owner.parent is block:
                producers.append(owner)
            elif not computable(v):
                device = True
        if device or not producers:
            continue
        index = {o: i for i, o in enumerate(block.ops)}
        a = max(producers, key=lambda o: index[o])
        # Values the host computes that the device defines between a and b
        # (a constant made for the gradient, say) move up before a, so that
        # a's new ops still see their definitions first.
        computed = [v for v in captured_values(b) if not isinstance(v.owner, OutsideCompilationOp) and computable(v)]
        for o in computable.chain(list(dict.fromkeys(v for v in computed if not isinstance(v, BlockArgument)))):
            if o.parent is block and index[o] > index[a]:
                o.detach()
                block.insert_op_before(o, a)
        _merge(a, b)


def _merge(a: OutsideCompilationOp, b: OutsideCompilationOp) -> OutsideCompilationOp:
    """``a`` followed by ``b``'s ops, as one cluster named ``a``'s, with
    ``a``'s results and then ``b``'s."""
    block = a.parent_block()
    assert block is not None
    a_yield, b_yield = a.body.block.last_op, b.body.block.last_op
    assert isinstance(a_yield, YieldOp) and isinstance(b_yield, YieldOp)
    mapping: dict[SSAValue, SSAValue] = dict(zip(a.results, a_yield.values, strict=True))
    for inner in list(b.body.block.ops):
        remap_operands(inner, mapping)
        if inner is not b_yield:
            inner.detach()
            a.body.block.insert_op_before(inner, a_yield)
    values = [*a_yield.values, *b_yield.values]
    a.body.block.insert_op_before(YieldOp.create(operands=values), a_yield)
    a.body.block.erase_op(a_yield)
    merged = OutsideCompilationOp.create(
        result_types=[v.type for v in values],
        properties=dict(a.properties),
        attributes=dict(a.attributes),
        regions=[a.detach_region(0)],
    )
    merged.location = a.location
    block.insert_op_before(merged, a)
    old = [*a.results, *b.results]
    for r, new in zip(old, merged.results, strict=True):
        new.name_hint = r.name_hint
        r.replace_all_uses_with(new)
    block.erase_op(b)
    block.erase_op(a)
    return merged


def _extract(rep: ReplicateOp, computable: HostComputable) -> None:
    body = rep.body.block
    if not any(isa(o, OutsideCompilationOp) for o in body.ops):
        return  # only top-level clusters move: nothing to look at
    heads, tails = _Split(body, computable).solve()
    if not heads and not tails:
        return
    n = rep.num_replicas
    k0 = len(body.args)  # the replica inputs, before head results join them
    parent = rep.parent_block()
    assert parent is not None
    # Operand groups of the device replicate's block arguments, growing as
    # head results become inputs.
    groups: list[list[SSAValue]] = [_group(rep.replicated_inputs, i, n) for i in range(k0)]
    chains: list[Operation] = []

    # -- head: a host replicate before the device one ------------------------
    head_op = None
    if heads:
        hblock = Block()
        mapping: dict[SSAValue, SSAValue] = {}
        inputs: list[BlockArgument] = []
        computed: list[SSAValue] = []
        for c in heads:
            for v in captured_values(c):
                if isinstance(v, BlockArgument) and v.owner is body:
                    if v not in mapping:
                        inputs.append(v)
                        mapping[v] = hblock.insert_arg(v.type, len(hblock.args))
                        mapping[v].name_hint = v.name_hint
                elif computable(v):
                    computed.append(v)
        chain = computable.chain(list(dict.fromkeys(computed)))
        chains += chain
        clone_into(chain, hblock, mapping)
        _move_clusters(heads, hblock, mapping)
        # Head results used outside the head clusters.
        outs = [
            r
            for c in heads
            for r in c.results
            if any(not any(h.is_ancestor(u.operation) for h in heads) for u in r.uses)
        ]
        hblock.add_op(YieldOp.create(operands=[mapping[r] for r in outs]))
        head_op = host_replicate(
            hblock, [x for a in inputs for x in groups[a.index]], n, [c.cluster.data for c in heads], heads[0].location
        )
        parent.insert_op_before(head_op, rep)
        # Head results reach the device as new replicated inputs.
        for j, r in enumerate(outs):
            arg = body.insert_arg(r.type, len(body.args))
            arg.name_hint = r.name_hint
            r.replace_all_uses_with(arg)
            groups.append(_group(head_op.outputs, j, n))
        for c in heads:
            body.erase_op(c)

    # -- tail: a host replicate after the device one --------------------------
    term = body.last_op
    assert isinstance(term, YieldOp)
    old_yield = list(term.values)
    tail_yields: list[SSAValue] = []  # device values the tail needs
    tblock = Block()
    tmapping: dict[SSAValue, SSAValue] = {}
    # Per tail block argument: an operand group, or the index of a device
    # value in tail_yields (an extra output of the device replicate).
    tinputs: list[list[SSAValue] | int] = []
    if tails:
        computed = []
        for c in tails:
            for v in captured_values(c):
                if v in tmapping or (isinstance(v.owner, OutsideCompilationOp) and v.owner in tails):
                    continue  # seen, or mapped when its cluster moves
                if isinstance(v, BlockArgument) and v.owner is body:
                    tinputs.append(groups[v.index])
                elif computable(v):
                    computed.append(v)
                    continue
                else:
                    tinputs.append(len(tail_yields))
                    tail_yields.append(v)
                tmapping[v] = tblock.insert_arg(v.type, len(tblock.args))
                tmapping[v].name_hint = v.name_hint
        chain = computable.chain(list(dict.fromkeys(computed)))
        chains += chain
        clone_into(chain, tblock, tmapping)
        _move_clusters(tails, tblock, tmapping)

    # -- the device replicate, rebuilt ----------------------------------------
    # Each old output becomes a kept output, a head output (a head result
    # yielded as is) or a tail output.
    head_args = {body.args[i]: groups[i] for i in range(k0, len(body.args))}
    kept: list[SSAValue] = []
    fate: list[tuple[str, int]] = []
    tail_outs: list[SSAValue] = []
    for v in old_yield:
        if v in head_args:
            fate.append(("head", list(head_args).index(v)))
        elif isinstance(v.owner, OutsideCompilationOp) and v.owner in tails:
            fate.append(("tail", len(tail_outs)))
            tail_outs.append(v)
        else:
            fate.append(("kept", len(kept)))
            kept.append(v)
    extra = [v for v in dict.fromkeys(tail_yields) if v not in kept]
    new_yield = kept + extra
    yield_index = {v: i for i, v in enumerate(new_yield)}
    body.insert_op_before(YieldOp.create(operands=new_yield), term)
    body.erase_op(term)
    for c in tails:
        body.erase_op(c)
    # Head results that only the yield used need no device input.
    for i in reversed(range(k0, len(body.args))):
        if not body.args[i].uses:
            body.erase_arg(body.args[i])
            del groups[i]
    new_rep = ReplicateOp.create(
        operands=[x for g in groups for x in g],
        result_types=[v.type for v in new_yield for _ in range(n)],
        properties=dict(rep.properties),
        attributes=dict(rep.attributes),
        regions=[rep.detach_region(0)],
    )
    new_rep.location = rep.location
    parent.insert_op_before(new_rep, rep)

    tail_op = None
    if tails:
        tblock.add_op(YieldOp.create(operands=[tmapping[v] for v in tail_outs]))
        operands: list[SSAValue] = []
        for t in tinputs:
            operands += _group(new_rep.outputs, yield_index[tail_yields[t]], n) if isinstance(t, int) else t
        tail_op = host_replicate(tblock, operands, n, [c.cluster.data for c in tails], tails[0].location)
        parent.insert_op_after(tail_op, new_rep)

    for j, (kind, i) in enumerate(fate):
        if kind == "kept":
            new = _group(new_rep.outputs, i, n)
        elif kind == "head":
            new = list(head_args.values())[i]
        else:
            assert tail_op is not None
            new = _group(tail_op.outputs, i, n)
        for old, v in zip(_group(rep.outputs, j, n), new, strict=True):
            old.replace_all_uses_with(v)
    parent.erase_op(rep)
    erase_if_dead(list(dict.fromkeys(chains)))


@dataclass(frozen=True)
class ExtractHeadTailOutsideCompilation(ModulePass):
    """Run head and tail outside-compilation clusters on the host, before and
    after the device program.

    In the body of each device ``tpu.replicate`` (not inside a region), a
    cluster is a *head* cluster when everything it uses is a block argument
    (a replica's input), a value the host computes itself (constants, the
    replica id and what is computed from them only) or a result of another
    head cluster.  Head clusters move, in order, into a new ``tpu.replicate
    (...) {n = N, placement = "host"}`` inserted before the device replicate;
    its block takes the replicated inputs it needs (same operand grouping)
    and yields the head results used elsewhere, which become extra
    replicated inputs of the device replicate (or, when the body only
    yields them, replace its outputs).

    Walking from the end of the body, a cluster is a *tail* cluster when the
    device does not use its results (only the body's ``tpu.yield`` or later
    tail clusters do).  Tail clusters move into a host replicate inserted
    after the device replicate; it takes the replicated inputs and head
    results it needs directly, and the device values it needs as extra
    outputs of the device replicate; its results replace the device
    replicate's outputs that yielded them.

    Each host replicate has ``tpu.outside_compilation_cluster = "<names>"``
    (the clusters' names joined by ``,``).  A cluster with side effects never
    moves past one that stays (clusters inside ``hlo.if`` / ``hlo.while``
    always stay), so side effects keep their order.  A value that a moved
    cluster hands to a staying one (or back) stays on the host: outlining
    gives host code the replica inputs (head results among them) and keeps
    host values for the tail.

    Last, a cluster left on the device that needs no device value (only
    replica inputs, values the host computes and results of earlier
    clusters of its block) and has no side effects joins the latest of those
    earlier clusters: its ops run at the end of that cluster, whose results
    grow by its own, so it costs no device round trip of its own (the
    gradient cluster of a host op whose cotangent canonicalizes to a replica
    input, say).  TF: ``tf-tpu-extract-head-tail-outside-compilation``; TF's
    ``tf-extract-outside-compilation`` sends nothing for a host compute
    without device operands, where xtpu merges it.
    """

    name = "tpu-extract-head-tail-outside-compilation"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        reps = [r for r in walk_ops(op) if isa(r, ReplicateOp) and not r.on_host]
        computable = HostComputable()
        for rep in reps:
            _extract(rep, computable)
        for rep in [r for r in walk_ops(op) if isa(r, ReplicateOp) and not r.on_host]:
            _merge_into_producers(rep.body.block, HostComputable())
