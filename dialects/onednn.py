"""bfloat16 matrix products on the CPU's bfloat16 dot-product unit, through
oneDNN's ``dnnl_gemm_bf16bf16f32`` (issue 28).

A TPU's matrix unit multiplies bfloat16 operands exactly and accumulates in
float32.  numpy has no bfloat16 GEMM; widening both operands to float32 and
calling numpy's float32 BLAS gives those semantics at float32's speed plus
the widening.  oneDNN (Intel's deep-learning kernel library, the one XLA's
and PyTorch's CPU backends call) has the same contraction on bfloat16
operands: on a CPU with AVX512_BF16 (this machine's) it runs
``vdpbf16ps``, two bfloat16 products added to a float32 accumulator per
lane, and reads half the bytes.  Measured here (one thread, load 0.3):
``[256, 512] @ [512, 512]`` 650 us against numpy's float32 1426 us on one
thread (732 us on two); ``[1024, 256] @ [256, 1024]`` 2.6 ms against 6.1 ms.
Below :data:`MIN_WORK` multiply-adds the call costs more than it saves and
the caller widens instead.

Semantics (docs/dtypes.md): products exact, sums in float32, so the result
equals the float32-accumulated reference wherever float32 accumulation is
exact, and otherwise differs from numpy's float32 BLAS only in the order of
the float32 additions (as a TPU's does).  ``vdpbf16ps`` treats bfloat16
subnormal inputs as zero and flushes subnormal float32 partial sums to zero
(Intel SDM, VDPBF16PS), as a TPU's matrix unit does; on a CPU without
AVX512_BF16 oneDNN converts to float32 and keeps subnormals.

One thread per call: the calling thread's OpenMP thread count (an OpenMP
ICV, per thread) is set to 1 before its first call, so oneDNN never starts
an OpenMP team whose waiting threads spin; large products are split over
xtpu's own threads by :mod:`xtpu.dialects.intra_op`, as float32's are.

The library is the ``onednn-cpu-gomp`` wheel's ``libdnnl.so.3`` (a
dependency on Linux x86-64), found under ``sys.prefix/lib``, the user
base's ``lib`` or the loader's path, or named by ``$XTPU_ONEDNN_LIBRARY``.
Without it (another platform, ``XTPU_NO_ONEDNN=1`` when xtpu is imported, a failed load) every
function here says so and the caller widens: the same semantics, slower.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import site
import sys
import threading
from typing import Any

import numpy as np

__all__ = ["MIN_WORK", "available", "gemm", "library", "one_thread"]

_log = logging.getLogger(__name__)

#: Multiply-adds below which a product is widened and given to numpy's
#: float32 BLAS instead: [64, 64] @ [64, 64] (262K) took 8.7 us here against
#: 5.6 + 2 x 1.5 us widened; [128, 64] @ [64, 128] (1M) 15.7 against 24 us.
MIN_WORK = 1 << 19

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p
_F32 = np.dtype(np.float32)

_lock = threading.Lock()
_gemm = None  # the ctypes function once loaded
_set_threads = None  # libgomp's omp_set_num_threads
_tried = False  # whether _load() has looked for the bfloat16 GEMM
_library = None  # libdnnl.so.3, once library() has loaded it
_library_tried = False
_tls = threading.local()

#: ``XTPU_NO_ONEDNN=1`` when xtpu was imported: every product widened for
#: numpy's BLAS.  Read once (an ``os.environ`` lookup costs about 1 us a
#: product); tests set this attribute.
DISABLED = os.environ.get("XTPU_NO_ONEDNN") == "1"


def _candidates() -> list[str]:
    named = os.environ.get("XTPU_ONEDNN_LIBRARY")
    if named:
        return [named]
    dirs = [os.path.join(sys.prefix, "lib")]
    user = getattr(site, "USER_BASE", None)
    if user:
        dirs.append(os.path.join(user, "lib"))
    paths = [os.path.join(d, "libdnnl.so.3") for d in dirs]
    found = ctypes.util.find_library("dnnl")
    return [p for p in paths if os.path.exists(p)] + ([found] if found else [])


def library() -> Any:
    """The loaded ``libdnnl.so.3`` (a ``ctypes.CDLL``), or None where it is
    not installed, not loadable or :data:`DISABLED`.  Loaded once, with the
    calling thread's OpenMP thread count set to 1 (see the module docstring);
    :mod:`xtpu.dialects.onednn_conv` shares it."""
    global _library, _library_tried, _set_threads
    if DISABLED:
        return None
    if _library_tried:
        return _library
    with _lock:
        if not _library_tried:
            for path in _candidates():
                try:
                    lib = ctypes.CDLL(path)
                    gomp = ctypes.CDLL("libgomp.so.1")  # the OpenMP runtime libdnnl.so.3 links
                except OSError as e:
                    _log.debug("oneDNN at %s not usable: %s", path, e)
                    continue
                gomp.omp_set_num_threads.argtypes = [ctypes.c_int]
                gomp.omp_set_num_threads(1)  # this thread's OpenMP ICV, as one_thread() sets it
                _tls.one_thread = True
                _library, _set_threads = lib, gomp.omp_set_num_threads
                break
            _library_tried = True
    return _library


def one_thread() -> None:
    """Set the calling thread's OpenMP thread count to 1 (once per thread),
    so that oneDNN starts no OpenMP team whose waiting threads spin; call
    before each oneDNN call from a thread that may be new."""
    if not getattr(_tls, "one_thread", False):
        _set_threads(1)
        _tls.one_thread = True


def _load() -> None:
    global _gemm, _tried
    lib = library()
    with _lock:
        if _tried:
            return
        if lib is not None:
            try:
                fn = lib.dnnl_gemm_bf16bf16f32
            except AttributeError as e:  # pragma: no cover - every oneDNN 3 exports it
                _log.debug("oneDNN has no bfloat16 GEMM: %s", e)
                fn = None
            if fn is not None:
                fn.argtypes = [ctypes.c_char, ctypes.c_char, _I64, _I64, _I64, ctypes.c_float, _PTR, _I64, _PTR, _I64]
                fn.argtypes += [ctypes.c_float, _PTR, _I64]
                fn.restype = ctypes.c_int
                if _runs(fn):
                    _gemm = fn
                else:
                    # oneDNN's bfloat16 GEMM needs AVX-512 (status 3,
                    # dnnl_unimplemented, on an AMD EPYC without it): products
                    # are then widened for numpy's BLAS, as without oneDNN.
                    _log.debug("oneDNN has no bfloat16 GEMM for this CPU")
        _tried = True


def _runs(fn: Any) -> bool:
    """Whether ``fn`` (``dnnl_gemm_bf16bf16f32``) computes a [1, 1] @ [1, 1]
    product on this CPU: it returns ``dnnl_unimplemented`` (3) where the
    CPU lacks the instructions its bfloat16 kernels need."""
    one = np.full((1, 1), 0x3F80, np.uint16)  # bfloat16 1.0
    out = np.zeros((1, 1), np.float32)
    status = fn(b"N", b"N", 1, 1, 1, 1.0, one.ctypes.data, 1, one.ctypes.data, 1, 0.0, out.ctypes.data, 1)
    return status == 0 and out[0, 0] == 1.0


def available() -> bool:
    """Whether oneDNN's bfloat16 GEMM is loaded and runs on this CPU
    (loading it and computing a [1, 1] product on the first call: about
    6 ms); False with ``XTPU_NO_ONEDNN=1`` (:data:`DISABLED`) or where the
    CPU lacks AVX-512 (:func:`_runs`)."""
    if DISABLED:
        return False
    if not _tried:
        _load()
    return _gemm is not None


def _layout(a: np.ndarray) -> tuple[bytes, int] | None:
    """(transpose flag, leading dimension) of a 2-D array for a row-major
    GEMM, or None when neither axis has unit stride."""
    item = a.itemsize
    s0, s1 = a.strides
    if s1 == item and s0 % item == 0 and (s0 // item >= a.shape[1] or a.shape[0] == 1):
        return b"N", max(s0 // item, a.shape[1], 1)
    if s0 == item and s1 % item == 0 and (s1 // item >= a.shape[0] or a.shape[1] == 1):
        return b"T", max(s1 // item, a.shape[0], 1)
    return None


def gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """``out = a @ b`` for bfloat16 ``a`` [M, K] and ``b`` [K, N] into the
    float32 ``out`` [M, N] (rows contiguous), products exact and sums in
    float32 (see the module docstring).  A transposed operand is read in
    place (GEMM's transpose flag); one with no unit-stride axis is copied.
    Returns False, doing nothing, when oneDNN is not :func:`available` or
    ``out``'s layout does not fit, so the caller computes it otherwise."""
    if not available():
        return False
    m, k = a.shape
    n = b.shape[1]
    if out.dtype != _F32 or out.shape != (m, n):
        return False
    if m == 0 or n == 0:
        return True
    if out.strides[1] != 4 or out.strides[0] % 4:
        return False
    if k == 0:
        out[...] = 0
        return True
    la, lb = _layout(a), _layout(b)
    if la is None:
        a = np.ascontiguousarray(a)
        la = (b"N", k)
    if lb is None:
        b = np.ascontiguousarray(b)
        lb = (b"N", n)
    one_thread()
    ldc = max(out.strides[0] // 4, n)
    status = _gemm(la[0], lb[0], m, n, k, 1.0, a.ctypes.data, la[1], b.ctypes.data, lb[1], 0.0, out.ctypes.data, ldc)
    if status != 0:
        raise RuntimeError(f"oneDNN dnnl_gemm_bf16bf16f32 failed with status {status} for [{m}, {k}] @ [{k}, {n}]")
    return True
