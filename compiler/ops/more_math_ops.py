"""TF's math ops beyond ``xtpu.math``'s first set: ``tf.square``,
``tf.clip_by_value``, ``tf.math.logical_xor``, ``tf.math.floordiv``,
``tf.math.floormod``, ``tf.reduce_prod``, ``tf.reduce_any`` and
``tf.reduce_all``.

Built from StableHLO ops (multiply, maximum / minimum, compare, divide,
``hlo.floor``, reduce), with TF's dtype rules (xtpu.ops.core): no promotion,
Python scalars take the other operand's dtype.
"""

from __future__ import annotations

from typing import Any

from xtpu.core.tracing import bind, convert, read_if_variable
from xtpu.dialects import hlo
from xtpu.dialects.hlo_rounding import FloorOp
from xtpu.dialects.tensor_spec import NUMERIC_DTYPES, is_float_dtype
from xtpu.ops.array_ops import reshape
from xtpu.ops.core import broadcast_shapes, broadcast_to, dtype_of, elementwise, normalize_axes, scalar, shape_of, unify
from xtpu.ops.math_ops import maximum, minimum


def square(x: Any, name: str | None = None) -> Any:
    """``x * x`` elementwise (tf.math.square)."""
    x = convert(read_if_variable(x))
    return elementwise(hlo.MultiplyOp, [x, x], "square")


def clip_by_value(t: Any, clip_value_min: Any, clip_value_max: Any, name: str | None = None) -> Any:
    """``min(max(t, clip_value_min), clip_value_max)``, the bounds broadcast
    to ``t`` (tf.clip_by_value).

    Raises:
      ValueError: a bound's shape does not broadcast to ``t``'s (the result
        must keep ``t``'s shape, as in TF).
    """
    t = convert(read_if_variable(t))
    out = minimum(maximum(t, clip_value_min), clip_value_max)
    if shape_of(out) != shape_of(t):
        raise ValueError(
            f"clip_by_value: the bounds would change the shape {list(shape_of(t))} to {list(shape_of(out))}"
        )
    return out


def logical_xor(x: Any, y: Any, name: str | None = None) -> Any:
    """``x != y`` on bools (tf.math.logical_xor).

    Raises:
      TypeError: an operand is not bool.
    """
    x, y = unify([x, y], "logical_xor")
    if dtype_of(x) != "bool":
        raise TypeError(f"logical_xor: operands must be bool, got {dtype_of(x)}")
    shape = broadcast_shapes(shape_of(x), shape_of(y), op="logical_xor")
    (out,) = bind(hlo.CompareOp, [broadcast_to(x, shape), broadcast_to(y, shape)], comparison_direction="NE")
    return out


def floordiv(x: Any, y: Any, name: str | None = None) -> Any:
    """``floor(x / y)`` elementwise, rounding toward negative infinity for
    integers too (tf.math.floordiv, Python's ``//``).  Integers: StableHLO's
    truncating divide, minus one where the remainder is non-zero and the
    signs differ; floats: ``hlo.floor`` of the quotient.

    Raises:
      TypeError: bool or string operands, or mismatched dtypes.
    """
    x, y = unify([x, y], "floordiv")
    dt = dtype_of(x)
    if dt not in NUMERIC_DTYPES or dt == "bool":
        raise TypeError(f"floordiv: unsupported dtype {dt}")
    shape = broadcast_shapes(shape_of(x), shape_of(y), op="floordiv")
    x, y = broadcast_to(x, shape), broadcast_to(y, shape)
    (q,) = bind(hlo.DivideOp, [x, y])
    if is_float_dtype(dt):
        (out,) = bind(FloorOp, [q])
        return out
    (qy,) = bind(hlo.MultiplyOp, [q, y])
    (r,) = bind(hlo.SubtractOp, [x, qy])
    zero = broadcast_to(scalar(0, dt), shape)
    (r_nz,) = bind(hlo.CompareOp, [r, zero], comparison_direction="NE")
    (r_neg,) = bind(hlo.CompareOp, [r, zero], comparison_direction="LT")
    (y_neg,) = bind(hlo.CompareOp, [y, zero], comparison_direction="LT")
    (signs,) = bind(hlo.CompareOp, [r_neg, y_neg], comparison_direction="NE")
    (fix,) = bind(hlo.AndOp, [r_nz, signs])
    (q1,) = bind(hlo.SubtractOp, [q, broadcast_to(scalar(1, dt), shape)])
    (out,) = bind(hlo.SelectOp, [fix, q1, q])
    return out


def floormod(x: Any, y: Any, name: str | None = None) -> Any:
    """``x - floordiv(x, y) * y``: the remainder with the sign of ``y``
    (tf.math.floormod / tf.math.mod, Python's ``%``)."""
    x, y = unify([x, y], "floormod")
    shape = broadcast_shapes(shape_of(x), shape_of(y), op="floormod")
    x, y = broadcast_to(x, shape), broadcast_to(y, shape)
    (qy,) = bind(hlo.MultiplyOp, [floordiv(x, y), y])
    (out,) = bind(hlo.SubtractOp, [x, qy])
    return out


mod = floormod


def _reduce(kind: str, init: Any, x: Any, axis: Any, keepdims: bool, op: str, dtypes: tuple[str, ...]) -> Any:
    x = convert(read_if_variable(x))
    dt = dtype_of(x)
    if dt not in dtypes:
        raise TypeError(f"{op}: unsupported dtype {dt}; expected one of {', '.join(dtypes)}")
    shape = shape_of(x)
    axes = normalize_axes(axis, len(shape), op)
    (out,) = bind(hlo.ReduceOp, [x, scalar(init, dt)], computation=kind, dimensions=axes)
    if keepdims:
        out = reshape(out, tuple(1 if i in axes else n for i, n in enumerate(shape)))
    return out


def reduce_prod(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Any:
    """Product over ``axis`` (all axes when None) (tf.math.reduce_prod;
    StableHLO reduce with multiply); 1 over zero elements."""
    return _reduce(
        "mul", 1, input_tensor, axis, keepdims, "reduce_prod", ("float32", "float64", "int32", "int64", "complex64")
    )


def reduce_any(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Any:
    """Logical or over ``axis`` of a bool tensor (tf.math.reduce_any); False over zero elements."""
    return _reduce("or", False, input_tensor, axis, keepdims, "reduce_any", ("bool",))


def reduce_all(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Any:
    """Logical and over ``axis`` of a bool tensor (tf.math.reduce_all); True over zero elements."""
    return _reduce("and", True, input_tensor, axis, keepdims, "reduce_all", ("bool",))


__all__ = [
    "clip_by_value",
    "floordiv",
    "floormod",
    "logical_xor",
    "mod",
    "reduce_all",
    "reduce_any",
    "reduce_prod",
    "square",
]
