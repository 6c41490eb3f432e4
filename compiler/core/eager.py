"""Eager values: :class:`EagerTensor`, TF's EagerTensor as a numpy array.

Every eager op's result is an EagerTensor (a numpy ``ndarray`` subclass,
no copy), so that a ``GradientTape`` (:mod:`xtpu.autodiff.tape`) can record
what is computed from it.  Its Python operators, the numpy ufuncs xtpu has
ops for and, while a tape records, its array methods run as xtpu ops.

The type is defined here, in the tracer core, because the tracer hands out
eager results; the ops it dispatches to live above, in :mod:`xtpu.ops`,
which installs them in :data:`EAGER_OPS` when it loads (JAX attaches its
Array's methods from ``jax.numpy`` the same way).  Before that, an
EagerTensor computes as a plain numpy array.
"""

from __future__ import annotations

import operator
import os
import sys
import types
from typing import Any

import numpy as np

from xtpu.core.locations import format_location, user_location
from xtpu.core.recording import recording_tapes, tape_state
from xtpu.dialects.tensor_spec import np_kind

EAGER_OPS = types.SimpleNamespace(ufuncs={}, math=None)
"""The xtpu ops an EagerTensor dispatches to, installed by
:mod:`xtpu.ops.operators`: ``ufuncs`` (numpy ufunc -> xtpu op), ``math``
(the math ops module: reductions, ``matmul``), and ``getitem``,
``transpose``, ``reshape``, ``cast``, ``reduce_mean``, ``concat``,
``identity`` (a recorded copy)."""


class EagerTensor(np.ndarray):
    """An eager value that xtpu ops can record on a tape (TF's EagerTensor).

    It is a numpy array: everything numpy accepts it accepts, and numpy
    computations on it give EagerTensors again (TF: every eager op returns a
    tensor).  Its Python operators and the numpy ufuncs xtpu has ops for
    always run as those xtpu ops on numeric operands, so that eager and
    traced values follow one dtype rule (TF's: a Python scalar takes the
    tensor's dtype, a numpy scalar is the 0-d array of its dtype, mixed
    dtypes are a ``TypeError``; numpy's own code, such as ``np.testing``,
    computes mixed dtypes as numpy does).  While a GradientTape records,
    besides, the reductions ``sum`` / ``mean`` / ``max`` /
    ``min`` (methods and numpy functions), ``T``, ``transpose``,
    ``reshape``, ``astype``, ``ravel``, ``flatten``, ``squeeze``, ``copy``,
    ``dot``, ``np.concatenate``, indexing with ints, slices, ``...`` and
    ``None``, and iteration go through xtpu ops (TF's dtype rules, recorded
    for gradients).  Nothing computed from a recorded value is silently
    left off the tape: any other numpy computation on a float value a
    recording tape tracks raises ``TypeError`` (``np.asarray(x)`` or
    ``x.numpy()`` give the plain array, for values that need no gradient).

    Values a tape recorded are immutable, as TF's tensors: in-place
    operators (``x += 1``) rebind the name to a new EagerTensor, as they do
    for TF tensors, whenever a tape records or the value was recorded; item
    assignment and ``out=`` into a recorded value raise.
    """

    # -- numpy protocol -------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        tapes = recording_tapes()
        outs = kwargs.get("out")
        if tapes and outs:
            _check_inplace(f"numpy.{ufunc.__name__}(..., out=...)", outs, inputs, tapes)
        elif not outs:
            fn = _xtpu_ufunc(ufunc, method, inputs, kwargs, tapes)
            if fn is not None:
                try:
                    return fn()
                except TypeError:
                    # numpy's own code (np.isclose, np.testing) mixing
                    # dtypes, which xtpu ops refuse (TF's rules): numpy
                    # computes it, as for TF tensors, without a gradient.
                    if not _numpy_caller(sys._getframe(1)):
                        raise
                    tapes = None
        plain = [np.asarray(x) if isinstance(x, EagerTensor) else x for x in inputs]
        if "out" in kwargs:
            outs = kwargs["out"]
            if any(_is_held(o) for o in outs):
                raise ValueError(_immutable_message(f"numpy.{ufunc.__name__}(..., out=...)"))
            kwargs["out"] = tuple(np.asarray(o) if isinstance(o, EagerTensor) else o for o in outs)
            getattr(ufunc, method)(*plain, **kwargs)
            return outs[0] if len(outs) == 1 else tuple(outs)
        result = getattr(ufunc, method)(*plain, **kwargs)
        if tapes:
            _check_recorded(
                f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}"), inputs, result, tapes
            )
        return _wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        tapes = recording_tapes()
        if tapes:
            fn = _recordable_function(func, args, kwargs, tapes)
            if fn is not None:
                return fn()
        result = super().__array_function__(func, types, args, kwargs)
        if tapes:
            _check_recorded(f"numpy.{func.__name__}", _flat_args(args, kwargs), result, tapes)
        return result

    def __array_finalize__(self, obj):
        # A view or copy of a value a tape records, made by numpy rather than
        # by an xtpu op (x.swapaxes(...), x.repeat(...)): it would silently
        # carry no gradient.
        if obj is not None and isinstance(obj, EagerTensor) and np_kind(obj.dtype) in "fc":
            tapes = getattr(_tape_local(), "recording", None)
            if tapes and _tracked_by(obj, tapes) and not _numpy_caller(sys._getframe(1)):
                raise TypeError(
                    _not_recorded_message("an ndarray method or numpy function that makes a new array (a view or copy)")
                )

    # -- indexing and iteration ---------------------------------------------
    def __getitem__(self, key):
        tapes = recording_tapes()
        if tapes and _tracked_by(self, tapes):
            try:
                return EAGER_OPS.getitem(self, key)
            except IndexError as e:
                if _numpy_caller(sys._getframe(1)):  # numpy's own code (np.testing): numpy's indexing
                    return _wrap(np.asarray(self)[key])
                raise IndexError(
                    f"{e}: a GradientTape is recording this EagerTensor, and xtpu records indexing with static "
                    "ints, slices, ... and None only; use x.numpy()[...] for a value that needs no gradient"
                    f"{_where()}"
                ) from None
        return _wrap(np.asarray(self)[key])

    def __setitem__(self, key, value):
        if _is_held(self) or (recording_tapes() and _tracked_by(self, recording_tapes())):
            raise TypeError(_immutable_message("item assignment"))
        np.asarray(self)[key] = np.asarray(value) if isinstance(value, EagerTensor) else value

    def __iter__(self):
        tapes = recording_tapes()
        if tapes and _tracked_by(self, tapes):
            if self.ndim == 0:
                raise TypeError("iteration over a 0-d EagerTensor")
            return iter([self[i] for i in range(self.shape[0])])
        return (_wrap(v) for v in np.asarray(self))

    # -- methods that are xtpu ops while a tape records this value -----------
    def _recording(self) -> bool:
        tapes = recording_tapes()
        return bool(tapes) and _tracked_by(self, tapes)

    @property
    def T(self):  # noqa: N802 - numpy's name
        if self._recording():
            return EAGER_OPS.transpose(self)
        return _wrap(np.asarray(self).T)

    def transpose(self, *axes):
        if self._recording():
            if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
                axes = axes[0]
            return EAGER_OPS.transpose(self, list(axes) if axes else None)
        return _wrap(np.asarray(self).transpose(*axes))

    def reshape(self, *shape, **kwargs):
        if self._recording() and not kwargs:
            if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
                shape = shape[0]
            return _identity(EAGER_OPS.reshape(self, list(shape)), self)
        return _wrap(np.asarray(self).reshape(*shape, **kwargs))

    def ravel(self, order="C"):
        if self._recording() and order == "C":
            return self.reshape(-1)
        return _wrap(np.asarray(self).ravel(order))

    def flatten(self, order="C"):
        if self._recording() and order == "C":
            return self.reshape(-1)
        return _wrap(np.asarray(self).flatten(order))

    def squeeze(self, axis=None):
        if self._recording():
            axes = range(self.ndim) if axis is None else [a % self.ndim for a in np.atleast_1d(axis)]
            drop = {a for a in axes if self.shape[a] == 1}
            if axis is not None and len(drop) != len(list(axes)):
                raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
            return self.reshape([n for i, n in enumerate(self.shape) if i not in drop])
        return _wrap(np.asarray(self).squeeze(axis))

    def copy(self, order="C"):
        if self._recording():
            return EAGER_OPS.identity(self)
        return _wrap(np.asarray(self).copy(order))

    def astype(self, dtype, *args, **kwargs):
        if self._recording() and not args and not kwargs:
            return EAGER_OPS.cast(self, np.dtype(dtype).name)
        return _wrap(np.asarray(self).astype(dtype, *args, **kwargs))

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        if self._recording() and dtype is None and out is None and not kwargs:
            return EAGER_OPS.reduce_mean(self, axis=axis, keepdims=bool(keepdims))
        return _wrap(np.mean(np.asarray(self), axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kwargs))

    def dot(self, b, out=None):
        if self._recording() and out is None:
            return _recorded_dot(self, b)
        return _wrap(np.asarray(self).dot(np.asarray(b), out))

    # -- in-place operators ----------------------------------------------------
    # TF's tensors have no in-place operators: ``x += 1`` rebinds ``x`` to
    # ``x + 1``.  EagerTensors do the same while a tape records (the sum is
    # then recorded) and once a tape holds them; otherwise they update in
    # place, as numpy arrays do.

    def numpy(self) -> np.ndarray:
        """The value as a plain numpy array (TF's ``EagerTensor.numpy``)."""
        return np.array(self)

    def __repr__(self) -> str:
        return f"<xtpu.EagerTensor: shape={self.shape}, dtype={self.dtype.name}, numpy={np.asarray(self)!r}>"

    def __reduce__(self):
        return np.asarray(self).__reduce__()


def _inplace(name: str, binary: Any):
    numpy_method = getattr(np.ndarray, name)

    def method(self, other):
        if recording_tapes() or _is_held(self):
            return binary(self, other)
        return numpy_method(self, np.asarray(other) if isinstance(other, EagerTensor) else other)

    method.__name__ = name
    return method


for _name, _binary in [
    ("__iadd__", operator.add),
    ("__isub__", operator.sub),
    ("__imul__", operator.mul),
    ("__itruediv__", operator.truediv),
    ("__ifloordiv__", operator.floordiv),
    ("__imod__", operator.mod),
    ("__ipow__", operator.pow),
    ("__imatmul__", operator.matmul),
    ("__iand__", operator.and_),
    ("__ior__", operator.or_),
    ("__ixor__", operator.xor),
    ("__ilshift__", operator.lshift),
    ("__irshift__", operator.rshift),
]:
    setattr(EagerTensor, _name, _inplace(_name, _binary))


def _freeze_private(value: Any, operands: list[Any]) -> None:
    """Make a new eager result read-only down its chain of bases, but not
    the memory it shares with an operand (a reshape's result is a view of
    its operand, which may be the user's array)."""
    b = value
    while isinstance(b, np.ndarray) and not isinstance(b, EagerTensor):
        if b.flags.writeable:
            if any(isinstance(a, np.ndarray) and np.may_share_memory(b, np.asarray(a)) for a in operands):
                return
            b.flags.writeable = False
        b = b.base


_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep


def _numpy_caller(frame: Any) -> bool:
    """Whether ``frame`` runs numpy's own Python code."""
    return frame is not None and frame.f_code.co_filename.startswith(_NUMPY_DIR)


def _tape_local():
    return tape_state


def _tracked_by(value: Any, tapes: list[Any]) -> bool:
    """Whether one of ``tapes`` tracks this very object (eagerly)."""
    return any(t._trace is None and t._tracked.get(id(value)) is value for t in tapes)


def _is_held(value: Any) -> bool:
    """Whether a tape holds this EagerTensor (it is then read-only)."""
    return isinstance(value, EagerTensor) and getattr(value, "_xtpu_held", False)


def _float_tracked(values: Any, tapes: list[Any]) -> bool:
    return any(isinstance(v, np.ndarray) and np_kind(v.dtype) in "fc" and _tracked_by(v, tapes) for v in values)


def _where() -> str:
    loc = format_location(user_location())
    return f" (at {loc})" if loc else ""


def _not_recorded_message(what: str) -> str:
    return (
        f"{what} on an EagerTensor that a GradientTape is recording is not an xtpu op: its result would "
        "silently carry no gradient. Use xtpu ops (xtpu.math, xtpu.reshape, ...), or np.asarray(x) / x.numpy() "
        f"for a value that needs no gradient{_where()}"
    )


def _immutable_message(what: str) -> str:
    return (
        f"{what} on an EagerTensor that a GradientTape recorded: recorded values are immutable, as TF's "
        f"tensors (an in-place update would silently change the gradient); write e.g. `y = x + 1` instead{_where()}"
    )


def _check_inplace(what: str, outs: Any, inputs: Any, tapes: list[Any]) -> None:
    if any(_is_held(o) or _tracked_by(o, tapes) for o in outs) or _float_tracked(inputs, tapes):
        raise ValueError(_immutable_message(what) if any(_is_held(o) for o in outs) else _not_recorded_message(what))


def _check_recorded(what: str, inputs: Any, result: Any, tapes: list[Any]) -> None:
    """Raise if a float result was computed by numpy from a float value a
    recording tape tracks (it would silently carry no gradient)."""
    if not _float_tracked(inputs, tapes):
        return
    for r in result if isinstance(result, (tuple, list)) else (result,):
        if (
            isinstance(r, (np.ndarray, np.generic))
            and np_kind(np.asarray(r).dtype) in "fc"
            and not _tracked_by(r, tapes)
        ):
            raise TypeError(_not_recorded_message(what))


def _flat_args(args: Any, kwargs: dict) -> list[Any]:
    out = []
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple)):
            out.extend(a)
        else:
            out.append(a)
    return out


def _wrap(value: Any) -> Any:
    """numpy results of computations on EagerTensors: EagerTensors (numeric
    arrays and scalars), other values unchanged."""
    if isinstance(value, EagerTensor):
        return value
    if isinstance(value, np.ndarray) and np_kind(value.dtype) in "biufc":
        return value.view(EagerTensor)
    if isinstance(value, np.generic) and np_kind(value.dtype) in "biufc":
        # numpy gives 0-d results as scalars; TF's EagerTensor stays a tensor
        return np.asarray(value).view(EagerTensor)
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    return value


def _identity(result: Any, source: Any) -> Any:
    """``reshape`` to the same shape gives its operand back; a method must
    give a new value (as numpy's do), recorded as an identity."""
    if result is source:
        result = EAGER_OPS.identity(source)
    return result


def _recorded_dot(a: Any, b: Any) -> Any:
    m = EAGER_OPS.math
    a_nd, b_nd = np.ndim(a), np.ndim(b)
    if a_nd == 2 and b_nd == 2:
        return m.matmul(a, b)
    if a_nd == 0 or b_nd == 0:
        return m.multiply(a, b)
    if a_nd == 1 and b_nd == 1:
        return m.reduce_sum(m.multiply(a, b))
    raise TypeError(_not_recorded_message(f"numpy.dot of a {a_nd}-d and a {b_nd}-d array"))


_REDUCTIONS = {"add": "reduce_sum", "maximum": "reduce_max", "minimum": "reduce_min"}


def _xtpu_ufunc(ufunc, method, inputs, kwargs, tapes) -> Any:
    """A thunk running ``ufunc`` as xtpu ops, or None (numpy computes it).

    The ufuncs xtpu has ops for (the Python operators among them) always
    run as those ops on numeric operands, with or without a recording tape:
    eager and traced values follow the same dtype rules (TF's: a numpy
    scalar is the 0-d array of its dtype, a Python scalar takes the other
    operand's dtype, no promotion), through the same code.  Reductions go
    through xtpu ops only when a tape records a float value."""
    m = EAGER_OPS.math
    if method == "__call__" and not kwargs:
        fn = EAGER_OPS.ufuncs.get(ufunc)
        if fn is not None and (tapes or all(_numeric_operand(x) for x in inputs)):
            return lambda: fn(*inputs)
        return None
    if not tapes:
        return None
    if method == "reduce" and ufunc.__name__ in _REDUCTIONS and len(inputs) == 1:
        (x,) = inputs
        extra = set(kwargs) - {"axis", "keepdims", "dtype", "where"}
        if (
            extra
            or kwargs.get("dtype") is not None
            or kwargs.get("where", True) is not True
            or np_kind(np.asarray(x).dtype) not in "fc"
            or not _tracked_by(x, tapes)
        ):
            return None
        fn = getattr(m, _REDUCTIONS[ufunc.__name__])
        axis = kwargs.get("axis", 0)  # ufunc.reduce's default axis is 0
        return lambda: fn(x, axis=axis, keepdims=bool(kwargs.get("keepdims", False)))
    return None


def _numeric_operand(x: Any) -> bool:
    """Whether ``x`` is an operand xtpu's elementwise ops take: a bool, int
    or float array, numpy scalar, Python scalar or (nested) list of them."""
    if isinstance(x, (np.ndarray, np.generic)):
        return np_kind(x.dtype) in "biufc"
    if isinstance(x, (bool, int, float, complex)):
        return True
    if isinstance(x, (list, tuple)):
        try:
            return np.asarray(x).dtype.kind in "biufc"
        except ValueError:
            return False
    return False


def _recordable_function(func, args, kwargs, tapes) -> Any:
    """A thunk running the numpy function ``func`` as xtpu ops, or None."""
    if (
        func is np.concatenate
        and args
        and not kwargs.keys() - {"axis", "out", "dtype", "casting"}
        and kwargs.get("out") is None
        and kwargs.get("dtype") is None
    ):
        values = list(args[0])
        axis = kwargs.get("axis", args[1] if len(args) > 1 else 0)
        if len(args) <= 2 and axis is not None and _float_tracked(values, tapes):
            return lambda: EAGER_OPS.concat(values, axis=int(axis))
    if func is np.dot and len(args) == 2 and not kwargs and _float_tracked(args, tapes):
        return lambda: _recorded_dot(*args)
    return None


def as_eager_tensor(value: Any) -> EagerTensor:
    """``value`` as an EagerTensor (no copy for arrays)."""
    if isinstance(value, EagerTensor):
        return value
    return np.asarray(value).view(EagerTensor)


def as_eager_results(results: list[Any]) -> list[Any]:
    """An eager op's numeric results as EagerTensors (strings stay arrays)."""
    return [
        r if isinstance(r, EagerTensor) or np_kind(np.asarray(r).dtype) not in "biufc" else as_eager_tensor(r)
        for r in results
    ]


__all__ = ["EagerTensor", "EAGER_OPS", "as_eager_tensor", "as_eager_results"]
