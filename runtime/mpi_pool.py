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
import time

from xtpu.dialects.ir_text import parse_module

from . import mpi as _mpi
from .executor import Executable
from .mpi_pool_client import _COMPILE, _DROP, _EXIT, _PARENT_POLL, _RUN, _TAG_BUFFER, _TAG_COMMAND, Pool, spawn

__all__ = ["spawn", "Pool", "worker_main"]


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


def serve(world: _mpi.World, parent_pid: int) -> None:
    """A worker's loop: compile the programs rank 0 ships, run them when it
    says so (errors reach rank 0 through the error channel), until exit."""

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
