"""One kernel per ``fusion.region``: generated numpy code writing into
buffers the kernel keeps.

The body's ops run in order, each through its own kernel (its
``PrimitiveOp.kernel``), so the results are the unfused ops' bits.  What
fusion changes is where the values go: a value used only inside the region
(an intermediate) of more than 64 KB is written through its op's ``out_kernel`` (the same
ufunc with ``out=``, ``np.copyto`` for a select or a convert, ``np.matmul``
with ``out=``) into a buffer the kernel keeps from call to call (one set
per thread: replicas run the same kernel on several threads; the regions a
thread runs share its arrays of each shape and dtype, :class:`_Shared`);
buffers are assigned by liveness over the body (runtime/buffers.py), so a
later value of the same shape and dtype reuses one once every value that
may share its memory is dead.  Ops without an ``out_kernel`` (broadcasts, reductions,
``hlo.logistic``, integer division, every arithmetic op on bfloat16 /
float16, whose kernel computes in float32 and rounds once per op as XLA
does) call their kernel as the unfused program does.  The region's results
are new arrays, or written into the arrays the caller passes as ``_outs``
(the plan's buffers, runtime/plan.py).  So a chain of elementwise ops
allocates no temporaries after its first call, and takes no page faults for
them.  One pair of ops runs as one kernel: a float32 value converted to
bfloat16 and back whose bfloat16 value nothing else reads (a mixed-precision
gradient rounded to the variable's compute dtype and widened for the
update) is one :func:`xtpu.dialects.bfloat16.round_trip`, the two converts'
bits in one pass.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.ir import Operation, SSAValue

from xtpu.dialects import bfloat16 as B16
from xtpu.dialects import intra_op
from xtpu.dialects.by_identity import memo
from xtpu.dialects.fusion import FusionRegionOp
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype
from xtpu.runtime import codegen
from xtpu.runtime.buffers import assign, kept_array
from xtpu.runtime.fusion_split import Cut, cut_of, heavy_elements, made_elements

__all__ = ["fused_kernel", "inner_op", "value_key", "writes_results"]


class _Lines:
    """The body op of each line of a fused kernel's code."""

    def __init__(self, ops: dict[int, Operation]):
        self.ops = ops


class _Shared(threading.local):
    """Each thread's scratch arrays by ``(shape, dtype)``, held weakly: a
    fused kernel's ``k``-th buffer of a key is the thread's ``k``-th array
    of that key while any kernel holds it.  A region's intermediates never
    outlive its call and a thread runs one kernel at a time, so the regions
    of a step take turns on the same few arrays, which stay in the caches;
    arrays of their own per region spread a step's intermediates over as
    many cold buffers as it has regions."""

    def __init__(self) -> None:
        self.arrays: dict[tuple[tuple[int, ...], Any], list[weakref.ref]] = {}


_SHARED = _Shared()


def _shared_arrays(keys: Sequence[tuple[tuple[int, ...], Any]]) -> list[np.ndarray]:
    """The calling thread's arrays for ``keys`` (:class:`_Shared`), made
    where no live one is left."""
    registry = _SHARED.arrays
    rank: dict[Any, int] = {}
    out = []
    for key in keys:
        k = rank[key] = rank.get(key, -1) + 1
        refs = registry.setdefault(key, [])
        a = refs[k]() if k < len(refs) else None
        if a is None:
            a = kept_array(*key)
            if k < len(refs):
                refs[k] = weakref.ref(a)
            else:
                refs.append(weakref.ref(a))
        out.append(a)
    return out


class _Kept(threading.local):
    """A fused kernel's buffers, one set per thread, taken on the thread's
    first call from the arrays its other kernels use (:class:`_Shared`):
    the thread that compiles a program, which seldom runs its kernels,
    maps none."""

    def __init__(self, shapes: Sequence[tuple[tuple[int, ...], Any]]) -> None:
        self.shapes = shapes

    def __getattr__(self, name: str) -> Any:
        # Only a thread's first read of ``buffers`` gets here; later reads
        # find the attribute.
        if name != "buffers":
            raise AttributeError(name)
        self.buffers = _shared_arrays(self.shapes)
        return self.buffers


def inner_op(frame_or_tb: Any) -> Operation | None:
    """The body op a traceback entry (or frame) of a fused kernel was
    running, None when it is not a fused kernel's: the executor names that
    op, not the region, when a kernel fails."""
    frame = getattr(frame_or_tb, "tb_frame", frame_or_tb)
    lineno = getattr(frame_or_tb, "tb_lineno", None) or frame.f_lineno
    lines = codegen.owner(frame)
    return lines.ops.get(lineno) if isinstance(lines, _Lines) else None


def value_key(v: SSAValue) -> tuple[tuple[int, ...], Any] | None:
    """``(shape, numpy dtype)`` of a value of static shape, else None."""
    return memo(_VALUE_KEYS, v.type, _type_key)


def _type_key(t: Any) -> tuple[tuple[int, ...], Any] | None:
    try:
        spec = TensorSpec.of_type(t)
    except (ValueError, TypeError):
        return None
    if any(d < 0 for d in spec.shape) or spec.dtype == "string":
        return None
    return tuple(spec.shape), numpy_dtype(spec.dtype)


_VALUE_KEYS: dict[int, tuple[Any, tuple[tuple[int, ...], Any] | None]] = {}
""":func:`value_key` per type object: a program's values share a few type
objects."""


def _out_kernel(o: Operation) -> Callable[..., Any] | None:
    return type(o).out_kernel(**o.params()) if isinstance(o, PrimitiveOp) else None


def _round_trip_into(out: np.ndarray, x: np.ndarray) -> np.ndarray:
    return B16.round_trip(x, out=out)


def _in_place(o: Operation, pairs: dict) -> bool:
    """Whether ``o`` may write over its operand (a round trip may not: its
    one pass would not vectorise)."""
    return False if o in pairs else type(o).OUT_IN_PLACE


def writes_results(op: FusionRegionOp) -> list[bool]:
    """For each result of ``op``: whether its fused kernel can write it into
    a given array (``fused(*xs, _outs=...)``): its body op has an
    ``out_kernel``."""
    term = op.body.block.last_op
    return [isinstance(v.owner, Operation) and _out_kernel(v.owner) is not None for v in term.operands]


@dataclass(frozen=True)
class _Recipe:
    """What a region's kernel is made of, the same for every region of one
    form (:func:`_form`): the source, the positions (in the body) of the ops
    it runs, which of them run as a bfloat16 round trip, the kept buffers'
    keys and the body op of each line."""

    source: str
    runs: tuple[int, ...]
    round_trips: frozenset[int]
    writes: tuple[bool, ...]
    buffer_keys: tuple[tuple[tuple[int, ...], Any], ...]
    line_op: dict[int, int]


#: Recipes by form, for the regions of every program this process compiles
#: (compiling a program again, or one whose layers repeat, finds its
#: regions' recipes here).  Emptied when full.
_RECIPES: dict[tuple, _Recipe] = {}


def _form(ops: list[Operation], yielded: list[SSAValue], args: Sequence[SSAValue]) -> tuple | None:
    """A region body's form, by value: per op its class, parameters, operands
    (by position) and result shapes and dtypes, then the yielded values;
    None when a parameter is not hashable."""
    where: dict[SSAValue, tuple[int, int]] = {a: (-1, n) for n, a in enumerate(args)}
    parts: list[Any] = [tuple(value_key(a) for a in args)]
    for i, o in enumerate(ops):
        params = o.params() if isinstance(o, PrimitiveOp) else {}
        parts.append(
            (
                type(o),
                tuple(params.items()),
                tuple(where[v] for v in o.operands),
                tuple(value_key(r) for r in o.results),
            )
        )
        for k, r in enumerate(o.results):
            where[r] = (i, k)
    parts.append(tuple(where[v] for v in yielded))
    form = tuple(parts)
    try:
        hash(form)
    except TypeError:
        return None
    return form


def _recipe(
    ops: list[Operation],
    yielded: list[SSAValue],
    args: Sequence[SSAValue],
    key_of: Callable[[SSAValue], tuple[tuple[int, ...], Any] | None] = value_key,
) -> _Recipe:
    """The kernel of a body (:func:`fused_kernel`), worked out; ``key_of``
    gives each value's ``(shape, dtype)`` (a piece's: :meth:`_Pieces._make`)."""
    position = {o: i for i, o in enumerate(ops)}
    # float32 -> bfloat16 -> float32 with nothing else reading the bfloat16
    # value: one pass of the second convert on the first's operand.
    pairs = B16.round_trip_pairs(ops, set(yielded))
    widened = set(pairs.values())  # the first converts: they run inside their pair's pass
    ops = [o for o in ops if o not in widened]
    operands = {o: [pairs[o].operands[0]] if o in pairs else list(o.operands) for o in ops}
    for o in ops:
        if not isinstance(o, PrimitiveOp):
            raise NotImplementedError(f"the runtime cannot execute '{o.name}' in a fusion.region")
    outk = [_round_trip_into if o in pairs else _out_kernel(o) for o in ops]
    steps = [
        (operands[o], list(o.results), [key_of(r) for r in o.results], k is not None, _in_place(o, pairs))
        for o, k in zip(ops, outk)
    ]
    slots = assign(steps, set(yielded))  # values of 64 KB or less: the kernel itself

    names: dict[SSAValue, str] = {a: f"a{n}" for n, a in enumerate(args)}
    yield_pos = {v: k for k, v in enumerate(yielded)}
    lines: list[str] = []
    line_op: dict[int, int] = {}
    for i, o in enumerate(ops):
        r = o.results[0]
        arg_text = ", ".join(names[a] for a in operands[o])
        name = names[r] = f"v{i}"
        s = slots.slot_of.get(r)
        line_op[len(lines) + 1] = position[o]  # + the head's lines, below
        if s is not None:
            lines.append(f"    {name} = o{i}(b{s}, {arg_text})")
        elif outk[i] is not None and r in yield_pos:
            k = yield_pos[r]
            lines.append(
                f"    {name} = k{i}({arg_text}) if _outs is None or _outs[{k}] is None else o{i}(_outs[{k}], {arg_text})"
            )
        else:
            lines.append(f"    {name} = k{i}({arg_text})")
    rets = [names[v] for v in yielded]
    head = [f"def fused({''.join(names[a] + ', ' for a in args)}_outs=None):"]
    if len(slots):
        head.append("    " + "".join(f"b{s}, " for s in range(len(slots))) + "= _kept.buffers")
    body = head + lines
    body.append(
        "    return None"
        if not rets
        else f"    return {rets[0]}"
        if len(rets) == 1
        else f"    return ({', '.join(rets)},)"
    )
    return _Recipe(
        source="\n".join(body) + "\n",
        runs=tuple(position[o] for o in ops),
        round_trips=frozenset(position[o] for o in pairs),
        writes=tuple(k is not None for k in outk),
        buffer_keys=tuple(slots.keys),
        line_op={n + len(head): p for n, p in line_op.items()},
    )


def _cached_recipe(form: tuple | None, make: Callable[[], _Recipe]) -> _Recipe:
    recipe = _RECIPES.get(form) if form is not None else None
    if recipe is None:
        recipe = make()
        if form is not None:
            if len(_RECIPES) >= 1024:
                _RECIPES.clear()
            _RECIPES[form] = recipe
    return recipe


def _define(ops: list[Operation], recipe: _Recipe, kernel_of: Callable[[Operation], Any]) -> Callable[..., Any]:
    """The function of ``recipe`` for the body ``ops``, each op's kernel
    given by ``kernel_of``."""
    namespace: dict[str, Any] = {}
    for i, p in enumerate(recipe.runs):
        o = ops[p]
        if p in recipe.round_trips:
            namespace[f"k{i}"] = B16.round_trip
            namespace[f"o{i}"] = _round_trip_into
            continue
        namespace[f"k{i}"] = kernel_of(o)
        if recipe.writes[i]:
            namespace[f"o{i}"] = _out_kernel(o)
    namespace.update(_kept=_Kept(recipe.buffer_keys))
    by_line = _Lines({n: ops[p] for n, p in recipe.line_op.items()})
    fused = codegen.define(recipe.source, "fusion", "fused", namespace, by_line)
    fused.source = recipe.source
    return fused


def _own_kernel(o: Operation) -> Any:
    return type(o).kernel(**o.params())


#: A region whose heavy ops (:func:`~xtpu.runtime.fusion_split.heavy_elements`:
#: transcendental functions) make at least this many elements in all (about
#: 0.4 ms of ``tanh`` on this machine) runs in pieces over the intra-op
#: threads when :func:`xtpu.dialects.intra_op.parts` is above 1 (a program
#: with large matmuls run by one device worker, runtime/blas_budget.py):
#: handing a piece to a pool thread and waiting for it took 64 us here.
MIN_SPLIT_ELEMENTS = 1 << 17

#: ... and so does a region whose ops make at least this many elements in
#: all, heavy or not (8 MB of float32 values: more than the caches keep
#: between the ops of a step).  The R = 1 transformer block step, in one
#: process, alternating: 75.1 / 71.7 ms without, 72.2 / 66.3 ms with (1M
#: and 4M elements measured alike).
MIN_SPLIT_MADE = 1 << 21


def fused_kernel(op: FusionRegionOp, kernel_of: Callable[[Operation], Any] | None = None) -> Callable[..., Any]:
    """The kernel of ``op``: takes the region's operands, returns its result
    (a tuple of them when there are several); ``kernel_of(inner)`` gives an
    inner op's kernel (default: its ``PrimitiveOp.kernel``).  Called with
    ``_outs`` (one array or None per result), it writes the results it can
    (:func:`writes_results`) into those arrays.  Regions of one form share
    the work of making their kernels' code (:data:`_RECIPES`).  A large
    region that can be cut along its leading dimension
    (runtime/fusion_split.py) runs in row pieces over the intra-op threads
    while :func:`xtpu.dialects.intra_op.parts` is above 1, with the same
    bits (:class:`_Pieces`)."""
    block = op.body.block
    ops = [o for o in block.ops if o is not block.last_op]
    yielded = list(block.last_op.operands)
    form = _form(ops, yielded, block.args)
    recipe = _cached_recipe(form, lambda: _recipe(ops, yielded, block.args))
    fused = _define(ops, recipe, kernel_of or _own_kernel)
    if kernel_of is not None or not ops:
        return fused
    if heavy_elements(ops) < MIN_SPLIT_ELEMENTS and made_elements(ops) < MIN_SPLIT_MADE:
        return fused
    cut = cut_of(ops, block.args)
    if cut is None or cut.extent < 2:
        return fused
    return _Pieces(op, ops, yielded, form, cut, fused).run


class _Pieces:
    """A region's kernel run in row pieces (runtime/fusion_split.py): each
    piece is the region's code for its rows (:func:`_recipe` of the piece's
    shapes, made at the first call that splits), run on an intra-op thread
    with that thread's buffers, writing its rows of the results."""

    def __init__(
        self,
        op: FusionRegionOp,
        ops: list[Operation],
        yielded: list[SSAValue],
        form: tuple | None,
        cut: Cut,
        whole: Callable[..., Any],
    ) -> None:
        self.ops, self.yielded, self.form, self.cut, self.whole = ops, yielded, form, cut, whole
        self.args = list(op.body.block.args)
        self.cut_args = [a in cut.args for a in self.args]
        self.results = [value_key(r) for r in op.results]
        self.kernels: dict[int, Callable[..., Any]] = {}
        self.lock = threading.Lock()

    def kernel(self, rows: int) -> Callable[..., Any]:
        """The region's code for ``rows`` rows of the cut dimension."""
        k = self.kernels.get(rows)
        if k is None:
            with self.lock:
                k = self.kernels.get(rows)
                if k is None:
                    k = self.kernels[rows] = self._make(rows)
        return k

    def _make(self, rows: int) -> Callable[..., Any]:
        cut = self.cut

        def key_of(v: SSAValue) -> tuple[tuple[int, ...], Any] | None:
            key = value_key(v)
            if key is None or (v not in cut.values and v not in cut.args):
                return key
            return (rows, *key[0][1:]), key[1]

        def kernel_of(o: Operation) -> Any:
            params = o.params()
            if "shape" in params:  # a broadcast makes its piece's rows
                params["shape"] = (rows, *tuple(params["shape"])[1:])
            return type(o).kernel(**params)

        form = None if self.form is None else (self.form, "rows", rows)
        recipe = _cached_recipe(form, lambda: _recipe(self.ops, self.yielded, self.args, key_of))
        return _define(self.ops, recipe, kernel_of)

    def run(self, *xs: Any, _outs: Sequence[Any] | None = None) -> Any:
        n = intra_op.parts()
        if n < 2:
            return self.whole(*xs, _outs=_outs)
        outs = [
            (_outs[k] if _outs is not None and _outs[k] is not None else np.empty(*key))
            for k, key in enumerate(self.results)
        ]
        xs = [np.asarray(x) if c else x for x, c in zip(xs, self.cut_args)]

        def piece(s: slice) -> None:
            rows = [o[s] for o in outs]
            got = self.kernel(s.stop - s.start)(*(x[s] if c else x for x, c in zip(xs, self.cut_args)), _outs=rows)
            for r, g in zip(rows, (got,) if len(rows) == 1 else got):
                if g is not r:  # a result its op makes anew (a reduction's)
                    np.copyto(r, g)

        intra_op.run_pieces(piece, [(s,) for s in intra_op.slices(self.cut.extent, n)])
        return outs[0] if len(outs) == 1 else tuple(outs)
