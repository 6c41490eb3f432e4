"""Shared rules of the Python op API: dtype names, weak values, broadcasting.

Dtypes follow TF: Python scalars (and lists of them) are *weak* and take
the dtype of the tensor they meet; tensors (traced tensors, results of xtpu
ops, numpy arrays of any rank and numpy scalars such as ``np.float64(0.5)``,
which carry their dtype as ``tf.convert_to_tensor`` keeps it) must have the
same dtype, else ``TypeError`` as in TF.  A numpy scalar is the same operand
as the 0-d array of its value, eagerly and traced.  Shapes broadcast with
numpy's rules; the traced IR gets explicit ``hlo.broadcast_in_dim`` ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, bind, convert, read_if_variable, spec_of, to_numpy
from xtpu.dialects import hlo
from xtpu.dialects.tensor_spec import DTYPES, LOW_PRECISION_FLOATS, dtype_of_numpy, is_int_dtype

float32 = "float32"
float64 = "float64"
int32 = "int32"
int64 = "int64"
bool_ = "bool"
string = "string"


def dtype_name(dtype: Any) -> str:
    """Normalise a dtype given as a name, a numpy dtype or a Python type.

    Raises:
      TypeError: xtpu has no such dtype.
    """
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    if dtype is float:
        return "float32"
    if dtype is int:
        return "int32"
    if dtype is bool:
        return "bool"
    if dtype is str:
        return "string"
    try:
        return dtype_of_numpy(np.dtype(dtype))
    except TypeError:
        raise
    except Exception:
        raise TypeError(f"unknown dtype {dtype!r}; xtpu supports {', '.join(DTYPES)}") from None


def is_strong(x: Any) -> bool:
    """Tensors, numpy arrays and numpy scalars carry their dtype; Python
    scalars do not."""
    return isinstance(x, (Tensor, np.ndarray, np.generic))


def dtype_of(x: Any) -> str:
    return spec_of(x).dtype


def shape_of(x: Any) -> tuple[int, ...]:
    return spec_of(x).shape


def weak_to(x: Any, dtype: str) -> Any:
    """Convert a weak value to ``dtype`` (a Python float to an int is a TypeError)."""
    arr = np.asarray(x)
    if arr.dtype.kind == "f" and (is_int_dtype(dtype) or dtype == "bool"):
        raise TypeError(f"cannot convert {x!r} (a float) to {dtype}, the dtype of the other operand")
    if arr.dtype.kind == "c" and dtype != "complex64":
        raise TypeError(f"cannot convert {x!r} (a complex) to {dtype}, the dtype of the other operand")
    if arr.dtype.kind in "OUS" or dtype == "string":
        if not (arr.dtype.kind in "OUS" and dtype == "string"):
            raise TypeError(f"cannot combine {x!r} with a {dtype} tensor")
        return convert(arr.astype(object))
    return convert(arr.astype(np.dtype(dtype)))


def unify(values: list[Any], op: str) -> list[Any]:
    """Convert operands to one dtype by TF's rules; TypeError on a mismatch."""
    values = [read_if_variable(v) for v in values]
    strong = [v for v in values if is_strong(v)]
    if strong:
        dtype = dtype_of(strong[0])
        for v in strong[1:]:
            if dtype_of(v) != dtype:
                raise TypeError(
                    f"{op}: operands must have the same dtype, got {dtype} and {dtype_of(v)} "
                    "(xtpu, like TF, does not promote dtypes; use xtpu.cast)"
                )
        return [convert(v) if is_strong(v) else weak_to(v, dtype) for v in values]
    arrays = [to_numpy(v) for v in values]
    kinds = {a.dtype.kind for a in arrays}
    if "c" in kinds and len(kinds) > 1:
        arrays = [a.astype(np.complex64) for a in arrays]
    elif "f" in kinds and kinds & {"i", "u", "b"}:
        arrays = [a.astype(np.float32) if a.dtype.kind != "f" else a for a in arrays]
    return [convert(a) for a in arrays]


def broadcast_shapes(*shapes: tuple[int, ...], op: str = "op") -> tuple[int, ...]:
    """numpy's broadcast of shapes; ValueError naming the shapes if impossible."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(
            f"{op}: shapes {' and '.join(str(list(s)) for s in shapes)} are incompatible for broadcasting"
        ) from None


def broadcast_to(x: Any, shape: tuple[int, ...]) -> Any:
    """``x`` broadcast to ``shape`` through ``hlo.broadcast_in_dim``."""
    xs = shape_of(x)
    if xs == tuple(shape):
        return x
    offset = len(shape) - len(xs)
    dims = tuple(range(offset, len(shape)))
    (out,) = bind(hlo.BroadcastInDimOp, [x], broadcast_dimensions=dims, shape=tuple(shape))
    return out


def elementwise(op_cls: type, values: list[Any], name: str) -> Any:
    """Apply an elementwise op after dtype unification and broadcasting."""
    values = unify(values, name)
    shape = broadcast_shapes(*(shape_of(v) for v in values), op=name)
    values = [broadcast_to(v, shape) for v in values]
    (out,) = bind(op_cls, values)
    return out


def dot_general(a: Any, b: Any, **dims: Any) -> Any:
    """``hlo.dot_general`` of ``a`` and ``b`` with TPU accumulation: bfloat16
    and float16 operands contract into a float32 result (StableHLO's
    preferred element type, as JAX's ``preferred_element_type=float32``)
    that one ``hlo.convert`` rounds back to the operands' dtype, so the IR
    shows the float32 accumulation; other dtypes contract as they are."""
    dt = dtype_of(a)
    if dt in LOW_PRECISION_FLOATS:
        (wide,) = bind(hlo.DotGeneralOp, [a, b], preferred_element_type="float32", **dims)
        (out,) = bind(hlo.ConvertOp, [wide], dtype=dt)
        return out
    (out,) = bind(hlo.DotGeneralOp, [a, b], **dims)
    return out


def normalize_axes(axis: Any, rank: int, op: str) -> tuple[int, ...]:
    """Axes as sorted non-negative ints; None means all; ValueError if out of range."""
    if axis is None:
        return tuple(range(rank))
    if isinstance(axis, Tensor):
        raise TypeError(f"{op}: axis must be a Python int or list of ints, not a tensor")
    axes = [int(a) for a in np.atleast_1d(np.asarray(axis))]
    out = []
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise ValueError(f"{op}: axis {a} is out of range for a rank-{rank} tensor")
        out.append(a % rank if rank else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: axis {axes} repeats a dimension")
    return tuple(sorted(out))


def scalar(value: Any, dtype: str) -> Any:
    """A scalar constant of ``dtype``."""
    return convert(np.asarray(value, dtype=np.dtype(dtype)))
