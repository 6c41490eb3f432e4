"""The vocabulary the ops' gradient rules (:meth:`PrimitiveOp.vjp`) are written in.

Every helper applies xtpu ops through the tracer's ``bind`` (:class:`Builder`), so a rule
built from them runs on numpy arrays eagerly and emits IR inside a trace, and
is itself differentiable (it uses only ops that have a rule or are declared
not differentiable).  No helper calls numpy on a value: only on static
shapes and Python constants.  Constants take the dtype of the value they
meet (``full_like``), since hlo ops never promote dtypes.

The helpers emit ops through the :class:`Builder` the tracer hands in
(:func:`set_builder`, called once by :mod:`xtpu.core.tracing` when it
loads), so the dialects never import the tracer: the IR is the bottom layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from xtpu.dialects.tensor_spec import COMPLEX_DTYPES
from xtpu.dialects.tensor_spec import FLOAT_DTYPES as FLOATS


class Builder(Protocol):
    """What a gradient rule needs from the tracer: apply an op (traced or
    eager), read a value's spec, make constants, convert and flatten the
    values a user's rule returns."""

    def bind(self, op_cls: type, operands: Sequence[Any], **params: Any) -> list[Any]: ...

    def spec_of(self, value: Any) -> Any: ...

    def scalar(self, value: Any, dtype: str) -> Any: ...

    def convert(self, value: Any, dtype: str | None = None) -> Any: ...

    def is_tensor_like(self, value: Any) -> bool: ...

    def flatten(self, tree: Any, is_leaf: Any = None) -> tuple[list[Any], Any]: ...

    def op_class(self, name: str) -> type: ...


_builder: Builder | None = None


def set_builder(builder: Builder) -> None:
    """Hand the gradient rules the tracer's builder (the tracer does, once)."""
    global _builder
    _builder = builder


def builder() -> Builder:
    """The tracer's builder.

    Raises:
      RuntimeError: no tracer has handed one in (``xtpu.core.tracing`` not loaded).
    """
    if _builder is None:
        raise RuntimeError("gradient rules need the tracer: import xtpu.core.tracing (any xtpu API does)")
    return _builder


# ---- reading values ----------------------------------------------------


def spec(x: Any):
    """The TensorSpec of a traced tensor or a numpy value."""
    return builder().spec_of(x)


def dtype(x: Any) -> str:
    return spec(x).dtype


def shape(x: Any) -> tuple[int, ...]:
    return spec(x).shape


def is_float(x: Any) -> bool:
    """True for float values (float32, float64, bfloat16, float16): the
    ones that get gradients, with complex64 for the ops whose rule takes it
    (``COMPLEX_GRADIENT``, :func:`is_inexact`)."""
    return dtype(x) in FLOATS


def is_complex(x: Any) -> bool:
    """True for complex64 values."""
    return dtype(x) in COMPLEX_DTYPES


def is_inexact(x: Any) -> bool:
    """True for float and complex64 values: what the rules of the ops with
    ``COMPLEX_GRADIENT`` give a cotangent to."""
    d = dtype(x)
    return d in FLOATS or d in COMPLEX_DTYPES


# ---- applying ops ------------------------------------------------------


def bind1(op_cls: type, operands: Sequence[Any], **params: Any) -> Any:
    """The single result of ``op_cls`` applied to ``operands``."""
    (out,) = builder().bind(op_cls, list(operands), **params)
    return out


def bind(op_cls: type, operands: Sequence[Any], **params: Any) -> list[Any]:
    """Every result of ``op_cls`` applied to ``operands``."""
    return list(builder().bind(op_cls, list(operands), **params))


def _op(name: str) -> type:
    """The op class registered under ``name`` (``hlo.add``), found through
    the builder, so that the ops' own modules can use these helpers."""
    return builder().op_class(name)


def scalar(value: Any, dt: str) -> Any:
    """A scalar constant of dtype ``dt``."""
    return builder().scalar(value, dt)


def broadcast(x: Any, dims: Sequence[int], to: Sequence[int]) -> Any:
    """``hlo.broadcast_in_dim``; no op when nothing changes."""
    dims, to = tuple(dims), tuple(to)
    if shape(x) == to and dims == tuple(range(len(to))):
        return x
    return bind1(_op("hlo.broadcast_in_dim"), [x], broadcast_dimensions=dims, shape=to)


def full(value: Any, to: Sequence[int], dt: str) -> Any:
    """A tensor of shape ``to`` filled with ``value`` (a scalar constant
    broadcast, so the IR holds one element)."""
    return broadcast(scalar(value, dt), (), to)


def full_like(x: Any, value: Any) -> Any:
    s = spec(x)
    return full(value, s.shape, s.dtype)


def zeros_like(x: Any) -> Any:
    return full_like(x, 0)


def add(a: Any, b: Any) -> Any:
    return bind1(_op("hlo.add"), [a, b])


def sub(a: Any, b: Any) -> Any:
    return bind1(_op("hlo.subtract"), [a, b])


def mul(a: Any, b: Any) -> Any:
    return bind1(_op("hlo.multiply"), [a, b])


def div(a: Any, b: Any) -> Any:
    return bind1(_op("hlo.divide"), [a, b])


def neg(a: Any) -> Any:
    return bind1(_op("hlo.negate"), [a])


def conj(x: Any) -> Any:
    """The complex conjugate of a complex64 value (``complex(real(x),
    -imag(x))``, as XLA lowers it); a real value itself.  TF's complex
    gradients multiply the cotangent by the conjugate of the derivative
    (``math_grad.py``)."""
    if not is_complex(x):
        return x
    re = bind1(_op("hlo.real"), [x])
    im = bind1(_op("hlo.imag"), [x])
    return bind1(_op("hlo.complex"), [re, neg(im)])


def log(a: Any) -> Any:
    return bind1(_op("hlo.log"), [a])


def power(a: Any, b: Any) -> Any:
    return bind1(_op("hlo.power"), [a, b])


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    return bind1(_op("hlo.select"), [pred, on_true, on_false])


def compare(a: Any, b: Any, direction: str) -> Any:
    return bind1(_op("hlo.compare"), [a, b], comparison_direction=direction)


def convert(x: Any, dt: str) -> Any:
    """``hlo.convert`` to ``dt``; no op when ``x`` has that dtype."""
    if dtype(x) == dt:
        return x
    return bind1(_op("hlo.convert"), [x], dtype=dt)


def reshape(x: Any, to: Sequence[int]) -> Any:
    to = tuple(to)
    if shape(x) == to:
        return x
    return bind1(_op("hlo.reshape"), [x], shape=to)


def transpose(x: Any, perm: Sequence[int]) -> Any:
    perm = tuple(perm)
    if perm == tuple(range(len(perm))):
        return x
    return bind1(_op("hlo.transpose"), [x], permutation=perm)


def reduce(x: Any, kind: str, dims: Sequence[int], init: Any = None) -> Any:
    """``hlo.reduce`` over ``dims`` (the identity of ``kind`` as init value
    when ``init`` is None); no op over no dimension without an init."""
    dims = tuple(sorted(dims))
    if not dims and init is None:
        return x
    if init is None:
        identity = {"add": 0, "mul": 1}[kind]
        init = scalar(identity, dtype(x))
    return bind1(_op("hlo.reduce"), [x, init], computation=kind, dimensions=dims)


def reduce_sum(x: Any, dims: Sequence[int]) -> Any:
    return reduce(x, "add", dims)


def sum_all(x: Any) -> Any:
    """The sum of every element of ``x``, a scalar."""
    return reduce_sum(x, range(len(shape(x))))


def slice_(x: Any, start: Sequence[int], limit: Sequence[int], strides: Sequence[int] | None = None) -> Any:
    start, limit = tuple(int(v) for v in start), tuple(int(v) for v in limit)
    strides = tuple(int(v) for v in strides) if strides is not None else (1,) * len(start)
    if start == (0,) * len(start) and limit == shape(x) and strides == (1,) * len(start):
        return x
    return bind1(_op("hlo.slice"), [x], start_indices=start, limit_indices=limit, strides=strides)


def pad(x: Any, value: Any, low: Sequence[int], high: Sequence[int], interior: Sequence[int]) -> Any:
    low, high, interior = (tuple(int(v) for v in t) for t in (low, high, interior))
    if not any(low + high + interior):
        return x
    return bind1(_op("hlo.pad"), [x, value], edge_padding_low=low, edge_padding_high=high, interior_padding=interior)


def inverse_permutation(perm: Sequence[int]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def product_of_others(x: Any, product, total) -> Any:
    """For each element of ``x``, the product of the other elements of its
    group, exact when some are zero: ``product(v)`` / ``total(v)`` give the
    product / the sum of ``v`` over each element's group, shaped like ``x``.

    A group without zeros gives ``P / x_i``; one with a single zero gives the
    product of its nonzero elements at the zero and 0 elsewhere; one with more
    zeros gives 0 (TF's _ProdGrad computes the same with cumulative products).
    """
    zeros = zeros_like(x)
    is_zero = compare(x, zeros, "EQ")
    safe_x = select(is_zero, full_like(x, 1), x)
    nonzero_prod = product(safe_x)
    zero_count = total(convert(is_zero, dtype(x)))
    return select(
        compare(zero_count, zeros, "EQ"),
        div(nonzero_prod, safe_x),
        select(compare(zero_count, full_like(x, 1), "EQ"), select(is_zero, nonzero_prod, zeros), zeros),
    )
