"""Windowed ops of the ``hlo`` dialect: ``hlo.convolution``,
``hlo.reduce_window`` and ``hlo.select_and_scatter`` (StableHLO spec, https://openxla.org/stablehlo/spec, sections of the same
names).

The kernels spend their time in BLAS or in ufuncs over whole outputs:

* a float32 convolution runs in oneDNN's convolution kernels where oneDNN
  has one (forward, backward-weights for a kernel gradient, backward-data
  for a strided convolution's input gradient:
  :mod:`xtpu.dialects.onednn_conv`, 1.1-15x the speed of the next way);
  every other one pads (and dilates) its input once, takes every window as
  a strided view (``numpy.lib.stride_tricks.sliding_window_view``), copies
  the views into one im2col buffer ``[groups, batch * windows, window *
  channels]`` and multiplies it by the kernel in one batched matmul (one
  matmul per group);
* a windowed reduction combines ``prod(window)`` strided slices of the padded
  input, each of the output's size (O(output * window), no Python loop over
  elements);
* ``select_and_scatter`` finds each window's selected element the same way and
  adds the source into the result with one ``numpy.bincount``.

Gradients follow JAX's rules (``jax/_src/lax/convolution.py``,
``jax/_src/lax/windowed_reductions.py``): a convolution's input gradient is a
convolution of the cotangent with the reversed kernel, the strides becoming an
lhs dilation; its kernel gradient a convolution of the input with the
cotangent; ``reduce_window`` add's is a windowed sum of the (interior-padded)
cotangent and max/min's a ``select_and_scatter`` (TF's MaxPoolGrad).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
)
from xdsl.irdl import irdl_op_definition, operand_def, opt_prop_def, prop_def, result_def, traits_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure

from xtpu.dialects import intra_op, onednn_conv
from xtpu.dialects import vjp_util as G
from xtpu.dialects.bfloat16 import BF16
from xtpu.dialects.hlo import NUMERIC, ReductionKindAttr, accumulate_as, low_precision_in_f32, reduction_ufunc
from xtpu.dialects.hlo_math import ReverseOp
from xtpu.dialects.primitive import (
    EnumParam,
    IntArrayParam,
    IntParam,
    PairsParam,
    Param,
    PrimitiveOp,
    ShapeError,
    StrParam,
)
from xtpu.dialects.tensor_spec import FLOAT_DTYPES, TensorSpec, numpy_dtype

FLOATS = FLOAT_DTYPES


# --------------------------------------------------------------------------
# Shared window arithmetic (StableHLO's num_windows)
# --------------------------------------------------------------------------


def dilate(n: int, d: int) -> int:
    """The size of ``n`` elements with ``d - 1`` holes between each two."""
    return 0 if n == 0 else (n - 1) * d + 1


def num_windows(size: int, window: int, stride: int, lo: int, hi: int, base_dilation: int, window_dilation: int) -> int:
    """How many windows fit (StableHLO: convolution (C25), reduce_window (C16))."""
    padded = lo + dilate(size, base_dilation) + hi
    win = dilate(window, window_dilation)
    if padded <= 0 or win > padded:
        return 0
    return (padded - win) // stride + 1


def _ints(values: Any, n: int, default: int, what: str, op: str) -> tuple[int, ...]:
    if values is None:
        return (default,) * n
    out = tuple(int(v) for v in values)
    if len(out) != n:
        raise ShapeError(f"{what} {list(out)} needs {n} entries")
    return out


def _positive(values: Sequence[int], what: str, op: str, rule: str) -> None:
    if any(v <= 0 for v in values):
        raise ShapeError(f"{what} {list(values)} must be positive ({rule})")


def _pairs(padding: Any, n: int, op: str, rule: str) -> tuple[tuple[int, int], ...]:
    if padding is None:
        return ((0, 0),) * n
    pads = tuple(tuple(int(v) for v in p) for p in padding)
    if len(pads) != n or any(len(p) != 2 for p in pads):
        raise ShapeError(f"padding {[list(p) for p in pads]} must have shape [{n}, 2] ({rule})")
    return pads


def _pad_view(x: np.ndarray, pads: Sequence[tuple[int, int]], dilation: Sequence[int], value: Any) -> np.ndarray:
    """``x`` dilated (``d - 1`` holes of ``value``) and edge-padded (negative
    padding cuts), on every axis; ``x`` itself when nothing changes."""
    if all(d == 1 for d in dilation) and all(lo == 0 and hi == 0 for lo, hi in pads):
        return x
    full = [max(lo, 0) + dilate(n, d) + max(hi, 0) for n, (lo, hi), d in zip(x.shape, pads, dilation)]
    out = np.full(full, value, dtype=x.dtype)
    out[tuple(slice(max(lo, 0), max(lo, 0) + dilate(n, d), d) for n, (lo, _), d in zip(x.shape, pads, dilation))] = x
    return out[tuple(slice(max(-lo, 0), f - max(-hi, 0)) for f, (lo, hi) in zip(full, pads))]


def _window_slices(padded_shape, window, strides, wdil, out_shape):
    """For each window offset (row-major), the strided slices that give the
    elements at that offset of every window: a tuple of slices per offset."""
    for offset in itertools.product(*(range(w) for w in window)):
        yield (
            offset,
            tuple(slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, s, n in zip(offset, wdil, strides, out_shape)),
        )


# --------------------------------------------------------------------------
# hlo.convolution
# --------------------------------------------------------------------------


class ConvDimensionNumbers(NamedTuple):
    """StableHLO's convolution dimension numbers, in JAX's order:
    ``lhs = (batch, feature, *spatial)``, ``rhs = (output feature, input
    feature, *spatial)``, ``out = (batch, feature, *spatial)``; each entry a
    dimension index of that tensor."""

    lhs: tuple[int, ...]
    rhs: tuple[int, ...]
    out: tuple[int, ...]

    def to_text(self) -> str:
        """StableHLO's compact form, e.g. ``[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]``."""

        def one(spec, first, second):
            labels = [""] * len(spec)
            labels[spec[0]], labels[spec[1]] = first, second
            for i, d in enumerate(spec[2:]):
                labels[d] = str(i)
            return "[" + ", ".join(labels) + "]"

        return f"{one(self.lhs, 'b', 'f')}x{one(self.rhs, 'o', 'i')}->{one(self.out, 'b', 'f')}"

    @classmethod
    def from_labels(cls, lhs: Sequence[str], rhs: Sequence[str], out: Sequence[str]) -> ConvDimensionNumbers:
        """From three label lists (``b``/``f``/``i``/``o`` or a spatial index);
        raises ValueError for a label missing, repeated or unknown."""

        def one(labels, first, second, which):
            labels = [str(v) for v in labels]
            nsp = len(labels) - 2
            want = {first, second, *map(str, range(nsp))}
            if sorted(labels) != sorted(want):
                raise ValueError(
                    f"{which} dimension labels [{', '.join(labels)}] must be {first}, {second} and the spatial "
                    f"dimensions 0..{nsp - 1}, each once"
                )
            return (labels.index(first), labels.index(second), *(labels.index(str(i)) for i in range(nsp)))

        return cls(one(lhs, "b", "f", "input"), one(rhs, "o", "i", "kernel"), one(out, "b", "f", "output"))

    @classmethod
    def from_text(cls, text: str) -> ConvDimensionNumbers:
        try:
            lhs, rest = text.split("]x[", 1)
            rhs, out = rest.split("]->[", 1)
        except ValueError:
            raise ValueError(f"dimension numbers {text!r} are not of the form [b, 0, f]x[0, i, o]->[b, 0, f]") from None

        def labels(s):
            return [v.strip() for v in s.strip("[] ").split(",") if v.strip()]

        return cls.from_labels(labels(lhs), labels(rhs), labels(out))

    @classmethod
    def of(cls, value: Any) -> ConvDimensionNumbers:
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls.from_text(value)
        lhs, rhs, out = value
        return cls(tuple(int(v) for v in lhs), tuple(int(v) for v in rhs), tuple(int(v) for v in out))


class ConvDimsParam(Param):
    """Dimension numbers, stored as StableHLO's compact text."""

    def encode(self, value: Any) -> StringAttr:
        return StringAttr(ConvDimensionNumbers.of(value).to_text())

    def decode(self, attr: Any) -> ConvDimensionNumbers:
        assert isinstance(attr, StringAttr)
        return ConvDimensionNumbers.from_text(attr.data)


PRECISIONS = ("DEFAULT", "HIGH", "HIGHEST")


def conv_params(
    rank: int,
    dimension_numbers: Any = None,
    window_strides: Any = None,
    padding: Any = None,
    lhs_dilation: Any = None,
    rhs_dilation: Any = None,
    feature_group_count: Any = 1,
    batch_group_count: Any = 1,
    precision_config: Any = None,
    preferred_element_type: Any = None,
    **_: Any,
) -> dict[str, Any]:
    """The convolution's params with StableHLO's defaults filled in
    (dimension numbers default to ``[b, f, 0, 1, ...]`` for every operand)."""
    op = "hlo.convolution"
    nsp = rank - 2
    if dimension_numbers is None:
        ident = tuple(range(rank))
        dimension_numbers = ConvDimensionNumbers(ident, ident, ident)
    try:
        dn = ConvDimensionNumbers.of(dimension_numbers)
    except ValueError as e:
        raise ShapeError(f"{e}") from None
    prec = tuple(precision_config) if precision_config is not None else ("DEFAULT", "DEFAULT")
    return {
        "dimension_numbers": dn,
        "window_strides": _ints(window_strides, nsp, 1, "window_strides", op),
        "padding": _pairs(padding, nsp, op, "C4"),
        "lhs_dilation": _ints(lhs_dilation, nsp, 1, "lhs_dilation", op),
        "rhs_dilation": _ints(rhs_dilation, nsp, 1, "rhs_dilation", op),
        "feature_group_count": int(feature_group_count if feature_group_count is not None else 1),
        "batch_group_count": int(batch_group_count if batch_group_count is not None else 1),
        "precision_config": prec,
        "preferred_element_type": preferred_element_type,
    }


class PrecisionParam(Param):
    """``precision_config``: two of DEFAULT / HIGH / HIGHEST, stored as
    ``"DEFAULT, DEFAULT"``."""

    def encode(self, value: Any) -> StringAttr:
        return StringAttr(", ".join(value))

    def decode(self, attr: Any) -> tuple[str, ...]:
        assert isinstance(attr, StringAttr)
        return tuple(v.strip() for v in attr.data.split(","))


@irdl_op_definition
class ConvolutionOp(PrimitiveOp):
    """``result = convolution(lhs, rhs)`` (StableHLO spec: convolution).

    ``lhs`` is the input, ``rhs`` the kernel, both of rank ``N``; the
    dimension numbers name which dimension is the batch / feature / spatial
    dimensions of each (``[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]`` is NHWC
    with an HWIO kernel).  Each spatial dimension of the input is dilated by
    ``lhs_dilation`` (``d - 1`` zeros between elements), padded by
    ``padding`` (``[N - 2, 2]``, low and high, negative cuts) and slid over
    with the kernel dilated by ``rhs_dilation`` at ``window_strides``.
    ``feature_group_count`` splits the input features and the output features
    into that many groups convolved separately (depthwise convolution when it
    equals the input features); ``batch_group_count`` does the same with the
    input batch and the output features (a grouped convolution's kernel
    gradient).  The result dtype is ``preferred_element_type`` (the operands'
    dtype by default; a wider float accumulates in that type).  TPU
    arithmetic, as ``hlo.dot_general``'s (``accumulate_as``): bfloat16 and
    float16 operands are multiplied exactly and summed in float32, rounded
    once to the result type;
    ``precision_config`` (two of DEFAULT / HIGH / HIGHEST) is carried for
    export and for low-precision types.  float32 convolutions run on
    oneDNN's kernels where it has one (``xtpu.dialects.onednn_conv``: the
    sums in another order, within float32 rounding), the rest as im2col and
    one matmul.

    Syntax (StableHLO's)::

      %y = hlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f],
             window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1]}
             {batch_group_count = 1 : i64, feature_group_count = 1 : i64}
             : (tensor<8x28x28x1xf32>, tensor<3x3x1x32xf32>) -> tensor<8x28x28x32xf32>

    Raises (shape rule): ShapeError naming the broken constraint (C1-C26).
    """

    name = "hlo.convolution"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    dimension_numbers = prop_def(StringAttr)
    window_strides = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseIntOrFPElementsAttr)
    lhs_dilation = prop_def(DenseArrayBase[I64])
    rhs_dilation = prop_def(DenseArrayBase[I64])
    feature_group_count = prop_def(IntegerAttr[I64])
    batch_group_count = prop_def(IntegerAttr[I64])
    precision_config = opt_prop_def(StringAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    PARAMS: ClassVar = {
        "dimension_numbers": ConvDimsParam(),
        "window_strides": IntArrayParam(),
        "padding": PairsParam(),
        "lhs_dilation": IntArrayParam(),
        "rhs_dilation": IntArrayParam(),
        "feature_group_count": IntParam(),
        "batch_group_count": IntParam(),
        "precision_config": PrecisionParam(),
    }

    def result_params(self):
        return {"preferred_element_type": TensorSpec.of_type(self.result.type).dtype}

    @classmethod
    def make(cls, operands, **params):
        rank = TensorSpec.of_type(operands[0].type).rank
        return super().make(operands, **conv_params(rank, **params))

    @classmethod
    def encode_params(cls, params):
        params = dict(params)
        if params.get("precision_config") == ("DEFAULT", "DEFAULT"):
            params["precision_config"] = None
        return super().encode_params(params)

    @classmethod
    def infer(cls, specs, **params):
        op = cls.name
        if len(specs) != 2:
            raise ShapeError(f"takes lhs and rhs, got {len(specs)} operands")
        lhs, rhs = specs
        if lhs.rank != rhs.rank:
            raise ShapeError(f"lhs {lhs} and rhs {rhs} must have the same rank (C1)")
        if lhs.rank < 2:
            raise ShapeError(f"operands must have rank >= 2 (batch and feature), got {lhs}")
        if lhs.dtype != rhs.dtype:
            raise ShapeError(f"lhs {lhs} and rhs {rhs} must have the same element type")
        if lhs.dtype not in NUMERIC:
            raise ShapeError(f"does not support dtype {lhs.dtype}; expected one of {', '.join(NUMERIC)}")
        p = conv_params(lhs.rank, **params)
        n = lhs.rank
        dn = p["dimension_numbers"]
        for spec, what, rule in ((dn.lhs, "input", "C13"), (dn.rhs, "kernel", "C18"), (dn.out, "output", "C20")):
            if len(spec) != n:
                raise ShapeError(f"{what} dimension numbers name {len(spec)} dimensions for rank {n} ({rule})")
            if sorted(spec) != list(range(n)):
                raise ShapeError(f"{what} dimensions {list(spec)} must be unique and in [0, {n}) ({rule})")
        _positive(p["window_strides"], "window_strides", op, "C3")
        _positive(p["lhs_dilation"], "lhs_dilation", op, "C6")
        _positive(p["rhs_dilation"], "rhs_dilation", op, "C8")
        fgc, bgc = p["feature_group_count"], p["batch_group_count"]
        if fgc <= 0:
            raise ShapeError(f"feature_group_count {fgc} must be positive (C21)")
        if bgc <= 0:
            raise ShapeError(f"batch_group_count {bgc} must be positive (C22)")
        if fgc != 1 and bgc != 1:
            raise ShapeError(f"feature_group_count {fgc} or batch_group_count {bgc} must be 1 (C23)")
        batch, feat = lhs.shape[dn.lhs[0]], lhs.shape[dn.lhs[1]]
        kout, kin = rhs.shape[dn.rhs[0]], rhs.shape[dn.rhs[1]]
        if batch % bgc:
            raise ShapeError(f"input batch size {batch} must be divisible by batch_group_count {bgc} (C10)")
        if feat % fgc:
            raise ShapeError(f"input feature size {feat} must be divisible by feature_group_count {fgc} (C11)")
        if kin != feat // fgc:
            raise ShapeError(
                f"kernel input feature size {kin} must be the input feature size {feat} / "
                f"feature_group_count {fgc} = {feat // fgc} (C14)"
            )
        if kout % bgc:
            raise ShapeError(f"kernel output feature size {kout} must be divisible by batch_group_count {bgc} (C15)")
        if kout % fgc:
            raise ShapeError(f"kernel output feature size {kout} must be divisible by feature_group_count {fgc} (C16)")
        prec = p["precision_config"]
        if len(prec) != 2 or any(v not in PRECISIONS for v in prec):
            raise ShapeError(f"precision_config {list(prec)} must be two of {', '.join(PRECISIONS)} (C24)")
        out = list(conv_result_shape(lhs.shape, rhs.shape, p))
        dtype = p["preferred_element_type"] or lhs.dtype
        if dtype != lhs.dtype and not (
            lhs.dtype in FLOATS and dtype in FLOATS and numpy_dtype(dtype).itemsize > numpy_dtype(lhs.dtype).itemsize
        ):
            raise ShapeError(f"preferred_element_type {dtype} must be the operands' type {lhs.dtype} or a wider float")
        return [TensorSpec(tuple(out), dtype)]

    # ---- syntax ---------------------------------------------------------
    def print(self, printer: Printer) -> None:
        p = self.params()
        printer.print_string("(")
        printer.print_operand(self.lhs)
        printer.print_string(", ")
        printer.print_operand(self.rhs)
        printer.print_string(f") dim_numbers = {p['dimension_numbers'].to_text()}, window = {{")
        printer.print_string(
            f"stride = {list(p['window_strides'])}, pad = {[list(v) for v in p['padding']]}, "
            f"lhs_dilate = {list(p['lhs_dilation'])}, rhs_dilate = {list(p['rhs_dilation'])}}}"
        )
        printer.print_string(
            f" {{batch_group_count = {p['batch_group_count']} : i64, "
            f"feature_group_count = {p['feature_group_count']} : i64"
        )
        if self.precision_config is not None:
            printer.print_string(f', precision_config = "{self.precision_config.data}"')
        printer.print_string("}")
        if self.attributes:
            printer.print_string(" ")
            printer.print_op_attributes(self.attributes)
        printer.print_string(" : (")
        printer.print_list(self.operand_types, printer.print_attribute)
        printer.print_string(") -> ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> ConvolutionOp:
        operands = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_unresolved_operand)
        if len(operands) != 2:
            parser.raise_error(f"hlo.convolution takes two operands (lhs, rhs), got {len(operands)}")
        parser.parse_keyword("dim_numbers")
        parser.parse_punctuation("=")

        def label():
            v = parser.parse_optional_integer(allow_boolean=False, allow_negative=False)
            return str(v) if v is not None else parser.parse_identifier()

        lhs_l = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, label)
        parser.parse_keyword("x")
        rhs_l = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, label)
        parser.parse_punctuation("->")
        out_l = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, label)
        try:
            dn = ConvDimensionNumbers.from_labels(lhs_l, rhs_l, out_l)
        except ValueError as e:
            parser.raise_error(f"hlo.convolution: {e}")
        params: dict[str, Any] = {"dimension_numbers": dn}
        if parser.parse_optional_punctuation(","):
            parser.parse_keyword("window")
            parser.parse_punctuation("=")
            names = {"stride": "window_strides", "lhs_dilate": "lhs_dilation", "rhs_dilate": "rhs_dilation"}

            def entry():
                key = parser.parse_identifier()
                parser.parse_punctuation("=")

                def ints():
                    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)

                if key == "pad":
                    params["padding"] = tuple(
                        tuple(p) for p in parser.parse_comma_separated_list(parser.Delimiter.SQUARE, ints)
                    )
                elif key in names:
                    params[names[key]] = tuple(ints())
                else:
                    parser.raise_error(f"hlo.convolution: unknown window entry {key!r}")

            parser.parse_comma_separated_list(parser.Delimiter.BRACES, entry)
        attrs = parser.parse_optional_attr_dict()
        for key in ("feature_group_count", "batch_group_count"):
            if key in attrs:
                attr = attrs.pop(key)
                if not isinstance(attr, IntegerAttr) or not isinstance(attr.type, IntegerType):
                    parser.raise_error(f"hlo.convolution: {key} must be an integer (N : i64), got {attr}")
                params[key] = IntParam().decode(attr)
        if "precision_config" in attrs:
            attr = attrs.pop("precision_config")
            if not isinstance(attr, StringAttr):
                parser.raise_error(f"hlo.convolution: precision_config must be a string, got {attr}")
            params["precision_config"] = PrecisionParam().decode(attr)
        parser.parse_punctuation(":")
        in_types = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
        parser.parse_punctuation("->")
        out_type = parser.parse_type()
        if len(in_types) != 2:
            parser.raise_error(f"hlo.convolution takes two operand types, got {len(in_types)}")
        ops = [parser.resolve_operand(o, t) for o, t in zip(operands, in_types)]
        # Defaults for what the text leaves out; the verifier checks the rest.
        nsp = max(TensorSpec.of_type(in_types[0]).rank - 2, 0)
        for key, default in (
            ("window_strides", (1,) * nsp),
            ("padding", ((0, 0),) * nsp),
            ("lhs_dilation", (1,) * nsp),
            ("rhs_dilation", (1,) * nsp),
            ("feature_group_count", 1),
            ("batch_group_count", 1),
        ):
            params.setdefault(key, default)
        op = cls.create_op(ops, [out_type], params)
        op.attributes.update(attrs)
        return op

    # ---- the kernel -----------------------------------------------------
    @classmethod
    def kernel(cls, **params):
        cache: dict[int, Any] = {}

        def run(x, w):
            x, w = np.asarray(x), np.asarray(w)
            rank = x.ndim
            p = cache.get(rank)
            if p is None:
                p = cache[rank] = conv_params(rank, **params)
            return conv_numpy(x, w, **p)

        return run

    # ---- the gradient rule ----------------------------------------------
    @classmethod
    def vjp(cls, cotangents, inputs, outputs, skip_input_indices=(), **params):
        """JAX's _conv_general_dilated_transpose_lhs / _rhs: the input's
        cotangent is the convolution of ``ct`` with the spatially reversed
        kernel (input and output features swapped; the strides become an lhs
        dilation, the padding that of the transposed window); the kernel's the
        convolution of the input with ``ct`` (batch and feature swapped; the
        strides become an rhs dilation).  Feature groups turn into batch
        groups in the kernel gradient and back."""
        (ct,), (x, w) = cotangents, inputs
        if not G.is_float(x):
            return [None, None]
        if G.dtype(ct) != G.dtype(x):
            # A widened result (bfloat16 operands, float32 result): the
            # cotangent is rounded to the operands' dtype; the gradient
            # convolutions accumulate in float32 and round once, as
            # dot_general's.
            ct = G.convert(ct, G.dtype(x))
        p = conv_params(len(G.shape(x)), **params)
        gx = None if 0 in skip_input_indices else _conv_transpose_lhs(ct, x, w, p)
        gw = None if 1 in skip_input_indices else _conv_transpose_rhs(ct, x, w, p)
        return [gx, gw]


def conv_numpy(x: np.ndarray, w: np.ndarray, preferred_element_type: str | None = None, **params: Any) -> np.ndarray:
    """StableHLO's convolution in numpy (``params``: :func:`conv_params`'s):
    im2col of strided window views and one batched matmul over the groups
    (see the module docstring), with ``hlo.dot_general``'s accumulation
    (:func:`xtpu.dialects.hlo.accumulate_as`: bfloat16 / float16 in float32,
    rounded once to the result dtype).  float32 convolutions that oneDNN
    has a kernel for run there (:mod:`xtpu.dialects.onednn_conv`)."""
    if x.dtype == np.float32 and w.dtype == np.float32:
        shape = conv_result_shape(x.shape, w.shape, params)
        out = onednn_conv.convolution(x, w, shape, preferred_element_type=preferred_element_type, **params)
        if out is not None:
            return out
    return accumulate_as(lambda a, b: _conv_im2col(a, b, **params), preferred_element_type, bf16_native=True)(x, w)


def conv_result_shape(x_shape: Sequence[int], w_shape: Sequence[int], params: dict) -> tuple[int, ...]:
    """The shape of ``hlo.convolution``'s result for operands of these
    shapes (``params``: :func:`conv_params`'s; StableHLO spec,
    convolution, C25-C27)."""
    dn = params["dimension_numbers"]
    shape = [0] * len(x_shape)
    shape[dn.out[0]] = x_shape[dn.lhs[0]] // params["batch_group_count"]
    shape[dn.out[1]] = w_shape[dn.rhs[0]]
    for i, (xd, wd, od) in enumerate(zip(dn.lhs[2:], dn.rhs[2:], dn.out[2:])):
        lo, hi = params["padding"][i]
        shape[od] = num_windows(
            x_shape[xd],
            w_shape[wd],
            params["window_strides"][i],
            lo,
            hi,
            params["lhs_dilation"][i],
            params["rhs_dilation"][i],
        )
    return tuple(shape)


def _conv_im2col(
    x: np.ndarray,
    w: np.ndarray,
    dimension_numbers: ConvDimensionNumbers,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    feature_group_count: int,
    batch_group_count: int,
    **_: Any,
) -> np.ndarray:
    """The convolution computed in ``x``'s dtype (``w``'s is the same);
    bfloat16 operands give a float32 result (:func:`intra_op.matmul`)."""
    dn = dimension_numbers
    nsp = x.ndim - 2
    dtype = x.dtype
    # Canonical layouts: x [N, *S, C], w [*K, I, O].
    xc = np.transpose(x, (dn.lhs[0], *dn.lhs[2:], dn.lhs[1]))
    wc = np.transpose(w, (*dn.rhs[2:], dn.rhs[1], dn.rhs[0]))
    n, c = xc.shape[0], xc.shape[-1]
    ksz = wc.shape[:nsp]
    o = wc.shape[-1]
    osz = tuple(
        num_windows(xc.shape[1 + i], ksz[i], window_strides[i], *padding[i], lhs_dilation[i], rhs_dilation[i])
        for i in range(nsp)
    )
    ngroups = max(feature_group_count, batch_group_count)
    nb = n // batch_group_count
    out_perm = [0] * x.ndim  # result axis -> canonical axis (N, *S, F)
    out_perm[dn.out[0]] = 0
    out_perm[dn.out[1]] = nsp + 1
    for i in range(nsp):
        out_perm[dn.out[2 + i]] = 1 + i
    canon_shape = (nb, *osz, o)
    if 0 in canon_shape or c == 0 or 0 in ksz:
        return np.transpose(np.zeros(canon_shape, np.float32 if dtype == BF16 else dtype), out_perm)
    xp = _pad_view(xc, ((0, 0), *padding, (0, 0)), (1, *lhs_dilation, 1), np.zeros((), dtype))
    dwin = tuple(dilate(k, d) for k, d in zip(ksz, rhs_dilation))
    v = np.lib.stride_tricks.sliding_window_view(xp, dwin, axis=tuple(range(1, nsp + 1)))
    # v: [N, *S', C, *dwin] -> strided windows, dilated taps.
    v = v[
        (slice(None), *(slice(0, (m - 1) * s + 1, s) for m, s in zip(osz, window_strides)), slice(None))
        + tuple(slice(None, None, d) for d in rhs_dilation)
    ]
    cg = c // feature_group_count
    og = o // ngroups
    kprod = int(np.prod(ksz, dtype=np.int64))
    mprod = int(np.prod(osz, dtype=np.int64))
    if batch_group_count > 1:
        v = v.reshape(batch_group_count, nb, *osz, c, *ksz)  # groups of the batch
    else:
        v = v.reshape(1, n, *osz, c, *ksz)
    if feature_group_count > 1:
        # [1, N, *S', C, *K] -> [G, N, *S', *K, Cg]
        v = v.reshape(n, *osz, feature_group_count, cg, *ksz)
        v = np.moveaxis(v, 1 + nsp, 0)
        cols = np.transpose(v, (0, 1, *range(2, 2 + nsp), *range(3 + nsp, 3 + 2 * nsp), 2 + nsp))
    else:
        cols = np.transpose(v, (0, 1, *range(2, 2 + nsp), *range(3 + nsp, 3 + 2 * nsp), 2 + nsp))
    cols = cols.reshape(ngroups, nb * mprod, kprod * cg)
    # w [*K, Cg, O] -> [G, *K, Cg, Og]
    wg = wc.reshape(*ksz, cg, ngroups, og)
    wg = np.moveaxis(wg, nsp + 1, 0).reshape(ngroups, kprod * cg, og)
    res = intra_op.matmul(cols, wg)  # [G, nb*M, Og], split over the run's threads
    res = res.reshape(ngroups, nb, *osz, og)
    res = np.moveaxis(res, 0, -2).reshape(canon_shape)
    return np.transpose(res, out_perm) if out_perm != list(range(x.ndim)) else res


def _spec_transpose(spec):
    return (spec[1], spec[0], *spec[2:])


def _reshape_axis_out_of(src: int, size1: int, x: Any) -> Any:
    shape = list(G.shape(x))
    shape[src : src + 1] = [size1, shape[src] // size1]
    return G.reshape(x, shape)


def _reshape_axis_into(src: int, dst: int, x: Any) -> Any:
    """Merge axis ``src`` into ``dst`` (numbered without ``src``), ``src``
    outermost (JAX's _reshape_axis_into)."""
    shape = G.shape(x)
    perm = [i for i in range(len(shape)) if i != src]
    perm.insert(dst, src)
    new_shape = [shape[i] for i in range(len(shape)) if i != src]
    new_shape[dst] *= shape[src]
    return G.reshape(G.transpose(x, perm), new_shape)


def conv(lhs: Any, rhs: Any, **params: Any) -> Any:
    """``hlo.convolution`` of two values (traced or numpy)."""
    return G.bind1(ConvolutionOp, [lhs, rhs], **params)


def _conv_transpose_lhs(ct, x, w, p):
    dn = p["dimension_numbers"]
    fgc, bgc = p["feature_group_count"], p["batch_group_count"]
    nsp = len(dn.lhs) - 2
    lhs_sdims = [G.shape(x)[d] for d in dn.lhs[2:]]
    rhs_sdims = [G.shape(w)[d] for d in dn.rhs[2:]]
    out_sdims = [G.shape(ct)[d] for d in dn.out[2:]]
    if fgc > 1:
        w = _reshape_axis_out_of(dn.rhs[0], fgc, w)
        w = _reshape_axis_into(dn.rhs[0], dn.rhs[1], w)
    elif bgc > 1:
        w = _reshape_axis_out_of(dn.rhs[0], bgc, w)
        w = _reshape_axis_into(dn.rhs[0], dn.rhs[1], w)
        fgc = bgc
    trans = ConvDimensionNumbers(dn.out, _spec_transpose(dn.rhs), dn.lhs)
    pads = []
    for i in range(nsp):
        lhs_d = dilate(lhs_sdims[i], p["lhs_dilation"][i])
        rhs_d = dilate(rhs_sdims[i], p["rhs_dilation"][i])
        out_d = dilate(out_sdims[i], p["window_strides"][i])
        before = rhs_d - p["padding"][i][0] - 1
        after = lhs_d + rhs_d - 1 - out_d - before
        pads.append((before, after))
    wr = G.bind1(ReverseOp, [w], dimensions=tuple(dn.rhs[2:]))
    out = conv(
        ct,
        wr,
        dimension_numbers=trans,
        window_strides=p["lhs_dilation"],
        padding=tuple(pads),
        lhs_dilation=p["window_strides"],
        rhs_dilation=p["rhs_dilation"],
        feature_group_count=fgc,
        batch_group_count=1,
        precision_config=p["precision_config"],
        preferred_element_type=G.dtype(x),
    )
    if bgc > 1:
        out = _reshape_axis_out_of(dn.lhs[1], bgc, out)
        out = _reshape_axis_into(dn.lhs[1], dn.lhs[0], out)
    return out


def _conv_transpose_rhs(ct, x, w, p):
    dn = p["dimension_numbers"]
    fgc, bgc = p["feature_group_count"], p["batch_group_count"]
    nsp = len(dn.lhs) - 2
    if 0 in G.shape(ct):
        return G.zeros_like(w)
    lhs_sdims = [G.shape(x)[d] for d in dn.lhs[2:]]
    rhs_sdims = [G.shape(w)[d] for d in dn.rhs[2:]]
    out_sdims = [G.shape(ct)[d] for d in dn.out[2:]]
    if bgc > 1:
        fgc, bgc = bgc, 1
    elif fgc > 1:
        fgc, bgc = 1, fgc
    trans = ConvDimensionNumbers(_spec_transpose(dn.lhs), _spec_transpose(dn.out), _spec_transpose(dn.rhs))
    pads = []
    for i in range(nsp):
        lhs_d = dilate(lhs_sdims[i], p["lhs_dilation"][i])
        rhs_d = dilate(rhs_sdims[i], p["rhs_dilation"][i])
        out_d = dilate(out_sdims[i], p["window_strides"][i])
        lo = p["padding"][i][0]
        hi = (out_d - lhs_d) + (rhs_d - lo - 1)
        pads.append((lo, hi))
    return conv(
        x,
        ct,
        dimension_numbers=trans,
        window_strides=p["rhs_dilation"],
        padding=tuple(pads),
        lhs_dilation=p["lhs_dilation"],
        rhs_dilation=p["window_strides"],
        feature_group_count=fgc,
        batch_group_count=bgc,
        precision_config=p["precision_config"],
        preferred_element_type=G.dtype(w),
    )


# --------------------------------------------------------------------------
# hlo.reduce_window
# --------------------------------------------------------------------------


def window_params(
    rank: int,
    window_dimensions: Any = None,
    window_strides: Any = None,
    base_dilations: Any = None,
    window_dilations: Any = None,
    padding: Any = None,
    op: str = "hlo.reduce_window",
    **_: Any,
) -> dict[str, Any]:
    """A windowed op's params with StableHLO's defaults (strides and
    dilations 1, padding 0); ``window_dimensions`` is required."""
    if window_dimensions is None:
        raise ShapeError("window_dimensions are required")
    return {
        "window_dimensions": _ints(window_dimensions, rank, 1, "window_dimensions", op),
        "window_strides": _ints(window_strides, rank, 1, "window_strides", op),
        "base_dilations": _ints(base_dilations, rank, 1, "base_dilations", op),
        "window_dilations": _ints(window_dilations, rank, 1, "window_dilations", op),
        "padding": _pairs(padding, rank, op, "C12" if op == "hlo.reduce_window" else "C4"),
    }


@irdl_op_definition
class ReduceWindowOp(PrimitiveOp):
    """``result = reduce_window(operand, init_value)`` with the body a single
    add / max / min (StableHLO spec: reduce_window, one input).

    Every dimension of ``operand`` has a window: ``window_dimensions``
    elements, ``window_dilations`` apart, sliding by ``window_strides`` over
    the operand dilated by ``base_dilations`` and padded by ``padding``
    (``[rank, 2]``); dilation holes and padding hold ``init_value``.  Each
    result element is ``init_value`` combined with its window's elements.
    A 2x2 max pool of NHWC input is ``dims = [1, 2, 2, 1], strides = [1, 2, 2, 1]``.

    Syntax::

      %y = hlo.reduce_window(%x init: %init) applies max dims = array<i64: 1, 2, 2, 1>,
             strides = array<i64: 1, 2, 2, 1>, base_dilations = array<i64: 1, 1, 1, 1>,
             window_dilations = array<i64: 1, 1, 1, 1>, pad = dense<0> : tensor<4x2xi64>
             : (tensor<8x28x28x32xf32>, tensor<f32>) -> tensor<8x14x14x32xf32>

    Gradients (float): add, the windowed sum of the cotangent (JAX's
    _reduce_window_sum_transpose_rule); max / min, ``hlo.select_and_scatter``
    of the cotangent onto each window's first extreme element (TF's
    MaxPoolGrad; dilations other than 1 raise NotImplementedError); the init
    value gets the cotangent of every element it enters (once per result,
    plus once per hole or padding element in the window, for add; where the
    result equals it, for max / min).

    Raises (shape rule): ShapeError naming the broken constraint.
    """

    name = "hlo.reduce_window"
    operand = operand_def(TensorType)
    init_value = operand_def(TensorType)
    computation = prop_def(ReductionKindAttr)
    window_dimensions = prop_def(DenseArrayBase[I64])
    window_strides = prop_def(DenseArrayBase[I64])
    base_dilations = prop_def(DenseArrayBase[I64])
    window_dilations = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "`(` $operand `init` `:` $init_value `)` `applies` $computation `dims` `=` $window_dimensions"
        " `,` `strides` `=` $window_strides `,` `base_dilations` `=` $base_dilations"
        " `,` `window_dilations` `=` $window_dilations `,` `pad` `=` $padding"
        " attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {
        "computation": EnumParam(ReductionKindAttr),
        "window_dimensions": IntArrayParam(),
        "window_strides": IntArrayParam(),
        "base_dilations": IntArrayParam(),
        "window_dilations": IntArrayParam(),
        "padding": PairsParam(),
    }
    KINDS: ClassVar = ("add", "max", "min")

    @classmethod
    def make(cls, operands, computation="add", **params):
        rank = TensorSpec.of_type(operands[0].type).rank
        return super().make(operands, computation=computation, **window_params(rank, **params))

    @classmethod
    def infer(cls, specs, computation="add", **params):
        op = cls.name
        if len(specs) != 2:
            raise ShapeError(f"takes an operand and an init value, got {len(specs)} operands")
        x, init = specs
        if init.shape != () or init.dtype != x.dtype:
            raise ShapeError(f"init_value must be a scalar of the operand's dtype {x.dtype}, got {init} (C3)")
        if x.dtype not in NUMERIC:
            raise ShapeError(f"does not support dtype {x.dtype}; expected one of {', '.join(NUMERIC)}")
        if computation not in cls.KINDS:
            raise ShapeError(f"the body must be one of {', '.join(cls.KINDS)}, got {computation}")
        p = window_params(x.rank, **params)
        _positive(p["window_dimensions"], "window_dimensions", op, "C5")
        _positive(p["window_strides"], "window_strides", op, "C7")
        _positive(p["base_dilations"], "base_dilations", op, "C9")
        _positive(p["window_dilations"], "window_dilations", op, "C11")
        shape = tuple(
            num_windows(n, w, s, lo, hi, bd, wd)
            for n, w, s, bd, wd, (lo, hi) in zip(
                x.shape,
                p["window_dimensions"],
                p["window_strides"],
                p["base_dilations"],
                p["window_dilations"],
                p["padding"],
            )
        )
        return [TensorSpec(shape, x.dtype)]

    @classmethod
    def kernel(cls, computation="add", **params):
        cache: dict[tuple, Any] = {}

        def run(x, init):
            x = np.asarray(x)
            key = (x.ndim, x.dtype)
            got = cache.get(key)
            if got is None:
                got = cache[key] = (window_params(x.ndim, **params), reduction_ufunc(computation, x.dtype.name))
            p, uf = got
            return reduce_window_numpy(x, np.asarray(init, dtype=x.dtype)[()], uf, **p)

        # bfloat16 / float16 windowed sums accumulate in float32, rounded once
        # (XLA's float normalization, as hlo.reduce's); max / min are exact.
        return low_precision_in_f32(run) if computation == "add" else run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, computation="add", skip_input_indices=(), **params):
        (ct,), (x, init), (y,) = cotangents, inputs, outputs
        if not G.is_float(x):
            return [None, None]
        xshape = G.shape(x)
        p = window_params(len(xshape), **params)
        dx = dinit = None
        if computation == "add":
            if 0 not in skip_input_indices:
                dx = _reduce_window_sum_transpose(ct, xshape, p)
            if 1 not in skip_input_indices:
                # init enters each result once, and once per hole or padding
                # element of its window: a static count.
                count = reduce_window_numpy(np.ones(xshape), 0.0, np.add, **p)
                extra = float(np.prod(p["window_dimensions"])) - count + 1.0
                dinit = G.sum_all(G.mul(ct, extra.astype(numpy_dtype(G.dtype(ct)))))
            return [dx, dinit]
        if any(d != 1 for d in p["base_dilations"] + p["window_dilations"]):
            raise NotImplementedError(
                f"hlo.reduce_window {computation}: no gradient with base or window dilations other than 1"
            )
        if 0 not in skip_input_indices:
            dx = G.bind1(
                SelectAndScatterOp,
                [x, ct, G.scalar(0, G.dtype(ct))],
                select="GE" if computation == "max" else "LE",
                window_dimensions=p["window_dimensions"],
                window_strides=p["window_strides"],
                padding=p["padding"],
            )
        if 1 not in skip_input_indices:
            hit = G.convert(G.compare(y, G.broadcast(init, (), G.shape(y)), "EQ"), G.dtype(ct))
            dinit = G.sum_all(G.mul(ct, hit))
        return [dx, dinit]


def reduce_window_numpy(x, init, uf, window_dimensions, window_strides, base_dilations, window_dilations, padding):
    """StableHLO's reduce_window in numpy: ``prod(window)`` strided slices
    of the padded operand combined with the ufunc ``uf``."""
    out_shape = tuple(
        num_windows(n, w, s, lo, hi, bd, wd)
        for n, w, s, bd, wd, (lo, hi) in zip(
            x.shape, window_dimensions, window_strides, base_dilations, window_dilations, padding
        )
    )
    out = np.full(out_shape, init, dtype=x.dtype)
    if 0 in out_shape:
        return out
    xp = _pad_view(x, padding, base_dilations, init)
    for _, sl in _window_slices(xp.shape, window_dimensions, window_strides, window_dilations, out_shape):
        uf(out, xp[sl], out=out)
    return out


def _reduce_window_sum_transpose(ct, xshape, p):
    """JAX's _reduce_window_sum_transpose_rule: the cotangent padded (the
    strides as interior padding, the transposed window's edges) and summed
    over windows with the base dilations as strides."""
    pads = []
    for n, w, s, bd, wd, (lo, _), m in zip(
        xshape,
        p["window_dimensions"],
        p["window_strides"],
        p["base_dilations"],
        p["window_dilations"],
        p["padding"],
        G.shape(ct),
    ):
        lhs_d, rhs_d, out_d = dilate(n, bd), dilate(w, wd), dilate(m, s)
        before = rhs_d - lo - 1
        after = lhs_d + rhs_d - 1 - out_d - before
        pads.append((before, after))
    zero = G.scalar(0, G.dtype(ct))
    # Negative "before"/"after" cut; pad handles both, interior = stride - 1.
    padded = G.pad(ct, zero, [lo for lo, _ in pads], [hi for _, hi in pads], [s - 1 for s in p["window_strides"]])
    return G.bind1(
        ReduceWindowOp,
        [padded, zero],
        computation="add",
        window_dimensions=p["window_dimensions"],
        window_strides=p["base_dilations"],
        base_dilations=(1,) * len(xshape),
        window_dilations=p["window_dilations"],
        padding=((0, 0),) * len(xshape),
    )


# --------------------------------------------------------------------------
# hlo.select_and_scatter
# --------------------------------------------------------------------------


@irdl_op_definition
class SelectAndScatterOp(PrimitiveOp):
    """``result = select_and_scatter(operand, source, init_value)`` with
    select ``GE`` or ``LE`` and scatter add (StableHLO spec:
    select_and_scatter).

    For each window of the (padded) operand, the element the select picks
    (``GE``: the first maximum in row-major window order, ``LE``: the first
    minimum; padding is never picked) receives the window's element of
    ``source``; the result, of the operand's shape, is ``init_value`` plus
    everything each element received.  Max pooling's gradient.

    Syntax::

      %g = hlo.select_and_scatter(%x, %ct init: %zero) select GE dims = array<i64: 1, 2, 2, 1>,
             strides = array<i64: 1, 2, 2, 1>, pad = dense<0> : tensor<4x2xi64>
             : (tensor<8x28x28x32xf32>, tensor<8x14x14x32xf32>, tensor<f32>) -> tensor<8x28x28x32xf32>

    Gradient: the source gets the cotangent at each window's selected
    element; the init value the sum of the cotangent; the operand none (the
    selection is piecewise constant in it).

    Raises (shape rule): ShapeError naming the broken constraint.
    """

    name = "hlo.select_and_scatter"
    operand = operand_def(TensorType)
    source = operand_def(TensorType)
    init_value = operand_def(TensorType)
    select = prop_def(StringAttr)
    window_dimensions = prop_def(DenseArrayBase[I64])
    window_strides = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "`(` $operand `,` $source `init` `:` $init_value `)` `select` $select `dims` `=` $window_dimensions"
        " `,` `strides` `=` $window_strides `,` `pad` `=` $padding attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {
        "select": StrParam(),
        "window_dimensions": IntArrayParam(),
        "window_strides": IntArrayParam(),
        "padding": PairsParam(),
    }

    @classmethod
    def _params(cls, rank, window_dimensions=None, window_strides=None, padding=None, **_):
        p = window_params(
            rank, window_dimensions=window_dimensions, window_strides=window_strides, padding=padding, op=cls.name
        )
        return {k: p[k] for k in ("window_dimensions", "window_strides", "padding")}

    @classmethod
    def make(cls, operands, select="GE", **params):
        rank = TensorSpec.of_type(operands[0].type).rank
        return super().make(operands, select=select, **cls._params(rank, **params))

    @classmethod
    def infer(cls, specs, select="GE", **params):
        op = cls.name
        if len(specs) != 3:
            raise ShapeError(f"takes operand, source and init value, got {len(specs)} operands")
        x, src, init = specs
        if x.dtype not in NUMERIC:
            raise ShapeError(f"does not support dtype {x.dtype}; expected one of {', '.join(NUMERIC)}")
        if src.dtype != x.dtype or init.shape != () or init.dtype != x.dtype:
            raise ShapeError(f"source {src} and init_value {init} must have the operand's dtype {x.dtype}")
        if select not in ("GE", "LE"):
            raise ShapeError(f"select must be GE or LE, got {select!r}")
        p = cls._params(x.rank, **params)
        _positive(p["window_dimensions"], "window_dimensions", op, "C5")
        _positive(p["window_strides"], "window_strides", op, "C7")
        want = tuple(
            num_windows(n, w, s, lo, hi, 1, 1)
            for n, w, s, (lo, hi) in zip(x.shape, p["window_dimensions"], p["window_strides"], p["padding"])
        )
        if src.shape != want:
            raise ShapeError(f"source {src} must have the shape of the windows, {list(want)} (C1)")
        return [x]

    @classmethod
    def kernel(cls, select="GE", **params):
        def run(x, src, init):
            x = np.asarray(x)
            p = cls._params(x.ndim, **params)
            idx = _selected_flat_index(x, select, **p)
            dt = np.result_type(x.dtype, np.float64) if x.dtype.kind == "f" else np.int64
            padded_shape = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, p["padding"]))
            flat = np.bincount(
                idx.ravel(), weights=np.asarray(src, dtype=dt).ravel(), minlength=int(np.prod(padded_shape))
            )
            out = flat.reshape(padded_shape)
            out = out[tuple(slice(lo, lo + n) for n, (lo, _) in zip(x.shape, p["padding"]))]
            return (out + np.asarray(init, dtype=dt)).astype(x.dtype)

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, select="GE", skip_input_indices=(), **params):
        (ct,), (x, _, _) = cotangents, inputs
        if not G.is_float(x):
            return [None, None, None]
        p = cls._params(len(G.shape(x)), **params)
        dsrc = None if 1 in skip_input_indices else _gather_selected(x, ct, select, p)
        dinit = None if 2 in skip_input_indices else G.sum_all(ct)
        return [None if 0 in skip_input_indices else G.zeros_like(x), dsrc, dinit]


def _selected_flat_index(x, select, window_dimensions, window_strides, padding):
    """The flat index, in the padded operand, of each window's selected
    element (the first extreme one in row-major window order)."""
    fill = _lowest(x.dtype) if select == "GE" else _highest(x.dtype)
    xp = _pad_view(x, padding, (1,) * x.ndim, fill)
    out_shape = tuple(
        num_windows(n, w, s, lo, hi, 1, 1)
        for n, w, s, (lo, hi) in zip(x.shape, window_dimensions, window_strides, padding)
    )
    best = None
    where = np.zeros(out_shape, dtype=np.int64)
    offsets = np.zeros((int(np.prod(window_dimensions)), x.ndim), dtype=np.int64)
    better_op = np.greater if select == "GE" else np.less
    for k, (offset, sl) in enumerate(
        _window_slices(xp.shape, window_dimensions, window_strides, (1,) * x.ndim, out_shape)
    ):
        offsets[k] = offset
        cand = xp[sl]
        if best is None:
            best = np.array(cand)
            continue
        better = better_op(cand, best)
        np.copyto(best, cand, where=better)
        where[better] = k
    # Position = window start (i * stride) + the selected offset.
    starts = np.indices(out_shape, sparse=True)
    flat = np.zeros(out_shape, dtype=np.int64)
    strides_el = np.cumprod((1,) + xp.shape[:0:-1])[::-1]
    for d in range(x.ndim):
        flat += (starts[d] * window_strides[d] + offsets[where, d]) * int(strides_el[d])
    return flat


def _lowest(dt):
    return -np.inf if dt.kind == "f" else np.iinfo(dt).min


def _highest(dt):
    return np.inf if dt.kind == "f" else np.iinfo(dt).max


def _gather_selected(x, ct, select, p):
    """``ct`` (operand-shaped) at each window's selected element: the same
    scan as the kernel, written with hlo ops (compare / select over the
    window's strided slices), so it traces and differentiates."""
    dt = G.dtype(x)
    rank = len(G.shape(x))
    fill = G.scalar(
        float(_lowest(np.dtype(numpy_dtype(dt))) if select == "GE" else _highest(np.dtype(numpy_dtype(dt)))), dt
    )
    zero = G.scalar(0, dt)
    lo = [a for a, _ in p["padding"]]
    hi = [b for _, b in p["padding"]]
    xp = G.pad(x, fill, lo, hi, [0] * rank)
    cp = G.pad(ct, zero, lo, hi, [0] * rank)
    padded_shape = G.shape(xp)
    out_shape = tuple(
        num_windows(n, w, s, a, b, 1, 1)
        for n, w, s, (a, b) in zip(G.shape(x), p["window_dimensions"], p["window_strides"], p["padding"])
    )
    best = got = None
    for _, sl in _window_slices(padded_shape, p["window_dimensions"], p["window_strides"], (1,) * rank, out_shape):
        start = [s.start for s in sl]
        limit = [s.stop for s in sl]
        step = [s.step for s in sl]
        cand = G.slice_(xp, start, limit, step)
        val = G.slice_(cp, start, limit, step)
        if best is None:
            best, got = cand, val
            continue
        better = G.compare(cand, best, "GT" if select == "GE" else "LT")
        best = G.select(better, cand, best)
        got = G.select(better, val, got)
    return got


WINDOW_OPS = [ConvolutionOp, ReduceWindowOp, SelectAndScatterOp]
