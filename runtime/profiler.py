"""A trace of what xtpu runs, in Chrome's trace-event format.

``xtpu.profiler.trace(logdir)`` (JAX's ``jax.profiler.trace``; also
``start_trace`` / ``stop_trace``, and ``XTPU_PROFILE=dir`` for a whole
process) records, while it is active:

- each run of a plan: the device program of a replica (and logical core),
  a host cluster of a replica, ``@main``; one span each, named after the
  worker, on the thread that ran it;
- each op inside them (category ``op``; constants excepted), named after
  the op, with its source line, inside ``hlo.if`` / ``hlo.while`` bodies too; a ``tpu.recv_from_host`` span is the wait
  for the host, a ``ccl.*`` span the collective with its rendezvous;
- each compile pass (category ``compile``).

On stop it writes ``<logdir>/xtpu-<pid>-<n>.trace.json``: ``{"traceEvents":
[...]}`` with one track per thread (named after the thread: device
workers, host workers, the main thread), times in microseconds. It opens in
Perfetto (ui.perfetto.dev) and chrome://tracing. The format is the
"Trace Event Format" document (Google, ``ph: "X"`` complete events and
``ph: "M"`` thread names).

Off, it costs one attribute read per plan run.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["trace", "start_trace", "stop_trace", "is_tracing", "span"]

_active: _Trace | None = None
_lock = threading.Lock()
_files = itertools.count()


class _Trace:
    def __init__(self, logdir: str) -> None:
        self.logdir = logdir
        self.events: list[dict] = []
        self.threads: dict[int, str] = {}
        self.t0 = time.perf_counter()
        self.pid = os.getpid()
        self._wrapped: dict[int, tuple] = {}  # id(K) -> (K, instrumented K)

    def add(self, name: str, cat: str, start: float, end: float, args: dict | None = None) -> None:
        t = threading.current_thread()
        tid = t.native_id or threading.get_ident()
        ev = {
            "name": name,
            "cat": cat,
            "ph": "X",
            "pid": self.pid,
            "tid": tid,
            "ts": (start - self.t0) * 1e6,
            "dur": (end - start) * 1e6,
        }
        if args:
            ev["args"] = args
        self.events.append(ev)  # list.append is atomic under the GIL
        if tid not in self.threads:
            self.threads[tid] = t.name

    def _timed(self, k: Callable[..., Any], name: str, args: dict | None) -> Callable[..., Any]:
        add, clock = self.add, time.perf_counter

        def run(*xs: Any) -> Any:
            start = clock()
            try:
                return k(*xs)
            finally:
                add(name, "op", start, clock(), args)

        return run

    def write(self) -> str:
        os.makedirs(self.logdir, exist_ok=True)
        path = os.path.join(self.logdir, f"xtpu-{self.pid}-{next(_files)}.trace.json")
        meta = [
            {"name": "thread_name", "ph": "M", "pid": self.pid, "tid": tid, "args": {"name": name}}
            for tid, name in sorted(self.threads.items())
        ]
        meta.append({"name": "process_name", "ph": "M", "pid": self.pid, "args": {"name": "xtpu"}})
        with open(path, "w") as f:
            json.dump({"traceEvents": meta + self.events, "displayTimeUnit": "ms"}, f)
        return path


def is_tracing() -> bool:
    """True while a trace is being recorded."""
    return _active is not None


def start_trace(logdir: str) -> None:
    """Start recording (see the module docstring).

    Raises:
        RuntimeError: a trace is already being recorded.
    """
    global _active
    with _lock:
        if _active is not None:
            raise RuntimeError(f"a trace is already being recorded (into {_active.logdir}); stop it first")
        _active = _Trace(os.fspath(logdir))


def stop_trace() -> str:
    """Stop recording and write the trace; returns the file's path.

    Raises:
        RuntimeError: no trace is being recorded.
    """
    global _active
    with _lock:
        tr, _active = _active, None
    if tr is None:
        raise RuntimeError("no trace is being recorded: call start_trace(logdir) first")
    return tr.write()


@contextlib.contextmanager
def trace(logdir: str) -> Iterator[None]:
    """Record a trace of the block into ``logdir`` (written when it ends)."""
    start_trace(logdir)
    try:
        yield
    finally:
        stop_trace()


@contextlib.contextmanager
def span(name: str, cat: str, args: dict | None = None) -> Iterator[None]:
    """A span in the active trace (nothing when none is)."""
    tr = _active
    if tr is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        tr.add(name, cat, start, time.perf_counter(), args)


def active() -> _Trace | None:
    return _active


def _start_from_env() -> None:
    logdir = os.environ.get("XTPU_PROFILE", "").strip()
    if logdir and _active is None:
        start_trace(logdir)
        atexit.register(lambda: _active is not None and stop_trace())


_start_from_env()
