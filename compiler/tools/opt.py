"""``xtpu-opt``: xDSL's ``xdsl-opt`` with xtpu's dialects and passes.

Every flag of ``xdsl-opt`` is kept (``-p``, ``--split-input-file``,
``--verify-diagnostics``, ``--print-op-generic``, ``--print-between-passes``,
``--time-passes``, ``-o``, ...).  Example::

  xtpu-opt model.mlir -p tpu-mark-outside-compilation,tpu-outline-outside-compilation
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import textwrap
from collections.abc import Sequence


def _load_numpy_with_one_blas_thread() -> None:
    """xtpu-opt does no BLAS work, but OpenBLAS starts a worker thread per
    core when numpy loads, and each spins about 0.1 s of CPU waiting for
    work (a third of xtpu-opt's start on a 2-core machine).  When numpy is
    not loaded yet (this module is what loads it: the xtpu-opt process),
    load it with ``OPENBLAS_NUM_THREADS=1``, set only while it loads (child
    processes inherit the environment as it was); a value the user set is
    kept, and so is any process that loaded numpy first."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


_load_numpy_with_one_blas_thread()

from xdsl.passes import ModulePass  # noqa: E402
from xdsl.utils.exceptions import DiagnosticException, ParseError  # noqa: E402
from xdsl.utils.target import Target  # noqa: E402
from xdsl.xdsl_opt_main import xDSLOptMain  # noqa: E402

from xtpu.about import __version__  # noqa: E402
from xtpu.core.pipeline import PipelineError, parse_module, parse_pipeline, verify_module  # noqa: E402
from xtpu.dialects import DIALECTS  # noqa: E402
from xtpu.passes import ALL_PASSES, DEFAULT_PIPELINE, FUSION_PIPELINE, SPMD_PIPELINE  # noqa: E402
from xtpu.passes.stablehlo_export import StableHLOExportError, to_text  # noqa: E402
from xtpu.passes.stablehlo_import import StableHLOImportError, import_module  # noqa: E402


def pass_summary(cls: type[ModulePass]) -> str:
    """The first paragraph of the pass's docstring, on one line, without
    reST markup: the sentence the help shows whole."""
    paragraph = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split()).replace("``", "")


def _pass_line(cls: type[ModulePass]) -> str:
    """``name{option=default ...}`` and, below it, the summary wrapped."""

    def value(v: object) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)

    opts = " ".join(f"{f.name.replace('_', '-')}={value(f.default)}" for f in dataclasses.fields(cls))
    spec = f"{cls.name}{{{opts}}}" if opts else cls.name
    body = textwrap.fill(
        pass_summary(cls), width=78, initial_indent="      ", subsequent_indent="      ", break_on_hyphens=False
    )
    return f"  {spec}\n{body}"


GENERIC_XDSL_PASSES = ("canonicalize", "cse", "dce")
"""xDSL's dialect-independent passes the help names; every other xDSL pass
is accepted too (``--list-passes``)."""


def passes_help() -> str:
    """xtpu's passes with their options and whole summaries, then the
    pipelines, then where xDSL's passes are: the text ``--help`` starts with."""
    lines = ["xtpu passes (-p NAME{OPTION=VALUE ...},...):"]
    lines += [_pass_line(cls) for cls in ALL_PASSES.values()]
    lines.append("")
    lines.append("pipelines:")
    lines.append("  default (what xtpu.lower(...).compile() runs):")
    lines.append("    -p " + ",".join(DEFAULT_PIPELINE))
    lines.append("  a replica split over logical cores appends:")
    lines.append("    " + ",".join(SPMD_PIPELINE))
    lines.append("  then, last:")
    lines.append("    " + ",".join(FUSION_PIPELINE))
    lines.append("")
    lines.append("xDSL's passes are available too: its generic " + ", ".join(GENERIC_XDSL_PASSES))
    lines.append("and the others that --list-passes prints.")
    return "\n".join(lines)


class _ListPasses(argparse.Action):
    """``--list-passes``: every registered pass name, xtpu's first."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        names = list(ALL_PASSES) + sorted(n for n in parser.xtpu_available_passes if n not in ALL_PASSES)
        print("\n".join(names))
        parser.exit()


class XtpuOptMain(xDSLOptMain):
    """The xDSL driver with the ``hlo``, ``tpu`` and ``ccl`` dialects loaded
    and the ``tpu-*`` passes registered next to xDSL's own."""

    version_format = f"xtpu-opt {__version__} (xDSL {{xdsl_version}})"

    def __init__(self, args: Sequence[str] | None = None):
        super().__init__(description="xtpu modular optimizer driver", args=args)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        """xDSL's flags, with xtpu's passes and pipelines first in ``--help``
        (xDSL's ``-p`` help lists its ~130 passes in one paragraph),
        ``--list-passes``, and ``--version`` naming xtpu's and xDSL's."""
        super().register_all_arguments(arg_parser)
        arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter
        arg_parser.description = "xtpu modular optimizer driver\n\n" + passes_help()
        arg_parser.xtpu_available_passes = self.available_passes
        for action in arg_parser._actions:
            if action.dest == "passes":
                action.help = "comma-separated passes with {options}: xtpu's above, xDSL's by --list-passes"
        arg_parser.add_argument("--list-passes", action=_ListPasses, help="print every available pass, xtpu's first")

    def register_all_dialects(self) -> None:
        super().register_all_dialects()

        for dialect in DIALECTS:
            if dialect.name in self.ctx.registered_dialect_names:  # by the xdsl.universe entry point
                self.ctx.load_registered_dialect(dialect.name)
            else:
                self.ctx.load_dialect(dialect)

    def register_all_passes(self) -> None:
        super().register_all_passes()

        for name, cls in ALL_PASSES.items():
            self.register_pass(name, lambda c=cls: c)

    def register_all_frontends(self) -> None:
        """MLIR text is read by :func:`xtpu.pipeline.parse_module`: ops keep
        their ``file:line:col`` for diagnostics, and literals xDSL cannot
        hold are parse errors at the op."""
        super().register_all_frontends()

        def parse_mlir(io):
            text = io.read()
            if isinstance(text, bytes) and text.startswith(b"ML\xefR"):  # MLIR bytecode: StableHLO's artifacts
                return import_module(text)
            if _is_stablehlo(text):
                # StableHLO (from JAX, TF, XLA, ...): its ops converted to xtpu's.
                return import_module(text, self.get_input_name(), getattr(self, "_line_offset", 0))
            return parse_module(text, self.get_input_name(), self.ctx, getattr(self, "_line_offset", 0))

        self.available_frontends["mlir"] = parse_mlir

    def register_all_targets(self) -> None:
        """xDSL's targets and ``stablehlo``: ``-t stablehlo`` prints the
        device program as StableHLO (``-t 'stablehlo{host-programs=omit}'``
        leaves host programs out instead of refusing them)."""
        super().register_all_targets()
        self.available_targets["stablehlo"] = lambda: StableHLOTarget

    def parse_chunk(self, chunk, file_extension: str, start_offset: int = 0):
        self._line_offset = start_offset
        return super().parse_chunk(chunk, file_extension, start_offset)

    def setup_pipeline(self) -> None:
        """xDSL's pipeline, with one-line errors for an unknown pass or option
        (:class:`xtpu.pipeline.PipelineError`, naming the nearest ones), and
        an input that does not verify named by the op and its
        ``file:line:col``."""
        from xdsl.passes import PassPipeline

        parse_pipeline(self.args.passes, self.available_passes)
        super().setup_pipeline()
        check = self.pipeline.callback

        def callback(previous, module, next_pass) -> None:
            if previous is None and not self.args.disable_verify:
                verify_module(module)  # the input, before the first pass
                if next_pass is None:
                    return
            check(previous, module, next_pass)

        self.pipeline = PassPipeline(self.pipeline.passes, callback)


def _is_stablehlo(text: str | bytes) -> bool:
    """Whether ``text`` is a StableHLO module: it has ``stablehlo.*`` (or
    CHLO's ``chlo.*``, which JAX emits beside them) ops and none of xtpu's
    (``hlo.*``, ``tpu.*``, ``ccl.*``)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = re.sub(r"//[^\n]*", "", text)  # comments (lit's CHECK lines) say nothing
    return (
        re.search(r"\b(stablehlo|chlo)\.", text) is not None and re.search(r"(?<![\w.])(hlo|tpu|ccl)\.", text) is None
    )


@dataclasses.dataclass(frozen=True)
class StableHLOTarget(Target):
    """``-t stablehlo``: the module's device program as StableHLO
    (:mod:`xtpu.passes.stablehlo_export`), in MLIR's generic form."""

    name = "stablehlo"
    host_programs: str = "refuse"

    def emit(self, ctx, module, output) -> None:
        try:
            output.write(to_text(module, self.host_programs))
        except StableHLOExportError as e:
            raise DiagnosticException(str(e)) from None


def main(args: Sequence[str] | None = None) -> None:
    """Run the driver; a diagnostic, a parse error or a bad ``-p`` pipeline
    is printed to stderr without a Python traceback and the exit status is 1."""
    try:
        XtpuOptMain(args=args).run()
    except PipelineError as e:
        print(f"xtpu-opt: error: -p: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    except OSError as e:  # the input or output file
        print(f"xtpu-opt: error: cannot open {e.filename}: {e.strerror}", file=sys.stderr)
        raise SystemExit(1) from None
    except (DiagnosticException, ParseError, StableHLOImportError) as e:
        print(f"xtpu-opt: error: {e}", file=sys.stderr)
        for note in getattr(e, "__notes__", ()):
            print(note, file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
