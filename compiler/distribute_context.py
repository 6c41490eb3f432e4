"""The distribution context: which strategy's scope, colocation and
``run`` the current thread is in, and reducing a traced per-replica value.

Below both ``xtpu.strategy`` and ``xtpu.variables``: a variable asks here
which strategy owns it and how to combine replica updates, and the strategy
imports the variables, never the other way round.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from xtpu.collectives import all_gather
from xtpu.dialects import hlo
from xtpu.distribute_values import VariableAggregation, as_aggregation
from xtpu.ops.array_ops import concat, replica_id, reshape
from xtpu.replication import cross_replica_sum
from xtpu.tracing import bind, convert, current_trace

_state = threading.local()


def _stack(name: str) -> list:
    st = getattr(_state, name, None)
    if st is None:
        st = []
        setattr(_state, name, st)
    return st


def current_scope_strategy():
    """The ``TPUStrategy`` whose ``scope()`` this thread is in, or None."""
    st = _stack("scopes")
    return st[-1] if st else None


def current_colocation():
    """The innermost ``colocate_vars_with`` target of this thread, or None."""
    st = _stack("colocate")
    return st[-1] if st else None


def current_run_state():
    """The state of the ``strategy.run`` being traced on this thread, or None."""
    st = _stack("runs")
    return st[-1] if st else None


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
