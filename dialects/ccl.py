"""The ``ccl`` dialect: collectives between devices, StableHLO semantics.

Each op names its participants explicitly with ``replica_groups`` (a 2-D
``dense<...> : tensor<GxSxi64>``: G groups of S process ids) and carries an
optional ``channel_id``, as in StableHLO (https://openxla.org/stablehlo/spec,
sections all_reduce, all_gather, reduce_scatter, all_to_all,
collective_permute).  The reduction of ``all_reduce`` / ``reduce_scatter``
is written ``applies add`` instead of StableHLO's one-op region.

These ops have no eager kernel: the runtime runs them through its
``Communicator``.

Gradients: each op's cotangent is the transposed collective over the same
groups (all_reduce add -> all_reduce add, all_gather <-> reduce_scatter add,
all_to_all with split and concat swapped, collective_permute with the pairs
reversed), as TF's gradients of its TPU collectives and JAX's transposes of
``psum`` / ``all_gather`` / ``all_to_all`` / ``ppermute``.  The gradient's
collective gets no ``channel_id`` (it is a new collective).  xtpu takes
gradients before ``tpu-lower-cross-replica-sum``, so these rules serve
programs that use ``ccl`` ops directly.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import I64, DenseIntOrFPElementsAttr, IntegerAttr, TensorType
from xdsl.ir import Dialect
from xdsl.irdl import (
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from xtpu.dialects import vjp_util as G
from xtpu.dialects.hlo import ReductionKindAttr
from xtpu.dialects.primitive import (
    EnumParam,
    GroupsParam,
    IntParam,
    PairsParam,
    PrimitiveOp,
    ShapeError,
)
from xtpu.dialects.tensor_spec import NUMERIC_DTYPES, TensorSpec
from xtpu.dialects.tpu import check_group_assignment, check_ids_attr, enclosing_replicate, host_context

NUMERIC = NUMERIC_DTYPES


def _verify_ids(op: PrimitiveOp, attr_name: str, pairs: bool = False) -> None:
    """What the runtime's communicator relies on, checked before and after
    the op's shape rule: ``attr_name`` is a 2-D integer tensor, the op runs
    in the device program, and inside a ``tpu.replicate`` of ``n`` replicas
    and ``C`` logical cores its ids are participants ``0 .. n*C - 1``
    (``r * C + c``): replica groups cover each exactly once, pairs stay in
    range.  An ``all_reduce`` whose groups cover the ``n`` replica ids
    instead is the form ``tpu-spmd-partition`` still turns into participant
    groups."""
    try:
        check_ids_attr(op.properties[attr_name], attr_name, pairs)
    except ValueError as e:
        raise VerifyException(f"'{op.name}' op {e}") from None
    where = host_context(op)
    if where is not None:
        raise VerifyException(f"'{op.name}' op is in {where}; collectives run between the device workers")
    PrimitiveOp.verify_(op)
    rep = enclosing_replicate(op)
    if rep is None:
        return
    n, cores = rep.num_replicas, rep.num_cores
    total = n * cores
    noun = "replica" if cores == 1 else "participant"
    context = (
        f"the enclosing tpu.replicate has n = {n}"
        if cores == 1
        else f"the enclosing tpu.replicate runs {n} replicas x {cores} logical cores, participants r * {cores} + c"
    )
    ids = op.params()[attr_name]
    if pairs:
        bad = [list(p) for p in ids if not all(0 <= x < total for x in p)]
        if bad:
            raise VerifyException(
                f"'{op.name}' op {attr_name} {bad} name {noun}s out of range [0, {total}) ({context})"
            )
        return
    if cores > 1 and isinstance(op, AllReduceOp):
        if sorted(i for g in ids for i in g) == list(range(n)):
            # Before tpu-spmd-partition an all_reduce may still name replica
            # ids, as tpu.cross_replica_sum's groups; the pass makes them
            # participants.
            return
        context += f"; before tpu-spmd-partition they may be the {n} replica ids instead"
    try:
        check_group_assignment(ids, total, noun)
    except ValueError as e:
        raise VerifyException(f"'{op.name}' op {str(e).replace('group_assignment', attr_name)} ({context})") from None


class CollectiveOp(PrimitiveOp):
    """Common parts: one tensor operand, replica groups and a channel id."""

    operand = operand_def(TensorType)
    replica_groups = prop_def(DenseIntOrFPElementsAttr)
    channel_id = opt_prop_def(IntegerAttr[I64])
    result = result_def(TensorType)

    def verify_(self) -> None:
        _verify_ids(self, "replica_groups")

    @classmethod
    def _groups(cls, replica_groups) -> int:
        try:
            check_group_assignment(replica_groups)
        except ValueError as e:
            raise ShapeError(str(e).replace("group_assignment", "replica_groups")) from None
        return len(replica_groups[0])

    @classmethod
    def _operand(cls, specs) -> TensorSpec:
        (s,) = specs
        if s.dtype not in NUMERIC:
            raise ShapeError(f"{cls.name} needs a numeric tensor, got {s}")
        return s

    @classmethod
    def _reduction(cls, s: TensorSpec, computation: str) -> None:
        """StableHLO's ``and`` / ``or`` take integer (bitwise) or boolean
        operands only (spec: and, or); the runtime reduces with numpy's
        bitwise_and / bitwise_or, which have no float loop."""
        if computation in ("and", "or") and s.dtype not in ("int32", "int64", "bool"):
            raise ShapeError(f"{cls.name} applies {computation} to integer or boolean tensors only, got {s}")
        if computation in ("max", "min") and s.dtype == "complex64":
            raise ShapeError(f"{cls.name} applies {computation}, which does not support dtype complex64 (not ordered)")


@irdl_op_definition
class AllReduceOp(CollectiveOp):
    """Every process of a group gets the reduction of the group's operands
    (StableHLO spec: all_reduce)."""

    name = "ccl.all_reduce"
    T: ClassVar = VarConstraint("T", base(TensorType))
    operand = operand_def(T)
    result = result_def(T)
    computation = prop_def(ReductionKindAttr)
    traits = traits_def(Pure())
    assembly_format = (
        "$operand `applies` $computation `groups` `=` $replica_groups (`channel` $channel_id^)?"
        " attr-dict `:` type($result)"
    )
    PARAMS: ClassVar = {
        "replica_groups": GroupsParam(),
        "computation": EnumParam(ReductionKindAttr),
        "channel_id": IntParam(),
    }

    @classmethod
    def infer(cls, specs, replica_groups=None, computation="add", **_):
        s = cls._operand(specs)
        cls._reduction(s, computation)
        cls._groups(replica_groups)
        return [s]

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, replica_groups=None, computation="add", **params):
        """Every process's operand feeds every process's result: the cotangent
        is the all_reduce sum of the cotangents (TF's _cross_replica_sum_grad),
        for max/min shared between the processes that hold the result, for mul
        times the product of the other processes' operands (TF's _MaxGrad /
        _ProdGrad across processes); and/or have none."""
        (ct,), (x,), (y,) = cotangents, inputs, outputs
        if not G.is_float(x) or computation not in _DIFFERENTIABLE:
            return [None]
        return [_reduction_vjp(x, y, _all_reduce(ct, replica_groups), computation, replica_groups)]


_DIFFERENTIABLE = ("add", "max", "min", "mul")


def _reduction_vjp(x, y, ct_total, computation, replica_groups):
    """The cotangent of one process's operand of a reduction over its group:
    ``y`` is the whole reduction and ``ct_total`` the sum over the group of
    the cotangents of ``y``, both shaped like ``x``."""
    if computation == "add":
        return ct_total
    if computation in ("max", "min"):
        ind = G.convert(G.compare(x, y, "EQ"), G.dtype(x))
        return G.mul(ind, G.div(ct_total, _all_reduce(ind, replica_groups)))
    others = G.product_of_others(
        x,
        lambda v: G.bind1(AllReduceOp, [v], replica_groups=replica_groups, computation="mul"),
        lambda v: _all_reduce(v, replica_groups),
    )
    return G.mul(ct_total, others)


def _all_reduce(x, replica_groups):
    return G.bind1(AllReduceOp, [x], replica_groups=replica_groups, computation="add")


@irdl_op_definition
class AllGatherOp(CollectiveOp):
    """Concatenate the group's operands along ``all_gather_dim``, in group
    order (StableHLO spec: all_gather)."""

    name = "ccl.all_gather"
    all_gather_dim = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())
    assembly_format = (
        "$operand `dim` `=` $all_gather_dim `groups` `=` $replica_groups (`channel` $channel_id^)?"
        " attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {"replica_groups": GroupsParam(), "all_gather_dim": IntParam(), "channel_id": IntParam()}

    @classmethod
    def infer(cls, specs, replica_groups=None, all_gather_dim=0, **_):
        s = cls._operand(specs)
        g = cls._groups(replica_groups)
        if not 0 <= all_gather_dim < s.rank:
            raise ShapeError(f"all_gather_dim {all_gather_dim} out of range for {s}")
        shape = list(s.shape)
        shape[all_gather_dim] *= g
        return [TensorSpec(tuple(shape), s.dtype)]

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, replica_groups=None, all_gather_dim=0, **params):
        """Process ``i`` of a group gets the sum over the group of block ``i``
        of the cotangents: ``reduce_scatter`` add along the gathered dimension
        (JAX's _all_gather_transpose_rule)."""
        (ct,), (x,) = cotangents, inputs
        if not G.is_float(x):
            return [None]
        return [
            G.bind1(
                ReduceScatterOp,
                [ct],
                replica_groups=replica_groups,
                scatter_dimension=all_gather_dim,
                computation="add",
            )
        ]


@irdl_op_definition
class ReduceScatterOp(CollectiveOp):
    """Reduce over the group, then process ``i`` of the group keeps block
    ``i`` of ``scatter_dimension`` (StableHLO spec: reduce_scatter)."""

    name = "ccl.reduce_scatter"
    scatter_dimension = prop_def(IntegerAttr[I64])
    computation = prop_def(ReductionKindAttr)
    traits = traits_def(Pure())
    assembly_format = (
        "$operand `applies` $computation `dim` `=` $scatter_dimension `groups` `=` $replica_groups"
        " (`channel` $channel_id^)? attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {
        "replica_groups": GroupsParam(),
        "scatter_dimension": IntParam(),
        "computation": EnumParam(ReductionKindAttr),
        "channel_id": IntParam(),
    }

    @classmethod
    def infer(cls, specs, replica_groups=None, scatter_dimension=0, computation="add", **_):
        s = cls._operand(specs)
        cls._reduction(s, computation)
        g = cls._groups(replica_groups)
        if not 0 <= scatter_dimension < s.rank:
            raise ShapeError(f"scatter_dimension {scatter_dimension} out of range for {s}")
        if s.shape[scatter_dimension] % g:
            raise ShapeError(f"dimension {scatter_dimension} of {s} does not divide into {g} blocks")
        shape = list(s.shape)
        shape[scatter_dimension] //= g
        return [TensorSpec(tuple(shape), s.dtype)]

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, replica_groups=None, scatter_dimension=0, computation="add", **params):
        """add: every process's operand feeds every block, so it gets all the
        blocks' cotangents, ``all_gather`` along the scattered dimension (JAX's
        _reduce_scatter_transpose_rule); max/min/mul as ``ccl.all_reduce``'s
        rule on the gathered result and cotangents; and/or have none."""
        (ct,), (x,), (y,) = cotangents, inputs, outputs
        if not G.is_float(x) or computation not in _DIFFERENTIABLE:
            return [None]

        def gather(v):
            return G.bind1(AllGatherOp, [v], replica_groups=replica_groups, all_gather_dim=scatter_dimension)

        whole = gather(y) if computation != "add" else None
        return [_reduction_vjp(x, whole, gather(ct), computation, replica_groups)]


@irdl_op_definition
class AllToAllOp(CollectiveOp):
    """Split along ``split_dimension`` into one block per process of the
    group, exchange, and concatenate the received blocks along
    ``concat_dimension`` (StableHLO spec: all_to_all)."""

    name = "ccl.all_to_all"
    split_dimension = prop_def(IntegerAttr[I64])
    concat_dimension = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure())
    assembly_format = (
        "$operand `split` `=` $split_dimension `concat` `=` $concat_dimension `groups` `=` $replica_groups"
        " (`channel` $channel_id^)? attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {
        "replica_groups": GroupsParam(),
        "split_dimension": IntParam(),
        "concat_dimension": IntParam(),
        "channel_id": IntParam(),
    }

    @classmethod
    def infer(cls, specs, replica_groups=None, split_dimension=0, concat_dimension=0, **_):
        s = cls._operand(specs)
        g = cls._groups(replica_groups)
        for what, d in (("split_dimension", split_dimension), ("concat_dimension", concat_dimension)):
            if not 0 <= d < s.rank:
                raise ShapeError(f"{what} {d} out of range for {s}")
        if s.shape[split_dimension] % g:
            raise ShapeError(f"dimension {split_dimension} of {s} does not divide into {g} blocks")
        shape = list(s.shape)
        shape[split_dimension] //= g
        shape[concat_dimension] *= g
        return [TensorSpec(tuple(shape), s.dtype)]

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, replica_groups=None, split_dimension=0, concat_dimension=0, **params):
        """The inverse exchange: ``all_to_all`` of the cotangent with split and
        concat dimensions swapped (TF's _all_to_all_grad)."""
        (ct,), (x,) = cotangents, inputs
        if not G.is_float(x):
            return [None]
        return [
            G.bind1(
                AllToAllOp,
                [ct],
                replica_groups=replica_groups,
                split_dimension=concat_dimension,
                concat_dimension=split_dimension,
            )
        ]


@irdl_op_definition
class CollectivePermuteOp(PrimitiveOp):
    """Send the operand from each source to its target; a process that is no
    pair's target gets zeros (StableHLO spec: collective_permute)."""

    name = "ccl.collective_permute"
    T: ClassVar = VarConstraint("T", base(TensorType))
    operand = operand_def(T)
    source_target_pairs = prop_def(DenseIntOrFPElementsAttr)
    channel_id = opt_prop_def(IntegerAttr[I64])
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$operand `pairs` `=` $source_target_pairs (`channel` $channel_id^)? attr-dict `:` type($result)"
    PARAMS: ClassVar = {"source_target_pairs": PairsParam(), "channel_id": IntParam()}

    def verify_(self) -> None:
        _verify_ids(self, "source_target_pairs", pairs=True)

    @classmethod
    def infer(cls, specs, source_target_pairs=(), **_):
        (s,) = specs
        pairs = [tuple(p) for p in source_target_pairs]
        if any(len(p) != 2 for p in pairs):
            raise ShapeError(f"source_target_pairs {pairs} must be pairs")
        for i in (0, 1):
            ids = [p[i] for p in pairs]
            if len(set(ids)) != len(ids):
                what = "source" if i == 0 else "target"
                raise ShapeError(f"source_target_pairs {pairs} repeat a {what}")
        return [s]

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, source_target_pairs=(), **params):
        """Each target's cotangent goes back to its source: ``collective_permute``
        with the pairs reversed; a process that is no source gets zeros (TF's
        _collective_permute_grad)."""
        (ct,), (x,) = cotangents, inputs
        if not G.is_float(x):
            return [None]
        pairs = tuple((t, s) for s, t in source_target_pairs)
        return [G.bind1(CollectivePermuteOp, [ct], source_target_pairs=pairs)]


CCL_OPS = [AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp, CollectivePermuteOp]

#: Every collective op class (for ``isinstance``): what runs on every replica
#: of a group at once.
COLLECTIVES = tuple(CCL_OPS)

CCL = Dialect("ccl", CCL_OPS, [])
