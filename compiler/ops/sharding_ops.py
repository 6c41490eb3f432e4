"""Logical devices: TF's split / replicate / assign annotations.

``split_to_logical_devices``, ``replicate_to_logical_devices`` and
``assign_to_logical_device`` follow
``tf.distribute.TPUStrategy.experimental_split_to_logical_devices`` and its
siblings (the seed ``split_to_logical_devices.txt``): each returns a tensor
with the same value, annotated with how the ops on it are laid out over the
logical devices (cores) of one replica.  They trace to
``tpu.sharding_constraint``; ``tpu-propagate-sharding`` and
``tpu-spmd-partition`` turn the annotations into a per-core program.
Eagerly (and with one logical device) there is no layout to annotate: they
check what does not depend on a device assignment (rank, divisibility) and
return a new tensor with the same value, as TF's ``XlaSharding`` op does (a
tape that did not watch the input does not take the output for it), so the
same function gives the same values and gradients eagerly and compiled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xtpu.core.tracing import bind, convert, current_trace
from xtpu.dialects.sharding import ShardingAttr
from xtpu.dialects.tpu import ShardingConstraintOp
from xtpu.ops.array_ops import fresh
from xtpu.ops.core import shape_of


def num_logical_devices() -> int:
    """Logical devices per replica of the computation being traced (1 eagerly)."""
    tr = current_trace()
    return 1 if tr is None else tr.num_cores


def _annotate(x: Any, sharding: ShardingAttr) -> Any:
    if current_trace() is None or num_logical_devices() == 1:
        return fresh(x)  # a new tensor all the same, as TF's XlaSharding op makes
    (out,) = bind(ShardingConstraintOp, [x], sharding=sharding)
    return out


def split_to_logical_devices(tensor: Any, partition_dimensions: Sequence[int]) -> Any:
    """Split the ops on ``tensor`` over the logical devices of each replica.

    Args:
      tensor: a tensor of rank R.
      partition_dimensions: R ints; dimension i is cut into
        ``partition_dimensions[i]`` equal parts.  Their product must be the
        number of logical devices per replica.

    Returns:
      ``tensor``, annotated (tiled over devices 0..n-1 in row-major tile order).

    Raises:
      ValueError: (1) ``len(partition_dimensions)`` differs from the rank;
        (2) their product differs from the logical devices per replica;
        (3) a dimension does not divide by its entry — the seed's three cases.
    """
    x = convert(tensor)
    shape = shape_of(x)
    dims = [int(d) for d in np.asarray(partition_dimensions).reshape(-1)]
    if len(dims) != len(shape):
        raise ValueError(
            f"Length of `partition_dimensions` must equal to the rank of `tensor.shape` ({len(shape)}). "
            f"Received len(partition_dimensions)={len(dims)}."
        )
    tr = current_trace()
    n = num_logical_devices()
    if any(d < 1 for d in dims) or (tr is not None and int(np.prod(dims)) != n):
        raise ValueError(
            f"The product of `partition_dimensions` should be the same as the number of logical devices "
            f"(={n}). Received `partition_dimensions`={dims}, and their product is {int(np.prod(dims))}."
        )
    for i, (size, d) in enumerate(zip(shape, dims)):
        if size % d:
            raise ValueError(
                f"Dimension {i} of `tensor` (shape {list(shape)}) has size {size}, which is not divisible "
                f"by partition_dimensions[{i}]={d}."
            )
    return _annotate(x, ShardingAttr.from_partition_dimensions(dims))


def replicate_to_logical_devices(tensor: Any) -> Any:
    """Keep a full copy of ``tensor`` on every logical device of the replica
    (TPUStrategy.experimental_replicate_to_logical_devices)."""
    return _annotate(convert(tensor), ShardingAttr.replicated())


def assign_to_logical_device(tensor: Any, logical_device_id: int) -> Any:
    """Place the ops on ``tensor`` on one logical device of the replica
    (TPUStrategy.experimental_assign_to_logical_device).

    Raises:
      ValueError: ``logical_device_id`` is not in ``[0, logical devices)``.
    """
    x = convert(tensor)
    n = num_logical_devices()
    if current_trace() is not None and not 0 <= int(logical_device_id) < n:
        raise ValueError(
            f"`logical_core_id` to assign must be lower then total number of logical devices per replica. "
            f"Received logical device id {logical_device_id} but there are only total of {n} logical devices in replica."
        )
    return _annotate(x, ShardingAttr.maximal(int(logical_device_id)))
