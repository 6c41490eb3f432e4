"""glibc's malloc tuned for the arrays a step does not keep (``mallopt``).

By default glibc serves every allocation of more than 128 KB with a fresh
``mmap`` (the threshold grows only after such a block is freed); each new
page of such an array then faults in one by one.  Before buffer planning
(runtime/buffers.py) a step allocated every intermediate that way: 10
``tanh``-and-scale steps on 1e5 float32 at 8 replicas in one thread took
41 ms, 23 of them in the kernel, with 15,700 page faults a step.  Planned
steps write their intermediates into kept buffers and recycle their
outputs, so they fault no page in steady state whatever malloc does
(test_buffers.py measures it with malloc as glibc sets it); what is left to
malloc is what no op can write into a given array (results of ops without
an ``out_kernel``, collectives' results, values under 64 KB).

:func:`keep_heap` lets malloc serve those arrays up to 16 MB from its heap,
once per process, when xtpu first builds an executable;
``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` in the
environment (glibc's own settings) leave malloc as the user set it.  The
trim threshold is glibc's (xtpu set it to 64 MB before buffer planning so
that a freed step's heap was not given back).  No-op off glibc.
"""

from __future__ import annotations

import os

__all__ = ["keep_heap"]

# glibc's mallopt parameters (malloc.h).
_M_MMAP_THRESHOLD = -3

_done = False


def keep_heap() -> None:
    """Serve arrays up to 16 MB from the heap (module doc); once per process."""
    global _done
    if _done:
        return
    _done = True
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_TRIM_THRESHOLD_"):
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 16 << 20)
