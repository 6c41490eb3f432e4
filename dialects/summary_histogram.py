"""``hlo.summary_histogram``: a histogram summary written on the host (TF 2's
``tf.summary.histogram`` with a file writer for ``logdir`` as the default
writer), through the same per-directory TensorBoard writers as
``hlo.summary_scalar`` (:mod:`xtpu.dialects.summaries`).

Host-only with side effects, so ``tpu-mark-outside-compilation`` moves it to
the host like the other summary; with a ``replica_id`` operand only replica 0
writes (TF records summaries on replica 0 only, see :mod:`xtpu.summary`).
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import I64, IntegerAttr, StringAttr, TensorType
from xdsl.irdl import irdl_op_definition, operand_def, opt_operand_def, opt_prop_def, prop_def

from xtpu.dialects import summaries as _summaries
from xtpu.dialects.hlo import NUMERIC
from xtpu.dialects.primitive import IntParam, PrimitiveOp, ShapeError, StrParam
from xtpu.dialects.tensor_spec import TensorSpec

STEP_DTYPES = ("int64", "int32")

#: TF 2's ``tf.summary.histogram`` default bucket count (``DEFAULT_BUCKET_COUNT``).
DEFAULT_BUCKETS = 30


@irdl_op_definition
class SummaryHistogramOp(PrimitiveOp):
    """Write the distribution of ``data`` under ``tag`` at ``step``.

    Operands:
      data: a numeric tensor of any shape (float32, float64, int32, int64).
      step: an int64 (or int32) scalar.
      replica_id: optional int32 scalar; when present only replica 0 writes.

    Properties: ``tag``, ``logdir`` (non-empty strings), ``buckets`` (a
    positive count of equal-width buckets between the data's min and max, as
    TF 2's histogram summary), optional ``description``.  No results.
    """

    name = "hlo.summary_histogram"
    data = operand_def(TensorType)
    step = operand_def(TensorType)
    replica_id = opt_operand_def(TensorType)
    tag = prop_def(StringAttr)
    logdir = prop_def(StringAttr)
    buckets = prop_def(IntegerAttr[I64])
    description = opt_prop_def(StringAttr)
    assembly_format = (
        "$tag `=` $data `at` `step` $step (`if` `replica` $replica_id^ `is` `zero`)? `to` $logdir `buckets` $buckets"
        " (`description` $description^)? attr-dict `:` type($data) `,` type($step) (`,` type($replica_id)^)?"
    )
    PARAMS: ClassVar = {"tag": StrParam(), "logdir": StrParam(), "buckets": IntParam(), "description": StrParam()}
    HOST_ONLY: ClassVar = True
    SIDE_EFFECTS: ClassVar = True
    NOT_DIFFERENTIABLE: ClassVar = True  # no results (TF: WriteHistogramSummary)

    @classmethod
    def infer(cls, specs, tag="", logdir="", buckets=DEFAULT_BUCKETS, **_):
        if len(specs) not in (2, 3):
            raise ShapeError(
                f"hlo.summary_histogram takes data, step and an optional replica id, got {len(specs)} operands"
            )
        if specs[0].dtype not in NUMERIC:
            raise ShapeError(f"hlo.summary_histogram data must have dtype {', '.join(NUMERIC)}, got {specs[0]}")
        step = specs[1]
        if step.shape != () or step.dtype not in STEP_DTYPES:
            raise ShapeError(f"hlo.summary_histogram step must be an int64 or int32 scalar, got {step}")
        if len(specs) == 3 and specs[2] != TensorSpec((), "int32"):
            raise ShapeError(f"hlo.summary_histogram replica id must be an int32 scalar, got {specs[2]}")
        if not tag:
            raise ShapeError("hlo.summary_histogram tag must not be empty")
        if not logdir:
            raise ShapeError("hlo.summary_histogram logdir must not be empty")
        if buckets is None or int(buckets) < 1:
            raise ShapeError(f"hlo.summary_histogram buckets must be positive, got {buckets}")
        return []

    @classmethod
    def kernel(cls, tag, logdir, buckets=DEFAULT_BUCKETS, description=None, **_):
        def run(data, step, replica_id=None):
            if replica_id is None or int(replica_id) == 0:
                _summaries.write_histogram(logdir, tag, data, int(step), int(buckets), description)

        return run


SUMMARY_HISTOGRAM_OPS = [SummaryHistogramOp]
