"""Keyed rendezvous queues between device and host workers.

The device side of an outside-compilation cluster sends its arguments on
``host_compute_channel_<cluster>_args`` and waits for the results on
``host_compute_channel_<cluster>_retvals``; the host worker of that cluster
and replica does the opposite. Each ``(key, replica)`` pair is an unbounded
FIFO queue: :meth:`ChannelTable.send` never blocks, :meth:`ChannelTable.recv`
blocks until a message arrives, the channel is closed, the run is aborted or
the timeout (seconds) passes.
"""

from __future__ import annotations

import threading
from collections import deque
from time import monotonic

from .blas_budget import cores
from .errors import Aborted, RuntimeTimeoutError, XtpuRuntimeError
from .waiters import waiter
from .workers import AbortSignal, resolve_timeout, will_block

__all__ = ["ChannelTable", "ChannelClosed"]


class ChannelClosed(Exception):
    """``recv`` on a channel that was closed and has no message left.

    Not an error: it tells a host worker looping on ``recv`` that the device
    program has finished, so the host worker should return normally.
    """

    def __init__(self, key: str, replica: int) -> None:
        super().__init__(f"channel '{key}' for replica {replica} is closed")
        self.key = key
        self.replica = replica


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


# Queued after the messages of a closed channel (messages are tuples).
_CLOSED = _Sentinel("closed")


class _Slot:
    # A deque (append / popleft are atomic under the GIL) and the waiters
    # (runtime/waiters.py) of the threads blocked in recv on it: a send
    # wakes them with the GIL released, so the receiver does not wake only
    # to wait for the GIL.
    __slots__ = ("messages", "closed", "waiters", "keep_gil", "quiet")

    def __init__(self, closed: bool) -> None:
        self.messages: deque = deque()
        self.waiters: list = []
        self.keep_gil = False  # wake its waiters with the lock (keep_gil_on_wake)
        # The answer its senders wait for (quiet_requests); None: no sender
        # declared, "": one does not wait or they differ.
        self.quiet: str | None = None
        self.closed = closed
        if closed:
            self.messages.append(_CLOSED)

    def wake(self) -> None:
        for w in self.waiters[:]:
            w.wake()


class ChannelTable:
    """Rendezvous queues keyed by ``(key: str, replica: int)``.

    Args:
        abort_signal: the run's :class:`~xtpu.runtime.workers.AbortSignal`;
            an abort wakes every ``recv`` at once with
            :class:`~xtpu.runtime.errors.Aborted`.
        timeout: default ``recv`` timeout in seconds; None means
            ``$XTPU_TIMEOUT`` or 60.0 (read at construction).

    Messages are tuples of values (numpy arrays, Python scalars); they are
    passed by reference, so a sender must not mutate an array after sending
    it. Thread-safe; a send that wakes a waiting ``recv`` costs one system
    call (runtime/waiters.py), a send + recv round trip between two threads
    on one core ~5 us, on two cores of a VM ~20-30 us (the wake-up).
    """

    def __init__(self, abort_signal: AbortSignal, timeout: float | None = None) -> None:
        self.abort_signal = abort_signal
        self.timeout = resolve_timeout(timeout)
        self._slots: dict[tuple[str, int], _Slot] = {}
        self._lock = threading.Lock()
        self._all_closed = False
        # Wake-ups release the GIL while no more replicas use the table
        # than there are cores, else they keep it (runtime/waiters.py).
        self._replicas: set[int] = set()
        self._release_gil = True
        # (key, replica) -> the host worker whose answers it carries
        # (set_server); kept by reset.
        self._servers: dict[tuple[str, int], object] = {}
        abort_signal.add_waker(self._wake_all)

    # -- internals -----------------------------------------------------------

    def _slot(self, key: str, replica: int) -> _Slot:
        slot = self._slots.get((key, replica))
        if slot is None:
            with self._lock:
                slot = self._slots.get((key, replica))
                if slot is None:
                    slot = self._slots[(key, replica)] = _Slot(self._all_closed)
                    self._replicas.add(replica)
                    self._release_gil = len(self._replicas) <= cores()
        return slot

    def _wake_all(self) -> None:
        with self._lock:
            slots = list(self._slots.values())
        for slot in slots:
            slot.wake()

    # -- public API ------------------------------------------------------------

    def send(self, key: str, replica: int, values: tuple) -> None:
        """Append ``values`` to the queue of ``(key, replica)``; never blocks.
        Wakes a ``recv`` waiting on it unless the channel is quiet
        (:meth:`quiet_requests`).

        Args:
            values: a tuple (other sequences are converted to one).

        Raises:
            Aborted: the run was aborted.
            XtpuRuntimeError: the channel was closed (a send after the
                receiving side has finished).
        """
        if self.abort_signal._set:
            raise Aborted(self.abort_signal.exception)
        if type(values) is not tuple:
            values = tuple(values)
        slot = self._slots.get((key, replica)) or self._slot(key, replica)
        if slot.closed:
            raise XtpuRuntimeError(
                f"send on closed channel '{key}' for replica {replica}",
                replica=replica,
                key=key,
            )
        slot.messages.append(values)
        if slot.waiters:
            answer = slot.quiet
            server = self._servers.get((answer, replica)) if answer else None
            # Quiet only for a worker whose requests the waiting device may
            # serve itself; a request only the worker can serve wakes it now
            # (waking it later, from the device's recv, gained nothing).
            if server is None or server.key != key or not server.serves_inline:
                slot.wake()

    def recv(self, key: str, replica: int, timeout: float | None = None) -> tuple:
        """Pop the oldest message of ``(key, replica)``, waiting if needed.

        Args:
            timeout: seconds to wait; None uses the table's ``timeout``.

        Returns:
            The tuple given to :meth:`send`.

        Raises:
            ChannelClosed: the channel is closed and drained.
            Aborted: the run was aborted (also while waiting).
            RuntimeTimeoutError: no message within the timeout; names the
                key and replica.
        """
        signal = self.abort_signal
        if signal._set:
            raise Aborted(signal.exception)
        slot = self._slots.get((key, replica)) or self._slot(key, replica)
        messages = slot.messages
        if messages:
            try:
                value = messages.popleft()
            except IndexError:  # another receiver took it
                pass
            else:
                if type(value) is tuple:
                    return value
                messages.appendleft(value)  # _CLOSED: kept for the next recv
                raise ChannelClosed(key, replica)
        server = self._servers.get((key, replica))
        if server is not None:
            if server.serve_waiting():
                return self.recv(key, replica, timeout)  # its answer is queued now
            # A request of a quiet channel (quiet_requests): its worker
            # takes it now.
            request = self._slots.get((server.key, replica))
            if request is not None and request.waiters and request.messages:
                request.wake()
        return self._wait(slot, key, replica, self.timeout if timeout is None else timeout)

    def set_server(self, key: str, replica: int, server) -> None:
        """Before waiting on an empty ``(key, replica)``, ``recv`` calls
        ``server.serve_waiting()`` (a host worker that sends on it:
        runtime/host.py), which may produce the message on the calling
        thread (True: it served a request), else wakes the worker if its
        request channel ``(server.key, replica)`` holds a request."""
        self._servers[(key, replica)] = server

    def keep_gil_on_wake(self, key: str, replica: int) -> None:
        """A send to ``(key, replica)`` wakes its waiting ``recv`` without
        letting the GIL go: for a host worker's requests, which the device
        worker that sends one usually serves itself moments later
        (``set_server``); handing it the GIL would let the woken worker
        take the request first and cost the round trip's two hand-offs."""
        self._slot(key, replica).keep_gil = True

    def quiet_requests(self, key: str, replica: int, answer: str | None) -> None:
        """Declare one sender to a host worker's request channel ``(key,
        replica)``: ``answer`` is the channel whose message it waits for
        right after sending (runtime/host.py, ``answer_awaited_next``), None
        if it does not. When every sender waits for the same answer and the
        worker that reads ``key`` sends it (``set_server``), a send wakes no
        waiting ``recv``: the sender's wait for the answer serves the
        request or wakes the worker, which is not woken for a request the
        sender then takes itself (2 replicas: a host cluster 22 -> 8 us per
        call, 8 replicas 68 -> 45 us)."""
        slot = self._slot(key, replica)
        answer = answer or ""  # "": every send wakes
        slot.quiet = answer if slot.quiet is None or slot.quiet == answer else ""

    def take(self, key: str, replica: int) -> tuple | None:
        """Pop the oldest message of ``(key, replica)`` if there is one
        (None if not, or if the channel is closed); never blocks."""
        slot = self._slots.get((key, replica))
        if slot is None or not slot.messages:
            return None
        try:
            value = slot.messages.popleft()
        except IndexError:
            return None
        if type(value) is tuple:
            return value
        slot.messages.appendleft(value)  # _CLOSED: kept for recv
        return None

    def _wait(self, slot: _Slot, key: str, replica: int, timeout: float) -> tuple:
        signal = self.abort_signal
        messages = slot.messages
        deadline = monotonic() + timeout
        will_block()  # let tasks not started yet run (maybe our sender)
        me = waiter(self._release_gil and not slot.keep_gil)
        slot.waiters.append(me)
        try:
            while True:
                # Registered first, then checked: a send or abort after the
                # check wakes the wait below.
                if messages:
                    try:
                        value = messages.popleft()
                    except IndexError:  # another receiver took it
                        continue
                    if type(value) is tuple:
                        return value
                    messages.appendleft(value)  # _CLOSED: kept for the next recv
                    raise ChannelClosed(key, replica)
                if signal._set:
                    raise Aborted(signal.exception)
                remaining = deadline - monotonic()
                if remaining <= 0:
                    raise RuntimeTimeoutError(
                        f"no message on channel '{key}' for replica {replica} after {timeout} s",
                        replica=replica,
                        key=key,
                    )
                me.wait(remaining)
        finally:
            slot.waiters.remove(me)

    def close(self, key: str, replica: int) -> None:
        """Close ``(key, replica)``: queued messages can still be received,
        then ``recv`` raises :class:`ChannelClosed`; ``send`` raises."""
        slot = self._slot(key, replica)
        if not slot.closed:
            slot.closed = True
            slot.messages.append(_CLOSED)
            slot.wake()

    def close_all(self) -> None:
        """Close every channel, including ones not used yet."""
        with self._lock:
            self._all_closed = True
            slots = list(self._slots.values())
        for slot in slots:
            if not slot.closed:
                slot.closed = True
                slot.messages.append(_CLOSED)
                slot.wake()

    def reset(self) -> None:
        """Drop every queue and reopen all channels. Call only while no
        worker uses the table (e.g. after a failed run, before the next)."""
        with self._lock:
            kept = [(k, slot.keep_gil, slot.quiet) for k, slot in self._slots.items()]
            self._slots = {}
            self._all_closed = False
            self._replicas = set()
            self._release_gil = True
        for (key, replica), keep_gil, quiet in kept:  # declarations outlive a run
            if keep_gil or quiet is not None:
                slot = self._slot(key, replica)
                slot.keep_gil, slot.quiet = keep_gil, quiet

    def detach(self) -> None:
        """Unregister from the abort signal (when the table is discarded)."""
        self.abort_signal.remove_waker(self._wake_all)
