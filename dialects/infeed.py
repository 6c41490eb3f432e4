"""``tpu.infeed_dequeue_tuple``: a replica takes its next tuple from the infeed.

TF's ``InfeedDequeueTuple`` (``tensorflow/core/tpu/ops/infeed_ops.cc``,
built by ``tpu_feed.InfeedQueue.generate_dequeue_op``): the device program
reads one tuple of tensors of fixed ``dtypes`` and ``shapes`` from the
host-to-device queue of its replica, which the host fills with
``InfeedEnqueueTuple``.  In xtpu the queue is a bounded per-replica queue of
the runtime (:mod:`xtpu.runtime.infeed`), named by ``queue``; the op waits up
to the run's timeout for a tuple and raises naming the replica and the queue.

Syntax::

  %x, %y = tpu.infeed_dequeue_tuple "InfeedQueue#1" : tensor<8x4xf32>, tensor<8xi32>
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.irdl import irdl_op_definition, prop_def, var_result_def

from xtpu.dialects.primitive import PrimitiveOp, ShapeError, StrParam
from xtpu.dialects.tensor_spec import TensorSpec


@irdl_op_definition
class InfeedDequeueTupleOp(PrimitiveOp):
    """The next tuple of the replica's infeed ``queue``; results have the
    queue's frozen ``tuple_types`` and (per-shard) ``tuple_shapes``.

    Side-effecting (each run takes a new tuple) and not differentiable (an
    input, like TF's op).  Eagerly there is no replica queue: its kernel
    raises; the runtime gives each replica's worker its own kernel.
    """

    name = "tpu.infeed_dequeue_tuple"
    outputs = var_result_def(TensorType)
    queue = prop_def(StringAttr)
    assembly_format = "$queue attr-dict (`:` type($outputs)^)?"
    PARAMS: ClassVar = {"queue": StrParam()}
    SIDE_EFFECTS: ClassVar = True
    NOT_DIFFERENTIABLE: ClassVar = True

    def result_params(self):
        specs = [TensorSpec.of_type(r.type) for r in self.outputs]
        return {"shapes": tuple(s.shape for s in specs), "dtypes": tuple(s.dtype for s in specs)}

    @classmethod
    def infer(cls, specs, queue="", shapes=(), dtypes=(), **_):
        if specs:
            raise ShapeError(f"{cls.name} takes no operands, got {len(specs)}")
        if not queue:
            raise ShapeError(f"{cls.name} needs the name of its queue")
        if len(shapes) != len(dtypes) or not shapes:
            raise ShapeError(
                f"{cls.name} needs one shape per dtype and at least one, got {len(shapes)} and {len(dtypes)}"
            )
        return [TensorSpec(tuple(s), d) for s, d in zip(shapes, dtypes)]

    @classmethod
    def make(cls, operands, **params):
        results = cls.infer(list(operands), **params)
        return cls.create_op([], [r.to_type() for r in results], params)

    @classmethod
    def kernel(cls, queue="", **_):
        def run():
            raise RuntimeError(
                f"{cls.name} '{queue}' runs only in a replicated computation: the runtime gives each "
                "replica its own queue"
            )

        return run


INFEED_OPS = [InfeedDequeueTupleOp]
