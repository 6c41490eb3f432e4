"""The bit ops of dialects/hlo_bits.py (xor, shifts, bitcast_convert)
against JAX's ``lax`` ops on XLA (the reference), eagerly through
``call_stablehlo`` and compiled, exported and run by XLA's CPU client,
including StableHLO's shifts by an amount at least the bit width."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import xla_reference as X  # noqa: E402  (before jax: 8 CPU devices)

jax = pytest.importorskip("jax")
lax = jax.lax

import xtpu  # noqa: E402
from xtpu.experimental import call_stablehlo  # noqa: E402

DTYPES = [np.uint32, np.int32, np.int64, np.uint64, np.int8, np.uint16]


def _operands(dtype):
    info = np.iinfo(dtype)
    bits = info.bits
    a = np.array([0, 1, 5, info.max, info.min, info.max // 3, 7, 12345 % (info.max + 1)] * 2, dtype)
    n = np.array([0, 1, 3, bits - 1, bits, bits + 1, 2 * bits, 1] + [0, 2, bits - 2, 1, 5, bits, 3, 4], dtype)
    if info.min < 0:
        n[-1] = -1  # read as unsigned: huge
    return a, n


def _program(dtype):
    def f(a, n):
        return (
            lax.bitwise_xor(a, n),
            lax.shift_left(a, n),
            lax.shift_right_logical(a, n),
            lax.shift_right_arithmetic(a, n),
        )

    a, n = _operands(dtype)
    with jax.enable_x64(True):
        text = jax.jit(f).lower(a, n).as_text()
        want = [np.asarray(v) for v in jax.jit(f)(a, n)]
    return text, (a, n), want


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_xor_and_shifts_equal_xla_eagerly_and_exported(dtype):
    text, (a, n), want = _program(dtype)
    assert "stablehlo.shift_right_arithmetic" in text and "stablehlo.xor" in text
    got = call_stablehlo(text, a, n)
    for g, w, name in zip(got, want, ["xor", "shift_left", "shift_right_logical", "shift_right_arithmetic"]):
        np.testing.assert_array_equal(np.asarray(g), w, err_msg=name)
        assert np.asarray(g).dtype == w.dtype
    # Traced, compiled, exported back to StableHLO and run by XLA.
    compiled = xtpu.lower(lambda a, n: call_stablehlo(text, a, n), [[a, n], [n, a]]).compile()
    X.check_against_xtpu(compiled, [[a, n], [n, a]])


def test_bitcast_convert_equals_xla():
    # No subnormals: XLA's CPU client flushes them to zero in arithmetic (numpy does not).
    u = np.array([0x3F800000, 0x7F800000, 0xFFC00000, 0x00800000, 0x80000000, 0x40490FDB], np.uint32)
    i = np.array([-1, 0, 1 << 62, -(1 << 63)], np.int64)

    def f(u, i):
        return (
            lax.bitcast_convert_type(u, np.float32),
            lax.bitcast_convert_type(i, np.uint64),
            lax.bitcast_convert_type(lax.bitcast_convert_type(u, np.float32) * 2, np.int32),
        )

    with jax.enable_x64(True):
        text = jax.jit(f).lower(u, i).as_text()
        want = [np.asarray(v) for v in jax.jit(f)(u, i)]
    got = call_stablehlo(text, u, i)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g).view(w.dtype), w)
        assert np.asarray(g).dtype == w.dtype
    compiled = xtpu.lower(lambda u, i: call_stablehlo(text, u, i), [[u, i]]).compile()
    X.check_against_xtpu(compiled, [[u, i]])


def test_bit_ops_have_no_gradient():
    """Integer results: like TF's BitwiseXor / LeftShift / Bitcast, none."""
    text, (a, n), _ = _program(np.uint32)
    x = xtpu.constant(np.ones(4, np.float32))

    def f(x):
        bits = call_stablehlo(text, a, n)[0]
        return xtpu.reduce_sum(x * xtpu.cast(bits[:4], xtpu.float32))

    with xtpu.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    np.testing.assert_array_equal(np.asarray(tape.gradient(y, x)), (a[:4] ^ n[:4]).astype(np.float32))
