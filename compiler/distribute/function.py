"""``xtpu.function``: TF 2's ``tf.function`` on xtpu's compiler.

A decorated Python function is traced once per *input signature* into one
replicated program (``func.func @main`` holding one ``tpu.replicate``), which
the default pass pipeline lowers and the runtime runs; later calls with the
same signature run the compiled program without calling Python.  The
signature is TF's (``tensorflow/python/eager/polymorphic_function``):

* a tensor argument (numpy array, numpy scalar, ``EagerTensor``) counts by its
  shape and dtype (:class:`TensorSpec`); a new shape or dtype traces again;
* a non-tensor argument (Python number, string, bool, None, any hashable
  object) counts by its value, an unhashable one by its identity;
* a ``PerReplica`` value counts by its values' spec, a ``Variable`` by its
  identity, an iterator by the spec of its elements.

Inside the function, ``strategy.run(fn, args)`` traces ``fn`` once for all
replicas *into the same program* (its ``PerReplica`` results are per-replica
values there; ``strategy.reduce`` on them becomes an all-reduce), and every
``next(iterator)`` on an iterator argument (a distributed iterator, or an
``xtpu.data`` iterator) becomes one more program input: each call takes as
many elements from the iterator as the trace took, before the program runs.
Python loops unroll (xtpu has no AutoGraph): ``for _ in range(steps)`` with
``strategy.run`` inside compiles ``steps`` replica steps into one program.

The mirrored variables of the function's strategy are inputs and outputs of
the program (written back after each call, as ``strategy.run`` does); host
variables are read through outside compilation.

Differences from TF, all documented in the README: shapes are static, so
``TensorSpec`` dimensions of ``None`` and ``reduce_retracing=True`` still
trace once per concrete shape; ``jit_compile`` is accepted and every function
is compiled; variables cannot be created inside the function.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xtpu.core import pytree
from xtpu.core.eager import as_eager_tensor
from xtpu.core.tracing import Tensor, convert, current_trace, recording_tapes, to_numpy, trace_stack
from xtpu.dialects.tensor_spec import TensorSpec as _StaticSpec
from xtpu.dialects.tensor_spec import dtype_of_numpy, np_kind
from xtpu.distribute.context import (
    RetraceRequest,
    _RunState,
    _stack,
    _TracedPerReplica,
    current_run_state,
    current_scope_strategy,
    default_strategy,
    is_strategy,
)
from xtpu.distribute.values import PerReplica
from xtpu.distribute.variables import Variable
from xtpu.ops.core import dtype_name
from xtpu.ops.summary_ops import trace_key
from xtpu.replication.program import Lowered, Signature, trace

logger = logging.getLogger("xtpu")

#: TF warns when a function has been traced more than this many times
#: (``polymorphic_function._FREQUENT_TRACING_WARNING_THRESHOLD``).
FREQUENT_TRACING_WARNING_THRESHOLD = 5

#: Past this many traces an ``xtpu.function`` raises instead of tracing again
#: (TF only warns; a function that keeps retracing compiles a program each
#: call and keeps them all, issue 25).  ``$XTPU_MAX_TRACES`` overrides it.
MAX_TRACES = 32


def max_traces() -> int:
    """The trace limit: ``$XTPU_MAX_TRACES`` when set, else :data:`MAX_TRACES`."""
    value = os.environ.get("XTPU_MAX_TRACES", "").strip()
    return int(value) if value else MAX_TRACES


# --------------------------------------------------------------------------
# TensorSpec
# --------------------------------------------------------------------------


class TensorSpec:
    """The shape and dtype of a function argument (TF's ``tf.TensorSpec``).

    Args:
      shape: a sequence of ints or ``None`` (a dimension of any size; xtpu
        still traces once per concrete size), or None (any rank).
      dtype: a dtype name (``"float32"``, ...), a numpy dtype or a Python type.
      name: accepted, as in TF.

    Raises:
      TypeError: an unknown dtype.
    """

    def __init__(self, shape: Any, dtype: Any = "float32", name: str | None = None):
        if isinstance(shape, (int, np.integer)):
            shape = (shape,)  # TF's TensorShape(1) is the rank-1 shape [1]
        self.shape = None if shape is None else tuple(None if d is None else int(d) for d in shape)
        self.dtype = dtype_name(dtype)
        self.name = name

    @classmethod
    def from_tensor(cls, tensor: Any, name: str | None = None) -> TensorSpec:
        """The spec of a concrete or traced tensor."""
        s = _spec_of_value(tensor)
        return cls(s.shape, s.dtype, name)

    @property
    def is_fully_defined(self) -> bool:
        return self.shape is not None and None not in self.shape

    def is_compatible_with(self, other: Any) -> bool:
        """True when ``other`` (a spec or a value) has this dtype and a shape
        this spec allows (``None`` matches any size)."""
        o = other if isinstance(other, TensorSpec) else TensorSpec.from_tensor(other)
        if o.dtype != self.dtype:
            return False
        if self.shape is None or o.shape is None:
            return True
        return len(o.shape) == len(self.shape) and all(
            a is None or b is None or a == b for a, b in zip(self.shape, o.shape)
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorSpec) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def __repr__(self) -> str:
        shape = (
            "None"
            if self.shape is None
            else "(" + ", ".join(map(str, self.shape)) + ("," if len(self.shape) == 1 else "") + ")"
        )
        return f"TensorSpec(shape={shape}, dtype={self.dtype}, name={self.name!r})"


def _spec_of_value(value: Any) -> _StaticSpec:
    if isinstance(value, Tensor):
        return value.spec if hasattr(value, "spec") else _StaticSpec(tuple(value.shape), value.dtype)
    arr = to_numpy(value)
    return _StaticSpec(tuple(arr.shape), dtype_of_numpy(arr.dtype))


# --------------------------------------------------------------------------
# The trace-time state shared with strategy.run and iterators
# --------------------------------------------------------------------------


class _ManageHostVariable(Exception):
    """Raised while a function is traced when it writes a host variable that
    is not yet an input and output of its program: it traces again with it."""

    def __init__(self, variable: Any):
        super().__init__(f"host variable '{variable.name}' becomes part of the program")
        self.variable = variable


class UseStrategy(Exception):
    """Raised while a function is traced for one strategy when it calls
    ``run`` of another: the function traces again for that one."""

    def __init__(self, strategy: Any):
        super().__init__("retrace for another strategy")
        self.strategy = strategy
        self.replay: dict = {}


@dataclass
class _FunctionTrace:
    """What one trace of a function records."""

    name: str
    strategy: Any
    num_replicas: int
    #: (iterator leaf index, element structure, element specs, per-replica flags)
    pulls: list = field(default_factory=list)
    #: per-replica input arrays of the batches taken while tracing
    pulled: list = field(default_factory=list)
    in_run: bool = False
    #: the strategy is the default one, chosen because the function named
    #: none: a mirrored variable it uses makes it trace for that variable's
    #: strategy (TF enters the variable's strategy in cross-replica context)
    implicit_strategy: bool = False
    #: iterator leaf index -> elements an abandoned trace of this call took
    #: (a retrace for optimizer slots or another strategy takes them again)
    replay: dict = field(default_factory=dict)
    #: iterator leaf index -> elements this trace took
    taken: dict = field(default_factory=dict)

    def take(self, index: int, source: Any) -> Any:
        pending = self.replay.get(index)
        element = pending.pop(0) if pending else _pull_eagerly(source)
        self.taken.setdefault(index, []).append(element)
        return element

    def replay_for_retrace(self) -> dict:
        """What the next trace of this call must take first."""
        return {i: self.taken.get(i, []) + self.replay.get(i, []) for i in set(self.taken) | set(self.replay)}


_local = threading.local()


def _pull_eagerly(source: Any) -> Any:
    """One element of an input pipeline, computed eagerly: its ``map``
    functions run on numpy, outside the trace that asked for the element
    (and unseen by any recording GradientTape), as tf.data runs them apart
    from the step."""
    stack, tapes = trace_stack(), recording_tapes()
    saved_stack, saved_tapes = stack[:], tapes[:]
    stack.clear()
    tapes.clear()
    try:
        return source._xtpu_pull_()
    finally:
        stack.extend(saved_stack)
        tapes.extend(saved_tapes)


def _traces() -> list[_FunctionTrace]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def current_function_trace() -> _FunctionTrace | None:
    """The innermost ``xtpu.function`` being traced on this thread."""
    st = _traces()
    return st[-1] if st and current_trace() is not None else None


def run_in_function(strategy: Any, fn: Callable, args: tuple, kwargs: dict) -> Any:
    """``strategy.run`` while an ``xtpu.function`` is traced: trace ``fn``
    for every replica into the function's program (TF's replica context).

    Returns ``fn``'s outputs; a tensor among them is a per-replica value
    (with one replica, the tensor itself, as TF returns it).

    Also serves ``strategy.run`` inside ``merge_call``'s ``merge_fn`` (the
    cross-replica context of a step): ``fn`` runs in replica context again,
    and whatever it raises propagates, as in TF.

    Raises:
      ValueError: called inside another ``strategy.run``'s replica context or
        a plain ``replicate``.
      UseStrategy: the function was being traced for another strategy.
    """
    ft = current_function_trace()
    state = current_run_state()
    if ft is not None and not ft.in_run:
        if ft.strategy is not strategy:
            raise UseStrategy(strategy)
    elif state is None or not state.in_merge or state.strategy is not strategy:
        # Inside merge_fn (the cross-replica context of a step) TF runs fn
        # in replica context again; anywhere else in a trace it cannot run.
        raise ValueError(
            "strategy.run cannot be called inside a replicated computation"
            + (" (nor inside strategy.run)" if ft is not None else "")
        )
    n = state.num_replicas

    def local(x):
        if isinstance(x, _TracedPerReplica):
            return x.local
        if isinstance(x, PerReplica):
            raise ValueError(
                "strategy.run inside xtpu.function got a PerReplica of concrete values; pass it as an "
                "argument of the function instead, so that it becomes a program input"
            )
        if _is_number(x):
            # TF's TPUStrategy converts the replica inputs to tensors
            # (tpu.replicate: ops.convert_to_tensor), as strategy.run does
            # outside a function here (issue 25).
            return convert(x)
        return x

    is_leaf = lambda x: isinstance(x, PerReplica)  # noqa: E731
    a = pytree.unflatten(*_swap(pytree.flatten(tuple(args), is_leaf), local))
    kw = pytree.unflatten(*_swap(pytree.flatten(dict(kwargs or {}), is_leaf), local))
    if ft is not None:
        ft.in_run = True
    state.in_merge = False
    try:
        out = fn(*a, **kw)
    finally:
        state.in_merge = True
        if ft is not None:
            ft.in_run = False
    # TF converts the replica outputs to tensors as well (tpu.replicate): a
    # Python number returned by fn is a per-replica value too.
    # A returned variable is the replica's value of it.
    is_out_leaf = lambda x: isinstance(x, (PerReplica, Variable))  # noqa: E731
    out = pytree.unflatten(
        *_swap(
            pytree.flatten(out, is_out_leaf), lambda x: convert(x) if _is_number(x) or isinstance(x, Variable) else x
        )
    )
    if n == 1:
        return out
    wrap = lambda x: _TracedPerReplica(x, n) if isinstance(x, Tensor) else x  # noqa: E731
    return pytree.unflatten(*_swap(pytree.flatten(out, is_leaf), wrap))


def _is_number(x: Any) -> bool:
    """A Python or numpy number or array (what TF converts to a tensor)."""
    return isinstance(x, (bool, int, float, complex, np.generic)) or (
        isinstance(x, np.ndarray) and x.dtype.kind in "biufc"
    )


def _swap(flat: tuple[list, Any], fn: Callable) -> tuple[Any, list]:
    leaves, td = flat
    return td, [fn(x) for x in leaves]


@dataclass
class _OptionalPull:
    """A ``get_next_as_optional`` pull of a trace: whether the trace calls
    ``get_value()`` outside any ``cond`` / ``while_loop`` branch (then an
    exhausted iterator is TF's error when the function is called)."""

    unconditional: bool = False


class _TracedOptional:
    """``get_next_as_optional()``'s result inside ``xtpu.function`` (TF's
    ``tf.experimental.Optional``): ``has_value()`` a traced bool scalar,
    ``get_value()`` the element's traced components."""

    def __init__(self, has_value: Any, value: Any, pull: _OptionalPull):
        self._has_value = has_value
        self._value = value
        self._pull = pull

    def has_value(self) -> Any:
        return self._has_value

    def get_value(self) -> Any:
        tr = current_trace()
        if tr is not None and len(tr.blocks) == 1:
            self._pull.unconditional = True
        return self._value


class _TracedIterator:
    """An iterator argument inside the trace: ``next()`` takes one element
    now (from the real iterator) and returns it as new program inputs."""

    def __init__(self, source: Any, index: int):
        self._source = source
        self._index = index

    def __iter__(self):
        raise TypeError(
            "iterating over an iterator inside xtpu.function would unroll until it ends; call next(iterator) "
            "a fixed number of times (e.g. in `for _ in range(steps)`)"
        )

    def __next__(self) -> Any:
        ft = current_function_trace()
        if ft is None:
            raise RuntimeError("this iterator proxy is only valid while its xtpu.function is traced")
        element = ft.take(self._index, self._source)
        return self._as_inputs(ft, element, None)

    def _as_inputs(self, ft: _FunctionTrace, element: Any, optional: _OptionalPull | None) -> Any:
        """The element's components as new inputs of the program (after a
        bool ``has_value`` input for an optional), recorded as a pull that
        every call takes again."""
        leaves, td = pytree.flatten(element, is_leaf=lambda x: isinstance(x, PerReplica))
        tr = current_trace()
        body = tr.blocks[0]

        def new_input(spec):
            arg = body.insert_arg(spec.to_type(), len(body.args))
            arg.name_hint = f"input{len(body.args) - 1}"
            return Tensor(arg, spec, tr)

        has_value = None
        if optional is not None:
            has_value = new_input(_StaticSpec((), "bool"))
            ft.pulled.append([np.asarray(True)] * ft.num_replicas)
        specs, flags, traced = [], [], []
        for leaf in leaves:
            per = isinstance(leaf, PerReplica)
            vals = [to_numpy(v) for v in leaf.values] if per else [to_numpy(leaf)] * ft.num_replicas
            spec = _StaticSpec(tuple(vals[0].shape), dtype_of_numpy(vals[0].dtype))
            t = new_input(spec)
            traced.append(
                _TracedPerReplica(t, ft.num_replicas) if per and ft.in_run is False and ft.num_replicas > 1 else t
            )
            specs.append(spec)
            flags.append(per)
            ft.pulled.append(vals)
        ft.pulls.append((self._index, td, tuple(specs), tuple(flags), optional))
        value = pytree.unflatten(td, traced)
        return value if optional is None else _TracedOptional(has_value, value, optional)

    next = __next__

    def get_next(self) -> Any:
        return next(self)

    def get_next_as_optional(self) -> _TracedOptional:
        """The next element as an Optional (TF's
        ``DistributedIterator.get_next_as_optional``): ``has_value()`` is a
        bool input the call sets, False once the data is exhausted, when the
        element's components are zeros of the traced shapes (TF's dummy
        values).  Guard ``get_value()`` with ``xtpu.cond(opt.has_value(),
        ...)``; an unguarded one on an exhausted iterator raises TF's error
        when the function is called.

        Raises:
          ValueError: the iterator is already exhausted when the function is
            traced (xtpu takes the element's shapes from a real element).
        """
        ft = current_function_trace()
        if ft is None:
            raise RuntimeError("this iterator proxy is only valid while its xtpu.function is traced")
        try:
            element = ft.take(self._index, self._source)
        except StopIteration:
            raise ValueError(
                "get_next_as_optional inside xtpu.function: the iterator is exhausted when the function is traced; "
                "xtpu takes the element's shapes from a first element (call the function while data remains)"
            ) from None
        return self._as_inputs(ft, element, _OptionalPull())

    @property
    def element_spec(self) -> Any:
        return self._source.element_spec


# --------------------------------------------------------------------------
# Concrete functions
# --------------------------------------------------------------------------


@dataclass
class ConcreteFunction:
    """One trace of an ``xtpu.function``: the compiled program for one input
    signature (TF's ``ConcreteFunction``).

    Attributes:
      lowered: the traced module before passes (``lowered.as_text()``).
      compiled: the lowered, runnable program (``compiled.as_text()``,
        ``compiled.stages``).
      structured_input_signature: the arguments' structure with specs.
    """

    function: Function
    key: tuple
    lowered: Any
    compiled: Any
    strategy: Any
    variables: list
    out_tree: Any
    per_replica_out: list
    pulls: list
    leaf_kinds: list
    structured_input_signature: Any = None
    #: the arguments keyed by identity (variables, unhashable objects), kept
    #: alive with the trace so that their ids cannot be reused by others
    pinned: list = field(default_factory=list)

    def as_text(self, dialect: str | None = None, *, generic: bool = False) -> str:
        """The lowered program as MLIR text (``dialect="stablehlo"``: as StableHLO)."""
        return self.compiled.as_text(dialect, generic=generic)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


def _is_leaf(x: Any) -> bool:
    return isinstance(x, (PerReplica, Variable, TensorSpec)) or hasattr(x, "_xtpu_pull_")


def _leaf_key(x: Any) -> tuple:
    if isinstance(x, TensorSpec):
        if not x.is_fully_defined:
            raise ValueError(
                f"get_concrete_function: {x} has unknown dimensions; xtpu traces for static shapes, give every "
                "dimension (or call the function with a value)"
            )
        return ("tensor", _StaticSpec(x.shape, x.dtype))
    if isinstance(x, Tensor):
        raise TypeError("an xtpu.function's argument is a traced tensor of another computation")
    if isinstance(x, Variable):
        return ("variable", id(x))
    if isinstance(x, PerReplica):
        specs = {_spec_of_value(v) for v in x.values}
        if len(specs) != 1:
            raise ValueError(
                f"a PerReplica argument has values of different shapes or dtypes: {sorted(map(str, specs))}"
            )
        return ("per_replica", specs.pop(), len(x.values))
    if hasattr(x, "_xtpu_pull_"):
        return ("iterator", type(x).__name__, repr(getattr(x, "element_spec", None)))
    if isinstance(x, (np.ndarray, np.generic)):
        return ("tensor", _spec_of_value(x))
    try:
        hash(x)
    except TypeError:
        return ("object", type(x).__name__, id(x))
    return ("python", type(x).__name__, x)


def _describe(kind_key: tuple) -> str:
    kind = kind_key[0]
    if kind == "tensor":
        return f"a tensor {kind_key[1]}"
    if kind == "per_replica":
        return f"a PerReplica of {kind_key[1]}"
    if kind == "python":
        return f"the Python value {kind_key[2]!r}"
    if kind == "variable":
        return "another variable"
    if kind == "iterator":
        return f"an iterator of {kind_key[2]}"
    return f"another {kind_key[1]} object"


class Function:
    """A Python function compiled per input signature (TF's
    ``tf.types.experimental.PolymorphicFunction``); made by :func:`function`."""

    def __init__(
        self,
        python_function: Callable,
        input_signature: Any = None,
        jit_compile: Any = None,
        reduce_retracing: bool = False,
        name: str | None = None,
        xla_options: Any = None,
    ):
        if input_signature is not None:
            sig = list(input_signature)
            for s in pytree.flatten(sig)[0]:
                if not isinstance(s, TensorSpec):
                    raise TypeError(f"input_signature must hold xtpu.TensorSpec values, got {type(s).__name__}")
            input_signature = sig
        self.python_function = python_function
        self.input_signature = input_signature
        self.jit_compile = jit_compile
        self.reduce_retracing = bool(reduce_retracing)
        self.xla_options = xla_options
        self.__name__ = name or getattr(python_function, "__name__", "function")
        self._concrete: dict = {}
        self._tracing_count = 0
        self._last_key: tuple | None = None
        self._strategy_ref: Any = None
        #: host variables the function writes (weak references): inputs and
        #: outputs of its programs, as the strategy's mirrored variables are
        self._host_variables: list = []
        self._warned = False
        self._lock = threading.RLock()
        functools.update_wrapper(self, python_function, updated=())

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        """A method decorated with ``xtpu.function``: one Function per
        instance (TF binds ``self`` as a Python argument the same way)."""
        if instance is None:
            return self
        cache = self.__dict__.setdefault("_bound", weakref.WeakKeyDictionary())
        try:
            bound = cache.get(instance)
        except TypeError:
            bound = None
        if bound is None:
            bound = Function(
                functools.partial(self.python_function, instance),
                self.input_signature,
                self.jit_compile,
                self.reduce_retracing,
                self.__name__,
                self.xla_options,
            )
            try:
                cache[instance] = bound
            except TypeError:
                pass
        return bound

    # -- public API ---------------------------------------------------------
    @property
    def name(self) -> str:
        return self.__name__

    def experimental_get_tracing_count(self) -> int:
        """How many times the Python function has been traced (one per input
        signature, plus one when its strategy's variables change)."""
        return self._tracing_count

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> ConcreteFunction:
        """Trace (without running) for ``args``, which may hold
        :class:`TensorSpec` values in place of tensors; with an
        ``input_signature`` no arguments are needed.

        Raises:
          ValueError: a TensorSpec with unknown dimensions.
        """
        if not args and not kwargs and self.input_signature is not None:
            args = tuple(self.input_signature)
        # A traced tensor (get_concrete_function called inside another
        # xtpu.function or computation) stands for its spec, as TF traces a
        # symbolic tensor's TensorSpec; calling the result there inlines it.
        spec = lambda x: TensorSpec.from_tensor(x) if isinstance(x, Tensor) else x  # noqa: E731
        args = pytree.unflatten(*_swap(pytree.flatten(tuple(args), _is_leaf), spec))
        kwargs = pytree.unflatten(*_swap(pytree.flatten(dict(kwargs), _is_leaf), spec))
        return self._concrete_for(args, kwargs, pulls_now=False)[0]

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """The traced program for ``args`` before any pass (``.as_text()``),
        as :func:`xtpu.lower` gives for ``replicate``."""
        return self.get_concrete_function(*args, **kwargs).lowered

    def experimental_get_compiler_ir(self, *args: Any, **kwargs: Any) -> Callable[..., str]:
        """TF's ``experimental_get_compiler_ir(*args)(stage=...)``: ``"hlo"``
        is the traced module, ``"optimized_hlo"`` the lowered one."""
        concrete = self.get_concrete_function(*args, **kwargs)

        def ir(stage: str = "hlo", device_name: Any = None) -> str:
            if stage == "hlo":
                return concrete.lowered.as_text()
            if stage == "optimized_hlo":
                return concrete.compiled.as_text()
            raise ValueError(f"stage must be 'hlo' or 'optimized_hlo', got {stage!r}")

        return ir

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the program traced for these arguments (tracing it first if
        their signature is new).

        Raises:
          TypeError / ValueError: the arguments do not match
            ``input_signature`` (TF's messages), or the traced Python function
            raised; ValueError: it calls ``run`` of two strategies.
          RuntimeError: a new signature past :func:`max_traces` traces.
        """
        if current_trace() is not None:
            # Inside another computation: inline, as TF inlines nested functions.
            return self.python_function(*args, **kwargs)
        with self._lock:
            concrete, flat = self._concrete_for(args, kwargs, pulls_now=True)
            return self._run(concrete, flat)

    # -- tracing ------------------------------------------------------------
    def _check_signature(self, args: tuple, kwargs: dict) -> None:
        if self.input_signature is None:
            return
        if kwargs:
            raise TypeError(
                f"{self.__name__}: with an input_signature, arguments are positional; got keyword "
                f"arguments {sorted(kwargs)}"
            )
        if len(args) != len(self.input_signature):
            raise TypeError(
                f"{self.__name__}() takes {len(self.input_signature)} positional arguments (its input_signature) "
                f"but {len(args)} were given"
            )
        leaves, td = pytree.flatten(tuple(args), _is_leaf)
        sleaves, std = pytree.flatten(tuple(self.input_signature))
        if td != std:
            raise ValueError(
                f"{self.__name__}: the arguments' structure {td} does not match the input_signature's {std}"
            )
        for i, (x, s) in enumerate(zip(leaves, sleaves)):
            if isinstance(x, TensorSpec):
                if not s.is_compatible_with(x):
                    raise ValueError(f"{self.__name__}: {x} is not compatible with the input_signature's {s}")
                continue
            if not s.is_compatible_with(x):
                raise TypeError(
                    f"Binding inputs to tf.function `{self.__name__}` failed due to: argument {i} "
                    f"({TensorSpec.from_tensor(x)}) is not compatible with the input_signature's {s}"
                )

    def _find_strategy(self) -> Any:
        """The strategy the function runs under: the one it ran under last,
        the one of the current scope, or one its code refers to (by a global
        or closure name); else the default one-replica strategy."""
        if self._strategy_ref is not None:
            s = self._strategy_ref()
            if s is not None:
                return s
        s = current_scope_strategy()
        if s is not None:
            return s
        fn = self.python_function
        while isinstance(fn, functools.partial):
            fn = fn.func
        code = getattr(fn, "__code__", None)
        found = []
        if code is not None:
            g = getattr(fn, "__globals__", {})
            for name in code.co_names:
                v = g.get(name)
                if is_strategy(v):
                    found.append(v)
            for cell in getattr(fn, "__closure__", None) or ():
                try:
                    v = cell.cell_contents
                except ValueError:
                    continue
                if is_strategy(v):
                    found.append(v)
        if len({id(s) for s in found}) == 1:
            return found[0]
        return default_strategy()

    def _key(self, leaves: list, td: Any, strategy: Any) -> tuple:
        return (
            td,
            tuple(_leaf_key(x) for x in leaves),
            id(strategy),
            tuple(id(v) for v in self._program_variables(strategy)),
            trace_key(),
        )

    def _program_variables(self, strategy: Any) -> list:
        """The strategy's mirrored variables, then the host variables the
        function writes."""
        hosts = [v for v in (r() for r in self._host_variables) if v is not None]
        return strategy._program_variables() + hosts

    def _what_changed(self, key: tuple) -> str:
        last = self._last_key
        if last is None:
            return "first call"
        if key[0] != last[0]:
            return f"the arguments' structure changed from {last[0]} to {key[0]}"
        changes = [
            f"argument {i} changed from {_describe(a)} to {_describe(b)}"
            for i, (a, b) in enumerate(zip(last[1], key[1]))
            if a != b
        ]
        if key[2] != last[2]:
            changes.append("it runs under another strategy")
        if key[3] != last[3]:
            changes.append(f"its strategy's variables changed ({len(last[3])} -> {len(key[3])})")
        if key[4] != last[4]:
            changes.append("the default summary writer or step changed")
        return "; ".join(changes) or "nothing (the traced program was dropped)"

    def _concrete_for(self, args: tuple, kwargs: dict, pulls_now: bool) -> tuple[ConcreteFunction, list]:
        self._check_signature(args, kwargs)
        leaves, td = pytree.flatten((tuple(args), dict(kwargs)), _is_leaf)
        strategy = self._find_strategy()
        implicit = self._strategy_ref is None and strategy is default_strategy()
        replay: dict = {}
        tried = [] if implicit else [strategy]
        while True:
            key = self._key(leaves, td, strategy)
            concrete = self._concrete.get(key)
            if concrete is not None:
                self._last_key = key
                return concrete, self._flat_inputs(concrete, leaves, pulls_now)
            limit = max_traces()
            if self._tracing_count >= limit:
                raise RuntimeError(
                    f"xtpu.function '{self.__name__}' has been traced {self._tracing_count} times, the limit "
                    f"($XTPU_MAX_TRACES, default {MAX_TRACES}); it would trace again because "
                    f"{self._what_changed(key)}. Pass tensors of one shape and dtype (not Python values), give an "
                    "input_signature, or create the function once outside the loop (TF warns of frequent retracing)"
                )
            try:
                concrete, pulled = self._trace(leaves, td, strategy, key, pulls_now, replay, implicit)
            except UseStrategy as e:
                if any(e.strategy is s for s in tried):
                    # Two strategies each asking for the program (strategy.run
                    # of both in one function): tracing again would alternate
                    # forever (issue 25).
                    raise ValueError(
                        f"xtpu.function '{self.__name__}' calls strategy.run of more than one strategy "
                        f"({', '.join(map(repr, tried))}); one xtpu.function's program runs the replicas of one "
                        "strategy: call each strategy's run from its own xtpu.function"
                    ) from None
                tried.append(e.strategy)
                replay = e.replay
                strategy = e.strategy
                implicit = False
                self._strategy_ref = weakref.ref(strategy)
                continue
            self._tracing_count += 1
            key = concrete.key
            changed = self._what_changed(key)
            self._last_key = key
            self._concrete[key] = concrete
            if self._tracing_count > FREQUENT_TRACING_WARNING_THRESHOLD:
                logger.warning(
                    "%d traces of xtpu.function '%s' so far: tracing is expensive; this one because %s. Retracing is "
                    "caused by (1) creating the xtpu.function again in a loop, (2) passing tensors of different "
                    "shapes or dtypes, (3) passing Python values instead of tensors; an input_signature fixes the "
                    "signature (TF's frequent-retracing warning).",
                    self._tracing_count,
                    self.__name__,
                    changed,
                )
            return concrete, self._flat_inputs(concrete, leaves, pulls_now, pulled)

    def _trace(
        self, leaves: list, td: Any, strategy: Any, key: tuple, pulls_now: bool, replay: dict, implicit: bool = False
    ):
        """Trace for these argument leaves; returns the concrete function and
        the per-replica inputs of the batches taken while tracing."""
        while True:
            # The key again: a RetraceRequest (optimizer slots) adds variables.
            key = self._key(leaves, td, strategy)
            n = strategy.num_replicas_in_sync
            variables = self._program_variables(strategy)
            kinds, specs = [], []
            for _x, k in zip(leaves, key[1]):
                kinds.append(k[0])
                if k[0] in ("tensor", "per_replica"):
                    specs.append(k[1])
            specs += [_StaticSpec(tuple(v._value.shape), dtype_of_numpy(v._value.dtype)) for v in variables]
            ft = _FunctionTrace(self.__name__, strategy, n, replay=replay, implicit_strategy=implicit)
            out_info: dict = {}
            computation = self._computation(leaves, td, kinds, variables, ft, out_info)
            flat_td = pytree.flatten(tuple(range(len(specs))))[1]
            sig = Signature(n, flat_td, tuple(specs), int(getattr(strategy, "_cores_per_replica", 1)))
            try:
                module, out_tree = trace(computation, sig)
            except UseStrategy as e:
                e.replay = ft.replay_for_retrace()
                raise
            except _ManageHostVariable as e:
                self._host_variables.append(weakref.ref(e.variable))
                replay = ft.replay_for_retrace()
                continue
            except RetraceRequest as request:
                replay = ft.replay_for_retrace()
                before = len(strategy._program_variables())
                request.prepare()
                if len(strategy._program_variables()) == before:
                    raise RuntimeError(f"xtpu.function '{self.__name__}': {request} created no variable") from None
                continue
            body = module.body.block.first_op.body.block.first_op.body.block
            all_specs = tuple(_StaticSpec.of_type(a.type) for a in body.args)
            full_sig = Signature(n, pytree.flatten(tuple(range(len(all_specs))))[1], all_specs, sig.num_cores)
            lowered = Lowered(module, full_sig, out_tree, self.xla_options)
            compiled = lowered.compile()
            concrete = ConcreteFunction(
                self,
                key,
                lowered,
                compiled,
                strategy,
                variables,
                out_info["tree"],
                out_info["per_replica"],
                list(ft.pulls),
                kinds,
                pytree.unflatten(td, [_public_spec(x) for x in leaves]),
                [x for x, k in zip(leaves, key[1]) if k[0] in ("variable", "object")],
            )
            return concrete, ft.pulled

    def _computation(self, leaves, td, kinds, variables, ft: _FunctionTrace, out_info: dict):
        fn = self.python_function
        n = ft.num_replicas

        def computation(*flat):
            state = _RunState(ft.strategy, variables)
            state.in_merge = True  # the function body is the cross-replica context

            def manage_host_variable(var):
                raise _ManageHostVariable(var)

            state.manage_host_variable = manage_host_variable

            def adopt_strategy(other):
                # A mirrored variable of ``other`` used in the function body
                # while the function runs the default strategy only because it
                # named none: trace for ``other`` (every copy is then updated
                # in the cross-replica context, as TF's MirroredVariable is).
                if ft.implicit_strategy and not ft.in_run and other is not ft.strategy:
                    raise UseStrategy(other)

            state.adopt_strategy = adopt_strategy
            k = sum(kd in ("tensor", "per_replica") for kd in kinds)
            state.current = dict(zip(variables, flat[k:]))
            it = iter(flat[:k])
            new_leaves = []
            for i, (x, kd) in enumerate(zip(leaves, kinds)):
                if kd == "tensor":
                    new_leaves.append(next(it))
                elif kd == "per_replica":
                    t = next(it)
                    new_leaves.append(_TracedPerReplica(t, n) if n > 1 else t)
                elif kd == "iterator":
                    new_leaves.append(_TracedIterator(x, i))
                else:
                    new_leaves.append(x)
            a, kw = pytree.unflatten(td, new_leaves)
            _stack("runs").append(state)
            _traces().append(ft)
            try:
                out = fn(*a, **kw)
            finally:
                _traces().pop()
                _stack("runs").pop()
            out_leaves, out_tree = pytree.flatten(out, is_leaf=lambda x: isinstance(x, PerReplica))
            flags, values = [], []
            for x in out_leaves:
                if isinstance(x, _TracedPerReplica):
                    flags.append(True)
                    values.append(x.local)
                elif isinstance(x, PerReplica):
                    raise ValueError(
                        f"xtpu.function '{self.__name__}' returns a PerReplica of concrete values; return tensors"
                    )
                else:
                    flags.append(False)
                    values.append(x)
            out_info["tree"] = out_tree
            out_info["per_replica"] = flags
            return tuple(values) + tuple(state.current[v] for v in variables)

        return computation

    # -- running ------------------------------------------------------------
    def _flat_inputs(
        self, concrete: ConcreteFunction, leaves: list, pulls_now: bool, pulled: list | None = None
    ) -> list[list[np.ndarray]]:
        """Inputs indexed [replica][input]: tensor arguments, variable values,
        then the iterator elements (taken now, unless the trace just took them)."""
        if not pulls_now:
            return []
        n = concrete.strategy.num_replicas_in_sync
        flat: list[list[np.ndarray]] = [[] for _ in range(n)]
        for x, kd in zip(leaves, concrete.leaf_kinds):
            if kd == "tensor":
                arr = to_numpy(x)
                for r in range(n):
                    flat[r].append(arr)
            elif kd == "per_replica":
                if len(x.values) != n:
                    raise ValueError(
                        f"a PerReplica argument has {len(x.values)} values but the strategy has {n} replicas"
                    )
                for r in range(n):
                    flat[r].append(to_numpy(x.values[r]))
        for v in concrete.variables:
            for r in range(n):
                flat[r].append(v._replica_input(r, concrete.strategy))
        if pulled is None:
            pulled = []
            for index, td, specs, per_flags, optional in concrete.pulls:
                if optional is not None:
                    try:
                        element = leaves[index]._xtpu_pull_()
                    except StopIteration:
                        if optional.unconditional:
                            raise ValueError(
                                f"xtpu.function '{self.__name__}': get_value() of an empty Optional (the iterator is "
                                "exhausted; TF raises InvalidArgumentError 'The optional does not have a value'); "
                                "guard it with xtpu.cond(optional.has_value(), ...)"
                            ) from None
                        pulled.append([np.asarray(False)] * n)
                        pulled += [[np.zeros(spec.shape, np.dtype(spec.dtype))] * n for spec in specs]
                        continue
                    pulled.append([np.asarray(True)] * n)
                else:
                    element = leaves[index]._xtpu_pull_()
                el_leaves, el_td = pytree.flatten(element, is_leaf=lambda x: isinstance(x, PerReplica))
                if el_td != td:
                    raise ValueError(
                        f"xtpu.function '{self.__name__}': an iterator's element has the structure "
                        f"{el_td}, not {td} as when the function was traced"
                    )
                for j, (leaf, spec, per) in enumerate(zip(el_leaves, specs, per_flags)):
                    vals = [to_numpy(v) for v in leaf.values] if per else [to_numpy(leaf)] * n
                    got = _StaticSpec(tuple(vals[0].shape), dtype_of_numpy(vals[0].dtype))
                    if got != spec:
                        raise ValueError(
                            f"xtpu.function '{self.__name__}': component {j} of an iterator's element is {got}, not "
                            f"{spec} as when the function was traced (use drop_remainder=True for a static batch)"
                        )
                    pulled.append(vals)
        for vals in pulled:
            for r in range(n):
                flat[r].append(vals[r])
        return flat

    def _run(self, concrete: ConcreteFunction, flat: list[list[np.ndarray]]) -> Any:
        outs = concrete.compiled._run(flat)
        n = len(outs)
        m = len(concrete.per_replica_out)
        for j, v in enumerate(concrete.variables):
            v._write_back([outs[r][m + j] for r in range(n)], concrete.strategy)

        def eager(a):
            a = np.asarray(a)
            return as_eager_tensor(a) if np_kind(a.dtype) in "biufc" else a

        values = []
        for j, per in enumerate(concrete.per_replica_out):
            if per and n > 1:
                values.append(PerReplica([eager(outs[r][j]) for r in range(n)]))
            else:
                values.append(eager(outs[0][j]))
        return pytree.unflatten(concrete.out_tree, values)

    def __repr__(self) -> str:
        return f"<xtpu.function {self.__name__}>"


def _public_spec(x: Any) -> Any:
    k = _leaf_key(x)
    if k[0] in ("tensor", "per_replica"):
        return TensorSpec(k[1].shape, k[1].dtype)
    return x


def function(
    func: Callable | None = None,
    input_signature: Any = None,
    autograph: bool = True,
    jit_compile: Any = None,
    reduce_retracing: bool = False,
    experimental_implements: Any = None,
    experimental_autograph_options: Any = None,
    experimental_attributes: Any = None,
    experimental_relax_shapes: Any = None,
    experimental_compile: Any = None,
    experimental_follow_type_hints: Any = None,
    name: str | None = None,
) -> Any:
    """Compile a Python function per input signature (TF's ``tf.function``).

    Usable as ``@xtpu.function`` or ``@xtpu.function(input_signature=[...])``.

    Args:
      func: the Python function.
      input_signature: a list of :class:`TensorSpec` (possibly nested): the
        function accepts only compatible tensors (TypeError otherwise, as TF).
      jit_compile: accepted; xtpu always compiles.
      reduce_retracing: accepted; shapes are static, so xtpu still traces per
        concrete shape.
      autograph and the ``experimental_*`` arguments: accepted and ignored
        (xtpu has no AutoGraph: Python control flow runs while tracing).

    Returns:
      A :class:`Function` (or a decorator making one).
    """
    if experimental_relax_shapes is not None:
        reduce_retracing = bool(experimental_relax_shapes)

    def decorate(f: Callable) -> Function:
        return Function(
            f, input_signature=input_signature, jit_compile=jit_compile, reduce_retracing=reduce_retracing, name=name
        )

    return decorate if func is None else decorate(func)


__all__ = ["ConcreteFunction", "Function", "TensorSpec", "function", "FREQUENT_TRACING_WARNING_THRESHOLD"]
