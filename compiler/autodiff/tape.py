"""``xtpu.GradientTape`` (TF 2's ``tf.GradientTape``) and eager tensors.

A tape records the ops that touch a watched value while it is recording and
computes gradients from that record with the engine of
:mod:`xtpu.gradients`:

* inside a replicated computation (``replicate``, ``strategy.run``) it
  records IR ops as they are traced, and the gradient is traced into the
  same program;
* eagerly it records each op as it runs on numpy.  Eager values under a tape
  are :class:`EagerTensor` s, a numpy ``ndarray`` subclass whose Python
  operators and numpy ufuncs dispatch through xtpu ops while a tape records
  (as TF's EagerTensor and JAX's Array do), so that ``x * x`` is recorded.
  Outside a tape they behave as plain arrays.

Tapes nest: the gradient ops of an inner tape are recorded by an outer one,
which gives higher-order gradients.  Gradients are colocated with
outside-compilation clusters (clusters ``C.<gradient_uid>``), as TF 2 does
inside TPUStrategy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from xtpu.autodiff.gradients import (
    EagerGraph,
    Node,
    TracedGraph,
    UnconnectedGradients,
    _collect,
    add_n,
    backprop,
    is_differentiable,
    ones_like_spec,
    unconnected_value,
    zeros_like_spec,
)
from xtpu.autodiff.gradients import _source_spec as f
from xtpu.autodiff.gradients_control_flow import captures
from xtpu.core import pytree
from xtpu.core.eager import EagerTensor, _freeze_private, _where, as_eager_tensor
from xtpu.core.tracing import (
    Tensor,
    convert,
    current_trace,
    is_tensor_like,
    is_variable,
    recording_tapes,
    spec_of,
    user_location,
)
from xtpu.dialects.tensor_spec import TensorSpec, np_kind
from xtpu.ops.array_ops import concat, reshape
from xtpu.ops.core import broadcast_to, scalar

NON_PERSISTENT_TWICE = "A non-persistent GradientTape can only be used to compute one set of gradients (or jacobians)"


# --------------------------------------------------------------------------
# The tape
# --------------------------------------------------------------------------


class GradientTape:
    """Records operations for automatic differentiation (``tf.GradientTape``).

    Args:
      persistent: allow several calls of :meth:`gradient` / :meth:`jacobian`.
      watch_accessed_variables: watch every trainable ``xtpu.Variable`` read
        while the tape records.

    Use it eagerly or inside a replicated computation::

        x = xtpu.constant(3.0)
        with xtpu.GradientTape() as t:
            t.watch(x)
            y = x * x * x
        t.gradient(y, x)  # 27.0

    Raises (from its methods):
      RuntimeError: a non-persistent tape used twice; a tape used inside a
        replicated computation other than the one it recorded.
      LookupError: an op on the path has no gradient rule.
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True):
        self._persistent = persistent
        self._watch_accessed_variables = watch_accessed_variables
        self._used = False
        self._recording = False
        self._reset()

    def _reset(self) -> None:
        self._trace = None
        self._tracked: dict[Any, Any] = {}  # key -> value (SSA or id)
        self._recorded_ops: set[int] = set()
        # The recorded ops themselves: their ids stay theirs even when a
        # gradient erases one (an id reused by a new op would look recorded).
        self._recorded_keep: list[Any] = []
        self._nodes: dict[int, Node] = {}
        self._values: dict[int, Any] = {}
        # id -> a copy of a held value whose memory another array can still
        # write (the user's array under xtpu.constant(arr), a plain operand):
        # gradient() checks nothing changed.
        self._snapshots: dict[int, np.ndarray] = {}
        self._order = 0
        self._variables: list[Any] = []
        self._variable_reads: dict[Any, list[Any]] = {}

    # -- context ------------------------------------------------------------
    def __enter__(self) -> GradientTape:
        if self._recording:
            raise ValueError("Tape is still recording, This can happen if you try to re-enter an already-active tape.")
        tr = current_trace()
        if self._trace is None:
            self._trace = tr
        elif self._trace is not tr:
            raise RuntimeError("a GradientTape cannot record in two different computations")
        self._push()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pop()

    def _push(self) -> None:
        recording_tapes().append(self)
        self._recording = True

    def _pop(self) -> None:
        st = recording_tapes()
        if self in st:
            st.remove(self)
        self._recording = False

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Temporarily stop recording (``tf.GradientTape.stop_recording``).

        Raises:
          RuntimeError: the tape is not recording.
        """
        if not self._recording:
            raise RuntimeError("Trying to stop recording a tape which is not recording.")
        self._pop()
        try:
            yield
        finally:
            self._push()

    def reset(self) -> None:
        """Forget everything recorded so far (``tf.GradientTape.reset``)."""
        trace = self._trace
        self._reset()
        self._trace = trace

    # -- watching -----------------------------------------------------------
    def watch(self, tensor: Any) -> None:
        """Track ``tensor`` (a tensor, a variable, or a nested structure of
        them) so that gradients can be taken with respect to it.

        Eagerly, watch an ``EagerTensor`` (what ``xtpu.constant`` and every
        eager xtpu op return).  Values of non-float dtypes may be watched;
        their gradients are None (TF warns and does the same).

        Raises:
          ValueError: a numpy ndarray (as TF: numpy computes its operators,
            so nothing done to it would be recorded), or an eager value
            inside a replicated computation.
          TypeError: a Python number.
        """
        for leaf in pytree.flatten(tensor)[0]:
            if is_variable(leaf):
                self._watch_variable(leaf)
                continue
            if isinstance(leaf, Tensor):
                self._check_trace(leaf)
                self._tracked[leaf.value] = leaf
                continue
            if not isinstance(leaf, np.ndarray):
                raise TypeError(f"GradientTape.watch: {leaf!r} is a Python value; watch an xtpu.constant(...) instead")
            if self._trace is not None or current_trace() is not None:
                raise ValueError(
                    "GradientTape.watch: inside a replicated computation, watch a traced xtpu tensor; "
                    f"a numpy value ({type(leaf).__name__}) becomes a new constant wherever an op uses it"
                )
            if not isinstance(leaf, EagerTensor) and leaf.dtype.kind not in "biuOSU":
                raise ValueError(
                    "GradientTape.watch: cannot watch a numpy ndarray: numpy computes its operators, so nothing "
                    "done to it would be recorded (TF refuses it too); watch x = xtpu.constant(array) and "
                    f"compute with x{_where()}"
                )
            self._tracked[id(leaf)] = leaf
            self._hold(leaf)

    def _watch_variable(self, var: Any) -> None:
        if var not in self._variables:
            self._variables.append(var)

    def watched_variables(self) -> tuple[Any, ...]:
        """The variables this tape watches, in the order they were first
        watched or read (``tf.GradientTape.watched_variables``)."""
        return tuple(self._variables)

    def _check_trace(self, t: Tensor) -> None:
        if self._trace is None:
            self._trace = t.trace
        if t.trace is not self._trace:
            raise RuntimeError("a GradientTape cannot mix tensors of different computations")

    def _on_variable_read(self, var: Any, value: Any) -> Any:
        """Called by ``Variable.read_value`` while this tape records; returns
        the value to hand to the user (an EagerTensor when eager)."""
        if not (var.trainable and self._watch_accessed_variables) and var not in self._variables:
            return value
        self._watch_variable(var)
        if isinstance(value, Tensor):
            self._tracked[value.value] = value
            self._variable_reads.setdefault(var, []).append(value.value)
            return value
        _freeze_private(value, [])
        value = as_eager_tensor(value)
        self._tracked[id(value)] = value
        self._hold(value)
        self._variable_reads.setdefault(var, []).append(id(value))
        return value

    def _hold(self, value: Any) -> None:
        """Keep an eager value the record refers to: alive (its id is its
        key), read-only when it is an EagerTensor (TF's tensors are
        immutable), and a copy of it when its memory can still be written
        through another array, to check at gradient() that it was not."""
        key = id(value)
        if key in self._values:
            return
        self._values[key] = value
        if not isinstance(value, np.ndarray):
            return
        if isinstance(value, EagerTensor):
            value.flags.writeable = False
            value._xtpu_held = True
        b = value
        while isinstance(b, np.ndarray):
            if b.flags.writeable:
                self._snapshots[key] = np.array(value, copy=True)
                return
            b = b.base

    def _check_snapshots(self) -> None:
        for key, snap in self._snapshots.items():
            now = np.asarray(self._values[key])
            if not np.array_equal(now, snap, equal_nan=np_kind(snap.dtype) == "f"):
                raise RuntimeError(
                    f"a value this GradientTape recorded (shape {list(snap.shape)}, dtype {snap.dtype.name}) was "
                    "modified in place after it was recorded, through the numpy array it shares memory with; "
                    "its gradient would be wrong. Do not write into arrays a tape uses (xtpu.constant(arr) "
                    "shares arr's memory; pass arr.copy() to keep writing arr)"
                )

    # -- recording (called by the tracer and by bind) -------------------------
    def _record_traced(self, op: Any, operands: list[Tensor], results: list[Tensor]) -> None:
        if not any(t.value in self._tracked for t in operands):
            return
        self._recorded_ops.add(id(op))
        self._recorded_keep.append(op)
        for r in results:
            self._tracked[r.value] = r

    def _record_region(self, op: Any, results: list[Tensor]) -> None:
        """Record a region op (hlo.if / hlo.while) when it reads a tracked
        value, as an operand or captured by its regions."""
        if not any(v in self._tracked for v in list(op.operands) + captures(op)):
            return
        self._recorded_ops.add(id(op))
        for r in results:
            self._tracked[r.value] = r

    def _record_alias(self, source: Tensor, alias: Tensor) -> None:
        if source.value in self._tracked:
            self._tracked[alias.value] = alias

    def _record_eager(self, op_cls: type, params: dict, operands: list[Any], results: list[Any]) -> list[Any]:
        if not any(self._tracked.get(id(a)) is a for a in operands):
            return results
        if not isinstance(results[0] if results else None, EagerTensor):
            for r in results:
                _freeze_private(r, operands)
        results = [as_eager_tensor(r) for r in results]
        self._order += 1
        node = Node(
            op_cls, dict(params), [id(a) for a in operands], [id(r) for r in results], self._order, user_location()
        )
        for a in operands:
            self._hold(a)
        for r in results:
            self._hold(r)
            self._tracked[id(r)] = r
            self._nodes[id(r)] = node
        return results

    # -- gradients ------------------------------------------------------------
    def _graph(self):
        if self._trace is not None:
            return TracedGraph(self._trace, self._recorded_ops)
        return EagerGraph(self._nodes, self._values)

    def _check_context(self) -> None:
        tr = current_trace()
        if self._trace is not None and tr is not self._trace:
            raise RuntimeError(
                "GradientTape.gradient must be called inside the replicated computation the tape recorded"
            )
        if self._trace is None and tr is not None and self._values:
            raise RuntimeError(
                "GradientTape.gradient of a tape that recorded eager values must be called eagerly, not inside a "
                f"replicated computation{_where()}"
            )

    def _tracks(self, x: Any) -> bool:
        """Whether this tape tracks the source ``x`` (a variable's tracked
        reads are its keys already)."""
        if is_variable(x):
            return True
        if isinstance(x, Tensor):
            return x.value in self._tracked
        return self._tracked.get(id(x)) is x

    def _keys_of_source(self, graph: Any, x: Any) -> list[Any]:
        if is_variable(x):
            # Reads of an unchanged variable give the same value: count it once.
            return list(dict.fromkeys(self._variable_reads.get(x, [])))
        if isinstance(x, Tensor):
            return [graph.key(x)]
        if not is_tensor_like(x):
            raise TypeError(
                f"GradientTape.gradient: the sources must be tensors or variables, got {type(x).__name__} {x!r}"
            )
        return [id(x)]

    def gradient(
        self,
        target: Any,
        sources: Any,
        output_gradients: Any = None,
        unconnected_gradients: UnconnectedGradients = UnconnectedGradients.NONE,
    ) -> Any:
        """The gradient of ``target`` w.r.t. ``sources`` (``tf.GradientTape.gradient``).

        Args:
          target: a tensor or nested structure of tensors (their sum is
            differentiated).
          sources: a tensor, variable, or nested structure of them.
          output_gradients: cotangents of ``target`` (same structure); default
            ones.
          unconnected_gradients: ``NONE`` or ``ZERO`` for sources the target
            does not depend on.

        Returns:
          The gradients with the structure of ``sources``: tensors of each
          source's shape and dtype, or None.

        Raises:
          RuntimeError: a non-persistent tape is used a second time.
          LookupError: an op on the path has no gradient rule.
        """
        if self._used and not self._persistent:
            raise RuntimeError(NON_PERSISTENT_TWICE)
        if target is None:
            raise TypeError(
                "Argument `target` should be a list or nested structure of Tensors, Variables or "
                "CompositeTensors to be differentiated, but received None."
            )
        unconnected_gradients = unconnected_value(unconnected_gradients)
        self._check_context()
        self._used = True
        with self._paused():
            return self._gradient(target, sources, output_gradients, unconnected_gradients)

    @contextlib.contextmanager
    def _paused(self) -> Iterator[None]:
        """A non-persistent tape stops recording for its gradient (TF pops
        it); a persistent one records its own gradient ops, so that
        ``gradient`` called inside its context can be differentiated again
        (TF's higher-order gradients with one persistent tape)."""
        was = self._recording and not self._persistent
        if was:
            self._pop()
        try:
            yield
        finally:
            if was:
                self._push()

    def _gradient(self, target, sources, output_gradients, unconnected, check_memory=True):
        tr = current_trace()
        self._check_context()
        if self._trace is None and check_memory:
            self._check_snapshots()
        graph = self._graph()
        t_leaves, t_tree = pytree.flatten(target)
        t_leaves = [self._as_value(t) for t in t_leaves]
        if output_gradients is None:
            cts = [None] * len(t_leaves)
        else:
            cts = pytree.flatten(output_gradients, is_leaf=lambda v: v is None)[0]
            if len(cts) != len(t_leaves):
                raise ValueError(f"output_gradients has {len(cts)} entries for {len(t_leaves)} targets")
        seeds = []
        for t, g in zip(t_leaves, cts):
            spec = spec_of(t)
            if g is None:
                seeds.append(_ones(spec) if is_differentiable(spec) else None)
            else:
                g = convert(g) if is_tensor_like(g) else convert(g, spec.dtype)  # Python numbers: the target's dtype
                if spec_of(g) != spec:
                    raise ValueError(f"output_gradients entry is {spec_of(g)} but its target is {spec}")
                seeds.append(g)
        s_leaves, s_tree = pytree.flatten(sources)
        ys = [graph.key(t) if isinstance(t, Tensor) else id(t) for t in t_leaves]
        # A source the tape does not track (not watched, not computed from a
        # watched value) gets no gradient, even when a recorded op used it,
        # but its own output gradient when it is a target (TF's tape: an
        # unwatched input's gradient is deleted; sources_that_are_targets
        # get ones).
        keys_per_x, own_seeds = [], {}
        for i, x in enumerate(s_leaves):
            ks = self._keys_of_source(graph, x)
            if not self._tracks(x):
                mine = [g for y, g in zip(ys, seeds) if y in ks and g is not None]
                if mine:
                    own_seeds[i] = add_n(mine)
                ks = []
            keys_per_x.append(ks)
        flat = [k for ks in keys_per_x for k in ks]
        uid = tr.new_gradient_uid() if tr is not None else None
        if self._trace is None:
            for t in t_leaves:
                self._values.setdefault(id(t), t)
        grads = backprop(graph, ys, seeds, flat, colocate=True, gradient_uid=uid)
        out = _collect(grads, keys_per_x, s_leaves, graph, unconnected)
        for i, g in own_seeds.items():
            out[i] = g
        if self._trace is None:
            out = [None if g is None else as_eager_tensor(g) for g in out]
        return pytree.unflatten(s_tree, out)

    def _as_value(self, t: Any) -> Any:
        """A target as a value: a variable stands for the value this tape
        saw it read (TF differentiates its handle), or a new read."""
        if is_variable(t):
            if not self._variable_reads.get(t):
                # Not read on this tape: the variable now stands for itself,
                # so that a gradient w.r.t. it is ones (TF: a target that is
                # a source), and nothing else depends on it.
                value = t.read_value()
                if not self._variable_reads.get(t):
                    if self._trace is None:
                        _freeze_private(value, [])
                        value = as_eager_tensor(value)
                        self._tracked[id(value)] = value
                        self._hold(value)
                        self._variable_reads.setdefault(t, []).append(id(value))
                    else:
                        self._tracked[value.value] = value
                        self._variable_reads.setdefault(t, []).append(value.value)
            return self._tracked[self._variable_reads[t][0]]
        if isinstance(t, (Tensor, np.ndarray)):
            return t

        return convert(t)

    def jacobian(
        self,
        target: Any,
        sources: Any,
        unconnected_gradients: UnconnectedGradients = UnconnectedGradients.NONE,
        parallel_iterations: Any = None,
        experimental_use_pfor: bool = True,
    ) -> Any:
        """The Jacobian of ``target`` w.r.t. ``sources``
        (``tf.GradientTape.jacobian``): for each source, a tensor of shape
        ``target.shape + source.shape``, computed as one gradient per element
        of ``target``.

        Raises:
          RuntimeError: a non-persistent tape is used a second time.
        """
        if self._used and not self._persistent:
            raise RuntimeError(NON_PERSISTENT_TWICE)
        unconnected_gradients = unconnected_value(unconnected_gradients)
        self._check_context()
        self._used = True
        target = self._as_value(target)
        spec = spec_of(target)
        s_leaves, s_tree = pytree.flatten(sources)
        rows: list[list[Any]] = [[] for _ in s_leaves]
        connected = [False] * len(s_leaves)
        n = int(np.prod(spec.shape, dtype=np.int64))
        with self._paused():
            for i in range(n):
                onehot = np.zeros(n, dtype=np.dtype(spec.dtype))
                onehot[i] = 1
                seed = _constant(onehot.reshape(spec.shape))
                gs = self._gradient(target, list(s_leaves), seed, UnconnectedGradients.NONE, check_memory=i == 0)
                for j, g in enumerate(gs):
                    connected[j] = connected[j] or g is not None
                    rows[j].append(g)
        out = []
        for j, x in enumerate(s_leaves):
            xs = _source_spec(x)
            if n and not connected[j] and unconnected_gradients is UnconnectedGradients.NONE:
                out.append(None)
                continue
            if n == 0 or not connected[j]:
                out.append(broadcast_to(scalar(0, xs.dtype), spec.shape + xs.shape))
                continue
            flat = [reshape(g if g is not None else zeros_like_spec(xs), (1, -1)) for g in rows[j]]
            stacked = concat(flat, axis=0) if n > 1 else flat[0]
            out.append(reshape(stacked, spec.shape + xs.shape))
        return pytree.unflatten(s_tree, out)

    def batch_jacobian(
        self,
        target: Any,
        source: Any,
        unconnected_gradients: UnconnectedGradients = UnconnectedGradients.NONE,
        parallel_iterations: Any = None,
        experimental_use_pfor: bool = True,
    ) -> Any:
        """The Jacobian of each example of a batch (``tf.GradientTape.batch_jacobian``):
        ``target`` ``[b, y1, ...]`` and ``source`` ``[b, x1, ...]`` give
        ``[b, y1, ..., x1, ...]`` where entry ``i`` is the Jacobian of
        ``target[i]`` w.r.t. ``source[i]`` (the examples must not depend on
        each other's sources, as TF assumes).

        Raises:
          ValueError: ranks below 2, or different first dimensions.
          RuntimeError: a non-persistent tape is used a second time.
        """
        t_spec, s_spec = spec_of(self._as_value(target)), _source_spec(source)
        if len(t_spec.shape) < 2:
            raise ValueError(
                f"Need first dimension of target shape ({list(t_spec.shape)}) and source shape "
                f"({list(s_spec.shape)}) to match; target must have rank at least 2"
            )
        if len(s_spec.shape) < 2:
            raise ValueError(f"source must have rank at least 2, got shape {list(s_spec.shape)}")
        if t_spec.shape[0] != s_spec.shape[0]:
            raise ValueError(
                f"Need first dimension of target shape ({list(t_spec.shape)}) and source shape "
                f"({list(s_spec.shape)}) to match."
            )
        full = self.jacobian(target, source, unconnected_gradients, parallel_iterations, experimental_use_pfor)
        if full is None:
            return None
        b = t_spec.shape[0]
        ny = int(np.prod(t_spec.shape[1:], dtype=np.int64))
        nx = int(np.prod(s_spec.shape[1:], dtype=np.int64))
        if b == 0 or ny == 0 or nx == 0:
            return broadcast_to(scalar(0, s_spec.dtype), t_spec.shape + s_spec.shape[1:])
        blocks = reshape(full, (b, ny, b, nx))
        rows = [reshape(blocks[i, :, i, :], (1, ny, nx)) for i in range(b)]
        stacked = concat(rows, axis=0) if b > 1 else rows[0]
        return reshape(stacked, t_spec.shape + s_spec.shape[1:])


def _source_spec(x: Any) -> TensorSpec:
    return f(x)


def _ones(spec: TensorSpec) -> Any:
    return ones_like_spec(spec)


def _constant(arr: np.ndarray) -> Any:
    return convert(arr)


class VariableWatcher:
    """Collects the variables read while it is active, with the values the
    reads gave (TF's ``tape.VariableWatcher``, for ``custom_gradient``).
    It sits among the recording tapes but records nothing."""

    _trace = None

    def __init__(self) -> None:
        self.reads: list[tuple[Any, Any]] = []
        self._tracked: dict = {}

    def __enter__(self) -> VariableWatcher:
        recording_tapes().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        st = recording_tapes()
        if self in st:
            st.remove(self)

    def _on_variable_read(self, var: Any, value: Any) -> Any:
        self.reads.append((var, value))
        return value

    def _record_traced(self, op: Any, operands: list[Any], results: list[Any]) -> None:
        pass

    def _record_region(self, op: Any, results: list[Any]) -> None:
        pass

    def _record_alias(self, source: Any, alias: Any) -> None:
        pass

    def _record_eager(self, op_cls: type, params: dict, operands: list[Any], results: list[Any]) -> list[Any]:
        return results


def notify_variable_read(var: Any, value: Any) -> Any:
    """Let the recording tapes watch a variable read; returns the value the
    reader gets."""
    for tape in list(recording_tapes()):
        value = tape._on_variable_read(var, value)
    return value


__all__ = ["GradientTape", "EagerTensor", "UnconnectedGradients", "zeros_like_spec", "add_n", "Tensor"]
