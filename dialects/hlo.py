"""The ``hlo`` dialect: the traced math, with StableHLO's op names and semantics.

Each op follows the StableHLO op of the same name
(https://openxla.org/stablehlo/spec); section names are given per op.  Shapes
are static and ops are strict: operands of elementwise ops have equal shapes
and dtypes (the tracer inserts ``hlo.broadcast_in_dim`` and ``hlo.convert``).

This file holds the math; the host-only ops (strings, printing, summaries)
are in :mod:`xtpu.dialects.hlo_host`, and the dialect is assembled in
:mod:`xtpu.dialects`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    TensorType,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import SpacedOpaqueSyntaxAttribute
from xdsl.irdl import (
    VarConstraint,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.str_enum import StrEnum

from xtpu.dialects import bfloat16 as B16
from xtpu.dialects import dense_syntax, intra_op
from xtpu.dialects import vjp_util as G
from xtpu.dialects.primitive import (
    EnumParam,
    IntArrayParam,
    IntParam,
    Param,
    PrimitiveOp,
    ShapeError,
    array_from_dense,
    dense_from_array,
)
from xtpu.dialects.tensor_spec import (
    COMPLEX_DTYPES,
    FLOAT_DTYPES,
    INT_DTYPES,
    LOW_PRECISION_FLOATS,
    StringType,
    TensorSpec,
    dtype_of_numpy,
    numpy_dtype,
)

FLOATS = FLOAT_DTYPES
INTS = INT_DTYPES
NUMERIC = FLOATS + INTS
#: ``complex64``: the ops TF defines on it take it (``add``, ``exponential``,
#: ``abs`` to float32, ...); the others (``maximum``, ``floor``, ordering
#: comparisons, ...) refuse it with the op and the dtype named, as TF does.
COMPLEX = COMPLEX_DTYPES
_F32 = np.dtype(np.float32)
_LOW = tuple(numpy_dtype(d) for d in LOW_PRECISION_FLOATS)


_LOW_SET = frozenset(_LOW)


def narrow(x: Any, dtype: Any) -> np.ndarray:
    """A float32 result rounded once to ``dtype`` (bfloat16, float16: to
    nearest, ties to even; bfloat16 with :func:`xtpu.dialects.bfloat16.round_f32`,
    ml_dtypes' bits at float32 speed)."""
    x = np.asarray(x)
    if dtype == B16.BF16 and x.dtype == _F32:
        return B16.round_f32(x)
    return x.astype(dtype)


def low_precision_in_f32(fn, dtype: str | None = None, round_back: bool = True):
    """The kernel ``fn`` with XLA's float normalization of one HLO op: on
    bfloat16 / float16 operands it computes in float32 (widening is exact)
    and rounds the result once to the operands' dtype (to nearest, ties to
    even; ``round_back=False`` for ops with a bool result).  This is
    ml_dtypes' own arithmetic, at numpy's float32 speed (ml_dtypes'
    element-by-element loops are 50-300x slower); bfloat16 ``add``,
    ``subtract``, ``multiply`` and ``divide`` run as one compiled pass
    (:func:`xtpu.dialects.bfloat16.binary`, the same bits).

    ``dtype`` is the operands' dtype when the planner knows it (then other
    dtypes call ``fn`` itself, at no cost); None checks it at each call."""
    if dtype is not None and dtype not in LOW_PRECISION_FLOATS:
        return fn
    one_pass = round_back and fn in B16.BINARY_UFUNCS

    def run(*xs):
        dt = np.asarray(xs[0]).dtype
        if dt in _LOW_SET:
            if one_pass and dt == B16.BF16:
                return B16.binary(fn, *xs)
            out = fn(*(B16.widen(x) for x in xs))
            return narrow(out, dt) if round_back else out
        return fn(*xs)

    return run


def ufunc_into(ufunc: Any, dtype: str | None, round_back: bool = True) -> Callable[..., Any] | None:
    """``f(out, *xs)``: ``ufunc(*xs, out=out)``, the kernel
    ``low_precision_in_f32(ufunc, dtype, round_back)`` writing into ``out``
    (the same loop, the same bits; on bfloat16 the float32 result rounded
    into ``out``, or a bool result written as it is); None on float16, when
    ``dtype`` is unknown or when ``ufunc`` is not a one-output ufunc."""
    if dtype is None or dtype == "float16" or not isinstance(ufunc, np.ufunc) or ufunc.nout != 1:
        return None
    if dtype != "bfloat16":
        return lambda out, *xs: ufunc(*xs, out=out)
    if not round_back:
        return lambda out, *xs: ufunc(*map(B16.widen, xs), out=out)
    if ufunc.nin == 2:
        return lambda out, x, y: B16.binary(ufunc, x, y, out=out)

    def into(out, x):
        w = B16.widen(x)
        if w.flags.owndata:
            return B16.round_f32(ufunc(w, out=w), out=out)  # the widened copy is ours
        return B16.round_f32(ufunc(w), out=out)

    return into


# --------------------------------------------------------------------------
# Enums
# --------------------------------------------------------------------------


class ComparisonDirection(StrEnum):
    """StableHLO's comparison directions."""

    EQ = "EQ"
    NE = "NE"
    LT = "LT"
    LE = "LE"
    GT = "GT"
    GE = "GE"


@irdl_attr_definition
class ComparisonDirectionAttr(EnumAttribute[ComparisonDirection], SpacedOpaqueSyntaxAttribute):
    """StableHLO's ``comparison_direction`` (spec: compare)."""

    name = "hlo.comparison_direction"


class ReductionKind(StrEnum):
    """The binary op a reduction or all-reduce combines values with."""

    ADD = "add"
    MUL = "mul"
    MAX = "max"
    MIN = "min"
    AND = "and"
    OR = "or"


@irdl_attr_definition
class ReductionKindAttr(EnumAttribute[ReductionKind], SpacedOpaqueSyntaxAttribute):
    """The combiner of ``hlo.reduce`` and the ``ccl`` reductions."""

    name = "hlo.reduction"


REDUCTION_UFUNC = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "and": np.logical_and,
    "or": np.logical_or,
}


def reduction_ufunc(kind: str, dtype: str):
    """The numpy ufunc of a reduction kind (bitwise for ints under and/or)."""
    if kind in ("and", "or") and dtype in INTS:
        return np.bitwise_and if kind == "and" else np.bitwise_or
    return REDUCTION_UFUNC[kind]


# --------------------------------------------------------------------------
# Shape-rule helpers
# --------------------------------------------------------------------------


def _same(specs: Sequence[TensorSpec], op: str) -> TensorSpec:
    first = specs[0]
    for s in specs[1:]:
        if s.shape != first.shape:
            raise ShapeError(f"operands of {op} must have the same shape, got {first} and {s}")
        if s.dtype != first.dtype:
            raise ShapeError(f"operands of {op} must have the same dtype, got {first} and {s}")
    return first


def _require_dtype(spec: TensorSpec, allowed: Sequence[str], op: str) -> None:
    if spec.dtype not in allowed:
        raise ShapeError(f"{op} does not support dtype {spec.dtype}; expected one of {', '.join(allowed)}")


def _check_dims(dims: Sequence[int], rank: int, what: str) -> None:
    if len(set(dims)) != len(dims):
        raise ShapeError(f"{what} {list(dims)} has duplicates")
    for d in dims:
        if not 0 <= d < rank:
            raise ShapeError(f"{what} {list(dims)} out of range for rank {rank}")


# --------------------------------------------------------------------------
# Elementwise ops
# --------------------------------------------------------------------------


def _kernel_owner(cls: type) -> type:
    """The class in ``cls``'s MRO that defines ``kernel`` (an op that
    overrides it has its own ``out_kernel`` or none)."""
    return next(c for c in cls.__mro__ if "kernel" in c.__dict__)


class ElementwiseBinary(PrimitiveOp):
    """An elementwise op on two operands of equal shape and dtype."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    lhs = operand_def(T)
    rhs = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($result)"

    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC
    UFUNC: ClassVar[Any] = None

    @classmethod
    def infer(cls, specs, **params):
        s = _same(specs, cls.name)
        _require_dtype(s, cls.DTYPES, cls.name)
        return [s]

    def result_params(self):
        return {"element_dtype": TensorSpec.of_type(self.result.type).dtype}

    @classmethod
    def kernel(cls, element_dtype=None, **params):
        return low_precision_in_f32(cls.UFUNC, element_dtype)

    OUT_IN_PLACE: ClassVar[bool] = True

    @classmethod
    def out_kernel(cls, element_dtype=None, **params):
        """``UFUNC`` with ``out=`` (:func:`ufunc_into`), for ops that keep
        this class's kernel."""
        if _kernel_owner(cls) not in (ElementwiseBinary, ElementwiseUnary):
            return None
        return ufunc_into(cls.UFUNC, element_dtype)


class ElementwiseUnary(PrimitiveOp):
    """An elementwise op on one operand."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    operand = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$operand attr-dict `:` type($result)"

    DTYPES: ClassVar[tuple[str, ...]] = NUMERIC
    UFUNC: ClassVar[Any] = None

    @classmethod
    def infer(cls, specs, **params):
        (s,) = specs
        _require_dtype(s, cls.DTYPES, cls.name)
        return [s]

    def result_params(self):
        return {"element_dtype": TensorSpec.of_type(self.result.type).dtype}

    @classmethod
    def kernel(cls, element_dtype=None, **params):
        return low_precision_in_f32(cls.UFUNC, element_dtype)

    OUT_IN_PLACE: ClassVar[bool] = True

    @classmethod
    def out_kernel(cls, element_dtype=None, **params):
        """``UFUNC`` with ``out=`` (:func:`ufunc_into`), for ops that keep
        this class's kernel."""
        if _kernel_owner(cls) not in (ElementwiseBinary, ElementwiseUnary):
            return None
        return ufunc_into(cls.UFUNC, element_dtype)


@irdl_op_definition
class AddOp(ElementwiseBinary):
    """Elementwise sum (StableHLO spec: add)."""

    name = "hlo.add"
    DTYPES: ClassVar = NUMERIC + COMPLEX
    UFUNC = staticmethod(np.add)
    COMPLEX_GRADIENT: ClassVar = True

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d(x + y) = dx + dy: both inputs get the cotangent (TF's _AddGrad)."""
        (ct,) = cotangents
        return [ct, ct] if G.is_inexact(inputs[0]) else [None, None]


@irdl_op_definition
class SubtractOp(ElementwiseBinary):
    """Elementwise difference (StableHLO spec: subtract)."""

    name = "hlo.subtract"
    DTYPES: ClassVar = NUMERIC + COMPLEX
    UFUNC = staticmethod(np.subtract)
    COMPLEX_GRADIENT: ClassVar = True

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, skip_input_indices=(), **params):
        """d(x - y) = dx - dy: ``ct`` and ``-ct`` (TF's _SubGrad)."""
        (ct,) = cotangents
        if not G.is_inexact(inputs[0]):
            return [None, None]
        return [None if 0 in skip_input_indices else ct, None if 1 in skip_input_indices else G.neg(ct)]


@irdl_op_definition
class MultiplyOp(ElementwiseBinary):
    """Elementwise product (StableHLO spec: multiply)."""

    name = "hlo.multiply"
    DTYPES: ClassVar = NUMERIC + ("bool",) + COMPLEX
    UFUNC = staticmethod(np.multiply)
    COMPLEX_GRADIENT: ClassVar = True

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, skip_input_indices=(), **params):
        """d(x * y) = y dx + x dy: ``ct * y`` and ``x * ct`` (TF's _MulGrad;
        complex64: ``ct * conj(y)`` and ``conj(x) * ct``)."""
        (ct,), (x, y) = cotangents, inputs
        if not G.is_inexact(x):
            return [None, None]
        return [
            None if 0 in skip_input_indices else G.mul(ct, G.conj(y)),
            None if 1 in skip_input_indices else G.mul(G.conj(x), ct),
        ]


def _int_divide(a, b):
    # StableHLO divide on integers truncates toward zero.
    q = np.floor_divide(a, b)
    fix = (np.remainder(a, b) != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0))
    return q + fix.astype(q.dtype)


@irdl_op_definition
class DivideOp(ElementwiseBinary):
    """Elementwise quotient; integers truncate toward zero (StableHLO spec: divide)."""

    name = "hlo.divide"
    DTYPES: ClassVar = NUMERIC + COMPLEX
    COMPLEX_GRADIENT: ClassVar = True

    @classmethod
    def kernel(cls, element_dtype=None, **params):
        return low_precision_in_f32(np.true_divide if element_dtype in FLOATS else _divide, element_dtype)

    @classmethod
    def out_kernel(cls, element_dtype=None, **params):
        """``np.true_divide`` with ``out=`` on float32 / float64 / bfloat16
        (the float branch of the kernel); None on integers and float16."""
        return ufunc_into(np.true_divide, element_dtype) if element_dtype in FLOATS else None

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, skip_input_indices=(), **params):
        """d(x / y) = dx / y - x / y**2 dy: ``ct / y`` and ``ct * (-x / y) / y``
        (TF's _RealDivGrad; complex64: the same of ``conj(x)``, ``conj(y)``);
        integer division has no gradient."""
        (ct,), (x, y) = cotangents, inputs
        if not G.is_inexact(x):
            return [None, None]
        x, y = G.conj(x), G.conj(y)
        return [
            None if 0 in skip_input_indices else G.div(ct, y),
            None if 1 in skip_input_indices else G.mul(ct, G.div(G.div(G.neg(x), y), y)),
        ]


def _divide(a, b):
    if np.asarray(a).dtype.kind in "iu":
        return _int_divide(a, b)
    return np.true_divide(a, b)


@irdl_op_definition
class PowerOp(ElementwiseBinary):
    """Elementwise ``lhs ** rhs`` (StableHLO spec: power)."""

    name = "hlo.power"
    DTYPES: ClassVar = NUMERIC + COMPLEX
    UFUNC = staticmethod(np.power)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d(x ** y) = y x**(y-1) dx + log(x) x**y dy, with log(x) taken as 0
        where x <= 0 (TF's _PowGrad)."""
        (ct,), (x, y), (z,) = cotangents, inputs, outputs
        if not G.is_float(x):
            return [None, None]
        gx = G.mul(G.mul(ct, y), G.power(x, G.sub(y, G.full_like(y, 1))))
        positive = G.compare(x, G.zeros_like(x), "GT")
        safe_x = G.select(positive, x, G.full_like(x, 1))
        log_x = G.select(positive, G.log(safe_x), G.zeros_like(x))
        return [gx, G.mul(G.mul(ct, z), log_x)]


@irdl_op_definition
class MaximumOp(ElementwiseBinary):
    """Elementwise maximum, NaN-propagating (StableHLO spec: maximum)."""

    name = "hlo.maximum"
    DTYPES: ClassVar = NUMERIC + ("bool",)
    UFUNC = staticmethod(np.maximum)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """x gets ct where x >= y, y elsewhere (TF's _MaximumGrad)."""
        return _max_min_vjp(cotangents, inputs, "GE")


@irdl_op_definition
class MinimumOp(ElementwiseBinary):
    """Elementwise minimum, NaN-propagating (StableHLO spec: minimum)."""

    name = "hlo.minimum"
    DTYPES: ClassVar = NUMERIC + ("bool",)
    UFUNC = staticmethod(np.minimum)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """x gets ct where x <= y, y elsewhere (TF's _MinimumGrad)."""
        return _max_min_vjp(cotangents, inputs, "LE")


def _max_min_vjp(cotangents, inputs, direction):
    """TF's _MaximumMinimumGrad: ``select(x <dir> y, ct, 0)`` and the rest."""
    (ct,), (x, y) = cotangents, inputs
    if not G.is_float(x):
        return [None, None]
    xmask = G.compare(x, y, direction)
    zeros = G.zeros_like(ct)
    return [G.select(xmask, ct, zeros), G.select(xmask, zeros, ct)]


@irdl_op_definition
class AndOp(ElementwiseBinary):
    """Logical (bool) or bitwise (int) and (StableHLO spec: and)."""

    name = "hlo.and"
    DTYPES: ClassVar = INTS + ("bool",)
    NOT_DIFFERENTIABLE: ClassVar = True  # bools and ints only
    UFUNC = staticmethod(np.bitwise_and)


@irdl_op_definition
class OrOp(ElementwiseBinary):
    """Logical (bool) or bitwise (int) or (StableHLO spec: or)."""

    name = "hlo.or"
    DTYPES: ClassVar = INTS + ("bool",)
    NOT_DIFFERENTIABLE: ClassVar = True  # bools and ints only
    UFUNC = staticmethod(np.bitwise_or)


@irdl_op_definition
class NegateOp(ElementwiseUnary):
    """Elementwise negation (StableHLO spec: negate)."""

    name = "hlo.negate"
    DTYPES: ClassVar = NUMERIC + COMPLEX
    UFUNC = staticmethod(np.negative)
    COMPLEX_GRADIENT: ClassVar = True

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d(-x) = -dx: ``-ct`` (TF's _NegGrad)."""
        (ct,) = cotangents
        return [G.neg(ct) if G.is_inexact(inputs[0]) else None]


@irdl_op_definition
class AbsOp(ElementwiseUnary):
    """Elementwise absolute value (StableHLO spec: abs); of a ``complex64``
    operand its modulus, a ``float32`` (C2 of the spec: the result is the
    complex type's element type), computed without overflow as ``hypot``.

    Syntax: ``hlo.abs %x : tensor<3xf32>`` when the operand and result types
    are equal, else ``hlo.abs %z : (tensor<3xcomplex<f32>>) -> tensor<3xf32>``
    (StableHLO's printer does the same)."""

    name = "hlo.abs"
    operand = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = None
    DTYPES: ClassVar = NUMERIC + COMPLEX
    UFUNC = staticmethod(np.abs)
    COMPLEX_GRADIENT: ClassVar = True

    @classmethod
    def infer(cls, specs, **params):
        (s,) = specs
        _require_dtype(s, cls.DTYPES, cls.name)
        return [TensorSpec(s.shape, "float32") if s.dtype in COMPLEX else s]

    # The kernels are ElementwiseUnary's, keyed by the result dtype: float32
    # ``np.abs`` takes a complex64 operand to its float32 modulus as it is.

    @classmethod
    def parse(cls, parser: Parser) -> AbsOp:
        operand = parser.parse_unresolved_operand()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        if parser.parse_optional_punctuation("(") is not None:
            operand_type = parser.parse_type()
            parser.parse_punctuation(")")
            parser.parse_punctuation("->")
            result_type = parser.parse_type()
        else:
            operand_type = result_type = parser.parse_type()
        op = cls.create(operands=[parser.resolve_operand(operand, operand_type)], result_types=[result_type])
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        if self.operand.type == self.result.type:
            printer.print_attribute(self.result.type)
        else:
            printer.print_function_type([self.operand.type], [self.result.type])

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d|x| = sign(x) dx, sign(0) = 0: ``ct * sign(x)`` (TF's _AbsGrad);
        of a complex64 ``x``: ``complex(ct, 0) * x / complex(|x|, 0)``, 0
        where ``|x| = 0`` (TF's _ComplexAbsGrad, a ``div_no_nan``)."""
        (ct,), (x,) = cotangents, inputs
        if G.is_complex(x):
            (y,) = outputs
            zeros, complex_op = G.zeros_like(y), G._op("hlo.complex")
            at_zero = G.compare(y, zeros, "EQ")
            safe = G.select(at_zero, G.full_like(y, 1), y)
            q = G.div(G.mul(G.bind1(complex_op, [ct, zeros]), x), G.bind1(complex_op, [safe, zeros]))
            return [G.select(at_zero, G.zeros_like(x), q)]
        if not G.is_float(x):
            return [None]
        zeros = G.zeros_like(x)
        negative = G.select(G.compare(x, zeros, "LT"), G.neg(ct), zeros)
        return [G.select(G.compare(x, zeros, "GT"), ct, negative)]


@irdl_op_definition
class ExpOp(ElementwiseUnary):
    """Elementwise e**x (StableHLO spec: exponential)."""

    name = "hlo.exponential"
    COMPLEX_GRADIENT: ClassVar = True
    DTYPES: ClassVar = FLOATS + COMPLEX
    UFUNC = staticmethod(np.exp)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d exp(x) = exp(x) dx: ``ct * y`` (TF's _ExpGrad; complex64:
        ``ct * conj(y)``)."""
        return [G.mul(cotangents[0], G.conj(outputs[0]))]


@irdl_op_definition
class LogOp(ElementwiseUnary):
    """Elementwise natural logarithm (StableHLO spec: log)."""

    name = "hlo.log"
    COMPLEX_GRADIENT: ClassVar = True
    DTYPES: ClassVar = FLOATS + COMPLEX
    UFUNC = staticmethod(np.log)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d log(x) = dx / x: ``ct / x`` (TF's _LogGrad; complex64:
        ``ct / conj(x)``)."""
        return [G.div(cotangents[0], G.conj(inputs[0]))]


@irdl_op_definition
class SqrtOp(ElementwiseUnary):
    """Elementwise square root (StableHLO spec: sqrt)."""

    name = "hlo.sqrt"
    COMPLEX_GRADIENT: ClassVar = True
    DTYPES: ClassVar = FLOATS + COMPLEX
    UFUNC = staticmethod(np.sqrt)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d sqrt(x) = dx / (2 sqrt(x)): ``ct * 0.5 / y`` (TF's _SqrtGrad;
        complex64: ``ct * 0.5 / conj(y)``)."""
        (ct,), (y,) = cotangents, outputs
        y = G.conj(y)
        return [G.mul(ct, G.div(G.full_like(y, 0.5), y))]


@irdl_op_definition
class TanhOp(ElementwiseUnary):
    """Elementwise hyperbolic tangent (StableHLO spec: tanh)."""

    name = "hlo.tanh"
    DTYPES: ClassVar = FLOATS + COMPLEX
    UFUNC = staticmethod(np.tanh)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d tanh(x) = (1 - tanh(x)**2) dx: ``ct * (1 - y * y)`` (TF's _TanhGrad)."""
        (ct,), (y,) = cotangents, outputs
        return [G.mul(ct, G.sub(G.full_like(y, 1), G.mul(y, y)))]


def _logistic(x):
    # 1 / (1 + exp(-x)) through exp(-|x|): it cannot overflow, and unlike
    # 0.5 * tanh(0.5 * x) + 0.5 it keeps full relative precision for x << 0.
    x = np.asarray(x)
    e = np.exp(-np.abs(x))
    one = x.dtype.type(1)
    return np.where(x >= 0, one / (one + e), e / (one + e))


@irdl_op_definition
class LogisticOp(ElementwiseUnary):
    """Elementwise 1 / (1 + e**-x) (StableHLO spec: logistic)."""

    name = "hlo.logistic"
    DTYPES: ClassVar = FLOATS
    UFUNC = staticmethod(_logistic)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """d sigmoid(x) = sigmoid(x) (1 - sigmoid(x)) dx: ``ct * y * (1 - y)``
        (TF's _SigmoidGrad)."""
        (ct,), (y,) = cotangents, outputs
        return [G.mul(ct, G.mul(y, G.sub(G.full_like(y, 1), y)))]


@irdl_op_definition
class NotOp(ElementwiseUnary):
    """Logical (bool) or bitwise (int) not (StableHLO spec: not)."""

    name = "hlo.not"
    DTYPES: ClassVar = INTS + ("bool",)
    NOT_DIFFERENTIABLE: ClassVar = True  # bools and ints only
    UFUNC = staticmethod(np.invert)


_COMPARE = {
    "EQ": np.equal,
    "NE": np.not_equal,
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
}


@irdl_op_definition
class CompareOp(PrimitiveOp):
    """Elementwise comparison giving bools (StableHLO spec: compare).

    Not differentiable: the result is bool (TF: ``NotDifferentiable`` for
    Less, Equal, ...)."""

    name = "hlo.compare"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    comparison_direction = prop_def(ComparisonDirectionAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$comparison_direction `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)"
    PARAMS: ClassVar = {"comparison_direction": EnumParam(ComparisonDirectionAttr)}
    NOT_DIFFERENTIABLE: ClassVar = True

    @classmethod
    def infer(cls, specs, comparison_direction=None, **_):
        s = _same(specs, cls.name)
        if s.dtype == "string":
            raise ShapeError("hlo.compare does not support strings")
        if comparison_direction not in _COMPARE:
            raise ShapeError(f"unknown comparison_direction {comparison_direction!r}")
        if s.dtype in COMPLEX and comparison_direction not in ("EQ", "NE"):
            raise ShapeError(
                f"hlo.compare {comparison_direction} does not support dtype {s.dtype}; complex numbers are not"
                " ordered (EQ and NE only)"
            )
        return [TensorSpec(s.shape, "bool")]

    def result_params(self):
        return {"element_dtype": TensorSpec.of_type(self.lhs.type).dtype}

    @classmethod
    def kernel(cls, comparison_direction, element_dtype=None, **_):
        return low_precision_in_f32(_COMPARE[comparison_direction], element_dtype, round_back=False)

    @classmethod
    def out_kernel(cls, comparison_direction, element_dtype=None, **_):
        """The comparison ufunc with ``out=`` (not on float16; bfloat16
        operands compared as float32, exactly)."""
        return ufunc_into(_COMPARE[comparison_direction], element_dtype, round_back=False)


@irdl_op_definition
class SelectOp(PrimitiveOp):
    """``pred ? on_true : on_false`` elementwise; pred may be a scalar
    (StableHLO spec: select)."""

    name = "hlo.select"
    pred = operand_def(TensorType)
    on_true = operand_def(TensorType)
    on_false = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$pred `,` $on_true `,` $on_false attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, specs, **_):
        pred, t, f = specs
        s = _same([t, f], cls.name)
        if pred.dtype != "bool":
            raise ShapeError(f"hlo.select predicate must be bool, got {pred}")
        if pred.shape not in ((), s.shape):
            raise ShapeError(f"hlo.select predicate shape {pred} must be a scalar or match {s}")
        return [s]

    @classmethod
    def kernel(cls, **_):
        return _select

    OUT_IN_PLACE: ClassVar[bool] = True

    @classmethod
    def out_kernel(cls, **_):
        """``on_false`` copied into ``out``, then ``on_true`` where ``pred``
        holds: ``np.where``'s choice of elements; ``out`` may be
        ``on_true`` or ``on_false`` (the elements chosen from it stay)."""
        return _select_into

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """The predicate gets none; on_true gets ``select(pred, ct, 0)`` and
        on_false ``select(pred, 0, ct)`` (TF's _SelectGrad)."""
        (ct,), (pred, on_true, _) = cotangents, inputs
        if not G.is_float(on_true):
            return [None, None, None]
        zeros = G.zeros_like(ct)
        return [None, G.select(pred, ct, zeros), G.select(pred, zeros, ct)]


def _select(pred, on_true, on_false):
    """``np.where``, with a fast path for a predicate that is constant along
    the last axis (broadcast from rows) and a splat ``on_false`` (a gather
    zeroing its out-of-range rows): a copy of ``on_true`` and one row
    assignment instead of an element-by-element choice (8x faster for
    float32[512, 128]).  The result is always a new array: the buffer
    planner (runtime/buffers.py) counts on an op with an ``out_kernel`` never
    returning a view of an operand."""
    p, f = np.asarray(pred), np.asarray(on_false)
    if p.ndim and p.strides[-1] == 0 and not any(f.strides) and f.size and np.shape(on_true) == p.shape:
        out = np.array(on_true, copy=True)
        out[~p[..., 0]] = f.flat[0]
        return out
    return np.where(p, on_true, on_false)


def _select_into(out, pred, on_true, on_false):
    """:func:`_select` written into ``out``, which may be ``on_true`` or
    ``on_false`` (OUT_IN_PLACE), with its fast path: a row-broadcast
    predicate and a splat ``on_false`` (a gather zeroing its out-of-range
    rows) copy ``on_true`` (nothing written when ``out`` is ``on_true``)
    and assign the rows not chosen, if any (8.7 us instead of 31 us for
    float32[512, 128] into another array, 2.7 us in place)."""
    p, f = np.asarray(pred), np.asarray(on_false)
    if p.ndim and p.strides[-1] == 0 and not any(f.strides) and f.size and np.shape(on_true) == p.shape:
        rows = p[..., 0]
        if out is not on_true:
            np.copyto(out, on_true)
        if not rows.all():
            out[~rows] = f.flat[0]
        return out
    t = on_true if out is on_true or not np.may_share_memory(out, on_true) else np.array(on_true)
    f = on_false if out is on_false or not np.may_share_memory(out, on_false) else np.array(on_false)
    if np.may_share_memory(out, p):
        p = np.array(p)
    if out is t:
        np.copyto(out, f, where=~p)
    elif out is f:
        np.copyto(out, t, where=p)
    else:
        np.copyto(out, f)
        np.copyto(out, t, where=p)
    return out


def _from_complex(x: np.ndarray, np_dtype: np.dtype) -> np.ndarray | None:
    """A complex operand converted to a real ``np_dtype`` (TF's ``cast``):
    the imaginary part dropped, the real part converted as a float32 (to
    bool ``real != 0``, as TF's kernel: ``0 + 1j`` is False); None for a
    complex target."""
    if np_dtype.kind == "c":
        return None
    if np_dtype == np.bool_:
        return np.not_equal(x.real, 0)
    return x.real


def _convert_into(out, x):
    x = np.asarray(x)
    if x.dtype.kind == "c":
        real = _from_complex(x, out.dtype)
        if real is not None and real.dtype == np.bool_:
            np.copyto(out, real)
            return out
        x = x if real is None else real
    elif out.dtype.kind == "c" and x.dtype == B16.BF16:
        x = B16.widen(x)
    if out.dtype == B16.BF16 and x.dtype == _F32:
        return B16.round_f32(x, out=out)
    np.copyto(out, B16.widen(x) if x.dtype == B16.BF16 and not x.flags.c_contiguous else x, casting="unsafe")
    return out


def _convert(np_dtype):
    """``hlo.convert``'s kernel: ``astype``; float32 to bfloat16 rounds with
    :func:`narrow`, bfloat16 to float32 widens a broadcast operand once per
    element."""

    def run(x):
        x = np.asarray(x)
        if x.dtype.kind == "c":
            real = _from_complex(x, np_dtype)
            if real is not None:
                if real.dtype == np.bool_:
                    return real
                x = real
        elif np_dtype.kind == "c" and x.dtype == B16.BF16:
            x = B16.widen(x)
        if np_dtype == B16.BF16:
            return narrow(x, np_dtype)
        if x.dtype == B16.BF16 and np_dtype == _F32:
            w = B16.widen(x)
            return w if w.flags.owndata else np.array(w)
        return x.astype(np_dtype)

    return run


@irdl_op_definition
class ConvertOp(PrimitiveOp):
    """Elementwise dtype conversion (StableHLO spec: convert); float to int
    truncates toward zero, to bool is ``!= 0``.  A real to ``complex64`` has
    the imaginary part +0; ``complex64`` to a real dtype drops the imaginary
    part and converts the real part (TF's ``cast``, to bool too:
    ``real != 0``; StableHLO leaves it to the implementation)."""

    name = "hlo.convert"
    COMPLEX_GRADIENT: ClassVar = True
    operand = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"

    def result_params(self):
        return {"dtype": TensorSpec.of_type(self.result.type).dtype}

    @classmethod
    def infer(cls, specs, dtype=None, **_):
        (s,) = specs
        if s.dtype == "string" or dtype == "string":
            raise ShapeError("hlo.convert does not convert strings; use hlo.string_to_number")
        return [TensorSpec(s.shape, dtype)]

    @classmethod
    def kernel(cls, dtype, **_):
        return _convert(numpy_dtype(dtype))

    OUT_IN_PLACE: ClassVar[bool] = True

    @classmethod
    def out_kernel(cls, dtype, **_):
        """``np.copyto(out, x, casting="unsafe")``: the cast ``astype`` makes."""
        return _convert_into

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, dtype=None, **params):
        """Float (or complex64) to float: the cotangent converted back (to
        complex64 with imaginary part 0, from complex64 its real part); any
        conversion from or to an integer or bool has no gradient (TF's
        _CastGrad)."""
        (ct,), (x,) = cotangents, inputs
        if not (G.is_inexact(x) and G.is_inexact(ct)):
            return [None]
        return [G.convert(ct, G.dtype(x))]


# --------------------------------------------------------------------------
# Constants and shape ops
# --------------------------------------------------------------------------


class DenseValue(Param):
    def encode(self, value):
        return dense_from_array(np.asarray(value))

    def decode(self, attr):
        return array_from_dense(attr)


@irdl_op_definition
class ConstantOp(PrimitiveOp):
    """A numeric constant tensor (StableHLO spec: constant).

    Syntax: ``hlo.constant dense<ELEMENTS> : tensor<...>``, MLIR's dense
    elements literal (a splat, a nested list, or ``"0x..."``, the raw
    little-endian bytes in hex).  A float element is a decimal literal or its
    IEEE bit pattern as a hex integer as wide as the type, so every value,
    non-finite ones included, round-trips bit for bit::

      hlo.constant dense<0xFF800000> : tensor<f32>                  // -inf
      hlo.constant dense<[0x7F800000, 0x7FC00000, -0.000000e+00]> : tensor<3xf32>
      hlo.constant dense<0xFFF8000000000001> : tensor<f64>          // NaN, payload 1

    The printer writes non-finite elements (inf, -inf, NaN with its sign and
    payload) as upper-case hex bit patterns, finite ones in decimal (or hex
    when 9 / 17 significant digits would show no ``.``), and a splat only when
    every element has the same bits (see :mod:`xtpu.dialects.dense_syntax`).

    Not differentiable: it has no inputs."""

    name = "hlo.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    PARAMS: ClassVar = {"value": DenseValue()}
    NOT_DIFFERENTIABLE: ClassVar = True

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        attrs = parser.parse_optional_attr_dict()
        if parser.parse_optional_keyword("dense") is None:
            parser.raise_error("hlo.constant expects a dense elements attribute")
        value = dense_syntax.parse_dense_body(parser)
        op = cls.create(result_types=[value.type], properties={"value": value})
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_op_attributes(self.attributes)
        printer.print_string(" ")
        dense_syntax.print_dense(printer, self.value)

    @classmethod
    def infer(cls, specs, value=None, **_):
        arr = np.asarray(value)
        return [TensorSpec(arr.shape, dtype_of_numpy(arr.dtype))]

    @classmethod
    def kernel(cls, value, **_):
        return lambda: value


@irdl_op_definition
class IotaOp(PrimitiveOp):
    """Values 0, 1, ... along ``iota_dimension`` (StableHLO spec: iota).

    Not differentiable: it has no inputs."""

    name = "hlo.iota"
    iota_dimension = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "`dim` `=` $iota_dimension attr-dict `:` type($result)"
    PARAMS: ClassVar = {"iota_dimension": IntParam()}
    NOT_DIFFERENTIABLE: ClassVar = True

    def result_params(self):
        s = TensorSpec.of_type(self.result.type)
        return {"shape": s.shape, "dtype": s.dtype}

    @classmethod
    def infer(cls, specs, iota_dimension=0, shape=(), dtype="int64", **_):
        _check_dims([iota_dimension], len(shape), "iota_dimension")
        _require_dtype(TensorSpec(tuple(shape), dtype), NUMERIC, cls.name)
        return [TensorSpec(tuple(shape), dtype)]

    @classmethod
    def make(cls, operands, **params):
        (spec,) = cls.infer([], **params)
        return cls.create_op([], [spec.to_type()], params)

    @classmethod
    def kernel(cls, iota_dimension, shape, dtype, **_):
        shape = tuple(shape)
        view = [1] * len(shape)
        view[iota_dimension] = shape[iota_dimension]
        arr = np.broadcast_to(np.arange(shape[iota_dimension], dtype=numpy_dtype(dtype)).reshape(view), shape)
        return lambda: arr


@irdl_op_definition
class BroadcastInDimOp(PrimitiveOp):
    """Broadcast to a larger shape; operand dimension i becomes result
    dimension ``broadcast_dimensions[i]`` (StableHLO spec: broadcast_in_dim)."""

    name = "hlo.broadcast_in_dim"
    COMPLEX_GRADIENT: ClassVar = True
    operand = operand_def(TensorType)
    broadcast_dimensions = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$operand `,` `dims` `=` $broadcast_dimensions attr-dict `:` functional-type(operands, results)"
    PARAMS: ClassVar = {"broadcast_dimensions": IntArrayParam()}

    def result_params(self):
        return {"shape": TensorSpec.of_type(self.result.type).shape}

    @classmethod
    def infer(cls, specs, broadcast_dimensions=(), shape=(), **_):
        (s,) = specs
        dims = tuple(broadcast_dimensions)
        if len(dims) != s.rank:
            raise ShapeError(
                f"broadcast_dimensions {list(dims)} must have one entry per operand dimension (rank {s.rank})"
            )
        _check_dims(dims, len(shape), "broadcast_dimensions")
        for i, d in enumerate(dims):
            if s.shape[i] not in (1, shape[d]):
                raise ShapeError(
                    f"operand dimension {i} of size {s.shape[i]} cannot broadcast to result dimension {d} of size {shape[d]}"
                )
        return [TensorSpec(tuple(shape), s.dtype)]

    @classmethod
    def kernel(cls, broadcast_dimensions, shape, **_):
        dims = tuple(broadcast_dimensions)
        shape = tuple(shape)
        order = tuple(sorted(range(len(dims)), key=dims.__getitem__))
        sorted_dims = tuple(dims[i] for i in order)
        needs_transpose = order != tuple(range(len(dims)))

        def run(x):
            x = np.asarray(x)
            if needs_transpose:
                x = np.transpose(x, order)
            if x.dtype.hasobject or not x.size or not (x.flags.c_contiguous or x.flags.f_contiguous):
                view = [1] * len(shape)
                for i, d in enumerate(sorted_dims):
                    view[d] = x.shape[i]
                return np.broadcast_to(x.reshape(view), shape)
            # The read-only view np.broadcast_to makes, built directly (0.4
            # against 2.6 us: a gather's row mask [512] -> [512, 128]).
            strides = [0] * len(shape)
            for i, d in enumerate(sorted_dims):
                if x.shape[i] != 1:
                    strides[d] = x.strides[i]
            out = np.ndarray(shape, x.dtype, x, 0, strides)
            out.flags.writeable = False
            return out

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, broadcast_dimensions=(), shape=(), **params):
        """The cotangent summed over the new dimensions and over those where a
        size-1 operand dimension was expanded, then put back in the operand's
        dimension order and shape (JAX's _broadcast_in_dim_transpose_rule;
        TF's _BroadcastToGrad)."""
        (ct,), (x,) = cotangents, inputs
        if not G.is_inexact(x):
            return [None]
        dims, xshape = tuple(broadcast_dimensions), G.shape(x)
        kept = [i for i, n in enumerate(xshape) if n != 1]  # operand dims that map 1:1
        summed = [d for d in range(len(shape)) if d not in {dims[i] for i in kept}]
        g = G.reduce_sum(ct, summed)  # its dims: the kept ones, in result order
        order = sorted(kept, key=lambda i: dims[i])
        g = G.transpose(g, [order.index(i) for i in kept])
        return [G.reshape(g, xshape)]


@irdl_op_definition
class ReshapeOp(PrimitiveOp):
    """Same elements in row-major order, new shape (StableHLO spec: reshape)."""

    name = "hlo.reshape"
    COMPLEX_GRADIENT: ClassVar = True
    operand = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$operand attr-dict `:` functional-type(operands, results)"

    def result_params(self):
        return {"shape": TensorSpec.of_type(self.result.type).shape}

    @classmethod
    def infer(cls, specs, shape=(), **_):
        (s,) = specs
        out = TensorSpec(tuple(shape), s.dtype)
        if out.size != s.size:
            raise ShapeError(f"cannot reshape {s} ({s.size} elements) to {list(shape)} ({out.size} elements)")
        return [out]

    @classmethod
    def kernel(cls, shape, **_):
        shape = tuple(shape)
        return lambda x: np.reshape(x, shape)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """The cotangent reshaped to the operand's shape (TF's _ReshapeGrad)."""
        (ct,), (x,) = cotangents, inputs
        return [G.reshape(ct, G.shape(x)) if G.is_inexact(x) else None]


@irdl_op_definition
class TransposeOp(PrimitiveOp):
    """Permute dimensions: result dim i is operand dim ``permutation[i]``
    (StableHLO spec: transpose)."""

    name = "hlo.transpose"
    COMPLEX_GRADIENT: ClassVar = True
    operand = operand_def(TensorType)
    permutation = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$operand `,` `dims` `=` $permutation attr-dict `:` functional-type(operands, results)"
    PARAMS: ClassVar = {"permutation": IntArrayParam()}

    @classmethod
    def infer(cls, specs, permutation=(), **_):
        (s,) = specs
        perm = tuple(permutation)
        if sorted(perm) != list(range(s.rank)):
            raise ShapeError(f"permutation {list(perm)} is not a permutation of the {s.rank} dimensions of {s}")
        return [TensorSpec(tuple(s.shape[p] for p in perm), s.dtype)]

    @classmethod
    def kernel(cls, permutation, **_):
        perm = tuple(permutation)
        return lambda x: np.transpose(x, perm)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, permutation=(), **params):
        """The cotangent transposed by the inverse permutation (TF's _TransposeGrad)."""
        (ct,), (x,) = cotangents, inputs
        if not G.is_inexact(x):
            return [None]
        return [G.transpose(ct, G.inverse_permutation(permutation))]


def _merges(a: np.ndarray, nb: int) -> bool:
    """Whether the first ``nb`` dimensions of ``a`` merge into one without
    a copy (each one's stride the next larger one's extent, size-1
    dimensions aside)."""
    expected = None
    for i in range(nb - 1, -1, -1):
        if a.shape[i] == 1:
            continue
        if expected is not None and a.strides[i] != expected:
            return False
        expected = a.strides[i] * a.shape[i]
    return True


@irdl_op_definition
class DotGeneralOp(PrimitiveOp):
    """Batched tensor contraction (StableHLO spec: dot_general).

    The result has the batch dimensions, then lhs's free dimensions, then
    rhs's free dimensions.  Its element type may differ from the operands'
    (JAX's and TF's ``preferred_element_type``, which StableHLO carries as
    the result type): ``(tensor<..xbf16>, tensor<..xbf16>) -> tensor<..xf32>``
    is a bfloat16 contraction accumulated in float32; an integer contraction
    may widen (``i8`` operands, ``i32`` result).

    TPU arithmetic: bfloat16 and float16 operands are multiplied exactly
    (a product of two bfloat16 values fits a float32) and the products are
    summed in float32, then rounded once (to nearest, ties to even) to the
    result type -- the MXU's behaviour, and XLA's on CPU.  The kernel does
    this with a float32 BLAS call (numpy has no bfloat16 GEMM); only the
    order of the float32 additions can differ from a TPU's (docs/dtypes.md).
    """

    name = "hlo.dot_general"
    COMPLEX_GRADIENT: ClassVar = True
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    lhs_batching_dimensions = prop_def(DenseArrayBase[I64])
    rhs_batching_dimensions = prop_def(DenseArrayBase[I64])
    lhs_contracting_dimensions = prop_def(DenseArrayBase[I64])
    rhs_contracting_dimensions = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$lhs `,` $rhs `,` `batching_dims` `=` $lhs_batching_dimensions `x` $rhs_batching_dimensions"
        " `,` `contracting_dims` `=` $lhs_contracting_dimensions `x` $rhs_contracting_dimensions"
        " attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {
        "lhs_batching_dimensions": IntArrayParam(),
        "rhs_batching_dimensions": IntArrayParam(),
        "lhs_contracting_dimensions": IntArrayParam(),
        "rhs_contracting_dimensions": IntArrayParam(),
    }

    @classmethod
    def _free(cls, rank, batch, contract):
        return [d for d in range(rank) if d not in batch and d not in contract]

    @classmethod
    def infer(
        cls,
        specs,
        lhs_batching_dimensions=(),
        rhs_batching_dimensions=(),
        lhs_contracting_dimensions=(),
        rhs_contracting_dimensions=(),
        preferred_element_type=None,
        **_,
    ):
        lhs, rhs = specs
        if lhs.dtype != rhs.dtype:
            raise ShapeError(f"operands of hlo.dot_general must have the same dtype, got {lhs} and {rhs}")
        _require_dtype(lhs, NUMERIC + COMPLEX, cls.name)
        out_dtype = preferred_element_type or lhs.dtype
        if out_dtype != lhs.dtype and lhs.dtype in COMPLEX:
            raise ShapeError(f"hlo.dot_general result type {out_dtype} must be {lhs.dtype} for {lhs.dtype} operands")
        if out_dtype != lhs.dtype and (out_dtype in FLOATS) != (lhs.dtype in FLOATS):
            raise ShapeError(
                f"hlo.dot_general result type {out_dtype} must be a float for float operands and an integer for"
                f" integer ones, got operands {lhs.dtype}"
            )
        lb, rb = tuple(lhs_batching_dimensions), tuple(rhs_batching_dimensions)
        lc, rc = tuple(lhs_contracting_dimensions), tuple(rhs_contracting_dimensions)
        if len(lb) != len(rb) or len(lc) != len(rc):
            raise ShapeError("lhs and rhs must have as many batching and contracting dimensions as each other")
        _check_dims(lb + lc, lhs.rank, "lhs batching and contracting dimensions")
        _check_dims(rb + rc, rhs.rank, "rhs batching and contracting dimensions")
        for a, b in zip(lb + lc, rb + rc):
            if lhs.shape[a] != rhs.shape[b]:
                raise ShapeError(
                    f"lhs dimension {a} (size {lhs.shape[a]}) and rhs dimension {b} (size {rhs.shape[b]}) must match"
                )
        shape = (
            tuple(lhs.shape[d] for d in lb)
            + tuple(lhs.shape[d] for d in cls._free(lhs.rank, lb, lc))
            + tuple(rhs.shape[d] for d in cls._free(rhs.rank, rb, rc))
        )
        return [TensorSpec(shape, out_dtype)]

    def result_params(self):
        return {"preferred_element_type": TensorSpec.of_type(self.result.type).dtype}

    @classmethod
    def kernel(
        cls,
        lhs_batching_dimensions=(),
        rhs_batching_dimensions=(),
        lhs_contracting_dimensions=(),
        rhs_contracting_dimensions=(),
        preferred_element_type=None,
        **_,
    ):
        return accumulate_as(
            cls._contraction(
                lhs_batching_dimensions, rhs_batching_dimensions, lhs_contracting_dimensions, rhs_contracting_dimensions
            ),
            preferred_element_type,
            bf16_native=True,
        )

    @classmethod
    def _contraction(cls, lb, rb, lc, rc) -> Callable[..., Any]:
        """``f(x, y, out=None)``: the contraction in ``x``'s dtype, into
        ``out`` when given (``np.matmul``'s ``out=``: the same BLAS call);
        bfloat16 operands give a float32 result (exact products, float32
        sums: :func:`xtpu.dialects.intra_op.matmul`)."""
        lb, rb, lc, rc = list(lb), list(rb), list(lc), list(rc)
        if lb == rb and lb in ([], [0]) and len(lc) == 1 and len(rc) == 1:
            # Matrices, or a stack of them on a leading batching dimension
            # (a batched program's replica axis): each matrix the same BLAS
            # call either way, so a replica's product is bit for bit the
            # unbatched program's.
            nb, l_c, r_c = len(lb), lc[0], rc[0]
            general = None if not lb else cls._general(lb, rb, lc, rc)

            def matmul_2d(x, y, out=None):
                # Transposed views keep BLAS's no-copy transpose flags.
                if x.ndim == nb + 2 and y.ndim == nb + 2:
                    return intra_op.matmul(
                        x if l_c == nb + 1 else np.swapaxes(x, -1, -2),
                        y if r_c == nb else np.swapaxes(y, -1, -2),
                        out=out,
                    )
                if y.ndim == nb + 2 and l_c == x.ndim - 1 and x.flags.c_contiguous and x.size:
                    # [..., K] @ W: one 2-D product of every leading row
                    # (of each matrix of a stack), W's transpose a BLAS
                    # flag as above, not a copy.
                    rows = x.reshape(*x.shape[:nb], -1, x.shape[-1])
                    w = y if r_c == nb else np.swapaxes(y, -1, -2)
                    if out is not None and out.flags.c_contiguous:
                        intra_op.matmul(rows, w, out=out.reshape(*rows.shape[:-1], w.shape[-1]))
                        return out
                    r = intra_op.matmul(rows, w).reshape(x.shape[:-1] + (w.shape[-1],))
                elif general is not None:
                    return general(x, y, out)
                else:
                    if x.dtype == B16.BF16:  # numpy's tensordot has no bfloat16 GEMM
                        x, y = B16.widen(x), B16.widen(y)
                    r = np.tensordot(x, y, axes=([l_c], [r_c]))
                if out is None:
                    return r
                np.copyto(out, r)
                return out

            return matmul_2d
        return cls._general(lb, rb, lc, rc)

    @classmethod
    def _general(cls, lb, rb, lc, rc) -> Callable[..., Any]:
        """The contraction as one stacked ``matmul`` of ``[b, m, k] @ [b, k,
        n]`` (batching, free and contracting dimensions each flattened)."""

        def run(x, y, out=None):
            x, y = np.asarray(x), np.asarray(y)
            lf = cls._free(x.ndim, lb, lc)
            rf = cls._free(y.ndim, rb, rc)
            bshape = [x.shape[d] for d in lb]
            m = math.prod(x.shape[d] for d in lf)
            n = math.prod(y.shape[d] for d in rf)
            k = math.prod(x.shape[d] for d in lc)
            b = math.prod(bshape)
            if len(lb) > 1:
                xm = np.transpose(x, lb + lf + lc).reshape(*bshape, m, k)
                ym = np.transpose(y, rb + rc + rf).reshape(*bshape, k, n)
                if _merges(xm, len(lb)) and _merges(ym, len(lb)):
                    xm, ym = xm.reshape(b, m, k), ym.reshape(b, k, n)
                # else numpy's stacking over the batching dimensions: an
                # operand shared along one (a stride-0 broadcast: a
                # batched program's mirrored weight) is not copied
            else:
                xm = np.transpose(x, lb + lf + lc).reshape(b, m, k)
                ym = np.transpose(y, rb + rc + rf).reshape(b, k, n)
            if out is not None:
                intra_op.matmul(xm, ym, out=out.reshape(*xm.shape[:-2], m, n))
                return out
            return intra_op.matmul(xm, ym).reshape(bshape + [x.shape[d] for d in lf] + [y.shape[d] for d in rf])

        return run

    @classmethod
    def out_kernel(
        cls,
        lhs_batching_dimensions=(),
        rhs_batching_dimensions=(),
        lhs_contracting_dimensions=(),
        rhs_contracting_dimensions=(),
        preferred_element_type=None,
        **_,
    ):
        """The contraction with ``np.matmul``'s ``out=`` when both operands
        have the result's dtype (not bfloat16 / float16, which accumulate in
        float32); otherwise the kernel's result copied into ``out``."""
        f = cls._contraction(
            lhs_batching_dimensions, rhs_batching_dimensions, lhs_contracting_dimensions, rhs_contracting_dimensions
        )
        k = accumulate_as(f, preferred_element_type, bf16_native=True)

        def into(out, x, y):
            x, y = np.asarray(x), np.asarray(y)
            if x.dtype == y.dtype == out.dtype and out.dtype not in _LOW_SET and out.flags.c_contiguous:
                return f(x, y, out=out)
            if x.dtype == y.dtype == B16.BF16 and out.flags.c_contiguous:
                # float32 accumulation straight into a float32 result, or
                # rounded once into a bfloat16 one
                if out.dtype == _F32:
                    return f(x, y, out=out)
                if out.dtype == B16.BF16:
                    return B16.round_f32(f(x, y), out=out)
            np.copyto(out, k(x, y))
            return out

        return into

    @classmethod
    def vjp(
        cls,
        cotangents,
        inputs,
        outputs,
        lhs_batching_dimensions=(),
        rhs_batching_dimensions=(),
        lhs_contracting_dimensions=(),
        rhs_contracting_dimensions=(),
        skip_input_indices=(),
        **params,
    ):
        """Each operand's cotangent is a dot_general of the result's cotangent
        with the other operand, contracting the other operand's free
        dimensions, transposed back to the operand's dimension order (JAX's
        _dot_general_transpose_lhs/_rhs; TF's _MatMulGrad / _BatchMatMulV2Grad,
        with the other operand conjugated for complex64); none for an
        operand in ``skip_input_indices``."""
        (ct,), (x, y) = cotangents, inputs
        if not G.is_inexact(x):
            return [None, None]
        x, y = G.conj(x), G.conj(y)
        # A widened result (bf16 operands, f32 result): the cotangent is
        # rounded to the operands' dtype and the gradient contractions
        # accumulate in the result's dtype, rounded once (a TPU's bf16
        # backward matmuls).
        xdt, wide = G.dtype(x), G.dtype(ct)
        if wide != xdt:
            ct = G.convert(ct, xdt)
        lb, rb = tuple(lhs_batching_dimensions), tuple(rhs_batching_dimensions)
        lc, rc = tuple(lhs_contracting_dimensions), tuple(rhs_contracting_dimensions)
        lf = cls._free(len(G.shape(x)), lb, lc)
        rf = cls._free(len(G.shape(y)), rb, rc)
        # ct's dimensions: the batch ones, lhs's free ones, rhs's free ones.
        nb, nl, nr = len(lb), len(lf), len(rf)
        ct_b = tuple(range(nb))
        ct_l = tuple(range(nb, nb + nl))
        ct_r = tuple(range(nb + nl, nb + nl + nr))
        # dx = ct . y over rhs's free dims: batch, lhs free, then y's
        # remaining dims -- rhs's contracting ones in increasing order, each
        # paired with an lhs contracting dim.
        gx = gy = None
        if 0 not in skip_input_indices:
            gx = _dot(ct, y, ct_b, rb, ct_r, rf, wide)
            gx_dims = list(lb) + lf + [lc[k] for k in sorted(range(len(lc)), key=lambda k: rc[k])]
            gx = G.transpose(gx, _argsort(gx_dims))
        if 1 not in skip_input_indices:
            # dy = x . ct over lhs's free dims: batch, x's remaining dims (lhs
            # contracting, increasing, paired with rhs contracting), rhs free.
            gy = _dot(x, ct, lb, ct_b, lf, ct_l, wide)
            gy_dims = list(rb) + [rc[k] for k in sorted(range(len(rc)), key=lambda k: lc[k])] + rf
            gy = G.transpose(gy, _argsort(gy_dims))
        return [gx, gy]


def _argsort(values):
    return tuple(sorted(range(len(values)), key=lambda i: values[i]))


def _dot(lhs, rhs, lb, rb, lc, rc, wide=None):
    dt = G.dtype(lhs)
    out = G.bind1(
        DotGeneralOp,
        [lhs, rhs],
        lhs_batching_dimensions=tuple(lb),
        rhs_batching_dimensions=tuple(rb),
        lhs_contracting_dimensions=tuple(lc),
        rhs_contracting_dimensions=tuple(rc),
        preferred_element_type=wide if wide not in (None, dt) else None,
    )
    return out if wide in (None, dt) else G.convert(out, dt)


def _widen_to(x, dtype):
    return B16.widen(x) if x.dtype == B16.BF16 and dtype == _F32 else x.astype(dtype)


def accumulate_as(fn, result_dtype=None, bf16_native=False):
    """``fn(x, y)``, a contraction, with TPU accumulation: operands of a
    low-precision float dtype (bfloat16, float16) are widened to float32
    (exactly) and the float32 result is rounded once, to nearest even, to
    ``result_dtype`` (the operands' dtype when None); integer operands are
    widened to a wider ``result_dtype`` before the product.  Other dtypes
    call ``fn`` as it is.  ``bf16_native``: ``fn`` takes bfloat16 operands
    itself and returns their float32-accumulated product (its matmuls go
    through :func:`xtpu.dialects.intra_op.matmul`, oneDNN's bfloat16 GEMM),
    so they are not widened first.  Shared by ``hlo.dot_general`` and the
    convolution kernels."""
    out_dt = None if result_dtype is None else numpy_dtype(result_dtype)
    acc_dt = None if out_dt is None else (_F32 if out_dt in _LOW else out_dt)

    def run(x, y):
        x, y = np.asarray(x), np.asarray(y)
        acc, out = acc_dt, out_dt
        if out is None:
            out = x.dtype
            acc = _F32 if out in _LOW else out
        if x.dtype == acc and y.dtype == acc:
            r = fn(x, y)
        elif bf16_native and acc == _F32 and x.dtype == y.dtype == B16.BF16:
            r = fn(x, y)
        else:
            r = fn(_widen_to(x, acc), _widen_to(y, acc))
        return r if acc == out else narrow(r, out)

    return run


@irdl_op_definition
class ReduceOp(PrimitiveOp):
    """Reduce ``input`` over ``dimensions`` with a binary op, starting from
    ``init_value`` (StableHLO spec: reduce, with the body a single
    add/mul/max/min/and/or op, written ``applies``).

    Gradients (float inputs; ``and`` / ``or`` have none): ``init_value`` is
    one more operand of every reduction, so it gets the cotangent summed over
    the result (``add``), its share of the ties (``max`` / ``min``: it is one
    of the tied candidates when it equals the result), or ``sum(ct * P)`` with
    ``P`` the product of the input (``mul``)."""

    name = "hlo.reduce"
    COMPLEX_GRADIENT: ClassVar = True
    input = operand_def(TensorType)
    init_value = operand_def(TensorType)
    computation = prop_def(ReductionKindAttr)
    dimensions = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "`(` $input `init` `:` $init_value `)` `applies` $computation `across` `dimensions` `=` $dimensions"
        " attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {"computation": EnumParam(ReductionKindAttr), "dimensions": IntArrayParam()}

    @classmethod
    def infer(cls, specs, computation="add", dimensions=(), **_):
        x, init = specs
        if init.shape != () or init.dtype != x.dtype:
            raise ShapeError(f"init_value must be a scalar of the input's dtype {x.dtype}, got {init}")
        if x.dtype == "string":
            raise ShapeError("hlo.reduce does not support strings")
        if x.dtype in COMPLEX and computation not in ("add", "mul"):
            raise ShapeError(f"hlo.reduce applies {computation} does not support dtype {x.dtype} (add and mul only)")
        dims = tuple(dimensions)
        _check_dims(dims, x.rank, "dimensions")
        shape = tuple(n for i, n in enumerate(x.shape) if i not in dims)
        return [TensorSpec(shape, x.dtype)]

    @classmethod
    def kernel(cls, computation, dimensions, **_):
        axes = tuple(dimensions)
        kinds = {}

        def run(x, init):
            # init_value starts every reduction (StableHLO), so a zero-size
            # reduced axis gives init: TF's identity (-inf for a float max).
            x = np.asarray(x)
            uf = kinds.get(x.dtype)
            if uf is None:
                uf = kinds[x.dtype] = reduction_ufunc(computation, x.dtype.name)
            if x.dtype in _LOW_SET:
                # bfloat16 / float16 sums and products accumulate in float32
                # and round once (XLA's and a TPU's reductions); max / min
                # are exact either way, and float32 is numpy's fast path.
                r = uf.reduce(B16.widen(x), axis=axes, initial=np.float32(np.asarray(init)[()]))
                return narrow(r, x.dtype)
            return uf.reduce(x, axis=axes, dtype=x.dtype, initial=np.asarray(init)[()])

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, computation="add", dimensions=(), skip_input_indices=(), **params):
        """add: ct broadcast back (TF's _SumGrad); max/min: ct split equally
        between the tied maxima, ``ct * (x == y) / count`` (TF's _MaxGrad /
        _MinGrad); mul: ct times the product of the other elements, from
        exclusive cumulative products, exact with zeros (TF's _ProdGrad)."""
        (ct,), (x, init), (y,) = cotangents, inputs, outputs
        if G.is_complex(x) and computation != "add":
            raise TypeError(f"gradients of complex64 are not supported by hlo.reduce applies {computation} (add only)")
        if not G.is_inexact(x) or computation not in ("add", "max", "min", "mul"):
            return [None, None]
        dt, xshape, yshape = G.dtype(x), G.shape(x), G.shape(y)
        dims = tuple(dimensions)
        kept = tuple(d for d in range(len(xshape)) if d not in dims)

        def back(v):  # a result-shaped value broadcast over the reduced dims
            return G.broadcast(v, kept, xshape)

        if computation == "add":
            return [None if 0 in skip_input_indices else back(ct), None if 1 in skip_input_indices else G.sum_all(ct)]
        init_y = G.broadcast(init, (), yshape)
        if computation in ("max", "min"):
            ind = G.convert(G.compare(x, back(y), "EQ"), dt)
            init_ind = G.convert(G.compare(init_y, y, "EQ"), dt)
            share = G.div(ct, G.add(G.reduce_sum(ind, dims), init_ind))
            return [G.mul(ind, back(share)), G.sum_all(G.mul(init_ind, share))]
        # mul: d x_i = init * (product of the other elements of its group).
        dx = G.mul(_product_of_others(x, dims), back(G.mul(ct, init_y)))
        return [dx, G.sum_all(G.mul(ct, G.reduce(x, "mul", dims)))]


def _product_of_others(x, dims):
    """For each element of ``x``, the product of the other elements of its
    group (the elements reduced together over ``dims``), as TF's _ProdGrad:
    the group moved to a last axis of length N, the exclusive cumulative
    products from the left and from the right multiplied.  The scans double
    their stride each step (log2 N slices, pads and multiplies), so there is
    no division and the result is exact, and differentiable, with zeros."""
    xshape = G.shape(x)
    kept = [d for d in range(len(xshape)) if d not in dims]
    red = sorted(dims)
    n = int(np.prod([xshape[d] for d in red], dtype=np.int64))
    if n == 0:
        return G.zeros_like(x)
    lead = [xshape[d] for d in kept]
    r = len(lead)
    v = G.reshape(G.transpose(x, kept + red), lead + [n])
    one = G.scalar(1, G.dtype(x))

    def shift(t, k, right):
        # t moved k places along the last axis, ones coming in.
        if right:  # out[i] = t[i - k]
            part = G.slice_(t, [0] * (r + 1), lead + [n - k])
            return G.pad(part, one, [0] * r + [k], [0] * (r + 1), [0] * (r + 1))
        part = G.slice_(t, [0] * r + [k], lead + [n])  # out[i] = t[i + k]
        return G.pad(part, one, [0] * (r + 1), [0] * r + [k], [0] * (r + 1))

    def exclusive_scan(right):
        t, k = shift(v, 1, right), 1
        while k < n:
            t = G.mul(t, shift(t, k, right))
            k *= 2
        return t

    others = G.mul(exclusive_scan(True), exclusive_scan(False))
    others = G.reshape(others, lead + [xshape[d] for d in red])
    return G.transpose(others, G.inverse_permutation(kept + red))


@irdl_op_definition
class SliceOp(PrimitiveOp):
    """A static strided slice (StableHLO spec: slice)."""

    name = "hlo.slice"
    COMPLEX_GRADIENT: ClassVar = True
    operand = operand_def(TensorType)
    start_indices = prop_def(DenseArrayBase[I64])
    limit_indices = prop_def(DenseArrayBase[I64])
    strides = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$operand `,` `start` `=` $start_indices `,` `limit` `=` $limit_indices `,` `strides` `=` $strides"
        " attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {"start_indices": IntArrayParam(), "limit_indices": IntArrayParam(), "strides": IntArrayParam()}

    @classmethod
    def infer(cls, specs, start_indices=(), limit_indices=(), strides=(), **_):
        (s,) = specs
        if not (len(start_indices) == len(limit_indices) == len(strides) == s.rank):
            raise ShapeError(f"start, limit and strides need one entry per dimension of {s}")
        shape = []
        for d, (a, b, st) in enumerate(zip(start_indices, limit_indices, strides)):
            if st <= 0 or not 0 <= a <= b <= s.shape[d]:
                raise ShapeError(f"slice [{a}:{b}:{st}] is out of bounds for dimension {d} of size {s.shape[d]}")
            shape.append(-(-(b - a) // st))
        return [TensorSpec(tuple(shape), s.dtype)]

    @classmethod
    def kernel(cls, start_indices, limit_indices, strides, **_):
        idx = tuple(slice(a, b, st) for a, b, st in zip(start_indices, limit_indices, strides))
        return lambda x: np.asarray(x)[idx]

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, start_indices=(), limit_indices=(), strides=(), **params):
        """Zeros with the cotangent at the sliced positions: ``hlo.pad`` with
        the start as low padding, ``stride - 1`` as interior padding and the
        rest as high padding (JAX's _slice_transpose_rule; TF's _SliceGrad /
        _StridedSliceGrad)."""
        (ct,), (x,) = cotangents, inputs
        if not G.is_inexact(x):
            return [None]
        high = []
        for n, a, st, m in zip(G.shape(x), start_indices, strides, G.shape(ct)):
            last = a + (m - 1) * st + 1 if m else a  # one past the last element taken
            high.append(n - last)
        interior = [st - 1 for st in strides]
        return [G.pad(ct, G.scalar(0, G.dtype(ct)), start_indices, high, interior)]


@irdl_op_definition
class PadOp(PrimitiveOp):
    """Pad ``operand`` with the scalar ``padding_value`` (StableHLO spec: pad).

    ``edge_padding_low[d]`` / ``edge_padding_high[d]`` elements go before /
    after dimension ``d`` (a negative value removes that many elements
    instead), ``interior_padding[d]`` (non-negative) between every two of its
    elements.  Result dimension ``d`` has size ``low + n + (n - 1) * interior
    + high`` for an operand size ``n >= 1`` and ``low + high`` for ``n = 0``.
    The gradient of ``hlo.slice`` is a pad.

    Syntax::

      %r = hlo.pad %x, %zero, low = [0, 1], high = [1, 0], interior = [0, 2]
             : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x8xf32>
    """

    name = "hlo.pad"
    operand = operand_def(TensorType)
    padding_value = operand_def(TensorType)
    edge_padding_low = prop_def(DenseArrayBase[I64])
    edge_padding_high = prop_def(DenseArrayBase[I64])
    interior_padding = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$operand `,` $padding_value `,` `low` `=` $edge_padding_low `,` `high` `=` $edge_padding_high"
        " `,` `interior` `=` $interior_padding attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {
        "edge_padding_low": IntArrayParam(),
        "edge_padding_high": IntArrayParam(),
        "interior_padding": IntArrayParam(),
    }

    @classmethod
    def infer(cls, specs, edge_padding_low=(), edge_padding_high=(), interior_padding=(), **_):
        if len(specs) != 2:
            raise ShapeError(f"hlo.pad takes an operand and a padding value, got {len(specs)} operands")
        x, value = specs
        if x.dtype == "string":
            raise ShapeError("hlo.pad does not support strings")
        if value.shape != () or value.dtype != x.dtype:
            raise ShapeError(f"padding_value must be a scalar of the operand's dtype {x.dtype}, got {value}")
        low, high, interior = (
            tuple(int(v) for v in t) for t in (edge_padding_low, edge_padding_high, interior_padding)
        )
        if not len(low) == len(high) == len(interior) == x.rank:
            raise ShapeError(
                f"edge_padding_low {list(low)}, edge_padding_high {list(high)} and interior_padding "
                f"{list(interior)} need one entry per dimension of {x}"
            )
        shape = []
        for d, (n, lo, hi, i) in enumerate(zip(x.shape, low, high, interior)):
            if i < 0:
                raise ShapeError(f"interior_padding {list(interior)} must be non-negative")
            size = lo + hi + n + max(n - 1, 0) * i
            if size < 0:
                raise ShapeError(
                    f"padding dimension {d} of size {n} by low {lo}, high {hi} and interior {i} "
                    f"gives a negative size {size}"
                )
            shape.append(size)
        return [TensorSpec(tuple(shape), x.dtype)]

    @classmethod
    def kernel(cls, edge_padding_low, edge_padding_high, interior_padding, **_):
        low, high, interior = tuple(edge_padding_low), tuple(edge_padding_high), tuple(interior_padding)

        def run(x, value):
            x = np.asarray(x)
            # Pad by the non-negative parts, then cut the negative ones off.
            full = [
                max(lo, 0) + n + max(n - 1, 0) * i + max(hi, 0) for n, lo, hi, i in zip(x.shape, low, high, interior)
            ]
            out = np.full(full, value, dtype=x.dtype)
            out[
                tuple(
                    slice(max(lo, 0), max(lo, 0) + n + max(n - 1, 0) * i, i + 1)
                    for n, lo, i in zip(x.shape, low, interior)
                )
            ] = x
            return out[tuple(slice(max(-lo, 0), f - max(-hi, 0)) for f, lo, hi in zip(full, low, high))]

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, edge_padding_low=(), edge_padding_high=(), interior_padding=(), **params):
        """The operand gets the cotangent at its positions (a strided slice,
        after padding back what negative edge padding removed); the padding
        value gets the rest, ``sum(ct) - sum(d operand)`` (JAX's _pad_transpose)."""
        (ct,), (x, _) = cotangents, inputs
        if not G.is_float(x):
            return [None, None]
        low, high, interior = tuple(edge_padding_low), tuple(edge_padding_high), tuple(interior_padding)
        zero = G.scalar(0, G.dtype(ct))
        g = G.pad(ct, zero, [max(-lo, 0) for lo in low], [max(-hi, 0) for hi in high], [0] * len(low))
        start = [max(lo, 0) for lo in low]
        limit = [a + n + max(n - 1, 0) * i for a, n, i in zip(start, G.shape(x), interior)]
        dx = G.slice_(g, start, limit, [i + 1 for i in interior])
        return [dx, G.sub(G.sum_all(ct), G.sum_all(dx))]


def _check_start_indices(s: TensorSpec, starts: Sequence[TensorSpec]) -> None:
    """One integer scalar per dimension of ``s``, all of one dtype."""
    if len(starts) != s.rank:
        raise ShapeError(f"needs one start index per dimension of {s}, got {len(starts)}")
    for i, st in enumerate(starts):
        if st.shape != () or st.dtype not in INTS:
            raise ShapeError(f"start index {i} must be an integer scalar, got {st}")
        if st.dtype != starts[0].dtype:
            raise ShapeError(f"start indices must have the same dtype, got {starts[0]} and {st}")


def _clamped_window(starts, sizes, shape) -> tuple[slice, ...]:
    """StableHLO clamps each start to ``[0, dim - size]``."""
    return tuple(
        slice(b, b + n) for b, n in ((min(max(int(st), 0), dim - n), n) for st, n, dim in zip(starts, sizes, shape))
    )


@irdl_op_definition
class DynamicSliceOp(PrimitiveOp):
    """A slice of static size ``slice_sizes`` starting at run-time indices,
    one integer scalar per dimension, clamped so that the slice stays in
    bounds (StableHLO spec: dynamic_slice).  ``tpu-spmd-partition`` uses it to
    cut a core's shard out of a value every core holds whole."""

    name = "hlo.dynamic_slice"
    operand = operand_def(TensorType)
    start_indices = var_operand_def(TensorType)
    slice_sizes = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$operand `[` $start_indices `]` `sizes` `=` $slice_sizes attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {"slice_sizes": IntArrayParam()}

    @classmethod
    def infer(cls, specs, slice_sizes=(), **_):
        if not specs:
            raise ShapeError("hlo.dynamic_slice needs an operand")
        s, starts = specs[0], specs[1:]
        if s.dtype == "string":
            raise ShapeError("hlo.dynamic_slice does not support strings")
        _check_start_indices(s, starts)
        sizes = tuple(int(n) for n in slice_sizes)
        if len(sizes) != s.rank:
            raise ShapeError(f"slice_sizes {list(sizes)} need one entry per dimension of {s}")
        for d, (n, dim) in enumerate(zip(sizes, s.shape)):
            if not 0 <= n <= dim:
                raise ShapeError(f"slice size {n} is out of bounds for dimension {d} of size {dim}")
        return [TensorSpec(sizes, s.dtype)]

    @classmethod
    def kernel(cls, slice_sizes, **_):
        sizes = tuple(int(n) for n in slice_sizes)

        def run(x, *starts):
            x = np.asarray(x)
            return x[_clamped_window(starts, sizes, x.shape)]

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """Zeros with the cotangent written over the window:
        ``dynamic_update_slice(zeros, ct, starts)``, clamped the same way
        (JAX's _dynamic_slice_transpose_rule); the indices get none."""
        (ct,), (x, *starts) = cotangents, inputs
        if not G.is_float(x):
            return [None] * len(inputs)
        dx = G.bind1(DynamicUpdateSliceOp, [G.zeros_like(x), ct, *starts])
        return [dx] + [None] * len(starts)


@irdl_op_definition
class DynamicUpdateSliceOp(PrimitiveOp):
    """``operand`` with ``update`` written over the window that starts at
    run-time indices, one integer scalar per dimension, each clamped so that
    the window stays in bounds as in ``hlo.dynamic_slice`` (StableHLO spec:
    dynamic_update_slice).  The gradient of ``hlo.dynamic_slice``.

    Syntax::

      %r = hlo.dynamic_update_slice %x, %u at [%i, %j]
             : (tensor<4x6xf32>, tensor<2x2xf32>, tensor<i32>, tensor<i32>) -> tensor<4x6xf32>
    """

    name = "hlo.dynamic_update_slice"
    operand = operand_def(TensorType)
    update = operand_def(TensorType)
    start_indices = var_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$operand `,` $update `at` ` ` `[` $start_indices `]` attr-dict `:` functional-type(operands, results)"
    )

    @classmethod
    def infer(cls, specs, **_):
        if len(specs) < 2:
            raise ShapeError(f"hlo.dynamic_update_slice needs an operand and an update, got {len(specs)} operands")
        s, u, starts = specs[0], specs[1], specs[2:]
        if s.dtype == "string":
            raise ShapeError("hlo.dynamic_update_slice does not support strings")
        if u.dtype != s.dtype or u.rank != s.rank:
            raise ShapeError(f"update {u} must have the operand's dtype and rank ({s})")
        for d, (n, dim) in enumerate(zip(u.shape, s.shape)):
            if n > dim:
                raise ShapeError(f"update dimension {d} of size {n} is larger than the operand's ({dim})")
        _check_start_indices(s, starts)
        return [s]

    @classmethod
    def kernel(cls, **_):
        def run(x, update, *starts):
            out = np.array(x, copy=True)
            update = np.asarray(update)
            out[_clamped_window(starts, update.shape, out.shape)] = update
            return out

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, **params):
        """The operand gets the cotangent with the window zeroed, the update
        gets the window of the cotangent (``dynamic_slice``), the indices
        none (JAX's _dynamic_update_slice_transpose_rule)."""
        (ct,), (x, update, *starts) = cotangents, inputs
        if not G.is_float(x):
            return [None] * len(inputs)
        dx = G.bind1(DynamicUpdateSliceOp, [ct, G.zeros_like(update), *starts])
        du = G.bind1(DynamicSliceOp, [ct, *starts], slice_sizes=G.shape(update))
        return [dx, du] + [None] * len(starts)


@irdl_op_definition
class ConcatenateOp(PrimitiveOp):
    """Join tensors along ``dimension`` (StableHLO spec: concatenate)."""

    name = "hlo.concatenate"
    COMPLEX_GRADIENT: ClassVar = True
    inputs = var_operand_def(TensorType)
    dimension = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$inputs `dim` `=` $dimension attr-dict `:` functional-type(operands, results)"
    PARAMS: ClassVar = {"dimension": IntParam()}

    @classmethod
    def infer(cls, specs, dimension=0, **_):
        if not specs:
            raise ShapeError("hlo.concatenate needs at least one input")
        first = specs[0]
        _check_dims([dimension], first.rank, "dimension")
        total = 0
        for s in specs:
            if (
                s.dtype != first.dtype
                or s.rank != first.rank
                or any(a != b for i, (a, b) in enumerate(zip(s.shape, first.shape)) if i != dimension)
            ):
                raise ShapeError(f"cannot concatenate {first} and {s} along dimension {dimension}")
            total += s.shape[dimension]
        shape = list(first.shape)
        shape[dimension] = total
        return [TensorSpec(tuple(shape), first.dtype)]

    @classmethod
    def kernel(cls, dimension, **_):
        return lambda *xs: np.concatenate(xs, axis=dimension)

    @classmethod
    def out_kernel(cls, dimension, **_):
        """``np.concatenate`` with ``out=``."""
        return lambda out, *xs: np.concatenate(xs, axis=dimension, out=out)

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, dimension=0, **params):
        """Each input gets its slice of the cotangent along ``dimension``
        (TF's _ConcatGradV2)."""
        (ct,) = cotangents
        if not G.is_inexact(inputs[0]):
            return [None] * len(inputs)
        out, offset = [], 0
        ct_shape = G.shape(ct)
        for x in inputs:
            n = G.shape(x)[dimension]
            start = [0] * len(ct_shape)
            limit = list(ct_shape)
            start[dimension], limit[dimension] = offset, offset + n
            out.append(G.slice_(ct, start, limit))
            offset += n
        return out


MATH_OPS = [
    AddOp,
    SubtractOp,
    MultiplyOp,
    DivideOp,
    PowerOp,
    MaximumOp,
    MinimumOp,
    AndOp,
    OrOp,
    NegateOp,
    AbsOp,
    ExpOp,
    LogOp,
    SqrtOp,
    TanhOp,
    LogisticOp,
    NotOp,
    CompareOp,
    SelectOp,
    ConvertOp,
    ConstantOp,
    IotaOp,
    BroadcastInDimOp,
    ReshapeOp,
    TransposeOp,
    DotGeneralOp,
    ReduceOp,
    SliceOp,
    PadOp,
    DynamicSliceOp,
    DynamicUpdateSliceOp,
    ConcatenateOp,
]

HLO_ATTRS = [StringType, ComparisonDirectionAttr, ReductionKindAttr]
