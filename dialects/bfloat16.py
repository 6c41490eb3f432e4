"""bfloat16 kernels at float32 speed: rounding to bfloat16 and the
arithmetic ops on bfloat16 (issue 28).

numpy has no bfloat16 arithmetic of its own: ml_dtypes' ``astype`` rounds a
float32 to bfloat16 element by element (0.4 ns an element here, 5x a
float32 add), and its bfloat16 ufuncs are slower still.  The kernels here
are compiled with numba (LLVM, vectorised) and give the same bits:

* :func:`round_f32` -- float32 to bfloat16, to nearest, ties to even, a NaN
  to the quiet NaN ``0x7FC0`` with the NaN's sign (ml_dtypes' and Eigen's
  ``float -> bfloat16``, which JAX and TF use); 0.1 ns an element;
* :func:`binary` -- ``add``, ``subtract``, ``multiply``, ``divide`` of
  bfloat16 operands: each element widened to float32 (exactly), the float32
  operation (IEEE, no contraction), rounded once -- XLA's float
  normalization of one HLO op -- in one pass;
* :func:`widen` -- bfloat16 / float16 to float32, a broadcast operand
  widened once per distinct element (ml_dtypes' cast of a stride-0 view
  runs element by element: 290 us for a bfloat16 ``[256, 512]`` of ones);
* :func:`round_trip` -- float32 to bfloat16 and back to float32 (the bits
  of the two converts, XLA keeps both) in one pass, at the cost of a copy:
  a fused region's ``convert(convert(x, bf16), f32)`` whose bfloat16 value
  nothing else reads (:func:`round_trip_pairs`).

Without numba (not installed, or ``XTPU_NO_NUMBA=1`` when xtpu is imported) the same functions
fall back to ml_dtypes' ``astype`` and numpy's float32 ufuncs: the same
bits, slower.  test_bfloat16_kernels.py checks both against ml_dtypes on
every special value, ties, subnormals and random bits.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import BFloat16Type, Float32Type, TensorType

__all__ = [
    "BF16",
    "binary",
    "round_f32",
    "round_trip",
    "round_trip_pairs",
    "widen",
    "BINARY_UFUNCS",
    "compiled",
    "erf",
    "load",
]

_log = logging.getLogger(__name__)

BF16 = np.dtype(ml_dtypes.bfloat16)
_F32 = np.dtype(np.float32)
_U16 = np.dtype(np.uint16)

#: The ufuncs :func:`binary` computes in one pass, by opcode.
BINARY_UFUNCS: dict[Any, int] = {np.add: 0, np.subtract: 1, np.multiply: 2, np.true_divide: 3, np.divide: 3}


#: The module of the numba kernels, imported by the loader thread only
#: (importing numba costs 0.5-1 s; ``import xtpu`` does not pay it).
KERNELS_MODULE = "xtpu.dialects.bfloat16_kernels"


def _compile() -> dict[str, Callable[..., Any]]:
    """Import numba and compile the kernels, or load them from numba's
    on-disk cache (a later process: about 0.5 s with numba's import; the
    first compile about 2 s on this machine, 5-13 s under load), which is
    why it runs on a thread of its own (:func:`_get`)."""
    try:
        kernels = importlib.import_module(KERNELS_MODULE)
    except ImportError:  # pragma: no cover - numba is a dependency
        return {}
    return kernels.compiled_kernels()


#: ``XTPU_NO_NUMBA=1`` when xtpu was imported: the ml_dtypes fallback.  Read
#: once (an ``os.environ`` lookup costs about 1 us, and the kernels ask on
#: every call: 5 ms a step of the mixed transformer example); tests set
#: this attribute.
NO_NUMBA = os.environ.get("XTPU_NO_NUMBA") == "1"

_KERNELS: dict[str, Callable[..., Any]] | None = None  # None: not loaded yet
_loader: threading.Thread | None = None
_loader_lock = threading.Lock()


def _load() -> None:
    global _KERNELS
    try:
        kernels = _compile()
    except Exception:  # pragma: no cover - a broken numba install: the fallback, same bits
        _log.warning("bfloat16: numba kernels unavailable, using ml_dtypes' (same bits, slower)", exc_info=True)
        kernels = {}
    _KERNELS = kernels


def load(timeout: float | None = None) -> bool:
    """Start loading the compiled kernels if not started, wait up to
    ``timeout`` seconds (None: until done) and return :func:`compiled`."""
    global _loader
    if NO_NUMBA:
        return False
    with _loader_lock:
        if _KERNELS is None and _loader is None:
            _loader = threading.Thread(target=_load, name="xtpu-bfloat16-numba", daemon=True)
            _loader.start()
        t = _loader
    if t is not None:
        t.join(timeout)
    return compiled()


def _get() -> dict[str, Callable[..., Any]]:
    """The compiled kernels; {} without numba, with ``XTPU_NO_NUMBA=1``, or
    while they load: the first bfloat16 op starts loading them on a thread
    and takes the ml_dtypes fallback (the same bits) until they are in, so
    no op waits for numba (importing it and loading the kernels took 2 s
    here, 5-13 s under load: every ``import xtpu`` paid the import before)."""
    if NO_NUMBA:
        return {}
    k = _KERNELS
    if k is None:
        load(0)
        return {}
    return k


def compiled() -> bool:
    """Whether the numba kernels are in use now (else the ml_dtypes
    fallback; :func:`load` waits for them)."""
    return not NO_NUMBA and bool(_KERNELS)


def _forget_loader() -> None:
    """A forked child has no loader thread: it starts its own if needed."""
    global _loader, _loader_lock
    _loader, _loader_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_loader)


def _flat(x: np.ndarray) -> np.ndarray | None:
    """``x`` as a 1-D array without a copy (C-contiguous), else None."""
    return x.reshape(-1) if x.flags.c_contiguous else None


def round_f32(x: Any, out: np.ndarray | None = None) -> np.ndarray:
    """float32 ``x`` rounded to bfloat16 (to nearest, ties to even; ml_dtypes'
    bits), into ``out`` (a bfloat16 array of ``x``'s shape) when given."""
    x = np.asarray(x, dtype=_F32)
    if out is None:
        out = np.empty(x.shape, BF16)
    k = _get().get("round_into")
    src, dst = _flat(x), _flat(out)
    if k is None or src is None or dst is None or x.shape != out.shape:
        np.copyto(out, x, casting="unsafe")
        return out
    k(src.view(np.uint32), dst.view(_U16))
    return out


def round_trip(x: Any, out: np.ndarray | None = None) -> np.ndarray:
    """float32 ``x`` rounded to bfloat16 and widened back to float32 (the
    bits of ``convert(convert(x, bfloat16), float32)``, a NaN quiet with its
    sign), into ``out`` (a float32 array of ``x``'s shape, not ``x``) when
    given: one pass instead of two and no bfloat16 temporary."""
    x = np.asarray(x, dtype=_F32)
    if out is None:
        out = np.empty(x.shape, _F32)
    k = _get().get("round_trip_into")
    src, dst = _flat(x), _flat(out)
    if k is None or src is None or dst is None or x.shape != out.shape or np.shares_memory(x, out):
        np.copyto(out, round_f32(x), casting="unsafe")
        return out
    k(src.view(np.uint32), dst.view(np.uint32))
    return out


def round_trip_pairs(ops: list[Any], yielded: Any) -> dict[Any, Any]:
    """In a fused region's body ``ops`` (``yielded``: the values the region
    yields), each ``hlo.convert`` from bfloat16 to float32 whose operand is
    an ``hlo.convert`` of a float32 value to bfloat16 that nothing else
    reads: ``{second convert: first convert}``.  The pair is one
    :func:`round_trip` (the runtime runs it so, runtime/fusion.py)."""
    inside = set(ops)
    pairs = {}
    for o in ops:
        if o.name != "hlo.convert" or not (_elem(o.results[0], Float32Type) and _elem(o.operands[0], BFloat16Type)):
            continue
        first = o.operands[0].owner
        if first not in inside or first.name != "hlo.convert" or not _elem(first.operands[0], Float32Type):
            continue
        v = first.results[0]
        if v in yielded or any(u.operation is not o for u in v.uses):
            continue
        pairs[o] = first
    return pairs


def _elem(v: Any, kind: type) -> bool:
    """Whether ``v`` is a tensor of ``kind`` elements."""
    return isinstance(v.type, TensorType) and isinstance(v.type.element_type, kind)


def widen(x: Any) -> np.ndarray:
    """A bfloat16 / float16 array as float32 (exact); a broadcast view (a
    stride-0 axis) is widened once per distinct element and broadcast back."""
    x = np.asarray(x)
    if x.ndim and 0 in x.strides and x.size > 1:
        base = x[tuple(slice(0, 1) if s == 0 else slice(None) for s in x.strides)]
        return np.broadcast_to(base.astype(_F32), x.shape)
    return x.astype(_F32)


def _operand_bits(x: np.ndarray, n: int) -> np.ndarray | None:
    """A bfloat16 operand's bits as a 1-D uint16 array of ``n`` elements or
    of one (a scalar broadcast), else None."""
    if x.size == n and x.flags.c_contiguous:
        return x.reshape(-1).view(_U16)
    if x.size == 1 or (x.ndim and not any(x.strides)):  # one element, or one broadcast
        return np.asarray(x[(0,) * x.ndim]).reshape(1).view(_U16)
    return None


def binary(ufunc: Any, a: Any, b: Any, out: np.ndarray | None = None) -> np.ndarray:
    """``ufunc(a, b)`` on bfloat16 operands as XLA computes one op: widened to
    float32, the float32 result rounded once to bfloat16 (into ``out`` when
    given).  ``ufunc`` is any float32 ufunc; those of :data:`BINARY_UFUNCS`
    run in one pass over contiguous operands (or a broadcast scalar)."""
    a, b = np.asarray(a), np.asarray(b)
    shape = np.broadcast_shapes(a.shape, b.shape)
    if out is None:
        out = np.empty(shape, BF16)
    if out.size == 0:
        return out
    op = BINARY_UFUNCS.get(ufunc)
    k = _get().get("binary_into")
    if k is not None and op is not None and a.dtype == b.dtype == BF16 and out.flags.c_contiguous:
        n = out.size
        ab, bb = _operand_bits(a, n), _operand_bits(b, n)
        if ab is not None and bb is not None and out.shape == shape and not (ab.size == 1 and n != 1 and bb.size == 1):
            k(op, ab, bb, out.reshape(-1).view(_U16))
            return out
    return round_f32(ufunc(widen(a), widen(b)), out=out)


def erf(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
    """erf of a float32 or bfloat16 array by :func:`xtpu.dialects.erf_f32.erf_f32`'s
    steps (bfloat16: widened, the float32 erf rounded once), in one
    compiled pass, into ``out`` (``x``'s shape and dtype; may be ``x``)
    when given; None when the compiled kernels are not in or ``x`` / ``out``
    is not contiguous (the caller computes it with numpy: the same bits)."""
    name = "erf_into" if x.dtype == _F32 else "erf_bf16_into" if x.dtype == BF16 else None
    k = _get().get(name) if name is not None else None
    if k is None:
        return None
    if out is None:
        out = np.empty(x.shape, x.dtype)
    src, dst = _flat(x), _flat(out)
    if src is None or dst is None or out.shape != x.shape or out.dtype != x.dtype:
        return None
    if x.dtype == BF16:
        src, dst = src.view(_U16), dst.view(_U16)
    k(src, dst)
    return out
