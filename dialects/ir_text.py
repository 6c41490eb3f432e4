"""MLIR text of xtpu's modules: printing, reading and verifying, the
steps every tool and the runtime's worker processes share.

* :func:`parse_module` reads MLIR text (ops keep their ``file:line:col``;
  errors xDSL raises while reading an op become parse errors at the op);
* :func:`verify_module` verifies, naming the failing op and where it is;
* :func:`module_text` prints (custom syntax, or generic).
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import weakref
from collections import defaultdict

import xdsl
from xdsl.context import Context
from xdsl.dialects.builtin import Float80Type, Float128Type, FloatAttr, ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.parser.generic_parser import ParserState
from xdsl.printer import Printer
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Input, Span
from xdsl.utils.mlir_lexer import MLIRLexer

from xtpu.dialects import make_context


def module_text(module: ModuleOp, generic: bool = False) -> str:
    """The textual IR of a module (custom syntax unless ``generic``)."""
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue() + "\n"


_SPANS: weakref.WeakKeyDictionary[Operation, Span] = weakref.WeakKeyDictionary()
"""Where each op parsed by :class:`SourceParser` starts in its source text."""


_XDSL_DIR = os.path.dirname(os.path.abspath(xdsl.__file__)) + os.sep


def _raised_in_xdsl(e: BaseException) -> bool:
    """True when ``e`` was raised by xDSL's own code (its innermost frame)."""
    tb = e.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_XDSL_DIR)


class _Lexer(MLIRLexer):
    """xDSL's lexer; string literals are matched possessively (the same
    strings, without xDSL 0.74's exponential backtracking on an unclosed
    one: ``(?:[^"...]+|...)*`` nests two quantifiers)."""

    _unescaped_characters_regex = re.compile(r'"(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"')


def _decode(input: str | bytes, name: str) -> str:
    """``input`` as text; bytes that are not UTF-8 are a parse error at them."""
    if isinstance(input, str):
        return input
    try:
        return input.decode("utf-8")
    except UnicodeDecodeError as e:
        text = input.decode("utf-8", errors="replace")
        at = len(input[: e.start].decode("utf-8", errors="replace"))
        raise ParseError(Span(at, at + 1, Input(text, name)), f"the input is not UTF-8 text ({e.reason})") from None


class SourceParser(Parser):
    """xDSL's parser that remembers where each op starts (for
    :func:`verify_module`'s ``file:line:col``) and reports bad literals as
    parse errors at the op.

    xDSL 0.74 raises ``ValueError``, ``VerifyException``, ``struct.error``,
    ``AssertionError`` or ``NotImplementedError`` without a position for some
    literals it lexes fine but cannot hold (``2 : i64`` with a value out of
    range, ``dense<...>`` elements out of range of their type or of the wrong
    kind, ``1.0 : f80``).  An exception raised inside xDSL while an op is
    parsed is raised again as a ``ParseError`` spanning that op, as is a
    ``MemoryError`` (a ``dense<...>`` splat of a huge type); one raised by
    xtpu's own parsers is a defect and propagates.
    """

    #: Lines before the parsed text in its file (``--split-input-file`` chunks).
    line_offset: int = 0

    def __init__(self, ctx: Context, input: str | bytes, name: str = "<unknown>") -> None:
        # xDSL's Parser.__init__ with a lexer whose string literals cannot
        # backtrack exponentially (an unclosed '"' followed by 30 characters
        # on its line took 30 s in xDSL 0.74's lexer).
        text = _decode(input, name)
        super(Parser, self).__init__(ParserState(_Lexer(Input(text, name))), ctx)
        self.ssa_values = dict()
        self.blocks = dict()
        self.forward_block_references = defaultdict(list)
        self.forward_ssa_references = dict()

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        try:
            op = super().parse_operation()
        except ParseError:
            raise
        except MemoryError as e:
            self.raise_error(
                f"the values of this op do not fit in memory ({e})",
                start.start,
                max(self._current_token.span.start, start.end),
            )
        except Exception as e:
            if not _raised_in_xdsl(e):
                raise  # a defect of an xtpu parser: to be fixed there
            msg = str(e) or f"{type(e).__name__}: a value of this op cannot be read (xDSL 0.74 rejects it)"
            self.raise_error(msg, start.start, max(self._current_token.span.start, start.end))
        _SPANS[op] = dataclasses.replace(start, line_offset=self.line_offset) if self.line_offset else start
        return op

    def parse_optional_builtin_int_or_float_attr(self):
        """xDSL's, refusing float literals of types it cannot print
        (``1.0 : f80``: its printer raises ``NotImplementedError``)."""
        start = self._current_token.span.start
        try:
            attr = super().parse_optional_builtin_int_or_float_attr()
        except NotImplementedError:
            self.raise_error("float literals of this type (f80, f128) are not supported", start, self.pos)
        if isinstance(attr, FloatAttr) and isinstance(attr.type, (Float80Type, Float128Type)):
            self.raise_error(f"float literals of type {attr.type} are not supported", start, self.pos)
        return attr


def parse_module(
    text: str | bytes, name: str = "<input>", ctx: Context | None = None, line_offset: int = 0
) -> ModuleOp:
    """Parse ``text`` (the source named ``name``, starting at line
    ``line_offset + 1`` of it) into a module, remembering op positions for
    :func:`verify_module`.

    Raises:
      ParseError: with the ``name:line:col`` of the problem.
    """
    parser = SourceParser(ctx if ctx is not None else make_context(), text, name)
    parser.line_offset = line_offset
    try:
        return parser.parse_module()
    except ParseError:
        raise
    except Exception as e:  # outside any op: attribute and type aliases
        if not _raised_in_xdsl(e):
            raise
        parser.raise_error(str(e) or f"{type(e).__name__}: this cannot be read (xDSL 0.74 rejects it)")


def op_position(op: Operation) -> str | None:
    """``file:line:col`` where a parsed op starts, if it was parsed by
    :class:`SourceParser`."""
    span = _SPANS.get(op)
    if span is None:
        return None
    loc = span.get_location()
    return str(loc)


def failing_op(module: Operation, error: BaseException | None = None) -> Operation | None:
    """The op that does not verify by itself: the first, in xDSL's order
    (an op's regions before its own verifier), whose error is ``error``'s
    message; else the first that fails at all."""
    first = None
    want = None if error is None else str(error)
    for op in module.walk(region_first=True):
        try:
            op.verify(verify_nested_ops=False)
        except Exception as e:  # noqa: BLE001 - any failure names this op
            if want is None or str(e) == want:
                return op
            first = first or op
    return first


def check_defined_before_use(module: Operation) -> None:
    """Every value used in a block is defined before its use there, or
    outside the block (what passes and the runtime's plans rely on).

    xDSL 0.74 parses forward references and does not check dominance, so
    ``%y = hlo.negate %z`` before ``%z = ...`` in the same block verifies.
    Only definitions in the user's own block or its ancestors' blocks are
    ordered; values of other blocks are left to the CFG (xtpu has none).

    Raises:
      VerifyException: naming the op, the value and where it is defined.
    """
    index: dict[int, dict[int, int]] = {}

    def position(op: Operation) -> int:
        block = op.parent_block()
        table = index.get(id(block))
        if table is None:
            table = index[id(block)] = {id(o): i for i, o in enumerate(block.ops)}
        return table[id(op)]

    for op in module.walk():
        for v in op.operands:
            owner = v.owner
            if not isinstance(owner, Operation) or owner.parent_block() is None:
                continue
            block = owner.parent_block()
            user = op
            while user is not None and user.parent_block() is not block:
                user = user.parent_op()
            if user is None:
                continue
            if user is owner or position(owner) > position(user):
                where = op_position(op)
                name = f"%{v.name_hint}" if v.name_hint else "a value"
                defined = op_position(owner)
                raise VerifyException(
                    (f"{where}: " if where else "")
                    + f"'{op.name}' op uses {name} before it is defined"
                    + (f" (by '{owner.name}' at {defined})" if defined else f" (by '{owner.name}')")
                    + "; a value must be defined above its uses in a block"
                )


def verify_module(module: ModuleOp) -> None:
    """``module.verify()``, and values defined before their uses
    (:func:`check_defined_before_use`); a failure names the op that does not
    verify and, for parsed text, where it starts.

    Raises:
      VerifyException: ``file:line:col: 'op.name' op <xDSL's message>``
        (with xDSL's notes: the module with the op marked).
    """
    try:
        module.verify()
        check_defined_before_use(module)
    except DiagnosticException as e:
        op = failing_op(module, e)
        if op is None:
            raise
        where = op_position(op)
        msg = str(e)
        if not msg.startswith(f"'{op.name}' op"):
            msg = f"'{op.name}' op {msg}"
        located = type(e)(f"{where}: {msg}" if where else msg)
        for note in getattr(e, "__notes__", ()):
            located.add_note(note)
        raise located from None


__all__ = [
    "module_text",
    "SourceParser",
    "parse_module",
    "op_position",
    "failing_op",
    "check_defined_before_use",
    "verify_module",
]
