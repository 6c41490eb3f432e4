"""Run a lowered module: device workers per (replica, logical core), host workers per cluster.

``func.func @main`` runs in the caller's thread.  Its ``tpu.replicate`` op
starts one device worker per replica, running the replicate body (or, for a
program without host transfers, fewer threads each running a block of
replicas: runtime/sequential.py), and one
host worker per (outside-compilation cluster, replica), running the cluster's
host function (``tpu.outside_compilation_cluster`` attribute) once per
message on its ``_args`` channel.  A replicate with ``num_cores_per_replica
= C > 1`` runs ``R x C`` device workers instead, worker ``(r, c)`` being
participant ``r * C + c`` (docs/logical-devices.md): each replica's inputs
are split into the cores' shards of ``tpu.input_shardings``, its outputs
assembled from the cores per ``tpu.output_shardings``, and core 0 of each
replica exchanges its values with the host (the other cores receive core
0's answer).  Device and host meet on keyed channels; ``ccl`` collectives go through a :class:`Communicator`.  Any failure stops
every worker and is raised in the caller with the replica, the op, the
cluster or key, and the user's source line.

Host replicates (head and tail clusters, ``placement = "host"``) run under
the same timeout as channels and collectives: a replica whose host code has
not finished by then fails the run, naming the replica, the cluster and the
op it is in.  Host code cannot be interrupted: a host worker (or host
replica) still busy when its run failed is abandoned and replaced, and exits
when its code returns.  Nothing a failed run leaves behind (its error, a
waiting or abandoned worker) keeps the executable alive: once it is dropped
its host workers end.
"""

from __future__ import annotations

import hashlib
import logging
import math
import mmap
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import Block, Operation

from xtpu.dialects import ccl, hlo, hlo_linalg, intra_op, tpu
from xtpu.dialects.hlo_window import ConvolutionOp, conv_params
from xtpu.dialects.host_variables import HostVariableUpdateOp
from xtpu.dialects.infeed import InfeedDequeueTupleOp
from xtpu.dialects.ir_text import op_position
from xtpu.dialects.ir_walk import isa, walk_ops
from xtpu.dialects.sharding import Sharding, ShardingAttr
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype
from xtpu.runtime import batching, blas_budget, heap, infeed, sequential
from xtpu.runtime import mpi as _mpi
from xtpu.runtime.channels import ChannelTable
from xtpu.runtime.communicator import Communicator, ThreadCommunicator, normalize_replica_groups
from xtpu.runtime.errors import Aborted, RuntimeTimeoutError, XtpuRuntimeError
from xtpu.runtime.host import HostWorker, RunState, answer_awaited_next, runs_inline
from xtpu.runtime.host_variables import HOST_VARIABLES, HostVariableStore
from xtpu.runtime.mpi_communicator import HybridCommunicator
from xtpu.runtime.mpi_variables import VariableService
from xtpu.runtime.plan import Plan, call_plan, form_key, op_location, pure_kernel, running_op
from xtpu.runtime.workers import AbortSignal, resolve_timeout, run_workers

_log = logging.getLogger("xtpu.runtime")


def _cluster_of(fn: func.FuncOp) -> str | None:
    attr = fn.attributes.get(tpu.CLUSTER_ATTR)
    return attr.data if isinstance(attr, StringAttr) else None


class Executable:
    """A lowered module ready to run many times.

    Args:
      module: a module whose ``@main`` holds a ``tpu.replicate`` whose body
        has only device ops (run the default pipeline first), or only host
        replicates when the passes left the device nothing to do.
      timeout: seconds any channel or collective may wait; None reads
        ``$XTPU_TIMEOUT`` (default 60).
      communicator: a factory ``(abort_signal, timeout) -> Communicator`` for
        the collectives backend; by default a ``ThreadCommunicator`` over the
        ``R x C`` device workers (participants).
      host_variables: the store of host-variable values the program's
        ``hlo.host_variable_update`` ops read and update; by default the
        process's (``xtpu.runtime.host_variables.HOST_VARIABLES``), which
        ``xtpu.Variable`` fills.
      batcher: the rewrite that runs a thread's block of replicas as one
        program (passes/batch_replicas.py's ``batch_body``; runtime/batching.py);
        None: blocks run replica by replica.

    Raises:
      ValueError: the module has no ``@main`` or an op the runtime cannot run;
        with several cores per replica, a body whose argument or yielded
        types are not the local (shard) types of the replicate's operands and
        results under ``tpu.input_shardings`` / ``tpu.output_shardings``.
    """

    def __init__(
        self,
        module: ModuleOp,
        timeout: float | None = None,
        communicator: Callable[[AbortSignal, float], Communicator] | None = None,
        host_variables: HostVariableStore | None = None,
        batcher: batching.Batcher | None = None,
    ):
        self.module = module
        # Blocks of replicas run batched (runtime/batching.py) with the
        # compiler's rewrite, unless XTPU_BATCH_REPLICAS=0.
        self._batcher = batcher if batching.enabled() else None
        heap.keep_heap()  # arrays of a step from malloc's heap, not fresh mmaps (runtime/heap.py)
        # Host-variable state the hlo.host_variable_update kernels read and
        # update; the API layer (xtpu.Variable) fills the process's store.
        self.host_variables = HOST_VARIABLES if host_variables is None else host_variables
        self.timeout = resolve_timeout(timeout)
        self._pure_kernels: dict[Operation, Callable[..., Any]] = {}
        self._kernels_by_form: dict[tuple, Callable[..., Any]] = {}
        main = None
        self.host_fns: list[tuple[str, func.FuncOp]] = []
        for op in module.ops:
            if isinstance(op, func.FuncOp):
                cluster = _cluster_of(op)
                if cluster is not None:
                    self.host_fns.append((cluster, op))
                elif op.sym_name.data == "main":
                    main = op
        if main is None:
            raise ValueError("the module has no func.func @main to run")
        self.main = main
        reps = [o for o in main.body.block.ops if isinstance(o, tpu.ReplicateOp)]
        device_reps = [o for o in reps if not o.on_host]
        # No device replicate: the passes left the device nothing to do (all
        # host code runs in host replicates), so no device program runs.
        if len(device_reps) > 1 or not reps:
            raise ValueError(f"@main must hold exactly one device tpu.replicate, found {len(device_reps)}")
        self.replicate = device_reps[0] if device_reps else None
        self.num_replicas = reps[0].num_replicas
        if any(o.num_replicas != self.num_replicas for o in reps):
            raise ValueError("every tpu.replicate in @main must have the same number of replicas")
        # Head and tail clusters: host replicates before / after the device one.
        self.host_replicates = {
            o: (
                plan := Plan(o.body.block, "host_replicate"),
                [plan.kernels(lambda op, r=r: self._host_replica_kernel(op, r)) for r in range(self.num_replicas)],
            )
            for o in reps
            if o.on_host
        }
        # The device program's ops, walked once for the checks and the
        # analyses below (the IR does not change while this is built).
        body_ops = walk_ops(self.replicate) if self.replicate is not None else []
        for o in body_ops:
            if isa(o, tpu.OutsideCompilationOp):
                raise ValueError(
                    f"tpu.outside_compilation cluster '{o.cluster.data}' was not outlined; "
                    "run tpu-outline-outside-compilation first"
                )
            if isa(o, tpu.CrossReplicaSumOp):
                raise ValueError("tpu.cross_replica_sum was not lowered; run tpu-lower-cross-replica-sum first")
        self.num_cores = self.replicate.num_cores if self.replicate is not None else 1
        self._outputs_per_replica = (
            len(self.replicate.results) // self.num_replicas if self.replicate is not None and self.num_replicas else 0
        )
        if self.num_cores > 1:
            # Per input: None (every core gets the whole value) or one slice
            # tuple (None: the whole value) per core; per output: how to
            # assemble the global value from the cores' values.
            self._input_splits = _input_splits(self.replicate)
            self._output_assemblers = _output_assemblers(self.replicate)
        self.abort = AbortSignal()
        self.channels = ChannelTable(self.abort, self.timeout)
        # MPI backend (runtime/mpi.py): this rank runs only its replicas.
        self.world = _mpi.world() if communicator is None else None
        given = None if communicator is None else communicator(self.abort, self.timeout)
        if given is not None and getattr(given, "world", None) is not None:
            self.world = given.world  # an MPICommunicator: this rank runs its replicas only
        self.local_replicas = (
            range(self.num_replicas) if self.world is None else self.world.local_replicas(self.num_replicas)
        )
        if self.world is not None:
            self.comm = _mpi_program(self, given)
        elif communicator is None:
            self.comm = ThreadCommunicator(
                self.num_replicas * self.num_cores, self.abort, self.timeout, cores_per_replica=self.num_cores
            )
        else:
            self.comm = given
        self._lock = threading.Lock()
        self.state = RunState(self.abort)

        self._arg_specs = [
            (s.shape, numpy_dtype(s.dtype), s) for s in (TensorSpec.of_type(t) for t in main.function_type.inputs.data)
        ]
        self.main_plan = Plan(main.body.block, "main")
        self.main_kernels = self.main_plan.kernels(self._main_kernel)
        self.device_plan = Plan(
            self.replicate.body.block if self.replicate is not None else Block(),
            "device",
            keeps_operands=_keeps_operands,  # buffers planned by liveness (runtime/buffers.py)
        )
        # Large matmuls split over xtpu's own threads, BLAS on one
        # (runtime/blas_budget.py, dialects/intra_op.py).
        self._split = self.replicate is not None and _has_large_matmul(body_ops)
        self._blas = self.replicate is not None and _uses_blas(body_ops)
        # One kernel tuple per participant p = r * C + c (built below).
        self.device_kernels = _ParticipantKernels(
            self.num_replicas * self.num_cores,
            lambda p: self.device_plan.kernels(
                lambda op: self._device_kernel(op, p // self.num_cores, p % self.num_cores)
            ),
        )
        # The sequential mode (runtime/sequential.py): why the program cannot
        # run in it (None: it can), whether the cost model prefers it, and
        # its plan for this process's replicas (built at its first run).
        # One replica on one core and no host code runs in one thread,
        # whatever the rest of its program: no walk of the body (a tenth of
        # the Executable's build at 10,000 ops).
        alone = (
            self.replicate is not None
            and communicator is None
            and self.num_replicas == 1
            and self.num_cores == 1
            and not self.host_fns
        )
        self._sequential_reason = (
            "there is no device program"
            if self.replicate is None
            else "a communicator was given"
            if communicator is not None
            else None
            if alone
            else sequential.ineligible(self.replicate, self.num_cores, bool(self.host_fns), body_ops)
        )
        # Several replicas may share a thread while others run in other
        # threads only when no collective sits in a region.
        self._groups_ok = (
            self._sequential_reason is None
            and not alone
            and not sequential.collectives_in_regions(self.replicate, body_ops)
        )
        self._preferred_threads = (
            sequential.preferred_threads(self.replicate, self.num_replicas, blas_budget.cores(), body_ops)
            if self._sequential_reason is None
            else self.num_replicas
        )
        #: threads -> per thread (its replicas, plan, kernels): built at the first run.
        self._grouped: dict[int, list[tuple[list[int], Plan, tuple]]] = {}
        #: threads -> which arguments were one array for every replica when
        #: its groups were built (runtime/batching.py: those run unbatched).
        self._grouped_shared: dict[int, tuple] = {}
        self._batchable: bool | None = None if self._batcher is not None else False
        # A program that runs a thread per replica needs every participant's
        # kernels: built now, where a kernel that cannot be built fails the
        # compile; else the first participant's (every op's kernel checked
        # once) and the others' at their first run in that mode.
        if self._sequential_reason is not None:
            self.device_kernels.build_all(
                [r * self.num_cores + c for r in self.local_replicas for c in range(self.num_cores)]
            )
        elif self.num_replicas:
            self.device_kernels[self.local_replicas[0] * self.num_cores if self.local_replicas else 0]
        self.host_workers: list[HostWorker] = []
        for cluster, fn in self.host_fns:
            plan = Plan(fn.body.block, "host_" + "".join(c if c.isalnum() else "_" for c in cluster))
            first = plan.ops[0] if plan.ops else None
            if not isinstance(first, tpu.RecvAtHostOp):
                raise ValueError(f"host function for cluster '{cluster}' must start with tpu.recv_at_host")
            for r in self.local_replicas:
                self.host_workers.append(self._new_host_worker(cluster, r, first.key.data, plan))
        self._variables = _variable_service(self)
        self._started = False
        # Ends the host workers when this is closed or collected (the
        # finalizer must not refer to self).
        self._finalizer = weakref.finalize(self, _shutdown, self.channels, self.state)

    def _new_host_worker(self, cluster: str, r: int, key: str, plan: Plan) -> HostWorker:
        w = HostWorker(cluster, r, key, self.channels, self.state)
        w.plan = plan
        w.kernels = plan.kernels(lambda op, w=w: self._host_kernel(op, w))
        return w

    def _replace_busy_host_workers(self) -> None:
        """Between runs, after a failed one: retire the host workers still
        running host code (blocked in I/O, say) and start fresh ones, so that
        the next run does not wait for them."""
        for i, w in enumerate(self.host_workers):
            if w.retire_if_busy():
                fresh = self._new_host_worker(w.cluster, w.replica, w.key, w.plan)
                fresh.start()
                self.host_workers[i] = fresh

    # ------------------------------------------------------------------
    # kernels that need the runtime
    # ------------------------------------------------------------------

    def _main_kernel(self, op: Operation) -> Callable[..., Any]:
        if op is self.replicate:
            return self._run_replicas if self.num_cores == 1 else self._run_cores
        if op in self.host_replicates:
            plan, ks = self.host_replicates[op]
            attr = op.attributes.get(tpu.CLUSTER_ATTR)
            cluster = attr.data if isinstance(attr, StringAttr) else "host"
            m = len(op.results) // self.num_replicas if self.num_replicas else 0
            inline = runs_inline(plan.block)
            return lambda *flat: self._run_host_replicas(plan, ks, flat, cluster, m, inline)
        return pure_kernel(op)

    def _variable_kernel(self, op: Operation) -> Callable[..., Any]:
        """A host variable update: on rank 0 (and without MPI) this
        process's variable; on other ranks rank 0's (runtime/mpi_variables.py)."""
        local = self._variable_update(op)

        def run(*xs: Any) -> Any:
            service = self._variables
            if service is None or service.world.rank == 0:
                return local(*xs)
            return service.remote_kernel(service.index[op], self.timeout, self.abort)(*xs)

        return run

    def _host_replica_kernel(self, op: Operation, r: int) -> Callable[..., Any]:
        if isinstance(op, HostVariableUpdateOp):
            return self._variable_kernel(op)
        if isinstance(op, tpu.ReplicaIdOp):
            rid = np.int32(r)
            return lambda: rid
        if isinstance(op, (tpu.SendFromHostOp, tpu.RecvAtHostOp)) and tpu.HELD_ATTR in op.attributes:
            # Host values kept for the run: the replica inputs that host code
            # uses (before the device program), host values the outputs need
            # (after it).
            key, n = op.key.data, len(op.results)
            if isinstance(op, tpu.SendFromHostOp):
                return lambda *vals: self.state.hold(r, key, self.state.generation[0], vals)
            return lambda: self.state.held_values(r, key, n)
        if op.dialect_name() in ("ccl",) or isinstance(
            op, (tpu.SendToHostOp, tpu.RecvFromHostOp, tpu.RecvAtHostOp, tpu.SendFromHostOp)
        ):
            raise ValueError(f"'{op.name}' cannot run in a host tpu.replicate (placement = \"host\")")
        return pure_kernel(op)

    def _run_host_replicas(
        self, plan: Plan, ks: list[tuple], flat: tuple, cluster: str, m: int, inline: bool = False
    ) -> Any:
        """A host ``tpu.replicate``: its replicas on pool threads, under the
        executable's timeout (host code waits on no channel whose timeout
        would end it); a replica past it fails the run, naming the replica,
        the cluster and the op it is in, and is abandoned.  ``inline``: the
        body cannot block (:func:`runs_inline`: device ops on small values,
        held host values), so its replicas run one after another on the
        calling thread, with no timeout to watch and no thread hand-off (a
        wake-up each way, ~10-25 us on this machine); errors name the
        replica as on the pool."""
        n = self.num_replicas
        k = len(flat) // n if n else 0
        tasks = [
            (f"host replica {r}", lambda r=r: call_plan(plan, [flat[i * n + r] for i in range(k)], ks[r], r, cluster))
            for r in self.local_replicas
        ]

        def describe(i: int, frame: Any) -> dict:
            op = running_op(frame)
            return dict(
                replica=self.local_replicas[i],
                cluster=cluster,
                op=None if op is None else op.name,
                location=None if op is None else op_location(op),
            )

        if inline:
            results = run_workers(tasks, self.abort, eager_threads=1)
        else:
            results = run_workers(
                tasks,
                self.abort,
                timeout=self.timeout,
                abort_grace=min(0.5, self.timeout),
                inline=False,
                describe=describe,
            )
        return _by_output(self._all_replicas(results), n, m)

    def _renew_buffers(self) -> None:
        """New planned buffers for the device plans after a failed run (a
        worker it left behind may still write into the old ones)."""
        plans = [self.device_plan] + [plan for groups in self._grouped.values() for _, plan, _ in groups]
        for plan in plans:
            for b in list(plan.buffer_sets):
                b.renew()

    def _device_kernel(self, op: Operation, r: int, c: int = 0) -> Callable[..., Any]:
        """The kernel of ``op`` for the worker of replica ``r``, logical core
        ``c``: communicator participant ``r * C + c``."""
        if not _needs_runtime(type(op)):  # most ops: their numpy kernel, shared by every worker
            return self._pure(op)
        ch = self.channels
        C = self.num_cores
        part = r * C + c
        if isinstance(op, tpu.SendToHostOp):
            if c != 0:  # core 0 of the replica talks to the host
                return lambda *vals: None
            key, gen = op.key.data, self.state.generation
            ch.quiet_requests(key, r, answer_awaited_next(op))  # runtime/host.py
            return lambda *vals: ch.send(key, r, (gen[0],) + vals)
        if isinstance(op, tpu.RecvFromHostOp):
            return self._recv_from_host(op, r, c)
        if isinstance(op, tpu.ReplicaIdOp):
            rid = np.int32(r)
            return lambda: rid
        if isinstance(op, InfeedDequeueTupleOp):
            try:
                return infeed.lookup(op.queue.data, r).dequeue_kernel(r, self.timeout, self.abort)
            except ValueError as e:
                where = op_position(op) or op_location(op)
                raise ValueError(f"{where}: {e}" if where else str(e)) from None
        if isinstance(op, tpu.LogicalCoreIdOp):
            cid = np.int32(c)
            return lambda: cid
        if isinstance(op, ccl.AllReduceOp):
            p = op.params()
            groups, kind, comm = [list(g) for g in p["replica_groups"]], p["computation"], self.comm
            return lambda x: comm.all_reduce(part, np.asarray(x), groups, kind, p["channel_id"])
        if isinstance(op, ccl.AllGatherOp):
            p = op.params()
            groups, dim, comm = [list(g) for g in p["replica_groups"]], p["all_gather_dim"], self.comm
            return lambda x: comm.all_gather(part, np.asarray(x), groups, dim)
        if isinstance(op, ccl.ReduceScatterOp):
            p = op.params()
            groups, comm = [list(g) for g in p["replica_groups"]], self.comm
            return lambda x: comm.reduce_scatter(part, np.asarray(x), groups, p["scatter_dimension"], p["computation"])
        if isinstance(op, ccl.AllToAllOp):
            p = op.params()
            groups, comm = [list(g) for g in p["replica_groups"]], self.comm
            return lambda x: comm.all_to_all(part, np.asarray(x), groups, p["split_dimension"], p["concat_dimension"])
        if isinstance(op, ccl.CollectivePermuteOp):
            p = op.params()
            pairs, comm = [list(q) for q in p["source_target_pairs"]], self.comm
            return lambda x: comm.collective_permute(part, np.asarray(x), pairs)
        if isinstance(op, tpu.ShardingConstraintOp) and C > 1:
            raise ValueError(
                "tpu.sharding_constraint in a replica split over logical cores: the module was not "
                "partitioned; run tpu-propagate-sharding and tpu-spmd-partition first"
            )
        if isinstance(op, (tpu.RecvAtHostOp, tpu.SendFromHostOp)):
            raise ValueError(f"'{op.name}' is a host op but appears in the device program")
        if getattr(type(op), "HOST_ONLY", False):
            loc = op_location(op)
            raise ValueError(
                f"'{op.name}' cannot run on the device"
                + (f" (at {loc})" if loc else "")
                + "; run tpu-mark-outside-compilation and tpu-outline-outside-compilation first"
            )
        return self._pure(op)

    def _variable_update(self, op: Operation) -> Callable[..., Any]:
        """The op's kernel on this executable's host-variable store."""
        return HostVariableUpdateOp.kernel(**op.params(), store=self.host_variables)

    def _pure(self, op: Operation) -> Callable[..., Any]:
        """The op's numpy kernel, built once and shared by every worker
        (kernels keep no per-call state)."""
        k = self._pure_kernels.get(op)
        if k is None:
            # Ops of one form have the same kernel: built once (the 10,000
            # adds of a chain: one kernel, not 10,000).
            key = form_key(op)
            k = self._kernels_by_form.get(key)
            if k is None:
                k = self._kernels_by_form[key] = pure_kernel(op)
            self._pure_kernels[op] = k
        return k

    def _host_kernel(self, op: Operation, w: HostWorker) -> Callable[..., Any]:
        if isinstance(op, HostVariableUpdateOp):
            return self._variable_kernel(op)
        if isinstance(op, tpu.RecvAtHostOp):
            if tpu.HELD_ATTR in op.attributes:
                return w.held_recv_kernel(op.key.data, len(op.results))
            # The function's first recv_at_host (its _args) returns the message
            # that started the run; any other waits on its own channel.
            if w.plan is not None and w.plan.ops and op is w.plan.ops[0]:
                return w.recv_kernel(len(op.results))
            return w.channel_recv_kernel(op.key.data, len(op.results))
        if isinstance(op, tpu.SendFromHostOp):
            if tpu.HELD_ATTR in op.attributes:
                return w.held_send_kernel(op.key.data)
            return w.send_kernel(op.key.data)
        if isinstance(op, tpu.ReplicaIdOp):
            rid = np.int32(w.replica)
            return lambda: rid
        if isinstance(
            op,
            (
                tpu.SendToHostOp,
                tpu.RecvFromHostOp,
                ccl.AllReduceOp,
                ccl.AllGatherOp,
                ccl.ReduceScatterOp,
                ccl.AllToAllOp,
                ccl.CollectivePermuteOp,
            ),
        ):
            raise ValueError(f"'{op.name}' is a device op but appears in the host function of cluster '{w.cluster}'")
        return self._pure(op)

    def _recv_from_host(self, op: Operation, r: int, c: int = 0) -> Callable[..., Any]:
        """Kernel of ``tpu.recv_from_host``: this run's answer, checked.

        With several cores per replica, core 0 receives the host's answer
        and hands it to the replica's other cores (one queue each)."""
        key = op.key.data
        ch = self.channels
        gen = self.state.generation
        specs = [TensorSpec.of_type(t) for t in op.result_types]
        n = len(specs)
        C = self.num_cores
        core_key = key + "#core"
        if c == 0:
            src_key, src = key, r
            forward = [r * C + d for d in range(1, C)]
        else:
            src_key, src = core_key, r * C + c
            forward = []

        def recv():
            while True:
                try:
                    msg = ch.recv(src_key, src)
                except RuntimeTimeoutError as e:
                    if c == 0:
                        self._note_busy_host(e, r)
                    raise
                if msg[0] == gen[0]:
                    break  # else: left behind by an aborted run
            for q in forward:
                ch.send(core_key, q, msg)
            vals = msg[1:]
            if len(vals) != n:
                raise XtpuRuntimeError(f"channel '{key}' carried {len(vals)} values, expected {n}", replica=r, key=key)
            for v, s in zip(vals, specs):
                if tuple(np.shape(v)) != s.shape:
                    raise XtpuRuntimeError(
                        f"channel '{key}' carried a value of shape {list(np.shape(v))}, expected {s}",
                        replica=r,
                        key=key,
                    )
            return None if n == 0 else (vals[0] if n == 1 else vals)

        return recv

    def _note_busy_host(self, err: XtpuRuntimeError, r: int) -> None:
        """Add to a device's timeout waiting for the host where the host
        functions of replica ``r`` still are (e.g. blocked in an op's I/O)."""
        notes = []
        for w in list(self.host_workers):
            if w.replica == r and w.generation == self.state.generation[0]:
                op = w.current_op()
                if op is not None:
                    loc = op_location(op)
                    notes.append(
                        f"the host function of cluster '{w.cluster}' for replica {r} is still in {op.name}"
                        + (f" (at {loc})" if loc else "")
                    )
        if notes:
            err.message += "; " + "; ".join(notes)
            err.args = (err.message,)

    # ------------------------------------------------------------------
    # running
    # ------------------------------------------------------------------

    def _device_task(self, r: int, args: list[Any]) -> tuple:
        return call_plan(self.device_plan, args, self.device_kernels[r], r, None)

    def _core_task(self, r: int, c: int, args: list[Any]) -> tuple:
        try:
            return call_plan(self.device_plan, args, self.device_kernels[r * self.num_cores + c], r, None)
        except XtpuRuntimeError as e:
            e.add_context(logical_core=c)
            raise

    def _run_cores(self, *flat: Any) -> Any:
        """``tpu.replicate`` over ``R x C`` workers: split each replica's
        inputs into the cores' shards, run, assemble the global outputs."""
        n, C = self.num_replicas, self.num_cores
        k = len(flat) // n if n else 0
        splits = self._input_splits
        tasks: list[tuple[str, Callable[[], Any]]] = []
        for r in self.local_replicas:
            vals = [flat[i * n + r] for i in range(k)]
            per_core: list[list[Any]] = [[] for _ in range(C)]
            for v, sp in zip(vals, splits):
                if sp is None:
                    for c in range(C):
                        per_core[c].append(v)
                else:
                    a = np.asarray(v)
                    for c, sl in enumerate(sp):
                        per_core[c].append(a if sl is None else a[sl])
            for c in range(C):
                tasks.append(
                    (f"device replica {r} core {c}", lambda r=r, c=c, args=per_core[c]: self._core_task(r, c, args))
                )
        with self._blas_limit(len(tasks)):
            results = run_workers(tasks, self.abort)
        if self.world is not None:  # only this rank's replicas ran
            results = self._all_replicas([tuple(results[i * C : (i + 1) * C]) for i in range(len(self.local_replicas))])
            results = [None if cores is None else cores[c] for cores in results for c in range(C)]
        outs = []
        for j, assemble in enumerate(self._output_assemblers):
            for r in range(n):
                outs.append(None if results[r * C] is None else assemble([results[r * C + c][j] for c in range(C)]))
        return outs[0] if len(outs) == 1 else (tuple(outs) or None)

    def _run_replicas(self, *flat: Any) -> tuple:
        n = self.num_replicas
        k = len(flat) // n if n else 0
        if not self.device_plan.ops and not self.host_workers:
            # Nothing for the device to compute: no device worker starts.
            local = [self.device_plan.run([flat[i * n + r] for i in range(k)], ()) for r in self.local_replicas]
            return _by_output(self._all_replicas(local), n, self._outputs_per_replica)
        if self.world is None and n == 1 and not self.host_workers:
            # One replica and no host: its worker is this thread (run_workers
            # would run it here too; this skips its bookkeeping).
            with self._blas_limit(1):
                out = self._device_task(0, list(flat))
            return out[0] if len(out) == 1 else (out or None)
        threads = self.replica_threads
        if self.world is None and threads < len(self.local_replicas):
            return self._run_grouped(flat, threads)
        return self._run_threads(flat, threads)

    def _blas_limit(self, workers: int) -> Any:
        """blas_budget's context for a run of ``workers`` device workers at
        once; none for a program that calls no BLAS or LAPACK kernel."""
        return blas_budget.limit(workers, self._split) if self._blas else blas_budget.NO_LIMIT

    @property
    def replica_threads(self) -> int:
        """How many threads the next run's replicas run on
        (runtime/sequential.py): 1 (sequential), the replicas' count (a
        thread each), or in between (each thread runs a block of replicas).  Under MPI, a rank runs a thread per replica and gives BLAS
        the threads of this choice, as one process would."""
        return sequential.replica_threads(
            self.num_replicas, self._sequential_reason, self._preferred_threads, self._groups_ok
        )

    def _run_threads(self, flat: tuple, blas_workers: int) -> Any:
        """A thread per replica; BLAS threads as for ``blas_workers``
        threads running at once (runtime/blas_budget.py)."""
        n = self.num_replicas
        k = len(flat) // n if n else 0
        tasks: list[tuple[str, Callable[[], Any]]] = []
        for r in self.local_replicas:
            args = [flat[i * n + r] for i in range(k)]
            tasks.append((f"device replica {r}", lambda r=r, args=args: self._device_task(r, args)))
        with self._blas_limit(blas_workers):
            results = run_workers(tasks, self.abort)
        return _by_output(
            self._all_replicas(results, getattr(self, "_shared_outputs", None)), n, self._outputs_per_replica
        )

    @property
    def replica_execution(self) -> tuple[str, str]:
        """How the next run executes the replicas, and why:
        ``("sequential", why)`` (all replicas in one thread),
        ``("threads", why)`` (a thread per replica) or ``("blocks", why)``
        (:attr:`replica_threads` threads, each running a block of
        replicas); runtime/sequential.py.  Under MPI a rank always runs a
        thread per replica (``"threads"``), BLAS as for the threads the
        choice would have."""
        w = self.replica_threads
        if self.world is not None:
            return "threads", f"the MPI backend runs a thread per replica (BLAS as for {w} at once)"
        kind = "sequential" if w == 1 else "threads" if w >= len(self.local_replicas) else "blocks"
        if self._sequential_reason is not None:
            return kind, f"the program cannot run sequentially: {self._sequential_reason}"
        n = sequential._setting()
        if n:
            return kind, f"inter-op parallelism threads = {n}"
        return kind, "xtpu's cost model"

    def _run_grouped(self, flat: tuple, threads: int) -> Any:
        """The replicate body on ``threads`` threads, each running its block
        of replicas (one thread: this one); BLAS threads as for
        ``threads`` threads running at once.  Their collectives meet once
        per call of all the threads, each with its block's operands.  When
        a kernel raises, or the replicas disagree on a region's predicate,
        the step runs again with a thread per replica (the program is pure),
        which gives today's error, naming the replica, or today's results."""
        n, m = self.num_replicas, self._outputs_per_replica
        k = len(flat) // n if n else 0
        debug = _log.isEnabledFor(logging.DEBUG)
        try:
            if self._batchable is False:
                groups = self._grouped.get(threads)
                if groups is None:  # a collective the threads reject at run time fails here: they name the replica
                    groups = self._grouped[threads] = self._build_groups(threads)
            else:
                # Which arguments every replica gets as one array (mirrored
                # variables): those run unbatched (runtime/batching.py).
                shared = tuple(all(flat[i * n + r] is flat[i * n] for r in range(1, n)) for i in range(k))
                groups = self._grouped.get(threads)
                if groups is None or self._grouped_shared.get(threads) != shared:
                    groups = self._grouped[threads] = self._build_groups(threads, shared)
                    self._grouped_shared[threads] = shared
            if debug:
                _log.debug(
                    "run: %d replicas on %d thread%s: %s",
                    n,
                    threads,
                    "s" if threads > 1 else "",
                    "; ".join(f"replicas {b}" for b, _, _ in groups),
                )
                t0 = time.perf_counter()
            with self._blas_limit(threads):
                if threads == 1:
                    block, plan, kernels = groups[0]
                    outs = [
                        call_plan(plan, [tuple(flat[i * n + r] for r in block) for i in range(k)], kernels, block, None)
                    ]
                else:
                    tasks = [
                        (
                            f"device replicas {block[0]}-{block[-1]}",
                            lambda block=block, plan=plan, kernels=kernels: call_plan(
                                plan, [tuple(flat[i * n + r] for r in block) for i in range(k)], kernels, block, None
                            ),
                        )
                        for block, plan, kernels in groups
                    ]
                    outs = run_workers(tasks, self.abort)
        except Exception as e:  # noqa: BLE001 - rerun with a thread per replica
            # Diverged: the replicas took different ways through a region
            # with a collective; failed: the threads name the replica.
            _log.debug("run: %s; the step runs again with a thread per replica", e)
            if self.abort.is_set:
                self.abort.reset()
                self.comm.reset()
            # BLAS threads as for a thread per replica: the threads mode's
            # results (and no R threads each with every core's BLAS threads).
            return self._run_threads(flat, len(self.local_replicas))
        if debug:
            _log.debug(
                "run: %d replicas on %d thread%s finished in %.2f ms",
                n,
                threads,
                "s" if threads > 1 else "",
                (time.perf_counter() - t0) * 1e3,
            )
        per_replica = [tuple(o[j] for o in out) for (block, _, _), out in zip(groups, outs) for j in range(len(block))]
        return _by_output(per_replica, n, m)

    def _build_groups(self, threads: int, shared: tuple | None = None) -> list[tuple[list[int], Plan, tuple]]:
        """Per thread: its block of replicas, the body's plan for that many
        replicas (one per block size), and its kernels.  ``shared`` (per
        argument: one array for every replica), when given: a block of
        several replicas runs batched if its body can (runtime/batching.py)."""
        blocks = sequential.blocks(list(self.local_replicas), threads)
        plans: dict[int, Any] = {}
        out = []
        for w, block in enumerate(blocks):
            m = len(block)
            plan = plans.get(m)
            if plan is None:
                plan = plans[m] = self._batched_plan(m, shared) if shared is not None and m > 1 else None
                if plan is None:
                    plan = plans[m] = Plan(
                        self.replicate.body.block,
                        f"device_replicas_{m}",
                        replicas=m,
                        together=lambda op: isinstance(op, sequential.COLLECTIVES),
                        keeps_operands=_keeps_operands,
                    )
            if isinstance(plan, batching.BatchedPlan):
                kernels = plan.kernels(
                    lambda op, w=w, m=m: (
                        self._batched_collective(op, w, m, blocks)
                        if isinstance(op, sequential.COLLECTIVES)
                        else self._pure(op)
                    )
                )
            else:
                kernels = plan.kernels(
                    lambda op, j=0, w=w, block=block: (
                        self._block_collective(op, w, blocks) if j is None else self._device_kernel(op, block[j])
                    )
                )
            out.append((block, plan, kernels))
        return out

    def _batched_plan(self, m: int, shared: tuple) -> batching.BatchedPlan | None:
        """The plan running a block of ``m`` replicas batched, or None when
        the body has an op without a batching rule (runtime/batching.py)."""
        calls = batching.calls_saved(self.replicate)
        if calls == 0:  # never pays for this program: no arguments checked on later runs
            _log.debug("run: blocks of replicas run replica by replica: their ops are large, or none to save")
            self._batchable = False
            return None
        arg_batched = [not s for s in shared]
        if not batching.worth_batching(self.replicate, arg_batched, calls):
            _log.debug("run: blocks of %d replicas run replica by replica: batching would not pay", m)
            return None
        try:
            block, out_batched = self._batcher(self.replicate.body.block, m, arg_batched)
        except Exception as e:  # noqa: BLE001 - an op without a batching rule: replica by replica
            _log.debug("run: blocks of replicas run replica by replica: %s", e)
            self._batchable = False
            return None
        self._batchable = True
        inner = Plan(block, f"device_batched_{m}", keeps_operands=_keeps_operands)
        return batching.BatchedPlan(inner, m, arg_batched, out_batched)

    def _batched_collective(self, op: Operation, w: int, m: int, blocks: list[list[int]]) -> Callable[[Any], Any]:
        """The kernel of collective ``op`` in thread ``w``'s batched body (a
        block of ``m`` replicas): the block collective on the stack's rows
        (:func:`batching.split_kernel`), or, when this one block holds every
        replica, an all-reduce over them all as one accumulate
        (:func:`batching.all_reduce_of_rows`)."""
        general = batching.split_kernel(
            self._block_collective(op, w, blocks),
            m,
            tpu.BATCHED_OPERAND_ATTR in op.attributes,
            tpu.BATCHED_RESULT_ATTR in op.attributes,
        )
        if len(blocks) == 1 and self.world is None:
            return batching.all_reduce_of_rows(op, m, self.num_replicas, general)
        return general

    def _block_collective(self, op: Operation, w: int, blocks: list[list[int]]) -> Callable[[Any], tuple]:
        """The kernel of collective ``op`` for thread ``w`` of ``blocks``:
        the block's operands in, its results out; with several threads they
        meet (``ThreadCommunicator.meet``) and the last to arrive computes
        every replica's result (runtime/sequential.py's together kernel)."""
        kernel = sequential.together_kernel(op, self.num_replicas)
        if len(blocks) == 1:
            return kernel
        sizes, comm, name = [len(b) for b in blocks], self.comm, op.name

        def compute(parts, metas):
            res = kernel([v for part in parts for v in part])
            out, i = [], 0
            for size in sizes:
                out.append(tuple(res[i : i + size]))
                i += size
            return out

        key = ("replica blocks", len(blocks))
        return lambda values: comm.meet(w, key, len(blocks), tuple(values), compute, name)

    def _all_replicas(self, local: list, shared: list | None = None) -> list:
        """Per-replica results of every replica from this rank's (MPI
        backend; see runtime/mpi.py), None for replicas whose outputs this
        rank does not get; ``shared[j]``, when not None, names per replica a
        local replica whose output ``j`` is the same (an all-reduce's)."""
        if self.world is None:
            return local
        return self.world.all_replicas(
            dict(zip(self.local_replicas, local)), self.num_replicas, self.timeout, self.abort, shared
        )

    def run(self, args: Sequence[Any], checked: bool = False) -> list[np.ndarray]:
        """Run ``@main`` on its flat arguments; returns its flat results as
        numpy arrays of the declared shapes and dtypes.  ``checked``: the
        caller guarantees numpy arrays of exactly the declared shapes and
        dtypes (replication.py's plain inputs), which are then not checked
        again.

        Raises:
          ValueError: wrong number, shapes or dtypes of arguments; an
            invalid ``$XTPU_INTER_OP_THREADS``.
          XtpuRuntimeError: a worker failed (RuntimeTimeoutError when a
            channel or collective waited past the timeout; HostComputeError
            when host code raised).
        """
        sequential._setting()  # a bad $XTPU_INTER_OP_THREADS: its ValueError before anything runs
        expected = self._arg_specs
        if len(args) != len(expected):
            raise ValueError(f"@main takes {len(expected)} arguments, got {len(args)}")
        if checked:
            conv = list(args)
        else:
            conv = []
            for i, (a, (shape, dtype, s)) in enumerate(zip(args, expected)):
                arr = np.asarray(a)
                if arr.shape != shape or arr.dtype != dtype:
                    raise ValueError(f"argument {i} of @main must be {s}, got {arr.dtype.name}{list(arr.shape)}")
                conv.append(arr)
        with self._lock:  # one run at a time: channels and collectives are shared
            if self.state.closed:
                raise RuntimeError("the executable was closed")
            if self.abort.is_set:  # the previous run failed
                if self.world is not None:
                    raise RuntimeError(
                        "a previous run of this program failed under MPI; the job cannot go on "
                        "(messages of the failed run may still be in flight): end it"
                    )
                self._replace_busy_host_workers()
                self._renew_buffers()
                self.abort.reset()
                self.comm.reset()
            if not self._started:
                for w in self.host_workers:
                    w.start()
                self._started = True
            self.state.next_run()
            if self.world is not None and hasattr(self.comm, "set_call"):
                self._calls = getattr(self, "_calls", 0) + 1
                self.comm.set_call(self._program_digest, self._calls)
            if self.world is not None and self.world.pool_client is not None:
                self.world.pool_client.run(self._pool_id, conv, self._pool_args)  # the workers run their replicas
            variables = self._variables
            if variables is not None and variables.world.rank == 0:
                variables.start_serving(self.timeout, self.abort)
            try:
                outs = call_plan(self.main_plan, conv, self.main_kernels, None, None)
                if variables is not None:  # one value of each host variable on every rank
                    if variables.world.rank == 0:
                        variables.finish_serving(self.timeout, self.abort)
                    else:
                        variables.finish_remote(self.timeout, self.abort)
            except Aborted:
                # No device worker failed by itself: a host worker aborted
                # the run; its error is the one to report.
                err = self.abort.exception
                if self.world is not None:
                    self.world.failed(err if isinstance(err, BaseException) else Aborted(None))
                if isinstance(err, BaseException) and not isinstance(err, Aborted):
                    raise err  # noqa: B904 - the host worker's own error, as it was raised
                raise
            except BaseException as exc:
                self.abort.abort(None)  # stop host workers still busy
                if self.world is not None:
                    self.world.failed(exc)
                if variables is not None:
                    variables.stop_serving()
                raise
            finally:
                if self.abort.is_set:
                    # The caller gets the error; host workers waiting for
                    # the next run must not keep it (its traceback holds
                    # this executable).
                    self.abort.drop_exception()
        roots = _input_roots(conv)
        return [_detached(o, conv, roots) for o in outs]

    def placeholders(self, args: Sequence[Any]) -> list[Any]:
        """``args`` with each None replaced by a zero of that argument's
        shape and dtype (no memory: a broadcast scalar): the arguments a
        local pool's worker does not use are not sent to it."""
        return [
            np.broadcast_to(np.zeros((), dtype), shape) if a is None else a
            for a, (shape, dtype, _) in zip(args, self._arg_specs)
        ]

    def close(self) -> None:
        """End the host workers (also done when the executable is collected);
        a worker busy in host code ends when that code returns."""
        self._finalizer()


def _shardings(rep: tpu.ReplicateOp, name: str, count: int, what: str) -> list[Sharding]:
    """The shardings of attribute ``name`` (one per ``what``), replicated
    when absent."""
    attr = rep.attributes.get(name)
    if attr is None:
        return [Sharding.replicated()] * count
    if not isinstance(attr, ArrayAttr) or not all(isinstance(a, ShardingAttr) for a in attr.data):
        raise ValueError(f"tpu.replicate's {name} must be an array of #tpu.sharding, got {attr}")
    if len(attr.data) != count:
        raise ValueError(f"tpu.replicate's {name} has {len(attr.data)} entries for {count} {what}s")
    out = []
    for i, a in enumerate(attr.data):
        s = a.sharding
        if s.kind == "manual":
            raise ValueError(
                f"{what} {i} of tpu.replicate has a manual sharding, which the runtime cannot split or assemble"
            )
        if s.kind == "tiled" and s.num_devices != rep.num_cores:
            raise ValueError(
                f"{what} {i} of tpu.replicate has sharding {s} over {s.num_devices} devices, "
                f"but a replica has {rep.num_cores} logical cores"
            )
        if s.kind == "maximal" and s.device >= rep.num_cores:
            raise ValueError(
                f"{what} {i} of tpu.replicate is on logical core {s.device}, "
                f"but a replica has {rep.num_cores} logical cores"
            )
        out.append(s)
    return out


def _local_type_of(s: Sharding, global_type: Any, what: str) -> tuple[int, ...]:
    if not isinstance(global_type, TensorType):
        raise ValueError(f"{what} has type {global_type}, expected a tensor")
    try:
        return s.shard_shape(TensorSpec.of_type(global_type).shape)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


def _check_local(what: str, s: Sharding, global_type: Any, body_type: Any, body_what: str) -> tuple[int, ...]:
    """Check that ``body_type`` is ``global_type``'s shard under ``s``."""
    local = _local_type_of(s, global_type, what)
    g = TensorSpec.of_type(global_type)
    b = TensorSpec.of_type(body_type)
    if b.shape != local or b.dtype != g.dtype:
        hint = (
            "; the body has the global shape: run tpu-spmd-partition first"
            if b.shape == g.shape and b.dtype == g.dtype
            else ""
        )
        raise ValueError(
            f"{what} has global type {global_type} and sharding {s}, so each logical core holds "
            f"{TensorSpec(local, g.dtype)}, but {body_what} has type {body_type}{hint}"
        )
    return local


def _input_splits(rep: tpu.ReplicateOp) -> list[list[tuple[slice, ...] | None] | None]:
    """Per body argument: None (every core gets the whole value) or, per
    logical core, the slices of the global value it gets (None: whole)."""
    C, n = rep.num_cores, rep.num_replicas
    args = rep.body.block.args
    out: list[list[tuple[slice, ...] | None] | None] = []
    for i, (arg, s) in enumerate(zip(args, _shardings(rep, "tpu.input_shardings", len(args), "input"))):
        gtype = rep.replicated_inputs[i * n].type
        _check_local(f"input {i} of tpu.replicate", s, gtype, arg.type, f"body argument {i}")
        if s.kind != "tiled":
            out.append(None)  # replicated, or maximal: every core gets it, the owner uses it
            continue
        shape = TensorSpec.of_type(gtype).shape
        out.append([s.shard_slices(shape, c) for c in range(C)])
    return out


def _output_assemblers(rep: tpu.ReplicateOp) -> list[Callable[[list[Any]], Any]]:
    """Per yielded value: a function from the cores' values to the global one."""
    C, n = rep.num_cores, rep.num_replicas
    term = rep.body.block.last_op
    values = list(term.operands) if term is not None else []
    out: list[Callable[[list[Any]], Any]] = []
    for j, (v, s) in enumerate(zip(values, _shardings(rep, "tpu.output_shardings", len(values), "output"))):
        gtype = rep.outputs[j * n].type
        _check_local(f"output {j} of tpu.replicate", s, gtype, v.type, f"the yielded value {j}")
        if s.kind != "tiled":
            owner = 0 if s.kind == "replicated" else s.device
            out.append(lambda vals, owner=owner: vals[owner])
            continue
        g = TensorSpec.of_type(gtype)
        shape, dtype = g.shape, numpy_dtype(g.dtype)
        pieces: list[tuple[int, tuple[slice, ...]]] = []
        seen: set[tuple[int, ...]] = set()
        for c in range(C):  # one holder per tile: the lowest core holding it
            tile = s.tile_for_device(c)
            if tile is not None and tile not in seen:
                seen.add(tile)
                pieces.append((c, s.shard_slices(shape, c)))

        def assemble(vals, shape=shape, dtype=dtype, pieces=pieces):
            full = np.empty(shape, dtype)
            for c, sl in pieces:
                full[sl] = vals[c]
            return full

        out.append(assemble)
    return out


def _by_output(per_replica: list[tuple], n: int, m: int) -> Any:
    """Replica-major results (``m`` per replica; None for a replica whose
    results this rank does not get) to ``tpu.replicate``'s output-major
    order, in the plans' kernel convention (one result bare, none as None)."""
    outs = tuple(None if per_replica[r] is None else per_replica[r][j] for j in range(m) for r in range(n))
    return outs[0] if len(outs) == 1 else (outs or None)


def _shutdown(channels: ChannelTable, state: RunState) -> None:
    state.close()
    channels.close_all()


class _ParticipantKernels:
    """Per participant ``p`` its kernel tuple for the device plan, built by
    ``build(p)`` at its first use (a step run in blocks or sequentially
    never uses them: at 8 replicas building them all was a third of the
    Executable's build)."""

    __slots__ = ("_kernels", "_build", "_lock")

    def __init__(self, participants: int, build: Callable[[int], tuple]) -> None:
        self._kernels: list[tuple | None] = [None] * participants
        self._build = build
        self._lock = threading.Lock()

    def __getitem__(self, p: int) -> tuple:
        k = self._kernels[p]
        if k is None:
            with self._lock:  # replica threads may ask at once
                k = self._kernels[p]
                if k is None:
                    k = self._kernels[p] = self._build(p)
        return k

    def __len__(self) -> int:
        return len(self._kernels)

    def build_all(self, participants: Sequence[int]) -> None:
        for p in participants:
            self[p]


#: The op classes whose device kernel needs the runtime (channels, the
#: communicator, the replica's id, infeed) or is refused on the device:
#: :meth:`Executable._device_kernel` handles them; every other op runs its
#: numpy kernel.
_RUNTIME_OPS = sequential.COLLECTIVES + (
    tpu.SendToHostOp,
    tpu.RecvFromHostOp,
    tpu.ReplicaIdOp,
    InfeedDequeueTupleOp,
    tpu.LogicalCoreIdOp,
    tpu.ShardingConstraintOp,
    tpu.RecvAtHostOp,
    tpu.SendFromHostOp,
)
_needs_runtime_cache: dict[type, bool] = {}


def _needs_runtime(cls: type) -> bool:
    """Whether :meth:`Executable._device_kernel` must look at ops of ``cls``
    (one of :data:`_RUNTIME_OPS`, a subclass, or a host-only op)."""
    got = _needs_runtime_cache.get(cls)
    if got is None:
        got = _needs_runtime_cache[cls] = issubclass(cls, _RUNTIME_OPS) or bool(getattr(cls, "HOST_ONLY", False))
    return got


def _keeps_operands(op: Operation) -> bool:
    """Whether ``op``'s kernel may hold its operands past its return (a
    collective, a host transfer, a region op holding one): its operands get
    no planned buffer (runtime/buffers.py)."""
    if _needs_runtime(type(op)):
        return True
    return bool(op.regions) and any(_needs_runtime(type(o)) for o in walk_ops(op) if o is not op)


def _root(a: np.ndarray) -> Any:
    """The object that owns ``a``'s memory: the end of its ``base`` chain."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


#: Owners of memory that no other object owns: an array owning its data,
#: or an anonymous mapping (a kept buffer's, runtime/buffers.py, which a
#: training loop feeds back as an input).
_OWNERS = (np.ndarray, mmap.mmap)


def _input_roots(inputs: list[np.ndarray]) -> set[int] | None:
    """Ids of the objects owning the inputs' memory, or None when an input
    views a foreign buffer (then :func:`_detached` compares with each input).
    0-d inputs too: a caller's 0-d array is as writable as any other."""
    roots = [_root(i) for i in inputs]
    if not all(isinstance(r, _OWNERS) for r in roots):
        return None
    return {id(r) for r in roots}


def _detached(x: Any, inputs: list[np.ndarray], roots: set[int] | None = None) -> np.ndarray:
    """``x`` as an array that does not alias any input (copied only then).

    Results of collectives are shared, read-only arrays; like TF's tensors
    they are values, not buffers to write into.  With ``roots``
    (:func:`_input_roots`) a view is checked in O(1): it aliases an input
    only if its memory has the same owner (many outputs that are slices of
    one buffer, as after ``ccl-combine-all-reduce``, against many inputs
    were quadratic).
    """
    if x is None:  # another rank's replica (MPI backend, outputs="local")
        return None
    a = np.asarray(x)
    # A view of an input, or an input itself (a program that returns its
    # argument, a 0-d one too): the caller's array must not come back as an
    # output.
    root = _root(a)
    if roots is not None and isinstance(root, _OWNERS):
        return a.copy() if id(root) in roots else a
    if a.base is None and not any(a is i for i in inputs):
        return a
    for i in inputs:
        if np.may_share_memory(a, i):
            return a.copy()
    return a


def _variable_service(exe: Executable) -> Any:
    """Under MPI with several ranks, the service that keeps one value of
    each host variable the program updates (runtime/mpi_variables.py);
    None otherwise."""
    if exe.world is None or exe.world.size == 1:
        return None
    ops = [o for _, fn in exe.host_fns for o in fn.walk() if isinstance(o, HostVariableUpdateOp)]
    ops += [o for rep in exe.host_replicates for o in rep.walk() if isinstance(o, HostVariableUpdateOp)]
    if not ops:
        return None

    service = VariableService(
        exe.world,
        [exe._variable_update(o) for o in ops],
        [o.variable.data for o in ops],
        read=lambda name: exe.host_variables.update(name, "read"),
        write=lambda name, value: exe.host_variables.update(name, "assign", value),
    )
    service.index = {o: i for i, o in enumerate(ops)}
    return service


def _mpi_program(exe: Executable, comm: Any = None) -> Communicator:
    """The MPI backend's communicator for ``exe`` (``comm``, an
    MPICommunicator, when given), after checking that every rank compiled
    the same program; creates the sub-communicators of the program's groups
    in program order (collective, on every rank)."""
    n, C = exe.num_replicas * exe.num_cores, exe.num_cores
    if comm is not None and (comm.num_participants, comm.cores_per_replica) != (n, C):
        raise ValueError(
            f"the communicator has {comm.num_participants} participants ({comm.cores_per_replica} per replica) "
            f"but the program has {exe.num_replicas} replicas x {C} logical cores: pass num_participants={n}"
            + (f", cores_per_replica={C}" if C > 1 else "")
        )
    text = str(exe.module)
    exe._program_digest = hashlib.sha256(text.encode()).digest()[:8]
    pool = exe.world.pool_client
    if pool is not None:  # the local pool: the workers compile it from its text
        exe._pool_id = pool.ship(text, exe.timeout)
        exe._pool_args = _arguments_by_rank(exe)
        weakref.finalize(exe, pool.drop, exe._pool_id)
    exe.world.check_same_program(text, exe.timeout)
    if comm is None:
        comm = HybridCommunicator(exe.world, n, exe.abort, exe.timeout, cores_per_replica=C)
    groups, pairs = [], []
    for op in exe.replicate.body.walk() if exe.replicate is not None else ():  # none: nothing for the device
        if isinstance(op, ccl.CollectivePermuteOp):
            pairs.append([list(q) for q in op.params()["source_target_pairs"]])
        elif isinstance(op, (ccl.AllReduceOp, ccl.AllGatherOp, ccl.ReduceScatterOp, ccl.AllToAllOp)):
            groups.append([list(g) for g in op.params()["replica_groups"]])
    comm.prepare(groups, pairs)
    exe._shared_outputs = _all_reduced_outputs(exe) if C == 1 and exe.replicate is not None else None
    return comm


def _arguments_by_rank(exe: Executable) -> list[set[int] | None]:
    """Per argument of ``@main``, the ranks whose replicas use it (None:
    every rank): an argument used only as replica ``r``'s operand of a
    ``tpu.replicate`` (operand ``i * n + r``) goes to ``r``'s rank only."""
    out: list[set[int] | None] = []
    n, w = exe.num_replicas, exe.world
    for arg in exe.main.body.block.args:
        ranks: set[int] | None = set()
        for use in arg.uses:
            if isinstance(use.operation, tpu.ReplicateOp) and n:
                ranks.add(w.owner(use.index % n, n))
            else:
                ranks = None
                break
        out.append(ranks)
    return out


def _all_reduced_outputs(exe: Executable) -> list | None:
    """Per output of the replicate body: None, or when it is a
    ``ccl.all_reduce`` result (equal, bit for bit, on every member of a
    group), per replica a replica of this rank in the same group whose value
    it can take instead of receiving it; None when no output qualifies."""
    term = exe.replicate.body.block.last_op
    R, local, w = exe.num_replicas, set(exe.local_replicas), exe.world
    out: list = []
    for v in term.operands if term is not None else ():
        owner = getattr(v, "op", None)
        donors = None
        if isinstance(owner, ccl.AllReduceOp):
            groups = normalize_replica_groups([list(g) for g in owner.params()["replica_groups"]], R)
            # Only when every group has a member on every rank: then the
            # sender leaves the output out exactly when the receiver can
            # fill it in (the same decision on every rank).
            if all({w.owner(r, R) for r in g} == set(range(w.size)) for g in groups):
                donors = [None] * R
                for g in groups:
                    mine = [r for r in g if r in local]
                    for r in g:
                        donors[r] = r if r in local else mine[0]
        out.append(donors)
    return out if any(d is not None for d in out) else None


def _uses_blas(ops: Sequence[Operation]) -> bool:
    """Whether a kernel of ``ops`` (a replicate's, ``walk_ops``) may call
    BLAS or LAPACK (whose thread count blas_budget sets for a run): a
    ``dot_general``, a ``convolution`` or a linear-algebra op
    (dialects/hlo_linalg.py)."""
    return any(isa(op, (hlo.DotGeneralOp, ConvolutionOp)) or type(op).__module__ == hlo_linalg.__name__ for op in ops)


def _has_large_matmul(ops: Sequence[Operation]) -> bool:
    """Whether a ``dot_general`` or ``convolution`` of ``ops`` (a
    replicate's, ``walk_ops``) has at
    least :data:`intra_op.MIN_WORK` multiply-adds (its result's elements
    times the size contracted for each: the contracting dimensions; the
    kernel's elements per output feature)."""
    for op in ops:
        if isa(op, hlo.DotGeneralOp):
            lhs = TensorSpec.of_type(op.operands[0].type).shape
            k = math.prod(lhs[d] for d in op.params()["lhs_contracting_dimensions"])
        elif isa(op, ConvolutionOp):
            rhs = TensorSpec.of_type(op.operands[1].type).shape
            dn = conv_params(len(rhs), **op.params())["dimension_numbers"]
            k = int(np.prod(rhs, dtype=np.int64)) // max(1, rhs[dn.rhs[0]])
        else:
            continue
        if k * TensorSpec.of_type(op.results[0].type).size >= intra_op.MIN_WORK:
            return True
    return False
