"""Shape and construction ops: TF's ``tf.reshape``, ``tf.transpose``,
``tf.concat``, ``tf.constant`` and static slicing (``tf.one_hot`` is in
:mod:`xtpu.ops.gather_ops`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xtpu.core.eager import as_eager_tensor
from xtpu.core.tracing import Tensor, bind, convert, current_trace, to_numpy
from xtpu.dialects import hlo
from xtpu.dialects.hlo_math import ReverseOp
from xtpu.dialects.tpu import ReplicaIdOp
from xtpu.ops import math_ops
from xtpu.ops.core import dtype_name, shape_of, unify


def constant(value: Any, dtype: Any = None, shape: Any = None, name: str | None = None) -> Any:
    """A constant tensor (tf.constant): Python floats become float32 and ints
    int32 unless ``dtype`` says otherwise; a scalar ``value`` with ``shape``
    fills that shape.

    Raises:
      TypeError: the value cannot have ``dtype``.
      ValueError: ``value`` has a different number of elements than ``shape``.
    """
    if isinstance(value, Tensor):
        return value if dtype is None else math_ops.cast(value, dtype)
    arr = (
        to_numpy(value, None if dtype is None else dtype_name(dtype))
        if not isinstance(value, np.ndarray)
        else np.asarray(value)
    )
    if dtype is not None and isinstance(value, np.ndarray):
        arr = arr.astype(np.dtype(dtype_name(dtype)) if dtype_name(dtype) != "string" else object)
    if shape is not None:
        shape = tuple(int(d) for d in shape)
        if arr.size == 1:
            arr = np.full(shape, arr.reshape(()), dtype=arr.dtype)
        elif arr.size == int(np.prod(shape, dtype=np.int64)):
            arr = arr.reshape(shape)
        else:
            raise ValueError(f"constant: {arr.size} values do not fill shape {list(shape)}")
    out = convert(arr)
    if isinstance(out, np.ndarray) and out.dtype != object:
        # Eagerly an EagerTensor: a numpy array whose operators a
        # GradientTape can record (TF's EagerTensor).

        return as_eager_tensor(out)
    return out


def reshape(tensor: Any, shape: Any, name: str | None = None) -> Any:
    """Same elements, new shape; one dimension may be -1 (tf.reshape;
    StableHLO reshape).

    Raises:
      ValueError: the element counts differ, naming both shapes.
    """
    x = convert(tensor)
    src = shape_of(x)
    shape = [int(d) for d in (shape if not np.isscalar(shape) else [shape])]
    size = int(np.prod(src, dtype=np.int64))
    if shape.count(-1) > 1:
        raise ValueError(f"reshape: shape {shape} has more than one -1")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise ValueError(f"reshape: cannot reshape {list(src)} ({size} elements) to {shape}")
        shape[shape.index(-1)] = size // known
    return _reshape(x, shape)


def _reshape(x: Any, shape: Sequence[int]) -> Any:
    (out,) = bind(hlo.ReshapeOp, [x], shape=tuple(shape))
    return out


def fresh(x: Any) -> Any:
    """A new tensor with ``x``'s value, made by an op (TF's ``Identity``):
    the gradient passes through it, and a tape that did not watch ``x``
    does not take it for ``x`` (``tape.gradient(tf.identity(x), x)`` is
    None in TF when ``x`` was not watched).  A same-shape ``hlo.reshape``,
    which ``hlo-canonicalize`` removes from compiled programs."""
    return _reshape(x, shape_of(x))


def transpose(a: Any, perm: Any = None, name: str | None = None) -> Any:
    """Permute dimensions; by default reverse them (tf.transpose; StableHLO transpose)."""
    x = convert(a)
    r = len(shape_of(x))
    perm = tuple(range(r - 1, -1, -1)) if perm is None else tuple(int(p) % max(r, 1) for p in perm)
    (out,) = bind(hlo.TransposeOp, [x], permutation=perm)
    return out


def concat(values: Any, axis: int, name: str | None = None) -> Any:
    """Join tensors along ``axis`` (tf.concat; StableHLO concatenate)."""
    values = unify(list(values), "concat")
    if not values:
        raise ValueError("concat: needs at least one tensor")
    r = len(shape_of(values[0]))
    if not -r <= axis < r:
        raise ValueError(f"concat: axis {axis} out of range for rank {r}")
    (out,) = bind(hlo.ConcatenateOp, values, dimension=axis % r)
    return out


def getitem(x: Any, key: Any) -> Any:
    """Static basic indexing: ints, slices (a negative step reverses the
    dimension first: StableHLO reverse, then slice), ``...`` and
    ``None`` (``tf.newaxis``, a new dimension of size 1) (TF's
    ``Tensor.__getitem__``; StableHLO slice + reshape).

    Raises:
      IndexError: an index is out of range or not static.
    """
    x = convert(x)
    shape = shape_of(x)
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if any(k is Ellipsis for k in key):
        i = key.index(Ellipsis)
        fill = len(shape) - (len(key) - 1 - sum(k is None for k in key))
        key = key[:i] + (slice(None),) * max(fill, 0) + key[i + 1 :]
    # None entries add dimensions of size 1: mark where they go in the result
    new_axes = []
    for k in key:
        if k is None:
            new_axes.append(True)
        elif not isinstance(k, (int, np.integer)) or isinstance(k, bool):
            new_axes.append(False)
    key = tuple(k for k in key if k is not None)
    if len(key) > len(shape):
        raise IndexError(f"too many indices ({len(key)}) for a tensor of rank {len(shape)}")
    new_axes += [False] * (len(shape) - len(key))
    key = key + (slice(None),) * (len(shape) - len(key))
    starts, limits, strides, out_shape, reversed_dims = [], [], [], [], []
    for d, (k, n) in enumerate(zip(key, shape)):
        if isinstance(k, slice):
            a, b, st = k.indices(n)
            m = len(range(a, b, st))
            if st < 0:  # a reversed dimension, then a positive step from n - 1 - a
                reversed_dims.append(d)
                a, st = (n - 1 - a, -st) if m else (0, 1)
            b = a + (m - 1) * st + 1 if m else a
            starts.append(a), limits.append(b), strides.append(st)
            out_shape.append(m)
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            k = int(k)
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for axis {d} with size {n}")  # numpy's words, as eagerly
            k %= n
            starts.append(k), limits.append(k + 1), strides.append(1)
        else:
            raise IndexError(f"unsupported index {k!r} in dimension {d}: {INDEX_FORMS}")
    if reversed_dims:
        (x,) = bind(ReverseOp, [x], dimensions=tuple(reversed_dims))
    (out,) = bind(hlo.SliceOp, [x], start_indices=starts, limit_indices=limits, strides=strides)
    if any(new_axes):
        kept = iter(out_shape)
        out_shape = [1 if new else next(kept) for new in new_axes]
    if tuple(out_shape) != shape_of(out):
        (out,) = bind(hlo.ReshapeOp, [out], shape=tuple(out_shape))
    return out


INDEX_FORMS = (
    "xtpu indexes with Python ints (x[1], x[-1]), slices (x[1:3], x[::2], x[::-1]), "
    "None (a new axis, x[None]) and Ellipsis (x[..., 0]); for indices in a list or a tensor use "
    "xtpu.gather(x, indices, axis), for a boolean mask xtpu.where(mask, x, 0) (shapes are static)"
)
"""The index forms ``x[...]`` accepts, for the error on any other."""


def replica_id() -> Any:
    """The id of the running replica, an int32 scalar (0 when eager)."""
    (out,) = bind(ReplicaIdOp, [])
    return out


__all__ = ["constant", "reshape", "transpose", "concat", "getitem", "replica_id", "current_trace"]
