"""Import StableHLO: a module's ``@main`` (and the functions it calls) as xtpu ops.

:func:`parse` reads a StableHLO module (text in MLIR's generic form directly
with xDSL, unregistered ops allowed; custom-form text and MLIR bytecode
through jaxlib's MLIR, which prints the generic form).  :class:`Importer`
walks ``@main`` and applies, for each op, the import rule of its entry in
:mod:`xtpu.passes.stablehlo_table`, through a *sink*:

* :class:`IRSink` builds xtpu IR (``xtpu-opt`` reading a StableHLO file,
  :func:`import_module`);
* the API's sink (``xtpu.experimental.call_stablehlo``) binds the ops
  through xtpu's tracer, so they run eagerly, are traced into a replicated
  computation, and are recorded by ``GradientTape``.

Every op and type is checked before anything is applied: an op without an
import rule, a ``custom_call`` other than XLA's ``Sharding``, or a type xtpu
has no dtype for is refused with :class:`StableHLOImportError`, which names
the op and its location.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    UnregisteredOp,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.parser import Parser

from xtpu.dialects import hlo, hlo_control
from xtpu.dialects.sharding import ShardingAttr
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.dialects.tpu import ReplicateOp, ShardingConstraintOp, YieldOp
from xtpu.passes import stablehlo_syntax as S
from xtpu.passes.stablehlo_table import IMPORT

# Results of these ops may have types xtpu holds differently (their rules convert).
_OWN_TYPES = ("stablehlo.replica_id", "stablehlo.partition_id")


class StableHLOImportError(ValueError):
    """The module holds an op or a type xtpu cannot run; the message names
    it and its location."""


# ---- reading ------------------------------------------------------------------


def _mlir_generic(source: str | bytes, name: str | None = None, line_offset: int = 0) -> tuple[str, list[str]]:
    """The generic form of ``source`` (text or bytecode) printed by jaxlib's
    MLIR, and the location of every op in walk order; MLIR's diagnostics
    name ``name`` (lines counted from ``line_offset``) where MLIR says ``"-"``."""
    try:
        from jax._src.interpreters import mlir as jmlir
        from jaxlib.mlir import ir
    except ImportError:  # pragma: no cover - jax is in the test extra
        raise StableHLOImportError(
            "reading StableHLO in MLIR's custom form or as bytecode needs jaxlib's MLIR (pip install jax); "
            "text in MLIR's generic form is read without it"
        ) from None
    with jmlir.make_ir_context():
        try:
            module = ir.Module.parse(source)
        except ir.MLIRError as e:
            text = str(e)
            if name is not None:
                text = re.sub(
                    r'"-":(\d+):(\d+)', lambda m: f"{name}:{int(m.group(1)) + line_offset}:{m.group(2)}", text
                )
            raise StableHLOImportError(f"MLIR cannot parse the module: {text}") from None
        locations: list[str] = []

        def walk(op):
            locations.append(str(op.location))
            for region in op.regions:
                for block in region.blocks:
                    for inner in block.operations:
                        walk(inner.operation)

        walk(module.operation)
        text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)
    return text, locations


def parse(source: str | bytes, name: str | None = None, line_offset: int = 0) -> tuple[ModuleOp, list[str] | None]:
    """The module in ``source`` as xDSL generic ops, and its ops' locations
    (when MLIR read it).

    Raises:
      StableHLOImportError: neither xDSL nor MLIR can read it.
    """
    if isinstance(source, str) and '"stablehlo.' in source:
        try:
            return Parser(S.generic_context(), source).parse_module(), None
        except Exception:  # noqa: BLE001 - custom syntax mixed in: let MLIR read it
            pass
    text, locations = _mlir_generic(source, name, line_offset)
    return Parser(S.generic_context(), text).parse_module(), locations


def _short_location(loc: str, source: str | None = None, line_offset: int = 0) -> str:
    """``file.py:12:3 ("jit(f)/sin")`` for MLIR's location text: the
    innermost file position (the user's line, for JAX's call-site chains)
    and the op's name in the program, if any; MLIR's ``"-"`` (the buffer it
    read) becomes ``source``, lines counted from ``line_offset``."""
    pos = re.search(r'"([^"]+)":(\d+):(\d+)', loc)
    label = re.match(r'loc\("([^"]*)"', loc)
    if pos is None:
        return f'"{label.group(1)}"' if label else loc
    file, line = pos.group(1), int(pos.group(2))
    if file == "-" and source is not None:
        file, line = source, line + line_offset
    where = f"{os.path.basename(file)}:{line}:{pos.group(3)}"
    return f'{where} ("{label.group(1)}")' if label and label.group(1) != pos.group(1) else where


def op_name(op: Operation) -> str:
    return op.op_name.data if isinstance(op, UnregisteredOp) else op.name


# ---- sinks --------------------------------------------------------------------


class Sink:
    """Where imported ops go: ``bind`` applies an xtpu op to values."""

    def bind(self, cls: type, operands: Sequence[Any], **params: Any) -> list[Any]:
        raise NotImplementedError

    def spec(self, value: Any) -> TensorSpec:
        raise NotImplementedError

    def if_(self, pred: Any, true_fn: Callable, false_fn: Callable) -> list[Any]:
        raise NotImplementedError

    def while_(
        self, cond_fn: Callable, body_fn: Callable, init: Sequence[Any], maximum_iterations: int | None = None
    ) -> list[Any]:
        """``body_fn`` while ``cond_fn``; ``maximum_iterations``, when the
        loop's own regions fix its trip count, is that count."""
        raise NotImplementedError

    def switch(self, index: Any, branches: Sequence[Callable]) -> list[Any]:
        """Branch ``index`` (the last for an index out of range): nested ifs."""
        if len(branches) == 1:
            return branches[0]()
        idx_spec = self.spec(index)
        # index == 0 ? b0 : (index == 1 ? b1 : ... b_last)

        def chain(i: int) -> list[Any]:
            if i == len(branches) - 1:
                return branches[i]()
            (c,) = self.bind(hlo.ConstantOp, [], value=_scalar(i, idx_spec.dtype))
            (p,) = self.bind(hlo.CompareOp, [index, c], comparison_direction="EQ")
            return self.if_(p, branches[i], lambda: chain(i + 1))

        return chain(0)

    def sharding(self, value: Any, text: str) -> Any:
        (out,) = self.bind(ShardingConstraintOp, [value], sharding=ShardingAttr(text))
        return out


def _scalar(v, dtype):
    import numpy as np

    return np.asarray(v, dtype=dtype)


class IRSink(Sink):
    """Builds xtpu IR in a block (``xtpu-opt``'s import)."""

    def __init__(self, block: Block):
        self.block = block

    def bind(self, cls, operands, **params):
        op = cls.make(list(operands), **params)
        self.block.add_op(op)
        return list(op.results)

    def spec(self, value):
        return TensorSpec.of_type(value.type)

    def _region(self, fn: Callable, arg_types: Sequence[Attribute] = ()) -> tuple[Region, list]:
        block = Block(arg_types=list(arg_types))
        outer = self.block
        self.block = block
        try:
            results = fn(*block.args)
            block.add_op(hlo_control.ReturnOp.create(operands=list(results)))
        finally:
            self.block = outer
        return Region(block), list(results)

    def if_(self, pred, true_fn, false_fn):
        t, res = self._region(true_fn)
        f, _ = self._region(false_fn)
        op = hlo_control.IfOp.create(operands=[pred], result_types=[r.type for r in res], regions=[t, f])
        self.block.add_op(op)
        return list(op.results)

    def while_(self, cond_fn, body_fn, init, maximum_iterations=None):
        types = [v.type for v in init]
        c, _ = self._region(lambda *a: [cond_fn(*a)], types)
        b, _ = self._region(body_fn, types)
        op = hlo_control.WhileOp.create(operands=list(init), result_types=types, regions=[c, b])
        self.block.add_op(op)
        return list(op.results)


# ---- the walk -----------------------------------------------------------------


class Importer:
    """Inlines a StableHLO module's functions as xtpu ops through ``sink``."""

    def __init__(
        self,
        module: ModuleOp,
        sink: Sink,
        locations: list[str] | None = None,
        name: str | None = None,
        line_offset: int = 0,
    ):
        self.module = module
        self._name, self._line_offset = name, line_offset
        self.sink = sink
        self.funcs = {op.sym_name.data: op for op in module.ops if isinstance(op, FuncOp)}
        self._where: dict[Operation, str] = {}
        if locations is not None:
            for op, loc in zip(module.walk(), locations):
                self._where[op] = loc
        self._scopes: list[dict[SSAValue, Any]] = []

    # ---- used by the rules ----------------------------------------------------
    def op_name(self, op: Operation) -> str:
        return op_name(op)

    def attr(self, op: Operation, name: str) -> Attribute | None:
        got = op.properties.get(name)
        return got if got is not None else op.attributes.get(name)

    def spec(self, value: Any) -> TensorSpec:
        return self.sink.spec(value)

    def bind(self, cls: type, operands: Sequence[Any], **params: Any) -> list[Any]:
        return self.sink.bind(cls, list(operands), **params)

    def apply(self, cls: type, operands: Sequence[Any], properties: dict[str, Attribute], result_types) -> list[Any]:
        """``cls`` with the StableHLO op's properties (same names and types
        as xtpu's) and result types (which carry shape and dtype params)."""
        params = cls.create(result_types=list(result_types), properties=dict(properties)).params()
        return self.bind(cls, operands, **params)

    def sharding(self, value: Any, text: str) -> Any:
        return [self.sink.sharding(value, text)]

    def where(self, op: Operation) -> str:
        loc = self._where.get(op)
        fn = op.parent_op()
        while fn is not None and not isinstance(fn, FuncOp):
            fn = fn.parent_op()
        inside = f" in @{fn.sym_name.data}" if isinstance(fn, FuncOp) else ""
        if not loc or loc == "loc(unknown)":
            return inside
        return f"{inside} at {_short_location(loc, self._name, self._line_offset)}"

    def refuse(self, op: Operation, reason: str) -> None:
        raise StableHLOImportError(f"'{op_name(op)}' op{self.where(op)} {reason}")

    def region_fn(self, region: Region) -> Callable[..., list[Any]]:
        """A function of the region's block arguments giving its returned values."""
        outer = list(self._scopes)

        def run(*args):
            saved = self._scopes
            self._scopes = outer + [dict(zip(region.block.args, args))]
            try:
                return self._block(region.block)
            finally:
                self._scopes = saved

        return run

    # ---- checks -----------------------------------------------------------------
    def check(self, name: str = "main") -> None:
        """Refuse, before anything runs, every op and type of ``name`` and
        the functions it calls that xtpu cannot import."""
        seen: set[str] = set()
        todo = [name]
        while todo:
            fname = todo.pop()
            if fname in seen:
                continue
            seen.add(fname)
            fn = self.funcs.get(fname)
            if fn is None:
                raise StableHLOImportError(f"the module has no function @{fname}")
            for i, arg in enumerate(fn.body.block.args):
                self._check_type(arg.type, f"argument {i} of @{fname}")
            for op in fn.body.walk():
                if op is fn:
                    continue
                name_ = op_name(op)
                if name_ == "func.call":
                    todo.append(op.properties.get("callee", op.attributes.get("callee")).root_reference.data)
                    continue
                if name_ in ("func.return", "stablehlo.return"):
                    continue
                entry = IMPORT.get(name_)
                if entry is None:
                    self.refuse(op, "has no xtpu form (xtpu's StableHLO import table has no entry for it)")
                if name_ == "stablehlo.custom_call":
                    target = self.attr(op, "call_target_name")
                    tname = target.data if isinstance(target, StringAttr) else str(target)
                    if tname != "Sharding":
                        self.refuse(op, f"calls custom_call target '{tname}', which xtpu cannot run")
                if name_ in _OWN_TYPES:
                    continue
                for r in op.results:
                    try:
                        self._check_type(r.type, "its result")
                    except StableHLOImportError as e:
                        self.refuse(op, str(e))
                for region in op.regions:
                    for arg in region.block.args:
                        self._check_type(arg.type, f"a region argument of '{name_}'")

    @staticmethod
    def _check_type(t: Attribute, what: str) -> None:
        if not isinstance(t, TensorType):
            raise StableHLOImportError(f"{what} has type {t}, which xtpu has no value for")
        try:
            TensorSpec.of_type(t)
        except (ValueError, TypeError, AssertionError):
            raise StableHLOImportError(
                f"{what} has type {t}; xtpu's dtypes are float32, float64, int32, int64 and bool"
            ) from None

    # ---- the walk -----------------------------------------------------------------
    def call(self, name: str, args: Sequence[Any]) -> list[Any]:
        fn = self.funcs[name]
        saved = self._scopes
        self._scopes = [dict(zip(fn.body.block.args, args))]
        try:
            return self._block(fn.body.block)
        finally:
            self._scopes = saved

    def _value(self, v: SSAValue) -> Any:
        for scope in reversed(self._scopes):
            if v in scope:
                return scope[v]
        raise StableHLOImportError(f"value {v} is used before it is defined")

    def _block(self, block: Block) -> list[Any]:
        scope = self._scopes[-1]
        for op in block.ops:
            name = op_name(op)
            xs = [self._value(v) for v in op.operands]
            if name in ("func.return", "stablehlo.return"):
                return xs
            if name == "func.call":
                callee = self.attr(op, "callee")
                outs = self.call(callee.root_reference.data, xs)
            else:
                entry = IMPORT.get(name)
                if entry is None or entry.import_ is None:
                    self.refuse(op, "has no xtpu form (xtpu's StableHLO import table has no entry for it)")
                outs = entry.import_(self, op, xs)
            outs = list(outs)
            if len(outs) != len(op.results):
                raise AssertionError(f"import rule of {name} gave {len(outs)} values for {len(op.results)} results")
            scope.update(zip(op.results, outs))
        return []

    def argument_shardings(self, name: str = "main") -> list[str | None]:
        """The sharding of each argument of ``name`` in XLA's notation (None
        where none): its ``mhlo.sharding`` string, or its Shardy
        ``sdy.sharding`` when simple (:func:`sdy_to_hlo`)."""
        fn = self.funcs[name]
        out: list[str | None] = [None] * len(fn.body.block.args)
        arg_attrs = fn.properties.get("arg_attrs") or fn.attributes.get("arg_attrs")
        if isinstance(arg_attrs, ArrayAttr):
            for i, d in enumerate(arg_attrs.data):
                if not isinstance(d, DictionaryAttr):
                    continue
                if isinstance(s := d.data.get("mhlo.sharding"), StringAttr):
                    out[i] = s.data
                elif (sdy := d.data.get("sdy.sharding")) is not None:
                    try:
                        out[i] = sdy_to_hlo(S.attr_body(sdy), self.meshes())
                    except ValueError as e:
                        raise StableHLOImportError(f"argument {i} of @{name}: {e}") from None
        return out

    def meshes(self) -> dict[str, list[tuple[str, int]]]:
        """The module's Shardy meshes: name -> ``[(axis, size), ...]``."""
        out = {}
        for op in self.module.ops:
            if op_name(op) == "sdy.mesh":
                mesh = self.attr(op, "mesh")
                sym = self.attr(op, "sym_name")
                if mesh is not None and isinstance(sym, StringAttr):
                    out[sym.data] = [(a, int(n)) for a, n in re.findall(r'"([^"]+)"\s*=\s*(\d+)', S.attr_body(mesh))]
        return out


def sdy_to_hlo(body: str, meshes: dict[str, list[tuple[str, int]]]) -> str:
    """XLA's notation of a simple Shardy sharding ``@mesh, [{"x"}, {}]``:
    each dimension split over at most one whole mesh axis (no sub-axes, no
    open ``?`` dimensions); the mesh's devices in row-major order (iota),
    transposed so the used axes come in dimension order, the unused ones
    replicate (``last_tile_dim_replicate``).

    Raises:
      ValueError: a sharding that is not simple, or an unknown mesh.
    """
    m = re.match(r"\s*@([\w.$-]+)\s*,\s*\[(.*?)\]\s*(.*)$", body, re.S)
    if m is None or m.group(1) not in meshes:
        raise ValueError(f"#sdy.sharding<{body}> names no mesh of the module")
    mesh = meshes[m.group(1)]
    names = [a for a, _ in mesh]
    sizes = dict(mesh)
    dims = re.findall(r"\{([^}]*)\}", m.group(2))
    used: list[str] = []
    tile: list[int] = []
    for d in dims:
        if "?" in d or ":" in d:
            raise ValueError(f"#sdy.sharding<{body}> is not simple (open dimensions or sub-axes)")
        axes = re.findall(r'"([^"]+)"', d)
        if len(axes) > 1 or any(a not in sizes for a in axes):
            raise ValueError(f"#sdy.sharding<{body}> is not simple (a dimension over several axes)")
        used += axes
        tile.append(sizes[axes[0]] if axes else 1)
    unused = [a for a in names if a not in used]
    rep = 1
    for a in unused:
        rep *= sizes[a]
    if all(t == 1 for t in tile):
        return "{replicated}"
    perm = [names.index(a) for a in used + unused]
    total = 1
    for _, n in mesh:
        total *= n
    if perm == sorted(perm):
        devices = f"<=[{total}]"
    else:
        devices = "<=[" + ",".join(str(n) for _, n in mesh) + "]T(" + ",".join(map(str, perm)) + ")"
    dims_text = ",".join(map(str, tile + ([rep] if rep > 1 else [])))
    return "{devices=[" + dims_text + "]" + devices + (" last_tile_dim_replicate" if rep > 1 else "") + "}"


def num_replicas(module: ModuleOp) -> int:
    attr = module.attributes.get("mhlo.num_replicas")
    return int(attr.value.data) if isinstance(attr, IntegerAttr) else 1


def import_module(source: str | bytes | ModuleOp, name: str | None = None, line_offset: int = 0) -> ModuleOp:
    """An xtpu module for a StableHLO module: ``func.func @main`` taking
    every replica's inputs (``[input][replica]``, ``xtpu.lower``'s form)
    around a ``tpu.replicate`` of ``mhlo.num_replicas`` replicas whose body
    is ``@main`` inlined, or, for one replica, ``@main`` inlined directly.

    Raises:
      StableHLOImportError: an op or a type xtpu cannot import (named, with
        its location).
    """
    if isinstance(source, ModuleOp):
        module, locations = source, None
    else:
        module, locations = parse(source, name, line_offset)
    n = num_replicas(module)
    body = Block()
    sink = IRSink(body)
    imp = Importer(module, sink, locations, name, line_offset)
    imp.check()
    main = imp.funcs["main"]
    in_types = [a.type for a in main.body.block.args]
    body_args = [body.insert_arg(t, i) for i, t in enumerate(in_types)]
    args = list(body_args)
    for i, text in enumerate(imp.argument_shardings()):
        if text is not None:
            args[i] = sink.sharding(args[i], text)
    results = imp.call("main", args)
    out_types = [r.type for r in results]
    if n == 1:
        body.add_op(ReturnOp(*results))
        fn = FuncOp("main", FunctionType.from_lists(in_types, out_types), Region(body))
        return ModuleOp([fn])
    body.add_op(YieldOp.create(operands=list(results)))
    outer = Block(arg_types=[t for t in in_types for _ in range(n)])
    rep = ReplicateOp.create(
        operands=list(outer.args),
        result_types=[t for t in out_types for _ in range(n)],
        properties={"n": IntegerAttr(n, i64)},
        regions=[Region(body)],
    )
    outer.add_op(rep)
    outer.add_op(ReturnOp(*rep.results))
    outer_types = [t for t in in_types for _ in range(n)]
    fn = FuncOp("main", FunctionType.from_lists(outer_types, list(rep.result_types)), Region(outer))
    return ModuleOp([fn])
