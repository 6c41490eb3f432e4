"""``tpu-propagate-sharding``: from the ``tpu.sharding_constraint`` annotations
to a sharding for every value of a replica split over logical devices.

The model is XLA's GSPMD ``ShardingPropagation`` (``xla/service/sharding_propagation.cc``
with ``xla/hlo/utils/hlo_sharding_util.cc``), on xtpu's ``#tpu.sharding``
(XLA's ``HloSharding``).  Shardy (``sdy``) and MLIR's ``shard`` dialect
(``sharding-propagation``) propagate the same way, per dimension or factor.
The result is the contract of ``docs/logical-devices.md``:

* every op with results in the body of a device ``tpu.replicate`` (recursively,
  inside ``hlo.if`` / ``hlo.while`` regions too) carries
  ``tpu.sharding = [#tpu.sharding<...>, ...]``, one entry per result;
* the replicate carries ``tpu.input_shardings`` (one per body argument) and
  ``tpu.output_shardings`` (one per value ``tpu.yield`` gives);
* the block arguments of an ``hlo.while``'s ``cond`` and ``body`` have the
  sharding of the loop's result of the same index (no attribute of their own:
  :func:`sharding_of` reads the loop's).

Only replicates on the device (not ``placement = "host"``) with
``num_cores_per_replica > 1`` are annotated.  With one core every value is
whole on the only device, so the pass leaves such a replicate unchanged and
:func:`sharding_of` answers ``{replicated}`` for its values.  Ops inside a
``tpu.outside_compilation`` run on the host and get no sharding.

Rules per op (both directions: operand -> result is *forward*, result ->
operand is *backward*).  Every rule is a map between tensor dimensions: a
tiled dimension that maps to a dimension on the other side keeps its tiles
and devices; one that has no image (or whose split would not be kept) moves
into the replication dimension, as XLA's ``PartiallyReplicateTiledShardingOnDims``
does.  ``{replicated}`` and ``{maximal device=N}`` pass through every rule
unchanged.

* Elementwise ops (``hlo.add`` ... ``hlo.not``, ``compare``, ``select``,
  ``convert``), ``tpu.cross_replica_sum`` and a cross-replica
  ``ccl.all_reduce`` (each group holds one logical core of several replicas):
  operands and result share one sharding; a scalar operand (``select``'s
  predicate) is ``{replicated}``.
* ``hlo.broadcast_in_dim``: operand dimension ``i`` is result dimension
  ``broadcast_dimensions[i]`` when both have the same size; new dimensions
  and size-1 dimensions that broadcast are not tiled.  Backward, tiles on a
  new result dimension become replication of the operand.
* ``hlo.transpose``: the tile dimensions are permuted.
* ``hlo.reshape`` (GSPMD's ``ReshapeSharding``) keeps a split only where the
  split is the same block of elements on both sides.  The shapes are cut
  into groups of dimensions with equal products (size-1 dimensions aside);
  when a group's tiles cut its row-major elements into ``k`` contiguous
  chunks (dimensions before the first partly tiled one cut into single
  rows, those after it whole), the other side's group takes the tiling
  that makes the same ``k`` chunks, over as many dimensions as it needs
  (``[64,16]`` tiled ``[8,1]`` reshaped to ``[4,16,16]`` is ``[4,2,1]``,
  and back); otherwise the leading dimension's tiling alone, if that makes
  chunks on the other side.  Other tiles become replication.
* ``hlo.dot_general`` (XLA's ``InferDotShardingFromOperands``): batch
  dimensions and each operand's free dimensions carry that operand's tiling
  to the result; tiles on contracting dimensions become replication of the
  result, so lhs and rhs both tiled on ``k`` over the same devices give a
  ``{replicated}`` result (over devices that each hold a partial sum: the
  partitioner recognises the case from the operands' shardings and emits a
  local dot and an ``all_reduce``).  Lhs and rhs candidates merge when
  compatible (``[2,1,2]`` partial on ``m`` and ``[1,2,2]`` partial on ``n``
  make ``[2,2]``).  Backward, an operand takes the result's tiling of its
  batch and free dimensions, then (XLA's ``InferDotOperandSharding``) the
  other operand's tiling of batch and contracting dimensions.
* ``hlo.reduce``: the reduced dimensions leave the tiling; a reduced
  dimension that was tiled becomes replication (partial replication with
  ``last_tile_dim_replicate``, or ``{replicated}`` when no tiled dimension is
  left), as XLA's ``InferReduceShardingFromOperand``.  Backward, the kept
  dimensions take the result's tiles and the reduced ones are not tiled.
* ``hlo.slice`` (GSPMD's ``HandleSlice``): a dimension keeps its tiling
  ``t`` when the operand size ``n`` and the result size ``m`` divide by
  ``t``.  Each device's result tile is then a window of the operand: inside
  its own tile when ``stride * m / t == n / t`` and ``start < stride``
  (``x[::2]``, ``x[1::2]``: local), else reaching into its neighbours'
  tiles, whose boundary rows the partitioner exchanges (halo exchange).
  Other tiled dimensions become replication.
* ``hlo.pad`` (GSPMD's ``HandlePad``): operand and result share the tiling
  of every dimension without interior padding whose sizes both divide by
  its tile count (each result tile is a window of the operand, the padding
  value outside it); the padding value is ``{replicated}``.
* ``hlo.concatenate`` (GSPMD's ``HandleConcatenate``): every dimension
  carries its tiling between every input and the result, the concatenated
  one too when its tile count divides every input's size (each result tile
  is a window of the concatenation, assembled by collective permutes);
  otherwise the concatenated dimension's tiles become replication.
* ``hlo.gather`` / ``hlo.scatter`` of whole slices along one dimension
  ``a`` (``tf.gather``, ``embedding_lookup``, ``unsorted_segment_sum``,
  ``scatter_nd`` of rows; :func:`take_dims`): a gather's result takes the
  operand's tiling of the sliced dimensions at its offset dims and the
  indices' tiling at its batch dims; a tiling of ``a`` (a table split along
  its rows) has no image and becomes replication, over cores that each hold
  a partial result (the partitioner gathers locally with masked ids and
  all-reduces: GSPMD).  A scatter's result shares its input's sharding, the
  updates' window dims carry it; the indices stay whole.  Backward the
  same maps, inverted.  Other gathers and scatters have no rule.
* ``hlo.convolution`` (GSPMD's ``HandleConvolution``, a dot with windows):
  the input's batch dimension and the kernel's output-feature dimension
  carry their tiling to the result's batch and feature dimensions; an input
  spatial dimension carries its tiling to the result's when both sizes
  divide by the tile count and the dimension has no lhs dilation (each core's
  result tile is a window of the input: a halo exchange); tiles of the input
  feature / kernel input-feature dimensions (contracted) become replication,
  and between the two operands those dimensions share their tiling (partial
  sums, summed by the partitioner).  With feature or batch groups only the
  spatial dimensions carry tiles.
* ``hlo.reduce_window`` (GSPMD's ``HandleReduceWindow``): operand and result
  share the tiling of every dimension without base dilation whose sizes both
  divide by its tile count (a window of the operand, with a halo); the init
  value is ``{replicated}``.  ``hlo.select_and_scatter``: operand, source and
  result likewise (the source as the windows' result).  ``hlo.reverse``:
  the reversed dimensions are not tiled, the others keep their tiling.
* ``hlo.iota``, ``hlo.constant``: no operands, so only backward: they take
  what their users ask for.
* ``hlo.if``: result ``k`` takes the true branch's returned value ``k``, then
  the false branch's; backward the returned values take the result's
  sharding.  ``hlo.while``: for each ``k``, the result, the ``cond`` and
  ``body`` arguments are one value: it takes the loop operand and the body's
  returned value (forward) and what the users of all three ask for
  (backward); the body's returned value and the loop operand take its
  sharding back.  The iteration below runs to a fixed point, so loop-carried
  values end up consistent.
* ``tpu.sharding_constraint``: the result has the constraint's sharding;
  backward the operand is asked for it.
* Host transfers and other ops: ``tpu.recv_from_host``,
  ``tpu.outside_compilation``, ``tpu.replica_id``, ``tpu.logical_core_id``,
  other ``ccl`` collectives, host-only ops and ops without a rule (among
  them ``hlo.dynamic_slice`` and ``hlo.dynamic_update_slice``)
  have ``{replicated}`` results, fixed; nothing propagates through them (a
  value sent to the host asks nothing of its producer).

Priority and conflicts.  Each value holds at most one sharding, which only
ever becomes *more specific* (XLA's ``IsShardingMoreSpecific``: more tiles;
``{maximal}`` is above ``{replicated}`` and below any tiling), so the
iteration ends:

1. a ``tpu.sharding_constraint`` result, a host-transfer result and the
   results of ops without a rule are fixed: never overridden;
2. candidates arrive in a fixed order: sweeps alternate forward (ops in
   program order; for each result, its candidates from operand 0, 1, ...)
   and backward (ops in reverse program order; for each value, its
   candidates from its uses in program order), until a full round changes
   nothing;
3. a candidate is first made legal for the value's shape (a tiled dimension
   whose size does not divide by its tile count becomes replication; xtpu
   requires even splits), then *merged* with the value's current sharding
   when the two are compatible (each dimension tiled by at most one of them
   or the same way by both, and the combined tiles over equal device
   groups); otherwise it replaces the current sharding only if it has more
   tiles.  Among equally specific conflicting candidates the first one
   wins: forward before backward, the earlier operand before the later one,
   the earlier user before the later one -- except that the forward
   candidates of an elementwise op or a ``dot_general`` are first ordered
   by the *cost model*: the bytes per core (``passes/spmd_cost.py``: what
   one core receives, ``(g - 1) * b`` for an all-gather, ``(g - 1) / g * b``
   for an all-to-all, one tile for a permute) that the partitioner's
   reshards would move to give the op's operands what each candidate
   implies for them, cheapest first (``x[64,32]`` split on rows times
   ``w[32,256]`` split on columns keeps ``w``'s split and gathers ``x``);
4. a value that no candidate reaches is ``{replicated}``.

The chosen sharding of every value is legal for its shape (the pass checks
``check_rank`` and ``shard_shape`` before writing it); where operands and
results disagree, the partitioner reshards.

Diagnostics: a ``tpu.sharding_constraint`` in a device replicate whose
sharding names more or fewer logical devices than ``num_cores_per_replica``,
a maximal device out of range, a ``{manual}`` sharding.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, TensorType
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from xtpu.dialects.ccl import AllReduceOp
from xtpu.dialects.hlo import (
    BroadcastInDimOp,
    CompareOp,
    ConcatenateOp,
    ConstantOp,
    ConvertOp,
    DotGeneralOp,
    ElementwiseBinary,
    ElementwiseUnary,
    IotaOp,
    PadOp,
    ReduceOp,
    ReshapeOp,
    SelectOp,
    SliceOp,
    TransposeOp,
)
from xtpu.dialects.hlo_control import IfOp, ReturnOp, WhileOp
from xtpu.dialects.hlo_indexing import GatherOp, ScatterOp
from xtpu.dialects.hlo_math import ReverseOp
from xtpu.dialects.hlo_window import ConvolutionOp, ReduceWindowOp, SelectAndScatterOp, conv_params
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.sharding import SHARDING_KEY, Sharding, ShardingAttr
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype
from xtpu.dialects.tpu import (
    CrossReplicaSumOp,
    OutsideCompilationOp,
    ReplicateOp,
    ShardingConstraintOp,
    YieldOp,
)
from xtpu.passes._common import at, chunk_tiling, enclosing, has_string_values, prefix_tiled, refuse_fused
from xtpu.passes.spmd_cost import reshard_bytes

INPUT_SHARDINGS = "tpu.input_shardings"
"""The replicate op's attribute: one sharding per body argument."""

OUTPUT_SHARDINGS = "tpu.output_shardings"
"""The replicate op's attribute: one sharding per yielded value."""

__all__ = [
    "INPUT_SHARDINGS",
    "OUTPUT_SHARDINGS",
    "PropagateSharding",
    "input_shardings",
    "legalize",
    "map_dims",
    "merge_shardings",
    "output_shardings",
    "partially_replicate",
    "reshape_sharding",
    "sharding_of",
    "shardings_of",
    "specificity",
]


# --------------------------------------------------------------------------
# Sharding algebra (XLA's hlo_sharding_util, on xtpu's Sharding)
# --------------------------------------------------------------------------


def specificity(s: Sharding | None) -> float:
    """How specific a sharding is (XLA's ``IsShardingMoreSpecific`` as a
    number): none -1, ``{replicated}`` and ``{manual}`` 0, ``{maximal}`` 0.5,
    a tiling its number of tiles."""
    if s is None:
        return -1.0
    if s.is_tiled:
        return float(math.prod(s.tile_shape))
    if s.is_maximal:
        return 0.5
    return 0.0


def map_dims(s: Sharding | None, src_to_tgt: Sequence[int], tgt_rank: int) -> Sharding | None:
    """The sharding of a rank-``tgt_rank`` tensor whose dimension
    ``src_to_tgt[i]`` is dimension ``i`` of a tensor sharded as ``s``
    (``-1``: no image).  Tiles of dimensions without an image move into the
    replication dimension; target dimensions without a source are not tiled
    (XLA's ``TransposeShardingWithCollapsedDims``).  Non-tiled shardings are
    returned unchanged.

    Raises:
      ValueError: ``src_to_tgt`` does not fit ``s`` or maps two dimensions
        to one.
    """
    if s is None or not s.is_tiled:
        return s
    return _map_dims(s, tuple(int(t) for t in src_to_tgt), int(tgt_rank))


@lru_cache(maxsize=8192)
def _map_dims(s: Sharding, src_to_tgt: tuple[int, ...], tgt_rank: int) -> Sharding:
    tiles = s.tile_shape
    if len(src_to_tgt) != len(tiles):
        raise ValueError(f"a dimension map of {len(src_to_tgt)} entries for sharding {s} of rank {len(tiles)}")
    kept = sorted((t, i) for i, t in enumerate(src_to_tgt) if t >= 0)
    targets = [t for t, _ in kept]
    if len(set(targets)) != len(targets) or any(t >= tgt_rank for t in targets):
        raise ValueError(f"dimension map {list(src_to_tgt)} is not injective into rank {tgt_rank}")
    if tgt_rank == len(tiles) and all(t == i for i, t in enumerate(src_to_tgt)):
        return s
    dropped = [i for i, t in enumerate(src_to_tgt) if t < 0]
    arr = np.asarray(s.devices).reshape(tuple(tiles) + (s.replication,))
    arr = arr.transpose([i for _, i in kept] + dropped + [len(tiles)])
    tgt_tiles = [1] * tgt_rank
    for t, i in kept:
        tgt_tiles[t] = tiles[i]
    replication = math.prod(tiles[i] for i in dropped) * s.replication
    if math.prod(tgt_tiles) == 1:
        return Sharding.replicated()
    return Sharding.tiled(tgt_tiles, arr.ravel(), replication=replication)


def partially_replicate(s: Sharding | None, dims: Iterable[int]) -> Sharding | None:
    """``s`` with the tiles of ``dims`` moved into the replication dimension
    (XLA's ``PartiallyReplicateTiledShardingOnDims``)."""
    if s is None or not s.is_tiled:
        return s
    drop = set(dims)
    if not any(s.tile_shape[d] > 1 for d in drop):
        return s
    rank = len(s.tile_shape)
    return map_dims(s, [-1 if i in drop else i for i in range(rank)], rank)


def legalize(s: Sharding | None, shape: Sequence[int]) -> Sharding | None:
    """``s`` made legal for ``shape``: a dimension whose size does not divide
    by its tile count is replicated instead (xtpu requires even splits)."""
    if s is None or not s.is_tiled:
        return s
    bad = [i for i, (n, t) in enumerate(zip(shape, s.tile_shape)) if n % t]
    return partially_replicate(s, bad) if bad else s


def merge_shardings(a: Sharding | None, b: Sharding | None) -> Sharding | None:
    """The sharding that refines both ``a`` and ``b`` (every device holds the
    intersection of its tiles), or ``None`` if they conflict (XLA's
    ``MergeSharding`` with partial shardings combined).

    They are compatible when each dimension is tiled by at most one of them,
    or the same way by both, and the resulting tiles are held by equally
    many devices; ``{replicated}`` refines into anything."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    if a.is_replicated:
        return b
    if b.is_replicated:
        return a
    if not (a.is_tiled and b.is_tiled):
        return None
    return _merge_tiled(a, b)


@lru_cache(maxsize=8192)
def _merge_tiled(a: Sharding, b: Sharding) -> Sharding | None:
    ta, tb = a.tile_shape, b.tile_shape
    n = a.num_devices
    if len(ta) != len(tb) or n != b.num_devices:
        return None
    if any(x != y and x != 1 and y != 1 for x, y in zip(ta, tb)):
        return None
    merged = [max(x, y) for x, y in zip(ta, tb)]
    groups: dict[tuple[int, ...], list[int]] = {}
    for d in range(n):
        ia, ib = a.tile_for_device(d), b.tile_for_device(d)
        if ia is None or ib is None:
            return None
        index = []
        for x, y, i, j in zip(ta, tb, ia, ib):
            if x > 1 and y > 1 and i != j:
                return None
            index.append(i if x > 1 else j)
        groups.setdefault(tuple(index), []).append(d)
    tiles = math.prod(merged)
    if len(groups) != tiles or n % tiles:
        return None
    replication = n // tiles
    if any(len(g) != replication for g in groups.values()):
        return None
    arr = np.zeros(tuple(merged) + (replication,), dtype=np.int64)
    for index, group in groups.items():
        arr[index] = sorted(group)
    return Sharding.tiled(merged, arr.ravel(), replication=replication)


def _is_legal(s: Sharding, shape: Sequence[int]) -> bool:
    try:
        s.check_rank(len(shape))
        s.shard_shape(shape)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------
# Dimension maps of the ops
# --------------------------------------------------------------------------


def _shape(v: SSAValue) -> tuple[int, ...]:
    return tuple(int(n) for n in v.type.get_shape())  # type: ignore[attr-defined]


def _invert(m: Sequence[int], rank: int) -> list[int]:
    out = [-1] * rank
    for i, t in enumerate(m):
        if t >= 0:
            out[t] = i
    return out


def _reshape_groups(a: Sequence[int], b: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """The minimal groups of dimensions (size-1 dimensions left out) whose
    products agree between shapes ``a`` and ``b`` of a reshape."""
    ia = [i for i, n in enumerate(a) if n != 1]
    ib = [i for i, n in enumerate(b) if n != 1]
    if any(a[i] == 0 for i in ia) or any(b[i] == 0 for i in ib):
        return []
    groups = []
    i = j = 0
    while i < len(ia) and j < len(ib):
        ga, gb = [ia[i]], [ib[j]]
        pa, pb = a[ia[i]], b[ib[j]]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                ga.append(ia[i])
                pa *= a[ia[i]]
                i += 1
            else:
                gb.append(ib[j])
                pb *= b[ib[j]]
                j += 1
        groups.append((ga, gb))
    return groups


def reshape_sharding(s: Sharding | None, src: Sequence[int], tgt: Sequence[int]) -> Sharding | None:
    """The sharding of ``reshape(x, tgt)`` for ``x`` of shape ``src`` sharded
    as ``s`` (GSPMD's ``ReshapeSharding``, in ``hlo_sharding_util``): in each
    group of dimensions with equal products, tiles that cut the group's
    row-major elements into contiguous chunks (every dimension before the
    first partly tiled one cut into single rows, every one after it whole)
    are the same chunks on the other side, spread over as many of its
    dimensions as needed: ``[64,16]`` tiled ``[8,1]`` reshaped to
    ``[4,16,16]`` is ``[4,2,1]``.  A group whose tiles are not such chunks
    keeps its leading dimension's tiling when that alone is; other tiles
    replicate."""
    if s is None or not s.is_tiled:
        return s
    return _reshape_sharding(s, tuple(src), tuple(tgt))


@lru_cache(maxsize=4096)
def _reshape_sharding(s: Sharding, src: tuple[int, ...], tgt: tuple[int, ...]) -> Sharding:
    tiles = list(s.tile_shape)
    groups = _reshape_groups(src, tgt)
    grouped = {d for ga, _ in groups for d in ga}
    drop = [d for d in range(len(src)) if d not in grouped and tiles[d] > 1]
    tgt_counts = [1] * len(tgt)
    for ga, gb in groups:
        counts = [tiles[d] for d in ga]
        if math.prod(counts) == 1:
            continue
        out = None
        if prefix_tiled([src[d] for d in ga], counts):
            out = chunk_tiling([tgt[d] for d in gb], math.prod(counts))
        if out is None and counts[0] > 1:  # the leading dimension alone
            out = chunk_tiling([tgt[d] for d in gb], counts[0])
            if out is not None:
                drop.extend(d for d in ga[1:] if tiles[d] > 1)
        if out is None:
            drop.extend(d for d in ga if tiles[d] > 1)
            continue
        for d, n in zip(gb, out):
            tgt_counts[d] = n
    kept = partially_replicate(s, drop)
    if kept is None or not kept.is_tiled:
        return Sharding.replicated()
    if math.prod(tgt_counts) != math.prod(kept.tile_shape):  # pragma: no cover - groups conserve tiles
        raise ValueError(f"reshape of {s} from {list(src)} to {list(tgt)} lost tiles")
    arr = np.asarray(kept.devices).reshape(tuple(tgt_counts) + (kept.replication,))
    return Sharding.tiled(tgt_counts, arr.ravel(), replication=kept.replication)


def _slice_keeps(op: SliceOp, dim: int, t: int) -> bool:
    """Whether dimension ``dim`` tiled ``t`` ways on both sides of the slice
    is a legal tiling of both (GSPMD's ``HandleSlice`` keeps it: each core's
    result tile is a window of the operand, with a halo from its neighbours
    when the slice shifts it)."""
    n = _shape(op.operand)[dim]
    m = _shape(op.result)[dim]
    return n % t == 0 and m % t == 0


def _slice_sharding(op: SliceOp, s: Sharding | None) -> Sharding | None:
    if s is None or not s.is_tiled:
        return s
    return partially_replicate(s, [d for d, t in enumerate(s.tile_shape) if t > 1 and not _slice_keeps(op, d, t)])


def _pad_sharding(op: PadOp, s: Sharding | None) -> Sharding | None:
    """Operand <-> result of a pad: the tiling of every dimension without
    interior padding (GSPMD's ``HandlePad``: a window of the operand, the
    padding value outside it); tiles of interior-padded dimensions
    replicate.  Tile counts that do not divide both sizes are legalized
    away by :func:`legalize`."""
    if s is None or not s.is_tiled:
        return s
    interior = op.params()["interior_padding"]
    n, m = _shape(op.operand), _shape(op.result)
    bad = [d for d, t in enumerate(s.tile_shape) if t > 1 and (interior[d] or n[d] % t or m[d] % t)]
    return partially_replicate(s, bad)


def _dot_maps(op: DotGeneralOp):
    """Dimension maps of a dot_general: lhs->out, rhs->out, lhs->rhs, rhs->lhs."""
    p = op.params()
    lb, rb = p["lhs_batching_dimensions"], p["rhs_batching_dimensions"]
    lc, rc = p["lhs_contracting_dimensions"], p["rhs_contracting_dimensions"]
    lr, rr = len(_shape(op.lhs)), len(_shape(op.rhs))
    lf = [d for d in range(lr) if d not in lb and d not in lc]
    rf = [d for d in range(rr) if d not in rb and d not in rc]
    nb = len(lb)
    l2o, r2o = [-1] * lr, [-1] * rr
    for k, (x, y) in enumerate(zip(lb, rb)):
        l2o[x] = r2o[y] = k
    for j, d in enumerate(lf):
        l2o[d] = nb + j
    for j, d in enumerate(rf):
        r2o[d] = nb + len(lf) + j
    l2r, r2l = [-1] * lr, [-1] * rr
    for x, y in zip(tuple(lb) + tuple(lc), tuple(rb) + tuple(rc)):
        l2r[x], r2l[y] = y, x
    return l2o, r2o, l2r, r2l


def take_dims(op: Operation) -> tuple[int, list[int], list[int]] | None:
    """For a gather or scatter of whole slices along one dimension ``a``
    (one index per slice, no batching dims, the implicit index vector):
    ``(a, operand_map, other_map)``.  A gather's ``operand_map[d]`` is the
    result dim of operand dim ``d`` (``-1`` for ``a``) and ``other_map[j]``
    the result dim of indices dim ``j``; a scatter's ``operand_map[d]`` is
    the updates dim of input dim ``d`` (``-1`` for ``a``) and ``other_map``
    is empty.  None for other gathers and scatters."""
    p = op.params()
    if isinstance(op, GatherOp):
        x, idx = _shape(op.operand), _shape(op.start_indices)
        sim, col, off = p["start_index_map"], p["collapsed_slice_dims"], p["offset_dims"]
        ivd, sizes = p["index_vector_dim"], p["slice_sizes"]
    elif isinstance(op, ScatterOp):
        x, idx, upd = _shape(op.input), _shape(op.scatter_indices), _shape(op.updates)
        sim, col, off = p["scatter_dims_to_operand_dims"], p["inserted_window_dims"], p["update_window_dims"]
        ivd = p["index_vector_dim"]
        sizes = [1] * len(x)
        for d, u in zip([d for d in range(len(x)) if d not in col], off):
            sizes[d] = upd[u]
    else:
        return None
    batching = p.get("operand_batching_dims") or p.get("input_batching_dims")
    if len(sim) != 1 or tuple(col) != tuple(sim) or batching or ivd != len(idx):
        return None
    (a,) = sim
    rest = [d for d in range(len(x)) if d != a]
    if any(sizes[d] != x[d] for d in rest):
        return None
    operand_map = [-1] * len(x)
    for d, r in zip(rest, off):
        operand_map[d] = r
    if isinstance(op, ScatterOp):
        return a, operand_map, []
    rank = len(idx) + len(off)
    return a, operand_map, [r for r in range(rank) if r not in off]


def _conv_maps(op: ConvolutionOp):
    """Dimension maps of a convolution: lhs->out, rhs->out, lhs->rhs,
    rhs->lhs (-1: no image); spatial dims map only where both sizes will be
    checked by :func:`_window_filter`."""
    p = conv_params(len(_shape(op.lhs)), **op.params())
    dn = p["dimension_numbers"]
    rank = len(dn.lhs)
    l2o, r2o, l2r, r2l = [-1] * rank, [-1] * rank, [-1] * rank, [-1] * rank
    plain = p["feature_group_count"] == 1 and p["batch_group_count"] == 1
    if plain:
        l2o[dn.lhs[0]] = dn.out[0]
        r2o[dn.rhs[0]] = dn.out[1]
        l2r[dn.lhs[1]], r2l[dn.rhs[1]] = dn.rhs[1], dn.lhs[1]
    for i in range(rank - 2):
        if p["lhs_dilation"][i] == 1:
            l2o[dn.lhs[2 + i]] = dn.out[2 + i]
    return l2o, r2o, l2r, r2l


def _window_filter(s: Sharding | None, pairs: Sequence[tuple[int, int, int]]) -> Sharding | None:
    """``s`` with the tiles of dimension ``d`` replicated for each
    ``(d, n, m)`` whose sizes ``n`` (one side) and ``m`` (the other) do not
    both divide by its tile count (or are zero)."""
    if s is None or not s.is_tiled:
        return s
    bad = [
        d for d, n, m in pairs if s.tile_shape[d] > 1 and (not n or not m or n % s.tile_shape[d] or m % s.tile_shape[d])
    ]
    return partially_replicate(s, bad)


def _conv_spatial(op: ConvolutionOp, side: str) -> list[tuple[int, int, int]]:
    """``(dim of side, lhs size, out size)`` of each spatial dimension."""
    p = conv_params(len(_shape(op.lhs)), **op.params())
    dn = p["dimension_numbers"]
    ls, os_ = _shape(op.lhs), _shape(op.result)
    spec = dn.lhs if side == "lhs" else dn.out
    return [(spec[2 + i], ls[dn.lhs[2 + i]], os_[dn.out[2 + i]]) for i in range(len(ls) - 2)]


def _window_pairs(op: Operation) -> list[tuple[int, int, int]]:
    """Per dimension of a windowed reduction's operand: ``(d, n, m)``, with
    ``m = 0`` (never kept) where the base is dilated."""
    p = op.params()
    n, m = _shape(op.operands[0]), _shape(op.results[0]) if isinstance(op, ReduceWindowOp) else _shape(op.operands[1])
    bd = p.get("base_dilations") or (1,) * len(n)
    return [(d, n[d], m[d] if bd[d] == 1 else 0) for d in range(len(n))]


def _reduce_map(op: ReduceOp) -> list[int]:
    dims = set(op.params()["dimensions"])
    rank = len(_shape(op.input))
    out, k = [-1] * rank, 0
    for d in range(rank):
        if d not in dims:
            out[d] = k
            k += 1
    return out


def _broadcast_map(op: BroadcastInDimOp) -> list[int]:
    src, tgt = _shape(op.operand), _shape(op.result)
    return [d if src[i] == tgt[d] else -1 for i, d in enumerate(op.params()["broadcast_dimensions"])]


def _permutation(op: TransposeOp) -> tuple[int, ...]:
    return tuple(op.params()["permutation"])


def _concat_dim(op: ConcatenateOp) -> int:
    return op.params()["dimension"]


def _cross_replica(op: AllReduceOp, num_cores: int) -> bool:
    """Whether every group of the all-reduce holds one logical core of
    several replicas (participants ``r * C + c`` with one ``c``)."""
    return all(len({p % num_cores for p in g}) <= 1 for g in op.params()["replica_groups"])


_ELEMENTWISE = (ElementwiseBinary, ElementwiseUnary, CompareOp, SelectOp, ConvertOp, CrossReplicaSumOp)


def _to_rank(s: Sharding | None, src_rank: int, tgt_rank: int) -> Sharding | None:
    """Identity between equal ranks; through a scalar otherwise."""
    if src_rank == tgt_rank:
        return s
    return map_dims(s, [-1] * src_rank, tgt_rank)


# --------------------------------------------------------------------------
# The propagation
# --------------------------------------------------------------------------


class _Propagation:
    """Shardings of the values of one device replicate body, by the rules and
    priorities of the module docstring."""

    def __init__(self, replicate: ReplicateOp):
        self.replicate = replicate
        self.cores = replicate.num_cores
        self.state: dict[SSAValue, Sharding] = {}
        self.fixed: set[SSAValue] = set()
        self.alias: dict[SSAValue, SSAValue] = {}  # while region args -> the loop's result
        self.order: dict[Operation, int] = {}
        self.ops: list[Operation] = []
        self._memo: dict[tuple, object] = {}  # per-op data the rules reuse every sweep
        self._shapes: dict[SSAValue, tuple[int, ...]] = {}
        self._collect(replicate.body.block)

    # ---------------------------------------------------------------- setup

    def _collect(self, block: Block) -> None:
        for op in block.ops:
            self.order[op] = len(self.order)
            self.ops.append(op)
            if isinstance(op, ShardingConstraintOp):
                self._fix(op.result, op.sharding.sharding)
            elif isinstance(op, WhileOp):
                for region in (op.cond, op.body):
                    for arg, res in zip(region.block.args, op.results):
                        self.alias[arg] = res
            elif not self._has_rule(op):
                for r in op.results:
                    self._fix(r, Sharding.replicated())
            if isinstance(op, (IfOp, WhileOp)):
                for region in op.regions:
                    self._collect(region.block)

    def _cached(self, what, op: Operation, *args):
        key = (what, op, *args)
        if key not in self._memo:
            self._memo[key] = what(op, *args)
        return self._memo[key]

    def _has_rule(self, op: Operation) -> bool:
        return self._cached(self._rule_of, op)

    def _rule_of(self, op: Operation) -> bool:
        if isinstance(op, PrimitiveOp) and op.HOST_ONLY or has_string_values(op):
            return False
        if not all(isinstance(r.type, TensorType) for r in op.results):
            return False
        if isinstance(op, AllReduceOp):
            return _cross_replica(op, self.cores)
        if isinstance(op, (GatherOp, ScatterOp)):
            return self._cached(take_dims, op) is not None
        return isinstance(
            op,
            _ELEMENTWISE
            + (
                BroadcastInDimOp,
                TransposeOp,
                ReshapeOp,
                DotGeneralOp,
                ReduceOp,
                SliceOp,
                PadOp,
                ConcatenateOp,
                IotaOp,
                ConstantOp,
                IfOp,
                WhileOp,
                ConvolutionOp,
                ReduceWindowOp,
                SelectAndScatterOp,
                ReverseOp,
            ),
        )

    def _fix(self, v: SSAValue, s: Sharding) -> None:
        self.state[v] = s
        self.fixed.add(v)

    # ---------------------------------------------------------------- state

    def shape(self, v: SSAValue) -> tuple[int, ...]:
        known = self._shapes.get(v)
        if known is None:
            known = self._shapes[v] = _shape(v)
        return known

    def canonical(self, v: SSAValue) -> SSAValue:
        return self.alias.get(v, v)

    def get(self, v: SSAValue) -> Sharding | None:
        return self.state.get(self.canonical(v))

    def offer(self, v: SSAValue, cand: Sharding | None) -> bool:
        """Give ``v`` the candidate if it improves it (rule 3); True if ``v`` changed."""
        v = self.canonical(v)
        if cand is None or cand.is_manual or v in self.fixed or not isinstance(v.type, TensorType):
            return False
        cand = legalize(cand, self.shape(v))
        cur = self.state.get(v)
        if cur is None:
            self.state[v] = cand
            return True
        if cand == cur:
            return False
        merged = merge_shardings(cur, cand)
        new = merged if merged is not None else cand
        if specificity(new) > specificity(cur):
            self.state[v] = new
            return True
        return False

    # ---------------------------------------------------------------- rules

    def forward_candidates(self, op: Operation, k: int) -> list[Sharding | None]:
        """Candidates for result ``k`` of ``op`` from its operands, in operand order."""
        res = op.results[k]
        rank = len(self.shape(res))
        if isinstance(op, (*_ELEMENTWISE, AllReduceOp)):
            return [_to_rank(self.get(v), len(self.shape(v)), rank) for v in op.operands]
        if isinstance(op, BroadcastInDimOp):
            return [map_dims(self.get(op.operand), self._cached(_broadcast_map, op), rank)]
        if isinstance(op, TransposeOp):
            return [map_dims(self.get(op.operand), _invert(self._cached(_permutation, op), rank), rank)]
        if isinstance(op, ReshapeOp):
            return [reshape_sharding(self.get(op.operand), self.shape(op.operand), self.shape(res))]
        if isinstance(op, DotGeneralOp):
            l2o, r2o, _, _ = self._cached(_dot_maps, op)
            return [map_dims(self.get(op.lhs), l2o, rank), map_dims(self.get(op.rhs), r2o, rank)]
        if isinstance(op, ReduceOp):
            return [map_dims(self.get(op.input), self._cached(_reduce_map, op), rank)]
        if isinstance(op, SliceOp):
            return [self._cached(_slice_sharding, op, self.get(op.operand))]
        if isinstance(op, ConcatenateOp):
            return [self._concat_sharding(op, self.get(v)) for v in op.inputs]
        if isinstance(op, PadOp):
            return [_pad_sharding(op, self.get(op.operand))]
        if isinstance(op, (GatherOp, ScatterOp)) and not self._has_rule(op):
            return []
        if isinstance(op, GatherOp):
            _, op_map, idx_map = self._cached(take_dims, op)
            return [map_dims(self.get(op.operand), op_map, rank), map_dims(self.get(op.start_indices), idx_map, rank)]
        if isinstance(op, ScatterOp):
            _, op_map, _ = self._cached(take_dims, op)
            upd_map = _invert(op_map, len(self.shape(op.updates)))
            return [self.get(op.input), map_dims(self.get(op.updates), upd_map, rank)]
        if isinstance(op, ConvolutionOp):
            l2o, r2o, _, _ = self._cached(_conv_maps, op)
            out_sp = self._cached(_conv_spatial, op, "out")
            return [
                _window_filter(map_dims(self.get(op.lhs), l2o, rank), out_sp),
                map_dims(self.get(op.rhs), r2o, rank),
            ]
        if isinstance(op, ReduceWindowOp):
            return [_window_filter(self.get(op.operand), self._cached(_window_pairs, op))]
        if isinstance(op, SelectAndScatterOp):
            return [self.get(op.operand), _window_filter(self.get(op.source), self._cached(_window_pairs, op))]
        if isinstance(op, ReverseOp):
            return [partially_replicate(self.get(op.operand), op.params()["dimensions"])]
        return []

    def backward_candidates(self, op: Operation, i: int) -> list[Sharding | None]:
        """Candidates for operand ``i`` of ``op`` from ``op``'s results (and,
        for a dot, from its other operand)."""
        v = op.operands[i]
        rank = len(self.shape(v)) if isinstance(v.type, TensorType) else 0
        if isinstance(op, ShardingConstraintOp):
            return [op.sharding.sharding]
        if isinstance(op, WhileOp):
            return [self.get(op.results[i])]
        if isinstance(op, ReturnOp):
            parent = op.parent_op()
            if isinstance(parent, IfOp) or (isinstance(parent, WhileOp) and op.parent_region() is parent.body):
                return [self.get(parent.results[i])]
            return []
        if not self._has_rule(op) or not op.results:
            return []
        out = self.get(op.results[0])
        out_rank = len(self.shape(op.results[0]))
        if isinstance(op, (*_ELEMENTWISE, AllReduceOp)):
            return [_to_rank(out, out_rank, rank)]
        if isinstance(op, BroadcastInDimOp):
            return [map_dims(out, _invert(self._cached(_broadcast_map, op), out_rank), rank)]
        if isinstance(op, TransposeOp):
            return [map_dims(out, list(self._cached(_permutation, op)), rank)]
        if isinstance(op, ReshapeOp):
            return [reshape_sharding(out, self.shape(op.result), self.shape(op.operand))]
        if isinstance(op, DotGeneralOp):
            l2o, r2o, l2r, r2l = self._cached(_dot_maps, op)
            own, other, other_map = (l2o, op.rhs, r2l) if i == 0 else (r2o, op.lhs, l2r)
            return [map_dims(out, _invert(own, out_rank), rank), map_dims(self.get(other), other_map, rank)]
        if isinstance(op, ReduceOp):
            if i == 1:
                return [_to_rank(out, out_rank, 0)]
            return [map_dims(out, _invert(self._cached(_reduce_map, op), out_rank), rank)]
        if isinstance(op, SliceOp):
            return [self._cached(_slice_sharding, op, out)]
        if isinstance(op, ConcatenateOp):
            return [self._concat_sharding(op, out)]
        if isinstance(op, PadOp):
            return [_pad_sharding(op, out) if i == 0 else _to_rank(out, out_rank, 0)]
        if isinstance(op, GatherOp):
            _, op_map, idx_map = self._cached(take_dims, op)
            return [map_dims(out, _invert(op_map if i == 0 else idx_map, out_rank), rank)]
        if isinstance(op, ScatterOp):
            _, op_map, _ = self._cached(take_dims, op)
            if i == 0:
                return [out]
            return [map_dims(out, op_map, rank)] if i == 2 else []
        if isinstance(op, ConvolutionOp):
            l2o, r2o, l2r, r2l = self._cached(_conv_maps, op)
            if i == 0:
                lhs_sp = self._cached(_conv_spatial, op, "lhs")
                return [
                    _window_filter(map_dims(out, _invert(l2o, out_rank), rank), lhs_sp),
                    map_dims(self.get(op.rhs), r2l, rank),
                ]
            return [map_dims(out, _invert(r2o, out_rank), rank), map_dims(self.get(op.lhs), l2r, rank)]
        if isinstance(op, ReduceWindowOp):
            if i == 1:
                return [_to_rank(out, out_rank, 0)]
            return [_window_filter(out, self._cached(_window_pairs, op))]
        if isinstance(op, SelectAndScatterOp):
            if i == 2:
                return [_to_rank(out, out_rank, 0)]
            if i == 1:
                return [_window_filter(out, self._cached(_window_pairs, op))]
            return [out]
        if isinstance(op, ReverseOp):
            return [partially_replicate(out, op.params()["dimensions"])]
        return []

    def _concat_sharding(self, op: ConcatenateOp, s: Sharding | None) -> Sharding | None:
        """Inputs <-> result of a concatenate: every dimension keeps its
        tiling; the concatenated one only when its tile count divides every
        input's size (GSPMD's ``HandleConcatenate``: each core's result tile
        is a window of the concatenation, assembled from the inputs' tiles
        by collective permutes)."""
        if s is None or not s.is_tiled:
            return s
        dim = self._cached(_concat_dim, op)
        t = s.tile_shape[dim]
        if t > 1 and any(self.shape(v)[dim] % t for v in op.inputs):
            return partially_replicate(s, [dim])
        return s

    # ---------------------------------------------------------------- sweeps

    def _pull(self, v: SSAValue, values: Sequence[SSAValue]) -> bool:
        """Offer ``v`` the backward candidates of every use of ``values``, in
        program order of the users."""
        uses = [
            (self.order[u.operation], u.index, u.operation) for w in values for u in w.uses if u.operation in self.order
        ]
        changed = False
        for _, index, user in sorted(uses, key=lambda t: (t[0], t[1])):
            for cand in self.backward_candidates(user, index):
                changed |= self.offer(v, cand)
        return changed

    def forward(self, block: Block) -> bool:
        changed = False
        for op in block.ops:
            if isinstance(op, WhileOp):
                for r, v in zip(op.results, op.operand):
                    changed |= self.offer(r, self.get(v))
                changed |= self.forward(op.cond.block)
                changed |= self.forward(op.body.block)
                for r, v in zip(op.results, op.body.block.last_op.operands):
                    changed |= self.offer(r, self.get(v))
            elif isinstance(op, IfOp):
                changed |= self.forward(op.true_branch.block)
                changed |= self.forward(op.false_branch.block)
                for k, r in enumerate(op.results):
                    for branch in (op.true_branch, op.false_branch):
                        changed |= self.offer(r, self.get(branch.block.last_op.operands[k]))
            else:
                for k, r in enumerate(op.results):
                    for cand in self._cheapest_first(op, self.forward_candidates(op, k)):
                        changed |= self.offer(r, cand)
        return changed

    def _cheapest_first(self, op: Operation, cands: list[Sharding | None]) -> list[Sharding | None]:
        """The cost model: candidates for a result in the order of the bytes
        per core the partitioner would move to give ``op``'s operands what
        each implies (``spmd_cost.reshard_bytes`` from an operand's sharding
        to its backward candidate from that result sharding), cheapest
        first; equal costs keep the rule's order.  Since the first of
        equally specific conflicting candidates wins, this decides which
        operand's layout a result takes."""
        if len(cands) < 2 or not isinstance(op, (*_ELEMENTWISE, DotGeneralOp)):
            return cands
        distinct = {c for c in cands if c is not None}
        if len(distinct) < 2:
            return cands
        saved = self.state.get(op.results[0])
        costs = []
        for cand in cands:
            total = 0.0
            if cand is not None:
                self.state[op.results[0]] = cand
                for i, v in enumerate(op.operands):
                    if not isinstance(v.type, TensorType):
                        continue
                    wants = self.backward_candidates(op, i)
                    if wants:
                        spec = TensorSpec.of_type(v.type)
                        total += reshard_bytes(
                            self.get(v), legalize(wants[0], spec.shape), spec.shape, numpy_dtype(spec.dtype).itemsize
                        )
            costs.append(total)
        if saved is None:
            del self.state[op.results[0]]
        else:
            self.state[op.results[0]] = saved
        order = sorted(range(len(cands)), key=lambda j: costs[j])
        return [cands[j] for j in order]

    def backward(self, block: Block) -> bool:
        changed = False
        for op in reversed(list(block.ops)):
            if isinstance(op, WhileOp):
                for k, r in enumerate(op.results):
                    changed |= self._pull(r, [op.cond.block.args[k], op.body.block.args[k], r])
                changed |= self.backward(op.body.block)
                changed |= self.backward(op.cond.block)
            else:
                for r in op.results:
                    changed |= self._pull(r, [r])
                if isinstance(op, IfOp):
                    changed |= self.backward(op.false_branch.block)
                    changed |= self.backward(op.true_branch.block)
        return changed

    def run(self) -> None:
        body = self.replicate.body.block
        limit = 4 + 2 * (len(self.ops) + len(body.args)) * (self.cores + 2)
        for _ in range(limit):
            changed = self.forward(body)
            changed |= self.backward(body)
            for arg in body.args:
                changed |= self._pull(arg, [arg])
            if not changed:
                return
        raise DiagnosticException(  # pragma: no cover - each change makes a value more specific
            f"'tpu.replicate' op{at(self.replicate)}: sharding propagation did not converge"
        )

    # ---------------------------------------------------------------- output

    def final(self, v: SSAValue) -> Sharding:
        s = _iota_form(self.get(v) or Sharding.replicated())
        if isinstance(v.type, TensorType) and not _is_legal(s, self.shape(v)):
            raise DiagnosticException(  # pragma: no cover - offer() legalises every candidate
                f"internal error: sharding {s} chosen for a value of type {v.type} is not legal"
            )
        return s

    def write(self) -> None:
        for op in self.ops:
            if op.results:
                op.attributes[SHARDING_KEY] = ArrayAttr([ShardingAttr(self.final(r)) for r in op.results])
        block = self.replicate.body.block
        self.replicate.attributes[INPUT_SHARDINGS] = ArrayAttr([ShardingAttr(self.final(a)) for a in block.args])
        term = block.last_op
        yielded = term.operands if isinstance(term, YieldOp) else ()
        self.replicate.attributes[OUTPUT_SHARDINGS] = ArrayAttr([ShardingAttr(self.final(v)) for v in yielded])


@lru_cache(maxsize=4096)
def _iota_form(s: Sharding) -> Sharding:
    """``s`` in one printed form: XLA's iota ``<=[n]`` when its devices are
    ``0..n-1`` in order (``{devices=[2,1]<=[2]}``), else the device list."""
    if not s.is_tiled:
        return s
    n = len(s.device_ids)
    iota = ((n,), (0,)) if s.device_ids == tuple(range(n)) else None
    return Sharding("tiled", s.tile_assignment_dims, s.device_ids, s.last_tile_dim_replicate, iota)


def _device_ops(block: Block) -> Iterable[Operation]:
    """The ops of a replicate body that run on the device, recursively
    through hlo.if / hlo.while (not into outside-compilation clusters)."""
    for op in block.ops:
        yield op
        if isinstance(op, (IfOp, WhileOp)):
            for region in op.regions:
                yield from _device_ops(region.block)


def _check_constraints(replicate: ReplicateOp) -> None:
    cores = replicate.num_cores
    for op in _device_ops(replicate.body.block):
        if not isinstance(op, ShardingConstraintOp):
            continue
        s = op.sharding.sharding
        where = f"'{op.name}' op{at(op)}"
        if s.is_manual:
            raise DiagnosticException(
                f"{where} has the sharding {{manual}}, which tpu-propagate-sharding does not support: "
                "a value inside a tpu.replicate is global until tpu-spmd-partition makes it per device"
            )
        if s.is_maximal and s.device >= cores:
            raise DiagnosticException(
                f"{where} assigns the value to logical device {s.device}, but the enclosing tpu.replicate "
                f"has {cores} logical device{'s' if cores != 1 else ''} per replica (0..{cores - 1})"
            )
        if s.is_tiled and s.num_devices != cores:
            raise DiagnosticException(
                f"{where} lays the value out over {s.num_devices} logical devices ({s}), but the enclosing "
                f"tpu.replicate has num_cores_per_replica = {cores}"
            )
        shape = _shape(op.operand)
        if not _is_legal(s, shape):
            try:
                s.check_rank(len(shape))
                s.shard_shape(shape)
            except ValueError as e:
                raise DiagnosticException(f"{where}: {e}") from None


@dataclass(frozen=True)
class PropagateSharding(ModulePass):
    """Give every value of each device ``tpu.replicate`` with several logical
    cores a ``#tpu.sharding``, from its ``tpu.sharding_constraint`` ops: what
    TF does for ``TPUStrategy.experimental_split_to_logical_devices`` with
    ``experimental_spmd_xla_partitioning=True``, where the ``_XlaSharding``
    annotations reach XLA's GSPMD sharding propagation.  Rules, priorities
    and the output format are in the module docstring and
    ``docs/logical-devices.md``.

    A replicate with one core, or on the host, is left unchanged.  Running
    the pass again recomputes the same shardings.
    """

    name = "tpu-propagate-sharding"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        replicates = [r for r in op.walk() if isinstance(r, ReplicateOp) and not r.on_host]
        for r in replicates:
            _check_constraints(r)
            if r.num_cores > 1:
                refuse_fused(r, self.name)
        for r in replicates:
            if r.num_cores > 1:
                prop = _Propagation(r)
                prop.run()
                prop.write()


# --------------------------------------------------------------------------
# Reading the result (for tpu-spmd-partition and tests)
# --------------------------------------------------------------------------


def _entry(attr, index: int, what: str) -> Sharding:
    if not isinstance(attr, ArrayAttr) or index >= len(attr.data) or not isinstance(attr.data[index], ShardingAttr):
        raise ValueError(f"{what} has no sharding entry {index}: run tpu-propagate-sharding first")
    return attr.data[index].sharding


def _device_replicate(op: Operation | None) -> ReplicateOp | None:
    """The device replicate whose body runs ``op`` (None on the host)."""
    if op is None or enclosing(op, OutsideCompilationOp) is not None:
        return None
    rep = op if isinstance(op, ReplicateOp) else enclosing(op, ReplicateOp)
    return None if rep is None or rep.on_host else rep


def sharding_of(value: SSAValue) -> Sharding:
    """The sharding ``tpu-propagate-sharding`` gave ``value``: an op result
    (the op's ``tpu.sharding``), a replicate body argument (the replicate's
    ``tpu.input_shardings``) or an ``hlo.while`` region argument (the loop's
    ``tpu.sharding``).  A value in a replicate with one logical core is
    ``{replicated}``.

    Raises:
      ValueError: the value is not on the device of a tpu.replicate (host
        code, outside any replicate), or the pass has not annotated it.
    """
    if isinstance(value, OpResult):
        owner: Operation | None = value.op
        attr = value.op.attributes.get(SHARDING_KEY)
        index, what = value.index, f"result {value.index} of '{value.op.name}'"
    elif isinstance(value, BlockArgument):
        owner = value.block.parent_op()
        index = value.index
        if isinstance(owner, ReplicateOp):
            attr, what = owner.attributes.get(INPUT_SHARDINGS), f"body argument {index} of 'tpu.replicate'"
        elif isinstance(owner, WhileOp):
            attr, what = owner.attributes.get(SHARDING_KEY), f"region argument {index} of 'hlo.while'"
        else:
            attr, what = None, f"block argument {index}"
    else:
        raise TypeError(f"{value} is neither an op result nor a block argument")
    rep = _device_replicate(owner)
    if isinstance(owner, ReplicateOp) and isinstance(value, OpResult):
        rep = None  # the replicate's own results are per replica, outside its body
    if rep is None:
        raise ValueError(f"{what} is not a value of a device tpu.replicate body, so it has no sharding")
    if attr is None and rep.num_cores == 1:
        return Sharding.replicated()
    return _entry(attr, index, what)


def shardings_of(op: Operation) -> list[Sharding]:
    """The shardings of ``op``'s results (see :func:`sharding_of`)."""
    return [sharding_of(r) for r in op.results]


def input_shardings(replicate: ReplicateOp) -> list[Sharding]:
    """The replicate's ``tpu.input_shardings``, one per body argument
    (``{replicated}`` with one logical core)."""
    return [sharding_of(a) for a in replicate.body.block.args]


def output_shardings(replicate: ReplicateOp) -> list[Sharding]:
    """The replicate's ``tpu.output_shardings``, one per yielded value
    (``{replicated}`` with one logical core)."""
    if replicate.on_host:
        raise ValueError("a host tpu.replicate has no shardings")
    attr = replicate.attributes.get(OUTPUT_SHARDINGS)
    term = replicate.body.block.last_op
    count = len(term.operands) if term is not None else 0
    if attr is None and replicate.num_cores == 1:
        return [Sharding.replicated()] * count
    return [_entry(attr, j, f"output {j} of 'tpu.replicate'") for j in range(count)]
