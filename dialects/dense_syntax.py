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
* the printer writes every non-finite element as its bit pattern in upper
  case hex, as MLIR does, finite elements as xDSL does, and a splat only when
  all elements have the same bits; more than 100 elements are written as
  MLIR's hex string of the raw little-endian data (``dense<"0x...">``), which
  xDSL already reads bit for bit.

:func:`print_dense` and :func:`parse_dense` are what ``hlo.constant`` uses for
its custom syntax.  :func:`install` makes xDSL's own printer and parser of
``dense<...>`` use them for float element types too, so the generic op form
(``--print-op-generic``) and any other op holding a float dense attribute
round-trip as well; integer, index, bool and complex element types keep xDSL's
behaviour.  Importing :mod:`xtpu.dialects` installs it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
)
from xdsl.ir import Attribute
from xdsl.parser import AttrParser
from xdsl.printer import Printer

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
    return _FLOATS.get(type(elem))


def print_dense_body(printer: Printer, attr: DenseIntOrFPElementsAttr) -> None:
    """Print ``dense<...>`` without the type; float elements bit for bit."""
    dts = _float_dtypes(attr.get_element_type())
    if dts is None:
        _ORIGINAL_PRINT(attr, printer)
        return
    fdt, udt = dts
    elem = attr.get_element_type()
    bits = np.frombuffer(attr.data.data, dtype=udt)
    values = bits.view(fdt)
    shape = tuple(attr.get_shape())
    if int(np.prod(shape, dtype=np.int64)) != bits.size:
        shape = (bits.size,)
    width = 2 * udt.itemsize

    def one(i: int) -> None:
        v = values[i]
        with np.errstate(invalid="ignore"):
            finite = bool(np.isfinite(v))
        if finite:
            printer.print_float(float(v), elem)
        else:
            printer.print_string(f"0x{int(bits[i]):0{width}X}")

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
        if bits.size == 0:
            pass
        elif bool(np.all(bits == bits[0])):
            one(0)
        elif bits.size > HEX_STRING_THRESHOLD:
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
    elements, shape = contents
    type_shape = list(type.get_shape())  # type: ignore[attr-defined]
    count = int(np.prod(type_shape, dtype=np.int64))
    if shape and type_shape != shape:
        parser.raise_error(
            f"Shape mismatch in dense literal. Expected {type_shape} shape from the type, but got {shape} shape."
        )
    bits = np.empty(len(elements), dtype=udt)
    top = 1 << (8 * udt.itemsize)
    for i, e in enumerate(elements):
        text = e.span.text
        if isinstance(e.value, tuple):
            parser.raise_error("No conversion from complex to float", at_position=e.span)
        if isinstance(e.value, int) and not isinstance(e.value, bool) and text.lstrip("-").lower().startswith("0x"):
            if text.startswith("-"):
                parser.raise_error("hexadecimal float literal should not have a leading minus", e.span)
            if e.value >= top:
                parser.raise_error(
                    f"hexadecimal float constant out of range for type {type.get_element_type()}", e.span
                )  # type: ignore[attr-defined]
            bits[i] = e.value
        else:
            with np.errstate(over="ignore"):
                bits[i] = np.array(float(e.value), dtype=fdt).view(udt)
    if not shape:  # splat
        bits = np.broadcast_to(bits, (count,))
    return DenseIntOrFPElementsAttr(type, BytesAttr(np.ascontiguousarray(bits).tobytes()))  # type: ignore[arg-type]


def parse_dense(parser: AttrParser) -> DenseIntOrFPElementsAttr:
    """Parse ``dense<...> : type`` (see the module docstring)."""
    parser.parse_keyword("dense", " for a dense elements attribute")
    return parse_dense_body(parser)


_ORIGINAL_PRINT = DenseIntOrFPElementsAttr.print_without_type
_ORIGINAL_PARSE = AttrParser.parse_dense_int_or_fp_elements_attr


def install() -> None:
    """Make xDSL print and parse float ``dense<...>`` attributes bit for bit
    (idempotent).  Other element types keep xDSL's own code."""
    DenseIntOrFPElementsAttr.print_without_type = lambda self, printer: print_dense_body(printer, self)  # type: ignore[method-assign]
    AttrParser.parse_dense_int_or_fp_elements_attr = parse_dense_body  # type: ignore[method-assign, assignment]
