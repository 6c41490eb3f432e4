"""Bytes moved per logical core: the cost model of the SPMD passes.

One number rates a partitioned program and a choice between reshardings:
the bytes that one participant (a ``(replica, logical core)`` pair)
*receives from other participants*, summed over the collectives it takes
part in, and the largest of these over the participants.  Per collective,
for an operand of ``b`` bytes on each participant and a group of ``g``:

* ``ccl.all_gather``: ``(g - 1) * b`` (every other member's block);
* ``ccl.all_to_all``: ``(g - 1) / g * b`` (all blocks but its own);
* ``ccl.reduce_scatter``: ``(g - 1) / g * b`` (a ring reduce-scatter: the
  other members' contributions to its block);
* ``ccl.all_reduce``: ``2 (g - 1) / g * b`` (a ring reduce-scatter, then an
  all-gather);
* ``ccl.collective_permute``: ``b`` for a target whose source is another
  participant, ``0`` for a target that is its own source and for a
  participant that is no target.

These are the bandwidth terms of the usual ring algorithms, the measure of
the GSPMD paper (Xu et al., 2021, section 3.2: "communication ... in bytes
per device") and of XLA's ``spmd_partitioner`` cost comparisons.  A
collective inside an ``hlo.while`` body counts once (per written op, not
per trip).

:func:`reshard_bytes` estimates, from shardings alone, what
``tpu-spmd-partition``'s reshard from one layout to another moves;
``tpu-propagate-sharding`` and the partitioner use it to choose among
reshardings (docs in their module docstrings, beside the conflict rule).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from xdsl.ir import Operation

from xtpu.dialects import ccl
from xtpu.dialects.sharding import Sharding
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype

__all__ = [
    "CollectiveCost",
    "all_reduce_bytes",
    "bytes_per_core",
    "collective_costs",
    "received_bytes",
    "reshard_bytes",
]


def _nbytes(spec: TensorSpec) -> int:
    return math.prod(spec.shape) * numpy_dtype(spec.dtype).itemsize


def all_reduce_bytes(nbytes: float, g: int) -> float:
    """Bytes per core of a ``ccl.all_reduce`` of ``nbytes`` over ``g``
    participants: ``2 (g - 1) / g * nbytes``.  ``tpu-spmd-partition``
    weighs it against :func:`reshard_bytes` where a result may be summed
    from partial ones instead of resharding an operand: a dot over a split
    contracting dim, a reduce over a split dim, and a gather from a table
    split along its rows (each core gathers from its rows and the result
    tiles are all-reduced, against an all-gather of the table: for a
    ``[V, D]`` table over ``g`` cores and ``n`` ids, ``2 (g - 1) / g * n D``
    elements against ``(g - 1) V D / g``)."""
    return 2 * (g - 1) / g * nbytes if g > 1 else 0.0


def received_bytes(op: Operation) -> dict[int, float]:
    """Bytes each participant of the ``ccl`` op ``op`` receives from other
    participants (see the module docstring); participants that receive
    nothing are left out.

    Raises:
      TypeError: ``op`` is not a ``ccl`` collective.
    """
    if not isinstance(op, ccl.CollectiveOp | ccl.CollectivePermuteOp):
        raise TypeError(f"'{op.name}' is not a ccl collective")
    b = _nbytes(TensorSpec.of_type(op.operands[0].type))
    p = op.params()
    out: dict[int, float] = {}
    if isinstance(op, ccl.CollectivePermuteOp):
        for s, t in p["source_target_pairs"]:
            if s != t:
                out[int(t)] = float(b)
        return out
    for group in p["replica_groups"]:
        g = len(group)
        if isinstance(op, ccl.AllGatherOp):
            each = (g - 1) * b
        elif isinstance(op, ccl.AllReduceOp):
            each = 2 * (g - 1) / g * b
        else:  # all_to_all, reduce_scatter
            each = (g - 1) / g * b
        for x in group:
            if each:
                out[int(x)] = float(each)
    return out


@dataclass(frozen=True)
class CollectiveCost:
    """One collective of a partitioned program: its StableHLO kind
    (``all_gather`` ...), its groups (or source-target pairs), operand and
    result shapes, and the most bytes a participant receives from it."""

    kind: str
    groups: tuple[tuple[int, ...], ...]
    operand: tuple[int, ...]
    result: tuple[int, ...]
    bytes: float


def _collectives(root: Operation) -> Iterable[Operation]:
    for op in root.walk():
        if isinstance(op, ccl.CollectiveOp | ccl.CollectivePermuteOp):
            yield op


def collective_costs(root: Operation) -> list[CollectiveCost]:
    """The collectives under ``root`` (a module, a replicate) in program
    order, with what each moves."""
    out = []
    for op in _collectives(root):
        p = op.params()
        ids = p["source_target_pairs"] if isinstance(op, ccl.CollectivePermuteOp) else p["replica_groups"]
        got = received_bytes(op)
        out.append(
            CollectiveCost(
                kind=op.name.removeprefix("ccl."),
                groups=tuple(tuple(int(x) for x in g) for g in ids),
                operand=TensorSpec.of_type(op.operands[0].type).shape,
                result=TensorSpec.of_type(op.results[0].type).shape,
                bytes=max(got.values(), default=0.0),
            )
        )
    return out


def bytes_per_core(root: Operation) -> float:
    """The most bytes one participant receives from the others over all the
    collectives under ``root`` (a module, a replicate): the figure of merit
    of a partitioned program."""
    total: dict[int, float] = defaultdict(float)
    for op in _collectives(root):
        for x, b in received_bytes(op).items():
            total[x] += b
    return max(total.values(), default=0.0)


# --------------------------------------------------------------------------
# Estimates from shardings (the choice among reshardings)
# --------------------------------------------------------------------------


def _counts(s: Sharding, rank: int) -> tuple[int, ...]:
    return tuple(s.tile_shape) if s.is_tiled else (1,) * rank


def reshard_bytes(have: Sharding | None, want: Sharding | None, shape: Sequence[int], itemsize: int) -> float:
    """Bytes per core that ``tpu-spmd-partition`` moves to lay a value of
    global ``shape`` (``itemsize`` bytes an element) out as ``want`` when it
    is laid out as ``have`` (``None``: not decided yet, free).

    Its rules, in the partitioner's order: the same layout, whole -> tiled and
    tiled -> a refinement of it cost nothing (a local slice); one tiled
    dimension moved to another is an ``all_to_all``, ``(k - 1) / k`` of the
    local tile; the same tile grid over other cores a ``collective_permute``
    of one tile; otherwise each tiled dimension of ``have`` that ``want`` does
    not refine is all-gathered, ``(k - 1)`` times the tile at that point.
    """
    if have is None or want is None or have == want:
        return 0.0
    rank = len(shape)
    if not have.is_tiled:
        return 0.0
    hc = _counts(have, rank)
    wc = _counts(want, rank)
    tile = math.prod(shape) * itemsize / math.prod(hc)
    diff = [d for d in range(rank) if hc[d] != wc[d]]
    if (
        len(diff) == 2
        and want.is_tiled
        and have.replication == want.replication
        and sorted((hc[diff[0]], hc[diff[1]])) == sorted((wc[diff[0]], wc[diff[1]]))
        and 1 in (hc[diff[0]], hc[diff[1]])
    ):
        k = max(hc[diff[0]], hc[diff[1]])
        return (k - 1) / k * tile
    if hc == wc:
        devices = range(have.num_devices)
        same = want.is_tiled and all(have.tile_for_device(c) == want.tile_for_device(c) for c in devices)
        return 0.0 if same else tile
    cost = 0.0
    for d in range(rank):
        if hc[d] > 1 and (wc[d] % hc[d] != 0):
            cost += (hc[d] - 1) * tile
            tile *= hc[d]
    return cost
