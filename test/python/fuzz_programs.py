"""A differential fuzzer for xtpu: random programs, run eagerly and compiled.

A program is the source text of one replica's computation,
``def computation(x0, x1, ...)``, written with xtpu's public API: ops of
``xtpu.math``, ``xtpu.nn``, ``xtpu.strings``, Python operators and ``[]``,
``xtpu.cond`` / ``xtpu.while_loop``, ``xtpu.outside_compilation``,
``xtpu.cross_replica_sum`` (with and without ``group_assignment``),
``xtpu.replica_id``, ``GradientTape`` / ``xtpu.gradients`` (nested: second
order) and the logical-device annotations.  The generator tracks every
value's shape and dtype, so programs are well typed; a few deliberately
break an op's rules, and then eager and compiled must raise the same error.

Each program runs

* eagerly, one thread per replica: ``xtpu.cross_replica_sum`` is emulated by
  the replicas meeting at a barrier and adding their values in ascending
  replica order (as ``ccl.all_reduce`` does), with TF's gradient (the sum of
  the cotangents over the same groups) through ``xtpu.custom_gradient``;
  ``xtpu.replica_id()`` is the thread's replica;
* compiled with ``xtpu.replicate`` on 1, 2 and 8 replicas and, with a
  ``DeviceAssignment`` of 2 cores per replica, on 1, 2 or 4 replicas split
  over logical devices;
* optionally through the text round trip: ``lower(...).as_text()`` (and the
  compiled module's text) parsed back and run by ``xtpu-run``'s ``main``,
  and the ``Compiled`` object itself;
* and every top-level float64 gradient of smooth ops is checked against
  central finite differences of the sum over replicas of its target.

Results are compared per dtype (float32 ~1e-5 relative, float64 ~1e-12,
ints, bools and strings exactly, NaN equals NaN).  A failure is a
*mismatch* (values, shapes or dtypes differ), a *crash* (an exception that
is not the same documented user error eagerly and compiled), or a *hang*
(the run exceeded its timeout).

The generator draws every decision from a :class:`Chooser`: hypothesis
(``HypothesisChooser``; shrinking gives short reproducers), a seeded
``random.Random`` (``RandomChooser``, for ``benchmarks/fuzz.py``) or a
recorded list of choices (``ReplayChooser``), which :func:`minimize` shrinks
when hypothesis is not driving.  :func:`reproducer` prints a failing program
as a Python script.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import io
import linecache
import math
import os
import random
import re
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import xtpu
from xtpu.dialects.hlo_window import num_windows
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.ops.conv_ops import _padding
from xtpu.runtime.gc_pause import thread_frame

FLOAT = ("float32", "float64")
INT = ("int32", "int64")
NUMERIC = FLOAT + INT
DEVICE_DTYPES = NUMERIC + ("bool",)

# Defects of issue 10 that are being fixed; a generator given one of these
# names in ``avoid`` does not build programs that hit it (the CI slice avoids
# them until the fixes land; test_fuzz.py keeps one regression case each).
KNOWN_DEFECTS = {
    "numpy_scalar": "a numpy scalar is a strong operand (the 0-d array of its value), but eagerly "
    "numpy's operators on an EagerTensor promote one of another width (x_f32 * np.float64(2.0) is "
    "float64; traced it is a TypeError); xtpu.math.minimum(np.float64(-0.75), 0.0) raised eagerly",
    "zero_size_reduction": "reduce_max / reduce_min over zero elements raise instead of giving "
    "the reduction's identity",
    "compiled_logical_devices": "Compiled.__call__ refuses the inputs of a program "
    "compiled for a DeviceAssignment with 2 cores per replica",
}

# Defects the fuzzer found besides (test_fuzz.py has a regression case each).
FOUND_DEFECTS = {
    "eager_0d_watch": "eagerly, Python operators on 0-d EagerTensors give numpy scalars, "
    "which GradientTape.watch refuses (traced, the same program works)",
    "getitem_int_none": "traced x[0, :, None] (an int index and None, same rank) skips the "
    "final reshape: shape (1, 2) instead of (2, 1)",
    "xtpu_run_region_host_op": "xtpu-run does not lower a traced module whose host-only op "
    "(print, strings) sits in an hlo.if / hlo.while region: 'cannot run on the device'",
    "xtpu_run_relowers": "xtpu-run lowers an already lowered module again when a head/tail "
    "host replicate holds a host-only op; with 2 cores per replica that breaks it",
    "string_into_region": "a value that goes host to host (a string, or a cluster's result the "
    "device does not use) cannot reach a cluster in an hlo.if / hlo.while region from one outside "
    "it (DiagnosticException at compile time: 'does not run exactly once before each run of cluster')",
    "spmd_zero_size_reshape": "tpu-spmd-partition raises ZeroDivisionError for a reshape of a "
    "zero-size tensor whose result is split ([2, 0] -> [2, 0, 1] split [2, 1, 1])",
    "string_output_of_body_cluster": "a string that a host cluster in the body makes (its input "
    "comes from the device, a later cluster's result goes back to it) cannot be a result of the "
    "computation: DiagnosticException 'returns a string value ... to the device computation'",
    "cf_zero_cotangent_nan": "traced gradients of xtpu.cond / xtpu.while_loop push an explicit zero "
    "cotangent through outputs the target does not use; where a rule's partial is inf or NaN (log or "
    "sqrt at 0, reduce_min of NaN) 0 becomes NaN, while the eager tape gives 0 (TF's graph-mode "
    "cond_v2 does the same, its eager tape does not)",
    "eager_identity_ndarray": "eagerly, xtpu.cast to the same dtype, xtpu.reshape to the same shape "
    "and the logical-device annotations return a numpy value they are given as a plain ndarray, not "
    "an EagerTensor as every other op does (GradientTape.watch then refuses it)",
    "to_number_overflow": "xtpu.strings.to_number of an integer out of the out_type's range raises "
    "numpy's OverflowError (eagerly and on the host), not the op's ValueError (TF: 'StringToNumberOp "
    "could not correctly convert string')",
}

DEFECTS = {**KNOWN_DEFECTS, **FOUND_DEFECTS}

# Where eager execution is not the reference: TF's own graph mode
# (tf.function, and so every TPU computation) differs from its eager mode
# there, and xtpu's compiled programs compute what graph mode computes
# (control flow v2's gradients).  Not defects: every caller passes these names
# in ``avoid``, and the generator then compares the outputs they may touch
# leniently (a NaN compiled matches anything).
# Where XLA's CPU client itself departs from IEEE 754 / StableHLO: a
# mismatch that disappears when XLA runs the same text without the named HLO
# pass is XLA's (check_xla reruns it so), not xtpu's.
XLA_DIFFERENCES = {
    "xla_algsimp": "XLA's algebraic simplifier rewrites a multiply by a converted bool as a select, "
    "so NaN * convert(false) gives 0 where IEEE 754 (and xtpu) give NaN (seed 0, program 1905: "
    "floormod(0., 0.) * ... through cast(bool)); without the pass (xla_disable_hlo_passes=algsimp) "
    "XLA agrees with xtpu",
}

GRAPH_MODE_DIFFERENCES = {
    "region_capture_zero_cotangent_nan": "traced gradients give a value that an xtpu.cond branch not "
    "taken, or an xtpu.while_loop body that ran zero times, captured from outside a zero cotangent (a "
    "run-time zero: the gradient region returns zeros for it); where its producer's partial is inf or "
    "NaN (log at 0, tanh of NaN) 0 becomes NaN, while the eager tape never reaches the producer and "
    "gives 0 (TF's graph-mode cond_v2 / while_v2 compute the same 0 * inf)",
}
ALWAYS_AVOID = frozenset(GRAPH_MODE_DIFFERENCES)


# --------------------------------------------------------------------------
# Choosers: where the generator's decisions come from
# --------------------------------------------------------------------------


class Chooser:
    """Every decision of the generator is ``int(lo, hi)``; 0 (``lo``) is the
    simplest answer, so shrinking choices towards 0 simplifies a program."""

    def int(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def bool(self, p: float = 0.5) -> bool:
        """True with probability ``p``; False is the simpler answer."""
        return self.int(0, 99) >= 100 - round(100 * p)

    def pick(self, seq):
        seq = list(seq)
        return seq[self.int(0, len(seq) - 1)]

    def weighted(self, items):
        """One of ``(weight, value)`` pairs, the first being the simplest."""
        items = [(w, v) for w, v in items if w > 0]
        total = sum(w for w, _ in items)
        k = self.int(0, total - 1)
        for w, v in items:
            if k < w:
                return v
            k -= w
        return items[-1][1]


class RandomChooser(Chooser):
    """Choices from ``random.Random(seed)``, recorded (as offsets from ``lo``)
    so that :func:`minimize` can replay and shrink them."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.choices: list[int] = []

    def int(self, lo, hi):
        v = self.rng.randint(lo, hi) if hi > lo else lo
        self.choices.append(v - lo)
        return v


class ReplayChooser(Chooser):
    """Replays recorded offsets, clamped to each range; past the end, 0."""

    def __init__(self, choices):
        self.source = list(choices)
        self.choices: list[int] = []

    def int(self, lo, hi):
        i = len(self.choices)
        off = self.source[i] if i < len(self.source) else 0
        off = max(0, min(off, hi - lo))
        self.choices.append(off)
        return lo + off


class HypothesisChooser(Chooser):
    """Choices drawn from hypothesis's ``st.data()``: hypothesis shrinks them."""

    def __init__(self, data):
        from hypothesis import strategies as st

        self.data = data
        self.st = st

    def int(self, lo, hi):
        return self.data.draw(self.st.integers(lo, hi)) if hi > lo else lo


# --------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------


# A value's static shape and dtype: xtpu's own (tf.TensorSpec's) record.
Spec = TensorSpec


@dataclass
class Var:
    name: str
    spec: Spec
    # eagerly a numpy scalar (a Python operator's 0-d result outside a tape)
    npscalar: bool = False
    # names of the values it was computed from (for xtpu.gradients)
    deps: frozenset = frozenset()
    # names of the values it may be the very same object as (identity-like
    # ops, values passed through a branch, loop or cluster): eagerly a tape
    # watching one watches the others, traced they are distinct tensors
    roots: frozenset = frozenset()
    # the innermost branch or loop body it was made in (None: outside any)
    region: Any = None
    # a gradient through control flow (region_capture_zero_cotangent_nan may make it NaN)
    tainted: bool = False
    # made on the host: a string, or a result of outside_compilation
    host: bool = False

    @property
    def aliases(self) -> frozenset:
        return self.roots | {self.name}


@dataclass(frozen=True)
class Ctx:
    """How a program's text is rendered: ``mode`` "compiled" or "eager", the
    number of replicas and cores per replica, whether the eager run records
    gradient sites for the finite-difference check."""

    mode: str
    replicas: int
    cores: int
    fd: bool = False


@dataclass
class Program:
    inputs: list  # input Specs
    value_seed: int
    specials: tuple  # special float values mixed into float inputs
    lines: list  # (indent, str or callable(Ctx) -> str | None)
    outputs: list  # output names
    features: set = field(default_factory=set)
    choices: list | None = None  # the chooser's record, for minimize
    # outputs where a NaN compiled and a number eagerly is the open defect
    # region_capture_zero_cotangent_nan, not a mismatch (when the generator avoids it)
    lenient: set = field(default_factory=set)

    def source(self, ctx: Ctx) -> str:
        out = [f"def computation({', '.join(f'x{i}' for i in range(len(self.inputs)))}):"]
        for indent, text in self.lines:
            t = text(ctx) if callable(text) else text
            if t is not None:
                out.append("    " * (indent + 1) + t)
        out.append(f"    return ({', '.join(self.outputs)},)")
        return "\n".join(out) + "\n"

    def input_values(self, replicas: int) -> list[list[np.ndarray]]:
        """Per-replica inputs: multiples of 1/8 in [-2, 2] (exact in float32,
        so different summation orders rarely round differently), small ints,
        random bools; special values where the program asks for them."""
        out = []
        for r in range(replicas):
            row = []
            for i, s in enumerate(self.inputs):
                rng = np.random.default_rng([self.value_seed, r, i])
                if s.dtype in FLOAT:
                    a = np.asarray(rng.integers(-16, 17, s.shape) / 8).astype(s.dtype)
                    if self.specials and a.size:
                        hit = rng.random(s.shape) < 0.3
                        a[hit] = rng.choice(np.array(self.specials, dtype=s.dtype), size=int(hit.sum()))
                elif s.dtype in INT:
                    a = np.asarray(rng.integers(-5, 6, s.shape)).astype(s.dtype)
                else:
                    a = np.asarray(rng.random(s.shape) < 0.5)
                row.append(np.asarray(a))
            out.append(row)
        return out


def _dt(d: str) -> str:
    return {"bool": "xtpu.bool_"}.get(d, f"xtpu.{d}")


def _float_text(v: float) -> str:
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else '-float("inf")'
    return repr(float(v))


def _paren(t: str) -> str:
    return f"({t})" if t.startswith("-") else t


def _groups(mode: str, r: int):
    """A group_assignment for ``r`` replicas, named so that it means the same
    for every replica count (R = 1 has the only group [[0]])."""
    if mode == "all":
        return None
    if r == 1:
        return [[0]]
    if mode == "pairs":
        return [[i, i + 1] for i in range(0, r, 2)]
    if mode == "pairs_reversed":
        return [[i + 1, i] for i in range(0, r, 2)]
    if mode == "halves":
        return [list(range(r // 2)), list(range(r // 2, r))]
    if mode == "stride":
        return [list(range(0, r, 2)), list(range(1, r, 2))]
    if mode == "single":
        return [[i] for i in range(r)]
    raise ValueError(mode)


class Scope:
    """Values visible at a point of the program, and what may be built there."""

    def __init__(self, parent: Scope | None, kind: str, closed: bool = False):
        self.parent = parent
        self.kind = kind  # top, cond, while, oc, grad
        self.vars: list[Var] = []
        self.closed = closed  # a gradient's function sees only its parameters
        self.depth = 0 if parent is None else parent.depth + 1
        self.in_oc = kind == "oc" or (parent is not None and parent.in_oc)
        self.in_cf = kind in ("cond", "while") or (parent is not None and parent.in_cf)
        self.recording = kind == "grad" or (parent is not None and parent.recording)
        self.grad_depth = (parent.grad_depth if parent else 0) + (kind == "grad")
        self.smooth = True  # only ops finite differences can check
        self.has_crs = False  # a cross_replica_sum in it (or nested)
        # a gradient's function has cross_replica_sums or control flow, not both
        self.crs_allowed = parent is None or parent.crs_allowed
        self.no_cf = parent is not None and parent.no_cf
        self.region = self if kind in ("cond", "while") else (parent.region if parent else None)
        self.has_cf = False  # a cond or while_loop in it (or nested)

    @property
    def crs_ok(self) -> bool:
        """A cross_replica_sum every replica reaches: not in a branch, a
        loop or the host, and in a gradient's function only when that has
        no control flow (its backward pass must reach the sum's gradient on
        every replica, or the eager replicas would not meet)."""
        return not self.in_oc and not self.in_cf and self.crs_allowed

    def add(self, v: Var) -> Var:
        self.vars.append(v)
        return v

    def visible(self) -> list[Var]:
        own = list(reversed(self.vars))
        if self.closed or self.parent is None:
            return own
        return own + self.parent.visible()

    def rough(self) -> None:
        """Mark this scope and the enclosing gradient functions not smooth."""
        s = self
        while s is not None:
            s.smooth = False
            s = s.parent


FLOAT_LITERALS = [0.5, 2.0, -1.5, 1.0, 0.0, 3.0, -0.25, 0.125, 100.0]
SPECIAL_LITERALS = [float("nan"), float("inf"), -float("inf"), -0.0, 1e30]
INT_LITERALS = [1, 2, 0, 3, -1, -2, 7]
TEMPLATES = ["{}", "v={}", "1{}", "[{}]", "{} and {}", "a{}b{}", "{}{}"]


class Generator:
    """Builds one program from a chooser's decisions.

    Args:
      ch: the chooser.
      avoid: names of :data:`KNOWN_DEFECTS` not to trigger.
    """

    def __init__(self, ch: Chooser, avoid=frozenset()):
        self.ch = ch
        self.avoid = frozenset(avoid)
        self.lines: list = []
        self.features: set[str] = set()
        self.n = 0
        self.budget = 28
        self.stopped = False  # after a deliberately invalid op
        self.zero_size_seen = False
        self.has_split = False
        self.lenient: set[str] = set()  # outputs that region_capture_zero_cotangent_nan may make NaN

    # -- helpers ----------------------------------------------------------

    def fresh(self, prefix: str = "v") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def emit(self, indent: int, text) -> None:
        self.lines.append((indent, text))

    def feature(self, *names: str) -> None:
        self.features.update(names)

    def pick_var(self, scope: Scope, pred: Callable[[Var], bool]) -> Var | None:
        cands = [v for v in scope.visible() if pred(v)]
        if "region_capture_zero_cotangent_nan" in self.avoid:
            cands = [v for v in cands if not v.tainted]
        if "string_into_region" in self.avoid:
            cands = [v for v in cands if not v.host or v.region is scope.region]
        if not cands:
            return None
        return cands[self.ch.int(0, len(cands) - 1)]

    def define(self, scope: Scope, indent: int, text, spec: Spec, deps=(), npscalar=False, alias=None) -> Var:
        name = self.fresh()
        if callable(text):
            self.emit(indent, lambda ctx, t=text: f"{name} = {t(ctx)}")
        else:
            self.emit(indent, f"{name} = {text}")
        d = frozenset().union(*[frozenset({v.name}) | v.deps for v in deps]) if deps else frozenset()
        roots = frozenset().union(*[v.aliases for v in alias]) if alias else frozenset()
        self.zero_size_seen |= spec.size == 0
        return scope.add(
            Var(
                name,
                spec,
                npscalar=npscalar and not scope.recording,
                deps=d,
                roots=roots,
                region=scope.region,
                host=spec.dtype == "string",
            )
        )

    def float_literal(self) -> float:
        if self.ch.bool(0.1):
            v = self.ch.pick(SPECIAL_LITERALS)
            if not math.isfinite(v):
                self.feature("nonfinite_literal")
            return v
        return self.ch.pick(FLOAT_LITERALS)

    def literal(self, dtype: str, scope: Scope, numpy_ok=True, other_ok=False) -> tuple[str, bool]:
        """A literal for an operand of ``dtype``: a Python scalar (weak: it
        takes the other operand's dtype) or a numpy scalar (strong, as a 0-d
        array: of ``dtype``, or with ``other_ok`` of the other width, which
        is a TypeError).  Returns (text, of the other width)."""
        if dtype == "bool":
            return self.ch.pick(["True", "False"]), False
        if dtype in INT:
            v = str(self.ch.pick(INT_LITERALS))
        else:
            v = _float_text(self.float_literal())
        if numpy_ok and self.ch.bool(0.15):
            nd = dtype
            if other_ok and self.ch.bool(0.3):
                nd = {"float32": "float64", "float64": "float32", "int32": "int64", "int64": "int32"}[dtype]
            self.feature("numpy_scalar_literal")
            return f"np.{nd}({v})", nd != dtype
        return v, False

    def input_spec(self) -> Spec:
        ch = self.ch
        dtype = ch.weighted([(6, "float32"), (3, "float64"), (2, "int32"), (1, "int64"), (1, "bool")])
        rank = ch.int(0, 3)
        dims = []
        for _ in range(rank):
            d = ch.weighted([(4, 2), (3, 4), (2, 3), (2, 1), (1, 0)])
            dims.append(d)
        return Spec(tuple(dims), dtype)

    # -- programs ---------------------------------------------------------

    def program(self) -> Program:
        ch = self.ch
        n_in = ch.int(1, 3)
        specs = [self.input_spec() for _ in range(n_in)]
        seed = ch.int(0, 2**16)
        specials = ()
        if ch.bool(0.1):
            specials = tuple(v for v in (float("nan"), float("inf"), -float("inf"), -0.0, 1e30) if ch.bool(0.5)) or (
                float("nan"),
            )
            self.feature("special_inputs")
        top = Scope(None, "top")
        for i, s in enumerate(specs):
            top.add(Var(f"x{i}", s))
            if 0 in s.shape:
                self.feature("zero_size_input")
                self.zero_size_seen = True
        self.budget -= 1
        self.statement(top, 0)  # at least one statement
        self.block(top, 0, p=0.85)
        # outputs: every top-level value (simplest), or a few
        defined = [v for v in top.vars if not v.name.startswith("x")] or top.vars
        if "string_output_of_body_cluster" in self.avoid:
            defined = [v for v in defined if v.spec.dtype != "string"] or top.vars[:1]
        if ch.bool(0.3):
            outs = []
            for _ in range(ch.int(1, 3)):
                v = defined[ch.int(0, len(defined) - 1)]
                if v.name not in outs:
                    outs.append(v.name)
        else:
            outs = [v.name for v in defined]
        lenient = self.lenient if "region_capture_zero_cotangent_nan" in self.avoid else set()
        return Program(specs, seed, specials, self.lines, outs, self.features, lenient=lenient)

    def block(self, scope: Scope, indent: int, p: float) -> None:
        while not self.stopped and self.budget > 0 and self.ch.bool(p):
            self.budget -= 1
            self.statement(scope, indent)

    def statement(self, scope: Scope, indent: int) -> None:
        ch = self.ch
        has_float = any(v.spec.dtype in FLOAT for v in scope.visible())
        host_free = "host_code" in self.avoid  # the xla mode: programs StableHLO can say, and valid
        kinds = [
            (20, "op"),
            (2, "const"),
            (4 if scope.crs_ok else 0, "crs"),
            (1, "rid"),
            (3 if scope.depth < 3 and not scope.no_cf else 0, "cond"),
            (3 if scope.depth < 3 and not scope.no_cf else 0, "while"),
            (3 if not scope.in_oc and scope.depth < 3 and not host_free else 0, "oc"),
            (4 if has_float and scope.grad_depth < 2 and scope.depth < 3 else 0, "grad"),
            (2 if not scope.in_oc else 0, "split"),
            (0 if host_free else 2, "string"),
            (0 if host_free else 1, "print"),
            (1 if not scope.in_cf and not host_free else 0, "invalid"),  # eagerly, branches not taken never run
        ]
        kind = ch.weighted(kinds)
        getattr(self, f"stmt_{kind}")(scope, indent)

    # -- statements -------------------------------------------------------

    def stmt_op(self, scope: Scope, indent: int) -> None:
        families = [
            (6, self.op_binary),
            (1, self.op_floordiv),
            (4, self.op_unary),
            (2, self.op_compare),
            (1, self.op_logical),
            (3, self.op_reduce),
            (1, self.op_argmax),
            (1, self.op_segment),
            (1, self.op_top_k),
            (1, self.op_in_top_k),
            (1, self.op_embedding_lookup),
            (2, self.op_matmul),
            (2, self.op_reshape),
            (1, self.op_transpose),
            (1, self.op_concat),
            (1, self.op_one_hot),
            (3, self.op_getitem),
            (2, self.op_cast),
            (1 if scope.recording else 0, self.op_stop_gradient),
            (3, self.op_more),
            (2, self.op_window),
        ]
        for _ in range(4):
            fam = self.ch.weighted(families)
            self.alias = None
            got = fam(scope)
            if got is not None and got[1].size == 0 and self.has_split and "spmd_zero_size_reshape" in self.avoid:
                got = None  # zero-size values in a split program hit spmd_zero_size_reshape
            if got is not None:
                text, spec, deps, npscalar, smooth = got
                if not smooth:
                    scope.rough()
                self.define(scope, indent, text, spec, deps, npscalar, [self.alias] if self.alias else None)
                return
        self.stmt_const(scope, indent)

    def op_binary(self, scope):
        ch = self.ch
        op = ch.pick(["add", "subtract", "multiply", "divide", "pow", "maximum", "minimum"])
        x = self.pick_var(scope, lambda v: v.spec.dtype in NUMERIC)
        if x is None:
            return None
        dt = x.spec.dtype
        sym = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "pow": "**"}.get(op)
        form = "op" if sym is not None and ch.bool(0.5) else "fn"
        kind = ch.weighted([(3, "var"), (2, "lit"), (1, "self")])
        if op == "pow" and dt in INT:
            kind = "intpow"
        deps = [x]
        if kind == "var":
            y = self.pick_var(scope, lambda v: v.spec.dtype == dt and _broadcastable(v.spec.shape, x.spec.shape))
            if y is None:
                kind = "self"
            else:
                deps.append(y)
                yt, yshape = y.name, y.spec.shape
        if kind == "self":
            yt, yshape = x.name, x.spec.shape
        if kind == "intpow":
            yt, yshape = str(ch.int(0, 3)), ()
        if kind == "lit":
            # a numpy scalar of the other width is a TypeError, eagerly and
            # traced, through xtpu.math and the operators alike
            other_ok = not scope.in_cf and (form == "fn" or "numpy_scalar" not in self.avoid)
            yt, other_width = self.literal(dt, scope, other_ok=other_ok)
            yshape = ()
            if other_width:
                # a user error eagerly and traced alike (the operators too,
                # since numpy_scalar was fixed): tracing may meet it before
                # running meets a value error of an earlier op
                self.feature("invalid", "invalid:numpy_scalar_dtype", *(["numpy_scalar"] if form == "op" else []))
                self.stopped = True
        shape = tuple(np.broadcast_shapes(x.spec.shape, yshape))
        out_dt = "float64" if op == "divide" and dt in INT else dt
        a, b = x.name, yt
        if kind in ("lit",) and op not in ("pow",) and ch.bool(0.3):
            a, b = b, a  # the literal on the left
        if op == "divide" and form == "fn" and ch.bool(0.3):
            op = "truediv"
        self.feature(f"op:{op}" if form == "fn" else f"op:{sym}")
        if form == "op":
            text = f"{_paren(a)} {sym} {_paren(b)}"
        else:
            text = f"xtpu.math.{op}({a}, {b})"
        smooth = op in ("add", "subtract", "multiply") or (op == "pow" and kind == "lit" and b in ("2.0", "3.0", "1.0"))
        npscalar = form == "op" and len(shape) == 0
        return text, Spec(shape, out_dt), deps, npscalar, smooth

    def op_floordiv(self, scope):
        """tf.math.floordiv / floormod / mod: the divisor a value of the same
        float dtype or a non-zero literal (TF's integer division by zero is
        an error, not a value)."""
        ch = self.ch
        op = ch.pick(["floordiv", "floormod", "mod"])
        x = self.pick_var(scope, lambda v: v.spec.dtype in NUMERIC)
        if x is None:
            return None
        dt = x.spec.dtype
        deps = [x]
        y = None
        if dt in FLOAT and ch.bool(0.5):
            y = self.pick_var(scope, lambda v: v.spec.dtype == dt and _broadcastable(v.spec.shape, x.spec.shape))
        if y is None:
            lit = ch.pick([v for v in (INT_LITERALS if dt in INT else FLOAT_LITERALS) if v != 0])
            yt, yshape = (str(lit) if dt in INT else _float_text(lit)), ()
        else:
            yt, yshape = y.name, y.spec.shape
            deps.append(y)
        shape = tuple(np.broadcast_shapes(x.spec.shape, yshape))
        self.feature(f"op:{op}")
        return f"xtpu.math.{op}({x.name}, {yt})", Spec(shape, dt), deps, False, False

    def op_segment(self, scope):
        """tf.math.segment_sum (sorted ids, ``max(id) + 1`` rows) and
        unsorted_segment_sum (ids in ``[-1, num_segments)``: a negative id's
        row is dropped, as TF documents) over the first dimension."""
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in NUMERIC and v.spec.rank >= 1)
        if x is None:
            return None
        n = x.spec.shape[0]
        ops = ["segment_sum", "unsorted_segment_sum", "unsorted_segment_max", "unsorted_segment_min"]
        ops += ["unsorted_segment_prod"] + (["unsorted_segment_mean"] if x.spec.dtype in FLOAT else [])
        op = ch.pick(ops)
        if op == "segment_sum":
            ids = sorted(ch.int(0, 3) for _ in range(n))
            k = max(ids) + 1 if ids else 0
        else:
            k = ch.int(1, 4)
            ids = [ch.int(-1, k - 1) for _ in range(n)]
        # segment_sum's row count comes from the ids' values: static ones (a
        # list, a numpy array); unsorted_segment_sum's may be a tensor too
        form = ch.pick(["list", "np.int32", "np.int64"] + (["xtpu.int32", "xtpu.int64"] if op != "segment_sum" else []))
        if form == "list" and not ids:  # [] converts to float32 (TF's rule too): not valid ids
            form = "np.int32"
        if form == "list":
            ids_text = str(ids)
        elif form.startswith("np."):
            ids_text = f"np.array({ids}, dtype={form})"
        else:
            ids_text = f"xtpu.constant(np.array({ids}, dtype=np.{form[5:]}))"
        args = [x.name, ids_text] + ([str(k)] if op != "segment_sum" else [])
        self.feature(f"op:{op}")
        return (
            f"xtpu.math.{op}({', '.join(args)})",
            Spec((k,) + tuple(x.spec.shape[1:]), x.spec.dtype),
            [x],
            False,
            op in ("segment_sum", "unsorted_segment_sum", "unsorted_segment_mean"),
        )

    def op_top_k(self, scope):
        """tf.math.top_k (values or indices; ties: the lower index first)."""
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in NUMERIC and v.spec.rank >= 1)
        if x is None:
            return None
        n = x.spec.shape[-1]
        k = ch.int(0, n)
        part = ch.pick(["values", "indices"])
        self.feature("op:top_k")
        shape = tuple(x.spec.shape[:-1]) + (k,)
        dt = x.spec.dtype if part == "values" else "int32"
        return f"xtpu.math.top_k({x.name}, {k}).{part}", Spec(shape, dt), [x], False, False

    def op_in_top_k(self, scope):
        """tf.math.in_top_k / tf.nn.in_top_k over a float [batch, classes]."""
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in FLOAT and v.spec.rank == 2)
        if x is None:
            return None
        b, c = x.spec.shape
        targets = [ch.int(-1, c) for _ in range(b)]
        mod = ch.pick(["math", "nn"])
        self.feature("op:in_top_k" if mod == "math" else "op:nn.in_top_k")
        text = f"xtpu.{mod}.in_top_k(np.array({targets}, dtype=np.int32), {x.name}, {ch.int(0, 3)})"
        return text, Spec((b,), "bool"), [x], False, False

    def op_embedding_lookup(self, scope):
        """tf.nn.embedding_lookup (ids out of range give zero rows)."""
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in NUMERIC and v.spec.rank >= 1)
        if x is None:
            return None
        n = x.spec.shape[0]
        ids = [ch.int(-1, n) for _ in range(ch.int(0, 3))]
        self.feature("op:nn.embedding_lookup")
        text = f"xtpu.nn.embedding_lookup({x.name}, np.array({ids}, dtype=np.int32))"
        return text, Spec((len(ids),) + tuple(x.spec.shape[1:]), x.spec.dtype), [x], False, True

    def op_unary(self, scope):
        ch = self.ch
        op = ch.pick(
            [
                "negative",
                "abs",
                "square",
                "exp",
                "log",
                "sqrt",
                "tanh",
                "sigmoid",
                "nn.sigmoid",
                "nn.relu",
                "nn.softmax",
                "nn.log_softmax",
                "softmax",
                "log_softmax",
                "-",
                "abs()",
            ]
        )
        if op in ("negative", "abs", "square", "nn.relu", "-", "abs()"):
            x = self.pick_var(scope, lambda v: v.spec.dtype in NUMERIC)
        elif op in ("nn.softmax", "nn.log_softmax", "softmax", "log_softmax"):
            x = self.pick_var(scope, lambda v: v.spec.dtype in FLOAT and v.spec.rank >= 1)
        else:
            x = self.pick_var(scope, lambda v: v.spec.dtype in FLOAT)
        if x is None:
            return None
        self.feature(f"op:{op}")
        if op == "-":
            text = f"-{x.name}"
        elif op == "abs()":
            text = f"abs({x.name})"
        else:
            fn = f"xtpu.{op}" if op.startswith("nn.") else f"xtpu.math.{op}"
            if op in ("nn.softmax", "nn.log_softmax", "softmax", "log_softmax") and ch.bool(0.5):
                text = f"{fn}({x.name}, axis={ch.int(-x.spec.rank, x.spec.rank - 1)})"
            else:
                text = f"{fn}({x.name})"
        smooth = op in (
            "negative",
            "square",
            "tanh",
            "sigmoid",
            "nn.sigmoid",
            "nn.softmax",
            "nn.log_softmax",
            "softmax",
            "log_softmax",
            "-",
            "exp",
        )
        npscalar = op in ("-", "abs()") and x.spec.rank == 0
        return text, x.spec, [x], npscalar, smooth

    # Issue 26's xtpu.math / xtpu.nn names: (op, dtypes, minimum rank, smooth).
    MORE_OPS = [
        ("ceil", FLOAT, 0, False),
        ("floor", FLOAT, 0, False),
        ("round", NUMERIC, 0, False),
        ("rsqrt", FLOAT, 0, False),
        ("log1p", FLOAT, 0, False),
        ("erf", FLOAT, 0, True),
        ("sin", FLOAT, 0, True),
        ("cos", FLOAT, 0, True),
        ("is_finite", FLOAT, 0, False),
        ("sign", NUMERIC, 0, False),
        ("reciprocal", FLOAT, 0, False),
        ("softplus", FLOAT, 0, False),
        ("squared_difference", NUMERIC, 0, True),
        ("add_n", NUMERIC, 0, True),
        ("cumsum", NUMERIC, 1, True),
        ("reduce_logsumexp", FLOAT, 0, False),
        ("reduce_std", FLOAT, 0, False),
        ("reduce_variance", FLOAT, 0, False),
        ("count_nonzero", DEVICE_DTYPES, 0, False),
        ("l2_normalize", FLOAT, 0, False),
        ("nn.softplus", FLOAT, 0, False),
        ("nn.gelu", FLOAT, 0, True),
        ("nn.relu6", FLOAT, 0, False),
        ("nn.leaky_relu", FLOAT, 0, False),
        ("nn.silu", FLOAT, 0, True),
        ("nn.swish", FLOAT, 0, True),
        ("nn.l2_loss", FLOAT, 0, True),
        ("nn.l2_normalize", FLOAT, 0, False),
        ("nn.dropout", FLOAT, 0, False),
        ("nn.moments", FLOAT, 1, False),
        ("nn.batch_normalization", FLOAT, 0, False),
        ("nn.bias_add", FLOAT, 2, False),
        ("nn.compute_average_loss", FLOAT, 1, False),
        ("nn.sigmoid_cross_entropy_with_logits", FLOAT, 0, False),
        ("nn.softmax_cross_entropy_with_logits", FLOAT, 1, False),
        ("nn.sparse_softmax_cross_entropy_with_logits", FLOAT, 1, False),
        # complex64's part ops on real tensors (TF: real and conj give x, imag zeros)
        ("real", NUMERIC, 0, True),
        ("imag", NUMERIC, 0, True),
        ("conj", NUMERIC, 0, True),
    ]

    def op_more(self, scope):
        ch = self.ch
        op, dtypes, min_rank, smooth = ch.pick(self.MORE_OPS)
        # an empty batch is compute_average_loss's error (TF: at run time), which a branch not
        # taken raises traced only (xtpu checks the static shape)
        nonempty = op == "nn.compute_average_loss"
        x = self.pick_var(
            scope,
            lambda v: v.spec.dtype in dtypes and v.spec.rank >= min_rank and not (nonempty and not v.spec.shape[0]),
        )
        if x is None:
            return None
        n, spec, r = x.name, x.spec, x.spec.rank
        fn = f"xtpu.{op}" if op.startswith("nn.") else f"xtpu.math.{op}"
        args = [n]
        out = spec
        if op == "is_finite":
            out = Spec(spec.shape, "bool")
        elif op == "squared_difference":
            args.append(f"{n} * 2")
        elif op == "add_n":
            args = [f"[{n}, {n}, {n}]"]
        elif op == "cumsum":
            args += [f"axis={ch.int(-r, r - 1)}", f"exclusive={ch.bool(0.5)}", f"reverse={ch.bool(0.5)}"]
        elif op in ("reduce_logsumexp", "reduce_std", "reduce_variance", "count_nonzero"):
            axis, axes = self.axes(r)
            keep = ch.bool(0.3)
            shape = tuple((1 if i in axes else d) for i, d in enumerate(spec.shape) if keep or i not in axes)
            args += ([f"axis={axis}"] if axis is not None else []) + (["keepdims=True"] if keep else [])
            out = Spec(shape, "int64" if op == "count_nonzero" else spec.dtype)
        elif op in ("l2_normalize", "nn.l2_normalize") and r and ch.bool(0.5):
            args.append(f"axis={ch.int(-r, r - 1)}")
        elif op == "nn.gelu" and ch.bool(0.5):
            args.append("approximate=True")
        elif op == "nn.leaky_relu" and ch.bool(0.5):
            args.append("alpha=0.1")
        elif op == "nn.l2_loss":
            out = Spec((), spec.dtype)
        elif op == "nn.dropout":
            args += ["0.25", f"seed={ch.int(0, 3)}"]
        elif op == "nn.moments":
            i = ch.int(0, 1)
            fn, args = f"{fn}({n}, axes=[0])[{i}]", None
            out = Spec(spec.shape[1:], spec.dtype)
        elif op == "nn.batch_normalization":
            args = [n, f"{n} * 0.5", f"{n} * {n} + 1.0", "None" if ch.bool(0.5) else n, "None", "1e-3"]
        elif op == "nn.bias_add":
            if all(spec.shape[:-1]):
                args.append(f"{n}[{'0, ' * (r - 1)}:]")
            else:  # no row 0 to take the bias from (an int index into a zero-size dimension)
                args.append(f"xtpu.ones([{spec.shape[-1]}], {_dt(spec.dtype)})")
        elif op == "nn.compute_average_loss":
            out = Spec((), spec.dtype)
        elif op == "nn.sigmoid_cross_entropy_with_logits":
            args = [f"labels=xtpu.math.sigmoid({n})", f"logits={n}"]
        elif op == "nn.softmax_cross_entropy_with_logits":
            args = [f"labels=xtpu.nn.softmax({n})", f"logits={n}"]
            out = Spec(spec.shape[:-1], spec.dtype)
        elif op == "nn.sparse_softmax_cross_entropy_with_logits":
            args = [f"labels=xtpu.zeros({list(spec.shape[:-1])}, xtpu.int32)", f"logits={n}"]
            out = Spec(spec.shape[:-1], spec.dtype)
        self.feature(f"op:{op}")
        text = fn if args is None else f"{fn}({', '.join(args)})"
        return text, out, [x], False, smooth

    def op_window(self, scope):
        """xtpu.nn's convolutions, pooling and batch norms on a float value of
        rank 3-5 (channels last, or NC.. for the 2-D ops): windows of 1-3,
        strides 1-2, SAME / VALID; filters are constants (linspace) of the
        value's dtype.  ``sync_batch_normalization`` only where every replica
        reaches it (eagerly emulated with ``crs``)."""
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in FLOAT and v.spec.size > 0)
        if x is None:
            return None
        dt = x.spec.dtype
        nsp = ch.int(1, 3)
        r = nsp + 2
        if x.spec.rank == r:
            shape, xname = x.spec.shape, x.name
        else:  # reshaped to rank 3-5 (the sizes split among the dimensions)
            dims = [1] * r
            for f in _prime_factors(x.spec.size):
                dims[ch.int(0, r - 1)] *= f
            shape, xname = tuple(dims), f"xtpu.reshape({x.name}, {dims})"
        ops = {
            1: ["conv1d", "convolution", "max_pool1d", "avg_pool1d", "max_pool", "avg_pool"],
            2: [
                "conv2d",
                "convolution",
                "depthwise_conv2d",
                "separable_conv2d",
                "conv2d_transpose",
                "max_pool2d",
                "avg_pool2d",
                "max_pool",
                "avg_pool",
                "fused_batch_norm",
            ]
            + (["sync_batch_normalization"] if scope.crs_ok else []),
            3: ["conv3d", "convolution", "max_pool3d", "avg_pool3d", "max_pool", "avg_pool", "fused_batch_norm"],
        }[nsp]
        op = ch.pick(ops)
        nchw = nsp == 2 and op in ("conv2d", "max_pool2d", "avg_pool2d") and ch.bool(0.3)
        sp = shape[2:] if nchw else shape[1:-1]
        c = shape[1] if nchw else shape[-1]
        fmt = ", data_format='NCHW'" if nchw else ""

        def const(dims):
            n = int(np.prod(dims))
            return f"np.linspace(-1.0, 1.0, {n}).reshape({list(dims)}).astype(np.{dt})"

        def out_shape(channels, windows, strides, pads):
            spatial = [num_windows(n, k, s, lo, hi, 1, 1) for n, k, s, (lo, hi) in zip(sp, windows, strides, pads)]
            return (shape[0], channels, *spatial) if nchw else (shape[0], *spatial, channels)

        self.feature(f"op:nn.{op}")
        if op in ("fused_batch_norm", "sync_batch_normalization"):
            if op == "fused_batch_norm":
                text = f"xtpu.nn.fused_batch_norm({xname}, {const([c])}, {const([c])})[0]"
                return text, Spec(shape, dt), [x], False, True

            def text(ctx, x=xname, c=c):
                if ctx.mode == "eager":
                    return f"sync_bn({x}, {const([c])}, {const([c])})"
                return f"xtpu.nn.sync_batch_normalization({x}, {const([c])}, {const([c])})[0]"

            s_ = scope
            while s_ is not None:
                s_.has_crs = True
                s_ = s_.parent
            return text, Spec(shape, dt), [x], False, True
        windows = [ch.int(1, min(3, n)) for n in sp]
        strides = [ch.int(1, 2) for _ in sp]
        padding = ch.pick(["SAME", "VALID"])
        pads = _padding(padding, tuple(sp), tuple(windows), tuple(strides), (1,) * nsp, True, op)
        if "pool" in op:
            ks = windows[0] if len(set(windows)) == 1 and ch.bool(0.5) else windows
            text = f"xtpu.nn.{op}({xname}, {ks}, {strides}, {padding!r}{fmt})"
            return text, Spec(out_shape(c, windows, strides, pads), dt), [x], False, op.startswith("avg")
        cout = ch.int(1, 3)
        if op == "depthwise_conv2d":
            text = f"xtpu.nn.depthwise_conv2d({xname}, {const([*windows, c, cout])}, [1, *{strides}, 1], {padding!r})"
            return text, Spec(out_shape(c * cout, windows, strides, pads), dt), [x], False, True
        if op == "separable_conv2d":
            dw, pw = const([*windows, c, 1]), const([1, 1, c, cout])
            text = f"xtpu.nn.separable_conv2d({xname}, {dw}, {pw}, [1, *{strides}, 1], {padding!r})"
            return text, Spec(out_shape(cout, windows, strides, pads), dt), [x], False, True
        if op == "conv2d_transpose":
            oshape = [shape[0], *(n * s for n, s in zip(sp, strides)), cout]
            text = f"xtpu.nn.conv2d_transpose({xname}, {const([*windows, cout, c])}, {oshape}, {strides}, 'SAME')"
            return text, Spec(tuple(oshape), dt), [x], False, True
        arg = {"conv1d": "stride", "convolution": "strides"}.get(op, "strides")
        text = f"xtpu.nn.{op}({xname}, {const([*windows, c, cout])}, {arg}={strides}, padding={padding!r}{fmt})"
        return text, Spec(out_shape(cout, windows, strides, pads), dt), [x], False, True

    def op_compare(self, scope):
        ch = self.ch
        op = ch.pick(["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"])
        ordered = op not in ("equal", "not_equal")
        x = self.pick_var(scope, lambda v: v.spec.dtype in (NUMERIC if ordered else DEVICE_DTYPES))
        if x is None:
            return None
        dt = x.spec.dtype
        deps = [x]
        if ch.bool(0.5):
            y = self.pick_var(scope, lambda v: v.spec.dtype == dt and _broadcastable(v.spec.shape, x.spec.shape))
        else:
            y = None
        if y is None:
            yt, _ = self.literal(dt, scope, numpy_ok=False)
            yshape = ()
        else:
            yt, yshape = y.name, y.spec.shape
            deps.append(y)
        shape = tuple(np.broadcast_shapes(x.spec.shape, yshape))
        sym = {
            "equal": "==",
            "not_equal": "!=",
            "less": "<",
            "less_equal": "<=",
            "greater": ">",
            "greater_equal": ">=",
        }[op]
        if ch.bool(0.5):
            self.feature(f"op:{sym}")
            text, npscalar = f"{x.name} {sym} {_paren(yt)}", len(shape) == 0
        else:
            self.feature(f"op:{op}")
            text, npscalar = f"xtpu.math.{op}({x.name}, {yt})", False
        return text, Spec(shape, "bool"), deps, npscalar, False

    def op_logical(self, scope):
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype == "bool")
        if x is None:
            return None
        op = ch.pick(["logical_and", "logical_or", "logical_xor", "logical_not", "&", "|", "~"])
        self.feature(f"op:{op}")
        if op in ("logical_not", "~"):
            text = f"xtpu.math.logical_not({x.name})" if op == "logical_not" else f"~{x.name}"
            return text, x.spec, [x], op == "~" and x.spec.rank == 0, False
        y = self.pick_var(scope, lambda v: v.spec.dtype == "bool" and _broadcastable(v.spec.shape, x.spec.shape))
        yt = y.name if y is not None else self.ch.pick(["True", "False"])
        yshape = y.spec.shape if y is not None else ()
        shape = tuple(np.broadcast_shapes(x.spec.shape, yshape))
        if op in ("&", "|"):
            return f"{x.name} {op} {yt}", Spec(shape, "bool"), [x] + ([y] if y else []), len(shape) == 0, False
        return f"xtpu.math.{op}({x.name}, {yt})", Spec(shape, "bool"), [x] + ([y] if y else []), False, False

    def axes(self, rank: int):
        """An ``axis`` argument: None, an int or a list of distinct ints."""
        ch = self.ch
        k = ch.weighted([(2, "none"), (3, "int"), (1, "list")]) if rank else "none"
        if k == "none":
            return None, tuple(range(rank))
        if k == "int":
            a = ch.int(-rank, rank - 1)
            return a, (a % rank,)
        n = ch.int(1, rank)
        pool = list(range(rank))
        chosen = []
        for _ in range(n):
            chosen.append(pool.pop(ch.int(0, len(pool) - 1)))
        signed = [a - rank if ch.bool(0.3) else a for a in chosen]
        return signed, tuple(sorted(chosen))

    def op_reduce(self, scope):
        ch = self.ch
        op = ch.pick(
            ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_any", "reduce_all"]
        )
        ok = {
            "reduce_max": DEVICE_DTYPES,
            "reduce_min": DEVICE_DTYPES,
            "reduce_any": ("bool",),
            "reduce_all": ("bool",),
        }.get(op, NUMERIC)
        x = self.pick_var(scope, lambda v: v.spec.dtype in ok)
        if x is None:
            return None
        axis, axes = self.axes(x.spec.rank)
        if op in ("reduce_max", "reduce_min") and any(x.spec.shape[a] == 0 for a in axes):
            if "zero_size_reduction" in self.avoid:
                return None
            self.feature("zero_size_reduction")
        keep = ch.bool(0.3)
        shape = tuple((1 if i in axes else d) for i, d in enumerate(x.spec.shape) if keep or i not in axes)
        args = [x.name]
        if axis is not None or ch.bool(0.2):
            args.append(f"axis={axis}")
        if keep:
            args.append("keepdims=True")
        self.feature(f"op:{op}")
        return (
            f"xtpu.math.{op}({', '.join(args)})",
            Spec(shape, x.spec.dtype),
            [x],
            False,
            op in ("reduce_sum", "reduce_mean"),
        )

    def op_argmax(self, scope):
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in NUMERIC and v.spec.rank >= 1)
        if x is None:
            return None
        a = ch.int(-x.spec.rank, x.spec.rank - 1) if ch.bool(0.6) else None
        ax = 0 if a is None else a % x.spec.rank
        if x.spec.shape[ax] == 0:
            # an error (TF's "Reduction axis 0 is empty"), found when tracing
            # even in a branch not taken eagerly
            if "zero_size_reduction" in self.avoid or scope.in_cf:
                return None
            self.feature("zero_size_reduction", "invalid", "invalid:argmax_empty_axis")
            self.stopped = True
        out = ch.pick([None, "int32", "int64"])
        args = [x.name] + ([f"axis={a}"] if a is not None else []) + ([f"output_type={_dt(out)}"] if out else [])
        shape = tuple(d for i, d in enumerate(x.spec.shape) if i != ax)
        op = ch.pick(["argmax", "argmin"])
        self.feature(f"op:{op}")
        return f"xtpu.math.{op}({', '.join(args)})", Spec(shape, out or "int64"), [x], False, False

    def op_matmul(self, scope):
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in NUMERIC and v.spec.rank >= 2)
        if x is None:
            return None
        ta, tb = ch.bool(0.2), ch.bool(0.2)
        *batch, m, k = x.spec.shape
        if ta:
            m, k = k, m

        def fits(v):
            if v.spec.dtype != x.spec.dtype or v.spec.rank != x.spec.rank or list(v.spec.shape[:-2]) != batch:
                return False
            return (v.spec.shape[-1] if tb else v.spec.shape[-2]) == k

        y = self.pick_var(scope, fits)
        if y is None:
            # x against its own transpose: [.., m, k] @ [.., k, m]
            y, tb = x, not ta
            n = m
        else:
            n = y.spec.shape[-2] if tb else y.spec.shape[-1]
        flags = (", transpose_a=True" if ta else "") + (", transpose_b=True" if tb else "")
        if not flags and ch.bool(0.4):
            self.feature("op:@")
            text = f"{x.name} @ {y.name}"
        else:
            self.feature("op:matmul")
            text = f"{ch.pick(['xtpu.matmul', 'xtpu.math.matmul'])}({x.name}, {y.name}{flags})"
        return text, Spec(tuple(batch) + (m, n), x.spec.dtype), [x, y], False, x.spec.dtype in FLOAT

    def op_reshape(self, scope):
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in DEVICE_DTYPES)
        if x is None:
            return None
        size = x.spec.size
        rank = ch.int(0, 3) if size == 1 else ch.int(1, 3)
        if size == 0:
            dims = [ch.pick([1, 2, 3]) for _ in range(rank)]
            dims[ch.int(0, rank - 1)] = 0
        else:
            dims = [1] * rank
            for p in _prime_factors(size):
                dims[ch.int(0, rank - 1)] *= p
        shown = list(dims)
        if size and rank and ch.bool(0.3):
            shown[ch.int(0, rank - 1)] = -1
        self.feature("op:reshape")
        if tuple(dims) == x.spec.shape:
            self.alias = x  # reshape to the same shape returns its operand
        return (
            f"xtpu.reshape({x.name}, {shown})",
            Spec(tuple(dims), x.spec.dtype),
            [x],
            self.alias is x and x.npscalar,
            True,
        )

    def op_transpose(self, scope):
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in DEVICE_DTYPES and v.spec.rank >= 1)
        if x is None:
            return None
        r = x.spec.rank
        if ch.bool(0.3):
            perm = list(range(r - 1, -1, -1))
            text = f"xtpu.transpose({x.name})"
        else:
            pool, perm = list(range(r)), []
            while pool:
                perm.append(pool.pop(ch.int(0, len(pool) - 1)))
            text = f"xtpu.transpose({x.name}, {perm})"
        self.feature("op:transpose")
        return text, Spec(tuple(x.spec.shape[p] for p in perm), x.spec.dtype), [x], False, True

    def op_concat(self, scope):
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in DEVICE_DTYPES and v.spec.rank >= 1)
        if x is None:
            return None
        r = x.spec.rank
        axis = ch.int(-r, r - 1)
        a = axis % r

        def fits(v):
            return (
                v.spec.dtype == x.spec.dtype
                and v.spec.rank == r
                and all(d == e for i, (d, e) in enumerate(zip(v.spec.shape, x.spec.shape)) if i != a)
            )

        parts = [x]
        for _ in range(ch.int(1, 2)):
            parts.append(self.pick_var(scope, fits) or x)
        shape = list(x.spec.shape)
        shape[a] = sum(p.spec.shape[a] for p in parts)
        self.feature("op:concat")
        return (
            f"xtpu.concat([{', '.join(p.name for p in parts)}], axis={axis})",
            Spec(tuple(shape), x.spec.dtype),
            parts,
            False,
            True,
        )

    def op_one_hot(self, scope):
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in INT and v.spec.rank <= 2)
        if x is None:
            return None
        depth = ch.int(1, 4)
        args = [x.name, str(depth)]
        dt = "float32"
        if ch.bool(0.4):
            dt = ch.pick(DEVICE_DTYPES)
            args.append(f"dtype={_dt(dt)}")
            if ch.bool(0.5) and dt != "bool":
                args.append(f"on_value={self.literal(dt, scope, numpy_ok=False)[0]}")
                args.append(f"off_value={self.literal(dt, scope, numpy_ok=False)[0]}")
        r = x.spec.rank + 1
        ax = ch.pick([None, -1] + list(range(r)))
        if ax is not None:
            args.append(f"axis={ax}")
        ax = r - 1 if ax is None or ax == -1 else ax
        shape = list(x.spec.shape)
        shape.insert(ax, depth)
        self.feature("op:one_hot")
        return f"xtpu.one_hot({', '.join(args)})", Spec(tuple(shape), dt), [x], False, False

    def op_getitem(self, scope):
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in DEVICE_DTYPES and v.spec.rank >= 1)
        if x is None:
            return None
        parts = []
        for d in x.spec.shape:
            k = ch.weighted([(2, "full"), (2, "int" if d else "full"), (3, "slice")])
            if k == "full":
                parts.append(":")
            elif k == "int":
                parts.append(str(ch.int(-d, d - 1)))
            else:
                lo = ch.pick([None, 0, 1, -1, 2, -2, d])
                hi = ch.pick([None, d, 1, -1, 2, d + 1, 0])
                st = ch.pick([None, 1, 2, 3])
                s = f"{'' if lo is None else lo}:{'' if hi is None else hi}"
                parts.append(s + (f":{st}" if st else ""))
        # trailing full slices may go, or become an Ellipsis
        while parts and parts[-1] == ":" and ch.bool(0.5):
            parts.pop()
        has_int = any(re.fullmatch(r"-?\d+", q) for q in parts)
        if ch.bool(0.2) and not (has_int and "getitem_int_none" in self.avoid):
            parts.insert(ch.int(0, len(parts)), "None")
            if has_int:
                self.feature("getitem_int_none")
        if ch.bool(0.15):
            parts.append("...")  # the axes not indexed yet
        if not parts:
            parts = [":"]
        key = ", ".join(parts)
        shape = eval(f"np.empty({tuple(x.spec.shape)})[{key}]", {"np": np}).shape  # numpy's basic indexing
        if 0 in shape and 0 not in x.spec.shape:
            self.feature("zero_size_slice")
        self.feature("op:[]")
        return f"{x.name}[{key}]", Spec(tuple(shape), x.spec.dtype), [x], len(shape) == 0, True

    def op_cast(self, scope):
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in DEVICE_DTYPES)
        if x is None:
            return None
        dt = ch.pick(DEVICE_DTYPES)
        fn = ch.pick(["xtpu.cast", "xtpu.math.cast"])
        self.feature("op:cast")
        smooth = x.spec.dtype in FLOAT and dt in FLOAT
        if dt == x.spec.dtype:
            self.alias = x  # a cast to the same dtype returns its operand
        return f"{fn}({x.name}, {_dt(dt)})", Spec(x.spec.shape, dt), [x], self.alias is x and x.npscalar, smooth

    def op_stop_gradient(self, scope):
        x = self.pick_var(scope, lambda v: v.spec.dtype in FLOAT)
        if x is None:
            return None
        self.feature("op:stop_gradient")
        self.alias = x
        return f"xtpu.stop_gradient({x.name})", x.spec, [x], False, False

    def stmt_const(self, scope: Scope, indent: int) -> None:
        ch = self.ch
        dt = ch.pick(DEVICE_DTYPES)
        shape = tuple(ch.int(1, 3) for _ in range(ch.int(0, 2)))
        if ch.bool(0.3):
            v = self.literal(dt, scope, numpy_ok=False)[0]
            text = f"xtpu.constant({v}, dtype={_dt(dt)}, shape={list(shape)})"
        else:
            vals = np.empty(shape, dtype=object)
            for idx in np.ndindex(shape):
                vals[idx] = self.literal(dt, scope, numpy_ok=False)[0]
            text = f"xtpu.constant({_nested(vals)}, dtype={_dt(dt)})"
        if "nan" in text or "inf" in text:
            self.feature("nonfinite_constant")
        self.feature("op:constant")
        self.define(scope, indent, text, Spec(shape, dt))

    def stmt_rid(self, scope: Scope, indent: int) -> None:
        self.feature("replica_id")
        v = self.define(scope, indent, _rid, Spec((), "int32"))
        if self.ch.bool(0.5):  # a float that differs per replica
            dt = self.ch.pick(FLOAT)
            self.define(scope, indent, f"xtpu.cast({v.name}, {_dt(dt)})", Spec((), dt), [v])

    def stmt_crs(self, scope: Scope, indent: int) -> None:
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in NUMERIC)
        if x is None:
            return self.stmt_op(scope, indent)
        mode = ch.pick(["all", "pairs", "halves", "stride", "single", "pairs_reversed"])
        self.feature("cross_replica_sum", "crs_groups" if mode != "all" else "crs_all")

        def text(ctx, x=x.name, mode=mode):
            g = _groups(mode, ctx.replicas)
            if ctx.mode == "eager":
                return f"crs({x}, {g})"
            return f"xtpu.cross_replica_sum({x})" if g is None else f"xtpu.cross_replica_sum({x}, group_assignment={g})"

        self.define(scope, indent, text, x.spec, [x])
        s = scope
        while s is not None:
            s.has_crs = True
            s = s.parent

    def stmt_split(self, scope: Scope, indent: int) -> None:
        ch = self.ch
        x = self.pick_var(scope, lambda v: v.spec.dtype in DEVICE_DTYPES)
        if x is None:
            return self.stmt_op(scope, indent)
        if self.zero_size_seen and "spmd_zero_size_reshape" in self.avoid:
            return self.stmt_op(scope, indent)
        self.has_split = True
        even = [i for i, d in enumerate(x.spec.shape) if d % 2 == 0]
        kind = ch.weighted([(3, "split" if even else "replicate"), (1, "replicate"), (1, "assign")])
        self.feature(f"logical:{kind}")
        if kind == "split":
            dim = even[ch.int(0, len(even) - 1)]
            two = [2 if i == dim else 1 for i in range(x.spec.rank)]
            ones = [1] * x.spec.rank

            def text(ctx, x=x.name, two=two, ones=ones):
                dims = two if ctx.cores == 2 or ctx.mode == "eager" else ones
                return f"xtpu.split_to_logical_devices({x}, {dims})"
        elif kind == "replicate":
            text = f"xtpu.replicate_to_logical_devices({x.name})"
        else:
            core = ch.int(0, 1)

            def text(ctx, x=x.name, core=core):
                c = core if ctx.cores == 2 or ctx.mode == "eager" else 0
                return f"xtpu.assign_to_logical_device({x}, {c})"

        self.define(scope, indent, text, x.spec, [x], npscalar=x.npscalar, alias=[x])

    def stmt_string(self, scope: Scope, indent: int) -> None:
        ch = self.ch
        self.feature("strings")
        if not scope.in_oc:
            self.feature("soft_placement")
        s = self.pick_var(scope, lambda v: v.spec.dtype == "string") if ch.bool(0.4) else None
        if s is not None:
            out = ch.pick(FLOAT if "to_number_overflow" in self.avoid else NUMERIC)
            self.feature("op:strings.to_number")
            self.define(
                scope, indent, f"xtpu.strings.to_number({s.name}, out_type={_dt(out)})", Spec(s.spec.shape, out), [s]
            )
            scope.rough()
            return
        x = self.pick_var(scope, lambda v: v.spec.rank == 0 and v.spec.dtype in NUMERIC)
        if x is not None and ch.bool(0.6):
            # a number through its text: parses back (or raises the same error)
            out = ch.pick(FLOAT if x.spec.dtype in FLOAT else NUMERIC)
            tpl = ch.pick(["{}", "1{}"])
            if out in INT and "to_number_overflow" in self.avoid:
                out, tpl = x.spec.dtype, "{}"  # parses back in range
            self.feature("op:strings.format", "op:strings.to_number")
            self.define(
                scope,
                indent,
                f"xtpu.strings.to_number(xtpu.strings.format({tpl!r}, {x.name}), out_type={_dt(out)})",
                Spec((), out),
                [x],
            )
            scope.rough()
            return
        args = [self.pick_var(scope, lambda v: True) for _ in range(ch.int(1, 2))]
        args = [a for a in args if a is not None]
        tpl = ch.pick([t for t in TEMPLATES if t.count("{}") == len(args)])
        self.feature("op:strings.format")
        inputs = args[0].name if len(args) == 1 and ch.bool(0.5) else f"[{', '.join(a.name for a in args)}]"
        extra = f", summarize={ch.int(1, 3)}" if ch.bool(0.2) else ""
        self.define(scope, indent, f"xtpu.strings.format({tpl!r}, {inputs}{extra})", Spec((), "string"), args)
        scope.rough()

    def stmt_print(self, scope: Scope, indent: int) -> None:
        ch = self.ch
        args = [self.pick_var(scope, lambda v: True) for _ in range(ch.int(1, 2))]
        names = [repr(f"p{self.n}")] + [a.name for a in args if a is not None]
        extra = ", sep=','" if ch.bool(0.2) else ""
        self.feature("op:print")
        self.emit(indent, f"xtpu.print({', '.join(names)}{extra}, output_stream={DEVNULL!r})")

    def stmt_invalid(self, scope: Scope, indent: int) -> None:
        """An op that breaks its rules: eager and compiled must raise alike."""
        ch = self.ch
        vis = [v for v in scope.visible() if v.spec.dtype != "string"]
        if not vis:
            return
        x = vis[ch.int(0, len(vis) - 1)]
        kind = ch.pick(["dtype", "matmul", "reshape", "index", "concat", "one_hot", "cond", "split", "axis"])
        if kind == "dtype":
            other = ch.pick([d for d in DEVICE_DTYPES if d != x.spec.dtype])
            text = f"xtpu.math.add({x.name}, xtpu.cast({x.name}, {_dt(other)}))"
        elif kind == "matmul":
            text = f"xtpu.matmul({x.name}, xtpu.reshape({x.name}, [1, -1, 7]))"
        elif kind == "reshape":
            text = f"xtpu.reshape({x.name}, [{x.spec.size + 1}])"
        elif kind == "index":
            text = f"{x.name}[{(x.spec.shape[0] if x.spec.rank else 0) + 1}]"
        elif kind == "concat":
            text = f"xtpu.concat([{x.name}, xtpu.reshape({x.name}, [-1, 1, 1, 1, 1])], axis=0)"
        elif kind == "one_hot":
            text = f"xtpu.one_hot(xtpu.cast({x.name}, xtpu.float32), 3)"
        elif kind == "cond":
            # not a bool scalar (eagerly a branch is not traced, so branches
            # that disagree are found traced only)
            text = f"xtpu.cond(xtpu.cast({x.name}, xtpu.int32), lambda: {x.name}, lambda: {x.name})"
        elif kind == "split":
            text = f"xtpu.split_to_logical_devices({x.name}, [3] * {x.spec.rank + 1})"
        else:
            text = f"xtpu.math.reduce_sum({x.name}, axis={x.spec.rank + 1})"
        self.feature("invalid", f"invalid:{kind}")
        self.emit(indent, f"{self.fresh()} = {text}")
        self.stopped = True

    # -- control flow -----------------------------------------------------

    def pred(self, scope: Scope, indent: int) -> Var:
        """A bool scalar: an existing one, a comparison of a sum, or of the replica id."""
        ch = self.ch
        k = ch.weighted([(2, "sum"), (1, "existing"), (1, "rid")])
        if k == "existing":
            p = self.pick_var(scope, lambda v: v.spec == Spec((), "bool"))
            if p is not None:
                return p
        x = self.pick_var(scope, lambda v: v.spec.dtype in NUMERIC)
        if k == "rid" or x is None:
            r = ch.int(0, 4)
            return self.define(scope, indent, lambda ctx, r=r: f"xtpu.math.less({_rid(ctx)}, {r})", Spec((), "bool"))
        lit = self.literal(x.spec.dtype, scope, numpy_ok=False)[0]
        op = ch.pick(["greater", "less"])
        return self.define(
            scope, indent, f"xtpu.math.{op}(xtpu.math.reduce_sum({x.name}), {lit})", Spec((), "bool"), [x]
        )

    def results_like(self, scope: Scope, indent: int, specs: list[Spec]) -> list[str]:
        """Names of values of ``specs`` in ``scope``, made as constants when missing."""
        out = []
        for s in specs:
            v = self.pick_var(scope, lambda v, s=s: v.spec == s)
            if v is None or self.ch.bool(0.1):
                fill = "True" if s.dtype == "bool" else ("1" if s.dtype in INT else "0.5")
                v = self.define(scope, indent, f"xtpu.constant({fill}, dtype={_dt(s.dtype)}, shape={list(s.shape)})", s)
            out.append(v.name)
        return out

    def stmt_cond(self, scope: Scope, indent: int) -> None:
        ch = self.ch
        p = self.pred(scope, indent)
        tname, fname = self.fresh("true_fn"), self.fresh("false_fn")
        self.emit(indent, f"def {tname}():")
        ts = Scope(scope, "cond")
        self.block(ts, indent + 1, p=0.6)
        k = ch.int(1, 2)
        outs_t = []
        for _ in range(k):
            v = self.pick_var(ts, lambda v: v.spec.dtype in DEVICE_DTYPES)
            if v is not None:
                outs_t.append(v)
        if not outs_t:
            outs_t = [self.define(ts, indent + 1, "xtpu.constant(1.0)", Spec((), "float32"))]
        self.emit(indent + 1, f"return {_tuple([v.name for v in outs_t])}")
        self.emit(indent, f"def {fname}():")
        fs = Scope(scope, "cond")
        self.block(fs, indent + 1, p=0.6)
        outs_f = self.results_like(fs, indent + 1, [v.spec for v in outs_t])
        self.emit(indent + 1, f"return {_tuple(outs_f)}")
        names = [self.fresh() for _ in outs_t]
        self.emit(indent, f"{', '.join(names)} = xtpu.cond({p.name}, {tname}, {fname})")
        deps = scope.visible()
        for n, v, w in zip(names, outs_t, outs_f):
            w = next(x for x in fs.visible() if x.name == w)
            scope.add(Var(n, v.spec, deps=frozenset(d.name for d in deps), roots=v.aliases | w.aliases))
        self.feature("cond")
        _mark_cf(scope)
        if scope.in_oc:
            self.feature("host_cond")
        scope.rough()

    def stmt_while(self, scope: Scope, indent: int) -> None:
        ch = self.ch
        lv = []
        for _ in range(ch.int(1, 2)):
            v = self.pick_var(scope, lambda v: v.spec.dtype in DEVICE_DTYPES)
            if v is not None and v not in lv:
                lv.append(v)
        if not lv:
            return self.stmt_op(scope, indent)
        counter = ch.bool(0.3)
        maxit = None if counter and not scope.recording and ch.bool(0.5) else ch.int(0, 4)
        cname, bname = self.fresh("cond"), self.fresh("body")
        params = [self.fresh("a") for _ in lv]
        cparam = self.fresh("i") if counter else None
        allp = ([cparam] if counter else []) + params
        # cond
        self.emit(indent, f"def {cname}({', '.join(allp)}):")
        numeric = [(p, v) for p, v in zip(params, lv) if v.spec.dtype in NUMERIC]
        if counter:
            ctext = f"{cparam} < {ch.int(0, 4)}"
        elif numeric and ch.bool(0.6):
            p, v = numeric[ch.int(0, len(numeric) - 1)]
            ctext = f"xtpu.math.less(xtpu.math.reduce_sum({p}), {self.literal(v.spec.dtype, scope, numpy_ok=False)[0]})"
        else:
            ctext = "xtpu.constant(True)"
            if maxit is None:
                maxit = ch.int(0, 4)
        self.emit(indent + 1, f"return {ctext}")
        # body
        self.emit(indent, f"def {bname}({', '.join(allp)}):")
        bs = Scope(scope, "while")
        for p, v in zip(params, lv):
            bs.add(Var(p, v.spec, deps=v.deps | {v.name}, roots=v.aliases))
        self.block(bs, indent + 1, p=0.6)
        outs = self.results_like(bs, indent + 1, [v.spec for v in lv])
        if counter:
            outs = [f"{cparam} + 1"] + outs
        single = len(allp) == 1 and ch.bool(0.6)
        self.emit(indent + 1, f"return {outs[0] if single else '(' + ', '.join(outs) + ',)'}")
        init = ([str(0)] if counter else []) + [v.name for v in lv]
        init_text = init[0] if single else "(" + ", ".join(init) + ",)"
        names = [self.fresh() for _ in allp]
        mi = f", maximum_iterations={maxit}" if maxit is not None else ""
        lhs = names[0] if single else ", ".join(names) + ("," if len(names) == 1 else "")
        self.emit(indent, f"{lhs} = xtpu.while_loop({cname}, {bname}, {init_text}{mi})")
        deps = frozenset(d.name for d in scope.visible())
        if counter:
            scope.add(Var(names[0], Spec((), "int32"), deps=deps))
        body_vis = {x.name: x for x in bs.visible()}
        for n, v, o in zip(names[1:] if counter else names, lv, outs[1:] if counter else outs):
            scope.add(Var(n, v.spec, deps=deps, roots=v.aliases | body_vis[o].aliases))
        self.feature("while_loop", "while_maximum_iterations" if maxit is not None else "while_counter")
        _mark_cf(scope)
        if scope.in_oc:
            self.feature("host_while")
        scope.rough()

    def stmt_oc(self, scope: Scope, indent: int) -> None:
        ch = self.ch
        args = []
        for _ in range(ch.int(0, 2)):
            v = self.pick_var(scope, lambda v: True)
            if v is not None:
                args.append(v)
        hname = self.fresh("host_fn")
        params = [self.fresh("a") for _ in args]
        self.emit(indent, f"def {hname}({', '.join(params)}):")
        hs = Scope(scope, "oc")
        for p, v in zip(params, args):
            hs.add(Var(p, v.spec, npscalar=v.npscalar, deps=v.deps | {v.name}, roots=v.aliases))
        self.block(hs, indent + 1, p=0.7)
        outs = []
        for _ in range(ch.int(0, 2)):
            v = self.pick_var(hs, lambda v: True)
            if v is not None and v not in outs:
                outs.append(v)
        self.emit(indent + 1, f"return {_tuple([v.name for v in outs])}" if outs else "return None")
        call = f"xtpu.outside_compilation({', '.join([hname] + [a.name for a in args])})"
        deps = frozenset(d.name for d in scope.visible())
        if not outs:
            self.emit(indent, call)
        else:
            names = [self.fresh() for _ in outs]
            self.emit(indent, f"{', '.join(names)} = {call}")
            for n, v in zip(names, outs):
                scope.add(
                    Var(n, v.spec, npscalar=v.npscalar, deps=deps, roots=v.aliases, region=scope.region, host=True)
                )
        self.feature("outside_compilation")
        if scope.in_cf:
            self.feature("oc_in_control_flow")
        if scope.recording:
            self.feature("oc_in_gradient")

    def stmt_grad(self, scope: Scope, indent: int) -> None:
        """A GradientTape (or xtpu.gradients) of a function of some values."""
        ch = self.ch
        npscalar_ok = not ({"eager_0d_watch", "eager_identity_ndarray"} & self.avoid)
        ok_watch = lambda v: v.spec.dtype in FLOAT and (npscalar_ok or not v.npscalar)  # noqa: E731
        # arguments that may be one object eagerly but two tensors traced
        # differ by design (TF's too): the arguments' aliases are disjoint
        wrt, seen = [], set()
        for _ in range(ch.int(1, 2)):
            v = self.pick_var(scope, lambda v: ok_watch(v) and not (v.aliases & seen))
            if v is not None:
                wrt.append(v)
                seen |= v.aliases
        if not wrt:
            return self.stmt_op(scope, indent)
        if any(v.npscalar for v in wrt):
            self.feature("eager_0d_watch")
        extra = []
        if ch.bool(0.3):
            v = self.pick_var(scope, lambda v: v.spec.dtype in DEVICE_DTYPES and not (v.aliases & seen))
            if v is not None:
                extra.append(v)
        args = wrt + extra
        gname = self.fresh("loss_fn")
        params = [self.fresh("a") for _ in args]
        self.emit(indent, f"def {gname}({', '.join(params)}):")
        gs = Scope(scope, "grad", closed=True)
        if scope.crs_ok and ch.bool(0.4):
            gs.no_cf = True
        else:
            gs.crs_allowed = False
        for p, v in zip(params, args):
            gs.add(Var(p, v.spec, deps=v.deps | {v.name}, roots=v.aliases))
        self.block(gs, indent + 1, p=0.75)
        target = self.pick_var(gs, lambda v: v.spec.dtype in FLOAT) or gs.vars[0]
        self.emit(indent + 1, f"return {target.name}")
        top_level = scope.kind == "top"
        all_f64 = all(v.spec.dtype == "float64" for v in wrt) and target.spec.dtype == "float64"
        fd = top_level and gs.smooth and all_f64
        # TF 1's xtpu.gradients differentiates the whole graph: only when no
        # argument depends on a watched value (then it equals the tape).
        # Nor when an argument depends on another one (through a gradient
        # computed earlier, say: tanh's gradient reads tanh's result): the
        # graph's derivative through that dependence is not the tape's zero.
        names_args = frozenset().union(*(v.aliases for v in args))
        tf1_ok = not scope.in_oc and not any(v.deps & names_args for v in args)
        api = ch.weighted([(3, "tape"), (1 if tf1_ok else 0, "tf1"), (1, "persistent")])
        tape = self.fresh("tape")
        loss = self.fresh()
        grads = [self.fresh() for _ in wrt]
        call = f"{gname}({', '.join(a.name for a in args)})"
        unc = ", unconnected_gradients=xtpu.UnconnectedGradients.ZERO"
        wrt_text = f"[{', '.join(v.name for v in wrt)}]"
        lhs = ", ".join(grads)
        tape_lines = [
            f"with xtpu.GradientTape({'persistent=True' if api == 'persistent' else ''}) as {tape}:",
            *[f"    {tape}.watch({v.name})" for v in wrt],
            f"    {loss} = {call}",
            f"{lhs}, = {tape}.gradient({loss}, {wrt_text}{unc})"
            if len(grads) == 1
            else f"{lhs} = {tape}.gradient({loss}, {wrt_text}{unc})",
        ]
        if api == "tf1":
            tf1_lines = [
                f"{loss} = {call}",
                f"{lhs}, = xtpu.gradients({loss}, {wrt_text}{unc})"
                if len(grads) == 1
                else f"{lhs} = xtpu.gradients({loss}, {wrt_text}{unc})",
            ]
            n_lines = max(len(tape_lines), len(tf1_lines))
            for i in range(n_lines):

                def text(ctx, i=i):
                    src = tape_lines if ctx.mode == "eager" else tf1_lines
                    return src[i] if i < len(src) else None

                self.emit(indent, text)
        else:
            for t in tape_lines:
                self.emit(indent, t)
        tainted = gs.has_cf
        if tainted:
            self.feature("gradient_through_control_flow")
        if api == "persistent":
            # a persistent tape answers twice: the gradient of the loss again
            g2 = self.fresh()
            self.emit(indent, f"{g2} = {tape}.gradient({loss}, {wrt[0].name}{unc})")
            scope.add(
                Var(
                    g2,
                    wrt[0].spec,
                    deps=frozenset(d.name for d in args)
                    | frozenset({loss})
                    | frozenset().union(*[v.deps for v in args]),
                    tainted=tainted,
                )
            )
            if tainted:
                self.lenient.add(g2)
        deps = frozenset(d.name for d in args) | frozenset().union(*[v.deps for v in args])
        scope.add(Var(loss, target.spec, deps=deps, roots=target.aliases))
        for g, v in zip(grads, wrt):
            # a gradient may read any value of the forward computation
            scope.add(Var(g, v.spec, deps=deps | {loss}, tainted=tainted))
            if tainted:
                self.lenient.add(g)
        if fd:
            site = self.n
            has_crs = gs.has_crs
            self.emit(
                indent,
                lambda ctx, s=site, g=gname, a=[v.name for v in args], w=len(wrt), d=grads, c=has_crs: (  # noqa: B008
                    f"_fd_site({s}, {g}, ({', '.join(a)},), {w}, ({', '.join(d)},), {c})" if ctx.fd else None
                ),
            )
            self.feature("finite_differences")
        self.feature("gradient", f"gradient:{api}")
        if scope.grad_depth >= 1:
            self.feature("second_order")
        if gs.has_crs:
            self.feature("gradient_through_crs")
        if not gs.smooth:
            scope.rough()


def _mark_cf(scope: Scope) -> None:
    """Record control flow in ``scope`` and the scopes around it."""
    while scope is not None:
        scope.has_cf = True
        scope = scope.parent


def _rid(ctx: Ctx) -> str:
    return "rid()" if ctx.mode == "eager" else "xtpu.replica_id()"


def _tuple(names: list[str]) -> str:
    return names[0] if len(names) == 1 else "(" + ", ".join(names) + ")"


def _nested(a) -> str:
    """Literal texts in an object array as a nested Python list."""
    if isinstance(a, np.ndarray):
        a = a.tolist()
    if not isinstance(a, list):
        return a
    return "[" + ", ".join(_nested(x) for x in a) + "]"


def _broadcastable(a, b) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


DEVNULL = "file://" + os.devnull


def generate(ch: Chooser, avoid=frozenset()) -> Program:
    """A random program from ``ch``'s decisions (see :class:`Generator`)."""
    g = Generator(ch, avoid)
    prog = g.program()
    prog.choices = getattr(ch, "choices", None)
    return prog


def program_from_choices(choices, avoid=frozenset()) -> Program:
    return generate(ReplayChooser(choices), avoid)


# --------------------------------------------------------------------------
# Running: eagerly (threads in lockstep) and compiled
# --------------------------------------------------------------------------

_local = threading.local()


class _Collections:
    """The cyclic collector's runs in this process (``gc.callbacks``): the
    eager replicas stop while it runs (it holds the GIL), and a full
    collection of a large heap on a loaded machine took longer than a
    meeting's timeout (issue 25). What a broken meeting's report names."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.log: collections.deque = collections.deque(maxlen=64)  # (end, seconds, generation)
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.started = time.monotonic()
        elif self.started is not None:
            now = time.monotonic()
            self.log.append((now, now - self.started, info.get("generation")))
            self.started = None

    def since(self, t0: float) -> str:
        runs = [(sec, gen) for end, sec, gen in list(self.log) if end >= t0]
        if not runs:
            return "no collection"
        longest = max(runs)
        return f"{len(runs)} collections, {sum(r[0] for r in runs):.1f} s, the longest {longest[0]:.1f} s (generation {longest[1]})"


_COLLECTIONS = _Collections()


def _progress() -> float:
    """CPU seconds this process used so far (all threads, the collector too)."""
    return time.process_time()


class Exchange:
    """The eager reference's cross-replica sums: each replica thread puts its
    value for its k-th sum, waits for the others, and adds its group's
    values in ascending replica order.

    A meeting breaks (every waiter raises ``BrokenBarrierError``) when a
    replica raised (:meth:`abort`) or when the process made no progress for
    ``timeout`` seconds: no CPU time used by any thread while the waiters
    wait, which is what a deadlock looks like. Wall time alone is not the
    measure: a replica that computes, or the collector that stops every
    thread while it walks a large heap, uses CPU; on a loaded machine (load
    average 20 on 2 cores) such a pause outlasted a 20 s wall timeout and was
    counted as a hang (issue 25). A replica that computes for ever is caught
    by the caller's wall limit."""

    def __init__(self, replicas: int, timeout: float):
        self.replicas = replicas
        self.timeout = timeout
        self.cond = threading.Condition()
        self.slots: dict[int, list] = {}
        self.arrived: dict[int, int] = {}
        self.broken = False
        self.threads: list[threading.Thread | None] = [None] * replicas
        self.late: str | None = None  # the meeting that timed out: who was missing, and where

    def abort(self) -> None:
        with self.cond:
            self.broken = True
            self.cond.notify_all()

    def all_sum(self, r: int, k: int, value: np.ndarray, groups) -> np.ndarray:
        with self.cond:
            if self.broken:
                raise threading.BrokenBarrierError
            self.slots.setdefault(k, [None] * self.replicas)[r] = np.array(value)
            self.arrived[k] = self.arrived.get(k, 0) + 1
            if self.arrived[k] == self.replicas:
                self.cond.notify_all()
            start = last = time.monotonic()
            cpu = _progress()
            while self.arrived[k] < self.replicas and not self.broken:
                self.cond.wait(min(1.0, self.timeout))
                now, used = time.monotonic(), _progress()
                if used - cpu >= 0.01 * (now - last):  # someone ran: not a deadlock
                    last, cpu = now, used
                elif now - last > self.timeout:
                    missing = [q for q, v in enumerate(self.slots[k]) if v is None]
                    self.late = (
                        f"meeting {k}: replicas {missing} missing for {now - start:.0f} s, "
                        f"{now - last:.0f} s without CPU time; "
                        + "; ".join(
                            f"replica {q} at {_stuck_at(self.threads[q])}"
                            for q in missing
                            if self.threads[q] is not None
                        )
                        + f"; the collector meanwhile: {_COLLECTIONS.since(start)}"
                    )
                    self.broken = True
                    self.cond.notify_all()
            if self.arrived[k] < self.replicas:
                raise threading.BrokenBarrierError
        vals = self.slots[k]
        group = next(g for g in (groups or [list(range(self.replicas))]) if r in g)
        order = sorted(group)
        acc = vals[order[0]].copy()
        for q in order[1:]:
            acc = acc + vals[q]
        return acc.astype(vals[r].dtype)


def crs(x, groups=None):
    """``xtpu.cross_replica_sum`` in the eager reference (TF's gradient: the
    sum of the cotangents over the same groups)."""
    from xtpu.core.tracing import recording_tapes

    st = _local

    def forward(v):
        st.k += 1
        return xtpu.constant(st.exchange.all_sum(st.r, st.k, np.asarray(v), groups))

    if not recording_tapes():
        return forward(x)

    @xtpu.custom_gradient
    def summed(v):
        return forward(v), lambda dy: crs(dy, groups)

    return summed(x)


def sync_bn(x, scale, offset, epsilon=0.001):
    """``xtpu.nn.sync_batch_normalization`` in the eager reference: the
    per-channel sums, sums of squares and counts added over every replica
    with :func:`crs`, the batch norm of the global batch."""
    rank = len(x.shape)
    axes = list(range(rank - 1))
    n = crs(xtpu.constant(np.asarray(float(np.prod(x.shape[:-1])), dtype=x.dtype)))
    mean = crs(xtpu.math.reduce_sum(x, axis=axes)) / n
    var = crs(xtpu.math.reduce_sum(x * x, axis=axes)) / n - mean * mean
    inv = 1.0 / xtpu.math.sqrt(var + epsilon) * scale
    return (x - mean) * inv + offset


def rid():
    """``xtpu.replica_id()`` in the eager reference."""
    return xtpu.constant(np.int32(_local.r))


def _fd_site(site, fn, args, n_wrt, grads, has_crs):
    _local.fd_sites[site] = (fn, [np.array(a) for a in args], n_wrt, [np.array(g) for g in grads], has_crs)


@dataclass
class Outcome:
    status: str  # ok, error, hang
    values: list | None = None  # [replica][output] numpy arrays
    error: BaseException | None = None
    replica: int | None = None
    fd_sites: list | None = None  # per replica {site: ...} (eager runs)


def _exec(source: str, namespace: dict, tag: str):
    filename = f"<fuzz-{tag}-{abs(hash(source)) % 10**8}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace["computation"]


def run_replicas(replicas: int, fn: Callable[[int], Any], timeout: float) -> list[tuple]:
    """``fn(r)`` on one thread per replica, crs meeting in an Exchange;
    per replica ``("ok", value, fd_sites)``, ``("error", exc)``,
    ``("aborted", exc)`` or ``("hang", None)``."""
    ex = Exchange(replicas, timeout)
    results: list = [None] * replicas

    def worker(r):
        _local.r, _local.exchange, _local.k, _local.fd_sites = r, ex, 0, {}
        ex.threads[r] = threading.current_thread()
        try:
            with np.errstate(all="ignore"):
                v = fn(r)
            results[r] = ("ok", v, dict(_local.fd_sites))
        except threading.BrokenBarrierError as e:
            results[r] = ("aborted", e)
        except BaseException as e:  # noqa: BLE001 - the fuzzer classifies it
            results[r] = ("error", e)
            ex.abort()

    threads = [threading.Thread(target=worker, args=(r,), daemon=True, name=f"fuzz-eager-{r}") for r in range(replicas)]
    for t in threads:
        t.start()
    # As the meetings: a replica hangs when the process used no CPU time for
    # timeout + 5 s while it ran (a deadlock), or after 10 x timeout in all.
    start = last = time.monotonic()
    cpu = _progress()
    while any(t.is_alive() for t in threads):
        next(t for t in threads if t.is_alive()).join(1.0)
        now, used = time.monotonic(), _progress()
        if used - cpu >= 0.01 * (now - last):
            last, cpu = now, used
        if now - last > timeout + 5 or now - start > 10 * timeout:
            break
    for r, t in enumerate(threads):
        if t.is_alive():
            ex.abort()
            results[r] = ("hang", _stuck_at(t))
    for r, x in enumerate(results):
        if x is not None and x[0] == "aborted" and ex.late:
            results[r] = ("aborted", ex.late)
    return results


def _stuck_at(t: threading.Thread, depth: int = 8) -> str:
    """Where thread ``t`` is now: its innermost ``depth`` frames, innermost
    first (what a hang's report names)."""
    frame = thread_frame(t.ident)  # the collector paused: sys._current_frames can deadlock 3.11 (gh-106883)
    if frame is None:
        return "(ended)"
    stack = traceback.extract_stack(frame)[-depth:]
    return " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(stack))


def run_eager(program: Program, replicas: int, cores: int, timeout: float = 30.0, fd: bool = False) -> Outcome:
    """Each replica's computation eagerly, on EagerTensors of its inputs."""
    src = program.source(Ctx("eager", replicas, cores, fd))
    ns = {"xtpu": xtpu, "np": np, "crs": crs, "rid": rid, "sync_bn": sync_bn, "_fd_site": _fd_site}
    fn = _exec(src, ns, "eager")
    inputs = program.input_values(replicas)

    def one(r):
        out = fn(*[xtpu.constant(a) for a in inputs[r]])
        return [np.array(v) for v in out]

    res = run_replicas(replicas, one, timeout)
    for r, x in enumerate(res):
        if x[0] == "error":
            return Outcome("error", error=x[1], replica=r)
    # a replica still running first (the others' meeting broke waiting for it)
    for r, x in sorted(enumerate(res), key=lambda rx: rx[1][0] != "hang"):
        if x[0] in ("hang", "aborted"):
            where = f" (stuck at {x[1]})" if x[0] == "hang" else f" (its meeting broke: {x[1]})"
            return Outcome("hang", error=TimeoutError(f"eager replica {r} did not finish{where}"), replica=r)
    return Outcome("ok", values=[x[1] for x in res], fd_sites=[x[2] for x in res])


@contextlib.contextmanager
def _timeout_env(timeout: float):
    old = os.environ.get("XTPU_TIMEOUT")
    os.environ["XTPU_TIMEOUT"] = str(timeout)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("XTPU_TIMEOUT", None)
        else:
            os.environ["XTPU_TIMEOUT"] = old


def device_assignment(replicas: int, cores: int):
    if cores == 1:
        return None
    return xtpu.DeviceAssignment.build(
        xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=replicas
    )


def _compiled_outcome(call: Callable[[], list]) -> Outcome:
    from xtpu.runtime.errors import RuntimeTimeoutError

    try:
        out = call()
    except RuntimeTimeoutError as e:
        return Outcome("hang", error=e)
    except Exception as e:  # noqa: BLE001 - classified by compare()
        return Outcome("error", error=e)
    return Outcome("ok", values=[[np.asarray(v) for v in rep] for rep in out])


def run_compiled(program: Program, replicas: int, cores: int, timeout: float = 30.0) -> Outcome:
    """``xtpu.replicate`` of the computation (``XTPU_TIMEOUT`` = ``timeout``)."""
    src = program.source(Ctx("compiled", replicas, cores))
    fn = _exec(src, {"xtpu": xtpu, "np": np}, "compiled")
    inputs = program.input_values(replicas)
    da = device_assignment(replicas, cores)
    with _timeout_env(timeout):
        return _compiled_outcome(lambda: xtpu.replicate(fn, inputs, device_assignment=da))


class RoundTripError(RuntimeError):
    """xtpu-run exited with status 1 (its message)."""


def xtpu_run(text: str, inputs: list[list[np.ndarray]], timeout: float) -> list[list[np.ndarray]]:
    """Run module ``text`` through ``xtpu-run``'s ``main`` (files in a
    temporary directory); the results per replica."""
    from xtpu.tools import run as run_tool

    with tempfile.TemporaryDirectory(prefix="xtpu-fuzz-") as d:
        path = os.path.join(d, "prog.mlir")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        argv = [path]
        for r, rep in enumerate(inputs):
            files = []
            for i, a in enumerate(rep):
                p = os.path.join(d, f"r{r}_i{i}.npy")
                np.save(p, a, allow_pickle=False)
                files.append(p)
            if files:
                argv += ["-i", ",".join(files)]
        out_path = os.path.join(d, "out.npz")
        argv += ["--timeout", str(timeout), "--save", out_path]
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = run_tool.main(argv)
        if rc != 0:
            raise RoundTripError(err.getvalue().strip())
        with np.load(out_path, allow_pickle=True) as data:
            keys = list(data.files)
            n = len(inputs)
            m = len(keys) // n if n else 0
            return [[data[f"replica{r}_output{j}"] for j in range(m)] for r in range(n)]


def run_roundtrip(
    program: Program, replicas: int, cores: int, which: str, timeout: float = 30.0, avoid=frozenset()
) -> Outcome:
    """The program through text: ``which`` is "lowered" (``lower().as_text()``
    run by xtpu-run, which lowers it), "compiled" (``compile().as_text()``
    run by xtpu-run) or "Compiled" (the ``Compiled`` object called)."""
    src = program.source(Ctx("compiled", replicas, cores))
    fn = _exec(src, {"xtpu": xtpu, "np": np}, "roundtrip")
    inputs = program.input_values(replicas)
    da = device_assignment(replicas, cores)

    def call():
        lowered = xtpu.lower(fn, inputs, device_assignment=da)
        if which == "lowered":
            return xtpu_run(lowered.as_text(), inputs, timeout)
        compiled = lowered.compile(timeout=timeout)
        if which == "compiled":
            return xtpu_run(compiled.as_text(), inputs, timeout)
        return [list(rep) for rep in compiled(inputs)]

    out = _compiled_outcome(call)
    if out.status == "error" and isinstance(out.error, RoundTripError) and "timed out" in str(out.error):
        out.status = "hang"
    return out


# --------------------------------------------------------------------------
# Comparing
# --------------------------------------------------------------------------

RTOL = {"float32": 1e-5, "float64": 1e-12}


_NEGATIVE_ZERO = re.compile(r"(?<![\d.])-(?=0(?:\.0*)?(?:e[+-]?\d+)?(?![\d.]))")


def _unsigned_zeros(s: Any) -> Any:
    """``s`` with the minus sign of every formatted zero ("-0", "-0.0") dropped."""
    return _NEGATIVE_ZERO.sub("", s) if isinstance(s, str) else s


def compare_values(want: np.ndarray, got: np.ndarray, nan_ok: bool = False, rtol: float = 0.0) -> str | None:
    """None when ``got`` equals ``want`` within the dtype's tolerance (or
    ``rtol``, when larger), else why not; ``nan_ok``: a NaN in ``got``
    matches anything."""
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape:
        return f"shape {want.shape} != {got.shape}"
    if want.dtype != got.dtype:
        return f"dtype {want.dtype} != {got.dtype}"
    if want.dtype.kind == "f":
        rtol = max(rtol, RTOL.get(want.dtype.name, 1e-5))
        if nan_ok:
            keep = ~np.isnan(got)
            want, got = want[keep], got[keep]
        wn, gn = np.isnan(want), np.isnan(got)
        if not np.array_equal(wn, gn):
            return f"NaN at different places: {want!r} vs {got!r}"
        wi, gi = np.isinf(want), np.isinf(got)
        if not np.array_equal(wi, gi) or not np.array_equal(want[wi], got[gi]):
            return f"infinities differ: {want!r} vs {got!r}"
        fin = ~(wn | wi)
        if fin.any():
            w, g = want[fin].astype(np.float64), got[fin].astype(np.float64)
            scale = max(1.0, float(np.max(np.abs(w))))
            if np.any(np.abs(w - g) > rtol * np.abs(w) + rtol * scale):
                return f"values differ: {want!r} vs {got!r}"
        return None
    if want.dtype == object:
        # a formatted zero's sign is not compared, as the float comparison
        # does not compare it: a cotangent of a branch not taken is -0.0
        # compiled (0 negated) where the eager tape's unconnected zero is +0.0
        same = want.shape == got.shape and all(
            _unsigned_zeros(a) == _unsigned_zeros(b) for a, b in zip(want.reshape(-1), got.reshape(-1))
        )
        return None if same else f"strings differ: {want!r} vs {got!r}"
    return None if np.array_equal(want, got) else f"values differ: {want!r} vs {got!r}"


USER_ERRORS = (TypeError, ValueError, IndexError, NotImplementedError, LookupError, RuntimeError)


@dataclass
class Failure:
    kind: str  # mismatch, crash, hang
    path: str  # what disagreed with the eager reference, e.g. "compiled R=8 cores=1"
    detail: str
    replicas: int = 1
    cores: int = 1

    @property
    def signature(self) -> str:
        """A failure's identity for grouping: kind, path kind, error type and
        the message with numbers and names blurred."""
        path = self.path.split(" ")[0]
        d = re.sub(r"\(at [^)]*\)", "", self.detail)
        d = re.sub(r"\S*xtpu-fuzz-\w+/\S*", "FILE", d)
        d = re.sub(r"array\(.*", "", d, flags=re.S)
        d = re.sub(r"[-+]?\d[\d.e+-]*", "N", d)
        d = re.sub(r"\b[vax]\d+\b|\b(true_fn|false_fn|cond|body|host_fn|loss_fn|tape)\d+\b", "V", d)
        d = re.sub(r"\s+", " ", d)
        # each side's outcome: "X raised Type: message..." or "X ran"
        parts = re.findall(r"(eager|compiled) (raised \w+: [^;]{0,60}|ran)", d)
        d = "; ".join(f"{who} {what}" for who, what in parts) if parts else d[:120]
        return f"{self.kind}|{path}|{d}"

    def __str__(self) -> str:
        return f"{self.kind} ({self.path}): {self.detail}"


def _err(e: BaseException) -> str:
    cause = e.__cause__
    s = f"{type(e).__name__}: {e}"
    if cause is not None and type(e).__name__ != type(cause).__name__:
        s += f" [cause {type(cause).__name__}]"
    return s[:2000]


def _message(e: BaseException) -> str:
    """What an error is about: its message up to the first colon (values
    and shapes after it are spelled differently eagerly and traced)."""
    return re.sub(r"\s*\(at [^)]*\)", "", str(e)).split(":")[0].strip()


def _same_error(eager: BaseException, other: BaseException) -> bool:
    """The same documented user error eagerly and compiled: same type and
    message (a host computation's error is compared by its cause)."""
    from xtpu.runtime.errors import HostComputeError

    if not isinstance(eager, USER_ERRORS):
        return False
    if isinstance(other, HostComputeError) and other.__cause__ is not None:
        other = other.__cause__
    return type(other) is type(eager) and _message(other) == _message(eager)


def compare(
    eager: Outcome,
    other: Outcome,
    path: str,
    replicas: int,
    cores: int,
    invalid: bool = False,
    nan_ok=(),
    rtol: float = 0.0,
) -> Failure | None:
    """The first disagreement of ``other`` with the eager reference; ``invalid``:
    the program breaks an op's rules on purpose (any user error is then
    agreement); ``nan_ok``: indices of outputs where a NaN matches anything;
    ``rtol``: a float tolerance for every output, when larger than its dtype's."""

    def fail(kind, detail):
        return Failure(kind, path, detail, replicas, cores)

    if eager.status == "hang":
        return fail("hang", f"eager: {_err(eager.error)}")
    if other.status == "hang":
        return fail("hang", _err(other.error))
    if eager.status == "error" and other.status == "error":
        if _same_error(eager.error, other.error):
            return None
        if invalid and isinstance(eager.error, USER_ERRORS) and isinstance(other.error, USER_ERRORS):
            return None  # tracing meets the broken op before running meets a value error
        return fail("crash", f"eager raised {_err(eager.error)}; compiled raised {_err(other.error)}")
    if eager.status == "error":
        return fail("crash", f"eager raised {_err(eager.error)} (replica {eager.replica}); compiled ran")
    if other.status == "error":
        return fail("crash", f"compiled raised {_err(other.error)}; eager ran")
    for r, (w, g) in enumerate(zip(eager.values, other.values)):
        if len(w) != len(g):
            return fail("mismatch", f"replica {r}: {len(w)} outputs eagerly, {len(g)} compiled")
        for j, (a, b) in enumerate(zip(w, g)):
            why = compare_values(a, b, j in nan_ok, rtol)
            if why is not None:
                return fail("mismatch", f"replica {r}, output {j}: {why} (eager vs compiled)")
    return None


def check_finite_differences(program: Program, eager: Outcome, replicas: int, timeout: float = 30.0) -> Failure | None:
    """Each recorded float64 gradient against central differences of the sum
    over replicas of its target (TF's gradient of cross_replica_sum makes the
    gradient on replica r that of the total)."""
    sites = eager.fd_sites or []
    if not sites or not sites[0]:
        return None
    for site in sorted(sites[0]):
        fn, _, n_wrt, _, has_crs = sites[0][site]
        args = [sites[r][site][1] for r in range(replicas)]
        grads = [sites[r][site][3] for r in range(replicas)]
        if not all(np.all(np.isfinite(a)) for rep in args for a in rep if a.dtype.kind == "f"):
            continue
        if not all(np.all(np.isfinite(g)) for rep in grads for g in rep):
            continue
        n_el = sum(args[0][i].size for i in range(n_wrt))
        if n_el == 0 or (has_crs and n_el * replicas > 48) or n_el > 64:
            continue
        if any(np.max(np.abs(a), initial=0) > 1e6 for rep in args for a in rep[:n_wrt]):
            continue  # central differences lose their digits

        def total(all_args, only=None):
            if has_crs:
                res = run_replicas(
                    replicas,
                    lambda r: np.sum(np.asarray(fn(*[xtpu.constant(a) for a in all_args[r]]), dtype=np.float64)),
                    timeout,
                )
                if any(x[0] != "ok" for x in res):
                    raise RuntimeError("finite differences: a replica failed")
                return sum(x[1] for x in res)
            _local.r = only
            with np.errstate(all="ignore"):
                return float(np.sum(np.asarray(fn(*[xtpu.constant(a) for a in all_args[only]]), dtype=np.float64)))

        try:
            base = total(args, 0) if not has_crs else total(args)
            for r in range(replicas):
                for i in range(n_wrt):
                    for idx in np.ndindex(args[r][i].shape):
                        fds = []
                        for eps in (1e-6, 1e-4):
                            h = eps * max(1.0, abs(float(args[r][i][idx])))
                            vals = []
                            for sgn in (1, -1):
                                moved = [list(rep) for rep in args]
                                a = moved[r][i].copy()
                                a[idx] += sgn * h
                                moved[r][i] = a
                                vals.append(total(moved, r))
                            fds.append((vals[0] - vals[1]) / (2 * h))
                        g = float(grads[r][i][idx])
                        tol = 1e-5 * max(1.0, abs(g), abs(fds[0])) + 1e-8 * max(1.0, abs(base))
                        if abs(fds[0] - fds[1]) <= tol and abs(g - fds[0]) > tol and abs(g - fds[1]) > tol:
                            return Failure(
                                "mismatch",
                                f"finite-differences R={replicas}",
                                f"replica {r}, gradient {i} at {idx}: tape {g!r}, central differences "
                                f"{fds[0]!r} (site {site})",
                                replicas,
                                1,
                            )
        except Exception:  # noqa: BLE001 - a failing evaluation is found elsewhere
            continue
        finally:
            _local.r = None
    return None


# --------------------------------------------------------------------------
# Checking a program
# --------------------------------------------------------------------------

CONFIGS = ((1, 1), (2, 1), (8, 1))


def split_replicas(program: Program) -> int:
    return (1, 2, 4)[program.value_seed % 3]


def configs_for(program: Program, split: bool = True) -> list[tuple[int, int]]:
    """(replicas, cores) to run: 1, 2 and 8 replicas, and 1, 2 or 4 replicas
    split over 2 cores."""
    out = list(CONFIGS)
    if split:
        out.append((split_replicas(program), 2))
    return out


def check_program(
    program: Program, configs=None, roundtrip: bool = False, fd: bool = True, timeout: float = 30.0, avoid=frozenset()
) -> Failure | None:
    """The first disagreement of ``program`` with its eager reference, or None.

    ``roundtrip``: also through the text round trip, for one of the configs
    (they take a lowering and two xtpu-run invocations each)."""
    configs = configs if configs is not None else configs_for(program)
    rt_config = configs[program.value_seed % len(configs)]
    fd_done = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for replicas, cores in configs:
            do_fd = fd and not fd_done and replicas >= 2 and cores == 1
            eager = run_eager(program, replicas, cores, timeout, fd=do_fd)
            comp = run_compiled(program, replicas, cores, timeout)
            invalid = "invalid" in program.features
            nan_ok = {j for j, name in enumerate(program.outputs) if name in program.lenient}
            f = compare(eager, comp, f"compiled R={replicas} cores={cores}", replicas, cores, invalid, nan_ok)
            if f is not None:
                return f
            if do_fd and eager.status == "ok":
                fd_done = True
                f = check_finite_differences(program, eager, replicas, timeout)
                if f is not None:
                    return f
            if roundtrip and comp.status == "ok" and (replicas, cores) == rt_config:
                for which in ("lowered", "compiled", "Compiled"):
                    if which == "Compiled" and cores != 1 and "compiled_logical_devices" in avoid:
                        continue
                    rt = run_roundtrip(program, replicas, cores, which, timeout, avoid)
                    f = compare(
                        eager, rt, f"roundtrip-{which} R={replicas} cores={cores}", replicas, cores, invalid, nan_ok
                    )
                    if f is not None:
                        return f
    return None


XLA_REPLICAS = 2
"""Replicas of the ``xla`` mode's runs (XLA's CPU client with 8 devices)."""


def run_xla(
    program: Program, replicas: int = XLA_REPLICAS, timeout: float = 30.0, disable_passes: str = ""
) -> tuple[Outcome, Outcome] | str:
    """The ``xla`` mode: the program compiled by xtpu, exported to StableHLO
    (``Compiled.as_text(dialect="stablehlo")``) and run by XLA's CPU client
    (test/python/xla_reference.py) with the same per-replica inputs; returns
    ``(xtpu's outcome, XLA's)``, or why it did not run: the program has no
    StableHLO form (the export's refusal), or xtpu does not compile or run
    it (the other modes compare those against eager)."""
    import xla_reference as X

    from xtpu import pytree
    from xtpu.passes.stablehlo_export import StableHLOExportError

    src = program.source(Ctx("compiled", replicas, 1))
    fn = _exec(src, {"xtpu": xtpu, "np": np}, "xla")
    inputs = program.input_values(replicas)
    try:
        with _timeout_env(timeout):
            compiled = xtpu.lower(fn, inputs).compile(timeout=timeout)
        text = compiled.as_text(dialect="stablehlo")
    except StableHLOExportError as e:
        return "no StableHLO form: " + re.sub(r" \(at [^)]*\)", "", str(e))[:90]
    except Exception:  # noqa: BLE001 - compiled errors are the compiled mode's to compare
        return "xtpu does not compile it"
    with _timeout_env(timeout):
        ours = _compiled_outcome(lambda: [pytree.flatten(list(rep))[0] for rep in compiled(inputs)])
    if ours.status != "ok":
        return "xtpu's run raised"
    flat = [[np.asarray(a) for a in pytree.flatten(list(rep))[0]] for rep in inputs]
    try:
        theirs = Outcome("ok", values=X.run(text, flat, disable_passes=disable_passes))
    except Exception as e:  # noqa: BLE001 - XLA rejected or failed: a crash to report
        theirs = Outcome("error", error=e)
    return ours, theirs


def check_xla(program: Program, timeout: float = 30.0) -> Failure | None:
    """XLA's values of the exported program against xtpu's runtime, or None
    when they agree (within compare_values's tolerances) or the program has
    no StableHLO form.  Where StableHLO leaves a result to the
    implementation (float to int of NaN or out of range, integer division
    by zero) the export writes xtpu's choice out, so XLA must agree there too.

    XLA's float32 transcendentals are within a few ulps of numpy's; a
    float64 output computed from float32 values (a cast) carries those
    ulps, so every float output is compared within the tolerance of the
    least precise float type among the program's inputs and outputs (the
    fuzzer's program 631 of seed 0: ``cast(log(x), float64)``, XLA's float32
    log 1 ulp from numpy's)."""
    got = run_xla(program, XLA_REPLICAS, timeout)
    if isinstance(got, str):
        return None
    ours, theirs = got
    nan_ok = {j for j, name in enumerate(program.outputs) if name in program.lenient}
    values = [np.asarray(a) for rep in ours.values for a in rep]
    values += [np.asarray(a) for rep in program.input_values(XLA_REPLICAS) for a in xtpu.pytree.flatten(list(rep))[0]]
    rtol = max([RTOL.get(v.dtype.name, 1e-5) for v in values if v.dtype.kind == "f"], default=0.0)
    f = compare(ours, theirs, f"xla R={XLA_REPLICAS}", XLA_REPLICAS, 1, False, nan_ok, rtol)
    if f is not None and f.kind == "mismatch":
        again = run_xla(program, XLA_REPLICAS, timeout, disable_passes="algsimp")
        if not isinstance(again, str) and compare(*again, "xla", XLA_REPLICAS, 1, False, nan_ok, rtol) is None:
            f.detail += " [XLA without algsimp agrees with xtpu]"
    if f is not None and f.kind == "crash":
        f.detail = f.detail.replace("compiled raised", "XLA raised").replace("eager", "xtpu")
    return f


def classify_known(failure: Failure, program: Program | None = None) -> str | None:
    """The known defect (:data:`DEFECTS`) a failure is, if any."""
    d = failure.detail
    feats = program.features if program is not None else set()
    if d.endswith("[XLA without algsimp agrees with xtpu]"):
        return "xla_algsimp"
    if "zero-size array to reduction" in d or ("zero_size_reduction" in feats and "zero-size" in d):
        return "zero_size_reduction"
    if "is a Python value; watch" in d:
        return "eager_0d_watch"
    if "cannot watch a numpy ndarray" in d:
        return "eager_identity_ndarray"
    if "cannot run on the device; run tpu-mark-outside-compilation" in d and "roundtrip-lowered" in failure.path:
        return "xtpu_run_region_host_op"
    if (
        "roundtrip-compiled" in failure.path
        and failure.cores == 2
        and "'tpu.replicate' op" in d
        and "but the body" in d
    ):
        return "xtpu_run_relowers"
    if "returns a string value" in d and "to the device computation" in d:
        return "string_output_of_body_cluster"
    if "a string, which never travels through the device" in d or "does not run exactly once before each run of" in d:
        return "string_into_region"
    if "OverflowError" in d and "out of bounds for int" in d:
        return "to_number_overflow"
    if failure.kind == "mismatch" and "NaN at different places" in d and "gradient_through_control_flow" in feats:
        return "region_capture_zero_cotangent_nan"
    if "ZeroDivisionError" in d and failure.cores == 2:
        return "spmd_zero_size_reshape"
    if "inputs do not match the compiled program" in d and failure.cores == 2:
        return "compiled_logical_devices"
    if "numpy_scalar" in feats and (
        "must have the same dtype" in d or "dtype float64 != float32" in d or "dtype int64 != int32" in d
    ):
        return "numpy_scalar"
    if "getitem_int_none" in feats and (failure.kind == "mismatch" and "shape" in d or "compiled raised" in d):
        return "getitem_int_none"  # the traced shape differs, and so may every op after it
    return None


# --------------------------------------------------------------------------
# Minimizing and reproducing
# --------------------------------------------------------------------------


def minimize(
    choices: list[int], fails: Callable[[list[int]], bool], max_evals: int = 400, deadline: float | None = None
) -> list[int]:
    """Shrink a choice sequence while ``fails`` holds: delete runs of choices,
    then lower each towards 0 (hypothesis's shrinker, in small)."""
    best = list(choices)
    evals = 0

    def attempt(cand):
        nonlocal evals, best
        if evals >= max_evals or (deadline is not None and time.monotonic() > deadline):
            return False
        evals += 1
        try:
            ok = fails(cand)
        except Exception:  # noqa: BLE001 - a candidate that breaks the harness is no reproducer
            ok = False
        if ok:
            best = cand
        return ok

    # the shortest failing prefix (past its end the replay answers 0: every
    # block ends), by doubling then bisecting
    k = 1
    while k < len(best) and not attempt(best[:k]):
        k *= 2
    lo, hi = k // 2, min(k, len(best))
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if attempt(best[:mid]):
            hi = mid
        else:
            lo = mid
    improved = True
    while improved and evals < max_evals:
        improved = False
        for size in (32, 16, 8, 4, 2, 1):
            i = 0
            while i < len(best):
                if attempt(best[:i] + best[i + size :]):
                    improved = True
                else:
                    i += size
        for i in range(len(best)):
            for v in (0, best[i] // 2, best[i] - 1) if i < len(best) else ():
                if 0 <= v < best[i] and attempt(best[:i] + [v] + best[i + 1 :]):
                    improved = True
                    break
    return best


def minimize_program(
    program: Program, fails: Callable[[Program], bool], max_evals: int = 400, deadline: float | None = None
) -> Program:
    """Shrink a program's text while ``fails`` holds: drop outputs, then runs
    of lines, halving the run length (C-Reduce's line pass over the
    program's lines; a candidate that no longer parses or names a value it
    dropped fails differently, and ``fails`` rejects it)."""
    import dataclasses

    best = program
    evals = 0

    def attempt(lines, outputs):
        nonlocal evals, best
        if evals >= max_evals or (deadline is not None and time.monotonic() > deadline):
            return False
        evals += 1
        cand = dataclasses.replace(best, lines=list(lines), outputs=list(outputs))
        try:
            ok = fails(cand)
        except Exception:  # noqa: BLE001 - a broken candidate is no reproducer
            ok = False
        if ok:
            best = cand
        return ok

    i = 0
    while len(best.outputs) > 1 and i < len(best.outputs):
        if not attempt(best.lines, best.outputs[:i] + best.outputs[i + 1 :]):
            i += 1
    improved = True
    while improved and evals < max_evals:
        improved = False
        size = max(1, len(best.lines) // 2)
        while size >= 1:
            i = 0
            while i < len(best.lines):
                if attempt(best.lines[:i] + best.lines[i + size :], best.outputs):
                    improved = True
                else:
                    i += size
            size //= 2
    return best


def _array_text(a: np.ndarray) -> str:
    if a.size == 0:
        return f"np.zeros({a.shape}, dtype=np.{a.dtype.name})"
    if a.dtype == object:
        return f"np.array({a.tolist()!r}, dtype=object)"
    vals = a.tolist()

    def fmt(v):
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        if isinstance(v, float):
            return _float_text(v)
        return repr(v)

    return f"np.array({fmt(vals)}, dtype=np.{a.dtype.name})"


def reproducer(
    program: Program, failure: Failure | None = None, replicas: int | None = None, cores: int | None = None
) -> str:
    """The program as a Python script that runs it compiled and eagerly."""
    replicas = replicas or (failure.replicas if failure else 1)
    cores = cores or (failure.cores if failure else 1)
    src_c = program.source(Ctx("compiled", replicas, cores))
    src_e = program.source(Ctx("eager", replicas, cores))
    needs_emulation = "crs(" in src_e or "sync_bn(" in src_e or (replicas > 1 and "rid()" in src_e)
    out = ["import numpy as np", "import xtpu", ""]
    if failure is not None:
        out += [f"# fuzz failure: {failure.kind} ({failure.path})"]
        out += ["# " + line for line in failure.detail[:1500].splitlines()]
        out += [""]
    out += [src_c.rstrip(), ""]
    inputs = program.input_values(replicas)
    out.append("inputs = [")
    for rep in inputs:
        out.append("    [" + ", ".join(_array_text(a) for a in rep) + "],")
    out.append("]")
    if cores == 2:
        out.append(
            "da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), "
            f"computation_shape=[1, 1, 1, 2], num_replicas={replicas})"
        )
        out.append("compiled = xtpu.replicate(computation, inputs, device_assignment=da)")
    else:
        out.append("compiled = xtpu.replicate(computation, inputs)")
    if src_e.replace("rid()", "xtpu.replica_id()") != src_c and not needs_emulation:
        out += [
            "",
            "# eagerly the same computation with xtpu.GradientTape in place of xtpu.gradients:",
            src_e.replace("def computation(", "def eager_computation(").replace("rid()", "xtpu.replica_id()").rstrip(),
        ]
        fn = "eager_computation"
    else:
        fn = "computation"
    if needs_emulation:
        out += [
            "# eagerly: each replica's computation with cross_replica_sum / replica_id emulated",
            "# across replicas (test/python/fuzz_programs.run_eager)",
        ]
    else:
        out.append(f"eager = [{fn}(*[xtpu.constant(a) for a in rep]) for rep in inputs]")
    out.append("print(compiled)")
    if not needs_emulation:
        out.append("print(eager)")
    return "\n".join(out) + "\n"
