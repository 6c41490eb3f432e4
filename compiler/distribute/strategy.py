"""``xtpu.TPUStrategy``: TF's TPU distribution strategy on the simulated system.

Both the contrib API of the seed ``contrib_tpu_strategy.txt``
(``call_for_each_tower``, ``get_tower_context``, ``reduce(aggregation, value,
destinations)``, ``unwrap``, ...) and the TF 2 names (``run``,
``get_replica_context``, ``reduce(reduce_op, value, axis)``,
``experimental_local_results``, ...) are provided.  ``run`` traces the step
function once per input signature through ``xtpu.replicate`` (whose cache it
reuses); ``merge_call`` is traced once, in the cross-replica context, with
per-replica traced values, and the cross-replica operations it uses become
``tpu.cross_replica_sum`` collectives.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from xtpu.core import pytree
from xtpu.core.tracing import Tensor, bind, convert, current_trace, to_numpy
from xtpu.dialects import hlo
from xtpu.dialects.tensor_spec import np_kind
from xtpu.distribute import input_lib

# The thread's scope / colocation / run stacks and the traced reductions live
# below this module (variables use them without importing the strategy).
from xtpu.distribute.context import (  # noqa: F401 - re-exported: the strategy's run state
    RetraceRequest,
    _RunState,
    _stack,
    _TracedPerReplica,
    _tree_map,
    current_colocation,
    current_run_state,
    current_scope_strategy,
    register_strategy_type,
    traced_reduce,
)
from xtpu.distribute.context import (
    all_gather_list as _all_gather_list,
)
from xtpu.distribute.context import (
    select_for as _select_for,
)
from xtpu.distribute.function import run_in_function
from xtpu.distribute.input_lib import (  # noqa: F401 - the TF 1 contrib names
    ContribDistributedDataset as DistributedDataset,
)
from xtpu.distribute.input_lib import (  # noqa: F401
    ContribDistributedIterator as DistributedIterator,
)
from xtpu.distribute.input_lib import split_batch as _split_batch  # noqa: F401
from xtpu.distribute.run_arguments import partial_apply_variables
from xtpu.distribute.values import (
    Mirrored,
    PerReplica,
    VariableAggregation,
    as_aggregation,
)
from xtpu.distribute.variables import ReplicaComponent, Variable
from xtpu.ops.array_ops import concat, replica_id, reshape
from xtpu.ops.control_flow import while_loop
from xtpu.ops.math_ops import reduce_sum
from xtpu.ops.sharding_ops import assign_to_logical_device, replicate_to_logical_devices, split_to_logical_devices
from xtpu.replication.collectives import all_gather
from xtpu.replication.device_assignment import DeviceAssignment
from xtpu.replication.program import cross_replica_sum, replicate
from xtpu.replication.topology import initialize_tpu_system

# --------------------------------------------------------------------------
# Cluster resolver
# --------------------------------------------------------------------------


class TPUClusterResolver:
    """The local simulated TPU system (``tf.distribute.cluster_resolver.TPUClusterResolver``).

    Args (TF 2's, in TF's order): ``tpu`` is None, ``""`` or ``"local"``
    (the local TPU, as ``TPUClusterResolver(tpu='')`` in TF's guides);
    ``zone``, ``project``, ``job_name``, ``coordinator_name``,
    ``coordinator_address``, ``credentials``, ``service``, ``discovery_url``
    are accepted for TF's signature.  Keywords only:
      num_cores: cores of the simulated system (default 8, a v3-8).
      topology: an ``xtpu.Topology``; when given, its cores are the system's.

    Raises:
      TypeError: ``tpu`` is a number (give the cores as ``num_cores=``).
      ValueError: ``tpu`` names a remote TPU (xtpu simulates the local one).
    """

    def __init__(
        self,
        tpu: Any = None,
        zone: Any = None,
        project: Any = None,
        job_name: str = "worker",
        coordinator_name: Any = None,
        coordinator_address: Any = None,
        credentials: Any = "default",
        service: Any = None,
        discovery_url: Any = None,
        *,
        num_cores: int | None = 8,
        topology: Any = None,
    ):
        if isinstance(tpu, (int, np.integer)) and not isinstance(tpu, bool):
            raise TypeError(
                f"TPUClusterResolver's first argument is TF's `tpu` (a TPU name, '' for the local "
                f"TPU); give the number of cores as num_cores={int(tpu)}"
            )
        if tpu not in (None, "", "local") and tpu != b"":
            raise ValueError(
                f"xtpu simulates the local TPU system only; tpu={tpu!r} names another one "
                "(use TPUClusterResolver(tpu='') or TPUClusterResolver())"
            )
        self._tpu = tpu

        if topology is not None:
            n = int(topology.num_tasks * topology.num_tpus_per_task)
            if num_cores is not None and num_cores != 8 and num_cores != n:
                raise ValueError(f"num_cores={num_cores} disagrees with the topology's {n} cores")
            num_cores = n
        if num_cores is None:
            num_cores = 8
        self._topology = topology if topology is not None else initialize_tpu_system(num_cores=num_cores)
        self.num_cores = int(num_cores)

    @property
    def topology(self):
        return self._topology

    def num_accelerators(self, task_type: Any = None, task_id: Any = None, config_proto: Any = None) -> dict:
        return {"TPU": self.num_cores}

    def master(self, task_type: Any = None, task_id: Any = None, rpc_layer: Any = None) -> str:
        return ""

    def get_master(self) -> str:
        return ""

    def cluster_spec(self) -> dict:
        return {"worker": ["localhost"]}

    def __repr__(self) -> str:
        return f"TPUClusterResolver(num_cores={self.num_cores}, topology={self._topology!r})"


# --------------------------------------------------------------------------
# Traced cross-replica helpers
# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# Replica contexts
# --------------------------------------------------------------------------


class ReplicaContext:
    """The replica context (``tf.distribute.ReplicaContext``)."""

    def __init__(self, strategy: TPUStrategy, traced: bool):
        self._strategy = strategy
        self._traced = traced

    @property
    def strategy(self) -> TPUStrategy:
        return self._strategy

    @property
    def num_replicas_in_sync(self) -> int:
        return self._strategy.num_replicas_in_sync

    @property
    def replica_id_in_sync_group(self) -> Any:
        """This replica's id: a traced int32 scalar (``tpu.replica_id``)
        inside ``run``, 0 in the default context."""
        if self._traced and current_trace() is not None:
            return replica_id()
        return np.int32(0)

    @property
    def tower_id(self) -> Any:
        return self.replica_id_in_sync_group

    @property
    def devices(self) -> tuple[str, ...]:
        return (self._strategy.worker_devices[0],)

    def merge_call(self, merge_fn: Callable, args: tuple = (), kwargs: dict | None = None) -> Any:
        """Run ``merge_fn(strategy, *args, **kwargs)`` once in the
        cross-replica context, with the replicas' values of ``args`` as
        per-replica values; every replica gets its result.  Inside ``run`` it
        is traced once and its cross-replica operations become collectives."""
        kwargs = kwargs or {}
        state = current_run_state()
        if not self._traced or state is None or current_trace() is None:
            # Default context: one replica.
            with self._strategy.scope():
                return merge_fn(self._strategy, *args, **kwargs)
        if current_trace().cluster is not None:
            raise ValueError("merge_call cannot run inside an outside_compilation cluster")
        n = state.num_replicas

        def wrap(x):
            return _TracedPerReplica(x, n) if isinstance(x, Tensor) else x

        a = _tree_map(wrap, tuple(args))
        kw = _tree_map(wrap, dict(kwargs))
        prev = state.in_merge
        state.in_merge = True
        _stack("cross").append(self._strategy)
        try:
            result = merge_fn(self._strategy, *a, **kw)
        finally:
            _stack("cross").pop()
            state.in_merge = prev

        def unwrap_local(x):
            if isinstance(x, _TracedPerReplica):
                return x.local
            if isinstance(x, Mirrored):
                return x.values[0]
            if isinstance(x, PerReplica):
                raise ValueError("merge_fn returned a PerReplica of concrete values; return tensors or reductions")
            return x

        return _tree_map(unwrap_local, result, is_leaf=lambda x: isinstance(x, PerReplica))

    def all_reduce(self, reduce_op: Any, value: Any) -> Any:
        """Reduce ``value`` across the replicas; every replica gets the result
        (``tf.distribute.ReplicaContext.all_reduce``).

        Args:
          reduce_op: ``xtpu.ReduceOp.SUM`` or ``MEAN`` (or ``"SUM"`` /
            ``"MEAN"``).
          value: a nested structure of numeric tensors.

        Returns:
          The structure of ``value``, each tensor of its shape and dtype
          replaced by its sum (MEAN: divided by ``num_replicas_in_sync``) over
          the replicas: one ``cross_replica_sum`` per tensor (one
          ``ccl.all_reduce`` each; ``ccl-combine-all-reduce`` packs them as
          TF's batch all-reduce does).  In the default context (one replica)
          the value itself.  The gradient is the same all-reduce of the
          cotangents (TF's ``grad_wrapper``).

        Raises:
          ValueError: a ``reduce_op`` other than SUM or MEAN; a call inside an
            outside_compilation cluster.
        """
        if isinstance(reduce_op, str):
            reduce_op = reduce_op.upper()
        agg = as_aggregation(reduce_op)
        if agg not in (VariableAggregation.SUM, VariableAggregation.MEAN):
            raise ValueError(f"all_reduce needs xtpu.ReduceOp.SUM or MEAN, got {reduce_op!r}")
        state = current_run_state()
        if state is None or current_trace() is None or not self._traced:
            return value
        self._device_only("all_reduce")
        return _tree_map(lambda x: traced_reduce(agg, x, state.num_replicas), value)

    def all_gather(self, value: Any, axis: int) -> Any:
        """Concatenate the replicas' ``value`` along ``axis`` in replica order;
        every replica gets the result (``tf.distribute.ReplicaContext.all_gather``).

        Args:
          value: a nested structure of tensors; each of shape ``S``, the same
            on every replica (shapes are static).
          axis: a dimension in ``[0, rank)``.

        Returns:
          The structure of ``value``, each tensor of shape ``S`` with
          ``S[axis] * num_replicas_in_sync`` along ``axis``: one
          ``ccl.all_gather`` over all replicas (with several logical cores per
          replica, an all-reduce of each replica's value placed in a zero
          buffer, which tpu-spmd-partition partitions).  In the default
          context (one replica) the value itself.  The gradient of a
          replica's value is its block of the cotangents summed over the
          replicas (``ccl.reduce_scatter``; TF: all_reduce SUM then slice).

        Raises:
          ValueError: ``axis`` out of range for a tensor; a call inside an
            outside_compilation cluster.
        """
        axis = int(axis)
        state = current_run_state()
        traced = state is not None and current_trace() is not None and self._traced

        def one(x):
            x = convert(x) if traced else x
            rank = len(np.shape(x)) if not traced else len(x.shape)
            if not 0 <= axis < rank:
                raise ValueError(
                    f"all_gather axis {axis} is out of range for a tensor of rank {rank} (it must be in [0, rank))"
                )
            if not traced or state.num_replicas == 1:
                return x

            n = state.num_replicas
            if current_trace().num_cores > 1:
                return concat(_all_gather_list(x, n), axis)
            return all_gather(x, axis, n)

        if traced:
            self._device_only("all_gather")
        return _tree_map(one, value)

    def _device_only(self, what: str) -> None:
        tr = current_trace()
        if tr is not None and tr.cluster is not None:
            raise ValueError(
                f"ReplicaContext.{what} cannot run inside outside_compilation cluster '{tr.cluster}': "
                "collectives run on the devices, not on the host"
            )


class TowerContext(ReplicaContext):
    """The contrib tower context: ``merge_call(merge_fn, *args, **kwargs)``."""

    def merge_call(self, merge_fn: Callable, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return ReplicaContext.merge_call(self, merge_fn, args, kwargs)


_default_strategy = None
_default_strategy_lock = threading.Lock()


def _get_default_strategy() -> TPUStrategy:
    """The one default strategy of the process, made by the first caller;
    threads that ask at once get the same one (issue 25: two could be made,
    and a variable of one was then refused by the other)."""
    global _default_strategy
    strategy = _default_strategy
    if strategy is None:
        with _default_strategy_lock:
            if _default_strategy is None:
                _default_strategy = TPUStrategy(TPUClusterResolver(num_cores=1))
            strategy = _default_strategy
    return strategy


def get_replica_context() -> ReplicaContext | None:
    """The current replica context: inside ``run`` the running replica's;
    in a strategy's cross-replica context (inside ``scope()`` or merge_fn,
    outside ``run``) None, as in TF; otherwise the default context (replica
    0 of 1)."""
    state = current_run_state()
    if state is not None and current_trace() is not None:
        if state.in_merge:
            return None
        return ReplicaContext(state.strategy, True)
    if current_scope_strategy() is not None:
        return None
    return ReplicaContext(_get_default_strategy(), False)


def get_tower_context() -> TowerContext | None:
    """The contrib name of :func:`get_replica_context` (merge_call takes
    ``*args, **kwargs``)."""
    ctx = get_replica_context()
    if ctx is None:
        return None
    return TowerContext(ctx._strategy, ctx._traced)


def in_cross_replica_context() -> bool:
    return get_replica_context() is None


def get_strategy() -> TPUStrategy:
    """The strategy of the current scope or run (the default one otherwise)."""
    state = current_run_state()
    if state is not None and current_trace() is not None:
        return state.strategy
    return current_scope_strategy() or _get_default_strategy()


def has_strategy() -> bool:
    return current_scope_strategy() is not None or (current_run_state() is not None and current_trace() is not None)


# --------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# The strategy
# --------------------------------------------------------------------------

_HOST_CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


class TPUStrategy:
    """Synchronous training on the simulated TPU cores
    (``tf.distribute.TPUStrategy``; the contrib names of the seed too).

    Args:
      tpu_cluster_resolver: a :class:`TPUClusterResolver` (default: 8 cores).
      steps_per_run: how many times ``run`` executes the step function on the
        devices (a device loop) before returning to Python.
      num_cores: cores to use (default: all of the resolver's).
      device_assignment: an ``xtpu.DeviceAssignment``; its number of replicas
        is the strategy's (default: one core per replica).
    """

    def __init__(
        self,
        tpu_cluster_resolver: TPUClusterResolver | None = None,
        steps_per_run: Any = 1,
        num_cores: int | None = None,
        device_assignment: Any = None,
        *,
        experimental_device_assignment: Any = None,
        experimental_spmd_xla_partitioning: bool = False,
    ):
        # TF 2's signature: TPUStrategy(tpu_cluster_resolver=None,
        # experimental_device_assignment=None, experimental_spmd_xla_partitioning=False);
        # a DeviceAssignment in the second place is TF 2's positional use.

        if isinstance(steps_per_run, DeviceAssignment):
            steps_per_run, experimental_device_assignment = 1, steps_per_run
        if experimental_device_assignment is not None:
            if device_assignment is not None and device_assignment is not experimental_device_assignment:
                raise ValueError("give the device assignment once: device_assignment or experimental_device_assignment")
            device_assignment = experimental_device_assignment
        self._use_spmd_for_xla_partitioning = bool(experimental_spmd_xla_partitioning)
        self._logical_device_stack: list[int] = [0]
        if tpu_cluster_resolver is None:
            tpu_cluster_resolver = TPUClusterResolver(num_cores=num_cores if num_cores is not None else 8)
        self._resolver = tpu_cluster_resolver
        total = int(tpu_cluster_resolver.num_cores)
        if num_cores is not None:
            if not isinstance(num_cores, (int, np.integer)) or num_cores < 1 or num_cores > total:
                raise ValueError(f"num_cores must be between 1 and the system's {total} cores, got {num_cores!r}")
            total = int(num_cores)
        if isinstance(steps_per_run, bool) or not isinstance(steps_per_run, (int, np.integer)) or steps_per_run < 1:
            raise ValueError(f"steps_per_run must be a positive integer, got {steps_per_run!r}")
        self.steps_per_run = int(steps_per_run)
        self._num_cores = total
        self._device_assignment = device_assignment
        if device_assignment is not None:
            self._num_replicas = int(device_assignment.num_replicas)
            self._cores_per_replica = int(device_assignment.num_cores_per_replica)
        else:
            self._num_replicas = total
            self._cores_per_replica = 1
        self._variables: list = []
        # Variables of other strategies this strategy's programs use (weak).
        self._foreign_variables: list = []
        self._wrappers: dict = {}
        self._config: dict = {}

    # -- TF 2 properties ----------------------------------------------------
    @property
    def num_replicas_in_sync(self) -> int:
        return self._num_replicas

    @property
    def cluster_resolver(self) -> TPUClusterResolver:
        return self._resolver

    @property
    def extended(self) -> TPUStrategy:
        return self

    # -- contrib properties (seed) -----------------------------------------
    @property
    def between_graph(self) -> bool:
        """False: one program drives every replica (in-graph replication)."""
        return False

    @property
    def num_towers(self) -> int:
        """Number of towers, for purposes of averaging across towers."""
        return self._num_replicas

    @property
    def is_single_tower(self) -> bool:
        """True when call_for_each_tower(fn) calls fn once."""
        return self._num_replicas == 1

    @property
    def num_hosts(self) -> int:
        return 1

    @property
    def num_towers_per_host(self) -> int:
        return self._num_replicas // self.num_hosts

    def _tpu_device(self, replica: int, logical_core: int = 0) -> str:
        """The canonical name of replica ``replica``'s logical core
        (TF's ``_tpu_devices[replica][logical_core]``,
        ``/job:localhost/replica:0/task:<t>/device:TPU:<d>``)."""
        da = self._device_assignment
        if da is None:
            return f"/job:localhost/replica:0/task:0/device:TPU:{replica}"
        task = da.topology.task_ordinal_at_coordinates(da.coordinates(replica, logical_core))
        return f"/job:localhost/replica:0/task:{task}/device:TPU:{da.tpu_ordinal(replica, logical_core)}"

    @property
    def worker_devices(self) -> tuple[str, ...]:
        """One device per replica: its core of the current logical device
        (TF's ``_tpu_devices[:, logical_device]``; logical core 0 outside
        ``experimental_logical_device``)."""
        logical = self._logical_device_stack[-1]
        return tuple(self._tpu_device(r, logical) for r in range(self._num_replicas))

    def _replica_core_ids(self, replica: int) -> list[int]:
        """The global TPU ordinals of replica ``replica``'s logical cores,
        in logical-core order (without a device assignment replica ``r``
        runs on core ``r``, as TF's ``_tpu_devices``)."""
        da = self._device_assignment
        if da is not None:
            return da.logical_devices_of(replica)
        return [replica]

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        """The devices holding (mirrored) variables and their updates."""
        return self.worker_devices

    @property
    def worker_device_index(self) -> Any:
        """A per-tower value mapping each worker device to its id (the int 0
        with a single tower); pass it to call_for_each_tower."""
        if self._num_replicas == 1:
            return 0
        return PerReplica([np.int32(r) for r in range(self._num_replicas)])

    should_checkpoint = property(lambda self: True, doc="Whether checkpointing is needed (True).")
    should_init = property(lambda self: True, doc="Whether initialization is needed (True).")
    should_save_summary = property(lambda self: True, doc="Whether saving summaries is needed (True).")

    # -- scope --------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self):
        """Select this strategy: variables created inside are mirrored on
        every replica, and the thread is in its cross-replica context."""
        _stack("scopes").append(self)
        try:
            yield self
        finally:
            _stack("scopes").pop()

    @contextlib.contextmanager
    def colocate_vars_with(self, colocate_with_variable: Any):
        """Variables created inside are placed like ``colocate_with_variable``
        (only inside ``scope()``)."""
        if current_scope_strategy() is not self:
            raise ValueError("colocate_vars_with may only be used inside this strategy's scope()")
        _stack("colocate").append(colocate_with_variable)
        try:
            yield
        finally:
            _stack("colocate").pop()

    # -- lifecycle ----------------------------------------------------------
    def initialize(self) -> None:
        """Nothing to initialize eagerly (TF: the TPU initialize_system op)."""
        return

    def finalize(self) -> None:
        """Nothing to finalize eagerly (TF: TPU shutdown)."""
        return

    def configure(
        self, session_config: Any = None, cluster_spec: Any = None, task_type: Any = None, task_id: Any = None
    ) -> None:
        """Record the configuration; the local simulated system needs none."""
        self._config = dict(
            session_config=session_config, cluster_spec=cluster_spec, task_type=task_type, task_id=task_id
        )

    def get_host_cpu_device(self, host_id: int) -> str:
        return _HOST_CPU

    # -- running ------------------------------------------------------------
    def run(self, fn: Callable, args: tuple = (), kwargs: dict | None = None, options: Any = None) -> Any:
        """Run ``fn(*args, **kwargs)`` on every replica (``steps_per_run``
        times, in a device loop) and return its outputs: PerReplica values
        (with one replica, plain values).

        ``args`` may hold PerReplica values (replica r gets ``values[r]``),
        batches of ``experimental_distribute_dataset`` and plain values (every
        replica gets them).  With ``steps_per_run > 1`` an iterator over a
        distributed dataset gives each step its own batch.

        Raises:
          ValueError: more positional arguments than ``fn`` takes, or a
            variable passed to ``*args`` (TF's messages, tpu_strategy.py
            ``_maybe_partial_apply_variables``).
        """
        fn, args, kwargs = partial_apply_variables(
            fn, tuple(args), dict(kwargs or {}), self.__dict__.setdefault("_bound_fns", {})
        )
        if current_trace() is not None:
            # Inside an xtpu.function: trace fn into the function's program
            # (else ValueError: no strategy.run inside a replicated computation).
            return run_in_function(self, fn, args, dict(kwargs or {}))
        n = self._num_replicas
        steps = self.steps_per_run
        leaves, tree = pytree.flatten(
            (tuple(args), kwargs), is_leaf=lambda x: isinstance(x, (PerReplica, DistributedIterator))
        )
        # Iterators: pull one batch per step and stack them.
        expanded: list[Any] = []
        stacked_flags: list[bool] = []
        new_leaves = []
        for leaf in leaves:
            if isinstance(leaf, DistributedIterator):
                batches = [next(leaf) for _ in range(steps)]
                new_leaves.append(("iter", batches))
            else:
                new_leaves.append(("plain", leaf))
        # Re-flatten iterator batches into the argument structure.
        struct = []
        for kind, item in new_leaves:
            if kind == "iter":
                b_leaves, b_tree = pytree.flatten(item[0], is_leaf=lambda x: isinstance(x, PerReplica))
                per_step = [pytree.flatten(b, is_leaf=lambda x: isinstance(x, PerReplica))[0] for b in item]
                struct.append(("iter", b_tree))
                for j in range(len(b_leaves)):
                    vals = [per_step[s][j] for s in range(steps)]
                    expanded.append(_stack_steps(vals, n))
                    stacked_flags.append(steps > 1)
            else:
                struct.append(("plain", None))
                expanded.append(item)
                stacked_flags.append(False)
        per_replica: list[list[Any]] = [[] for _ in range(n)]
        for i, leaf in enumerate(expanded):
            if isinstance(leaf, PerReplica):
                if len(leaf.values) != n:
                    raise ValueError(
                        f"argument {i} is a PerReplica with {len(leaf.values)} values but the strategy has {n} replicas"
                    )
                for r in range(n):
                    per_replica[r].append(to_numpy(leaf.values[r]))
            elif isinstance(leaf, Tensor):
                raise TypeError("strategy.run arguments must be concrete values, not traced tensors")
            else:
                if isinstance(leaf, Variable):
                    raise TypeError("pass variables to strategy.run by capturing them in fn, not as arguments")
                arr = to_numpy(leaf)
                for r in range(n):
                    per_replica[r].append(arr)
        args_per_replica = per_replica
        while True:
            variables = self._program_variables()
            per_replica = [
                list(a) + [v._replica_input(r, self) for v in variables] for r, a in enumerate(args_per_replica)
            ]
            key = (fn, tree, tuple(struct), tuple(stacked_flags), tuple(id(v) for v in variables), steps)
            wrapper = self._wrappers.get(key)
            if wrapper is None:
                wrapper = _make_wrapper(self, fn, tree, struct, stacked_flags, variables, steps)
                self._wrappers[key] = wrapper
            try:
                outs = replicate(wrapper, per_replica, device_assignment=self._device_assignment)
                break
            except RetraceRequest as request:
                # fn needs variables made outside the trace (optimizer slots):
                # make them, then trace again with them as inputs and outputs.
                self._wrappers.pop(key, None)
                request.prepare()
                if len(self._program_variables()) == len(variables):
                    raise RuntimeError(f"strategy.run: {request} created no variable in this strategy") from None
        m = wrapper.num_outputs
        for j, v in enumerate(variables):
            v._write_back([outs[r][m + j] for r in range(n)], self)
        out_tree = wrapper.out_tree
        if n == 1:
            return pytree.unflatten(out_tree, list(outs[0][:m]))
        cols = [PerReplica([outs[r][j] for r in range(n)]) for j in range(m)]
        return pytree.unflatten(out_tree, cols)

    def _program_variables(self) -> list:
        """The variables this strategy's programs take and give back: its
        own, then those of other strategies its steps use."""
        return list(self._variables) + [v for v in (r() for r in self._foreign_variables) if v is not None]

    def call_for_each_tower(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` once per tower (the contrib name of ``run``); ``fn`` may
        use ``get_tower_context()`` for ``tower_id`` and ``merge_call``."""
        kwargs.pop("run_concurrently", None)
        # The contrib rules (an aggregation-NONE update in tower context is
        # TF 1's error) hold while tracing for towers: a separate trace.
        tower_fn = self.__dict__.setdefault("_tower_fns", {}).setdefault(fn, functools.partial(fn))
        self._contrib_towers = getattr(self, "_contrib_towers", 0) + 1
        try:
            return self.run(tower_fn, args, kwargs)
        finally:
            self._contrib_towers -= 1

    experimental_run_v2 = run

    # -- cross-replica operations ------------------------------------------
    def _traced(self) -> _RunState | None:
        state = current_run_state()
        if state is None or current_trace() is None:
            return None
        if not state.in_merge:
            raise RuntimeError(
                "cross-replica operations (reduce, batch_reduce, gather, broadcast, ...) must be called in the "
                "cross-replica context: inside merge_fn of merge_call, or outside strategy.run; in replica "
                "context use get_replica_context().all_reduce"
            )
        return state

    def reduce(self, reduce_op: Any, value: Any, axis: Any = None, destinations: Any = None) -> Any:
        """Combine per-replica values across replicas.

        TF 2: ``reduce(xtpu.ReduceOp.SUM|MEAN, value, axis=None)`` returns
        the reduced value; with ``axis`` each replica's value is also reduced
        over that dimension (MEAN over all the elements).
        Contrib (seed): ``reduce(xtpu.VariableAggregation.SUM|MEAN|ONLY_FIRST_TOWER,
        value, destinations)`` returns a value mirrored to ``destinations``.
        """
        contrib = isinstance(reduce_op, VariableAggregation)
        if contrib:
            destinations, axis = axis if destinations is None else destinations, None
        agg = as_aggregation(reduce_op)
        if agg is VariableAggregation.NONE:
            raise ValueError("reduce needs SUM, MEAN or ONLY_FIRST_TOWER, not NONE")
        state = self._traced()
        if state is not None:

            def one(x):
                if isinstance(x, _TracedPerReplica):
                    local = x.local
                    if axis is not None:
                        dim = int(local.shape[axis])
                        local = reduce_sum(local, axis=axis)
                        if agg is VariableAggregation.MEAN:
                            return traced_reduce(VariableAggregation.SUM, local, state.num_replicas) / np.asarray(
                                dim * state.num_replicas, dtype=np.dtype(local.dtype)
                            )
                    return traced_reduce(agg, local, state.num_replicas)
                if isinstance(x, PerReplica):
                    return self._eager_reduce(agg, x, axis)
                # A value already the same on every replica (e.g. a reduction).
                if agg is VariableAggregation.SUM and not contrib:
                    return x * np.asarray(state.num_replicas, dtype=np.dtype(convert(x).dtype))
                return x

            return _tree_map(one, value, is_leaf=lambda x: isinstance(x, PerReplica))
        out = _tree_map(lambda x: self._eager_reduce(agg, x, axis), value, is_leaf=lambda x: isinstance(x, PerReplica))
        if contrib:
            return _tree_map(lambda x: Mirrored([x] * self._num_replicas_of(destinations)), out)
        return out

    def _num_replicas_of(self, destinations: Any) -> int:
        if isinstance(destinations, PerReplica):
            return len(destinations.values)
        if isinstance(destinations, (list, tuple)):
            return len(destinations)
        if isinstance(destinations, str):
            return 1
        return self._num_replicas

    def _eager_reduce(self, agg: VariableAggregation, x: Any, axis: Any) -> np.ndarray:
        vals = [np.asarray(v) for v in (x.values if isinstance(x, PerReplica) else [x] * 1)]
        if not isinstance(x, PerReplica):
            # A plain value is the same on every replica (TF: mirrored).
            vals = vals * self._num_replicas
        if agg is VariableAggregation.ONLY_FIRST_TOWER:
            return vals[0]
        if axis is not None:
            total = np.sum([np.sum(v, axis=axis) for v in vals], axis=0)
            count = sum(v.shape[axis] for v in vals)
        else:
            total = np.sum(vals, axis=0)
            count = len(vals)
        if agg is VariableAggregation.MEAN:
            return np.asarray(total / count, dtype=vals[0].dtype if np_kind(vals[0].dtype) == "f" else None)
        return np.asarray(total, dtype=vals[0].dtype)

    def reduce_to(self, reduce_op: Any, value: Any, destinations: Any = None, options: Any = None) -> Any:
        return self.reduce(as_aggregation(reduce_op), value, destinations)

    def batch_reduce(self, aggregation: Any, value_destination_pairs: Any) -> list[Any]:
        """Several reductions as one: inside ``run`` one combined
        ``cross_replica_sum`` for all pairs.  Returns one mirrored value per pair."""
        pairs = list(value_destination_pairs)
        agg = as_aggregation(aggregation)
        state = self._traced()
        if state is None or not pairs:
            return [self.reduce(agg, v, d) for v, d in pairs]

        locals_ = [p[0].local if isinstance(p[0], _TracedPerReplica) else convert(p[0]) for p in pairs]
        n = state.num_replicas
        if agg is VariableAggregation.ONLY_FIRST_TOWER:
            locals_ = [_select_for(x, 0) for x in locals_]
        dtype = locals_[0].dtype
        if any(x.dtype != dtype for x in locals_):
            return [self.reduce(agg, v, d) for v, d in pairs]
        flat = [reshape(x, (int(np.prod(x.shape, dtype=np.int64)),)) for x in locals_]
        summed = cross_replica_sum(concat(flat, 0))
        out, off = [], 0
        for x in locals_:
            size = int(np.prod(x.shape, dtype=np.int64))
            piece = reshape(summed[off : off + size], tuple(x.shape))
            off += size
            if agg is VariableAggregation.MEAN:
                piece = piece / np.asarray(n, dtype=np.dtype(dtype))
            out.append(piece)
        return out

    def batch_reduce_to(self, reduce_op: Any, value_destination_pairs: Any, options: Any = None) -> list[Any]:
        """The TF 2 name of :meth:`batch_reduce`."""
        return self.batch_reduce(reduce_op, value_destination_pairs)

    def broadcast(self, tensor: Any, destinations: Any = None) -> Any:
        """Mirror ``tensor`` to every worker device (or ``destinations``)."""
        if self._traced() is not None:
            return tensor
        return Mirrored([tensor] * self._num_replicas_of(destinations))

    def unwrap(self, value: Any) -> list[Any]:
        """All per-device values in ``value`` (``[value]`` for a single value)."""
        if isinstance(value, PerReplica):
            return list(value.values)
        if isinstance(value, Variable) and value.mirrored:
            return [value] * self._num_replicas
        return [value]

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        """The values of ``value`` on this host's replicas, as a tuple (TF 2's
        ``StrategyExtendedV2._local_results``, which TPUStrategy inherits):
        a PerReplica's values; a mirrored variable's components, one per copy
        (:class:`xtpu.variables.ReplicaComponent`: TF's component variables,
        with ``read_value``, ``assign`` and the ``device`` of the replica's
        core); a nested structure (tuple, list, dict) one structure per
        worker device, each PerReplica or variable in it replaced by the
        replica's component and any other leaf kept; anything else
        ``(value,)``.  Inside a replicated computation a variable stands for
        its own components."""

        def component(x: Any, i: int) -> Any:
            if isinstance(x, PerReplica):
                return x.values[i]
            if isinstance(x, Variable) and x.mirrored and current_trace() is None:
                return ReplicaComponent(x, i)
            return x

        if isinstance(value, PerReplica):
            return tuple(value.values)
        if isinstance(value, Variable) and value.mirrored:
            if current_trace() is not None:
                return tuple(self.unwrap(value))
            return tuple(component(value, i) for i in range(len(value._copy_cores)))
        if isinstance(value, (tuple, list, dict)):
            leaves, tree = pytree.flatten(value, is_leaf=lambda x: isinstance(x, (PerReplica, Variable)))
            return tuple(pytree.unflatten(tree, [component(x, i) for x in leaves]) for i in range(self._num_replicas))
        return (value,)

    def value_container(self, value: Any) -> Any:
        """The container of a per-device value: the value itself (its
        container is not tracked), so ``value in unwrap(value_container(value))``."""
        return value

    def group(self, value: Any, name: str | None = None) -> None:
        """``tf.group(unwrap(value))``: eagerly nothing is left to run."""
        return

    def gather(self, value: Any, axis: int) -> Any:
        """Concatenate the replicas' values along ``axis``."""
        state = self._traced()
        if state is not None and isinstance(value, _TracedPerReplica):
            return concat(list(value.values), axis)
        vals = self.unwrap(value)
        return np.concatenate([np.asarray(v) for v in vals], axis=axis)

    def read_var(self, var: Any) -> Any:
        """The aggregate value of a (tower-local) variable: its value."""
        return var.read_value()

    def update(self, var: Any, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """``fn(var, *args, **kwargs)`` on every device holding ``var``; the
        arguments may hold mirrored values (unwrapped) but no per-device ones."""
        grouped = kwargs.pop("grouped", True)
        a, kw = self._unwrap_mirrored(args, kwargs)
        result = fn(var, *a, **kw)
        return result if grouped else [result] * len(self.unwrap(var))

    def update_non_slot(self, colocate_with: Any, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the ``non_slot_devices``."""
        grouped = kwargs.pop("grouped", True)
        a, kw = self._unwrap_mirrored(args, kwargs)
        result = fn(*a, **kw)
        return result if grouped else [result]

    def _unwrap_mirrored(self, args, kwargs):
        def one(x):
            if isinstance(x, Mirrored):
                return x.values[0]
            if isinstance(x, PerReplica):
                raise ValueError("Neither *args nor **kwargs may contain per-device values")
            return x

        def is_leaf(x):
            return isinstance(x, PerReplica)

        return _tree_map(one, tuple(args), is_leaf), _tree_map(one, dict(kwargs), is_leaf)

    def non_slot_devices(self, var_list: Any) -> tuple[str, ...]:
        """Where non-slot variables (e.g. an optimizer's step count) live:
        the host CPU."""
        return (_HOST_CPU,)

    # -- datasets -----------------------------------------------------------
    def experimental_distribute_dataset(self, dataset: Iterable, options: Any = None) -> DistributedDataset:
        """Split every batch of ``dataset`` (an ``xtpu.data.Dataset`` or any
        iterable of numpy arrays, or tuples / dicts of them) along its first
        dimension across the replicas (see :mod:`xtpu.input_lib`).

        Raises (when iterated):
          ValueError: a batch's size is not a multiple of num_replicas_in_sync.
        """
        return input_lib.distribute_dataset(dataset, self._num_replicas, options)

    def distribute_datasets_from_function(self, dataset_fn: Callable, options: Any = None) -> DistributedDataset:
        """Per-replica batches from ``dataset_fn(xtpu.distribute.InputContext)``
        (TF 2's name; see :mod:`xtpu.input_lib`)."""
        return input_lib.distribute_datasets_from_function(dataset_fn, self._num_replicas, options)

    experimental_distribute_datasets_from_function = distribute_datasets_from_function

    def experimental_distribute_values_from_function(self, value_fn: Callable) -> Any:
        """A PerReplica of ``value_fn(xtpu.distribute.ValueContext)`` per replica."""
        return input_lib.distribute_values_from_function(value_fn, self._num_replicas)

    def distribute_dataset(self, dataset_fn: Callable[[], Iterable]) -> DistributedDataset:
        """The contrib name: ``experimental_distribute_dataset(dataset_fn())``."""
        return self.experimental_distribute_dataset(dataset_fn())

    # -- logical devices ----------------------------------------------------
    def experimental_split_to_logical_devices(self, tensor: Any, partition_dimensions: Any) -> Any:
        return split_to_logical_devices(tensor, partition_dimensions)

    def experimental_assign_to_logical_device(self, tensor: Any, logical_device_id: int) -> Any:
        """``tensor`` placed on logical core ``logical_device_id``.

        Raises:
          ValueError: the strategy uses SPMD partitioning, or the id is not a
            logical core of a replica (TF's messages).
        """
        if self._use_spmd_for_xla_partitioning:
            raise ValueError(
                "Cannot assign a tensor to a logical device in SPMD mode. To disable SPMD, Please construct the "
                "TPUStrategy with `experimental_spmd_xla_partitioning=False`"
            )
        if not 0 <= int(logical_device_id) < self._cores_per_replica:
            raise ValueError(
                "`logical_core_id` to assign must be lower then total number of logical devices per replica. "
                f"Received logical device id {logical_device_id} but there are only total of "
                f"{self._cores_per_replica} logical devices in replica."
            )
        return assign_to_logical_device(tensor, logical_device_id)

    @contextlib.contextmanager
    def experimental_logical_device(self, logical_device_id: int):
        """``strategy.extended.experimental_logical_device(id)``: the logical
        core that variables and ops made inside belong to (TF's context).

        Raises:
          ValueError: ``logical_device_id`` is not a logical core of a replica.
        """
        if not 0 <= int(logical_device_id) < self._cores_per_replica:
            raise ValueError(
                f"`logical_device_id` not in range (was {logical_device_id}, but there are only "
                f"{self._cores_per_replica} logical devices per replica)."
            )
        self._logical_device_stack.append(int(logical_device_id))
        try:
            yield
        finally:
            self._logical_device_stack.pop()

    @property
    def num_replicas_per_host(self) -> int:
        """``extended.num_replicas_per_host``: every replica is on the one host."""
        return self._num_replicas // self.num_hosts

    def experimental_replicate_to_logical_devices(self, tensor: Any) -> Any:
        return replicate_to_logical_devices(tensor)

    def __repr__(self) -> str:
        return f"TPUStrategy(num_replicas_in_sync={self._num_replicas}, steps_per_run={self.steps_per_run})"


def _stack_steps(vals: list[Any], n: int) -> Any:
    """Stack one value per step along a new first axis (per replica)."""
    if len(vals) == 1:
        return vals[0]
    if isinstance(vals[0], PerReplica):
        return PerReplica([np.stack([np.asarray(v.values[r]) for v in vals]) for r in range(n)])
    return np.stack([np.asarray(v) for v in vals])


def _read_returned_variables(out: Any) -> Any:
    """A variable the replica function returns is its value in that replica
    (TF's tpu.replicate converts the outputs to tensors), read while the
    step's variables are the program's."""
    leaves, tree = pytree.flatten(out, is_leaf=lambda x: isinstance(x, Variable))
    if not any(isinstance(x, Variable) for x in leaves):
        return out
    return pytree.unflatten(tree, [x.read_value() if isinstance(x, Variable) else x for x in leaves])


def _make_wrapper(strategy: TPUStrategy, fn: Callable, tree, struct, stacked_flags, variables, steps):
    """The replicated computation ``run`` traces: fn's step (in a device loop
    for steps_per_run > 1) with the variables as extra inputs and outputs."""
    k = len(stacked_flags)

    def step_args(flat_args, step):
        vals = []
        for x, stacked in zip(flat_args, stacked_flags):
            if not stacked:
                vals.append(x)
            elif isinstance(step, int):
                vals.append(x[step])
            else:
                zero = convert(np.int32(0))
                (sl,) = bind(
                    hlo.DynamicSliceOp, [x, step] + [zero] * (len(x.shape) - 1), slice_sizes=(1,) + tuple(x.shape[1:])
                )
                vals.append(reshape(sl, tuple(x.shape[1:])))
        # Rebuild: iterator leaves back into their batch structure.
        it = iter(vals)
        leaves = []
        for kind, b_tree in struct:
            if kind == "iter":
                leaves.append(pytree.unflatten(b_tree, [next(it) for _ in range(b_tree.num_leaves)]))
            else:
                leaves.append(next(it))
        return pytree.unflatten(tree, leaves)

    def wrapper(*flat):
        state = _RunState(strategy, variables)
        _stack("runs").append(state)
        try:
            flat_args, var_vals = list(flat[:k]), list(flat[k:])

            def one_step(vv, step):
                state.current = dict(zip(variables, vv))
                a, kw = step_args(flat_args, step)
                out = _read_returned_variables(fn(*a, **kw))
                return out, [state.current[v] for v in variables]

            if steps > 1:

                def cond(i, *vv):
                    return i < np.int32(steps - 1)

                def body(i, *vv):
                    _, new = one_step(list(vv), i)
                    return (i + np.int32(1), *new)

                res = while_loop(cond, body, (np.int32(0), *var_vals))
                var_vals = list(res[1:]) if isinstance(res, (tuple, list)) else []
            out, new_vars = one_step(var_vals, steps - 1)
        finally:
            _stack("runs").pop()
        leaves, out_tree = pytree.flatten(out)
        wrapper.out_tree = out_tree
        wrapper.num_outputs = len(leaves)
        return tuple(leaves) + tuple(new_vars)

    wrapper.out_tree = None
    wrapper.num_outputs = 0
    wrapper.xtpu_user_function = fn  # what log records name (xtpu.log.describe)
    return wrapper


__all__ = [
    "DistributedDataset",
    "RetraceRequest",
    "DistributedIterator",
    "ReplicaContext",
    "TPUClusterResolver",
    "TPUStrategy",
    "TowerContext",
    "get_replica_context",
    "get_strategy",
    "get_tower_context",
    "has_strategy",
    "in_cross_replica_context",
]


register_strategy_type(TPUStrategy, _get_default_strategy)
