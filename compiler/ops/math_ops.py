"""``xtpu.math``: TF's math ops on tensors, eager or traced.

Each function documents TF's semantics (``tf.math.*``) and lowers to the
StableHLO op of the same meaning.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.tracing import bind, convert, current_trace
from xtpu.dialects import hlo
from xtpu.dialects.dynamic_shapes import GetDimensionSizeOp
from xtpu.dialects.hlo_complex import ComplexOp, ImagOp, RealOp
from xtpu.dialects.tensor_spec import is_complex_dtype, is_float_dtype
from xtpu.ops.core import (
    broadcast_shapes,
    broadcast_to,
    dot_general,
    dtype_name,
    dtype_of,
    elementwise,
    normalize_axes,
    scalar,
    shape_of,
    unify,
)


def add(x: Any, y: Any, name: str | None = None) -> Any:
    """``x + y`` elementwise with broadcasting (tf.math.add; StableHLO add)."""
    return elementwise(hlo.AddOp, [x, y], "add")


def subtract(x: Any, y: Any, name: str | None = None) -> Any:
    """``x - y`` elementwise (tf.math.subtract; StableHLO subtract)."""
    return elementwise(hlo.SubtractOp, [x, y], "subtract")


def multiply(x: Any, y: Any, name: str | None = None) -> Any:
    """``x * y`` elementwise (tf.math.multiply; StableHLO multiply)."""
    return elementwise(hlo.MultiplyOp, [x, y], "multiply")


def divide(x: Any, y: Any, name: str | None = None) -> Any:
    """``x / y``, true division (tf.math.divide = tf.math.truediv): int32 and
    int64 operands are converted to float64 first, as TF does."""
    x, y = unify([x, y], "divide")
    if dtype_of(x) in ("int32", "int64"):
        x, y = cast(x, "float64"), cast(y, "float64")
    elif dtype_of(x) == "bool":
        raise TypeError("divide: bool tensors cannot be divided")
    return elementwise(hlo.DivideOp, [x, y], "divide")


truediv = divide


def negative(x: Any, name: str | None = None) -> Any:
    """``-x`` (tf.math.negative; StableHLO negate)."""
    (out,) = bind(hlo.NegateOp, [convert(x)])
    return out


def _unary(op_cls, x, name):
    x = convert(x)
    (out,) = bind(op_cls, [x])
    return out


def abs(x: Any, name: str | None = None) -> Any:  # noqa: A001 - TF's name
    """``|x|`` (tf.math.abs; StableHLO abs); of a complex64 ``x`` its
    modulus ``sqrt(re**2 + im**2)`` as a float32 tensor (without overflow)."""
    return _unary(hlo.AbsOp, x, "abs")


def real(input: Any, name: str | None = None) -> Any:  # noqa: A002 - TF's name
    """The real part of a complex64 tensor, float32 (tf.math.real; StableHLO
    real); a real tensor is returned as it is, as in TF."""
    x = convert(input)
    if not is_complex_dtype(dtype_of(x)):
        return x
    (out,) = bind(RealOp, [x])
    return out


def imag(input: Any, name: str | None = None) -> Any:  # noqa: A002 - TF's name
    """The imaginary part of a complex64 tensor, float32 (tf.math.imag;
    StableHLO imag); zeros of a real tensor's shape and dtype, as in TF."""
    x = convert(input)
    if not is_complex_dtype(dtype_of(x)):
        return broadcast_to(scalar(0, dtype_of(x)), shape_of(x))
    (out,) = bind(ImagOp, [x])
    return out


def complex(real: Any, imag: Any, name: str | None = None) -> Any:  # noqa: A001 - TF's name
    """The complex64 tensor ``real + imag * 1j`` from two float32 tensors,
    broadcast against each other (tf.complex; StableHLO complex).  The parts
    are kept bit for bit (``complex(inf, 0)`` is ``(inf, 0)``, not the NaN
    that ``inf + 0 * 1j`` would make).

    Raises:
      TypeError: the parts are not both float32 (TF's float64 parts make a
        complex128, which xtpu does not have).
    """
    re, im = unify([real, imag], "complex")
    if dtype_of(re) != "float32":
        raise TypeError(f"complex: the real and imaginary parts must be float32 (making complex64), got {dtype_of(re)}")
    shape = broadcast_shapes(shape_of(re), shape_of(im), op="complex")
    (out,) = bind(ComplexOp, [broadcast_to(re, shape), broadcast_to(im, shape)])
    return out


def conj(x: Any, name: str | None = None) -> Any:
    """The complex conjugate of a complex64 tensor, ``re - im * 1j``
    (tf.math.conj); XLA's lowering: ``complex(real(x), negate(imag(x)))``,
    so -0.0 and NaN parts keep their bits (the imaginary part's sign
    flipped).  A real tensor is returned as it is, as in TF.

    Raises:
      TypeError: a string or bool tensor (TF's Conj takes numbers).
    """
    x = convert(x)
    dt = dtype_of(x)
    if dt in ("string", "bool"):
        raise TypeError(f"conj: unsupported dtype {dt}")
    if not is_complex_dtype(dt):
        return x
    (re,) = bind(RealOp, [x])
    (im,) = bind(ImagOp, [x])
    (neg,) = bind(hlo.NegateOp, [im])
    (out,) = bind(ComplexOp, [re, neg])
    return out


def exp(x: Any, name: str | None = None) -> Any:
    """e**x for float tensors (tf.math.exp; StableHLO exponential)."""
    return _unary(hlo.ExpOp, x, "exp")


def log(x: Any, name: str | None = None) -> Any:
    """Natural log for float tensors (tf.math.log; StableHLO log)."""
    return _unary(hlo.LogOp, x, "log")


def sqrt(x: Any, name: str | None = None) -> Any:
    """Square root for float tensors (tf.math.sqrt; StableHLO sqrt)."""
    return _unary(hlo.SqrtOp, x, "sqrt")


def tanh(x: Any, name: str | None = None) -> Any:
    """Hyperbolic tangent for float tensors (tf.math.tanh; StableHLO tanh)."""
    return _unary(hlo.TanhOp, x, "tanh")


def sigmoid(x: Any, name: str | None = None) -> Any:
    """1 / (1 + e**-x) (tf.math.sigmoid; StableHLO logistic)."""
    return _unary(hlo.LogisticOp, x, "sigmoid")


def pow(x: Any, y: Any, name: str | None = None) -> Any:  # noqa: A001 - TF's name
    """``x ** y`` elementwise (tf.math.pow; StableHLO power)."""
    return elementwise(hlo.PowerOp, [x, y], "pow")


def maximum(x: Any, y: Any, name: str | None = None) -> Any:
    """Elementwise max with broadcasting (tf.math.maximum; StableHLO maximum)."""
    return elementwise(hlo.MaximumOp, [x, y], "maximum")


def minimum(x: Any, y: Any, name: str | None = None) -> Any:
    """Elementwise min with broadcasting (tf.math.minimum; StableHLO minimum)."""
    return elementwise(hlo.MinimumOp, [x, y], "minimum")


def _compare(direction: str, x: Any, y: Any, name: str) -> Any:
    x, y = unify([x, y], name)

    shape = broadcast_shapes(shape_of(x), shape_of(y), op=name)
    (out,) = bind(hlo.CompareOp, [broadcast_to(x, shape), broadcast_to(y, shape)], comparison_direction=direction)
    return out


def equal(x, y, name=None):
    """``x == y`` elementwise, a bool tensor (tf.math.equal)."""
    return _compare("EQ", x, y, "equal")


def not_equal(x, y, name=None):
    """``x != y`` elementwise (tf.math.not_equal)."""
    return _compare("NE", x, y, "not_equal")


def less(x, y, name=None):
    """``x < y`` elementwise (tf.math.less)."""
    return _compare("LT", x, y, "less")


def less_equal(x, y, name=None):
    """``x <= y`` elementwise (tf.math.less_equal)."""
    return _compare("LE", x, y, "less_equal")


def greater(x, y, name=None):
    """``x > y`` elementwise (tf.math.greater)."""
    return _compare("GT", x, y, "greater")


def greater_equal(x, y, name=None):
    """``x >= y`` elementwise (tf.math.greater_equal)."""
    return _compare("GE", x, y, "greater_equal")


def logical_and(x, y, name=None):
    """Elementwise and of bool tensors (tf.math.logical_and)."""
    return elementwise(hlo.AndOp, [x, y], "logical_and")


def logical_or(x, y, name=None):
    """Elementwise or of bool tensors (tf.math.logical_or)."""
    return elementwise(hlo.OrOp, [x, y], "logical_or")


def logical_not(x, name=None):
    """Elementwise not of a bool tensor (tf.math.logical_not)."""
    return _unary(hlo.NotOp, x, "logical_not")


def cast(x: Any, dtype: Any, name: str | None = None) -> Any:
    """Convert to ``dtype`` (tf.cast; StableHLO convert): float to int
    truncates toward zero, anything to bool is ``!= 0``."""
    dtype = dtype_name(dtype)
    x = convert(x)
    if dtype_of(x) == dtype:
        return x
    (out,) = bind(hlo.ConvertOp, [x], dtype=dtype)
    return out


# --------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------

_INIT = {
    "add": lambda dt: 0,
    "mul": lambda dt: 1,
    "max": lambda dt: -np.inf if is_float_dtype(dt) else (False if dt == "bool" else np.iinfo(dt).min),
    "min": lambda dt: np.inf if is_float_dtype(dt) else (True if dt == "bool" else np.iinfo(dt).max),
}


def _reduce(kind: str, x: Any, axis: Any, keepdims: bool, name: str) -> Any:
    x = convert(x)
    shape = shape_of(x)
    dt = dtype_of(x)
    if dt == "string":
        raise TypeError(f"{name}: cannot reduce a string tensor")
    if kind == "add" and dt == "bool":
        raise TypeError(f"{name}: cannot sum a bool tensor; cast it first")
    if kind in ("max", "min") and is_complex_dtype(dt):
        raise TypeError(f"{name}: unsupported dtype {dt} (complex numbers are not ordered; TF refuses it too)")
    axes = normalize_axes(axis, len(shape), name)
    init = scalar(_INIT[kind](dt), dt)
    (out,) = bind(hlo.ReduceOp, [x, init], computation=kind, dimensions=axes)
    if keepdims:
        kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
        (out,) = bind(hlo.ReshapeOp, [out], shape=kept)
    return out


def reduce_sum(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Any:
    """Sum over ``axis`` (all axes when None) (tf.math.reduce_sum; StableHLO reduce)."""
    return _reduce("add", input_tensor, axis, keepdims, "reduce_sum")


def reduce_max(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Any:
    """Max over ``axis`` (tf.math.reduce_max)."""
    return _reduce("max", input_tensor, axis, keepdims, "reduce_max")


def reduce_min(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Any:
    """Min over ``axis`` (tf.math.reduce_min)."""
    return _reduce("min", input_tensor, axis, keepdims, "reduce_min")


def reduce_mean(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Any:
    """Mean over ``axis`` (tf.math.reduce_mean); integer tensors use integer
    division, as in TF.  Over zero elements (a zero-size axis) the mean is
    TF's identity of its Mean kernel: NaN for floats (0 / 0) and 0 for
    integers and complex64, without a division by zero."""
    x = convert(input_tensor)
    shape = shape_of(x)
    axes = normalize_axes(axis, len(shape), "reduce_mean")
    count = int(np.prod([shape[a] for a in axes], dtype=np.int64)) if axes else 1
    total = reduce_sum(x, axis=axes, keepdims=keepdims)
    dt = dtype_of(x)
    tr = current_trace()
    if tr is not None and tr.padded and count:
        # Padded inputs (replicate's maximum_shapes): divide by the real
        # element count, as TF's Mean on a dynamic shape (tf2xla).
        n = None
        for a in axes:
            (size,) = bind(GetDimensionSizeOp, [x], dimension=a)
            size = cast(size, dt)
            n = size if n is None else elementwise(hlo.MultiplyOp, [n, size], "reduce_mean")
        if n is not None:
            return elementwise(hlo.DivideOp, [total, n], "reduce_mean")
    if count == 0:  # total is all zeros: 0 / 0 (TF 2.21 gives 0 for complex64, as for integers)
        if is_float_dtype(dt):
            return elementwise(hlo.AddOp, [total, scalar(np.nan, dt)], "reduce_mean")
        return total
    return elementwise(hlo.DivideOp, [total, scalar(count, dt)], "reduce_mean")


def matmul(
    a: Any,
    b: Any,
    transpose_a: bool = False,
    transpose_b: bool = False,
    adjoint_a: bool = False,
    adjoint_b: bool = False,
    a_is_sparse: bool = False,
    b_is_sparse: bool = False,
    output_type: Any = None,
    grad_a: bool = False,
    grad_b: bool = False,
    name: str | None = None,
) -> Any:
    """Matrix product of the last two dimensions, batched over the leading
    dimensions, which broadcast by numpy's rules (tf.linalg.matmul;
    StableHLO dot_general).  ``adjoint_*`` is ``transpose_*`` of the
    conjugate (for real tensors, ``transpose_*``); the ``*_is_sparse`` and
    ``grad_*`` hints are accepted and ignored.

    Shapes: a ``[..., M, K]``, b ``[..., K, N]`` -> ``[..., M, N]``, the
    batch shape the broadcast of the two.  A rank-2 ``b`` is not broadcast:
    ``[2, 4, 8, 16] @ [16, 8]`` is one product of ``[64, 16]`` by ``[16, 8]``.

    Raises:
      ValueError: an operand of rank below 2, batch dimensions that do not
        broadcast, inner dimensions that differ, or both transpose_a and
        adjoint_a (or _b) set.
      TypeError: the dtypes differ, or ``output_type`` is not theirs.

    bfloat16 / float16 operands multiply exactly and accumulate in float32,
    rounded once to their dtype (a TPU's MXU; see ``docs/dtypes.md``).
    """
    if transpose_a and adjoint_a or transpose_b and adjoint_b:
        raise ValueError("matmul: only one of transpose_a and adjoint_a (transpose_b and adjoint_b) can be True")
    transpose_a, transpose_b = bool(transpose_a or adjoint_a), bool(transpose_b or adjoint_b)
    a, b = unify([a, b], "matmul")
    if adjoint_a:
        a = conj(a)
    if adjoint_b:
        b = conj(b)
    if output_type is not None and dtype_name(output_type) != dtype_of(a):
        raise TypeError(f"matmul: output_type {dtype_name(output_type)} differs from the operands' {dtype_of(a)}")
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) < 2 or len(sb) < 2:
        raise ValueError(f"matmul: both operands need rank >= 2, got shapes {list(sa)} and {list(sb)}")
    ka = sa[-2] if transpose_a else sa[-1]
    kb = sb[-1] if transpose_b else sb[-2]
    if ka != kb:
        raise ValueError(
            f"matmul: Matrix size-incompatible: In[0]: {list(sa)}, In[1]: {list(sb)} "
            f"(inner dimensions {ka} and {kb}{', after transposes' if transpose_a or transpose_b else ''})"
        )
    lc = len(sa) - 2 if transpose_a else len(sa) - 1
    if len(sb) == 2 and len(sa) > 2 and not transpose_a:
        # [..., M, K] @ [K, N]: contract a's last dimension, no broadcast of b.
        return dot_general(
            a,
            b,
            lhs_batching_dimensions=(),
            rhs_batching_dimensions=(),
            lhs_contracting_dimensions=(lc,),
            rhs_contracting_dimensions=(1 if transpose_b else 0,),
        )
    batch_shape = broadcast_shapes(sa[:-2], sb[:-2], op="matmul")
    a = broadcast_to(a, batch_shape + sa[-2:])
    b = broadcast_to(b, batch_shape + sb[-2:])
    r = len(batch_shape) + 2
    batch = tuple(range(r - 2))
    return dot_general(
        a,
        b,
        lhs_batching_dimensions=batch,
        rhs_batching_dimensions=batch,
        lhs_contracting_dimensions=(r - 2 if transpose_a else r - 1,),
        rhs_contracting_dimensions=(r - 1 if transpose_b else r - 2,),
    )
