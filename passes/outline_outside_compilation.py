"""``tpu-outline-outside-compilation``: each outside-compilation cluster
becomes a host function that talks to the device over keyed channels.

Semantics follow TensorFlow's extraction of outside compilation: the MLIR
bridge pass ``tf-extract-outside-compilation``
(``tensorflow/compiler/mlir/tensorflow/transforms/extract_outside_compilation.cc``,
tests in ``tests/extract_outside_compilation.mlir``) and, before it,
``tensorflow/compiler/jit/extract_outside_compilation_pass.cc``.  The device
side sends the cluster's inputs with ``XlaSendToHost`` and waits for its
outputs with ``XlaRecvFromHost``; the host side receives them with
``_XlaRecvAtHost``, runs the cluster and answers with ``_XlaSendFromHost``.
The channel keys are TF's: ``host_compute_channel_<cluster>_args`` and
``host_compute_channel_<cluster>_retvals``; values that go from one cluster's
host function to a later one's use ``host_compute_channel_<A>_to_<B>``;
values the host keeps for the run (``tpu.held``: for clusters in nested
blocks, the outputs, the replica inputs host code uses) use
``host_compute_channel_<A>_held`` and ``host_compute_channel_replica_inputs``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import FunctionType, ModuleOp, StringAttr, UnitAttr
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import SymbolOpInterface
from xdsl.utils.exceptions import DiagnosticException

from xtpu.dialects.ir_walk import isa
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.dialects.tpu import (
    CLUSTER_ATTR,
    HELD_ATTR,
    OutsideCompilationOp,
    RecvAtHostOp,
    RecvFromHostOp,
    ReplicateOp,
    SendFromHostOp,
    SendToHostOp,
    YieldOp,
)
from xtpu.passes._common import (
    HostComputable,
    at,
    captured_values,
    clone_into,
    device_uses,
    enclosing,
    erase_if_dead,
    has_side_effects,
    host_replicate,
    is_string,
    remap_operands,
    source_line,
    walk_ops,
)


def args_key(cluster: str) -> str:
    """The channel that carries a cluster's inputs from the device to the host."""
    return f"host_compute_channel_{cluster}_args"


def retvals_key(cluster: str) -> str:
    """The channel that carries a cluster's results from the host to the device."""
    return f"host_compute_channel_{cluster}_retvals"


def host_to_host_key(source: str, target: str) -> str:
    """The channel that carries values from cluster ``source``'s host
    function to cluster ``target``'s."""
    return f"host_compute_channel_{source}_to_{target}"


def held_key(cluster: str) -> str:
    """The host values of cluster ``cluster`` that the host keeps for the rest
    of the run (``tpu.held``): what clusters in other blocks and the
    program's outputs read."""
    return f"host_compute_channel_{cluster}_held"


REPLICA_INPUTS_KEY = "host_compute_channel_replica_inputs"
"""The replica inputs that host code uses, kept on the host for the run
(``tpu.held``) by a host replicate before the device program."""


def host_function_name(cluster: str) -> str:
    """``host_<cluster>`` with every character that is not ``[A-Za-z0-9_]``
    replaced by ``_`` (before making it unique)."""
    return "host_" + re.sub(r"[^A-Za-z0-9_]", "_", cluster)


def _symbol_names(module: ModuleOp) -> set[str]:
    """The symbol names the module's top-level ops define (what
    ``SymbolTable.lookup_symbol`` finds), read once for the whole pass."""
    names = set()
    for o in module.body.block.ops:
        trait = o.get_trait(SymbolOpInterface)
        if trait is not None and (sym := trait.get_sym_attr_name(o)) is not None:
            names.add(sym.data)
    return names


def _unique_symbol(taken: set[str], base: str) -> str:
    """``base``, or ``base_1``, ``base_2``, ... : the first not in ``taken``
    (which then holds it)."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def _describe(cluster: OutsideCompilationOp) -> str:
    return f"'{cluster.name}' op cluster '{cluster.cluster.data}'{at(cluster)}"


def _origin(value: SSAValue) -> str:
    owner = value.owner
    if isinstance(owner, Operation):
        return f"by '{owner.name}'{at(owner)}"
    parent = owner.parent_op()
    return f"as a block argument of '{parent.name}'" if parent is not None else "as a block argument"


@dataclass(eq=False)
class _Cluster:
    """What the pass decided for one cluster, before anything changes."""

    op: OutsideCompilationOp
    sent: list[SSAValue] = field(default_factory=list)
    """Captured values the device sends (in order of first use)."""
    computed: list[SSAValue] = field(default_factory=list)
    """Captured values the host computes itself (constants and what is
    computed from them only)."""
    inflows: dict[OutsideCompilationOp, list[SSAValue]] = field(default_factory=dict)
    """Host-to-host values: for each earlier cluster of the same block, the
    results of it that this cluster uses (whether the device uses them too
    or not)."""
    outflows: dict[OutsideCompilationOp, list[SSAValue]] = field(default_factory=dict)
    """The converse: later clusters and the results of this one they get."""
    held_in: dict[OutsideCompilationOp, list[SSAValue]] = field(default_factory=dict)
    """Host-to-host values from clusters of enclosing blocks (the producer
    runs once, this cluster any number of times after it): read from the
    producer's held values."""
    held: list[SSAValue] = field(default_factory=list)
    """Results the host keeps for the run (``held_key``): what clusters in
    nested blocks and the replicate's outputs read."""
    held_users: list[OutsideCompilationOp] = field(default_factory=list)
    """The clusters that read ``held`` (the device receives this cluster's
    results before any of them runs)."""
    inputs: list[SSAValue] = field(default_factory=list)
    """Replica inputs (block arguments of the replicate body) the cluster uses:
    the host has them (``REPLICA_INPUTS_KEY``), the device never sends them."""
    returned: list[int] = field(default_factory=list)
    """Indices of the results the device uses (sent back on ``_retvals``)."""
    effects: bool = False
    """Whether the cluster has side effects (they keep their order)."""

    @property
    def name(self) -> str:
        return self.op.cluster.data


def _analyze(clusters: list[OutsideCompilationOp], computable: HostComputable) -> dict[OutsideCompilationOp, _Cluster]:
    """Decide how every value crosses between device and host (or stays on
    the host); raise the diagnostics of strings the device would have to
    send or receive."""
    plans = {c: _Cluster(c, effects=has_side_effects(c)) for c in clusters}
    for c in clusters:
        p = plans[c]
        body = _replicate_of(c).body.block
        for v in captured_values(c):
            owner = v.owner
            if isinstance(owner, OutsideCompilationOp):
                # Host to host, never through the device (also when the
                # device uses the value too).  The producer's block encloses
                # this cluster's (dominance): the same block runs both once,
                # in order (a queue); a nested block may run this cluster
                # any number of times, so the host keeps the value.
                if owner.parent_block() is c.parent_block():
                    p.inflows.setdefault(owner, []).append(v)
                    plans[owner].outflows.setdefault(c, []).append(v)
                else:
                    p.held_in.setdefault(owner, []).append(v)
                    src = plans[owner]
                    if v not in src.held:
                        src.held.append(v)
                    if c not in src.held_users:
                        src.held_users.append(c)
            elif isinstance(v, BlockArgument) and v.owner is body:
                p.inputs.append(v)
            elif computable(v):
                p.computed.append(v)
            elif is_string(v.type):
                raise DiagnosticException(
                    f"{_describe(c)} uses a string value ({v.type}) computed outside "
                    f"the cluster {_origin(v)}; strings never travel through the device: "
                    "compute it inside the cluster"
                )
            else:
                p.sent.append(v)
        term = body.last_op
        for i, r in enumerate(c.results):
            uses = device_uses(r)
            if not uses:
                continue
            if _can_reroute(_replicate_of(c)) and all(u.operation is term for u in uses):
                # Only an output of the replicate: the host keeps it and
                # returns it after the device program (TF's host launch
                # returns it from the parallel_execute), never through the
                # device.
                if r not in p.held:
                    p.held.append(r)
                continue
            if is_string(r.type):
                raise DiagnosticException(
                    f"{_describe(c)} returns a string value (result {i}, {r.type}) "
                    "to the device computation; strings never travel through the "
                    "device: use it inside the cluster"
                )
            p.returned.append(i)
    return plans


def _replicate_of(op: Operation) -> ReplicateOp:
    rep = enclosing(op, ReplicateOp)
    assert rep is not None  # _check_clusters
    return rep


def _held_recv(key: str, values: list[SSAValue], location) -> RecvAtHostOp:
    recv = RecvAtHostOp.make([], key=key, result_specs=[TensorSpec.of_type(v.type) for v in values])
    recv.attributes[HELD_ATTR] = UnitAttr()
    recv.location = location
    for old, new in zip(values, recv.results, strict=True):
        new.name_hint = old.name_hint
    return recv


def _held_send(key: str, values: list[SSAValue], location) -> SendFromHostOp:
    send = SendFromHostOp.make(values, key=key)
    send.attributes[HELD_ATTR] = UnitAttr()
    send.location = location
    return send


def _build_host_function(p: _Cluster, computable: HostComputable, held_of: dict, inputs_of: dict) -> FuncOp:
    """Move the cluster's ops into a host function (named later); the
    cluster op stays behind, empty, as the device side's placeholder."""
    op, name = p.op, p.name
    yield_op = op.body.block.last_op
    assert isinstance(yield_op, YieldOp)
    block = Block()
    mapping: dict[SSAValue, SSAValue] = {}

    def receive(key: str, values: list[SSAValue]) -> None:
        recv = RecvAtHostOp.make([], key=key, result_specs=[TensorSpec.of_type(v.type) for v in values])
        recv.location = op.location
        for old, new in zip(values, recv.results, strict=True):
            mapping[old] = new
            new.name_hint = old.name_hint
        block.add_op(recv)

    receive(args_key(name), p.sent)

    def read_held(key: str, kept: list[SSAValue], needed: list[SSAValue]) -> None:
        recv = _held_recv(key, kept, op.location)
        for old, new in zip(kept, recv.results, strict=True):
            if old in needed:
                mapping[old] = new
        block.add_op(recv)

    if p.inputs:
        read_held(REPLICA_INPUTS_KEY, inputs_of[_replicate_of(op)], p.inputs)
    for source, values in p.held_in.items():
        read_held(held_key(source.cluster.data), held_of[source], values)
    for source, values in p.inflows.items():
        receive(host_to_host_key(source.cluster.data, name), values)
    clone_into(computable.chain(p.computed), block, mapping)
    for inner in list(op.body.block.ops):
        remap_operands(inner, mapping)
    result_of = dict(zip(op.results, yield_op.values, strict=True))
    for inner in list(op.body.block.ops):
        if inner is yield_op:
            continue
        inner.detach()
        block.add_op(inner)
    for target, values in p.outflows.items():
        send = SendFromHostOp.make([result_of[v] for v in values], key=host_to_host_key(name, target.cluster.data))
        send.location = op.location
        block.add_op(send)
    if p.held:
        # Kept before the results go back: the device receives them before
        # any reader of the held values can run.
        block.add_op(_held_send(held_key(name), [result_of[v] for v in p.held], op.location))
    send = SendFromHostOp.make([yield_op.values[i] for i in p.returned], key=retvals_key(name))
    send.location = op.location
    block.add_op(send)
    block.add_op(ReturnOp())
    op.body.block.erase_op(yield_op)
    func = FuncOp(host_function_name(name), FunctionType.from_lists([], []), Region(block))
    func.attributes[CLUSTER_ATTR] = StringAttr(name)
    func.location = op.location
    return func


class _Positions:
    """The order of ops in their blocks, as numbers kept up to date while
    the pass inserts and erases ops: a block is numbered when first asked
    about (spaced out), an op inserted between two gets a number between
    theirs, and the block is numbered again only when none is left between
    them.  Comparing two ops' positions is then O(1) however many clusters
    the block holds."""

    SPACING = 1 << 32

    def __init__(self) -> None:
        self._of: dict[Block, dict[Operation, int]] = {}
        self.numberings = 0
        """How many times a block was numbered (tests count walks with it)."""

    def index(self, block: Block) -> dict[Operation, int]:
        """``block``'s ops -> increasing numbers, in block order."""
        pos = self._of.get(block)
        if pos is None:
            self.numberings += 1
            pos = self._of[block] = {o: i * self.SPACING for i, o in enumerate(block.ops)}
        return pos

    def inserted(self, op: Operation) -> None:
        """Number ``op``, just inserted in a block numbered before."""
        block = op.parent_block()
        assert block is not None
        pos = self._of.get(block)
        if pos is None:
            return
        prev, nxt = op.prev_op, op.next_op
        lo = pos[prev] if prev is not None else -self.SPACING
        hi = pos[nxt] if nxt is not None else lo + 2 * self.SPACING
        mid = (lo + hi) // 2
        if mid == lo:  # no number left between the neighbours
            del self._of[block]
        else:
            pos[op] = mid

    def erased(self, block: Block, op: Operation) -> None:
        pos = self._of.get(block)
        if pos is not None:
            pos.pop(op, None)


@dataclass
class _DeviceSide:
    """Replaces each placeholder by its send/recv pair, sending early and
    receiving late (in program order of the clusters)."""

    pending_effects: dict[OutsideCompilationOp, None]
    """The side-effecting clusters not placed yet, in program order."""
    senders: dict[SSAValue, list[OutsideCompilationOp]]
    effect_recvs: list[Operation] = field(default_factory=list)
    sends: set[Operation] = field(default_factory=set)
    replaced: dict[SSAValue, SSAValue] = field(default_factory=dict)
    positions: _Positions = field(default_factory=_Positions)

    def place(self, p: _Cluster) -> None:
        op, name = p.op, p.name
        block = op.parent_block()
        assert block is not None
        index = self.positions.index(block)
        here = index[op]
        sent = [self.replaced.get(v, v) for v in p.sent]

        # Send early: right after the last op of the block that defines an
        # operand, and after the last earlier side-effecting cluster's recv.
        after: Operation | None = None

        def later(a: Operation | None) -> None:
            nonlocal after
            if a is not None and index[a] < here and (after is None or index[a] > index[after]):
                after = a

        for v in sent:
            if isinstance(v.owner, Operation):
                later(block.find_ancestor_op_in_block(v.owner))
        if p.effects:
            for r in self.effect_recvs:
                later(block.find_ancestor_op_in_block(r))
        # Sends placed at the same point keep the clusters' order.
        nxt = block.first_op if after is None else after.next_op
        while nxt is not None and nxt is not op and nxt in self.sends:
            after, nxt = nxt, nxt.next_op

        # Receive late: right before the first op of the block that uses a
        # result (or will send it); before the next side-effecting cluster.
        term = block.last_op
        assert term is not None
        before: Operation = term

        def earlier(a: Operation | None) -> None:
            nonlocal before
            if a is not None and here < index[a] < index[before]:
                before = a

        results = [op.results[i] for i in p.returned]
        for r in results:
            for use in r.uses:
                earlier(block.find_ancestor_op_in_block(use.operation))
            for user in self.senders.get(r, ()):
                earlier(block.find_ancestor_op_in_block(user))
        for user in p.held_users:
            # Readers of the held values run after the host kept them.
            earlier(block.find_ancestor_op_in_block(user))
        self.pending_effects.pop(op, None)
        if p.effects:
            # The first pending cluster (program order) under this block
            # comes first in it: it comes after this one.
            for other in self.pending_effects:
                a = block.find_ancestor_op_in_block(other)
                if a is not None:
                    earlier(a)
                    break

        send = SendToHostOp.make(sent, key=args_key(name))
        specs = [TensorSpec.of_type(r.type) for r in results]
        recv = RecvFromHostOp.make([], key=retvals_key(name), result_specs=specs)
        send.location = recv.location = op.location
        if after is None:
            block.insert_op_before(send, block.first_op)  # type: ignore[arg-type]
        else:
            block.insert_op_after(send, after)
        self.positions.inserted(send)
        block.insert_op_before(recv, before)
        self.positions.inserted(recv)
        for old, new in zip(results, recv.results, strict=True):
            new.name_hint = old.name_hint
            old.replace_all_uses_with(new)
            self.replaced[old] = new
        if p.effects:
            self.effect_recvs.append(recv)
        self.sends.add(send)
        self.positions.erased(block, op)
        block.erase_op(op)


def _check_clusters(ops: list[Operation]) -> list[OutsideCompilationOp]:
    """The structural errors of the pass among a module's ``ops`` (in walk
    order), found before anything changes: a cluster outside a device
    replicate, nested clusters, a repeated cluster name.  Returns the
    clusters in program order."""
    seen: dict[str, OutsideCompilationOp] = {}
    clusters = []
    for op in ops:
        if not isa(op, OutsideCompilationOp):
            continue
        outer = enclosing(op, OutsideCompilationOp)
        if outer is not None:
            raise DiagnosticException(
                f"Cannot nest outside_compilation clusters: {_describe(op)} is inside "
                f"cluster '{outer.cluster.data}'{at(outer)}"
            )
        rep = enclosing(op, ReplicateOp)
        if rep is None:
            raise DiagnosticException(
                f"{_describe(op)} is not inside a tpu.replicate; outside_compilation "
                "only has a meaning in a replicated computation"
            )
        if rep.on_host:
            raise DiagnosticException(
                f'{_describe(op)} is inside a tpu.replicate with placement = "host", which runs on the host already'
            )
        name = op.cluster.data
        if name in seen:
            first = source_line(seen[name].location)
            raise DiagnosticException(
                f"{_describe(op)} appears twice in the module"
                f"{f' (first at {first})' if first else ''}; cluster names must be "
                "unique: they name the host function and its channels"
            )
        seen[name] = op
        clusters.append(op)
    return clusters


@dataclass(frozen=True)
class OutlineOutsideCompilation(ModulePass):
    """Turn every ``tpu.outside_compilation`` cluster into a host function.

    A cluster ``C`` becomes ``func.func @host_C() attributes
    {tpu.outside_compilation_cluster = "C"}`` (non-identifier characters of
    ``C`` become ``_``; a suffix ``_1``, ``_2``, ... keeps the name unique)
    whose body is ``tpu.recv_at_host "host_compute_channel_C_args"``, the
    cluster's ops in their order, ``tpu.send_from_host
    "host_compute_channel_C_retvals"`` of the results the device uses, and
    ``func.return``.  On the device the cluster becomes ``tpu.send_to_host``
    of its captured values and ``tpu.recv_from_host`` of those results.  Both
    pairs are always emitted, even empty: they are the per-execution
    handshake of the host function.  Clusters inside ``hlo.if`` /
    ``hlo.while`` regions get their pair inside the region, so the host runs
    them exactly when the region runs.

    Send early, receive late: the send goes right after the last op of the
    cluster's block that defines one of its operands (at the start of the
    block if none does), the recv right before the first op of the block that
    uses a result, directly or in its regions (before the block's terminator
    if none does), so device work overlaps host work.  Clusters with side
    effects (print, summaries) keep their order: such a cluster's send comes
    after the recv of every earlier cluster with side effects in its block
    (also one inside an ``hlo.if`` / ``hlo.while`` of the block).

    Values never travel when they need not (TF's
    ``tf-extract-outside-compilation``): captured constants, and values
    computed only from constants and the replica id, are recomputed in the
    host function (and erased on the device if nothing else uses them).  The
    replica inputs host code uses are on the host already: a host replicate
    before the device program keeps them (``tpu.send_from_host
    "host_compute_channel_replica_inputs" {tpu.held}``) and each host
    function that uses some reads them (``tpu.recv_at_host`` of that key,
    ``tpu.held``) right after its ``_args`` (TF's
    ``mixed_input_single_outside_compilation``).  A result of cluster ``A``
    that a later cluster ``B`` of the same block uses goes host to host:
    ``A``'s function sends it with ``tpu.send_from_host
    "host_compute_channel_A_to_B"`` and ``B``'s receives it with
    ``tpu.recv_at_host`` on that key.  When ``B`` is in a nested block (a
    loop body, a branch: it may run many times, or never), ``A``'s function
    keeps it for the run (``tpu.send_from_host "host_compute_channel_A_held"
    {tpu.held}``, before its ``_retvals``) and ``B``'s reads it as often as it
    runs; the device receives ``A``'s answer before the op holding ``B``
    starts (TF's ``outside_compiled_ops_with_multiple_region_single_cluster``).
    Either way the value reaches the device only if device ops use it, and is
    never sent back.

    The device replicate keeps only what it computes with (TF's
    ``tail_aliased_output``, ``op_string_operand``): an output that is a
    replica input becomes that input, an output that only the host computes
    (a held value of a cluster that device ops do not use) is read back by a
    host replicate after the device program, inputs no device op uses are
    dropped, and a device replicate left with nothing (no op, input or
    output) is erased when host replicates run the replicas.  Inputs and
    outputs with shardings (``tpu.input_shardings``) are left as they are.

    Errors: a captured string computed on the device, a string result that
    device ops use, nested clusters, a cluster outside a device replicate and
    a cluster name used twice.
    """

    name = "tpu-outline-outside-compilation"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        ops = walk_ops(op)  # read before anything changes
        clusters = _check_clusters(ops)
        reps = [r for r in ops if isa(r, ReplicateOp) and not r.on_host]
        computable = HostComputable()
        plans = _analyze(clusters, computable)
        held_of = {c: plans[c].held for c in clusters}
        inputs_of: dict[ReplicateOp, list[SSAValue]] = {}
        for c in clusters:
            if plans[c].inputs:
                rep = _replicate_of(c)
                known = inputs_of.setdefault(rep, [])
                known += [v for v in plans[c].inputs if v not in known]
        for rep in inputs_of:
            inputs_of[rep].sort(key=lambda a: a.index)  # type: ignore[attr-defined]
        held_outputs = {v: c for c in clusters for v in plans[c].held}
        fates = {rep: _reroute_outputs(rep, held_outputs) for rep in reps}
        # Host side, last cluster first: a cluster's host-to-host inputs are
        # remapped (and so stop using the producer) before the producer goes.
        funcs = [_build_host_function(plans[c], computable, held_of, inputs_of) for c in reversed(clusters)]
        taken = _symbol_names(op)
        for func in reversed(funcs):
            func.sym_name = StringAttr(_unique_symbol(taken, func.sym_name.data))
            op.body.block.add_op(func)
        # Device side, in program order.
        senders: dict[SSAValue, list[OutsideCompilationOp]] = {}
        for c in clusters:
            for v in plans[c].sent:
                senders.setdefault(v, []).append(c)
        device = _DeviceSide({c: None for c in clusters if plans[c].effects}, senders)
        for c in clusters:
            device.place(plans[c])
        # Constants (and their chains) that only clusters used are dead now.
        dead: list[Operation] = []
        for c in clusters:
            dead.extend(computable.chain(plans[c].computed))
        erase_if_dead(list(dict.fromkeys(dead)))
        for rep in reps:
            _rebuild(rep, fates[rep], inputs_of.get(rep, []), {c.cluster.data: plans[c].held for c in clusters})


# --------------------------------------------------------------------------
# The device program keeps only what it uses
# --------------------------------------------------------------------------


def _group(values, j: int, n: int) -> list[SSAValue]:
    return list(values[j * n : (j + 1) * n])


def _can_reroute(rep: ReplicateOp) -> bool:
    """Whether the device replicate's inputs and outputs may change: not once
    ``tpu-propagate-sharding`` gave them shardings (one per input / output)."""
    return not any(name in rep.attributes for name in ("tpu.input_shardings", "tpu.output_shardings"))


def _reroute_outputs(rep: ReplicateOp, held_outputs: dict[SSAValue, OutsideCompilationOp]) -> list[tuple]:
    """Take off the body's ``tpu.yield`` what the device does not compute: a
    replica input (the output is the input itself, TF's
    ``tail_aliased_output``) and a host value that the device does not use
    (the host keeps it; TF's host launch returns it).  Returns, per old
    output, ``("kept", index in the new yield)``, ``("input", argument index)`` or
    ``("held", cluster name, value)``."""
    term = rep.body.block.last_op
    assert isinstance(term, YieldOp)
    if not _can_reroute(rep):
        return [("kept", j) for j in range(len(term.values))]
    fates: list[tuple] = []
    kept: list[SSAValue] = []
    for v in term.values:
        if isinstance(v, BlockArgument) and v.owner is rep.body.block:
            fates.append(("input", v.index))
        elif v in held_outputs:
            fates.append(("held", held_outputs[v].cluster.data, v))
        else:
            fates.append(("kept", len(kept)))
            kept.append(v)
    if len(kept) != len(term.values):
        new = YieldOp.create(operands=kept)
        new.location = term.location
        rep.body.block.insert_op_before(new, term)
        rep.body.block.erase_op(term)
    return fates


def _rebuild(
    rep: ReplicateOp, fates: list[tuple], inputs: list[SSAValue], held_lists: dict[str, list[SSAValue]]
) -> None:
    """Rebuild the device replicate without the inputs and outputs it does
    not use.  The replica inputs host code uses are kept on the host by a host
    replicate before it (``REPLICA_INPUTS_KEY``); held outputs are read back
    by a host replicate after it.  A device program left with nothing to do
    is not run at all (erased, when a host replicate runs the replicas)."""
    body = rep.body.block
    n = rep.num_replicas
    parent = rep.parent_block()
    assert parent is not None
    groups = [_group(rep.replicated_inputs, i, n) for i in range(len(body.args))]
    if inputs:
        block = Block(arg_types=[a.type for a in inputs])
        block.add_op(_held_send(REPLICA_INPUTS_KEY, list(block.args), rep.location))
        block.add_op(YieldOp.create(operands=[]))
        operands = [x for a in inputs for x in groups[a.index]]  # type: ignore[attr-defined]
        parent.insert_op_before(host_replicate(block, operands, n, ["replica_inputs"], rep.location), rep)
    keep = [i for i, a in enumerate(body.args) if a.uses or not _can_reroute(rep)]
    changed = len(keep) != len(body.args) or any(f[0] != "kept" for f in fates)
    if not changed:
        return
    for i in reversed(range(len(body.args))):
        if i not in keep:
            body.erase_arg(body.args[i])
    term = body.last_op
    assert isinstance(term, YieldOp)
    new_rep = ReplicateOp.create(
        operands=[x for i in keep for x in groups[i]],
        result_types=[v.type for v in term.values for _ in range(n)],
        properties=dict(rep.properties),
        attributes=dict(rep.attributes),
        regions=[rep.detach_region(0)],
    )
    new_rep.location = rep.location
    parent.insert_op_before(new_rep, rep)
    held = [(f[1], f[2]) for f in fates if f[0] == "held"]
    order = list(dict.fromkeys(v for _, v in held))
    after = None
    if held:
        block = Block()
        outs: dict[SSAValue, SSAValue] = {}
        names = list(dict.fromkeys(name for name, _ in held))
        for name in names:
            recv = _held_recv(held_key(name), held_lists[name], rep.location)
            block.add_op(recv)
            outs.update(zip(held_lists[name], recv.results, strict=True))
        block.add_op(YieldOp.create(operands=[outs[v] for v in order]))
        after = host_replicate(block, [], n, names, rep.location)
        parent.insert_op_after(after, new_rep)
    for j, f in enumerate(fates):
        if f[0] == "kept":
            new = _group(new_rep.outputs, f[1], n)
        elif f[0] == "input":
            new = groups[f[1]]
        else:
            assert after is not None
            new = _group(after.outputs, order.index(f[2]), n)
        for old, v in zip(_group(rep.outputs, j, n), new, strict=True):
            old.replace_all_uses_with(v)
    parent.erase_op(rep)
    others = any(isinstance(o, ReplicateOp) and o is not new_rep for o in parent.ops)
    if others and not body.args and len(body.ops) == 1 and not new_rep.outputs:
        parent.erase_op(new_rep)
