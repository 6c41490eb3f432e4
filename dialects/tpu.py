"""The ``tpu`` dialect: replication and placement, after TF's ``tf_device`` and TPU ops.

* ``tpu.replicate`` runs its body once per replica (TF's
  ``tf_device.replicate``; semantics of ``tf.compat.v1.tpu.replicate``).
* ``tpu.outside_compilation`` marks a region that runs on the host, once per
  replica (``tf.tpu.outside_compilation``; TF's ``_xla_outside_compilation``).
* ``tpu.send_to_host`` / ``tpu.recv_from_host`` (device side) and
  ``tpu.recv_at_host`` / ``tpu.send_from_host`` (host side) carry values
  between them over keyed channels (TF's XlaSendToHost / XlaRecvFromHost and
  _XlaRecvAtHost / _XlaSendFromHost).
* ``tpu.cross_replica_sum`` (``tf.compat.v1.tpu.cross_replica_sum``) and
  ``tpu.replica_id``.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    DenseIntOrFPElementsAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    i1,
    i64,
)
from xdsl.ir import Attribute, Dialect
from xdsl.irdl import (
    VarConstraint,
    base,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from xtpu.dialects import vjp_util as G
from xtpu.dialects.infeed import INFEED_OPS
from xtpu.dialects.ir_walk import walk_ops
from xtpu.dialects.primitive import (
    GroupsParam,
    IntParam,
    PrimitiveOp,
    ShapeError,
    StrParam,
)
from xtpu.dialects.sharding import SHARDING_ATTRS, ShardingAttr
from xtpu.dialects.tensor_spec import NUMERIC_DTYPES, TensorSpec

MAX_PARTICIPANTS = 1 << 16
"""Most replicas, and replicas x logical cores, a ``tpu.replicate`` may
have: each is a worker thread of the runtime."""


def check_group_assignment(groups, num_replicas: int | None = None, noun: str = "replica") -> None:
    """Validate a ``group_assignment`` the way TF documents it.

    It is a list of groups of replica ids, every group the same size; with
    ``num_replicas`` given, the groups must cover every replica exactly once.
    ``noun`` names the ids in messages (``"participant"`` for ``ccl`` groups
    over replicas x logical cores).

    Raises:
      ValueError: naming the offending groups.
    """
    groups = [list(g) for g in groups]
    if not groups or any(len(g) == 0 for g in groups):
        raise ValueError(f"group_assignment {groups} must be a non-empty list of non-empty groups")
    sizes = {len(g) for g in groups}
    if len(sizes) != 1:
        raise ValueError(f"group_assignment {groups}: every group must have the same size, got sizes {sorted(sizes)}")
    flat = [r for g in groups for r in g]
    if any(not isinstance(r, int) or r < 0 for r in flat):
        raise ValueError(f"group_assignment {groups} must hold non-negative {noun} ids")
    if len(set(flat)) != len(flat):
        dup = sorted({r for r in flat if flat.count(r) > 1})
        raise ValueError(f"group_assignment {groups} lists {noun}s {dup} more than once")
    if num_replicas is not None and sorted(flat) != list(range(num_replicas)):
        missing = sorted(set(range(num_replicas)) - set(flat))
        extra = sorted(set(flat) - set(range(num_replicas)))
        what = []
        if missing:
            what.append(f"misses {noun}s {missing}")
        if extra:
            what.append(f"names {noun}s {extra} that do not exist")
        raise ValueError(
            f"group_assignment {groups} {' and '.join(what)}; it must cover each of the {num_replicas} {noun}s exactly once"
        )


def check_ids_attr(attr: Attribute, what: str, pairs: bool = False) -> None:
    """``attr`` (``group_assignment``, ``replica_groups`` or
    ``source_target_pairs``) is a 2-D dense tensor of integer ids, as the
    runtime reads it: ``tensor<GxSxi64>`` (G groups of S ids) or, for pairs,
    ``tensor<Nx2xi64>``.

    Raises:
      ValueError: naming ``what`` and the type it has.
    """
    form = "tensor<Nx2xi64>: N [source, target] pairs" if pairs else "tensor<GxSxi64>: G groups of S ids"
    t = getattr(attr, "type", None)
    if not isinstance(t, TensorType):
        raise ValueError(f"{what} must be a dense tensor of ids ({form}), got {attr}")
    elem = t.element_type
    if not isinstance(elem, IntegerType) or elem.width.data == 1:
        raise ValueError(f"{what} must hold integer ids ({form}), got element type {elem}")
    shape = t.get_shape()
    if len(shape) != 2 or any(d < 0 for d in shape):
        raise ValueError(f"{what} must be a 2-D tensor ({form}), got {t}")
    if pairs and shape[1] != 2:
        raise ValueError(f"{what} must hold pairs ({form}), got {t}")


def _parents(op):
    p = op.parent_op()
    while p is not None:
        yield p
        p = p.parent_op()


def enclosing_replicate(op) -> ReplicateOp | None:
    """The innermost ``tpu.replicate`` holding ``op``, if any and if its
    ``n`` and ``num_cores_per_replica`` are well formed (ops verify before
    their parents: a malformed replicate reports itself)."""
    rep = next((p for p in _parents(op) if isinstance(p, ReplicateOp)), None)
    if rep is None:
        return None
    counts = (rep.properties.get("n"), rep.properties.get("num_cores_per_replica", _ONE_CORE))
    return rep if all(isinstance(c, IntegerAttr) and isinstance(c.value.data, int) for c in counts) else None


_ONE_CORE = IntegerAttr(1, i64)
"""``num_cores_per_replica``'s default (made once: xDSL checks an
``IntegerAttr``'s range each time one is made)."""


def host_context(op) -> str | None:
    """Where ``op`` runs on the host, in words, or None when it is device
    code: inside a ``tpu.outside_compilation``, a host ``tpu.replicate``
    (``placement = "host"``) or an outlined host function (``func.func`` with
    ``tpu.outside_compilation_cluster``)."""
    for p in _parents(op):
        if isinstance(p, OutsideCompilationOp):
            return f"outside_compilation cluster '{p.cluster.data}', which runs on the host"
        if isinstance(p, ReplicateOp):
            return 'a host tpu.replicate (placement = "host")' if p.on_host else None
        cluster = p.attributes.get(CLUSTER_ATTR)
        if isinstance(cluster, StringAttr):
            return f"the host function of outside_compilation cluster '{cluster.data}'"
    return None


@irdl_op_definition
class YieldOp(PrimitiveOp):
    """Terminates ``tpu.replicate`` and ``tpu.outside_compilation`` bodies,
    giving their per-replica results (TF's ``tf_device.return``)."""

    STRUCTURAL_GRADIENT: ClassVar = True

    name = "tpu.yield"
    values = var_operand_def(TensorType)
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(ReplicateOp, OutsideCompilationOp)))
    assembly_format = "attr-dict ($values^ `:` type($values))?"

    @classmethod
    def infer(cls, specs, **_):
        return []


@irdl_op_definition
class ReplicateOp(PrimitiveOp):
    """Run the body once per replica (TF's ``tf_device.replicate``).

    Operands are grouped per input: input ``i`` of replica ``r`` is operand
    ``i * n + r``.  The body has one argument per input.  Results are grouped
    per output: output ``j`` of replica ``r`` is result ``j * n + r``.

    With ``placement = "host"`` the body runs on the host instead, once per
    replica (TF's ``tf_device.launch`` on the host device): the head and tail
    outside-compilation clusters that run before and after the device program.

    Syntax::

      %r:2 = tpu.replicate([%a, %b] as %x: tensor<3xf32>) {n = 2 : i64} {
        ...
        tpu.yield %y : tensor<f32>
      }
    """

    STRUCTURAL_GRADIENT: ClassVar = True

    name = "tpu.replicate"
    replicated_inputs = var_operand_def(TensorType)
    n = prop_def(IntegerAttr[I64])
    placement = opt_prop_def(StringAttr)
    num_cores_per_replica = opt_prop_def(IntegerAttr[I64])
    body = region_def("single_block")
    outputs = var_result_def(TensorType)
    PARAMS: ClassVar = {"n": IntParam()}

    @property
    def num_replicas(self) -> int:
        return int(self.n.value.data)

    @property
    def num_cores(self) -> int:
        """Logical cores (devices) per replica: ``num_cores_per_replica``, 1 by default."""
        c = self.num_cores_per_replica
        return 1 if c is None else int(c.value.data)

    @property
    def on_host(self) -> bool:
        """True for ``placement = "host"``: the body runs on the host, once per
        replica (head and tail outside-compilation clusters, extracted by
        ``tpu-extract-head-tail-outside-compilation``); otherwise on the devices."""
        placement = self.properties.get("placement")
        return isinstance(placement, StringAttr) and placement.data == "host"

    @property
    def num_inputs(self) -> int:
        return len(self.body.block.args)

    @property
    def num_outputs(self) -> int:
        return len(self.outputs) // max(self.num_replicas, 1)

    def replica_inputs(self, replica: int):
        n = self.num_replicas
        return [self.replicated_inputs[i * n + replica] for i in range(self.num_inputs)]

    def replica_outputs(self, replica: int):
        n = self.num_replicas
        return [self.outputs[j * n + replica] for j in range(self.num_outputs)]

    def verify_(self) -> None:
        n = self.num_replicas
        if self.placement is not None and self.placement.data != "host":
            raise VerifyException(
                f'\'tpu.replicate\' op placement must be "host" when given, got "{self.placement.data}"'
            )
        if self.num_cores < 1:
            raise VerifyException(f"'tpu.replicate' op num_cores_per_replica must be >= 1, got {self.num_cores}")
        if self.on_host and self.num_cores != 1:
            raise VerifyException("'tpu.replicate' op a host replicate has no logical cores")
        if n < 1:
            raise VerifyException(f"'tpu.replicate' op expects n >= 1 replicas, got {n}")
        if n * self.num_cores > MAX_PARTICIPANTS:
            raise VerifyException(
                f"'tpu.replicate' op has {n} replicas x {self.num_cores} logical cores, more than the "
                f"{MAX_PARTICIPANTS} workers the runtime supports"
            )
        if enclosing_replicate(self) is not None:
            raise VerifyException(
                "'tpu.replicate' op is nested in another tpu.replicate; TPU computations cannot be nested"
            )
        self._verify_types_and_closure()
        k = len(self.body.block.args)
        if len(self.replicated_inputs) != k * n:
            raise VerifyException(
                f"'tpu.replicate' op has {len(self.replicated_inputs)} operands, expected "
                f"{k} inputs x {n} replicas = {k * n}"
            )
        # With tpu.input_shardings / tpu.output_shardings (tpu-propagate-sharding),
        # the body is either still the global program (before
        # tpu-spmd-partition: its types are the operands' and results') or
        # the per-core program (after: every value has its local type under
        # its sharding) -- never a mix (docs/logical-devices.md).
        from xdsl.dialects.builtin import ArrayAttr

        def shardings(name: str, count: int, what: str):
            attr = self.attributes.get(name)
            if attr is None:
                return None
            if not isinstance(attr, ArrayAttr) or not all(isinstance(a, ShardingAttr) for a in attr.data):
                raise VerifyException(f"'tpu.replicate' op {name} must be an array of #tpu.sharding")
            if len(attr.data) != count:
                raise VerifyException(
                    f"'tpu.replicate' op {name} has {len(attr.data)} entries, but the body has {count} {what}"
                )
            cores = self.num_cores
            for idx, a in enumerate(attr.data):
                sh = a.sharding
                if sh.kind == "tiled" and sh.num_devices != cores:
                    raise VerifyException(
                        f"'tpu.replicate' op {name} entry {idx} ({sh}) tiles over {sh.num_devices} devices, "
                        f"but a replica has {cores} logical cores"
                    )
                if sh.kind == "maximal" and sh.device >= cores:
                    raise VerifyException(
                        f"'tpu.replicate' op {name} entry {idx} ({sh}) names logical core {sh.device}, "
                        f"but a replica has {cores} logical cores"
                    )
            return [a.sharding for a in attr.data]

        forms: dict[str, str] = {}  # "global" / "local" -> first value of that form

        def check_sharded(what: str, t, body_t, sh, body_desc: str) -> None:
            """``body_t`` is ``t`` (global) or its shard under ``sh`` (local)."""
            local = t
            if sh.kind == "tiled" and isinstance(t, TensorType):
                try:
                    shape = sh.shard_shape(TensorSpec.of_type(t).shape)
                except ValueError as e:
                    raise VerifyException(f"'tpu.replicate' op {what}: {e}") from None
                local = TensorType(t.element_type, shape)
            if local == t:
                if body_t != t:
                    raise VerifyException(f"'tpu.replicate' op {what} has type {t}, but {body_desc}")
            elif body_t == t:
                forms.setdefault("global", what)
            elif body_t == local:
                forms.setdefault("local", what)
            else:
                raise VerifyException(
                    f"'tpu.replicate' op {what} has type {t} and sharding {sh}, so the body's type must be "
                    f"{local} (the local type on each logical core) or {t} (before tpu-spmd-partition), "
                    f"but {body_desc}"
                )

        term = self.body.block.last_op
        in_sh = shardings("tpu.input_shardings", k, "arguments")
        inputs, outputs = self.replicated_inputs, self.outputs  # each a segment of the operands (computed)
        for i, arg in enumerate(self.body.block.args):
            t0 = inputs[i * n].type
            for r in range(n):
                t = inputs[i * n + r].type
                want = arg.type if in_sh is None else t0
                if t is not want and t != want:  # types are shared: identity first
                    raise VerifyException(
                        f"'tpu.replicate' op input {i} of replica {r} has type {t}, "
                        + (
                            f"but the body argument has type {arg.type}"
                            if in_sh is None
                            else f"but input {i} of replica 0 has type {t0}"
                        )
                    )
            if in_sh is not None:
                check_sharded(f"input {i}", t0, arg.type, in_sh[i], f"the body argument has type {arg.type}")
        if not isinstance(term, YieldOp):
            raise VerifyException("'tpu.replicate' op body must end with tpu.yield")
        m = len(term.values)
        if len(outputs) != m * n:
            raise VerifyException(
                f"'tpu.replicate' op has {len(outputs)} results, expected {m} outputs x {n} replicas = {m * n}"
            )
        out_sh = shardings("tpu.output_shardings", m, "yielded values")
        for j, v in enumerate(term.values):
            t0 = outputs[j * n].type
            for r in range(n):
                t = outputs[j * n + r].type
                want = v.type if out_sh is None else t0
                if t is not want and t != want:
                    raise VerifyException(
                        f"'tpu.replicate' op result {j * n + r} has type {t}, "
                        + (
                            f"but the body yields {v.type}"
                            if out_sh is None
                            else f"but result {j * n} (replica 0's) has type {t0}"
                        )
                    )
            if out_sh is not None:
                check_sharded(f"result {j * n}", t0, v.type, out_sh[j], f"the body yields {v.type}")
        if len(forms) > 1:
            raise VerifyException(
                f"'tpu.replicate' op body mixes global types ({forms['global']}) and local per-core types "
                f"({forms['local']}); after tpu-spmd-partition every body argument and yielded value has its "
                "local type under tpu.input_shardings / tpu.output_shardings"
            )

    def _verify_types_and_closure(self) -> None:
        """What the runtime relies on: every value crossing the replicate is a
        tensor of static shape and a dtype it has (f32, f64, i32, i64, i1,
        strings), and the body uses only its own arguments and values defined
        inside it (each worker runs the body on its own inputs)."""
        checked: set[int] = set()  # types by identity (tracing shares equal ones)

        def check(t, what: str, i: int) -> None:
            if id(t) in checked:
                return
            try:
                spec = TensorSpec.of_type(t)
            except ValueError as e:
                raise VerifyException(f"'tpu.replicate' op {what} {i} has type {t}: {e}") from None
            if any(d < 0 for d in spec.shape):
                raise VerifyException(f"'tpu.replicate' op {what} {i} has type {t}; the runtime needs static shapes")
            checked.add(id(t))

        for i, v in enumerate(self.replicated_inputs):
            check(v.type, "operand", i)
        for i, a in enumerate(self.body.block.args):
            check(a.type, "body argument", i)
        for i, r in enumerate(self.results):
            check(r.type, "result", i)
        # Values defined inside: the nested blocks' arguments and the nested
        # ops' results, by identity (one walk; xDSL hashes a value in Python).
        ops = walk_ops(self)
        defined = {id(a) for region in self.regions for block in region.blocks for a in block.args}
        for op in ops[1:]:
            defined.update(map(id, op.results))
            for region in op.regions:
                for block in region.blocks:
                    defined.update(map(id, block.args))
        for op in ops[1:]:
            for v in op.operands:
                if id(v) not in defined:
                    raise VerifyException(
                        f"'tpu.replicate' op body uses a value defined outside it (operand of '{op.name}'); "
                        "pass it in as a replicated input instead"
                    )

    @classmethod
    def parse(cls, parser: Parser) -> ReplicateOp:
        groups: list[tuple[list[UnresolvedOperand], object, object]] = []

        def parse_group():
            ops = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_unresolved_operand)
            # After partitioning the operands keep their global type, written
            # `[%a, %b] : tensor<8x4xf32> as %x: tensor<4x4xf32>`.
            global_type = parser.parse_type() if parser.parse_optional_punctuation(":") else None
            parser.parse_keyword("as")
            arg = parser.parse_argument()
            groups.append((ops, arg, global_type))

        parser.parse_comma_separated_list(parser.Delimiter.PAREN, parse_group)
        start = parser.pos
        attrs = parser.parse_optional_attr_dict()
        end = parser.pos
        if "n" not in attrs:
            parser.raise_error("tpu.replicate needs {n = <replicas> : i64}", start, end)

        def count(key: str, what: str) -> IntegerAttr:
            a = attrs.pop(key)
            if (
                not isinstance(a, IntegerAttr)
                or not isinstance(a.type, (IntegerType, IndexType))
                or a.type == i1
                or not 0 <= a.value.data <= MAX_PARTICIPANTS
            ):
                parser.raise_error(
                    f"tpu.replicate's {key} must be the number of {what}, an integer "
                    f"({key} = <{what}> : i64, at most {MAX_PARTICIPANTS}), got {a}",
                    start,
                    end,
                )
            return IntegerAttr(a.value.data, i64)

        props: dict[str, Attribute] = {"n": count("n", "replicas")}
        n = props["n"].value.data  # type: ignore[attr-defined]
        if "num_cores_per_replica" in attrs:
            props["num_cores_per_replica"] = count("num_cores_per_replica", "logical cores per replica")
        if "placement" in attrs:
            placement = attrs.pop("placement")
            if not isinstance(placement, StringAttr):
                parser.raise_error(f'tpu.replicate\'s placement must be a string ("host"), got {placement}', start, end)
            props["placement"] = placement
        for ops, _arg, _global_type in groups:
            if len(ops) != n:
                parser.raise_error(f"tpu.replicate input has {len(ops)} values for n = {n} replicas")
        global_out = None
        if parser.parse_optional_punctuation("->"):
            global_out = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
        body = parser.parse_region([arg for _, arg, _ in groups])  # type: ignore[misc]
        # The operands are resolved after the body, in the enclosing scope, as
        # xDSL's generic format does: resolved before, a name the body defines
        # (its own argument) would bind the forward reference to it.
        operands = []
        for ops, arg, global_type in groups:
            t = global_type if global_type is not None else arg.type  # type: ignore[attr-defined]
            operands.extend(parser.resolve_operand(o, t) for o in ops)
        term = body.block.last_op
        out_types = list(term.operand_types) if term is not None else []
        if global_out is not None:
            if len(global_out) != len(out_types):
                parser.raise_error(
                    f"tpu.replicate declares {len(global_out)} result types but its body yields {len(out_types)} values"
                )
            out_types = global_out
        result_types = [t for t in out_types for _ in range(n)]
        op = cls.create(
            operands=operands,
            result_types=result_types,
            properties=props,
            regions=[body],
        )
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer) -> None:
        n = self.num_replicas
        printer.print_string("(")
        for i, arg in enumerate(self.body.block.args):
            if i:
                printer.print_string(", ")
            printer.print_string("[")
            group = self.replicated_inputs[i * n : (i + 1) * n]
            printer.print_list(group, printer.print_operand)
            printer.print_string("]")
            if group and group[0].type != arg.type:
                printer.print_string(" : ")
                printer.print_attribute(group[0].type)
            printer.print_string(" as ")
            printer.print_block_argument(arg)
        printer.print_string(") ")
        shown = {"n": self.n}
        if self.placement is not None:
            shown["placement"] = self.placement
        if self.num_cores_per_replica is not None:
            shown["num_cores_per_replica"] = self.num_cores_per_replica
        printer.print_attr_dict({**shown, **self.attributes})
        term = self.body.block.last_op
        yielded = list(term.operand_types) if term is not None else []
        declared = [self.outputs[j * n].type for j in range(self.num_outputs)] if n else []
        if declared != yielded:
            printer.print_string(" -> (")
            printer.print_list(declared, printer.print_attribute)
            printer.print_string(")")
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)


@irdl_op_definition
class OutsideCompilationOp(PrimitiveOp):
    """A region placed on the host, run once per replica per execution
    (``tf.tpu.outside_compilation``).  ``cluster`` names the
    outside-compilation cluster; the results are the values the region
    yields to the device computation."""

    STRUCTURAL_GRADIENT: ClassVar = True

    name = "tpu.outside_compilation"
    cluster = prop_def(StringAttr)
    body = region_def("single_block")
    outputs = var_result_def(TensorType)
    assembly_format = "$cluster (`->` `(` type($outputs)^ `)`)? attr-dict-with-keyword $body"
    PARAMS: ClassVar = {"cluster": StrParam()}

    def verify_(self) -> None:
        term = self.body.block.last_op
        if not isinstance(term, YieldOp):
            raise VerifyException("'tpu.outside_compilation' op body must end with tpu.yield")
        if list(term.operand_types) != list(self.result_types):
            raise VerifyException(
                "'tpu.outside_compilation' op yields "
                f"({', '.join(map(str, term.operand_types))}) but has results "
                f"({', '.join(map(str, self.result_types))})"
            )
        p = self.parent_op()
        while p is not None:
            if isinstance(p, OutsideCompilationOp):
                raise VerifyException(
                    f"'tpu.outside_compilation' op cluster '{self.cluster.data}' is nested in cluster "
                    f"'{p.cluster.data}'; outside_compilation clusters cannot nest"
                )
            p = p.parent_op()


@irdl_op_definition
class CrossReplicaSumOp(PrimitiveOp):
    """Sum ``operand`` over all replicas, or over each group of
    ``group_assignment`` (``tf.compat.v1.tpu.cross_replica_sum``)."""

    name = "tpu.cross_replica_sum"
    T: ClassVar = VarConstraint("T", base(TensorType))
    operand = operand_def(T)
    group_assignment = opt_prop_def(DenseIntOrFPElementsAttr)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$operand (`groups` `=` $group_assignment^)? attr-dict `:` type($result)"
    PARAMS: ClassVar = {"group_assignment": GroupsParam()}

    def verify_(self) -> None:
        """The shape rule, and what lowering and the runtime rely on: integer
        groups of equal size that cover each replica of the enclosing
        ``tpu.replicate`` exactly once, on the device."""
        if self.group_assignment is not None:
            try:
                check_ids_attr(self.group_assignment, "group_assignment")
            except ValueError as e:
                raise VerifyException(f"'{self.name}' op {e}") from None
        super().verify_()
        rep = enclosing_replicate(self)
        if rep is None:
            return
        if rep.on_host:
            raise VerifyException(
                f"'{self.name}' op is in a host tpu.replicate (placement = \"host\"); "
                "cross_replica_sum can only run on the device"
            )
        groups = self.params()["group_assignment"]
        if groups is not None:
            try:
                check_group_assignment(groups, rep.num_replicas)
            except ValueError as e:
                raise VerifyException(
                    f"'{self.name}' op {e} (the enclosing tpu.replicate has n = {rep.num_replicas})"
                ) from None

    @classmethod
    def infer(cls, specs, group_assignment=None, **_):
        (s,) = specs
        if s.dtype not in NUMERIC_DTYPES or s.dtype == "bool":
            raise ShapeError(f"cross_replica_sum needs a numeric tensor, got {s}")
        if group_assignment is not None:
            try:
                check_group_assignment(group_assignment)
            except ValueError as e:
                raise ShapeError(str(e)) from None
        return [s]

    @classmethod
    def kernel(cls, **_):
        # Eagerly (one replica) the sum over replicas is the value itself.
        return lambda x: x

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, group_assignment=None, **params):
        """Each replica's input feeds every sum of its group: the cotangent is
        the cross-replica sum of the cotangents over the same groups (TF's
        _cross_replica_sum_grad)."""
        (ct,), (x,) = cotangents, inputs
        if not G.is_float(x):
            return [None]
        return [G.bind1(CrossReplicaSumOp, [ct], group_assignment=group_assignment)]


class _IdOp(PrimitiveOp):
    """An int32 scalar naming where the code runs; 0 when eager. The runtime
    gives each worker its own value.  Not differentiable: an int, no inputs."""

    NOT_DIFFERENTIABLE: ClassVar = True

    result = result_def(TensorType)
    assembly_format = "attr-dict `:` type($result)"

    @classmethod
    def infer(cls, specs, **_):
        return [TensorSpec((), "int32")]

    @classmethod
    def kernel(cls, **_):
        import numpy as np

        zero = np.int32(0)
        return lambda: zero


@irdl_op_definition
class ReplicaIdOp(_IdOp):
    """The id of the running replica as an int32 scalar (StableHLO spec:
    replica_id)."""

    name = "tpu.replica_id"


class _Send(PrimitiveOp):
    """Host transfers are not differentiable: they exist only after
    ``tpu-outline-outside-compilation``, and gradients are taken before."""

    NOT_DIFFERENTIABLE: ClassVar = True
    inputs = var_operand_def(TensorType)
    key = prop_def(StringAttr)
    assembly_format = "$key (`(` $inputs^ `:` type($inputs) `)`)? attr-dict"
    PARAMS: ClassVar = {"key": StrParam()}

    @classmethod
    def infer(cls, specs, **_):
        return []


class _Recv(PrimitiveOp):
    """Not differentiable, as :class:`_Send`."""

    NOT_DIFFERENTIABLE: ClassVar = True
    outputs = var_result_def(TensorType)
    key = prop_def(StringAttr)
    assembly_format = "$key attr-dict (`:` type($outputs)^)?"
    PARAMS: ClassVar = {"key": StrParam()}

    def result_params(self):
        return {"result_specs": [TensorSpec.of_type(t) for t in self.result_types]}

    @classmethod
    def infer(cls, specs, result_specs=(), **_):
        return list(result_specs)


class _DeviceSide(PrimitiveOp):
    """A device op of a host transfer: not in host code (the runtime runs it
    only in the device program)."""

    def verify_(self) -> None:
        super().verify_()
        where = host_context(self)
        if where is not None:
            raise VerifyException(f"'{self.name}' op is in {where}; it is the device side of a host transfer")


class _HostSide(PrimitiveOp):
    """A host op of a host transfer: not in a device program."""

    def verify_(self) -> None:
        super().verify_()
        rep = enclosing_replicate(self)
        if rep is not None and host_context(self) is None:
            raise VerifyException(
                f"'{self.name}' op is in the device program of a tpu.replicate; it is the host side of a "
                "host transfer (in the host function of an outside_compilation cluster)"
            )
        if rep is not None and rep.on_host and HELD_ATTR not in self.attributes:
            raise VerifyException(
                f"'{self.name}' op cannot run in a host tpu.replicate (placement = \"host\") unless it is "
                f"{HELD_ATTR} (a host value kept for the run)"
            )


@irdl_op_definition
class SendToHostOp(_DeviceSide, _Send):
    """Device side: send values to the host on channel ``key`` (TF's
    XlaSendToHost).  Never blocks."""

    name = "tpu.send_to_host"


@irdl_op_definition
class RecvFromHostOp(_DeviceSide, _Recv):
    """Device side: wait for values from the host on channel ``key`` (TF's
    XlaRecvFromHost)."""

    name = "tpu.recv_from_host"


@irdl_op_definition
class RecvAtHostOp(_HostSide, _Recv):
    """Host side: wait for the device's values on channel ``key`` (TF's
    _XlaRecvAtHost)."""

    name = "tpu.recv_at_host"


@irdl_op_definition
class SendFromHostOp(_HostSide, _Send):
    """Host side: send values back to the device on channel ``key`` (TF's
    _XlaSendFromHost)."""

    name = "tpu.send_from_host"


@irdl_op_definition
class ShardingConstraintOp(PrimitiveOp):
    """Lay ``operand`` out over the logical devices of its replica as
    ``sharding`` says; the value is unchanged.  TF's
    ``split_to_logical_devices`` (tiled), ``replicate_to_logical_devices``
    (``{replicated}``) and ``assign_to_logical_device`` (``{maximal device=N}``)
    trace to it (TF writes an ``_XlaSharding`` attribute on an Identity;
    Shardy's ``sdy.sharding_constraint``).  ``tpu-propagate-sharding`` starts
    from these; ``tpu-spmd-partition`` removes them."""

    name = "tpu.sharding_constraint"
    T: ClassVar = VarConstraint("T", base(TensorType))
    operand = operand_def(T)
    sharding = prop_def(ShardingAttr)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$operand `to` qualified($sharding) attr-dict `:` type($result)"

    @classmethod
    def infer(cls, specs, sharding=None, **_):
        (s,) = specs
        if s.dtype == "string":
            raise ShapeError("string tensors live on the host and cannot be sharded")
        if sharding is not None:
            try:
                sharding.sharding.check_rank(s.rank)
                if sharding.is_tiled:
                    sharding.sharding.shard_shape(s.shape)
            except ValueError as e:
                raise ShapeError(str(e)) from None
        return [s]

    @classmethod
    def kernel(cls, **_):
        return lambda x: x

    @classmethod
    def encode_params(cls, params):
        return {"sharding": params["sharding"]}

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, sharding=None, **params):
        """The identity, with the cotangent laid out like the value: the same
        constraint applied to it (TF's _sharding_grad of XlaSharding)."""
        (ct,), (x,) = cotangents, inputs
        if not G.is_float(x):
            return [None]
        return [G.bind1(ShardingConstraintOp, [ct], sharding=sharding)]

    def params(self):
        return {"sharding": self.sharding}


@irdl_op_definition
class LogicalCoreIdOp(_IdOp):
    """The logical core (device) of the replica running this code, an int32
    scalar in ``0 .. num_cores_per_replica - 1`` (StableHLO spec:
    partition_id)."""

    name = "tpu.logical_core_id"


TPU_OPS = [
    ReplicateOp,
    YieldOp,
    OutsideCompilationOp,
    CrossReplicaSumOp,
    ReplicaIdOp,
    SendToHostOp,
    RecvFromHostOp,
    RecvAtHostOp,
    SendFromHostOp,
    ShardingConstraintOp,
    LogicalCoreIdOp,
]

TPU = Dialect("tpu", TPU_OPS + INFEED_OPS, SHARDING_ATTRS)

BATCHED_OPERAND_ATTR = "tpu.batched_operand"
"""Unit attribute of a collective in a batched replicate body
(passes/batch_replicas.py): its operand is stacked, ``[k, ...]`` for the
``k`` replicas of a block (else one value for each of them)."""

BATCHED_RESULT_ATTR = "tpu.batched_result"
"""Unit attribute of a collective in a batched replicate body: its result
is stacked, one per replica (else every replica gets the same value)."""

CLUSTER_ATTR = "tpu.outside_compilation_cluster"
"""Attribute naming the cluster a host function serves."""

HELD_ATTR = "tpu.held"
"""Unit attribute of a host ``tpu.send_from_host`` / ``tpu.recv_at_host``:
the values stay on the host for the rest of the run (per replica) instead of
travelling once through a queue.  A held send replaces the values of its key;
a held recv reads the last ones, as many times as it runs, and never waits.
Host values that clusters in other blocks (loop bodies, branches) or the
program's outputs need, and the replica inputs host code uses, go this way
(TF keeps them in the host program, ``tf-extract-outside-compilation``)."""
