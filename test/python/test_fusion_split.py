"""A fusion region run in row pieces over the intra-op threads
(runtime/fusion_split.py, runtime/fusion.py ``_Pieces``): where it may be
cut, and that the pieces give the whole region's bits (the same numpy
kernels on outer slices) and numpy's values."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

from xtpu.core.pipeline import parse_module
from xtpu.dialects import intra_op
from xtpu.dialects.fusion import FusionRegionOp
from xtpu.runtime import fusion
from xtpu.runtime.fusion_split import cut_of, heavy_elements, made_elements


def region(text: str) -> FusionRegionOp:
    module = parse_module(text)
    (op,) = [o for o in module.walk() if isinstance(o, FusionRegionOp)]
    return op


def body(op: FusionRegionOp):
    block = op.body.block
    return [o for o in block.ops if o is not block.last_op], list(block.args)


def func(args: str, results: str, region_text: str) -> str:
    return f"func.func @f({args}) -> ({results}) {{\n{region_text}\n}}"


# A layer norm's normalisation: a row mean broadcast back, a scale and bias
# broadcast along the rows, tanh, and the row sum of the result.
NORM = func(
    "%x: tensor<6x5x8xf32>, %m: tensor<6x5x1xf32>, %g: tensor<8xf32>, %z: tensor<f32>",
    "tensor<6x5x8xf32>, tensor<6x5xf32>",
    """  %r, %s = fusion.region "input"(%x, %m, %g, %z) : (tensor<6x5x8xf32>, tensor<6x5x1xf32>, tensor<8xf32>, tensor<f32>) -> (tensor<6x5x8xf32>, tensor<6x5xf32>) {
  ^bb0(%a: tensor<6x5x8xf32>, %b: tensor<6x5x1xf32>, %c: tensor<8xf32>, %i: tensor<f32>):
    %bm = hlo.broadcast_in_dim %b, dims = [0, 1, 2] : (tensor<6x5x1xf32>) -> tensor<6x5x8xf32>
    %d = hlo.subtract %a, %bm : tensor<6x5x8xf32>
    %bg = hlo.broadcast_in_dim %c, dims = [2] : (tensor<8xf32>) -> tensor<6x5x8xf32>
    %e = hlo.multiply %d, %bg : tensor<6x5x8xf32>
    %t = hlo.tanh %e : tensor<6x5x8xf32>
    %s = hlo.reduce(%t init: %i) applies add across dimensions = [2] : (tensor<6x5x8xf32>, tensor<f32>) -> tensor<6x5xf32>
    fusion.yield %t, %s : tensor<6x5x8xf32>, tensor<6x5xf32>
  }
  func.return %r, %s : tensor<6x5x8xf32>, tensor<6x5xf32>""",
)

# A masked softmax's numerator: a scalar predicate and a broadcast scalar.
MASKED = func(
    "%x: tensor<7x16xf32>, %y: tensor<7x16xf32>, %p: tensor<i1>, %k: tensor<f32>",
    "tensor<7x16xf32>",
    """  %r = fusion.region "loop"(%x, %y, %p, %k) : (tensor<7x16xf32>, tensor<7x16xf32>, tensor<i1>, tensor<f32>) -> tensor<7x16xf32> {
  ^bb0(%a: tensor<7x16xf32>, %b: tensor<7x16xf32>, %q: tensor<i1>, %c: tensor<f32>):
    %bc = hlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<7x16xf32>
    %s = hlo.select %q, %a, %b : (tensor<i1>, tensor<7x16xf32>, tensor<7x16xf32>) -> tensor<7x16xf32>
    %m = hlo.multiply %s, %bc : tensor<7x16xf32>
    %e = hlo.exponential %m : tensor<7x16xf32>
    fusion.yield %e : tensor<7x16xf32>
  }
  func.return %r : tensor<7x16xf32>""",
)

# bfloat16 arithmetic and a convert: each op rounds once, on either side.
LOW = func(
    "%x: tensor<9x4xbf16>, %y: tensor<9x4xbf16>",
    "tensor<9x4xf32>",
    """  %r = fusion.region "loop"(%x, %y) : (tensor<9x4xbf16>, tensor<9x4xbf16>) -> tensor<9x4xf32> {
  ^bb0(%a: tensor<9x4xbf16>, %b: tensor<9x4xbf16>):
    %m = hlo.multiply %a, %b : tensor<9x4xbf16>
    %e = hlo.tanh %m : tensor<9x4xbf16>
    %c = hlo.convert %e : (tensor<9x4xbf16>) -> tensor<9x4xf32>
    fusion.yield %c : tensor<9x4xf32>
  }
  func.return %r : tensor<9x4xf32>""",
)


def inputs(op: FusionRegionOp, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for a in op.body.block.args:
        shape = tuple(a.type.get_shape())
        name = str(a.type.element_type)
        if name == "i1":
            out.append(np.array(True))
        elif name == "bf16":
            out.append(rng.standard_normal(shape).astype(ml_dtypes.bfloat16))
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out


@pytest.fixture
def split(monkeypatch):
    """Regions of any size split, into ``n`` pieces."""
    monkeypatch.setattr(fusion, "MIN_SPLIT_ELEMENTS", 1)

    def set_(n):
        intra_op.set_parts(n)

    yield set_
    intra_op.set_parts(1)


@pytest.mark.parametrize("text", [NORM, MASKED, LOW], ids=["norm", "masked", "bf16"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_pieces_give_the_whole_region_s_bits(split, text, n):
    op = region(text)
    xs = inputs(op)
    kernel = fusion.fused_kernel(op)
    whole = kernel(*xs)  # parts() is 1: the region in one call
    whole = whole if isinstance(whole, tuple) else (whole,)
    split(n)
    seen = set()
    real = intra_op.run_pieces

    def spy(fn, pieces):
        seen.add(len(pieces))
        return real(fn, pieces)

    intra_op.run_pieces, saved = spy, real
    try:
        got = kernel(*xs)
    finally:
        intra_op.run_pieces = saved
    got = got if isinstance(got, tuple) else (got,)
    assert seen == {len(intra_op.slices(tuple(op.results[0].type.get_shape())[0], n))} != {1}
    for g, w in zip(got, whole):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    # ...into the arrays the plan gives, for the results it gives one.
    outs = [np.full_like(w, np.nan) for w in whole]
    again = kernel(*xs, _outs=outs)
    again = again if isinstance(again, tuple) else (again,)
    for g, o, w in zip(again, outs, whole):
        assert g is o
        np.testing.assert_array_equal(o, w)


def test_the_pieces_compute_numpy_s_values(split):
    split(2)
    op = region(NORM)
    x, m, g, z = inputs(op)
    t, s = fusion.fused_kernel(op)(x, m, g, np.float32(0))
    want = np.tanh((x - m) * g)
    np.testing.assert_array_equal(t, want)
    np.testing.assert_allclose(s, want.sum(axis=2), rtol=1e-6, atol=1e-6)
    assert z.shape == ()


def test_each_thread_runs_its_piece_with_its_own_buffers(split, monkeypatch):
    """Intermediates above 64 KB are written into kept buffers: each
    piece's thread has its own, of the piece's shape."""
    monkeypatch.setattr(fusion, "MIN_SPLIT_ELEMENTS", 1)
    text = NORM.replace("6x5x8", "64x32x64").replace("6x5x1", "64x32x1").replace("6x5x", "64x32x")
    text = text.replace("tensor<8xf32>", "tensor<64xf32>").replace("6x5xf32", "64x32xf32")
    op = region(text)
    xs = inputs(op)
    kernel = fusion.fused_kernel(op)
    whole = kernel(*xs)
    split(2)
    threads = set()
    real = fusion._shared_arrays

    def spy(keys):
        threads.add((threading.get_ident(), tuple(k[0] for k in keys)))
        return real(keys)

    monkeypatch.setattr(fusion, "_shared_arrays", spy)
    for _ in range(3):
        got = kernel(*xs)
        for g, w in zip(got, whole):
            np.testing.assert_array_equal(g, w)
    assert len({t for t, _ in threads}) >= 2, threads  # the caller's and a pool thread's
    assert {shapes for _, shapes in threads} == {((32, 32, 64),)}


@pytest.mark.parametrize(
    "text,why",
    [
        (
            func(
                "%x: tensor<8x4xf32>, %i: tensor<f32>",
                "tensor<4xf32>",
                """  %r = fusion.region "input"(%x, %i) : (tensor<8x4xf32>, tensor<f32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<8x4xf32>, %z: tensor<f32>):
    %e = hlo.exponential %a : tensor<8x4xf32>
    %s = hlo.reduce(%e init: %z) applies add across dimensions = [0] : (tensor<8x4xf32>, tensor<f32>) -> tensor<4xf32>
    fusion.yield %s : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>""",
            ),
            "a reduction over the leading dimension",
        ),
        (
            func(
                "%x: tensor<8x4xf32>, %i: tensor<f32>",
                "tensor<f32>",
                """  %r = fusion.region "input"(%x, %i) : (tensor<8x4xf32>, tensor<f32>) -> tensor<f32> {
  ^bb0(%a: tensor<8x4xf32>, %z: tensor<f32>):
    %e = hlo.exponential %a : tensor<8x4xf32>
    %s = hlo.reduce(%e init: %z) applies add across dimensions = [0, 1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<f32>
    fusion.yield %s : tensor<f32>
  }
  func.return %r : tensor<f32>""",
            ),
            "a scalar result",
        ),
        (
            func(
                "%x: tensor<8x8xf32>, %v: tensor<8xf32>",
                "tensor<8x8xf32>",
                """  %r = fusion.region "loop"(%x, %v) : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32> {
  ^bb0(%a: tensor<8x8xf32>, %b: tensor<8xf32>):
    %e = hlo.exponential %b : tensor<8xf32>
    %c = hlo.broadcast_in_dim %e, dims = [0] : (tensor<8xf32>) -> tensor<8x8xf32>
    %d = hlo.broadcast_in_dim %e, dims = [1] : (tensor<8xf32>) -> tensor<8x8xf32>
    %m = hlo.multiply %c, %d : tensor<8x8xf32>
    %s = hlo.add %m, %a : tensor<8x8xf32>
    fusion.yield %s : tensor<8x8xf32>
  }
  func.return %r : tensor<8x8xf32>""",
            ),
            "a value read along the rows and along the columns",
        ),
    ],
    ids=["reduces-rows", "scalar", "outer-product"],
)
def test_what_cannot_be_cut_runs_whole(split, text, why):
    op = region(text)
    assert cut_of(*body(op)) is None, why
    xs = inputs(op)
    kernel = fusion.fused_kernel(op)
    split(2)
    called = []
    real = intra_op.run_pieces
    intra_op.run_pieces = lambda *a: called.append(a)
    try:
        got = kernel(*xs)
    finally:
        intra_op.run_pieces = real
    assert not called
    intra_op.set_parts(1)
    np.testing.assert_array_equal(got, kernel(*xs))


def test_the_cut_reads_broadcast_operands_whole():
    cut = cut_of(*body(region(NORM)))
    x, m, g, z = region(NORM).body.block.args
    assert cut.extent == 6
    assert [a.name_hint for a in cut.args] in (["a", "b"], ["b", "a"])


def test_only_regions_of_heavy_arithmetic_or_of_much_data_split():
    """Small memory-bound loops (add, multiply, select) are not worth a
    split on this machine; transcendental ones are, and so are loops over
    more data than the caches hold (runtime/fusion_split.py)."""
    ops, _ = body(region(NORM))
    assert heavy_elements(ops) == 6 * 5 * 8  # the tanh
    ops, _ = body(region(MASKED))
    assert heavy_elements(ops) == 7 * 16  # the exponential
    cheap = func(
        "%x: tensor<512x512xf32>",
        "tensor<512x512xf32>",
        """  %r = fusion.region "loop"(%x) : (tensor<512x512xf32>) -> tensor<512x512xf32> {
  ^bb0(%a: tensor<512x512xf32>):
    %m = hlo.multiply %a, %a : tensor<512x512xf32>
    %s = hlo.add %m, %a : tensor<512x512xf32>
    fusion.yield %s : tensor<512x512xf32>
  }
  func.return %r : tensor<512x512xf32>""",
    )
    op = region(cheap)
    assert heavy_elements(body(op)[0]) == 0 and made_elements(body(op)[0]) == 2 * 512 * 512
    big = region(cheap.replace("512x512", "1024x1024"))
    assert made_elements(body(big)[0]) == fusion.MIN_SPLIT_MADE
    intra_op.set_parts(2)
    try:
        assert not isinstance(getattr(fusion.fused_kernel(op), "__self__", None), fusion._Pieces)
        kernel = fusion.fused_kernel(big)
        assert isinstance(getattr(kernel, "__self__", None), fusion._Pieces)
        x = np.linspace(-1, 1, 1024 * 1024, dtype=np.float32).reshape(1024, 1024)
        np.testing.assert_array_equal(kernel(x), x * x + x)
    finally:
        intra_op.set_parts(1)
