"""``tpu-pad-dynamic-shapes``: padded values made exact on their real sizes.

``replicate(..., maximum_shapes=...)`` traces a computation once for inputs
padded to a bucket shape; each padded input dimension gets its real size
(one ``tensor<i32>`` per replica) through ``hlo.set_dimension_size``
(:mod:`xtpu.dialects.dynamic_shapes`).  This pass is XLA's dynamic padder
(``xla/service/dynamic_dimension_inference.cc`` and ``dynamic_padder.cc``)
for xtpu's ops:

1. *Inference*: the real size of every dimension of every value, forward
   from the ``set_dimension_size`` ops: elementwise ops keep their operands'
   sizes, ``broadcast_in_dim`` / ``transpose`` / ``reshape`` / ``reduce`` /
   ``dot_general`` / ``slice`` / ``pad`` / ``concatenate`` map them to their
   result dimensions, ``hlo.if`` and ``tpu.outside_compilation`` results get
   the sizes their regions yield.
2. *Rewrites* of the ops whose result the padding would change:

   - ``hlo.reduce`` over a padded dimension: the padding is replaced by the
     reduction's ``init_value`` first (``select(iota < size, x, init)``), so
     sum, max, min, argmax (reduce max + reduce min) and mean (sum /
     ``get_dimension_size``) see only real elements; softmax and
     log_softmax are built from these reductions;
   - ``hlo.dot_general`` contracting a padded dimension: both operands get
     zeros in the padding of that dimension;
   - ``hlo.concatenate`` along a padded dimension: the operands are written
     one after the other at their real offsets (``dynamic_update_slice``
     into zeros, XLA's RewriteDynamicConcat); the result's real size is the
     sum;
   - ``hlo.reshape`` that merges a padded dimension with the dimensions
     after it keeps the real elements a prefix (real size times the merged
     sizes); one that merges it with larger dimensions before it first
     moves the real rows together (one ``dynamic_update_slice`` per leading
     index, XLA's RewriteDynamicReshape);
   - their inverses, as gradients meet them: a slice that takes one
     operand of such a concatenation starts at its real offset
     (``dynamic_slice``), and a reshape back to a compacted shape puts each
     row at its padded place again;
   - ``dynamic_slice`` / ``dynamic_update_slice`` windows along a padded
     dimension start inside the real bounds (the start clamped to
     ``real size - window``, as the op clamps it to the static size);
   - ``tpu.cross_replica_sum`` of a padded value: each replica's padding
     becomes zeros and the result's real size is the largest over the
     group (a cross_replica_sum of a ``0/1`` mask), as if every replica's
     value were zero-padded to the largest;
   - ``hlo.get_dimension_size`` becomes the real size (or the static size
     as a constant); ``hlo.set_dimension_size`` is removed.

   - a host-only op that observes a padded value whole (``hlo.print``,
     string formatting, summaries) gets it sliced to its real sizes
     (``hlo.real_dynamic_slice``, host-only too): the outside-compilation
     cluster receives the replica's unpadded value.

   A host cluster's numeric ops are rewritten like the device's, and
   ``replicate`` returns every output sliced to its real sizes (the traced
   program yields ``get_dimension_size`` of each output dimension).

``hlo.while`` carries a padded loop value when its body yields it with the
same real sizes (the sizes are loop invariant, as XLA's padder requires of
a loop without dynamic trip sizes).

An op this pass cannot make exact on a padded operand (a loop whose body
changes a padded value's real size, ``pad`` after the padding, a reshape
that splits a padded dimension, ...) is an error naming the op, its
operand, the dimension and the user's source line, not a silently wrong
result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from xtpu.dialects import autodiff, hlo, hlo_control, tpu
from xtpu.dialects.dynamic_shapes import SIZE_DTYPE, GetDimensionSizeOp, RealDynamicSliceOp, SetDimensionSizeOp
from xtpu.dialects.hlo_indexing import GatherOp, ScatterOp, VariadicReduceOp
from xtpu.dialects.ir_walk import isa, walk_ops
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.passes._common import at

Sizes = dict[int, SSAValue]
"""Real sizes of a value's padded dimensions: dimension -> ``tensor<i32>``."""

#: Ops whose result has the shape of their (non-scalar) operands, elementwise.
_ELEMENTWISE = (
    hlo.ElementwiseBinary,
    hlo.ElementwiseUnary,
    hlo.CompareOp,
    hlo.SelectOp,
    hlo.ConvertOp,
    autodiff.StopGradientOp,
    tpu.ShardingConstraintOp,
)

#: A reshape that compacts a padded dimension unrolls one update per leading index.
MAX_COMPACTION_ROWS = 4096


def _shape(v: SSAValue) -> tuple[int, ...]:
    return TensorSpec.of_type(v.type).shape


class _Padder:
    def __init__(self) -> None:
        self.sizes: dict[SSAValue, Sizes] = {}
        self.anchor: Operation | None = None
        self.filled: dict[Any, SSAValue] = {}
        # real size -> a number it is known to be a multiple of
        self.multiple_of: dict[SSAValue, int] = {}
        # real size of a concatenation along a padded dimension -> its parts
        self.concat_parts: dict[SSAValue, Any] = {}
        # real size of a compacted reshape -> (original shape, dimension, size)
        self.compacted: dict[SSAValue, Any] = {}

    # ---- building ops before the op being rewritten -----------------------
    def emit(self, op_cls: type[PrimitiveOp], operands: list[SSAValue], **params: Any) -> SSAValue:
        op = op_cls.make(operands, **params)
        op.location = self.anchor.location
        self.anchor.parent_block().insert_op_before(op, self.anchor)
        return op.results[0]

    def const(self, value: Any, dtype: str = SIZE_DTYPE) -> SSAValue:
        return self.emit(hlo.ConstantOp, [], value=np.asarray(value, dtype=dtype))

    def size(self, v: SSAValue, d: int) -> SSAValue:
        """The real size of dimension ``d`` of ``v``: its padded size or a constant."""
        s = self.sizes.get(v, {}).get(d)
        return s if s is not None else self.const(_shape(v)[d])

    def binary(self, op_cls: type[PrimitiveOp], a: SSAValue, b: SSAValue) -> SSAValue:
        return self.emit(op_cls, [a, b])

    def mask(self, shape: tuple[int, ...], dims: Sizes) -> SSAValue | None:
        """``i[d] < size[d]`` for every ``d`` in ``dims``, as a bool tensor of ``shape``."""
        out = None
        for d, size in sorted(dims.items()):
            idx = self.emit(hlo.IotaOp, [], iota_dimension=d, shape=shape, dtype=SIZE_DTYPE)
            bound = self.emit(hlo.BroadcastInDimOp, [size], broadcast_dimensions=(), shape=shape)
            m = self.emit(hlo.CompareOp, [idx, bound], comparison_direction="LT")
            out = m if out is None else self.binary(hlo.AndOp, out, m)
        return out

    def fill_padding(self, x: SSAValue, dims: Sizes, fill: SSAValue | None = None) -> SSAValue:
        """``x`` with the padding of ``dims`` replaced by the scalar ``fill``
        (zero by default); built once per value, dimensions and fill in a block."""
        if not dims:
            return x
        key = (x, tuple(sorted((d, id(s)) for d, s in dims.items())), fill, id(self.anchor.parent_block()))
        if key in self.filled:
            return self.filled[key]
        shape = _shape(x)
        m = self.mask(shape, dims)
        f = self.emit(
            hlo.BroadcastInDimOp, [self.zero(x) if fill is None else fill], broadcast_dimensions=(), shape=shape
        )
        out = self.filled[key] = self.emit(hlo.SelectOp, [m, x, f])
        return out

    def zero(self, x: SSAValue) -> SSAValue:
        return self.const(0, TensorSpec.of_type(x.type).dtype)

    # ---- diagnostics ----------------------------------------------------
    def fail(self, op: Operation, why: str) -> DiagnosticException:
        return DiagnosticException(f"'{op.name}' op{at(op)} {why}")

    def padded_operand(self, op: Operation) -> tuple[int, int] | None:
        for i, v in enumerate(op.operands):
            if self.sizes.get(v):
                return i, min(self.sizes[v])
        return None

    def unsupported(self, op: Operation, why: str = "") -> DiagnosticException:
        i, d = self.padded_operand(op)
        return self.fail(
            op,
            f"has operand {i} padded along dimension {d} (a dynamic size: replicate's maximum_shapes or where(condition)); "
            f"tpu-pad-dynamic-shapes cannot make it exact on the real sizes{': ' + why if why else ''}",
        )

    # ---- the walk -------------------------------------------------------
    def run_block(self, block: Block) -> None:
        for op in list(block.ops):
            if isinstance(op, hlo_control.WhileOp):  # the loop values' sizes, in both regions
                for region in op.regions:
                    for a, v in zip(region.blocks[0].args, op.operands):
                        if self.sizes.get(v):
                            self.sizes[a] = self.sizes[v]
            for region in op.regions:
                for b in region.blocks:
                    self.run_block(b)
            self.anchor = op
            self.visit(op)

    def visit(self, op: Operation) -> None:
        if isinstance(op, SetDimensionSizeOp):
            d = op.params()["dimension"]
            self.sizes[op.result] = {**self.sizes.get(op.operand, {}), d: op.size}
            return
        if isinstance(op, GetDimensionSizeOp):
            real = self.size(op.operand, op.params()["dimension"])
            op.result.replace_all_uses_with(real)
            op.parent_block().erase_op(op)
            return
        if not any(self.sizes.get(v) for v in op.operands) and not isinstance(
            op, (hlo_control.IfOp, tpu.OutsideCompilationOp)
        ):
            return
        for cls, handler in _HANDLERS:
            if isinstance(op, cls):
                handler(self, op)
                return
        if isinstance(op, PrimitiveOp) and op.HOST_ONLY:
            self.host_op(op)
            return
        raise self.unsupported(op)

    def host_op(self, op: PrimitiveOp) -> None:
        """A host-only op: elementwise when its results have its padded
        operands' shape (``string_to_number``), else it observes its operands
        whole (print, string_format, summaries) and gets each one sliced to
        its real sizes (``hlo.real_dynamic_slice``): the host sees the
        replica's unpadded value."""
        shapes = {_shape(v) for v in op.operands if self.sizes.get(v)}
        if op.results and all(_shape(r) in shapes for r in op.results):
            self.elementwise(op)
            return
        if any(_shape(r) != () for r in op.results):
            raise self.unsupported(op)
        for i, v in enumerate(op.operands):
            if self.sizes.get(v):
                op.operands[i] = self.unpadded(v)

    def unpadded(self, x: SSAValue) -> SSAValue:
        """``x`` sliced to its real sizes (a host value of the real shape)."""
        rank = len(_shape(x))
        limits = [self.emit(hlo.ReshapeOp, [self.size(x, d)], shape=(1,)) for d in range(rank)]
        limit = limits[0] if rank == 1 else self.emit(hlo.ConcatenateOp, limits, dimension=0)
        return self.emit(RealDynamicSliceOp, [x, self.const(np.zeros(rank)), limit, self.const(np.ones(rank))])

    # ---- inference and rewrites per op ------------------------------------
    def elementwise(self, op: Operation) -> None:
        out_shape = _shape(op.results[0])
        sizes: Sizes = {}
        for v in op.operands:
            if _shape(v) == out_shape:
                for d, s in self.sizes.get(v, {}).items():
                    sizes.setdefault(d, s)
        for r in op.results:
            self.sizes[r] = sizes

    def passthrough(self, op: Operation) -> None:
        """Results are the first operands unchanged (custom_gradient)."""
        for v, r in zip(op.operands, op.results):
            if self.sizes.get(v):
                self.sizes[r] = self.sizes[v]

    def broadcast_in_dim(self, op: hlo.BroadcastInDimOp) -> None:
        p = op.params()
        x = op.operand
        xs, rs = _shape(x), p["shape"]
        self.sizes[op.result] = {
            p["broadcast_dimensions"][d]: s
            for d, s in self.sizes[x].items()
            if xs[d] == rs[p["broadcast_dimensions"][d]]
        }

    def transpose(self, op: hlo.TransposeOp) -> None:
        perm = op.params()["permutation"]
        src = self.sizes[op.operand]
        self.sizes[op.result] = {k: src[d] for k, d in enumerate(perm) if d in src}

    def reduce(self, op: hlo.ReduceOp) -> None:
        dims = op.params()["dimensions"]
        x, init = op.operands
        src = self.sizes[x]
        masked = {d: s for d, s in src.items() if d in dims}
        if masked:
            op.operands[0] = self.fill_padding(x, masked, init)
        kept = [d for d in range(len(_shape(x))) if d not in dims]
        self.sizes[op.result] = {k: src[d] for k, d in enumerate(kept) if d in src}

    def variadic_reduce(self, op: VariadicReduceOp) -> None:
        """argmax / argmin over a padded dimension: the padding's values
        become the init value, which loses to every real element at or
        after it (the padding's indices are the larger ones)."""
        dims = op.params()["dimensions"]
        x, index, init, _ = op.operands
        src = self.sizes.get(x, {})
        masked = {d: s for d, s in src.items() if d in dims}
        if masked:
            op.operands[0] = self.fill_padding(x, masked, init)
        kept = [d for d in range(len(_shape(x))) if d not in dims]
        sizes = {k: src[d] for k, d in enumerate(kept) if d in src}
        for r in op.results:
            self.sizes[r] = sizes

    def dot_general(self, op: hlo.DotGeneralOp) -> None:
        p = op.params()
        lhs, rhs = op.operands
        ls, rs = self.sizes.get(lhs, {}), self.sizes.get(rhs, {})
        lmask, rmask = {}, {}
        for lc, rc in zip(p["lhs_contracting_dimensions"], p["rhs_contracting_dimensions"]):
            s = ls.get(lc) or rs.get(rc)
            if s is not None:
                lmask[lc], rmask[rc] = s, s
        if lmask:
            op.operands[0] = self.fill_padding(lhs, lmask)
            op.operands[1] = self.fill_padding(rhs, rmask)
        lb, rb = p["lhs_batching_dimensions"], p["rhs_batching_dimensions"]
        out: list[SSAValue | None] = [ls.get(a) or rs.get(b) for a, b in zip(lb, rb)]
        out += [ls.get(d) for d in range(len(_shape(lhs))) if d not in lb and d not in p["lhs_contracting_dimensions"]]
        out += [rs.get(d) for d in range(len(_shape(rhs))) if d not in rb and d not in p["rhs_contracting_dimensions"]]
        self.sizes[op.result] = {k: s for k, s in enumerate(out) if s is not None}

    def slice(self, op: hlo.SliceOp) -> None:
        p = op.params()
        src = self.sizes[op.operand]
        out: Sizes = {}
        for d, s in src.items():
            part = self.concat_part(s, d, p["start_indices"][d], p["limit_indices"][d], p["strides"][d])
            if part is not None:
                # One operand of a concatenation along a padded dimension
                # (concatenate's gradient): it starts at its real offset.
                _, static_size, offset, size, _ = part
                starts = [offset if k == d else self.const(b) for k, b in enumerate(p["start_indices"])]
                sizes = [
                    static_size if k == d else (lim - b)
                    for k, (b, lim) in enumerate(zip(p["start_indices"], p["limit_indices"]))
                ]
                if any(st != 1 for st in p["strides"]):
                    raise self.unsupported(op, "a strided slice of a concatenation along a padded dimension")
                new = self.emit(hlo.DynamicSliceOp, [op.operand, *starts], slice_sizes=sizes)
                op.result.replace_all_uses_with(new)
                op.parent_block().erase_op(op)
                others = {k: v for k, v in src.items() if k != d}
                self.sizes[new] = {**others, **({d: size} if part[4] is not None else {})}
                return
            start, limit, stride = p["start_indices"][d], p["limit_indices"][d], p["strides"][d]
            # real size: max(0, ceil((min(limit, size) - start) / stride))
            n = self.binary(hlo.MinimumOp, s, self.const(limit))
            n = self.binary(hlo.SubtractOp, n, self.const(start - (stride - 1)))
            n = self.binary(hlo.DivideOp, n, self.const(stride))
            out[d] = self.binary(hlo.MaximumOp, n, self.const(0))
        self.sizes[op.result] = out

    def pad(self, op: hlo.PadOp) -> None:
        p = op.params()
        src = self.sizes[op.operand]
        out: Sizes = {}
        for d, s in src.items():
            low, high, interior = p["edge_padding_low"][d], p["edge_padding_high"][d], p["interior_padding"][d]
            if high != 0 or interior != 0 or low < 0:
                raise self.fail(
                    op,
                    f"pads dimension {d}, which is padded to its real size (a dynamic size: replicate's maximum_shapes or where(condition)), "
                    f"with high = {high}, interior = {interior}; tpu-pad-dynamic-shapes only supports "
                    "low padding of such a dimension",
                )
            out[d] = self.binary(hlo.AddOp, s, self.const(low)) if low else s
        self.sizes[op.result] = out

    def clamped_start(self, start: SSAValue, size: SSAValue, window: int) -> SSAValue:
        """``max(0, min(start, size - window))``: a window's start clamped
        into the real bounds, as the op clamps it into the static ones."""
        dt = TensorSpec.of_type(start.type).dtype
        real = size if dt == SIZE_DTYPE else self.emit(hlo.ConvertOp, [size], dtype=dt)
        last = self.binary(hlo.SubtractOp, real, self.const(window, dt))
        return self.binary(hlo.MaximumOp, self.binary(hlo.MinimumOp, start, last), self.const(0, dt))

    def dynamic_slice(self, op: hlo.DynamicSliceOp) -> None:
        """A window along a padded dimension starts inside the real bounds
        (StableHLO clamps the start so that the window fits); a window over
        the whole dimension keeps its real size."""
        x, *starts = op.operands
        src, sizes, xs = self.sizes[x], op.params()["slice_sizes"], _shape(x)
        out: Sizes = {}
        for d, s in src.items():
            if sizes[d] == xs[d]:
                out[d] = s
            else:
                op.operands[1 + d] = self.clamped_start(starts[d], s, sizes[d])
        self.sizes[op.result] = out

    def dynamic_update_slice(self, op: hlo.DynamicUpdateSliceOp) -> None:
        if self.sizes.get(op.operands[1]) or any(self.sizes.get(v) for v in op.operands[2:]):
            raise self.unsupported(op, "the update must not be padded")
        x, update, *starts = op.operands
        src, us = self.sizes[x], _shape(update)
        for d, s in src.items():
            if us[d] < _shape(x)[d]:  # the window starts inside the real bounds
                op.operands[2 + d] = self.clamped_start(starts[d], s, us[d])
        self.sizes[op.result] = src

    def concatenate(self, op: hlo.ConcatenateOp) -> None:
        dim = op.params()["dimension"]
        shape = _shape(op.result)
        out: Sizes = {}
        for v in op.operands:
            for d, s in self.sizes.get(v, {}).items():
                if d != dim:
                    out.setdefault(d, s)
        if any(dim in self.sizes.get(v, {}) for v in op.operands):
            # The operands one after the other at their real offsets.
            acc = self.emit(hlo.BroadcastInDimOp, [self.zero(op.result)], broadcast_dimensions=(), shape=shape)
            offset = self.const(0)
            zero = offset
            parts, static = [], 0
            for v in op.operands:
                starts = [offset if d == dim else zero for d in range(len(shape))]
                acc = self.emit(hlo.DynamicUpdateSliceOp, [acc, v, *starts])
                size = self.size(v, dim)
                parts.append((static, _shape(v)[dim], offset, size, self.sizes.get(v, {}).get(dim)))
                static += _shape(v)[dim]
                offset = self.binary(hlo.AddOp, offset, size)
            op.result.replace_all_uses_with(acc)
            op.parent_block().erase_op(op)
            out[dim] = offset
            self.concat_parts[offset] = (dim, parts)
            self.sizes[acc] = out
            return
        self.sizes[op.result] = out

    def reshape(self, op: hlo.ReshapeOp) -> None:
        x = op.operand
        src = self.sizes[x]
        xs, rs = _shape(x), _shape(op.result)
        back = [self.compacted.get(s) for s in src.values()]
        if len(src) == 1 and back[0] is not None and back[0][0] == rs:
            # The inverse of a compacting reshape (its gradient): each row
            # goes back to its padded place.
            _, d, size = back[0]
            op.operands[0] = self.expand(x, rs, d, size)
            self.sizes[op.result] = {d: size}
            return
        groups = _reshape_groups(xs, rs)
        if groups is None:
            raise self.unsupported(op, f"a reshape of {list(xs)} to {list(rs)} has a zero-size dimension")
        out: Sizes = {}
        value = x
        for ins, outs in groups:
            dyn = [d for d in ins if d in src]
            if not dyn:
                continue
            # A padded dimension of static size 1 (real size 0 or 1) keeps
            # the others' real elements a prefix: it is a factor of the count.
            wide = [d for d in dyn if xs[d] != 1]
            if len(wide) > 1:
                raise self.unsupported(op, f"dimensions {wide} are padded and merged into one")
            d = wide[0] if wide else dyn[0]
            factors = [src[e] for e in dyn if e != d]
            minor = int(np.prod([xs[i] for i in ins if i > d], dtype=np.int64))
            major = int(np.prod([xs[i] for i in ins if i < d], dtype=np.int64))
            j0 = next((j for j in outs if rs[j] != 1), outs[0])
            rest = int(np.prod([rs[j] for j in outs if j > j0], dtype=np.int64))
            # Real elements are a prefix of the group (after compaction): the
            # result's leading dimension has real * major * minor / rest rows,
            # a whole number only when the real size is known to be a
            # multiple of what the split needs (a size an earlier reshape
            # merged, as in a reshape's gradient); else it is an error.
            k = self.multiple_of.get(src[d], 1)
            if (k * major * minor) % rest:
                raise self.unsupported(op, f"a reshape of {list(xs)} to {list(rs)} splits padded dimension {d}")
            if major > 1:
                if len(groups) != 1:
                    raise self.unsupported(
                        op, f"padded dimension {d} is merged with dimensions before it in a partial reshape"
                    )
                if major > MAX_COMPACTION_ROWS:
                    raise self.unsupported(op, f"compacting {major} rows exceeds {MAX_COMPACTION_ROWS}")
                value = self.compact(x, d, src[d])
                compacted = (xs, d, src[d])
            real = src[d]
            for f in factors:
                real = self.binary(hlo.MultiplyOp, real, f)
            g = math.gcd(major * minor, rest)
            if major * minor // g != 1:
                real = self.binary(hlo.MultiplyOp, real, self.const(major * minor // g))
            if rest // g != 1:
                real = self.binary(hlo.DivideOp, real, self.const(rest // g))
            if real is not src[d]:
                self.multiple_of[real] = k * major * minor // rest
            if major > 1:
                self.compacted[real] = compacted
            out[j0] = real
        if value is not x:
            op.operands[0] = value
        self.sizes[op.result] = out

    def compact(self, x: SSAValue, d: int, size: SSAValue) -> SSAValue:
        """``x`` (padded along ``d``) flattened with the real elements first:
        each leading index's block written at its real offset."""
        xs = _shape(x)
        lead, block = xs[:d], int(np.prod(xs[d:], dtype=np.int64))
        total = int(np.prod(xs, dtype=np.int64))
        flat = self.emit(hlo.BroadcastInDimOp, [self.zero(x)], broadcast_dimensions=(), shape=(total,))
        row_real = size if block == xs[d] else self.binary(hlo.MultiplyOp, size, self.const(block // xs[d]))
        offset = self.const(0)
        for idx in np.ndindex(*lead):
            start = [*idx] + [0] * (len(xs) - d)
            limit = [i + 1 for i in idx] + list(xs[d:])
            row = self.emit(hlo.SliceOp, [x], start_indices=start, limit_indices=limit, strides=[1] * len(xs))
            row = self.emit(hlo.ReshapeOp, [row], shape=(block,))
            flat = self.emit(hlo.DynamicUpdateSliceOp, [flat, row, offset])
            offset = self.binary(hlo.AddOp, offset, row_real)
        return self.emit(hlo.ReshapeOp, [flat], shape=xs)

    def expand(self, flat: SSAValue, shape: tuple[int, ...], d: int, size: SSAValue) -> SSAValue:
        """The inverse of :meth:`compact`: ``flat``'s real prefix (rows of
        ``size`` along ``d``) laid out again in ``shape``, padded along ``d``."""
        total = int(np.prod(shape, dtype=np.int64))
        if _shape(flat) != (total,):
            flat = self.emit(hlo.ReshapeOp, [flat], shape=(total,))
        lead, block = shape[:d], int(np.prod(shape[d:], dtype=np.int64))
        row_real = size if block == shape[d] else self.binary(hlo.MultiplyOp, size, self.const(block // shape[d]))
        out = self.emit(hlo.BroadcastInDimOp, [self.zero(flat)], broadcast_dimensions=(), shape=shape)
        offset, zero = self.const(0), self.const(0)
        for idx in np.ndindex(*lead):
            row = self.emit(hlo.DynamicSliceOp, [flat, offset], slice_sizes=(block,))
            row = self.emit(hlo.ReshapeOp, [row], shape=(1,) * len(lead) + tuple(shape[d:]))
            starts = [self.const(i) for i in idx] + [zero] * (len(shape) - d)
            out = self.emit(hlo.DynamicUpdateSliceOp, [out, row, *starts])
            offset = self.binary(hlo.AddOp, offset, row_real)
        return out

    def concat_part(self, size: SSAValue, d: int, start: int, limit: int, stride: int) -> Any:
        """The operand of a concatenation whose static range along ``d`` a
        slice takes, when ``size`` is that concatenation's real size."""
        entry = self.concat_parts.get(size)
        if entry is None or entry[0] != d:
            return None
        return next((p for p in entry[1] if p[0] == start and p[0] + p[1] == limit), None)

    def cross_replica_sum(self, op: tpu.CrossReplicaSumOp) -> None:
        x = op.operand
        src = self.sizes[x]
        op.operands[0] = self.fill_padding(x, src)
        groups = op.params()["group_assignment"]
        out: Sizes = {}
        for d, s in src.items():
            # The largest real size in the group: count the replicas whose
            # value reaches each index, then count the indices reached.
            n = _shape(x)[d]
            m = self.mask((n,), {0: s})
            m = self.emit(hlo.ConvertOp, [m], dtype=SIZE_DTYPE)
            counts = self.emit(tpu.CrossReplicaSumOp, [m], group_assignment=groups)
            reached = self.emit(hlo.CompareOp, [counts, self.const(np.zeros(n))], comparison_direction="GT")
            reached = self.emit(hlo.ConvertOp, [reached], dtype=SIZE_DTYPE)
            out[d] = self.emit(hlo.ReduceOp, [reached, self.const(0)], computation="add", dimensions=(0,))
        self.sizes[op.result] = out

    def region_results(self, op: Operation) -> None:
        """``hlo.if`` / ``tpu.outside_compilation``: a result is padded where
        every region yields the same real size."""
        yields = [r.blocks[0].last_op for r in op.regions]
        for k, res in enumerate(op.results):
            per = [self.sizes.get(y.operands[k], {}) for y in yields]
            dims = set().union(*per)
            out: Sizes = {}
            for d in dims:
                ss = {id(p.get(d)) for p in per}
                if len(ss) != 1:
                    raise self.fail(
                        op,
                        f"result {k} is padded along dimension {d} with a different real size in "
                        "each region; tpu-pad-dynamic-shapes needs one real size",
                    )
                out[d] = per[0][d]
            if out:
                self.sizes[res] = out
        if isinstance(op, hlo_control.IfOp) and self.sizes.get(op.pred):
            raise self.unsupported(op)

    def while_loop(self, op: hlo_control.WhileOp) -> None:
        """A padded loop value keeps its real size: the body must yield it
        with the same real sizes (elementwise updates, reductions into
        other values); its result has them."""
        body_yield = op.body.blocks[0].last_op
        for k, (v, y, r) in enumerate(zip(op.operands, body_yield.operands, op.results)):
            want, got = self.sizes.get(v, {}), self.sizes.get(y, {})
            if {d: id(x) for d, x in want.items()} != {d: id(x) for d, x in got.items()}:
                raise self.fail(
                    op,
                    f"carries loop value {k} padded along dimension(s) {sorted(want)} (a dynamic size: "
                    f"replicate's maximum_shapes or where(condition)), but its body yields it with {'other real sizes' if got else 'no real sizes'}; "
                    "tpu-pad-dynamic-shapes needs a loop to keep each padded value's real size",
                )
            if want:
                self.sizes[r] = want

    def gather(self, op: GatherOp) -> None:
        """A gather of rows whose indices are padded (``gather_nd(x,
        where(c))``): the result's batch dimensions take the indices' real
        sizes.  A padded operand, or a padded index vector, is refused."""
        p = op.params()
        if self.sizes.get(op.operand):
            raise self.unsupported(op, "the gathered operand itself is padded")
        src = self.sizes[op.start_indices]
        ivd = p["index_vector_dim"]
        if ivd in src:
            raise self.unsupported(op, "the index vector dimension is padded")
        batch_in = [d for d in range(len(_shape(op.start_indices))) if d != ivd]
        batch_out = [d for d in range(len(_shape(op.result))) if d not in p["offset_dims"]]
        self.sizes[op.result] = {o: src[i] for o, i in zip(batch_out, batch_in) if i in src}

    def scatter(self, op: ScatterOp) -> None:
        """A scatter whose indices are padded (a gather's gradient): the
        padding's index rows become -1, out of range, so their updates are
        dropped (StableHLO's scatter skips them).  A padded input is refused."""
        p = op.params()
        if self.sizes.get(op.input):
            raise self.unsupported(op, "the scattered-into input itself is padded")
        src = self.sizes.get(op.scatter_indices, {})
        if p["index_vector_dim"] in src:
            raise self.unsupported(op, "the index vector dimension is padded")
        if src:
            minus_one = self.const(-1, TensorSpec.of_type(op.scatter_indices.type).dtype)
            op.operands[1] = self.fill_padding(op.scatter_indices, src, minus_one)

    def terminator(self, op: Operation) -> None:
        pass

    def unsupported_op(self, op: Operation) -> None:
        raise self.unsupported(op)


def _reshape_groups(xs: tuple[int, ...], rs: tuple[int, ...]) -> list[tuple[list[int], list[int]]] | None:
    """Operand and result dimensions that a row-major reshape maps onto each
    other, as groups of equal element counts (trailing size-1 dimensions
    join the last group); None with a zero-size dimension."""
    if 0 in xs or 0 in rs:
        return None
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(xs) and j < len(rs):
        ins, outs = [i], [j]
        pi, pj = xs[i], rs[j]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                pi *= xs[i]
                ins.append(i)
                i += 1
            else:
                pj *= rs[j]
                outs.append(j)
                j += 1
        groups.append((ins, outs))
    if not groups:
        return [(list(range(len(xs))), list(range(len(rs))))]
    groups[-1][0].extend(range(i, len(xs)))
    groups[-1][1].extend(range(j, len(rs)))
    return groups


_HANDLERS: list[tuple[type, Any]] = [
    (_ELEMENTWISE, _Padder.elementwise),
    (autodiff.CustomGradientOp, _Padder.passthrough),
    (hlo.BroadcastInDimOp, _Padder.broadcast_in_dim),
    (hlo.TransposeOp, _Padder.transpose),
    (hlo.ReduceOp, _Padder.reduce),
    (VariadicReduceOp, _Padder.variadic_reduce),
    (hlo.DotGeneralOp, _Padder.dot_general),
    (GatherOp, _Padder.gather),
    (ScatterOp, _Padder.scatter),
    (hlo.SliceOp, _Padder.slice),
    (hlo.PadOp, _Padder.pad),
    (hlo.DynamicSliceOp, _Padder.dynamic_slice),
    (hlo.DynamicUpdateSliceOp, _Padder.dynamic_update_slice),
    (hlo.ConcatenateOp, _Padder.concatenate),
    (hlo.ReshapeOp, _Padder.reshape),
    (tpu.CrossReplicaSumOp, _Padder.cross_replica_sum),
    ((hlo_control.IfOp, tpu.OutsideCompilationOp), _Padder.region_results),
    (hlo_control.WhileOp, _Padder.while_loop),
    ((tpu.YieldOp, hlo_control.ReturnOp), _Padder.terminator),
]


@dataclass(frozen=True)
class PadDynamicShapes(ModulePass):
    """Make every op exact on the real sizes of values padded by TF's
    ``tpu.replicate(maximum_shapes=...)`` (XLA's dynamic padder): sizes are
    inferred from ``hlo.set_dimension_size``; reductions and contractions
    over a padded dimension mask the padding, concat and reshape across one
    move the real elements together, cross_replica_sum zeroes each
    replica's padding; ``hlo.get_dimension_size`` becomes the real size.
    An op it cannot make exact is an error naming the op, operand and
    dimension."""

    name = "tpu-pad-dynamic-shapes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sets = [o for o in walk_ops(op) if isa(o, (SetDimensionSizeOp, GetDimensionSizeOp))]
        if not sets:
            return
        padder = _Padder()
        padder.run_block(op.body.blocks[0])
        for o in sets:
            if isinstance(o, SetDimensionSizeOp):
                o.result.replace_all_uses_with(o.operand)
                o.parent_block().erase_op(o)
