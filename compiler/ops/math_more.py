"""TF 2's remaining ``tf.math`` ops: elementwise (``sign``, ``floor``,
``ceil``, ``round``, ``rsqrt``, ``log1p``, ``erf``, ``sin``, ``cos``,
``is_finite``, ``reciprocal``, ``squared_difference``), ``add_n``,
``cumsum``, the reductions ``reduce_logsumexp``, ``reduce_variance``,
``reduce_std``, ``count_nonzero``, the norms ``norm``, ``l2_normalize``,
``clip_by_norm`` and ``clip_by_global_norm``, and ``linalg.svd`` (one
``hlo.svd``, :mod:`xtpu.dialects.hlo_linalg`, which the matrix 2-norm takes
its largest singular value from).

The elementwise ops are one ``hlo`` op each (:mod:`xtpu.dialects.hlo_math`,
:mod:`xtpu.dialects.hlo_rounding`); the rest are built from hlo ops the way
TF's Python builds them (``math_ops.py``, ``clip_ops.py``, ``nn_impl.py``),
so their gradients are TF's: ``reduce_logsumexp`` stops the gradient at its
shift, ``clip_by_global_norm`` scales by ``clip_norm * min(1 / norm,
1 / clip_norm)``.  Semantics, defaults and errors are TF 2.21's; the test
data of ``test_tf_reference_ops.py`` come from TF itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, bind, convert, read_if_variable
from xtpu.dialects import hlo
from xtpu.dialects.autodiff import StopGradientOp
from xtpu.dialects.hlo_linalg import SvdOp
from xtpu.dialects.hlo_math import (
    CeilOp,
    CosineOp,
    ErfOp,
    IsFiniteOp,
    LogPlusOneOp,
    ReverseOp,
    RoundNearestEvenOp,
    RsqrtOp,
    SignOp,
    SineOp,
)
from xtpu.dialects.hlo_rounding import FloorOp
from xtpu.ops import math_ops as M
from xtpu.ops.array_ops import reshape, transpose
from xtpu.ops.core import broadcast_to, dtype_name, dtype_of, elementwise, normalize_axes, scalar, shape_of, unify

FLOATS = hlo.FLOATS
NUMBERS = hlo.NUMERIC
WITH_COMPLEX = FLOATS + hlo.COMPLEX  # TF defines these on complex64 too


def _value(x: Any) -> Any:
    return convert(read_if_variable(x))


def _unary(op_cls: type, x: Any, op: str, dtypes: tuple[str, ...] = FLOATS) -> Any:
    x = _value(x)
    if dtype_of(x) not in dtypes:
        raise TypeError(f"{op}: unsupported dtype {dtype_of(x)}; expected one of {', '.join(dtypes)}")
    (out,) = bind(op_cls, [x])
    return out


def stop_gradient(x: Any) -> Any:
    (out,) = bind(StopGradientOp, [_value(x)])
    return out


# --------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------


def sign(x: Any, name: str | None = None) -> Any:
    """-1, 0 or 1 by the sign of ``x`` (NaN stays NaN) (tf.math.sign;
    StableHLO sign).  Its gradient is zero, as TF's.

    Raises:
      TypeError: bool or string ``x``.
    """
    return _unary(SignOp, x, "sign", NUMBERS + hlo.COMPLEX)


def floor(x: Any, name: str | None = None) -> Any:
    """Largest integer not above ``x``, for floats (tf.math.floor; StableHLO
    floor).  Not differentiable (TF's gradient is None).

    Raises:
      TypeError: a non-float ``x`` (TF has no integer Floor kernel).
    """
    return _unary(FloorOp, x, "floor")


def ceil(x: Any, name: str | None = None) -> Any:
    """Smallest integer not below ``x``, for floats (tf.math.ceil; StableHLO
    ceil).  Not differentiable.

    Raises:
      TypeError: a non-float ``x``.
    """
    return _unary(CeilOp, x, "ceil")


def round(x: Any, name: str | None = None) -> Any:  # noqa: A001 - TF's name
    """Round half to even, ``round(2.5) == 2`` (tf.math.round, banker's
    rounding; StableHLO round_nearest_even); integers are returned as they
    are.  Not differentiable.

    Raises:
      TypeError: bool or string ``x``.
    """
    x = _value(x)
    if dtype_of(x) in hlo.INTS:
        return x
    return _unary(RoundNearestEvenOp, x, "round")


def rsqrt(x: Any, name: str | None = None) -> Any:
    """``1 / sqrt(x)`` for floats (tf.math.rsqrt; StableHLO rsqrt)."""
    return _unary(RsqrtOp, x, "rsqrt", WITH_COMPLEX)


def log1p(x: Any, name: str | None = None) -> Any:
    """``log(1 + x)``, accurate for small ``x`` (tf.math.log1p; StableHLO
    log_plus_one)."""
    return _unary(LogPlusOneOp, x, "log1p", WITH_COMPLEX)


def erf(x: Any, name: str | None = None) -> Any:
    """The Gauss error function for floats (tf.math.erf; XLA's erf, see
    ``hlo.erf``)."""
    return _unary(ErfOp, x, "erf")


def sin(x: Any, name: str | None = None) -> Any:
    """Sine for floats (tf.math.sin; StableHLO sine)."""
    return _unary(SineOp, x, "sin", WITH_COMPLEX)


def cos(x: Any, name: str | None = None) -> Any:
    """Cosine for floats (tf.math.cos; StableHLO cosine)."""
    return _unary(CosineOp, x, "cos", WITH_COMPLEX)


def is_finite(x: Any, name: str | None = None) -> Any:
    """A bool tensor, True where ``x`` is neither inf nor NaN
    (tf.math.is_finite; StableHLO is_finite).

    Raises:
      TypeError: a non-float ``x`` (TF's IsFinite takes floats only).
    """
    return _unary(IsFiniteOp, x, "is_finite")


def reciprocal(x: Any, name: str | None = None) -> Any:
    """``1 / x`` elementwise, in ``x``'s dtype (tf.math.reciprocal; integers
    divide with truncation, as TF's Reciprocal kernel)."""
    x = _value(x)
    if dtype_of(x) not in NUMBERS + hlo.COMPLEX:
        raise TypeError(f"reciprocal: unsupported dtype {dtype_of(x)}")
    return elementwise(hlo.DivideOp, [scalar(1, dtype_of(x)), x], "reciprocal")


def squared_difference(x: Any, y: Any, name: str | None = None) -> Any:
    """``(x - y) * (x - y)`` elementwise with broadcasting
    (tf.math.squared_difference)."""
    d = M.subtract(x, y)
    return M.multiply(d, d)


def add_n(inputs: Any, name: str | None = None) -> Any:
    """The elementwise sum of a list of tensors of one shape and dtype
    (tf.math.add_n).

    Raises:
      ValueError: ``inputs`` is not a non-empty list or tuple, or its tensors
        differ in shape (TF: "inputs must be a list of at least one
        Tensor/IndexedSlices with the same dtype and shape").
      TypeError: the tensors differ in dtype.
    """
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise ValueError(
            "add_n: inputs must be a list of at least one Tensor/IndexedSlices with the same dtype and shape"
        )
    values = unify([read_if_variable(v) for v in inputs], "add_n")
    s = shape_of(values[0])
    for v in values[1:]:
        if shape_of(v) != s:
            raise ValueError(
                f"add_n: inputs must have the same shape, got {list(s)} and {list(shape_of(v))} "
                "(TF: a list of at least one Tensor with the same dtype and shape)"
            )
    out = values[0]
    for v in values[1:]:
        (out,) = bind(hlo.AddOp, [out, v])
    return out


# --------------------------------------------------------------------------
# Scans and reductions
# --------------------------------------------------------------------------


def _shift(x: Any, axis: int, k: int) -> Any:
    """``x`` moved ``k`` places up ``axis`` with zeros coming in:
    ``out[i] = x[i - k]``."""
    s = shape_of(x)
    r = len(s)
    limit = list(s)
    limit[axis] = s[axis] - k
    (part,) = bind(hlo.SliceOp, [x], start_indices=[0] * r, limit_indices=limit, strides=[1] * r)
    low = [0] * r
    low[axis] = k
    zero = scalar(0, dtype_of(x))
    (out,) = bind(hlo.PadOp, [part, zero], edge_padding_low=low, edge_padding_high=[0] * r, interior_padding=[0] * r)
    return out


def cumsum(x: Any, axis: Any = 0, exclusive: bool = False, reverse: bool = False, name: str | None = None) -> Any:
    """Cumulative sum along ``axis`` (tf.math.cumsum): ``exclusive`` leaves
    out each element itself (the first result is 0), ``reverse`` sums from
    the end.  Built as a scan of ``ceil(log2 n)`` steps, each a shifted copy
    (hlo.slice + hlo.pad) added (Hillis and Steele), so it costs O(n log n)
    and its gradient is the opposite cumsum, as TF's _CumsumGrad.

    Raises:
      TypeError: ``axis`` is a tensor, or ``x`` is bool or a string.
      ValueError: ``axis`` out of range.
    """
    x = _value(x)
    if isinstance(axis, Tensor):
        raise TypeError("cumsum: axis must be static")
    if dtype_of(x) not in NUMBERS:
        raise TypeError(f"cumsum: unsupported dtype {dtype_of(x)}")
    s = shape_of(x)
    if not s:
        raise ValueError("cumsum: x must have rank >= 1")
    (ax,) = normalize_axes(axis, len(s), "cumsum")
    n = s[ax]
    if reverse:
        (x,) = bind(ReverseOp, [x], dimensions=(ax,))
    if exclusive and n:
        x = _shift(x, ax, 1)
    k = 1
    while k < n:
        (x,) = bind(hlo.AddOp, [x, _shift(x, ax, k)])
        k *= 2
    if reverse:
        (x,) = bind(ReverseOp, [x], dimensions=(ax,))
    return x


def _float_input(x: Any, op: str) -> Any:
    x = _value(x)
    if dtype_of(x) not in FLOATS:
        raise TypeError(f"{op}: input must be either real or complex, got {dtype_of(x)}")
    return x


def reduce_logsumexp(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Any:
    """``log(sum(exp(x)))`` over ``axis``, computed as ``log(sum(exp(x - m)))
    + m`` with ``m`` the maximum where it is finite and 0 elsewhere, the
    gradient stopped at ``m`` (tf.math.reduce_logsumexp): the gradient is
    the softmax of ``x`` over ``axis``."""
    x = _value(input_tensor)
    raw_max = M.reduce_max(x, axis=axis, keepdims=True)
    finite = is_finite(raw_max)
    (my_max,) = bind(hlo.SelectOp, [finite, raw_max, broadcast_to(scalar(0, dtype_of(x)), shape_of(raw_max))])
    my_max = stop_gradient(my_max)
    shifted = M.subtract(x, my_max)
    result = M.log(M.reduce_sum(M.exp(shifted), axis=axis, keepdims=keepdims))
    if not keepdims:
        my_max = reshape(my_max, shape_of(result))
    return M.add(result, my_max)


def reduce_variance(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Any:
    """The population variance ``mean((x - mean(x))**2)`` over ``axis``
    (tf.math.reduce_variance).

    Raises:
      TypeError: a non-float input (TF: "Input must be either real or complex").
    """
    x = _float_input(input_tensor, "reduce_variance")
    means = M.reduce_mean(x, axis=axis, keepdims=True)
    return M.reduce_mean(squared_difference(x, means), axis=axis, keepdims=keepdims)


def reduce_std(input_tensor: Any, axis: Any = None, keepdims: bool = False, name: str | None = None) -> Any:
    """``sqrt(reduce_variance(x))`` (tf.math.reduce_std).

    Raises:
      TypeError: a non-float input.
    """
    x = _float_input(input_tensor, "reduce_std")
    return M.sqrt(reduce_variance(x, axis=axis, keepdims=keepdims))


def count_nonzero(
    input: Any,  # noqa: A002 - TF's name
    axis: Any = None,
    keepdims: Any = None,
    dtype: Any = "int64",
    name: str | None = None,
) -> Any:
    """The number of non-zero (for bools: True) elements over ``axis``, of
    ``dtype`` (default int64) (tf.math.count_nonzero)."""
    x = _value(input)
    zero = scalar(False if dtype_of(x) == "bool" else 0, dtype_of(x))
    nz = M.cast(M.not_equal(x, zero), dtype_name(dtype))
    return M.reduce_sum(nz, axis=axis, keepdims=bool(keepdims))


# --------------------------------------------------------------------------
# Norms and clipping
# --------------------------------------------------------------------------


def l2_normalize(x: Any, axis: Any = None, epsilon: float = 1e-12, name: str | None = None, dim: Any = None) -> Any:
    """``x * rsqrt(max(sum(x**2, axis), epsilon))`` (tf.math.l2_normalize,
    also tf.nn / tf.linalg); ``dim`` is the deprecated name of ``axis``."""
    if dim is not None:
        if axis is not None:
            raise ValueError("l2_normalize: cannot specify both 'axis' and 'dim'")
        axis = dim
    x = _value(x)
    square_sum = M.reduce_sum(M.multiply(x, x), axis=axis, keepdims=True)
    inv = rsqrt(M.maximum(square_sum, scalar(epsilon, dtype_of(x))))
    return M.multiply(x, inv)


def norm(tensor: Any, ord: Any = "euclidean", axis: Any = None, keepdims: Any = None, name: str | None = None) -> Any:  # noqa: A002
    """The vector or matrix norm of ``tensor`` (tf.norm / tf.linalg.norm).

    ``axis`` None (the whole tensor as a vector), an int (vectors along it)
    or a pair (matrices).  Vector ``ord``: ``'euclidean'`` / 2, 1,
    ``np.inf`` or any real ``p > 0`` (``sum(|x|**p)**(1/p)``); matrix
    ``ord``: ``'euclidean'`` / ``'fro'``, 1 (largest column sum),
    ``np.inf`` (largest row sum) or 2 (the largest singular value, from an
    ``hlo.svd`` as TF takes it; its gradient ``u1 v1^T``).  Float inputs;
    the result has the input's dtype and shape without ``axis`` (kept as
    size 1 with ``keepdims``).

    Raises:
      TypeError: a non-float input.
      ValueError: an ``ord`` TF does not accept for that ``axis`` (TF's
        messages), a bad ``axis``.
    """
    x = _float_input(tensor, "norm")
    r = len(shape_of(x))
    keepdims = bool(keepdims)
    is_matrix = isinstance(axis, (tuple, list)) and len(axis) == 2
    if axis is not None and not is_matrix and not isinstance(axis, (int, np.integer)):
        if isinstance(axis, (tuple, list)) and len(axis) == 1:
            axis = int(axis[0])
        else:
            raise ValueError(f"'axis' must be None, an integer, or a tuple of 2 unique integers, got {axis}")
    if is_matrix:
        a0, a1 = (int(a) % max(r, 1) for a in axis)
        if a0 == a1:
            raise ValueError(f"'axis' must be None, an integer, or a tuple of 2 unique integers, got {axis}")
        if ord not in ("euclidean", "fro", 1, 2, np.inf):
            raise ValueError(f"'ord' must be a supported matrix norm in ['euclidean', 'fro', 1, 2, inf], got {ord}")
        if ord in ("euclidean", "fro"):
            return M.sqrt(M.reduce_sum(M.multiply(x, x), axis=(a0, a1), keepdims=keepdims))
        if ord == 2:
            return _matrix_2_norm(x, a0, a1, keepdims)
        # 1: max over columns of the column sums; inf: max over rows of the row sums.
        summed, other = (a0, a1) if ord == 1 else (a1, a0)
        sums = M.reduce_sum(M.abs(x), axis=summed, keepdims=True)
        out = M.reduce_max(sums, axis=other, keepdims=True)
        if not keepdims:
            out = reshape(out, [n for i, n in enumerate(shape_of(x)) if i not in (a0, a1)])
        return out
    if ord == "fro" or (isinstance(ord, str) and ord != "euclidean"):
        raise ValueError(f"'ord' must be a supported vector norm, got {ord}")
    if not isinstance(ord, str) and not (ord == np.inf or (np.isreal(ord) and float(ord) > 0)):
        raise ValueError(f"'ord' must be a supported vector norm, got {ord}")
    if ord in ("euclidean", 2):
        return M.sqrt(M.reduce_sum(M.multiply(x, x), axis=axis, keepdims=keepdims))
    if ord == np.inf:
        return M.reduce_max(M.abs(x), axis=axis, keepdims=keepdims)
    if ord == 1:
        return M.reduce_sum(M.abs(x), axis=axis, keepdims=keepdims)
    p = float(ord)
    total = M.reduce_sum(M.pow(M.abs(x), scalar(p, dtype_of(x))), axis=axis, keepdims=keepdims)
    return M.pow(total, scalar(1.0 / p, dtype_of(x)))


def _matrix_2_norm(x: Any, a0: int, a1: int, keepdims: bool) -> Any:
    """TF's matrix 2-norm (``linalg_ops.norm``): the matrices moved to the
    last two dimensions (``a0`` rows, ``a1`` columns), the largest absolute
    singular value of each (``reduce_max``: tied maxima share the
    gradient), put back where the two axes were."""
    shape = shape_of(x)
    others = [i for i in range(len(shape)) if i not in (a0, a1)]
    (s,) = bind(SvdOp, [transpose(x, others + [a0, a1])], compute_uv=False)
    top = M.reduce_max(M.abs(s), axis=-1, keepdims=True)
    kept = [1 if i in (a0, a1) else n for i, n in enumerate(shape)]
    return reshape(top, [shape[i] for i in others] if not keepdims else kept)


def svd(tensor: Any, full_matrices: bool = False, compute_uv: bool = True, name: str | None = None) -> Any:
    """The singular value decomposition of the matrices in the last two
    dimensions of ``tensor`` (tf.linalg.svd): ``s`` (shape ``B + [K]``,
    ``K = min(M, N)``, descending), and with ``compute_uv`` also ``u``
    (``B + [M, K]``) and ``v`` (``B + [N, K]``), ``tensor = u @ diag(s) @
    v^T``; returned as ``s`` or ``(s, u, v)``.  One ``hlo.svd`` (LAPACK's
    gesdd; the signs of a pair of singular vectors are LAPACK's, as TF's
    are Eigen's).  Gradient: TF's ``_SvdGrad``.

    Raises:
      TypeError: a non-float input.
      ValueError: a tensor of rank below 2.
      NotImplementedError: ``full_matrices=True``.
    """
    x = _float_input(tensor, "svd")
    if len(shape_of(x)) < 2:
        raise ValueError(f"svd: input must have rank >= 2, got shape {list(shape_of(x))}")
    if full_matrices:
        raise NotImplementedError("svd: full_matrices=True is not supported (xtpu computes the thin SVD)")
    out = bind(SvdOp, [x], compute_uv=bool(compute_uv))
    return tuple(out) if compute_uv else out[0]


def clip_by_norm(t: Any, clip_norm: Any, axes: Any = None, name: str | None = None) -> Any:
    """``t * clip_norm / max(l2norm(t), clip_norm)``, the L2 norm over
    ``axes`` (all when None) (tf.clip_by_norm); a zero ``t`` stays zero with
    a finite gradient (TF's safe square root)."""
    t = _float_input(t, "clip_by_norm")
    dt = dtype_of(t)
    l2sum = M.reduce_sum(M.multiply(t, t), axis=axes, keepdims=True)
    pred = M.greater(l2sum, scalar(0, dt))
    ones = broadcast_to(scalar(1, dt), shape_of(l2sum))
    (l2sum_safe,) = bind(hlo.SelectOp, [pred, l2sum, ones])
    (l2norm,) = bind(hlo.SelectOp, [pred, M.sqrt(l2sum_safe), l2sum])
    clip = convert(clip_norm, dt) if not isinstance(clip_norm, (int, float)) else scalar(clip_norm, dt)
    intermediate = M.multiply(t, clip)
    return M.divide(intermediate, M.maximum(l2norm, clip))


def global_norm(t_list: Any, name: str | None = None) -> Any:
    """``sqrt(sum of sum(t**2))`` over the tensors of ``t_list``, None
    entries skipped (tf.linalg.global_norm).

    Raises:
      TypeError: ``t_list`` is not a sequence.
    """
    if not isinstance(t_list, (list, tuple)):
        raise TypeError("global_norm: t_list should be a sequence")
    values = [_value(t) for t in t_list if t is not None]
    if not values:
        return scalar(0.0, "float32")
    half = [M.divide(M.reduce_sum(M.multiply(v, v)), scalar(2, dtype_of(v))) for v in values]
    total = add_n(half)
    return M.sqrt(M.multiply(total, scalar(2, dtype_of(total))))


def clip_by_global_norm(t_list: Any, clip_norm: Any, use_norm: Any = None, name: str | None = None) -> Any:
    """Scale every tensor of ``t_list`` by ``clip_norm / max(global_norm,
    clip_norm)`` (tf.clip_by_global_norm).  Returns ``(list_clipped,
    global_norm)``; None entries stay None; an infinite norm makes every
    value NaN, as TF's.

    Raises:
      TypeError: ``t_list`` is not a sequence (TF's message).
    """
    if not isinstance(t_list, (list, tuple)) or isinstance(t_list, str):
        raise TypeError(f"`t_list` should be a sequence of tensors. Received {type(t_list)}.")
    if use_norm is None:
        use_norm = global_norm(t_list)
    use_norm = _value(use_norm)
    dt = dtype_of(use_norm)
    one = scalar(1.0, dt)
    clip = scalar(clip_norm, dt) if isinstance(clip_norm, (int, float)) else _value(clip_norm)
    scale = M.multiply(clip, M.minimum(M.divide(one, use_norm), M.divide(one, clip)))
    scale = M.add(scale, M.subtract(use_norm, use_norm))  # NaN when the norm is inf
    clipped = [None if t is None else M.multiply(_value(t), M.cast(scale, dtype_of(_value(t)))) for t in t_list]
    return clipped, use_norm


__all__ = [
    "add_n",
    "ceil",
    "clip_by_global_norm",
    "clip_by_norm",
    "cos",
    "count_nonzero",
    "cumsum",
    "erf",
    "floor",
    "global_norm",
    "is_finite",
    "l2_normalize",
    "log1p",
    "norm",
    "reciprocal",
    "reduce_logsumexp",
    "reduce_std",
    "reduce_variance",
    "round",
    "rsqrt",
    "sign",
    "sin",
    "squared_difference",
]
