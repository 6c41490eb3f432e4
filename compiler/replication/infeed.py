"""``xtpu.InfeedQueue``: TF's ``tf.compat.v1.tpu.experimental.InfeedQueue``
(``tensorflow/python/tpu/tpu_feed.py``) and its sharding policy
(``tpu_sharding.ShardingPolicy``).

An infeed queue carries tuples of tensors from the host to the replicas while
they compute.  Its configuration (number of tuple elements, their dtypes and
full shapes, the dimension each element is split along and the number of
shards, one per replica) is set piecemeal and then frozen; the enqueue
operations put one shard of each tuple into a replica's bounded queue
(:mod:`xtpu.runtime.infeed`), and ``xtpu.replicate(..., infeed_queue=q)``
appends the dequeued tuple to each replica's inputs (a
``tpu.infeed_dequeue_tuple`` in the device program), as TF does.

Errors follow TF's: ValueError for an inconsistent or frozen configuration,
TypeError for tuple types or shapes that are not dtypes or shapes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xtpu.core.tracing import bind, current_trace
from xtpu.dialects.infeed import InfeedDequeueTupleOp
from xtpu.ops.core import dtype_name
from xtpu.replication import distributed
from xtpu.replication.padding import TensorShape
from xtpu.runtime.infeed import Infeed

DEFAULT_SHARD_DIMENSION = 0
"""TF's ``tpu_sharding._DEFAULT_SHARD_DIMENSION``."""


def _dtype(t: Any) -> np.dtype:
    return np.dtype(dtype_name(t))


class ShardingPolicy:
    """How one tuple element is split into per-replica shards (TF's
    ``tpu_sharding.ShardingPolicy``): ``number_of_shards`` equal pieces
    along ``shard_dimension``."""

    def __init__(self) -> None:
        self._number_of_shards: int | None = None
        self._shard_dimension: int | None = None
        self._frozen = False

    @property
    def number_of_shards(self) -> int | None:
        return self._number_of_shards

    @property
    def shard_dimension(self) -> int | None:
        return self._shard_dimension

    def freeze(self) -> None:
        if not self._frozen:
            if self._number_of_shards is None:
                self._number_of_shards = 1
            if self._shard_dimension is None:
                self._shard_dimension = DEFAULT_SHARD_DIMENSION
            self._frozen = True

    def set_number_of_shards(self, number_of_shards: int) -> None:
        if self._frozen:
            if self._number_of_shards != number_of_shards:
                raise ValueError(
                    f"Can't set sharding policy to use {number_of_shards} shards since it has been frozen to "
                    f"use {self._number_of_shards}."
                )
        elif number_of_shards > 0:
            self._number_of_shards = int(number_of_shards)
        else:
            raise ValueError(f"Can't set sharding policy to use {number_of_shards} shards; value must be >0")

    def set_shard_dimension(self, shard_dimension: int) -> None:
        if self._frozen:
            if self._shard_dimension != shard_dimension:
                raise ValueError(
                    f"Can't set shard dimension to {shard_dimension} since it has been frozen to use "
                    f"{self._shard_dimension}."
                )
        else:
            self._shard_dimension = int(shard_dimension)

    def get_sharded_shape(self, shape: Any) -> TensorShape | None:
        """The shape of one shard of a ``shape`` value; None while the policy is unset.

        Raises:
          ValueError: ``shape`` has no ``shard_dimension`` or it does not
            divide into ``number_of_shards`` (TF's messages).
        """
        if self._shard_dimension is None or self._number_of_shards is None:
            return None
        shape = TensorShape(shape)
        if self._number_of_shards == 1:
            return shape
        if shape.dims is None:
            raise ValueError("shape must be a specified shape not Unknown")
        dims = list(shape.dims)
        if len(dims) <= self._shard_dimension:
            raise ValueError(f"shape {dims} does not contain shard_dimension {self._shard_dimension}")
        if dims[self._shard_dimension] is None:
            raise ValueError(
                f"shape {dims} must have a fixed size for dimension {self._shard_dimension} that is known at "
                "construction time."
            )
        if dims[self._shard_dimension] % self._number_of_shards:
            raise ValueError(
                f"shape {dims} cannot be sharded {self._number_of_shards} ways along dimension {self._shard_dimension}"
            )
        dims[self._shard_dimension] //= self._number_of_shards
        return TensorShape(dims)

    def get_unsharded_shape(self, shapes: Sequence[Any]) -> TensorShape:
        """The full shape of which ``shapes`` are the shards.

        Raises:
          ValueError: not one shape per shard, or shards of different shapes.
        """
        n = self._number_of_shards or 1
        dim = DEFAULT_SHARD_DIMENSION if self._shard_dimension is None else self._shard_dimension
        if len(shapes) != n:
            raise ValueError(f"shapes is {list(map(str, shapes))} but must be a list of length number_of_shards={n}")
        full = []
        for s in shapes:
            dims = TensorShape(s).as_list()
            if n > 1:
                if len(dims) <= dim:
                    raise ValueError(f"shape {dims} does not contain shard_dimension {dim}")
                dims[dim] *= n
            full.append(TensorShape(dims))
        if any(f != full[0] for f in full):
            raise ValueError(
                f"sharded shapes {[str(TensorShape(s)) for s in shapes]} are not consistent shards of a full "
                f"shape sharded {n} ways along dimension {dim}"
            )
        return full[0]


class InfeedQueue:
    """A host-to-device queue of tuples, one shard per replica (TF's
    ``tpu_feed.InfeedQueue``).

    Args:
      number_of_tuple_elements: elements per tuple; inferred from
        ``tuple_types``, ``tuple_shapes`` or ``shard_dimensions`` when None.
      tuple_types: a dtype per element.
      tuple_shapes: the full (unsharded) shape per element.
      shard_dimensions: the dimension each element is split along (default 0).
      number_of_partitions: logical cores per replica; only 1 is supported.
      name: the queue's name, in errors and in the IR (default ``"InfeedQueue"``).
      capacity: tuples each replica's queue holds before an enqueue waits
        (not in TF: its infeed buffer is the device's).

    Raises:
      ValueError: the number of tuple elements cannot be inferred or is not
        positive; lists of the wrong length; an inconsistent configuration.
      TypeError: a tuple type that is not a dtype, a shape that is not a shape.
    """

    def __init__(
        self,
        number_of_tuple_elements: int | None = None,
        tuple_types: Sequence[Any] | None = None,
        tuple_shapes: Sequence[Any] | None = None,
        shard_dimensions: Sequence[int] | None = None,
        number_of_partitions: int | None = None,
        name: str | None = None,
        *,
        capacity: int = 2,
    ):
        self._frozen = False
        self._generated_enqueue_ops = False
        self._generated_dequeue_op = False
        self._name = "InfeedQueue" if name is None else name
        self._number_of_partitions = 1 if number_of_partitions is None else int(number_of_partitions)
        if self._number_of_partitions != 1:
            raise NotImplementedError(
                f"InfeedQueue '{self._name}': number_of_partitions={number_of_partitions} (model-parallel "
                "infeed over logical cores) is not implemented; use 1"
            )
        self._capacity = int(capacity)
        self._infeed = None
        self._lock = threading.RLock()
        if number_of_tuple_elements is None:
            for given in (tuple_types, tuple_shapes, shard_dimensions):
                if given is not None:
                    number_of_tuple_elements = len(given)
                    break
            else:
                raise ValueError("number of tuple elements cannot be inferred from InfeedQueue constructor")
        if number_of_tuple_elements <= 0:
            raise ValueError(f"number_of_tuple_elements {number_of_tuple_elements} must be > 0")
        self._sharding_policies = [ShardingPolicy() for _ in range(number_of_tuple_elements)]
        self._tuple_types: list[np.dtype] | None = None
        self._tuple_shapes: list[TensorShape] | None = None
        if tuple_types is not None:
            self.set_tuple_types(tuple_types)
        if tuple_shapes is not None:
            self.set_tuple_shapes(tuple_shapes)
        if shard_dimensions is not None:
            self.set_shard_dimensions(shard_dimensions)
        self._validate()

    # ---- configuration (TF's methods and errors) ---------------------------
    def _validate(self) -> None:
        if self._tuple_shapes is not None:
            for policy, shape in zip(self._sharding_policies, self._tuple_shapes):
                policy.get_sharded_shape(shape)  # raises if incompatible

    @property
    def name(self) -> str:
        return self._name

    @property
    def number_of_tuple_elements(self) -> int:
        return len(self._sharding_policies)

    @property
    def tuple_types(self) -> list[np.dtype] | None:
        return self._tuple_types

    @property
    def tuple_shapes(self) -> list[TensorShape] | None:
        return self._tuple_shapes

    @property
    def shard_dimensions(self) -> list[int | None]:
        return [p.shard_dimension for p in self._sharding_policies]

    @property
    def number_of_shards(self) -> int | None:
        return self._sharding_policies[0].number_of_shards

    @property
    def number_of_partitions(self) -> int:
        return self._number_of_partitions

    def set_tuple_types(self, tuple_types: Sequence[Any]) -> None:
        types = self._tuple_config("tuple_types", tuple_types, _dtype, "dtype")
        if self._frozen:
            if types != self._tuple_types:
                raise ValueError(
                    "Trying to update InfeedQueue with frozen configuration with an incompatible type. Frozen "
                    f"types are {[t.name for t in self._tuple_types]}, updated types are {[t.name for t in types]}"
                )
        else:
            self._tuple_types = types

    def set_tuple_shapes(self, tuple_shapes: Sequence[Any]) -> None:
        shapes = self._tuple_config("tuple_shapes", tuple_shapes, TensorShape, "TensorShape")
        if self._frozen:
            if shapes != self._tuple_shapes:
                raise ValueError(
                    "Trying to update InfeedQueue with frozen configuration with an incompatible shape. Frozen "
                    f"shapes are {self._tuple_shapes}, updated shapes are {shapes}"
                )
        else:
            self._tuple_shapes = shapes
        self._validate()

    def _tuple_config(self, what: str, values: Sequence[Any], convert: Any, kind: str) -> list:
        """``values`` (one per tuple element) converted, with TF's errors:
        a ValueError for the wrong length, a TypeError for a value
        ``convert`` refuses."""
        if len(values) != self.number_of_tuple_elements:
            raise ValueError(
                f"{what} is {list(map(str, values))}, but must be a list of length {self.number_of_tuple_elements}"
            )
        try:
            return [convert(v) for v in values]
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"{what} is {list(map(str, values))}, but must be a list of elements each convertible "
                f"to {kind}: got error {e}"
            ) from None

    def set_shard_dimensions(self, shard_dimensions: Sequence[int]) -> None:
        if len(shard_dimensions) != self.number_of_tuple_elements:
            raise ValueError(
                f"shard_dimensions is {list(shard_dimensions)}, but must be a list of length "
                f"{self.number_of_tuple_elements}"
            )
        for policy, dimension in zip(self._sharding_policies, shard_dimensions):
            policy.set_shard_dimension(dimension)
        self._validate()

    def set_number_of_shards(self, number_of_shards: int) -> None:
        for policy in self._sharding_policies:
            policy.set_number_of_shards(number_of_shards)
        self._validate()

    def set_configuration_from_input_tensors(self, input_tensors: Sequence[Any]) -> None:
        """Shapes and types from one full tuple (before sharding)."""
        if len(input_tensors) != self.number_of_tuple_elements:
            raise ValueError(
                f"input_tensors has {len(input_tensors)} elements, but should be a list of "
                f"{self.number_of_tuple_elements} Tensors"
            )
        arrays = [np.asarray(t) for t in input_tensors]
        self.set_tuple_shapes([a.shape for a in arrays])
        self.set_tuple_types([a.dtype for a in arrays])

    def set_configuration_from_sharded_input_tensors(self, input_tensors: Sequence[Sequence[Any]]) -> None:
        """Number of shards, full shapes and types from one tuple per shard.

        Raises:
          ValueError: a shard's tuple has the wrong length; shard shapes that
            do not make one full shape.
          TypeError: shards whose element dtypes differ.
        """
        if not self._frozen:
            self._tuple_shapes = None  # transiently inconsistent otherwise (TF)
        self.set_number_of_shards(len(input_tensors))
        for t in input_tensors:
            if len(t) != self.number_of_tuple_elements:
                raise ValueError(
                    f"input_tensors has a shard of {len(t)} elements but must be a list of lists, where each "
                    f"inner list has length number_of_tuple_elements={self.number_of_tuple_elements}"
                )
        arrays = [[np.asarray(x) for x in t] for t in input_tensors]
        sharded = [[t[i].shape for t in arrays] for i in range(self.number_of_tuple_elements)]
        self.set_tuple_shapes([p.get_unsharded_shape(s) for p, s in zip(self._sharding_policies, sharded)])
        for i in range(1, len(arrays)):
            for j, (a, b) in enumerate(zip(arrays[0], arrays[i])):
                if a.dtype != b.dtype:
                    raise TypeError(
                        f"types of the tuple elements of input_tensors are not consistent: element {j} is "
                        f"{a.dtype.name} in shard 0 and {b.dtype.name} in shard {i}"
                    )
        self.set_tuple_types([a.dtype for a in arrays[0]])

    def freeze(self) -> None:
        """Fix the configuration; unset shard counts and dimensions take
        their defaults (1 shard, dimension 0).

        Raises:
          ValueError: tuple types or shapes are not all set.
        """
        if self._tuple_types is None:
            raise ValueError("Can't freeze an InfeedQueue without setting all tuple types.")
        if self._tuple_shapes is None or any(s.dims is None or None in s.dims for s in self._tuple_shapes):
            raise ValueError("Can't freeze an InfeedQueue without setting all tuple shapes.")
        with self._lock:  # a producer thread and a trace may freeze at once
            self._frozen = True
            for policy in self._sharding_policies:
                policy.freeze()
            self._validate()
            if self._infeed is None:
                self._infeed = Infeed(
                    self._name,
                    self.number_of_shards,
                    self.shard_shapes(),
                    [t.name for t in self._tuple_types],
                    self._capacity,
                )

    def shard_shapes(self) -> list[tuple[int, ...]]:
        """Each element's per-replica shape (the frozen shapes, sharded)."""
        return [tuple(p.get_sharded_shape(s).as_list()) for p, s in zip(self._sharding_policies, self._tuple_shapes)]

    # ---- the device side ----------------------------------------------------
    def generate_dequeue_op(self, tpu_device: int = 0) -> list[Any]:
        """Inside a replicated computation: the tensors of the replica's next
        tuple (a ``tpu.infeed_dequeue_tuple``).  Each call is one more
        dequeue per step (a step function traced ``steps_per_run`` times takes
        one tuple per step).  Freezes the configuration.

        TF raises "Can't generate two dequeue Ops from the same queue" only
        outside a function; a replicated computation is always traced, so
        xtpu never does.

        Raises:
          ValueError: outside a replicated computation.
        """
        self._generated_dequeue_op = True
        return self._dequeue()

    def _dequeue(self) -> list[Any]:
        if current_trace() is None:
            raise ValueError(
                f"InfeedQueue '{self._name}': the dequeue runs inside a replicated computation "
                "(xtpu.replicate(..., infeed_queue=queue))"
            )

        if distributed.is_initialized() and distributed.process_count() > 1:
            raise NotImplementedError(
                f"InfeedQueue '{self._name}': an infeed queue lives in one process; with "
                f"{distributed.process_count()} processes (MPI backend) feed the replicas through inputs"
            )
        self.freeze()
        shapes = self.shard_shapes()
        return list(
            bind(
                InfeedDequeueTupleOp,
                [],
                queue=self._infeed.key,
                shapes=shapes,
                dtypes=[t.name for t in self._tuple_types],
            )
        )

    # ---- the host side ------------------------------------------------------
    def generate_enqueue_ops(
        self, sharded_inputs: Sequence[Sequence[Any]], tpu_ordinal_function: Any = None, placement_function: Any = None
    ) -> list[Callable[[], None]]:
        """One enqueue operation per shard (replica) for ``sharded_inputs``,
        indexed ``[shard][element]``; each is a callable that puts its
        shard's tuple into its replica's queue (TF returns graph ops).
        Configures and freezes the queue from the inputs.

        Raises:
          ValueError / TypeError: TF's configuration errors; "Can't generate
            two enqueue Ops from the same queue".
        """
        self.set_configuration_from_sharded_input_tensors(sharded_inputs)
        self.freeze()
        if self._generated_enqueue_ops:
            raise ValueError("Can't generate two enqueue Ops from the same queue")
        self._generated_enqueue_ops = True
        infeed = self._infeed
        return [
            (lambda r=r, shard=[np.asarray(x) for x in shard]: infeed.put(r, shard))  # noqa: B008 - bound per replica
            for r, shard in enumerate(sharded_inputs)
        ]

    def split_inputs_and_generate_enqueue_ops(
        self,
        inputs: Sequence[Any],
        device_assignment: Any = None,
        placement_function: Any = None,
        tpu_ordinal_function: Any = None,
    ) -> list[Callable[[], None]]:
        """Split each full input along its shard dimension into
        ``number_of_shards`` pieces (default 1) and return one enqueue
        operation per shard, as :meth:`generate_enqueue_ops`.

        Raises:
          ValueError: an input that does not split evenly (TF's messages);
            "Can't generate two enqueue Ops from the same queue".
        """
        self.set_configuration_from_input_tensors(inputs)
        self.freeze()
        if self._generated_enqueue_ops:
            raise ValueError("Can't generate two enqueue Ops from the same queue")
        self._generated_enqueue_ops = True
        n = self.number_of_shards
        pieces = [np.split(np.asarray(x), n, axis=p.shard_dimension) for x, p in zip(inputs, self._sharding_policies)]
        infeed = self._infeed
        return [(lambda r=r: infeed.put(r, [p[r] for p in pieces])) for r in range(n)]

    def enqueue(self, per_replica_tuples: Sequence[Sequence[Any]], timeout: float | None = None) -> None:
        """Put one tuple into each replica's queue now (a convenience: the
        enqueue operations of one step, run at once).  The first call
        configures and freezes the queue from the tuples.

        Raises:
          ValueError: a tuple whose shapes or dtypes differ from the frozen
            configuration (names the replica and element), or the wrong
            number of replicas.
          RuntimeTimeoutError: a replica's queue stayed full for ``timeout``
            seconds (default: the runtime timeout).
        """
        if not self._frozen:
            self.set_configuration_from_sharded_input_tensors(per_replica_tuples)
            self.freeze()
        if len(per_replica_tuples) != self.number_of_shards:
            raise ValueError(
                f"InfeedQueue '{self._name}' feeds {self.number_of_shards} replicas, got tuples for "
                f"{len(per_replica_tuples)}"
            )
        checked = [self._infeed.check(r, t) for r, t in enumerate(per_replica_tuples)]
        for r, t in enumerate(checked):
            self._infeed.put(r, t, timeout)

    def pending(self) -> list[int]:
        """Tuples waiting in each replica's queue (empty before freezing)."""
        return [] if self._infeed is None else self._infeed.pending()

    def __repr__(self) -> str:
        return (
            f"InfeedQueue(name={self._name!r}, number_of_tuple_elements={self.number_of_tuple_elements}, "
            f"tuple_types={None if self._tuple_types is None else [t.name for t in self._tuple_types]}, "
            f"tuple_shapes={self._tuple_shapes}, frozen={self._frozen})"
        )
