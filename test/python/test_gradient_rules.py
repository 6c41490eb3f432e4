"""Every op's gradient rule (``PrimitiveOp.vjp``) against finite differences.

The registry check: each op of the registered dialects is exactly one of
``STRUCTURAL_GRADIENT`` (the gradient engine differentiates it through its
regions), ``NOT_DIFFERENTIABLE``, or has a rule; an op added with none of
them fails :func:`test_every_op_declares_its_gradient`, and a rule without a
case in the tables below fails :func:`test_every_rule_has_cases`.

The numerical check, per case: random float64 inputs, a random cotangent per
result, and for each float input a few random directions ``d``; the central
difference ``(L(x + eps d) - L(x - eps d)) / 2 eps`` of
``L = sum(ct * f(x))`` must equal ``sum(vjp(ct) * d)``.  Inputs avoid kinks
(positive for log/sqrt/pow, distinct for max/min, away from 0 for abs).
Non-float inputs must get ``None``; float ones a cotangent of exactly their
shape and dtype.  The params are those ``op.params()`` gives for the op built
on SSA values of the inputs' types (result params such as ``shape`` and
``dtype`` included).

Each case also runs the rule on traced tensors inside ``xtpu.replicate``
(one replica): the IR it emits is printed, parsed back and verified, and the
compiled program must give the eager result.  The ``ccl`` ops and
``tpu.cross_replica_sum`` have no eager meaning beyond one replica, so their
cases run forward and rule through ``xtpu.replicate`` over 2 and 4 replicas.
"""

from __future__ import annotations

import dataclasses
import itertools
import zlib
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block
from xdsl.parser import Parser

import xtpu
from xtpu.core.tracing import bind
from xtpu.dialects import DIALECTS, ccl, hlo, make_context, tpu
from xtpu.dialects import hlo_window as W
from xtpu.dialects.dynamic_shapes import SetDimensionSizeOp
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.sharding import ShardingAttr
from xtpu.dialects.tensor_spec import TensorSpec, dtype_of_numpy

EPS = 1e-6
RTOL = 1e-6
DIRECTIONS = 2

ALL_OPS = sorted({op for d in DIALECTS for op in d.operations}, key=lambda c: c.name)


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """One application of ``op``: ``inputs(rng)`` gives the operands."""

    op: type
    inputs: Callable[[np.random.Generator], list]
    params: dict = dataclasses.field(default_factory=dict)
    id: str = ""
    traced: bool = True  # also run the rule inside xtpu.replicate
    eps: float = EPS
    rtol: float = RTOL

    def __str__(self) -> str:
        return f"{self.op.name}[{self.id}]"


def f64(*shape):
    return lambda rng: rng.standard_normal(shape)


def positive(*shape):
    return lambda rng: rng.uniform(0.5, 2.0, shape)


def nonzero(*shape):
    return lambda rng: rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 2.0, shape)


def distinct(*shape):
    """Values at least 0.05 apart (no ties for max/min)."""
    n = int(np.prod(shape, dtype=np.int64))
    return lambda rng: (rng.permutation(n) * 0.1 + rng.uniform(0.0, 0.05, n) - n * 0.05).reshape(shape)


def ins(*makers):
    """``inputs`` from one maker per operand (a callable or a fixed value)."""
    return lambda rng: [m(rng) if callable(m) else np.asarray(m) for m in makers]


def apart(shape):
    """Two inputs of ``shape`` that differ everywhere by at least 0.1."""

    def make(rng):
        x = rng.standard_normal(shape)
        return [x, x + rng.choice([-1.0, 1.0], shape) * rng.uniform(0.1, 1.0, shape)]

    return make


def with_zeros(shape, where):
    def make(rng):
        x = rng.standard_normal(shape)
        for idx in where:
            x[idx] = 0.0
        return x

    return make


SHAPES = [(), (3,), (2, 3, 4)]


def _elementwise_cases():
    out = []
    for shape in SHAPES:
        tag = "x".join(map(str, shape)) or "scalar"
        out += [
            Case(hlo.AddOp, ins(f64(*shape), f64(*shape)), id=tag),
            Case(hlo.SubtractOp, ins(f64(*shape), f64(*shape)), id=tag),
            Case(hlo.MultiplyOp, ins(f64(*shape), f64(*shape)), id=tag),
            Case(hlo.DivideOp, ins(f64(*shape), nonzero(*shape)), id=tag),
            Case(hlo.PowerOp, ins(positive(*shape), f64(*shape)), id=tag),
            Case(hlo.MaximumOp, apart(shape), id=tag),
            Case(hlo.MinimumOp, apart(shape), id=tag),
            Case(hlo.NegateOp, ins(f64(*shape)), id=tag),
            Case(hlo.AbsOp, ins(nonzero(*shape)), id=tag),
            Case(hlo.ExpOp, ins(f64(*shape)), id=tag),
            Case(hlo.LogOp, ins(positive(*shape)), id=tag),
            Case(hlo.SqrtOp, ins(positive(*shape)), id=tag),
            Case(hlo.TanhOp, ins(f64(*shape)), id=tag),
            Case(hlo.LogisticOp, ins(f64(*shape)), id=tag),
        ]
    ints = lambda dt: lambda rng: rng.integers(1, 5, (2, 3)).astype(dt)  # noqa: E731
    out += [
        Case(hlo.AddOp, ins(ints("int32"), ints("int32")), id="int32"),
        Case(hlo.DivideOp, ins(ints("int64"), ints("int64")), id="int64"),
        Case(hlo.MultiplyOp, ins(np.array([True, False]), np.array([True, True])), id="bool"),
        Case(hlo.MaximumOp, ins(ints("int32"), ints("int32")), id="int32"),
        Case(hlo.PowerOp, ins(ints("int32"), ints("int32")), id="int32"),
        Case(hlo.NegateOp, ins(ints("int32")), id="int32"),
        Case(hlo.AbsOp, ins(ints("int64")), id="int64"),
        Case(hlo.PowerOp, ins(np.array([0.0, 1.5]), np.array([2.0, 3.0])), id="x=0"),
        Case(
            hlo.AddOp,
            ins(
                lambda r: r.standard_normal((2, 3)).astype(np.float32),
                lambda r: r.standard_normal((2, 3)).astype(np.float32),
            ),
            id="float32",
            eps=1e-2,
            rtol=1e-4,
        ),
    ]
    return out


def _select_convert_cases():
    pred = lambda rng: rng.integers(0, 2, (2, 3)).astype(bool)  # noqa: E731
    f32 = lambda rng: rng.standard_normal((2, 3)).astype(np.float32)  # noqa: E731
    return [
        Case(hlo.SelectOp, ins(pred, f64(2, 3), f64(2, 3)), id="tensor-pred"),
        Case(hlo.SelectOp, ins(np.array(True), f64(2, 3), f64(2, 3)), id="scalar-pred-true"),
        Case(hlo.SelectOp, ins(np.array(False), f64(), f64()), id="scalar-pred-false"),
        Case(hlo.SelectOp, ins(pred, np.ones((2, 3), np.int32), np.zeros((2, 3), np.int32)), id="int"),
        Case(hlo.ConvertOp, ins(f64(2, 3)), {"dtype": "float64"}, id="f64-f64"),
        Case(hlo.ConvertOp, ins(f32), {"dtype": "float64"}, id="f32-f64", eps=1e-2, rtol=1e-4),
        Case(hlo.ConvertOp, ins(f64(2, 3)), {"dtype": "float32"}, id="f64-f32", eps=1e-2, rtol=1e-4),
        Case(hlo.ConvertOp, ins(np.arange(6, dtype=np.int32)), {"dtype": "float64"}, id="i32-f64"),
        Case(hlo.ConvertOp, ins(f64(4)), {"dtype": "int32"}, id="f64-i32"),
        Case(hlo.ConvertOp, ins(f64(4)), {"dtype": "bool"}, id="f64-bool"),
    ]


def _bcast(operand_shape, dims, shape, tag):
    return Case(hlo.BroadcastInDimOp, ins(f64(*operand_shape)), {"broadcast_dimensions": dims, "shape": shape}, id=tag)


def _dot(lhs, rhs, lb, rb, lc, rc, tag):
    return Case(
        hlo.DotGeneralOp,
        ins(f64(*lhs), f64(*rhs)),
        {
            "lhs_batching_dimensions": lb,
            "rhs_batching_dimensions": rb,
            "lhs_contracting_dimensions": lc,
            "rhs_contracting_dimensions": rc,
        },
        id=tag,
    )


def _reduce(kind, x, dims, init, tag):
    return Case(hlo.ReduceOp, ins(x, np.float64(init)), {"computation": kind, "dimensions": dims}, id=tag)


def _shape_cases():
    return [
        _bcast((), (), (2, 3), "scalar"),
        _bcast((3,), (1,), (2, 3), "new-leading-dim"),
        _bcast((3, 1), (0, 2), (3, 4, 5), "size-1-expands"),
        _bcast((2, 3), (2, 0), (3, 4, 2), "permuted"),
        _bcast((2, 1, 3), (2, 1, 0), (3, 4, 2), "permuted-and-expanded"),
        _bcast((1, 3), (1, 0), (3, 5), "permuted-size-1"),
        _bcast((1, 1), (0, 1), (1, 1), "size-1-kept"),
        _bcast((2, 3), (0, 1), (2, 3), "identity"),
        Case(
            hlo.BroadcastInDimOp,
            ins(np.arange(3, dtype=np.int32)),
            {"broadcast_dimensions": (0,), "shape": (3, 2)},
            id="int",
        ),
        Case(hlo.ReshapeOp, ins(f64(2, 3, 4)), {"shape": (4, 6)}, id="merge"),
        Case(hlo.ReshapeOp, ins(f64()), {"shape": (1, 1)}, id="scalar"),
        Case(hlo.ReshapeOp, ins(f64(6)), {"shape": (2, 1, 3)}, id="split"),
        Case(hlo.TransposeOp, ins(f64(2, 3, 4)), {"permutation": (2, 0, 1)}, id="rank3"),
        Case(hlo.TransposeOp, ins(f64(2, 3)), {"permutation": (1, 0)}, id="rank2"),
        Case(hlo.TransposeOp, ins(f64(3)), {"permutation": (0,)}, id="rank1"),
        _dot((2, 3), (3, 4), (), (), (1,), (0,), "matmul"),
        _dot((3, 2), (3, 4), (), (), (0,), (0,), "lhs-transposed"),
        _dot((2, 3), (4, 3), (), (), (1,), (1,), "rhs-transposed"),
        _dot((3, 2), (4, 3), (), (), (0,), (1,), "both-transposed"),
        _dot((3,), (3,), (), (), (0,), (0,), "vector-dot"),
        _dot((2,), (3,), (), (), (), (), "outer"),
        _dot((5, 2, 3), (5, 3, 4), (0,), (0,), (2,), (1,), "batched-matmul"),
        _dot((2, 5, 3), (3, 4, 5), (1,), (2,), (2,), (0,), "batch-in-odd-places"),
        _dot((2, 3, 4), (4, 3, 5), (), (), (1, 2), (1, 0), "two-crossed-contractions"),
        _dot((2, 3, 4), (3, 2, 4, 5), (0, 1), (1, 0), (2,), (2,), "two-swapped-batch-dims"),
        Case(
            hlo.DotGeneralOp,
            ins(np.ones((2, 3), np.int32), np.ones((3, 2), np.int32)),
            {
                "lhs_batching_dimensions": (),
                "rhs_batching_dimensions": (),
                "lhs_contracting_dimensions": (1,),
                "rhs_contracting_dimensions": (0,),
            },
            id="int",
        ),
    ]


def _reduce_cases():
    out = []
    for dims in [(), (0,), (1, 2), (0, 2), (0, 1, 2)]:
        tag = "dims" + "".join(map(str, dims))
        out += [
            _reduce("add", f64(2, 3, 4), dims, 0.5, f"add-{tag}"),
            _reduce("max", distinct(2, 3, 4), dims, -np.inf, f"max-{tag}"),
            _reduce("min", distinct(2, 3, 4), dims, np.inf, f"min-{tag}"),
            _reduce("mul", f64(2, 3, 4), dims, 1.5, f"mul-{tag}"),
        ]
    out += [
        _reduce("add", f64(), (), 0.0, "add-scalar"),
        _reduce("max", distinct(3, 4), (1,), 10.0, "max-init-wins"),
        _reduce("max", distinct(3, 4), (1,), 0.0, "max-init-wins-some"),
        _reduce("min", distinct(3, 4), (0,), -10.0, "min-init-wins"),
        _reduce("mul", with_zeros((3, 4, 2), [(0, 1, 0)]), (1,), 1.0, "mul-one-zero"),
        _reduce("mul", with_zeros((3, 4, 2), [(1, 2, 1), (1, 3, 1), (2, 0, 0)]), (1,), 2.0, "mul-two-zeros"),
        _reduce("mul", with_zeros((3, 4), [(0, 0), (2, 3)]), (0, 1), 1.0, "mul-all-two-zeros"),
        Case(
            hlo.ReduceOp,
            ins(np.arange(6, dtype=np.int32).reshape(2, 3), np.int32(0)),
            {"computation": "add", "dimensions": (1,)},
            id="int",
        ),
        Case(
            hlo.ReduceOp,
            ins(np.ones((2, 3), bool), np.bool_(True)),
            {"computation": "and", "dimensions": (1,)},
            id="bool-and",
        ),
    ]
    return out


def _slicing_cases():
    def slice_case(shape, start, limit, strides, tag):
        return Case(
            hlo.SliceOp, ins(f64(*shape)), {"start_indices": start, "limit_indices": limit, "strides": strides}, id=tag
        )

    def pad_case(shape, low, high, interior, tag):
        return Case(
            hlo.PadOp,
            ins(f64(*shape), f64()),
            {"edge_padding_low": low, "edge_padding_high": high, "interior_padding": interior},
            id=tag,
        )

    def dyn(shape, starts, sizes, tag, dt=np.int32):
        return Case(hlo.DynamicSliceOp, ins(f64(*shape), *[dt(s) for s in starts]), {"slice_sizes": sizes}, id=tag)

    def dus(shape, update, starts, tag, dt=np.int32):
        return Case(hlo.DynamicUpdateSliceOp, ins(f64(*shape), f64(*update), *[dt(s) for s in starts]), id=tag)

    def concat(shapes, dim, tag):
        return Case(hlo.ConcatenateOp, ins(*[f64(*s) for s in shapes]), {"dimension": dim}, id=tag)

    return [
        slice_case((5, 6), (1, 0), (4, 6), (1, 1), "contiguous"),
        slice_case((5, 6), (1, 0), (5, 6), (2, 4), "strided"),
        slice_case((5, 6, 7), (1, 0, 2), (4, 6, 7), (2, 1, 3), "rank3-strided"),
        slice_case((4,), (2,), (2,), (1,), "empty"),
        slice_case((), (), (), (), "scalar"),
        Case(
            hlo.SliceOp,
            ins(np.arange(5, dtype=np.int64)),
            {"start_indices": (1,), "limit_indices": (4,), "strides": (2,)},
            id="int",
        ),
        pad_case((2, 3), (1, 0), (0, 2), (0, 0), "edges"),
        pad_case((2, 3), (0, 1), (1, 0), (1, 2), "interior"),
        pad_case((2, 3, 2), (1, 0, 2), (0, 1, 0), (2, 0, 1), "rank3"),
        pad_case((4, 5), (-1, 2), (1, -2), (1, 0), "negative-edges"),
        pad_case((4, 5), (-2, -1), (-1, 0), (0, 1), "crop-only"),
        pad_case((0, 3), (1, 0), (1, 0), (2, 0), "empty-dim"),
        pad_case((), (), (), (), "scalar"),
        Case(
            hlo.PadOp,
            ins(np.arange(3, dtype=np.int32), np.int32(7)),
            {"edge_padding_low": (1,), "edge_padding_high": (1,), "interior_padding": (1,)},
            id="int",
        ),
        dyn((5, 6), (1, 2), (2, 3), "inside"),
        dyn((5, 6), (4, -1), (3, 3), "clamped", np.int64),
        dyn((2, 3, 4), (0, 1, 1), (2, 1, 3), "rank3"),
        dyn((), (), (), "scalar"),
        Case(hlo.DynamicSliceOp, ins(np.arange(6, dtype=np.int32), np.int32(2)), {"slice_sizes": (3,)}, id="int"),
        dus((5, 6), (2, 3), (1, 2), "inside"),
        dus((5, 6), (2, 3), (9, -5), "clamped", np.int64),
        dus((2, 3, 4), (1, 3, 2), (1, 0, 1), "rank3"),
        dus((2,), (0,), (1,), "empty-update"),
        Case(hlo.DynamicUpdateSliceOp, ins(np.zeros(4, np.int32), np.ones(2, np.int32), np.int32(1)), id="int"),
        concat([(1, 3, 2), (2, 3, 2), (3, 3, 2)], 0, "dim0"),
        concat([(2, 1, 2), (2, 4, 2)], 1, "dim1"),
        concat([(2, 3, 1), (2, 3, 2), (2, 3, 1)], 2, "dim2"),
        concat([(3,)], 0, "single"),
        Case(hlo.ConcatenateOp, ins(np.ones(2, np.int32), np.zeros(3, np.int32)), {"dimension": 0}, id="int"),
    ]


def _tpu_cases():
    return [
        Case(tpu.CrossReplicaSumOp, ins(f64(2, 3)), {}, id="one-replica"),
        Case(tpu.CrossReplicaSumOp, ins(f64(2, 3)), {"group_assignment": ((0,),)}, id="one-replica-groups"),
        Case(tpu.CrossReplicaSumOp, ins(np.ones(3, np.int32)), {}, id="int"),
        Case(tpu.ShardingConstraintOp, ins(f64(4, 2)), {"sharding": ShardingAttr("{replicated}")}, id="replicated"),
        # Real size = static size: tpu-pad-dynamic-shapes has nothing to mask
        # (padded values: test_dynamic_shapes.py's gradient tests).
        Case(SetDimensionSizeOp, ins(f64(4, 3), np.int32(4)), {"dimension": 0}, id="full-size"),
        Case(
            tpu.ShardingConstraintOp,
            ins(f64(4, 2)),
            {"sharding": ShardingAttr("{devices=[2,1]0,1}")},
            id="tiled",
            traced=False,
        ),  # one core: traced in test_sharding_constraint_rule_over_2_cores
    ]


def _math_extra_cases():
    """The ops of dialects/hlo_math.py (issue 26)."""
    from xtpu.dialects import hlo_math as hm

    out = []
    for shape in [(), (2, 3, 4)]:
        tag = "x".join(map(str, shape)) or "scalar"
        out += [
            Case(hm.SignOp, ins(nonzero(*shape)), id=tag),
            Case(hm.RsqrtOp, ins(positive(*shape)), id=tag),
            Case(hm.LogPlusOneOp, ins(positive(*shape)), id=tag),
            Case(hm.SineOp, ins(f64(*shape)), id=tag),
            Case(hm.CosineOp, ins(f64(*shape)), id=tag),
            Case(hm.ErfOp, ins(f64(*shape)), id=tag),
        ]
    out += [
        Case(hm.SignOp, ins(lambda rng: rng.integers(-3, 4, 5).astype(np.int32)), id="int32"),
        Case(hm.ReverseOp, ins(f64(2, 3, 4)), {"dimensions": (0, 2)}, id="dims-0-2"),
        Case(hm.ReverseOp, ins(f64(3)), {"dimensions": ()}, id="no-dims"),
        Case(hm.ReverseOp, ins(lambda rng: rng.integers(0, 5, 4).astype(np.int64)), {"dimensions": (0,)}, id="int64"),
    ]
    return out


def _linalg_cases():
    """hlo.svd (dialects/hlo_linalg.py): singular values alone (the rule
    takes u and v from a second svd) and with u and v (TF's _SvdGrad, wide,
    tall, square, batched); random Gaussian matrices have distinct singular
    values, and LAPACK's signs do not flip within the step."""
    from xtpu.dialects.hlo_linalg import SvdOp

    return [
        Case(SvdOp, ins(f64(3, 5)), {"compute_uv": False}, id="values-wide"),
        Case(SvdOp, ins(f64(2, 4, 3)), {"compute_uv": False}, id="values-batched-tall"),
        Case(SvdOp, ins(f64(3, 3)), {"compute_uv": True}, id="uv-square"),
        Case(SvdOp, ins(f64(3, 5)), {"compute_uv": True}, id="uv-wide"),
        Case(SvdOp, ins(f64(2, 5, 3)), {"compute_uv": True}, id="uv-batched-tall", rtol=1e-5),
    ]


def _indexing_cases():
    """hlo.gather / scatter / sort / variadic_reduce (dialects/hlo_indexing.py)."""
    from xtpu.dialects import hlo_indexing as ix

    rows = {"offset_dims": (1,), "collapsed_slice_dims": (0,), "start_index_map": (0,), "index_vector_dim": 1}
    ids = np.array([3, 0, 3, -2, 9], np.int32)  # repeated, and clamped below and above
    scatter_rows = {
        "update_window_dims": (1,),
        "inserted_window_dims": (0,),
        "scatter_dims_to_operand_dims": (0,),
        "index_vector_dim": 1,
    }
    batching = {
        "offset_dims": (2,),
        "collapsed_slice_dims": (1,),
        "operand_batching_dims": (0,),
        "start_indices_batching_dims": (0,),
        "start_index_map": (1,),
        "index_vector_dim": 2,
        "slice_sizes": (1, 1, 3),
    }
    iota = np.broadcast_to(np.arange(4), (3, 4)).copy()
    return [
        Case(ix.GatherOp, ins(f64(6, 4), ids), {**rows, "slice_sizes": (1, 4)}, id="rows"),
        Case(ix.GatherOp, ins(f64(6, 4), ids), {**rows, "slice_sizes": (1, 2)}, id="partial-rows"),
        Case(
            ix.GatherOp,
            ins(f64(6, 4), ids[:, None]),
            {"offset_dims": (1, 2), "start_index_map": (0,), "index_vector_dim": 1, "slice_sizes": (2, 3)},
            id="window",
        ),
        Case(ix.GatherOp, ins(f64(2, 5, 3), np.array([[4, 0, 4], [1, 7, 2]])), batching, id="batching"),
        Case(ix.GatherOp, ins(np.arange(12).reshape(6, 2), ids), {**rows, "slice_sizes": (1, 2)}, id="int"),
        Case(ix.ScatterOp, ins(f64(6, 4), ids, f64(5, 4)), {**scatter_rows, "computation": "add"}, id="add"),
        Case(
            ix.ScatterOp,
            ins(f64(6, 4), np.array([3, 0, 7, 5]), f64(4, 4)),
            {**scatter_rows, "computation": "replace"},
            id="replace",
        ),
        Case(
            ix.ScatterOp,
            ins(distinct(6, 4), np.array([3, 0, 3, 5]), distinct(4, 4)),
            {**scatter_rows, "computation": "max"},
            id="max",
        ),
        Case(
            ix.ScatterOp,
            ins(distinct(6, 4), np.array([3, 0, 3, -1]), distinct(4, 4)),
            {**scatter_rows, "computation": "min"},
            id="min",
        ),
        Case(
            ix.ScatterOp,
            ins(f64(6, 4), np.array([3, 0, 3, 3, 9]), with_zeros((5, 4), [(0, 1), (2, 1), (3, 2), (1, 0)])),
            {**scatter_rows, "computation": "mul"},
            id="mul-with-zeros",
            traced=False,  # exact at zeros to first order only (as TF's rule): no second-order case
        ),
        Case(ix.ScatterOp, ins(f64(6, 4), ids, nonzero(5, 4)), {**scatter_rows, "computation": "mul"}, id="mul"),
        Case(ix.SortOp, ins(distinct(3, 5)), {"dimension": 1, "comparison_directions": ("GT",)}, id="one-key"),
        Case(
            ix.SortOp,
            ins(np.array([[1, 0, 1, 0, 2]] * 3), distinct(3, 5), f64(3, 5)),
            {"dimension": 1, "comparison_directions": ("LT", "GT")},
            id="two-keys-payload",
        ),
        Case(
            ix.VariadicReduceOp,
            ins(distinct(3, 4), iota, np.float64(-np.inf), np.int64(0)),
            {"computation": "argmax", "dimensions": (1,)},
            id="argmax",
        ),
        Case(
            ix.VariadicReduceOp,
            ins(distinct(3, 4), iota, np.float64(-2.0), np.int64(-1)),
            {"computation": "argmin", "dimensions": (0, 1)},
            id="argmin-init-wins-some",
        ),
    ]


def _window_cases():
    nhwc = "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]"
    nchw = "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]"
    pool = {"window_dimensions": (1, 2, 2, 1), "window_strides": (1, 2, 2, 1)}
    return [
        Case(
            W.ConvolutionOp,
            ins(f64(2, 5, 4, 3), f64(3, 2, 3, 2)),
            {"dimension_numbers": nhwc, "window_strides": (2, 1), "padding": ((1, 1), (0, 1))},
            id="nhwc-strided",
        ),
        Case(
            W.ConvolutionOp,
            ins(f64(1, 4, 5, 5), f64(4, 2, 2, 2)),
            {"dimension_numbers": nchw, "rhs_dilation": (2, 1), "feature_group_count": 2},
            id="nchw-groups-dilated",
        ),
        Case(
            W.ConvolutionOp,
            ins(f64(4, 5, 2), f64(3, 2, 4)),
            {
                "dimension_numbers": "[b, 0, f]x[0, i, o]->[b, 0, f]",
                "lhs_dilation": (2,),
                "batch_group_count": 2,
                "padding": ((2, -1),),
            },
            id="1d-batch-groups-lhs-dilated",
        ),
        Case(
            W.ReduceWindowOp,
            ins(f64(2, 5, 4, 2), np.float64(0.5)),
            {
                "computation": "add",
                "window_dimensions": (1, 3, 2, 1),
                "window_strides": (1, 2, 1, 1),
                "base_dilations": (1, 1, 2, 1),
                "window_dilations": (1, 1, 2, 1),
                "padding": ((0, 0), (1, 1), (0, 1), (0, 0)),
            },
            id="add-dilated-padded",
        ),
        Case(
            W.ReduceWindowOp,
            ins(distinct(2, 5, 5, 2), np.float64(-100.0)),
            {"computation": "max", **pool, "padding": ((0, 0), (0, 1), (0, 1), (0, 0))},
            id="max-pool-padded",
        ),
        Case(
            W.ReduceWindowOp,
            ins(distinct(3, 4), np.float64(100.0)),
            {"computation": "min", "window_dimensions": (2, 3), "window_strides": (1, 1)},
            id="min-overlapping",
        ),
        Case(
            W.SelectAndScatterOp,
            ins(distinct(2, 4, 4, 2), f64(2, 2, 2, 2), np.float64(0.25)),
            {"select": "GE", **pool},
            id="ge",
        ),
        Case(
            W.SelectAndScatterOp,
            ins(distinct(5, 4), f64(3, 2), np.float64(0.0)),
            {"select": "LE", "window_dimensions": (3, 3), "window_strides": (2, 2), "padding": ((1, 1), (1, 0))},
            id="le-padded-overlapping",
        ),
    ]


CASES: list[Case] = (
    _elementwise_cases()
    + _select_convert_cases()
    + _shape_cases()
    + _reduce_cases()
    + _slicing_cases()
    + _tpu_cases()
    + _math_extra_cases()
    + _linalg_cases()
    + _indexing_cases()
    + _window_cases()
)


@dataclasses.dataclass
class ReplicaCase:
    """``op`` applied in each of ``R`` replicas (no eager meaning beyond one)."""

    op: type
    R: int
    shape: tuple
    params: dict
    id: str = ""
    zeros: bool = False  # put a zero in replica 0's operand (all_reduce mul)

    def __str__(self) -> str:
        return f"{self.op.name}[{self.id}]"


def _replica_cases():
    out = []
    for R in (2, 4):
        everyone = (tuple(range(R)),)
        pairs = ((0, 1), (2, 3)) if R == 4 else everyone
        strided = ((0, 2), (1, 3)) if R == 4 else ((1, 0),)
        out += [
            ReplicaCase(tpu.CrossReplicaSumOp, R, (2, 3), {}, f"R{R}"),
            ReplicaCase(tpu.CrossReplicaSumOp, R, (2, 3), {"group_assignment": pairs}, f"R{R}-groups"),
            ReplicaCase(tpu.CrossReplicaSumOp, R, (3,), {"group_assignment": strided}, f"R{R}-strided-groups"),
            ReplicaCase(ccl.AllReduceOp, R, (2, 3), {"replica_groups": everyone, "computation": "add"}, f"R{R}-add"),
            ReplicaCase(ccl.AllReduceOp, R, (2, 3), {"replica_groups": strided, "computation": "max"}, f"R{R}-max"),
            ReplicaCase(ccl.AllReduceOp, R, (3,), {"replica_groups": pairs, "computation": "min"}, f"R{R}-min"),
            ReplicaCase(ccl.AllReduceOp, R, (3,), {"replica_groups": everyone, "computation": "mul"}, f"R{R}-mul"),
            ReplicaCase(
                ccl.AllReduceOp,
                R,
                (3,),
                {"replica_groups": everyone, "computation": "mul"},
                f"R{R}-mul-zero",
                zeros=True,
            ),
            ReplicaCase(ccl.AllGatherOp, R, (2, 3), {"replica_groups": everyone, "all_gather_dim": 0}, f"R{R}-dim0"),
            ReplicaCase(ccl.AllGatherOp, R, (2, 3), {"replica_groups": strided, "all_gather_dim": 1}, f"R{R}-dim1"),
            ReplicaCase(
                ccl.ReduceScatterOp,
                R,
                (4, 4),
                {"replica_groups": everyone, "scatter_dimension": 0, "computation": "add"},
                f"R{R}-add",
            ),
            ReplicaCase(
                ccl.ReduceScatterOp,
                R,
                (2, 4),
                {"replica_groups": pairs, "scatter_dimension": 1, "computation": "max"},
                f"R{R}-max",
            ),
            ReplicaCase(
                ccl.ReduceScatterOp,
                R,
                (4, 2),
                {"replica_groups": everyone, "scatter_dimension": 0, "computation": "mul"},
                f"R{R}-mul",
            ),
            ReplicaCase(
                ccl.AllToAllOp,
                R,
                (4, 2),
                {"replica_groups": everyone, "split_dimension": 0, "concat_dimension": 1},
                f"R{R}-0to1",
            ),
            ReplicaCase(
                ccl.AllToAllOp,
                R,
                (2, 4, 3),
                {"replica_groups": pairs, "split_dimension": 1, "concat_dimension": 2},
                f"R{R}-1to2",
            ),
            ReplicaCase(
                ccl.CollectivePermuteOp,
                R,
                (2, 3),
                {"source_target_pairs": tuple((r, (r + 1) % R) for r in range(R))},
                f"R{R}-cycle",
            ),
            ReplicaCase(ccl.CollectivePermuteOp, R, (3,), {"source_target_pairs": ((0, 1),)}, f"R{R}-one-pair"),
        ]
    return out


REPLICA_CASES = _replica_cases()


# --------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------


def test_every_op_declares_its_gradient():
    """Adding an op without a rule or a declaration fails here, by name."""
    bad = []
    for op in ALL_OPS:
        kinds = [op.STRUCTURAL_GRADIENT, op.NOT_DIFFERENTIABLE, op.has_gradient_rule()]
        if sum(kinds) != 1:
            bad.append(f"{op.name} (structural={kinds[0]}, not_differentiable={kinds[1]}, rule={kinds[2]})")
    assert not bad, (
        "each op must be exactly one of STRUCTURAL_GRADIENT, NOT_DIFFERENTIABLE or have a vjp rule: " + ", ".join(bad)
    )


def test_every_rule_has_cases():
    covered = {c.op.name for c in CASES} | {c.op.name for c in REPLICA_CASES} | set(SPECIAL)
    missing = [op.name for op in ALL_OPS if op.has_gradient_rule() and op.name not in covered]
    assert not missing, f"gradient rules without a case in test_gradient_rules.py: {missing}"


def test_registry_is_what_the_docs_say():
    """The split of the ops, so that a change of it is deliberate."""
    rules = {op.name for op in ALL_OPS if op.has_gradient_rule()}
    structural = {op.name for op in ALL_OPS if op.STRUCTURAL_GRADIENT}
    assert structural == {"hlo.if", "hlo.while", "hlo.return", "tpu.replicate", "tpu.yield", "tpu.outside_compilation"}
    assert {"hlo.pad", "hlo.dynamic_update_slice", "tpu.cross_replica_sum", "ccl.all_to_all"} <= rules
    assert hlo.CompareOp.NOT_DIFFERENTIABLE and tpu.ReplicaIdOp.NOT_DIFFERENTIABLE
    assert len(ALL_OPS) == len({op.name for op in ALL_OPS})
    with pytest.raises(LookupError, match="No gradient defined for operation 'hlo.compare'"):
        hlo.CompareOp.vjp([np.zeros(2, bool)], [np.zeros(2), np.zeros(2)], [np.zeros(2, bool)])


# --------------------------------------------------------------------------
# The numerical check
# --------------------------------------------------------------------------


def op_params(op: type, inputs: list, params: dict) -> dict:
    """``params`` as a real op gives them: the op built on SSA values of the
    inputs' types, verified, and its ``params()``."""
    block = Block(arg_types=[TensorSpec(np.shape(x), dtype_of_numpy(np.asarray(x).dtype)).to_type() for x in inputs])
    built = op.make(list(block.args), **params)
    block.add_op(built)
    built.verify()
    got = built.params()
    for key, _value in params.items():
        assert key in got, f"{op.name}: params() has no {key!r}"
    return got


def loss(op: type, inputs: list, params: dict, cts: list) -> float:
    outs = op.eager(inputs, **params)
    return sum(float(np.sum(ct.astype(np.float64) * o.astype(np.float64))) for ct, o in zip(cts, outs))


def check_vjp(op: type, inputs: list, params: dict, rng: np.random.Generator, eps=EPS, rtol=RTOL, where=""):
    """The rule's cotangents against central differences of ``sum(ct * f)``.
    Returns (cotangents of the results, the rule's result)."""
    outs = op.eager(inputs, **params)
    cts = [rng.standard_normal(o.shape).astype(o.dtype) if o.dtype.kind == "f" else np.zeros_like(o) for o in outs]
    grads = op.vjp(cts, inputs, outs, **params)
    assert isinstance(grads, list) and len(grads) == len(inputs), f"{where}: one entry per input, got {grads!r}"
    for i, (x, g) in enumerate(zip(inputs, grads)):
        x = np.asarray(x)
        if x.dtype.kind != "f" or not any(o.dtype.kind == "f" for o in outs):
            assert g is None, f"{where}: input {i} ({x.dtype}) must get no gradient, got {g!r}"
            continue
        assert g is not None, f"{where}: float input {i} got no gradient"
        g = np.asarray(g)
        assert g.shape == x.shape and g.dtype == x.dtype, (
            f"{where}: input {i} is {x.dtype}{list(x.shape)} but its cotangent is {g.dtype}{list(g.shape)}"
        )
        for _ in range(DIRECTIONS):
            d = rng.standard_normal(x.shape)
            plus, minus = list(inputs), list(inputs)
            plus[i] = (x + eps * d).astype(x.dtype)
            minus[i] = (x - eps * d).astype(x.dtype)
            numeric = (loss(op, plus, params, cts) - loss(op, minus, params, cts)) / (2 * eps)
            analytic = float(np.sum(g.astype(np.float64) * d))
            # Rounding in L grows with the size and magnitude of the outputs.
            scale = np.sqrt(x.size) * (1.0 + max((float(np.max(np.abs(o), initial=0)) for o in outs), default=0))
            assert abs(numeric - analytic) <= rtol * (abs(analytic) + scale), (
                f"{where}: input {i}: finite differences give {numeric}, the rule {analytic}"
            )
    return cts, grads


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rule_matches_finite_differences(case):
    rng = np.random.default_rng(zlib.crc32(str(case).encode()))
    inputs = case.inputs(rng)
    params = op_params(case.op, inputs, case.params)
    cts, grads = check_vjp(case.op, inputs, params, rng, case.eps, case.rtol, where=str(case))
    if case.traced:
        check_traced(case.op, inputs, params, cts, grads)


def check_traced(op: type, inputs: list, params: dict, cts: list, want: list) -> None:
    """The rule on traced tensors in one replica: valid IR that round-trips
    through text, and the eager rule's values."""
    n = len(inputs)
    keep = [i for i, g in enumerate(want) if g is not None]

    def grad(*args):
        xs, cs = list(args[:n]), list(args[n:])
        outs = bind(op, xs, **params)
        got = op.vjp(cs, xs, outs, **params)
        assert [i for i, g in enumerate(got) if g is not None] == keep
        return tuple(got[i] for i in keep)

    args = [[*map(np.asarray, inputs), *cts]]
    lowered = xtpu.lower(grad, args)
    text = lowered.as_text()
    reparsed = Parser(make_context(), text).parse_module()
    assert isinstance(reparsed, ModuleOp)
    reparsed.verify()
    if not keep:
        return
    (got,) = lowered.compile()(args)
    for i, g in zip(keep, got):
        np.testing.assert_allclose(g, want[i], rtol=1e-12, atol=1e-12, err_msg=f"{op.name}: input {i} traced")
        assert g.dtype == np.asarray(want[i]).dtype


def test_skip_input_indices_drop_only_the_skipped_cotangents():
    """A rule that takes ``skip_input_indices`` (TF's op.skip_input_indices)
    returns None at the skipped inputs and, at the others, exactly what it
    returns without skips; every such rule is listed here."""
    from xtpu.autodiff.gradients import _takes_skips

    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)) + 3.0
    cases = [
        (hlo.SubtractOp, [a, b], {}),
        (hlo.MultiplyOp, [a, b], {}),
        (hlo.DivideOp, [a, b], {}),
        (
            hlo.DotGeneralOp,
            [a, rng.standard_normal((4, 5))],
            {"lhs_contracting_dimensions": (1,), "rhs_contracting_dimensions": (0,)},
        ),
        (
            hlo.DotGeneralOp,
            [rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4))],
            {
                "lhs_batching_dimensions": (0,),
                "rhs_batching_dimensions": (0,),
                "lhs_contracting_dimensions": (2,),
                "rhs_contracting_dimensions": (2,),
            },
        ),
        (hlo.ReduceOp, [a, np.float64(0.5)], {"computation": "add", "dimensions": (1,)}),
        (
            W.ConvolutionOp,
            [rng.standard_normal((2, 5, 4, 3)), rng.standard_normal((3, 2, 3, 2))],
            {"dimension_numbers": "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]", "window_strides": (2, 1)},
        ),
        (
            W.ReduceWindowOp,
            [a, np.float64(-1.0)],
            {"computation": "max", "window_dimensions": (2, 2), "window_strides": (1, 2)},
        ),
        (
            W.SelectAndScatterOp,
            [a, rng.standard_normal((2, 2)), np.float64(0.5)],
            {"select": "GE", "window_dimensions": (2, 2), "window_strides": (1, 2)},
        ),
    ]
    assert {op for op, _, _ in cases} == {op for op in ALL_OPS if _takes_skips(op)}
    for op, inputs, params in cases:
        outs = op.eager(inputs, **params)
        cts = [rng.standard_normal(o.shape) for o in outs]
        full = op.vjp(cts, inputs, outs, **params)
        for skip in ({0}, {1}, {0, 1}):
            got = op.vjp(cts, inputs, outs, skip_input_indices=frozenset(skip), **params)
            for i, (g, want) in enumerate(zip(got, full)):
                if i in skip:
                    assert g is None, f"{op.name}: skipped input {i} got {g!r}"
                else:
                    np.testing.assert_array_equal(g, want, err_msg=f"{op.name}: input {i}, skip {skip}")


def test_max_reduce_splits_ties_equally():
    """TF's _MaxGrad: tied maxima share the cotangent; a tied init takes its share."""
    x = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]])
    ct = np.array([6.0, 4.0])
    for init, want_x, want_init in [
        (-np.inf, [[0, 3, 3], [2, 0, 2]], 0.0),
        (3.0, [[0, 2, 2], [0, 0, 0]], 6.0),  # row 0: three tied candidates; row 1: init wins
    ]:
        y = hlo.ReduceOp.eager([x, np.float64(init)], computation="max", dimensions=(1,))
        dx, dinit = hlo.ReduceOp.vjp([ct], [x, np.float64(init)], y, computation="max", dimensions=(1,))
        np.testing.assert_array_equal(dx, want_x)
        assert float(dinit) == want_init
    # maximum(x, y) at x == y: x gets it all (TF: x >= y); minimum likewise.
    a = np.array([1.0, 2.0])
    for op in (hlo.MaximumOp, hlo.MinimumOp):
        dx, dy = op.vjp([np.ones(2)], [a, a], op.eager([a, a]))
        np.testing.assert_array_equal(dx, [1, 1])
        np.testing.assert_array_equal(dy, [0, 0])


def test_rules_keep_float32():
    """No promotion: float32 values get float32 cotangents from every rule
    that makes constants (pow, sqrt, tanh, logistic, reduce max/mul, pad)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 2.0, (2, 3)).astype(np.float32)
    for op, inputs, params in [
        (hlo.PowerOp, [x, x], {}),
        (hlo.SqrtOp, [x], {}),
        (hlo.TanhOp, [x], {}),
        (hlo.LogisticOp, [x], {}),
        (hlo.AbsOp, [x], {}),
        (hlo.ReduceOp, [x, np.float32(1)], {"computation": "mul", "dimensions": (0, 1)}),
        (hlo.ReduceOp, [x, np.float32(0)], {"computation": "max", "dimensions": (1,)}),
        (
            hlo.PadOp,
            [x, np.float32(0)],
            {"edge_padding_low": (1, 0), "edge_padding_high": (0, -1), "interior_padding": (1, 1)},
        ),
        (hlo.DynamicSliceOp, [x, np.int32(1), np.int32(1)], {"slice_sizes": (1, 2)}),
    ]:
        outs = op.eager(inputs, **params)
        grads = op.vjp([np.ones_like(o) for o in outs], inputs, outs, **params)
        for inp, g in zip(inputs, grads):
            if g is not None:
                assert g.dtype == np.float32 and g.shape == np.shape(inp), (op.name, g.dtype)


# --------------------------------------------------------------------------
# Property-based cases: random shapes for the rules with the most index
# bookkeeping (elementwise, broadcast_in_dim, reduce, dot_general, slice, pad)
# --------------------------------------------------------------------------

PROPERTY = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


@PROPERTY
@given(
    shape=shapes,
    op=st.sampled_from(
        [
            hlo.AddOp,
            hlo.SubtractOp,
            hlo.MultiplyOp,
            hlo.DivideOp,
            hlo.PowerOp,
            hlo.MaximumOp,
            hlo.MinimumOp,
            hlo.ExpOp,
            hlo.TanhOp,
            hlo.LogisticOp,
            hlo.SqrtOp,
            hlo.LogOp,
            hlo.AbsOp,
            hlo.NegateOp,
        ]
    ),
    seed=st.integers(0, 2**16),
)
def test_elementwise_property(shape, op, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 2.0, shape) * (1 if op in (hlo.PowerOp, hlo.SqrtOp, hlo.LogOp) else rng.choice([-1, 1], shape))
    if issubclass(op, hlo.ElementwiseBinary):
        y = x + rng.choice([-1.0, 1.0], shape) * rng.uniform(0.1, 1.0, shape)
        check_vjp(op, [x, y], {}, rng, where=op.name)
    else:
        check_vjp(op, [x], {}, rng, where=op.name)


@st.composite
def broadcasts(draw):
    rank = draw(st.integers(0, 3))
    out_rank = draw(st.integers(rank, 4))
    dims = draw(st.permutations(range(out_rank)))[:rank]
    shape = draw(st.lists(st.integers(1, 3), min_size=out_rank, max_size=out_rank))
    operand = tuple(1 if draw(st.booleans()) else shape[d] for d in dims)
    return operand, tuple(dims), tuple(shape)


@PROPERTY
@given(b=broadcasts(), seed=st.integers(0, 2**16))
def test_broadcast_in_dim_property(b, seed):
    operand, dims, shape = b
    rng = np.random.default_rng(seed)
    check_vjp(
        hlo.BroadcastInDimOp,
        [rng.standard_normal(operand)],
        {"broadcast_dimensions": dims, "shape": shape},
        rng,
        where=f"broadcast {operand} {dims} {shape}",
    )


@PROPERTY
@given(shape=shapes, kind=st.sampled_from(["add", "max", "min", "mul"]), data=st.data(), seed=st.integers(0, 2**16))
def test_reduce_property(shape, kind, data, seed):
    dims = tuple(sorted(data.draw(st.sets(st.integers(0, max(len(shape) - 1, 0)), max_size=len(shape)))))
    dims = tuple(d for d in dims if d < len(shape))
    rng = np.random.default_rng(seed)
    x = distinct(*shape)(rng) if kind in ("max", "min") else rng.standard_normal(shape)
    if kind == "mul" and x.size and data.draw(st.booleans()):
        x.reshape(-1)[rng.integers(0, x.size, 2)] = 0.0
    init = {"add": 0.25, "mul": 1.25, "max": -np.inf, "min": np.inf}[kind]
    check_vjp(
        hlo.ReduceOp,
        [x, np.float64(init)],
        {"computation": kind, "dimensions": dims},
        rng,
        where=f"reduce {kind} {shape} {dims}",
    )


@st.composite
def dots(draw):
    nb, nc, nl, nr = (draw(st.integers(0, 2)) for _ in range(4))
    sizes = [draw(st.integers(1, 3)) for _ in range(nb + nc + nl + nr)]
    b, c, lf, rf = sizes[:nb], sizes[nb : nb + nc], sizes[nb + nc : nb + nc + nl], sizes[nb + nc + nl :]
    # Logical dims of each operand: ("b", i), ("c", i), ("f", i); shuffled into a layout.
    lhs = draw(
        st.permutations([("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("f", i) for i in range(nl)])
    )
    rhs = draw(
        st.permutations([("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("f", i) for i in range(nr)])
    )

    def size(kind, i, free):
        return {"b": b, "c": c, "f": free}[kind][i]

    lshape = tuple(size(k, i, lf) for k, i in lhs)
    rshape = tuple(size(k, i, rf) for k, i in rhs)
    params = {
        "lhs_batching_dimensions": tuple(lhs.index(("b", i)) for i in range(nb)),
        "rhs_batching_dimensions": tuple(rhs.index(("b", i)) for i in range(nb)),
        "lhs_contracting_dimensions": tuple(lhs.index(("c", i)) for i in range(nc)),
        "rhs_contracting_dimensions": tuple(rhs.index(("c", i)) for i in range(nc)),
    }
    return lshape, rshape, params


@PROPERTY
@given(d=dots(), seed=st.integers(0, 2**16))
def test_dot_general_property(d, seed):
    lshape, rshape, params = d
    rng = np.random.default_rng(seed)
    check_vjp(
        hlo.DotGeneralOp,
        [rng.standard_normal(lshape), rng.standard_normal(rshape)],
        params,
        rng,
        where=f"dot {lshape} {rshape} {params}",
    )


@st.composite
def slices(draw):
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    start, limit, strides = [], [], []
    for n in shape:
        a = draw(st.integers(0, n))
        start.append(a)
        limit.append(draw(st.integers(a, n)))
        strides.append(draw(st.integers(1, 3)))
    return tuple(shape), tuple(start), tuple(limit), tuple(strides)


@PROPERTY
@given(s=slices(), seed=st.integers(0, 2**16))
def test_slice_property(s, seed):
    shape, start, limit, strides = s
    rng = np.random.default_rng(seed)
    check_vjp(
        hlo.SliceOp,
        [rng.standard_normal(shape)],
        {"start_indices": start, "limit_indices": limit, "strides": strides},
        rng,
        where=f"slice {s}",
    )


@st.composite
def pads(draw):
    shape = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    low, high, interior = [], [], []
    for n in shape:
        i = draw(st.integers(0, 2))
        full = n + max(n - 1, 0) * i
        lo = draw(st.integers(-full, 2))
        hi = draw(st.integers(-(full + lo) if full + lo > 0 else 0, 2))
        low.append(lo)
        high.append(hi)
        interior.append(i)
    return tuple(shape), tuple(low), tuple(high), tuple(interior)


@PROPERTY
@given(p=pads(), seed=st.integers(0, 2**16))
def test_pad_property(p, seed):
    shape, low, high, interior = p
    rng = np.random.default_rng(seed)
    check_vjp(
        hlo.PadOp,
        [rng.standard_normal(shape), np.float64(rng.standard_normal())],
        {"edge_padding_low": low, "edge_padding_high": high, "interior_padding": interior},
        rng,
        where=f"pad {p}",
    )


# --------------------------------------------------------------------------
# Collectives: forward and rule through xtpu.replicate over R replicas
# --------------------------------------------------------------------------


@pytest.mark.parametrize("case", REPLICA_CASES, ids=str)
def test_collective_rule_matches_finite_differences(case):
    op, R, params = case.op, case.R, dict(case.params)
    rng = np.random.default_rng(zlib.crc32(str(case).encode()))
    if op is ccl.AllReduceOp and case.params["computation"] in ("max", "min"):
        xs = list(distinct(R, *case.shape)(rng))
    else:
        xs = [rng.standard_normal(case.shape) for _ in range(R)]
    if case.zeros:
        xs[0].reshape(-1)[0] = 0.0

    def forward(x):
        (y,) = bind(op, [x], **params)
        return y

    ys = [y for (y,) in xtpu.replicate(forward, [[x] for x in xs])]
    cts = [rng.standard_normal(y.shape) for y in ys]

    def grad(x, ct):
        (y,) = bind(op, [x], **params)
        (g,) = op.vjp([ct], [x], [y], **params)
        return g

    grads = [g for (g,) in xtpu.replicate(grad, [[x, c] for x, c in zip(xs, cts)])]
    for x, g in zip(xs, grads):
        assert g.shape == x.shape and g.dtype == x.dtype

    def total(values):
        outs = xtpu.replicate(forward, [[v] for v in values])
        return sum(float(np.sum(c * y)) for c, (y,) in zip(cts, outs))

    for _ in range(DIRECTIONS):
        ds = [rng.standard_normal(x.shape) for x in xs]
        numeric = (total([x + EPS * d for x, d in zip(xs, ds)]) - total([x - EPS * d for x, d in zip(xs, ds)])) / (
            2 * EPS
        )
        analytic = sum(float(np.sum(g * d)) for g, d in zip(grads, ds))
        assert abs(numeric - analytic) <= RTOL * abs(analytic) + 1e-7 * R, (str(case), numeric, analytic)


@pytest.mark.parametrize("R", [2, 4])
def test_cross_replica_sum_gradient_is_the_cross_replica_sum_of_the_cotangent(R):
    """TF's _cross_replica_sum_grad, by value: each replica gets the sum of
    its group's cotangents, over all replicas and over a group_assignment."""
    rng = np.random.default_rng(R)
    xs = [rng.standard_normal(3) for _ in range(R)]
    cts = [rng.standard_normal(3) for _ in range(R)]
    for groups in [None, [[r] for r in range(R)], [list(range(0, R, 2)), list(range(1, R, 2))]]:

        def grad(x, ct, groups=groups):
            y = xtpu.cross_replica_sum(x, groups)
            (g,) = tpu.CrossReplicaSumOp.vjp([ct], [x], [y], group_assignment=groups)
            return g

        got = [g for (g,) in xtpu.replicate(grad, [[x, c] for x, c in zip(xs, cts)])]
        for r in range(R):
            group = next(g for g in (groups or [list(range(R))]) if r in g)
            np.testing.assert_allclose(got[r], sum(cts[p] for p in group), rtol=1e-12)
        text = xtpu.lower(grad, [[x, c] for x, c in zip(xs, cts)]).as_text()
        assert text.count("tpu.cross_replica_sum") == 2


# --------------------------------------------------------------------------
# hlo.pad and hlo.dynamic_update_slice over 2 logical cores
# --------------------------------------------------------------------------


def _two_cores(R: int = 1):
    return xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=R)


@pytest.mark.parametrize("R", [1, 2])
def test_pad_and_dynamic_update_slice_over_2_logical_cores(R):
    """Unknown to the sharding passes: kept whole (replicated), the program
    still partitions, and the values equal the eager ones."""

    def step(x, u, i):
        x = xtpu.split_to_logical_devices(x, [2, 1])
        (p,) = bind(
            hlo.PadOp,
            [x * 2.0, np.float32(-1)],
            edge_padding_low=(1, -1),
            edge_padding_high=(0, 2),
            interior_padding=(1, 0),
        )
        (d,) = bind(hlo.DynamicUpdateSliceOp, [x, u, i, np.int32(1)])
        (s,) = bind(hlo.DynamicSliceOp, [d, i, np.int32(0)], slice_sizes=(2, 4))
        return p, d + 1.0, s

    rng = np.random.default_rng(0)
    ins = [
        [
            rng.standard_normal((4, 4)).astype(np.float32),
            rng.standard_normal((2, 2)).astype(np.float32),
            np.int32(r + 1),
        ]
        for r in range(R)
    ]
    out = xtpu.replicate(step, ins, device_assignment=_two_cores(R))
    for r in range(R):
        want = step(*ins[r])  # eager: the constraint checks and returns x
        for g, w in zip(out[r], want):
            np.testing.assert_array_equal(g, w)
    stages = xtpu.lower(step, ins, device_assignment=_two_cores(R)).compile().stages
    assert "hlo.pad" in stages["tpu-spmd-partition"] and "hlo.dynamic_update_slice" in stages["tpu-spmd-partition"]
    assert "#tpu.sharding<{replicated}>" in stages["tpu-propagate-sharding"]


def test_sharding_constraint_rule_over_2_cores():
    """The cotangent of a split value is split the same way, and the
    gradient program (slice, pad, dot_general rules) partitions and runs."""
    shard = ShardingAttr("{devices=[2,1]0,1}")

    def grad(x, w, ct):
        (xs,) = bind(tpu.ShardingConstraintOp, [x], sharding=shard)
        (h,) = bind(
            hlo.DotGeneralOp,
            [xs, w],
            lhs_batching_dimensions=(),
            rhs_batching_dimensions=(),
            lhs_contracting_dimensions=(1,),
            rhs_contracting_dimensions=(0,),
        )
        (s,) = bind(hlo.SliceOp, [h], start_indices=(0, 1), limit_indices=(4, 4), strides=(1, 2))
        (ds,) = hlo.SliceOp.vjp([ct], [h], [s], start_indices=(0, 1), limit_indices=(4, 4), strides=(1, 2))
        dxs, dw = hlo.DotGeneralOp.vjp(
            [ds],
            [xs, w],
            [h],
            lhs_batching_dimensions=(),
            rhs_batching_dimensions=(),
            lhs_contracting_dimensions=(1,),
            rhs_contracting_dimensions=(0,),
        )
        (dx,) = tpu.ShardingConstraintOp.vjp([dxs], [x], [xs], sharding=shard)
        return dx, dw

    rng = np.random.default_rng(1)
    ins = [[rng.standard_normal((4, 3)), rng.standard_normal((3, 4)), rng.standard_normal((4, 2))]]
    lowered = xtpu.lower(grad, ins, device_assignment=_two_cores())
    assert lowered.as_text().count("tpu.sharding_constraint") == 2
    assert "ccl." in lowered.compile().stages["tpu-spmd-partition"]
    (got,) = xtpu.replicate(grad, ins, device_assignment=_two_cores())
    x, w, ct = ins[0]
    full = np.zeros((4, 4))
    full[:, 1:4:2] = ct
    np.testing.assert_allclose(got[0], full @ w.T, rtol=1e-12)
    np.testing.assert_allclose(got[1], x.T @ full, rtol=1e-12)


# --------------------------------------------------------------------------
# Gradients of gradients: the rules are built from differentiable ops
# --------------------------------------------------------------------------


def test_rules_are_differentiable():
    """Every op a rule emits (traced, for every case) is itself
    differentiable or declared not differentiable."""
    seen: set[str] = set()
    for case in CASES:
        if not case.traced:
            continue
        rng = np.random.default_rng(0)
        inputs = case.inputs(rng)
        params = op_params(case.op, inputs, case.params)
        outs = case.op.eager(inputs, **params)
        n = len(inputs)

        def grad(*args, case=case, params=params, n=n):
            xs, cs = list(args[:n]), list(args[n:])
            got = case.op.vjp(cs, xs, bind(case.op, xs, **params), **params)
            return tuple(g for g in got if g is not None)

        module = xtpu.lower(grad, [[*map(np.asarray, inputs), *[np.ones_like(o) for o in outs]]]).module
        for op in module.walk():
            if isinstance(op, PrimitiveOp):
                seen.add(op.name)
                assert op.has_gradient_rule() or op.NOT_DIFFERENTIABLE or op.STRUCTURAL_GRADIENT, op.name
    assert {"hlo.pad", "hlo.dynamic_update_slice", "hlo.dot_general", "hlo.select"} <= seen


def _second_order_cases():
    """The float64 cases of each op whose rule depends on the inputs, and one
    linear case (its second derivative is unconnected)."""
    out = []
    for case in CASES:
        inputs = case.inputs(np.random.default_rng(0))
        if (
            case.traced
            and all(np.asarray(x).dtype != np.float32 for x in inputs)
            and any(np.asarray(x).dtype == np.float64 for x in inputs)
            and case.op not in (tpu.CrossReplicaSumOp, tpu.ShardingConstraintOp)
        ):
            out.append(case)
    return out


@pytest.mark.parametrize("case", _second_order_cases(), ids=str)
def test_gradient_of_the_rule(case):
    """Gradients of gradients: the gradient of ``sum(vjp(ct)(x) * v)``, which
    applies the rules to the ops the rule emitted, against central
    differences of the eager rule -- on an eager GradientTape (the rule runs
    on its EagerTensors) and traced with ``xtpu.gradients``."""
    rng = np.random.default_rng(zlib.crc32(str(case).encode()))
    inputs = [np.asarray(x) for x in case.inputs(rng)]
    params = op_params(case.op, inputs, case.params)
    outs = case.op.eager(inputs, **params)
    cts = [rng.standard_normal(o.shape) if o.dtype.kind == "f" else np.zeros_like(o) for o in outs]
    first = case.op.vjp(cts, inputs, outs, **params)
    if all(g is None for g in first):
        return
    vs = [None if g is None else rng.standard_normal(np.shape(g)) for g in first]
    wrt = [i for i, x in enumerate(inputs) if x.dtype == np.float64]
    n = len(inputs)

    def rule_total(xs, cs, outs):
        grads = case.op.vjp(cs, xs, outs, **params)
        return sum(xtpu.math.reduce_sum(g * v) for g, v in zip(grads, vs) if g is not None)

    def g_eager(xs):
        return float(np.asarray(rule_total(xs, cts, case.op.eager(xs, **params))))

    def zeros_for_none(hs):
        return [np.zeros(inputs[i].shape) if h is None else np.asarray(h) for i, h in zip(wrt, hs)]

    def check(hs, how):
        for i, h in zip(wrt, hs):
            d = rng.standard_normal(inputs[i].shape)
            plus, minus = list(inputs), list(inputs)
            plus[i], minus[i] = inputs[i] + EPS * d, inputs[i] - EPS * d
            numeric = (g_eager(plus) - g_eager(minus)) / (2 * EPS)
            analytic = float(np.sum(h * d))
            scale = np.sqrt(inputs[i].size) * (1 + max(float(np.max(np.abs(o), initial=0)) for o in outs))
            assert abs(numeric - analytic) <= 1e-5 * (abs(analytic) + scale), (str(case), how, i, numeric, analytic)

    xs = [xtpu.constant(x) for x in inputs]
    with xtpu.GradientTape() as tape:
        for i in wrt:
            tape.watch(xs[i])
        total = rule_total(xs, cts, bind(case.op, xs, **params))
    check(zeros_for_none(tape.gradient(total, [xs[i] for i in wrt])), "eager tape")

    def second(*args):
        xs, cs = list(args[:n]), list(args[n:])
        hs = xtpu.gradients(rule_total(xs, cs, bind(case.op, xs, **params)), [xs[i] for i in wrt])
        return tuple(h if h is not None else xtpu.constant(np.zeros(xs[i].shape)) for i, h in zip(wrt, hs))

    (got,) = xtpu.replicate(second, [[*inputs, *cts]])
    check(got, "traced")


@pytest.mark.parametrize("op", [op for op in ALL_OPS if op.NOT_DIFFERENTIABLE], ids=lambda o: o.name)
def test_not_differentiable_ops_have_no_rule(op):
    assert not op.has_gradient_rule()
    with pytest.raises(LookupError):
        op.vjp([], [], [])


def test_custom_gradient_rule():
    """``hlo.custom_gradient`` (dialects/autodiff.py) runs the user's rule:
    its outputs get none, its inputs what the rule returns, eagerly and traced."""
    from xtpu.dialects.autodiff import CustomGradientOp, register_rule

    key = register_rule(lambda dy: [dy * 3.0], "times_three")
    x, y = np.array([1.0, -2.0]), np.array([0.5, 4.0])
    params = op_params(CustomGradientOp, [y, x], {"rule": key, "num_outputs": 1})
    outs = CustomGradientOp.eager([y, x], **params)
    np.testing.assert_array_equal(outs[0], y)
    ct = np.array([1.0, 2.0])
    dy, dx = CustomGradientOp.vjp([ct], [y, x], outs, **params)
    assert dy is None
    np.testing.assert_array_equal(dx, ct * 3.0)

    def traced(y, x, ct):
        (o,) = bind(CustomGradientOp, [y, x], **params)
        return CustomGradientOp.vjp([ct], [y, x], [o], **params)[1]

    (got,) = xtpu.replicate(traced, [[y, x, ct]])
    np.testing.assert_array_equal(got[0], ct * 3.0)


@pytest.mark.parametrize("op_name", ["hlo.real", "hlo.imag", "hlo.complex"])
def test_complex_part_rules(op_name):
    """complex64's part ops (float32 and complex64 only, so not in the
    float64 cases above), by central differences under TF's convention:
    for ``L = sum(Re(conj(ct) * f(inputs)))`` a float input's cotangent is
    dL/dx and a complex one's dL/dRe + i dL/dIm, so ``dL`` along ``d`` is
    ``sum(Re(conj(g) * d))``.  The ops are linear: differences of step 1
    are exact but for float32 rounding."""
    from xtpu.dialects import hlo_complex

    op = {c.name: c for c in hlo_complex.COMPLEX_OPS}[op_name]
    rng = np.random.default_rng(zlib.crc32(op_name.encode()))

    def rand(dtype):
        re = rng.standard_normal(5).astype(np.float32)
        return re if dtype == "float32" else (re + 1j * rng.standard_normal(5)).astype(np.complex64)

    ins = [rand("float32"), rand("float32")] if op is hlo_complex.ComplexOp else [rand("complex64")]
    (out,) = op.eager(ins)
    ct = rand(dtype_of_numpy(out.dtype))
    grads = op.vjp([ct], ins, [out])

    def loss(xs):
        (y,) = op.eager(xs)
        return float(np.sum(np.real(np.conj(ct.astype(np.complex128)) * y.astype(np.complex128))))

    for i, (x, g) in enumerate(zip(ins, grads)):
        g = np.asarray(g)
        assert g.dtype == x.dtype and g.shape == x.shape
        for d in [rand(dtype_of_numpy(x.dtype)) for _ in range(DIRECTIONS)]:
            plus, minus = list(ins), list(ins)
            plus[i], minus[i] = x + d, x - d
            want = (loss(plus) - loss(minus)) / 2
            got = float(np.sum(np.real(np.conj(g.astype(np.complex128)) * d)))
            assert abs(got - want) <= 1e-5 * (1 + abs(want)), (op_name, i, got, want)


SPECIAL = {
    "hlo.custom_gradient": test_custom_gradient_rule,
    "hlo.real": test_complex_part_rules,
    "hlo.imag": test_complex_part_rules,
    "hlo.complex": test_complex_part_rules,
}
"""Ops with a rule checked by a test of their own (a user rule need not be
the derivative of the forward function; complex64's part ops take no
float64)."""


def test_case_ids_are_unique():
    ids = [str(c) for c in CASES] + [str(c) for c in REPLICA_CASES]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]


def test_every_rule_case_uses_registered_ops():
    assert all(c.op in ALL_OPS for c in itertools.chain(CASES, REPLICA_CASES))
