"""Errors raised by the xtpu runtime.

Every runtime error says where it happened in the words of the program: the
replica, the logical core, the op (``ccl.all_reduce``), the channel key or
outside-compilation cluster, and the user's source line, then what went
wrong::

    replica 3, op ccl.all_reduce (at train.py:41): timed out after 2.0 s
    waiting for replicas [5, 7] in group [0, 1, 2, 3, 4, 5, 6, 7]

Hierarchy:

- :class:`XtpuRuntimeError` (a ``RuntimeError``): any failure of a run.
- :class:`RuntimeTimeoutError`: a collective or a channel waited longer than
  its timeout; the message names who never arrived.
- :class:`HostComputeError`: host (outside-compilation) code raised; the
  original exception is the ``__cause__``.
- :class:`Aborted` (not a runtime error): raised inside a worker whose run was
  stopped because another worker failed. It never reaches the user as the
  primary error; :func:`xtpu.runtime.workers.run_workers` discards it.
"""

from __future__ import annotations

import re

__all__ = ["XtpuRuntimeError", "RuntimeTimeoutError", "HostComputeError", "Aborted"]

_CONTEXT_FIELDS = ("replica", "logical_core", "op", "key", "cluster", "location")


class XtpuRuntimeError(RuntimeError):
    """A failure while running a compiled program.

    Args:
        message: what went wrong, in the words of the program.
        replica: replica (or communicator participant) id, or None.
        logical_core: logical core within the replica, or None.
        op: op name such as ``"ccl.all_reduce"`` or ``"tpu.recv_at_host"``.
        key: channel key (``"host_compute_channel_0_args"``) or other name of
            the rendezvous involved.
        cluster: outside-compilation cluster name.
        location: user source line, ``"train.py:41"``.

    ``str(err)`` reads ``"replica 3, op ccl.all_reduce (at train.py:41):
    <message>"``; a context field already spelled out in the message is not
    repeated in the prefix. Fields can be filled in later by outer layers
    with :meth:`add_context` (e.g. the executor adds the op and location to an
    error raised by a communicator).
    """

    def __init__(
        self,
        message: str,
        *,
        replica: int | None = None,
        logical_core: int | None = None,
        op: str | None = None,
        key: str | None = None,
        cluster: str | None = None,
        location: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.replica = replica
        self.logical_core = logical_core
        self.op = op
        self.key = key
        self.cluster = cluster
        self.location = location

    def add_context(self, **fields) -> XtpuRuntimeError:
        """Set the context fields that are still None; returns ``self``.

        Accepts the keyword fields of the constructor (``replica``, ``op``,
        ``location``, ...). Fields that are already set are kept, so the
        innermost (most precise) layer wins. Unknown names raise TypeError.
        """
        for name, value in fields.items():
            if name not in _CONTEXT_FIELDS:
                raise TypeError(f"unknown error context field {name!r}")
            if getattr(self, name) is None and value is not None:
                setattr(self, name, value)
        return self

    def context_prefix(self) -> str:
        """The ``"replica 3, op ccl.all_reduce (at train.py:41)"`` part."""
        msg = self.message
        parts = []
        if self.replica is not None and not re.search(rf"\breplica {self.replica}\b", msg):
            parts.append(f"replica {self.replica}")
        if self.logical_core is not None:
            parts.append(f"logical core {self.logical_core}")
        if self.op is not None and self.op not in msg:
            parts.append(f"op {self.op}")
        if self.cluster is not None and f"'{self.cluster}'" not in msg:
            parts.append(f"cluster '{self.cluster}'")
        if self.key is not None and f"'{self.key}'" not in msg:
            parts.append(f"key '{self.key}'")
        prefix = ", ".join(parts)
        if self.location is not None:
            prefix = f"{prefix} (at {self.location})" if prefix else f"at {self.location}"
        return prefix

    def __str__(self) -> str:
        prefix = self.context_prefix()
        return f"{prefix}: {self.message}" if prefix else self.message


class RuntimeTimeoutError(XtpuRuntimeError):
    """A collective or channel waited longer than its timeout (seconds).

    The message names the participants that never arrived (collectives) or
    the channel key and replica that never received a message (channels).
    The timeout comes from the run's configuration, by default the
    ``XTPU_TIMEOUT`` environment variable (seconds, default 60.0).
    """


class HostComputeError(XtpuRuntimeError):
    """Host (outside-compilation) code raised an exception.

    The original exception is chained as ``__cause__``; build one with
    :meth:`from_exception` so that the message repeats the original type and
    text.
    """

    @classmethod
    def from_exception(cls, exc: BaseException, **context) -> HostComputeError:
        """Wrap ``exc`` (keeps it as ``__cause__``); ``context`` as in the
        constructor (``cluster=``, ``replica=``, ``location=``...)."""
        err = cls(f"host computation raised {type(exc).__name__}: {exc}", **context)
        err.__cause__ = exc
        return err


class Aborted(Exception):
    """The run was stopped because another worker failed.

    Raised by blocking waits (channels, collectives) when the run's
    :class:`~xtpu.runtime.workers.AbortSignal` is set. ``reason`` is the
    exception that caused the abort (may be None). Workers let it propagate;
    ``run_workers`` discards it in favour of the first real error.
    """

    def __init__(self, reason: BaseException | None = None) -> None:
        super().__init__(f"aborted because another worker failed: {reason!r}" if reason is not None else "aborted")
        self.reason = reason


class ReplicasDiverged(Exception):
    """Raised inside a sequential run (runtime/sequential.py) when the
    replicas disagree on an ``hlo.if`` predicate or an ``hlo.while``
    condition whose region holds a collective: the step is run again with a
    thread per replica, which gives today's results, errors and timeouts.
    Never reaches the user."""

    def __init__(self, op_name: str, preds: list) -> None:
        super().__init__(f"{op_name}: the replicas' predicates differ ({preds})")
