"""``xtpu.all_to_all`` and ``xtpu.collective_permute``: TF's ``tpu_ops``
collectives, traced straight to the ``ccl`` ops.

Semantics, argument names and errors follow ``tf.compat.v1.tpu`` ops
(``tensorflow/python/tpu/ops/tpu_ops.py``, the ``AllToAll`` shape function
of ``tensorflow/core/ops/tpu_cross_replica_ops.cc`` and XLA's verifier of
``collective-permute``); the IR, shape rule, gradient (VJP) and runtime
kernel are those of :class:`xtpu.dialects.ccl.AllToAllOp` and
:class:`xtpu.dialects.ccl.CollectivePermuteOp`.  Inside a replicated
computation of ``n`` replicas with one core each the replica ids ``0 .. n-1``
are the ccl participants, so the ops are emitted as they are.

Like ``cross_replica_sum`` they have no kernel outside a replicated
computation (TF: no kernel for ``AllToAll`` / ``CollectivePermute`` outside
a TPU computation) and cannot run in an outside-compilation cluster.  In a
replica split over several logical cores (``num_cores_per_replica > 1``),
where ``tpu-spmd-partition`` partitions only all-reduces, each is one
``cross_replica_sum`` of every replica's share placed in a zero buffer
(``n`` times the data; see :func:`_through_sum`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xtpu.core.tracing import Trace, bind, convert, current_trace
from xtpu.dialects import hlo
from xtpu.dialects.ccl import AllGatherOp, AllToAllOp, CollectivePermuteOp
from xtpu.dialects.tpu import check_group_assignment
from xtpu.ops.array_ops import concat, replica_id, reshape
from xtpu.ops.math_ops import cast
from xtpu.replication.program import cross_replica_sum


def replicated_trace(what: str) -> Trace:
    """The trace of the enclosing replicated computation, on the device.

    Raises:
      RuntimeError: called eagerly (no replicas to exchange with).
      ValueError: called inside an outside_compilation cluster.
    """
    tr = current_trace()
    if tr is None:
        raise RuntimeError(
            f"{what} must be called inside a replicated computation (xtpu.replicate, xtpu.lower or "
            f"strategy.run): it exchanges data between the computation's replicas, and eagerly there are "
            f"none (TF: no kernel for the op outside a TPU computation)"
        )
    if tr.cluster is not None:
        raise ValueError(
            f"{what} cannot run inside outside_compilation cluster '{tr.cluster}': "
            "collectives run on the devices, not on the host"
        )
    return tr


def _select(pred: Any, x: Any, y: Any) -> Any:
    (out,) = bind(hlo.SelectOp, [pred, x, y])
    return out


def _through_sum(x: Any, n: int, contribution: Callable[[int, Any, Any], Any]) -> Any:
    """A collective as one ``cross_replica_sum``, for replicas split over
    logical cores (``tpu-spmd-partition`` partitions all-reduces only).

    ``contribution(t, x, rid)`` is what this replica (``rid``, traced) adds to
    replica ``t``'s result: its share where it has one, zeros elsewhere.  The
    sum of slot ``t`` over the replicas is ``t``'s result, which replica ``t``
    selects.  It moves ``n`` times the result's data and a ``-0.0`` arrives
    as ``+0.0`` (it is added to zeros); bools travel as int32."""
    is_bool = x.dtype == "bool"
    if is_bool:
        x = cast(x, "int32")
    rid = replica_id()
    slots = [contribution(t, x, rid) for t in range(n)]
    shape = tuple(slots[0].shape)
    summed = cross_replica_sum(concat([reshape(v, (1,) + shape) for v in slots], 0))
    out = summed[0]
    for t in range(1, n):
        out = _select(rid == np.int32(t), summed[t], out)
    return cast(out, "bool") if is_bool else out


def _zeros_like(x: Any) -> Any:
    return convert(np.zeros(tuple(x.shape), dtype=np.dtype(x.dtype)))


def _int_lists(value: Any, what: str) -> list[list[int]]:
    """``value`` (a list of lists or a 2-D integer array) as lists of ints.

    Raises:
      ValueError: not a list of lists, or an id that is not an integer.
    """
    try:
        rows = [list(r) for r in (value.tolist() if isinstance(value, np.ndarray) else value)]
    except TypeError:
        raise ValueError(f"{what} must be a list of lists of integer ids, got {value!r}") from None
    for row in rows:
        for i in row:
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                raise ValueError(f"{what} must hold integer ids, got {i!r} in {value!r}")
    return [[int(i) for i in row] for row in rows]


def all_to_all(
    x: Any,
    concat_dimension: int,
    split_dimension: int,
    split_count: int,
    group_assignment: Any = None,
    name: str | None = None,
) -> Any:
    """Exchange blocks between the replicas of each group
    (``tf.compat.v1.tpu.all_to_all``; StableHLO ``all_to_all``).

    Each replica splits ``x`` into ``split_count`` blocks along
    ``split_dimension``, sends block ``i`` to the ``i``-th replica of its
    group, and concatenates the blocks it receives, in group order, along
    ``concat_dimension``.

    Args:
      x: a numeric or bool tensor of shape ``S``.
      concat_dimension, split_dimension: dimensions of ``x`` in ``[0, rank)``.
      split_count: the size of each group (the number of blocks).
      group_assignment: groups of replica ids of equal size covering every
        replica once; None is one group of all replicas.
      name: unused (TF's op name).

    Returns:
      A tensor of ``x``'s dtype, ``S[split_dimension] / split_count`` along
      ``split_dimension`` and ``S[concat_dimension] * split_count`` along
      ``concat_dimension``.  The gradient is ``all_to_all`` of the cotangent
      with the two dimensions swapped (TF's ``_all_to_all_grad``).

    Raises:
      RuntimeError: called outside a replicated computation.
      ValueError: ``split_count`` below 1 or not the group size, a dimension
        out of range, ``S[split_dimension]`` not divisible by
        ``split_count`` (TF's messages), a bad ``group_assignment``, or a
        call inside an outside_compilation cluster.
    """
    del name
    tr = replicated_trace("all_to_all")
    n = tr.num_replicas
    x = convert(x)
    rank = len(x.shape)
    split_count = int(split_count)
    if split_count < 1:
        raise ValueError(f"split_count {split_count} must at least be one.")
    groups = [list(range(n))] if group_assignment is None else _int_lists(group_assignment, "group_assignment")
    check_group_assignment(groups, n)
    if len(groups[0]) != split_count:
        raise ValueError(
            f"split_count {split_count} must equal the size of the second dimension of group_assignment "
            f"{len(groups[0])}"
        )
    for what, d in (("concat_dimension", concat_dimension), ("split_dimension", split_dimension)):
        if not 0 <= int(d) < rank:
            raise ValueError(f"{what} {int(d)} is out of range of input rank {rank}")
    if x.shape[split_dimension] % split_count:
        raise ValueError(f"input dimension {x.shape[split_dimension]} not divisible by split_count {split_count}")
    if tr.num_cores > 1:
        member = {r: (g, i) for g in groups for i, r in enumerate(g)}

        def contribution(t, v, rid):
            group, position = member[t]
            size = v.shape[split_dimension] // split_count
            index = [slice(None)] * rank
            index[split_dimension] = slice(position * size, (position + 1) * size)
            block = v[tuple(index)]
            zeros = _zeros_like(block)
            parts = [_select(rid == np.int32(src), block, zeros) for src in group]
            return concat(parts, int(concat_dimension))

        return _through_sum(x, n, contribution)
    (out,) = bind(
        AllToAllOp,
        [x],
        replica_groups=groups,
        split_dimension=int(split_dimension),
        concat_dimension=int(concat_dimension),
    )
    return out


def collective_permute(x: Any, source_target_pairs: Any, name: str | None = None) -> Any:
    """Send each source replica's ``x`` to its target replica
    (``tf.compat.v1.tpu.collective_permute``; StableHLO
    ``collective_permute``).

    Args:
      x: a numeric or bool tensor.
      source_target_pairs: ``[[source, target], ...]`` replica ids; no
        source and no target may appear twice.
      name: unused (TF's op name).

    Returns:
      A tensor like ``x``: on a target, its source's ``x``; on a replica that
      is no pair's target, zeros.  The gradient sends each target's
      cotangent back to its source (the inverse permutation; TF's
      ``_collective_permute_grad``).

    Raises:
      RuntimeError: called outside a replicated computation.
      ValueError: pairs not of shape ``[num_pairs, 2]``, an id out of
        ``[0, num_replicas)``, a source or target listed twice (XLA's
        messages), or a call inside an outside_compilation cluster.
    """
    del name
    tr = replicated_trace("collective_permute")
    n = tr.num_replicas
    pairs = _int_lists(source_target_pairs, "source_target_pairs")
    if any(len(p) != 2 for p in pairs):
        raise ValueError(f"source_target_pairs must have shape [num_pairs, 2], got {source_target_pairs!r}")
    for p in pairs:
        if min(p) < 0:
            raise ValueError(f"All values in source-target pair must be >= 0, got {p}")
        if max(p) >= n:
            raise ValueError(f"Source and target values in source-target pair must be < {n} (the replicas), got {p}")
    for i, what in ((0, "Source"), (1, "Target")):
        seen: set[int] = set()
        for p in pairs:
            if p[i] in seen:
                raise ValueError(f"{what} {p[i]} appears more than once in instruction's source-target pairs: {pairs}")
            seen.add(p[i])
    x = convert(x)
    if not pairs:
        # No pair: every replica is no pair's target and gets zeros.
        return _select(convert(np.bool_(False)), x, _zeros_like(x))
    if tr.num_cores > 1:
        source = {t: s for s, t in pairs}

        def contribution(t, v, rid):
            zeros = _zeros_like(v)
            return zeros if t not in source else _select(rid == np.int32(source[t]), v, zeros)

        return _through_sum(x, n, contribution)
    (out,) = bind(CollectivePermuteOp, [x], source_target_pairs=tuple(tuple(p) for p in pairs))
    return out


def all_gather(x: Any, axis: int, num_replicas: int) -> Any:
    """Every replica's ``x`` concatenated along ``axis`` in replica order
    (one ``ccl.all_gather`` over all replicas); the strategy's
    ``ReplicaContext.all_gather`` for one core per replica."""
    (out,) = bind(AllGatherOp, [convert(x)], replica_groups=[list(range(num_replicas))], all_gather_dim=int(axis))
    return out


__all__ = ["all_to_all", "collective_permute"]
