"""``complex64``'s own ops: ``hlo.real``, ``hlo.imag`` and ``hlo.complex``.

Each follows the StableHLO op of the same name
(https://openxla.org/stablehlo/spec): ``real`` and ``imag`` take a
``complex64`` tensor (``complex<f32>``, the real part first in memory) to
the ``float32`` tensor of one part, ``complex`` takes two ``float32``
tensors of one shape to the ``complex64`` tensor whose parts they are.
Every bit of a part is kept (NaN payloads, -0.0, inf): the kernels copy the
parts, they never compute ``re + 1j * im`` (whose ``0 * inf`` would make a
NaN).  TF's ``tf.math.real``, ``tf.math.imag``, ``tf.complex`` and
``tf.math.conj`` are built on them (``conj`` as XLA lowers it:
``complex(real(z), negate(imag(z)))``).

Gradients follow TF (``math_grad.py``): ``real``'s cotangent is
``complex(ct, 0)``, ``imag``'s ``complex(0, ct)``, and ``complex``'s parts
get ``real(ct)`` and ``imag(ct)``.

Syntax::

  %re = hlo.real %z : (tensor<3xcomplex<f32>>) -> tensor<3xf32>
  %z2 = hlo.complex %re, %im : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xcomplex<f32>>
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import Pure

from xtpu.dialects import vjp_util as G
from xtpu.dialects.hlo import _require_dtype, _same
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.tensor_spec import TensorSpec

_C64 = np.dtype(np.complex64)


class _Part(PrimitiveOp):
    """``hlo.real`` / ``hlo.imag``: one part of a complex64 tensor."""

    operand = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"
    COMPLEX_GRADIENT: ClassVar = True
    PART: ClassVar[str] = "real"

    @classmethod
    def infer(cls, specs, **_):
        (s,) = specs
        _require_dtype(s, ("complex64",), cls.name)
        return [TensorSpec(s.shape, "float32")]

    @classmethod
    def kernel(cls, **_):
        part = cls.PART

        def run(z):
            return np.array(getattr(np.asarray(z), part))  # a copy: the part's bits, contiguous

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """``complex(ct, 0)`` for ``real``, ``complex(0, ct)`` for ``imag``
        (TF's _RealGrad / _ImagGrad)."""
        (ct,) = cotangents
        zeros = G.zeros_like(ct)
        return [G.bind1(ComplexOp, [ct, zeros] if cls.PART == "real" else [zeros, ct])]


@irdl_op_definition
class RealOp(_Part):
    """The real part of a complex64 tensor, a float32 tensor (StableHLO
    spec: real)."""

    name = "hlo.real"
    PART: ClassVar[str] = "real"


@irdl_op_definition
class ImagOp(_Part):
    """The imaginary part of a complex64 tensor, a float32 tensor
    (StableHLO spec: imag)."""

    name = "hlo.imag"
    PART: ClassVar[str] = "imag"


@irdl_op_definition
class ComplexOp(PrimitiveOp):
    """The complex64 tensor with real part ``lhs`` and imaginary part ``rhs``,
    two float32 tensors of one shape (StableHLO spec: complex; C1: the
    operands have the same type, C3: the result's element type is
    ``complex<f32>`` of theirs)."""

    name = "hlo.complex"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"
    COMPLEX_GRADIENT: ClassVar = True

    @classmethod
    def infer(cls, specs, **_):
        s = _same(specs, cls.name)
        _require_dtype(s, ("float32",), cls.name)
        return [TensorSpec(s.shape, "complex64")]

    @classmethod
    def kernel(cls, **_):
        def run(re, im):
            re, im = np.asarray(re), np.asarray(im)
            out = np.empty(re.shape, _C64)
            out.real = re
            out.imag = im
            return out

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """``real(ct)`` and ``imag(ct)`` (TF's _ComplexGrad)."""
        (ct,) = cotangents
        return [G.bind1(RealOp, [ct]), G.bind1(ImagOp, [ct])]


COMPLEX_OPS = [RealOp, ImagOp, ComplexOp]
