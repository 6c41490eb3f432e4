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
from xdsl.ir import Dialect, ErasedSSAValue, SSAValue
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

from xtpu.dialects.primitive import PrimitiveOp, verified_by_form

__all__ = ["FUSION", "FUSION_KINDS", "FusionRegionOp", "FusionYieldOp"]

#: XLA's fusion kinds the pass forms.
FUSION_KINDS: tuple[str, ...] = ("loop", "input")


class _FusionOp(PrimitiveOp):
    """The fusion ops are ``PrimitiveOp`` for the registries that list every
    op (docs, gradient kinds) but verify their bodies themselves: the
    verification memo of ``PrimitiveOp`` keys on operand and result types,
    which do not determine a body (``fusion.region`` has its own memo,
    :func:`_region_form`)."""

    #: Formed after differentiation, on the program the runtime runs.
    NOT_DIFFERENTIABLE: ClassVar = True

    def verify(self, verify_nested_ops: bool = True) -> None:
        IRDLOperation.verify(self, verify_nested_ops)

    @classmethod
    def infer(cls, specs, **_):
        return []


_VERIFIED_REGIONS: dict[tuple, tuple] = {}
"""The forms of the ``fusion.region`` ops that verified (:func:`_region_form`),
each with the types it names by identity (which keeps them, and so their
ids, alive).  Emptied when full."""


def _region_form(op: FusionRegionOp) -> tuple | None:
    """All that verifying ``op`` with its body reads, as a key: its class,
    properties and attributes (by value), its operand, result and block
    argument types (by identity: tracing shares equal ones), and per body op
    its class, properties, attributes, result types and operands (by their
    position in the body), the ``fusion.yield`` last.  None when the body
    holds an op with regions or successors, reads a value it does not
    define (a full verification reports those) or holds an op whose verifier
    may read more than its form (only ``PrimitiveOp`` forms that
    :func:`~xtpu.dialects.primitive.verified_by_form` and the closing
    ``fusion.yield``, whose parent is the region), or the region op ends its
    block (whether it may is its parent's business)."""
    if (
        op.next_op is None
        or op.successors
        or len(op.regions) != 1
        or len(op.body.blocks) != 1
        or any(isinstance(v, ErasedSSAValue) for v in op.operands)
    ):
        return None
    block = op.body.block
    types = [*(v.type for v in op.operands), *(r.type for r in op.results), *(a.type for a in block.args)]
    parts: list = [
        type(op),
        len(op.operands),
        len(op.results),
        tuple(op.properties.items()),
        tuple(op.attributes.items()),
    ]
    where: dict[SSAValue, int] = {a: n for n, a in enumerate(block.args)}
    last = block.last_op
    for o in block.ops:
        if o.regions or o.successors:
            return None
        if not (
            isinstance(o, FusionYieldOp) if o is last else isinstance(o, PrimitiveOp) and verified_by_form(type(o))
        ):
            return None  # a verifier that may read more than the op's form
        try:
            operands = tuple(where[v] for v in o.operands)
        except KeyError:  # defined outside the body, or erased
            return None
        parts.append((type(o), operands, tuple(o.properties.items()), tuple(o.attributes.items()), len(o.results)))
        for r in o.results:
            where[r] = len(where)
            types.append(r.type)
    form = (*parts, *map(id, types))
    try:
        hash(form)
    except TypeError:
        return None
    return form, types


def _verify_region(op: FusionRegionOp, verify_nested_ops: bool) -> None:
    """``op.verify()``, once per form of region (:func:`_region_form`):
    regions of one form verify alike, as ``PrimitiveOp``'s ops of one form
    do; a program compiled again, or one whose layers repeat, verifies its
    regions' forms once."""
    got = _region_form(op) if verify_nested_ops else None
    if got is not None and got[0] in _VERIFIED_REGIONS:
        return
    IRDLOperation.verify(op, verify_nested_ops)
    if got is not None:
        if len(_VERIFIED_REGIONS) >= 4096:
            _VERIFIED_REGIONS.clear()
        _VERIFIED_REGIONS[got[0]] = tuple(got[1])


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

    def verify(self, verify_nested_ops: bool = True) -> None:
        _verify_region(self, verify_nested_ops)

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
