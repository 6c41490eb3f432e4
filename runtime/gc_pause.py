"""Python's cyclic garbage collector paused while a program is traced or
compiled, or while another thread's frame is read.

Tracing and compiling allocate IR objects (ops, values, uses, attributes)
by the hundred thousand and keep nearly all of them; every full collection
walks all of them again, so with the collector on, a compile's cost grows
faster than the program (a third of the time of a 10,000-op chain, and
more for 2,000 outside-compilation clusters, went to full collections
that freed nothing).  While paused, garbage with cycles waits for the next
collection after the compile; nothing is lost.

The pause is counted across threads: the collector is switched back on
when the last compile that paused it ends, and only if it was on before
(a program that disabled it keeps it disabled).

:func:`thread_frame` reads the frame another thread is executing with the
collector paused: in CPython 3.11 before 3.11.9, a collection that ran
inside ``sys._current_frames()`` (which allocates frame objects while it
holds the runtime's thread-list lock) could deadlock the whole process
against a thread ending (gh-106883: the lock and the GIL taken in opposite
orders); 3.11.9 pauses the collector there too.  It sits in the runtime,
the lowest layer that reads threads' frames (a run's timeout names where a
worker is stuck); the tracer pauses through the same counter.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Iterator
from types import FrameType

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused_gc(collect: bool = True) -> Iterator[None]:
    """Pause the cyclic garbage collector (``gc.disable``) for the block;
    ``collect``: the last one out collects the youngest generation (see
    below; a short pause that allocated little need not)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                # What the pause allocated is in the youngest generation,
                # which overflowed its threshold long ago: the first
                # allocation after gc.enable() would collect at once, and
                # a full collection if one was due.  Collect the youngest
                # generation here instead (its survivors move on, as they
                # would), and leave a full collection to the program's own
                # allocations after the compile.
                if collect:
                    gc.collect(0)
                gc.enable()


def thread_frame(ident: int | None) -> FrameType | None:
    """The frame thread ``ident`` is executing now (None: no such thread),
    read with the collector paused (see the module doc)."""
    if ident is None:
        return None
    with paused_gc(collect=False):
        return sys._current_frames().get(ident)
