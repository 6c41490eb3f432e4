"""Python operators on traced tensors (TF's Tensor overloads)."""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.eager import EAGER_OPS
from xtpu.core.tracing import Tensor, bind, convert, format_location
from xtpu.dialects.hlo import ReshapeOp
from xtpu.ops import array_ops, math_ops, more_math_ops

# numpy's binary operators on (ndarray or numpy scalar, Tensor) call the ufunc
# with the Tensor second: it runs as the Tensor's reflected operator, as it
# would if numpy deferred (TF's __array_priority__), so `ndarray + t` and
# `t + ndarray` trace the same xtpu op.
_REFLECTED = {
    np.add: "__radd__",
    np.subtract: "__rsub__",
    np.multiply: "__rmul__",
    np.true_divide: "__rtruediv__",
    np.power: "__rpow__",
    np.matmul: "__rmatmul__",
    np.floor_divide: "__rfloordiv__",
    np.remainder: "__rmod__",
    np.less: "__gt__",
    np.less_equal: "__ge__",
    np.greater: "__lt__",
    np.greater_equal: "__le__",
    np.equal: "__eq__",
    np.not_equal: "__ne__",
    # `ndarray | t` and `ndarray & t` (numpy's bitwise ufuncs; TF's Tensor
    # `__ror__` / `__rand__`: logical on bools, bitwise on integers).
    np.bitwise_and: "__rand__",
    np.bitwise_or: "__ror__",
}


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """``Tensor.__array_ufunc__``: a numpy operator with the Tensor on the
    right runs as its reflected operator; any other numpy function on a
    traced tensor is a TypeError naming the xtpu op to use (JAX users write
    ``jnp.exp``; here it is ``xtpu.math.exp``).

    Raises:
      TypeError: a numpy function, or an in-place numpy update, on a traced
        tensor.
    """
    if method == "__call__" and not kwargs and len(inputs) == 2 and inputs[1] is self and ufunc in _REFLECTED:
        if not isinstance(inputs[0], Tensor):
            return getattr(self, _REFLECTED[ufunc])(inputs[0])
    raise TypeError(ufunc_hint(ufunc, method, kwargs))


def ufunc_hint(ufunc, method: str = "__call__", kwargs=None) -> str:
    """Why numpy's ``ufunc`` cannot take a traced tensor, and the xtpu op
    that does the same (``np.exp`` -> ``xtpu.math.exp``)."""
    what = f"numpy.{ufunc.__name__}" + (f".{method}" if method != "__call__" else "")
    head = f"{what} cannot take a traced xtpu.Tensor: its value is only known when the program runs"
    if kwargs and "out" in kwargs:
        return head + "; write the result of an xtpu op to a new name instead of updating an array in place"
    fn = ufunc_as_xtpu_op(ufunc) if method == "__call__" else None
    name = getattr(fn, "__name__", "")
    if fn is not None and getattr(math_ops, name, None) is fn:  # xtpu.math exports math_ops' ops
        return head + f"; use xtpu.math.{name}, which traces (as jax.numpy.{ufunc.__name__} does in JAX)"
    return head + "; use the xtpu ops (xtpu.math, xtpu.nn, ...) on traced values"


def _no_value(t: Tensor, conversion: str):
    """``float(t)`` / ``int(t)`` on a traced tensor: the TypeError says it
    has no value yet and where it was made (JAX's ConcretizationTypeError)."""
    owner = getattr(t.value, "owner", None)
    where = ""
    if hasattr(owner, "location"):
        loc = format_location(owner.location)
        where = f", made by {owner.name}" + (f" at {loc}" if loc else "")
    elif owner is not None:
        where = f", input {getattr(t.value, 'index', '?')} of the computation"
    raise TypeError(
        f"{conversion} of a traced xtpu.Tensor {t.dtype}{list(t.shape)}{where}: a traced value has no value yet "
        "(it is computed when the program runs); keep it an xtpu tensor, return it from the computation, or "
        "print it with xtpu.print"
    )


def _install() -> None:
    m = math_ops
    table = {
        "__add__": lambda a, b: m.add(a, b),
        "__radd__": lambda a, b: m.add(b, a),
        "__sub__": lambda a, b: m.subtract(a, b),
        "__rsub__": lambda a, b: m.subtract(b, a),
        "__mul__": lambda a, b: m.multiply(a, b),
        "__rmul__": lambda a, b: m.multiply(b, a),
        "__truediv__": lambda a, b: m.divide(a, b),
        "__rtruediv__": lambda a, b: m.divide(b, a),
        "__pow__": lambda a, b: m.pow(a, b),
        "__rpow__": lambda a, b: m.pow(b, a),
        "__matmul__": lambda a, b: m.matmul(a, b),
        "__rmatmul__": lambda a, b: m.matmul(b, a),
        "__neg__": lambda a: m.negative(a),
        "__abs__": lambda a: m.abs(a),
        "__lt__": lambda a, b: m.less(a, b),
        "__le__": lambda a, b: m.less_equal(a, b),
        "__gt__": lambda a, b: m.greater(a, b),
        "__ge__": lambda a, b: m.greater_equal(a, b),
        "__eq__": lambda a, b: m.equal(a, b),
        "__ne__": lambda a, b: m.not_equal(a, b),
        "__and__": lambda a, b: m.logical_and(a, b),
        "__or__": lambda a, b: m.logical_or(a, b),
        "__rand__": lambda a, b: m.logical_and(b, a),
        "__ror__": lambda a, b: m.logical_or(b, a),
        "__invert__": lambda a: m.logical_not(a),
        "__getitem__": lambda a, k: array_ops.getitem(a, k),
        "__floordiv__": lambda a, b: more_math_ops.floordiv(a, b),
        "__rfloordiv__": lambda a, b: more_math_ops.floordiv(b, a),
        "__mod__": lambda a, b: more_math_ops.floormod(a, b),
        "__rmod__": lambda a, b: more_math_ops.floormod(b, a),
    }
    for name, fn in table.items():
        setattr(Tensor, name, fn)
    Tensor.__hash__ = object.__hash__  # keep tensors hashable despite __eq__
    Tensor.__array_ufunc__ = _array_ufunc
    Tensor.__float__ = lambda a: _no_value(a, "float()")
    Tensor.__int__ = lambda a: _no_value(a, "int()")
    Tensor.__complex__ = lambda a: _no_value(a, "complex()")
    Tensor.T = property(lambda a: array_ops.transpose(a))


_install()


# ---------------------------------------------------------------------------
# numpy ufuncs on EagerTensors (xtpu.core.eager dispatches through these)
# ---------------------------------------------------------------------------


def _identity(x: Any) -> Any:
    """A recorded copy of ``x`` (``hlo.reshape`` to its own shape)."""
    x = convert(x)
    (out,) = bind(ReshapeOp, [x], shape=tuple(np.shape(x)))
    return out


_UFUNCS: dict = {
    np.add: math_ops.add,
    np.subtract: math_ops.subtract,
    np.multiply: math_ops.multiply,
    np.true_divide: math_ops.divide,
    np.negative: math_ops.negative,
    np.positive: _identity,
    np.power: math_ops.pow,
    # numpy's ``x ** 2``, ``x ** -1`` and ``x ** 0.5`` are these:
    np.square: lambda x: math_ops.multiply(x, x),
    np.reciprocal: lambda x: math_ops.divide(1, x),
    np.matmul: math_ops.matmul,
    np.maximum: math_ops.maximum,
    np.minimum: math_ops.minimum,
    np.exp: math_ops.exp,
    np.log: math_ops.log,
    np.sqrt: math_ops.sqrt,
    np.tanh: math_ops.tanh,
    np.absolute: math_ops.abs,
    np.less: math_ops.less,
    np.less_equal: math_ops.less_equal,
    np.greater: math_ops.greater,
    np.greater_equal: math_ops.greater_equal,
    np.equal: math_ops.equal,
    np.not_equal: math_ops.not_equal,
    np.logical_and: math_ops.logical_and,
    np.logical_or: math_ops.logical_or,
    np.logical_not: math_ops.logical_not,
}
"""numpy ufunc -> the xtpu op that computes it."""


def ufunc_as_xtpu_op(ufunc: Any) -> Any:
    """The xtpu op for a numpy ufunc (``np.add`` -> ``xtpu.math.add``), or
    None."""
    return _UFUNCS.get(ufunc)


EAGER_OPS.ufuncs = _UFUNCS
EAGER_OPS.math = math_ops
EAGER_OPS.getitem = array_ops.getitem
EAGER_OPS.transpose = array_ops.transpose
EAGER_OPS.reshape = array_ops.reshape
EAGER_OPS.concat = array_ops.concat
EAGER_OPS.cast = math_ops.cast
EAGER_OPS.reduce_mean = math_ops.reduce_mean
EAGER_OPS.identity = _identity
