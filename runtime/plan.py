"""Execution plans: a block of IR turned once into a Python function.

The executor does not interpret IR op by op.  :class:`Plan` resolves every op
of a block to a kernel once and generates straight-line Python that calls the
kernels on local variables (one line per op), so a run costs a function call
per op and nothing else.  Constants are computed at plan time and read where
they are used (no line of their own).  When a kernel
raises, the traceback's line number in the generated code tells which op
failed, at no cost on the normal path.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.ir import Block, Operation, SSAValue
from xdsl.traits import IsTerminator, Pure

from xtpu.dialects.fusion import FusionRegionOp
from xtpu.dialects.hlo import ConstantOp, IotaOp
from xtpu.dialects.hlo_host import StringConstantOp
from xtpu.dialects.ir_walk import isa
from xtpu.dialects.locations import format_location
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype
from xtpu.runtime import codegen
from xtpu.runtime import profiler as _profiler
from xtpu.runtime.buffers import Buffers, Slots, assign
from xtpu.runtime.channels import ChannelClosed
from xtpu.runtime.errors import Aborted, HostComputeError, ReplicasDiverged, XtpuRuntimeError
from xtpu.runtime.fusion import fused_kernel, value_key, writes_results
from xtpu.runtime.fusion import inner_op as fused_inner_op

CONSTANT_OPS = (ConstantOp, StringConstantOp, IotaOp)
#: Largest result a plan folds from constants (:meth:`Plan._fold`), bytes.
FOLD_BYTES = 1 << 24
#: A region op's kernel -> the ``(run, K)`` of its regions' plans.
REGION_RUNNERS: weakref.WeakKeyDictionary[Callable[..., Any], list] = weakref.WeakKeyDictionary()
_UNSET = object()
_REGION_OUTS = object()

KernelFactory = Callable[[Operation], Callable[..., Any]]


def _into_operand(out_kernel: Callable[..., Any], k: int) -> Callable[..., Any]:
    """``out_kernel`` writing over its operand ``k`` (an array the plan made
    that nothing reads later, runtime/buffers.py)."""

    def into(*xs):
        return out_kernel(xs[k], *xs)

    return into


def form_key(op: Operation) -> tuple:
    """What an op's kernel (or a constant's value) depends on: its class and
    the identities of its properties, attributes and operand and result
    types.  Attributes are immutable and tracing shares equal ones, so ops
    with one key have one kernel; the identities hold while the module is
    alive (a plan or an executable being built).  An op with regions (a
    ``fusion.region``) is its own form: its kernel depends on its body,
    which no attribute names."""
    return (
        type(op),
        tuple(map(id, op.properties.values())),
        tuple(map(id, op.attributes.values())),
        tuple(map(id, op.result_types)),
        tuple(id(v.type) for v in op.operands),
        id(op) if op.regions else None,
    )


def pure_kernel(op: Operation) -> Callable[..., Any]:
    """The numpy kernel of an op from its one definition (PrimitiveOp.kernel)."""
    if isa(op, FusionRegionOp):
        return fused_kernel(op)
    if not isa(op, PrimitiveOp):
        raise NotImplementedError(f"the runtime cannot execute '{op.name}'")
    return type(op).kernel(**op.params())


class Plan:
    """A block compiled to a Python function ``run(args, K) -> tuple``.

    ``args`` are the block's arguments; ``K`` is a tuple with one entry per op
    (its kernel, or its value for constants) built by :meth:`kernels`, so that
    several workers (replicas) share one plan with their own kernels.  The
    block's terminator (``func.return`` / ``tpu.yield``) gives the results.

    Given ``together`` (a predicate), the function runs the block for
    ``replicas = m`` replicas in one thread: the ops between two together
    ops (a segment) for replica 0, then for replica 1, ... (see
    :meth:`_emit_segments`); each argument, value and result is a sequence
    of the ``m`` replicas' values, and ``K[i]`` the tuple of the replicas' kernels of op
    ``i`` (of its value, for a constant).  An op for which ``together(op)``
    is true (a collective), or a region op whose regions hold one, is one
    call for all replicas: ``K[i]`` takes the operands' sequences and
    returns its result's sequence (for several results, one sequence each).

    Given ``keeps_operands`` (a predicate: the op's kernel may hold its
    operands past its return, as a collective or a host transfer does), the
    plan assigns buffers (runtime/buffers.py): each value an op can write
    into a given array gets one by liveness, and :meth:`kernels` binds each
    worker's own arrays, kept from call to call; the values the block gives
    back stay fresh.

    Attributes:
      ops: the non-terminator ops, in order; ``ops[i]`` uses ``K[i]``.
      replicas: ``m``.
      slots: the buffer assignment (empty without ``keeps_operands``).
    """

    def __init__(
        self,
        block: Block,
        name: str = "plan",
        captures: Sequence[SSAValue] = (),
        replicas: int = 1,
        together: Callable[[Operation], bool] | None = None,
        keeps_operands: Callable[[Operation], bool] | None = None,
    ):
        self.block = block
        self.name = name
        self.replicas = m = int(replicas)
        self._constants: dict[int, Any] = {}
        self._decoded: dict[tuple, Any] = {}  # a constant's attributes (by identity) -> its value
        ops = list(block.ops)
        term = ops[-1] if ops and ops[-1].has_trait(IsTerminator) else None
        self.terminator = term
        self.ops: list[Operation] = [o for o in ops if o is not term]
        self.captures = list(captures)
        #: Each value a sequence of the m replicas' values (given together).
        self.sequences = together is not None
        self._leaf_together = (lambda op: False) if together is None else together
        # Region ops (hlo.if, hlo.while): one sub-plan per region, closed
        # over the values the regions use from outside the op.
        self.regions: dict[int, tuple[list[Plan], list[SSAValue]]] = {}
        names: dict[SSAValue, str] = {}
        constant_of: dict[SSAValue, int] = {}  # a constant value -> its op's index
        inputs = list(block.args) + self.captures
        for i, a in enumerate(inputs):
            names[a] = f"a{i}"
        # Kernels are read as K[i], not unpacked into locals: a frame of a
        # local and a stack slot per op (a 1,400-op plan's frame is 17 KB)
        # fills CPython's 16 KB frame-stack chunks, and a kernel called from
        # a frame that ends near a chunk's end pushes a new chunk and frees
        # it on return: an mmap and a munmap per kernel call (the mixed
        # transformer example took 800 a step).
        lines = [f"def {_ident(name)}(args, K):"]
        if inputs:
            lines.append("    " + ", ".join(names[a] for a in inputs) + (", = args" if len(inputs) == 1 else " = args"))
        self._line_of_op: dict[int, int] = {}
        entries: list[tuple[int, list[str], list[str], bool]] = []  # sequences: (op, outs, args, together)
        vid = 0
        for i, op in enumerate(self.ops):
            operands = list(op.operands)
            together_op = self._runs_together(op)
            if op.regions and hasattr(type(op), "region_kernel"):
                caps = free_values(op)
                # A region op holding a together op runs together too, its
                # regions' plans for all m replicas.
                subs = [
                    Plan(
                        r.block,
                        f"{name}_{i}_{j}",
                        caps,
                        replicas=m if together_op else 1,
                        together=together if together_op else None,
                    )
                    for j, r in enumerate(op.regions)
                ]
                self.regions[i] = (subs, caps)
                operands += caps
            for operand in operands:
                if operand not in names:
                    raise ValueError(
                        f"'{op.name}' uses a value defined outside its block; "
                        "the runtime runs blocks that are closed over their arguments"
                    )
            if isa(op, CONSTANT_OPS) and len(op.results) == 1:
                # Its value is K[i]: uses read it, no line of its own.
                names[op.results[0]] = f"K[{i}]"
                constant_of[op.results[0]] = i
                continue
            if not op.regions and self._fold(i, op, constant_of):
                # A pure op of constants (a broadcast constant, say) is a
                # constant too: evaluated once here, no line of its own.
                names[op.results[0]] = f"K[{i}]"
                constant_of[op.results[0]] = i
                continue
            outs = []
            for r in op.results:
                names[r] = f"v{vid}"
                outs.append(f"v{vid}")
                vid += 1
            args = [names[o] for o in operands]
            if self.sequences:  # emitted below, a segment at a time
                entries.append((i, outs, args, together_op))
                continue
            if isa(op, CONSTANT_OPS):
                call = f"K[{i}]"
            else:
                call = f"K[{i}](" + ", ".join(args) + ")"
            if not outs:
                line = f"    {call}"
            elif len(outs) == 1:
                line = f"    {outs[0]} = {call}"
            else:
                line = f"    ({', '.join(outs)},) = {call}"
            lines.append(line)
            self._line_of_op[len(lines)] = i
        rets = [names[v] for v in term.operands] if term is not None else []
        self.slots = Slots()
        self._private = 0
        self._op_slots: dict[int, list[int | None]] = {}
        self._out_kernels: dict[int, Callable[..., Any]] = {}
        #: Ops writing their result over the operand at this position (runtime/buffers.py, ``donate``).
        self._op_into: dict[int, int] = {}
        self.buffer_sets: weakref.WeakSet[Buffers] = weakref.WeakSet()
        if keeps_operands is not None:
            self._plan_buffers(term, keeps_operands, constant_of)
        if self.sequences:
            self._emit_segments(lines, entries, rets)
        lines.append("    return (" + "".join(f"{r}, " for r in rets) + ")")
        self.source = "\n".join(lines) + "\n"
        # The plan is found from its frames through a weak reference: the
        # code object may be shared with plans of the same source.
        self.run: Callable[[Sequence[Any], Sequence[Any]], tuple] = codegen.define(
            self.source, "plan", _ident(name), {}, weakref.ref(self)
        )

    def _emit_segments(
        self, lines: list[str], entries: list[tuple[int, list[str], list[str], bool]], rets: list[str]
    ) -> None:
        """The body of a plan for ``m`` replicas: each run of ops between
        two together ops (a segment) is one loop over the replicas, running
        the whole segment for replica 0, then for replica 1, ...; a together
        op is one call for all.  Replica after replica, a replica's values
        are still in cache when its next op reads them: at x[256,1024] per
        replica, running op after op over 4 replicas' values took 1.3x as
        long (numpy, 2 threads x 4 replicas: 51 against 38.5 ms).  Values a
        later segment, a together op or the terminator reads are kept per
        replica (``v[j]``); the others are the loop's locals."""
        m = self.replicas
        segment = [0] * len(entries)
        seg = 0
        for n, (_, _, _, together_op) in enumerate(entries):
            if together_op or (n and entries[n - 1][3]):
                seg += 1
            segment[n] = seg
        defined = {
            out: segment[n] for n, (_, outs, _, together_op) in enumerate(entries) if not together_op for out in outs
        }
        exported = {
            a for n, (_, _, args, _) in enumerate(entries) for a in args if a in defined and defined[a] != segment[n]
        } | {r for r in rets if r in defined}
        n = 0
        while n < len(entries):
            i, outs, args, together_op = entries[n]
            if together_op:
                call = f"K[{i}](" + ", ".join(args) + ")"
                lines.append(
                    f"    {call}"
                    if not outs
                    else f"    {outs[0]} = {call}"
                    if len(outs) == 1
                    else f"    ({', '.join(outs)},) = {call}"
                )
                self._line_of_op[len(lines)] = i
                n += 1
                continue
            end = n
            while end < len(entries) and not entries[end][3]:
                end += 1
            seg_outs = [o for _, outs_, _, _ in entries[n:end] for o in outs_ if o in exported]
            for o in seg_outs:
                lines.append(f"    {o} = [None] * {m}")
            lines.append(f"    for j in range({m}):")
            for i, outs, args, _ in entries[n:end]:
                ins = ", ".join("x" + a[1:] if a in defined and defined[a] == segment[n] else f"{a}[j]" for a in args)
                call = f"K[{i}][j]({ins})"
                if not outs:
                    line = f"        {call}"
                elif len(outs) == 1:
                    o = outs[0]
                    line = f"        x{o[1:]} = {o}[j] = {call}" if o in exported else f"        x{o[1:]} = {call}"
                else:
                    line = f"        ({', '.join('x' + o[1:] for o in outs)},) = {call}"
                lines.append(line)
                self._line_of_op[len(lines)] = i
                for o in outs if len(outs) > 1 else ():
                    if o in exported:
                        lines.append(f"        {o}[j] = x{o[1:]}")
            n = end

    def _plan_buffers(
        self, term: Operation | None, keeps: Callable[[Operation], bool], constant_of: dict[SSAValue, int]
    ) -> None:
        """:attr:`slots` and, per planned op, its results' slots and its
        out kernel (runtime/buffers.py)."""
        escaping: set[SSAValue] = set(term.operands) if term is not None else set()
        steps = []
        index = []
        for i, op in enumerate(self.ops):
            if any(r in constant_of for r in op.results):
                continue
            operands = list(op.operands) + (self.regions[i][1] if i in self.regions else [])
            keys: list = [None] * len(op.results)
            out_kernel = None
            if keeps(op) or self._runs_together(op):
                escaping.update(operands)
            elif isa(op, FusionRegionOp):
                writes = writes_results(op)
                if any(writes):
                    keys = [value_key(r) if w else None for r, w in zip(op.results, writes)]
                    out_kernel = _REGION_OUTS  # the fused kernel's _outs, bound in _bind
            elif isa(op, PrimitiveOp) and len(op.results) == 1 and not op.regions:
                out_kernel = type(op).out_kernel(**op.params())
                if out_kernel is not None:
                    keys = [value_key(op.results[0])]
            in_place = out_kernel is not None and not isa(op, FusionRegionOp) and type(op).OUT_IN_PLACE
            steps.append((operands, list(op.results), keys, out_kernel is not None, in_place))
            index.append((i, out_kernel))
        if not self.sequences:
            self.slots = assign(steps, escaping, recycle=True, donate=True)
            self._private = len(self.slots)
        else:
            # Replicas one after another in one thread: values that die in
            # the segment that made them share one buffer across the
            # replicas; the others get one per replica (Buffers).
            local = self._segment_local(steps, [i for i, _ in index], escaping)
            crossing = [
                (o, r, [k if v not in local else None for v, k in zip(r, ks)], w, p) for o, r, ks, w, p in steps
            ]
            inside = [(o, r, [k if v in local else None for v, k in zip(r, ks)], w, p) for o, r, ks, w, p in steps]
            private = assign(crossing, escaping, recycle=True, donate=True)
            shared = assign(inside, escaping, donate=True)
            self._private = len(private)
            self.slots = private
            for v, slot in shared.slot_of.items():
                self.slots.slot_of[v] = slot + self._private
            self.slots.keys += shared.keys
            self.slots.into_operand.update(shared.into_operand)
        for i, out_kernel in index:
            if out_kernel is None:
                continue
            results = self.ops[i].results
            if len(results) == 1 and results[0] in self.slots.into_operand:
                self._op_into[i] = self.slots.into_operand[results[0]]
                self._out_kernels[i] = out_kernel
                continue
            got = [self.slots.slot_of.get(r) for r in results]
            if any(s is not None for s in got):
                self._op_slots[i] = got
                self._out_kernels[i] = out_kernel

    def _segment_local(self, steps: list, ops: list[int], escaping: set[SSAValue]) -> set[SSAValue]:
        """The values (of ``steps``, in op order) read only in the segment
        that made them, by ops that do not run together, and not views of
        values read later (:meth:`_emit_segments`)."""
        segment: dict[SSAValue, int] = {}
        seg = 0
        prev_together = False
        reads: list[tuple[list, list, int, bool, bool]] = []
        for i, (operands, results, _, writes, _) in zip(ops, steps):
            together = self._runs_together(self.ops[i])
            if together or prev_together:
                seg += 1
            prev_together = together
            for r in results:
                segment[r] = seg
            reads.append((operands, results, seg, together, writes))
        crossing = set(escaping)
        for operands, _, seg_i, together, _ in reads:
            for a in operands:
                if together or segment.get(a, -1) != seg_i:
                    crossing.add(a)
        for operands, results, _, _, writes in reversed(reads):
            if not writes and any(r in crossing for r in results):
                crossing.update(operands)  # a view of it may cross
        return {v for v in segment if v not in crossing}

    def _bind(self, i: int, kernel: Callable[..., Any], buffers: Buffers, j: int) -> Callable[..., Any]:
        """Op ``i``'s kernel for replica ``j`` writing into ``buffers`` (its planned slots)."""
        slots = self._op_slots[i]
        if isa(self.ops[i], FusionRegionOp):
            return buffers.bind(j, lambda outs, *xs: kernel(*xs, _outs=outs), slots, kernel, many=True)
        return buffers.bind(j, self._out_kernels[i], slots, kernel)

    def new_buffers(self) -> Buffers:
        """One worker's arrays for :attr:`slots` (listed in :attr:`buffer_sets`)."""
        b = Buffers(self.slots.keys, self.replicas, self._private, frozenset(self.slots.recycled))
        self.buffer_sets.add(b)
        return b

    def kernels(self, factory: KernelFactory) -> tuple:
        """``K`` for :attr:`run`: constants evaluated, region ops built from
        their sub-plans, other ops via ``factory(op)``; with ``replicas > 1``
        ``factory(op, j)`` gives replica ``j``'s kernel, and
        ``factory(op, None)`` a together op's."""
        m, seq = self.replicas, self.sequences
        bufs = self.new_buffers() if self._op_slots else None
        out = []
        for i, op in enumerate(self.ops):
            if isa(op, CONSTANT_OPS) or i in self._constants:
                value = self._constant(i)
                out.append((value,) * m if seq else value)
            elif seq and self._runs_together(op):
                if i in self.regions:  # its regions' plans run for all m replicas
                    subs, _ = self.regions[i]
                    runners = [(sub.run, sub.kernels(factory)) for sub in subs]
                    kernel = type(op).together_kernel(op, runners)
                    REGION_RUNNERS[kernel] = runners  # for the profiler, as below
                    out.append(kernel)
                else:
                    out.append(factory(op, None))
            else:
                per = []
                for j in range(m):
                    f = (lambda o, j=j: factory(o, j)) if seq else factory
                    if i in self.regions:
                        subs, _ = self.regions[i]
                        runners = [(sub.run, sub.kernels(f)) for sub in subs]
                        kernel = type(op).region_kernel(op, runners)
                        REGION_RUNNERS[kernel] = runners  # for the profiler (runtime/profiler.py)
                        per.append(kernel)
                    else:
                        k = f(op)
                        if i in self._op_into:
                            k = _into_operand(self._out_kernels[i], self._op_into[i])
                        elif bufs is not None and i in self._op_slots:
                            k = self._bind(i, k, bufs, j)
                        per.append(k)
                out.append(tuple(per) if seq else per[0])
        return tuple(out)

    def _constant(self, i: int) -> Any:
        """The value of constant op ``i`` (a folded op's was set when the
        plan was built), evaluated once per plan: constants are read-only
        arrays shared by every replica and call."""
        value = self._constants.get(i, _UNSET)
        if value is _UNSET:
            op = self.ops[i]
            # Equal small constants share their attribute: each decodes once
            # (a 10,000-op chain's 10,000 constants: 0.1 s of its compile).
            key = form_key(op)
            value = self._decoded.get(key, _UNSET)
            if value is _UNSET:
                value = self._decoded[key] = _readonly(pure_kernel(op)())
            self._constants[i] = value
        return value

    def _fold(self, i: int, op: Operation, constant_of: dict[SSAValue, int]) -> bool:
        """Evaluate op ``i`` now when it is a pure ``hlo`` op whose operands
        are all constants (``hlo.broadcast_in_dim`` of a constant, the
        arithmetic of constants), as XLA's constant folding does; the same
        kernel on the same values, so the results are the same bits.  Not
        when it would raise (the run reports that error, with the replica
        and the op's source line) or make an array over :data:`FOLD_BYTES`
        (kept for the plan's life; an op whose result type is over it is
        not evaluated at all)."""
        if not (
            op.operands
            and all(v in constant_of for v in op.operands)  # cheap, and most often false
            and isa(op, PrimitiveOp)
            and len(op.results) == 1
            and op.name.startswith("hlo.")
            and op.has_trait(Pure)
            and not type(op).HOST_ONLY
            and not type(op).SIDE_EFFECTS
            and not self._runs_together(op)
        ):
            return False
        if _result_bytes(op) > FOLD_BYTES:  # not even evaluated (an outer product, a pad)
            return False
        try:
            value = pure_kernel(op)(*(self._constant(constant_of[v]) for v in op.operands))
        except Exception:  # noqa: BLE001 - left to the run, which names the op
            return False
        if not isinstance(value, np.ndarray | np.generic) or value.nbytes > FOLD_BYTES:
            return False
        self._constants[i] = _readonly(value)
        return True

    def _runs_together(self, op: Operation) -> bool:
        """``together(op)``, or a region op (``hlo.if``, ``hlo.while``)
        whose regions hold a together op."""
        if self._leaf_together(op):
            return True
        return (
            bool(op.regions)
            and hasattr(type(op), "together_kernel")
            and any(self._leaf_together(inner) for region in op.regions for inner in region.walk())
        )

    def failed_op(self, tb) -> Operation | None:
        """The op whose line raised, from a traceback through :attr:`run`:
        the innermost op when the failure was inside a region's sub-plan."""
        found = None
        while tb is not None:
            plan = _plan_of(tb)
            if plan is not None:
                i = plan._line_of_op.get(tb.tb_lineno)
                if i is not None:
                    found = plan.ops[i]
            found = fused_inner_op(tb) or found  # an op inside a fusion.region
            tb = tb.tb_next
        return found


def running_op(frame) -> Operation | None:
    """The op a thread is executing, from its current ``frame``
    (``sys._current_frames()``): the innermost plan line on its stack."""
    while frame is not None:
        inner = fused_inner_op(frame)
        if inner is not None:
            return inner
        plan = _plan_of(frame)
        if plan is not None:
            i = plan._line_of_op.get(frame.f_lineno)
            if i is not None:
                return plan.ops[i]
        frame = frame.f_back
    return None


def _result_bytes(op: Operation) -> int:
    """The bytes of ``op``'s one result by its type (0 when not a ranked
    tensor type)."""
    try:
        spec = TensorSpec.of_type(op.results[0].type)
    except ValueError:
        return 0
    return spec.size * numpy_dtype(spec.dtype).itemsize


def _readonly(value: Any) -> Any:
    """``value`` made read-only when it is an array (a constant shared by
    every replica and call must not be written through)."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    return value


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _plan_of(frame_or_tb: Any) -> Plan | None:
    """The plan whose ``run`` a frame (or traceback entry) executes."""
    ref = codegen.owner(frame_or_tb)
    plan = ref() if isinstance(ref, weakref.ref) else None
    return plan if isinstance(plan, Plan) else None


def free_values(op: Operation) -> list[SSAValue]:
    """Values that ``op``'s regions use but that are defined outside ``op``,
    in order of first use."""
    inner: set[int] = set()
    for region in op.regions:
        for inner_op in region.walk():
            for r in inner_op.regions:
                for b in r.blocks:
                    inner.add(id(b))
        for b in region.blocks:
            inner.add(id(b))
    seen: dict[SSAValue, None] = {}
    for region in op.regions:
        for inner_op in region.walk():
            for v in inner_op.operands:
                owner = v.owner
                block = owner if isinstance(owner, Block) else owner.parent_block()
                if id(block) not in inner and v not in seen:
                    seen[v] = None
    return list(seen)


def op_location(op: Operation) -> str | None:
    """``file.py:LINE`` of the user's source that made ``op``, if known."""
    return format_location(op.location)


def call_plan(
    plan: Plan, args: Sequence[Any], K: tuple, replica: int | Sequence[int] | None, cluster: str | None
) -> tuple:
    """Run ``plan`` and name the failing op on error; ``replica`` is the
    replica it runs for, or the replicas of a plan for several
    (``Plan.replicas``), position ``j`` running replica ``replica[j]``.

    Raises:
      XtpuRuntimeError: with the replica, the cluster (host code), the op and
        its source line filled in; a ``HostComputeError`` when host code
        (``cluster`` given) raised anything else.
      Aborted, ChannelClosed: unchanged (they are not errors of this plan).
    """
    tr = _profiler._active
    try:
        if tr is None:
            return plan.run(args, K)
        start = time.perf_counter()
        try:
            return plan.run(args, instrumented(tr, plan, K))
        finally:
            name = (
                plan.name
                if replica is None
                else f"{plan.name} replica {replica}"
                if isinstance(replica, int)
                else f"{plan.name} replicas {list(replica)}"
            )
            tr.add(name, "plan", start, time.perf_counter(), {"cluster": cluster} if cluster is not None else None)
    except (Aborted, ChannelClosed, ReplicasDiverged):
        raise
    except Exception as e:
        op = plan.failed_op(e.__traceback__)
        if replica is not None and not isinstance(replica, int):  # several: the sequential mode reruns it
            replica = replica[0] if len(replica) == 1 else None
        ctx = dict(
            replica=replica,
            cluster=cluster,
            op=None if op is None else op.name,
            location=None if op is None else op_location(op),
        )
        if isinstance(e, XtpuRuntimeError):
            e.add_context(**ctx)
            raise
        if cluster is not None:
            raise HostComputeError.from_exception(e, **ctx) from e
        raise XtpuRuntimeError(f"{type(e).__name__}: {e}", **ctx) from e


def instrumented(trace: Any, plan: Any, K: tuple) -> tuple:
    """``K``, the kernels of ``plan``, each timed into the profiler trace
    ``trace`` (made once per kernel tuple, kept on the trace)."""
    got = trace._wrapped.get(id(K))
    if got is not None and got[0] is K:
        return got[1]

    def wrap(i: int, op: Any, k: Any) -> Any:
        if isinstance(op, CONSTANT_OPS) or not callable(k):
            return k
        runners = REGION_RUNNERS.get(k) if i in plan.regions else None
        if runners is not None:  # hlo.if / hlo.while: their bodies' ops too
            subs = plan.regions[i][0]
            # Regions run for all replicas at once (the sequential mode)
            # or for one.
            make = type(op).together_kernel if subs[0].sequences else type(op).region_kernel
            k = make(op, [(run, instrumented(trace, sub, sub_k)) for (run, sub_k), sub in zip(runners, subs)])
        loc = op_location(op)
        return trace._timed(k, op.name, {"location": loc} if loc else None)

    # A plan for several replicas (the sequential mode) has a tuple of
    # the replicas' kernels per op.
    wrapped = tuple(
        tuple(wrap(i, op, x) for x in k) if isinstance(k, tuple) else wrap(i, op, k)
        for i, (op, k) in enumerate(zip(plan.ops, K))
    )
    trace._wrapped[id(K)] = (K, wrapped)
    return wrapped
