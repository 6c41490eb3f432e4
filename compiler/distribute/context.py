"""The distribution context: which strategy's scope, colocation and
``run`` the current thread is in, and reducing a traced per-replica value.

Below both ``xtpu.strategy`` and ``xtpu.variables``: a variable asks here
which strategy owns it and how to combine replica updates, and the strategy
imports the variables, never the other way round.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from xtpu.core import pytree
from xtpu.core.contexts import _stack, current_colocation, current_run_state, current_scope_strategy
from xtpu.core.tracing import bind, convert, current_trace
from xtpu.dialects import hlo
from xtpu.distribute.values import PerReplica, VariableAggregation, as_aggregation
from xtpu.ops.array_ops import concat, replica_id, reshape
from xtpu.replication.collectives import all_gather
from xtpu.replication.program import cross_replica_sum


def select_for(local: Any, r: int) -> Any:
    """``local`` on replica ``r``, zeros elsewhere."""
    x = convert(local)
    pred = replica_id() == np.int32(r)
    zeros = convert(np.zeros(tuple(x.shape), dtype=np.dtype(x.dtype)))
    (out,) = bind(hlo.SelectOp, [pred, x, zeros])
    return out


def all_gather_list(local: Any, n: int) -> list[Any]:
    """Every replica's value of ``local``, on every replica, with one
    collective: a ``ccl.all_gather`` of one core per replica, else (logical
    cores, where only all-reduces are partitioned) a ``cross_replica_sum`` of
    each replica's value in its slot of a zero buffer."""
    x = convert(local)
    shape = tuple(x.shape)
    if n == 1:
        return [x]
    if current_trace().num_cores == 1 and x.dtype != "string":
        gathered = all_gather(reshape(x, (1,) + shape), 0, n)
        return [gathered[r] for r in range(n)]
    parts = [reshape(select_for(x, r), (1,) + shape) for r in range(n)]
    summed = cross_replica_sum(concat(parts, 0))
    return [summed[r] for r in range(n)]


def traced_reduce(aggregation: Any, local: Any, n: int) -> Any:
    """Reduce a traced per-replica value across replicas (collectives):
    SUM and MEAN by ``cross_replica_sum``, ONLY_FIRST_TOWER by replica 0's
    value summed with zeros.

    Raises:
      ValueError: aggregation NONE.
    """
    agg = as_aggregation(aggregation)
    x = convert(local)
    if agg is VariableAggregation.ONLY_FIRST_TOWER:
        return cross_replica_sum(select_for(x, 0)) if n > 1 else x
    if agg is VariableAggregation.NONE:
        raise ValueError("reduce needs an aggregation other than NONE")
    s = cross_replica_sum(x)
    if agg is VariableAggregation.MEAN:
        s = s / np.asarray(n, dtype=np.dtype(x.dtype))
    return s


# --------------------------------------------------------------------------
# The state of a traced ``strategy.run``
# --------------------------------------------------------------------------


def _tree_map(fn: Callable[[Any], Any], tree: Any, is_leaf=None) -> Any:
    leaves, td = pytree.flatten(tree, is_leaf)
    return pytree.unflatten(td, [fn(x) for x in leaves])


class _TracedPerReplica(PerReplica):
    """Inside merge_fn: a per-replica value, as seen by the running replica
    (``local`` is this replica's traced value); cross-replica operations on
    it become collectives."""

    def __init__(self, local: Any, num_replicas: int):
        self.local = local
        self.num_replicas = num_replicas
        self._gathered = None

    @property
    def values(self) -> tuple[Any, ...]:
        if self._gathered is None:
            self._gathered = tuple(all_gather_list(self.local, self.num_replicas))
        return self._gathered

    _values = property(lambda self: self.values)

    def __repr__(self) -> str:
        return f"PerReplica(<traced {self.local!r}>)"


class RetraceRequest(Exception):
    """Raised while ``run`` traces its step function by code that needs
    variables made outside the trace (TF's ``init_scope``), such as an
    optimizer's slot variables at the first step: ``run`` calls
    ``prepare()`` outside the trace (it creates the variables in this
    strategy's scope), then traces the step again with them as inputs and
    outputs.  Python side effects of the step function therefore happen once
    more on that first call, as when TF retraces a ``tf.function``."""

    def __init__(self, prepare: Callable[[], None], what: str = "the step function"):
        super().__init__(what)
        self.prepare = prepare


class _RunState:
    def __init__(self, strategy: Any, variables: list):
        """``strategy``: the ``TPUStrategy`` whose ``run`` is being traced."""
        self.strategy = strategy
        self.num_replicas = strategy.num_replicas_in_sync
        self.variables = variables
        self.current: dict = {}
        self.host_access: dict = {}
        self.in_merge = False

    def use_variable_of_another_strategy(self, var: Any) -> None:
        """``var`` (a mirrored variable of another strategy) is read or
        written in this program: make it an input and output of this
        strategy's programs, then trace again (TF reads it through its
        replicated handle)."""
        strategy = self.strategy

        def prepare():
            strategy._foreign_variables.append(weakref.ref(var))

        raise RetraceRequest(prepare, f"variable '{var.name}' of another strategy")


# --------------------------------------------------------------------------
# Which strategies exist: ``xtpu.function`` finds the one a function uses
# --------------------------------------------------------------------------

_STRATEGY_TYPES: list[type] = []
_DEFAULT_STRATEGY: list[Callable[[], Any]] = []


def register_strategy_type(cls: type, default: Callable[[], Any]) -> None:
    """Declare a strategy class and the factory of the default strategy
    (:mod:`xtpu.distribute.strategy` does, when it loads)."""
    _STRATEGY_TYPES[:] = [cls]
    _DEFAULT_STRATEGY[:] = [default]


def is_strategy(value: Any) -> bool:
    """Whether ``value`` is a distribution strategy (``xtpu.TPUStrategy``)."""
    return bool(_STRATEGY_TYPES) and isinstance(value, _STRATEGY_TYPES[0])


def default_strategy() -> Any:
    """The default strategy (one replica), as ``tf.distribute.get_strategy()``
    outside any scope."""
    return _DEFAULT_STRATEGY[0]()


__all__ = [
    "RetraceRequest",
    "_RunState",
    "_TracedPerReplica",
    "_stack",
    "_tree_map",
    "all_gather_list",
    "current_colocation",
    "current_run_state",
    "current_scope_strategy",
    "default_strategy",
    "is_strategy",
    "register_strategy_type",
    "select_for",
    "traced_reduce",
]
