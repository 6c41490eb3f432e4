"""TF's indexing ops: ``tf.gather``, ``tf.gather_nd``, ``tf.where``,
``tf.math.unsorted_segment_sum`` and ``tf.math.segment_sum``.

Gathers and segment sums are built from StableHLO's compare (against an
iota), select and reduce: an index picks its slice by a one-hot mask, so the
ops trace, run eagerly and differentiate through those ops' rules (the
gradient of ``gather`` is TF's: the cotangent scattered back, summed where an
index repeats).  The cost is that of the mask, ``|indices| * dim * |slice|``
elements: fine for the sizes TPU input code gathers (labels, embeddings of
small vocabularies), not for large tables.

Out-of-range indices select nothing: their result is 0 (TF on GPU and TPU;
TF on CPU raises).  ``unsorted_segment_sum`` drops negative and too large
segment ids, as TF does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, bind, convert, read_if_variable
from xtpu.dialects import hlo
from xtpu.ops.array_ops import reshape
from xtpu.ops.core import broadcast_shapes, broadcast_to, dtype_of, normalize_axes, scalar, shape_of, unify

INDEX_DTYPES = ("int32", "int64")


def _indices(indices: Any, op: str) -> Any:
    idx = convert(read_if_variable(indices))
    if dtype_of(idx) not in INDEX_DTYPES:
        raise TypeError(f"{op}: indices must be int32 or int64, got {dtype_of(idx)}")
    return idx


def _masked_sum(values: Any, mask: Any, axes: tuple[int, ...]) -> Any:
    """``sum over axes of (mask ? values : 0)`` (``or`` for bools); mask and
    values of one shape."""
    dt = dtype_of(values)
    if dt == "string":
        raise TypeError("gathering strings is not supported on the device")
    zero = broadcast_to(scalar(False if dt == "bool" else 0, dt), shape_of(values))
    (picked,) = bind(hlo.SelectOp, [mask, values, zero])
    (out,) = bind(
        hlo.ReduceOp,
        [picked, scalar(False if dt == "bool" else 0, dt)],
        computation="or" if dt == "bool" else "add",
        dimensions=axes,
    )
    return out


def gather(
    params: Any,
    indices: Any,
    validate_indices: Any = None,
    axis: Any = None,
    batch_dims: int = 0,
    name: str | None = None,
) -> Any:
    """Slices of ``params`` along ``axis`` (default ``batch_dims``) at
    ``indices`` (tf.gather); the first ``batch_dims`` dimensions of both are
    batch dimensions (``indices[b...]`` picks from ``params[b...]``).

    Shapes: params ``P[:axis] + [K] + P[axis+1:]``, indices ``B + I`` with
    ``B = P[:batch_dims]`` -> ``P[:axis] + I + P[axis+1:]``; dtype of ``params``.

    Raises:
      TypeError: indices not int32 / int64.
      ValueError: ``axis`` out of range or below ``batch_dims``; batch
        dimensions that differ; ``batch_dims`` beyond the indices' rank.
    """
    p = convert(read_if_variable(params))
    idx = _indices(indices, "gather")
    ps, ishape = shape_of(p), shape_of(idx)
    if isinstance(axis, Tensor) or isinstance(batch_dims, Tensor):
        raise TypeError("gather: axis and batch_dims must be static")
    b = int(batch_dims)
    if b < 0:
        b += len(ishape)
    if not 0 <= b <= len(ishape):
        raise ValueError(f"gather: batch_dims {batch_dims} is out of range for indices of rank {len(ishape)}")
    (ax,) = normalize_axes(b if axis is None else axis, len(ps), "gather")
    if ax < b:
        raise ValueError(f"gather: axis {ax} must be at least batch_dims {b}")
    if ps[:b] != ishape[:b]:
        raise ValueError(f"gather: batch dimensions of params {list(ps[:b])} and indices {list(ishape[:b])} differ")
    lead, k, rest = ps[:ax], ps[ax], ps[ax + 1 :]
    inner = ishape[b:]
    na, ni = len(lead), len(inner)
    full = lead + inner + (k,) + rest
    kpos = na + ni
    (pb,) = bind(
        hlo.BroadcastInDimOp,
        [p],
        shape=full,
        broadcast_dimensions=tuple(range(na)) + (kpos,) + tuple(range(kpos + 1, len(full))),
    )
    (ib,) = bind(
        hlo.BroadcastInDimOp, [idx], shape=full, broadcast_dimensions=tuple(range(b)) + tuple(range(na, na + ni))
    )
    (iota,) = bind(hlo.IotaOp, [], iota_dimension=kpos, shape=full, dtype=dtype_of(idx))
    (mask,) = bind(hlo.CompareOp, [ib, iota], comparison_direction="EQ")
    return _masked_sum(pb, mask, (kpos,))


def gather_nd(params: Any, indices: Any, batch_dims: int = 0, name: str | None = None) -> Any:
    """Slices of ``params`` at the index vectors in ``indices``' last
    dimension (tf.gather_nd).

    Shapes: params ``D + B`` with ``len(D) == M``, indices ``I + [M]`` ->
    ``I + B``.  An index vector with any component out of range gives 0.

    Raises:
      ValueError: ``M`` exceeds the rank of params.
      NotImplementedError: ``batch_dims != 0``.
    """
    if batch_dims:
        raise NotImplementedError("gather_nd: batch_dims other than 0 is not implemented")
    p = convert(read_if_variable(params))
    idx = _indices(indices, "gather_nd")
    ps, ishape = shape_of(p), shape_of(idx)
    if not ishape:
        raise ValueError("gather_nd: indices must have rank >= 1")
    m = ishape[-1]
    if m > len(ps):
        raise ValueError(f"gather_nd: index vectors of length {m} exceed the rank {len(ps)} of params")
    lead, rest = ps[:m], ps[m:]
    dt = dtype_of(idx)
    strides = [int(np.prod(lead[j + 1 :], dtype=np.int64)) for j in range(m)]
    linear = None
    valid = None
    outer = ishape[:-1]
    for j in range(m):
        starts = [0] * len(ishape)
        limits = list(ishape)
        starts[-1], limits[-1] = j, j + 1
        (c,) = bind(hlo.SliceOp, [idx], start_indices=starts, limit_indices=limits, strides=[1] * len(ishape))
        c = reshape(c, outer)
        (lo,) = bind(hlo.CompareOp, [c, broadcast_to(scalar(0, dt), outer)], comparison_direction="GE")
        (hi,) = bind(hlo.CompareOp, [c, broadcast_to(scalar(lead[j], dt), outer)], comparison_direction="LT")
        (ok,) = bind(hlo.AndOp, [lo, hi])
        valid = ok if valid is None else bind(hlo.AndOp, [valid, ok])[0]
        (term,) = bind(hlo.MultiplyOp, [c, broadcast_to(scalar(strides[j], dt), outer)])
        linear = term if linear is None else bind(hlo.AddOp, [linear, term])[0]
    total = int(np.prod(lead, dtype=np.int64))
    flat = reshape(p, (total,) + tuple(rest))
    if m == 0:
        linear = broadcast_to(scalar(0, dt), outer)
    else:
        (linear,) = bind(hlo.SelectOp, [valid, linear, broadcast_to(scalar(-1, dt), outer)])
    return gather(flat, linear, axis=0)


def where(condition: Any, x: Any = None, y: Any = None, name: str | None = None) -> Any:
    """``x`` where ``condition`` else ``y``, the three broadcast together
    (tf.where, TF 2's where_v2; StableHLO select).  With ``x`` and ``y``
    None: the int64 coordinates ``[N, rank]`` of the true elements, eagerly
    only (their number is not static).

    Raises:
      TypeError: ``condition`` is not bool, or x / y dtypes differ.
      ValueError: the shapes do not broadcast; only one of x, y given; the
        coordinates form inside a replicated computation.
    """
    c = convert(read_if_variable(condition))
    if dtype_of(c) != "bool":
        raise TypeError(f"where: condition must be bool, got {dtype_of(c)}")
    if x is None and y is None:
        if isinstance(c, Tensor):
            raise ValueError(
                "where(condition) has a data-dependent shape; inside a replicated computation give x and y"
            )
        return np.argwhere(np.asarray(c)).astype(np.int64)
    if x is None or y is None:
        raise ValueError("where: x and y must both be given, or both be None")
    xv, yv = unify([x, y], "where")
    shape = broadcast_shapes(shape_of(c), shape_of(xv), shape_of(yv), op="where")
    (out,) = bind(hlo.SelectOp, [broadcast_to(c, shape), broadcast_to(xv, shape), broadcast_to(yv, shape)])
    return out


def unsorted_segment_sum(data: Any, segment_ids: Any, num_segments: Any, name: str | None = None) -> Any:
    """``out[s] = sum of data[i...] over i with segment_ids[i...] == s``
    (tf.math.unsorted_segment_sum).

    Shapes: data ``S + B`` with ``segment_ids`` of shape ``S`` -> ``[num_segments] + B``;
    dtype of data.  Ids outside ``[0, num_segments)`` are dropped.

    Raises:
      ValueError: ``segment_ids``' shape is not a prefix of ``data``'s.
      TypeError: ids not int32 / int64, or a traced ``num_segments``.
    """
    d = convert(read_if_variable(data))
    ids = _indices(segment_ids, "unsorted_segment_sum")
    if isinstance(num_segments, Tensor):
        raise TypeError("unsorted_segment_sum: num_segments must be static")
    n = int(num_segments)
    ds_, ss = shape_of(d), shape_of(ids)
    if ds_[: len(ss)] != ss:
        raise ValueError(
            f"unsorted_segment_sum: segment_ids.shape {list(ss)} must be a prefix of data.shape {list(ds_)}"
        )
    b = ds_[len(ss) :]
    full = (n,) + ds_
    (db,) = bind(hlo.BroadcastInDimOp, [d], shape=full, broadcast_dimensions=tuple(range(1, len(full))))
    (ib,) = bind(hlo.BroadcastInDimOp, [ids], shape=full, broadcast_dimensions=tuple(range(1, len(ss) + 1)))
    (iota,) = bind(hlo.IotaOp, [], iota_dimension=0, shape=full, dtype=dtype_of(ids))
    (mask,) = bind(hlo.CompareOp, [ib, iota], comparison_direction="EQ")
    out = _masked_sum(db, mask, tuple(range(1, len(ss) + 1)))
    assert shape_of(out) == (n,) + b
    return out


def segment_sum(data: Any, segment_ids: Any, name: str | None = None) -> Any:
    """Sums of ``data``'s rows per (sorted) segment id; ``max(id) + 1`` rows
    (tf.math.segment_sum).

    Raises:
      ValueError: ``segment_ids`` is traced (the number of rows would depend
        on its values; use ``unsorted_segment_sum`` with ``num_segments``),
        not 1-D, not sorted, or negative (TF's InvalidArgumentError).
    """
    ids = read_if_variable(segment_ids)
    if isinstance(ids, Tensor):
        raise ValueError(
            "segment_sum: inside a replicated computation the number of segments must be static; "
            "use unsorted_segment_sum(data, segment_ids, num_segments)"
        )
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"segment_sum: segment_ids must be 1-D, got shape {list(arr.shape)}")
    if arr.size and np.any(np.diff(arr) < 0):
        raise ValueError("segment_sum: segment_ids must be sorted")
    if arr.size and arr[0] < 0:  # TF's kernel: out of range [0, output_rows)
        raise ValueError(f"segment_sum: segment ids must be >= 0, got {arr[0]}")
    return unsorted_segment_sum(data, segment_ids, int(arr.max()) + 1 if arr.size else 0)


__all__ = ["gather", "gather_nd", "segment_sum", "unsorted_segment_sum", "where"]
