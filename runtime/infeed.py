"""Host-to-device infeed queues: one bounded queue per replica.

``xtpu.InfeedQueue`` (TF's ``tpu_feed.InfeedQueue``) registers a
:class:`Infeed` here when its configuration is frozen; its enqueue
operations put one tuple into a replica's queue, and the runtime's kernel of
``tpu.infeed_dequeue_tuple`` takes the next one for its replica.  A queue
holds at most ``capacity`` tuples, so a producer thread can enqueue step
``k + 1`` while step ``k`` computes and is held back when it runs ahead.

Waiting is bounded: a dequeue on an empty queue waits up to the run's
timeout (``XTPU_TIMEOUT``) and raises :class:`RuntimeTimeoutError` naming
the replica and the queue; it also stops when another worker of the run
failed.  An enqueue into a full queue waits up to its timeout the same way.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xtpu.runtime.errors import Aborted, RuntimeTimeoutError
from xtpu.runtime.workers import resolve_timeout

_POLL = 0.05  # seconds between checks of the abort signal while waiting

_registry: weakref.WeakValueDictionary[str, Infeed] = weakref.WeakValueDictionary()
_names = itertools.count(1)
_lock = threading.Lock()


class Infeed:
    """The per-replica queues of one infeed.

    Attributes:
      key: the name ``tpu.infeed_dequeue_tuple`` refers to (``"<name>#<n>"``).
      shapes, dtypes: what each tuple element must be (per replica).
    """

    def __init__(
        self, name: str, num_replicas: int, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[str], capacity: int = 2
    ):
        if capacity < 1:
            raise ValueError(f"infeed capacity must be at least 1, got {capacity}")
        with _lock:
            self.key = f"{name}#{next(_names)}"
            _registry[self.key] = self
        self.name = name
        self.shapes = [tuple(s) for s in shapes]
        self.dtypes = [np.dtype(d) for d in dtypes]
        self.queues = [queue.Queue(maxsize=capacity) for _ in range(num_replicas)]

    def check(self, replica: int, values: Sequence[Any]) -> list[np.ndarray]:
        """``values`` as arrays, checked against the configuration.

        Raises:
          ValueError: a wrong number of elements, a shape or dtype that
            differs from the frozen configuration (names the replica, the
            element and the queue).
        """
        if not 0 <= replica < len(self.queues):
            raise ValueError(f"infeed '{self.name}' has {len(self.queues)} replica queues, got replica {replica}")
        if len(values) != len(self.shapes):
            raise ValueError(
                f"infeed '{self.name}', replica {replica}: a tuple has {len(self.shapes)} elements, got {len(values)}"
            )
        out = []
        for i, (v, shape, dtype) in enumerate(zip(values, self.shapes, self.dtypes)):
            a = np.asarray(v)
            if a.shape != shape or a.dtype != dtype:
                raise ValueError(
                    f"infeed '{self.name}', replica {replica}: tuple element {i} must be {dtype.name}{list(shape)} "
                    f"(the frozen configuration), got {a.dtype.name}{list(a.shape)}"
                )
            out.append(a)
        return out

    def put(self, replica: int, values: Sequence[Any], timeout: float | None = None) -> None:
        """Enqueue one tuple for ``replica`` (TF's ``InfeedEnqueueTuple``),
        waiting up to ``timeout`` seconds (default: the runtime timeout)
        while its queue is full."""
        arrays = self.check(replica, values)
        try:
            self.queues[replica].put(arrays, timeout=resolve_timeout(timeout))
        except queue.Full:
            raise RuntimeTimeoutError(
                f"infeed '{self.name}': replica {replica}'s queue stayed full for {resolve_timeout(timeout)} s "
                "(no step dequeued from it)",
                replica=replica,
                key=self.name,
            ) from None

    def dequeue_kernel(self, replica: int, timeout: float, abort: Any) -> Callable[[], Any]:
        """The kernel of ``tpu.infeed_dequeue_tuple`` for ``replica``'s worker."""
        q, name = self.queues[replica], self.name

        def run():
            deadline = time.monotonic() + timeout
            while True:
                try:
                    values = q.get(timeout=_POLL)
                except queue.Empty:
                    if abort is not None and abort.is_set:
                        raise Aborted(abort.exception) from None
                    if time.monotonic() >= deadline:
                        raise RuntimeTimeoutError(
                            f"timed out after {timeout} s waiting for a tuple in infeed queue '{name}' "
                            "(nothing was enqueued for this replica)",
                            replica=replica,
                            op="tpu.infeed_dequeue_tuple",
                            key=name,
                        ) from None
                    continue
                return values[0] if len(values) == 1 else tuple(values)

        return run

    def pending(self) -> list[int]:
        """Tuples waiting in each replica's queue."""
        return [q.qsize() for q in self.queues]


def lookup(key: str, replica: int) -> Infeed:
    """The infeed ``tpu.infeed_dequeue_tuple`` names.

    Raises:
      ValueError: no live InfeedQueue of this process has that key (it was
        collected, or the module comes from elsewhere: only the process that
        made an InfeedQueue can feed it), or it has too few replica queues.
    """
    infeed = _registry.get(key)
    if infeed is None:
        raise ValueError(
            f"tpu.infeed_dequeue_tuple: no infeed queue '{key}' in this process (an InfeedQueue feeds the "
            "programs compiled in the process that made it, while it exists)"
        )
    if replica >= len(infeed.queues):
        raise ValueError(
            f"tpu.infeed_dequeue_tuple: infeed queue '{key}' has {len(infeed.queues)} replica queues, "
            f"replica {replica} has none"
        )
    return infeed
