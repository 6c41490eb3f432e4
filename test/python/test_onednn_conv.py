"""float32 convolutions through oneDNN (dialects/onednn_conv.py): both
mappings (forward, kernel gradient) for the layouts, strides, paddings,
dilations and groups models use, checked against JAX's
``lax.conv_general_dilated`` (StableHLO's convolution, computed by XLA) at
float32 HIGHEST precision; the cases that must go to the im2col kernel;
threads; ``XTPU_NO_ONEDNN=1``."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

from xtpu.dialects import hlo_window, intra_op, onednn, onednn_conv
from xtpu.dialects.hlo_window import ConvDimensionNumbers, conv_params, conv_result_shape

jax = pytest.importorskip("jax")
lax = jax.lax

needs_onednn = pytest.mark.skipif(onednn.library() is None, reason="oneDNN is not loadable on this platform")

NHWC = ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))  # x NHWC, w HWIO, out NHWC
NCHW = ConvDimensionNumbers((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))  # x NCHW, w OIHW, out NCHW
# The kernel gradient of an NHWC / HWIO convolution, as ConvolutionOp.vjp emits it.
WGRAD = ConvDimensionNumbers((3, 0, 1, 2), (3, 0, 1, 2), (2, 3, 0, 1))
# Its input gradient: the reversed kernel with in- and out-features swapped.
DGRAD = ConvDimensionNumbers((0, 3, 1, 2), (2, 3, 0, 1), (0, 3, 1, 2))


def conv(x, w, p):
    """onednn_conv.convolution, the result's shape from the op's shape rule."""
    return onednn_conv.convolution(x, w, conv_result_shape(x.shape, w.shape, p), **p)


def impl_of(x, w, p):
    return onednn_conv.implementation(x, w, conv_result_shape(x.shape, w.shape, p), **p)


def jax_conv(x, w, p):
    dn = p["dimension_numbers"]
    out = lax.conv_general_dilated(
        x,
        w,
        window_strides=p["window_strides"],
        padding=p["padding"],
        lhs_dilation=p["lhs_dilation"],
        rhs_dilation=p["rhs_dilation"],
        dimension_numbers=lax.ConvDimensionNumbers(dn.lhs, dn.rhs, dn.out),
        feature_group_count=p["feature_group_count"],
        batch_group_count=p["batch_group_count"],
        precision=lax.Precision.HIGHEST,
    )
    return np.asarray(out)


def close(got, want, x, w):
    """Equal up to the order of float32 additions: each output is a sum of
    at most |x| * |w| products."""
    bound = 1e-5 * np.abs(x).max(initial=0) * np.abs(w).max(initial=0) * max(x.size, w.size) ** 0.5 + 1e-6
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=bound)


CASES = {
    # name: (x shape, w shape, dimension numbers, params)
    "resnet 3x3 SAME, NHWC": ((8, 16, 16, 16), (3, 3, 16, 16), NHWC, {"padding": ((1, 1), (1, 1))}),
    # numpy's strides of the size-1 batch kept: with any other oneDNN does
    # not see NHWC and offers only its reference kernel.
    "a batch of 1, 7x7 stride 2 (a ResNet stem)": (
        (1, 40, 40, 3),
        (7, 7, 3, 16),
        NHWC,
        {"window_strides": (2, 2), "padding": ((3, 3), (3, 3))},
    ),
    "NCHW stride 2, uneven padding": (
        (2, 8, 13, 11),
        (12, 8, 3, 3),
        NCHW,
        {"window_strides": (2, 2), "padding": ((0, 1), (1, 2))},
    ),
    "dilated kernel": ((2, 17, 17, 4), (3, 3, 4, 8), NHWC, {"rhs_dilation": (2, 3), "padding": ((2, 2), (3, 3))}),
    "depthwise": ((4, 12, 12, 32), (3, 3, 1, 32), NHWC, {"padding": ((1, 1), (1, 1)), "feature_group_count": 32}),
    "two groups, channel multiplier 3": ((2, 9, 9, 6), (3, 3, 3, 6), NHWC, {"feature_group_count": 2}),
    "1x1": ((4, 7, 7, 16), (1, 1, 16, 24), NHWC, {}),
    "1-D": ((3, 20, 5), (4, 5, 7), ConvDimensionNumbers((0, 2, 1), (2, 1, 0), (0, 2, 1)), {"padding": ((1, 2),)}),
    "3-D": (
        (2, 6, 6, 6, 3),
        (3, 3, 3, 3, 4),
        ConvDimensionNumbers((0, 4, 1, 2, 3), (4, 3, 0, 1, 2), (0, 4, 1, 2, 3)),
        {"padding": ((1, 1),) * 3},
    ),
    # The input gradient of a strided convolution (ConvolutionOp.vjp: the
    # cotangent dilated by the strides, the kernel reversed by hlo.reverse
    # before it, here a reversed view): the backward-data primitive.
    "input gradient of a stride-2 3x3 SAME convolution": (
        (8, 16, 16, 64),
        "reversed (3, 3, 32, 64)",
        DGRAD,
        {"lhs_dilation": (2, 2), "padding": ((1, 2), (1, 2))},
    ),
    "input gradient of a stride-2 1x1 convolution": (
        (8, 8, 8, 64),
        "reversed (1, 1, 32, 64)",
        DGRAD,
        {"lhs_dilation": (2, 2), "padding": ((0, 1), (0, 1))},
    ),
    "input gradient of a stride-3 convolution, NCHW, uneven padding": (
        (2, 16, 5, 5),
        "reversed (16, 8, 3, 3)",
        ConvDimensionNumbers((0, 1, 2, 3), (1, 0, 2, 3), (0, 1, 2, 3)),
        {"lhs_dilation": (3, 3), "padding": ((2, 3), (2, 2))},
    ),
    "input gradient of a grouped stride-2 convolution": (
        (2, 8, 8, 4),
        (3, 3, 2, 6),
        NHWC,
        {"lhs_dilation": (2, 2), "feature_group_count": 2, "padding": ((1, 2), (1, 2))},
    ),
    "kernel gradient": ((8, 16, 16, 16), (8, 16, 16, 16), WGRAD, {"padding": ((1, 1), (1, 1))}),
    # A grouped convolution's kernel gradient has batch groups (JAX's rule):
    # oneDNN's backward-weights convolution with groups.
    "depthwise kernel gradient (batch groups)": (
        (8, 16, 16, 32),
        (8, 16, 16, 32),
        WGRAD,
        {"padding": ((1, 1), (1, 1)), "batch_group_count": 32},
    ),
    "kernel gradient of 2 groups, channel multiplier 3": (
        (4, 9, 9, 8),
        (4, 9, 9, 24),
        WGRAD,
        {"padding": ((1, 1), (1, 1)), "batch_group_count": 2},
    ),
    "kernel gradient of a strided convolution": (
        (4, 15, 15, 8),
        (4, 7, 7, 16),
        WGRAD,
        {"padding": ((0, 0), (0, 0)), "rhs_dilation": (2, 2)},
    ),
}


@needs_onednn
@pytest.mark.parametrize("name", list(CASES))
def test_a_convolution_through_onednn_equals_jax(name):
    xs, ws, dn, extra = CASES[name]
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    x = rng.standard_normal(xs).astype(np.float32)
    if isinstance(ws, str):  # "reversed (shape)": hlo.reverse's view of the spatial dimensions
        shape = tuple(int(v) for v in ws.split("(")[1].rstrip(")").split(","))
        w = rng.standard_normal(shape).astype(np.float32)
        w = w[tuple(slice(None, None, -1) if d in dn.rhs[2:] else slice(None) for d in range(w.ndim))]
    else:
        w = rng.standard_normal(ws).astype(np.float32)
    p = conv_params(len(xs), dimension_numbers=dn, **extra)
    impl = impl_of(x, w, p)
    assert impl is not None and not impl.startswith("ref") and "gemm" not in impl, impl
    got = conv(x, w, p)
    close(got, jax_conv(x, w, p), x, w)
    # hlo.convolution's kernel takes the same path.
    np.testing.assert_array_equal(hlo_window.conv_numpy(x, w, **p), got)


@needs_onednn
def test_the_input_gradient_reads_a_reversed_kernel():
    """ConvolutionOp.vjp's input gradient convolves with hlo.reverse's
    result, a view with negative strides: copied, then through oneDNN."""
    rng = np.random.default_rng(1)
    ct = rng.standard_normal((8, 16, 16, 16)).astype(np.float32)
    w = rng.standard_normal((3, 3, 16, 24)).astype(np.float32)[::-1, ::-1]
    p = conv_params(4, dimension_numbers=DGRAD, padding=((1, 1), (1, 1)))
    ct = rng.standard_normal((8, 16, 16, 24)).astype(np.float32)
    assert impl_of(ct, w, p) is not None
    close(conv(ct, w, p), jax_conv(ct, np.ascontiguousarray(w), p), ct, w)


@needs_onednn
def test_channels_first_operands_run_on_a_direct_kernel():
    """oneDNN offers only an im2col + GEMM kernel for channels-first
    operands: x is copied channels last, the result made channels last (a
    view in the result's shape) and the convolution runs on a direct kernel."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((8, 16, 12, 12)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    p = conv_params(4, dimension_numbers=NCHW, padding=((1, 1), (1, 1)))
    impl = impl_of(x, w, p)
    assert impl is not None and "gemm" not in impl and not impl.startswith("ref"), impl
    got = conv(x, w, p)
    assert got.shape == (8, 32, 12, 12) and got.strides[1] == 4  # features innermost in memory
    close(got, jax_conv(x, w, p), x, w)


@needs_onednn
def test_transposed_operands_are_read_in_place():
    """Operands that are transposed views (the dimension numbers' order is
    not the memory order) give the same values."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 8, 10, 10)).astype(np.float32).transpose(0, 2, 3, 1)  # NHWC view of NCHW
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32).transpose(2, 3, 1, 0)  # HWIO view of OIHW
    p = conv_params(4, dimension_numbers=NHWC, padding=((1, 1), (1, 1)))
    got = conv(x, w, p)
    assert got is not None
    close(got, jax_conv(np.ascontiguousarray(x), np.ascontiguousarray(w), p), x, w)


@pytest.mark.parametrize(
    "why, xs, ws, dtype, extra",
    [
        (
            "lhs dilation and window strides",
            (2, 8, 8, 4),
            (3, 3, 4, 4),
            np.float32,
            {"lhs_dilation": (2, 2), "window_strides": (2, 2)},
        ),
        ("batch groups outside a kernel gradient", (4, 8, 8, 4), (3, 3, 4, 4), np.float32, {"batch_group_count": 2}),
        ("negative padding", (2, 8, 8, 4), (3, 3, 4, 4), np.float32, {"padding": ((-1, 0), (0, 0))}),
        ("float64", (2, 8, 8, 4), (3, 3, 4, 4), np.float64, {}),
        ("an empty batch", (0, 8, 8, 4), (3, 3, 4, 4), np.float32, {}),
    ],
)
def test_what_onednn_does_not_take_goes_to_the_im2col_kernel(why, xs, ws, dtype, extra):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    p = conv_params(4, dimension_numbers=NHWC, **extra)
    assert conv(x, w, p) is None, why
    want = jax_conv(x.astype(np.float32), w.astype(np.float32), p)
    got = hlo_window.conv_numpy(x, w, **p)
    assert got.dtype == dtype
    close(got.astype(np.float32), want, x, w)


@needs_onednn
def test_threads_have_their_own_primitives():
    """Replicas' threads run the same convolutions at once: each thread has
    its own memory objects and scratchpad, so the results are each
    thread's alone (oneDNN on one thread is deterministic: bit for bit)."""
    rng = np.random.default_rng(4)
    p = conv_params(4, dimension_numbers=NHWC, padding=((1, 1), (1, 1)))
    pw = conv_params(4, dimension_numbers=WGRAD, padding=((1, 1), (1, 1)))
    xs = [rng.standard_normal((8, 16, 16, 16)).astype(np.float32) for _ in range(4)]
    w = rng.standard_normal((3, 3, 16, 16)).astype(np.float32)
    want = [(conv(x, w, p), conv(x, x, pw)) for x in xs]
    errors = []

    def run(i):
        for _ in range(30):
            a = conv(xs[i], w, p)
            b = conv(xs[i], xs[i], pw)
            if not (np.array_equal(a, want[i][0]) and np.array_equal(b, want[i][1])):
                errors.append(i)
                return

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_xtpu_no_onednn_turns_it_off():
    code = (
        "import numpy as np\n"
        "from xtpu.dialects import hlo_window as h\n"
        "p = h.conv_params(4, padding=((1, 1), (1, 1)))\n"
        "x = np.ones((2, 4, 8, 8), np.float32); w = np.ones((4, 4, 3, 3), np.float32)\n"
        "assert h.onednn_conv.convolution(x, w, (2, 4, 8, 8), **p) is None\n"
        "assert h.conv_numpy(x, w, **p)[0, 0, 1, 1] == 36.0\n"
    )
    env = dict(os.environ, XTPU_NO_ONEDNN="1")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)


@needs_onednn
def test_a_large_convolution_is_split_over_the_batch(monkeypatch):
    """With intra-op threads, a convolution of at least intra_op.MIN_WORK
    multiply-adds runs as pieces of its batch, the same kernel on each
    slice: the values equal the unsplit call's bit for bit."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 32, 32, 16)).astype(np.float32)
    w = rng.standard_normal((3, 3, 16, 32)).astype(np.float32)
    p = conv_params(4, dimension_numbers=NHWC, padding=((1, 1), (1, 1)))
    xs = np.ascontiguousarray(x[:, :4, :4])
    whole = conv(x, w, p)
    seen = []
    real = intra_op.run_pieces

    def spy(fn, pieces):
        seen.append([piece[0].shape for piece in pieces])
        return real(fn, pieces)

    monkeypatch.setattr(intra_op, "run_pieces", spy)
    old = intra_op.set_parts(2)
    try:
        split = conv(x, w, p)
        small = conv(xs, w[..., :8], p)  # 8x4x4x8 outputs of 144 products: whole
    finally:
        intra_op.set_parts(old)
    assert seen == [[(4, 32, 32, 16), (4, 32, 32, 16)]]
    np.testing.assert_array_equal(split, whole)
    close(small, jax_conv(xs, w[..., :8], p), x, w)


@needs_onednn
def test_a_threads_primitives_go_with_the_thread():
    """A thread's primitives (their oneDNN objects destroyed by
    _Prepared.__del__) and stream are kept by that thread's state only:
    once the thread is gone nothing holds them."""
    x = np.random.default_rng(6).standard_normal((8, 16, 16, 16)).astype(np.float32)
    w = np.ones((3, 3, 16, 16), np.float32)
    p = conv_params(4, dimension_numbers=NHWC, padding=((1, 1), (1, 1)))
    pw = conv_params(4, dimension_numbers=WGRAD, padding=((1, 1), (1, 1)))
    refs = []

    def run():
        conv(x, w, p)
        conv(x, x, pw)
        refs.extend(weakref.ref(v) for v in onednn_conv._tls.convs.values())
        refs.append(weakref.ref(onednn_conv._tls.stream))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    del t
    gc.collect()
    assert len(refs) == 3 and all(r() is None for r in refs)


@needs_onednn
@pytest.mark.parametrize("stride", [1, 2])
def test_a_depthwise_training_step_matches_jax(stride):
    """A compiled GradientTape step of a depthwise convolution: its forward,
    input and kernel gradients all run on oneDNN (forward with groups,
    backward data for the stride, backward weights with batch groups), and
    both gradients equal jax.grad's."""
    import jax.numpy as jnp

    import xtpu

    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 12, 12, 16)).astype(np.float32)
    w = rng.standard_normal((3, 3, 16, 1)).astype(np.float32)

    def step(x, w):
        with xtpu.GradientTape() as tape:
            tape.watch([x, w])
            y = xtpu.nn.depthwise_conv2d(x, w, [1, stride, stride, 1], "SAME")
            loss = xtpu.math.reduce_sum(y * y)
        return tape.gradient(loss, [x, w])

    def jax_loss(x, w):
        y = lax.conv_general_dilated(
            x,
            w.reshape(3, 3, 1, 16),
            (stride, stride),
            "SAME",
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=16,
            precision=lax.Precision.HIGHEST,
        )
        return jnp.sum(y * y)

    used = []
    real = onednn_conv._run
    onednn_conv._run = lambda prep, *a: used.append(prep.kind) or real(prep, *a)
    try:
        gx, gw = xtpu.lower(step, [[x, w]]).compile()([[x, w]])[0]
    finally:
        onednn_conv._run = real
    want_x, want_w = jax.grad(jax_loss, argnums=(0, 1))(x, w)
    assert "forward" in used and "kernel gradient" in used
    assert ("input gradient" in used) == (stride == 2)
    close(np.asarray(gx), np.asarray(want_x), x, w)
    np.testing.assert_allclose(np.asarray(gw), np.asarray(want_w), rtol=1e-4, atol=1e-3)
