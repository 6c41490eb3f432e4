"""The elementwise math and the reverse that TF's ``tf.math`` / ``tf.nn``
ops need beyond :mod:`xtpu.dialects.hlo`: ``hlo.sign``, ``hlo.ceil``,
``hlo.round_nearest_even``, ``hlo.rsqrt``, ``hlo.log_plus_one``,
``hlo.sine``, ``hlo.cosine``, ``hlo.is_finite``, ``hlo.erf`` and
``hlo.reverse``.

Each follows the StableHLO op of the same name
(https://openxla.org/stablehlo/spec), except ``hlo.erf``: StableHLO has no
erf; it is XLA HLO's ``erf`` (``chlo.erf`` in MLIR's dialects, which JAX and
TF's bridge emit), computed on float32 with Eigen's and XLA's rational
approximation and on float64 with SciPy's ``special.erf`` (Cephes).

Gradients follow TF's registered gradients (``math_grad.py``): sign's is
zero (``_SignGrad``), ceil's and round's are None (``_CeilGrad``,
``_RoundGrad``: not differentiable), is_finite has none (bool result).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import I64, DenseArrayBase, TensorType
from xdsl.irdl import VarConstraint, base, irdl_op_definition, operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from xtpu.dialects import bfloat16 as B16
from xtpu.dialects import hlo
from xtpu.dialects import vjp_util as G
from xtpu.dialects.erf_f32 import erf_f32
from xtpu.dialects.hlo import COMPLEX, FLOATS, NUMERIC, ElementwiseUnary, _check_dims, _require_dtype
from xtpu.dialects.primitive import IntArrayParam, PrimitiveOp
from xtpu.dialects.tensor_spec import TensorSpec


@irdl_op_definition
class SignOp(ElementwiseUnary):
    """-1, 0 or 1 by the sign of each element; NaN stays NaN and -0.0 gives
    -0.0 (StableHLO spec: sign).  Its gradient is zero (TF's _SignGrad)."""

    name = "hlo.sign"
    DTYPES: ClassVar = NUMERIC + COMPLEX
    UFUNC = staticmethod(np.sign)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """Zeros of the input's shape (TF's _SignGrad)."""
        (x,) = inputs
        return [G.zeros_like(x) if G.is_float(x) else None]


@irdl_op_definition
class CeilOp(ElementwiseUnary):
    """Elementwise ceiling of a float tensor (StableHLO spec: ceil).  Not
    differentiable (TF's _CeilGrad returns None)."""

    name = "hlo.ceil"
    DTYPES: ClassVar = FLOATS
    UFUNC = staticmethod(np.ceil)
    NOT_DIFFERENTIABLE: ClassVar = True


@irdl_op_definition
class RoundNearestEvenOp(ElementwiseUnary):
    """Round to the nearest integer, ties to even (StableHLO spec:
    round_nearest_even; TF's ``Round``: ``round(2.5) = 2``).  Not
    differentiable (TF's _RoundGrad returns None)."""

    name = "hlo.round_nearest_even"
    DTYPES: ClassVar = FLOATS
    UFUNC = staticmethod(np.rint)
    NOT_DIFFERENTIABLE: ClassVar = True


def _rsqrt(x):
    x = np.asarray(x)
    return np.reciprocal(np.sqrt(x))


@irdl_op_definition
class RsqrtOp(ElementwiseUnary):
    """Elementwise ``1 / sqrt(x)`` (StableHLO spec: rsqrt)."""

    name = "hlo.rsqrt"
    DTYPES: ClassVar = FLOATS + COMPLEX
    UFUNC = staticmethod(_rsqrt)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d rsqrt(x) = -0.5 y**3 dx: ``ct * (-0.5 * y * y * y)`` (TF's _RsqrtGrad)."""
        (ct,), (y,) = cotangents, outputs
        return [G.mul(ct, G.mul(G.full_like(y, -0.5), G.mul(y, G.mul(y, y))))]


@irdl_op_definition
class LogPlusOneOp(ElementwiseUnary):
    """Elementwise ``log(1 + x)``, exact for small ``x`` (StableHLO spec:
    log_plus_one)."""

    name = "hlo.log_plus_one"
    DTYPES: ClassVar = FLOATS + COMPLEX
    UFUNC = staticmethod(np.log1p)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d log1p(x) = dx / (1 + x) (TF's _Log1pGrad)."""
        (ct,), (x,) = cotangents, inputs
        return [G.div(ct, G.add(G.full_like(x, 1), x))]


@irdl_op_definition
class SineOp(ElementwiseUnary):
    """Elementwise sine (StableHLO spec: sine)."""

    name = "hlo.sine"
    DTYPES: ClassVar = FLOATS + COMPLEX
    UFUNC = staticmethod(np.sin)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d sin(x) = cos(x) dx (TF's _SinGrad)."""
        (ct,), (x,) = cotangents, inputs
        return [G.mul(ct, G.bind1(CosineOp, [x]))]


@irdl_op_definition
class CosineOp(ElementwiseUnary):
    """Elementwise cosine (StableHLO spec: cosine)."""

    name = "hlo.cosine"
    DTYPES: ClassVar = FLOATS + COMPLEX
    UFUNC = staticmethod(np.cos)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d cos(x) = -sin(x) dx (TF's _CosGrad)."""
        (ct,), (x,) = cotangents, inputs
        return [G.neg(G.mul(ct, G.bind1(SineOp, [x])))]


def _erf_f32_into(out: np.ndarray, x: np.ndarray) -> np.ndarray:
    r = B16.erf(x, out)
    return r if r is not None else erf_f32(x, out)


def _erf_bf16_into(out: np.ndarray, x: np.ndarray) -> np.ndarray:
    r = B16.erf(x, out)
    return r if r is not None else B16.round_f32(_erf(B16.widen(x)), out=out)


def _erf(x, out=None):
    x = np.asarray(x)
    if x.dtype == np.float32:
        r = B16.erf(x, out) if x.ndim else None
        return r if r is not None else erf_f32(x, out)
    from scipy import special

    return special.erf(x, out=out) if out is not None else special.erf(x).astype(x.dtype, copy=False)


def _erf_bf16(x):
    x = np.asarray(x)
    r = B16.erf(x) if x.dtype == B16.BF16 and x.ndim else None
    return r if r is not None else hlo.low_precision_in_f32(_erf)(x)


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@irdl_op_definition
class ErfOp(ElementwiseUnary):
    """The error function ``2/sqrt(pi) * integral_0^x exp(-t**2) dt``,
    elementwise on floats.  Not a StableHLO op: XLA HLO's ``erf``
    (``chlo.erf``), as TF's ``Erf`` and ``jax.lax.erf`` compile to it.  On
    float32 (and bfloat16 / float16, computed in float32) the kernel is
    the rational approximation of Eigen and XLA (``x * P(x**2) / Q(x**2)``
    on ``x`` clamped to [-4, 4]; within 8 ulp of the exact erf over all
    normal float32, TF's own CPU kernel within 5); on float64 SciPy's
    ``special.erf`` (Cephes, within 1 ulp)."""

    name = "hlo.erf"
    DTYPES: ClassVar = FLOATS
    UFUNC = staticmethod(_erf)

    @classmethod
    def kernel(cls, element_dtype=None, **params):
        """On bfloat16: one compiled pass (widen, erf, round) when numba is
        in, else the float32 kernel on the widened operand, rounded (the
        same bits)."""
        return _erf_bf16 if element_dtype == "bfloat16" else super().kernel(element_dtype=element_dtype, **params)

    @classmethod
    def out_kernel(cls, element_dtype=None, **params):
        """On float32 and bfloat16: the kernel writing into ``out`` (its
        working array; it may be the operand: each element is read before
        it is written)."""
        return {"float32": _erf_f32_into, "bfloat16": _erf_bf16_into}.get(element_dtype)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d erf(x) = 2/sqrt(pi) exp(-x**2) dx (TF's _ErfGrad)."""
        (ct,), (x,) = cotangents, inputs
        e = G.bind1(hlo.ExpOp, [G.neg(G.mul(x, x))])
        return [G.mul(ct, G.mul(G.full_like(x, _TWO_OVER_SQRT_PI), e))]


@irdl_op_definition
class IsFiniteOp(PrimitiveOp):
    """True where an element is neither infinite nor NaN (StableHLO spec:
    is_finite).  Float operands; the result is bool of the operand's shape.
    Not differentiable (bool result; TF: ``IsFinite`` has no gradient)."""

    name = "hlo.is_finite"
    operand = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"
    NOT_DIFFERENTIABLE: ClassVar = True

    @classmethod
    def infer(cls, specs, **_):
        (s,) = specs
        _require_dtype(s, FLOATS, cls.name)
        return [TensorSpec(s.shape, "bool")]

    @classmethod
    def kernel(cls, **_):
        return np.isfinite


@irdl_op_definition
class ReverseOp(PrimitiveOp):
    """The operand with the order of its elements reversed along each of
    ``dimensions`` (StableHLO spec: reverse; C2: the dimensions are unique,
    C3: each in ``[0, rank)``; a ShapeError otherwise).  A view eagerly: O(1).

    Syntax::

      %r = hlo.reverse %x, dims = [0, 2] : tensor<2x3x4xf32>
    """

    name = "hlo.reverse"
    T: ClassVar = VarConstraint("T", base(TensorType))
    operand = operand_def(T)
    dimensions = prop_def(DenseArrayBase[I64])
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$operand `,` `dims` `=` $dimensions attr-dict `:` type($result)"
    PARAMS: ClassVar = {"dimensions": IntArrayParam()}

    @classmethod
    def infer(cls, specs, dimensions=(), **_):
        (s,) = specs
        _check_dims(tuple(int(d) for d in dimensions), s.rank, "dimensions")
        return [s]

    @classmethod
    def kernel(cls, dimensions, **_):
        dims = tuple(int(d) for d in dimensions)

        def run(x):
            x = np.asarray(x)
            return x[tuple(slice(None, None, -1) if d in dims else slice(None) for d in range(x.ndim))]

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, dimensions=(), **params):
        """The cotangent reversed along the same dimensions (TF's _ReverseV2Grad)."""
        (ct,), (x,) = cotangents, inputs
        if not G.is_float(x):
            return [None]
        return [G.bind1(ReverseOp, [ct], dimensions=tuple(dimensions))]


MATH_EXTRA_OPS = [
    SignOp,
    CeilOp,
    RoundNearestEvenOp,
    RsqrtOp,
    LogPlusOneOp,
    SineOp,
    CosineOp,
    ErfOp,
    IsFiniteOp,
    ReverseOp,
]
