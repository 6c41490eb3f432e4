"""The local pool: a plain ``python script.py`` whose replicas run on ``P``
processes of this machine instead of ``P`` threads of one.

``xtpu.distributed.initialize(num_processes=P)`` (or ``XTPU_BACKEND=mpi``
with ``XTPU_NUM_PROCESSES=P``) in a process that ``mpiexec`` did not start
spawns ``P - 1`` worker processes (``MPI_Comm_spawn``, MPICH's process
manager) and merges them with this one into one communicator of ``P`` ranks;
this process is rank 0. Only rank 0 runs the script: it traces and compiles
as usual, and every compiled program travels to the workers as IR text
(nothing user-defined is pickled; the inputs travel as numpy arrays). Each
rank then runs its share of the replicas exactly as under ``mpiexec``
(runtime/mpi.py: same placement, same collectives, same bits), and the
workers send their replicas' outputs to rank 0 only.

Lifetime: the workers end when rank 0 exits (``atexit``), and on their own
when rank 0's process is gone (they poll its pid), so none outlives the
script. A program's copy on the workers is dropped when rank 0's executable
is collected.

Failures are the MPI backend's: a run failing on a worker raises on rank 0
as :class:`~xtpu.runtime.mpi.RemoteRankError` naming the rank, replica and
op; a worker that dies or never answers makes rank 0 raise
:class:`~xtpu.runtime.errors.RuntimeTimeoutError` after the runtime timeout.
As under ``mpiexec``, a failed run ends the pool's usefulness: later runs of
that program raise.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time

from . import mpi as _mpi

__all__ = ["spawn", "Pool", "worker_main"]

_TAG_COMMAND = 11
_TAG_BUFFER = 12
_COMPILE, _RUN, _DROP, _EXIT = "compile", "run", "drop", "exit"
#: How often an idle worker checks that rank 0's process is alive (seconds).
_PARENT_POLL = 0.5


def spawn(num_processes: int):
    """Start ``num_processes - 1`` workers; returns the merged communicator
    (this process is rank 0) and the workers' process ids.

    Raises:
        ValueError: ``num_processes`` < 2, or this process already is one
            rank of several (started by ``mpiexec``).
        ImportError: mpi4py / an MPI library is missing.
    """
    MPI = _mpi.import_mpi()
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

    def __init__(self, world: _mpi.World, worker_pids: list[int]) -> None:
        self.world = world
        #: The workers' process ids, rank 1 first.
        self.worker_pids = list(worker_pids)
        self._next = 0
        self._lock = threading.Lock()
        self._pending: list[tuple[bytes, list]] = []
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
            packed = None if msg is None else _pack(msg)
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
        """Forget program ``pid`` on the workers (its executable was collected)."""
        if not self.closed:
            try:
                self._send((_DROP, pid))
            except Exception:  # noqa: BLE001 - at exit MPI may be gone already
                pass

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


def _parent_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _next_command(world: _mpi.World, parent_pid: int) -> tuple:
    """Wait for rank 0's next command, polling; exit the process when rank
    0's process is gone."""
    MPI = world.MPI
    status = MPI.Status()
    pause = _mpi._Pause()
    check_at = time.monotonic() + _PARENT_POLL
    while not world.pool_comm.Iprobe(source=0, tag=_TAG_COMMAND, status=status):
        if time.monotonic() > check_at:
            if not _parent_alive(parent_pid):
                os._exit(1)
            check_at = time.monotonic() + _PARENT_POLL
        pause()
    buf = bytearray(status.Get_count(MPI.BYTE))
    world.pool_comm.Recv([buf, MPI.BYTE], source=0, tag=_TAG_COMMAND)
    head, sizes = pickle.loads(buf)
    buffers = []
    for n in sizes:  # sent right after the command: already on their way
        b = bytearray(n)
        world.pool_comm.Recv([b, MPI.BYTE], source=0, tag=_TAG_BUFFER)
        buffers.append(b)
    return pickle.loads(head, buffers=buffers)


def _pack(msg: tuple) -> tuple[bytes, list]:
    """``msg`` as a command (its pickle, with the sizes of its out-of-band
    buffers) and the buffers themselves."""
    bufs: list[pickle.PickleBuffer] = []
    head = pickle.dumps(msg, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    return pickle.dumps((head, [r.nbytes for r in raws]), protocol=5), raws


def serve(world: _mpi.World, parent_pid: int) -> None:
    """A worker's loop: compile the programs rank 0 ships, run them when it
    says so (errors reach rank 0 through the error channel), until exit."""
    from xtpu.pipeline import parse_module
    from xtpu.runtime.executor import Executable

    programs: dict[int, Executable] = {}
    while True:
        cmd = _next_command(world, parent_pid)
        kind = cmd[0]
        if kind == _EXIT:
            return
        if kind == _COMPILE:
            _, pid, text, timeout = cmd
            try:
                programs[pid] = Executable(parse_module(text, f"<program {pid} from rank 0>"), timeout=timeout)
            except BaseException as exc:  # noqa: BLE001 - rank 0 gets it
                world.failed(exc)
        elif kind == _RUN:
            _, pid, args, world.outputs = cmd
            exe = programs.get(pid)
            if exe is None:
                continue  # its compile failed and was reported
            try:
                exe.run(exe.placeholders(args))
            except BaseException as exc:  # noqa: BLE001 - rank 0 gets it (reported once)
                world.failed(exc)
        elif kind == _DROP:
            exe = programs.pop(cmd[1], None)
            if exe is not None:
                exe.close()


def worker_main(argv: list[str]) -> None:
    """Entry point of a spawned worker: ``python -m xtpu.runtime.mpi_pool PARENT_PID``."""
    from mpi4py import MPI

    parent = MPI.Comm.Get_parent()
    comm = parent.Merge(high=True)
    parent.Free()
    comm.gather(os.getpid(), root=0)
    os.environ.pop("XTPU_NUM_PROCESSES", None)  # a worker never starts a pool itself
    world = _mpi.initialize(comm=comm, pool=True, abort_on_error=False)
    serve(world, int(argv[0]))
    comm.Free()


if __name__ == "__main__":
    worker_main(sys.argv[1:])
