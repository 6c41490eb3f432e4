"""``tpu-mark-outside-compilation``: soft placement of host-only ops.

Semantics follow TensorFlow's soft placement for TPU computations, as the MLIR
bridge implements it in ``mark-ops-for-outside-compilation``
(``tensorflow/compiler/mlir/tensorflow/transforms/mark_ops_for_outside_compilation.cc``,
tests in ``tests/mark_ops_for_outside_compilation.mlir``): an op the device
cannot run (a string op, ``tf.Print``, summaries) that the user left in the
TPU computation is placed on the host, in an outside-compilation cluster of its
own named ``auto0``, ``auto1``, ... .  With soft placement disabled
(``tf.config.set_soft_device_placement(False)``) such an op is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.rewriter import InsertPoint
from xdsl.traits import IsTerminator
from xdsl.utils.exceptions import DiagnosticException

from xtpu.dialects.hlo import ConstantOp
from xtpu.dialects.hlo_host import StringConstantOp
from xtpu.dialects.ir_walk import has_trait, isa
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.tpu import OutsideCompilationOp, ReplicateOp, YieldOp
from xtpu.passes._common import (
    at,
    defined_inside,
    dissolve_clusters,
    enclosing,
    has_string_values,
    in_cluster,
    is_string,
    walk_ops,
)

AUTO_PREFIX = "auto"
"""Prefix of the clusters this pass creates (TF's MLIR bridge names)."""

_CONSTANTS = (ConstantOp, StringConstantOp)


def _is_constant(op: Operation) -> bool:
    return isa(op, _CONSTANTS)


def host_reason(op: Operation) -> str | None:
    """Why ``op`` cannot run on the device, or None if it can.

    Constants are not host ops here: ``tpu-outline-outside-compilation`` copies
    them into every cluster that uses them, so they never need a cluster of
    their own.
    """
    if _is_constant(op) or isa(op, (OutsideCompilationOp, ReplicateOp)):
        return None
    if has_trait(op, IsTerminator):
        return None
    if has_string_values(op):
        return "it has string values"
    if op.regions and _uses_captured_string(op):
        # TF's if_region_captured_string / while_region_captured_string: the
        # device cannot hold the string, so the control flow goes to the host
        # whole (its branches or body run there).
        return "its regions use a string value defined outside it"
    if isa(op, PrimitiveOp) and op.HOST_ONLY:
        return "it is a host-only op"
    return None


def _uses_captured_string(op: Operation) -> bool:
    """Whether device code in ``op``'s regions (outside any cluster) uses a
    string defined outside ``op``; clusters in the regions already read such
    strings on the host."""
    for region in op.regions:
        for inner in region.walk():
            if in_cluster(inner):
                continue
            if any(is_string(v.type) and not defined_inside(v, op) for v in inner.operands):
                return True
    return False


def _on_device(op: Operation) -> bool:
    """Inside a device tpu.replicate body (also inside its hlo.if / hlo.while
    regions) and outside any outside_compilation; a host replicate
    (``placement = "host"``) runs on the host already."""
    if enclosing(op, OutsideCompilationOp) is not None:
        return False
    rep = enclosing(op, ReplicateOp)
    return rep is not None and not rep.on_host


def _has_host_op_on_device(ops: list[Operation]) -> bool:
    """Whether some op of ``ops`` (a module's, in walk order) would move
    (what ``WrapHostOps`` matches), asking :func:`_on_device` once per block (ops of a block share their
    ancestors), so a program with nothing to move costs no rewrite."""
    on_device: dict[Block, bool] = {}
    for o in ops:
        block = o.parent_block()
        here = on_device.get(block)  # type: ignore[arg-type]
        if here is None:
            here = on_device[block] = _on_device(o)  # type: ignore[index]
        if here and host_reason(o) is not None:
            return True
    return False


@dataclass
class _ClusterNames:
    """Hands out ``auto0``, ``auto1``, ... skipping names already in use."""

    taken: set[str]
    counter: int = 0

    def next(self) -> str:
        while f"{AUTO_PREFIX}{self.counter}" in self.taken:
            self.counter += 1
        name = f"{AUTO_PREFIX}{self.counter}"
        self.taken.add(name)
        self.counter += 1
        return name


@dataclass
class WrapHostOps(RewritePattern):
    """Move the maximal run of host ops around a matched host op into a new
    ``tpu.outside_compilation "autoK"`` and yield what later ops use."""

    names: _ClusterNames

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        # _on_device first: it is cheap, and spares host_reason's walk of a
        # func.func's whole body for captured strings.
        if not _on_device(op) or host_reason(op) is None:
            return
        run = _host_run(op)
        last = run[-1]
        in_run = set(run)
        block = op.parent_block()
        assert block is not None

        def used_after(v: SSAValue) -> bool:
            for use in v.uses:
                anchor = block.find_ancestor_op_in_block(use.operation)
                if anchor not in in_run:
                    return True
            return False

        yielded = [r for o in run for r in o.results if used_after(r)]
        body = Block()
        cluster = OutsideCompilationOp.create(
            result_types=[v.type for v in yielded],
            properties={"cluster": StringAttr(self.names.next())},
            regions=[Region(body)],
        )
        cluster.location = run[0].location
        rewriter.insert(cluster, InsertPoint.after(last))
        for o in run:
            o.detach()
            body.add_op(o)
        body.add_op(YieldOp.make(yielded))
        for v, r in zip(yielded, cluster.results, strict=True):
            r.name_hint = v.name_hint
            rewriter.replace_uses_with_if(v, r, lambda use: not cluster.is_ancestor(use.operation))


def _host_run(op: Operation) -> list[Operation]:
    """The host ops of the maximal run around ``op`` in its block.

    A run is a sequence of host ops that no device op interrupts; constants
    may sit between them (they stay where they are, before the cluster).
    """
    first = last = op
    cur = op.prev_op
    while cur is not None and (_is_constant(cur) or host_reason(cur) is not None):
        if not _is_constant(cur):
            first = cur
        cur = cur.prev_op
    cur = op.next_op
    while cur is not None and (_is_constant(cur) or host_reason(cur) is not None):
        if not _is_constant(cur):
            last = cur
        cur = cur.next_op
    run: list[Operation] = []
    cur = first
    while True:
        assert cur is not None
        if not _is_constant(cur):
            run.append(cur)
        if cur is last:
            return run
        cur = cur.next_op


@dataclass(frozen=True)
class MarkOutsideCompilation(ModulePass):
    """Place the device ops that only the host can run in host clusters.

    Inside a device ``tpu.replicate`` body, also in the regions of its
    ``hlo.if`` / ``hlo.while`` ops, outside every ``tpu.outside_compilation``,
    each op whose class is ``HOST_ONLY`` or that has an operand or result of
    type ``!hlo.string`` moves into a new ``tpu.outside_compilation`` cluster
    named ``auto0``, ``auto1``, ... (names in use are skipped).  A cluster in
    a region stays in that region, so it runs on the host exactly when the
    region runs; an ``hlo.if`` / ``hlo.while`` that has string values itself,
    or whose regions use a string defined outside it (captured, TF's
    ``if_region_captured_string`` / ``while_region_captured_string``), moves
    as a whole (host control flow); the ``tpu.outside_compilation``
    clusters in its regions are dissolved into it (their ops run in place,
    on the host with the rest: TF flattens outside compilation nested in
    host code).  A host replicate (``placement = "host"``) is left alone.  A maximal run
    of such ops in one block (no device op between them) shares one cluster;
    the values it defines that later ops use become the cluster's results.
    Constants never start or split a run: the outlining pass copies them to
    the host.  TF: soft placement; MLIR bridge pass
    ``mark-ops-for-outside-compilation``.

    Options:
      allow_soft_placement: when False, the first such op is an error that
        names it and its source line instead.
    """

    name = "tpu-mark-outside-compilation"

    allow_soft_placement: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.allow_soft_placement:
            for inner in op.walk():
                reason = host_reason(inner)
                if reason is not None and _on_device(inner):
                    raise DiagnosticException(
                        f"'{inner.name}' op cannot run on the device{at(inner)}: {reason}; "
                        "place it in outside_compilation or allow soft placement"
                    )
            return
        ops = walk_ops(op)
        if _has_host_op_on_device(ops):
            taken = {c.cluster.data for c in ops if isa(c, OutsideCompilationOp)}
            pattern = WrapHostOps(_ClusterNames(taken))
            PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)
            ops = walk_ops(op)
        # Clusters in control flow that moved whole run on the host already.
        clusters = [c for c in ops if isa(c, OutsideCompilationOp)]
        outer = [c for c in clusters if enclosing(c, OutsideCompilationOp) is None]
        for cluster in outer:
            dissolve_clusters(cluster)
