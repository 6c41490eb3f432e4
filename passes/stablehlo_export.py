"""Export an xtpu module to StableHLO: the device program as ``@main``.

:func:`export` converts xtpu's ops one by one through the table of
:mod:`xtpu.passes.stablehlo_table` into StableHLO ops (in MLIR's generic
form, see :mod:`xtpu.passes.stablehlo_syntax`) and :func:`to_text` prints
them.  The text is what MLIR's StableHLO parser and verifier accept (the
suite checks it with jaxlib's MLIR) and what XLA's CPU client compiles for
``mhlo.num_replicas`` replicas.

What becomes ``@main``:

* a module whose ``@main`` holds a device ``tpu.replicate`` (what
  ``xtpu.lower`` traces and ``compile`` lowers): the replicate's body, one
  replica's program, with the module attributes ``mhlo.num_replicas = n``
  and ``mhlo.num_partitions = num_cores_per_replica``; its arguments are one
  replica's inputs and its results one replica's outputs;
* any other ``func.func`` of device code is converted as it is (one replica).

A ``fusion.region`` (the ``hlo-fuse-elementwise`` pass's, in a compiled
program) is inlined: its body's ops in their order, as before the pass;
XLA forms its own fusions.

Host programs (the host functions of outside-compilation clusters, the
host ``tpu.replicate`` of head and tail clusters) have no StableHLO form:
they are refused with an error that names them, or, with
``host_programs="omit"``, left out, so that the text is the device program
alone with its host transfers as ``stablehlo.send`` / ``stablehlo.recv``
(``is_host_transfer``, TF's rendezvous names): what TF's TPU bridge hands
to XLA.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence

from xdsl.dialects.builtin import FunctionType, IntegerAttr, ModuleOp, StringAttr, i32
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.printer import Printer

from xtpu.dialects.tpu import CLUSTER_ATTR, ReplicateOp, YieldOp
from xtpu.passes import stablehlo_syntax as S
from xtpu.passes._common import at, is_string, walk_ops
from xtpu.passes.stablehlo_table import EXPORT


class StableHLOExportError(ValueError):
    """The module holds something StableHLO cannot say (a host program, an
    op without a StableHLO form); the message names it and its source line."""


class Exporter:
    """Converts one program's ops; the table's export rules call back into it."""

    def __init__(self, num_replicas: int = 1, num_cores: int = 1, first_channel: int = 1):
        self.num_replicas = num_replicas
        self.num_cores = num_cores
        self._channel = first_channel
        self._block: Block | None = None
        self._values: list[dict[SSAValue, SSAValue]] = [{}]
        self._tokens: list[SSAValue | None] = [None]
        self._extra: list[list[SSAValue]] = [[]]

    # ---- used by the rules -------------------------------------------------
    def emit(
        self,
        name: str,
        operands: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        properties: dict[str, Attribute] | None = None,
        attributes: dict[str, Attribute] | None = None,
        regions: Sequence[Region] = (),
    ) -> list[SSAValue]:
        """Append the StableHLO op ``name`` to the current block; its results."""
        op = S.op_class(name).create(
            operands=list(operands),
            result_types=list(result_types),
            properties=dict(properties or {}),
            attributes=dict(attributes or {}),
            regions=list(regions),
        )
        assert self._block is not None
        self._block.add_op(op)
        return list(op.results)

    def value(self, v: SSAValue) -> SSAValue:
        for scope in reversed(self._values):
            if v in scope:
                return scope[v]
        raise StableHLOExportError(f"value {v.name_hint or v} is used before it is defined")

    def new_channel(self) -> int:
        c = self._channel
        self._channel += 1
        return c

    def token(self) -> SSAValue:
        """The current block's token (``stablehlo.after_all`` starts one):
        host transfers are ordered by a chain of tokens."""
        if self._tokens[-1] is None:
            (self._tokens[-1],) = self.emit("stablehlo.after_all", [], [S.token_type()])
        tok = self._tokens[-1]
        assert tok is not None
        return tok

    def set_token(self, tok: SSAValue) -> None:
        self._tokens[-1] = tok

    def region_extra(self) -> list[SSAValue]:
        """Values a region's terminator returns after the op's own (the
        captures a ``while`` body passes on)."""
        return list(self._extra[-1])

    def refuse(self, op: Operation, reason: str) -> None:
        raise StableHLOExportError(f"'{op.name}' op{at(op)} {reason}")

    def region(self, arg_types: Sequence[Attribute], build: Callable[..., list[SSAValue]]) -> Region:
        """A one-block region whose body ``build(*args)`` emits; its results are returned."""
        block = Block(arg_types=list(arg_types))
        outer = self._block
        self._block = block
        self._tokens.append(None)
        try:
            results = build(*block.args)
            self.emit("stablehlo.return", results, [])
        finally:
            self._block = outer
            self._tokens.pop()
        return Region(block)

    def captured(self, op: Operation) -> list[SSAValue]:
        """The values ``op``'s regions use that are defined outside ``op``, in first-use order."""
        inside = set()
        for inner in walk_ops(op):
            inside.update(inner.results)
            for r in inner.regions:
                for b in r.blocks:
                    inside.update(b.args)
        out: dict[SSAValue, None] = {}
        for inner in walk_ops(op):
            if inner is op:
                continue
            for v in inner.operands:
                if v not in inside:
                    out.setdefault(v, None)
        return list(out)

    def convert_region(
        self,
        region: Region,
        arg_types: Sequence[Attribute],
        captures: Sequence[SSAValue] = (),
        keep: int = 0,
    ) -> Region:
        """xtpu's one-block region as a StableHLO region taking ``arg_types``:
        the block's own arguments, then one per capture (mapped to it inside);
        its terminator also returns the last ``keep`` of those arguments."""
        src = region.block
        block = Block(arg_types=list(arg_types))
        outer = self._block
        self._block = block
        scope = dict(zip(src.args, block.args))
        n = len(src.args)
        scope.update(zip(captures, block.args[n:]))
        self._values.append(scope)
        self._tokens.append(None)
        self._extra.append(list(block.args[len(block.args) - keep :]) if keep else [])
        try:
            self.convert_ops(src.ops)
        finally:
            self._block = outer
            self._values.pop()
            self._tokens.pop()
            self._extra.pop()
        return Region(block)

    def inline(self, block: Block, operands: Sequence[SSAValue]) -> list[SSAValue]:
        """Convert the ops of ``block`` (a ``fusion.region`` body) in place,
        its arguments bound to ``operands``; the values its terminator gives."""
        self._values.append(dict(zip(block.args, operands)))
        try:
            term = block.last_op
            assert term is not None
            self.convert_ops(op for op in block.ops if op is not term)
            return [self.value(v) for v in term.operands]
        finally:
            self._values.pop()

    # ---- the walk ------------------------------------------------------------
    def convert_ops(self, ops) -> None:
        for op in ops:
            entry = EXPORT.get(op.name)
            if entry is None or entry.export is None:
                raise StableHLOExportError(f"'{op.name}' op{at(op)} has no StableHLO form in xtpu's exporter")
            xs = [self.value(v) for v in op.operands]
            outs = entry.export(self, op, xs)
            if len(outs) != len(op.results):
                raise AssertionError(f"export rule of {op.name} gave {len(outs)} values for {len(op.results)} results")
            self._values[-1].update(zip(op.results, outs))

    def function(
        self,
        name: str,
        args: Sequence[SSAValue],
        body_ops,
        returned: Callable[[], Sequence[SSAValue]],
        bind: dict[SSAValue, int] | None = None,
    ):
        """A ``func.func`` taking ``args``' types, converted from ``body_ops``
        (which end before the terminator); ``bind`` maps the values the ops
        use to argument positions (default: ``args`` themselves)."""
        for i, a in enumerate(args):
            if is_string(a.type):
                raise StableHLOExportError(
                    f"@{name} argument {i} is a string tensor ({a.type}), which only the host holds"
                )
        block = Block(arg_types=[a.type for a in args])
        self._block = block
        if bind is None:
            bind = {a: i for i, a in enumerate(args)}
        self._values = [{v: block.args[i] for v, i in bind.items()}]
        self._tokens = [None]
        self.convert_ops(body_ops)
        results = [self.value(v) for v in returned()]
        block.add_op(ReturnOp(*results))
        ftype = FunctionType.from_lists([a.type for a in args], [r.type for r in results])
        return FuncOp(name, ftype, Region(block))


def _host_programs(module: ModuleOp) -> list[str]:
    names = []
    for op in module.ops:
        if isinstance(op, FuncOp) and isinstance(c := op.attributes.get(CLUSTER_ATTR), StringAttr):
            names.append(f"@{op.sym_name.data} (outside_compilation cluster '{c.data}')")
    for op in walk_ops(module):
        if isinstance(op, ReplicateOp) and op.on_host:
            names.append("a host tpu.replicate (head or tail outside compilation)")
    return names


def _replica_arguments(fn: FuncOp, rep: ReplicateOp) -> tuple[list[SSAValue], dict[SSAValue, int]]:
    """One replica's arguments of ``@main`` and where the replicate body's
    arguments come from: the function takes its inputs ``[input][replica]``
    (``xtpu.lower``'s form), so ``@main`` takes one replica's inputs, all of
    them (an input the body does not use stays an argument, as in the
    traced signature); a body argument fed by something else (a head host
    program's result) becomes one more argument after them."""
    n = rep.num_replicas
    fargs = list(fn.body.block.args)
    k = len(fargs) // n if n and len(fargs) % n == 0 else 0
    args: list[SSAValue] = [fargs[i * n] for i in range(k)]
    bind: dict[SSAValue, int] = {fargs[i * n]: i for i in range(k)}  # an input returned as it is
    index = {a: i for i, a in enumerate(fargs)}
    if any(barg.type != rep.replicated_inputs[j * n].type for j, barg in enumerate(rep.body.block.args)):
        # A partitioned program: its arguments are one logical core's shards.
        return list(rep.body.block.args), {a: i for i, a in enumerate(rep.body.block.args)}
    for j, barg in enumerate(rep.body.block.args):
        ins = [rep.replicated_inputs[j * n + r] for r in range(n)]
        pos = [index.get(v) for v in ins]
        if k and None not in pos and pos[0] % n == 0 and pos == list(range(pos[0], pos[0] + n)):
            bind[barg] = pos[0] // n
        else:
            bind[barg] = len(args)
            args.append(barg)
    return args, bind


def _replica_results(fn: FuncOp, rep: ReplicateOp) -> list[SSAValue]:
    """One replica's results of ``@main``: what the function returns for
    replica 0, ``[output][replica]``, as values of the device program (an
    output of the replicate is its ``tpu.yield`` operand; an input returned
    as it is stays that input).  When a host program computes an output
    (a tail cluster; the host programs omitted), the device program's own
    outputs, its ``tpu.yield`` operands."""
    n = rep.num_replicas
    term = rep.body.block.last_op
    ret = fn.body.block.last_op
    assert isinstance(term, YieldOp) and ret is not None
    outs = list(ret.operands)
    if not n or len(outs) % n:
        return list(term.operands)
    picked = []
    fargs = set(fn.body.block.args)
    for j in range(len(outs) // n):
        v = outs[j * n]
        if v.owner is rep:
            picked.append(term.operands[rep.results.index(v) // n])
        elif v in fargs:
            picked.append(v)
        else:  # a host program's result (host_programs="omit"): the device program's own outputs
            return list(term.operands)
    return picked


def _device_replicate(fn: FuncOp) -> ReplicateOp | None:
    reps = [op for op in fn.body.block.ops if isinstance(op, ReplicateOp) and not op.on_host]
    return reps[0] if len(reps) == 1 else None


def export(module: ModuleOp, host_programs: str = "refuse") -> ModuleOp:
    """The StableHLO module (generic ops) of xtpu ``module``'s device program.

    Args:
      module: an xtpu module (traced, compiled, or any ``func.func`` of device ops).
      host_programs: ``"refuse"`` (default) raises when the module has host
        programs; ``"omit"`` leaves them out (the device program's
        ``stablehlo.send`` / ``recv`` name their rendezvous).

    Raises:
      StableHLOExportError: a host program (named) with ``"refuse"``, or an op
        without a StableHLO form (named, with its source line).
    """
    if host_programs not in ("refuse", "omit"):
        raise ValueError(f'host_programs must be "refuse" or "omit", got {host_programs!r}')
    hosts = _host_programs(module)
    if hosts and host_programs == "refuse":
        raise StableHLOExportError(
            "the module has host programs, which have no StableHLO form: "
            + ", ".join(hosts)
            + ' (export(..., host_programs="omit") gives the device program alone)'
        )
    used = [
        int(c.value.data) for op in walk_ops(module) if isinstance(c := op.properties.get("channel_id"), IntegerAttr)
    ]
    funcs: list[FuncOp] = []
    replicas, cores = 1, 1
    first = max(used, default=0) + 1
    for fn in module.ops:
        if not isinstance(fn, FuncOp) or fn.body.blocks.first is None:
            continue
        if CLUSTER_ATTR in fn.attributes:
            continue
        rep = _device_replicate(fn)
        block = fn.body.block
        if rep is not None:
            replicas, cores = rep.num_replicas, rep.num_cores
            ex = Exporter(replicas, cores, first)
            body = rep.body.block
            term = body.last_op
            assert isinstance(term, YieldOp)
            # Device values the body captures from the function (constants).
            before = []
            for op in block.ops:
                if op is rep:
                    break
                if not isinstance(op, ReplicateOp):
                    before.append(op)
            ops = before + [op for op in body.ops if op is not term]
            args, bind = _replica_arguments(fn, rep)
            funcs.append(ex.function(fn.sym_name.data, args, ops, lambda: _replica_results(fn, rep), bind))
        else:
            if any(isinstance(op, ReplicateOp) for op in block.ops):
                raise StableHLOExportError(
                    f"@{fn.sym_name.data} has no device program: everything it computes runs on the host"
                )
            ex = Exporter(1, 1, first)
            term = block.last_op
            ops = [op for op in block.ops if op is not term]
            funcs.append(ex.function(fn.sym_name.data, block.args, ops, lambda t=term: list(t.operands)))
        first = ex._channel
    out = ModuleOp(funcs)
    out.attributes["mhlo.num_replicas"] = IntegerAttr(replicas, i32)
    out.attributes["mhlo.num_partitions"] = IntegerAttr(cores, i32)
    return out


def to_text(module: ModuleOp, host_programs: str = "refuse") -> str:
    """:func:`export`'s module as text (MLIR's generic form)."""
    out = io.StringIO()
    Printer(stream=out, print_generic_format=True).print_op(export(module, host_programs))
    return out.getvalue() + "\n"
