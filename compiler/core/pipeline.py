"""Reading, verifying and lowering modules: the steps both tools share.

* :func:`parse_module`, :func:`verify_module`, :func:`module_text`: the IR
  text steps of :mod:`xtpu.dialects.ir_text`, re-exported;
* :func:`parse_pipeline` reads a pass pipeline (an unknown pass or option is
  one line naming the nearest ones);
* :func:`run_pipeline` runs passes, recording the IR after each one.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException

from xtpu.dialects import make_context
from xtpu.dialects.ir_text import (  # noqa: F401 - the IR text steps, re-exported for the tools
    SourceParser,
    check_defined_before_use,
    failing_op,
    module_text,
    op_position,
    parse_module,
    verify_module,
)
from xtpu.passes import ALL_PASSES
from xtpu.runtime import profiler as _profiler

_pass_log = logging.getLogger("xtpu.passes")


def available_passes() -> dict:
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


@functools.cache
def _context() -> Context:
    """The context every pipeline runs in (xtpu's passes only read it):
    made once, not per compile."""
    return make_context()


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
    ctx = _context()
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
