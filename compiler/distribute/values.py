"""Distributed values: ``ReduceOp``, ``VariableAggregation``, ``PerReplica``
and ``Mirrored`` (TF's ``tf.distribute`` value types).

A :class:`PerReplica` holds one value per replica (``.values`` indexed by
replica id); :class:`Mirrored` is a PerReplica whose values are known to be
equal (the result of a reduction or a broadcast).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any


class ReduceOp(enum.Enum):
    """How values are combined across replicas (``tf.distribute.ReduceOp``)."""

    SUM = "SUM"
    MEAN = "MEAN"


class VariableAggregation(enum.Enum):
    """How updates to a mirrored variable in replica context are combined
    (``tf.VariableAggregation``; the contrib strategy's ``aggregation``)."""

    NONE = "NONE"
    SUM = "SUM"
    MEAN = "MEAN"
    ONLY_FIRST_TOWER = "ONLY_FIRST_TOWER"


# TF 2 spelling.
VariableAggregation.ONLY_FIRST_REPLICA = VariableAggregation.ONLY_FIRST_TOWER  # type: ignore[attr-defined]


class VariableSynchronization(enum.Enum):
    """When a distributed variable's copies are synchronized
    (``tf.VariableSynchronization``): AUTO / ON_WRITE (every update is
    combined across replicas, per the aggregation) or ON_READ (each replica
    updates its own copy; reading in cross-replica context aggregates them)."""

    AUTO = "AUTO"
    NONE = "NONE"
    ON_WRITE = "ON_WRITE"
    ON_READ = "ON_READ"


def as_synchronization(value: Any) -> VariableSynchronization:
    """None (AUTO), a VariableSynchronization or its name.

    Raises:
      ValueError: anything else.
    """
    if value is None:
        return VariableSynchronization.AUTO
    if isinstance(value, VariableSynchronization):
        return value
    if isinstance(value, str) and value.upper() in VariableSynchronization.__members__:
        return VariableSynchronization[value.upper()]
    raise ValueError(f"Invalid variable synchronization mode: {value!r}")


def as_aggregation(op: Any) -> VariableAggregation:
    """``op`` (a ReduceOp, VariableAggregation or its name) as a VariableAggregation."""
    if isinstance(op, VariableAggregation):
        return op
    if isinstance(op, ReduceOp):
        return VariableAggregation[op.value]
    if isinstance(op, str):
        name = op.upper()
        if name == "ONLY_FIRST_REPLICA":
            name = "ONLY_FIRST_TOWER"
        try:
            return VariableAggregation[name]
        except KeyError:
            pass
    raise ValueError(
        f"expected xtpu.ReduceOp.SUM/MEAN or xtpu.VariableAggregation.SUM/MEAN/ONLY_FIRST_TOWER, got {op!r}"
    )


class PerReplica:
    """One value per replica; ``values[r]`` is replica ``r``'s."""

    def __init__(self, values: Sequence[Any]):
        self._values = tuple(values)

    @property
    def values(self) -> tuple[Any, ...]:
        return self._values

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, r: int) -> Any:
        return self._values[r]

    def __iter__(self):
        return iter(self._values)

    def __repr__(self) -> str:
        inner = ", ".join(f"{r}: {v!r}" for r, v in enumerate(self._values))
        return f"{type(self).__name__}({{{inner}}})"


class Mirrored(PerReplica):
    """A PerReplica whose values are equal on every replica."""


class DistributedValues(PerReplica):
    """Alias kept for TF's name."""


__all__ = ["Mirrored", "PerReplica", "ReduceOp", "VariableAggregation", "as_aggregation"]
