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
leading batch dimension (numpy's matmul of a stack is one BLAS call per
matrix, so the pieces make the same calls: attention's [8, 4, 128, 64]
products went from 1.45 to 0.85 ms on 2 threads), else the rows of the
result, else its columns, into at most ``parts`` pieces of equal size;
each piece is the same BLAS call on a slice, so the bits equal the
unsplit call's where BLAS's own result does not depend on the row count.
On this machine's OpenBLAS it does (its float32 GEMM rounds a row by its
place among the call's rows), so the split of rows or columns is the
unsplit product within float rounding, and a batch split is bit for bit.
:func:`run_pieces` runs any such split (a fusion region's rows,
runtime/fusion.py).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from xtpu.dialects import bfloat16 as B16
from xtpu.dialects import onednn

__all__ = ["set_parts", "parts", "matmul", "run_pieces", "slices"]

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


def slices(size: int, n: int) -> list[slice]:
    """``range(size)`` in at most ``n`` consecutive pieces of equal size
    (the last may be smaller)."""
    step = -(-size // n)
    return [slice(a, min(a + step, size)) for a in range(0, size, step)]


def run_pieces(fn: Callable[..., Any], pieces: Sequence[tuple]) -> None:
    """``fn(*piece)`` for each of ``pieces``: the first on the calling
    thread, the others on the pool's threads; returns when all have run,
    raising the first piece's error (else another's)."""
    pool = _executor(len(pieces) - 1)
    futures = [pool.submit(fn, *p) for p in pieces[1:]]
    try:
        fn(*pieces[0])
    finally:
        # A piece no pool thread has started yet (its thread waits for a
        # core another process holds) runs here instead of being waited
        # for, as a work-stealing pool's caller would: the split never
        # costs more than the caller doing every piece itself.
        for f, p in zip(futures, pieces[1:]):
            if f.cancel():
                fn(*p)
            else:
                f.result()


def _matmul_into(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    np.matmul(x, y, out=out)


def _bf16_into(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    """bfloat16 ``x @ y`` (2-D, or 3-D with a batch dimension) into the
    float32 ``out`` through oneDNN, one GEMM per matrix of the batch."""
    if x.ndim == 2:
        if not onednn.gemm(x, y, out):  # pragma: no cover - out is always a slice of a C-contiguous array
            np.matmul(B16.widen(x), B16.widen(y), out=out)
        return
    for i in range(x.shape[0]):
        _bf16_into(x[i], y[i], out[i])


def matmul(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(x, y, out=out)`` (matrices, or stacks of them with the
    same batch dimensions on both sides), split over :func:`parts` threads
    when the product is large enough.  Same shapes, dtypes and errors as ``np.matmul``,
    except that bfloat16 operands give a float32 product (TPU arithmetic:
    exact products, float32 sums): through oneDNN's bfloat16 GEMM
    (:mod:`xtpu.dialects.onednn`) when it is available and each matrix has
    at least :data:`xtpu.dialects.onednn.MIN_WORK` multiply-adds, else
    widened to float32 for numpy's BLAS."""
    kernel = _matmul_into
    if x.dtype == B16.BF16 and y.dtype == B16.BF16:
        per_matrix = x.shape[-2] * x.shape[-1] * y.shape[-1]
        if x.ndim not in (2, 3) or x.ndim != y.ndim or per_matrix < onednn.MIN_WORK or not onednn.available():
            return matmul(B16.widen(x), B16.widen(y), out=out)
        if x.ndim == 3 and y.shape[0] != x.shape[0]:
            raise ValueError(f"matmul: batch dimensions {x.shape[0]} and {y.shape[0]} differ")
        if y.shape[-2] != x.shape[-1]:
            raise ValueError(f"matmul: contracting dimensions {x.shape[-1]} and {y.shape[-2]} differ")
        if out is None:
            out = np.empty(x.shape[:-1] + (y.shape[-1],), np.float32)
        elif out.dtype != np.float32 or out.shape != x.shape[:-1] + (y.shape[-1],) or not out.flags.c_contiguous:
            o = np.empty(x.shape[:-1] + (y.shape[-1],), np.float32)
            matmul(x, y, out=o)
            np.copyto(out, o, casting="unsafe")
            return out
        kernel = _bf16_into
    n = _parts
    if n <= 1 or x.ndim < 2 or x.ndim != y.ndim or x.shape[:-2] != y.shape[:-2]:
        return _whole(kernel, x, y, out)
    m, k = x.shape[-2], x.shape[-1]
    cols = y.shape[-1]
    batch = math.prod(x.shape[:-2])
    if batch * m * k * cols < MIN_WORK or y.shape[-2] != k:
        return _whole(kernel, x, y, out)
    if out is None:
        out = np.empty(x.shape[:-1] + (cols,), dtype=np.result_type(x, y))
    if x.ndim >= 3 and x.shape[0] >= n:
        # numpy's matmul of a stack is one BLAS call per matrix: pieces of
        # the stack make the same calls.
        pieces = [(x[s], y[s], out[s]) for s in slices(x.shape[0], n)]
    elif m >= 2 * n:
        pieces = [(x[..., s, :], y, out[..., s, :]) for s in slices(m, n)]
    elif cols >= 2 * n:
        pieces = [(x, y[..., s], out[..., s]) for s in slices(cols, n)]
    else:
        return _whole(kernel, x, y, out)
    run_pieces(kernel, pieces)
    return out


def _whole(kernel, x: np.ndarray, y: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """The product in one call of ``kernel`` (numpy's own ``matmul`` for
    float32 and the other dtypes, errors and all)."""
    if kernel is _matmul_into:
        return np.matmul(x, y, out=out)
    kernel(x, y, out)
    return out
