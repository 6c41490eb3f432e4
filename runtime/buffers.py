"""Buffer planning: each value of a block that an op can write into a given
array gets a buffer by liveness, once per plan, and the buffers are kept
from call to call.

XLA's buffer assignment in numpy's terms.  :func:`assign` walks a block's
ops in order; a value gets a slot when its op has an ``out_kernel``
(``PrimitiveOp.out_kernel``: the op's kernel writing into a given array,
with the same bits) and it is big enough to matter; a slot is freed when
every value that may share its memory is dead, so a later value of the same
shape and dtype reuses it.  What never gets a slot:

* values the block gives back (its terminator's operands) and everything
  they may be views of: the caller owns them (outputs are fresh arrays);
* values an op reads that keeps them past its own return: a collective
  (other participants read the operand after this one returned), a host
  transfer, any op without a pure kernel (``escapes``);
* values of ops whose kernel may return a view of an operand: those keep
  their operands alive as long as themselves (and an escaping view makes
  its operand escape).

With ``donate``, an op that may write over an operand it reads for the
last time (``OUT_IN_PLACE``) and whose result the block gives back writes
that result into the operand's array (:attr:`Slots.into_operand`) when the
operand is an array the block made (its op has an ``out_kernel``: a fresh
array or a buffer) of the result's shape and dtype, read by nothing later:
the operand is then given back in its place (a recycled slot, or a fresh
array).  A gather that zeroes its out-of-range rows with a select thus
writes the caller's output once (XLA fuses the select into the gather).

A steady-state call then allocates only its outputs, the results of ops
without an ``out_kernel`` and what collectives return: no page faults for
the step's intermediates, whatever malloc does with freed memory.
:class:`Buffers` holds one set of arrays for one worker (a replica's
kernels); :meth:`Buffers.renew` replaces them after a failed run (a worker
abandoned mid-kernel may still write into the old ones).
"""

from __future__ import annotations

import math
import mmap
import sys
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

__all__ = ["MIN_BYTES", "RECYCLED_ARRAYS", "Buffers", "Slots", "assign", "kept_array", "recycled"]

#: Values this small are left to their kernels and malloc (its bins reuse
#: them without faults; numpy's scalar arithmetic is faster than ``out=``
#: into a 0-d array: a chain of 1,000 scalar adds ran at 0.98 us an op
#: planned, 0.42 us not).
MIN_BYTES = 1 << 16

Key = tuple[tuple[int, ...], Any]


class Slots:
    """The result of :func:`assign`: ``slot_of[value]`` is its buffer,
    ``keys[slot]`` that buffer's ``(shape, dtype)``."""

    def __init__(self) -> None:
        self.slot_of: dict[Hashable, int] = {}
        self.keys: list[Key] = []
        #: Slots of values the block gives away (recycled, :class:`Buffers`).
        self.recycled: set[int] = set()
        #: A result its op writes into the array of its operand at this
        #: position (``donate``; module doc).
        self.into_operand: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self.keys)


def assign(
    steps: Sequence[tuple[Sequence[Hashable], Sequence[Hashable], Sequence[Key | None], bool, bool]],
    escaping: set[Hashable],
    min_bytes: int | None = None,
    recycle: bool = False,
    donate: bool = False,
) -> Slots:
    """Slots for the values of ``steps``, one per op in order:
    ``(operands, results, keys, writes, in_place)``, where ``keys[k]`` is
    result ``k``'s ``(shape, numpy dtype)`` when it may get a slot (None:
    never), ``writes`` says the op writes its results into given arrays (an
    ``out_kernel``; otherwise its results may be views of its operands) and
    ``in_place`` that it may write over an operand it reads for the last
    time.  ``escaping``: values read past the block (module doc); with
    ``recycle`` each escaping result an op writes gets a slot of its own in
    :attr:`Slots.recycled` (module doc); with ``donate`` an in-place op
    giving its result back may write it over an operand
    (:attr:`Slots.into_operand`, module doc).  Values of ``min_bytes`` or
    fewer (default :data:`MIN_BYTES`) get none."""
    if min_bytes is None:
        min_bytes = MIN_BYTES
    INF = len(steps) + 1
    last: dict[Hashable, int] = {v: INF for v in escaping}
    for i in range(len(steps) - 1, -1, -1):
        operands, results, _, writes, _ = steps[i]
        alive = max((last.get(r, i) for r in results), default=i)
        for a in operands:
            end = i if writes else max(i, alive)  # a view lives as long as its result
            if last.get(a, -1) < end:
                last[a] = end
    dying: dict[int, list[Hashable]] = {}
    for v, i in last.items():
        if i < INF:
            dying.setdefault(i, []).append(v)
    out = Slots()

    def big(key: Key) -> bool:
        shape, dtype = key
        return math.prod(shape) * np.dtype(dtype).itemsize > min_bytes

    given = {v for v, i in last.items() if i >= INF} | set(escaping)
    if donate:
        # Backwards, so that a chain of in-place ops passes the caller's array up.
        made = {r: key for _, results, keys, writes, _ in steps if writes for r, key in zip(results, keys)}
        for i in range(len(steps) - 1, -1, -1):
            operands, results, keys, writes, in_place = steps[i]
            if not (writes and in_place and len(results) == 1) or results[0] not in given:
                continue
            key = keys[0]
            if key is None or not big(key):
                continue
            for k, a in enumerate(operands):
                if made.get(a) == key and last.get(a) == i and a not in given and operands.count(a) == 1:
                    out.into_operand[results[0]] = k
                    given.add(a)
                    break
    free: dict[Key, list[int]] = {}

    def release(v: Hashable) -> None:
        s = out.slot_of.get(v)
        if s is not None and v not in released and s not in out.recycled:
            released.add(v)
            free.setdefault(out.keys[s], []).append(s)

    released: set[Hashable] = set()
    for i, (_, results, keys, writes, in_place) in enumerate(steps):
        if in_place:
            for v in dying.get(i, ()):
                release(v)
        if writes:
            for r, key in zip(results, keys):
                if key is None or not big(key) or r in out.into_operand:
                    continue
                if r in given:
                    if recycle:
                        out.slot_of[r] = len(out.keys)
                        out.recycled.add(len(out.keys))
                        out.keys.append(key)
                    continue
                pool = free.get(key)
                if pool:
                    s = pool.pop()
                else:
                    s = len(out.keys)
                    out.keys.append(key)
                out.slot_of[r] = s
        if not in_place:
            for v in dying.get(i, ()):
                release(v)
        for r in results:  # a result nobody reads dies at once
            if r not in last:
                release(r)
    return out


#: Kept arrays this big get transparent huge pages where the kernel gives
#: them on request (numpy asks the same for its own arrays of 4 MB or more).
HUGE_PAGE_BYTES = 1 << 22


def kept_array(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A new, uninitialised array of ``shape`` and ``dtype`` for a buffer
    kept from call to call (:class:`Buffers`, recycled outputs, fused
    kernels' scratch): of :data:`MIN_BYTES` or more, in an anonymous
    mapping of its own rather than malloc's heap.

    ``np.empty`` takes arrays under 16 MB from malloc's heap
    (runtime/heap.py), and a worker thread's heap is a glibc arena of at
    most 64 MB.  Kept buffers made on a worker filled its arena, and the
    step's short-lived arrays (results of ops without an ``out_kernel``,
    collectives' results) then went to a second heap that glibc made and
    unmapped again every step: the 8-replica transformer block step of
    ``benchmarks/transformer_block.py`` took 3,100-6,900 page faults a step
    in about half of its processes (the other half 2-3).  With the kept
    arrays in mappings of their own, 2-3 in every process.  Page aligned;
    huge pages requested from :data:`HUGE_PAGE_BYTES` as numpy does.
    Raises MemoryError (numpy's message) when the mapping cannot be made."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if n < MIN_BYTES:
        return np.empty(shape, dt)
    try:
        m = mmap.mmap(-1, n)
    except OSError as e:  # ENOMEM: numpy's own error for an array that does not fit
        raise MemoryError(
            f"Unable to allocate {n / 2**20:.1f} MiB for an array with shape {tuple(shape)} and data type {dt}"
        ) from e
    if n >= HUGE_PAGE_BYTES and hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    # The array itself (not a reshaped view of a 1-d one) has the mapping
    # as its base, so views of it keep *it* as their base, as they do for an
    # array owning its memory: recycled() counts them as its references.
    return np.ndarray(shape, dt, buffer=m)


class _Unmade:
    """:attr:`Buffers.arrays` before the first call: reading a replica's
    row makes them all (:meth:`Buffers.renew` replaces this with the list,
    so a later call reads the list itself)."""

    __slots__ = ("_buffers",)

    def __init__(self, buffers: Buffers) -> None:
        self._buffers = buffers

    def __getitem__(self, j: int) -> list[Any]:
        b = self._buffers
        if b.arrays is self:
            b.renew()
        return b.arrays[j]


class Buffers:
    """One worker's arrays for the slots of a plan, kept from call to call.

    A worker running ``replicas`` replicas one after another (the
    sequential mode, runtime/sequential.py) has one set of arrays per
    replica for the first ``private`` slots (values that live across
    segments) and one set shared by its replicas for the others (values
    that die in the segment that made them: replica ``j + 1`` runs that
    segment after replica ``j`` is done with them)."""

    def __init__(
        self, keys: Sequence[Key], replicas: int = 1, private: int | None = None, recycled: frozenset[int] = frozenset()
    ):
        self.keys = list(keys)
        self.replicas = replicas
        self.private = len(self.keys) if private is None else private
        self.recycled = recycled
        #: Per replica, per slot: its array (a recycled slot: its pool).
        #: Made at the first call that reads them (:class:`_Unmade`): a
        #: compile builds the first worker's kernels to check them, and
        #: need not map the step's memory.
        self.arrays: Any = _Unmade(self)

    def renew(self) -> None:
        """New arrays (the old ones stay with whoever still writes them:
        a worker a failed run left behind); the first ones are made here too."""
        shared = [kept_array(shape, dtype) for shape, dtype in self.keys[self.private :]]
        self.arrays = [
            [
                [] if s in self.recycled else kept_array(shape, dtype)
                for s, (shape, dtype) in enumerate(self.keys[: self.private])
            ]
            + shared
            for _ in range(self.replicas)
        ]

    def _take(self, j: int, s: int) -> np.ndarray:
        """Slot ``s`` of replica ``j``: its array, or for a recycled slot
        one of its arrays that nobody holds any more (the caller dropped
        the output, the collective returned), else a new one."""
        a = self.arrays[j][s]
        if s not in self.recycled:
            return a
        return recycled(a, *self.keys[s])

    def bind(
        self,
        j: int,
        out_kernel: Callable[..., Any],
        slots: Sequence[int | None],
        kernel: Callable[..., Any],
        many: bool = False,
    ) -> Callable[..., Any]:
        """Replica ``j``'s kernel taking the op's operands:
        ``out_kernel(out, *xs)`` into slot ``slots[0]``; with ``many``
        ``out_kernel(outs, *xs)`` with ``outs`` the arrays of ``slots``
        (None where a result has none).  ``kernel`` when no slot is set.
        The arrays are looked up at each call (:meth:`renew`)."""
        if all(s is None for s in slots):
            return kernel
        take = self._take
        if not many:
            (s,) = slots
            if s not in self.recycled:

                def into(*xs):
                    return out_kernel(self.arrays[j][s], *xs)

                return into

            def into_recycled(*xs):
                return out_kernel(take(j, s), *xs)

            return into_recycled

        def into_many(*xs):
            return out_kernel(tuple(None if s is None else take(j, s) for s in slots), *xs)

        return into_many


#: Arrays a recycled slot keeps: the caller may hold the outputs of the
#: last call or two while the next one runs (a training loop feeding its
#: weights back holds one).
RECYCLED_ARRAYS = 3


def _refcounts(pool: list) -> list[int]:
    return [sys.getrefcount(pool[k]) for k in range(len(pool))]


#: What :func:`_refcounts` reads for an array only its pool holds.
_FREE = _refcounts([np.empty(0)])[0]


def recycled(pool: list, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An array of ``pool`` (arrays of ``shape`` and ``dtype``) that nothing
    but the pool holds any more (the caller dropped it), else a new one,
    kept in the pool while it holds fewer than :data:`RECYCLED_ARRAYS`."""
    for k, busy in enumerate(_refcounts(pool)):
        if busy <= _FREE:
            return pool[k]
    if len(pool) >= RECYCLED_ARRAYS:
        return np.empty(shape, dtype)  # the caller's, not kept
    new = kept_array(shape, dtype)
    pool.append(new)
    return new
