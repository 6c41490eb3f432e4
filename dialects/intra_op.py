"""Intra-op parallelism of the contraction kernels: one large ``np.matmul``
split over a few threads of xtpu's own, each calling BLAS on one thread.

OpenBLAS's threads wait for each other spinning: when another process
holds one of this machine's 2 cores, a float32 [1024, 256] x [256, 1024]
matmul on 2 OpenBLAS threads took 31 ms against 14 ms on 1 thread, and
10 ms split in two halves over 2 threads of a pool whose waiting threads
block (load average 6).  ``benchmarks/transformer_block.py``'s R = 1
step went from 0.66-1.15 s to 0.10-0.12 s at load average 5 (JAX's:
0.08-0.14 s).  XLA's CPU backend splits its dots over Eigen's thread pool,
whose waiting threads block, the same way.

The runtime (``runtime/blas_budget.py``) sets :func:`set_parts` to the
threads a device worker may use while it runs a step, and holds BLAS at
one thread; a kernel then calls :func:`matmul`.  The split is along the
batch dimension, else the rows of the result, else its columns, into at
most ``parts`` pieces of equal size; each piece is the same BLAS call on
a slice, so the bits equal the unsplit call's where BLAS's own result does
not depend on the row count (OpenBLAS's sgemm/dgemm kernels: each output
element is one dot product accumulated in the same order).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = ["set_parts", "parts", "matmul"]

#: Below this many multiply-adds (about 0.5 ms on one core) a split costs
#: more than it saves: handing a piece to a pool thread and waiting for it
#: takes 20-50 us, holding BLAS at one thread 20 us a step, and OpenBLAS
#: runs small products on one thread anyway.  At 2M the MLP step of
#: x[64, 256] at R = 1 (4.2M per matmul) took 670 us instead of 272 us.
MIN_WORK = 1 << 25

_parts = 1
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_lock = threading.Lock()


def set_parts(n: int) -> int:
    """Split large matmuls into at most ``n`` pieces (1: no split); returns
    the previous value."""
    global _parts
    old, _parts = _parts, max(1, int(n))
    return old


def parts() -> int:
    """The current number of pieces (1: matmuls are not split)."""
    return _parts


def _executor(n: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    if _pool is None or _pool_size < n:
        with _lock:
            if _pool is None or _pool_size < n:
                _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="xtpu-intra-op")
                _pool_size = n
    return _pool


def _forget_pool() -> None:
    """In a forked child the pool's threads do not exist: start a new pool
    there (a piece handed to the old one would never run)."""
    global _pool, _pool_size, _lock
    _pool, _pool_size, _lock = None, 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _slices(size: int, n: int) -> list[slice]:
    step = -(-size // n)
    return [slice(a, min(a + step, size)) for a in range(0, size, step)]


def matmul(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(x, y, out=out)`` (2-D, or 3-D with a leading batch
    dimension on both), split over :func:`parts` threads when the product
    is large enough.  Same shapes, dtypes and errors as ``np.matmul``."""
    n = _parts
    if n <= 1 or x.ndim not in (2, 3) or x.ndim != y.ndim:
        return np.matmul(x, y, out=out)
    m, k = x.shape[-2], x.shape[-1]
    cols = y.shape[-1]
    batch = x.shape[0] if x.ndim == 3 else 1
    if batch * m * k * cols < MIN_WORK or y.shape[-2] != k or (x.ndim == 3 and y.shape[0] != batch):
        return np.matmul(x, y, out=out)
    if out is None:
        out = np.empty(x.shape[:-1] + (cols,), dtype=np.result_type(x, y))
    if x.ndim == 3 and batch >= n:
        pieces = [(x[s], y[s], out[s]) for s in _slices(batch, n)]
    elif m >= 2 * n:
        pieces = [(x[..., s, :], y, out[..., s, :]) for s in _slices(m, n)]
    elif cols >= 2 * n:
        pieces = [(x, y[..., s], out[..., s]) for s in _slices(cols, n)]
    else:
        return np.matmul(x, y, out=out)
    pool = _executor(n - 1)
    futures = [pool.submit(np.matmul, a, b, out=o) for a, b, o in pieces[1:]]
    try:
        a, b, o = pieces[0]
        np.matmul(a, b, out=o)
    finally:
        # A piece no pool thread has started yet (its thread waits for a
        # core another process holds) runs here instead of being waited
        # for, as a work-stealing pool's caller would: the split never
        # costs more than the caller doing every piece itself.
        for f, (a, b, o) in zip(futures, pieces[1:]):
            if f.cancel():
                np.matmul(a, b, out=o)
            else:
                f.result()
    return out
