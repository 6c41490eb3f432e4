"""``xtpu.distribute``: TF's ``tf.distribute`` names (strategy, values, input).

The room holds TF's distribution strategy model: ``TPUStrategy`` and the
replica context (:mod:`~xtpu.distribute.strategy`), the state of a running
``strategy.run`` (:mod:`~xtpu.distribute.context`), per-replica and mirrored
values (:mod:`~xtpu.distribute.values`), variables
(:mod:`~xtpu.distribute.variables`), ``tf.function``
(:mod:`~xtpu.distribute.function`) and distributed input
(:mod:`~xtpu.distribute.input_lib`).

Layer: above ``xtpu.replication``, ``xtpu.autodiff``, ``xtpu.ops`` and
``xtpu.core``. May import those and the IR and runtime layers; never
``train``, ``tools`` nor the ``xtpu`` namespace.
"""

from xtpu.distribute.input_lib import (  # noqa: F401
    DistributedDataset,
    DistributedIterator,
    InputContext,
    InputOptions,
    InputReplicationMode,
    ValueContext,
)
from xtpu.distribute.strategy import (  # noqa: F401
    ReplicaContext,
    TPUClusterResolver,
    TPUStrategy,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)
from xtpu.distribute.values import Mirrored, PerReplica, ReduceOp, VariableAggregation  # noqa: F401

experimental = type("experimental", (), {"ValueContext": ValueContext, "TPUStrategy": TPUStrategy})

#: ``tf.distribute.cluster_resolver``
cluster_resolver = type("cluster_resolver", (), {"TPUClusterResolver": TPUClusterResolver})

__all__ = [
    "DistributedDataset",
    "DistributedIterator",
    "InputContext",
    "InputOptions",
    "InputReplicationMode",
    "Mirrored",
    "PerReplica",
    "ReduceOp",
    "ReplicaContext",
    "TPUClusterResolver",
    "TPUStrategy",
    "ValueContext",
    "VariableAggregation",
    "cluster_resolver",
    "experimental",
    "get_replica_context",
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
