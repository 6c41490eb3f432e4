"""Elementwise fusion (issue 29): the ``hlo-fuse-elementwise`` pass and the
runtime's fused kernels.  A fused program gives the unfused program's bits
(the same numpy kernels in the same order; runtime/fusion.py), its outputs
are fresh on every call, and its regions show in ``compile().stages``."""

from __future__ import annotations

import os
import sys

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import mlp_block  # noqa: E402
import xla_reference as X  # noqa: E402  (before jax: it asks for 8 CPU devices)

import xtpu  # noqa: E402
from xtpu.dialects.fusion import FusionRegionOp  # noqa: E402
from xtpu.passes import DEFAULT_PIPELINE  # noqa: E402
from xtpu.runtime import codegen  # noqa: E402
from xtpu.runtime.errors import XtpuRuntimeError  # noqa: E402

UNFUSED = ",".join(DEFAULT_PIPELINE)


def block_step(x, w1, w2):
    return mlp_block.block_step(x, w1, w2)


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
@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16])
def test_fused_step_equals_unfused_bit_for_bit(replicas, dtype):
    """bfloat16 / float16 too: each op computes in float32 and rounds once
    (XLA's float normalization), fused or not."""
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


def _floor_div_twice_plus_one(a, b):
    return (a // b) * 2 + 1


def _floor_div_twice_plus_one_again(a, b):
    return (a // b) * 2 + 1


def test_programs_sharing_generated_code_name_their_own_source_line():
    """Two programs of the same structure share their plans' and regions'
    code objects (runtime/codegen.py); a failure in each still names that
    program's own source line."""
    a = np.array([4, 5], np.int32)
    first = xtpu.lower(_floor_div_twice_plus_one, [[a, a]]).compile()
    hits = codegen._code.cache_info().hits
    second = xtpu.lower(_floor_div_twice_plus_one_again, [[a, a]]).compile()
    assert codegen._code.cache_info().hits >= hits + 2  # its plan and its region
    assert first.executable is not second.executable
    for c, fn in [(second, _floor_div_twice_plus_one_again), (first, _floor_div_twice_plus_one)]:
        line = fn.__code__.co_firstlineno + 1
        with pytest.raises(XtpuRuntimeError) as e:
            with np.errstate(all="raise"):
                c([[a, np.zeros(2, np.int32)]])
        assert f"test_fusion.py:{line}" in str(e.value), str(e.value)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, np.float32])
def test_low_precision_chain_rounds_once_per_op(dtype):
    """A division, a select, a compare and converts in one region give the
    unfused bits, and on bfloat16 / float16 each op's result is the float32
    result rounded once (numpy on float32, the reference)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 16)).astype(dtype)
    y = (rng.standard_normal((8, 16)) + 3.0).astype(dtype)

    def f(x, y):
        q = x / y
        r = xtpu.where(q > 0.25, q * y, q - x)
        return xtpu.cast(xtpu.cast(r, xtpu.float32) * 3.0, r.dtype) / (y + 1.0)

    lowered = xtpu.lower(f, [[x, y]])
    fused, unfused = lowered.compile(), lowered.compile(UNFUSED)
    assert "fusion.region" in fused.as_text()
    want = unfused([[x, y]])[0][0]
    for _ in range(2):
        got = fused([[x, y]])[0][0]
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))

    def rnd(v):
        return np.asarray(v, np.float32).astype(dtype).astype(np.float32)

    xf, yf = x.astype(np.float32), y.astype(np.float32)
    q = rnd(xf / yf)
    r = np.where(q > np.float32(0.25), rnd(q * yf), rnd(q - xf))
    ref = rnd(rnd(r * np.float32(3.0)) / rnd(yf + np.float32(1.0))).astype(dtype)
    np.testing.assert_array_equal(want.view(np.uint8), ref.view(np.uint8))


def test_fused_program_exports_to_stablehlo_and_runs_on_xla():
    """Export inlines each fusion.region (its body's ops in order): MLIR
    verifies the text and XLA's CPU client runs it equal to xtpu on 2
    replicas."""
    pytest.importorskip("jax")
    inputs = _inputs(2)
    compiled = xtpu.lower(block_step, inputs).compile()
    assert compiled.as_text().count("fusion.region") >= 5
    text = compiled.as_text(dialect="stablehlo")
    assert "fusion." not in text and "stablehlo.reduce" in text and "stablehlo.tanh" in text
    X.verify(text)
    X.check_against_xtpu(compiled, inputs, text=text)


def test_regions_on_one_thread_share_their_scratch_arrays_and_free_them():
    """Fused kernels take their intermediates' arrays from the thread's
    (runtime/fusion.py, _Shared): a second kernel's buffer of a shape and
    dtype is the first's, another thread gets its own, and the arrays go
    when no kernel holds them; two programs' regions called in turn still
    give numpy's values."""
    import gc
    import threading
    import weakref

    from xtpu.runtime import fusion

    key, other_key = ((300, 100), np.dtype(np.float32)), ((300, 100), np.dtype(np.float64))
    first = fusion._shared_arrays([key, key, other_key])
    second = fusion._shared_arrays([key])
    assert first[0] is not first[1] and second[0] is first[0]
    assert first[2].dtype == np.float64 and first[0].shape == (300, 100)
    box: list = []
    t = threading.Thread(target=lambda: box.extend(fusion._shared_arrays([key])))
    t.start()
    t.join(60)
    assert box[0] is not first[0] and box[0].shape == (300, 100)
    refs = [weakref.ref(a) for a in first]
    del first, second
    box.clear()
    gc.collect()
    assert all(r() is None for r in refs)
    assert fusion._shared_arrays([key])[0] is not None  # made again

    x = np.linspace(-1, 1, 128 * 256, dtype=np.float32).reshape(128, 256)

    def f(x):
        return xtpu.math.tanh(x * 2.0 + 1.0) * 3.0 - x

    def g(x):
        return xtpu.math.exp(x * 0.5 - 1.0) + x * x

    cf, cg = xtpu.lower(f, [[x]]).compile(), xtpu.lower(g, [[x]]).compile()
    assert "fusion.region" in cf.as_text() and "fusion.region" in cg.as_text()
    for _ in range(2):
        np.testing.assert_array_equal(cf([[x]])[0][0], np.tanh(x * np.float32(2) + np.float32(1)) * np.float32(3) - x)
        np.testing.assert_array_equal(cg([[x]])[0][0], np.exp(x * np.float32(0.5) - np.float32(1)) + x * x)


def test_regions_of_one_signature_and_one_kind_attribute_keep_their_own_kernels():
    """A region's kernel depends on its body, which no attribute names: two
    regions with the same operand and result types and one ``kind``
    attribute object (a pass may share attributes, as tracing does) still
    run their own bodies (the runtime's kernels are shared by form,
    runtime/plan.py's ``form_key``; a region is its own form)."""

    def f(x):
        return xtpu.math.tanh(x * 2.0 + 1.0), xtpu.math.exp(x - 3.0) * 0.5

    x = np.linspace(-2, 2, 4 * 64 * 64, dtype=np.float32).reshape(4, 64, 64)
    c = xtpu.lower(f, [[x]]).compile()
    a, b = [o for o in c.module.walk() if isinstance(o, FusionRegionOp)]
    assert a.result_types == b.result_types and [v.type for v in a.operands] == [v.type for v in b.operands]
    b.properties["kind"] = a.properties["kind"]
    shared = type(c)(c.module, c.signature, c.out_tree, c.stages, None)
    y, z = shared([[x]])[0]
    np.testing.assert_array_equal(y, np.tanh(x * np.float32(2) + np.float32(1)))
    np.testing.assert_allclose(z, np.exp(x - np.float32(3)) * np.float32(0.5), rtol=1e-6)
