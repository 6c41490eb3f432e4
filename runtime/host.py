"""Host workers: one thread per (outside-compilation cluster, replica).

A host worker lives as long as its :class:`~xtpu.runtime.executor.Executable`.
It waits on its cluster's ``host_compute_channel_<cluster>_args`` channel,
runs the cluster's host function on each message and sends the results back
on ``_retvals`` (TF's host compute loop: _XlaRecvAtHost ... _XlaSendFromHost).
Values that one cluster's host function hands to a later cluster's travel
host to host on ``host_compute_channel_<A>_to_<B>``, tagged with the run like
every other message; values a cluster in another block (a loop body, a
branch) or the program's outputs need are *held* instead (``tpu.held``): kept
per replica for the rest of the run and read as often as needed
(:meth:`RunState.hold`).
Keeping the workers alive between runs makes a host round trip two thread
hand-offs instead of a thread start, two hand-offs and a shutdown per run.

Every message carries the number of the run that sent it, so a message left
behind by a failed run is dropped rather than answered into a later run.
A host function that raises aborts the run with a
:class:`~xtpu.runtime.errors.HostComputeError` naming the cluster, the
replica, the op and the user's source line.

A host worker still busy when its run failed (blocked in I/O, say, or
computing past the timeout) cannot be interrupted: the executable *retires*
it and starts a fresh worker for the next run. The retired one exits as soon
as its host code returns, without touching the runs after its own. Closing
the executable (or collecting it) ends every worker, idle, waiting after an
abort, or retired.
"""

from __future__ import annotations

import logging
import math
import threading

import numpy as np
from xdsl.ir import Operation

from xtpu.dialects import tpu
from xtpu.dialects.fusion import FusionRegionOp
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.runtime.channels import ChannelClosed, ChannelTable
from xtpu.runtime.errors import Aborted, XtpuRuntimeError
from xtpu.runtime.gc_pause import thread_frame
from xtpu.runtime.plan import CONSTANT_OPS, Plan, call_plan, running_op
from xtpu.runtime.workers import AbortSignal

_log = logging.getLogger("xtpu.runtime")

# Outcomes of HostWorker._serve_message besides None.
_ABORTED = "aborted"
_CLOSED = "closed"


#: The largest value (bytes) of a host function that runs_inline accepts.
INLINE_BYTES = 64 << 10


def runs_inline(block) -> bool:
    """Whether a host function (its body ``block``) may run on a device
    worker's thread (:meth:`HostWorker.serve_waiting`): straight-line code
    (no ``hlo.if`` / ``hlo.while``) whose every op is one a device could run
    (a ``PrimitiveOp`` that is not ``HOST_ONLY``: numpy math, which touches
    nothing else), the function's first ``tpu.recv_at_host`` (its request),
    a ``tpu.send_from_host`` (never blocks) or a held value (``tpu.held``),
    on values of at most ``INLINE_BYTES`` each (64 KB: every op ends within
    microseconds, so the device's timeout and abort still come in time).
    Host-only ops (strings, printing,
    summaries, host variables: I/O or shared state), a wait for another
    cluster's values (``host_compute_channel_<A>_to_<B>``) and larger values
    keep the function on its worker."""
    from xdsl.traits import IsTerminator

    first = block.first_op
    for op in block.walk():
        if op.regions and not isinstance(op, FusionRegionOp):  # a fused region's body is checked op by op
            return False
        if isinstance(op, tpu.RecvAtHostOp):
            if op is not first and tpu.HELD_ATTR not in op.attributes:
                return False
        elif isinstance(op, PrimitiveOp):
            if getattr(type(op), "HOST_ONLY", False):
                return False
        elif not (isinstance(op, (tpu.SendFromHostOp, tpu.ReplicaIdOp) + CONSTANT_OPS) or op.has_trait(IsTerminator)):
            return False
        for v in op.results:
            try:
                spec = TensorSpec.of_type(v.type)
                size = spec.size * np.dtype(spec.dtype).itemsize
            except (TypeError, ValueError):  # not a tensor of numbers
                return False
            if size > INLINE_BYTES:
                return False
    return True


def answer_awaited_next(send) -> str | None:
    """The channel whose answer the device waits for right after a
    ``tpu.send_to_host``: the key of the next op of its block (constants
    aside) when that is the ``tpu.recv_from_host`` of the same cluster
    (``..._args`` -> ``..._retvals``), else None. Such a request needs no
    wake-up of the host worker (``ChannelTable.quiet_requests``)."""
    key = send.key.data
    if not key.endswith("_args"):
        return None
    op = send.next_op
    while isinstance(op, CONSTANT_OPS):
        op = op.next_op
    answer = key[: -len("_args")] + "_retvals"
    return answer if isinstance(op, tpu.RecvFromHostOp) and op.key.data == answer else None


class RunState:
    """What host workers share with their executable about the current run.

    Attributes:
      generation: ``[n]``, the number of the current run (a one-element list
        so that kernels read it without a reference to the executable).
      resumed: set while runs may proceed; cleared when a run is aborted and
        set again when the next run starts (or the executable is closed), so
        aborted host workers wait instead of spinning.
      closed: the executable is closed; host workers return.
    """

    def __init__(self, abort: AbortSignal):
        self.generation = [0]
        self.held: dict[tuple[int, str], tuple] = {}
        self.abort = abort
        self.closed = False
        self.resumed = threading.Event()
        self.resumed.set()
        abort.add_waker(self.resumed.clear)

    def next_run(self) -> int:
        self.held = {}
        self.generation[0] += 1
        self.resumed.set()
        return self.generation[0]

    def hold(self, replica: int, key: str, generation: int, values: tuple) -> None:
        """A held ``tpu.send_from_host`` (``tpu.held``): keep ``values`` as
        the host values ``key`` of ``replica`` for the rest of run
        ``generation`` (nothing, when that run is over)."""
        if generation == self.generation[0]:
            self.held[(replica, key)] = values

    def held_values(self, replica: int, key: str, n: int):
        """A held ``tpu.recv_at_host``: the values last kept under ``key`` for
        ``replica`` in this run (the plan's convention: one bare, none as
        None).

        Raises:
          XtpuRuntimeError: nothing was kept under ``key`` yet in this run (the
            passes order every reader after its writer), or not ``n`` values.
        """
        vals = self.held.get((replica, key))
        if vals is None:
            raise XtpuRuntimeError(
                f"host value '{key}' was read before it was kept in this run", replica=replica, key=key
            )
        if len(vals) != n:
            raise XtpuRuntimeError(
                f"host value '{key}' holds {len(vals)} values, expected {n}", replica=replica, key=key
            )
        return None if n == 0 else (vals[0] if n == 1 else vals)

    def close(self) -> None:
        """Tell every host worker to return (the waiting ones at once, a
        busy one when its host code returns)."""
        self.closed = True
        self.resumed.set()


class HostWorker:
    """The host side of one cluster for one replica.

    ``inbox`` holds the values of the message being served, which the
    kernel of the function's first ``tpu.recv_at_host`` (its ``_args``)
    returns; ``generation`` is the run it came from, which the
    ``tpu.send_from_host`` kernels put on what they send.  Any other
    ``tpu.recv_at_host`` (a host-to-host value,
    ``host_compute_channel_<A>_to_<B>``) waits on its own channel for a
    message of the same run.
    """

    def __init__(self, cluster: str, replica: int, key: str, channels: ChannelTable, state: RunState):
        self.cluster = cluster
        self.replica = replica
        self.key = key
        self.channels = channels
        self.state = state
        self.inbox: tuple = ()
        self.generation = 0
        self.plan: Plan | None = None
        self.kernels: tuple = ()
        self.thread: threading.Thread | None = None
        # busy: running the host function; retired: replaced by a fresh
        # worker while busy (see the module doc). Both under `lock`.
        self.lock = threading.Lock()
        self.busy = False
        self.retired = False
        self._inline = False  # serve_waiting may run the plan (set by start)

    def start(self) -> None:
        """Start serving (the plan and kernels must be set)."""
        self._inline = runs_inline(self.plan.block)
        if self._inline:
            self.channels.keep_gil_on_wake(self.key, self.replica)
        self.thread = threading.Thread(
            target=self._serve, name=f"xtpu-host-{self.cluster}-replica-{self.replica}", daemon=True
        )
        self.thread.start()

    def _serve(self) -> None:
        _log.debug("host worker for cluster '%s', replica %d started", self.cluster, self.replica)
        try:
            self._loop()
        finally:
            _log.debug("host worker for cluster '%s', replica %d stopped", self.cluster, self.replica)

    @property
    def serves_inline(self) -> bool:
        """Whether a waiting device may run this worker's host function
        itself (:meth:`serve_waiting`, :func:`runs_inline`)."""
        return self._inline

    def retire_if_busy(self) -> bool:
        """Retire this worker if it is still running host code (of a failed
        run: call only between runs); returns True if it was retired."""
        with self.lock:
            if self.busy:
                self.retired = True
            return self.retired

    def current_op(self) -> Operation | None:
        """The op of the host function this worker is executing, if busy."""
        t = self.thread
        if not self.busy or t is None or t.ident is None:
            return None
        frame = thread_frame(t.ident)
        try:
            return running_op(frame)
        finally:
            del frame

    def _loop(self) -> None:
        ch, key, r, state = self.channels, self.key, self.replica, self.state
        while not state.closed:
            # Never wait inside an except block: the exception being handled
            # (and its cause, the run's error, whose traceback holds the
            # executable) would stay alive as long as the wait.
            try:
                msg = ch.recv(key, r, timeout=math.inf)  # idle between runs
            except ChannelClosed:
                return  # the executable was closed
            except Aborted:
                msg = None
            if msg is None:
                state.resumed.wait()
                continue
            if msg[0] != state.generation[0]:
                continue  # left behind by an aborted run
            with self.lock:
                self.busy = True
            outcome = self._serve_message(msg)
            if outcome is _CLOSED or self.retired:
                return
            if outcome is _ABORTED:
                state.resumed.wait()

    def _serve_message(self, msg: tuple):
        """Run the host function on ``msg`` (``busy`` set by the caller,
        cleared here); None, or _ABORTED / _CLOSED."""
        state = self.state
        self.generation = msg[0]
        self.inbox = msg[1:]
        outcome = None
        try:
            call_plan(self.plan, (), self.kernels, self.replica, self.cluster)
        except ChannelClosed:
            outcome = _CLOSED
        except Aborted:
            outcome = _ABORTED
        except BaseException as e:  # noqa: BLE001 - reported to the run
            # Only to its own run: a retired worker's run is over.
            if not self.retired and self.generation == state.generation[0]:
                state.abort.abort(e)
            outcome = _ABORTED
        finally:
            self.inbox = ()
            with self.lock:
                self.busy = False
        return outcome

    def serve_waiting(self) -> bool:
        """Run this worker's pending request on the calling thread: a device
        worker about to wait for this cluster's answer calls it (through
        :meth:`ChannelTable.recv`). Only a host function that cannot block
        or touch the host's state (every op a device could run, plus its
        transfers: :func:`runs_inline`) is served so, and only while this
        worker is idle and the request is still queued; the values, errors
        and aborts are those of the worker's own loop. It saves the two
        thread hand-offs of a round trip (each a wake-up, ~15-25 us across
        the cores of a VM); the host worker still takes a request the device
        does not wait for at once (overlap of host and device work).

        Returns:
            True if a request was served here (its answer is sent).
        """
        if not self._inline:
            return False
        state = self.state
        with self.lock:
            if self.busy or self.retired or state.closed:
                return False
            while True:
                msg = self.channels.take(self.key, self.replica)
                if msg is None:
                    return False
                if msg[0] == state.generation[0]:
                    break  # else: left behind by an aborted run
            self.busy = True
        self._serve_message(msg)
        return True

    def recv_kernel(self, n: int):
        """Kernel of ``tpu.recv_at_host``: the values being served."""
        if n == 0:
            return lambda: None
        if n == 1:
            return lambda: self.inbox[0]
        return lambda: self.inbox

    def channel_recv_kernel(self, key: str, n: int):
        """Kernel of a ``tpu.recv_at_host`` other than the function's first:
        wait on channel ``key`` (a host-to-host value from another cluster's
        host function) for this run's message; messages of earlier, aborted
        runs are dropped."""
        ch, r = self.channels, self.replica

        def recv():
            while True:
                if self.retired:
                    raise Aborted(None)  # a fresh worker serves this replica now
                msg = ch.recv(key, r)
                if msg[0] == self.generation:
                    break
                if msg[0] > self.generation:
                    # For a later run than ours (we were retired while
                    # waiting): leave it to the worker of that run.
                    ch.send(key, r, msg)
                    raise Aborted(None)
                # else: left behind by an aborted run
            vals = msg[1:]
            if len(vals) != n:
                raise XtpuRuntimeError(f"channel '{key}' carried {len(vals)} values, expected {n}", replica=r, key=key)
            return None if n == 0 else (vals[0] if n == 1 else vals)

        return recv

    def held_send_kernel(self, key: str):
        """Kernel of a held ``tpu.send_from_host``: keep the values for the
        rest of the run (:meth:`RunState.hold`)."""
        state, r = self.state, self.replica
        return lambda *vals: state.hold(r, key, self.generation, vals)

    def held_recv_kernel(self, key: str, n: int):
        """Kernel of a held ``tpu.recv_at_host``: the values kept under
        ``key`` (:meth:`RunState.held_values`)."""
        state, r = self.state, self.replica
        return lambda: state.held_values(r, key, n)

    def send_kernel(self, key: str):
        """Kernel of ``tpu.send_from_host`` (to the device or to another
        cluster's host function): send, tagged with the run. A thread
        about to wait on ``key`` may serve this worker first
        (:meth:`serve_waiting`)."""
        ch, r = self.channels, self.replica
        ch.set_server(key, r, self)
        return lambda *vals: ch.send(key, r, (self.generation,) + vals)
