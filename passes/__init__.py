"""xtpu's compiler passes, one ``ModulePass`` per module, registered by name.

``xtpu-opt`` registers :data:`ALL_PASSES`; :data:`DEFAULT_PIPELINE` is the
order in which the compiler runs them on a traced module.
"""

from xdsl.passes import ModulePass

from xtpu.passes.batch_replicas import BatchReplicas
from xtpu.passes.canonicalize import Canonicalize
from xtpu.passes.combine_all_reduce import CombineAllReduce
from xtpu.passes.decompose_all_reduce import DecomposeAllReduce
from xtpu.passes.extract_head_tail_outside_compilation import ExtractHeadTailOutsideCompilation
from xtpu.passes.fold_host_constants import FoldHostConstants
from xtpu.passes.fuse_elementwise import FuseElementwise
from xtpu.passes.lower_cross_replica_sum import LowerCrossReplicaSum
from xtpu.passes.mark_outside_compilation import MarkOutsideCompilation
from xtpu.passes.outline_outside_compilation import OutlineOutsideCompilation
from xtpu.passes.pad_dynamic_shapes import PadDynamicShapes
from xtpu.passes.propagate_sharding import PropagateSharding
from xtpu.passes.spmd_partition import SpmdPartition

ALL_PASSES: dict[str, type[ModulePass]] = {
    p.name: p
    for p in (
        PadDynamicShapes,
        FoldHostConstants,
        Canonicalize,
        MarkOutsideCompilation,
        ExtractHeadTailOutsideCompilation,
        OutlineOutsideCompilation,
        LowerCrossReplicaSum,
        PropagateSharding,
        SpmdPartition,
        CombineAllReduce,
        DecomposeAllReduce,
        FuseElementwise,
        BatchReplicas,
    )
}

DEFAULT_PIPELINE: tuple[str, ...] = (
    "tpu-pad-dynamic-shapes",
    # TF's bridge simplifies before it marks and extracts outside compilation
    # (tf-replicated-clustering-bridge-v2: canonicalize, cse, then
    # mark-ops-for-outside-compilation, extract-head-tail-outside-compilation).
    "tpu-fold-host-constants",
    "hlo-canonicalize",
    "tpu-mark-outside-compilation",
    "tpu-extract-head-tail-outside-compilation",
    "tpu-outline-outside-compilation",
    "tpu-lower-cross-replica-sum",
    "ccl-combine-all-reduce",
)

SPMD_PIPELINE: tuple[str, ...] = ("tpu-propagate-sharding", "tpu-spmd-partition")
"""Appended to DEFAULT_PIPELINE when a replica has several logical cores
(docs/logical-devices.md)."""

FUSION_PIPELINE: tuple[str, ...] = ("hlo-fuse-elementwise",)
"""Appended last, after the SPMD passes: fusion regions are what the runtime
runs, and no pass after it needs to look into them."""

OPTIONAL_PASSES: tuple[str, ...] = ("ccl-decompose-all-reduce", "tpu-batch-replicas")
"""Registered, in no default pipeline: ``benchmarks/all_reduce_passes.py``
shows no gain from the first on the threads backend; the second shows the
rewrite the runtime applies itself, per block size, to a thread's block of
replicas (runtime/batching.py)."""

__all__ = [
    "ALL_PASSES",
    "BatchReplicas",
    "Canonicalize",
    "CombineAllReduce",
    "DecomposeAllReduce",
    "DEFAULT_PIPELINE",
    "FUSION_PIPELINE",
    "SPMD_PIPELINE",
    "OPTIONAL_PASSES",
    "ExtractHeadTailOutsideCompilation",
    "FoldHostConstants",
    "FuseElementwise",
    "LowerCrossReplicaSum",
    "MarkOutsideCompilation",
    "OutlineOutsideCompilation",
    "PadDynamicShapes",
    "PropagateSharding",
    "SpmdPartition",
]
