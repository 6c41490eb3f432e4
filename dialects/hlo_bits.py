"""Bit operations on integers: ``hlo.xor``, ``hlo.shift_left``,
``hlo.shift_right_logical``, ``hlo.shift_right_arithmetic`` and
``hlo.bitcast_convert``, each the StableHLO op of the same name
(https://openxla.org/stablehlo/spec).  Counter-based random number
generators are written with them (JAX's threefry2x32: ``uint32`` adds,
rotations and xors; its uniform floats: the top mantissa bits of a word
bitcast to a float).

A shift by an amount at least the bit width (an amount read as unsigned)
gives 0 (``shift_left``, ``shift_right_logical``) or the sign fill
(``shift_right_arithmetic``), as StableHLO defines it; numpy's shifts are
undefined there, so the kernels clamp the amount and select.

None is differentiable: integer results (TF's ``BitwiseXor``,
``LeftShift``, ``RightShift`` and ``Bitcast`` have no gradient).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import Pure

from xtpu.dialects.hlo import INTS, ElementwiseBinary
from xtpu.dialects.primitive import PrimitiveOp, ShapeError
from xtpu.dialects.tensor_spec import NUMERIC_DTYPES, TensorSpec, numpy_dtype


@irdl_op_definition
class XorOp(ElementwiseBinary):
    """Logical (bool) or bitwise (int) exclusive or (StableHLO spec: xor)."""

    name = "hlo.xor"
    DTYPES: ClassVar = INTS + ("bool",)
    NOT_DIFFERENTIABLE: ClassVar = True
    UFUNC = staticmethod(np.bitwise_xor)


def _unsigned(x: np.ndarray) -> np.ndarray:
    """``x``'s bits as the unsigned integer of its width."""
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _shift(kind: str):
    def run(x, n):
        x, n = np.asarray(x), np.asarray(n)
        bits = x.dtype.itemsize * 8
        amount = _unsigned(n)
        big = amount >= bits
        k = np.minimum(amount, bits - 1).astype(x.dtype)
        if kind == "left":
            return np.where(big, np.zeros_like(x), np.left_shift(x, k)).astype(x.dtype)
        if kind == "logical":
            u = _unsigned(x)
            out = np.where(big, np.zeros_like(u), np.right_shift(u, k.astype(u.dtype))).astype(u.dtype)
            return out.view(x.dtype)
        # arithmetic: numpy's >> on a signed type fills with the top bit (of
        # an unsigned type too, as XLA); a shift past the width is the shift
        # by width - 1 (all top bits).
        signed = x.view(np.dtype(f"i{x.dtype.itemsize}"))
        return np.right_shift(signed, k.astype(signed.dtype)).astype(signed.dtype).view(x.dtype)

    return run


@irdl_op_definition
class ShiftLeftOp(ElementwiseBinary):
    """``lhs`` shifted left by ``rhs`` bits; 0 when ``rhs`` (read as
    unsigned) is at least the bit width (StableHLO spec: shift_left)."""

    name = "hlo.shift_left"
    DTYPES: ClassVar = INTS
    NOT_DIFFERENTIABLE: ClassVar = True
    UFUNC = staticmethod(_shift("left"))


@irdl_op_definition
class ShiftRightLogicalOp(ElementwiseBinary):
    """``lhs`` shifted right by ``rhs`` bits, zeros shifted in; 0 when
    ``rhs`` (read as unsigned) is at least the bit width (StableHLO spec:
    shift_right_logical)."""

    name = "hlo.shift_right_logical"
    DTYPES: ClassVar = INTS
    NOT_DIFFERENTIABLE: ClassVar = True
    UFUNC = staticmethod(_shift("logical"))


@irdl_op_definition
class ShiftRightArithmeticOp(ElementwiseBinary):
    """``lhs`` shifted right by ``rhs`` bits, copies of the top (sign) bit
    shifted in, for unsigned types too (XLA's); all top bits when ``rhs``
    (read as unsigned) is at least the bit width (StableHLO spec:
    shift_right_arithmetic)."""

    name = "hlo.shift_right_arithmetic"
    DTYPES: ClassVar = INTS
    NOT_DIFFERENTIABLE: ClassVar = True
    UFUNC = staticmethod(_shift("arithmetic"))


@irdl_op_definition
class BitcastConvertOp(PrimitiveOp):
    """The bits of each element read as another type of the same width
    (StableHLO spec: bitcast_convert, without its change of rank between
    widths): ``uint32`` to ``float32`` and back, ``int64`` to ``uint64``...

    Syntax::

      %f = hlo.bitcast_convert %u : (tensor<4xui32>) -> tensor<4xf32>

    Raises (verifier): types of different bit widths, bool or string.
    Kernel: numpy's ``view``.  No gradient (TF's Bitcast has none).
    """

    name = "hlo.bitcast_convert"
    operand = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"
    NOT_DIFFERENTIABLE: ClassVar = True

    def result_params(self):
        return {"dtype": TensorSpec.of_type(self.result.type).dtype}

    @classmethod
    def infer(cls, specs, dtype=None, **_):
        (s,) = specs
        ok = tuple(d for d in NUMERIC_DTYPES if d != "bool")
        if s.dtype not in ok or dtype not in ok:
            raise ShapeError(f"hlo.bitcast_convert converts numbers other than bool, got {s.dtype} to {dtype}")
        a, b = numpy_dtype(s.dtype).itemsize, numpy_dtype(dtype).itemsize
        if a != b:
            raise ShapeError(
                f"hlo.bitcast_convert keeps the bit width: {s.dtype} has {8 * a} bits, {dtype} {8 * b} "
                "(StableHLO's change of rank between widths is not supported)"
            )
        return [TensorSpec(s.shape, dtype)]

    @classmethod
    def kernel(cls, dtype, **_):
        np_dtype = numpy_dtype(dtype)
        return lambda x: np.ascontiguousarray(np.asarray(x)).view(np_dtype)


BITS_OPS = [XorOp, ShiftLeftOp, ShiftRightLogicalOp, ShiftRightArithmeticOp, BitcastConvertOp]

__all__ = [
    "XorOp",
    "ShiftLeftOp",
    "ShiftRightLogicalOp",
    "ShiftRightArithmeticOp",
    "BitcastConvertOp",
    "BITS_OPS",
]
