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
once per process, when xtpu first builds an executable, and keeps up to
32 MB of free memory at a heap's top instead of giving it back: the pair
glibc's own adjustment sets (a threshold that grows to ``t`` makes the trim
threshold ``2 t``), which a fixed ``M_MMAP_THRESHOLD`` turns off, leaving
the trim threshold at 128 KB.  The step's planned buffers are not in the
heap (runtime/buffers.py's ``kept_array``), so what sits at a heap's top
between calls is the short-lived arrays of the last call: given back at
128 KB, the 8-replica transformer block step of
``benchmarks/transformer_block.py`` faulted them in again every step,
3,000-3,300 faults; kept, 2-4.  ``MALLOC_MMAP_THRESHOLD_`` or
``MALLOC_TRIM_THRESHOLD_`` in the environment (glibc's own settings) leave
malloc as the user set it.  No-op off glibc.
"""

from __future__ import annotations

import os

__all__ = ["keep_heap"]

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Arrays up to this size come from malloc's heap.
MMAP_THRESHOLD = 16 << 20

_done = False


def keep_heap() -> None:
    """Serve arrays up to 16 MB from the heap and keep twice that free at
    its top (module doc); once per process."""
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
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD)
