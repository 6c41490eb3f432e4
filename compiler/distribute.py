"""``xtpu.distribute``: TF's ``tf.distribute`` names (strategy, values, input)."""

from xtpu.distribute_values import Mirrored, PerReplica, ReduceOp, VariableAggregation  # noqa: F401
from xtpu.input_lib import (  # noqa: F401
    DistributedDataset,
    DistributedIterator,
    InputContext,
    InputOptions,
    InputReplicationMode,
    ValueContext,
)
from xtpu.strategy import (  # noqa: F401
    ReplicaContext,
    TPUClusterResolver,
    TPUStrategy,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)

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
