"""Host variables on several processes: one value, on rank 0.

TF places a variable created outside any strategy scope on the client's
host (``/job:worker/task:0/device:CPU:0``); outside compilation of a replica
on another host reads and updates it there, so an ``assign_add`` in outside
compilation adds once per replica to that one variable, whatever host the
replica runs on (seed ``tpu_outside_compilation.txt``: "logic in outside
compilation is replicated and executed separately for each replica").

Under MPI (and in the local pool) every rank has its own copy of the
variable (in the local pool, only rank 0, the script's process, has
one). So that the program sees one variable, every
``hlo.host_variable_update`` a rank other than 0 runs is sent to rank 0,
which applies it to its copy (the op's own kernel, atomic) and answers with
the new value; when a run ends, rank 0 sends the values of the program's
host variables to every rank, which set their copies to them: after each
replicated call, every rank reads the same value.

Rank 0 serves the requests from a thread during the run; a rank tells it
that its run is over with a last message, so rank 0 serves until every
rank's host code is done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from time import monotonic
from typing import Any

from .errors import Aborted, RuntimeTimeoutError
from .mpi import _Pause

__all__ = ["VariableService"]

_TAG_REQUEST = 21
_TAG_REPLY = 22
_TAG_VALUES = 23
_DONE = -1


class VariableService:
    """The host variables of one executable on one rank.

    Args:
        world: the :class:`~xtpu.runtime.mpi.World`.
        kernels: per ``hlo.host_variable_update`` op of the program (in
            program order, the same on every rank), its kernel on this rank.
        names: the program's host variables (their registry names).
        read, write: ``read(name) -> value`` and ``write(name, value)`` of
            this rank's copy.
    """

    def __init__(
        self,
        world: Any,
        kernels: Sequence[Callable[..., Any]],
        names: Sequence[str],
        read: Callable[[str], Any],
        write: Callable[[str, Any], None],
    ) -> None:
        self.world = world
        self.kernels = list(kernels)
        self.names = list(dict.fromkeys(names))
        self.read, self.write = read, write
        self._lock = threading.Lock()  # one request in flight per rank
        self._server: threading.Thread | None = None
        self._server_error: BaseException | None = None

    # -- ranks other than 0 -------------------------------------------------------

    def remote_kernel(self, index: int, timeout: float, abort_signal) -> Callable[..., Any]:
        """The kernel of op ``index`` on a rank other than 0: rank 0 runs it."""

        def run(*xs: Any) -> Any:
            w = self.world
            with self._lock:
                w.send_to(
                    (index, xs), 0, timeout, "a host variable update", abort_signal, tag=_TAG_REQUEST, comm=w.var_comm
                )
                return w.receive_from(
                    [0], timeout, "the host variable's value", abort_signal, tag=_TAG_REPLY, comm=w.var_comm
                )[0]

        return run

    def finish_remote(self, timeout: float, abort_signal) -> None:
        """After this rank's run: tell rank 0, and take the variables' values
        (not in the local pool: its workers run no user code, so they keep
        no copies)."""
        w = self.world
        w.send_to((_DONE, ()), 0, timeout, "the end of its run", abort_signal, tag=_TAG_REQUEST, comm=w.var_comm)
        if w.pool:
            return
        values = w.receive_from(
            [0], timeout, "the host variables' values", abort_signal, tag=_TAG_VALUES, comm=w.var_comm
        )[0]
        for name, value in values.items():
            self.write(name, value)

    # -- rank 0 ---------------------------------------------------------------------

    def start_serving(self, timeout: float, abort_signal) -> None:
        """Serve the other ranks' updates from a thread until every rank's
        run is over (:meth:`finish_serving`)."""
        self._server_error = None
        self._server = threading.Thread(
            target=self._serve, args=(timeout, abort_signal), name="xtpu-host-variables", daemon=True
        )
        self._server.start()

    def _serve(self, timeout: float, abort_signal) -> None:
        w = self.world
        MPI = w.MPI
        status = MPI.Status()
        left = set(range(1, w.size))
        pause = _Pause()
        deadline = monotonic() + timeout
        try:
            while left:
                if w.var_comm.Iprobe(source=MPI.ANY_SOURCE, tag=_TAG_REQUEST, status=status):
                    src = status.Get_source()
                    index, xs = w.receive_from(
                        [src], timeout, "a host variable update", abort_signal, tag=_TAG_REQUEST, comm=w.var_comm
                    )[src]
                    if index == _DONE:
                        left.discard(src)
                    else:
                        w.send_to(
                            self.kernels[index](*xs),
                            src,
                            timeout,
                            "a host variable's value",
                            abort_signal,
                            tag=_TAG_REPLY,
                            comm=w.var_comm,
                        )
                    pause = _Pause()
                    deadline = monotonic() + timeout
                    continue
                w.check()
                if abort_signal is not None and abort_signal._set:
                    raise Aborted(abort_signal.exception)
                if monotonic() > deadline:
                    raise RuntimeTimeoutError(
                        f"timed out after {timeout} s waiting for ranks {sorted(left)} to end their run "
                        f"(host variable updates; rank {w.rank} of {w.size})"
                    )
                pause()
        except BaseException as exc:  # noqa: BLE001 - finish_serving raises it
            self._server_error = exc

    def finish_serving(self, timeout: float, abort_signal) -> None:
        """After rank 0's run: wait for every rank's, then send them the values."""
        server, self._server = self._server, None
        if server is not None:
            server.join()
        if self._server_error is not None:
            raise self._server_error
        w = self.world
        if w.pool:
            return
        values = {name: self.read(name) for name in self.names}
        for peer in range(1, w.size):
            w.send_to(
                values, peer, timeout, "the host variables' values", abort_signal, tag=_TAG_VALUES, comm=w.var_comm
            )

    def stop_serving(self) -> None:
        """After a failed run on rank 0: let the server end (it watches the
        abort signal and the other ranks' errors)."""
        server, self._server = self._server, None
        if server is not None:
            server.join(timeout=5.0)
