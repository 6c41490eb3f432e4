"""Worker threads, the run-wide abort signal and timeouts.

A run of a compiled program is a set of tasks (one per device worker
``(replica, logical core)`` and one per host worker ``(cluster, replica)``)
that block on each other through channels and collectives.
:func:`run_workers` runs them on a reusable pool of threads and makes sure
that one failure stops all of them: the failing task sets the
:class:`AbortSignal`, every blocking wait wakes and raises
:class:`~xtpu.runtime.errors.Aborted`, and the caller gets the first real
error.

Scheduling: waking a thread costs a GIL hand-off (~25 µs on a 2-core VM), so
``run_workers`` does not wake one thread per task up front. It starts
``min(len(tasks), os.cpu_count())`` runner threads that take tasks in order;
a task about to block calls :func:`will_block` (channels, collectives and
``AbortSignal.wait`` do so), which hands the tasks not started yet to another
runner. So no task ever waits behind a blocked one, and runs whose tasks do
not block cost a few hand-offs instead of one per task. Code that makes one
task wait for another by other means must call :func:`will_block` first (or
pass ``eager_threads=len(tasks)`` to give every task its own thread at once).

Timeouts are in seconds. :func:`default_timeout` reads the ``XTPU_TIMEOUT``
environment variable (default 60.0).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from .errors import Aborted, RuntimeTimeoutError, XtpuRuntimeError
from .gc_pause import thread_frame

_log = logging.getLogger("xtpu.runtime")

__all__ = [
    "AbortSignal",
    "default_timeout",
    "resolve_timeout",
    "run_workers",
    "will_block",
    "DEFAULT_TIMEOUT",
]

DEFAULT_TIMEOUT = 60.0
"""Timeout (seconds) used when ``XTPU_TIMEOUT`` is not set."""

#: Longest single wait handed to ``Condition.wait`` (it rejects ``inf``).
MAX_WAIT = min(threading.TIMEOUT_MAX, 3600.0)


def default_timeout() -> float:
    """The default timeout in seconds: ``$XTPU_TIMEOUT`` or 60.0.

    Raises:
        ValueError: ``XTPU_TIMEOUT`` is set but is not a positive number.
    """
    raw = os.environ.get("XTPU_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"XTPU_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"XTPU_TIMEOUT must be positive, got {raw!r}")
    return value


def resolve_timeout(timeout: float | None) -> float:
    """``timeout`` in seconds, or :func:`default_timeout` when None.

    ``float('inf')`` means wait forever (still woken by an abort).

    Raises:
        ValueError: ``timeout`` is not positive.
    """
    if timeout is None:
        return default_timeout()
    timeout = float(timeout)
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
    return timeout


#: Seconds :meth:`AbortSignal.reset` waits for the wakers of the abort it
#: clears (they never block: in practice microseconds).
RESET_WAIT = 10.0


class AbortSignal:
    """Run-wide "stop now" flag that wakes every blocking wait.

    Blocking primitives (``ChannelTable``, ``ThreadCommunicator``) register a
    *waker* with :meth:`add_waker`; :meth:`abort` sets the flag and calls all
    wakers, which wake their waiters (a sentinel queued on a channel, the
    lock of a collective's waiter released), so that waiters re-check
    :attr:`is_set` and raise :class:`~xtpu.runtime.errors.Aborted`
    immediately. Waiters check the flag after registering (under the lock
    the waker takes), so no wake-up can be lost.

    A signal stays set until :meth:`reset`; reset it (and the channel table
    and communicator) only when no worker is running, e.g. after
    :func:`run_workers` returned or raised.
    """

    def __init__(self) -> None:
        self._set = False
        self._exception: BaseException | None = None
        self._lock = threading.Lock()
        self._wakers: list[Callable[[], None]] = []
        self._event = threading.Event()
        # An abort's wakers run after the flag is set, outside the lock: a
        # waiter that polls the flag can end its run, and the next run
        # reset the signal, before they all ran. reset() waits for them
        # (see there); this counts the deliveries under way.
        self._delivering = 0
        self._delivered = threading.Condition(self._lock)

    @property
    def is_set(self) -> bool:
        """True once :meth:`abort` was called (until :meth:`reset`).
        A property: ``if signal.is_set: ...``."""
        return self._set

    @property
    def exception(self) -> BaseException | None:
        """The exception passed to the first :meth:`abort` call, if any."""
        return self._exception

    def abort(self, exc: BaseException | None = None) -> bool:
        """Set the signal and wake every registered waiter.

        Args:
            exc: the error that caused the abort (kept by the first call).

        Returns:
            True if this call set the signal, False if it was already set.
        """
        with self._lock:
            if self._set:
                return False
            self._exception = exc
            self._set = True
            wakers = list(self._wakers)
            self._delivering += 1
        try:
            self._event.set()
            for wake in wakers:
                wake()
        finally:
            with self._lock:
                self._delivering -= 1
                self._delivered.notify_all()
        return True

    def check(self) -> None:
        """Raise :class:`~xtpu.runtime.errors.Aborted` if the signal is set."""
        if self._set:
            raise Aborted(self._exception)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until aborted or ``timeout`` seconds passed; returns
        :attr:`is_set`."""
        if not self._set:
            will_block()
        return self._event.wait(timeout)

    def add_waker(self, waker: Callable[[], None]) -> None:
        """Register ``waker()`` to be called (from the aborting thread) on
        abort. It must not block for long and must not call :meth:`abort`.
        If the signal is already set, ``waker`` is called at once."""
        with self._lock:
            self._wakers.append(waker)
            already = self._set
        if already:
            waker()

    def remove_waker(self, waker: Callable[[], None]) -> None:
        """Unregister a waker added with :meth:`add_waker` (no-op if absent)."""
        with self._lock:
            try:
                self._wakers.remove(waker)
            except ValueError:
                pass

    def drop_exception(self) -> None:
        """Forget the exception; the signal stays set. For the end of a
        failed run, once its error went to the caller: the error's traceback
        holds the caller's frames (and so its executable), which threads
        still waiting on this signal must not keep alive."""
        with self._lock:
            self._exception = None

    def reset(self) -> None:
        """Clear the signal for the next run. Wakers stay registered.

        Waits until the wakers of the abort it clears have all run: one
        that ran after the reset would act on the next run (a host worker's
        ``resumed`` cleared for good, a collective's waiter of the next run
        woken with a spurious ``Aborted``; issue 25: a 60 s collective
        timeout, one run in a few hundred, with replicate called from 8
        threads). Wakers do not block, so the wait is short; past
        ``RESET_WAIT`` seconds it gives up and resets anyway."""
        deadline = time.monotonic() + RESET_WAIT
        with self._lock:
            while self._delivering:
                left = deadline - time.monotonic()
                if left <= 0:
                    _log.warning("abort signal reset while its wakers still run (after %.0f s)", RESET_WAIT)
                    break
                self._delivered.wait(left)
            self._set = False
            self._exception = None
            self._event.clear()


# ---------------------------------------------------------------------------
# Thread pool and runners.


class _PoolThread:
    """A daemon thread that runs one job at a time, handed over by a lock."""

    __slots__ = ("go", "job", "thread")

    def __init__(self, index: int) -> None:
        self.go = threading.Lock()
        self.go.acquire()
        self.job: Callable[[_PoolThread], None] | None = None
        self.thread = threading.Thread(target=self._loop, name=f"xtpu-worker-{index}", daemon=True)
        self.thread.start()
        _log.debug("worker thread xtpu-worker-%d started", index)

    def _loop(self) -> None:
        while True:
            self.go.acquire()
            job, self.job = self.job, None
            if job is None:
                return
            job(self)
            # An idle thread must not keep its last call (its results, its
            # error and, through the error's traceback, the caller's
            # executable) alive.
            job = None


_idle: list[_PoolThread] = []  # list.append/pop are atomic under the GIL
_spawn_lock = threading.Lock()
_spawned = 0
_tls = threading.local()


def _start(job: Callable[[_PoolThread], None]) -> None:
    global _spawned
    try:
        pt = _idle.pop()
    except IndexError:
        # Runners of an earlier call may be about to go idle: let them run
        # once before paying for a new thread (keeps the pool small).
        time.sleep(0)
        try:
            pt = _idle.pop()
        except IndexError:
            with _spawn_lock:
                _spawned += 1
                pt = _PoolThread(_spawned)
    pt.job = job
    pt.go.release()


def pool_size() -> int:
    """Number of threads the worker pool has created so far."""
    return _spawned


def will_block() -> None:
    """Tell the scheduler that the calling task is about to block.

    If the calling thread runs a task of :func:`run_workers` and tasks of
    that call have not started yet, another runner thread is started for
    them. Cheap (a thread-local read) when there is nothing to do; a no-op
    outside ``run_workers``.
    """
    call = getattr(_tls, "call", None)
    if call is not None and call.pending:
        _start(call.runner)


class _Call:
    """Shared state of one run_workers call."""

    def __init__(self, tasks, signal: AbortSignal) -> None:
        n = len(tasks)
        self.names = [name for name, _ in tasks]
        self.pending = deque((i, name, fn) for i, (name, fn) in enumerate(tasks))
        self.results: list[Any] = [None] * n
        self.finished = [False] * n
        self.remaining = n
        self.lock = threading.Lock()
        # `wake` is released once: at the first error or the last completion.
        self.wake = threading.Lock()
        self.wake.acquire()
        self.woken = False
        # `all_done` is released at the last completion.
        self.all_done = threading.Lock()
        self.all_done.acquire()
        self.error: BaseException | None = None
        self.error_name: str | None = None
        self.signal = signal
        # Thread ident of each started task (to tell where it is stuck).
        self.threads: list[int | None] = [None] * n
        # Set when run_workers returned or raised: a task abandoned then
        # (stuck in host code) must not abort the signal, which by the time
        # it finishes belongs to a later run.
        self.closed = False

    def fail(self, exc: BaseException, name: str | None) -> None:
        with self.lock:
            if self.closed:
                return
            first = self.error is None
            if first:
                self.error, self.error_name = exc, name
            wake = not self.woken
            self.woken = True
        if first:
            self.signal.abort(exc)
        if wake:
            self.wake.release()

    def close(self) -> None:
        """End of the call: tasks not started are dropped, late failures
        ignored, and results and error released (an abandoned runner
        keeps this object until its task returns)."""
        with self.lock:
            self.closed = True
            self.pending.clear()
            self.results = [None] * len(self.results)
            self.error = None

    def _finish(self, index: int) -> None:
        with self.lock:
            self.finished[index] = True
            self.remaining -= 1
            last = self.remaining == 0
            wake = last and not self.woken
            if wake:
                self.woken = True
        if last:
            self.all_done.release()
        if wake:
            self.wake.release()

    def runner(self, pt: _PoolThread) -> None:
        """Pool-thread job: run pending tasks until there are none."""
        pending = self.pending
        signal = self.signal
        thread = pt.thread
        _tls.call = self
        while True:
            try:
                index, name, fn = pending.popleft()
            except IndexError:
                _tls.call = None
                thread.name = "xtpu-worker-idle"
                _idle.append(pt)
                return
            if not signal._set:  # after an abort, skip tasks not started
                thread.name = name
                self.threads[index] = thread.ident
                try:
                    self.results[index] = fn()
                except Aborted as exc:
                    if not signal._set:  # not ours: a real failure
                        self.fail(exc, name)
                except BaseException as exc:  # noqa: BLE001 - stop the run
                    self.fail(exc, name)
            if not pending:
                # Back to the pool before reporting, so that an immediate
                # next call finds this thread idle instead of spawning one.
                _tls.call = None
                thread.name = "xtpu-worker-idle"
                _idle.append(pt)
                self._finish(index)
                return
            self._finish(index)

    def run_inline(self) -> None:
        """Run pending tasks in the calling thread (no thread hand-off).

        A task that blocks calls :func:`will_block`, which starts a pool
        runner for the tasks still pending, exactly as on a pool thread.
        """
        prev = getattr(_tls, "call", None)
        _tls.call = self
        pending = self.pending
        signal = self.signal
        try:
            while True:
                try:
                    index, name, fn = pending.popleft()
                except IndexError:
                    return
                if not signal._set:
                    self.threads[index] = threading.get_ident()
                    try:
                        self.results[index] = fn()
                    except Aborted as exc:
                        if not signal._set:
                            self.fail(exc, name)
                    except BaseException as exc:  # noqa: BLE001 - stop the run
                        self.fail(exc, name)
                self._finish(index)
        finally:
            _tls.call = prev


def run_workers(
    tasks: Sequence[tuple[str, Callable[[], Any]]],
    abort_signal: AbortSignal,
    *,
    timeout: float | None = None,
    abort_grace: float = 5.0,
    eager_threads: int | None = None,
    inline: bool = True,
    describe: Callable[[int, FrameType | None], dict] | None = None,
) -> list[Any]:
    """Run the ``(name, fn)`` tasks concurrently and wait for all of them.

    Tasks run on a process-wide pool of threads that grows as needed and is
    reused, so a call per training step is cheap. A task is never queued
    behind a blocked one: see the module doc (tasks that wait for each other
    must do so through channels, collectives or :func:`will_block`).

    If a task raises, ``abort_signal.abort(exc)`` is called at once so that
    every task blocked in a channel or collective wakes with
    :class:`~xtpu.runtime.errors.Aborted` (those are discarded, and tasks not
    started yet are skipped). When all tasks have finished, the first real
    (non-``Aborted``) error is raised: an
    :class:`~xtpu.runtime.errors.XtpuRuntimeError` as it is, any other
    ``Exception`` wrapped in an ``XtpuRuntimeError`` whose message starts
    with the task's name, with the original as ``__cause__``.

    Args:
        tasks: ``(name, fn)`` pairs; ``name`` is used in errors and as the
            thread name (e.g. ``"device replica 3 core 0"``).
        abort_signal: the run's signal, shared with the channels and the
            communicator. Must not be set on entry (``reset()`` it after a
            failed run, together with the channel table and communicator).
        timeout: overall limit in seconds for the whole call, or None (no
            limit beyond the channels' and collectives' own timeouts). When
            exceeded, the run is aborted with a ``RuntimeTimeoutError`` that
            names the unfinished tasks.
        abort_grace: seconds to wait, after an abort, for tasks that do not
            react to it (host code busy outside any channel). Past it the
            error is raised anyway and such threads are abandoned (they
            rejoin the pool when they finish).
        eager_threads: runner threads started at once (default
            ``os.cpu_count()``, at most ``len(tasks)``); more are started
            whenever a task blocks. ``len(tasks)`` gives every task its own
            thread immediately.
        inline: the calling thread runs tasks too (default) instead of only
            waiting; it counts as one of the ``eager_threads``. Ignored with
            an overall ``timeout``, which needs the caller free to watch.
        describe: for the overall ``timeout``: ``describe(index, frame)``
            gives the error context (``replica=``, ``op=``, ``cluster=``,
            ``location=``, see ``XtpuRuntimeError``) of the first unfinished
            task, from the frame its thread is executing (None if it never
            started).

    Returns:
        The tasks' return values, in task order.

    Raises:
        XtpuRuntimeError: the first real error of a task (see above), or a
            ``RuntimeTimeoutError`` for the overall ``timeout``.
        Aborted: the signal was already set on entry, or was set from
            outside while no task failed; ``reason`` is the signal's
            exception.
        KeyboardInterrupt: interrupted while waiting; the run is aborted
            first.
    """
    if not _log.isEnabledFor(logging.DEBUG):
        return _run_workers(tasks, abort_signal, timeout, abort_grace, eager_threads, inline, describe)
    names = [name for name, _ in tasks]
    shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
    _log.debug("run: %d workers start: %s", len(names), shown)
    t0 = time.perf_counter()
    try:
        results = _run_workers(tasks, abort_signal, timeout, abort_grace, eager_threads, inline, describe)
    except BaseException as e:
        _log.debug("run: workers stopped after %.2f ms: %s", (time.perf_counter() - t0) * 1e3, type(e).__name__)
        raise
    _log.debug("run: %d workers finished in %.2f ms", len(names), (time.perf_counter() - t0) * 1e3)
    return results


def _run_workers(tasks, abort_signal, timeout, abort_grace, eager_threads, inline, describe) -> list[Any]:
    if abort_signal.is_set:
        raise Aborted(abort_signal.exception)
    n = len(tasks)
    if n == 0:
        return []
    call = _Call(tasks, abort_signal)
    k = _CPUS if eager_threads is None else max(1, int(eager_threads))
    try:
        if inline and timeout is None:  # an overall timeout needs a free caller
            # The caller is one of the runners: a run whose tasks never block
            # costs no thread hand-off at all.
            for _ in range(min(n, k) - 1):
                _start(call.runner)
            # A nested call (from inside a task) blocks its task: let the outer
            # call's pending tasks go on.
            will_block()
            call.run_inline()
        else:
            for _ in range(min(n, k)):
                _start(call.runner)
            will_block()

        if timeout is None:
            woke = call.wake.acquire()
        else:
            woke = call.wake.acquire(timeout=min(resolve_timeout(timeout), threading.TIMEOUT_MAX))
        if not woke:
            call.fail(_overall_timeout(call, timeout, describe), None)
        if call.remaining:
            # Aborted: give the other tasks a moment to wake and finish.
            call.all_done.acquire(timeout=abort_grace)
    except BaseException as exc:  # KeyboardInterrupt while running or waiting
        abort_signal.abort(exc)
        try:
            call.all_done.acquire(timeout=abort_grace)
        finally:
            call.close()
        raise

    err, results = call.error, call.results
    call.close()  # tasks still running past abort_grace are abandoned
    if err is None:
        if abort_signal.is_set:
            # No task failed but the run was aborted from outside.
            raise Aborted(abort_signal.exception)
        return results
    if isinstance(err, XtpuRuntimeError) or call.error_name is None:
        raise err
    if not isinstance(err, Exception):  # KeyboardInterrupt, SystemExit
        raise err
    raise XtpuRuntimeError(f"{call.error_name}: {type(err).__name__}: {err}") from err


def _overall_timeout(call: _Call, timeout: float, describe) -> RuntimeTimeoutError:
    """The error for a run_workers call past its overall ``timeout``: names
    the unfinished tasks and, through ``describe``, where the first one is."""
    with call.lock:
        unfinished = [i for i, f in enumerate(call.finished) if not f]
    names = [call.names[i] for i in unfinished]
    ctx: dict = {}
    if describe is not None and unfinished:
        # Prefer a task that started (it is stuck somewhere) over one that
        # is waiting for a thread.
        started = [i for i in unfinished if call.threads[i] is not None]
        index = (started or unfinished)[0]
        ident = call.threads[index]
        frame = thread_frame(ident)
        try:
            ctx = dict(describe(index, frame) or {})
        except Exception:  # noqa: BLE001 - a description must not hide the timeout
            ctx = {}
        finally:
            del frame
    return RuntimeTimeoutError(
        f"run did not finish within {timeout} s; unfinished workers: " + ", ".join(repr(x) for x in names),
        **ctx,
    )


_CPUS = os.cpu_count() or 1
