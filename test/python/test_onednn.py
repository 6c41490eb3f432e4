"""bfloat16 matrix products through oneDNN (dialects/onednn.py, issue 28):
exact products summed in float32, checked against numpy's float64 products
(exact where float32 accumulation is, else within the float32 summation
bound) and JAX's ``preferred_element_type=float32``; every operand layout;
the kernels of dot_general, einsum and convolution, eager and compiled,
with gradients; the split over xtpu's threads; threads and fork; the
widened fallback."""

from __future__ import annotations

import multiprocessing
import platform
import sys
import threading

import ml_dtypes
import numpy as np
import pytest

import xtpu
from xtpu.dialects import intra_op, onednn

BF16 = np.dtype(ml_dtypes.bfloat16)

needs_onednn = pytest.mark.skipif(
    not onednn.available(), reason="oneDNN's bfloat16 GEMM is not loadable or needs AVX-512 this CPU lacks"
)


def exact(shape, rng):
    """bfloat16 values whose products and float32 sums are exact: small
    integers times powers of two."""
    return (rng.randint(-8, 9, size=shape) * 2.0 ** rng.randint(-3, 3, size=shape)).astype(BF16)


def ref64(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


@pytest.fixture
def through_onednn(monkeypatch):
    """Every bfloat16 product, however small, through oneDNN."""
    if not onednn.available():
        pytest.skip("oneDNN's bfloat16 GEMM is not loadable or needs AVX-512 this CPU lacks")
    monkeypatch.setattr(onednn, "MIN_WORK", 0)


def test_loaded_where_the_wheel_exists():
    """pyproject.toml installs onednn-cpu-gomp on Linux x86-64: there the
    kernel must be found, or bfloat16 matmuls silently run at the widened
    speed."""
    if sys.platform == "linux" and platform.machine() == "x86_64":
        assert onednn.available() == _cpu_has_avx512_core()


def _cpu_has_avx512_core() -> bool:
    """oneDNN's bfloat16 GEMM needs AVX-512 (F, BW, VL, DQ: its
    ``avx512_core``); without it ``dnnl_gemm_bf16bf16f32`` returns
    ``dnnl_unimplemented`` (seen on an AMD EPYC, CPU family 25, without
    AVX-512) and xtpu widens the products for numpy's BLAS."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return all(x in flags for x in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))


@needs_onednn
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_gemm_reads_every_layout_in_place(ta, tb):
    rng = np.random.RandomState(0)
    m, k, n = 37, 70, 23
    a = exact((k, m), rng).T if ta else exact((m, k), rng)
    b = exact((n, k), rng).T if tb else exact((k, n), rng)
    big = np.full((m, n + 5), 7.0, np.float32)
    out = big[:, 2 : 2 + n]  # rows strided: ldc > n
    assert onednn.gemm(a, b, out)
    np.testing.assert_array_equal(bits(out), bits(ref64(a, b).astype(np.float32)))
    assert (big[:, :2] == 7).all() and (big[:, 2 + n :] == 7).all()  # nothing outside out written


@needs_onednn
def test_gemm_copies_an_operand_without_unit_stride_and_handles_empty_sizes():
    rng = np.random.RandomState(1)
    a = exact((40, 60), rng)[::2, ::3]  # no unit-stride axis
    b = exact((20, 9), rng)
    out = np.empty((20, 9), np.float32)
    assert onednn.gemm(a, b, out)
    np.testing.assert_array_equal(out, ref64(a, b).astype(np.float32))
    z = np.full((3, 4), 5.0, np.float32)
    assert onednn.gemm(np.zeros((3, 0), BF16), np.zeros((0, 4), BF16), z)
    assert (z == 0).all() and not np.signbit(z).any()
    assert onednn.gemm(np.zeros((0, 5), BF16), np.zeros((5, 4), BF16), np.empty((0, 4), np.float32))
    # an out it cannot write: the caller computes it
    assert not onednn.gemm(a, b, np.empty((20, 9), np.float64))
    assert not onednn.gemm(a, b, np.empty((9, 20), np.float32).T)


@needs_onednn
def test_random_operands_within_the_float32_summation_bound_and_equal_to_jax():
    """Random bfloat16 operands: the float32 sum differs from the exact one
    by at most K * 2^-24 * sum |a_ik b_kj| (Higham's bound for recursive
    summation; the products are exact); against XLA's
    ``dot_general(preferred_element_type=float32)`` rounded to bfloat16,
    at most one bfloat16 ulp apart and mostly the same bits."""
    jnp = pytest.importorskip("jax.numpy")
    rng = np.random.RandomState(2)
    a = rng.randn(257, 300).astype(BF16)
    b = rng.randn(300, 129).astype(BF16)
    got = intra_op.matmul(a, b)
    assert got.dtype == np.float32
    exact_sum = ref64(a, b)
    bound = 300 * 2.0**-24 * np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    assert (np.abs(got - exact_sum) <= bound).all()
    want = np.asarray(jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16))
    ulps = np.abs(bits(got.astype(BF16)).astype(np.int32) - bits(want).astype(np.int32))
    assert ulps.max() <= 1 and (ulps == 0).mean() > 0.99


CONTRACTIONS = [
    ("matmul", lambda a, b: xtpu.matmul(a, b), [(5, 64), (64, 7)], "ij,jk->ik"),
    ("matmul_ta", lambda a, b: xtpu.matmul(a, b, transpose_a=True), [(64, 5), (64, 7)], "ji,jk->ik"),
    ("matmul_tb", lambda a, b: xtpu.matmul(a, b, transpose_b=True), [(5, 64), (7, 64)], "ij,kj->ik"),
    ("rows", lambda a, b: xtpu.matmul(a, b), [(2, 3, 32), (32, 6)], "bij,jk->bik"),
    ("batched", lambda a, b: xtpu.matmul(a, b), [(3, 4, 32), (3, 32, 6)], "bij,bjk->bik"),
    ("einsum", lambda a, b: xtpu.einsum("bqhd,bkhd->bhqk", a, b), [(2, 3, 2, 16), (2, 5, 2, 16)], "bqhd,bkhd->bhqk"),
]


@pytest.mark.parametrize("name, fn, shapes, equation", CONTRACTIONS, ids=[c[0] for c in CONTRACTIONS])
def test_contractions_and_gradients_through_onednn_are_exact(through_onednn, name, fn, shapes, equation):
    """dot_general's kernel (eager and compiled) and its gradients' on
    exact operands: numpy's float64 einsum rounded to bfloat16, bit for bit."""
    rng = np.random.RandomState(3)
    a, b = (exact(s, rng) for s in shapes)
    want = np.einsum(equation, a.astype(np.float64), b.astype(np.float64)).astype(np.float32).astype(BF16)
    np.testing.assert_array_equal(bits(fn(a, b)), bits(want))
    g = rng.randint(-4, 5, size=want.shape).astype(np.float32)
    ins, res = equation.split("->")
    la, lb = ins.split(",")
    want_a = np.einsum(f"{res},{lb}->{la}", g.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    want_b = np.einsum(f"{la},{res}->{lb}", a.astype(np.float64), g.astype(np.float64)).astype(np.float32)

    def step(a, b):
        with xtpu.GradientTape() as tape:
            tape.watch([a, b])
            loss = xtpu.reduce_sum(xtpu.cast(fn(a, b), xtpu.float32) * g)
        return [fn(a, b), *tape.gradient(loss, [a, b])]

    ((c, ga, gb),) = xtpu.replicate(step, [[a, b]])
    np.testing.assert_array_equal(bits(c), bits(want))
    np.testing.assert_array_equal(bits(ga), bits(want_a.astype(BF16)))
    np.testing.assert_array_equal(bits(gb), bits(want_b.astype(BF16)))


def test_convolution_through_onednn_is_the_exact_sum(through_onednn):
    """A bfloat16 NHWC convolution (im2col, then oneDNN's GEMM) with a
    float32 result, against numpy's float64 sum over the taps."""
    rng = np.random.RandomState(4)
    x = exact((2, 6, 6, 8), rng)
    w = exact((3, 3, 8, 5), rng)
    got = np.asarray(xtpu.nn.conv2d(x, w, strides=1, padding="VALID"))
    xs = x.astype(np.float64)
    win = np.lib.stride_tricks.sliding_window_view(xs, (3, 3), axis=(1, 2))  # [N, 4, 4, C, 3, 3]
    want = np.einsum("nhwcij,ijco->nhwo", win, w.astype(np.float64)).astype(np.float32).astype(BF16)
    assert got.dtype == BF16
    np.testing.assert_array_equal(bits(got), bits(want))


@needs_onednn
def test_split_over_threads_gives_the_unsplit_bits():
    """A product large enough for xtpu's intra-op split (two pieces, one
    oneDNN call each): the same bits as one call and as the exact sum."""
    rng = np.random.RandomState(5)
    a, b = exact((512, 256), rng), exact((256, 512), rng)
    assert a.shape[0] * 256 * 512 >= intra_op.MIN_WORK
    one = intra_op.matmul(a, b)
    old = intra_op.set_parts(2)
    try:
        two = intra_op.matmul(a, b)
        batched = intra_op.matmul(np.stack([a, a]), np.stack([b, b]))
    finally:
        intra_op.set_parts(old)
    np.testing.assert_array_equal(one, ref64(a, b).astype(np.float32))
    np.testing.assert_array_equal(two, one)
    np.testing.assert_array_equal(batched, np.stack([one, one]))


@needs_onednn
def test_concurrent_threads_each_get_their_own_product():
    rng = np.random.RandomState(6)
    pairs = [(exact((96, 128), rng), exact((128, 80), rng)) for _ in range(4)]
    results = [None] * 4

    def run(i):
        for _ in range(20):
            results[i] = intra_op.matmul(*pairs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for (a, b), r in zip(pairs, results):
        np.testing.assert_array_equal(r, ref64(a, b).astype(np.float32))


def _child(conn):
    rng = np.random.RandomState(7)
    a, b = exact((64, 96), rng), exact((96, 48), rng)
    conn.send(bool(np.array_equal(intra_op.matmul(a, b), ref64(a, b).astype(np.float32))))


@needs_onednn
def test_a_forked_child_multiplies_without_hanging():
    """OpenMP runtimes can hang in a forked child whose parent started a
    thread team; oneDNN runs on the caller's thread only, so a child forked
    after products (the MPI and fault-injection tests fork) multiplies too."""
    rng = np.random.RandomState(8)
    intra_op.matmul(exact((64, 96), rng), exact((96, 48), rng))
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_child, args=(child,))
    p.start()
    assert parent.poll(60), "the forked child did not answer in 60 s"
    assert parent.recv() is True
    p.join(10)
    assert p.exitcode == 0


def test_without_onednn_the_widened_product_has_the_same_bits(monkeypatch):
    rng = np.random.RandomState(9)
    a, b = exact((128, 96), rng), exact((96, 64), rng)
    fast = intra_op.matmul(a, b)
    monkeypatch.setattr(onednn, "DISABLED", True)
    assert not onednn.available()
    slow = intra_op.matmul(a, b)
    assert slow.dtype == fast.dtype == np.float32
    np.testing.assert_array_equal(slow, fast)
    np.testing.assert_array_equal(slow, ref64(a, b).astype(np.float32))
