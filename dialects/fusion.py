"""The ``fusion`` dialect: a region of elementwise ops run as one kernel.

``fusion.region`` is XLA's fusion instruction in MLIR's terms (an
``IsolatedFromAbove`` op with one block, as ``linalg.generic`` or a GPU
``scf.parallel`` body): its block arguments are its operands, its body
holds ``hlo`` elementwise ops, broadcasts, converts, selects and the
reductions consuming them, and ``fusion.yield`` gives the values used
outside.  ``kind`` is XLA's fusion kind: ``loop`` (elementwise ops only,
XLA's ``kLoop``) or ``input`` (a reduction at its end reads the fused
elementwise ops, XLA's ``kInput``).  The ``hlo-fuse-elementwise`` pass
(passes/fuse_elementwise.py) forms the regions; the runtime runs each as one
kernel that writes into buffers it keeps (runtime/fusion.py).

Syntax::

  %r:2 = fusion.region loop (%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
    %s = hlo.add %a, %b : tensor<4xf32>
    %t = hlo.tanh %s : tensor<4xf32>
    fusion.yield %s, %t : tensor<4xf32>, tensor<4xf32>
  }

Unlike an ``hlo`` op it has no gradient rule: the pass runs after
differentiation, on the program the runtime executes.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import Dialect
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    lazy_traits_def,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from xtpu.dialects.primitive import PrimitiveOp

__all__ = ["FUSION", "FUSION_KINDS", "FusionRegionOp", "FusionYieldOp"]

#: XLA's fusion kinds the pass forms.
FUSION_KINDS: tuple[str, ...] = ("loop", "input")


class _FusionOp(PrimitiveOp):
    """The fusion ops are ``PrimitiveOp`` for the registries that list every
    op (docs, gradient kinds) but verify their bodies themselves: the
    verification memo of ``PrimitiveOp`` keys on operand and result types,
    which do not determine a body."""

    #: Formed after differentiation, on the program the runtime runs.
    NOT_DIFFERENTIABLE: ClassVar = True

    def verify(self, verify_nested_ops: bool = True) -> None:
        IRDLOperation.verify(self, verify_nested_ops)

    @classmethod
    def infer(cls, specs, **_):
        return []


@irdl_op_definition
class FusionYieldOp(_FusionOp):
    """Ends a ``fusion.region`` body with the values the region gives."""

    name = "fusion.yield"
    values = var_operand_def(TensorType)
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(FusionRegionOp), Pure()))
    assembly_format = "attr-dict ($values^ `:` type($values))?"


@irdl_op_definition
class FusionRegionOp(_FusionOp):
    """Elementwise ops, broadcasts, converts, selects and the reductions
    consuming them, run as one kernel (module doc).

    Operands: any tensors, one block argument each (same types).  Results:
    the operands of the body's ``fusion.yield``, same types.

    Raises (verifier): ``VerifyException`` when ``kind`` is not one of
    :data:`FUSION_KINDS`, the block arguments do not match the operands, the
    body does not end with ``fusion.yield`` of the result types, or the body
    holds an op with regions.
    """

    name = "fusion.region"
    kind = prop_def(StringAttr)
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), Pure())
    assembly_format = "$kind `(` $inputs `)` `:` functional-type($inputs, $outputs) $body attr-dict"

    def verify_(self) -> None:
        if self.kind.data not in FUSION_KINDS:
            raise VerifyException(
                f"'fusion.region' op kind must be one of {list(FUSION_KINDS)}, got {self.kind.data!r}"
            )
        block = self.body.block
        if [a.type for a in block.args] != [v.type for v in self.inputs]:
            raise VerifyException("'fusion.region' op block arguments must have the operands' types")
        term = block.last_op
        if not isinstance(term, FusionYieldOp):
            raise VerifyException("'fusion.region' op body must end with fusion.yield")
        if list(term.operand_types) != list(self.result_types):
            raise VerifyException("'fusion.region' op fusion.yield must give the op's result types")
        if not block.ops or block.first_op is term:
            raise VerifyException("'fusion.region' op body holds no op")
        for op in block.ops:
            if op.regions:
                raise VerifyException(f"'fusion.region' op body may not hold '{op.name}' (an op with regions)")


FUSION = Dialect("fusion", [FusionRegionOp, FusionYieldOp], [])
