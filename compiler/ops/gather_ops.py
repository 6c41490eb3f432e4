"""TF's indexing, scatter, sort and arg-reduction ops on StableHLO's
``hlo.gather``, ``hlo.scatter``, ``hlo.sort`` and ``hlo.variadic_reduce``
(dialects/hlo_indexing.py): ``gather``, ``gather_nd``, ``nn.embedding_lookup``,
``scatter_nd``, ``tensor_scatter_nd_update`` / ``_add`` / ``_sub`` / ``_max`` /
``_min``, ``math.unsorted_segment_sum`` / ``_max`` / ``_min`` / ``_mean`` /
``_prod``, ``math.segment_sum``, ``one_hot``, ``argmax``, ``argmin``, ``sort``,
``argsort``, ``math.top_k``, ``math.in_top_k`` and ``where``.

Every op costs O(output) (plus a sort's log factor): a gather reads only
the rows it returns, a scatter writes only its updates, and no op builds a
one-hot mask over a table.  They run eagerly on numpy and trace into the
same ops; gradients come from the ops' rules (a gather's is a scatter-add,
a sort's its permutation), TF's gradients.

**Out-of-range indices** follow TF on TPU and GPU, eagerly and compiled
alike: a gather (``gather``, ``gather_nd``, ``embedding_lookup``) returns
zeros for an index outside ``[0, dim)`` and sends it no gradient; a scatter
(``scatter_nd``, ``tensor_scatter_nd_*``, ``unsorted_segment_*``) drops such
an update; ``one_hot`` gives a row of ``off_value``.  (TF on CPU raises
``InvalidArgumentError`` for the gathers and scatters instead, unless
``bad_indices_policy="IGNORE"``, which gives xtpu's values; xtpu takes TF
2.21's ``bad_indices_policy`` where TF has it, ``"ERROR"`` eagerly only.)
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, bind, convert, read_if_variable, sparse_read
from xtpu.dialects import hlo
from xtpu.dialects.dynamic_shapes import SIZE_DTYPE, SetDimensionSizeOp
from xtpu.dialects.hlo_indexing import GatherOp, ScatterOp, SortOp, VariadicReduceOp
from xtpu.dialects.tensor_spec import FLOAT_DTYPES, INT_DTYPES, is_float_dtype
from xtpu.ops import math_ops
from xtpu.ops.array_ops import concat
from xtpu.ops.core import (
    broadcast_shapes,
    broadcast_to,
    dtype_name,
    dtype_of,
    normalize_axes,
    scalar,
    shape_of,
    unify,
)

INDEX_DTYPES = ("int32", "int64")
#: What sort, argsort, top_k, argmax and argmin take: every float and integer dtype (TF's real numbers).
SORTABLE_DTYPES = FLOAT_DTYPES + INT_DTYPES


def _indices(indices: Any, op: str) -> Any:
    idx = convert(read_if_variable(indices))
    if dtype_of(idx) not in INDEX_DTYPES:
        raise TypeError(f"{op}: indices must be int32 or int64, got {dtype_of(idx)}")
    return idx


def _values(values: Any, op: str) -> Any:
    v = convert(read_if_variable(values))
    if dtype_of(v) == "string":
        raise TypeError(f"{op}: strings cannot be gathered or scattered on the device")
    return v


def _static_int(value: Any, what: str, op: str) -> int:
    if isinstance(value, Tensor):
        raise TypeError(f"{op}: {what} must be static (a Python int), not a traced tensor")
    return int(np.asarray(read_if_variable(value)))


def _cmp(a: Any, b: Any, direction: str) -> Any:
    (out,) = bind(hlo.CompareOp, [a, b], comparison_direction=direction)
    return out


def _and(a: Any, b: Any) -> Any:
    (out,) = bind(hlo.AndOp, [a, b])
    return out


def _in_range(idx: Any, bound: Any) -> Any:
    """``0 <= idx < bound`` elementwise; ``bound`` an int or an int array
    broadcast along the last dimension of ``idx``."""
    shape, dt = shape_of(idx), dtype_of(idx)
    if np.ndim(bound) == 0:
        hi = broadcast_to(scalar(bound, dt), shape)
    else:
        (hi,) = bind(
            hlo.BroadcastInDimOp,
            [convert(np.asarray(bound, dtype=dt))],
            broadcast_dimensions=(len(shape) - 1,),
            shape=shape,
        )
    return _and(_cmp(idx, broadcast_to(scalar(0, dt), shape), "GE"), _cmp(idx, hi, "LT"))


def _zero_where_invalid(out: Any, valid: Any, dims: tuple[int, ...]) -> Any:
    """``out`` with zeros where ``valid`` (laid along ``dims`` of ``out``) is
    False: O(output), one select."""
    shape, dt = shape_of(out), dtype_of(out)
    (mask,) = bind(hlo.BroadcastInDimOp, [valid], broadcast_dimensions=dims, shape=shape)
    zero = broadcast_to(scalar(False if dt == "bool" else 0, dt), shape)
    (res,) = bind(hlo.SelectOp, [mask, out, zero])
    return res


def _all_valid(idx: Any, bound: Any) -> bool:
    """True when ``idx`` is concrete (eager or a numpy constant) and in
    range: the mask can be left out."""
    if isinstance(idx, Tensor):
        return False
    arr = np.asarray(idx)
    return bool(np.all((arr >= 0) & (arr < np.asarray(bound))))


#: TF 2.21's ``bad_indices_policy`` values (gather_nd, scatter_nd, tensor_scatter_nd_add).
BAD_INDICES_POLICIES = ("", "DEFAULT", "IGNORE", "ERROR")


def _check_policy(policy: Any, idx: Any, bounds: Any, op: str, what: str) -> None:
    """TF's ``bad_indices_policy``: ``""`` / ``"DEFAULT"`` / ``"IGNORE"``
    keep xtpu's rule (TF's on TPU / GPU: zeros, dropped updates);
    ``"ERROR"`` raises for an index vector out of range, eagerly (a compiled
    program cannot raise on values: refused there, as TF's accelerators
    generally refuse it)."""
    if not isinstance(policy, str) or policy not in BAD_INDICES_POLICIES:
        raise ValueError(f"{op}: bad_indices_policy must be one of '', 'DEFAULT', 'IGNORE', 'ERROR', got {policy!r}")
    if policy != "ERROR":
        return
    if isinstance(idx, Tensor):
        raise ValueError(
            f"{op}: bad_indices_policy='ERROR' checks the indices' values, which a compiled computation cannot "
            "raise on (TF's accelerators do not support it either); use '' or 'IGNORE' (out-of-range indices "
            "give zeros / drop their updates)"
        )
    arr = np.asarray(idx)
    vecs = arr.reshape(-1, arr.shape[-1]) if arr.ndim else arr.reshape(1, 1)
    bad = np.nonzero(np.any((vecs < 0) | (vecs >= np.asarray(bounds)), axis=1))[0]
    if bad.size:
        at = np.unravel_index(int(bad[0]), arr.shape[:-1])
        raise ValueError(
            f"{op}: indices[{', '.join(map(str, at))}] = {vecs[bad[0]].tolist()} does not index into {what} "
            "(bad_indices_policy='ERROR')"
        )


# --------------------------------------------------------------------------
# Gathers
# --------------------------------------------------------------------------


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
    ``B = P[:batch_dims]`` -> ``P[:axis] + I + P[axis+1:]``; dtype of
    ``params`` (any but string).  One ``hlo.gather``: it reads only the
    slices it returns.  An index outside ``[0, K)`` gives zeros and no
    gradient (TF on TPU / GPU; TF on CPU raises).  Gradient: the cotangent
    added at the indices (TF's _GatherV2Grad, dense).

    An autocast variable (mixed precision) is read as TF's
    ``AutoCastVariable.sparse_read`` reads it: the float32 slices gathered,
    then cast to the compute dtype.

    Raises:
      TypeError: indices not int32 / int64; params of strings; a traced
        ``axis`` or ``batch_dims``.
      ValueError: ``axis`` out of range or below ``batch_dims``; batch
        dimensions that differ; ``batch_dims`` beyond the indices' rank.
    """
    params, cast_to = sparse_read(params)
    out = _gather(params, indices, axis, batch_dims)
    if cast_to is None:
        return out
    (out,) = bind(hlo.ConvertOp, [out], dtype=cast_to)
    return out


def _gather(params: Any, indices: Any, axis: Any, batch_dims: Any) -> Any:
    p = _values(params, "gather")
    idx = _indices(indices, "gather")
    ps, ishape = shape_of(p), shape_of(idx)
    if isinstance(axis, Tensor) or isinstance(batch_dims, Tensor):
        raise TypeError("gather: axis and batch_dims must be static")
    b = int(batch_dims)
    if b < 0:
        b += len(ishape)
    if not 0 <= b <= len(ishape):
        raise ValueError(f"gather: batch_dims {batch_dims} is out of range for indices of rank {len(ishape)}")
    if not ps:
        raise ValueError("gather: params must have rank >= 1")
    (ax,) = normalize_axes(b if axis is None else axis, len(ps), "gather")
    if ax < b:
        raise ValueError(f"gather: axis {ax} must be at least batch_dims {b}")
    if ps[:b] != ishape[:b]:
        raise ValueError(f"gather: batch dimensions of params {list(ps[:b])} and indices {list(ishape[:b])} differ")
    ni = len(ishape)
    sizes = tuple(min(1, n) if d == ax or d < b else n for d, n in enumerate(ps))
    offset = tuple(range(b, ax)) + tuple(range(ax + ni - b, ax + ni - b + len(ps) - ax - 1))
    (out,) = bind(
        GatherOp,
        [p, idx],
        offset_dims=offset,
        collapsed_slice_dims=(ax,),
        operand_batching_dims=tuple(range(b)),
        start_indices_batching_dims=tuple(range(b)),
        start_index_map=(ax,),
        index_vector_dim=ni,
        slice_sizes=sizes,
    )
    if _all_valid(idx, ps[ax]):
        return out
    batch_positions = tuple(range(b)) + tuple(range(ax, ax + ni - b))
    return _zero_where_invalid(out, _in_range(idx, ps[ax]), batch_positions)


def gather_nd(
    params: Any, indices: Any, batch_dims: int = 0, name: str | None = None, bad_indices_policy: str = ""
) -> Any:
    """Slices of ``params`` at the index vectors in ``indices``' last
    dimension (tf.gather_nd), after ``batch_dims`` leading batch dimensions
    that both share.

    Shapes: params ``B + D + R`` with ``len(B) = batch_dims``, ``len(D) =
    M``; indices ``B + I + [M]`` -> ``B + I + R``.  One ``hlo.gather``.  An
    index vector with a component out of range gives zeros and no gradient
    (TF on TPU / GPU, and TF's ``bad_indices_policy="IGNORE"``; TF on CPU
    raises), unless ``bad_indices_policy="ERROR"`` (eagerly only).

    Raises:
      TypeError: indices not int32 / int64; params of strings.
      ValueError: indices of rank 0; ``M`` beyond the rank left after the
        batch dimensions; batch dimensions that differ; an unknown
        ``bad_indices_policy``; ``"ERROR"`` with an index out of range, or
        traced.
    """
    p = _values(params, "gather_nd")
    idx = _indices(indices, "gather_nd")
    ps, ishape = shape_of(p), shape_of(idx)
    if not ishape:
        raise ValueError("gather_nd: indices must have rank >= 1")
    b = _static_int(batch_dims, "batch_dims", "gather_nd")
    if not 0 <= b < len(ishape):
        raise ValueError(f"gather_nd: batch_dims {b} must be in [0, {len(ishape)}) for indices of rank {len(ishape)}")
    m = ishape[-1]
    if b + m > len(ps):
        raise ValueError(
            f"gather_nd: index vectors of length {m} after {b} batch dimensions exceed the rank {len(ps)} of params"
        )
    if ps[:b] != ishape[:b]:
        raise ValueError(f"gather_nd: batch dimensions of params {list(ps[:b])} and indices {list(ishape[:b])} differ")
    nb = len(ishape) - 1
    indexed = tuple(range(b, b + m))
    (out,) = bind(
        GatherOp,
        [p, idx],
        offset_dims=tuple(range(nb, nb + len(ps) - b - m)),
        collapsed_slice_dims=indexed,
        operand_batching_dims=tuple(range(b)),
        start_indices_batching_dims=tuple(range(b)),
        start_index_map=indexed,
        index_vector_dim=nb,
        slice_sizes=tuple(min(1, n) if d < b + m else n for d, n in enumerate(ps)),
    )
    bounds = np.asarray(ps[b : b + m], dtype=np.int64)
    _check_policy(bad_indices_policy, idx, bounds, "gather_nd", f"param shape {list(ps)}")
    if m == 0 or _all_valid(idx, bounds):
        return out
    ok = _in_range(idx, bounds)
    (valid,) = bind(hlo.ReduceOp, [ok, scalar(True, "bool")], computation="and", dimensions=(nb,))
    return _zero_where_invalid(out, valid, tuple(range(nb)))


def embedding_lookup(params: Any, ids: Any, max_norm: Any = None, name: str | None = None) -> Any:
    """Rows of the embedding table ``params`` at ``ids`` (tf.nn.embedding_lookup,
    TF 2's): ``gather(params, ids)``.  ``params`` may be a list of tables,
    the shards of one table split along its rows in order (TF's ``"div"``
    strategy); ``max_norm`` clips each row's L2 norm (``tf.clip_by_norm``).

    Shapes: params ``[V, ...]``, ids ``I`` -> ``I + [...]``.  Out-of-range
    ids give zero rows (TF on TPU; TF on CPU raises).

    Raises:
      TypeError / ValueError: as :func:`gather`; an empty list of tables.
    """
    if isinstance(params, (list, tuple)):
        if not params:
            raise ValueError("embedding_lookup: params is an empty list")
        table = params[0] if len(params) == 1 else concat([_values(t, "embedding_lookup") for t in params], axis=0)
    else:
        table = params
    out = gather(table, ids)
    if max_norm is None:
        return out
    axes = tuple(range(len(shape_of(convert(ids))), len(shape_of(out))))
    dt = dtype_of(out)
    norm = math_ops.sqrt(math_ops.reduce_sum(math_ops.multiply(out, out), axis=axes, keepdims=True))
    limit = scalar(max_norm, dt)
    return math_ops.divide(math_ops.multiply(out, limit), math_ops.maximum(norm, limit))


# --------------------------------------------------------------------------
# Scatters
# --------------------------------------------------------------------------


def _scatter_nd_into(
    tensor: Any, indices: Any, updates: Any, computation: str, op: str, bad_indices_policy: str = ""
) -> Any:
    """``tensor`` with ``updates`` combined in at the index vectors of
    ``indices`` (TF's ``tensor_scatter_nd_*``): one ``hlo.scatter``."""
    idx = _indices(indices, op)
    t, u = unify([_values(tensor, op), _values(updates, op)], op)
    ts, ishape, us = shape_of(t), shape_of(idx), shape_of(u)
    if not ishape:
        raise ValueError(f"{op}: indices must have rank >= 1")
    m = ishape[-1]
    if m > len(ts):
        raise ValueError(f"{op}: index vectors of length {m} exceed the rank {len(ts)} of the tensor")
    want = ishape[:-1] + ts[m:]
    if us != want:
        raise ValueError(
            f"{op}: updates must have shape indices.shape[:-1] + tensor.shape[{m}:] = {list(want)}, got {list(us)}"
        )
    _check_policy(bad_indices_policy, idx, np.asarray(ts[:m], dtype=np.int64), op, f"shape {list(ts)}")
    nb = len(ishape) - 1
    (out,) = bind(
        ScatterOp,
        [t, idx, u],
        computation=computation,
        update_window_dims=tuple(range(nb, len(us))),
        inserted_window_dims=tuple(range(m)),
        input_batching_dims=(),
        scatter_indices_batching_dims=(),
        scatter_dims_to_operand_dims=tuple(range(m)),
        index_vector_dim=nb,
    )
    return out


def scatter_nd(indices: Any, updates: Any, shape: Any, bad_indices_policy: str = "", name: str | None = None) -> Any:
    """Zeros of ``shape`` with ``updates`` added at the index vectors of
    ``indices`` (tf.scatter_nd; repeated indices sum).

    Shapes: indices ``I + [M]``, updates ``I + shape[M:]`` -> ``shape``.
    An index out of range drops its update (TF on TPU, and TF's
    ``bad_indices_policy="IGNORE"``; TF on CPU raises), unless
    ``bad_indices_policy="ERROR"`` (eagerly only).

    Raises:
      TypeError: indices not int32 / int64; a traced ``shape``.
      ValueError: updates of the wrong shape; ``M`` beyond ``len(shape)``;
        an unknown ``bad_indices_policy``; ``"ERROR"`` with an index out of
        range, or traced.
    """
    if isinstance(shape, Tensor):
        raise TypeError("scatter_nd: shape must be static")
    u = _values(updates, "scatter_nd")
    dims = tuple(int(n) for n in np.asarray(read_if_variable(shape)).reshape(-1))
    dt = dtype_of(u)
    zeros = broadcast_to(scalar(False if dt == "bool" else 0, dt), dims)
    return _scatter_nd_into(zeros, indices, u, "add", "scatter_nd", bad_indices_policy)


def tensor_scatter_nd_update(tensor: Any, indices: Any, updates: Any, name: str | None = None) -> Any:
    """``tensor`` with ``updates`` written at the index vectors of
    ``indices`` (tf.tensor_scatter_nd_update; for a repeated index one of
    its updates wins).  Shapes as :func:`scatter_nd` with ``shape =
    tensor.shape``.  Gradient: TF's (the cotangent with the written places
    zeroed; the updates get it gathered)."""
    return _scatter_nd_into(tensor, indices, updates, "replace", "tensor_scatter_nd_update")


def tensor_scatter_nd_add(
    tensor: Any, indices: Any, updates: Any, bad_indices_policy: str = "", name: str | None = None
) -> Any:
    """``tensor`` with ``updates`` added at the index vectors of ``indices``
    (tf.tensor_scatter_nd_add; repeated indices sum); ``bad_indices_policy``
    as :func:`scatter_nd`'s."""
    return _scatter_nd_into(tensor, indices, updates, "add", "tensor_scatter_nd_add", bad_indices_policy)


def tensor_scatter_nd_sub(tensor: Any, indices: Any, updates: Any, name: str | None = None) -> Any:
    """``tensor`` with ``updates`` subtracted at ``indices`` (tf.tensor_scatter_nd_sub)."""
    return _scatter_nd_into(tensor, indices, math_ops.negative(updates), "add", "tensor_scatter_nd_sub")


def tensor_scatter_nd_max(tensor: Any, indices: Any, updates: Any, name: str | None = None) -> Any:
    """The elementwise maximum of ``tensor`` and the updates at ``indices``
    (tf.tensor_scatter_nd_max)."""
    return _scatter_nd_into(tensor, indices, updates, "max", "tensor_scatter_nd_max")


def tensor_scatter_nd_min(tensor: Any, indices: Any, updates: Any, name: str | None = None) -> Any:
    """The elementwise minimum of ``tensor`` and the updates at ``indices``
    (tf.tensor_scatter_nd_min)."""
    return _scatter_nd_into(tensor, indices, updates, "min", "tensor_scatter_nd_min")


def _segment_reduce(data: Any, segment_ids: Any, num_segments: Any, computation: str, op: str) -> Any:
    d = _values(data, op)
    ids = _indices(segment_ids, op)
    n = _static_int(num_segments, "num_segments", op)
    ds_, ss = shape_of(d), shape_of(ids)
    if ds_[: len(ss)] != ss:
        raise ValueError(f"{op}: segment_ids.shape {list(ss)} must be a prefix of data.shape {list(ds_)}")
    dt = dtype_of(d)
    if computation == "add":
        init = False if dt == "bool" else 0
    elif computation == "mul":
        init = 1
    else:  # TF: an empty segment holds the dtype's lowest (max) / highest (min)
        info = np.finfo(dt) if dt.startswith("float") else np.iinfo(dt)
        init = info.min if computation == "max" else info.max
    out_shape = (n,) + ds_[len(ss) :]
    start = broadcast_to(scalar(init, dt), out_shape)
    (out,) = bind(
        ScatterOp,
        [start, ids, d],
        computation=computation,
        update_window_dims=tuple(range(len(ss), len(ds_))),
        inserted_window_dims=(0,),
        input_batching_dims=(),
        scatter_indices_batching_dims=(),
        scatter_dims_to_operand_dims=(0,),
        index_vector_dim=len(ss),
    )
    return out


def unsorted_segment_sum(data: Any, segment_ids: Any, num_segments: Any, name: str | None = None) -> Any:
    """``out[s] = sum of data[i...] over i with segment_ids[i...] == s``
    (tf.math.unsorted_segment_sum): one scatter-add.

    Shapes: data ``S + B`` with ``segment_ids`` of shape ``S`` ->
    ``[num_segments] + B``; dtype of data.  Ids outside ``[0,
    num_segments)`` are dropped (TF drops negative ids; larger ones raise on
    TF's CPU and are dropped on TPU).  Gradient: the cotangent gathered at
    the ids (TF's _UnsortedSegmentSumGrad).

    Raises:
      ValueError: ``segment_ids``' shape is not a prefix of ``data``'s.
      TypeError: ids not int32 / int64, or a traced ``num_segments``.
    """
    return _segment_reduce(data, segment_ids, num_segments, "add", "unsorted_segment_sum")


def unsorted_segment_max(data: Any, segment_ids: Any, num_segments: Any, name: str | None = None) -> Any:
    """Per-segment maxima (tf.math.unsorted_segment_max); an empty segment
    holds the dtype's lowest value.  Gradient: split among the tied maxima
    (TF's _UnsortedSegmentMinOrMaxGrad).  Shapes and errors as
    :func:`unsorted_segment_sum`."""
    return _segment_reduce(data, segment_ids, num_segments, "max", "unsorted_segment_max")


def unsorted_segment_min(data: Any, segment_ids: Any, num_segments: Any, name: str | None = None) -> Any:
    """Per-segment minima (tf.math.unsorted_segment_min); an empty segment
    holds the dtype's highest value.  As :func:`unsorted_segment_max`."""
    return _segment_reduce(data, segment_ids, num_segments, "min", "unsorted_segment_min")


def unsorted_segment_prod(data: Any, segment_ids: Any, num_segments: Any, name: str | None = None) -> Any:
    """Per-segment products (tf.math.unsorted_segment_prod); an empty segment
    holds 1.  Gradient: TF's, exact with zeros."""
    return _segment_reduce(data, segment_ids, num_segments, "mul", "unsorted_segment_prod")


def unsorted_segment_mean(data: Any, segment_ids: Any, num_segments: Any, name: str | None = None) -> Any:
    """Per-segment means (tf.math.unsorted_segment_mean): the segment sum
    over ``max(count, 1)`` (an empty segment holds 0).  Floats only."""
    d = _values(data, "unsorted_segment_mean")
    total = unsorted_segment_sum(d, segment_ids, num_segments)
    ids = _indices(segment_ids, "unsorted_segment_mean")
    ones = broadcast_to(scalar(1, dtype_of(d)), shape_of(ids))
    count = unsorted_segment_sum(ones, ids, num_segments)
    count = math_ops.maximum(count, scalar(1, dtype_of(d)))
    (count,) = bind(hlo.BroadcastInDimOp, [count], broadcast_dimensions=(0,), shape=shape_of(total))
    return math_ops.divide(total, count)


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


def one_hot(
    indices: Any,
    depth: int,
    on_value: Any = None,
    off_value: Any = None,
    axis: int | None = None,
    dtype: Any = None,
    name: str | None = None,
) -> Any:
    """``on_value`` where the new ``axis`` (default last) equals the index,
    ``off_value`` elsewhere (tf.one_hot): ``off_value`` everywhere, then one
    ``hlo.scatter`` writes ``on_value`` once per index (O(output), no
    compare against an iota).  An index outside ``[0, depth)`` leaves its
    row at ``off_value`` (TF).  Dtype: ``dtype``, else that of
    ``on_value`` / ``off_value``, else float32.

    Shapes: indices ``N`` -> ``N`` with ``depth`` inserted at ``axis``.

    Raises:
      TypeError: indices not int32 / int64.
      ValueError: ``axis`` out of range.
    """
    idx = _indices(indices, "one_hot")
    if dtype is not None:
        dt = dtype_name(dtype)
    else:
        given = [v for v in (on_value, off_value) if v is not None]
        dt = dtype_of(convert(given[0])) if given else "float32"
    on = scalar(1 if on_value is None else on_value, dt)
    off = scalar(0 if off_value is None else off_value, dt)
    ishape = shape_of(idx)
    r = len(ishape) + 1
    ax = r - 1 if axis is None or axis == -1 else int(axis)
    if not 0 <= ax < r:
        raise ValueError(f"one_hot: axis {axis} out of range for output rank {r}")
    depth = _static_int(depth, "depth", "one_hot")
    out_shape = list(ishape)
    out_shape.insert(ax, depth)
    batch = tuple(d for d in range(r) if d != ax)
    (out,) = bind(
        ScatterOp,
        [broadcast_to(off, tuple(out_shape)), idx, broadcast_to(on, ishape)],
        computation="replace",
        update_window_dims=(),
        inserted_window_dims=(ax,),
        input_batching_dims=batch,
        scatter_indices_batching_dims=tuple(range(len(ishape))),
        scatter_dims_to_operand_dims=(ax,),
        index_vector_dim=len(ishape),
    )
    return out


# --------------------------------------------------------------------------
# Arg reductions and sorting
# --------------------------------------------------------------------------


def _arg_reduce(x: Any, axis: Any, output_type: Any, computation: str, op: str) -> Any:
    x = convert(read_if_variable(x))
    dt, shape = dtype_of(x), shape_of(x)
    if dt not in SORTABLE_DTYPES:
        raise TypeError(f"{op}: input must be numeric, got {dt}")
    out_type = dtype_name(output_type)
    if out_type not in INDEX_DTYPES:
        raise TypeError(f"{op}: output_type must be int32 or int64, got {out_type}")
    if not shape:
        raise ValueError(f"{op}: input must have rank >= 1")
    (ax,) = normalize_axes(0 if axis is None else axis, len(shape), op)
    if shape[ax] == 0:  # TF's ArgMax kernel refuses it too
        raise ValueError(f"{op}: reduction axis {ax} is empty in shape {list(shape)}")
    (iota,) = bind(hlo.IotaOp, [], iota_dimension=ax, shape=shape, dtype=out_type)
    if is_float_dtype(dt):
        init = -np.inf if computation == "argmax" else np.inf
    else:
        info = np.iinfo(dt)
        init = info.min if computation == "argmax" else info.max
    _, index = bind(
        VariadicReduceOp,
        [x, iota, scalar(init, dt), scalar(0, out_type)],
        computation=computation,
        dimensions=(ax,),
    )
    return index


def argmax(input: Any, axis: Any = None, output_type: Any = "int64", name: str | None = None) -> Any:  # noqa: A002
    """Index of the largest value along ``axis`` (default 0), the lowest
    index on ties (tf.math.argmax); int64 unless ``output_type`` says
    int32.  One ``hlo.variadic_reduce`` over (values, iota), XLA's argmax.
    A NaN counts as the largest value (XLA's order).

    Raises:
      TypeError: a non-numeric input or an output_type other than int32 / int64.
      ValueError: a scalar input, an axis out of range or of size 0.
    """
    return _arg_reduce(input, axis, output_type, "argmax", "argmax")


def argmin(input: Any, axis: Any = None, output_type: Any = "int64", name: str | None = None) -> Any:  # noqa: A002
    """Index of the smallest value along ``axis`` (default 0), the lowest
    index on ties (tf.math.argmin); as :func:`argmax`."""
    return _arg_reduce(input, axis, output_type, "argmin", "argmin")


def _sort_along(values: list[Any], axis: int, directions: tuple[str, ...]) -> list[Any]:
    return bind(SortOp, values, dimension=axis, is_stable=True, comparison_directions=directions)


def _direction(direction: str, op: str) -> str:
    if direction not in ("ASCENDING", "DESCENDING"):
        raise ValueError(f"{op}: direction must be 'ASCENDING' or 'DESCENDING', got {direction!r}")
    return "LT" if direction == "ASCENDING" else "GT"


def sort(values: Any, axis: int = -1, direction: str = "ASCENDING", name: str | None = None) -> Any:
    """``values`` sorted along ``axis`` (tf.sort): one ``hlo.sort``, stable
    (equal values keep their order).  Gradient: through the permutation.

    Raises:
      ValueError: a bad ``direction``; an axis out of range; a scalar.
      TypeError: strings or bools.
    """
    v = convert(read_if_variable(values))
    if dtype_of(v) not in SORTABLE_DTYPES:
        raise TypeError(f"sort: values must be numeric, got {dtype_of(v)}")
    d = _direction(direction, "sort")
    shape = shape_of(v)
    if not shape:
        raise ValueError("sort: values must have rank >= 1")
    (ax,) = normalize_axes(axis, len(shape), "sort")
    (out,) = _sort_along([v], ax, (d,))
    return out


def argsort(
    values: Any, axis: int = -1, direction: str = "ASCENDING", stable: bool = False, name: str | None = None
) -> Any:
    """int32 indices that sort ``values`` along ``axis`` (tf.argsort);
    always stable: equal values keep their order, the lower index first
    (what TF gives in both directions).

    Raises:
      ValueError / TypeError: as :func:`sort`.
    """
    v = convert(read_if_variable(values))
    if dtype_of(v) not in SORTABLE_DTYPES:
        raise TypeError(f"argsort: values must be numeric, got {dtype_of(v)}")
    d = _direction(direction, "argsort")
    shape = shape_of(v)
    if not shape:
        raise ValueError("argsort: values must have rank >= 1")
    (ax,) = normalize_axes(axis, len(shape), "argsort")
    (iota,) = bind(hlo.IotaOp, [], iota_dimension=ax, shape=shape, dtype="int32")
    _, perm = _sort_along([v, iota], ax, (d,))
    return perm


TopKV2 = namedtuple("TopKV2", ["values", "indices"])


def top_k(input: Any, k: Any = 1, sorted: bool = True, index_type: Any = "int32", name: str | None = None) -> Any:  # noqa: A002
    """The ``k`` largest entries of the last dimension and their indices
    (tf.math.top_k), largest first, the lower index first among equal
    values (TF's rule).  A stable descending ``hlo.sort`` of (input, iota),
    then the first ``k``.  Gradient: the values' cotangent at their indices.

    Returns:
      ``TopKV2(values, indices)``: ``input.shape[:-1] + [k]``, indices
      ``index_type`` (int32 by default).

    Raises:
      ValueError: ``k`` negative or beyond the last dimension; a scalar input.
      TypeError: a traced ``k``; a non-numeric input.
    """
    x = convert(read_if_variable(input))
    if dtype_of(x) not in SORTABLE_DTYPES:
        raise TypeError(f"top_k: input must be numeric, got {dtype_of(x)}")
    shape = shape_of(x)
    if not shape:
        raise ValueError("top_k: input must have rank >= 1")
    kk = _static_int(k, "k", "top_k")
    n = shape[-1]
    if not 0 <= kk <= n:
        raise ValueError(f"top_k: k ({kk}) must be in [0, {n}], the size of the last dimension")
    it = dtype_name(index_type)
    ax = len(shape) - 1
    (iota,) = bind(hlo.IotaOp, [], iota_dimension=ax, shape=shape, dtype=it)
    vals, idx = _sort_along([x, iota], ax, ("GT",))
    if kk != n:
        start, limit = [0] * len(shape), list(shape)
        limit[-1] = kk
        (vals,) = bind(hlo.SliceOp, [vals], start_indices=start, limit_indices=limit, strides=[1] * len(shape))
        (idx,) = bind(hlo.SliceOp, [idx], start_indices=start, limit_indices=limit, strides=[1] * len(shape))
    return TopKV2(vals, idx)


def in_top_k(targets: Any, predictions: Any, k: Any, name: str | None = None) -> Any:
    """Whether ``predictions[i, targets[i]]`` is among the ``k`` largest of
    row ``i`` (tf.math.in_top_k, TF 2's argument order): True when fewer
    than ``k`` entries of the row are strictly larger, so entries tied at
    the boundary are all in (TF's rule); False for a target out of range or
    a non-finite prediction at the target (TF).

    Shapes: targets ``[B]`` int32 / int64, predictions ``[B, C]`` float32 ->
    bool ``[B]``.  O(B * C): one compare of each row with its target's value.

    Raises:
      ValueError: shapes that do not match; a traced ``k``.
    """
    t = _indices(targets, "in_top_k")
    p = convert(read_if_variable(predictions))
    ts, ps = shape_of(t), shape_of(p)
    if len(ps) != 2 or ts != ps[:1]:
        raise ValueError(f"in_top_k: predictions must be [batch, classes] and targets [batch], got {ps} and {ts}")
    kk = _static_int(k, "k", "in_top_k")
    b, c = ps
    # The prediction at each target: a gather batched over the rows.
    (target_value,) = bind(
        GatherOp,
        [p, t],
        offset_dims=(),
        collapsed_slice_dims=(1,),
        operand_batching_dims=(0,),
        start_indices_batching_dims=(0,),
        start_index_map=(1,),
        index_vector_dim=1,
        slice_sizes=(min(1, b), min(1, c)),
    )
    dt = dtype_of(p)
    (tv,) = bind(hlo.BroadcastInDimOp, [target_value], broadcast_dimensions=(0,), shape=ps)
    larger = _cmp(p, tv, "GT")
    (n_larger,) = bind(hlo.ConvertOp, [larger], dtype="int32")
    (n_larger,) = bind(hlo.ReduceOp, [n_larger, scalar(0, "int32")], computation="add", dimensions=(1,))
    ok = _cmp(n_larger, broadcast_to(scalar(kk, "int32"), (b,)), "LT")
    ok = _and(ok, _in_range(t, c))
    # A non-finite prediction at the target is never in the top k (TF).
    finite = _and(
        _cmp(target_value, target_value, "EQ"), _cmp(target_value, broadcast_to(scalar(np.inf, dt), (b,)), "LT")
    )
    finite = _and(finite, _cmp(target_value, broadcast_to(scalar(-np.inf, dt), (b,)), "GT"))
    return _and(ok, finite)


def where(condition: Any, x: Any = None, y: Any = None, name: str | None = None) -> Any:
    """``x`` where ``condition`` else ``y``, the three broadcast together
    (tf.where, TF 2's where_v2; StableHLO select).  With ``x`` and ``y``
    None: the int64 coordinates ``[N, rank]`` of the ``N`` true elements in
    row-major order (tf.where's one-argument form).

    Compiled, ``N`` depends on the data: as TF's XLA bridge does (its
    ``Where`` kernel), the result is a bounded dynamic shape, padded to the
    number of elements of ``condition`` with its real row count set by
    ``hlo.set_dimension_size``; ``tpu-pad-dynamic-shapes`` keeps the ops
    that read it exact (reductions, ``gather_nd`` of its rows, ``tf.shape``)
    and ``replicate`` returns each replica's result with its real row
    count.  Built from one stable ``hlo.sort`` of the flattened condition
    (true first) with an iota: O(size log size).

    Raises:
      TypeError: ``condition`` is not bool, or x / y dtypes differ.
      ValueError: the shapes do not broadcast; only one of x, y given.
    """
    c = convert(read_if_variable(condition))
    if dtype_of(c) != "bool":
        raise TypeError(f"where: condition must be bool, got {dtype_of(c)}")
    if x is None and y is None:
        if isinstance(c, Tensor):
            return _where_coordinates(c)
        return np.argwhere(np.asarray(c)).astype(np.int64)
    if x is None or y is None:
        raise ValueError("where: x and y must both be given, or both be None")
    xv, yv = unify([x, y], "where")
    shape = broadcast_shapes(shape_of(c), shape_of(xv), shape_of(yv), op="where")
    (out,) = bind(hlo.SelectOp, [broadcast_to(c, shape), broadcast_to(xv, shape), broadcast_to(yv, shape)])
    return out


def _where_coordinates(c: Tensor) -> Tensor:
    """The traced one-argument ``where``: every element's coordinates,
    those of the true elements first in row-major order (a stable sort on
    ``not c``), their count as the real size of dimension 0."""
    shape = shape_of(c)
    n = int(np.prod(shape, dtype=np.int64))
    (flat,) = bind(hlo.ReshapeOp, [c], shape=(n,))
    (false_first,) = bind(hlo.NotOp, [flat])
    (key,) = bind(hlo.ConvertOp, [false_first], dtype="int32")
    (iota,) = bind(hlo.IotaOp, [], iota_dimension=0, shape=(n,), dtype="int64")
    _, order = _sort_along([key, iota], 0, ("LT",))
    columns, rest = [], order
    for d in reversed(range(len(shape))):  # row-major: the last dimension varies fastest
        col = rest
        if d:
            size = broadcast_to(scalar(shape[d], "int64"), (n,))
            (rest,) = bind(hlo.DivideOp, [col, size])
            (back,) = bind(hlo.MultiplyOp, [rest, size])
            (col,) = bind(hlo.SubtractOp, [col, back])
        (col,) = bind(hlo.ReshapeOp, [col], shape=(n, 1))
        columns.insert(0, col)
    coords = columns[0] if len(columns) == 1 else concat(columns, axis=1)
    if not shape:
        coords = broadcast_to(scalar(0, "int64"), (1, 0))
    (count,) = bind(hlo.ConvertOp, [flat], dtype=SIZE_DTYPE)
    (count,) = bind(hlo.ReduceOp, [count, scalar(0, SIZE_DTYPE)], computation="add", dimensions=(0,))
    (out,) = bind(SetDimensionSizeOp, [coords, count], dimension=0)
    c.trace.padded = True
    return out


__all__ = [
    "argmax",
    "argmin",
    "argsort",
    "embedding_lookup",
    "gather",
    "gather_nd",
    "in_top_k",
    "one_hot",
    "scatter_nd",
    "segment_sum",
    "sort",
    "tensor_scatter_nd_add",
    "tensor_scatter_nd_max",
    "tensor_scatter_nd_min",
    "tensor_scatter_nd_sub",
    "tensor_scatter_nd_update",
    "top_k",
    "unsorted_segment_max",
    "unsorted_segment_mean",
    "unsorted_segment_min",
    "unsorted_segment_prod",
    "unsorted_segment_sum",
    "where",
]
