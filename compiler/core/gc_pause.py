"""The cyclic collector's pause (:mod:`xtpu.runtime.gc_pause`, where the
runtime's reads of other threads' frames pause it too): one counter for the
whole process."""

from xtpu.runtime.gc_pause import paused_gc, thread_frame

__all__ = ["paused_gc", "thread_frame"]
