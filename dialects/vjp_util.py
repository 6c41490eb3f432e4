"""The vocabulary the ops' gradient rules (:meth:`PrimitiveOp.vjp`) are written in.

Every helper applies xtpu ops through :func:`xtpu.tracing.bind`, so a rule
built from them runs on numpy arrays eagerly and emits IR inside a trace, and
is itself differentiable (it uses only ops that have a rule or are declared
not differentiable).  No helper calls numpy on a value: only on static
shapes and Python constants.  Constants take the dtype of the value they
meet (``full_like``), since hlo ops never promote dtypes.

The dialects are imported before ``xtpu.tracing`` and ``xtpu.ops``, so those
imports are done lazily, at call time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

FLOATS = ("float32", "float64")


# ---- reading values ----------------------------------------------------


def spec(x: Any):
    """The TensorSpec of a traced tensor or a numpy value."""
    from xtpu.tracing import spec_of

    return spec_of(x)


def dtype(x: Any) -> str:
    return spec(x).dtype


def shape(x: Any) -> tuple[int, ...]:
    return spec(x).shape


def is_float(x: Any) -> bool:
    """True for float32 / float64 values: the only ones that get gradients."""
    return dtype(x) in FLOATS


# ---- applying ops ------------------------------------------------------


def bind1(op_cls: type, operands: Sequence[Any], **params: Any) -> Any:
    """The single result of ``op_cls`` applied to ``operands``."""
    from xtpu.tracing import bind

    (out,) = bind(op_cls, list(operands), **params)
    return out


def _hlo():
    from xtpu.dialects import hlo

    return hlo


def scalar(value: Any, dt: str) -> Any:
    """A scalar constant of dtype ``dt``."""
    from xtpu.ops.core import scalar as _scalar

    return _scalar(value, dt)


def broadcast(x: Any, dims: Sequence[int], to: Sequence[int]) -> Any:
    """``hlo.broadcast_in_dim``; no op when nothing changes."""
    dims, to = tuple(dims), tuple(to)
    if shape(x) == to and dims == tuple(range(len(to))):
        return x
    return bind1(_hlo().BroadcastInDimOp, [x], broadcast_dimensions=dims, shape=to)


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
    return bind1(_hlo().AddOp, [a, b])


def sub(a: Any, b: Any) -> Any:
    return bind1(_hlo().SubtractOp, [a, b])


def mul(a: Any, b: Any) -> Any:
    return bind1(_hlo().MultiplyOp, [a, b])


def div(a: Any, b: Any) -> Any:
    return bind1(_hlo().DivideOp, [a, b])


def neg(a: Any) -> Any:
    return bind1(_hlo().NegateOp, [a])


def log(a: Any) -> Any:
    return bind1(_hlo().LogOp, [a])


def power(a: Any, b: Any) -> Any:
    return bind1(_hlo().PowerOp, [a, b])


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    return bind1(_hlo().SelectOp, [pred, on_true, on_false])


def compare(a: Any, b: Any, direction: str) -> Any:
    return bind1(_hlo().CompareOp, [a, b], comparison_direction=direction)


def convert(x: Any, dt: str) -> Any:
    """``hlo.convert`` to ``dt``; no op when ``x`` has that dtype."""
    if dtype(x) == dt:
        return x
    return bind1(_hlo().ConvertOp, [x], dtype=dt)


def reshape(x: Any, to: Sequence[int]) -> Any:
    to = tuple(to)
    if shape(x) == to:
        return x
    return bind1(_hlo().ReshapeOp, [x], shape=to)


def transpose(x: Any, perm: Sequence[int]) -> Any:
    perm = tuple(perm)
    if perm == tuple(range(len(perm))):
        return x
    return bind1(_hlo().TransposeOp, [x], permutation=perm)


def reduce(x: Any, kind: str, dims: Sequence[int], init: Any = None) -> Any:
    """``hlo.reduce`` over ``dims`` (the identity of ``kind`` as init value
    when ``init`` is None); no op over no dimension without an init."""
    dims = tuple(sorted(dims))
    if not dims and init is None:
        return x
    if init is None:
        identity = {"add": 0, "mul": 1}[kind]
        init = scalar(identity, dtype(x))
    return bind1(_hlo().ReduceOp, [x, init], computation=kind, dimensions=dims)


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
    return bind1(_hlo().SliceOp, [x], start_indices=start, limit_indices=limit, strides=strides)


def pad(x: Any, value: Any, low: Sequence[int], high: Sequence[int], interior: Sequence[int]) -> Any:
    low, high, interior = (tuple(int(v) for v in t) for t in (low, high, interior))
    if not any(low + high + interior):
        return x
    return bind1(_hlo().PadOp, [x, value], edge_padding_low=low, edge_padding_high=high, interior_padding=interior)


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
