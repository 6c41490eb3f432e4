"""``ccl-decompose-all-reduce``: a large all-reduce as reduce-scatter +
all-gather.

The two halves of the bandwidth-optimal (ring) all-reduce made explicit, as
XLA's ``AllReduceReassociate`` / ``ReduceScatterCreator`` family and JAX's
``psum_scatter`` + ``all_gather`` do: each of the ``S`` members of a group
reduces only ``1/S`` of the buffer, then the reduced blocks are gathered.  A
backend whose all-reduce moves the whole buffer to every member gains; one
that reduces once and shares the result (xtpu's threads backend) does not,
which is why the pass is not in the default pipeline (benchmarks/
all_reduce_passes.py measures it).  The reduction is elementwise and done in
the same order, so results equal the all-reduce's bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from xtpu.dialects import hlo
from xtpu.dialects.ccl import AllGatherOp, AllReduceOp, ReduceScatterOp
from xtpu.dialects.tensor_spec import numpy_dtype
from xtpu.passes.combine_all_reduce import all_reduce_spec, nbytes

DEFAULT_THRESHOLD_BYTES = 1024 * 1024


@dataclass
class _Decompose(RewritePattern):
    threshold: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: AllReduceOp, rewriter: PatternRewriter, /) -> None:
        spec = all_reduce_spec(op)
        p = op.params()
        groups = p["replica_groups"]
        size = len(groups[0]) if groups else 1
        if spec is None or size < 2 or nbytes(spec) < self.threshold:
            return
        new: list[Operation] = []
        n = spec.size
        flat: SSAValue = op.operand
        if spec.shape != (n,):
            new.append(hlo.ReshapeOp.make([flat], shape=(n,)))
            flat = new[-1].results[0]
        pad = -n % size
        if pad:
            # Padding elements are reduced and gathered, then sliced away:
            # their value does not matter.
            zeros = hlo.ConstantOp.make([], value=np.zeros((pad,), numpy_dtype(spec.dtype)))
            new += [zeros, hlo.ConcatenateOp.make([flat, zeros.results[0]], dimension=0)]
            flat = new[-1].results[0]
        rs = ReduceScatterOp.make(
            [flat], replica_groups=groups, scatter_dimension=0, computation=p["computation"], channel_id=p["channel_id"]
        )
        ag = AllGatherOp.make([rs.results[0]], replica_groups=groups, all_gather_dim=0)
        rs.location = ag.location = op.location
        new += [rs, ag]
        out = ag.results[0]
        if pad:
            new.append(hlo.SliceOp.make([out], start_indices=(0,), limit_indices=(n,), strides=(1,)))
            out = new[-1].results[0]
        if spec.shape != (n,):
            new.append(hlo.ReshapeOp.make([out], shape=spec.shape))
            out = new[-1].results[0]
        rewriter.replace(op, new, [out])


@dataclass(frozen=True)
class DecomposeAllReduce(ModulePass):
    """Rewrite each ``ccl.all_reduce`` of at least ``threshold_bytes`` over
    groups of two or more as ``ccl.reduce_scatter`` + ``ccl.all_gather``
    along its flattened operand (XLA / JAX: an all-reduce is a reduce-scatter
    followed by an all-gather, TF's ``xla::ReduceScatter`` and
    ``xla::AllGather`` builders; StableHLO spec of the three ops).

    The operand is reshaped to 1-D, padded with zeros to a multiple of the
    group size ``S``, reduce-scattered (the original channel id), gathered,
    sliced back to its size and reshaped to its shape.  Empty or string
    tensors, single-member groups and all-reduces of a replica split over
    logical cores before ``tpu-spmd-partition`` are left alone.

    Options:
      threshold_bytes: the smallest operand (in bytes) to decompose; must be
        positive.
    """

    name = "ccl-decompose-all-reduce"

    threshold_bytes: int = DEFAULT_THRESHOLD_BYTES

    def __post_init__(self) -> None:
        if self.threshold_bytes <= 0:
            raise ValueError(f"threshold-bytes must be positive, got {self.threshold_bytes}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(_Decompose(self.threshold_bytes), apply_recursively=False).rewrite_module(op)
