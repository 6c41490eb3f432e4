"""Elementwise fusion (issue 29): the ``hlo-fuse-elementwise`` pass and the
runtime's fused kernels.  A fused program gives the unfused program's bits
(the same numpy kernels in the same order; runtime/fusion.py), its outputs
are fresh on every call, and its regions show in ``compile().stages``."""

from __future__ import annotations

import numpy as np
import pytest

import xtpu
from xtpu.passes import DEFAULT_PIPELINE
from xtpu.runtime.errors import XtpuRuntimeError

UNFUSED = ",".join(DEFAULT_PIPELINE)


def block_step(x, w1, w2):
    """A pre-LayerNorm MLP block with GELU and softmax: its loss and SGD-updated weights."""
    with xtpu.GradientTape() as tape:
        tape.watch([w1, w2])
        mu = xtpu.reduce_mean(x, axis=-1, keepdims=True)
        var = xtpu.reduce_mean(xtpu.math.square(x - mu), axis=-1, keepdims=True)
        h = (x - mu) / xtpu.math.sqrt(var + 1e-5)
        a = xtpu.matmul(h, w1)
        g = 0.5 * a * (1.0 + xtpu.math.tanh(0.7978845608 * (a + 0.044715 * a * a * a)))
        y = xtpu.matmul(g, w2) + x
        s = xtpu.nn.softmax(y)
        loss = xtpu.reduce_sum(s * y)
    g1, g2 = tape.gradient(loss, [w1, w2])
    return loss, w1 - 0.1 * g1, w2 - 0.1 * g2


def _inputs(replicas: int, dtype=np.float32):
    rng = np.random.default_rng(7)
    return [
        [
            rng.standard_normal((16, 32)).astype(dtype),
            (rng.standard_normal((32, 64)) * 0.1).astype(dtype),
            (rng.standard_normal((64, 32)) * 0.1).astype(dtype),
        ]
        for _ in range(replicas)
    ]


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_step_equals_unfused_bit_for_bit(replicas, dtype):
    inputs = _inputs(replicas, dtype)
    lowered = xtpu.lower(block_step, inputs)
    fused, unfused = lowered.compile(), lowered.compile(UNFUSED)
    assert fused.stages["hlo-fuse-elementwise"].count("fusion.region") >= 5
    assert "fusion.region" not in unfused.as_text()
    want = unfused(inputs)
    for _ in range(2):  # the second call reuses the kernels' buffers
        got = fused(inputs)
        for w_r, g_r in zip(want, got):
            for w, g in zip(w_r, g_r):
                assert np.asarray(g).dtype == np.asarray(w).dtype
                np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    loss = [float(np.asarray(r[0])) for r in want]
    assert all(np.isfinite(loss))


def test_outputs_are_fresh_on_every_call():
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)

    def f(x):
        return xtpu.math.tanh(x * 2.0 + 1.0), xtpu.reduce_sum(xtpu.math.exp(x), axis=1)

    c = xtpu.lower(f, [[x]]).compile()
    assert "fusion.region" in c.as_text()
    first = c([[x]])[0]
    kept = [np.array(v, copy=True) for v in first]
    second = c([[x + 1]])[0]
    for a, k in zip(first, kept):
        np.testing.assert_array_equal(a, k)  # not overwritten by the second call
    np.testing.assert_array_equal(second[0], np.tanh((x + 1) * np.float32(2) + np.float32(1)))
    np.testing.assert_allclose(second[1], np.exp(x + 1).sum(axis=1), rtol=1e-6)


def test_integer_select_and_convert_chain_against_numpy():
    a = np.array([[7, -7, 3], [0, 5, -9]], np.int32)
    b = np.array([[2, 2, -2], [3, -4, 4]], np.int32)

    def f(a, b):
        q = a // b  # floor division: not a ufunc kernel in the region
        m = xtpu.where(a > b, a * b, a - b)
        return xtpu.cast(q, xtpu.float32) + xtpu.cast(m, xtpu.float32) * 0.5

    c = xtpu.lower(f, [[a, b]]).compile()
    assert "fusion.region" in c.as_text()
    want = (a // b).astype(np.float32) + np.where(a > b, a * b, a - b).astype(np.float32) * np.float32(0.5)
    for _ in range(2):
        np.testing.assert_array_equal(c([[a, b]])[0][0], want)


def test_a_failing_op_in_a_region_is_named():
    a = np.array([4, 5], np.int32)

    def f(a, b):
        return (a // b) * 2 + 1

    c = xtpu.lower(f, [[a, a]]).compile()
    assert "fusion.region" in c.as_text()
    with pytest.raises(XtpuRuntimeError, match="divide by zero|ZeroDivision|integer division") as e:
        with np.errstate(all="raise"):
            c([[a, np.zeros(2, np.int32)]])
    assert "fusion.region" not in str(e.value)
