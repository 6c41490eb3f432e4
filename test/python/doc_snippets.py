"""Run the code blocks of a Markdown file as a reader would, and check that
they print what the text says.

* ```` ```python ```` blocks are pasted, line by line, into one Python
  interactive console per file (``code.InteractiveConsole``, the classic
  REPL): a blank line inside a function ends it there, as in the REPL, and
  expression statements echo their value.  A statement's comment
  ``# -> TEXT`` (at its end, or on the comment lines right after it, one
  output line each) is what the statement prints or echoes; a first line
  ``(any order)`` compares the lines as a set (replicas print concurrently).
* ```` ```mlir ```` and other output blocks preceded by
  ``<!-- snippet-output: EXPR -->`` must be what ``EXPR`` (evaluated in the
  file's namespace) prints: each line of the block, ``...`` standing for any
  text, appears in order (an abridged block may skip lines).
* ```` ```sh ```` blocks run each command with bash in a scratch directory
  (``examples/`` and ``benchmarks/`` linked in); ``pip install`` steps are
  skipped (the test runs in the installed tree); ``# TEXT`` comment lines
  after a command are its expected output lines.
* ``<!-- snippet: skip REASON -->`` before a block leaves it out, saying why.

Texts compare after collapsing whitespace; when they differ only in how
numbers are written (``array(3., dtype=float32)`` vs ``3.0``), the numbers
must be equal.
"""

from __future__ import annotations

import code
import contextlib
import io
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Block:
    path: str
    line: int  # of the opening fence
    lang: str
    text: str
    directive: str = ""  # the <!-- ... --> comment right before the fence


@dataclass
class Failure:
    block: Block
    message: str

    def __str__(self) -> str:
        return f"{self.block.path}:{self.block.line}: {self.message}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    out = []
    for m in re.finditer(r"^([ \t]*)```(\w*)[ \t]*\n(.*?)^\1```[ \t]*$", text, re.S | re.M):
        before = text[: m.start()].rstrip("\n").splitlines()
        directive = before[-1].strip() if before and before[-1].strip().startswith("<!--") else ""
        body = textwrap.dedent(m.group(3))  # a block indented under a list item
        out.append(Block(str(path.relative_to(ROOT)), text[: m.start()].count("\n") + 1, m.group(2), body, directive))
    return out


# --------------------------------------------------------------------------
# comparing texts

_DTYPE = re.compile(r"\b(dtype=)?(float|int|uint|bool_?)(8|16|32|64)?\b|\bdtype=\w+")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|\.\d+(?:e[-+]?\d+)?|inf|nan)", re.I)


def numbers(text: str) -> list[float]:
    return [float(x) for x in _NUMBER.findall(_DTYPE.sub(" ", text))]


def same(got: str, want: str) -> bool:
    g, w = " ".join(got.split()), " ".join(want.split())
    if g == w:
        return True
    gn, wn = numbers(g), numbers(w)
    if not wn or len(gn) != len(wn):
        return False
    import numpy as np

    return bool(np.allclose(gn, wn, rtol=1e-5, atol=1e-6, equal_nan=True))


def same_lines(got: str, want: list[str]) -> bool:
    if want and want[0].strip() == "(any order)":
        want = want[1:]
        got_lines = sorted(line for line in got.strip().splitlines())
        return len(got_lines) == len(want) and all(same(g, w) for g, w in zip(got_lines, sorted(want)))
    return same(got, "\n".join(want))


def contains_in_order(output: str, expected: str) -> str | None:
    """None when each line of ``expected`` (``...`` = any text) matches a
    line of ``output``, in order; else the first line that does not."""
    lines = [line.strip() for line in output.splitlines()]
    i = 0
    for want in expected.splitlines():
        want = want.strip()
        if not want or want == "...":
            continue
        parts = [p.strip() for p in want.split("...")]
        while i < len(lines) and not _matches(lines[i], parts):
            i += 1
        if i == len(lines):
            return want
        i += 1
    return None


def _matches(line: str, parts: list[str]) -> bool:
    pos = 0
    for k, part in enumerate(parts):
        if not part:
            continue
        j = line.find(part, pos)
        if j < 0 or (k == 0 and j != 0):
            return False
        pos = j + len(part)
    return not parts[-1] or line.endswith(parts[-1])


# --------------------------------------------------------------------------
# running


class Console(code.InteractiveConsole):
    """The classic REPL, recording errors instead of printing them."""

    def __init__(self):
        super().__init__({"__name__": "__main__"})
        self.errors: list[str] = []

    def showsyntaxerror(self, filename=None, **kwargs):
        self.errors.append(_last_error())

    def showtraceback(self):
        self.errors.append(_last_error())


def _last_error() -> str:
    exc = sys.exc_info()[1]
    return f"{type(exc).__name__}: {exc}"


@dataclass
class Statement:
    line: int
    source: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)


def statements(text: str) -> list[Statement]:
    """The top-level statements of a python block with their expected output."""
    out: list[Statement] = []
    for i, line in enumerate(text.splitlines()):
        stripped = line.strip()
        if line and not line[0].isspace() and not stripped.startswith("#") and not _continues(out):
            out.append(Statement(i))
        if stripped.startswith("# ->") and out and not line[0].isspace():
            out[-1].expected.append(stripped[4:].strip())
            continue
        if out:
            out[-1].source.append(line)
            m = re.search(r"#\s*->\s*(.*)$", line)
            if m and not line[0].isspace():
                out[-1].expected.append(m.group(1).strip())
    return out


def _continues(out: list[Statement]) -> bool:
    """The previous statement is not complete yet (open brackets, a
    backslash, a decorator)."""
    if not out:
        return False
    src = "\n".join(out[-1].source)
    try:
        compile(src, "<doc>", "exec")
    except SyntaxError as e:
        return "was never closed" in str(e) or "unexpected EOF" in str(e) or src.rstrip().endswith(("\\", ":"))
    return src.lstrip().startswith("@") and "def " not in src and "class " not in src


def run_python(block: Block, console: Console) -> list[Failure]:
    failures = []
    for st in statements(block.text):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            more = False
            for line in st.source:
                more = console.push(line)
                if console.errors:
                    break
            if more and not console.errors:
                console.push("")
        if console.errors:
            failures.append(Failure(block, f"line {block.line + 1 + st.line}: {console.errors[-1]}"))
            console.errors.clear()
            continue
        if st.expected and not same_lines(buf.getvalue(), st.expected):
            failures.append(
                Failure(
                    block,
                    f"line {block.line + 1 + st.line}: printed {buf.getvalue().strip()!r}, "
                    f"the text says {' / '.join(st.expected)!r}",
                )
            )
    return failures


def run_output(block: Block, console: Console, expr: str) -> list[Failure]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            value = eval(expr, console.locals)
        except Exception as e:  # noqa: BLE001 - reported as the block's failure
            return [Failure(block, f"{expr}: {type(e).__name__}: {e}")]
    output = buf.getvalue() + ("" if value is None else str(value))
    missing = contains_in_order(output, block.text)
    return [] if missing is None else [Failure(block, f"{expr} does not print the line {missing!r}")]


def run_sh(block: Block, workdir: Path) -> list[Failure]:
    for name in ("examples", "benchmarks"):
        if not (workdir / name).exists():
            (workdir / name).symlink_to(ROOT / name)
    failures = []
    commands: list[tuple[int, str, list[str]]] = []
    for i, line in enumerate(block.text.splitlines()):
        if line.startswith("#"):
            if commands:  # the previous command's expected output
                commands[-1][2].append(line[1:].strip())
        elif line.strip():
            commands.append((i, line.split("  #")[0].strip(), []))
    for i, command, expected in commands:
        steps = [s.strip() for s in command.split("&&") if "pip install" not in s]
        if not steps:
            continue
        p = subprocess.run(
            " && ".join(steps),
            shell=True,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=600,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        if p.returncode != 0:
            failures.append(
                Failure(
                    block, f"line {block.line + 1 + i}: `{command}` exited {p.returncode}: {p.stderr.strip()[-500:]}"
                )
            )
        elif expected and not same_lines(p.stdout, expected):
            failures.append(
                Failure(
                    block,
                    f"line {block.line + 1 + i}: `{command}` printed {p.stdout.strip()!r}, the text says {expected!r}",
                )
            )
    return failures


def run_file(path: Path, workdir: Path) -> tuple[list[Failure], list[str]]:
    """Run every block of ``path``; returns the failures and the skipped
    blocks with their reasons."""
    console = Console()
    failures: list[Failure] = []
    skipped: list[str] = []
    cwd = os.getcwd()
    os.chdir(workdir)  # files the snippets write land in the scratch directory
    try:
        for block in blocks(path):
            directive = block.directive
            if directive.startswith("<!-- snippet: skip"):
                skipped.append(f"{block.path}:{block.line}: {directive[len('<!-- snippet: skip') : -3].strip()}")
            elif directive.startswith("<!-- snippet-output:"):
                failures += run_output(block, console, directive[len("<!-- snippet-output:") : -3].strip())
            elif block.lang == "python":
                failures += run_python(block, console)
            elif block.lang == "sh":
                failures += run_sh(block, workdir)
            else:
                failures.append(
                    Failure(
                        block,
                        f"a ```{block.lang} block with no <!-- snippet-output: EXPR --> "
                        "or <!-- snippet: skip REASON --> before it",
                    )
                )
    finally:
        os.chdir(cwd)
    return failures, skipped
