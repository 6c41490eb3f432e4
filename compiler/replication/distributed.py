"""``xtpu.distributed``: run a replicated program on several processes (MPI ranks).

The multi-controller model of ``jax.distributed``: start ``P`` copies of the
same script with ``mpiexec -n P python script.py`` (or
``python -m xtpu.launch -n P script.py``), call :func:`initialize` in each
before the first replicated call (or set ``XTPU_BACKEND=mpi``), and every
rank traces, compiles and calls the same programs with the same inputs, in
the same order, one replicated call at a time. A
program of ``R`` replicas (``R`` a multiple of ``P``) runs replicas
``i * R/P .. (i+1) * R/P - 1`` on rank ``i`` (TF's default device assignment
over ``P`` tasks: :func:`replica_owner`; other ``R`` as evenly as it gives), with threads inside a rank;
outside-compilation clusters run on the rank of their replica, so
summaries (written by replica 0) come from rank 0 and prints from each
replica's rank. Collectives between ranks go through MPI and give the same
bits as the threads backend. By default every rank gets every replica's
outputs (TF's contract); ``initialize(outputs="local")`` skips that
exchange and returns None for other ranks' replicas.

Needs ``pip install 'xtpu[mpi]'`` (mpi4py and the MPICH wheel, which also
installs ``mpiexec``).
"""

from __future__ import annotations

from xtpu.runtime import mpi as _mpi
from xtpu.runtime.mpi import RemoteRankError, replica_owner

__all__ = [
    "initialize",
    "is_initialized",
    "process_index",
    "process_count",
    "local_replicas",
    "replica_owner",
    "RemoteRankError",
]


def initialize(outputs: str | None = None, comm=None, num_processes: int | None = None) -> None:
    """Use several processes (MPI ranks) for replicated programs compiled from now on.

    Under ``mpiexec -n P`` every rank runs the script (JAX's multi-controller
    model). In a plain ``python script.py``, ``num_processes=P`` (or
    ``XTPU_NUM_PROCESSES=P``) starts a local pool instead: ``P - 1`` worker
    processes that receive each compiled program as IR text and run their
    share of its replicas, while only this process (rank 0) runs the script.

    Idempotent; calling it again only changes ``outputs``.

    Args:
        outputs: ``"all"`` (default, or ``$XTPU_MPI_OUTPUTS``): every rank
            gets every replica's outputs; ``"local"``: only its own replicas'
            (the others are None), without the exchange.
        comm: an ``mpi4py`` communicator (default ``MPI.COMM_WORLD``).
        num_processes: the number of processes: under ``mpiexec`` it must be
            the job's size; otherwise more than 1 starts the local pool.

    Under ``mpiexec``, an uncaught exception on one rank then ends the job
    (``MPI_Abort``): ``mpiexec`` exits non-zero instead of the other ranks
    waiting. The local pool's workers end when this process exits.

    Raises:
        ImportError: mpi4py or an MPI library is missing (``pip install 'xtpu[mpi]'``).
        ValueError: ``outputs`` is neither ``"all"`` nor ``"local"``;
            ``num_processes`` is below 1 or differs from ``mpiexec``'s.
    """
    _mpi.initialize(comm=comm, outputs=outputs, num_processes=num_processes)


def is_initialized() -> bool:
    """True once :func:`initialize` ran (or ``XTPU_BACKEND=mpi`` started it)."""
    return _mpi.is_initialized()


def process_index() -> int:
    """This process's rank, 0 .. ``process_count() - 1`` (0 without MPI)."""
    w = _mpi.world()
    return 0 if w is None else w.rank


def process_count() -> int:
    """The number of ranks (processes) of the job (1 without MPI)."""
    w = _mpi.world()
    return 1 if w is None else w.size


def local_replicas(num_replicas: int) -> list[int]:
    """The replicas this process runs out of ``num_replicas``.

    With ``num_replicas`` a multiple of :func:`process_count` ``P``, rank
    ``i`` runs ``i * R/P .. (i+1) * R/P - 1``; see :func:`replica_owner`.
    """
    P, i = process_count(), process_index()
    return [r for r in range(num_replicas) if replica_owner(r, num_replicas, P) == i]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
