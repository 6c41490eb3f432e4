"""Large matmuls split over xtpu's own threads (dialects/intra_op.py) while
a compiled step with one runs, BLAS held at one thread
(runtime/blas_budget.py ``limit(..., split=True)``)."""

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import xtpu
from xtpu.dialects import intra_op, onednn, onednn_conv
from xtpu.runtime import blas_budget


def numpy_blas_threads():
    return [m["num_threads"] for m in threadpool_info() if m["user_api"] == "blas" and "numpy" in m["filepath"]]


@pytest.fixture
def parts(monkeypatch):
    monkeypatch.setattr(intra_op, "MIN_WORK", 1 << 21)  # the small shapes below split too

    def set_(n):
        intra_op.set_parts(n)

    yield set_
    intra_op.set_parts(1)


@pytest.mark.parametrize(
    "xs,ys",
    [
        ((1024, 256), (256, 1024)),  # rows
        ((1023, 257), (257, 511)),  # uneven rows
        ((3, 4096), (4096, 1024)),  # too few rows: columns
        ((32, 128, 64), (32, 64, 128)),  # batch
        ((1, 2048, 64), (1, 64, 512)),  # batch of one: rows
        ((8, 4, 128, 64), (8, 4, 64, 128)),  # attention's stack of stacks: the leading batch
        ((1, 4, 256, 64), (1, 4, 64, 96)),  # a leading batch of one: rows of each matrix
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [2, 3])
def test_a_split_matmul_is_the_same_blas_call_on_each_piece(parts, xs, ys, dtype, n):
    """Each piece is ``np.matmul`` on a slice: bit for bit the pieces'
    own products, and within float rounding of the unsplit product."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ys).astype(dtype)
    parts(n)
    got = intra_op.matmul(x, y)
    out = np.full_like(got, np.nan)
    assert intra_op.matmul(x, y, out=out) is out
    np.testing.assert_array_equal(out, got)
    m, cols = x.shape[-2], y.shape[-1]
    if x.ndim >= 3 and x.shape[0] >= n:
        kind, axis, size = "batch", 0, x.shape[0]
    elif m >= 2 * n:
        kind, axis, size = "rows", x.ndim - 2, m
    else:
        kind, axis, size = "cols", x.ndim - 1, cols
    step = -(-size // n)
    for a in range(0, size, step):
        s = [slice(None)] * x.ndim
        s[axis] = slice(a, a + step)
        s = tuple(s)
        want = {
            "batch": lambda: np.matmul(x[s], y[s]),
            "rows": lambda: np.matmul(x[s], y),
            "cols": lambda: np.matmul(x, y[s]),
        }[kind]()
        np.testing.assert_array_equal(got[s], want)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, np.matmul(x, y), rtol=tol, atol=tol * np.sqrt(x.shape[-1]))


def test_small_matmuls_and_bad_shapes_are_numpy_s(parts):
    parts(2)
    x = np.ones((4, 3), np.float32)
    np.testing.assert_array_equal(intra_op.matmul(x, x.T), np.matmul(x, x.T))
    big = np.ones((2048, 64), np.float32)
    with pytest.raises(ValueError, match="matmul"):
        intra_op.matmul(big, np.ones((32, 2048), np.float32))  # numpy's own error


def step(x, w):
    return xtpu.math.tanh(xtpu.matmul(x, w))


def _spied_run(monkeypatch, c, inputs):
    seen = []
    real = intra_op.matmul

    def spy(x, y, out=None):
        seen.append((intra_op.parts(), tuple(numpy_blas_threads())))
        return real(x, y, out=out)

    monkeypatch.setattr(intra_op, "matmul", spy)
    return c(inputs), seen


@pytest.mark.parametrize("found", [1, 2])
def test_a_step_with_a_large_matmul_splits_it_over_the_threads_blas_had(monkeypatch, found):
    """One replica, no budget set: the step's matmul runs split over as many
    threads as BLAS had (``OPENBLAS_NUM_THREADS=1``: not split), BLAS on one
    thread while the step runs, restored after; the result is the split
    product's, bit for bit."""
    if not numpy_blas_threads():
        pytest.skip("numpy has no BLAS that threadpoolctl controls")
    monkeypatch.delenv("XTPU_INTRA_OP_THREADS", raising=False)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((512, 256)).astype(np.float32)
    w = rng.standard_normal((256, 512)).astype(np.float32)
    c = xtpu.lower(step, [[x, w]]).compile()
    assert c.executable._split
    with threadpool_limits(limits=found, user_api="blas"):
        (out,), seen = _spied_run(monkeypatch, c, [[x, w]])
        assert seen == [(found, (1,) * len(numpy_blas_threads()))]
        assert numpy_blas_threads() == [found] * len(numpy_blas_threads())
    assert intra_op.parts() == 1
    # The same split, each piece's BLAS call on one thread as in the step (a
    # BLAS's own threads split a product differently: OpenBLAS's float32
    # GEMM rounds a row by its place in the split).
    intra_op.set_parts(found)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            want = np.tanh(intra_op.matmul(x, w))
    finally:
        intra_op.set_parts(1)
    np.testing.assert_array_equal(np.asarray(out[0]), want)


def test_a_step_of_small_matmuls_leaves_blas_as_it_is(monkeypatch):
    if not numpy_blas_threads():
        pytest.skip("numpy has no BLAS that threadpoolctl controls")
    monkeypatch.delenv("XTPU_INTRA_OP_THREADS", raising=False)
    x = np.ones((8, 16), np.float32)
    c = xtpu.lower(step, [[x, x.T]]).compile()
    assert not c.executable._split
    with threadpool_limits(limits=2, user_api="blas"):
        (out,), seen = _spied_run(monkeypatch, c, [[x, x.T]])
        assert seen == [(1, (2,) * len(numpy_blas_threads()))]
    np.testing.assert_allclose(np.asarray(out[0]), np.tanh(x @ x.T), rtol=1e-6)


def test_replicas_share_the_budget_with_the_split(monkeypatch):
    """Two replicas on a budget of 4 cores, a thread each (whatever
    ``XTPU_INTER_OP_THREADS`` says): 2 threads each for the split, BLAS on
    one."""
    if not numpy_blas_threads():
        pytest.skip("numpy has no BLAS that threadpoolctl controls")
    xtpu.config.threading.set_intra_op_parallelism_threads(4)
    xtpu.config.threading.set_inter_op_parallelism_threads(2)
    try:
        rng = np.random.default_rng(2)
        inputs = [[rng.standard_normal((512, 256)).astype(np.float32), np.eye(256, 512, dtype=np.float32)]] * 2
        c = xtpu.lower(step, inputs).compile()
        assert c.executable.replica_execution[0] == "threads"
        out, seen = _spied_run(monkeypatch, c, inputs)
    finally:
        xtpu.config.threading.set_intra_op_parallelism_threads(0)
        xtpu.config.threading.set_inter_op_parallelism_threads(0)
    assert seen and {s[0] for s in seen} == {2} and {s[1] for s in seen} == {(1,) * len(numpy_blas_threads())}
    for r in range(2):
        np.testing.assert_allclose(np.asarray(out[r][0]), np.tanh(inputs[r][0] @ inputs[r][1]), rtol=1e-5, atol=1e-6)
    assert blas_budget._users == 0


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="fork")
def test_a_forked_child_splits_on_a_pool_of_its_own(parts):
    """The pool's threads are not in a forked child: it starts its own
    (a piece handed to the parent's pool would never run: a hang)."""
    import os

    parts(2)
    x = np.ones((512, 512), np.float32)
    intra_op.matmul(x, x)  # the parent's pool exists
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the split product is right
        ok = False
        try:
            ok = np.array_equal(intra_op.matmul(x, x), np.full((512, 512), 512, np.float32))
        finally:
            os._exit(0 if ok else 1)
    deadline_waits = 0
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        deadline_waits += 1
        if deadline_waits > 600:
            os.kill(pid, 9)
            pytest.fail("the forked child hung in a split matmul")
        __import__("time").sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_piece_no_pool_thread_started_runs_in_the_caller(parts):
    """While every pool thread is busy (as when another process holds the
    cores), the caller runs the pieces itself instead of waiting: the
    product is right and does not wait for the busy thread."""
    import threading
    import time

    parts(2)
    x = np.arange(512 * 512, dtype=np.float32).reshape(512, 512) % 7
    want = np.matmul(x, x)
    intra_op.matmul(x, x)  # the pool exists
    release = threading.Event()
    blocker = intra_op._executor(1).submit(release.wait, 30)
    try:
        t = time.perf_counter()
        got = intra_op.matmul(x, x)
        took = time.perf_counter() - t
        assert not blocker.done()  # the pool thread was busy the whole time
    finally:
        release.set()
        blocker.result()
    np.testing.assert_array_equal(got, want)
    assert took < 10.0  # not the 30 s the pool thread was held for


def test_a_step_with_a_large_convolution_splits_it(monkeypatch):
    """A convolution is split like a matmul: [8, 32, 32, 16] by 3x3x16x32
    (37.7M multiply-adds), oneDNN's kernel over slices of the batch
    (dialects/onednn_conv.py) or, without oneDNN, the im2col product's
    rows; the values equal the eager ones."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 32, 32, 16)).astype(np.float32)
    w = (rng.standard_normal((3, 3, 16, 32)) * 0.1).astype(np.float32)

    def conv(x, w):
        return xtpu.nn.conv2d(x, w, 1, "SAME")

    c = xtpu.lower(conv, [[x, w]]).compile()
    assert c.executable._split
    small = xtpu.lower(conv, [[x[:1, :4, :4], w[:, :, :, :2]]]).compile()
    assert not small.executable._split  # 1x4x4x2 outputs of 144 products
    pieces, parts = [], []
    real_pieces, real_conv = intra_op.run_pieces, onednn_conv.convolution
    monkeypatch.setattr(intra_op, "run_pieces", lambda fn, ps: pieces.append(len(ps)) or real_pieces(fn, ps))
    monkeypatch.setattr(
        onednn_conv, "convolution", lambda *a, **k: parts.append(intra_op.parts()) or real_conv(*a, **k)
    )
    (out,), seen = _spied_run(monkeypatch, c, [[x, w]])
    if onednn.library() is not None:
        assert not seen and len(parts) == 1 and pieces == ([parts[0]] if parts[0] > 1 else [])
    else:
        assert seen and all(p == max(1, seen[0][0]) for p, _ in seen)
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(conv(x, w)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("transpose_b", [False, True])
def test_rows_of_a_3d_operand_times_a_matrix_are_one_2d_product(transpose_b):
    # dot_general of x[..., K] with W[K, N] (or W^T): one product of every
    # leading row, W's transpose a BLAS flag, into out= or not.
    from xtpu.dialects.hlo import DotGeneralOp

    r = np.random.default_rng(4)
    x = r.standard_normal((4, 6, 32)).astype(np.float32)
    w = r.standard_normal((20, 32) if transpose_b else (32, 20)).astype(np.float32)
    dims = dict(lhs_contracting_dimensions=(2,), rhs_contracting_dimensions=(1,) if transpose_b else (0,))
    want = np.matmul(x.reshape(24, 32), w.T if transpose_b else w).reshape(4, 6, 20)
    np.testing.assert_array_equal(DotGeneralOp.kernel(**dims)(x, w), want)
    out = np.empty((4, 6, 20), np.float32)
    assert DotGeneralOp.out_kernel(**dims)(out, x, w) is out
    np.testing.assert_array_equal(out, want)
    np.testing.assert_allclose(want, np.tensordot(x, w, axes=([2], [1 if transpose_b else 0])), rtol=1e-5, atol=1e-5)
