"""Bit-exact text form of float ``dense<...>`` elements attributes.

xDSL 0.74 does not round-trip float dense attributes through text (xDSL
issue #3370; its parser half, PR #3378, is not merged):

* it prints a non-finite element (``inf``, ``-inf``, ``nan``) as its bit
  pattern in hex, MLIR's syntax (``0xff800000`` for ``-inf : f32``), and so a
  finite ``float32`` value whose 9 significant digits show no ``.``
  (``123456792.0`` prints as ``0x4CEB79A3``), but parses every hex literal as an
  integer and converts that to a float: ``-inf`` comes back as ``4.2865787e+09``;
* it takes ``[0.0, -0.0]`` for a splat and prints ``dense<0.000000e+00>``;
* it reads elements back through Python floats, which turns a ``float32``
  signalling NaN into a quiet one.

This module gives float elements MLIR's semantics, bit for bit:

* an element is a decimal literal (``1.500000e+00``, ``-0.000000e+00``, ``2``)
  or a hex integer literal that is the element's bit pattern, as wide as the
  type (``0x7F800000`` is ``inf : f32``, ``0xFF80`` is ``-inf : bf16``, ``0xFFF0000000000000`` is
  ``-inf : f64``, ``0x7FC00000`` a quiet NaN; any NaN payload and sign is
  kept).  A hex literal with a leading minus or wider than the type is an
  error;
* a ``complex<f32>`` element is MLIR's pair ``(real,imag)`` whose parts are
  written and read as ``f32`` elements are (``(0x7FC00000,-0.000000e+00)``),
  so NaN, inf and -0.0 in either part keep their bits;
* the printer writes every non-finite element as its bit pattern in upper
  case hex, as MLIR does, finite elements as xDSL does, and a splat only when
  all elements have the same bits; more than 100 elements are written as
  MLIR's hex string of the raw little-endian data (``dense<"0x...">``), which
  xDSL already reads bit for bit.

:func:`print_dense` and :func:`parse_dense` are what ``hlo.constant`` uses for
its custom syntax.  :func:`install` makes xDSL's own printer and parser of
``dense<...>`` use them for float element types too, so the generic op form
(``--print-op-generic``) and any other op holding a float dense attribute
round-trip as well; integer, index, bool and integer-complex element types
keep xDSL's behaviour.  Importing :mod:`xtpu.dialects` installs it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    BytesAttr,
    ComplexType,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
)
from xdsl.ir import Attribute
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.lexer import Span
from xdsl.utils.mlir_lexer import MLIRTokenKind

# element type -> (numpy float dtype, numpy unsigned dtype of its bits)
_FLOATS: dict[type, tuple[np.dtype, np.dtype]] = {
    BFloat16Type: (np.dtype(ml_dtypes.bfloat16), np.dtype("<u2")),
    Float16Type: (np.dtype("<f2"), np.dtype("<u2")),
    Float32Type: (np.dtype("<f4"), np.dtype("<u4")),
    Float64Type: (np.dtype("<f8"), np.dtype("<u8")),
}

#: Above this many elements a non-splat attribute is printed as a hex string
#: (xDSL's and MLIR's threshold for large constants).
HEX_STRING_THRESHOLD = 100


def _float_dtypes(elem: Attribute) -> tuple[np.dtype, np.dtype] | None:
    if isinstance(elem, ComplexType):
        return _FLOATS.get(type(elem.element_type))
    return _FLOATS.get(type(elem))


def print_dense_body(printer: Printer, attr: DenseIntOrFPElementsAttr) -> None:
    """Print ``dense<...>`` without the type; float elements bit for bit."""
    dts = _float_dtypes(attr.get_element_type())
    if dts is None:
        _ORIGINAL_PRINT(attr, printer)
        return
    fdt, udt = dts
    elem = attr.get_element_type()
    parts = 2 if isinstance(elem, ComplexType) else 1
    if parts == 2:
        elem = elem.element_type  # type: ignore[attr-defined]
        # one row of (real, imag) bits per element
        bits = np.frombuffer(attr.data.data, dtype=udt).reshape(-1, 2)
    else:
        bits = np.frombuffer(attr.data.data, dtype=udt)
    values = bits.view(fdt)
    n = bits.shape[0]
    shape = tuple(attr.get_shape())
    if int(np.prod(shape, dtype=np.int64)) != n:
        shape = (n,)
    width = 2 * udt.itemsize

    def part(v: np.generic, b: np.generic) -> None:
        with np.errstate(invalid="ignore"):
            finite = bool(np.isfinite(v))
        if finite:
            printer.print_float(float(v), elem)
        else:
            printer.print_string(f"0x{int(b):0{width}X}")

    def one(i: int) -> None:
        if parts == 1:
            part(values[i], bits[i])
            return
        printer.print_string("(")
        part(values[i, 0], bits[i, 0])
        printer.print_string(",")
        part(values[i, 1], bits[i, 1])
        printer.print_string(")")

    def nested(start: int, dims: tuple[int, ...]) -> None:
        printer.print_string("[")
        if len(dims) > 1:
            step = int(np.prod(dims[1:], dtype=np.int64))
            printer.print_list(range(dims[0]), lambda k: nested(start + k * step, dims[1:]))
        else:
            printer.print_list(range(start, start + dims[0]), one)
        printer.print_string("]")

    printer.print_string("dense")
    with printer.in_angle_brackets():
        if n == 0:
            pass
        elif bool(np.all(bits == bits[0])):
            one(0)
        elif n > HEX_STRING_THRESHOLD:
            printer.print_string(f'"0x{attr.data.data.hex().upper()}"')
        else:
            nested(0, shape)


def print_dense(printer: Printer, attr: DenseIntOrFPElementsAttr) -> None:
    """Print ``dense<...> : type`` (see the module docstring)."""
    print_dense_body(printer, attr)
    printer.print_string(" : ")
    printer.print_attribute(attr.get_type())


def parse_dense_body(parser: AttrParser, type: Attribute | None = None) -> DenseIntOrFPElementsAttr:
    """Parse the ``<...> : type`` of a ``dense`` attribute (the ``dense``
    keyword already read; ``: type`` only when ``type`` is None).  A hex
    integer element of a float type is its bit pattern."""
    start, given = parser._current_token.span.start, type
    parser.parse_punctuation("<", " in dense attribute")
    contents = None
    if parser.parse_optional_punctuation(">") is None:
        if parser.parse_optional_str_literal() is None:
            contents = parser._parse_tensor_literal()
        parser.parse_punctuation(">", " in dense attribute")
    if type is None:
        parser.parse_punctuation(":", " in dense attribute")
        type = parser._parse_dense_literal_type()
    dts = _float_dtypes(type.get_element_type())  # type: ignore[attr-defined]
    if dts is None or contents is None:
        # Integers, bools, complex, the empty and the hex string forms: xDSL
        # reads those right; read them again with its own parser.
        end = parser._current_token.span.start
        parser._resume_from(start)
        attr = _ORIGINAL_PARSE(parser, given)
        assert parser._current_token.span.start == end
        return attr
    fdt, udt = dts
    is_complex = isinstance(type.get_element_type(), ComplexType)  # type: ignore[attr-defined]
    elements, shape = contents
    type_shape = list(type.get_shape())  # type: ignore[attr-defined]
    count = int(np.prod(type_shape, dtype=np.int64))
    if shape and type_shape != shape:
        parser.raise_error(
            f"Shape mismatch in dense literal. Expected {type_shape} shape from the type, but got {shape} shape."
        )
    bits = np.empty((len(elements), 2) if is_complex else len(elements), dtype=udt)
    top = 1 << (8 * udt.itemsize)
    part_type = type.get_element_type()  # type: ignore[attr-defined]
    if is_complex:
        part_type = part_type.element_type

    def part_bits(value: object, text: str, span: Span) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and text.lstrip("-").lower().startswith("0x"):
            if text.startswith("-"):
                parser.raise_error("hexadecimal float literal should not have a leading minus", span)
            if value >= top:
                parser.raise_error(f"hexadecimal float constant out of range for type {part_type}", span)
            return value
        with np.errstate(over="ignore"):
            return int(np.array(float(value), dtype=fdt).view(udt))  # type: ignore[arg-type]

    for i, e in enumerate(elements):
        if is_complex:
            if not isinstance(e.value, ComplexParts):
                parser.raise_error(f"expected a complex element (real, imag) for type {type}", at_position=e.span)
            bits[i] = [part_bits(v, sp.text, sp) for v, sp in zip(e.value, e.value.spans)]
        elif isinstance(e.value, tuple):
            parser.raise_error("No conversion from complex to float", at_position=e.span)
        else:
            bits[i] = part_bits(e.value, e.span.text, e.span)
    if not shape:  # splat
        bits = np.broadcast_to(bits, (count, 2) if is_complex else (count,))
    return DenseIntOrFPElementsAttr(type, BytesAttr(np.ascontiguousarray(bits).tobytes()))  # type: ignore[arg-type]


def parse_dense(parser: AttrParser) -> DenseIntOrFPElementsAttr:
    """Parse ``dense<...> : type`` (see the module docstring)."""
    parser.parse_keyword("dense", " for a dense elements attribute")
    return parse_dense_body(parser)


class ComplexParts(tuple):
    """A complex tensor literal element ``(real, imag)`` as parsed, with the
    span of each part (``spans``): a hex part is a float's bit pattern, which
    only its text tells from an integer."""

    spans: tuple[Span, Span]


def _parse_optional_complex(parser: AttrParser) -> tuple[ComplexParts, Span] | None:
    """xDSL's complex literal ``(real, imag)``, keeping each part's span and
    taking a hex bit pattern beside a decimal float (``(0x7FC00000,1.0)``,
    MLIR's form of a NaN real part), which xDSL refuses as a mix of an int
    and a float."""
    if parser._current_token.kind != MLIRTokenKind.L_PAREN:
        return None
    start = parser._consume_token(MLIRTokenKind.L_PAREN).span
    real, real_span = parser._parse_bool_int_or_float()
    parser.parse_punctuation(",")
    imag, imag_span = parser._parse_bool_int_or_float()

    def hex_part(v: object, sp: Span) -> bool:
        return type(v) is int and sp.text.lstrip("-").lower().startswith("0x")

    kinds = {type(v) for v, sp in ((real, real_span), (imag, imag_span)) if not hex_part(v, sp)}
    if len(kinds) > 1 or (kinds and bool in kinds and (hex_part(real, real_span) or hex_part(imag, imag_span))):
        parser.raise_error("Complex value must be either (float, float) or (int, int)")
    end = parser._consume_token(MLIRTokenKind.R_PAREN).span
    value = ComplexParts((real, imag))
    value.spans = (real_span, imag_span)
    return value, Span(start.start, end.end, start.input)


_ORIGINAL_PRINT = DenseIntOrFPElementsAttr.print_without_type
_ORIGINAL_PARSE = AttrParser.parse_dense_int_or_fp_elements_attr


def install() -> None:
    """Make xDSL print and parse float ``dense<...>`` attributes bit for bit
    (idempotent).  Other element types keep xDSL's own code."""
    DenseIntOrFPElementsAttr.print_without_type = lambda self, printer: print_dense_body(printer, self)  # type: ignore[method-assign]
    AttrParser.parse_dense_int_or_fp_elements_attr = parse_dense_body  # type: ignore[method-assign, assignment]
    AttrParser._parse_optional_complex = _parse_optional_complex  # type: ignore[method-assign, assignment]
