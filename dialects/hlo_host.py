"""Host-only ``hlo`` ops: strings, printing and summaries (a device cannot
run them).

``hlo.string_constant``, ``hlo.string_format``, ``hlo.string_to_number``,
``hlo.print`` and ``hlo.summary_scalar`` follow TF's ``tf.constant`` of
``tf.string``, ``tf.strings.format``, ``tf.strings.to_number``, ``tf.print``
and ``tf.summary.scalar``.  Their ``HOST_ONLY`` flag is what
``tpu-mark-outside-compilation`` reads.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import I64, ArrayAttr, IntegerAttr, StringAttr, TensorType
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure

from xtpu.dialects import strings as _strings
from xtpu.dialects import summaries as _summaries
from xtpu.dialects.hlo import NUMERIC, _require_dtype
from xtpu.dialects.primitive import IntParam, Param, PrimitiveOp, ShapeError, StrParam
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype


class StringArray(Param):
    def encode(self, value):
        arr = np.asarray(value, dtype=object)
        return ArrayAttr([StringAttr(str(s)) for s in arr.reshape(-1)])

    def decode(self, attr):
        return [s.data for s in attr.data]


@irdl_op_definition
class StringConstantOp(PrimitiveOp):
    """A constant tensor of strings (host only; TF's ``tf.constant`` of
    ``tf.string``).  ``value`` lists the elements in row-major order."""

    name = "hlo.string_constant"
    value = prop_def(ArrayAttr[StringAttr])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict `:` type($result)"
    PARAMS: ClassVar = {"value": StringArray()}
    HOST_ONLY: ClassVar = True
    NOT_DIFFERENTIABLE: ClassVar = True  # strings, no inputs

    def result_params(self):
        return {"shape": TensorSpec.of_type(self.result.type).shape}

    @classmethod
    def make(cls, operands, value=None, shape=None, **params):
        # ``shape`` (from :meth:`params`, whose ``value`` is the flat list)
        # keeps a scalar a scalar when a pass rebuilds the op
        arr = np.asarray(value, dtype=object)
        if shape is not None:
            arr = arr.reshape(tuple(shape))
        return cls.create_op([], [TensorSpec(arr.shape, "string").to_type()], {"value": arr})

    @classmethod
    def infer(cls, specs, value=None, shape=None, **_):
        if shape is None:
            shape = np.asarray(value, dtype=object).shape
        n = int(np.prod(shape)) if shape else 1
        if len(np.asarray(value, dtype=object).reshape(-1)) != n:
            raise ShapeError(f"hlo.string_constant has {len(value)} elements for shape {list(shape)}")
        return [TensorSpec(tuple(shape), "string")]

    @classmethod
    def kernel(cls, value, shape=None, **_):
        arr = np.empty(len(value), dtype=object)
        arr[:] = value
        arr = arr.reshape(shape if shape is not None else np.shape(value))
        return lambda: arr


@irdl_op_definition
class StringFormatOp(PrimitiveOp):
    """Format tensors into a scalar string (TF's ``tf.strings.format``):
    each ``{}`` in ``template`` is replaced by the next input, tensors shown
    with at most ``summarize`` leading and trailing elements per dimension."""

    name = "hlo.string_format"
    inputs = var_operand_def(TensorType)
    template = prop_def(StringAttr)
    summarize = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = (
        "$template `(` $inputs `)` `summarize` `=` $summarize attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {"template": StrParam(), "summarize": IntParam()}
    HOST_ONLY: ClassVar = True
    NOT_DIFFERENTIABLE: ClassVar = True  # a string result (TF: StringFormat)

    @classmethod
    def infer(cls, specs, template="", summarize=3, **_):
        n = template.count("{}")
        if n != len(specs):
            raise ShapeError(f"template {template!r} has {n} placeholders but {len(specs)} inputs were given")
        return [TensorSpec((), "string")]

    @classmethod
    def kernel(cls, template, summarize=3, **_):
        def run(*xs):
            out = np.empty((), dtype=object)
            out[()] = _strings.format_template(template, xs, summarize)
            return out

        return run


@irdl_op_definition
class StringToNumberOp(PrimitiveOp):
    """Parse each string as a number (TF's ``tf.strings.to_number``); a string
    that is not a number raises ``ValueError`` naming it."""

    name = "hlo.string_to_number"
    operand = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"
    HOST_ONLY: ClassVar = True
    NOT_DIFFERENTIABLE: ClassVar = True  # a string input (TF: StringToNumber)

    def result_params(self):
        return {"out_type": TensorSpec.of_type(self.result.type).dtype}

    @classmethod
    def infer(cls, specs, out_type="float32", **_):
        (s,) = specs
        if s.dtype != "string":
            raise ShapeError(f"hlo.string_to_number expects a string tensor, got {s}")
        _require_dtype(TensorSpec(s.shape, out_type), NUMERIC, cls.name)
        return [TensorSpec(s.shape, out_type)]

    @classmethod
    def kernel(cls, out_type, **_):
        return lambda x: _strings.to_number(x, numpy_dtype(out_type))


@irdl_op_definition
class PrintOp(PrimitiveOp):
    """Print tensors (TF's ``tf.print``): inputs joined by ``sep`` and ended by
    ``end``, written to ``output_stream`` (``stdout``, ``stderr`` or
    ``file://PATH``, appended)."""

    name = "hlo.print"
    inputs = var_operand_def(TensorType)
    sep = prop_def(StringAttr)
    end = prop_def(StringAttr)
    output_stream = prop_def(StringAttr)
    summarize = prop_def(IntegerAttr[I64])
    assembly_format = (
        "`(` $inputs `)` `sep` `=` $sep `end` `=` $end `to` $output_stream `summarize` `=` $summarize"
        " attr-dict (`:` type($inputs)^)?"
    )
    PARAMS: ClassVar = {"sep": StrParam(), "end": StrParam(), "output_stream": StrParam(), "summarize": IntParam()}
    HOST_ONLY: ClassVar = True
    SIDE_EFFECTS: ClassVar = True
    NOT_DIFFERENTIABLE: ClassVar = True  # no results (TF: PrintV2)

    @classmethod
    def infer(cls, specs, output_stream="stdout", **_):
        _strings.check_stream(output_stream)
        return []

    @classmethod
    def kernel(cls, sep=" ", end="\n", output_stream="stdout", summarize=3, **_):
        def run(*xs):
            text = sep.join(_strings.format_value(x, summarize) for x in xs) + end
            _strings.write(output_stream, text)

        return run


STEP_DTYPES = ("int64", "int32")
"""Dtypes of a summary step (TF: an ``int64``-castable step)."""


@irdl_op_definition
class SummaryScalarOp(PrimitiveOp):
    """Write the scalar ``data`` under ``tag`` at ``step`` to the TensorBoard
    event files of ``logdir`` (TF 2's ``tf.summary.scalar`` with a file writer
    for ``logdir`` as the default writer).

    Operands:
      data: a numeric scalar (float32, float64, int32 or int64), stored as a
        float32 value as TF does.
      step: an int64 (or int32) scalar, the event's step.
      replica_id: optional int32 scalar, the id of the running replica; when
        present, only replica 0 writes (TF's ``ReplicaContext`` records
        summaries on replica 0 only, see :mod:`xtpu.summary`).

    Properties: ``tag`` and ``logdir`` (non-empty strings) and an optional
    ``description`` shown by TensorBoard.  No results.

    The kernel writes through the process-wide writer table of
    :mod:`xtpu.dialects.summaries` (one event file writer per directory).
    """

    name = "hlo.summary_scalar"
    data = operand_def(TensorType)
    step = operand_def(TensorType)
    replica_id = opt_operand_def(TensorType)
    tag = prop_def(StringAttr)
    logdir = prop_def(StringAttr)
    description = opt_prop_def(StringAttr)
    assembly_format = (
        "$tag `=` $data `at` `step` $step (`if` `replica` $replica_id^ `is` `zero`)? `to` $logdir"
        " (`description` $description^)? attr-dict `:` type($data) `,` type($step) (`,` type($replica_id)^)?"
    )
    PARAMS: ClassVar = {"tag": StrParam(), "logdir": StrParam(), "description": StrParam()}
    HOST_ONLY: ClassVar = True
    SIDE_EFFECTS: ClassVar = True
    NOT_DIFFERENTIABLE: ClassVar = True  # no results (TF: WriteScalarSummary)

    @staticmethod
    def check_data(spec: TensorSpec) -> None:
        """ShapeError unless ``spec`` is a numeric scalar (TF asserts a scalar)."""
        if spec.shape != () or spec.dtype not in NUMERIC:
            raise ShapeError(f"hlo.summary_scalar data must be a scalar of dtype {', '.join(NUMERIC)}, got {spec}")

    @classmethod
    def infer(cls, specs, tag="", logdir="", **_):
        if len(specs) not in (2, 3):
            raise ShapeError(
                f"hlo.summary_scalar takes data, step and an optional replica id, got {len(specs)} operands"
            )
        cls.check_data(specs[0])
        step = specs[1]
        if step.shape != () or step.dtype not in STEP_DTYPES:
            raise ShapeError(f"hlo.summary_scalar step must be an int64 or int32 scalar, got {step}")
        if len(specs) == 3 and specs[2] != TensorSpec((), "int32"):
            raise ShapeError(f"hlo.summary_scalar replica id must be an int32 scalar, got {specs[2]}")
        if not tag:
            raise ShapeError("hlo.summary_scalar tag must not be empty")
        if not logdir:
            raise ShapeError("hlo.summary_scalar logdir must not be empty")
        return []

    @classmethod
    def kernel(cls, tag, logdir, description=None, **_):
        def run(data, step, replica_id=None):
            if replica_id is None or int(replica_id) == 0:
                _summaries.write_scalar(logdir, tag, float(data), int(step), description)

        return run


@irdl_op_definition
class SummaryFlushOp(PrimitiveOp):
    """Write the buffered events of ``logdir``'s writer to disk (TF 2's
    ``FlushSummaryWriter`` op, which the exit of ``writer.as_default()``
    adds to a traced function: summary_ops_v2.py ``_SummaryContextManager``).

    Properties: ``logdir``, a non-empty string.  No operands, no results.
    A directory with no open writer is left alone (the kernel calls
    :func:`xtpu.dialects.summaries.flush`).
    """

    name = "hlo.summary_flush"
    logdir = prop_def(StringAttr)
    assembly_format = "$logdir attr-dict"
    PARAMS: ClassVar = {"logdir": StrParam()}
    HOST_ONLY: ClassVar = True
    SIDE_EFFECTS: ClassVar = True
    NOT_DIFFERENTIABLE: ClassVar = True

    @classmethod
    def infer(cls, specs, logdir="", **_):
        if specs:
            raise ShapeError(f"hlo.summary_flush takes no operands, got {len(specs)}")
        if not logdir:
            raise ShapeError("hlo.summary_flush logdir must not be empty")
        return []

    @classmethod
    def kernel(cls, logdir, **_):
        def run():
            _summaries.flush(logdir)

        return run


HOST_OPS = [StringConstantOp, StringFormatOp, StringToNumberOp, PrintOp, SummaryScalarOp, SummaryFlushOp]
