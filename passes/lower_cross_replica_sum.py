"""``tpu-lower-cross-replica-sum``: ``tpu.cross_replica_sum`` to ``ccl.all_reduce``.

Semantics follow ``tf.compat.v1.tpu.cross_replica_sum``
(``tensorflow/python/tpu/ops/tpu_ops.py``: sum over all replicas, or within
each group of ``group_assignment``) and its lowering by TF's XLA bridge: the
``CrossReplicaSum`` kernel (``tensorflow/compiler/tf2xla/kernels/cross_replica_sum_op.cc``)
emits ``xla::CrossReplicaSum`` with the replica groups, which is StableHLO's
``all_reduce`` with an ``add`` body (``tensorflow/compiler/mlir/tf2xla/transforms/legalize_tf_collective.cc``
gives each collective its own ``channel_handle``).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import DiagnosticException

from xtpu.dialects.ccl import AllReduceOp
from xtpu.dialects.ir_walk import isa
from xtpu.dialects.tpu import (
    CLUSTER_ATTR,
    CrossReplicaSumOp,
    OutsideCompilationOp,
    ReplicateOp,
    check_group_assignment,
)
from xtpu.passes._common import at, enclosing, walk_ops

Groups = tuple[tuple[int, ...], ...]


def _host_cluster(op: Operation) -> str | None:
    """The outside-compilation cluster ``op`` runs in on the host, if any:
    inside a ``tpu.outside_compilation`` or in an outlined host function."""
    if (oc := enclosing(op, OutsideCompilationOp)) is not None:
        return oc.cluster.data
    func = enclosing(op, FuncOp)
    if func is not None and isinstance(attr := func.attributes.get(CLUSTER_ATTR), StringAttr):
        return attr.data
    return None


def _where(op: Operation) -> str:
    """The op and the user's line, for a diagnostic (formatted only then)."""
    return f"'{op.name}' op{at(op)}"


def _plan(module: ModuleOp) -> dict[CrossReplicaSumOp, tuple[Groups, int]]:
    """Replica groups and channel id of every cross_replica_sum, in walk
    order; raises the pass's diagnostics before anything changes."""
    ops = list(walk_ops(module))
    used = [int(ch.value.data) for op in ops if isa(ch := op.properties.get("channel_id"), IntegerAttr)]
    channel = max(used, default=0)
    plan: dict[CrossReplicaSumOp, tuple[Groups, int]] = {}
    for op in ops:
        if not isa(op, CrossReplicaSumOp):
            continue
        cluster = _host_cluster(op)
        if cluster is not None:
            raise DiagnosticException(
                f"{_where(op)} is in outside_compilation cluster '{cluster}', which runs on the "
                "host; cross_replica_sum can only run on the device"
            )
        replicate = enclosing(op, ReplicateOp)
        if replicate is None:
            raise DiagnosticException(
                f"{_where(op)} is not inside a tpu.replicate; cross_replica_sum sums over "
                "the replicas of its enclosing replicate"
            )
        n = replicate.num_replicas
        groups = op.params()["group_assignment"]
        if groups is None:
            groups = (tuple(range(n)),)
        try:
            check_group_assignment(groups, n)
        except ValueError as e:
            raise DiagnosticException(
                f"{_where(op)} has an invalid group_assignment for a tpu.replicate of {n} replicas: {e}"
            ) from None
        channel += 1
        # With C logical cores per replica the all-reduce runs between the
        # participants r * C + c: one group per replica group and core
        # (docs/logical-devices.md).
        cores = replicate.num_cores
        plan[op] = (
            tuple(tuple(g * cores + c for g in group) for group in groups for c in range(cores)),
            channel,
        )
    return plan


def _lower(op: CrossReplicaSumOp, groups: Groups, channel: int) -> None:
    """``tpu.cross_replica_sum %x`` -> ``ccl.all_reduce %x applies add``,
    in place (the plan names every op: no pattern walk over the module)."""
    new = AllReduceOp.make([op.operand], replica_groups=groups, computation="add", channel_id=channel)
    new.location = op.location
    Rewriter.replace_op(op, new)


@dataclass(frozen=True)
class LowerCrossReplicaSum(ModulePass):
    """Lower ``tpu.cross_replica_sum`` to ``ccl.all_reduce ... applies add``.

    The replica groups are the op's ``group_assignment`` or, without one, a
    single group of all ``n`` replicas of the enclosing ``tpu.replicate``;
    they must cover each replica exactly once
    (:func:`xtpu.dialects.tpu.check_group_assignment`).  When the replicate
    has ``num_cores_per_replica = C > 1`` the sum is per logical core, over
    participants ``r * C + c``: the groups are
    ``[[g * C + c for g in group] for group in groups for c in range(C)]``.  Each all-reduce gets
    its own ``channel_id``: 1, 2, ... in walk order, after the largest
    channel id already in the module.  A cross_replica_sum outside a
    replicate or inside an outside-compilation cluster is an error.
    TF: ``tf.compat.v1.tpu.cross_replica_sum``, lowered by tf2xla to
    ``xla::CrossReplicaSum`` (StableHLO ``all_reduce``).
    """

    name = "tpu-lower-cross-replica-sum"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for crs, (groups, channel) in _plan(op).items():
            _lower(crs, groups, channel)
