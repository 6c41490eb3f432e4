"""TF's tensor constructors and static shape queries: ``tf.zeros``,
``tf.ones``, ``tf.fill``, ``tf.zeros_like``, ``tf.ones_like``, ``tf.range``,
``tf.size`` and ``tf.shape``.

Shapes are static in xtpu, so each is a ``hlo.constant`` (broadcast with
``hlo.broadcast_in_dim``) or an ``hlo.iota``; eagerly the same ops run on
numpy.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, bind, convert, read_if_variable
from xtpu.dialects import hlo
from xtpu.dialects.dynamic_shapes import GetDimensionSizeOp
from xtpu.dialects.tensor_spec import is_float_dtype
from xtpu.ops.array_ops import concat, reshape
from xtpu.ops.core import broadcast_to, dtype_name, dtype_of, scalar, shape_of
from xtpu.ops.math_ops import cast


def _static_shape(shape: Any, op: str) -> tuple[int, ...]:
    if isinstance(shape, Tensor):
        raise TypeError(f"{op}: the shape must be static (Python ints or a concrete array), not a traced tensor")
    dims = (
        tuple(int(d) for d in np.atleast_1d(np.asarray(shape, dtype=np.int64)))
        if np.ndim(shape) or not np.isscalar(shape)
        else (int(shape),)
    )
    if any(d < 0 for d in dims):
        raise ValueError(f"{op}: dimensions must be non-negative, got {list(dims)}")
    return dims


def fill(dims: Any, value: Any, name: str | None = None) -> Any:
    """A tensor of shape ``dims`` filled with the scalar ``value``, of
    ``value``'s dtype (Python floats float32, ints int32) (tf.fill).

    Raises:
      ValueError: ``value`` is not a scalar.
    """
    v = convert(read_if_variable(value))
    if shape_of(v) != ():
        raise ValueError(f"fill: value must be a scalar, got shape {list(shape_of(v))}")
    return broadcast_to(v, _static_shape(dims, "fill"))


def zeros(shape: Any, dtype: Any = "float32", name: str | None = None) -> Any:
    """Zeros of ``shape`` and ``dtype`` (tf.zeros; default float32)."""
    dt = dtype_name(dtype)
    return broadcast_to(scalar(False if dt == "bool" else 0, dt), _static_shape(shape, "zeros"))


def ones(shape: Any, dtype: Any = "float32", name: str | None = None) -> Any:
    """Ones of ``shape`` and ``dtype`` (tf.ones; default float32)."""
    dt = dtype_name(dtype)
    return broadcast_to(scalar(True if dt == "bool" else 1, dt), _static_shape(shape, "ones"))


def zeros_like(input: Any, dtype: Any = None, name: str | None = None) -> Any:  # noqa: A002 - TF's name
    """Zeros of ``input``'s shape and (by default) dtype (tf.zeros_like)."""
    x = convert(read_if_variable(input))
    return zeros(shape_of(x), dtype or dtype_of(x))


def ones_like(input: Any, dtype: Any = None, name: str | None = None) -> Any:  # noqa: A002 - TF's name
    """Ones of ``input``'s shape and (by default) dtype (tf.ones_like)."""
    x = convert(read_if_variable(input))
    return ones(shape_of(x), dtype or dtype_of(x))


def range(start: Any, limit: Any = None, delta: Any = 1, dtype: Any = None, name: str | None = None) -> Any:  # noqa: A001
    """``[start, start + delta, ...)`` up to ``limit`` excluded (tf.range;
    StableHLO iota).  ``range(n)`` is ``range(0, n)``.  The dtype is
    ``dtype``, else float32 when an argument is a float, else int32 (TF's
    inference); the arguments must be static.

    Raises:
      ValueError: ``delta`` is 0; TypeError: a traced argument.
    """
    if limit is None:
        start, limit = 0, start
    for v in (start, limit, delta):
        if isinstance(v, Tensor):
            raise TypeError("range: start, limit and delta must be static values inside a replicated computation")
    vals = [np.asarray(v) for v in (start, limit, delta)]
    if dtype is None:
        dt = (
            "float32"
            if any(v.dtype.kind == "f" for v in vals)
            else (
                "int64"
                if any(v.dtype == np.int64 and not isinstance(x, int) for v, x in zip(vals, (start, limit, delta)))
                else "int32"
            )
        )
    else:
        dt = dtype_name(dtype)
    s, lim, d = (float(v) if is_float_dtype(dt) else int(v) for v in vals)
    if d == 0:
        raise ValueError("range: delta must not be 0")
    n = max(int(np.ceil((lim - s) / d)), 0)
    (iota,) = bind(hlo.IotaOp, [], iota_dimension=0, shape=(n,), dtype=dt)
    out = iota
    if d != 1:
        (out,) = bind(hlo.MultiplyOp, [out, broadcast_to(scalar(d, dt), (n,))])
    if s != 0:
        (out,) = bind(hlo.AddOp, [out, broadcast_to(scalar(s, dt), (n,))])
    return out


def size(input: Any, out_type: Any = "int32", name: str | None = None) -> Any:  # noqa: A002
    """The number of elements, a scalar of ``out_type`` (tf.size); inside
    ``replicate(..., maximum_shapes=...)`` each replica's real count."""
    x = convert(read_if_variable(input))
    real = real_sizes(x, dtype_name(out_type))
    if real is not None:  # padded by replicate's maximum_shapes: the real count
        out = scalar(1, dtype_name(out_type))
        for n in real:
            out = out * n
        return out
    return scalar(int(np.prod(shape_of(x), dtype=np.int64)), dtype_name(out_type))


def shape(input: Any, out_type: Any = "int32", name: str | None = None) -> Any:  # noqa: A002
    """The shape as a 1-D tensor of ``out_type`` (tf.shape): the static
    shape, or inside ``replicate(..., maximum_shapes=...)`` each replica's
    real sizes."""
    x = convert(read_if_variable(input))
    real = real_sizes(x, dtype_name(out_type))
    if real:  # padded by replicate's maximum_shapes: the real sizes
        return concat([reshape(n, [1]) for n in real], axis=0)
    return convert(np.asarray(shape_of(x), dtype=np.dtype(dtype_name(out_type))).reshape(len(shape_of(x))))


def real_sizes(x: Any, dtype: str) -> list[Any] | None:
    """Inside a trace whose inputs ``maximum_shapes`` padded: each
    dimension's real size of the traced tensor ``x`` as a ``dtype`` scalar
    (``hlo.get_dimension_size``; TF's ``tf.shape`` is dynamic there).
    None otherwise: the static shape is the real one."""
    if not (isinstance(x, Tensor) and x.trace.padded):
        return None
    return [cast(bind(GetDimensionSizeOp, [x], dimension=d)[0], dtype) for d in builtins.range(len(x.shape))]


__all__ = ["fill", "ones", "ones_like", "range", "shape", "size", "zeros", "zeros_like"]
