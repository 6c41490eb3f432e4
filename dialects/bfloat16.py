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

Without numba (not installed, or ``XTPU_NO_NUMBA=1``) the same functions
fall back to ml_dtypes' ``astype`` and numpy's float32 ufuncs: the same
bits, slower.  test_bfloat16_kernels.py checks both against ml_dtypes on
every special value, ties, subnormals and random bits.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import BFloat16Type, Float32Type, TensorType

from xtpu.dialects.erf_f32 import ERF_P, ERF_Q

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


def _compile() -> dict[str, Callable[..., Any]]:
    """Import numba and compile the kernels (numba's on-disk cache makes a
    later process load them): about 2 s on this machine, 5-13 s under
    load, which is why it runs on a thread of its own (:func:`_get`)."""
    try:
        import numba
        from llvmlite import ir
        from numba import types
        from numba.extending import intrinsic
    except ImportError:  # pragma: no cover - numba is a dependency
        return {}

    @intrinsic
    def as_f32(typingctx, u):
        """The float32 whose bits are the low 32 bits of the integer ``u``."""
        if not isinstance(u, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            v = args[0]
            if u.bitwidth > 32:
                v = builder.trunc(v, ir.IntType(32))
            elif u.bitwidth < 32:
                v = builder.zext(v, ir.IntType(32))
            return builder.bitcast(v, ir.FloatType())

        return types.float32(u), codegen

    @intrinsic
    def as_u32(typingctx, f):
        """The bits of the float32 ``f``."""
        if f != types.float32:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.IntType(32))

        return types.uint32(f), codegen

    jit = numba.njit(inline="always")
    kernel = numba.njit(nogil=True, cache=True, error_model="numpy")
    U = np.uint32

    @jit
    def fast(b):
        # float32 bits -> bfloat16 bits for every float32 but a NaN: add
        # half an ulp less one, plus the kept part's last bit (ties to
        # even), and drop the low 16 bits.
        return np.uint16((b + U(0x7FFF) + ((b >> U(16)) & U(1))) >> U(16))

    @jit
    def nan(b):
        # A NaN: the quiet NaN with its sign (the sum above would carry a
        # NaN's payload into the exponent or the sign).
        return np.uint16(((b >> U(16)) & U(0x8000)) | U(0x7FC0))

    @jit
    def up(h):
        return as_f32(U(h) << U(16))

    @kernel
    def round_into(x, out):
        """x: float32[n] as uint32 bits; out: bfloat16[n] as uint16 bits."""
        n = x.size
        top = U(0)
        for i in range(n):
            b = x[i]
            out[i] = fast(b)
            top = max(top, b & U(0x7FFFFFFF))
        if top > U(0x7F800000):
            for i in range(n):
                b = x[i]
                if (b & U(0x7FFFFFFF)) > U(0x7F800000):
                    out[i] = nan(b)

    @jit
    def apply(op, x, y):
        if op == 0:
            return x + y
        if op == 1:
            return x - y
        if op == 2:
            return x * y
        return x / y

    @kernel
    def binary_into(op, a, c, out):
        """out = round(a op c) on bfloat16 bits (uint16): op 0 add, 1
        subtract, 2 multiply, 3 divide; a or c may hold one element (a
        broadcast scalar).  Each layout has its own loop, so that LLVM
        vectorises it."""
        n = out.size
        top = U(0)
        if a.size == n and c.size == n:
            for i in range(n):
                b = as_u32(apply(op, up(a[i]), up(c[i])))
                out[i] = fast(b)
                top = max(top, b & U(0x7FFFFFFF))
        elif a.size == n:
            y = up(c[0])
            for i in range(n):
                b = as_u32(apply(op, up(a[i]), y))
                out[i] = fast(b)
                top = max(top, b & U(0x7FFFFFFF))
        else:
            x = up(a[0])
            for i in range(n):
                b = as_u32(apply(op, x, up(c[i])))
                out[i] = fast(b)
                top = max(top, b & U(0x7FFFFFFF))
        if top > U(0x7F800000):
            sa = 1 if a.size == n else 0
            sc = 1 if c.size == n else 0
            for i in range(n):
                b = as_u32(apply(op, up(a[i * sa]), up(c[i * sc])))
                if (b & U(0x7FFFFFFF)) > U(0x7F800000):
                    out[i] = nan(b)

    @kernel
    def round_trip_into(x, out):
        """out = widen(round(x)), float32 bits (uint32) both; a NaN's
        rounding chosen per element (a select: one vectorised pass; out
        must not be x, whose aliasing check would keep the loop scalar)."""
        for i in range(x.size):
            b = x[i]
            h = nan(b) if (b & U(0x7FFFFFFF)) > U(0x7F800000) else fast(b)
            out[i] = U(h) << U(16)

    p0, p1, p2, p3, p4, p5, p6 = (np.float32(c) for c in ERF_P)
    q0, q1, q2, q3, q4 = (np.float32(c) for c in ERF_Q)
    lo, hi = np.float32(-4), np.float32(4)

    @jit
    def erf1(v):
        # erf_f32's steps on one float32, in its order (np.clip, Horner's
        # rule for P and Q, the quotient, times the clamped x).
        if v < lo:
            v = lo
        elif v > hi:
            v = hi
        x2 = v * v
        p = x2 * p0 + p1
        p = p * x2 + p2
        p = p * x2 + p3
        p = p * x2 + p4
        p = p * x2 + p5
        p = p * x2 + p6
        q = x2 * q0 + q1
        q = q * x2 + q2
        q = q * x2 + q3
        q = q * x2 + q4
        return (p / q) * v

    @kernel
    def erf_into(x, out):
        """out = erf(x), float32[n] both (out may be x)."""
        for i in range(x.size):
            out[i] = erf1(x[i])

    @kernel
    def erf_bf16_into(x, out):
        """out = round(erf(widen(x))), bfloat16 bits (uint16) both."""
        for i in range(x.size):
            b = as_u32(erf1(up(x[i])))
            out[i] = nan(b) if (b & U(0x7FFFFFFF)) > U(0x7F800000) else fast(b)

    # Compile (or load from numba's cache) the signatures xtpu calls.
    u32, u16, f32 = np.zeros(1, np.uint32), np.zeros(1, np.uint16), np.zeros(1, np.float32)
    round_into(u32, u16)
    binary_into(0, u16, u16, u16.copy())
    round_trip_into(u32, u32.copy())
    erf_into(f32, f32.copy())
    erf_bf16_into(u16, u16.copy())
    return {
        "round_into": round_into,
        "binary_into": binary_into,
        "round_trip_into": round_trip_into,
        "erf_into": erf_into,
        "erf_bf16_into": erf_bf16_into,
    }


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
    if os.environ.get("XTPU_NO_NUMBA") == "1":
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
    if os.environ.get("XTPU_NO_NUMBA") == "1":
        return {}
    k = _KERNELS
    if k is None:
        load(0)
        return {}
    return k


def compiled() -> bool:
    """Whether the numba kernels are in use now (else the ml_dtypes
    fallback; :func:`load` waits for them)."""
    return os.environ.get("XTPU_NO_NUMBA") != "1" and bool(_KERNELS)


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
