"""``xtpu.cond`` and ``xtpu.while_loop``: TF's control flow, eager or traced.

Eagerly they are Python's ``if`` and ``while`` on numpy values.  Inside a
replicated computation each function is traced once into a region of
``hlo.if`` / ``hlo.while`` (StableHLO's if and while), so the program
branches and loops at run time.  Inside ``outside_compilation`` they become
host control flow.  Semantics: TF's ``tf.cond`` and ``tf.while_loop``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.ir import Block, Operation, Region

from xtpu.core import pytree
from xtpu.core.contexts import current_run_state
from xtpu.core.eager import as_eager_results
from xtpu.core.tracing import Tensor, Trace, convert, current_trace, recording_tapes, user_location
from xtpu.dialects.hlo import ConstantOp
from xtpu.dialects.hlo_control import IfOp, ReturnOp, WhileOp
from xtpu.dialects.primitive import array_from_dense
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.ops import math_ops


def _eager_pred(pred: Any, what: str) -> bool:
    arr = np.asarray(pred)
    if arr.shape != () or arr.dtype != np.bool_:
        raise TypeError(f"{what}: the predicate must be a bool scalar, got {arr.dtype.name}{list(arr.shape)}")
    return bool(arr)


def _traced_pred(pred: Any, what: str) -> Tensor:
    p = convert(pred)
    if p.spec != TensorSpec((), "bool"):
        raise TypeError(f"{what}: the predicate must be a bool scalar, got {p.spec}")
    return p


def _outputs(result: Any, what: str) -> tuple[list[Any], Any]:
    """A region function's result as tensors (Tensors traced, arrays eagerly)
    and its structure; TypeError naming the output that cannot be one."""
    leaves, tree = pytree.flatten(result)
    tensors = []
    for j, leaf in enumerate(leaves):
        try:
            tensors.append(convert(leaf))
        except TypeError as e:
            raise TypeError(f"{what}: output {j} cannot be a tensor: {e}") from None
    return tensors, tree


def _trace_region(tr: Trace, block: Block, fn: Callable[..., Any], args: tuple, what: str):
    """Trace ``fn(*args)`` into ``block``; return its output leaves (Tensors
    made in the block) and their structure."""
    tr.blocks.append(block)
    depth = len(tr.blocks)
    try:
        tensors, tree = _outputs(fn(*args), what)
    finally:
        if len(tr.blocks) != depth:
            del tr.blocks[depth - 1 :]
            raise NotImplementedError(f"{what}: a control-flow context was left open")
        tr.blocks.pop()
    return tensors, tree


def cond(
    pred: Any,
    true_fn: Callable[[], Any] | None = None,
    false_fn: Callable[[], Any] | None = None,
    name: str | None = None,
) -> Any:
    """``true_fn()`` if ``pred`` else ``false_fn()`` (tf.cond; StableHLO if).

    Args:
      pred: a bool scalar.
      true_fn, false_fn: functions of no arguments returning the same
        structure of tensors with the same shapes and dtypes.

    Returns:
      What the taken branch returns.  A variable a branch updates inside
      ``strategy.run`` or an ``xtpu.function`` holds the taken branch's
      value afterwards (TF's cond orders the branch's assign before its
      result).

    Raises:
      TypeError: ``pred`` is not a bool scalar, or a branch is missing.
      ValueError: the branches return different structures, shapes or dtypes.
    """
    if true_fn is None or false_fn is None:
        raise TypeError("cond: true_fn and false_fn are required")
    tr = current_trace()
    if tr is None:
        # The taken branch's values as tensors, as traced (a Python float is
        # float32 in both): EagerTensors, as every eager op's results.

        out, tree = _outputs(true_fn() if _eager_pred(pred, "cond") else false_fn(), "cond")
        return pytree.unflatten(tree, as_eager_results(out))
    p = _traced_pred(pred, "cond")
    # Variables a branch updates inside strategy.run / xtpu.function (their
    # values in the run state): extra outputs of both branches, as TF's cond
    # orders a branch's assign before the cond's result.
    state = current_run_state()
    before = dict(state.current) if state is not None else {}
    t_block, f_block = Block(), Block()
    t_out, t_tree = _trace_region(tr, t_block, true_fn, (), "cond true_fn")
    t_vars = dict(state.current) if state is not None else {}
    if state is not None:
        state.current = dict(before)
    f_out, f_tree = _trace_region(tr, f_block, false_fn, (), "cond false_fn")
    f_vars = dict(state.current) if state is not None else {}
    if t_tree != f_tree:
        raise ValueError(f"cond: true_fn and false_fn must return the same structure, got {t_tree} and {f_tree}")
    for j, (a, b) in enumerate(zip(t_out, f_out)):
        if a.spec != b.spec:
            raise ValueError(f"cond: output {j} is {a.spec} in true_fn but {b.spec} in false_fn")
    updated = [v for v in before if t_vars.get(v) is not before[v] or f_vars.get(v) is not before[v]]
    n_user = len(t_out)
    t_out = t_out + [convert(t_vars[v]) for v in updated]
    f_out = f_out + [convert(f_vars[v]) for v in updated]
    t_block.add_op(ReturnOp.create(operands=[t.value for t in t_out]))
    f_block.add_op(ReturnOp.create(operands=[t.value for t in f_out]))
    op = IfOp.create(
        operands=[p.value],
        result_types=[t.value.type for t in t_out],
        regions=[Region(t_block), Region(f_block)],
    )
    loc = user_location()
    if loc is not None:
        op.location = loc
    tr.block.add_op(op)
    outs = [Tensor(r, t.spec, tr) for r, t in zip(op.results, t_out)]
    for v, t in zip(updated, outs[n_user:]):
        state.current[v] = t
    _record_region(op, outs)
    return pytree.unflatten(t_tree, outs[:n_user])


def _same_structure(a: Any, b: Any) -> bool:
    """TF's ``nest.assert_same_structure(..., check_types=False)``: lists
    and tuples of the same leaves match (TF's own example returns a tuple
    for list loop_vars); dict keys must match."""
    seqs = ("list", "tuple", "namedtuple")
    if a.kind in seqs and b.kind in seqs:
        return len(a.children) == len(b.children) and all(_same_structure(x, y) for x, y in zip(a.children, b.children))
    return (
        a.kind == b.kind
        and a.aux == b.aux
        and len(a.children) == len(b.children)
        and all(_same_structure(x, y) for x, y in zip(a.children, b.children))
    )


def while_loop(
    cond: Callable[..., Any],
    body: Callable[..., Any],
    loop_vars: Any,
    shape_invariants: Any = None,
    parallel_iterations: int = 10,
    back_prop: bool = True,
    swap_memory: bool = False,
    maximum_iterations: Any = None,
    name: str | None = None,
) -> Any:
    """Repeat ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)``
    (tf.while_loop; StableHLO while).

    Args:
      cond: returns a bool scalar.
      body: returns loop values of the same structure, shapes and dtypes as
        ``loop_vars`` (a single value is accepted for one loop value).
      loop_vars: a tensor, or a (nested) list/tuple of them; Python numbers
        become float32 / int32 tensors.
      maximum_iterations: stop after this many iterations as well.
      shape_invariants, parallel_iterations, back_prop, swap_memory: accepted
        for TF compatibility; shapes are static in xtpu.

    Returns:
      The loop values after the last iteration, with ``loop_vars``' structure.

    Raises:
      TypeError: ``cond`` does not return a bool scalar.
      ValueError: ``body`` changes the structure, a shape or a dtype.
      NotImplementedError: ``body`` updates a variable inside
        ``strategy.run`` or an ``xtpu.function`` (not carried yet).
    """
    leaves, tree = pytree.flatten(loop_vars)
    single = len(leaves) == 1

    def norm(result):
        out_leaves, out_tree = pytree.flatten(result)
        if not _same_structure(out_tree, tree):
            if single and out_tree.kind == "leaf":
                return out_leaves
            if single and out_tree.num_leaves == 1 and tree.kind == "leaf":
                return out_leaves
            raise ValueError(f"while_loop: body must return the structure of loop_vars {tree}, got {out_tree}")
        return out_leaves

    tr = current_trace()
    if maximum_iterations is not None:
        # A counter, as TF does: the loop also stops after maximum_iterations.
        user_cond, user_body = cond, body
        n_max = maximum_iterations

        def cond(i, *vs):  # noqa: F811 - wraps the user's cond

            inner = user_cond(*_as_args(tree, vs))
            return math_ops.logical_and(math_ops.less(i, n_max), inner)

        def body(i, *vs):  # noqa: F811 - wraps the user's body
            return (i + 1, *norm(user_body(*_as_args(tree, vs))))

        out = while_loop(cond, body, (np.int32(0), *leaves))
        if tr is not None:
            # The bound the loop's gradient needs to store its intermediates.
            mark_maximum_iterations(out[0].value.owner, n_max)
        return pytree.unflatten(tree, list(out[1:]))

    if tr is None:
        # EagerTensors, as every eager op's results (a tape can watch them)
        values = as_eager_results([convert(v) for v in leaves])
        while _eager_pred(cond(*_as_args(tree, values)), "while_loop cond"):
            new = norm(body(*_as_args(tree, values)))
            values = as_eager_results([convert(v) for v in new])
        return pytree.unflatten(tree, values)

    init = [convert(v) for v in leaves]
    specs = [t.spec for t in init]
    types = [s.to_type() for s in specs]
    c_block, b_block = Block(arg_types=types), Block(arg_types=types)
    c_args = pytree.unflatten(tree, [Tensor(a, s, tr) for a, s in zip(c_block.args, specs)])
    b_args = pytree.unflatten(tree, [Tensor(a, s, tr) for a, s in zip(b_block.args, specs)])
    c_out, _ = _trace_region(
        tr, c_block, lambda *a: cond(*a), (c_args,) if tree.kind == "leaf" else tuple(c_args), "while_loop cond"
    )
    if len(c_out) != 1 or c_out[0].spec != TensorSpec((), "bool"):
        got = ", ".join(str(t.spec) for t in c_out)
        raise TypeError(f"while_loop: cond must return a bool scalar, got ({got})")
    state = current_run_state()
    current = state.current if state is not None else {}
    before = dict(current)
    b_out, _ = _trace_region(
        tr,
        b_block,
        lambda *a: pytree.unflatten(tree, norm(body(*a))),
        (b_args,) if tree.kind == "leaf" else tuple(b_args),
        "while_loop body",
    )
    if state is not None and state.current is current:
        updated = [v for v in before if current.get(v) is not before[v]]
        if updated:
            current.update(before)
            raise NotImplementedError(
                f"while_loop: variable '{updated[0].name}' is updated inside the loop body; xtpu does not carry "
                "variables through a while_loop yet: make its value a loop variable and assign it after the loop"
            )
    for j, (t, s) in enumerate(zip(b_out, specs)):
        if t.spec != s:
            raise ValueError(
                f"while_loop: loop value {j} is {s} before the loop but {t.spec} after an iteration; "
                "loop values must keep their shape and dtype"
            )
    c_block.add_op(ReturnOp.create(operands=[c_out[0].value]))
    b_block.add_op(ReturnOp.create(operands=[t.value for t in b_out]))
    op = WhileOp.create(
        operands=[t.value for t in init], result_types=types, regions=[Region(c_block), Region(b_block)]
    )
    loc = user_location()
    if loc is not None:
        op.location = loc
    tr.block.add_op(op)
    outs = [Tensor(r, s, tr) for r, s in zip(op.results, specs)]
    _record_region(op, outs)
    return pytree.unflatten(tree, outs)


def _as_args(tree: Any, values: Any) -> tuple:
    """The arguments of ``cond`` and ``body``: the loop value itself when
    ``loop_vars`` is a single tensor, else the items of its structure."""
    s = pytree.unflatten(tree, list(values))
    return (s,) if tree.kind == "leaf" else tuple(s)


def _record_region(op: Any, outs: list[Tensor]) -> None:
    """Let the recording GradientTapes see a region op."""
    for tape in recording_tapes():
        tape._record_region(op, outs)


# --------------------------------------------------------------------------
# The bound of a while loop (its gradient needs one: autodiff reads it)
# --------------------------------------------------------------------------

MAXIMUM_ITERATIONS_ATTR = "xtpu.maximum_iterations"


def mark_maximum_iterations(op: Operation, maximum_iterations: Any) -> None:
    """Record ``maximum_iterations`` on the ``hlo.while`` ``op`` when it is a
    compile-time constant (a Python / numpy int or an ``hlo.constant``), else
    mark it -1 (a bound exists but is only known at run time)."""
    n = static_int(maximum_iterations)
    op.attributes[MAXIMUM_ITERATIONS_ATTR] = IntegerAttr(-1 if n is None else max(n, 0), i64)


def static_int(value: Any) -> int | None:
    """The value of an int scalar known while tracing, else None."""
    if isinstance(value, Tensor):
        owner = value.value.owner
        if isinstance(owner, ConstantOp) and value.spec.shape == () and value.dtype in ("int32", "int64"):
            return int(array_from_dense(owner.value))
        return None
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    arr = np.asarray(value)
    if arr.shape == () and arr.dtype.kind in "iu":
        return int(arr)
    return None
