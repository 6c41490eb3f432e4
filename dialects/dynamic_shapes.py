"""Padded values and their real sizes: ``hlo.get_dimension_size`` and
``hlo.set_dimension_size``.

``replicate(..., maximum_shapes=...)`` pads each replica's inputs to one
static shape and traces the computation once for it (TF's dynamic padder
input, ``tpu.replicate``'s ``maximum_shapes``).  In the traced module a
padded value carries its real size per padded dimension the way XLA's
dynamic padder does: ``hlo.set_dimension_size %x, %size, dim = d`` says "the
real size of dimension ``d`` of ``%x`` is ``%size``; elements past it are
padding whose value is unspecified" (XLA's ``SetDimensionSize``, MHLO's
``set_dimension_size``), and ``hlo.get_dimension_size %x, dim = d`` reads
the real size back as a ``tensor<i32>`` (StableHLO spec: get_dimension_size).

``tpu-pad-dynamic-shapes`` (:mod:`xtpu.passes.pad_dynamic_shapes`) infers the
real sizes of every value from these ops (XLA's DynamicDimensionInference),
rewrites the ops whose result the padding would change, and removes both
ops.  Without the pass, on values that are not padded (eagerly, or in a
module that never saw ``set_dimension_size``), ``get_dimension_size`` is the
static size and ``set_dimension_size`` the identity.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import I64, IntegerAttr, TensorType
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from xtpu.dialects.primitive import IntParam, PrimitiveOp, ShapeError
from xtpu.dialects.tensor_spec import TensorSpec

SIZE_DTYPE = "int32"
"""The dtype of a real size: StableHLO's ``get_dimension_size`` gives ``tensor<i32>``."""


def _check_dimension(x: TensorSpec, dimension: int, op: str) -> None:
    if not 0 <= dimension < x.rank:
        raise ShapeError(f"{op} dimension {dimension} is out of range for {x.to_type()}")


@irdl_op_definition
class GetDimensionSizeOp(PrimitiveOp):
    """The real size of dimension ``dimension`` of ``operand`` as a
    ``tensor<i32>`` (StableHLO spec: get_dimension_size).

    Its kernel gives the static size: after ``tpu-pad-dynamic-shapes`` a
    padded dimension's size is the value its ``hlo.set_dimension_size`` gave.
    Not differentiable (an integer result).

    Syntax::

      %n = hlo.get_dimension_size %x, dim = 0 : (tensor<8x2xf32>) -> tensor<i32>
    """

    name = "hlo.get_dimension_size"
    operand = operand_def(TensorType)
    dimension = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$operand `,` `dim` `=` $dimension attr-dict `:` functional-type(operands, results)"
    PARAMS: ClassVar = {"dimension": IntParam()}
    NOT_DIFFERENTIABLE: ClassVar = True

    @classmethod
    def infer(cls, specs, dimension=0, **_):
        (x,) = specs
        _check_dimension(x, int(dimension), cls.name)
        return [TensorSpec((), SIZE_DTYPE)]

    @classmethod
    def kernel(cls, dimension, **_):
        return lambda x: np.int32(np.shape(x)[dimension])


@irdl_op_definition
class SetDimensionSizeOp(PrimitiveOp):
    """``operand`` with the real size of dimension ``dimension`` set to
    ``size`` (a ``tensor<i32>``, at most the static size); the elements past
    it are padding (XLA's SetDimensionSize, MHLO's set_dimension_size).

    The static type does not change (the bound is the static size).  Its
    kernel is the identity; ``tpu-pad-dynamic-shapes`` reads and removes it.
    Gradient: the cotangent passes to ``operand`` (XLA's dynamic padder
    treats it as a copy); ``size`` gets none.

    Syntax::

      %y = hlo.set_dimension_size %x, %n, dim = 0 : (tensor<8x2xf32>, tensor<i32>) -> tensor<8x2xf32>
    """

    name = "hlo.set_dimension_size"
    operand = operand_def(TensorType)
    size = operand_def(TensorType)
    dimension = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$operand `,` $size `,` `dim` `=` $dimension attr-dict `:` functional-type(operands, results)"
    PARAMS: ClassVar = {"dimension": IntParam()}

    @classmethod
    def infer(cls, specs, dimension=0, **_):
        x, size = specs
        _check_dimension(x, int(dimension), cls.name)
        if size.shape != () or size.dtype != SIZE_DTYPE:
            raise ShapeError(f"{cls.name} size must be a tensor<i32> scalar, got {size.to_type()}")
        return [x]

    @classmethod
    def kernel(cls, **_):
        return lambda x, size: x

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        return [cotangents[0], None]


@irdl_op_definition
class RealDynamicSliceOp(PrimitiveOp):
    """``operand[start:limit:stride]`` per dimension with run-time indices,
    each a ``tensor<Rxi32>`` (StableHLO spec: real_dynamic_slice).

    StableHLO gives the result a dynamic shape; xtpu's types are static, so
    the result type is the bound, the operand's type, and the value at run
    time has the sliced shape.  Only the host can hold such a value
    (``HOST_ONLY``): ``tpu-pad-dynamic-shapes`` puts it before a host op
    that observes a padded value whole (``hlo.print``, string formatting,
    summaries), so that the host sees the replica's real value.

    Syntax::

      %r = hlo.real_dynamic_slice %x, %start, %limit, %strides
             : (tensor<8x2xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<8x2xf32>
    """

    name = "hlo.real_dynamic_slice"
    operand = operand_def(TensorType)
    start_indices = operand_def(TensorType)
    limit_indices = operand_def(TensorType)
    strides = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$operand `,` $start_indices `,` $limit_indices `,` $strides attr-dict `:` functional-type(operands, results)"
    )
    HOST_ONLY: ClassVar = True
    NOT_DIFFERENTIABLE: ClassVar = True

    @classmethod
    def infer(cls, specs, **_):
        if len(specs) != 4:
            raise ShapeError(
                f"{cls.name} takes an operand, start_indices, limit_indices and strides, got {len(specs)} operands"
            )
        x, *idx = specs
        for what, s in zip(("start_indices", "limit_indices", "strides"), idx):
            if s.shape != (x.rank,) or s.dtype not in ("int32", "int64"):
                raise ShapeError(
                    f"{cls.name} {what} must be a 1-D integer tensor of {x.rank} elements (the operand's rank), "
                    f"got {s.to_type()}"
                )
        return [x]

    @classmethod
    def kernel(cls, **_):
        def run(x, start, limit, strides):
            return np.asarray(x)[tuple(slice(int(a), int(b), int(c)) for a, b, c in zip(start, limit, strides))]

        return run


DYNAMIC_SHAPE_OPS = [GetDimensionSizeOp, SetDimensionSizeOp, RealDynamicSliceOp]
