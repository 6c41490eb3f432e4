"""Python operators on traced tensors (TF's Tensor overloads)."""

from __future__ import annotations

import numpy as np

from xtpu.ops import array_ops, math_ops, more_math_ops
from xtpu.tracing import Tensor, format_location

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
    from xtpu import math as xmath
    from xtpu.tape import ufunc_as_xtpu_op

    what = f"numpy.{ufunc.__name__}" + (f".{method}" if method != "__call__" else "")
    head = f"{what} cannot take a traced xtpu.Tensor: its value is only known when the program runs"
    if kwargs and "out" in kwargs:
        return head + "; write the result of an xtpu op to a new name instead of updating an array in place"
    fn = ufunc_as_xtpu_op(ufunc) if method == "__call__" else None
    name = getattr(fn, "__name__", "")
    if fn is not None and getattr(xmath, name, None) is fn:
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
