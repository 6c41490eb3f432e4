"""The multi-process runtime: xtpu's replicas spread over MPI ranks.

A job of ``P`` ranks started by ``mpiexec -n P python script.py`` (or
``python -m xtpu.launch -n P script.py``) runs, on every rank, the same script:
every rank traces and compiles the same program and calls it with the same
arguments (JAX's multi-controller SPMD model). A program of ``R`` replicas
(``R`` a multiple of ``P``) runs replicas ``rank * R/P .. (rank+1) * R/P - 1``
on rank ``rank`` (other ``R`` as evenly as :func:`replica_owner` spreads them), each replica's device program and host (outside
compilation) clusters on threads of that rank, the same placement as TF's
default device assignment on a topology of ``P`` tasks: replica ``r``'s host
device is ``/task:{r // (R/P)}/device:CPU:0`` (:func:`replica_owner`).

This module holds the process-wide state (:class:`World`): the rank, the
placement of replicas, the per-group sub-communicators used by
:class:`~xtpu.runtime.mpi_communicator.HybridCommunicator`, and the error
channel through which a failing rank stops every other rank at once.

Failures: a rank whose run fails sends its error to every other rank; a rank
waiting on a collective or on other ranks' outputs raises
:class:`RemoteRankError` with that message (the failing rank, replica, op).
A rank that never answers (dead, or stuck in host code) makes the others
raise :class:`~xtpu.runtime.errors.RuntimeTimeoutError` after the runtime
timeout (``XTPU_TIMEOUT``), naming the ranks that never sent. MPI cannot
cancel messages in flight, so after a failed run the job must end:
:func:`initialize` installs an exception hook that calls ``MPI_Abort`` on an
uncaught exception, so ``mpiexec`` exits non-zero and no rank hangs.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import pickle
import sys
import threading
import time
from collections.abc import Sequence
from time import monotonic
from typing import Any

from . import mpi_pool_client
from .errors import Aborted, RuntimeTimeoutError, XtpuRuntimeError
from .heap import keep_heap

__all__ = [
    "World",
    "RemoteRankError",
    "initialize",
    "world",
    "is_initialized",
    "backend_requested",
    "replica_owner",
    "import_mpi",
]

_TAG_ERROR = 1
_TAG_OUTPUTS = 2
_TAG_PROGRAM = 3
_ERROR_BYTES = 1 << 16


def import_mpi():
    """``mpi4py.MPI``, or ImportError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError(
            "xtpu's MPI backend needs mpi4py and an MPI library: `pip install 'xtpu[mpi]'` "
            "(mpi4py and the mpich wheel, which brings mpiexec), then run "
            "`mpiexec -n P python script.py`"
        ) from exc
    except RuntimeError as exc:  # mpi4py installed without a loadable libmpi
        raise ImportError(f"mpi4py cannot load an MPI library ({exc}); `pip install mpich` provides one") from exc
    return MPI


class RemoteRankError(XtpuRuntimeError):
    """Another rank's run failed; the message is that rank's error.

    Attributes:
        rank: the rank that failed first.
    """

    def __init__(self, message: str, rank: int | None = None, **context) -> None:
        super().__init__(message, **context)
        self.rank = rank


def replica_owner(replica: int, num_replicas: int, num_ranks: int) -> int:
    """The rank that runs ``replica``: ``replica * num_ranks // num_replicas``.

    With ``num_replicas`` a multiple of ``num_ranks`` this is
    ``replica // (num_replicas / num_ranks)``, the task of the replica's host
    device in TF's default device assignment over ``num_ranks`` tasks
    (``DeviceAssignment.host_device``): consecutive replicas fill one task
    before the next. Otherwise the replicas are spread as evenly as that
    formula gives (fewer replicas than ranks: some ranks run none and only
    receive the outputs).

    Raises:
        ValueError: ``replica`` is out of range.
    """
    if not 0 <= replica < num_replicas:
        raise ValueError(f"replica {replica} is out of range for {num_replicas} replicas")
    return replica * num_ranks // num_replicas


class World:
    """The MPI job as xtpu sees it (one per process; see :func:`world`).

    Attributes:
        rank, size: this process's rank and the number of ranks in ``comm``.
        outputs: ``"all"`` (default: every replica's outputs on every rank,
            TF's contract) or ``"local"`` (only this rank's replicas; the
            others are None).
        pool: the local pool (runtime/mpi_pool.py): only rank 0 runs the
            user's script; the other ranks run the programs it sends them
            and send their replicas' outputs to rank 0 only.
    """

    def __init__(self, comm=None, outputs: str = "all", pool: bool = False) -> None:
        MPI = import_mpi()
        self.MPI = MPI
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise RuntimeError(
                "xtpu's MPI backend needs MPI_THREAD_MULTIPLE (replicas on one rank are threads); "
                "do not lower mpi4py.rc.thread_level"
            )
        base = comm if comm is not None else MPI.COMM_WORLD
        keep_heap()  # runtime/heap.py
        self.comm = base.Dup()  # outputs and program checks
        self._err_comm = base.Dup()  # the error channel
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.outputs = _check_outputs(outputs)
        self.pool = pool
        # The local pool's commands (rank 0 to the others), apart from
        # every other message.
        self.pool_comm = base.Dup() if pool else None
        self.pool_client = None  # rank 0's mpi_pool.Pool
        self.var_comm = base.Dup()  # host variable updates (runtime/mpi_variables.py)
        self._lock = threading.Lock()
        self._groups: dict[tuple[int, ...], Any] = {}
        self._err_buf = bytearray(_ERROR_BYTES)
        self._err_status = MPI.Status()
        self._err_req = self._err_comm.Irecv([self._err_buf, MPI.BYTE], source=MPI.ANY_SOURCE, tag=_TAG_ERROR)
        self._remote: RemoteRankError | None = None
        self._reported = False
        self._sends: list = []  # keep error messages alive until the end
        atexit.register(self._close)

    def _close(self) -> None:
        """At exit (before mpi4py's MPI_Finalize): withdraw the pending
        receive of the error channel."""
        try:
            if not self._err_req.Test():
                self._err_req.Cancel()
                self._err_req.Wait()
        except Exception:  # noqa: BLE001 - MPI may already be finalized
            pass

    # -- placement ----------------------------------------------------------------

    def owner(self, replica: int, num_replicas: int) -> int:
        """The rank running ``replica`` (see :func:`replica_owner`)."""
        return replica_owner(replica, num_replicas, self.size)

    def local_replicas(self, num_replicas: int) -> list[int]:
        """The replicas this rank runs, ascending."""
        return [r for r in range(num_replicas) if replica_owner(r, num_replicas, self.size) == self.rank]

    # -- errors ---------------------------------------------------------------------

    def remote_error(self) -> RemoteRankError | None:
        """The first error another rank reported, if any has arrived."""
        if self._remote is not None:
            return self._remote
        with self._lock:
            if self._remote is None and self._err_req.Test(self._err_status):
                src = self._err_status.Get_source()
                n = self._err_status.Get_count(self.MPI.BYTE)
                try:
                    msg = pickle.loads(bytes(self._err_buf[:n]))
                except Exception:  # noqa: BLE001 - a truncated message is still an error
                    msg = "(the error message could not be read)"
                self._remote = RemoteRankError(f"rank {src} failed: {msg}", rank=src)
        return self._remote

    def check(self) -> None:
        """Raise the error another rank reported (a fresh copy), if any."""
        err = self.remote_error()
        if err is not None:
            raise RemoteRankError(err.message, rank=err.rank)

    def report_failure(self, exc: BaseException) -> None:
        """Send this rank's failure to every other rank (once; never waits).
        Errors that came from another rank are not sent back."""
        if self._reported or isinstance(exc, (RemoteRankError, Aborted)):
            return
        self._reported = True
        text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, XtpuRuntimeError) else str(exc)
        data = pickle.dumps(text[: _ERROR_BYTES // 2])
        for peer in range(self.size):
            if peer != self.rank:
                self._sends.append((data, self._err_comm.Isend([data, self.MPI.BYTE], dest=peer, tag=_TAG_ERROR)))

    # -- waiting --------------------------------------------------------------------

    def wait(self, pending: dict, deadline: float, abort_signal, describe) -> None:
        """Wait until every request in ``pending`` (``{peer rank: [request,
        ...]}``) completes, polling so that the deadline, the abort signal
        and other ranks' errors end the wait.

        Raises:
            RemoteRankError: another rank failed.
            Aborted: the run's abort signal was set.
            RuntimeTimeoutError: ``describe(missing_ranks)`` past the deadline.
        """
        MPI = self.MPI
        left = {peer: list(reqs) for peer, reqs in pending.items()}
        pause = _Pause()
        while left:
            for peer in list(left):
                if MPI.Request.Testall(left[peer]):
                    del left[peer]
            if not left:
                return
            self.check()
            if abort_signal is not None and abort_signal._set:
                raise Aborted(abort_signal.exception)
            if monotonic() > deadline:
                raise RuntimeTimeoutError(describe(sorted(left)))
            pause()

    # -- sub-communicators ----------------------------------------------------------------

    def ensure_comms(self, keys: Sequence[tuple], timeout: float, abort_signal=None) -> None:
        """Create the communicators of the groups ``keys`` not created yet:
        one duplicate of the job's communicator per group (``MPI_Comm_idup``,
        collective over every rank: every rank must pass the same keys in
        the same order, as the executor does with a program's groups), so
        groups used at once from different threads never share one. Ranks
        keep their world rank in it. Created once per process and group.

        Raises:
            RuntimeTimeoutError: some rank did not take part within ``timeout``.
        """
        new = [k for k in dict.fromkeys(keys) if k not in self._groups]
        if not new:
            return
        made = [self.comm.Idup() for _ in new]
        self.wait(
            {0: [req for _, req in made]},
            monotonic() + timeout,
            abort_signal,
            lambda missing: (
                f"timed out after {timeout} s creating the communicators of the "
                f"program's replica groups: not every rank compiled it (rank {self.rank} of {self.size})"
            ),
        )
        for k, (comm, _) in zip(new, made):
            self._groups[k] = comm

    # -- exchanging objects ---------------------------------------------------------------

    def exchange(
        self, obj: Any, peers: Sequence[int], timeout: float, what: str, abort_signal=None, tag: int = _TAG_OUTPUTS
    ) -> dict[int, Any]:
        """Send ``obj`` (pickled) to each of ``peers`` and receive theirs.

        Returns ``{peer: obj}``. Raises as :meth:`wait` does; the timeout
        names the ranks whose ``what`` never arrived.
        """
        deadline = monotonic() + timeout
        data, sends = self._isend(obj, peers, tag)
        got = self.receive_from(peers, timeout, what, abort_signal, tag, deadline)
        self.wait(
            {p: [s] for p, s in zip(peers, sends)},
            deadline,
            abort_signal,
            lambda missing: f"timed out after {timeout} s sending {what} to ranks {missing}",
        )
        return got

    def send_to(
        self, obj: Any, peer: int, timeout: float, what: str, abort_signal=None, tag: int = _TAG_OUTPUTS, comm=None
    ) -> None:
        """Send ``obj`` (pickled) to ``peer`` (on ``comm``, default the
        job's) and wait until it is sent."""
        data, sends = self._isend(obj, [peer], tag, comm)
        self.wait(
            {peer: sends},
            monotonic() + timeout,
            abort_signal,
            lambda missing: (
                f"timed out after {timeout} s sending {what} to rank {peer} (rank {self.rank} of {self.size})"
            ),
        )

    def _isend(self, obj: Any, peers: Sequence[int], tag: int, comm=None) -> tuple[bytes, list]:
        data = pickle.dumps(obj, protocol=5)
        comm = self.comm if comm is None else comm
        return data, [comm.Isend([data, self.MPI.BYTE], dest=p, tag=tag) for p in peers]

    def receive_from(
        self,
        peers: Sequence[int],
        timeout: float,
        what: str,
        abort_signal=None,
        tag: int = _TAG_OUTPUTS,
        deadline: float | None = None,
        comm=None,
    ) -> dict[int, Any]:
        """One pickled object from each of ``peers`` (on ``comm``, default
        the job's): ``{peer: obj}``. Raises as :meth:`wait` does; the
        timeout names the ranks whose ``what`` never arrived."""
        MPI = self.MPI
        comm = self.comm if comm is None else comm
        if deadline is None:
            deadline = monotonic() + timeout
        got: dict[int, Any] = {}
        status = MPI.Status()
        pause = _Pause()
        waiting = set(peers)
        while waiting:
            for p in sorted(waiting):
                if comm.Iprobe(source=p, tag=tag, status=status):
                    buf = bytearray(status.Get_count(MPI.BYTE))
                    comm.Recv([buf, MPI.BYTE], source=p, tag=tag)
                    got[p] = pickle.loads(buf)
                    waiting.discard(p)
            if not waiting:
                break
            self.check()
            if abort_signal is not None and abort_signal._set:
                raise Aborted(abort_signal.exception)
            if monotonic() > deadline:
                raise RuntimeTimeoutError(
                    f"timed out after {timeout} s waiting for {what} from ranks {sorted(waiting)} "
                    f"(rank {self.rank} of {self.size})"
                )
            pause()
        return got

    def all_replicas(
        self, local: dict[int, Any], num_replicas: int, timeout: float, abort_signal=None, shared: list | None = None
    ) -> list:
        """Per-replica results ``[replica] -> value`` of every replica, from
        this rank's ``{replica: value}``: exchanged with every other rank
        (``outputs == "all"``), or None for other ranks' replicas
        (``outputs == "local"``). In the local pool, the other ranks send
        theirs to rank 0 and get only their own.

        With ``shared`` (values are tuples of outputs): output ``j`` with
        ``shared[j]`` not None is not sent; replica ``r`` takes it from
        local replica ``shared[j][r]`` (an all-reduce's result, the same on
        every member of its group)."""
        out: list = [None] * num_replicas
        for r, v in local.items():
            out[r] = v
        if self.outputs == "local" or self.size == 1:
            return out
        send = local
        if shared is not None:
            send = {r: tuple(None if shared[j] is not None else x for j, x in enumerate(v)) for r, v in local.items()}
        peers = [p for p in range(self.size) if p != self.rank]
        if self.pool:
            if self.rank != 0:
                self.send_to(send, 0, timeout, "the outputs of its replicas", abort_signal)
                return out
            got = self.receive_from(peers, timeout, "the outputs of their replicas", abort_signal)
        else:
            got = self.exchange(send, peers, timeout, "the outputs of their replicas", abort_signal)
        for theirs in got.values():
            for r, v in theirs.items():
                if shared is not None:
                    v = tuple(x if shared[j] is None else local[shared[j][r]][j] for j, x in enumerate(v))
                out[r] = v
        return out

    def failed(self, exc: BaseException) -> None:
        """A run failed on this rank: name the rank in the error (an
        :class:`XtpuRuntimeError`'s message) and send it to the others."""
        if isinstance(exc, XtpuRuntimeError) and not isinstance(exc, RemoteRankError) and self.size > 1:
            if f"rank {self.rank}" not in exc.message:
                exc.message += f" (on rank {self.rank} of {self.size})"
                exc.args = (exc.message,)
        self.report_failure(exc)

    def check_same_program(self, text: str, timeout: float) -> None:
        """Raise if the ranks compiled different programs (SPMD: every rank
        must trace and compile the same one); a rank that never compiles it
        makes the others time out here."""
        digest = hashlib.sha256(text.encode()).hexdigest()
        peers = [p for p in range(self.size) if p != self.rank]
        got = self.exchange(digest, peers, timeout, "the compiled program's fingerprint", tag=_TAG_PROGRAM)
        differ = sorted(p for p, d in got.items() if d != digest)
        if differ:
            raise XtpuRuntimeError(
                f"rank {self.rank} compiled a different program than ranks {differ}: under MPI every "
                "rank must trace and compile the same computation with the same input shapes"
            )


class _Pause:
    """Between two polls of a wait: yield the processor (``sched_yield``)
    for the first ``SPIN`` seconds (a message between ranks of one machine
    takes microseconds, and a sleep, however short, often ends a scheduler
    tick later), then sleep, doubling from 50 us up to 1 ms, so that ranks
    waiting long, even more of them than cores, do not spin."""

    SPIN = 2e-3

    __slots__ = ("until", "delay")

    def __init__(self) -> None:
        self.until = monotonic() + self.SPIN
        self.delay = 50e-6

    def __call__(self) -> None:
        if monotonic() < self.until:
            os.sched_yield()
            return
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, 1e-3)


def _check_outputs(outputs: str) -> str:
    if outputs not in ("all", "local"):
        raise ValueError(f"outputs must be 'all' or 'local', got {outputs!r}")
    return outputs


_world: World | None = None
_world_lock = threading.Lock()


def backend_requested() -> bool:
    """True when ``XTPU_BACKEND=mpi`` asks for the MPI backend."""
    value = os.environ.get("XTPU_BACKEND", "").strip().lower()
    if value not in ("", "threads", "mpi"):
        raise ValueError(f"XTPU_BACKEND must be 'threads' or 'mpi', got {value!r}")
    return value == "mpi"


def is_initialized() -> bool:
    return _world is not None


def world() -> World | None:
    """The initialized :class:`World`, initializing it first when
    ``XTPU_BACKEND=mpi``; None for the threads backend."""
    if _world is None and backend_requested():
        initialize()
    return _world


def initialize(
    comm=None,
    outputs: str | None = None,
    abort_on_error: bool = True,
    num_processes: int | None = None,
    pool: bool = False,
) -> World:
    """Start (or reconfigure) the MPI backend in this process; idempotent.

    Args:
        comm: the ``mpi4py`` communicator of the job (default ``COMM_WORLD``).
        outputs: ``"all"`` (default; ``$XTPU_MPI_OUTPUTS``) or ``"local"``.
        abort_on_error: install an exception hook that prints the uncaught
            exception and calls ``MPI_Abort`` (``mpiexec`` exits non-zero and
            no rank waits for a dead one), as ``python -m mpi4py`` does.
        num_processes: the number of ranks (default ``$XTPU_NUM_PROCESSES``).
            In a process ``mpiexec`` did not start, more than 1 starts a
            local pool of that many processes (runtime/mpi_pool.py); under
            ``mpiexec`` it must equal the job's size.
        pool: ``comm`` joins a local pool (set by the pool's workers).

    Raises:
        ImportError: mpi4py / an MPI library is missing.
        ValueError: ``num_processes`` differs from the job's size, or is < 1.
    """
    global _world
    if outputs is None:
        outputs = os.environ.get("XTPU_MPI_OUTPUTS", "all")
    if num_processes is None and os.environ.get("XTPU_NUM_PROCESSES", "").strip():
        raw = os.environ["XTPU_NUM_PROCESSES"].strip()
        try:
            num_processes = int(raw)
        except ValueError:
            raise ValueError(f"XTPU_NUM_PROCESSES must be a whole number of processes, got {raw!r}") from None
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"num_processes must be >= 1, got {num_processes}")
    with _world_lock:
        if _world is None:
            MPI = import_mpi()
            size = (comm if comm is not None else MPI.COMM_WORLD).Get_size()
            if comm is None and size == 1 and num_processes is not None and num_processes > 1:
                merged, pids = mpi_pool_client.spawn(MPI, num_processes)
                _world = World(merged, outputs, pool=True)
                _world.pool_client = mpi_pool_client.Pool(_world, pids)
                atexit.register(_world.pool_client.close)
                return _world
            if num_processes is not None and num_processes != size:
                raise ValueError(
                    f"num_processes={num_processes} but mpiexec started {size} processes: "
                    "drop num_processes (or XTPU_NUM_PROCESSES) under mpiexec"
                )
            _world = World(comm, outputs, pool=pool)
            if abort_on_error:
                _install_abort_hook(_world)
        else:
            _world.outputs = _check_outputs(outputs)
            if num_processes is not None and num_processes != _world.size:
                raise ValueError(f"num_processes={num_processes} but xtpu already runs on {_world.size} processes")
    return _world


def _install_abort_hook(w: World) -> None:
    previous = sys.excepthook

    def hook(tp, value, tb):
        try:
            previous(tp, value, tb)
            sys.stderr.flush()
            sys.stdout.flush()
        finally:
            if w.size > 1 and not issubclass(tp, (SystemExit, KeyboardInterrupt)):
                w.report_failure(value)
                time.sleep(0.2)  # let the error reach the others before the abort
                w.MPI.COMM_WORLD.Abort(1)

    sys.excepthook = hook
