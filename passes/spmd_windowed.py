"""``tpu-spmd-partition``'s rules for the windowed ops (``hlo.convolution``,
``hlo.reduce_window``, ``hlo.select_and_scatter``, ``hlo.reverse``), after
GSPMD's ``HandleConvolution`` / ``HandleReduceWindow``
(``xla/service/spmd/convolution_handler.cc``, ``spmd_partitioner.cc``).

Each rule is a function of the partitioner (``passes/spmd_partition.py``'s
``_Partitioner``, passed in as ``P``) that computes the op's result on the
local tiles:

* **spatial split** of a convolution's input and result (or of a windowed
  reduction's operand and result): core ``c``'s result tile needs the input
  window ``[j * tile * stride - pad_low, ... + (tile - 1) * stride +
  dilated_window)``; ``P.window`` assembles it from the core's own tile and
  the boundary rows of its neighbours, one ``ccl.collective_permute`` per
  tile offset moving exactly the rows some core lacks (the halo; strides and
  windows larger than a tile included), and positions outside the input are
  set to the padding value (0, or the reduction's init value) by a
  ``select`` on the global position.  The op then runs on the window with no
  padding on that dimension;
* **batch split** (input batch, result batch) and **output-feature split**
  (kernel output features, result features): local, nothing moves;
* **input-feature split** (input features and kernel input features tiled
  alike): each core convolves its channels and a ``ccl.all_reduce`` over the
  cores holding the different channel tiles sums the partial results; when
  the result is split over those same cores, one ``ccl.reduce_scatter``
  along the split dimension sums them instead and leaves each core its tile
  (GSPMD's partial-sum output), if that moves fewer bytes per core than
  gathering the operands;
* **the kernel gradient's form**: a convolution whose *kernel* operand is
  tiled on a spatial dimension while the result is not (the cotangent of a
  spatially split activation is the kernel operand of the weight gradient):
  every core convolves its input window with its cotangent tile and the
  partial results are summed like an input-feature split;
* ``select_and_scatter`` keeps a split where the windows do not cross tile
  boundaries (window <= stride, tiles of whole windows, no low padding):
  then it is local;
* ``reverse``: the reversed dimensions are made whole, the others stay
  split.

Anything else is made whole on the dimension concerned first (the operand's
tiles gathered), as the other rules of the pass do.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.ir import SSAValue

from xtpu.dialects import ccl, hlo
from xtpu.dialects.hlo_math import ReverseOp
from xtpu.dialects.hlo_window import (
    ConvolutionOp,
    ReduceWindowOp,
    SelectAndScatterOp,
    conv_params,
    dilate,
    window_params,
)


def _mask(P, x: SSAValue, mask: SSAValue, fill: SSAValue) -> SSAValue:
    """``x`` where ``mask`` holds, ``fill`` (a scalar) elsewhere."""
    shape = P.shape_of(x)
    spread = P.emit(hlo.BroadcastInDimOp.make([fill], broadcast_dimensions=(), shape=shape)).results[0]
    return P.emit(hlo.SelectOp.make([mask, x, spread])).results[0]


def _conv_plan(P, op: ConvolutionOp, want):
    """How the convolution computes the result tiles ``want`` (the dims it
    cannot keep tiled made whole): the operands' tiles, the windowed
    spatial dims, the contracted parts (input features, the kernel's
    spatial tiles) and the groups of cores whose partial results sum to one
    tile; None when the operands cannot be laid out for it."""
    lhs_shape, rhs_shape, out_shape = P.shape_of(op.lhs), P.shape_of(op.rhs), P.shape_of(op.result)
    rank, C = len(out_shape), P.C
    nsp = rank - 2
    p = conv_params(rank, **op.params())
    dn = p["dimension_numbers"]
    plain = p["feature_group_count"] == 1 and p["batch_group_count"] == 1
    res = P.view(want, rank)
    keep = set()
    if plain:
        keep |= {d for d in (dn.out[0], dn.out[1]) if res.counts[d] > 1}
    windowed = []
    for i in range(nsp):
        od, ld = dn.out[2 + i], dn.lhs[2 + i]
        T = res.counts[od]
        if T > 1 and p["lhs_dilation"][i] == 1 and lhs_shape[ld] and out_shape[od]:
            if lhs_shape[ld] % T == 0 and out_shape[od] % T == 0:
                keep.add(od)
                windowed.append(i)
    need = P.untiled(want, rank, [d for d in range(rank) if d not in keep])
    res = P.view(need, rank)

    # Contracted parts: input features (with the kernel's input features)
    # and kernel spatial dims tiled while the result's are not.
    parts: list[tuple[str, int]] = []  # ("f", -1) or ("s", i)
    part_counts: list[int] = []
    part_index: list[list[int]] = [[] for _ in range(C)]
    if plain:
        for operand, d in ((op.lhs, dn.lhs[1]), (op.rhs, dn.rhs[1])):
            have = P.view(P.layout(operand), len(P.shape_of(operand)))
            if have.counts[d] > 1:
                parts.append(("f", -1))
                part_counts.append(have.counts[d])
                for c in range(C):
                    part_index[c].append(have.index[c][d])
                break
    rhave = P.view(P.layout(op.rhs), rank)
    for i in range(nsp):
        rd, od, ld = dn.rhs[2 + i], dn.out[2 + i], dn.lhs[2 + i]
        T = rhave.counts[rd]
        if (
            i not in windowed
            and T > 1
            and rhs_shape[rd] % T == 0
            and p["lhs_dilation"][i] == 1
            and res.counts[od] == 1
            and lhs_shape[ld]
            and out_shape[od]
        ):
            parts.append(("s", i))
            part_counts.append(T)
            for c in range(C):
                part_index[c].append(rhave.index[c][rd])
    kappa = [tuple(ix) for ix in part_index]
    groups = P.split_groups(res.index, kappa) if parts else None

    def operand_tiles(use_parts: bool):
        lc, lx = [1] * rank, [[0] * rank for _ in range(C)]
        rc, rx = [1] * rank, [[0] * rank for _ in range(C)]
        if plain:
            lc[dn.lhs[0]], rc[dn.rhs[0]] = res.counts[dn.out[0]], res.counts[dn.out[1]]
            for c in range(C):
                lx[c][dn.lhs[0]], rx[c][dn.rhs[0]] = res.index[c][dn.out[0]], res.index[c][dn.out[1]]
        for i in windowed:
            lc[dn.lhs[2 + i]] = res.counts[dn.out[2 + i]]
            for c in range(C):
                lx[c][dn.lhs[2 + i]] = res.index[c][dn.out[2 + i]]
        if use_parts:
            for k, (kind, i) in enumerate(parts):
                dl, dr = (dn.lhs[1], dn.rhs[1]) if kind == "f" else (dn.lhs[2 + i], dn.rhs[2 + i])
                lc[dl] = rc[dr] = part_counts[k]
                for c in range(C):
                    lx[c][dl] = rx[c][dr] = kappa[c][k]
        return P.from_tiles(lc, [tuple(v) for v in lx]), P.from_tiles(rc, [tuple(v) for v in rx])

    use_parts = groups is not None
    need_l, need_r = operand_tiles(use_parts)
    if use_parts and (need_l is None or need_r is None):
        use_parts, groups = False, None
        need_l, need_r = operand_tiles(False)
    if need_l is None or need_r is None:
        return None
    return {
        "p": p,
        "need": need,
        "res": res,
        "windowed": windowed,
        "parts": parts if use_parts else [],
        "kappa": kappa if parts else None,
        "groups": groups if use_parts else None,
        "need_l": need_l,
        "need_r": need_r,
        "rhave": rhave,
    }


def convolution(P, op: ConvolutionOp, shardings) -> None:
    """GSPMD's HandleConvolution (see the module docstring).  When the input
    features are split and ``want`` splits the result over the cores that
    hold the feature tiles, each core computes its partial result with that
    dimension whole and one ``ccl.reduce_scatter`` sums the partials and
    leaves each core its tile (GSPMD's partial-sum output resharded by a
    reduce-scatter), chosen when it moves fewer bytes per core than
    gathering the operands (``spmd_cost``)."""
    (want,) = shardings
    rank = len(P.shape_of(op.result))
    plan = _conv_plan(P, op, want)
    scatter = None
    kappa = plan["kappa"] if plan is not None else None
    if plan is not None and kappa is not None and plan["groups"] is None:
        cost = P.cost(op.lhs, plan["need_l"]) + P.cost(op.rhs, plan["need_r"])
        for dim, partial, groups in P.scatter_options(want, rank, kappa):
            cand = _conv_plan(P, op, partial)
            if cand is None or cand["groups"] is None or _tiles(P, cand["need"], rank) != _tiles(P, partial, rank):
                continue
            c = P.cost(op.lhs, cand["need_l"]) + P.cost(op.rhs, cand["need_r"])
            c += P.scatter_cost(op.result, partial, len(groups[0]))
            if c < cost:
                cost, plan, scatter = c, cand, (dim, partial, groups)
    if plan is None:
        return P.whole(op, shardings)
    _conv_emit(P, op, plan, scatter, want)


def _tiles(P, sharding, rank):
    v = P.view(sharding, rank)
    return tuple(v.counts), tuple(tuple(i) for i in v.index)


def _conv_emit(P, op: ConvolutionOp, plan, scatter, want) -> None:
    lhs_shape, rhs_shape, out_shape = P.shape_of(op.lhs), P.shape_of(op.rhs), P.shape_of(op.result)
    C = P.C
    p, res, windowed, parts, groups = plan["p"], plan["res"], plan["windowed"], plan["parts"], plan["groups"]
    rhave = plan["rhave"]
    dn = p["dimension_numbers"]
    spatial_parts = [i for kind, i in parts if kind == "s"]
    win_dims = [dn.lhs[2 + i] for i in windowed + spatial_parts]
    src = P.source(op.lhs, plan["need_l"], win_dims)
    x = P.get(op.lhs, src)
    w = P.get(op.rhs, plan["need_r"])
    padding = [list(v) for v in p["padding"]]
    zero = None
    for i in windowed + spatial_parts:
        ld, od = dn.lhs[2 + i], dn.out[2 + i]
        s, rd, lo = p["window_strides"][i], p["rhs_dilation"][i], p["padding"][i][0]
        if i in windowed:
            tile = out_shape[od] // res.counts[od]
            at_c = [res.index[c][od] * tile * s - lo for c in range(C)]
            size = (tile - 1) * s + dilate(rhs_shape[dn.rhs[2 + i]], rd)
        else:  # the kernel's spatial tile j: positions o * s + (j * t + q) * rd - lo
            t = rhs_shape[dn.rhs[2 + i]] // rhave.counts[dn.rhs[2 + i]]
            at_c = [rhave.index[c][dn.rhs[2 + i]] * t * rd - lo for c in range(C)]
            size = (out_shape[od] - 1) * s + (t - 1) * rd + 1
        x = P.window(x, lhs_shape, src, ld, at_c, size)
        if min(at_c) < 0 or max(a + size for a in at_c) > lhs_shape[ld]:  # zeros outside the input
            if zero is None:
                zero = P.emit(hlo.ConstantOp.make([], value=P.zero_of(x))).results[0]
            x = _mask(P, x, P.in_range(P.shape_of(x), ld, at_c, 0, lhs_shape[ld]), zero)
        padding[i] = [0, 0]
    params = dict(p, padding=tuple(tuple(v) for v in padding))
    out = P.new_op(op, ConvolutionOp, [x, w], **params).results[0]
    if groups is not None:
        if op.result.name_hint:
            out.name_hint = op.result.name_hint + "_partial"
        if scatter is not None:  # the partial result (``partial``, computed whole) scattered to ``want``
            P.define(op.result, P.reduce_scatter(out, scatter, "add"), want)
            return
        out = P.emit(
            ccl.AllReduceOp.make(
                [out], replica_groups=P.participants(groups), computation="add", channel_id=P.channel()
            )
        ).results[0]
    P.define(op.result, out, plan["need"])


def _crosses(p, d: int) -> bool:
    """Whether a window reaches across positions along dimension ``d``
    (anything but size 1, stride 1, no dilation, no padding)."""
    return (p["window_dimensions"][d], p["window_strides"][d], p["window_dilations"][d], tuple(p["padding"][d])) != (
        1,
        1,
        1,
        (0, 0),
    )


def reduce_window(P, op: ReduceWindowOp, shardings) -> None:
    (want,) = shardings
    in_shape, out_shape = P.shape_of(op.operand), P.shape_of(op.result)
    rank, C = len(in_shape), P.C
    p = window_params(rank, **op.params())
    kind = op.params()["computation"]
    res = P.view(want, rank)
    windowed = []
    for d in range(rank):
        T = res.counts[d]
        if T > 1 and p["base_dilations"][d] == 1 and in_shape[d] and out_shape[d]:
            if in_shape[d] % T == 0 and out_shape[d] % T == 0:
                windowed.append(d)
    need = P.untiled(want, rank, [d for d in range(rank) if d not in windowed])
    res = P.view(need, rank)
    # A dimension the window does not cross (size 1, stride 1, no dilation or
    # padding) is elementwise: the operand's tile is the result's, read as is.
    crossed = [d for d in windowed if _crosses(p, d)]
    src = P.source(op.operand, need, crossed)
    x = P.get(op.operand, src)
    init = P.get(op.init_value, P.WHOLE)
    padding = [list(v) for v in p["padding"]]
    for d in crossed:
        w, s, wd, lo = p["window_dimensions"][d], p["window_strides"][d], p["window_dilations"][d], p["padding"][d][0]
        tile = out_shape[d] // res.counts[d]
        at_c = [res.index[c][d] * tile * s - lo for c in range(C)]
        size = (tile - 1) * s + dilate(w, wd)
        x = P.window(x, in_shape, src, d, at_c, size)
        if min(at_c) < 0 or max(a + size for a in at_c) > in_shape[d]:  # init outside the operand
            x = _mask(P, x, P.in_range(P.shape_of(x), d, at_c, 0, in_shape[d]), init)
        padding[d] = [0, 0]
    params = dict(p, padding=tuple(tuple(v) for v in padding))
    out = P.new_op(op, ReduceWindowOp, [x, init], computation=kind, **params).results[0]
    P.define(op.result, out, need)


def select_and_scatter(P, op: SelectAndScatterOp, shardings) -> None:
    (want,) = shardings
    in_shape, src_shape = P.shape_of(op.operand), P.shape_of(op.source)
    rank = len(in_shape)
    params = op.params()
    p = window_params(rank, **{k: v for k, v in params.items() if k != "select"}, op=op.name)
    res = P.view(want, rank)
    local = []
    for d in range(rank):
        T = res.counts[d]
        w, s, lo = p["window_dimensions"][d], p["window_strides"][d], p["padding"][d][0]
        if T > 1 and in_shape[d] % T == 0 and src_shape[d] % T == 0:
            if w <= s and lo == 0 and in_shape[d] // T == (src_shape[d] // T) * s:
                local.append(d)
    need = P.untiled(want, rank, [d for d in range(rank) if d not in local])
    x = P.get(op.operand, need)
    src = P.get(op.source, need)
    init = P.get(op.init_value, P.WHOLE)
    out = P.new_op(
        op,
        SelectAndScatterOp,
        [x, src, init],
        select=params["select"],
        window_dimensions=p["window_dimensions"],
        window_strides=p["window_strides"],
        padding=tuple((a, 0 if d in local else b) for d, (a, b) in enumerate(p["padding"])),
    ).results[0]
    P.define(op.result, out, need)


def reverse(P, op: ReverseOp, shardings) -> None:
    (want,) = shardings
    dims = op.params()["dimensions"]
    rank = len(P.shape_of(op.operand))
    need = P.untiled(want, rank, dims)
    out = P.new_op(op, ReverseOp, [P.get(op.operand, need)], dimensions=dims).results[0]
    P.define(op.result, out, need)


RULES: Sequence = (
    (ConvolutionOp, convolution),
    (ReduceWindowOp, reduce_window),
    (SelectAndScatterOp, select_and_scatter),
    (ReverseOp, reverse),
)
