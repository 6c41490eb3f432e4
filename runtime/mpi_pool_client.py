"""Rank 0's side of the local pool (runtime/mpi_pool.py): starting the
worker processes and sending them commands.

:mod:`xtpu.runtime.mpi` starts a pool from here when asked for more
processes than ``mpiexec`` gave; the workers' loop is in
:mod:`xtpu.runtime.mpi_pool`, which reads the commands sent from here.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
from typing import Any

__all__ = ["spawn", "Pool"]

_TAG_COMMAND = 11
_TAG_BUFFER = 12
_COMPILE, _RUN, _DROP, _EXIT = "compile", "run", "drop", "exit"
#: How often an idle worker checks that rank 0's process is alive (seconds).
_PARENT_POLL = 0.5


def spawn(MPI, num_processes: int):
    """Start ``num_processes - 1`` workers (``python -m
    xtpu.runtime.mpi_pool``) through mpi4py's ``MPI``; returns the merged
    communicator (this process is rank 0) and the workers' process ids.

    Raises:
        ValueError: ``num_processes`` < 2, or this process already is one
            rank of several (started by ``mpiexec``).
    """
    if num_processes < 2:
        raise ValueError(f"a local pool needs num_processes >= 2, got {num_processes}")
    if MPI.COMM_WORLD.Get_size() > 1:
        raise ValueError(
            f"this process is rank {MPI.COMM_WORLD.Get_rank()} of {MPI.COMM_WORLD.Get_size()} started by "
            "mpiexec: it cannot also start a local pool (drop num_processes / XTPU_NUM_PROCESSES)"
        )
    inter = MPI.COMM_SELF.Spawn(
        sys.executable, args=["-m", "xtpu.runtime.mpi_pool", str(os.getpid())], maxprocs=num_processes - 1
    )
    comm = inter.Merge(high=False)
    inter.Free()
    return comm, comm.gather(os.getpid(), root=0)[1:]


class Pool:
    """Rank 0's side of the local pool: sends commands to the workers.

    Commands are sent without waiting (``MPI_Isend``) and arrive in order;
    their buffers are kept until sent.
    """

    def __init__(self, world: Any, worker_pids: list[int]) -> None:
        """``world``: the initialized :class:`xtpu.runtime.mpi.World` (rank 0)."""
        self.world = world
        #: The workers' process ids, rank 1 first.
        self.worker_pids = list(worker_pids)
        self._next = 0
        self._lock = threading.Lock()
        self._pending: list[tuple[bytes, list]] = []
        #: Programs whose executables were collected, told to the workers
        #: with the next message (:meth:`drop`).
        self._dropped: list[int] = []
        self.closed = False

    def _send(self, msg: tuple | None, per_worker=None) -> None:
        """Send ``msg`` to every worker, or ``per_worker(rank)`` to each.

        Arrays travel out of band (pickle protocol 5): a first message
        holds the pickle and the arrays' sizes, then one message per array
        straight from its memory, received straight into the worker's."""
        w = self.world
        with self._lock:
            if self.closed:
                raise RuntimeError("the local pool was closed")
            self._pending = [(d, rs) for d, rs in self._pending if not w.MPI.Request.Testall(rs)]
            while self._dropped:  # list.pop: a finalizer may append meanwhile
                self._isend(_pack((_DROP, self._dropped.pop(0))), None)
            self._isend(None if msg is None else _pack(msg), per_worker)

    def _isend(self, packed: Any, per_worker: Any) -> None:
        """Start sending ``packed`` (or ``per_worker(rank)``) to every worker (lock held)."""
        w = self.world
        for p in range(1, w.size):
            head, raws = packed if packed is not None else _pack(per_worker(p))
            reqs = [w.pool_comm.Isend([head, w.MPI.BYTE], dest=p, tag=_TAG_COMMAND)]
            reqs += [w.pool_comm.Isend([r, w.MPI.BYTE], dest=p, tag=_TAG_BUFFER) for r in raws]
            self._pending.append(((head, raws), reqs))

    def ship(self, text: str, timeout: float) -> int:
        """Send a program (its lowered module's IR text) to every worker,
        which compiles it into an executable; returns its id."""
        with self._lock:
            self._next += 1
            pid = self._next
        self._send((_COMPILE, pid, text, timeout))
        return pid

    def run(self, pid: int, args: list, ranks: list | None = None) -> None:
        """Start a run of program ``pid`` on every worker with ``@main``'s
        flat arguments, returning outputs as rank 0's ``outputs`` setting
        says. With ``ranks`` (per argument, the ranks that use it, None for
        all), a worker gets None for the arguments it does not use."""
        outputs = self.world.outputs
        if ranks is None:
            self._send((_RUN, pid, args, outputs))
            return
        self._send(
            None, lambda p: (_RUN, pid, [a if r is None or p in r else None for a, r in zip(args, ranks)], outputs)
        )

    def drop(self, pid: int) -> None:
        """Forget program ``pid`` on the workers (its executable was
        collected), with the next message sent: this runs from a finalizer,
        which the collector may call in the middle of a send (an allocation
        while :meth:`_send` holds its lock, which sending now would wait for
        forever)."""
        if not self.closed:
            self._dropped.append(pid)

    def close(self, timeout: float = 10.0) -> None:
        """Tell the workers to exit and disconnect from them (at exit)."""
        if self.closed:
            return
        try:
            self._send((_EXIT,))
        except Exception:  # noqa: BLE001
            return
        self.closed = True
        w = self.world
        deadline = time.monotonic() + timeout
        reqs = [r for _, rs in self._pending for r in rs]
        while not w.MPI.Request.Testall(reqs):
            if time.monotonic() > deadline:
                return
            time.sleep(1e-3)


def _pack(msg: tuple) -> tuple[bytes, list]:
    """``msg`` as a command (its pickle, with the sizes of its out-of-band
    buffers) and the buffers themselves."""
    bufs: list[pickle.PickleBuffer] = []
    head = pickle.dumps(msg, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    return pickle.dumps((head, [r.nbytes for r in raws]), protocol=5), raws
