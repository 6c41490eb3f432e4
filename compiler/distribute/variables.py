"""``xtpu.Variable``: mirrored (device) and host variables.

Created inside ``strategy.scope()`` a variable is *mirrored*: it lives on
every replica, and ``strategy.run`` passes its value into the replicated
program as an input and returns the updated value as an output, then writes
it back.  Updates made in replica context are combined across replicas
according to the variable's ``aggregation`` (SUM / MEAN / ONLY_FIRST_TOWER,
with ``tpu.cross_replica_sum``); with NONE each replica updates its own copy
(TF 2's OnWrite policy; the contrib ``call_for_each_tower`` refuses them, as
TF 1 did).  ``synchronization=ON_READ`` keeps a copy per replica that a
cross-replica read aggregates (TF's SyncOnReadVariable).  Created outside a
scope a variable lives on the host.

The seed's rules for outside compilation are enforced when tracing:
a mirrored (TPU) variable must not be read or written inside an
outside-compilation cluster, and a host variable must not be touched both by
an outside-compilation cluster and by the device computation.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np

from xtpu.autodiff.tape import notify_variable_read
from xtpu.core.tracing import Tensor, bind, convert, current_trace, recording_tapes, to_numpy
from xtpu.dialects.host_variables import HostVariableUpdateOp
from xtpu.distribute.context import current_colocation, current_run_state, current_scope_strategy, traced_reduce
from xtpu.distribute.mixed_precision import autocast_dtype_for_new_variable
from xtpu.distribute.values import VariableAggregation, VariableSynchronization, as_aggregation, as_synchronization
from xtpu.ops.core import broadcast_to
from xtpu.ops.math_ops import cast
from xtpu.ops.operators import ufunc_as_xtpu_op
from xtpu.replication.program import outside_compilation
from xtpu.runtime.host_variables import HOST_VARIABLES

_counter = itertools.count()

DEVICE_VARIABLE_IN_OUTSIDE_COMPILATION = (
    "For variables placed in TPU device, which includes variables created inside TPUStrategy scope, "
    "outside compilation logic must not include variable read/write"
)
HOST_VARIABLE_DEADLOCK = (
    "Variable read/write from outside compilation cluster is not visible from TPU computation and vice "
    "versa. Therefore, if outside compilation logic contains such host variables read/write ops and if "
    "the variables are accessed by TPU computation as well, then this may lead to deadlock"
)
_ON_READ_SUM_ADD = (
    "SyncOnReadVariable does not support `{op}` in cross-replica context when aggregation is set to "
    "`tf.VariableAggregation.SUM`."
)
_MEAN_NON_FLOAT = (
    "Cannot update non-float variables with tf.VariableAggregation.MEAN aggregation in replica context. Either "
    "change the variable dtype to float or update it in cross-replica context."
)
#: TF's distribute_lib._assert_strategy / _wrong_strategy_scope message:
#: a variable of one strategy used where another is the current one.
MIXING_STRATEGIES = "Mixing different tf.distribute.Strategy objects: {} is not {}"
NONE_AGGREGATION = (
    "You must specify an aggregation method to update a MirroredVariable in Replica Context. You can do "
    "so by passing an explicit value for argument `aggregation` to xtpu.Variable(..)."
)


class Variable:
    """A mutable tensor (``tf.Variable``).

    Args:
      initial_value: a numpy array or Python value.
      aggregation: how replica-context updates combine
        (``xtpu.VariableAggregation``; default NONE).
      trainable, name, dtype: as in TF.
      constraint: TF's projection applied by optimizers after each update
        (``var.assign(constraint(var))``), or None.
      synchronization: ``xtpu.VariableSynchronization``; ON_READ (made in a
        strategy's scope) keeps one copy per replica: inside ``strategy.run``
        (merge_fn included: TF's TPU context) a replica reads and updates its
        own, outside it a read aggregates the copies (SUM, MEAN,
        ONLY_FIRST_REPLICA) and an assign sets every copy (SUM: value /
        replicas), as TF's TPUOnReadPolicy / SyncOnReadVariable.
        ``trainable`` defaults to ``synchronization != ON_READ``.

    Raises:
      ValueError: ``constraint`` is not callable (TF's message).
    """

    def __init__(
        self,
        initial_value: Any,
        trainable: Any = None,
        name: str | None = None,
        dtype: Any = None,
        aggregation: Any = VariableAggregation.NONE,
        synchronization: Any = None,
        constraint: Any = None,
    ):
        if constraint is not None and not callable(constraint):
            # TF's message (resource_variable_ops), its repeated words included.
            raise ValueError(
                f"Argument `constraint` must be None or a callable. a callable. Got a {type(constraint)}:  {constraint}"
            )
        self.constraint = constraint
        if callable(initial_value):
            initial_value = initial_value()
        if isinstance(initial_value, Variable):
            initial_value = initial_value.numpy()
        if isinstance(initial_value, Tensor):
            raise TypeError("a Variable's initial_value must be a concrete value, not a traced tensor")
        value = np.array(to_numpy(initial_value, dtype if isinstance(dtype, str) or dtype is None else str(dtype)))
        self.aggregation = as_aggregation(aggregation)
        self.synchronization = as_synchronization(synchronization)
        on_read = self.synchronization is VariableSynchronization.ON_READ
        if trainable is None:
            trainable = not on_read
        # ON_READ with trainable=True is allowed and kept, as tf.Variable keeps
        # it (the "only for non-trainable variables" error is Keras's
        # add_weight's, not tf.Variable's; issue 25).
        self.trainable = bool(trainable)
        self._replica_values: list | None = None
        # A mirrored variable of aggregation NONE updated in replica context
        # (TF 2's OnWrite policy): each replica's own copy, when they differ.
        self._replica_copies: list | None = None
        self.name = name or f"Variable_{next(_counter)}"
        if current_trace() is not None:
            raise ValueError("xtpu.Variable must be created outside a replicated computation (outside strategy.run)")
        strategy = current_scope_strategy()
        colocated = current_colocation()
        if colocated is not None:
            strategy = colocated._strategy
        self._strategy = strategy
        # Mixed precision (issue 28): the compute dtype this variable is read
        # as inside the computation (TF's AutoCastVariable), or None.
        self._autocast = autocast_dtype_for_new_variable(
            np.dtype(value.dtype).name, bool(trainable), strategy is not None
        )
        self._key = f"{self.name}#{next(_counter)}"
        if strategy is not None:
            # The TPU cores holding the copies, one per replica of the
            # strategy, on the current logical device (TF's
            # ``_tpu_devices[:, logical_device]``), or the colocated
            # variable's.
            if colocated is not None:
                self._copy_cores, self._copy_devices = colocated._copy_cores, colocated._copy_devices
            else:
                logical = strategy._logical_device_stack[-1]
                replicas = range(strategy.num_replicas_in_sync)
                self._copy_cores = tuple(strategy._replica_core_ids(r)[logical] for r in replicas)
                self._copy_devices = tuple(strategy._tpu_device(r, logical) for r in replicas)
            self._device_value = value
            if on_read:
                self._replica_values = [value.copy() for _ in range(strategy.num_replicas_in_sync)]
            strategy._variables.append(self)
        else:
            # A host variable's value lives in the runtime's store, where the
            # host_variable_update kernels read and update it.
            HOST_VARIABLES.add(self._key, value)
            weakref.finalize(self, HOST_VARIABLES.remove, self._key)

    @property
    def _value(self) -> np.ndarray:
        """The current value: this process's copy of a mirrored variable, or
        the runtime store's value of a host variable."""
        if self._strategy is None:
            return HOST_VARIABLES.get(self._key)
        if self._replica_values is not None:
            return self._aggregated()
        return self._device_value

    @_value.setter
    def _value(self, value: np.ndarray) -> None:
        if self._strategy is None:
            HOST_VARIABLES.set(self._key, value)
        elif self._replica_values is not None:
            # A cross-replica assign of a SyncOnRead variable sets every copy
            # (TF's on_read_assign_cross_replica: SUM divides by the replicas).
            value = np.asarray(value)
            if self.aggregation is VariableAggregation.SUM:
                value = np.asarray(value / len(self._replica_values)).astype(self._device_value.dtype)
            self._replica_values = [np.array(value) for _ in self._replica_values]
        else:
            self._device_value = value
            self._replica_copies = None

    def _aggregated(self) -> np.ndarray:
        """A SyncOnRead variable's cross-replica value (TF's _get_cross_replica)."""
        vals = self._replica_values
        agg = self.aggregation
        if agg is VariableAggregation.ONLY_FIRST_TOWER:
            return vals[0]
        if agg is VariableAggregation.NONE:
            raise ValueError(f"Could not convert from `tf.VariableAggregation` {agg} to `tf.distribute.ReduceOp` type")
        total = np.sum(vals, axis=0)
        out = total / len(vals) if agg is VariableAggregation.MEAN else total
        return np.asarray(out).astype(vals[0].dtype)

    def _copy_indices(self, strategy: Any) -> list[int]:
        """For each replica of ``strategy``'s programs, the index of the
        copy it reads and writes (TF's ``get_replicated_var_handle``): its
        own strategy's replica ``r`` the ``r``-th; another strategy's
        replica the copy on the first of its logical cores that holds one.

        Raises:
          ValueError: a replica of ``strategy`` has no copy on any of its
            cores (TF's "Failed to find a variable on any device in
            replica ..."), naming the variable and the cores.
        """
        if strategy is self._strategy:
            return list(range(len(self._copy_cores)))
        known = self.__dict__.setdefault("_indices_in", weakref.WeakKeyDictionary())
        if strategy in known:
            return known[strategy]
        where = {core: i for i, core in enumerate(self._copy_cores)}
        indices = []
        for r in range(strategy.num_replicas_in_sync):
            cores = strategy._replica_core_ids(r)
            found = [where[c] for c in cores if c in where]
            if not found:
                raise ValueError(
                    f"variable '{self.name}' (copies on TPU cores {list(self._copy_cores)}) used in a program of "
                    f"{strategy} whose replica {r} runs on TPU cores {cores}: Failed to find a variable on any "
                    f"device in replica {r} for current device assignment"
                )
            indices.append(found[0])
        known[strategy] = indices
        return indices

    def _copy(self, i: int) -> np.ndarray:
        """Copy ``i`` of a mirrored variable (on the ``i``-th replica's core)."""
        if self._replica_values is not None:
            return self._replica_values[i]
        if self._replica_copies is not None:
            return self._replica_copies[i]
        return self._device_value

    def _set_copy(self, i: int, new: Any) -> None:
        """Set copy ``i`` alone (its replica component's assign)."""
        new = np.array(np.broadcast_to(np.asarray(new, dtype=self._device_value.dtype), self._device_value.shape))
        if self._replica_values is not None:
            self._replica_values[i] = new
            return
        copies = [np.array(self._copy(j)) for j in range(len(self._copy_cores))]
        copies[i] = new
        self._device_value = copies[0]
        self._replica_copies = copies if any(not np.array_equal(copies[0], c) for c in copies[1:]) else None

    def _replica_input(self, r: int, strategy: Any) -> np.ndarray:
        """Replica ``r``'s value, as a program of ``strategy`` takes it: the
        copy on the replica's core (see :meth:`_copy_indices`)."""
        if self._strategy is None:
            return self._value
        return self._copy(r if strategy is self._strategy else self._copy_indices(strategy)[r])

    def _write_back(self, per_replica: list, strategy: Any) -> None:
        """Take the outputs of a program of ``strategy``: each replica's copy
        of a SyncOnRead variable or of a mirrored one (a mirrored variable of
        aggregation other than NONE has equal copies).  A program of another
        strategy writes the copies on its replicas' cores; the others keep
        their values (TF's replicated handle names those copies only)."""
        if self._strategy is None:  # a host variable in an xtpu.function's program
            self._value = np.array(per_replica[0])
            return
        if (
            strategy is self._strategy
            and self._replica_values is None
            and (self.aggregation is not VariableAggregation.NONE)
        ):
            # Updates combined across the replicas: the copies are equal.
            self._device_value = np.array(per_replica[0])
            self._replica_copies = None
            return
        indices = self._copy_indices(strategy)
        if self._replica_values is not None:
            for i, v in zip(indices, per_replica):
                self._replica_values[i] = np.array(v)
            return
        copies = [self._copy(i) for i in range(len(self._copy_cores))]
        for i, v in zip(indices, per_replica):
            copies[i] = np.array(v)
        self._device_value = copies[0]
        self._replica_copies = None
        if any(not np.array_equal(copies[0], c) for c in copies[1:]):
            # TF 2's OnWrite policy of aggregation NONE (or another
            # strategy's program) left the copies different: each keeps its
            # own; reads outside a step see the primary (replica 0's).
            self._replica_copies = copies

    # -- properties ---------------------------------------------------------
    @property
    def mirrored(self) -> bool:
        """True when created inside a strategy scope (lives on every replica)."""
        return self._strategy is not None

    @property
    def device(self) -> str:
        """The device of the value (TF: a mirrored variable's primary copy,
        on its strategy's first replica's core)."""
        if self._strategy is None:
            return "/job:localhost/replica:0/task:0/device:CPU:0"
        return self._copy_devices[0]

    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.shape

    @property
    def dtype(self):
        return self._value.dtype

    def numpy(self) -> np.ndarray:
        """The (host-side) value.

        Raises:
          RuntimeError: TF's "Mixing different tf.distribute.Strategy
            objects" error: a mirrored variable read in the scope of another
            strategy (TF's ``numpy()`` is ``read_value().numpy()``).
        """
        self._assert_strategy("read_value")
        return self._value.copy()

    def _on_write_policy(self) -> bool:
        """TF's TPUOnWritePolicy (tpu_values.py): updates go through
        ``_update``, which asserts the variable's strategy (AUTO
        synchronization with an aggregation other than NONE, or ON_WRITE).
        AUTO with NONE (TPUAutoPolicy) and ON_READ (TPUOnReadPolicy) write
        the replica's copy directly inside a replicated computation."""
        sync = self.synchronization
        return sync is VariableSynchronization.ON_WRITE or (
            sync is VariableSynchronization.AUTO and self.aggregation is not VariableAggregation.NONE
        )

    def _assert_strategy(self, access: str) -> None:
        """TF's ``enter_or_assert_strategy`` outside a replicated
        computation: a mirrored variable used in the scope of another
        strategy raises TF's RuntimeError for ``read_value`` / ``numpy`` and
        updates, and for ``value`` and conversions to a tensor only when it
        is ON_READ (TF's ``MirroredVariable.value`` and
        ``_dense_var_to_tensor`` do not assert the strategy).  Outside any
        scope the variable's own strategy is entered: no error."""
        if self._strategy is None or current_trace() is not None:
            return
        current = current_scope_strategy()
        if current is None or current is self._strategy:
            return
        if access == "value" and self.synchronization is not VariableSynchronization.ON_READ:
            return
        raise RuntimeError(MIXING_STRATEGIES.format(current, self._strategy))

    def __array__(self, dtype=None, copy=None):
        if current_trace() is not None:
            if current_run_state() is not None:
                # Inside strategy.run the variable's value is a run-time
                # value: the host value would be the one at trace time,
                # silently stale from the second step on (TF raises too).
                raise TypeError(
                    f"variable '{self.name}' has no numpy value inside strategy.run (its value is computed when "
                    "the step runs); use xtpu ops on it, or read it with v.numpy() outside the step"
                )
        else:
            self._assert_strategy("read_value")
        return np.asarray(self._value, dtype=dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """numpy ufuncs and operators on a variable read it (TF converts a
        variable to a tensor): ``np_array + v`` is ``np_array +
        v.read_value()``, so inside a replicated computation it uses the
        variable's value there (not the host value when traced) and a
        GradientTape records it."""
        values = [_as_value(v) for v in inputs]
        if method == "__call__" and not kwargs and (current_trace() is not None or recording_tapes()):
            fn = ufunc_as_xtpu_op(ufunc)
            if fn is not None:
                return fn(*values)
        if any(isinstance(v, Tensor) for v in values):
            raise TypeError(
                f"numpy.{ufunc.__name__} of variable '{self.name}' inside a replicated computation: xtpu has no "
                "op for it; use xtpu ops on the variable"
            )
        return getattr(ufunc, method)(*values, **kwargs)

    def __repr__(self) -> str:
        kind = "MirroredVariable" if self.mirrored else "Variable"
        return f"<xtpu.{kind} '{self.name}' shape={self.shape} dtype={self.dtype} aggregation={self.aggregation.name}>"

    # -- reading and writing ------------------------------------------------
    def _traced_state(self, write: bool = False):
        tr = current_trace()
        if tr is None:
            self._assert_strategy("update" if write else "read_value")
            return None, None
        state = current_run_state()
        if self.mirrored or self._in_program(state):
            if tr.cluster is not None:
                raise ValueError(
                    f"variable '{self.name}' is read or written inside outside_compilation cluster "
                    f"'{tr.cluster}': {DEVICE_VARIABLE_IN_OUTSIDE_COMPILATION}"
                )
            if self.mirrored and state is not None and self._strategy is not state.strategy:
                self._use_in_another_strategy(state, write)
            if state is None or self not in state.current:
                raise ValueError(
                    f"variable '{self.name}' belongs to a strategy other than the one running this computation"
                )
        else:
            if state is not None:
                where = "host" if tr.cluster is not None else "device"
                touched = state.host_access.setdefault(self, set())
                touched.add(where)
                if len(touched) == 2:
                    raise ValueError(
                        f"host variable '{self.name}' is accessed both inside an outside_compilation cluster and by "
                        f"the TPU computation: {HOST_VARIABLE_DEADLOCK}"
                    )
        return tr, state

    def _use_in_another_strategy(self, state: Any, write: bool) -> None:
        """This mirrored variable used in a program of another strategy (its
        ``run`` or ``xtpu.function``), as TF's TPU variables behave in a TPU
        context (tpu_values.py, tpu_replication.get_replicated_var_handle):
        each replica reads and writes the copy on its core (a replica with
        none is TF's ValueError); updates under TF's OnWrite policy go
        through ``_update``, whose ``enter_or_assert_strategy`` raises TF's
        RuntimeError; AUTO / NONE and ON_READ variables write the replica's
        copy directly.  The program takes the variable as an input and
        output (traced again with it, once)."""
        adopt = getattr(state, "adopt_strategy", None)
        if adopt is not None:
            adopt(self._strategy)  # an xtpu.function that named no strategy traces for this one
        if write and self._on_write_policy():
            raise RuntimeError(MIXING_STRATEGIES.format(state.strategy, self._strategy))
        self._copy_indices(state.strategy)
        if self not in state.current:
            state.use_variable_of_another_strategy(self)

    def _in_program(self, state: Any) -> bool:
        """A host variable an ``xtpu.function`` made an input and output of
        its program (it writes the variable): read and updated like a
        mirrored one there."""
        return self._strategy is None and state is not None and self in state.current

    def read_value(self) -> Any:
        """The value: a traced tensor inside ``strategy.run``, else a numpy copy."""
        tr, state = self._traced_state()
        if tr is None:
            value = self._value.copy()
            return notify_variable_read(self, value) if recording_tapes() else value
        if self.mirrored or self._in_program(state):
            # The replica's copy, in merge_fn too: TF's TPUVariableMixin.read_value
            # reads the replicated handle in a TPU context (a SyncOnRead
            # variable aggregates only when read outside the step).
            value = state.current[self]
            tr.variable_reads.setdefault(self, []).append(value)
            return notify_variable_read(self, value) if recording_tapes() else value
        if tr.cluster is not None:
            return self._host_op("read", None)
        if state is None:
            # A plain replicate: the value when traced, one constant per
            # computation, in its outermost block so that reads in branches
            # and loops see (and differentiate) the same value.
            value = tr.variable_values.get(self)
            if value is None:
                saved = tr.blocks
                tr.blocks = [saved[0]]
                try:
                    value = tr.variable_values[self] = convert(self._value)
                finally:
                    tr.blocks = saved
            tr.variable_reads.setdefault(self, []).append(value)
            return notify_variable_read(self, value) if recording_tapes() else value
        # The device reads a host variable: the host sends its current value.
        return outside_compilation(lambda: self._host_op("read", None))

    def _host_op(self, kind: str, value: Any) -> Any:
        """Read / update this host variable from an outside-compilation
        cluster, at run time, once per replica."""
        dtype = np.dtype(self._value.dtype).name
        operands = []
        if value is not None:
            value = convert(value)
            if value.dtype != dtype:
                value = cast(value, dtype)
            if tuple(value.shape) != tuple(self._value.shape):
                value = broadcast_to(value, tuple(self._value.shape))
            operands = [value]
        (out,) = bind(
            HostVariableUpdateOp, operands, variable=self._key, kind=kind, shape=tuple(self._value.shape), dtype=dtype
        )
        return out

    def value(self) -> Any:
        """The value, as :meth:`read_value`; outside a replicated
        computation in another strategy's scope only an ON_READ variable
        raises TF's RuntimeError (TF's ``MirroredVariable.value`` does not
        assert the strategy)."""
        self._assert_strategy("value")
        if current_trace() is None:
            value = self._value.copy()
            return notify_variable_read(self, value) if recording_tapes() else value
        return self.read_value()

    def _xtpu_read_(self) -> Any:
        """How xtpu ops convert a variable (xtpu.tracing.read_if_variable):
        :meth:`value`, cast to the mixed-precision compute dtype inside a
        replicated computation when the variable autocasts (TF's
        AutoCastVariable; see :mod:`xtpu.distribute.mixed_precision`)."""
        value = self.value()
        if self._autocast is not None and current_trace() is not None:
            return cast(value, self._autocast)
        return value

    def _xtpu_sparse_read_(self) -> tuple[Any, str | None]:
        """How a gather reads the variable (xtpu.core.tracing.sparse_read):
        :meth:`value` and, inside a replicated computation when the
        variable autocasts, the compute dtype to cast the gathered slices
        to (TF's ``AutoCastVariable.sparse_read``: the float32 rows
        gathered, then cast; their gradient is summed in float32)."""
        value = self.value()
        if self._autocast is not None and current_trace() is not None:
            return value, self._autocast
        return value, None

    def _update(self, kind: str, value: Any) -> Any:
        tr, state = self._traced_state(write=True)
        if tr is None and self._replica_values is not None and kind != "assign":
            if self.aggregation is VariableAggregation.SUM:
                raise ValueError(_ON_READ_SUM_ADD.format(op="assign_add" if kind == "add" else "assign_sub"))
            v = to_numpy(value) if not isinstance(value, np.ndarray) else value
            sign = 1 if kind == "add" else -1
            self._replica_values = [np.asarray(rv + sign * v).astype(rv.dtype) for rv in self._replica_values]
            return self
        if tr is None:
            v = to_numpy(value) if not isinstance(value, np.ndarray) else value
            new = {"assign": v, "add": self._value + v, "sub": self._value - v}[kind]
            self._value = np.array(np.broadcast_to(np.asarray(new, dtype=self._value.dtype), self._value.shape))
            return self
        if self._in_program(state):
            # In an xtpu.function's program: one update of the host variable
            # per step (in replica context the replicas' deltas are summed, as
            # each replica's update of a host variable applies once).
            value = convert(value)
            if np.dtype(self._value.dtype).name != value.dtype:
                value = cast(value, np.dtype(self._value.dtype).name)
            if not state.in_merge and state.num_replicas > 1:
                agg = VariableAggregation.ONLY_FIRST_TOWER if kind == "assign" else VariableAggregation.SUM
                value = traced_reduce(agg, value, state.num_replicas)
            return self._traced_write(state, kind, value)
        if not self.mirrored and tr.cluster is not None:
            return self._host_op({"assign": "assign", "add": "add", "sub": "sub"}[kind], value)
        if not self.mirrored and getattr(state, "manage_host_variable", None) is not None:
            state.manage_host_variable(self)  # an xtpu.function traces again with it in its program
        if not self.mirrored:
            raise NotImplementedError(
                f"writing host variable '{self.name}' from the device computation is not implemented; "
                "update it inside xtpu.outside_compilation (once per replica) or create it in strategy.scope()"
            )
        was_tensor = isinstance(value, Tensor)
        value = convert(value)
        if value.dtype != str(self._value.dtype) and np.dtype(self._value.dtype).name != value.dtype:
            value = cast(value, np.dtype(self._value.dtype).name)
        if self._replica_values is not None:
            # SyncOnRead: each replica updates its own copy, in merge_fn too
            # (TF's TPUOnReadPolicy assigns raw in a TPU context; the SUM
            # rules of a cross-replica update hold outside the step).
            pass
        elif not state.in_merge:
            # Replica context: combine the replicas' updates (TF does a merge_call).
            if self.aggregation is VariableAggregation.NONE and state.num_replicas > 1:
                if getattr(state.strategy, "_contrib_towers", 0):
                    # The contrib API (call_for_each_tower) keeps TF 1's rule.
                    raise ValueError(f"variable '{self.name}': {NONE_AGGREGATION}")
                # TF 2's OnWrite policy (values_util._on_write_update_replica):
                # the replica updates its own copy.
            elif self.aggregation is VariableAggregation.MEAN and np.dtype(self._value.dtype).kind != "f":
                if was_tensor:
                    raise ValueError(_MEAN_NON_FLOAT)
                # A Python / numpy value is the same on every replica: its
                # MEAN is itself (TF allows this case).
                was_tensor = None
            if self.aggregation is not VariableAggregation.NONE and was_tensor is not None:
                value = traced_reduce(self.aggregation, value, state.num_replicas)
        return self._traced_write(state, kind, value)

    def _traced_write(self, state: Any, kind: str, value: Any) -> Any:
        """The traced value after ``kind`` (assign / add / sub) of ``value``,
        in the variable's shape, as the program's current value."""
        cur = state.current[self]
        new = {"assign": value, "add": cur + value, "sub": cur - value}[kind]
        if tuple(new.shape) != tuple(self._value.shape):
            new = broadcast_to(new, tuple(self._value.shape))
        state.current[self] = new
        return new

    def assign(self, value: Any, use_locking: bool = False, name: str | None = None, read_value: bool = True) -> Any:
        return self._update("assign", value)

    def assign_add(
        self, delta: Any, use_locking: bool = False, name: str | None = None, read_value: bool = True
    ) -> Any:
        return self._update("add", delta)

    def assign_sub(
        self, delta: Any, use_locking: bool = False, name: str | None = None, read_value: bool = True
    ) -> Any:
        return self._update("sub", delta)


class ReplicaComponent:
    """One replica's copy of a mirrored (or ON_READ) variable, as
    ``strategy.experimental_local_results(v)`` gives it: TF returns the
    component variables (values.py ``DistributedValues._values``, each a
    ResourceVariable on its replica's device), which read, assign and name
    their device.  Reads and updates act on that copy alone, outside a
    replicated computation.

    Raises:
      ValueError: an update inside a replicated computation (update the
        mirrored variable there).
    """

    __slots__ = ("_variable", "_index")

    def __init__(self, variable: Variable, index: int):
        self._variable = variable
        self._index = index

    @property
    def name(self) -> str:
        return f"{self._variable.name}/replica_{self._index}"

    @property
    def device(self) -> str:
        """The core holding this copy (TF: the component's device)."""
        return self._variable._copy_devices[self._index]

    @property
    def shape(self) -> tuple[int, ...]:
        return self._variable.shape

    @property
    def dtype(self):
        return self._variable.dtype

    @property
    def trainable(self) -> bool:
        return self._variable.trainable

    def read_value(self) -> np.ndarray:
        return np.array(self._variable._copy(self._index))

    value = read_value

    def numpy(self) -> np.ndarray:
        return self.read_value()

    _xtpu_read_ = read_value  # how xtpu ops convert it (xtpu.tracing.read_if_variable)

    def _set(self, new: Any) -> ReplicaComponent:
        if current_trace() is not None:
            raise ValueError(
                f"a replica component of variable '{self._variable.name}' cannot be updated inside a replicated "
                "computation; update the variable itself there"
            )
        self._variable._set_copy(self._index, new)
        return self

    def assign(self, value: Any, use_locking: bool = False, name: str | None = None, read_value: bool = True) -> Any:
        return self._set(to_numpy(value) if not isinstance(value, np.ndarray) else value)

    def assign_add(self, delta: Any, use_locking: bool = False, name: str | None = None, read_value: bool = True):
        return self._set(self.read_value() + np.asarray(delta))

    def assign_sub(self, delta: Any, use_locking: bool = False, name: str | None = None, read_value: bool = True):
        return self._set(self.read_value() - np.asarray(delta))

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._variable._copy(self._index), dtype=dtype)

    def __float__(self) -> float:
        return float(self.read_value())

    def __int__(self) -> int:
        return int(self.read_value())

    def __eq__(self, other: Any) -> Any:
        return self.read_value() == np.asarray(other)  # elementwise, as TF 2's variables compare

    def __ne__(self, other: Any) -> Any:
        return self.read_value() != np.asarray(other)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return (
            f"<xtpu.Variable '{self.name}' shape={self.shape} dtype={self.dtype} device={self.device!r}, "
            f"numpy={self.read_value()!r}>"
        )


def _delegate(name: str):
    def op(self, *args):
        return getattr(_as_value(self), name)(*[_as_value(a) for a in args])

    return op


def _as_value(x: Any) -> Any:
    if isinstance(x, Variable):
        return x._xtpu_read_()  # TF converts a variable to a tensor (_dense_var_to_tensor)
    return x


for _name in [
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__matmul__",
    "__rmatmul__",
    "__neg__",
    "__pow__",
    "__getitem__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
]:
    setattr(Variable, _name, _delegate(_name))

__all__ = ["ReplicaComponent", "Variable"]
