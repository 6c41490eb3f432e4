"""Malformed IR through ``xtpu-opt`` and ``xtpu-run``: no mutant may crash them.

Valid modules (the traced and the lowered text of programs with outside
compilation, with cross_replica_sum groups and split over logical devices,
plus every case of the lit tests' inputs) are mutated with a seeded random
generator: lines deleted or duplicated, the text truncated, tokens swapped
or copied over other tokens, numbers, types, SSA names and strings replaced,
attributes dropped, quotes dropped or inserted.  Every mutant goes
through both tools, run in-process (their ``main(argv)``, stdout and stderr
captured): ``xtpu-opt`` alone, ``xtpu-opt -p`` with the passes of the lit
file's RUN line (the default pipeline for traced programs) and ``xtpu-run``.
Each must either succeed or exit non-zero with a diagnostic that has a
location (``file:line:col``, or the op's name for pass and run-time
diagnostics) and no Python traceback; a hang (20 s) fails too.
``xtpu-run`` gets inputs of the shapes and dtypes the mutant's ``@main``
takes, so mutants that still verify are also run.

Usage::

  python benchmarks/malformed_ir.py --mutants 1000 [--seed 0] [--show 5]

prints the number of mutants, how many each tool accepted or rejected, the
time, and every failure (exit status 1 when there is one).  The pytest suite
runs a slice (``test/python/test_malformed_ir.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import re
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------
# Valid modules to start from
# --------------------------------------------------------------------------


def program_modules() -> list[tuple[str, str, str]]:
    """(name, text, passes for xtpu-opt -p) of traced and lowered xtpu programs."""
    import xtpu
    from xtpu.replication.program import default_pipeline

    rng = np.random.default_rng(0)
    out = []

    def add(name: str, lowered, cores: int = 1) -> None:
        compiled = lowered.compile()
        out.append((name + ".traced", lowered.as_text(), default_pipeline(num_cores=cores)))
        out.append((name + ".lowered", compiled.as_text(), ""))
        # The generic form can say what the custom syntax cannot (an n of the
        # wrong kind, result counts): it reaches the verifiers.
        out.append((name + ".traced.generic", lowered.as_text(generic=True), default_pipeline(num_cores=cores)))
        out.append((name + ".lowered.generic", compiled.as_text(generic=True), ""))

    def with_host(x):
        y = x * 2.0
        z = xtpu.outside_compilation(lambda v: xtpu.math.reduce_sum(v) + 1.0, y)
        return xtpu.cross_replica_sum(y * z)

    x = rng.standard_normal((2, 3)).astype(np.float32)
    add("outside_compilation", xtpu.lower(with_host, [[x], [x + 1]]))

    def groups(x, w):
        a = xtpu.cross_replica_sum(x @ w, group_assignment=[[0, 1], [2, 3]])
        b = xtpu.cross_replica_sum(a, group_assignment=[[0, 2], [1, 3]])
        return b, xtpu.math.reduce_max(a)

    ins = [
        [rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)]
        for _ in range(4)
    ]
    add("groups", xtpu.lower(groups, ins))

    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=2)

    def split(x, w):
        x = xtpu.split_to_logical_devices(x, [2, 1])
        return xtpu.cross_replica_sum(xtpu.nn.relu(x @ w))

    ins = [
        [rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)]
        for _ in range(2)
    ]
    add("logical_devices", xtpu.lower(split, ins, device_assignment=da), cores=2)
    return out


RUN_PASSES = re.compile(r"-p\s+('[^']*'|\S+)")


def lit_modules() -> list[tuple[str, str, str]]:
    """(name, text, passes) of every ``// -----`` case of the lit tests'
    inputs, with the passes of the file's first RUN line that has ``-p``."""
    out = []
    for path in sorted((ROOT / "test" / "lit").rglob("*.mlir")):
        if "Output" in path.parts:
            continue
        text = path.read_text()
        passes = next((m.group(1).strip("'") for m in RUN_PASSES.finditer(text)), "")
        for i, chunk in enumerate(text.split("// -----")):
            body = "\n".join(line for line in chunk.splitlines() if not line.lstrip().startswith("//"))
            if body.strip():
                out.append((f"{path.relative_to(ROOT / 'test' / 'lit')}#{i}", body + "\n", passes))
    return out


# --------------------------------------------------------------------------
# Mutations
# --------------------------------------------------------------------------

TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"|%[\w$.#]+|\^[\w$.]+|@[\w$.]+|#[\w$.]+|!?[A-Za-z_][\w$.]*|-?\d+\.\d*(?:e[+-]?\d+)?|-?\d+|->|\S'
)
NUMBER = re.compile(r"(?<![\w%#@^.$])-?\d+(?:\.\d*(?:e[+-]?\d+)?)?(?![\w.])|(?<=[<x])\d+(?=x)")
ELEMENT = re.compile(r"\b(?:f16|bf16|f32|f64|i1|i8|i16|i32|i64|ui8|si32|index)\b")
TYPES = [
    "f16",
    "bf16",
    "f32",
    "f64",
    "i1",
    "i8",
    "i32",
    "i64",
    "ui32",
    "index",
    "tensor<f32>",
    "tensor<2xi64>",
    "tensor<?xf32>",
    "!hlo.string",
    "tensor<2x2x!hlo.string>",
    "none",
    "()",
    "complex<f32>",
    "vector<2xf32>",
    "memref<2xf32>",
    "tensor<0xf32>",
    "tuple<>",
    "f80",
]
NUMBERS = [
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "7",
    "-1",
    "-2",
    "64",
    "1000",
    "2147483648",
    "9223372036854775808",
    "18446744073709551616",
    "0.5",
    "-0.0",
    "1.0e+30",
    "1e400",
    "0x7F",
    "true",
    "false",
]


SSA_USE = re.compile(r"(?<![\w%])%[\w$.]+(?:#\d+)?(?!\s*[=:])")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
ATTR_ENTRY = re.compile(r"(?<=[{,<] )?\b[\w.]+ = (?:\[[^\]]*\]|#tpu\.sharding<\{[^}]*\}>|\"[^\"]*\"|[^,}]+)")
KINDS = [
    "delete",
    "duplicate",
    "truncate",
    "swap",
    "copy",
    "number",
    "type",
    "number",
    "type",
    "ssa",
    "string",
    "attr",
    "quote",
    "multi",
]


def mutate(text: str, rng: random.Random) -> tuple[str, str]:
    """One mutant of ``text`` and a short description of the mutation."""
    lines = text.splitlines(keepends=True)
    kind = rng.choice(KINDS)
    if kind == "quote":  # an unclosed string literal, or a stray quote
        quotes = [m.start() for m in re.finditer('"', text)]
        at = rng.choice(quotes) if quotes and rng.random() < 0.7 else rng.randrange(len(text) + 1)
        if quotes and at in quotes:
            return text[:at] + text[at + 1 :], f"drop the quote at {at}"
        return text[:at] + '"' + text[at:], f"insert a quote at {at}"
    if kind in ("ssa", "string", "attr"):
        pattern = {"ssa": SSA_USE, "string": STRING, "attr": ATTR_ENTRY}[kind]
        found = list(pattern.finditer(text))
        if found:
            m = rng.choice(found)
            if kind == "attr":  # drop one attribute entry
                return text[: m.start()] + text[m.end() :], f"drop attribute {m.group()[:40]!r}"
            if kind == "string" and rng.random() < 0.3:
                new = rng.choice(['""', '"host"', '"0"', '"{replicated}"', '"\\n"', '"devices=[2]0,1"'])
            else:
                new = rng.choice(found).group()
            return text[: m.start()] + new + text[m.end() :], f"{kind} {m.group()!r} -> {new!r}"
        kind = "number"
    if kind == "multi":
        for _ in range(rng.randint(2, 4)):
            text, _ = mutate(text, rng)
        return text, "multi"
    if kind in ("delete", "duplicate") and len(lines) > 1:
        i = rng.randrange(len(lines))
        if kind == "delete":
            return "".join(lines[:i] + lines[i + 1 :]), f"delete line {i + 1}"
        return "".join(lines[: i + 1] + lines[i:]), f"duplicate line {i + 1}"
    if kind == "truncate":
        cut = rng.randrange(len(text) + 1)
        return text[:cut], f"truncate at {cut}"
    if kind in ("swap", "copy"):
        toks = list(TOKEN.finditer(text))
        if len(toks) < 2:
            return text[: len(text) // 2], "truncate half"
        a = rng.randrange(len(toks))
        b = min(len(toks) - 1, a + rng.randint(1, 3)) if rng.random() < 0.7 else rng.randrange(len(toks))
        ta, tb = sorted((toks[a], toks[b]), key=lambda m: m.start())
        if ta.start() == tb.start():
            return text, "no-op"
        if kind == "swap":
            new = text[: ta.start()] + tb.group() + text[ta.end() : tb.start()] + ta.group() + text[tb.end() :]
            return new, f"swap {ta.group()!r} and {tb.group()!r}"
        new = text[: ta.start()] + tb.group() + text[ta.end() :]
        return new, f"copy {tb.group()!r} over {ta.group()!r}"
    pattern, choices = (NUMBER, NUMBERS) if kind == "number" else (ELEMENT, TYPES)
    found = list(pattern.finditer(text))
    if not found:
        return text[: len(text) // 2], "truncate half"
    m = rng.choice(found)
    new = rng.choice(choices)
    return text[: m.start()] + new + text[m.end() :], f"{kind} {m.group()!r} -> {new!r} at {m.start()}"


# --------------------------------------------------------------------------
# Running the tools in-process
# --------------------------------------------------------------------------

POSITION = re.compile(r"\.mlir:\d+:\d+")
OP_NAME = re.compile(r"'[a-z_]+\.[a-z_][\w.]*'|\b(?:tpu|hlo|ccl|func|builtin|autodiff)\.[a-z_]+\b")
PASSED = ("ok", "diagnostic", "op-diagnostic", "input-error")
"""Outcomes that pass: success, a diagnostic at file:line:col, one naming
the op (pass and runtime diagnostics), xtpu-run refusing the inputs."""
INPUT_ERROR = re.compile(
    r"^xtpu-run: (input \d+ of replica|the module has \d+ replicas|replica \d+ has \d+ inputs|the module takes no inputs)"
)


class Hang(Exception):
    pass


@dataclass
class Outcome:
    tool: str
    status: str  # PASSED, or "crash", "no-location", "hang"
    detail: str = ""


def _call(fn, argv, seconds: float) -> tuple[int | None, str, str, str | None]:
    """Run ``fn(argv)``; (exit status, stdout, stderr, traceback or None)."""
    out, err = io.StringIO(), io.StringIO()

    def alarm(*_):
        raise Hang(f"no answer after {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    tb = None
    rc: int | None = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                r = fn(argv)
                rc = r if isinstance(r, int) else 0
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Hang as e:
        rc, tb = None, str(e)
    except BaseException:  # noqa: BLE001 - any escape is the failure we look for
        rc, tb = None, traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue(), tb


def _judge(tool: str, rc, out: str, err: str, tb: str | None) -> Outcome:
    if tb is not None:
        return Outcome(tool, "hang" if tb.startswith("no answer") else "crash", tb)
    if "Traceback (most recent call last)" in err or "Traceback (most recent call last)" in out:
        return Outcome(tool, "crash", err + out)
    if rc == 0:
        return Outcome(tool, "ok")
    if tool == "xtpu-run" and INPUT_ERROR.search(err):
        return Outcome(tool, "input-error", err)
    if POSITION.search(err):
        return Outcome(tool, "diagnostic", err)
    if OP_NAME.search(err):
        return Outcome(tool, "op-diagnostic", err)
    return Outcome(tool, "no-location", err)


def _inputs_for(text: str, path: str, workdir: str) -> list[str]:
    """``-i`` arguments for xtpu-run: arrays of the types ``@main`` takes,
    per replica (none when the module does not parse)."""
    try:
        from xdsl.dialects import func

        from xtpu.core.pipeline import parse_module
        from xtpu.dialects import tpu
        from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype

        # xtpu's parser: xDSL's lexer backtracks exponentially on an
        # unclosed string literal (a mutant hung here).
        module = parse_module(text, path)
        main = next(o for o in module.ops if isinstance(o, func.FuncOp) and o.sym_name.data == "main")
        rep = next(o for o in main.body.block.ops if isinstance(o, tpu.ReplicateOp) and not o.on_host)
        n = rep.num_replicas
        types = main.function_type.inputs.data
        if n < 1 or n > 64 or len(types) % n:
            return []
        k = len(types) // n
        rng = np.random.default_rng(len(text))
        args = []
        for r in range(n):
            arrays = []
            for i in range(k):
                s = TensorSpec.of_type(types[i * n + r])
                if s.size > 1 << 16:
                    return []
                if s.dtype == "string":
                    a = np.full(s.shape, "1.5", dtype="U8")
                elif s.dtype == "bool":
                    a = rng.random(s.shape) < 0.5
                else:
                    a = rng.integers(-3, 4, size=s.shape).astype(numpy_dtype(s.dtype))
                arrays.append(a)
            file = os.path.join(workdir, f"in{r}.npz")
            np.savez(file, *arrays)
            args += ["-i", file]
        return args
    except Exception:  # noqa: BLE001 - the tools report what is wrong with it
        return []


@dataclass
class Report:
    mutants: int = 0
    seconds: float = 0.0
    counts: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)


def check_text(text: str, workdir: str, passes: str = "", name: str = "mutant", seconds: float = 20.0) -> list[Outcome]:
    """Run both tools on ``text``: ``xtpu-opt`` alone and with ``-p passes``
    (when given), ``xtpu-run``; one outcome per invocation."""
    from xtpu.tools.opt import main as opt_main
    from xtpu.tools.run import main as run_main

    path = os.path.join(workdir, name + ".mlir")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    outcomes = [_judge("xtpu-opt", *_call(opt_main, [path], seconds))]
    if passes:
        outcomes.append(_judge("xtpu-opt -p", *_call(opt_main, [path, "-p", passes], seconds)))
    inputs = _inputs_for(text, path, workdir)
    outcomes.append(_judge("xtpu-run", *_call(run_main, [path, "--timeout", "2"] + inputs, seconds)))
    return outcomes


def run(mutants: int, seed: int = 0, programs: list | None = None, lit: list | None = None) -> Report:
    """Mutate half the time a program's module, half the time a lit case."""
    programs = program_modules() if programs is None else programs
    lit = lit_modules() if lit is None else lit
    rng = random.Random(seed)
    report = Report()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        for i in range(mutants):
            base_name, base, passes = rng.choice(programs if i % 2 == 0 or not lit else lit)
            text, what = mutate(base, rng)
            for o in check_text(text, workdir, passes):
                key = (o.tool, o.status)
                report.counts[key] = report.counts.get(key, 0) + 1
                if o.status not in PASSED:
                    report.failures.append((base_name, what, o, text))
            report.mutants += 1
    report.seconds = time.perf_counter() - t0
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutants", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=5, help="failures to print in full")
    args = ap.parse_args(argv)
    report = run(args.mutants, args.seed)
    print(
        f"{report.mutants} mutants in {report.seconds:.1f} s ({1000 * report.seconds / max(report.mutants, 1):.0f} ms each)"
    )
    for (tool, status), count in sorted(report.counts.items()):
        print(f"  {tool:11} {status:14} {count}")
    for base_name, what, o, _text in report.failures[: args.show]:
        print(f"\n== {o.tool} {o.status} on {base_name} ({what})\n{o.detail.rstrip()}")
    calls = sum(report.counts.values())
    print(f"{calls} tool runs, {len(report.failures)} failures (a traceback, a hang or no location)")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
