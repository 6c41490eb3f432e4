"""Distributed input (TF's ``tensorflow/python/distribute/input_lib.py`` and
``distribute_lib.InputContext`` / ``ValueContext`` / ``InputOptions``).

One host feeds every replica, as on a single TPU worker:

* ``strategy.experimental_distribute_dataset(dataset)``: each element of
  ``dataset`` is a *global* batch; it is split along its first dimension into
  ``num_replicas_in_sync`` equal per-replica batches (replica ``r`` gets rows
  ``[r*k, (r+1)*k)``).
* ``strategy.distribute_datasets_from_function(dataset_fn)``: ``dataset_fn``
  gets an :class:`InputContext` and returns a dataset of *per-replica*
  batches; with TF's default ``InputReplicationMode.PER_WORKER`` it is called
  once (``num_input_pipelines=1``) and replica ``r`` gets element ``r`` of
  each group of ``num_replicas_in_sync`` consecutive elements; with
  ``PER_REPLICA`` it is called once per replica (``input_pipeline_id`` the
  replica id) and each replica reads its own dataset.

Iterating a distributed dataset yields the element's structure with a
``PerReplica`` value per component (the value itself with one replica).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from xtpu.core import pytree
from xtpu.core.eager import as_eager_tensor
from xtpu.core.tracing import to_numpy
from xtpu.distribute.context import _tree_map
from xtpu.distribute.function import TensorSpec
from xtpu.distribute.values import PerReplica

# --------------------------------------------------------------------------
# TF 1 contrib datasets (``strategy.experimental_distribute_dataset`` of
# ``tf.contrib.distribute.TPUStrategy``)
# --------------------------------------------------------------------------


def split_batch(batch: Any, n: int) -> Any:
    def split(x):
        arr = to_numpy(x)
        if arr.ndim == 0:
            raise ValueError("experimental_distribute_dataset: a batch element is a scalar; it has no batch dimension")
        b = arr.shape[0]
        if b % n:
            raise ValueError(
                f"experimental_distribute_dataset: a batch of {b} elements does not divide evenly across "
                f"{n} replicas (the batch size must be a multiple of num_replicas_in_sync)"
            )
        k = b // n
        return PerReplica([arr[r * k : (r + 1) * k] for r in range(n)])

    return _tree_map(split, batch)


class ContribDistributedDataset:
    """A dataset whose batches are split along the batch dimension across the
    replicas; iterating yields batches whose arrays are PerReplica values."""

    def __init__(self, dataset: Iterable, num_replicas: int):
        self._dataset = dataset
        self._n = num_replicas

    def __iter__(self) -> ContribDistributedIterator:
        return ContribDistributedIterator(iter(self._dataset), self._n)

    def make_one_shot_iterator(self) -> ContribDistributedIterator:
        return iter(self)


class ContribDistributedIterator:
    """An iterator over a DistributedDataset (``get_next()`` or ``next()``)."""

    def __init__(self, it, n: int):
        self._it = it
        self._n = n

    def __iter__(self):
        return self

    def __next__(self) -> Any:
        return split_batch(next(self._it), self._n)

    def get_next(self) -> Any:
        return next(self)


_ContribDataset = ContribDistributedDataset
_ContribIterator = ContribDistributedIterator
_split_batch = split_batch


class InputContext:
    """What ``dataset_fn`` of ``distribute_datasets_from_function`` knows
    (TF's ``tf.distribute.InputContext``)."""

    def __init__(self, num_input_pipelines: int = 1, input_pipeline_id: int = 0, num_replicas_in_sync: int = 1):
        self._num_input_pipelines = int(num_input_pipelines)
        self._input_pipeline_id = int(input_pipeline_id)
        self._num_replicas_in_sync = int(num_replicas_in_sync)

    @property
    def num_input_pipelines(self) -> int:
        return self._num_input_pipelines

    @property
    def input_pipeline_id(self) -> int:
        return self._input_pipeline_id

    @property
    def num_replicas_in_sync(self) -> int:
        return self._num_replicas_in_sync

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        """``global_batch_size // num_replicas_in_sync``.

        Raises:
          ValueError: not divisible (TF's message).
        """
        if global_batch_size % self._num_replicas_in_sync != 0:
            raise ValueError(
                f"The `global_batch_size` {global_batch_size!r} is not divisible by `num_replicas_in_sync` "
                f"{self._num_replicas_in_sync!r}"
            )
        return global_batch_size // self._num_replicas_in_sync

    def __str__(self) -> str:
        return (
            f"tf.distribute.InputContext(input pipeline id {self._input_pipeline_id}, "
            f"total: {self._num_input_pipelines})"
        )


class ValueContext:
    """What ``value_fn`` of ``experimental_distribute_values_from_function``
    knows (TF's ``tf.distribute.experimental.ValueContext``)."""

    def __init__(self, replica_id_in_sync_group: int = 0, num_replicas_in_sync: int = 1):
        self._replica_id_in_sync_group = int(replica_id_in_sync_group)
        self._num_replicas_in_sync = int(num_replicas_in_sync)

    @property
    def replica_id_in_sync_group(self) -> int:
        return self._replica_id_in_sync_group

    @property
    def num_replicas_in_sync(self) -> int:
        return self._num_replicas_in_sync

    def __str__(self) -> str:
        return (
            f"tf.distribute.ValueContext(replica id {self._replica_id_in_sync_group},  total replicas in sync: "
            f"{self._num_replicas_in_sync})"
        )


class InputReplicationMode(enum.Enum):
    """TF's ``tf.distribute.InputReplicationMode``."""

    PER_WORKER = "PER_WORKER"
    PER_REPLICA = "PER_REPLICA"


@dataclass
class InputOptions:
    """TF's ``tf.distribute.InputOptions``.  ``experimental_replication_mode``
    changes how ``distribute_datasets_from_function`` calls its function;
    ``experimental_fetch_to_device`` and ``experimental_place_dataset_on_device``
    are checked as TF checks them (the host always feeds the replicas)."""

    experimental_fetch_to_device: bool | None = None
    experimental_replication_mode: InputReplicationMode = InputReplicationMode.PER_WORKER
    experimental_place_dataset_on_device: bool = False
    experimental_per_replica_buffer_size: int = 1

    def __post_init__(self):
        if self.experimental_fetch_to_device is None:
            self.experimental_fetch_to_device = True


def _check_options(options: InputOptions | None, from_function: bool) -> InputOptions:
    options = options or InputOptions()
    if not isinstance(options, InputOptions):
        raise TypeError(f"options must be an xtpu.distribute.InputOptions, got {type(options).__name__}")
    mode = options.experimental_replication_mode
    if options.experimental_place_dataset_on_device:
        if mode is not InputReplicationMode.PER_REPLICA:
            raise ValueError(
                "When `experimental_place_dataset_on_device` is set for dataset placement, you must "
                "also specify `PER_REPLICA` for the replication mode"
            )
        if options.experimental_fetch_to_device:
            raise ValueError(
                "`experimental_place_dataset_on_device` can not be set to True when "
                "experimental_fetch_to_device is True and replication mode is set to `PER_REPLICA`"
            )
    if not from_function and mode is InputReplicationMode.PER_REPLICA:
        raise NotImplementedError(
            "InputReplicationMode.PER_REPLICA is only supported in `distribute_datasets_from_function`."
        )
    return options


class Optional:
    """An element that may be missing (TF's ``tf.experimental.Optional``)."""

    def __init__(self, value: Any = None, has_value: bool = False):
        self._value = value
        self._has_value = bool(has_value)

    @staticmethod
    def from_value(value: Any) -> Optional:
        return Optional(value, True)

    @staticmethod
    def empty(element_spec: Any = None) -> Optional:
        return Optional(None, False)

    def has_value(self) -> Any:
        """True (a bool scalar tensor) when there is a value."""
        return as_eager_tensor(np.asarray(self._has_value))

    def get_value(self) -> Any:
        """The value.

        Raises:
          ValueError: there is none (TF raises InvalidArgumentError).
        """
        if not self._has_value:
            raise ValueError("The optional does not have a value (get_value on an empty Optional)")
        return self._value


def _per_replica_spec(spec: Any, n: int) -> Any:
    """The element spec of one replica's part of a global batch spec."""
    leaves, td = pytree.flatten(spec)
    out = []
    for s in leaves:
        if s.shape and s.shape[0] is not None:
            out.append(TensorSpec((s.shape[0] // n,) + s.shape[1:], s.dtype))
        else:
            out.append(s)
    return pytree.unflatten(td, out)


class DistributedIterator(_ContribIterator):
    """An iterator over a distributed dataset: ``next()`` / ``get_next()``
    give one step's per-replica batches (TF's ``DistributedIterator``).

    Raises (from ``get_next``):
      StopIteration: the dataset is exhausted (TF: OutOfRangeError).
      ValueError: a global batch does not split evenly across the replicas.
    """

    def __init__(self, take_next: Callable[[], Any], n: int, element_spec: Any):
        self._take_next = take_next
        self._n = n
        self._element_spec = element_spec

    def __next__(self) -> Any:
        return self._take_next()

    def get_next(self) -> Any:
        return self._take_next()

    def get_next_as_optional(self) -> Optional:
        """The next step's batches as an :class:`Optional`: empty at the end
        of the data instead of raising."""
        try:
            return Optional.from_value(self._take_next())
        except StopIteration:
            return Optional.empty(self._element_spec)

    @property
    def element_spec(self) -> Any:
        """One replica's element structure with an ``xtpu.TensorSpec`` per
        component (TF gives a PerReplicaSpec of these)."""
        return self._element_spec

    def _xtpu_pull_(self) -> Any:
        """One element for ``xtpu.function`` (PerReplica components)."""
        return self._take_next()


class DistributedDataset(_ContribDataset):
    """A dataset distributed over the replicas; iterate it or call
    ``iter()`` for a :class:`DistributedIterator`."""

    def __init__(self, make_iterator: Callable[[], DistributedIterator], element_spec: Any):
        self._make = make_iterator
        self._element_spec = element_spec

    def __iter__(self) -> DistributedIterator:
        return self._make()

    @property
    def element_spec(self) -> Any:
        return self._element_spec


def _spec_of(dataset: Any) -> Any:
    return getattr(dataset, "element_spec", None)


def distribute_dataset(dataset: Iterable, n: int, options: InputOptions | None = None) -> DistributedDataset:
    """``strategy.experimental_distribute_dataset``: split global batches."""
    _check_options(options, from_function=False)
    spec = _spec_of(dataset)
    spec = None if spec is None else _per_replica_spec(spec, n)

    def make() -> DistributedIterator:
        it = iter(dataset)
        return DistributedIterator(lambda: _split_batch(_host(next(it)), n), n, spec)

    return DistributedDataset(make, spec)


def _host(element: Any) -> Any:
    leaves, td = pytree.flatten(element)
    return pytree.unflatten(td, [np.asarray(to_numpy(x)) for x in leaves])


def _gather_replicas(parts: list[Any], n: int) -> Any:
    """Per-replica elements of one structure -> that structure of PerReplica."""
    if n == 1:
        return _host(parts[0])
    flat = [pytree.flatten(_host(p)) for p in parts]
    td = flat[0][1]
    for r, (_, t) in enumerate(flat[1:], start=1):
        if t != td:
            raise ValueError(f"replica {r}'s element has the structure {t}, replica 0's {td}")
    return pytree.unflatten(td, [PerReplica([flat[r][0][j] for r in range(n)]) for j in range(td.num_leaves)])


def distribute_datasets_from_function(
    dataset_fn: Callable[[InputContext], Iterable], n: int, options: InputOptions | None = None
) -> DistributedDataset:
    """``strategy.distribute_datasets_from_function``: per-replica batches
    from ``dataset_fn(input_context)`` (see the module docstring)."""
    options = _check_options(options, from_function=True)
    if options.experimental_replication_mode is InputReplicationMode.PER_REPLICA:
        datasets = [dataset_fn(InputContext(n, r, n)) for r in range(n)]
    else:
        datasets = [dataset_fn(InputContext(1, 0, n))]
    spec = _spec_of(datasets[0])

    def make() -> DistributedIterator:
        its = [iter(d) for d in datasets]
        if len(its) == n and n > 1:
            take = lambda: _gather_replicas([next(it) for it in its], n)  # noqa: E731
        else:
            it = its[0]
            take = lambda: _gather_replicas([next(it) for _ in range(n)], n)  # noqa: E731
        return DistributedIterator(take, n, spec)

    return DistributedDataset(make, spec)


def distribute_values_from_function(value_fn: Callable[[ValueContext], Any], n: int) -> Any:
    """``strategy.experimental_distribute_values_from_function``: replica
    ``r`` gets ``value_fn(ValueContext(r, n))``; a PerReplica per component
    (the value itself with one replica)."""
    parts = [value_fn(ValueContext(r, n)) for r in range(n)]
    if n == 1:
        return parts[0]
    flat = [pytree.flatten(p) for p in parts]
    td = flat[0][1]
    return pytree.unflatten(td, [PerReplica([flat[r][0][j] for r in range(n)]) for j in range(td.num_leaves)])


__all__ = [
    "DistributedDataset",
    "DistributedIterator",
    "InputContext",
    "InputOptions",
    "InputReplicationMode",
    "Optional",
    "ValueContext",
    "distribute_dataset",
    "distribute_datasets_from_function",
    "distribute_values_from_function",
]
