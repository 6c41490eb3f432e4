"""Gradients of ``hlo.if`` and ``hlo.while`` (``xtpu.cond``, ``xtpu.while_loop``).

The engine (:mod:`xtpu.gradients`) hands region ops here: their inputs are
their operands followed by the values their regions capture from outside.
Gradients are ordinary ops in the same IR, as everywhere in xtpu:

* ``hlo.if`` (TF's ``cond_v2`` gradient): a gradient ``hlo.if`` on the same
  predicate.  Its branch ``k`` re-emits (clones) the forward ops of branch
  ``k`` and runs the engine over the clones, seeded with the cotangents of
  the if's results; it returns the cotangent of every differentiable value
  the if captures (zeros where the branch does not use it).  The branch that
  ran forward is the one that runs backward.

* ``hlo.while`` (TF's ``while_v2`` gradient under XLA): XLA needs a static
  bound to store the loop's intermediates, so only loops built with
  ``maximum_iterations`` (a compile-time constant; ``while_loop`` marks the
  op with :data:`MAXIMUM_ITERATIONS_ATTR`) have a gradient; others raise
  ValueError.  A forward ``hlo.while`` re-runs the loop, pushes each
  iteration's loop values onto stacks ``[maximum_iterations, ...]``
  (``hlo.dynamic_update_slice``) and counts the iterations ``n``; a reverse
  ``hlo.while`` then runs ``n`` times: iteration ``t`` reads state
  ``n-1-t`` (``hlo.dynamic_slice``), re-runs the body on it (cloned ops),
  backpropagates the body to get the cotangents of the loop values, and
  accumulates those of the captured values.  It carries and differentiates
  only the loop values that can have a nonzero cotangent (those of the
  outputs that have one and, to a fixed point over the body, the values
  they depend on); the others get none, as in the eager tape, so that a
  zero never meets an infinite partial (``0 * (1/0)`` is NaN).  Only the loop values the
  re-run body's gradient reads are stored; when it reads none, nothing is
  re-run and the forward loop's own counter gives ``n``.  Both loops count
  from 0 in loop value 0 and carry the bound, so gradients of gradients work.

Re-emitted ops that the gradient does not use are erased again (with their
side effects: those happened in the forward pass).

Outside-compilation clusters in a differentiated region: a re-emitted
forward cluster ``C`` is renamed ``C.<uid>.forward`` (with ``_1``, ``_2``,
... when the name is taken: cluster names are unique in a module) and the
gradient ops of its ops go to the host cluster ``C.<uid>`` by the seed's
rule (:func:`xtpu.gradients.gradient_cluster_name`), a region of its own
placed after the device gradient ops it needs.  Inside a differentiated
cond or loop the forward host ops the gradient needs run again (once per
iteration in the loops: the stacking loop and the reverse loop), and the
gradient clusters run once per reverse iteration.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64
from xdsl.ir import Block, Operation, Region, SSAValue

from xtpu.autodiff.gradients import (
    TracedGraph,
    add_n,
    backprop,
    canonical_value,
    is_differentiable,
    register_structural_vjp,
    zeros_like_spec,
)
from xtpu.core.tracing import Tensor, bind, current_trace, format_location, recording_tapes, user_location
from xtpu.dialects import hlo
from xtpu.dialects.hlo import AddOp, ConstantOp
from xtpu.dialects.hlo_control import IfOp, ReturnOp, WhileOp
from xtpu.dialects.primitive import array_from_dense
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.dialects.tpu import OutsideCompilationOp
from xtpu.ops.control_flow import MAXIMUM_ITERATIONS_ATTR
from xtpu.ops.core import scalar
from xtpu.passes._common import captured_values

#: The discardable attribute ``xtpu.while_loop`` puts on an ``hlo.while``
#: built with ``maximum_iterations``: the bound (loop value 0 is the counter),
#: or -1 when the bound is not a compile-time constant.

WHILE_NEEDS_MAXIMUM_ITERATIONS = (
    "gradients of xtpu.while_loop need maximum_iterations: XLA compiles loops with static shapes, and "
    "the gradient must store the loop's intermediates (one per iteration) in a buffer whose size is "
    "known at compile time; pass maximum_iterations=<int> to xtpu.while_loop"
)

WHILE_NEEDS_STATIC_MAXIMUM_ITERATIONS = (
    "gradients of xtpu.while_loop need a compile-time constant maximum_iterations (a Python int or a "
    "constant): XLA stores the loop's intermediates in a buffer of that many entries"
)


# --------------------------------------------------------------------------
# Captures
# --------------------------------------------------------------------------


def _defined_inside(v: SSAValue, op: Operation) -> bool:
    owner = v.owner
    block = owner if not isinstance(owner, Operation) else owner.parent_block()
    while block is not None:
        p = block.parent_op()
        if p is op:
            return True
        if p is None:
            return False
        block = p.parent_block()
    return False


def captures(op: Operation) -> list[SSAValue]:
    """Values used inside ``op``'s regions but defined outside it, in order of
    first use (the passes' ``captured_values``)."""
    return captured_values(op)


# --------------------------------------------------------------------------
# The bound of a while loop
# --------------------------------------------------------------------------


def _maximum_iterations(node: Any) -> int:
    attr = node.op.attributes.get(MAXIMUM_ITERATIONS_ATTR)
    loc = format_location(node.location) if node.location is not None else None
    where = f" (at {loc})" if loc else ""
    if attr is None:
        raise ValueError(WHILE_NEEDS_MAXIMUM_ITERATIONS + where)
    n = int(attr.value.data)
    if n < 0:
        raise ValueError(WHILE_NEEDS_STATIC_MAXIMUM_ITERATIONS + where)
    return n


# --------------------------------------------------------------------------
# Re-emitting forward ops and naming their clusters
# --------------------------------------------------------------------------


def _clone_registry(tr: Any) -> dict[str, tuple[str, str]]:
    """The trace's re-emitted clusters: {name: (the name it copies, uid)}."""
    reg = getattr(tr, "_cloned_clusters", None)
    if reg is None:
        reg = tr._cloned_clusters = {}
    return reg


def source_cluster(tr: Any, name: str, uid: str | None) -> str:
    """The name of the cluster a re-emitted cluster copies, as it was before
    this gradient call (``uid``) re-emitted anything."""
    reg = _clone_registry(tr)
    while name in reg and reg[name][1] == uid:
        name = reg[name][0]
    return name


def _cluster_names(tr: Any) -> set[str]:
    names = set(_clone_registry(tr))
    for b in tr.blocks:
        for op in b.walk():
            if isinstance(op, OutsideCompilationOp):
                names.add(op.cluster.data)
    for op in tr.cluster_ops:
        if op.parent is not None:
            names.add(op.cluster.data)
    names.update(tr.cluster_blocks.values())
    return names


def _fresh_cluster_name(tr: Any, base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def _clone_ops(tr: Any, ops: list[Operation], mapper: dict, uid: str | None) -> list[Operation]:
    """Clone ``ops`` (with their regions) into the current block, operands
    through ``mapper`` (values not in it stay: captured values map to
    themselves), renaming the outside-compilation clusters they hold.
    Returns every op made (nested ones included)."""
    made: list[Operation] = []
    taken: set[str] | None = None
    reg = _clone_registry(tr)
    for op in ops:
        new = op.clone(value_mapper=mapper)
        for inner in new.walk():
            if isinstance(inner, OutsideCompilationOp):
                if taken is None:
                    taken = _cluster_names(tr)
                src = source_cluster(tr, inner.cluster.data, uid)
                name = _fresh_cluster_name(tr, f"{src}.{uid}.forward" if uid else f"{src}.forward", taken)
                reg[name] = (src, uid)  # type: ignore[assignment]
                inner.properties["cluster"] = StringAttr(name)
                tr.cluster_ops.append(inner)
            made.append(inner)
        tr.block.add_op(new)
    return made


def _prune(ops: list[Operation]) -> None:
    """Erase the re-emitted ops of ``ops`` (one block, program order) that
    nothing uses: recomputation is an artifact of the gradient, so dead ops
    go even when they have side effects (they ran in the forward pass).  A
    cluster goes when nothing outside it uses its values; else its dead ops
    go."""
    for op in reversed(ops):
        if op.parent is None:
            continue
        if isinstance(op, OutsideCompilationOp):
            block = op.body.block
            _prune([o for o in block.ops if o is not block.last_op])
            inside = {id(o) for o in op.walk()}
            if all(not r.uses for r in op.results) and not any(
                id(u.operation) not in inside for o in block.ops for r in o.results for u in r.uses
            ):
                _erase(op)
            continue
        if all(not r.uses for r in op.results):
            _erase(op)


def _erase(op: Operation) -> None:
    """Erase a re-emitted op; the clusters in it are forgotten (their names
    are free again)."""
    tr = current_trace()
    gone = [o for o in op.walk() if isinstance(o, OutsideCompilationOp)]
    op.parent.erase_op(op)  # type: ignore[union-attr]
    if tr is not None and gone:
        reg = _clone_registry(tr)
        for o in gone:
            reg.pop(o.cluster.data, None)
        ids = {id(o) for o in gone}
        tr.cluster_ops[:] = [o for o in tr.cluster_ops if id(o) not in ids]


@contextlib.contextmanager
def _emitting_into(tr: Any, block: Block) -> Iterator[None]:
    """Trace ops into ``block`` (pushed on the trace's block stack)."""
    tr.blocks.append(block)
    depth = len(tr.blocks)
    try:
        yield
    finally:
        del tr.blocks[depth - 1 :]


def _clone_graph(tr: Any, made: list[Operation], uid: str | None):
    """The engine's view of re-emitted ops: a TracedGraph over them whose
    nodes in a re-emitted cluster count as in the cluster they copy, so that
    their gradient goes to ``C.<uid>`` (the seed's name)."""

    class _CloneGraph(TracedGraph):
        def _node_of(self, op: Operation):
            node = super()._node_of(op)
            if node.cluster is not None:
                node.cluster = source_cluster(tr, node.cluster, uid)
            return node

    return _CloneGraph(tr, {id(o) for o in made})


def _record(op: Operation, outs: list[Any]) -> None:
    """Let the recording tapes see a gradient region op (higher orders)."""
    for tape in recording_tapes():
        tape._record_region(op, outs)


def _tensor(tr: Any, v: SSAValue) -> Any:
    return Tensor(v, TensorSpec.of_type(v.type), tr)


# --------------------------------------------------------------------------
# The rules
# --------------------------------------------------------------------------


def structural_vjp(
    graph: Any, node: Any, cts: list, inputs: list, outputs: list, colocate: bool, gradient_uid: Any
) -> list:
    """The cotangents of a region op's operands and captures.

    Raises:
      ValueError: a while loop without a (static) ``maximum_iterations``.
      LookupError: the op has no gradient.
    """
    if node.op is None:
        raise LookupError(f"No gradient defined for operation '{node.name}'")
    if isinstance(node.op, IfOp):
        return _if_vjp(graph, node, cts, inputs, colocate, gradient_uid)
    if isinstance(node.op, WhileOp):
        return _while_vjp(graph, node, cts, inputs, colocate, gradient_uid)
    raise LookupError(f"No gradient defined for operation '{node.name}'")


def _differentiable(values: list, keys: list) -> list[int]:
    """Positions of the float values, each key once (a cluster's result and
    the value it yields are one key: its cotangent is counted once)."""
    seen: set = set()
    out = []
    for k, (v, key) in enumerate(zip(values, keys)):
        if is_differentiable(v.spec) and key not in seen:
            seen.add(key)
            out.append(k)
    return out


def _seeds(cts: list, outputs_specs: list[TensorSpec]) -> list:
    return [ct if is_differentiable(s) else None for ct, s in zip(cts, outputs_specs)]


def _if_vjp(graph: Any, node: Any, cts: list, inputs: list, colocate: bool, uid: Any) -> list:
    tr = current_trace()
    op = node.op
    caps = inputs[1:]
    diff = _differentiable(caps, node.inputs[1:])
    if not diff:
        return [None] * len(inputs)
    seeds = _seeds(cts, [TensorSpec.of_type(r.type) for r in op.results])
    xs = [node.inputs[1 + k] for k in diff]
    blocks, grads = [], []
    for region in (op.true_branch, op.false_branch):
        block = Block()
        with _emitting_into(tr, block):
            src = region.block
            mapper: dict = {}
            made = _clone_ops(tr, [o for o in src.ops if o is not src.last_op], mapper, uid)
            rets = [canonical_value(mapper.get(v, v)) for v in src.last_op.operands]
            ys = [r for r, s in zip(rets, seeds) if s is not None]
            ss = [s for s in seeds if s is not None]
            got = backprop(_clone_graph(tr, made, uid), ys, ss, xs, colocate, uid) if ys else [None] * len(xs)
        _prune([o for o in made if o.parent is block])
        blocks.append(block)
        grads.append(got)
    keep = [j for j in range(len(xs)) if grads[0][j] is not None or grads[1][j] is not None]
    if not keep:
        return [None] * len(inputs)
    for block, got in zip(blocks, grads):
        with _emitting_into(tr, block):
            vals = [got[j] if got[j] is not None else zeros_like_spec(caps[diff[j]].spec) for j in keep]
        block.add_op(ReturnOp.create(operands=[v.value for v in vals]))
    gop = IfOp.create(
        operands=[inputs[0].value],
        result_types=[caps[diff[j]].value.type for j in keep],
        regions=[Region(blocks[0]), Region(blocks[1])],
    )
    gop.location = user_location() or op.location
    tr.block.add_op(gop)
    outs = [_tensor(tr, r) for r in gop.results]
    _record(gop, outs)
    result: list = [None] * len(inputs)
    for j, out in zip(keep, outs):
        result[1 + diff[j]] = out
    return result


def _counts_iterations(op: Operation) -> bool:
    """Whether loop value 0 of ``op`` starts at ``hlo.constant 0`` and the
    body adds ``hlo.constant 1`` to it: then result 0 is the trip count."""

    def const(v: SSAValue, want: int) -> bool:
        o = v.owner
        if not isinstance(o, ConstantOp) or TensorSpec.of_type(v.type) != TensorSpec((), "int32"):
            return False
        return int(array_from_dense(o.value)) == want

    if not op.operands or not const(op.operands[0], 0):
        return False
    body = op.body.block
    nxt = body.last_op.operands[0].owner
    if not isinstance(nxt, AddOp):
        return False
    a, b = nxt.operands
    arg = body.args[0]
    return (a is arg and const(b, 1)) or (b is arg and const(a, 1))


def _body_dependencies(block: Block) -> list[frozenset[int]]:
    """For each value a loop body yields, the loop values (block arguments)
    it depends on, through the body's ops and the regions nested in them."""
    deps: dict[SSAValue, frozenset[int]] = {a: frozenset({i}) for i, a in enumerate(block.args)}
    for o in block.ops:
        if o is block.last_op:
            break
        ins = list(o.operands) + (captures(o) if o.regions else [])
        d = frozenset().union(*(deps.get(v, frozenset()) for v in ins))
        for r in o.results:
            deps[r] = d
    return [deps.get(v, frozenset()) for v in block.last_op.operands]


def _live_loop_values(block: Block, candidates: list[int], seeded: list[int]) -> list[int]:
    """The loop values of ``candidates`` that can have a nonzero cotangent
    in the reverse loop: those seeded with an output cotangent and, to a
    fixed point, those that a live value's next value depends on in the
    body.  Every other loop value's cotangent stays zero in every reverse
    iteration, so it is neither carried nor differentiated: a zero pushed
    through an op whose partial is inf or NaN (``log`` at 0) would be NaN."""
    deps = _body_dependencies(block)
    allowed = set(candidates)
    live = set(seeded)
    todo = list(live)
    while todo:
        for j in deps[todo.pop()] & allowed:
            if j not in live:
                live.add(j)
                todo.append(j)
    return sorted(live)


def _while_vjp(graph: Any, node: Any, cts: list, inputs: list, colocate: bool, uid: Any) -> list:
    """The reverse loop over stored iterations (module docstring).  Loop value
    0 of both loops is a counter from 0, as in a ``maximum_iterations`` loop,
    and both carry the bound: they can be differentiated again."""
    op = node.op
    bound = _maximum_iterations(node)
    tr = current_trace()
    n_vals = len(op.operand)
    init, caps = inputs[:n_vals], inputs[n_vals:]
    specs = [t.spec for t in init]
    seeds = _seeds(cts, specs)
    d_vals = [j for j, s in enumerate(specs) if is_differentiable(s)]
    # Only the loop values that can have a nonzero cotangent (as the cond
    # gradient differentiates only the outputs that have one).
    d_vals = _live_loop_values(op.body.block, d_vals, [j for j in d_vals if seeds[j] is not None])
    d_caps = _differentiable(caps, node.inputs[n_vals:])
    if not d_vals:
        return [None] * len(inputs)  # no cotangent reaches the loop: none leaves it
    loc = user_location() or op.location
    size = max(bound, 1)
    i32 = TensorSpec((), "int32")
    stack_specs = [TensorSpec((size,) + s.shape, s.dtype) for s in specs]

    def idx0() -> Any:
        return scalar(0, "int32")

    # The initial values of the reverse loop (emitted here, before both loops).
    r_init = [scalar(0, "int32")] + [seeds[j] if seeds[j] is not None else zeros_like_spec(specs[j]) for j in d_vals]
    r_init += [zeros_like_spec(caps[k].spec) for k in d_caps]

    # 1. The reverse loop, t = 0 .. n-1 reading state n-1-t.  It is built
    # first, on placeholders for the trip count and the stacks, so that only
    # the loop values the recomputed body needs are stored.
    holder = Block(arg_types=[i32.to_type()] + [s.to_type() for s in stack_specs])
    count_ph, stack_ph = holder.args[0], holder.args[1:]
    r_specs = [i32] + [specs[j] for j in d_vals] + [caps[k].spec for k in d_caps]
    r_types = [s.to_type() for s in r_specs]
    rc_block, rb_block = Block(arg_types=r_types), Block(arg_types=r_types)
    with _emitting_into(tr, holder):
        with _emitting_into(tr, rc_block):
            (more,) = bind(
                hlo.CompareOp, [_tensor(tr, rc_block.args[0]), _tensor(tr, count_ph)], comparison_direction="LT"
            )
        rc_block.add_op(ReturnOp.create(operands=[more.value]))
        with _emitting_into(tr, rb_block):
            t = _tensor(tr, rb_block.args[0])
            ct_vs = [_tensor(tr, a) for a in rb_block.args[1 : 1 + len(d_vals)]]
            accs = [_tensor(tr, a) for a in rb_block.args[1 + len(d_vals) :]]
            (last,) = bind(hlo.SubtractOp, [_tensor(tr, count_ph), scalar(1, "int32")])
            (at,) = bind(hlo.SubtractOp, [last, t])
            reads, states = [], []
            for ph, s in zip(stack_ph, specs):
                row = bind(
                    hlo.DynamicSliceOp, [_tensor(tr, ph), at] + [idx0() for _ in s.shape], slice_sizes=(1,) + s.shape
                )[0]
                state = bind(hlo.ReshapeOp, [row], shape=s.shape)[0]
                reads.append([row.value.owner, state.value.owner])
                states.append(state)
            mapper = {a: v.value for a, v in zip(op.body.block.args, states)}
            src = op.body.block
            made = _clone_ops(tr, [o for o in src.ops if o is not src.last_op], mapper, uid)
            rets = [canonical_value(mapper.get(v, v)) for v in src.last_op.operands]
            ys = [rets[j] for j in d_vals]
            xs = [states[j].value for j in d_vals] + [node.inputs[n_vals + k] for k in d_caps]
            got = backprop(_clone_graph(tr, made, uid), ys, ct_vs, xs, colocate, uid) if ys else [None] * len(xs)
            new_cts = [g if g is not None else zeros_like_spec(specs[j]) for g, j in zip(got[: len(d_vals)], d_vals)]
            cap_got = got[len(d_vals) :]
            new_accs = [acc if g is None else add_n([acc, g]) for acc, g in zip(accs, cap_got)]
            (t1,) = bind(hlo.AddOp, [t, scalar(1, "int32")])
        rb_block.add_op(ReturnOp.create(operands=[t1.value] + [v.value for v in new_cts] + [v.value for v in new_accs]))
    _prune([o for o in made if o.parent is rb_block])
    stored = []
    for j, (row_op, state_op) in enumerate(reads):
        if state_op.results[0].uses:
            stored.append(j)
        else:
            rb_block.erase_op(state_op)
            rb_block.erase_op(row_op)

    # 2. The trip count and the stacks: the forward loop's own counter when
    # nothing needs storing, else the forward loop again, pushing state t.
    if not stored and _counts_iterations(op):
        count_ph.replace_all_uses_with(op.results[0])
        stacks: list[Any] = []
    else:
        f_specs = [i32] + specs + [stack_specs[j] for j in stored]
        f_types = [s.to_type() for s in f_specs]
        c_block, b_block = Block(arg_types=f_types), Block(arg_types=f_types)
        with _emitting_into(tr, c_block):
            mapper = {a: b for a, b in zip(op.cond.block.args, c_block.args[1 : 1 + n_vals])}
            src = op.cond.block
            made = _clone_ops(tr, [o for o in src.ops if o is not src.last_op], mapper, uid)
            c_ret = mapper.get(src.last_op.operands[0], src.last_op.operands[0])
        c_block.add_op(ReturnOp.create(operands=[c_ret]))
        _prune([o for o in made if o.parent is c_block])
        with _emitting_into(tr, b_block):
            t = _tensor(tr, b_block.args[0])
            vs = [_tensor(tr, a) for a in b_block.args[1 : 1 + n_vals]]
            pushed = []
            for j, a in zip(stored, b_block.args[1 + n_vals :]):
                row = bind(hlo.ReshapeOp, [vs[j]], shape=(1,) + specs[j].shape)[0]
                pushed.append(
                    bind(hlo.DynamicUpdateSliceOp, [_tensor(tr, a), row, t] + [idx0() for _ in specs[j].shape])[0]
                )
            mapper = {a: b for a, b in zip(op.body.block.args, b_block.args[1 : 1 + n_vals])}
            src = op.body.block
            made = _clone_ops(tr, [o for o in src.ops if o is not src.last_op], mapper, uid)
            new_vs = [mapper.get(v, v) for v in src.last_op.operands]
            (t1,) = bind(hlo.AddOp, [t, scalar(1, "int32")])
        b_block.add_op(ReturnOp.create(operands=[t1.value] + list(new_vs) + [v.value for v in pushed]))
        _prune([o for o in made if o.parent is b_block])
        f_init = [scalar(0, "int32")] + list(init) + [zeros_like_spec(stack_specs[j]) for j in stored]
        fwd = WhileOp.create(
            operands=[v.value for v in f_init], result_types=f_types, regions=[Region(c_block), Region(b_block)]
        )
        fwd.attributes[MAXIMUM_ITERATIONS_ATTR] = IntegerAttr(bound, i64)
        fwd.location = loc
        tr.block.add_op(fwd)
        f_outs = [_tensor(tr, r) for r in fwd.results]
        _record(fwd, f_outs)
        count_ph.replace_all_uses_with(fwd.results[0])
        stacks = f_outs[1 + n_vals :]
        for j, st in zip(stored, stacks):
            stack_ph[j].replace_all_uses_with(st.value)

    rev = WhileOp.create(
        operands=[v.value for v in r_init], result_types=r_types, regions=[Region(rc_block), Region(rb_block)]
    )
    rev.attributes[MAXIMUM_ITERATIONS_ATTR] = IntegerAttr(bound, i64)
    rev.location = loc
    tr.block.add_op(rev)
    r_outs = [_tensor(tr, r) for r in rev.results]
    _record(rev, r_outs)
    result: list = [None] * len(inputs)
    for idx, j in enumerate(d_vals):
        result[j] = r_outs[1 + idx]
    for idx, (k, g) in enumerate(zip(d_caps, cap_got)):
        if g is not None:
            result[n_vals + k] = r_outs[1 + len(d_vals) + idx]
    return result


register_structural_vjp(structural_vjp)
