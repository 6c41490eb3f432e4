"""Reverse-mode differentiation built as ordinary ops (TF's ``gradients_util``).

The engine walks a recorded forward computation backwards and asks each op's
one definition for its gradient rule (:meth:`PrimitiveOp.vjp`).  The rules
are written with xtpu ops, so the gradient is traced into the same module as
the forward ops inside a replicated computation (``lower().as_text()`` shows
it and every pass treats it like forward code) and runs on numpy eagerly.

Two graphs feed the engine:

* :class:`TracedGraph` reads the IR of the computation being traced (all of
  it for ``xtpu.gradients``, the ops a tape recorded for ``GradientTape``);
* :class:`EagerGraph` is an eager tape's list of recorded ops.

Placement follows the seed ``outside_compilation_patch.diff.txt``: with
colocation (TF 1's ``colocate_gradients_with_ops=True``, and always for
``GradientTape``), the gradient ops of an op in outside-compilation cluster
``C`` are traced into the host cluster ``C.<gradient_uid>``, one uid per call
(``uid``, ``uid_1``, ... as TF's ``graph.unique_name("uid")``); the gradient
of an op already in ``C.<uid1>`` taken by a later call goes to
``C.<uid1>.<uid2>``, so the uid is always the suffix after the last ``.``.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Block, Operation, Region, SSAValue

from xtpu.core.tracing import (
    Tensor,
    Trace,
    bind,
    convert,
    current_trace,
    format_location,
    is_tensor_like,
    is_variable,
    spec_of,
)
from xtpu.dialects.autodiff import StopGradientOp
from xtpu.dialects.dynamic_shapes import GetDimensionSizeOp, SetDimensionSizeOp
from xtpu.dialects.hlo import AddOp
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.tensor_spec import COMPLEX_DTYPES, FLOAT_DTYPES, TensorSpec, dtype_of_numpy, is_complex_dtype
from xtpu.dialects.tpu import OutsideCompilationOp, ReplicateOp, YieldOp
from xtpu.ops.core import broadcast_to, scalar
from xtpu.passes._common import captured_values

DIFFERENTIABLE_DTYPES = FLOAT_DTYPES + COMPLEX_DTYPES

NESTED_COLOCATION = "Cannot nest gradient colocation operations outside compilation"
NO_GRADIENT_UID = "No gradient_uid calling gradient within outside_compilation"


class UnconnectedGradients(enum.Enum):
    """What a source unreachable from the target gets (TF's
    ``tf.UnconnectedGradients``): ``None`` or zeros."""

    NONE = "none"
    ZERO = "zero"


def is_differentiable(spec: TensorSpec) -> bool:
    return spec.dtype in DIFFERENTIABLE_DTYPES


@dataclass(eq=False)
class Node:
    """One recorded forward op: its class, parameters, input and output keys
    (SSA values when traced, object ids eagerly), the user's source line and
    the outside-compilation cluster it ran in."""

    op_cls: type
    params: dict
    inputs: list
    outputs: list
    order: int
    location: Any = None
    cluster: str | None = None
    op: Operation | None = None
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return getattr(self.op_cls, "name", self.op_cls.__name__)


# --------------------------------------------------------------------------
# Graphs
# --------------------------------------------------------------------------


def canonical_value(v: SSAValue) -> SSAValue:
    """A value with ``tpu.outside_compilation`` results replaced by what the
    cluster yields: a cluster is transparent to gradients."""
    while isinstance(v.owner, OutsideCompilationOp):
        y = v.owner.body.block.last_op
        v = y.operands[v.index]
    return v


def cluster_of(op: Operation, tr: Trace | None) -> str | None:
    """The outside-compilation cluster an op was traced into, or None."""
    block = op.parent_block()
    while block is not None:
        if tr is not None and id(block) in tr.cluster_blocks:
            return tr.cluster_blocks[id(block)]
        p = block.parent_op()
        if p is None or isinstance(p, ReplicateOp):
            return None
        if isinstance(p, OutsideCompilationOp):
            return p.cluster.data
        block = p.parent_block()
    return None


class TracedGraph:
    """The IR of the computation being traced, seen as a graph of Nodes.

    Args:
      trace: the active trace.
      recorded: ids of the ops a tape recorded, or None for every op
        (``xtpu.gradients``).
    """

    def __init__(self, trace: Trace, recorded: set[int] | None = None):
        self.trace = trace
        self.recorded = recorded
        self._nodes: dict[int, Node] = {}
        self._order: dict[int, int] | None = None
        # A value a cluster yields -> the cluster's result, the value device
        # code after the cluster reads (see :meth:`value`).
        self._outside: dict[SSAValue, SSAValue] = {}

    def key(self, value: Any) -> SSAValue:
        if isinstance(value, Tensor):
            value = value.value
        return self._canonical(value)

    def _canonical(self, v: SSAValue) -> SSAValue:
        c = canonical_value(v)
        if c is not v:
            self._outside.setdefault(c, v)
        return c

    def existing_ops(self) -> set[int]:
        """Ids of the ops that exist now (before a gradient is built)."""
        return set(self._positions())

    def _positions(self) -> dict[int, int]:
        if self._order is None:
            order: dict[int, int] = {}
            for b in self.trace.blocks:
                for op in b.walk():
                    order.setdefault(id(op), len(order))
            self._order = order
        return self._order

    def producer(self, key: SSAValue) -> Node | None:
        op = key.owner
        if not isinstance(op, Operation):
            return None
        if self.recorded is not None and id(op) not in self.recorded:
            return None
        node = self._nodes.get(id(op))
        if node is None:
            node = self._node_of(op)
            self._nodes[id(op)] = node
        return node

    def _node_of(self, op: Operation) -> Node:
        if not isinstance(op, PrimitiveOp):
            raise LookupError(f"No gradient defined for operation '{op.name}'")
        inputs = [self._canonical(o) for o in op.operands]
        extra: dict = {}
        if op.regions:
            caps = [self._canonical(v) for v in captured_values(op)]
            extra["captures"] = caps
            inputs = inputs + caps
        pos = self._positions().get(id(op))
        if pos is None:  # made after the positions were read: latest
            pos = len(self._positions()) + len(self._nodes)
        return Node(
            type(op), op.params(), inputs, list(op.results), pos, op.location, cluster_of(op, self.trace), op, extra
        )

    def value(self, key: SSAValue) -> Tensor:
        """The tensor of ``key`` for gradient code being traced now: outside
        any cluster, a value a cluster yields is read as the cluster's
        result (as the forward code read it), so that the ops a gradient
        builds on it are recorded by the tapes watching that result (a
        second-order gradient through an outside-compilation result was
        None)."""
        if self.trace.cluster is None:
            key = self._outside.get(key, key)
        return Tensor(key, TensorSpec.of_type(key.type), self.trace)

    def spec(self, key: SSAValue) -> TensorSpec:
        return TensorSpec.of_type(key.type)


class EagerGraph:
    """An eager tape's recorded ops (keys are ids of the values)."""

    def __init__(self, nodes_by_output: dict[int, Node], values: dict[int, Any]):
        self._producers = nodes_by_output
        self._values = values

    def key(self, value: Any) -> int:
        return id(value)

    def producer(self, key: int) -> Node | None:
        return self._producers.get(key)

    def value(self, key: int) -> Any:
        return self._values[key]

    def spec(self, key: int) -> TensorSpec:
        v = np.asarray(self._values[key])
        return TensorSpec(v.shape, dtype_of_numpy(v.dtype))


# --------------------------------------------------------------------------
# Colocation of gradients with outside-compilation clusters (the seed)
# --------------------------------------------------------------------------


def gradient_cluster_name(cluster: str, gradient_uid: str) -> str:
    """The seed's rule: ``C`` -> ``C.uid``; ``C.uid`` stays when the uid is
    this call's; ``C.uid1`` -> ``C.uid1.uid2`` otherwise."""
    parts = cluster.split(".")
    if len(parts) > 1 and parts[-1] == gradient_uid:
        return cluster
    return f"{cluster}.{gradient_uid}"


class _Colocation:
    """Opens the host cluster a node's gradient ops go to, sharing one
    ``tpu.outside_compilation`` region per cluster name and call."""

    def __init__(self, trace: Trace | None, enabled: bool, gradient_uid: str | None):
        self.trace = trace
        self.enabled = enabled and trace is not None
        self.uid = gradient_uid
        self.region: tuple[str, Block] | None = None

    @contextlib.contextmanager
    def node(self, node: Node) -> Iterator[None]:
        tr = self.trace
        if not self.enabled or node.cluster is None or tr is None:
            self.close()
            yield
            return
        if tr.cluster is not None:
            # The seed: inside an outside_compilation scope already, the
            # gradient ops simply join it.
            yield
            return
        if tr.gradient_colocation is not None:
            raise NotImplementedError(NESTED_COLOCATION)
        if self.uid is None:
            raise NotImplementedError(NO_GRADIENT_UID)
        name = gradient_cluster_name(node.cluster, self.uid)
        if self.region is None or self.region[0] != name:
            self.close()
            self._open(name, node)
        _, block = self.region  # type: ignore[misc]
        tr.blocks.append(block)
        tr.cluster = name
        tr.cluster_blocks[id(block)] = name
        tr.gradient_colocation = node
        depth = len(tr.blocks)
        try:
            yield
        finally:
            del tr.blocks[depth - 1 :]
            tr.cluster = None
            tr.cluster_blocks.pop(id(block), None)
            tr.gradient_colocation = None

    def _open(self, name: str, node: Node) -> None:
        tr = self.trace
        block = Block()
        block.add_op(YieldOp.create(operands=[]))
        op = OutsideCompilationOp.create(
            result_types=[], properties={"cluster": StringAttr(name)}, regions=[Region(block)]
        )
        if node.location is not None:
            op.location = node.location
        tr.block.add_op(op)
        tr.cluster_ops.append(op)
        # Ops are appended before the yield: a block that ends in the yield.
        self.region = (name, _BeforeYield(block))

    def close(self) -> None:
        self.region = None


class _BeforeYield:
    """A block seen as its ops before the terminator: ``add_op`` inserts
    before the ``tpu.yield`` so that the region stays well formed."""

    def __init__(self, block: Block):
        self._block = block

    def add_op(self, op: Operation) -> None:
        self._block.insert_op_before(op, self._block.last_op)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._block, name)

    def __eq__(self, other: object) -> bool:
        return other is self or other is self._block

    def __hash__(self) -> int:
        return id(self._block)


# --------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------


def zeros_like_spec(spec: TensorSpec) -> Any:
    return broadcast_to(scalar(0, spec.dtype), spec.shape)


def ones_like_spec(spec: TensorSpec) -> Any:
    return broadcast_to(scalar(1, spec.dtype), spec.shape)


def add_n(values: list[Any]) -> Any:
    total = values[0]
    for v in values[1:]:
        (total,) = bind(AddOp, [total, v])
    return total


def _where(node: Node) -> str:
    loc = format_location(node.location) if node.location is not None else None
    return f" (at {loc})" if loc else ""


def backprop(
    graph: Any,
    ys: Sequence[Any],
    cotangents: Sequence[Any],
    xs: Sequence[Any],
    colocate: bool = False,
    gradient_uid: str | None = None,
    stop_keys: Sequence[Any] = (),
) -> list[Any]:
    """Cotangents of ``xs`` (keys) given ``cotangents`` of ``ys`` (keys).

    Returns one entry per x: the summed cotangent, or None when no path of
    differentiable ops joins it to a y.

    Raises:
      LookupError: a gradient reaches an op with no rule ("No gradient
        defined for operation ..."), naming the op and its source line.
      NotImplementedError: the seed's colocation errors.
    """
    xs_set = {k for k in xs}
    stops = {k for k in stop_keys}
    # 1. nodes reachable backwards from ys, stopping at stop keys.  Not at
    # xs: a source that depends on another source passes its cotangent on
    # (TF: gradients(z, [x, y]) with y = f(x) gives dz/dx through y).
    nodes: dict[int, Node] = {}
    stack = [k for k in ys]
    seen: set = set()
    while stack:
        k = stack.pop()
        if k in seen:
            continue
        seen.add(k)
        if k in stops:
            continue
        node = graph.producer(k)
        if node is None or id(node) in nodes:
            continue
        nodes[id(node)] = node
        stack.extend(node.inputs)
    ordered = sorted(nodes.values(), key=lambda n: n.order)
    # 2. keep the nodes that depend on some x
    live = set(xs_set)
    relevant: list[Node] = []
    for node in ordered:
        if any(k in live for k in node.inputs):
            relevant.append(node)
            live.update(node.outputs)
    # 3. propagate backwards
    partials: dict[Any, list[Any]] = {}
    for y, ct in zip(ys, cotangents):
        if ct is not None:
            partials.setdefault(y, []).append(ct)
    coloc = _Colocation(current_trace(), colocate, gradient_uid)
    discarded: list[Any] = []
    # The summed cotangents of sources consumed by their producer's rule.
    summed: dict[Any, Any] = {}
    before = graph.existing_ops() if isinstance(graph, TracedGraph) else None
    for node in reversed(relevant):
        if not any(o in partials for o in node.outputs):
            continue
        _refuse_complex(graph, node, live, partials)
        if node.op_cls.NOT_DIFFERENTIABLE:
            continue
        out_specs = [graph.spec(o) for o in node.outputs]
        if not any(is_differentiable(s) for s, o in zip(out_specs, node.outputs) if o in partials):
            continue
        with coloc.node(node):
            cts = []
            for o, s in zip(node.outputs, out_specs):
                got = partials.pop(o, None)
                if got:
                    cts.append(add_n(got))
                elif node.op_cls.STRUCTURAL_GRADIENT:
                    # Region ops differentiate only the outputs that have a
                    # cotangent: a zero one could meet a singular local
                    # derivative in a branch (0 * inf = nan).
                    cts.append(None)
                else:
                    cts.append(zeros_like_spec(s))
                if got and o in xs_set:
                    summed[o] = cts[-1]
            inputs = [graph.value(k) for k in node.inputs]
            outputs = [graph.value(k) for k in node.outputs]
            # Inputs whose cotangent nobody needs: no source depends on them
            # (a constant, the data) or they have no gradient.
            skip = frozenset(
                i for i, k in enumerate(node.inputs) if k not in live or not is_differentiable(graph.spec(k))
            )
            in_cts = _apply_rule(graph, node, cts, inputs, outputs, colocate, gradient_uid, skip)
        if len(in_cts) != len(node.inputs):
            raise RuntimeError(
                f"the gradient rule of {node.name} returned {len(in_cts)} cotangents for {len(node.inputs)} inputs"
            )
        for k, ct in zip(node.inputs, in_cts):
            if ct is None:
                continue
            if k not in live or not is_differentiable(graph.spec(k)):
                discarded.append(ct)
                continue
            spec = graph.spec(k)
            got = spec_of(ct)
            if got != spec:
                raise RuntimeError(
                    f"the gradient rule of {node.name} gave a cotangent {got} for an input {spec}{_where(node)}"
                )
            partials.setdefault(k, []).append(ct)
    coloc.close()
    results = [summed[x] if x in summed else add_n(partials[x]) if partials.get(x) else None for x in xs]
    if before is not None:
        keep = set(before)
        keep.update(id(r.value.owner) for r in results if isinstance(r, Tensor))
        _erase_dead(discarded, keep)
    return results


def _refuse_complex(graph: Any, node: Node, live: set, partials: dict) -> None:
    """TypeError when a gradient would flow through a complex64 value of an
    op whose rule does not take complex64 (``COMPLEX_GRADIENT``: TF's
    conjugate convention, ``math_grad.py``): stopping there would give
    silently wrong gradients."""
    if node.op_cls.COMPLEX_GRADIENT:
        return
    complex_in = [k for k in node.inputs if k in live and is_complex_dtype(graph.spec(k).dtype)]
    complex_out = [k for k in node.outputs if k in partials and is_complex_dtype(graph.spec(k).dtype)]
    for k in complex_in + complex_out:
        raise TypeError(
            f"gradients of complex64 are not supported by {node.name}: the gradient reaches its"
            f" {'input' if k in complex_in else 'result'} {graph.spec(k)}{_where(node)}"
        )


def _erase_dead(values: list[Any], keep: set[int]) -> None:
    """Erase the ops that computed cotangents nobody needs (those of
    constants and of inputs no source depends on), when this call made them
    and nothing uses them: rules compute every input's cotangent."""
    from xdsl.traits import Pure

    work = [v.value.owner for v in values if isinstance(v, Tensor) and isinstance(v.value.owner, Operation)]
    while work:
        op = work.pop()
        if id(op) in keep or op.parent is None or any(r.uses for r in op.results):
            continue
        if not op.has_trait(Pure) or op.regions:
            continue
        operands = [o.owner for o in op.operands if isinstance(o.owner, Operation)]
        op.detach()
        op.erase()
        work.extend(operands)


@functools.cache
def _takes_skips(op_cls: type) -> bool:
    """Whether ``op_cls.vjp`` takes ``skip_input_indices``."""
    return "skip_input_indices" in inspect.signature(op_cls.vjp).parameters


_STRUCTURAL_VJP: list[Callable[..., Any]] = []
"""The gradient of region ops (``hlo.if``, ``hlo.while``, outside-compilation
clusters), set by :mod:`xtpu.autodiff.gradients_control_flow` when it loads
(it builds on this engine: :func:`register_structural_vjp`)."""


def register_structural_vjp(rule: Callable[..., Any]) -> None:
    """Set the rule that differentiates ops with ``STRUCTURAL_GRADIENT``."""
    _STRUCTURAL_VJP[:] = [rule]


def _apply_rule(graph, node: Node, cts, inputs, outputs, colocate, gradient_uid, skip=frozenset()) -> list[Any]:
    cls = node.op_cls
    if cls.STRUCTURAL_GRADIENT:
        return _STRUCTURAL_VJP[0](graph, node, cts, inputs, outputs, colocate, gradient_uid)
    if not cls.has_gradient_rule():
        raise LookupError(f"No gradient defined for operation '{node.name}' (op type: {node.name}){_where(node)}")
    try:
        if skip and _takes_skips(cls):
            # A rule that knows which cotangents nobody needs does not build
            # them (TF's op.skip_input_indices); other rules' unneeded
            # cotangents are erased after the pass (_erase_dead).
            return list(cls.vjp(cts, inputs, outputs, skip_input_indices=skip, **node.params))
        return list(cls.vjp(cts, inputs, outputs, **node.params))
    except LookupError as e:
        if "(at " in str(e):
            raise
        raise LookupError(f"{e}{_where(node)}") from None


# --------------------------------------------------------------------------
# TF 1: tf.gradients
# --------------------------------------------------------------------------


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def source_keys(graph: Any, x: Any, trace: Trace | None) -> list[Any]:
    """The keys a source stands for: a variable's reads, else the value."""
    if is_variable(x):
        if trace is None:
            return []
        # Reads of an unchanged variable give the same value: count it once.
        return list(dict.fromkeys(graph.key(t) for t in trace.variable_reads.get(x, [])))
    if not isinstance(x, Tensor):
        raise TypeError(f"gradients: xs must be tensors of this computation or variables, got {type(x).__name__} {x!r}")
    return [graph.key(x)]


def gradients(
    ys: Any,
    xs: Any,
    grad_ys: Any = None,
    name: str = "gradients",
    colocate_gradients_with_ops: bool = False,
    gate_gradients: bool = False,
    aggregation_method: Any = None,
    stop_gradients: Any = None,
    unconnected_gradients: UnconnectedGradients = UnconnectedGradients.NONE,
) -> list[Any]:
    """Symbolic derivatives of ``sum(ys)`` w.r.t. each of ``xs``
    (``tf.compat.v1.gradients``), built into the traced computation.

    Args:
      ys: a tensor or list of tensors to differentiate.
      xs: a tensor, variable, or list of them.
      grad_ys: cotangents of ``ys`` (same shapes); default ones.
      colocate_gradients_with_ops: put the gradient of an op of an
        outside-compilation cluster ``C`` on the host, in cluster
        ``C.<gradient_uid>`` (the seed patch).
      stop_gradients: tensors through which no gradient flows.
      unconnected_gradients: ``UnconnectedGradients.NONE`` (None for an
        unconnected x) or ``ZERO``.
      name, gate_gradients, aggregation_method: accepted for TF
        compatibility (gradients are summed with ``hlo.add``).

    Returns:
      A list with one tensor (or None) per x, of the x's shape and dtype.

    Raises:
      RuntimeError: called eagerly (TF: use GradientTape).
      LookupError: an op on the path has no gradient rule.
      ValueError: a ``grad_ys`` entry does not match its y.
    """
    tr = current_trace()
    if tr is None:
        raise RuntimeError(
            "tf.gradients is not supported when eager execution is enabled. Use tf.GradientTape instead."
        )
    unconnected_gradients = unconnected_value(unconnected_gradients)
    graph = TracedGraph(tr)
    ys_l = [_to_tensor(y) for y in _as_list(ys)]
    xs_l = _as_list(xs)
    gys = _as_list(grad_ys) if grad_ys is not None else [None] * len(ys_l)
    if len(gys) != len(ys_l):
        raise ValueError(f"gradients: grad_ys has {len(gys)} entries for {len(ys_l)} ys")
    uid = tr.new_gradient_uid()
    cts = [_default_grad_y(y, g, i) for i, (y, g) in enumerate(zip(ys_l, gys))]
    stops = [graph.key(_to_tensor(s)) for s in _as_list(stop_gradients)] if stop_gradients is not None else []
    keys_per_x = [source_keys(graph, x, tr) for x in xs_l]
    flat_keys = [k for ks in keys_per_x for k in ks]
    grads = backprop(graph, [graph.key(y) for y in ys_l], cts, flat_keys, colocate_gradients_with_ops, uid, stops)
    return _collect(grads, keys_per_x, xs_l, graph, unconnected_gradients)


def unconnected_value(value: Any) -> UnconnectedGradients:
    """``unconnected_gradients`` as the enum (TF's check and message)."""
    try:
        return UnconnectedGradients(value)
    except ValueError:
        raise ValueError(f"Unknown value for unconnected_gradients: {value!r}") from None


def _to_tensor(v: Any) -> Any:
    if is_variable(v):
        return v.read_value()
    return convert(v)


def _default_grad_y(y: Any, g: Any, i: int) -> Any:
    spec = spec_of(y)
    if g is None:
        if not is_differentiable(spec):
            return None
        return ones_like_spec(spec)

    g = convert(g) if is_tensor_like(g) else convert(g, spec.dtype)  # Python numbers: y's dtype
    if spec_of(g) != spec:
        raise ValueError(f"gradients: grad_ys[{i}] is {spec_of(g)} but ys[{i}] is {spec}")
    return g


def _collect(grads, keys_per_x, xs_l, graph, unconnected) -> list[Any]:
    out = []
    i = 0
    for x, ks in zip(xs_l, keys_per_x):
        parts = [g for g in grads[i : i + len(ks)] if g is not None]
        i += len(ks)
        if parts:
            out.append(add_n(parts))
        elif unconnected is UnconnectedGradients.ZERO:
            out.append(zeros_like_spec(_source_spec(x)))
        else:
            out.append(None)
    return [_with_real_sizes(g, x) for g, x in zip(out, xs_l)]


def _with_real_sizes(g: Any, x: Any) -> Any:
    """``g``, the gradient of ``x``, with ``x``'s real sizes when
    ``replicate``'s maximum_shapes padded the trace (TF builds the gradient
    from ``tf.shape(x)``, which is dynamic): the output comes back unpadded."""
    if not (isinstance(g, Tensor) and isinstance(x, Tensor) and g.trace.padded and g.shape == x.shape):
        return g
    for d in range(len(x.shape)):
        (size,) = bind(GetDimensionSizeOp, [x], dimension=d)
        (g,) = bind(SetDimensionSizeOp, [g, size], dimension=d)
    return g


def _source_spec(x: Any) -> TensorSpec:
    if is_variable(x):
        return TensorSpec(tuple(x.shape), np.dtype(x.dtype).name)
    return spec_of(x)


# --------------------------------------------------------------------------
# stop_gradient and custom_gradient
# --------------------------------------------------------------------------


def stop_gradient(input: Any, name: str | None = None) -> Any:  # noqa: A002 - TF's name
    """``input`` unchanged, but no gradient flows through it
    (``tf.stop_gradient``; the ``hlo.stop_gradient`` op)."""
    (out,) = bind(StopGradientOp, [convert(input)])
    return out


__all__ = [
    "gradients",
    "stop_gradient",
    "UnconnectedGradients",
    "backprop",
    "TracedGraph",
    "EagerGraph",
    "Node",
]
