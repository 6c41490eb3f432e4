"""Reading, verifying and lowering modules: the steps both tools share.

* :func:`parse_module` reads MLIR text (ops keep their ``file:line:col``;
  errors xDSL raises while reading an op become parse errors at the op);
* :func:`verify_module` verifies, naming the failing op and where it is;
* :func:`parse_pipeline` reads a pass pipeline (an unknown pass or option is
  one line naming the nearest ones);
* :func:`run_pipeline` runs passes, recording the IR after each one.
"""

from __future__ import annotations

import dataclasses
import difflib
import io
import logging
import os
import re
import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence

import xdsl
from xdsl.context import Context
from xdsl.dialects.builtin import Float80Type, Float128Type, FloatAttr, ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.parser.generic_parser import ParserState
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Input, Span
from xdsl.utils.mlir_lexer import MLIRLexer

from xtpu.dialects import make_context
from xtpu.runtime import profiler as _profiler

_pass_log = logging.getLogger("xtpu.passes")


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


def available_passes() -> dict:
    from xtpu.passes import ALL_PASSES

    return {name: (lambda c=cls: c) for name, cls in ALL_PASSES.items()}


class PipelineError(ValueError):
    """An unknown pass or option, or a malformed pipeline spec: one line
    naming it, with the nearest known names."""


def _nearest(name: str, known: Sequence[str]) -> str:
    """`` (did you mean X?)`` with the closest known names (difflib): the
    best and any nearly as close, or nothing when none is close."""

    def ratio(k: str) -> float:
        return difflib.SequenceMatcher(None, name, k).ratio()

    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    if not close:
        return ""
    best = ratio(close[0])
    return " (did you mean " + " or ".join(k for k in close if ratio(k) >= best - 0.05) + "?)"


def parse_pipeline(
    spec: str | Sequence[str], available: Mapping[str, Callable[[], type[ModulePass]]] | None = None
) -> tuple[ModulePass, ...]:
    """Passes for an xdsl-opt style spec ``"a{opt=1},b"`` or a list of them,
    from ``available`` (name -> factory of the pass class; default: xtpu's
    passes).

    Raises:
      PipelineError: a malformed spec, an unknown pass or option, or a bad
        option value; one line, with the nearest pass or option names
        (``did you mean tpu-lower-cross-replica-sum?``).
    """
    if not isinstance(spec, str):
        spec = ",".join(spec)
    if not spec:
        return ()
    if available is None:
        # Passes are frozen dataclasses (xDSL's ModulePass), so a spec's
        # passes serve every compile that asks for it: building them (xDSL
        # reads each pass's type hints) was a tenth of compiling a small
        # program.  Parsed again when the registry now holds another class
        # under one of their names (a pass swapped in, or removed).
        cached = _PARSED.get(spec)
        if cached is None or not _registered(cached):
            cached = _PARSED[spec] = _parse_pipeline(spec, available_passes())
        return cached
    return _parse_pipeline(spec, available)


#: spec -> its passes, for xtpu's own registry (:func:`parse_pipeline`).
_PARSED: dict[str, tuple[ModulePass, ...]] = {}


def _registered(passes: tuple[ModulePass, ...]) -> bool:
    """Whether each of ``passes`` is of the class xtpu's registry holds
    under its name now."""
    from xtpu.passes import ALL_PASSES

    return all(ALL_PASSES.get(p.name) is type(p) for p in passes)


def _parse_pipeline(spec: str, available: Mapping[str, Callable[[], type[ModulePass]]]) -> tuple[ModulePass, ...]:
    from xdsl.utils.arg_spec import parse_pipeline as parse_specs

    try:
        specs = list(parse_specs(spec))
    except ArgSpecParseError as e:
        # xDSL's message is the spec with a caret; keep its last line, the reason.
        reason = str(e).strip().splitlines()[-1].strip()
        raise PipelineError(f"malformed pass pipeline {spec!r}: {reason}") from None
    passes = []
    for s in specs:
        if s.name not in available:
            raise PipelineError(f"unknown pass '{s.name}'{_nearest(s.name, sorted(available))}")
        cls = available[s.name]()
        options = {f.name.replace("_", "-") for f in dataclasses.fields(cls) if f.init and f.name != "name"}
        for given in s.parameters:
            opt = given.replace("_", "-")
            if opt not in options:
                known = ", ".join(sorted(options)) or "none"
                raise PipelineError(
                    f"pass '{s.name}' has no option '{given}'{_nearest(opt, sorted(options))}; its options: {known}"
                )
        try:
            passes.append(cls.from_pass_spec(s))
        except (ValueError, TypeError) as e:
            raise PipelineError(f"pass '{s.name}': {e}") from None
    return tuple(passes)


class Stages(Mapping):
    """Pass name -> the module text after that pass (xtpu's ``stages``),
    and ``times``: pass name -> seconds the pass took when the program was
    compiled.

    The texts are computed when first read, by running the same passes again
    on a copy of the traced module: passes are deterministic, and copying or
    printing the module after every pass would cost more than the passes
    themselves.
    """

    def __init__(self, module: ModuleOp, passes: Sequence[ModulePass], times: Mapping[str, float] | None = None):
        self._module = module  # the traced module, which compile() never changes
        self._passes = tuple(passes)
        self._texts: dict[str, str] | None = None
        self.times: Mapping[str, float] = times if times is not None else {}

    def _get(self) -> dict[str, str]:
        if self._texts is None:
            texts: dict[str, str] = {}
            run_pipeline(self._module.clone(), self._passes, texts)
            self._texts = texts
        return self._texts

    def __getitem__(self, name: str) -> str:
        return self._get()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(p.name for p in self._passes)

    def __len__(self) -> int:
        return len(self._passes)

    def __repr__(self) -> str:
        def one(name: str) -> str:
            t = self.times.get(name)
            return name if t is None else f"{name}: {t * 1e3:.1f} ms"

        return f"Stages({[one(p.name) for p in self._passes]})"


class PassError(DiagnosticException, ValueError):
    """A pass rejected the program (a host-only op on the device with soft
    placement off, a string crossing to the device, a sharding that does not
    fit, ...): a ``ValueError`` like every other error in the user's
    program, and still an xDSL ``DiagnosticException`` for xDSL's tools.
    The message names the op and the user's ``file.py:LINE``."""


def run_pipeline(
    module: ModuleOp,
    passes: Sequence[ModulePass],
    record: dict[str, str] | None = None,
    verify_each: bool = True,
    times: dict[str, float] | None = None,
) -> ModuleOp:
    """Apply ``passes`` in place, verifying after each one (or, with
    ``verify_each=False``, once after the last).

    With ``record`` given, ``record[pass_name]`` receives the module text after
    that pass (what :class:`Stages` shows); with ``times``, ``times[pass_name]``
    the seconds the pass took (also logged at debug level, ``xtpu.passes``).

    Raises:
      PassError: a pass rejected the program (a ``ValueError``).
      VerifyException: a pass left a module that does not verify.
    """
    ctx = make_context()
    for i, p in enumerate(passes):
        start = time.perf_counter()
        try:
            p.apply(ctx, module)
        except PassError:
            raise
        except DiagnosticException as e:  # a pass rejected the user's program
            raise PassError(*e.args) from None
        seconds = time.perf_counter() - start
        trace = _profiler.active()
        if trace is not None:
            trace.add(p.name, "compile", start, start + seconds)
        if times is not None:
            times[p.name] = seconds
        _pass_log.debug("pass %s in %.2f ms", p.name, seconds * 1e3)
        if verify_each or i == len(passes) - 1:
            module.verify()
        if record is not None:
            record[p.name] = module_text(module)
    return module
