"""StableHLO's indexing and sorting ops in the ``hlo`` dialect: ``hlo.gather``,
``hlo.scatter``, ``hlo.sort`` and ``hlo.variadic_reduce`` (argmax / argmin).

Each op follows the StableHLO op of the same name
(https://openxla.org/stablehlo/spec, sections gather, scatter, sort and
reduce) with its dimension numbers spelled out as properties; the verifier
names the spec's constraint that an op breaks, ``(C4)`` and so on.  The
numpy kernels cost O(output): ``np.take`` / advanced indexing for gather,
``ufunc.at`` for scatter, ``argsort(kind="stable")`` / ``lexsort`` and
``take_along_axis`` for sort; none builds a one-hot mask or broadcasts a
whole operand.

Out-of-range indices follow XLA: a gather clamps each start index into
``[0, dim - slice_size]`` (StableHLO), a scatter drops an update window
whose start is outside ``[0, dim - window_size]`` (XLA; the spec leaves it
to the implementation).  TF's ops on top of these (``xtpu.gather`` ...)
choose their own rule, see :mod:`xtpu.ops.gather_ops`.

Gradients: gather <-> scatter-add (each is the other's transpose, the gather
indices clamped first so that nothing is dropped), sort through its
permutation, argmax / argmin to the chosen element.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    IntegerType,
    TensorType,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, SpacedOpaqueSyntaxAttribute
from xdsl.irdl import (
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.str_enum import StrEnum

from xtpu.dialects import vjp_util as G
from xtpu.dialects.hlo import (
    COMPLEX,
    FLOATS,
    INTS,
    NUMERIC,
    AndOp,
    ComparisonDirection,
    ComparisonDirectionAttr,
    ConstantOp,
    IotaOp,
    MaximumOp,
    MinimumOp,
    NotOp,
)
from xtpu.dialects.primitive import EnumParam, IntArrayParam, IntParam, Param, PrimitiveOp, ShapeError
from xtpu.dialects.tensor_spec import TensorSpec

INDEXABLE = NUMERIC + ("bool",)
#: gather and scatter move complex64 values too (sort does not: not ordered).
MOVABLE = INDEXABLE + COMPLEX
_LOW_PRECISION_NP = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))


class BoolParam(Param):
    """A bool, stored as ``true`` / ``false`` (an ``i1`` integer attribute)."""

    def encode(self, value: Any) -> Attribute:
        return IntegerAttr(1 if value else 0, IntegerType(1))

    def decode(self, attr: Attribute) -> bool:
        assert isinstance(attr, IntegerAttr)
        return bool(attr.value.data)


def _c(rule: str, message: str) -> ShapeError:
    """A ShapeError naming the StableHLO constraint ``rule`` (``"C4"``)."""
    return ShapeError(f"{message} ({rule})")


def _ints(v: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(x) for x in v)


def _unique(dims: Sequence[int]) -> bool:
    return len(set(dims)) == len(dims)


def _sorted(dims: Sequence[int]) -> bool:
    return list(dims) == sorted(dims)


def _in_range(dims: Sequence[int], n: int) -> bool:
    return all(0 <= d < n for d in dims)


def _index_dtype(spec: TensorSpec, what: str) -> None:
    if spec.dtype not in INTS:
        raise ShapeError(f"{what} must be int32 or int64, got {spec}")


def _batch_shape(indices: TensorSpec, index_vector_dim: int) -> tuple[int, ...]:
    """The shape of ``indices`` without ``index_vector_dim``."""
    return tuple(n for d, n in enumerate(indices.shape) if d != index_vector_dim)


def _combine(rank: int, window_dims: Sequence[int], windows: Sequence[int], batch: Sequence[int]) -> tuple[int, ...]:
    """StableHLO's ``combine``: window sizes at ``window_dims``, the batch
    sizes at the other positions, in order."""
    out, w, b = [], iter(windows), iter(batch)
    for r in range(rank):
        out.append(next(w) if r in window_dims else next(b))
    return tuple(out)


def _index_vectors(idx: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """``idx`` with its index vectors along a last axis (of length 1 when
    ``index_vector_dim`` is the rank: StableHLO's implicit trailing 1)."""
    if index_vector_dim == idx.ndim:
        return idx[..., None]
    return np.moveaxis(idx, index_vector_dim, -1)


def _batch_axis(indices_dim: int, index_vector_dim: int) -> int:
    """The position of an indices dimension among the batch dimensions."""
    return indices_dim if indices_dim < index_vector_dim else indices_dim - 1


def _axis_range(n: int, axis: int, ndim: int, dtype=np.int64) -> np.ndarray:
    """``arange(n)`` along ``axis`` of an ``ndim``-d broadcastable array."""
    shape = [1] * ndim
    shape[axis] = n
    return np.arange(n, dtype=dtype).reshape(shape)


# --------------------------------------------------------------------------
# hlo.gather
# --------------------------------------------------------------------------

GATHER_PARAMS = (
    "offset_dims",
    "collapsed_slice_dims",
    "operand_batching_dims",
    "start_indices_batching_dims",
    "start_index_map",
    "index_vector_dim",
    "slice_sizes",
)


def _check_index_batching(x, x_name, xbd, idx, idx_name, ibd, ivd, first_constraint):
    """StableHLO's constraints on the batching dimensions of an indexed
    operand (gather's C13-C17, scatter's C14-C18, numbered from
    ``first_constraint``): the index batching dimensions unique, in range,
    not the index vector dimension, as many as the operand's, each pair of
    one size."""
    c = first_constraint
    if not _unique(ibd):
        raise _c(f"C{c}", f"{idx_name}_batching_dims {list(ibd)} must be unique")
    if not _in_range(ibd, idx.rank):
        raise _c(f"C{c + 1}", f"{idx_name}_batching_dims {list(ibd)} out of range for {idx_name} {idx}")
    if ivd in ibd:
        raise _c(f"C{c + 2}", f"index_vector_dim {ivd} must not be a {idx_name}_batching_dim")
    if len(xbd) != len(ibd):
        raise _c(
            f"C{c + 3}",
            f"{x_name}_batching_dims {list(xbd)} and {idx_name}_batching_dims {list(ibd)} must have one size",
        )
    for a, b in zip(xbd, ibd):
        if x.shape[a] != idx.shape[b]:
            raise _c(
                f"C{c + 4}",
                f"{x_name} batching dimension {a} (size {x.shape[a]}) and {idx_name} batching dimension "
                f"{b} (size {idx.shape[b]}) must have one size",
            )


@irdl_op_definition
class GatherOp(PrimitiveOp):
    """Slices of ``operand`` at the start indices in ``start_indices``
    (StableHLO spec: gather), with StableHLO's dimension numbers:

    * ``index_vector_dim``: the dimension of ``start_indices`` that holds the
      index vectors (equal to its rank: each index is a vector of one);
    * ``start_index_map[j]``: the operand dimension component ``j`` indexes;
    * ``slice_sizes``: the slice taken at each start, one size per operand
      dimension; a start index is clamped into ``[0, dim - size]``;
    * ``collapsed_slice_dims`` / ``operand_batching_dims``: operand dimensions
      of slice size 1 that the result drops; a batching dimension is indexed
      by the position along ``start_indices_batching_dims`` (one-to-one);
    * ``offset_dims``: where the remaining slice dimensions go in the result;
      the other result dimensions are ``start_indices``' without
      ``index_vector_dim``, in order.

    ``tf.gather(params, ids)`` along axis 0 is ``offset_dims = [1 ...],
    collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim =
    rank(ids), slice_sizes = [1, dims of params...]``.

    Syntax::

      %r = hlo.gather %table[%ids] offset_dims = [1], collapsed_slice_dims = [0],
             operand_batching_dims = [], start_indices_batching_dims = [],
             start_index_map = [0], index_vector_dim = 1, slice_sizes = [1, 4]
             : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<3x4xf32>

    The kernel is ``np.take`` for a slice along one dimension and numpy's
    advanced indexing otherwise: O(output).  Gradient: the operand gets the
    cotangent scatter-added at the (clamped) start indices (JAX's
    _gather_transpose_rule; TF's _GatherV2Grad), the indices none.
    """

    name = "hlo.gather"
    operand = operand_def(TensorType)
    start_indices = operand_def(TensorType)
    offset_dims = prop_def(DenseArrayBase[I64])
    collapsed_slice_dims = prop_def(DenseArrayBase[I64])
    operand_batching_dims = prop_def(DenseArrayBase[I64])
    start_indices_batching_dims = prop_def(DenseArrayBase[I64])
    start_index_map = prop_def(DenseArrayBase[I64])
    index_vector_dim = prop_def(IntegerAttr[I64])
    slice_sizes = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$operand `[` $start_indices `]` `offset_dims` `=` $offset_dims `,` `collapsed_slice_dims` `=`"
        " $collapsed_slice_dims `,` `operand_batching_dims` `=` $operand_batching_dims `,`"
        " `start_indices_batching_dims` `=` $start_indices_batching_dims `,` `start_index_map` `=`"
        " $start_index_map `,` `index_vector_dim` `=` $index_vector_dim `,` `slice_sizes` `=` $slice_sizes"
        " attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {
        "offset_dims": IntArrayParam(),
        "collapsed_slice_dims": IntArrayParam(),
        "operand_batching_dims": IntArrayParam(),
        "start_indices_batching_dims": IntArrayParam(),
        "start_index_map": IntArrayParam(),
        "index_vector_dim": IntParam(),
        "slice_sizes": IntArrayParam(),
    }

    @classmethod
    def make(cls, operands, **params):
        return super().make(operands, **{**params, **_gather_defaults(params)})

    @classmethod
    def infer(
        cls,
        specs,
        offset_dims=(),
        collapsed_slice_dims=(),
        operand_batching_dims=(),
        start_indices_batching_dims=(),
        start_index_map=(),
        index_vector_dim=0,
        slice_sizes=(),
        **_,
    ):
        if len(specs) != 2:
            raise ShapeError(f"hlo.gather takes an operand and start indices, got {len(specs)} operands")
        x, idx = specs
        if x.dtype not in MOVABLE:
            raise ShapeError(f"hlo.gather does not support dtype {x.dtype}")
        _index_dtype(idx, "start_indices")
        off, col = _ints(offset_dims), _ints(collapsed_slice_dims)
        obd, sibd = _ints(operand_batching_dims), _ints(start_indices_batching_dims)
        sim, sizes, ivd = _ints(start_index_map), _ints(slice_sizes), int(index_vector_dim)
        if x.rank != len(off) + len(col) + len(obd):
            raise _c(
                "C1",
                f"rank of the operand {x} must equal size(offset_dims) + size(collapsed_slice_dims) + "
                f"size(operand_batching_dims) = {len(off)} + {len(col)} + {len(obd)}",
            )
        if not 0 <= ivd <= idx.rank:
            raise _c("C2", f"index_vector_dim {ivd} must be in [0, {idx.rank}] for start_indices {idx}")
        nvec = idx.shape[ivd] if ivd < idx.rank else 1
        if len(sim) != nvec:
            raise _c("C3", f"start_index_map {list(sim)} must have {nvec} entries, the index vector size")
        if not (_unique(off) and _sorted(off)):
            raise _c("C4", f"offset_dims {list(off)} must be sorted and unique")
        batch = _batch_shape(idx, ivd)
        rank = len(batch) + len(off)
        if not _in_range(off, rank):
            raise _c("C5", f"offset_dims {list(off)} must be in [0, {rank}), the result's rank")
        if not _unique(col + obd):
            raise _c(
                "C6", f"collapsed_slice_dims {list(col)} and operand_batching_dims {list(obd)} must be disjoint, unique"
            )
        if not _sorted(col):
            raise _c("C7", f"collapsed_slice_dims {list(col)} must be sorted")
        if not _in_range(col, x.rank):
            raise _c("C8", f"collapsed_slice_dims {list(col)} out of range for the operand {x}")
        if len(sizes) != x.rank:
            raise _c("C20", f"slice_sizes {list(sizes)} must have one entry per dimension of the operand {x}")
        if any(sizes[d] > 1 for d in col):
            raise _c("C9", f"slice_sizes {list(sizes)} must be at most 1 at collapsed_slice_dims {list(col)}")
        if not _sorted(obd):
            raise _c("C10", f"operand_batching_dims {list(obd)} must be sorted")
        if not _in_range(obd, x.rank):
            raise _c("C11", f"operand_batching_dims {list(obd)} out of range for the operand {x}")
        if any(sizes[d] > 1 for d in obd):
            raise _c("C12", f"slice_sizes {list(sizes)} must be at most 1 at operand_batching_dims {list(obd)}")
        _check_index_batching(x, "operand", obd, idx, "start_indices", sibd, ivd, first_constraint=13)
        if not _unique(sim + obd):
            raise _c("C18", f"start_index_map {list(sim)} and operand_batching_dims {list(obd)} must be unique")
        if not _in_range(sim, x.rank):
            raise _c("C19", f"start_index_map {list(sim)} out of range for the operand {x}")
        for d, (n, dim) in enumerate(zip(sizes, x.shape)):
            if not 0 <= n <= dim:
                raise _c("C21", f"slice size {n} out of range for operand dimension {d} of size {dim}")
        windows = [sizes[d] for d in range(x.rank) if d not in col and d not in obd]
        return [TensorSpec(_combine(rank, off, windows, batch), x.dtype)]

    @classmethod
    def kernel(cls, **params):
        return _gather_kernel(**_gather_defaults(params))

    @classmethod
    def out_kernel(cls, **params):
        """For a gather of whole slices along one dimension: ``np.take``
        (``mode="clip"``) with ``out=``, the kernel's bits; None otherwise."""
        return getattr(_gather_kernel(**_gather_defaults(params)), "into", None)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """The cotangent scatter-added into zeros at the start indices,
        clamped as the gather clamped them (so no window is dropped); the
        indices get none (JAX's _gather_transpose_rule)."""
        (ct,), (x, idx) = cotangents, inputs
        if not G.is_float(x):
            return [None, None]
        dn = _gather_defaults(params)
        clamped = _clamp_starts(idx, dn["start_index_map"], dn["index_vector_dim"], G.shape(x), dn["slice_sizes"])
        return [G.bind1(ScatterOp, [G.zeros_like(x), clamped, ct], **_scatter_dn_of_gather(dn)), None]


def _gather_defaults(params: dict) -> dict:
    """The dimension numbers in ``params``, empty where not given."""
    return {k: params.get(k, 0 if k == "index_vector_dim" else ()) for k in GATHER_PARAMS}


def _scatter_dn_of_gather(dn: dict) -> dict:
    """The scatter whose update windows are a gather's slices."""
    return {
        "update_window_dims": dn["offset_dims"],
        "inserted_window_dims": dn["collapsed_slice_dims"],
        "input_batching_dims": dn["operand_batching_dims"],
        "scatter_indices_batching_dims": dn["start_indices_batching_dims"],
        "scatter_dims_to_operand_dims": dn["start_index_map"],
        "index_vector_dim": dn["index_vector_dim"],
        "computation": "add",
    }


def _clamp_starts(idx, start_map, index_vector_dim, shape, window_sizes) -> Any:
    """The start indices clamped into ``[0, dim - size]`` per component, as
    IR (``hlo.maximum`` / ``hlo.minimum`` against constants)."""
    ishape, dt = G.shape(idx), G.dtype(idx)
    highs = [shape[d] - window_sizes[d] for d in start_map]
    if index_vector_dim == len(ishape):
        hi = G.full(highs[0], ishape, dt)
    else:
        hi = G.broadcast(G.bind1(ConstantOp, [], value=np.asarray(highs, dtype=dt)), (index_vector_dim,), ishape)
    lo = G.full(0, ishape, dt)
    return G.bind1(MinimumOp, [G.bind1(MaximumOp, [idx, lo]), hi])


def _gather_kernel(
    offset_dims,
    collapsed_slice_dims,
    operand_batching_dims,
    start_indices_batching_dims,
    start_index_map,
    index_vector_dim,
    slice_sizes,
):
    off, col = _ints(offset_dims), _ints(collapsed_slice_dims)
    obd, sibd = _ints(operand_batching_dims), _ints(start_indices_batching_dims)
    sim, sizes, ivd = _ints(start_index_map), _ints(slice_sizes), int(index_vector_dim)
    rank = len(sizes)
    window = [d for d in range(rank) if d not in col and d not in obd]
    if len(sim) == 1 and col == sim and not obd:
        (axis,) = sim
        return _take_kernel(axis, off, sizes, window, ivd)

    def run(x, idx):
        x, iv = np.asarray(x), _index_vectors(np.asarray(idx), ivd)
        batch = iv.shape[:-1]
        nb, nd = len(batch), len(batch) + len(window)
        out_shape = tuple(batch) + tuple(sizes[d] for d in window)
        if 0 in out_shape or x.size == 0:  # nothing to read (an empty operand: every start out of range)
            return _to_result_order(np.zeros(out_shape, x.dtype), nb, off)
        arrays = []
        for d in range(rank):
            if d in sim:
                start = np.clip(iv[..., sim.index(d)], 0, x.shape[d] - sizes[d]).reshape(batch + (1,) * len(window))
            elif d in obd:
                start = _axis_range(x.shape[d], _batch_axis(sibd[obd.index(d)], ivd), nd)
            else:
                start = 0
            if d in window:
                start = start + _axis_range(sizes[d], nb + window.index(d), nd)
            arrays.append(np.asarray(start))
        got = x[tuple(arrays)]
        return _to_result_order(got, nb, off)

    return run


def _to_result_order(got: np.ndarray, nb: int, off: tuple[int, ...]) -> np.ndarray:
    """``got`` laid out batch dims then window dims, in the result's order
    (window dims at ``off``)."""
    rank = got.ndim
    perm, b = [], 0
    for r in range(rank):
        if r in off:
            perm.append(nb + off.index(r))
        else:
            perm.append(b)
            b += 1
    return got if perm == list(range(rank)) else np.transpose(got, perm)


def _take_kernel(axis, off, sizes, window, ivd):
    """A gather of whole slices along one collapsed ``axis``: ``np.take``
    (clipping the index, StableHLO's clamp) of the other dimensions'
    windows."""
    # The other dimensions' windows, cut first (a view): O(output).
    trim = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(sizes))
    orders: dict[int, list[int] | None] = {}

    def order_for(nb: int, rank: int) -> list[int] | None:
        # np.take gives the window dims before axis, the batch dims, those
        # after; the result wants the batch dims where ``off`` leaves them.
        key = nb
        if key not in orders:
            first = list(range(axis, axis + nb)) + list(range(axis)) + list(range(axis + nb, rank))
            perm, b = [], 0
            for r in range(rank):
                if r in off:
                    perm.append(nb + off.index(r))
                else:
                    perm.append(b)
                    b += 1
            full = [first[p] for p in perm]
            orders[key] = None if full == list(range(rank)) else full
        return orders[key]

    rest = sizes[:axis] + sizes[axis + 1 :]

    def operands(x, idx):
        x = np.asarray(x)
        if x.shape[:axis] + x.shape[axis + 1 :] != rest:
            x = x[trim]
        idx = np.asarray(idx)
        return x, idx if ivd == idx.ndim else np.take(idx, 0, axis=ivd)

    def run(x, idx):
        x, ids = operands(x, idx)
        if x.shape[axis] == 0:
            got = np.zeros(x.shape[:axis] + ids.shape + x.shape[axis + 1 :], x.dtype)
        else:
            got = np.take(x, ids, axis=axis, mode="clip")
        order = order_for(ids.ndim, got.ndim)
        return got if order is None else np.transpose(got, order)

    def into(out, x, idx):
        x, ids = operands(x, idx)
        if x.shape[axis] == 0:
            out.fill(0)
            return out
        order = order_for(ids.ndim, out.ndim)
        # np.take's own layout: out with the order undone (a view).
        np.take(x, ids, axis=axis, mode="clip", out=out if order is None else np.transpose(out, np.argsort(order)))
        return out

    run.into = into
    return run


# --------------------------------------------------------------------------
# hlo.scatter
# --------------------------------------------------------------------------


class ScatterComputation(StrEnum):
    """The update computation of ``hlo.scatter``: how an update combines
    with the value it lands on (StableHLO's ``update_computation`` region
    with a single op; ``replace`` returns the update)."""

    ADD = "add"
    MUL = "mul"
    MAX = "max"
    MIN = "min"
    REPLACE = "replace"


@irdl_attr_definition
class ScatterComputationAttr(EnumAttribute[ScatterComputation], SpacedOpaqueSyntaxAttribute):
    """The update computation of ``hlo.scatter``."""

    name = "hlo.scatter_computation"


SCATTER_PARAMS = (
    "update_window_dims",
    "inserted_window_dims",
    "input_batching_dims",
    "scatter_indices_batching_dims",
    "scatter_dims_to_operand_dims",
    "index_vector_dim",
)

_SCATTER_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@irdl_op_definition
class ScatterOp(PrimitiveOp):
    """``input`` with ``updates`` combined into it at the windows that
    ``scatter_indices`` start (StableHLO spec: scatter, one input and one
    update), with StableHLO's dimension numbers:

    * ``index_vector_dim``, ``scatter_dims_to_operand_dims``: as gather's
      ``index_vector_dim`` and ``start_index_map``;
    * ``update_window_dims``: the dimensions of ``updates`` that span a
      window; the others (``update_scatter_dims``) run over the indices;
    * ``inserted_window_dims`` / ``input_batching_dims``: input dimensions a
      window has size 1 in and ``updates`` has no dimension for; a batching
      dimension is indexed by the position along
      ``scatter_indices_batching_dims``;
    * ``computation``: ``add``, ``mul``, ``max``, ``min`` (the region's one
      op) or ``replace`` (the region returns the update).

    A window whose start is outside ``[0, dim - window_size]`` in some
    dimension is dropped (XLA).  Repeated indices combine every update
    (``add``, ``mul``, ``max``, ``min``); under ``replace`` one of them wins.

    Syntax::

      %r = hlo.scatter %x[%ids], %upd applies add update_window_dims = [1],
             inserted_window_dims = [0], input_batching_dims = [],
             scatter_indices_batching_dims = [], scatter_dims_to_operand_dims = [0],
             index_vector_dim = 1
             : (tensor<10x4xf32>, tensor<3xi32>, tensor<3x4xf32>) -> tensor<10x4xf32>

    The kernel is ``ufunc.at`` (``np.add.at`` ...) or an indexed assignment:
    O(updates) after the copy of ``input``.  Gradients (float): ``add``: the
    input gets the cotangent, the updates its gather at their windows (zero
    for dropped ones); ``replace``: the input gets the cotangent with the
    written positions zeroed, the updates their gather (TF's
    _TensorScatterUpdateGrad); ``max`` / ``min``: the cotangent split among
    the input and the updates that tie for the result
    (TF's _TensorScatterMinOrMaxGrad); ``mul``: the input gets the
    cotangent times the updates' product at its place, an update the
    cotangent times the other factors, exact with zeros (TF's
    _UnsortedSegmentProdGrad).
    """

    name = "hlo.scatter"
    input = operand_def(TensorType)
    scatter_indices = operand_def(TensorType)
    updates = operand_def(TensorType)
    computation = prop_def(ScatterComputationAttr)
    update_window_dims = prop_def(DenseArrayBase[I64])
    inserted_window_dims = prop_def(DenseArrayBase[I64])
    input_batching_dims = prop_def(DenseArrayBase[I64])
    scatter_indices_batching_dims = prop_def(DenseArrayBase[I64])
    scatter_dims_to_operand_dims = prop_def(DenseArrayBase[I64])
    index_vector_dim = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$input `[` $scatter_indices `]` `,` $updates `applies` $computation `update_window_dims` `=`"
        " $update_window_dims `,` `inserted_window_dims` `=` $inserted_window_dims `,` `input_batching_dims`"
        " `=` $input_batching_dims `,` `scatter_indices_batching_dims` `=` $scatter_indices_batching_dims `,`"
        " `scatter_dims_to_operand_dims` `=` $scatter_dims_to_operand_dims `,` `index_vector_dim` `=`"
        " $index_vector_dim attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {
        "computation": EnumParam(ScatterComputationAttr),
        "update_window_dims": IntArrayParam(),
        "inserted_window_dims": IntArrayParam(),
        "input_batching_dims": IntArrayParam(),
        "scatter_indices_batching_dims": IntArrayParam(),
        "scatter_dims_to_operand_dims": IntArrayParam(),
        "index_vector_dim": IntParam(),
    }

    @classmethod
    def make(cls, operands, **params):
        return super().make(operands, **{**params, **_scatter_defaults(params)})

    @classmethod
    def infer(
        cls,
        specs,
        computation="add",
        update_window_dims=(),
        inserted_window_dims=(),
        input_batching_dims=(),
        scatter_indices_batching_dims=(),
        scatter_dims_to_operand_dims=(),
        index_vector_dim=0,
        **_,
    ):
        if len(specs) != 3:
            raise _c("C5", f"hlo.scatter takes an input, scatter indices and updates, got {len(specs)} operands")
        x, idx, upd = specs
        if x.dtype not in MOVABLE:
            raise ShapeError(f"hlo.scatter does not support dtype {x.dtype}")
        if computation not in [k.value for k in ScatterComputation]:
            raise ShapeError(f"unknown scatter computation {computation!r}")
        if x.dtype in COMPLEX and computation in ("max", "min"):
            raise ShapeError(f"hlo.scatter {computation} does not support dtype {x.dtype} (not ordered)")
        if x.dtype == "bool" and computation not in ("replace", "max", "min"):
            raise ShapeError(f"hlo.scatter of bools supports replace, max and min, not {computation}")
        _index_dtype(idx, "scatter_indices")
        uwd, iwd = _ints(update_window_dims), _ints(inserted_window_dims)
        ibd, sibd = _ints(input_batching_dims), _ints(scatter_indices_batching_dims)
        sdod, ivd = _ints(scatter_dims_to_operand_dims), int(index_vector_dim)
        if x.rank != len(uwd) + len(iwd) + len(ibd):
            raise _c(
                "C2",
                f"rank of the input {x} must equal size(update_window_dims) + size(inserted_window_dims) + "
                f"size(input_batching_dims) = {len(uwd)} + {len(iwd)} + {len(ibd)}",
            )
        if upd.dtype != x.dtype:
            raise _c("C6", f"updates {upd} must have the input's element type {x.dtype}")
        if not 0 <= ivd <= idx.rank:
            raise _c("C22", f"index_vector_dim {ivd} must be in [0, {idx.rank}] for scatter_indices {idx}")
        if not (_unique(uwd) and _sorted(uwd)):
            raise _c("C7", f"update_window_dims {list(uwd)} must be sorted and unique")
        if not _in_range(uwd, upd.rank):
            raise _c("C8", f"update_window_dims {list(uwd)} out of range for updates {upd}")
        if not _unique(iwd + ibd):
            raise _c(
                "C9", f"inserted_window_dims {list(iwd)} and input_batching_dims {list(ibd)} must be disjoint, unique"
            )
        if not _sorted(iwd):
            raise _c("C10", f"inserted_window_dims {list(iwd)} must be sorted")
        if not _in_range(iwd, x.rank):
            raise _c("C11", f"inserted_window_dims {list(iwd)} out of range for the input {x}")
        if not _sorted(ibd):
            raise _c("C12", f"input_batching_dims {list(ibd)} must be sorted")
        if not _in_range(ibd, x.rank):
            raise _c("C13", f"input_batching_dims {list(ibd)} out of range for the input {x}")
        _check_index_batching(x, "input", ibd, idx, "scatter_indices", sibd, ivd, first_constraint=14)
        nvec = idx.shape[ivd] if ivd < idx.rank else 1
        if len(sdod) != nvec:
            raise _c(
                "C19", f"scatter_dims_to_operand_dims {list(sdod)} must have {nvec} entries, the index vector size"
            )
        if not _unique(sdod + ibd):
            raise _c(
                "C20",
                f"scatter_dims_to_operand_dims {list(sdod)} and input_batching_dims {list(ibd)} must be unique",
            )
        if not _in_range(sdod, x.rank):
            raise _c("C21", f"scatter_dims_to_operand_dims {list(sdod)} out of range for the input {x}")
        batch = _batch_shape(idx, ivd)
        window_in = [d for d in range(x.rank) if d not in iwd and d not in ibd]
        if upd.rank != len(batch) + len(uwd):
            raise _c("C4", f"updates {upd} must have rank {len(batch) + len(uwd)}: the scatter and window dimensions")
        windows = [upd.shape[d] for d in uwd]
        want = _combine(upd.rank, uwd, windows, batch)
        if upd.shape != want or any(w > x.shape[d] for w, d in zip(windows, window_in)):
            bound = [x.shape[d] for d in window_in]
            raise _c(
                "C4",
                f"updates {upd} must have the scatter dimensions {list(batch)} and window sizes at most "
                f"{bound} (at update_window_dims {list(uwd)})",
            )
        return [x]

    @classmethod
    def kernel(cls, computation="add", **params):
        return _scatter_kernel(computation, **_scatter_defaults(params))

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, computation="add", **params):
        (ct,), (x, idx, upd), (y,) = cotangents, inputs, outputs
        if not G.is_float(x):
            return [None, None, None]
        dn = _scatter_defaults(params)
        if computation == "add":
            return [ct, None, _gather_updates(ct, idx, upd, dn)]
        if computation == "replace":
            dx = G.bind1(ScatterOp, [ct, idx, G.zeros_like(upd)], computation="replace", **dn)
            return [dx, None, _gather_updates(ct, idx, upd, dn)]
        if computation in ("max", "min"):
            dt = G.dtype(x)
            x_ind = G.convert(G.compare(x, y, "EQ"), dt)
            upd_ind = G.convert(G.compare(upd, _gather_updates(y, idx, upd, dn), "EQ"), dt)
            count = G.bind1(ScatterOp, [x_ind, idx, upd_ind], computation="add", **dn)
            share = G.div(ct, count)
            return [G.mul(x_ind, share), None, G.mul(upd_ind, _gather_updates(share, idx, upd, dn))]
        # mul: y = x * prod(updates at the place).  The input gets ct times
        # that product; an update gets ct * y / itself, computed without a
        # division by zero from the product of the nonzero factors and their
        # count of zeros (TF's _UnsortedSegmentProdGrad).
        dt = G.dtype(x)
        dx = G.bind1(ScatterOp, [ct, idx, upd], computation="mul", **dn)
        is_zero = G.compare(upd, G.zeros_like(upd), "EQ")
        nonzero = G.select(is_zero, G.full_like(upd, 1), upd)
        zeros = G.bind1(ScatterOp, [G.zeros_like(x), idx, G.convert(is_zero, dt)], computation="add", **dn)
        prod_nz = G.bind1(ScatterOp, [x, idx, nonzero], computation="mul", **dn)
        at_z = _gather_updates(zeros, idx, upd, dn)
        at_p = _gather_updates(G.mul(ct, prod_nz), idx, upd, dn)
        none = G.compare(at_z, G.zeros_like(at_z), "EQ")
        one = G.compare(at_z, G.full_like(at_z, 1), "EQ")
        others = G.select(
            is_zero, G.select(one, at_p, G.zeros_like(at_p)), G.select(none, G.div(at_p, nonzero), G.zeros_like(at_p))
        )
        return [dx, None, others]


def _scatter_defaults(params: dict) -> dict:
    """The dimension numbers in ``params``, empty where not given."""
    return {k: params.get(k, 0 if k == "index_vector_dim" else ()) for k in SCATTER_PARAMS}


def _gather_updates(v, idx, upd, dn) -> Any:
    """``v`` (input-shaped) at every update position, 0 where the window was
    dropped: the transpose of a scatter-add."""
    vshape, ushape = G.shape(v), G.shape(upd)
    uwd, iwd, ibd = dn["update_window_dims"], dn["inserted_window_dims"], dn["input_batching_dims"]
    window_in = [d for d in range(len(vshape)) if d not in iwd and d not in ibd]
    wsize = {d: ushape[u] for d, u in zip(window_in, uwd)}
    sizes = tuple(wsize.get(d, min(1, vshape[d])) for d in range(len(vshape)))
    ivd, sdod = dn["index_vector_dim"], dn["scatter_dims_to_operand_dims"]
    got = G.bind1(
        GatherOp,
        [v, idx],
        offset_dims=uwd,
        collapsed_slice_dims=iwd,
        operand_batching_dims=ibd,
        start_indices_batching_dims=dn["scatter_indices_batching_dims"],
        start_index_map=sdod,
        index_vector_dim=ivd,
        slice_sizes=sizes,
    )
    # Windows out of range were dropped by the scatter: their updates get 0.
    ishape = G.shape(idx)
    valid = None
    for j, d in enumerate(sdod):
        if ivd == len(ishape):
            comp = idx
        else:
            start = [0] * len(ishape)
            limit = list(ishape)
            start[ivd], limit[ivd] = j, j + 1
            comp = G.reshape(G.slice_(idx, start, limit), [n for k, n in enumerate(ishape) if k != ivd])
        ok = G.bind1(
            AndOp,
            [
                G.compare(comp, G.full_like(comp, 0), "GE"),
                G.compare(comp, G.full_like(comp, vshape[d] - sizes[d]), "LE"),
            ],
        )
        valid = ok if valid is None else G.bind1(AndOp, [valid, ok])
    if valid is None:
        return got
    scatter_dims = [r for r in range(len(ushape)) if r not in uwd]
    mask = G.broadcast(valid, scatter_dims, ushape)
    return G.select(mask, got, G.zeros_like(got))


def _scatter_kernel(
    computation,
    update_window_dims,
    inserted_window_dims,
    input_batching_dims,
    scatter_indices_batching_dims,
    scatter_dims_to_operand_dims,
    index_vector_dim,
):
    uwd, iwd = _ints(update_window_dims), _ints(inserted_window_dims)
    ibd, sibd = _ints(input_batching_dims), _ints(scatter_indices_batching_dims)
    sdod, ivd = _ints(scatter_dims_to_operand_dims), int(index_vector_dim)
    ufunc = _SCATTER_UFUNC.get(computation)
    rows_below = len(sdod) == 1 and list(iwd) == list(sdod)
    if computation == "add" and rows_below and list(ibd) == [0] and list(sibd) == [0] and ivd > 0 and 0 not in uwd:
        # A leading batching dimension of all three (the input's, the
        # indices' and so the updates' dimension 0: a batch of independent
        # scatter-adds of rows, as passes/batch_replicas.py makes them from
        # a gather's gradient): each batch element through the rows fast
        # path of one scatter, whose order of additions it then has (the
        # same bits as unbatched; the general path below adds in another
        # order).  Other computations are exact in any order.
        one = _scatter_kernel(
            computation,
            [d - 1 for d in uwd],
            [d - 1 for d in iwd],
            [d - 1 for d in ibd[1:]],
            [d - 1 for d in sibd[1:]],
            [d - 1 for d in sdod],
            ivd - 1,
        )

        def batch(x, idx, upd):
            x, idx, upd = np.asarray(x), np.asarray(idx), np.asarray(upd)
            return np.stack([one(x[j], idx[j], upd[j]) for j in range(x.shape[0])]) if x.shape[0] else x.copy()

        return batch

    def combine(out, where, values):
        if ufunc is None:
            out[where] = values
        else:
            ufunc.at(out, where, values)

    if len(sdod) == 1 and iwd == sdod and not ibd:
        (axis,) = sdod

        def rows(x, idx, upd):
            out = np.array(x, copy=True)
            idx, upd = np.asarray(idx), np.asarray(upd)
            ids = idx if ivd == idx.ndim else np.take(idx, 0, axis=ivd)
            scatter_dims = [r for r in range(upd.ndim) if r not in uwd]
            u = np.transpose(upd, scatter_dims + list(uwd)).reshape((ids.size,) + tuple(upd.shape[r] for r in uwd))
            ids = ids.reshape(-1)
            moved = np.moveaxis(out, axis, 0)  # a view: writes land in out
            full = tuple(slice(0, n) for n in u.shape[1:])
            keep = (ids >= 0) & (ids < moved.shape[0])
            if not keep.all():
                ids, u = ids[keep], u[keep]
            if computation == "add" and ids.size:
                _add_rows(moved[(slice(None),) + full], ids, u)
            else:
                combine(moved[(slice(None),) + full], ids, u)
            return out

        return rows

    def run(x, idx, upd):
        out = np.array(x, copy=True)
        iv, upd = _index_vectors(np.asarray(idx), ivd), np.asarray(upd)
        batch = iv.shape[:-1]
        nb = len(batch)
        window_in = [d for d in range(out.ndim) if d not in iwd and d not in ibd]
        scatter_dims = [r for r in range(upd.ndim) if r not in uwd]
        u = np.transpose(upd, scatter_dims + list(uwd))  # batch dims, then window dims
        wsizes = u.shape[nb:]
        nd = nb + len(window_in)
        if u.size == 0:
            return out
        keep = np.ones(batch, bool)
        arrays = []
        for d in range(out.ndim):
            if d in sdod:
                start = iv[..., sdod.index(d)]
                w = wsizes[window_in.index(d)] if d in window_in else 1
                keep &= (start >= 0) & (start <= out.shape[d] - w)
                start = start.reshape(batch + (1,) * len(window_in))
            elif d in ibd:
                start = _axis_range(out.shape[d], _batch_axis(sibd[ibd.index(d)], ivd), nd)
            else:
                start = np.zeros((1,) * nd, np.int64)
            if d in window_in:
                start = start + _axis_range(wsizes[window_in.index(d)], nb + window_in.index(d), nd)
            arrays.append(start)
        full = np.broadcast_arrays(*arrays, u)
        sel = np.broadcast_to(keep.reshape(batch + (1,) * len(window_in)), u.shape)
        combine(out, tuple(a[sel] for a in full[:-1]), full[-1][sel])
        return out

    return run


def _add_rows(out: np.ndarray, ids: np.ndarray, u: np.ndarray) -> None:
    """``np.add.at(out, ids, u)`` along the first axis, as one sort and one
    ``np.add.reduceat`` (row sums of equal ids), then a fancy ``+=`` of the
    distinct rows: O(updates log updates) with numpy's fast paths instead of
    ``ufunc.at``'s element loop."""
    if ids.size == 1 or u[0].size == 1:
        np.add.at(out, ids, u)
        return
    order = np.argsort(ids, kind="stable")
    sid = ids[order]
    starts = np.flatnonzero(np.concatenate(([True], sid[1:] != sid[:-1])))
    if starts.size == sid.size:  # no repeats
        out[sid] += u[order]
        return
    sums = np.add.reduceat(u[order], starts, axis=0)
    out[sid[starts]] += sums


# --------------------------------------------------------------------------
# hlo.sort
# --------------------------------------------------------------------------


class DirectionsParam(Param):
    """A tuple of comparison directions (``"LT"`` / ``"GT"``), stored as an
    array of ``#hlo<comparison_direction ...>``."""

    def encode(self, value: Sequence[str]) -> Attribute:
        return ArrayAttr([ComparisonDirectionAttr(ComparisonDirection(str(v))) for v in value])

    def decode(self, attr: Attribute) -> tuple[str, ...]:
        assert isinstance(attr, ArrayAttr)
        return tuple(str(a.data.value) for a in attr.data)  # type: ignore[attr-defined]


@irdl_op_definition
class SortOp(PrimitiveOp):
    """Sort ``inputs`` together along ``dimension`` (StableHLO spec: sort):
    the first ``len(comparison_directions)`` inputs are the keys, compared in
    order (lexicographically) with ``LT`` (ascending) or ``GT``
    (descending); the other inputs move with them.  StableHLO's comparator
    region is, here, that list of directions.

    The sort is always stable (elements with equal keys keep their order:
    the lower index first, as TF's ``top_k`` and ``argsort`` need);
    ``is_stable`` records what the program asked for.  NaN sorts after every
    number in both directions (numpy's order).

    Syntax::

      %s:2 = hlo.sort %keys, %values dim = 1 directions = [GT] stable
               : (tensor<2x5xf32>, tensor<2x5xi32>) -> (tensor<2x5xf32>, tensor<2x5xi32>)

    Kernel: ``argsort(kind="stable")`` (one key) or ``lexsort``, then
    ``take_along_axis``.  Gradient: each float input's cotangent is the
    result's put back through the permutation (the permutation sorted back
    with the cotangents as payload: one more ``hlo.sort``).
    """

    name = "hlo.sort"
    inputs = var_operand_def(TensorType)
    dimension = prop_def(IntegerAttr[I64])
    is_stable = prop_def(IntegerAttr[IntegerType])
    comparison_directions = prop_def(ArrayAttr[ComparisonDirectionAttr])
    results_ = var_result_def(TensorType)
    traits = traits_def(Pure())
    PARAMS: ClassVar = {
        "dimension": IntParam(),
        "is_stable": BoolParam(),
        "comparison_directions": DirectionsParam(),
    }

    @classmethod
    def make(cls, operands, **params):
        out = dict(params)
        out.setdefault("is_stable", True)
        out.setdefault("comparison_directions", ("LT",))
        out.setdefault("dimension", 0)
        return super().make(operands, **out)

    @classmethod
    def encode_params(cls, params):
        out = dict(params)
        out.setdefault("is_stable", True)
        return super().encode_params(out)

    @classmethod
    def infer(cls, specs, dimension=0, is_stable=True, comparison_directions=("LT",), **_):
        if not specs:
            raise _c("C1", "hlo.sort needs at least one input")
        first = specs[0]
        for s in specs[1:]:
            if s.shape != first.shape:
                raise _c("C3", f"inputs of hlo.sort must have one shape, got {first} and {s}")
        for s in specs:
            if s.dtype not in INDEXABLE:
                raise ShapeError(f"hlo.sort does not support dtype {s.dtype}")
        if not -first.rank <= dimension < first.rank:
            raise _c("C4", f"dimension {dimension} out of range for rank {first.rank}")
        dirs = tuple(comparison_directions)
        if not 1 <= len(dirs) <= len(specs):
            raise _c("C5", f"comparison_directions [{', '.join(dirs)}] must give 1 to {len(specs)} keys")
        if any(d not in ("LT", "GT") for d in dirs):
            raise _c("C5", f"comparison_directions [{', '.join(dirs)}] must be LT or GT (a strict weak order)")
        return list(specs)

    @classmethod
    def kernel(cls, dimension=0, comparison_directions=("LT",), **_):
        dirs = tuple(comparison_directions)

        def run(*xs):
            xs = [np.asarray(x) for x in xs]
            axis = dimension % xs[0].ndim if xs[0].ndim else 0
            if xs[0].ndim == 0:
                return tuple(xs) if len(xs) > 1 else xs[0]
            keys = [_ascending_key(k, d) for k, d in zip(xs, dirs)]
            if len(keys) == 1:
                perm = np.argsort(keys[0], axis=axis, kind="stable")
            else:
                perm = np.lexsort(keys[::-1], axis=axis)
            out = tuple(np.take_along_axis(x, perm, axis=axis) for x in xs)
            return out if len(out) > 1 else out[0]

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, dimension=0, comparison_directions=("LT",), **params):
        """Each float input gets its result's cotangent put back in the
        input's order: the sort's permutation (an iota sorted along) sorted
        back ascending with the cotangents as payload (JAX's _sort_jvp)."""
        floats = [i for i, x in enumerate(inputs) if G.is_float(x)]
        if not floats:
            return [None] * len(inputs)
        shape = G.shape(inputs[0])
        axis = dimension % len(shape) if shape else 0
        if not shape:
            return [cotangents[i] if i in floats else None for i in range(len(inputs))]
        iota = G.bind1(IotaOp, [], iota_dimension=axis, shape=shape, dtype="int64")
        keys = list(inputs[: len(comparison_directions)])
        sorted_all = _bind_sort(keys + [iota], axis, comparison_directions)
        perm = sorted_all[-1]
        back = _bind_sort([perm] + [cotangents[i] for i in floats], axis, ("LT",))
        grads: list[Any] = [None] * len(inputs)
        for i, g in zip(floats, back[1:]):
            grads[i] = g
        return grads

    def print(self, printer: Printer) -> None:
        p = self.params()
        printer.print_string(" ")
        printer.print_list(self.inputs, printer.print_operand)
        printer.print_string(f" dim = {p['dimension']} directions = [{', '.join(p['comparison_directions'])}]")
        if p["is_stable"]:
            printer.print_string(" stable")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_operation_type(self)

    @classmethod
    def parse(cls, parser: Parser) -> SortOp:
        unresolved = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        parser.parse_keyword("dim")
        parser.parse_punctuation("=")
        dim = parser.parse_integer()
        parser.parse_keyword("directions")
        parser.parse_punctuation("=")
        dirs = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_identifier)
        stable = parser.parse_optional_keyword("stable") is not None
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ftype = parser.parse_function_type()
        operands = parser.resolve_operands(unresolved, ftype.inputs.data, parser.pos)
        op = cls.create(
            operands=operands,
            result_types=list(ftype.outputs.data),
            properties=cls.encode_params({"dimension": dim, "is_stable": stable, "comparison_directions": dirs}),
        )
        op.attributes.update(attrs)
        return op


def _ascending_key(x: np.ndarray, direction: str) -> np.ndarray:
    """A key whose ascending order is ``x``'s order under ``direction``
    (``GT``: ``-x`` for floats, NaN still last; ``~x`` for ints and bools,
    exact at the minimum).  bfloat16 and float16 keys are compared as
    float32 (exact): numpy's sort does not order ml_dtypes' bfloat16."""
    if x.dtype in _LOW_PRECISION_NP:
        x = x.astype(np.float32)
    if direction == "LT":
        return x
    if x.dtype.kind == "f":
        return -x
    return ~x


def _bind_sort(values, axis, directions) -> list:
    return G.bind(SortOp, list(values), dimension=axis, is_stable=True, comparison_directions=tuple(directions))


# --------------------------------------------------------------------------
# hlo.variadic_reduce: argmax / argmin
# --------------------------------------------------------------------------


class ArgReduction(StrEnum):
    """The body of a two-input ``hlo.variadic_reduce``: the (value, index)
    pair with the larger (``argmax``) or smaller (``argmin``) value wins, the
    lower index on ties, NaN over any number (XLA's and JAX's argmax)."""

    ARGMAX = "argmax"
    ARGMIN = "argmin"


@irdl_attr_definition
class ArgReductionAttr(EnumAttribute[ArgReduction], SpacedOpaqueSyntaxAttribute):
    """The body of ``hlo.variadic_reduce``."""

    name = "hlo.arg_reduction"


@irdl_op_definition
class VariadicReduceOp(PrimitiveOp):
    """StableHLO's reduce over two inputs at once, ``(values, indices)``
    with inits ``(init_value, init_index)``, whose body keeps the pair with
    the larger (``argmax``) or smaller (``argmin``) value, the lower index on
    ties, NaN over any number (StableHLO spec: reduce, variadic form; XLA's
    and JAX's argmax / argmin are this reduce with an iota as the indices).
    One pass over ``values``, no second reduce over a mask.

    Syntax::

      %v, %i = hlo.variadic_reduce(%x init : %ninf), (%iota init : %zero) applies argmax
                 across dimensions = [1]
                 : (tensor<2x5xf32>, tensor<2x5xi64>, tensor<f32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xi64>)

    Operands: ``input`` (numeric), ``index`` (int32 / int64, same shape),
    then the two init scalars of their dtypes.  Results: the reduced values
    and indices.  Gradient: the value result's cotangent goes to the chosen
    element (``index == result index`` and ``value == result``), or to
    ``init_value`` when nothing was chosen; the indices get none.
    """

    name = "hlo.variadic_reduce"
    input = operand_def(TensorType)
    index = operand_def(TensorType)
    init_value = operand_def(TensorType)
    init_index = operand_def(TensorType)
    computation = prop_def(ArgReductionAttr)
    dimensions = prop_def(DenseArrayBase[I64])
    value_result = result_def(TensorType)
    index_result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "`(` $input `init` `:` $init_value `)` `,` `(` $index `init` `:` $init_index `)` `applies` $computation"
        " `across` `dimensions` `=` $dimensions attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {"computation": EnumParam(ArgReductionAttr), "dimensions": IntArrayParam()}

    @classmethod
    def infer(cls, specs, computation="argmax", dimensions=(), **_):
        if len(specs) != 4:
            raise _c("C3", f"hlo.variadic_reduce takes input, index and their inits, got {len(specs)} operands")
        x, i, v0, i0 = specs
        if x.dtype not in NUMERIC:
            raise ShapeError(f"hlo.variadic_reduce does not support dtype {x.dtype}")
        if i.shape != x.shape:
            raise _c("C1", f"inputs must have one shape, got {x} and {i}")
        _index_dtype(i, "the index input")
        if v0.shape != () or v0.dtype != x.dtype:
            raise _c("C2", f"init_value must be a scalar of the input's dtype {x.dtype}, got {v0}")
        if i0.shape != () or i0.dtype != i.dtype:
            raise _c("C2", f"init_index must be a scalar of the index dtype {i.dtype}, got {i0}")
        if computation not in ("argmax", "argmin"):
            raise ShapeError(f"unknown computation {computation!r}; expected argmax or argmin")
        dims = _ints(dimensions)
        if not _unique(dims):
            raise _c("C5", f"dimensions {list(dims)} has duplicates")
        if not _in_range(dims, x.rank):
            raise _c("C4", f"dimensions {list(dims)} out of range for rank {x.rank}")
        shape = tuple(n for d, n in enumerate(x.shape) if d not in dims)
        return [TensorSpec(shape, x.dtype), TensorSpec(shape, i.dtype)]

    @classmethod
    def kernel(cls, computation="argmax", dimensions=(), **_):
        dims = _ints(dimensions)
        better = np.greater if computation == "argmax" else np.less

        def run(x, i, v0, i0):
            x, i = np.asarray(x), np.asarray(i)
            dtype = x.dtype
            if dtype in _LOW_PRECISION_NP:  # compared as float32 (exact), NaN as a float's
                x, v0 = x.astype(np.float32), np.asarray(v0).astype(np.float32)
            kept = [d for d in range(x.ndim) if d not in dims]
            out_shape = tuple(x.shape[d] for d in kept)
            n = int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
            xr = np.transpose(x, kept + sorted(dims)).reshape(out_shape + (n,))
            ir = np.transpose(i, kept + sorted(dims)).reshape(out_shape + (n,))
            v0, i0 = np.asarray(v0)[()], np.asarray(i0)[()]
            if n == 0:
                return np.full(out_shape, v0, dtype), np.full(out_shape, i0, i.dtype)
            m = xr.max(axis=-1) if computation == "argmax" else xr.min(axis=-1)  # NaN propagates
            hit = xr == m[..., None]
            if x.dtype.kind == "f":
                hit |= np.isnan(xr) & np.isnan(m)[..., None]
            big = np.iinfo(i.dtype).max
            idx = np.where(hit, ir, big).min(axis=-1)
            # The init is one more candidate.
            if x.dtype.kind == "f":
                init_nan, m_nan = np.isnan(v0), np.isnan(m)
                init_wins = (
                    (init_nan & ~m_nan)
                    | (~init_nan & ~m_nan & better(v0, m))
                    | (((init_nan & m_nan) | (v0 == m)) & (i0 < idx))
                )
            else:
                init_wins = better(v0, m) | ((v0 == m) & (i0 < idx))
            if np.any(init_wins):
                m = np.where(init_wins, v0, m)
                idx = np.where(init_wins, i0, idx)
            return np.asarray(m, dtype), np.asarray(idx, i.dtype)

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, computation="argmax", dimensions=(), **params):
        """The value cotangent at the chosen element (its index and value
        equal the results'), else at ``init_value``; indices get none."""
        (ct, _), (x, i, _, _), (v, idx) = cotangents, inputs, outputs
        if not G.is_float(x):
            return [None, None, None, None]
        xshape = G.shape(x)
        dims = _ints(dimensions)
        kept = tuple(d for d in range(len(xshape)) if d not in dims)
        chosen = G.bind1(
            AndOp,
            [G.compare(i, G.broadcast(idx, kept, xshape), "EQ"), G.compare(x, G.broadcast(v, kept, xshape), "EQ")],
        )
        dx = G.select(chosen, G.broadcast(ct, kept, xshape), G.zeros_like(x))
        any_chosen = G.reduce(chosen, "or", dims, G.scalar(False, "bool"))
        dinit = G.sum_all(G.select(G.bind1(NotOp, [any_chosen]), ct, G.zeros_like(ct)))
        return [dx, None, dinit, None]


INDEXING_OPS = [GatherOp, ScatterOp, SortOp, VariadicReduceOp]
INDEXING_ATTRS = [ScatterComputationAttr, ArgReductionAttr]

__all__ = [
    "GatherOp",
    "ScatterOp",
    "SortOp",
    "VariadicReduceOp",
    "INDEXING_OPS",
    "INDEXING_ATTRS",
    "FLOATS",
]
