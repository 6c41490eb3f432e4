"""The core budget: how many BLAS threads a replicated run gives each replica.

The threads backend runs the replicas (and their logical cores) of a step
as threads of one process, and numpy's BLAS (OpenBLAS, MKL, ...) starts its
own threads inside each matmul. BLAS's thread count is one setting for the
whole process (threadpoolctl), so while ``k`` device workers run at once it
is set to ``max(1, budget // k)``, ``budget`` being the cores xtpu may use:
one replica alone uses every core, 2 replicas on 16 cores 8 threads each,
as many replicas as cores (or more) one thread each. More threads than
cores ran 2x slower (8 replicas x 2 BLAS threads on 2 cores).

``budget`` is, in order: :func:`set_intra_op_parallelism_threads` (TF's
``tf.config.threading`` name; 0 = let xtpu choose), ``$XTPU_INTRA_OP_THREADS``,
else the cores this process may run on (``os.sched_getaffinity``). When it
is not set explicitly, a run of one device worker leaves BLAS as it is.
Under MPI each rank has its own budget (set ``XTPU_INTRA_OP_THREADS`` per
rank, e.g. cores / ranks per machine).

A program with large matmuls (``limit(workers, split=True)``: the executor
asks for it when a ``dot_general`` has at least
:data:`xtpu.dialects.intra_op.MIN_WORK` multiply-adds) holds BLAS at one
thread instead and gives its worker's threads to xtpu's own split of each
large matmul (:mod:`xtpu.dialects.intra_op`): OpenBLAS's threads wait for
each other spinning, so with another process on one of 2 cores a matmul on
2 OpenBLAS threads ran 2-3x slower than on 1, where the two halves of it on
2 threads of a pool that blocks ran no slower than on 1.  With one worker
and no budget set, the threads of the split are BLAS's count as found
(``OPENBLAS_NUM_THREADS=1`` means no split).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from xtpu.dialects import intra_op as _split
from xtpu.runtime.thread_settings import intra_op

__all__ = [
    "set_intra_op_parallelism_threads",
    "get_intra_op_parallelism_threads",
    "cores",
    "budget",
    "threads_per_worker",
    "limit",
    "NO_LIMIT",
]


def set_intra_op_parallelism_threads(num_threads: int) -> None:
    """Cores (BLAS threads in all) a replicated run may use; 0 resets to
    xtpu's choice (``$XTPU_INTRA_OP_THREADS``, else every core).

    Raises:
        ValueError: ``num_threads`` is negative or not an integer.
    """
    intra_op.set(num_threads)


def get_intra_op_parallelism_threads() -> int:
    """What :func:`set_intra_op_parallelism_threads` set (0: xtpu chooses)."""
    return intra_op.explicit


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def budget() -> int:
    """The cores xtpu may use: :func:`set_intra_op_parallelism_threads`,
    else ``$XTPU_INTRA_OP_THREADS``, else every core of the process."""
    return intra_op.value() or cores()


def threads_per_worker(workers: int) -> int | None:
    """BLAS threads while ``workers`` device workers run at once; None:
    leave BLAS as it is (one worker, no budget set)."""
    if workers <= 1 and not intra_op.value():
        return None
    return max(1, budget() // max(1, workers))


_lock = threading.Lock()
_users = 0
_blas: list | None = None  # threadpoolctl's controllers of the BLAS libraries loaded
_restore: list[tuple[Any, int]] = []  # (controller, its count before the first user)


def _blas_controllers() -> list:
    """threadpoolctl's controller of each BLAS library in the process,
    found once (threadpoolctl inspects every loaded library: ~1 ms)."""
    global _blas
    if _blas is None:
        from threadpoolctl import ThreadpoolController

        _blas = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
    return _blas


def _set_threads(c: Any, n: int) -> None:
    """Set BLAS library ``c`` to ``n`` threads from this thread.

    threadpoolctl (3.6 and later) lets one thread set OpenBLAS's count (the
    first to try) and silently ignores the others: the count a run set from
    one thread would then stay when the last run out, another thread,
    restores it.  xtpu's own :data:`_lock` orders its changes, so each one
    takes the control and gives it back."""
    clear = getattr(type(c), "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)
    c.set_num_threads(n)
    if clear is not None:
        clear()


class _Limit:
    """BLAS held at ``n`` threads while any run is inside. Counted: runs of
    several executables from several threads overlap; the first sets the
    limit, the last one out restores the counts it found (nested
    threadpoolctl limiters restored out of order would leave BLAS at the
    wrong count).  Each library's count is read and set directly through
    threadpoolctl's controller, and only set when it differs: a limiter
    object per run cost 12 us of an 8-replica step.

    With ``split``, BLAS is held at one thread and large matmuls are split
    over ``n`` threads (BLAS's count as found when ``n`` is None) by
    :mod:`xtpu.dialects.intra_op` instead."""

    __slots__ = ("n", "split")

    def __init__(self, n: int | None, split: bool = False) -> None:
        self.n = n
        self.split = split

    def __enter__(self) -> None:
        global _users
        n = self.n
        if n is None and not self.split:
            return
        with _lock:
            if _users == 0:
                found = []
                blas = 1 if self.split else n
                for c in _blas_controllers():
                    had = c.get_num_threads()
                    found.append(had)
                    if had != blas:
                        _set_threads(c, blas)
                        _restore.append((c, had))
                if self.split:
                    _split.set_parts(n if n is not None else min(max(found, default=1), cores()))
            _users += 1

    def __exit__(self, *exc: Any) -> None:
        global _users
        if self.n is None and not self.split:
            return
        with _lock:
            _users -= 1
            if _users == 0:
                _split.set_parts(1)
                while _restore:
                    c, had = _restore.pop()
                    _set_threads(c, had)


_LIMITS: dict = {}


#: The context of a run that calls no BLAS or LAPACK routine: it leaves
#: BLAS's count alone (setting it and back costs ~10 us a call).
NO_LIMIT = _Limit(None)


def limit(workers: int, split: bool = False) -> _Limit:
    """A context holding BLAS at :func:`threads_per_worker` threads, or
    (``split``) at one thread with large matmuls split over that many."""
    n = threads_per_worker(workers)
    lim = _LIMITS.get((n, split))
    if lim is None:
        lim = _LIMITS[n, split] = _Limit(n, split)
    return lim
