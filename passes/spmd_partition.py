"""``tpu-spmd-partition``: the per-logical-core program of a replica split over cores.

Input: a module after ``tpu-propagate-sharding`` (docs/logical-devices.md).
Every device ``tpu.replicate`` with ``num_cores_per_replica = C > 1`` has a
body that is the *global* per-replica program; every op result in it carries
``tpu.sharding = [#tpu.sharding<...>, ...]`` and the replicate carries
``tpu.input_shardings`` / ``tpu.output_shardings``.  Output: the body is the
SPMD program that each of the ``C`` cores runs, every value with its *local*
(shard) type, and ``ccl`` collectives between the cores where the layouts
demand them.  The approach is XLA's ``SpmdPartitioner`` (GSPMD) and MLIR's
``shard-partition`` (spmdization), written for xtpu's ops.

How values are laid out
  A value is *tiled* (core ``c`` holds tile ``sharding.tile_for_device(c)``,
  possibly with partial replication) or *whole* on every core:
  ``{replicated}`` and also ``{maximal device=d}`` -- XLA runs a maximal op
  only on core ``d``; xtpu computes it on every core of the replica (same
  values, the other cores' copies are simply unused), so a maximal value
  costs no communication and may feed any op.  ``{manual}`` values keep their
  type and cannot be resharded.

Resharding (``_Partitioner.reshard``), from the layout a value has to the one
a consumer needs, cheapest rule first:
  * tiled on dim ``a`` -> tiled on dim ``b`` (same tile count, the other dims
    alike): ``ccl.all_to_all`` (split ``b``, concat ``a``);
  * same tile grid, other core order: ``ccl.collective_permute``;
  * otherwise ``ccl.all_gather`` along each tiled dim whose tile does not
    contain the wanted one (groups: the cores that share the other tile
    coordinates, in tile order), then ``hlo.dynamic_slice`` at the core's
    offset in what it holds.  whole -> tiled is a slice alone, tiled -> whole
    gathers alone.
  Per-core offsets come from ``tpu.logical_core_id``: a constant table with
  one entry per core, read with ``hlo.dynamic_slice`` (emitted once, at the
  top of the body).

Ops (each computes its result in the propagated sharding ``R`` of that
result, after resharding its operands to what that needs):
  * elementwise, ``compare``, ``select``, ``convert``: local, operands in ``R``
    (a scalar predicate stays whole);
  * ``broadcast_in_dim``, ``transpose``, ``reshape``: local with local
    shapes, the operand in the sharding that ``R`` implies for it (for a
    reshape: tiles must be contiguous row-major chunks of each group of
    merged/split dims; otherwise the reshape runs on the whole value and the
    result is sliced; a zero-size value reshapes its local tile as it is);
  * ``dot_general``: operands in the sharding ``R`` implies on batch and free
    dims; when an operand is tiled on the contracting dims and ``R``'s
    replication can hold those tiles, each core contracts its tiles and a
    ``ccl.all_reduce applies add`` over the cores holding the different
    contraction tiles of the same result tile sums the partial results.
    When ``R`` splits a dimension over exactly those cores instead (GSPMD's
    dot handler with a partial-sum result and a split output), each core
    computes the whole partial result and one ``ccl.reduce_scatter`` along
    that dimension leaves it its tile -- chosen when the cost model
    (``spmd_cost.reshard_bytes`` of the operands plus ``(g - 1) / g`` of the
    partial result) says it moves less than resharding the operands;
  * ``reduce``: likewise over reduced dims the input is tiled on, with a
    ``ccl.all_reduce`` applying the reduction (``and``/``or`` of bools as
    ``min``/``max``), or a ``ccl.reduce_scatter`` when the result is split
    over the cores that hold the reduced tiles; an ``add``/``mul`` init
    value that is not the identity is applied once after the collective,
    not on every core;
  * ``iota`` tiled on its dimension: local iota plus the core's offset;
  * ``constant``: a splat is built at its local shape; any other constant
    stays whole and consumers slice it (one SPMD program cannot hold a
    different constant per core);
  * ``slice``, ``pad``, ``concatenate`` (GSPMD's ``HandleSlice``,
    ``HandlePad``, ``HandleConcatenate``): tiled dims that the op leaves
    alone stay tiled; a dim it cuts, pads at its edges or joins stays tiled
    when the tile count divides the operands' sizes: each core's result tile
    is a *window* of the operand (``_Partitioner.window``, GSPMD's
    ``ExchangeHalo``): the rows of the window that its own tile lacks come
    from the cores holding the neighbouring tiles, one
    ``ccl.collective_permute`` per tile offset, each sending only the
    boundary slice some core needs; positions outside the operand (padding,
    another input of the concatenation) are chosen by ``select`` on the
    global position.  Other cut dims are made whole first;
  * ``hlo.gather`` of whole slices along one dimension ``a`` (``tf.gather``,
    embedding lookups): the indices in the sharding the result's batch dims
    imply, the operand in the one its offset dims imply.  When the operand
    (a table) is split along ``a`` (its rows) and the result's replication
    can hold those tiles (GSPMD's gather with a row-split operand), each core
    gathers from its own rows: the ids, clamped as the global gather clamps
    them, minus the core's first row; ids outside its rows give zeros
    (``select``), and a ``ccl.all_reduce applies add`` over the cores that
    hold the row blocks sums the rows -- chosen when the cost model
    (``spmd_cost.all_reduce_bytes`` of the result tile against
    ``reshard_bytes`` of gathering the table) says it moves less.  Else the
    table is made whole along ``a`` and the gather is local (ids split:
    no communication at all);
  * ``hlo.scatter`` of whole rows likewise: input, result and the updates'
    window dims in the result's sharding, indices and scatter dims of the
    updates whole; a core whose rows are a block of ``a`` scatters the ids
    minus its first row, and the scatter drops the ids outside its block
    (StableHLO's out-of-range windows): local, no collective;
  * ``hlo.convolution``, ``hlo.reduce_window``, ``hlo.select_and_scatter``,
    ``hlo.reverse`` (``passes/spmd_windowed.py``, GSPMD's convolution and
    windowed-op handlers): a spatially split input exchanges halos with its
    neighbours (:meth:`window`) and computes its result tile locally; batch
    and output-feature splits are local; input-feature splits (and a kernel
    split on a spatial dimension, the weight gradient's form) sum partial
    results with a ``ccl.all_reduce``;
  * ``hlo.if`` / ``hlo.while``: regions partitioned by the same rules; loop
    values and branch results in the op's result shardings;
  * ``tpu.sharding_constraint``: a reshard to its sharding, then gone;
  * ``ccl.all_reduce`` from ``tpu-lower-cross-replica-sum``: groups of replica
    ids become participant groups ``[[g * C + c for g in group] for group in
    groups for c in range(C)]``; the op runs on the local values;
  * anything else (``hlo.dynamic_slice``, ``hlo.sort``, other gathers,
    ``hlo.dynamic_update_slice``, ...): on whole values (operands gathered),
    result whole.

All collectives within a replica use participant groups ``r * C + c`` for
every replica ``r`` and get channel ids after the largest in the module.  The
``tpu.sharding`` attributes are dropped from the body (the types now say the
local shapes); the replicate keeps ``tpu.input_shardings`` /
``tpu.output_shardings`` (added, all ``{replicated}``, if missing), which the
runtime uses to split inputs and assemble outputs.  A body that already has
local types is left alone.

Host transfers (``tpu.send_to_host`` / ``tpu.recv_from_host``, after
outlining) use whole values: a split value is gathered before it is sent and
what comes back is whole on every core; the runtime lets logical core 0 talk
to the host and hands the answer to the other cores.  Clusters must be
outlined first (``tpu.outside_compilation`` is rejected).

Limitations: collectives other than ``ccl.all_reduce`` in the input are
rejected; uneven splits are rejected (as by ``Sharding.shard_shape``):
tile counts that do not divide a dimension are replicated by propagation,
where GSPMD would pad the last tile.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from xtpu.dialects import ccl, hlo
from xtpu.dialects.hlo_control import IfOp, ReturnOp, WhileOp
from xtpu.dialects.hlo_indexing import GatherOp, ScatterOp
from xtpu.dialects.primitive import PrimitiveOp, ShapeError
from xtpu.dialects.sharding import SHARDING_KEY, Sharding, ShardingAttr
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype
from xtpu.dialects.tpu import (
    CrossReplicaSumOp,
    LogicalCoreIdOp,
    OutsideCompilationOp,
    ReplicateOp,
    ShardingConstraintOp,
    YieldOp,
)
from xtpu.passes._common import at, chunk_tiling, prefix_tiled, refuse_fused
from xtpu.passes.propagate_sharding import take_dims
from xtpu.passes.spmd_cost import all_reduce_bytes, reshard_bytes
from xtpu.passes.spmd_windowed import RULES as WINDOWED_RULES

INPUT_SHARDINGS = "tpu.input_shardings"
OUTPUT_SHARDINGS = "tpu.output_shardings"

WHOLE = Sharding.replicated()
"""The layout of a value every core holds whole (replicated or maximal)."""

Index = tuple[int, ...]


# --------------------------------------------------------------------------
# Layouts: a sharding seen from the C cores of one replica
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _View:
    """Tiles per dimension and each core's tile index, for a tiled or whole
    sharding of a rank-``rank`` value over ``C`` cores."""

    sharding: Sharding
    counts: Index
    index: tuple[Index, ...]  # per core

    @property
    def whole(self) -> bool:
        return not self.sharding.is_tiled

    def tile_size(self, shape: Sequence[int], d: int) -> int:
        return shape[d] // self.counts[d]

    def start(self, shape: Sequence[int], c: int, d: int) -> int:
        return self.index[c][d] * self.tile_size(shape, d)


@lru_cache(maxsize=4096)
def _view(sharding: Sharding, rank: int, cores: int) -> _View:
    if sharding.is_tiled:
        return _View(sharding, tuple(sharding.tile_shape), tuple(sharding.tile_for_device(c) for c in range(cores)))
    return _View(WHOLE, (1,) * rank, ((0,) * rank,) * cores)


def _canonical(sharding: Sharding) -> Sharding:
    """Maximal values are computed on every core: they are laid out whole."""
    return WHOLE if sharding.is_maximal else sharding


def _from_tiles(counts: Sequence[int], index: Sequence[Index], cores: int) -> Sharding | None:
    """The sharding in which core ``c`` holds tile ``index[c]`` of a grid of
    ``counts`` tiles, or None if the cores do not hold every tile equally
    often (no sharding says that)."""
    counts = tuple(int(n) for n in counts)
    tiles = math.prod(counts)
    if tiles == 1:
        return WHOLE
    holders: dict[Index, list[int]] = defaultdict(list)
    for c in range(cores):
        holders[tuple(index[c])].append(c)
    if len(holders) != tiles or len({len(h) for h in holders.values()}) != 1:
        return None
    rep = cores // tiles
    flat = [d for t in np.ndindex(*counts) for d in sorted(holders[t])]
    return Sharding.tiled(counts, flat, replication=rep)


def _split_groups(result_index: Sequence[Index], part_index: Sequence[Index]) -> list[list[int]] | None:
    """Cores that hold the same result tile and, between them, each part
    (contraction or reduction tile) once: the groups of the all-reduce that
    sums partial results.  None if some result tile is not held with every
    part equally often."""
    parts = sorted(set(part_index))
    by_result: dict[Index, dict[Index, list[int]]] = defaultdict(lambda: defaultdict(list))
    for c, (res, part) in enumerate(zip(result_index, part_index)):
        by_result[res][part].append(c)
    groups = []
    for res in sorted(by_result):
        buckets = by_result[res]
        if sorted(buckets) != parts or len({len(b) for b in buckets.values()}) != 1:
            return None
        m = len(buckets[parts[0]])
        groups.extend([buckets[p][j] for p in parts] for j in range(m))
    return groups


def _reshape_groups(a: Sequence[int], b: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """Dims of shapes ``a`` and ``b`` grouped so that each group of ``a`` dims
    reshapes to its group of ``b`` dims (equal products), in order."""
    i = j = 0
    groups = []
    while i < len(a) or j < len(b):
        ga, gb, pa, pb = [], [], 1, 1
        if i < len(a):
            ga.append(i)
            pa *= a[i]
            i += 1
        if j < len(b):
            gb.append(j)
            pb *= b[j]
            j += 1
        while pa != pb:
            if pa < pb and i < len(a):
                ga.append(i)
                pa *= a[i]
                i += 1
            elif pb < pa and j < len(b):
                gb.append(j)
                pb *= b[j]
                j += 1
            else:
                return None
        groups.append((ga, gb))
    return groups


def _identity(kind: str, dtype: str) -> np.ndarray:
    """The identity element of a reduction for ``dtype``."""
    np_dtype = numpy_dtype(dtype)
    if dtype == "bool":
        value = {"add": False, "mul": True, "max": False, "min": True, "and": True, "or": False}[kind]
    elif dtype.startswith("float"):
        value = {"add": 0.0, "mul": 1.0, "max": -np.inf, "min": np.inf}[kind]
    else:
        info = np.iinfo(np_dtype)
        value = {"add": 0, "mul": 1, "max": info.min, "min": info.max, "and": -1, "or": 0}[kind]
    return np.array(value, dtype=np_dtype)


_COMBINE = {"add": hlo.AddOp, "mul": hlo.MultiplyOp}
"""Reductions whose init value must be applied once, not on every core."""

_ELEMENTWISE = (
    hlo.ElementwiseBinary,
    hlo.ElementwiseUnary,
    hlo.CompareOp,
    hlo.SelectOp,
    hlo.ConvertOp,
    CrossReplicaSumOp,
)


def _shape(v: SSAValue) -> Index:
    return TensorSpec.of_type(v.type).shape


def _spec(v: SSAValue) -> TensorSpec:
    return TensorSpec.of_type(v.type)


def _local_shape(sharding: Sharding, shape: Sequence[int]) -> Index:
    return tuple(shape) if not sharding.is_tiled else sharding.shard_shape(shape)


# --------------------------------------------------------------------------
# The partitioner of one replicate body
# --------------------------------------------------------------------------


class _Partitioner:
    """Translates the global body of one ``tpu.replicate`` into the per-core
    body: a new block, built op by op, with ``env`` mapping each old value to
    its new (local) value and the layout that value has."""

    def __init__(self, rep: ReplicateOp, channels: list[int]):
        self.rep = rep
        self.C = rep.num_cores
        self.R = rep.num_replicas
        self.channels = channels  # [last channel id used in the module]
        self.env: dict[SSAValue, tuple[SSAValue, Sharding]] = {}
        self.scopes: list[dict[tuple[SSAValue, Sharding], SSAValue]] = []
        self.block: Block | None = None
        self.top: Block | None = None
        self.prologue_last: Operation | None = None
        self.scalars: dict[tuple, SSAValue] = {}
        self.current: Operation | None = None  # the op being partitioned, for diagnostics

    # ---------------------------------------------------------------- checks

    def _where(self, op: Operation) -> str:
        return f"'{op.name}' op{at(op)}"

    def _check_sharding(self, sharding: Sharding, shape: Sequence[int], what: str) -> Sharding:
        if sharding.is_tiled and sharding.num_devices != self.C:
            raise DiagnosticException(
                f"{what} has sharding {sharding} over {sharding.num_devices} devices, but a replica has "
                f"{self.C} logical devices"
            )
        if sharding.is_maximal and sharding.device >= self.C:
            raise DiagnosticException(f"{what} has sharding {sharding}, but a replica has {self.C} logical devices")
        try:
            sharding.check_rank(len(shape))
            _local_shape(sharding, shape)
        except ValueError as e:
            raise DiagnosticException(f"{what}: {e}") from None
        return _canonical(sharding)

    def result_shardings(self, op: Operation) -> list[Sharding]:
        """The propagated sharding of each result of ``op`` (``{replicated}``
        where propagation left none)."""
        if isinstance(op, ShardingConstraintOp):
            attrs = [op.sharding]
        else:
            attr = op.attributes.get(SHARDING_KEY)
            if attr is None:
                attrs = [ShardingAttr(WHOLE)] * len(op.results)
            elif isinstance(attr, ShardingAttr):
                attrs = [attr]
            elif isinstance(attr, ArrayAttr) and all(isinstance(a, ShardingAttr) for a in attr.data):
                attrs = list(attr.data)
            else:
                raise DiagnosticException(
                    f"{self._where(op)} has {SHARDING_KEY} = {attr}, expected an array of #tpu.sharding"
                )
            if len(attrs) != len(op.results):
                raise DiagnosticException(
                    f"{self._where(op)} has {len(attrs)} {SHARDING_KEY} entries for {len(op.results)} results"
                )
        return [
            self._check_sharding(a.sharding, _shape(r), f"{self._where(op)} result {i}")
            for i, (a, r) in enumerate(zip(attrs, op.results))
        ]

    def boundary_shardings(self, name: str, values: Sequence[SSAValue], what: str) -> list[Sharding]:
        attr = self.rep.attributes.get(name)
        if attr is None:
            return [WHOLE] * len(values)
        if not isinstance(attr, ArrayAttr) or not all(isinstance(a, ShardingAttr) for a in attr.data):
            raise DiagnosticException(f"'tpu.replicate' op{at(self.rep)} {name} must be an array of #tpu.sharding")
        if len(attr.data) != len(values):
            raise DiagnosticException(
                f"'tpu.replicate' op{at(self.rep)} {name} has {len(attr.data)} entries for {len(values)} {what}s"
            )
        return [
            self._check_sharding(a.sharding, _shape(v), f"'tpu.replicate' op{at(self.rep)} {what} {i}")
            for i, (a, v) in enumerate(zip(attr.data, values))
        ]

    def precheck(self) -> None:
        """The diagnostics that do not depend on layouts, before anything changes."""
        for op in self.rep.body.walk():
            if isinstance(op, OutsideCompilationOp):
                raise DiagnosticException(
                    f"{self._where(op)} cluster '{op.cluster.data}' was not outlined; run "
                    "tpu-outline-outside-compilation before tpu-spmd-partition"
                )
            if isinstance(op, ccl.CollectiveOp | ccl.CollectivePermuteOp) and not isinstance(op, ccl.AllReduceOp):
                raise DiagnosticException(
                    f"{self._where(op)} is already a collective; in a replica split over {self.C} logical devices "
                    "only ccl.all_reduce (from tpu.cross_replica_sum) can be partitioned"
                )
            if not isinstance(op, PrimitiveOp):
                raise DiagnosticException(f"{self._where(op)} cannot be partitioned over logical devices")

    # ---------------------------------------------------------------- building

    def emit(self, op: Operation) -> Operation:
        assert self.block is not None
        self.block.add_op(op)
        return op

    def prologue(self, op: Operation) -> Operation:
        """Add ``op`` at the top of the body, where it dominates every use."""
        assert self.top is not None
        if self.prologue_last is not None:
            self.top.insert_op_after(op, self.prologue_last)
        elif self.top.first_op is not None:
            self.top.insert_op_before(op, self.top.first_op)
        else:
            self.top.add_op(op)
        self.prologue_last = op
        return op

    def channel(self) -> int:
        self.channels[0] += 1
        return self.channels[0]

    def participants(self, core_groups: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
        """Core groups of one replica as participant groups of every replica."""
        C = self.C
        return tuple(tuple(r * C + int(c) for c in g) for r in range(self.R) for g in core_groups)

    def core_scalar(self, values: Sequence[int], dtype: str = "int32") -> SSAValue:
        """A scalar that is ``values[c]`` on core ``c``: a constant when they
        are equal, else a table read at ``tpu.logical_core_id``."""
        values = tuple(int(v) for v in values)
        uniform = len(set(values)) == 1
        key = (values[0],) if uniform else values
        key = (key, dtype)
        found = self.scalars.get(key)
        if found is not None:
            return found
        np_dtype = numpy_dtype(dtype)
        if uniform:
            out = self.prologue(hlo.ConstantOp.make([], value=np.array(values[0], dtype=np_dtype))).results[0]
        else:
            core = self.scalars.get(("core",))
            if core is None:
                core = self.prologue(LogicalCoreIdOp.make([])).results[0]
                core.name_hint = "core"
                self.scalars[("core",)] = core
            table = self.prologue(hlo.ConstantOp.make([], value=np.array(values, dtype=np_dtype))).results[0]
            picked = self.prologue(hlo.DynamicSliceOp.make([table, core], slice_sizes=(1,))).results[0]
            out = self.prologue(hlo.ReshapeOp.make([picked], shape=())).results[0]
        self.scalars[key] = out
        return out

    # ---------------------------------------------------------------- values

    def get(self, old: SSAValue, want: Sharding) -> SSAValue:
        """The local value of ``old`` laid out as ``want``."""
        new, have = self.env[old]
        return self.reshard(new, _shape(old), have, _canonical(want))

    def reshard(self, v: SSAValue, shape: Index, have: Sharding, want: Sharding) -> SSAValue:
        """``v`` (the local value, under ``have``, of a value of global
        ``shape``) laid out as ``want``."""
        if have == want:
            return v
        if have.is_manual or want.is_manual:
            where = f"{self._where(self.current)} " if self.current is not None else ""
            raise DiagnosticException(
                f"{where}cannot reshard a value of shape {list(shape)} from {have} to {want}: a manual value is "
                "already per device"
            )
        for scope in reversed(self.scopes):
            found = scope.get((v, want))
            if found is not None:
                return found
        out = self._reshard(v, shape, have, want)
        self.scopes[-1][(v, want)] = out
        return out

    def _reshard(self, v: SSAValue, shape: Index, have: Sharding, want: Sharding) -> SSAValue:
        C, rank = self.C, len(shape)
        src, dst = _view(have, rank, C), _view(want, rank, C)
        moved = self._all_to_all(v, src, dst)
        if moved is not None:
            return moved
        permuted = self._permute(v, src, dst)
        if permuted is not None:
            return permuted
        # Gather every tiled dim whose tile does not contain the wanted one.
        for d in range(rank):
            if src.counts[d] == 1:
                continue
            contained = all(
                src.start(shape, c, d) <= dst.start(shape, c, d)
                and dst.start(shape, c, d) + dst.tile_size(shape, d) <= src.start(shape, c, d) + src.tile_size(shape, d)
                for c in range(C)
            )
            if contained:
                continue
            devices = src.sharding.devices
            groups = np.moveaxis(devices, d, -1).reshape(-1, devices.shape[d]).tolist()
            v = self.emit(
                ccl.AllGatherOp.make(
                    [v], replica_groups=self.participants(groups), all_gather_dim=d, channel_id=self.channel()
                )
            ).results[0]
            counts = tuple(1 if i == d else n for i, n in enumerate(src.counts))
            index = [tuple(0 if i == d else x for i, x in enumerate(idx)) for idx in src.index]
            gathered = _from_tiles(counts, index, C)
            assert gathered is not None
            src = _view(gathered, rank, C)
        # Cut the wanted tile out of what each core holds.
        local = _local_shape(want, shape)
        offsets = [[dst.start(shape, c, d) - src.start(shape, c, d) for c in range(C)] for d in range(rank)]
        if all(not any(o) for o in offsets) and tuple(_shape(v)) == local:
            return v
        starts = [self.core_scalar(o) for o in offsets]
        return self.emit(hlo.DynamicSliceOp.make([v, *starts], slice_sizes=local)).results[0]

    def _all_to_all(self, v: SSAValue, src: _View, dst: _View) -> SSAValue | None:
        """Tiled on dim ``a`` -> tiled on dim ``b`` with the same cores: one all_to_all."""
        if src.whole or dst.whole or src.sharding.replication != dst.sharding.replication:
            return None
        diff = [d for d in range(len(src.counts)) if src.counts[d] != dst.counts[d]]
        if len(diff) != 2:
            return None
        a, b = diff if dst.counts[diff[0]] == 1 else diff[::-1]
        k = src.counts[a]
        if not (dst.counts[a] == 1 and src.counts[b] == 1 and dst.counts[b] == k):
            return None
        for s, t in zip(src.index, dst.index):
            if t[b] != s[a] or any(s[d] != t[d] for d in range(len(s)) if d not in (a, b)):
                return None
        devices = src.sharding.devices
        groups = np.moveaxis(devices, a, -1).reshape(-1, k).tolist()
        return self.emit(
            ccl.AllToAllOp.make(
                [v],
                replica_groups=self.participants(groups),
                split_dimension=b,
                concat_dimension=a,
                channel_id=self.channel(),
            )
        ).results[0]

    def _permute(self, v: SSAValue, src: _View, dst: _View) -> SSAValue | None:
        """The same tiles on other cores: one collective_permute."""
        if src.whole or dst.whole or src.counts != dst.counts:
            return None
        if src.sharding.replication != dst.sharding.replication:
            return None
        holders: dict[Index, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for c in range(self.C):
            holders[src.index[c]][0].append(c)
            holders[dst.index[c]][1].append(c)
        pairs = [(s, t) for srcs, dsts in holders.values() for s, t in zip(sorted(srcs), sorted(dsts))]
        C = self.C
        all_pairs = tuple((r * C + s, r * C + t) for r in range(self.R) for s, t in sorted(pairs, key=lambda p: p[1]))
        return self.emit(
            ccl.CollectivePermuteOp.make([v], source_target_pairs=all_pairs, channel_id=self.channel())
        ).results[0]

    # ---------------------------------------------------------------- ops

    def new_op(self, op: Operation, cls, operands: Sequence[SSAValue], **params) -> Operation:
        """``cls.make`` at the insertion point, with ``op``'s location and its
        attributes other than ``tpu.sharding``."""
        try:
            new = cls.make(list(operands), **params)
        except ShapeError as e:  # a bug of this pass, reported with the op
            raise DiagnosticException(f"{self._where(op)} could not be partitioned: {e}") from None
        new.location = op.location
        for k, a in op.attributes.items():
            if k != SHARDING_KEY:
                new.attributes[k] = a
        return self.emit(new)

    def define(self, old: SSAValue, new: SSAValue, layout: Sharding) -> None:
        if old.name_hint is not None and new.name_hint is None:
            new.name_hint = old.name_hint
        self.env[old] = (new, layout)

    def visit_block(self, old: Block, new: Block) -> None:
        outer = self.block
        self.block = new
        self.scopes.append({})
        try:
            for op in old.ops:
                self.visit(op)
        finally:
            self.scopes.pop()
            self.block = outer

    def visit(self, op: Operation) -> None:
        self.current = op
        if isinstance(op, YieldOp):
            outs = self.boundary_shardings(OUTPUT_SHARDINGS, op.values, "output")
            vals = [self.get(v, s) for v, s in zip(op.values, outs)]
            new = YieldOp.create(operands=vals)
            new.location = op.location
            self.emit(new)
            return
        assert not isinstance(op, ReturnOp), "hlo.return is handled with its region op"
        if isinstance(op, ShardingConstraintOp):
            (want,) = self.result_shardings(op)
            self.define(op.result, self.get(op.operand, want), want)
            return
        shardings = self.result_shardings(op)
        if isinstance(op, IfOp):
            return self.visit_if(op, shardings)
        if isinstance(op, WhileOp):
            return self.visit_while(op, shardings)
        rule = self._rule(op)
        rule(op, shardings)

    def _rule(self, op: Operation):
        if isinstance(op, ccl.AllReduceOp):
            return self.all_reduce
        if isinstance(op, _ELEMENTWISE):
            return self.elementwise
        for cls, rule in (
            (hlo.BroadcastInDimOp, self.broadcast_in_dim),
            (hlo.ReshapeOp, self.reshape),
            (hlo.TransposeOp, self.transpose),
            (hlo.DotGeneralOp, self.dot_general),
            (hlo.ReduceOp, self.reduce),
            (hlo.IotaOp, self.iota),
            (hlo.ConstantOp, self.constant),
            (hlo.SliceOp, self.slice),
            (hlo.PadOp, self.pad),
            (hlo.ConcatenateOp, self.concatenate),
            (GatherOp, self.gather),
            (ScatterOp, self.scatter),
        ):
            if isinstance(op, cls):
                return rule
        for cls, windowed in WINDOWED_RULES:
            if isinstance(op, cls):
                return lambda op, shardings, rule=windowed: rule(self, op, shardings)
        return self.whole

    # What the windowed ops' rules (passes/spmd_windowed.py) read.

    WHOLE = WHOLE

    @staticmethod
    def shape_of(v: SSAValue) -> Index:
        return _shape(v)

    def view(self, sharding: Sharding, rank: int) -> _View:
        return _view(sharding, rank, self.C)

    def layout(self, v: SSAValue) -> Sharding:
        return self.env[v][1]

    def untiled(self, want: Sharding, rank: int, whole_dims: Sequence[int]) -> Sharding:
        return self._untiled(want, rank, whole_dims)

    def source(self, old: SSAValue, need: Sharding, dims: Sequence[int]) -> Sharding:
        return self._source(old, need, dims)

    def from_tiles(self, counts: Sequence[int], index: Sequence[Index]) -> Sharding | None:
        return _from_tiles(counts, index, self.C)

    @staticmethod
    def split_groups(result_index, part_index):
        return _split_groups(result_index, part_index)

    @staticmethod
    def zero_of(v: SSAValue) -> np.ndarray:
        return np.zeros((), dtype=numpy_dtype(_spec(v).dtype))

    def cost(self, old: SSAValue, want: Sharding) -> float:
        return self._cost(old, want)

    def scatter_cost(self, result: SSAValue, partial: Sharding, g: int) -> float:
        return self._scatter_cost(result, partial, g)

    def scatter_options(self, want: Sharding, rank: int, kappa: Sequence[Index]):
        return self._scatter_options(want, rank, kappa)

    def reduce_scatter(self, x: SSAValue, scatter, kind: str) -> SSAValue:
        return self._reduce_scatter(x, scatter, kind)

    # Each rule: the op's result shardings in, results defined in self.env.

    def whole(self, op: Operation, shardings: list[Sharding]) -> None:
        """Any other op: on whole operands, whole results."""
        new = self.new_op(op, type(op), [self.get(v, WHOLE) for v in op.operands], **op.params())
        for old, res in zip(op.results, new.results):
            self.define(old, res, WHOLE)

    def elementwise(self, op: Operation, shardings: list[Sharding]) -> None:
        (want,) = shardings
        rank = len(_shape(op.results[0]))
        operands = [self.get(v, want if len(_shape(v)) == rank else WHOLE) for v in op.operands]
        new = self.new_op(op, type(op), operands, **op.params())
        self.define(op.results[0], new.results[0], want)

    def all_reduce(self, op: ccl.AllReduceOp, shardings: list[Sharding]) -> None:
        (want,) = shardings
        params = op.params()
        groups = params["replica_groups"]
        ids = sorted(i for g in groups for i in g)
        if ids == list(range(self.R)):  # replica ids (tpu-lower-cross-replica-sum)
            params["replica_groups"] = tuple(
                tuple(g * self.C + c for g in group) for group in groups for c in range(self.C)
            )
        elif ids != list(range(self.R * self.C)):
            raise DiagnosticException(
                f"{self._where(op)} has replica_groups {[list(g) for g in groups]}, which are neither the "
                f"{self.R} replica ids nor the {self.R * self.C} participants of a replicate of {self.R} "
                f"replicas x {self.C} logical devices"
            )
        new = self.new_op(op, ccl.AllReduceOp, [self.get(op.operand, want)], **params)
        self.define(op.result, new.results[0], want)

    def broadcast_in_dim(self, op: hlo.BroadcastInDimOp, shardings: list[Sharding]) -> None:
        (want,) = shardings
        params = op.params()
        dims = params["broadcast_dimensions"]
        out_shape, in_shape = _shape(op.result), _shape(op.operand)
        res = _view(want, len(out_shape), self.C)
        kept = [i for i, d in enumerate(dims) if in_shape[i] == out_shape[d]]
        counts = [res.counts[dims[i]] if i in kept else 1 for i in range(len(dims))]
        index = [tuple(idx[dims[i]] if i in kept else 0 for i in range(len(dims))) for idx in res.index]
        need = _from_tiles(counts, index, self.C)
        assert need is not None  # a projection of a balanced tiling is balanced
        params["shape"] = _local_shape(want, out_shape)
        new = self.new_op(op, hlo.BroadcastInDimOp, [self.get(op.operand, need)], **params)
        self.define(op.result, new.results[0], want)

    def transpose(self, op: hlo.TransposeOp, shardings: list[Sharding]) -> None:
        (want,) = shardings
        perm = op.params()["permutation"]
        res = _view(want, len(perm), self.C)
        counts = [0] * len(perm)
        for i, p in enumerate(perm):
            counts[p] = res.counts[i]
        index = []
        for idx in res.index:
            t = [0] * len(perm)
            for i, p in enumerate(perm):
                t[p] = idx[i]
            index.append(tuple(t))
        need = _from_tiles(counts, index, self.C)
        assert need is not None
        new = self.new_op(op, hlo.TransposeOp, [self.get(op.operand, need)], permutation=perm)
        self.define(op.result, new.results[0], want)

    def reshape(self, op: hlo.ReshapeOp, shardings: list[Sharding]) -> None:
        (want,) = shardings
        in_shape, out_shape = _shape(op.operand), _shape(op.result)
        if math.prod(out_shape) == 0 and not want.is_manual and not self.env[op.operand][1].is_manual:
            # A zero-size value has zero-size tiles under any sharding: the
            # operand's local value, as it is laid out, reshapes to the tile.
            new = self.new_op(op, hlo.ReshapeOp, [self.env[op.operand][0]], shape=_local_shape(want, out_shape))
            self.define(op.result, new.results[0], want)
            return
        need = self._reshape_operand(in_shape, out_shape, want)
        if need is None:  # tiles are not contiguous chunks: reshape the whole value
            new = self.new_op(op, hlo.ReshapeOp, [self.get(op.operand, WHOLE)], shape=out_shape)
            self.define(op.result, new.results[0], WHOLE)
            return
        local = _local_shape(want, out_shape)
        new = self.new_op(op, hlo.ReshapeOp, [self.get(op.operand, need)], shape=local)
        self.define(op.result, new.results[0], want)

    def _reshape_operand(self, in_shape: Index, out_shape: Index, want: Sharding) -> Sharding | None:
        """The operand sharding under which a local reshape gives ``want``'s
        tiles, or None."""
        res = _view(want, len(out_shape), self.C)
        if res.whole:
            return WHOLE
        groups = _reshape_groups(in_shape, out_shape)
        if groups is None:
            return None
        counts = [1] * len(in_shape)
        index = [[0] * len(in_shape) for _ in range(self.C)]
        for ga, gb in groups:
            gb_sizes = [out_shape[d] for d in gb]
            gb_counts = [res.counts[d] for d in gb]
            if not prefix_tiled(gb_sizes, gb_counts):
                return None
            chunks = math.prod(gb_counts)
            if not ga:
                if chunks != 1:
                    return None
                continue
            ga_counts = chunk_tiling([in_shape[d] for d in ga], chunks)
            if ga_counts is None:
                return None
            for d, n in zip(ga, ga_counts):
                counts[d] = n
            for c in range(self.C):
                q = int(np.ravel_multi_index([res.index[c][d] for d in gb], gb_counts)) if gb else 0
                for d, x in zip(ga, np.unravel_index(q, ga_counts)):
                    index[c][d] = int(x)
        return _from_tiles(counts, [tuple(i) for i in index], self.C)

    def dot_general(self, op: hlo.DotGeneralOp, shardings: list[Sharding]) -> None:
        (want,) = shardings
        p = op.params()
        lb, rb = list(p["lhs_batching_dimensions"]), list(p["rhs_batching_dimensions"])
        lc, rc = list(p["lhs_contracting_dimensions"]), list(p["rhs_contracting_dimensions"])
        lrank, rrank = len(_shape(op.lhs)), len(_shape(op.rhs))
        lf = [d for d in range(lrank) if d not in lb and d not in lc]
        rf = [d for d in range(rrank) if d not in rb and d not in rc]
        res = _view(want, len(lb) + len(lf) + len(rf), self.C)
        nb, nlf = len(lb), len(lf)

        def operand_tiles(batch, free, contract, free_at, rank, k_counts, kappa, res=res):
            counts, index = [1] * rank, [[0] * rank for _ in range(self.C)]
            for pos, d in enumerate(batch):
                counts[d] = res.counts[pos]
            for pos, d in enumerate(free):
                counts[d] = res.counts[free_at + pos]
            for pos, d in enumerate(contract):
                counts[d] = k_counts[pos]
            for c in range(self.C):
                for pos, d in enumerate(batch):
                    index[c][d] = res.index[c][pos]
                for pos, d in enumerate(free):
                    index[c][d] = res.index[c][free_at + pos]
                for pos, d in enumerate(contract):
                    index[c][d] = kappa[c][pos]
            return _from_tiles(counts, [tuple(i) for i in index], self.C)

        plan = None
        for operand, cdims in ((op.lhs, lc), (op.rhs, rc)):
            have = _view(self.env[operand][1], len(_shape(operand)), self.C)
            k_counts = [have.counts[d] for d in cdims]
            if math.prod(k_counts) == 1:
                continue
            kappa = [tuple(idx[d] for d in cdims) for idx in have.index]
            groups = _split_groups(res.index, kappa)
            if groups is None:
                continue
            need_l = operand_tiles(lb, lf, lc, nb, lrank, k_counts, kappa)
            need_r = operand_tiles(rb, rf, rc, nb + nlf, rrank, k_counts, kappa)
            if need_l is not None and need_r is not None:
                plan = (need_l, need_r, groups)
                break
        scatter = None
        if plan is None:
            ones, zeros = [1] * len(lc), [(0,) * len(lc)] * self.C
            plan = (
                operand_tiles(lb, lf, lc, nb, lrank, ones, zeros),
                operand_tiles(rb, rf, rc, nb + nlf, rrank, ones, zeros),
                None,
            )
            cost = self._cost(op.lhs, plan[0]) + self._cost(op.rhs, plan[1])
            # GSPMD's dot handler with a partial-sum result whose output is
            # split: each core contracts its tiles into a partial result and
            # one reduce_scatter sums them, leaving each core its tile.
            for operand, cdims in ((op.lhs, lc), (op.rhs, rc)):
                have = _view(self.env[operand][1], len(_shape(operand)), self.C)
                k_counts = [have.counts[d] for d in cdims]
                if math.prod(k_counts) == 1:
                    continue
                kappa = [tuple(idx[d] for d in cdims) for idx in have.index]
                for dim, partial, groups in self._scatter_options(want, len(res.counts), kappa):
                    pres = _view(partial, len(res.counts), self.C)
                    need_l = operand_tiles(lb, lf, lc, nb, lrank, k_counts, kappa, res=pres)
                    need_r = operand_tiles(rb, rf, rc, nb + nlf, rrank, k_counts, kappa, res=pres)
                    if need_l is None or need_r is None:
                        continue
                    c = (
                        self._cost(op.lhs, need_l)
                        + self._cost(op.rhs, need_r)
                        + self._scatter_cost(op.result, partial, len(groups[0]))
                    )
                    if c < cost:
                        cost, plan, scatter = c, (need_l, need_r, None), (dim, partial, groups)
        need_l, need_r, groups = plan
        assert need_l is not None and need_r is not None
        new = self.new_op(op, hlo.DotGeneralOp, [self.get(op.lhs, need_l), self.get(op.rhs, need_r)], **p)
        out = new.results[0]
        if groups is not None:  # partial sums over the contraction tiles
            out.name_hint = (op.result.name_hint + "_partial") if op.result.name_hint else None
            out = self.emit(
                ccl.AllReduceOp.make(
                    [out], replica_groups=self.participants(groups), computation="add", channel_id=self.channel()
                )
            ).results[0]
        if scatter is not None:
            out.name_hint = (op.result.name_hint + "_partial") if op.result.name_hint else None
            out = self._reduce_scatter(out, scatter, "add")
        self.define(op.result, out, want)

    # Partial sums scattered over a split result (GSPMD's reduce-scatter)

    def _scatter_options(self, want: Sharding, rank: int, kappa: Sequence[Index]):
        """``(dim, partial, groups)`` for each result dimension ``dim`` that
        ``want`` tiles where a ``reduce_scatter`` along ``dim`` can finish a
        partial result: ``partial`` is ``want`` with ``dim`` whole, held by
        cores whose part tiles (``kappa``, of the contraction or reduction)
        differ; within each group the cores are in ``want``'s tile order
        along ``dim``, so the ``i``-th member keeps block ``i``."""
        res = _view(want, rank, self.C)
        for dim in range(rank):
            if res.counts[dim] == 1:
                continue
            partial = self._untiled(want, rank, [dim])
            groups = _split_groups(_view(partial, rank, self.C).index, kappa)
            if groups is None or any(len(g) != res.counts[dim] for g in groups):
                continue
            ordered = []
            for g in groups:
                g = sorted(g, key=lambda c: res.index[c][dim])
                if [res.index[c][dim] for c in g] != list(range(len(g))):
                    break
                ordered.append(g)
            else:
                yield dim, partial, ordered

    def _reduce_scatter(self, x: SSAValue, scatter, kind: str) -> SSAValue:
        dim, _, groups = scatter
        return self.emit(
            ccl.ReduceScatterOp.make(
                [x],
                replica_groups=self.participants(groups),
                scatter_dimension=dim,
                computation=kind,
                channel_id=self.channel(),
            )
        ).results[0]

    def _tiles(self, counts: Sequence[int], pick) -> Sharding | None:
        """The sharding whose core ``c`` holds tile ``pick(c)`` of ``counts``."""
        return _from_tiles(counts, [tuple(pick(c)) for c in range(self.C)], self.C)

    def gather(self, op: GatherOp, shardings: list[Sharding]) -> None:
        dims = take_dims(op)
        if dims is None:
            return self.whole(op, shardings)
        a, op_map, idx_map = dims
        (want,) = shardings
        out_shape, x_shape, i_shape = _shape(op.result), _shape(op.operand), _shape(op.start_indices)
        res = _view(want, len(out_shape), self.C)
        have = _view(self.env[op.operand][1], len(x_shape), self.C)

        def operand_need(k: int) -> Sharding | None:
            counts = [res.counts[m] if m >= 0 else 1 for m in op_map]
            counts[a] = k
            return self._tiles(
                counts,
                lambda c: [
                    have.index[c][d] if d == a and k > 1 else (res.index[c][m] if m >= 0 else 0)
                    for d, m in enumerate(op_map)
                ],
            )

        ids_need = self._tiles([res.counts[m] for m in idx_map], lambda c: [res.index[c][m] for m in idx_map])
        assert ids_need is not None
        local_b = operand_need(1)
        k = have.counts[a]
        groups, split = None, None
        if k > 1 and _spec(op.operand).dtype != "bool":
            groups = _split_groups(res.index, [(have.index[c][a],) for c in range(self.C)])
            split = operand_need(k) if groups is not None else None
        if split is not None and local_b is not None:
            local_out = math.prod(_local_shape(want, out_shape)) * numpy_dtype(_spec(op.result).dtype).itemsize
            cost_split = self._cost(op.operand, split) + all_reduce_bytes(local_out, len(groups[0]))
            if cost_split >= self._cost(op.operand, local_b):
                split = None
        p = op.params()
        ids = self.get(op.start_indices, ids_need)
        if split is None:
            assert local_b is not None
            x = self.get(op.operand, local_b)
            p["slice_sizes"] = tuple(min(1, n) if d == a else n for d, n in enumerate(_local_shape(local_b, x_shape)))
            new = self.new_op(op, GatherOp, [x, ids], **p)
            self.define(op.result, new.results[0], want)
            return
        # The table split along a: each core gathers its rows, masks the
        # others' ids, and an all-reduce sums the row blocks.
        x = self.get(op.operand, split)
        local_x = _local_shape(split, x_shape)
        rows = local_x[a]
        dt = _spec(op.start_indices).dtype
        local_ids_shape = _local_shape(ids_need, i_shape)

        def spread(scalar: SSAValue, shape: Index) -> SSAValue:
            return self.emit(hlo.BroadcastInDimOp.make([scalar], broadcast_dimensions=(), shape=shape)).results[0]

        def const(value: int) -> SSAValue:
            return spread(self.core_scalar([value] * self.C, dt), local_ids_shape)

        view = _view(split, len(x_shape), self.C)
        first = spread(self.core_scalar([view.start(x_shape, c, a) for c in range(self.C)], dt), local_ids_shape)
        clamped = self.emit(hlo.MaximumOp.make([ids, const(0)])).results[0]
        clamped = self.emit(hlo.MinimumOp.make([clamped, const(x_shape[a] - 1)])).results[0]
        local_ids = self.emit(hlo.SubtractOp.make([clamped, first])).results[0]
        lo = self.emit(hlo.CompareOp.make([local_ids, const(0)], comparison_direction="GE")).results[0]
        hi = self.emit(hlo.CompareOp.make([local_ids, const(rows)], comparison_direction="LT")).results[0]
        mine = self.emit(hlo.AndOp.make([lo, hi])).results[0]
        p["slice_sizes"] = tuple(min(1, n) if d == a else n for d, n in enumerate(local_x))
        got = self.new_op(op, GatherOp, [x, local_ids], **p).results[0]
        local_out = _shape(got)
        mask = self.emit(
            hlo.BroadcastInDimOp.make([mine], broadcast_dimensions=tuple(idx_map), shape=local_out)
        ).results[0]
        zero = self.emit(hlo.ConstantOp.make([], value=np.zeros((), numpy_dtype(_spec(op.result).dtype)))).results[0]
        picked = self.emit(hlo.SelectOp.make([mask, got, spread(zero, local_out)])).results[0]
        if op.result.name_hint:
            picked.name_hint = op.result.name_hint + "_partial"
        out = self.emit(
            ccl.AllReduceOp.make(
                [picked], replica_groups=self.participants(groups), computation="add", channel_id=self.channel()
            )
        ).results[0]
        self.define(op.result, out, want)

    def scatter(self, op: ScatterOp, shardings: list[Sharding]) -> None:
        dims = take_dims(op)
        if dims is None:
            return self.whole(op, shardings)
        a, op_map, _ = dims
        (want,) = shardings
        x_shape, u_shape, i_shape = _shape(op.input), _shape(op.updates), _shape(op.scatter_indices)
        res = _view(want, len(x_shape), self.C)
        u_counts = [1] * len(u_shape)
        for d, u in enumerate(op_map):
            if u >= 0:
                u_counts[u] = res.counts[d]

        def u_index(c):
            out = [0] * len(u_shape)
            for d, u in enumerate(op_map):
                if u >= 0:
                    out[u] = res.index[c][d]
            return out

        u_need = self._tiles(u_counts, u_index)
        if u_need is None:
            return self.whole(op, shardings)
        x = self.get(op.input, want)
        upd = self.get(op.updates, u_need)
        ids = self.get(op.scatter_indices, WHOLE)
        if res.counts[a] > 1:  # this core's rows start further along
            dt = _spec(op.scatter_indices).dtype
            first = self.core_scalar([res.start(x_shape, c, a) for c in range(self.C)], dt)
            first = self.emit(hlo.BroadcastInDimOp.make([first], broadcast_dimensions=(), shape=i_shape)).results[0]
            ids = self.emit(hlo.SubtractOp.make([ids, first])).results[0]
        new = self.new_op(op, ScatterOp, [x, ids, upd], **op.params())
        self.define(op.result, new.results[0], want)

    def _cost(self, old: SSAValue, want: Sharding) -> float:
        """Bytes per core to lay ``old`` out as ``want`` (spmd_cost.reshard_bytes)."""
        spec = _spec(old)
        have = self.env[old][1]
        return reshard_bytes(have, _canonical(want), spec.shape, numpy_dtype(spec.dtype).itemsize)

    def _scatter_cost(self, result: SSAValue, partial: Sharding, g: int) -> float:
        spec = _spec(result)
        local = math.prod(_local_shape(partial, spec.shape)) * numpy_dtype(spec.dtype).itemsize
        return (g - 1) / g * local

    def reduce(self, op: hlo.ReduceOp, shardings: list[Sharding]) -> None:
        (want,) = shardings
        p = op.params()
        kind, dims = p["computation"], list(p["dimensions"])
        in_shape = _shape(op.input)
        dtype = _spec(op.input).dtype
        rank = len(in_shape)
        kept = [d for d in range(rank) if d not in dims]
        res = _view(want, len(kept), self.C)
        have = _view(self.env[op.input][1], rank, self.C)
        ccl_kind = kind
        if kind in ("and", "or"):
            ccl_kind = ({"and": "min", "or": "max"}[kind]) if dtype == "bool" else None

        def input_tiles(k_counts, kappa, res=res):
            counts, index = [1] * rank, [[0] * rank for _ in range(self.C)]
            for pos, d in enumerate(kept):
                counts[d] = res.counts[pos]
            for pos, d in enumerate(dims):
                counts[d] = k_counts[pos]
            for c in range(self.C):
                for pos, d in enumerate(kept):
                    index[c][d] = res.index[c][pos]
                for pos, d in enumerate(dims):
                    index[c][d] = kappa[c][pos]
            return _from_tiles(counts, [tuple(i) for i in index], self.C)

        need, groups = None, None
        k_counts = [have.counts[d] for d in dims]
        if math.prod(k_counts) > 1 and ccl_kind is not None:
            kappa = [tuple(idx[d] for d in dims) for idx in have.index]
            groups = _split_groups(res.index, kappa)
            if groups is not None:
                need = input_tiles(k_counts, kappa)
        scatter = None
        if need is None:
            groups = None
            need = input_tiles([1] * len(dims), [(0,) * len(dims)] * self.C)
            if math.prod(k_counts) > 1 and ccl_kind is not None and need is not None:
                # A result split over the cores that hold the reduced tiles:
                # reduce locally, then one reduce_scatter (GSPMD's
                # HandleReduce with a partial-sum result).
                kappa = [tuple(idx[d] for d in dims) for idx in have.index]
                cost = self._cost(op.input, need)
                for option in self._scatter_options(want, len(kept), kappa):
                    pneed = input_tiles(k_counts, kappa, res=_view(option[1], len(kept), self.C))
                    if pneed is None:
                        continue
                    c = self._cost(op.input, pneed) + self._scatter_cost(op.result, option[1], len(option[2][0]))
                    if c < cost:
                        cost, need, scatter = c, pneed, option
        assert need is not None
        x = self.get(op.input, need)
        init = self.get(op.init_value, WHOLE)
        if groups is None and scatter is None:
            new = self.new_op(op, hlo.ReduceOp, [x, init], computation=kind, dimensions=dims)
            self.define(op.result, new.results[0], want)
            return
        # Each core reduces its tiles; an all-reduce combines the cores'.
        # An add/mul init value that is not the identity must count once.
        identity = _identity(kind, dtype)
        late_init = kind in _COMBINE and not self._is_constant(op.init_value, identity)
        if late_init:
            local_init = self.emit(hlo.ConstantOp.make([], value=identity)).results[0]
        else:
            local_init = init
        partial = self.new_op(op, hlo.ReduceOp, [x, local_init], computation=kind, dimensions=dims).results[0]
        if op.result.name_hint:
            partial.name_hint = op.result.name_hint + "_partial"
        if scatter is not None:
            out = self._reduce_scatter(partial, scatter, ccl_kind)
        else:
            out = self.emit(
                ccl.AllReduceOp.make(
                    [partial], replica_groups=self.participants(groups), computation=ccl_kind, channel_id=self.channel()
                )
            ).results[0]
        if late_init:
            local = _shape(out)
            if local != ():
                init = self.emit(hlo.BroadcastInDimOp.make([init], broadcast_dimensions=(), shape=local)).results[0]
            out = self.emit(_COMBINE[kind].make([out, init])).results[0]
        self.define(op.result, out, want)

    @staticmethod
    def _is_constant(v: SSAValue, value: np.ndarray) -> bool:
        owner = v.owner
        if not isinstance(owner, hlo.ConstantOp):
            return False
        arr = owner.params()["value"]
        return bool(np.all(arr == value))

    def iota(self, op: hlo.IotaOp, shardings: list[Sharding]) -> None:
        (want,) = shardings
        p = op.params()
        d, shape, dtype = p["iota_dimension"], p["shape"], p["dtype"]
        local = _local_shape(want, shape)
        new = self.new_op(op, hlo.IotaOp, [], iota_dimension=d, shape=local, dtype=dtype)
        out = new.results[0]
        res = _view(want, len(shape), self.C)
        if res.counts[d] > 1:  # this core's tile starts further along
            out.name_hint = None
            offset = self.core_scalar([res.start(shape, c, d) for c in range(self.C)], dtype)
            spread = self.emit(hlo.BroadcastInDimOp.make([offset], broadcast_dimensions=(), shape=local)).results[0]
            out = self.emit(hlo.AddOp.make([new.results[0], spread])).results[0]
        self.define(op.result, out, want)

    def constant(self, op: hlo.ConstantOp, shardings: list[Sharding]) -> None:
        (want,) = shardings
        value = op.params()["value"]
        if want.is_tiled and value.size and bool(np.all(value == value.flat[0])):
            local = np.full(_local_shape(want, value.shape), value.flat[0], dtype=value.dtype)
            new = self.new_op(op, hlo.ConstantOp, [], value=local)
            self.define(op.result, new.results[0], want)
            return
        new = self.new_op(op, hlo.ConstantOp, [], value=value)
        self.define(op.result, new.results[0], WHOLE)

    def _untiled(self, want: Sharding, rank: int, whole_dims: Sequence[int]) -> Sharding:
        """``want`` with dims ``whole_dims`` not tiled."""
        res = _view(want, rank, self.C)
        counts = [1 if d in whole_dims else n for d, n in enumerate(res.counts)]
        index = [tuple(0 if d in whole_dims else x for d, x in enumerate(idx)) for idx in res.index]
        out = _from_tiles(counts, index, self.C)
        assert out is not None
        return out

    # Windowed operands (GSPMD's ExchangeHalo / ReshardAsWindowedInput)

    def window(self, x: SSAValue, shape: Index, have: Sharding, d: int, starts: Sequence[int], size: int) -> SSAValue:
        """``x``, the local value of a value of global ``shape`` laid out as
        ``have``, with its dimension ``d`` replaced by the window
        ``[starts[c], starts[c] + size)`` of that dimension on core ``c``
        (other dimensions as ``have`` tiles them).  Positions outside
        ``[0, shape[d])`` hold zeros or other junk: the caller masks them.

        Core ``c`` holds tile ``j`` of ``L`` elements along ``d``.  The window
        is assembled from *rounds*, each one static slice of every core's
        tile (the union of what the round's targets need) moved by one
        ``ccl.collective_permute`` to the cores that need it; concatenated
        in order the rounds are a contiguous range that holds each core's
        window, cut out with a ``dynamic_slice`` at the core's offset.  Two
        ways to form rounds (GSPMD's ``ExchangeHalo`` and its windowed
        reshard), the one moving fewer bytes per core (then fewer permutes)
        is taken:

        * by tile *offset*: round ``delta`` brings tile ``j + delta``; the
          core's own tile needs no permute.  A window overlapping its
          neighbours by a few rows is a halo exchange: only the boundary
          rows move.
        * by *position in the window*: round ``k`` brings the ``k``-th tile
          the window covers (a concatenation's result tile made of several
          input tiles); only when no two cores want the same tile in a round
          from fewer holders.
        """
        C, rank = self.C, len(shape)
        v = _view(have, rank, C)
        T = v.counts[d]
        L = shape[d] // T
        item = numpy_dtype(_spec(x).dtype).itemsize * math.prod(n for k, n in enumerate(_shape(x)) if k != d)
        plans = [self._by_offset(v, d, T, L, starts, size), self._by_position(v, d, T, L, starts, size)]
        plans = [p for p in plans if p is not None]
        base, rounds = min(plans, key=lambda p: self._plan_cost(p[1], item))
        pieces = []
        for a, b, pairs in rounds:
            piece = self._cut(x, d, a, b)
            if pairs is None:
                pass
            elif not pairs:
                piece = self._zeros(piece, d, b - a)
            elif any(s != t for s, t in pairs):
                R, C = self.R, self.C
                every = tuple((r * C + s, r * C + t) for r in range(R) for s, t in sorted(pairs, key=lambda p: p[1]))
                piece = self.emit(
                    ccl.CollectivePermuteOp.make([piece], source_target_pairs=every, channel_id=self.channel())
                ).results[0]
            pieces.append(piece)
        # Windows reaching past the operand's ends (where only the mask's
        # value matters) must still lie inside the buffer: pad it locally.
        length = sum(b - a for a, b, _ in rounds)
        offsets = [int(starts[c]) - base[c] for c in range(C)]
        front = max(0, -min(offsets))
        back = max(0, max(o + size for o in offsets) - length)
        if front:
            pieces.insert(0, self._zeros(x, d, front))
            offsets = [o + front for o in offsets]
        if back:
            pieces.append(self._zeros(x, d, back))
        buf = pieces[0] if len(pieces) == 1 else self.emit(hlo.ConcatenateOp.make(pieces, dimension=d)).results[0]
        local = list(_shape(buf))
        if not any(offsets) and local[d] == size:
            return buf
        local[d] = size
        zero = self.core_scalar([0] * C)
        idx = [self.core_scalar(offsets) if k == d else zero for k in range(rank)]
        return self.emit(hlo.DynamicSliceOp.make([buf, *idx], slice_sizes=tuple(local))).results[0]

    @staticmethod
    def _plan_cost(rounds, item: int) -> tuple[float, int]:
        got: dict[int, int] = defaultdict(int)
        for a, b, pairs in rounds:
            for s, t in pairs or ():
                if s != t:
                    got[t] += (b - a) * item
        permutes = sum(1 for _, _, pairs in rounds if pairs and any(s != t for s, t in pairs))
        return (max(got.values(), default=0), permutes)

    def _holders(self, v: _View) -> dict[Index, list[int]]:
        holders: dict[Index, list[int]] = defaultdict(list)
        for c in range(self.C):
            holders[v.index[c]].append(c)
        return holders

    def _by_offset(self, v: _View, d: int, T: int, L: int, starts: Sequence[int], size: int):
        """Rounds by tile offset: ``(base, [(a, b, pairs | None), ...])``,
        ``base[c]`` the global position where core ``c``'s buffer starts;
        ``pairs`` None for the core's own tile."""
        C = self.C
        rel = [int(starts[c]) - v.index[c][d] * L for c in range(C)]
        first = [r // L for r in rel]
        last = [(r + size - 1) // L for r in rel]
        lo, hi = min(first), max(last)
        holders = self._holders(v)
        rounds, origin = [], None
        for delta in range(lo, hi + 1):
            # the cores whose window reaches an existing tile at this offset
            users = [c for c in range(C) if first[c] <= delta <= last[c] and 0 <= v.index[c][d] + delta < T]
            a = 0 if delta > lo or not users else min(max(rel[c] - delta * L, 0) for c in users)
            b = L if delta < hi or not users else max(min(rel[c] + size - delta * L, L) for c in users)
            if origin is None:
                origin = delta * L + a
            if delta == 0:
                rounds.append((a, b, None))
                continue
            wanted: dict[Index, list[int]] = defaultdict(list)
            for c in users:
                wanted[tuple(i + delta if k == d else i for k, i in enumerate(v.index[c]))].append(c)
            pairs = [(s, t) for tile, ts in wanted.items() for s, t in zip(sorted(holders[tile]), sorted(ts))]
            rounds.append((a, b, pairs))
        assert origin is not None
        return [v.index[c][d] * L + origin for c in range(C)], rounds

    def _by_position(self, v: _View, d: int, T: int, L: int, starts: Sequence[int], size: int):
        """Rounds by position in the window (see :meth:`_by_offset` for the
        form), or None when a round would need a tile from more cores than
        hold it."""
        C = self.C
        first = [int(starts[c]) // L for c in range(C)]
        rel = [int(starts[c]) - first[c] * L for c in range(C)]
        count = [(rel[c] + size - 1) // L + 1 for c in range(C)]
        K = max(count)
        holders = self._holders(v)
        rounds = []
        a0 = None
        for k in range(K):
            users = [c for c in range(C) if k < count[c] and 0 <= first[c] + k < T]
            a = 0 if k > 0 or not users else min(rel[c] for c in users)
            b = L if k < K - 1 or not users else max(min(rel[c] + size - k * L, L) for c in users)
            if k == 0:
                a0 = a
            wanted: dict[Index, list[int]] = defaultdict(list)
            for c in users:
                wanted[tuple(first[c] + k if j == d else i for j, i in enumerate(v.index[c]))].append(c)
            pairs = []
            for tile, ts in wanted.items():
                own = [t for t in ts if t in holders[tile]]
                rest = [t for t in ts if t not in own]
                free = [h for h in sorted(holders[tile]) if h not in own]
                if len(rest) > len(free):
                    return None
                pairs += [(t, t) for t in own] + list(zip(free, sorted(rest)))
            rounds.append((a, b, pairs))
        assert a0 is not None
        return [first[c] * L + a0 for c in range(C)], rounds

    def _zeros(self, like: SSAValue, d: int, n: int) -> SSAValue:
        """Zeros shaped as the local value ``like`` with ``n`` elements along ``d``."""
        spec = _spec(like)
        shape = tuple(n if k == d else m for k, m in enumerate(spec.shape))
        return self.emit(hlo.ConstantOp.make([], value=np.zeros(shape, dtype=numpy_dtype(spec.dtype)))).results[0]

    def _cut(self, x: SSAValue, d: int, a: int, b: int) -> SSAValue:
        """Elements ``[a, b)`` of dimension ``d`` of the local value ``x``."""
        shape = _shape(x)
        if (a, b) == (0, shape[d]):
            return x
        starts = [a if k == d else 0 for k in range(len(shape))]
        limits = [b if k == d else n for k, n in enumerate(shape)]
        return self.emit(
            hlo.SliceOp.make([x], start_indices=starts, limit_indices=limits, strides=[1] * len(shape))
        ).results[0]

    def in_range(self, local: Index, d: int, starts: Sequence[int], lo: int, hi: int) -> SSAValue:
        """A bool tensor of shape ``local``: whether position ``starts[c] + i``
        along ``d`` lies in ``[lo, hi)`` on core ``c``."""
        iota = self.emit(hlo.IotaOp.make([], iota_dimension=d, shape=local, dtype="int32")).results[0]
        out = None
        for bound, direction in ((lo, "GE"), (hi, "LT")):
            edge = self.core_scalar([bound - int(s) for s in starts])
            spread = self.emit(hlo.BroadcastInDimOp.make([edge], broadcast_dimensions=(), shape=local)).results[0]
            cmp = self.emit(hlo.CompareOp.make([iota, spread], comparison_direction=direction)).results[0]
            out = cmp if out is None else self.emit(hlo.AndOp.make([out, cmp])).results[0]
        assert out is not None
        return out

    def _source(self, old: SSAValue, need: Sharding, dims: Sequence[int]) -> Sharding:
        """The layout a windowed operand is read in: ``need``, or ``need``
        whole on ``dims`` when the operand is whole already (every core
        then cuts its window locally: nothing moves)."""
        if self.env[old][1].is_tiled:
            return need
        return self._untiled(need, len(_shape(old)), dims)

    def _windowed_dims(self, want: Sharding, in_shape: Index, out_shape: Index, dims: Sequence[int]) -> list[int]:
        """Of ``dims``, those tiled in ``want`` whose tile count divides the
        operand's size too, neither size zero: the dims a windowed operand
        serves."""
        res = _view(want, len(out_shape), self.C)
        return [
            d for d in dims if res.counts[d] > 1 and in_shape[d] % res.counts[d] == 0 and in_shape[d] and out_shape[d]
        ]

    def slice(self, op: hlo.SliceOp, shardings: list[Sharding]) -> None:
        """GSPMD's ``HandleSlice``: a dimension the slice shifts or shortens
        stays tiled; each core takes the window of the operand its result
        tile needs, exchanging boundary elements with its neighbours
        (:meth:`window`), then slices locally with the slice's stride."""
        (want,) = shardings
        p = op.params()
        in_shape, out_shape = _shape(op.operand), _shape(op.result)
        rank = len(in_shape)
        if math.prod(out_shape) == 0 and not want.is_manual:  # nothing to cut: an empty tile
            spec = _spec(op.result)
            empty = np.zeros(_local_shape(want, out_shape), dtype=numpy_dtype(spec.dtype))
            self.define(op.result, self.new_op(op, hlo.ConstantOp, [], value=empty).results[0], want)
            return
        sliced = [
            d
            for d, (a, b, s) in enumerate(zip(p["start_indices"], p["limit_indices"], p["strides"]))
            if (a, b, s) != (0, in_shape[d], 1)
        ]
        windowed = self._windowed_dims(want, in_shape, out_shape, sliced)
        need = self._untiled(want, rank, [d for d in sliced if d not in windowed])
        res = _view(need, rank, self.C)
        src = self._source(op.operand, need, windowed)
        x = self.get(op.operand, src)
        starts, limits, strides = list(p["start_indices"]), list(p["limit_indices"]), list(p["strides"])
        local = list(_local_shape(need, in_shape))
        for d in range(rank):
            if d in windowed:
                tile, stride = out_shape[d] // res.counts[d], strides[d]
                size = (tile - 1) * stride + 1 if tile else 0
                at_c = [starts[d] + res.index[c][d] * tile * stride for c in range(self.C)]
                x = self.window(x, in_shape, src, d, at_c, size)
                starts[d], limits[d] = 0, size
            elif d not in sliced:
                limits[d] = local[d]
        if any((a, b, s) != (0, n, 1) for a, b, s, n in zip(starts, limits, strides, _shape(x))):
            x = self.new_op(op, hlo.SliceOp, [x], start_indices=starts, limit_indices=limits, strides=strides).results[
                0
            ]
        self.define(op.result, x, need)

    def pad(self, op: hlo.PadOp, shardings: list[Sharding]) -> None:
        """GSPMD's ``HandlePad``: a dimension padded at its edges (no interior
        padding) stays tiled; each core takes the window of the operand its
        result tile covers (:meth:`window`) and puts the padding value where
        the window lies outside the operand.  Other padded dimensions are
        made whole and padded locally."""
        (want,) = shardings
        p = op.params()
        low, high, interior = list(p["edge_padding_low"]), list(p["edge_padding_high"]), list(p["interior_padding"])
        in_shape, out_shape = _shape(op.operand), _shape(op.result)
        rank = len(in_shape)
        if math.prod(in_shape) == 0 and not want.is_manual:  # all padding: the value, spread
            value = self.get(op.padding_value, WHOLE)
            local = _local_shape(want, out_shape)
            new = self.new_op(op, hlo.BroadcastInDimOp, [value], broadcast_dimensions=(), shape=local)
            self.define(op.result, new.results[0], want)
            return
        padded = [d for d in range(rank) if (low[d], high[d], interior[d]) != (0, 0, 0)]
        edge = [d for d in padded if interior[d] == 0]
        windowed = self._windowed_dims(want, in_shape, out_shape, edge)
        need = self._untiled(want, rank, [d for d in padded if d not in windowed])
        res = _view(need, rank, self.C)
        src = self._source(op.operand, need, windowed)
        x = self.get(op.operand, src)
        value = self.get(op.padding_value, WHOLE)
        mask = None
        for d in windowed:
            tile = out_shape[d] // res.counts[d]
            at_c = [res.index[c][d] * tile - low[d] for c in range(self.C)]
            x = self.window(x, in_shape, src, d, at_c, tile)
            inside = self.in_range(_shape(x), d, at_c, 0, in_shape[d])
            mask = inside if mask is None else self.emit(hlo.AndOp.make([mask, inside])).results[0]
            low[d] = high[d] = 0
        if mask is not None:
            fill = self.emit(hlo.BroadcastInDimOp.make([value], broadcast_dimensions=(), shape=_shape(x))).results[0]
            x = self.emit(hlo.SelectOp.make([mask, x, fill])).results[0]
        if any((a, b, i) != (0, 0, 0) for a, b, i in zip(low, high, interior)):
            x = self.new_op(
                op, hlo.PadOp, [x, value], edge_padding_low=low, edge_padding_high=high, interior_padding=interior
            ).results[0]
        self.define(op.result, x, need)

    def concatenate(self, op: hlo.ConcatenateOp, shardings: list[Sharding]) -> None:
        """GSPMD's ``HandleConcatenate``: the concatenated dimension stays
        tiled when its tile count divides every input.  Core ``c``'s result
        tile is a window of the concatenation; each input that reaches into
        some core's window is windowed (:meth:`window`: only the tiles a
        core lacks move, by collective permutes) and the pieces are chosen
        per position with ``select``.  Otherwise the dimension is made whole
        and the tiles of the others are concatenated locally."""
        (want,) = shardings
        dim = op.params()["dimension"]
        out_shape = _shape(op.result)
        rank = len(out_shape)
        res = _view(want, rank, self.C)
        T = res.counts[dim]
        shapes = [_shape(v) for v in op.inputs]
        # (A zero-size result along ``dim`` has no window to assemble: its
        # inputs, all empty there, concatenate locally.)
        if T == 1 or len(op.inputs) == 1 or out_shape[dim] == 0 or any(sh[dim] % T for sh in shapes):
            need = self._untiled(want, rank, [dim])
            new = self.new_op(op, hlo.ConcatenateOp, [self.get(v, need) for v in op.inputs], dimension=dim)
            self.define(op.result, new.results[0], need)
            return
        tile = out_shape[dim] // T
        at = [res.index[c][dim] * tile for c in range(self.C)]
        out, offset = None, 0
        for v, sh in zip(op.inputs, shapes):
            n = sh[dim]
            reached = any(a < offset + n and offset < a + tile for a in at)
            if reached:
                src = self._source(v, want, [dim])
                piece = self.window(self.get(v, src), sh, src, dim, [a - offset for a in at], tile)
                if out is None:
                    out = piece
                else:
                    mask = self.in_range(_shape(piece), dim, at, offset, offset + n)
                    out = self.emit(hlo.SelectOp.make([mask, piece, out])).results[0]
            offset += n
        assert out is not None
        self.define(op.result, out, want)

    # ---------------------------------------------------------------- regions

    def _local_types(self, values: Sequence[SSAValue], shardings: Sequence[Sharding]) -> list[TensorType]:
        out = []
        for v, s in zip(values, shardings):
            spec = _spec(v)
            out.append(TensorSpec(_local_shape(s, spec.shape), spec.dtype).to_type())
        return out

    def _region(self, old: Block, args: Sequence[tuple[SSAValue, Sharding]], result_shardings, types) -> Block:
        """A new block for region ``old`` whose ``hlo.return`` gives values
        in ``result_shardings``."""
        new = Block(arg_types=types)
        for (old_arg, s), new_arg in zip(args, new.args):
            self.define(old_arg, new_arg, s)
        body = [o for o in old.ops if not isinstance(o, ReturnOp)]
        ret = old.last_op
        assert isinstance(ret, ReturnOp)
        outer = self.block
        self.block = new
        self.scopes.append({})
        try:
            for o in body:
                self.visit(o)
            self.current = ret
            vals = [self.get(v, s) for v, s in zip(ret.operands, result_shardings)]
            r = ReturnOp.create(operands=vals)
            r.location = ret.location
            self.emit(r)
        finally:
            self.scopes.pop()
            self.block = outer
        return new

    def visit_if(self, op: IfOp, shardings: list[Sharding]) -> None:
        pred = self.get(op.pred, WHOLE)
        blocks = [self._region(r.block, [], shardings, []) for r in (op.true_branch, op.false_branch)]
        new = IfOp.create(
            operands=[pred],
            result_types=self._local_types(op.results, shardings),
            regions=[Region(b) for b in blocks],
        )
        new.location = op.location
        self.emit(new)
        for old, res, s in zip(op.results, new.results, shardings):
            self.define(old, res, s)

    def visit_while(self, op: WhileOp, shardings: list[Sharding]) -> None:
        inits = [self.get(v, s) for v, s in zip(op.operand, shardings)]
        types = self._local_types(op.results, shardings)
        cond = self._region(op.cond.block, list(zip(op.cond.block.args, shardings)), [WHOLE], types)
        body = self._region(op.body.block, list(zip(op.body.block.args, shardings)), shardings, types)
        new = WhileOp.create(operands=inits, result_types=types, regions=[Region(cond), Region(body)])
        new.location = op.location
        self.emit(new)
        for old, res, s in zip(op.results, new.results, shardings):
            self.define(old, res, s)

    # ---------------------------------------------------------------- driver

    def build(self) -> Block:
        """The per-core body (the replicate is not changed yet)."""
        old = self.rep.body.block
        term = old.last_op
        assert isinstance(term, YieldOp)
        ins = self.boundary_shardings(INPUT_SHARDINGS, old.args, "input")
        self.boundary_shardings(OUTPUT_SHARDINGS, term.values, "output")
        new = Block(arg_types=self._local_types(old.args, ins))
        self.top = new
        for a, b, s in zip(old.args, new.args, ins):
            self.define(a, b, s)
        self.visit_block(old, new)
        return new

    def commit(self, new: Block) -> None:
        """Swap the bodies (the old one refers only to itself) and make the
        boundary shardings explicit."""
        rep = self.rep
        old = rep.body.block
        counts = {INPUT_SHARDINGS: len(old.args), OUTPUT_SHARDINGS: len(old.last_op.operands)}
        rep.body.detach_block(old)
        rep.body.add_block(new)
        old.erase(safe_erase=False)
        for name, count in counts.items():
            if name not in rep.attributes:
                rep.attributes[name] = ArrayAttr([ShardingAttr(WHOLE)] * count)


def _is_partitioned(rep: ReplicateOp) -> bool:
    """Whether the body already has local types (a second run of the pass)."""
    n = rep.num_replicas
    block = rep.body.block
    if any(a.type != rep.replicated_inputs[i * n].type for i, a in enumerate(block.args)):
        return True
    term = block.last_op
    return isinstance(term, YieldOp) and any(v.type != rep.outputs[j * n].type for j, v in enumerate(term.values))


@dataclass(frozen=True)
class SpmdPartition(ModulePass):
    """Turn each replicate split over logical devices into the per-core SPMD program.

    Every device ``tpu.replicate`` with ``num_cores_per_replica`` > 1 gets a
    body with local (shard) shapes and ``ccl`` collectives between its cores,
    from the shardings of ``tpu-propagate-sharding``; replicates with one core
    are left alone.  See the module docstring for the rules (XLA's GSPMD
    partitioner, MLIR's ``shard-partition``).  TF: what
    ``TPUStrategy(..., experimental_spmd_xla_partitioning=True)`` asks of XLA
    for a computation whose tensors ``experimental_split_to_logical_devices``
    annotated (the seed ``split_to_logical_devices.txt``).

    Raises (``DiagnosticException``): outside compilation in a split replica,
    a sharding over the wrong number of devices or with uneven tiles, a
    collective other than ``ccl.all_reduce`` in the input, a ``{manual}``
    value that would need resharding.
    """

    name = "tpu-spmd-partition"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        reps = [
            r
            for r in op.walk()
            if isinstance(r, ReplicateOp) and not r.on_host and r.num_cores > 1 and not _is_partitioned(r)
        ]
        if not reps:
            return
        for r in reps:
            refuse_fused(r, self.name)
        used = [int(ch.value.data) for o in op.walk() if isinstance(ch := o.properties.get("channel_id"), IntegerAttr)]
        channels = [max(used, default=0)]
        parts = [_Partitioner(r, channels) for r in reps]
        for p in parts:
            p.precheck()
        bodies = [p.build() for p in parts]  # every diagnostic before any change
        for p, body in zip(parts, bodies):
            p.commit(body)
