"""The compiled bfloat16 kernels (xtpu.dialects.bfloat16) give ml_dtypes'
bits: float32 -> bfloat16 rounding (to nearest, ties to even; a NaN to the
quiet NaN with its sign) against ml_dtypes' ``astype`` (Eigen's rounding),
and the one-pass add / subtract / multiply / divide against numpy's float32
ufunc rounded by ml_dtypes (XLA's float normalization of one op) and
against ml_dtypes' own bfloat16 ufuncs, on every special value, ties,
subnormals and random bit patterns; the numpy fallback gives the same bits.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import xtpu
from xtpu.dialects import bfloat16 as B16
from xtpu.passes import DEFAULT_PIPELINE
from xtpu.runtime.communicator import reduce_in_order

BF16 = np.dtype(ml_dtypes.bfloat16)

# float32 bit patterns: zeros, the smallest and largest subnormals, the
# smallest normal, ties (a kept part even and odd), the largest finite
# value and the values that round up to inf, inf, NaNs (quiet, signalling,
# payloads in the high and in the low 16 bits, both signs).
SPECIAL_F32 = np.array(
    [
        0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00007FFF, 0x00008000, 0x00018000, 0x0000FFFF,
        0x007FFFFF, 0x807FFFFF, 0x007F8000, 0x007F7FFF, 0x00800000, 0x80800000, 0x3F800000, 0x3F808000,
        0x3F818000, 0x3F808001, 0x3F807FFF, 0xBF808000, 0xBF818000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF,
        0xFF7F8000, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7F800001, 0x7F808000, 0x7FBFFFFF, 0x7FC00000,
        0x7FC00001, 0x7FC12345, 0x7FFF8000, 0x7FFFFFFF, 0xFF800001, 0xFFC00000, 0xFFFF8000, 0xFFFFFFFF,
    ],
    dtype=np.uint32,
)  # fmt: skip


def _bits16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(np.uint16)


def _float32_cases() -> np.ndarray:
    rng = np.random.default_rng(28)
    random = rng.integers(0, 2**32, size=1 << 18, dtype=np.uint64).astype(np.uint32)
    # every 65,537th pattern of all 2**32 (each exponent, mantissas of every kind)
    stride = np.arange(0, 2**32, 65537, dtype=np.uint64).astype(np.uint32)
    # ties and their neighbours at every exponent and sign
    top = np.arange(1 << 16, dtype=np.uint32) << 16
    ties = np.concatenate([top | 0x8000, top | 0x7FFF, top | 0x8001])
    return np.concatenate([SPECIAL_F32, random, stride, ties]).view(np.float32)


def _one_op(ufunc, a, b) -> np.ndarray:
    """The reference: widened to float32 by ml_dtypes, numpy's float32 ufunc,
    rounded once by ml_dtypes."""
    return _bits16(ufunc(np.asarray(a).astype(np.float32), np.asarray(b).astype(np.float32)).astype(BF16))


def _same(got, want, a, b) -> None:
    """``got`` has ``want``'s bits, but where both operands are NaN: there
    a quiet NaN of either sign (IEEE leaves the sign open; numpy's float32
    loops keep one operand's or the other's, by layout)."""
    got, want = _bits16(got), np.broadcast_to(want, np.broadcast_shapes(np.shape(a), np.shape(b)))
    with np.errstate(invalid="ignore"):
        both = np.broadcast_to(np.isnan(a) & np.isnan(b), want.shape)
    np.testing.assert_array_equal(got[~both], want[~both])
    assert np.isin(got[both], [0x7FC0, 0xFFC0]).all()


def _bfloat16_cases() -> np.ndarray:
    """Every bfloat16 value, with NaN payloads of both signs."""
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(BF16)


@pytest.fixture(autouse=True, scope="module")
def compiled_kernels():
    """The kernels load on a thread at the first bfloat16 op (until then
    the fallback runs): wait for them, so the "compiled" cases test them."""
    assert B16.load(timeout=300)


def test_kernels_are_compiled():
    assert B16.compiled()


@pytest.mark.parametrize("numba", [True, False], ids=["compiled", "fallback"])
def test_round_f32_is_ml_dtypes_astype(numba, monkeypatch):
    if not numba:
        monkeypatch.setattr(B16, "NO_NUMBA", True)
    x = _float32_cases()
    with np.errstate(invalid="ignore"):
        want = _bits16(x.astype(BF16))
    np.testing.assert_array_equal(_bits16(B16.round_f32(x)), want)
    out = np.empty(x.shape, BF16)
    assert B16.round_f32(x, out=out) is out
    np.testing.assert_array_equal(_bits16(out), want)
    # strided and n-d operands take the fallback with the same bits
    np.testing.assert_array_equal(_bits16(B16.round_f32(x[::3])), want[::3])
    n = x.size // 8 * 8
    np.testing.assert_array_equal(_bits16(B16.round_f32(x[:n].reshape(8, -1).T)), want[:n].reshape(8, -1).T)


def test_round_f32_ties_go_to_even_and_nan_stays_nan():
    cases = np.array([0x3F808000, 0x3F818000, 0x7F7F8000, 0x7FC12345, 0xFF800001, 0x7F800001], np.uint32)
    got = _bits16(B16.round_f32(cases.view(np.float32)))
    # 1.00390625 -> 1 (even), 1.01171875 -> 1.015625 (even), the largest
    # tie overflows to inf, NaNs (a payload in the low bits would round to
    # inf) stay quiet NaNs with their sign.
    np.testing.assert_array_equal(got, np.array([0x3F80, 0x3F82, 0x7F80, 0x7FC0, 0xFFC0, 0x7FC0], np.uint16))


@pytest.mark.parametrize("numba", [True, False], ids=["compiled", "fallback"])
@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply, np.true_divide])
def test_binary_is_ml_dtypes_ufunc(ufunc, numba, monkeypatch):
    """Every bfloat16 value against shuffled ones and against scalars, into
    a fresh array, into ``out`` and in place, against the float32 op rounded
    once and against ml_dtypes' own bfloat16 ufunc (:func:`_same`: a NaN
    of two NaNs may have either sign)."""
    if not numba:
        monkeypatch.setattr(B16, "NO_NUMBA", True)
    a = _bfloat16_cases()
    b = np.random.default_rng(1).permutation(a)
    with np.errstate(all="ignore"):
        want = _one_op(ufunc, a, b)
        got = B16.binary(ufunc, a, b)
        _same(got, want, a, b)
        _same(got, _bits16(ufunc(a, b)), a, b)
        for s in [0x0000, 0x8000, 0x3F80, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x0001, 0x4B7F]:
            scalar = np.array(s, np.uint16).view(BF16)
            _same(B16.binary(ufunc, a, scalar), _one_op(ufunc, a, scalar), a, scalar)
            _same(B16.binary(ufunc, scalar, a), _one_op(ufunc, scalar, a), scalar, a)
            wide = np.broadcast_to(scalar, a.shape)  # a broadcast operand (stride 0)
            _same(B16.binary(ufunc, wide, a), _one_op(ufunc, scalar, a), scalar, a)
        out = np.empty_like(a)
        assert B16.binary(ufunc, a, b, out=out) is out
        _same(out, want, a, b)
        c = a.copy()
        B16.binary(ufunc, c, b, out=c)
        _same(c, want, a, b)
        d = b.copy()  # in place over the second operand, over a scalar's
        B16.binary(ufunc, a, d, out=d)
        _same(d, want, a, b)
        e, nan = a.copy(), np.array(0x7FC0, np.uint16).view(BF16)
        B16.binary(ufunc, e, nan, out=e)
        _same(e, _one_op(ufunc, a, nan), a, nan)
        # n-d and transposed operands
        m = a.reshape(256, 256)
        _same(B16.binary(ufunc, m, m.T), _one_op(ufunc, m, m.T), m, m.T)
        assert B16.binary(ufunc, a[:0], b[:0]).shape == (0,)


def test_widen_of_a_broadcast_is_exact():
    x = np.broadcast_to(np.array([1.5, -0.0, np.inf], BF16)[:, None], (3, 1000))
    w = B16.widen(x)
    assert w.dtype == np.float32 and w.shape == (3, 1000)
    np.testing.assert_array_equal(w.view(np.uint32), x.astype(np.float32).view(np.uint32))


def test_bfloat16_ops_eager_and_compiled_equal_ml_dtypes():
    """hlo.add / subtract / multiply / divide / convert on bfloat16 through
    xtpu, eager and compiled (kernels and out_kernels in a fused region),
    against ml_dtypes."""
    a = _bfloat16_cases()
    b = np.random.default_rng(2).permutation(a)
    x32 = _float32_cases()[: a.size]

    def f(a, b, x):
        return a + b, a - b, a * b, a / b, (a * b) / (a + b), xtpu.cast(x, xtpu.bfloat16)

    f32 = lambda v: v.astype(np.float32)  # noqa: E731
    with np.errstate(all="ignore"):
        mul, add = (f32(a) * f32(b)).astype(BF16), (f32(a) + f32(b)).astype(BF16)
        want = [add, (f32(a) - f32(b)).astype(BF16), mul, (f32(a) / f32(b)).astype(BF16)]
        want += [(f32(mul) / f32(add)).astype(BF16), x32.astype(BF16)]
        (compiled,) = xtpu.replicate(f, [[a, b, x32]])
        eager = f(a, b, x32)
    for k, (w, c, e) in enumerate(zip(want, compiled, eager)):
        x, y = (a, b) if k < 4 else (mul, add) if k == 4 else (x32, x32)
        _same(c, _bits16(w), x, y)
        _same(np.asarray(e), _bits16(w), x, y)


def test_bfloat16_all_reduce_adds_as_ml_dtypes():
    """A bfloat16 all-reduce adds in replica order, each addition rounded
    (the float32 add rounded by ml_dtypes, folded left to right)."""
    vals = [np.random.default_rng(i).permutation(_bfloat16_cases()) for i in range(3)]
    with np.errstate(all="ignore"):
        first = (vals[0].astype(np.float32) + vals[1].astype(np.float32)).astype(BF16)
        want = (first.astype(np.float32) + vals[2].astype(np.float32)).astype(BF16)
        both = (np.isnan(vals[0]) & np.isnan(vals[1])) | (np.isnan(first) & np.isnan(vals[2]))
    got = _bits16(reduce_in_order(vals, "add"))
    np.testing.assert_array_equal(got[~both], _bits16(want)[~both])
    assert np.isin(got[both], [0x7FC0, 0xFFC0]).all()


def test_numba_loads_on_a_thread_after_the_first_bfloat16_op():
    """``import xtpu`` and float32 work never import numba; the first
    bfloat16 op starts loading the kernels on a thread and computes with the
    fallback meanwhile (it does not wait for numba: 5-13 s here under load)."""
    import subprocess
    import sys

    code = (
        "import sys, threading, numpy as np, ml_dtypes, xtpu\n"
        "xtpu.math.tanh(xtpu.constant(np.ones(4, np.float32)))\n"
        "assert 'numba' not in sys.modules, 'float32 work imported numba'\n"
        "from xtpu.dialects import bfloat16 as B\n"
        "y = np.asarray(xtpu.constant(np.arange(4, dtype=ml_dtypes.bfloat16)) * 3)\n"
        "assert y.view(np.uint16).tolist() == np.array([0, 3, 6, 9], ml_dtypes.bfloat16).view(np.uint16).tolist()\n"
        "assert any(t.name == 'xtpu-bfloat16-numba' for t in threading.enumerate()) or B.compiled()\n"
        "assert B.load(timeout=300)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=400)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_elementwise_chain_has_xlas_bits():
    """XLA on CPU rounds a fused chain of bfloat16 ops per op (its float
    normalization keeps each op's convert pair): ``a * b + c`` and
    ``(a - b) / c`` under ``jax.jit`` give the bits xtpu's compiled chain
    gives, element for element."""
    import jax

    rng = np.random.default_rng(5)
    a, b, c = (rng.standard_normal(4096).astype(BF16) for _ in range(3))

    def f(a, b, c):
        return a * b + c, (a - b) / c

    want = [np.asarray(v) for v in jax.jit(f)(a, b, c)]
    (got,) = xtpu.replicate(f, [[a, b, c]])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_bits16(g), _bits16(w))
    # and not the chain computed in float32 and rounded once
    once = (a.astype(np.float32) * b.astype(np.float32) + c.astype(np.float32)).astype(BF16)
    assert (_bits16(once) != _bits16(want[0])).any()


def test_convert_pairs_have_xlas_bits():
    """``x.astype(float32).astype(bfloat16)`` of a bfloat16 ``x`` is ``x``
    itself in a compiled program, every NaN payload kept, as ``jax.jit``
    gives it (XLA's algebraic simplifier removes the pair; hlo-canonicalize
    does too), while eagerly each convert runs (a NaN leaves quiet); the
    other order rounds, as under ``jax.jit``."""
    import jax

    x = _bfloat16_cases()
    f32 = _float32_cases()[:4096]

    def f(x, y):
        return x.astype(np.float32).astype(BF16), y.astype(BF16).astype(np.float32)

    want = [np.asarray(v) for v in jax.jit(f)(x, f32)]
    (got,) = xtpu.replicate(
        lambda x, y: (
            xtpu.cast(xtpu.cast(x, xtpu.float32), xtpu.bfloat16),
            xtpu.cast(xtpu.cast(y, xtpu.bfloat16), xtpu.float32),
        ),
        [[x, f32]],
    )
    np.testing.assert_array_equal(_bits16(got[0]), _bits16(x))
    np.testing.assert_array_equal(_bits16(got[0]), _bits16(want[0]))
    np.testing.assert_array_equal(np.asarray(got[1]).view(np.uint32), np.asarray(want[1]).view(np.uint32))
    with np.errstate(invalid="ignore"):
        reference = x.astype(np.float32).astype(BF16)
    eager = xtpu.cast(xtpu.cast(xtpu.constant(x), xtpu.float32), xtpu.bfloat16).numpy()
    np.testing.assert_array_equal(_bits16(eager), _bits16(reference))


@pytest.mark.parametrize("numba", [True, False])
def test_round_trip_is_the_two_converts(numba, monkeypatch):
    """``round_trip`` (one pass, float32 in and out) gives the bits of
    ml_dtypes' rounding to bfloat16 widened back, on every special value,
    tie, subnormal and random pattern; the fallback too."""
    if not numba:
        monkeypatch.setattr(B16, "NO_NUMBA", True)
    x = _float32_cases()
    with np.errstate(invalid="ignore"):
        want = x.astype(BF16).astype(np.float32)
    out = np.empty_like(x)
    assert B16.round_trip(x, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(B16.round_trip(x).view(np.uint32), want.view(np.uint32))


def test_fused_round_trip_runs_as_one_pass(monkeypatch):
    """In a fused region, ``convert(convert(x, bf16), f32)`` whose bfloat16
    value nothing else reads runs as one ``round_trip`` and gives the
    unfused program's bits (each convert its own kernel); a bfloat16 value
    that is also yielded keeps its two converts."""
    calls = []
    original = B16.round_trip

    def counted(x, out=None):
        calls.append(x.shape)
        return original(x, out=out)

    monkeypatch.setattr(B16, "round_trip", counted)
    x = _float32_cases()[: 1 << 16].reshape(256, 256)

    def f(x):
        b = xtpu.cast(x * 2.0, xtpu.bfloat16)
        return xtpu.cast(b, xtpu.float32) + 1.0

    def g(x):
        b = xtpu.cast(x * 2.0, xtpu.bfloat16)
        return xtpu.cast(b, xtpu.float32) + 1.0, b

    for fn, pairs in ((f, 1), (g, 0)):
        lowered = xtpu.lower(fn, [[x]])
        fused, unfused = lowered.compile(), lowered.compile(",".join(DEFAULT_PIPELINE))
        assert "fusion.region" in fused.as_text() and "fusion.region" not in unfused.as_text()
        calls.clear()
        with np.errstate(invalid="ignore", over="ignore"):
            want = unfused([[x]])[0]
            for _ in range(2):  # the second call writes into the kernel's kept buffers
                got = fused([[x]])[0]
                for w, v in zip(
                    want if isinstance(want, (list, tuple)) else [want],
                    got if isinstance(got, (list, tuple)) else [got],
                ):
                    np.testing.assert_array_equal(np.asarray(v).view(np.uint8), np.asarray(w).view(np.uint8))
        assert len(calls) == 2 * pairs, (fn.__name__, calls)


def test_a_later_process_loads_the_kernels_from_numbas_cache():
    # The kernels are module-level functions (dialects/bfloat16_kernels.py):
    # numba's on-disk cache serves a second process, whose load adds no
    # cache entry (closures were compiled again by every process and each
    # added files to the cache).
    import pathlib
    import subprocess
    import sys

    from xtpu.dialects import bfloat16_kernels

    cache = pathlib.Path(bfloat16_kernels.__file__).parent / "__pycache__"
    code = "from xtpu.dialects import bfloat16 as B; assert B.load(timeout=300)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    before = sorted(p.name for p in cache.glob("bfloat16_kernels*.nb*"))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    assert before and sorted(p.name for p in cache.glob("bfloat16_kernels*.nb*")) == before
