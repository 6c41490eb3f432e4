"""The numba kernels of :mod:`xtpu.dialects.bfloat16` (and of ``hlo.erf``),
at module level so that numba's on-disk cache serves a later process (a
closure's cache key pickles the functions it closes over, which differ in
every process: each process compiled them again, 2 s, and added files to
the cache).  Imported only by :mod:`xtpu.dialects.bfloat16`'s loader
thread: importing numba costs 0.5-1 s, which ``import xtpu`` does not pay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from xtpu.dialects.erf_f32 import ERF_P, ERF_Q

__all__ = ["compiled_kernels"]


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


#: Elements a kernel computes into a local block before copying it out.
#: A kernel whose ``out`` is one of its operands (an op written in place,
#: as the plan's buffers and fused kernels do) would otherwise fail LLVM's
#: runtime overlap check and run its scalar loop: 10-12x slower (a
#: bfloat16 multiply of 262K elements 666 against 67 us, a float32 erf
#: 1263 against 102 us).  The local block never overlaps, so every loop
#: vectorises, in place or not; it stays in L1.
BLOCK = 2048


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _binary_block(op, a, c, tmp):
    """tmp = round(a op c) for one block (a, c: the block's slices or one
    element); the largest |bits| of the float32 results."""
    n = tmp.size
    top = U(0)
    if a.size == n and c.size == n:
        for i in range(n):
            b = as_u32(apply(op, up(a[i]), up(c[i])))
            tmp[i] = fast(b)
            top = max(top, b & U(0x7FFFFFFF))
    elif a.size == n:
        y = up(c[0])
        for i in range(n):
            b = as_u32(apply(op, up(a[i]), y))
            tmp[i] = fast(b)
            top = max(top, b & U(0x7FFFFFFF))
    else:
        x = up(a[0])
        for i in range(n):
            b = as_u32(apply(op, x, up(c[i])))
            tmp[i] = fast(b)
            top = max(top, b & U(0x7FFFFFFF))
    if top > U(0x7F800000):
        sa = 1 if a.size == n else 0
        sc = 1 if c.size == n else 0
        for i in range(n):
            b = as_u32(apply(op, up(a[i * sa]), up(c[i * sc])))
            if (b & U(0x7FFFFFFF)) > U(0x7F800000):
                tmp[i] = nan(b)
    return top


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _copy(src, dst):
    for i in range(src.size):
        dst[i] = src[i]


@kernel
def binary_into(op, a, c, out):
    """out = round(a op c) on bfloat16 bits (uint16): op 0 add, 1
    subtract, 2 multiply, 3 divide; a or c may hold one element (a
    broadcast scalar); out may be a or c.  Each layout has its own loop,
    so that LLVM vectorises it; a block is written out once it is whole,
    NaNs mended (out may be an operand)."""
    n = out.size
    sa = a.size == n
    sc = c.size == n
    tmp = np.empty(min(n, BLOCK), np.uint16)
    for s in range(0, n, BLOCK):
        m = min(BLOCK, n - s)
        _binary_block(op, a[s : s + m] if sa else a[:1], c[s : s + m] if sc else c[:1], tmp[:m])
        _copy(tmp[:m], out[s : s + m])


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


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _erf_block(x, tmp):
    for i in range(x.size):
        tmp[i] = erf1(x[i])


@kernel
def erf_into(x, out):
    """out = erf(x), float32[n] both (out may be x: blocks, BLOCK)."""
    n = x.size
    tmp = np.empty(min(n, BLOCK), np.float32)
    for s in range(0, n, BLOCK):
        m = min(BLOCK, n - s)
        _erf_block(x[s : s + m], tmp[:m])
        _copy(tmp[:m], out[s : s + m])


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _erf_bf16_block(x, tmp):
    for i in range(x.size):
        b = as_u32(erf1(up(x[i])))
        tmp[i] = nan(b) if (b & U(0x7FFFFFFF)) > U(0x7F800000) else fast(b)


@kernel
def erf_bf16_into(x, out):
    """out = round(erf(widen(x))), bfloat16 bits (uint16) both (out may
    be x: blocks, BLOCK)."""
    n = x.size
    tmp = np.empty(min(n, BLOCK), np.uint16)
    for s in range(0, n, BLOCK):
        m = min(BLOCK, n - s)
        _erf_bf16_block(x[s : s + m], tmp[:m])
        _copy(tmp[:m], out[s : s + m])


def compiled_kernels() -> dict[str, Callable[..., Any]]:
    """The kernels by name, compiled for (or loaded from numba's cache with)
    the signatures xtpu calls."""
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
