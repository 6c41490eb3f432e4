"""TF 2's ops added for issue 15: each case equals its numpy reference
eagerly, and compiled through ``xtpu.replicate`` with 1, 2 and 8 replicas
(different data per replica) equals the eager result on that replica's data
bit for bit (one op definition serves both)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import xtpu

F32, F64, I32, I64 = np.float32, np.float64, np.int32, np.int64


@dataclass
class Case:
    name: str
    fn: Callable
    inputs: Callable[[np.random.Generator], list]
    ref: Callable


def normal(*shape, dtype=F32):
    return lambda rng: rng.standard_normal(shape).astype(dtype)


def ints(*shape, lo=-9, hi=10, dtype=I32):
    return lambda rng: rng.integers(lo, hi, size=shape).astype(dtype)


def nonzero_ints(*shape, dtype=I32):
    return lambda rng: (rng.integers(1, 8, size=shape) * rng.choice([-1, 1], size=shape)).astype(dtype)


def bools(*shape):
    return lambda rng: rng.random(shape) < 0.5


def ins(*makers):
    return lambda rng: [m(rng) for m in makers]


def _np_floordiv(a, b):
    return np.floor_divide(a, b)


def _np_gather_nd(p, idx):
    return p[tuple(np.moveaxis(idx, -1, 0))]


def _np_segment_sum(d, ids, n):
    out = np.zeros((n,) + d.shape[ids.ndim :], d.dtype)
    for i in np.ndindex(ids.shape):
        if 0 <= ids[i] < n:
            out[ids[i]] += d[i]
    return out


CASES = [
    Case(
        "einsum_matmul",
        lambda a, b: xtpu.einsum("ij,jk->ik", a, b),
        ins(normal(3, 4), normal(4, 2)),
        lambda a, b: np.einsum("ij,jk->ik", a, b),
    ),
    Case(
        "einsum_batch_transposed_out",
        lambda a, b: xtpu.einsum("bij,bkj->kbi", a, b),
        ins(normal(2, 3, 4), normal(2, 5, 4)),
        lambda a, b: np.einsum("bij,bkj->kbi", a, b),
    ),
    Case(
        "einsum_dot_sum_and_implicit",
        lambda a, b: (
            xtpu.einsum("i,i->", a, b),
            xtpu.einsum("ij,jk", a[None], b[:, None]),
            xtpu.einsum("ij->j", a[None]),
            xtpu.einsum("ij,k->ik", a[None], b),
        ),
        ins(normal(4), normal(4)),
        lambda a, b: (
            np.einsum("i,i->", a, b),
            np.einsum("ij,jk", a[None], b[:, None]),
            np.einsum("ij->j", a[None]),
            np.einsum("ij,k->ik", a[None], b),
        ),
    ),
    Case(
        "einsum_int",
        lambda a, b: xtpu.einsum("ij,jk->ki", a, b),
        ins(ints(2, 3), ints(3, 2)),
        lambda a, b: np.einsum("ij,jk->ki", a, b),
    ),
    Case(
        "einsum_ellipsis",
        lambda a, b, c: (
            xtpu.einsum("...ij,jk->...ik", a, b),
            xtpu.einsum("...ij,...ij->...", a, c),
            xtpu.einsum("...j,jk", a, b),
        ),
        ins(normal(2, 3, 4, 5), normal(5, 2), normal(3, 4, 5)),
        lambda a, b, c: (
            np.einsum("...ij,jk->...ik", a, b),
            np.einsum("...ij,...ij->...", a, c),
            np.einsum("...j,jk", a, b),
        ),
    ),
    Case(
        "gather_axis0",
        lambda p, i: xtpu.gather(p, i),
        ins(normal(5, 3), ints(2, 3, lo=0, hi=5)),
        lambda p, i: np.take(p, i, axis=0),
    ),
    Case(
        "gather_axis1_int64_bool",
        lambda p, i, q: (xtpu.gather(p, i, axis=1), xtpu.gather(q, i, axis=-1)),
        ins(ints(2, 4, 3, dtype=I64), ints(5, lo=0, hi=3, dtype=I64), bools(3, 3)),
        lambda p, i, q: (np.take(p, i, axis=1), np.take(q, i, axis=-1)),
    ),
    Case(
        "gather_batch_dims",
        lambda p, i: (xtpu.gather(p, i, axis=2, batch_dims=1), xtpu.gather(p[:, 0], i, batch_dims=-1)),
        ins(normal(2, 3, 5), ints(2, 4, lo=0, hi=5)),
        lambda p, i: (
            np.stack([np.take(p[b], i[b], axis=1) for b in range(2)]),
            np.take_along_axis(p[:, 0], i, axis=1),
        ),
    ),
    Case(
        "gather_nd",
        lambda p, i: (xtpu.gather_nd(p, i), xtpu.gather_nd(p, i[:, :1])),
        ins(normal(4, 3, 2), ints(5, 2, lo=0, hi=3)),
        lambda p, i: (_np_gather_nd(p, i), _np_gather_nd(p, i[:, :1])),
    ),
    Case(
        "tile",
        lambda x, y: (xtpu.tile(x, [2, 3]), xtpu.tile(y, [3])),
        ins(normal(2, 3), ints(4)),
        lambda x, y: (np.tile(x, [2, 3]), np.tile(y, [3])),
    ),
    Case(
        "where_select_broadcast",
        lambda c, x, y: (xtpu.where(c, x, y), xtpu.where(c[0], x, 0.0)),
        ins(bools(3, 4), normal(3, 4), normal(4)),
        lambda c, x, y: (np.where(c, x, y), np.where(c[0], x, np.float32(0))),
    ),
    Case(
        "switch_case",
        lambda i, x: xtpu.switch_case(i, [lambda: x * 2.0, lambda: x - 1.0, lambda: -x]),
        ins(ints(lo=0, hi=4), normal(3)),
        lambda i, x: [x * 2, x - 1, -x][min(int(i), 2)],
    ),
    Case(
        "unsorted_segment_sum",
        lambda d, s: (xtpu.unsorted_segment_sum(d, s, 4), xtpu.unsorted_segment_sum(d[:, 0], s, 3)),
        ins(normal(6, 2), ints(6, lo=-1, hi=5)),
        lambda d, s: (_np_segment_sum(d, s, 4), _np_segment_sum(d[:, 0], s, 3)),
    ),
    Case(
        "unsorted_segment_sum_int_2d_ids",
        lambda d, s: xtpu.unsorted_segment_sum(d, s, 3),
        ins(ints(2, 3, 2), ints(2, 3, lo=0, hi=3)),
        lambda d, s: _np_segment_sum(d, s, 3),
    ),
    Case(
        "segment_sum",
        lambda d, i: (xtpu.segment_sum(d, np.array([0, 0, 2, 2, 3])), xtpu.math.segment_sum(i, [1, 1, 1])),
        ins(normal(5, 2), ints(3)),
        lambda d, i: (_np_segment_sum(d, np.array([0, 0, 2, 2, 3]), 4), _np_segment_sum(i, np.array([1, 1, 1]), 2)),
    ),
    Case(
        "size_shape",
        lambda x: (xtpu.size(x), xtpu.shape(x), xtpu.size(x, out_type=xtpu.int64)),
        ins(normal(2, 3, 4)),
        lambda x: (np.int32(24), np.array([2, 3, 4], I32), np.int64(24)),
    ),
    Case(
        "expand_dims_squeeze",
        lambda x: (
            xtpu.expand_dims(x, 1),
            xtpu.expand_dims(x, -1),
            xtpu.squeeze(x[None, :, None]),
            xtpu.squeeze(x[None, :, None], axis=[-1]),
        ),
        ins(normal(3)),
        lambda x: (x[:, None], x[:, None], x, x[None]),
    ),
    Case(
        "stack_unstack",
        lambda x, y: (xtpu.stack([x, y]), xtpu.stack([x, y], axis=-1), *xtpu.unstack(x, axis=1)),
        ins(normal(2, 3), normal(2, 3)),
        lambda x, y: (np.stack([x, y]), np.stack([x, y], axis=-1), *[x[:, k] for k in range(3)]),
    ),
    Case(
        "clip_by_value",
        lambda x, lo: (xtpu.clip_by_value(x, -0.5, 0.5), xtpu.clip_by_value(x, lo, 1.0)),
        ins(normal(3, 4), normal(4)),
        lambda x, lo: (np.clip(x, -0.5, 0.5), np.minimum(np.maximum(x, lo), 1.0)),
    ),
    Case(
        "zeros_ones_fill",
        lambda x: (
            xtpu.zeros([2, 3]),
            xtpu.ones([2], xtpu.int32),
            xtpu.fill([2, 2], 7),
            xtpu.zeros_like(x),
            xtpu.ones_like(x),
            xtpu.ones_like(x, dtype=xtpu.int64),
            xtpu.zeros([2], xtpu.bool_),
        ),
        ins(normal(3)),
        lambda x: (
            np.zeros((2, 3), F32),
            np.ones(2, I32),
            np.full((2, 2), 7, I32),
            np.zeros_like(x),
            np.ones_like(x),
            np.ones(3, I64),
            np.zeros(2, bool),
        ),
    ),
    Case(
        "range",
        lambda x: (
            xtpu.range(5),
            xtpu.range(2, 11, 3),
            xtpu.range(1.0, 2.0, 0.25),
            xtpu.range(5, 0, -2),
            xtpu.range(3, dtype=xtpu.int64),
        ),
        ins(normal(1)),
        lambda x: (
            np.arange(5, dtype=I32),
            np.arange(2, 11, 3, dtype=I32),
            np.arange(1.0, 2.0, 0.25, dtype=F32),
            np.arange(5, 0, -2, dtype=I32),
            np.arange(3, dtype=I64),
        ),
    ),
    Case(
        "square_reduce_prod",
        lambda x, i: (
            xtpu.square(x),
            xtpu.reduce_prod(x, axis=1),
            xtpu.reduce_prod(i),
            xtpu.reduce_prod(x, axis=0, keepdims=True),
        ),
        ins(normal(2, 3), ints(4, lo=-3, hi=4)),
        lambda x, i: (x * x, np.prod(x, axis=1), np.prod(i, dtype=I32), np.prod(x, axis=0, keepdims=True)),
    ),
    Case(
        "reduce_any_all",
        lambda b: (
            xtpu.reduce_any(b),
            xtpu.reduce_all(b),
            xtpu.reduce_any(b, axis=1),
            xtpu.reduce_all(b, axis=0, keepdims=True),
        ),
        ins(bools(3, 4)),
        lambda b: (np.any(b), np.all(b), np.any(b, axis=1), np.all(b, axis=0, keepdims=True)),
    ),
    Case(
        "logical",
        lambda a, b: (
            xtpu.logical_and(a, b),
            xtpu.logical_or(a, b),
            xtpu.logical_not(a),
            xtpu.logical_xor(a, b),
            xtpu.logical_xor(a, True),
        ),
        ins(bools(5), bools(5)),
        lambda a, b: (a & b, a | b, ~a, a ^ b, ~a),
    ),
    Case(
        "int_floordiv_mod",
        lambda a, b: (xtpu.floordiv(a, b), xtpu.floormod(a, b), xtpu.mod(a, 3), xtpu.floordiv(a, -4)),
        ins(ints(12, lo=-20, hi=21), nonzero_ints(12)),
        lambda a, b: (_np_floordiv(a, b), np.mod(a, b), np.mod(a, 3), _np_floordiv(a, -4)),
    ),
    Case(
        "int64_floordiv_mod",
        lambda a, b: (xtpu.floordiv(a, b), xtpu.floormod(a, b)),
        ins(ints(6, lo=-20, hi=21, dtype=I64), nonzero_ints(6, dtype=I64)),
        lambda a, b: (_np_floordiv(a, b), np.mod(a, b)),
    ),
    Case(
        "float_floordiv_mod",
        lambda a, b: (xtpu.floordiv(a, b), xtpu.floormod(a, b)),
        # integer-valued floats: exact quotients, so numpy's formula agrees
        ins(
            lambda rng: rng.integers(-20, 21, 8).astype(F32),
            lambda rng: rng.choice([-4.0, -2.0, 2.0, 4.0], 8).astype(F32),
        ),
        lambda a, b: (np.floor_divide(a, b), np.mod(a, b)),
    ),
]


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _check(got, want, what):
    for j, (g, w) in enumerate(zip(_tuple(got), _tuple(want))):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, f"{what}[{j}]: dtype {g.dtype}, expected {w.dtype}"
        assert g.shape == w.shape, f"{what}[{j}]: shape {g.shape}, expected {w.shape}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{what}[{j}]")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{what}[{j}]")
    assert len(_tuple(got)) == len(_tuple(want))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_eager_equals_numpy_and_compiled_equals_eager(case):
    inputs = case.inputs(np.random.default_rng(0))
    _check(case.fn(*inputs), case.ref(*inputs), f"{case.name} eager vs numpy")
    for n in (1, 2, 8):
        per_replica = [case.inputs(np.random.default_rng(100 + r)) for r in range(n)]
        outs = xtpu.replicate(case.fn, per_replica)
        for r in range(n):
            eager = case.fn(*per_replica[r])
            got = outs[r]
            for j, (g, e) in enumerate(zip(_tuple(got), _tuple(eager))):
                g, e = np.asarray(g), np.asarray(e)
                assert g.dtype == e.dtype and g.shape == e.shape, f"{case.name} replica {r}/{n} output {j}"
                np.testing.assert_array_equal(g, e, err_msg=f"{case.name}: replica {r} of {n}, output {j}")


def test_out_of_range_indices_give_zeros_and_errors_name_the_problem():
    p = np.arange(6, dtype=F32).reshape(3, 2)
    np.testing.assert_array_equal(xtpu.gather(p, np.array([5, -1, 1])), [[0, 0], [0, 0], [2, 3]])
    np.testing.assert_array_equal(xtpu.gather_nd(p, np.array([[3, 0], [1, 1]])), [0, 3])
    with pytest.raises(TypeError, match="indices must be int32 or int64"):
        xtpu.gather(p, np.array([0.0]))
    with pytest.raises(ValueError, match="batch dimensions of params \\[3\\] and indices \\[2\\] differ"):
        xtpu.gather(p, np.zeros((2, 1), np.int32), batch_dims=1)
    with pytest.raises(ValueError, match="Can not squeeze dim\\[1\\], expected a dimension of 1, got 2"):
        xtpu.squeeze(p, axis=1)
    with pytest.raises(ValueError, match="shapes of all inputs must match"):
        xtpu.stack([p, p[:1]])
    with pytest.raises(ValueError, match="must be a prefix"):
        xtpu.unsorted_segment_sum(p, np.array([0, 1]), 2)
    with pytest.raises(ValueError, match="use unsorted_segment_sum"):
        xtpu.replicate(lambda ids: xtpu.segment_sum(p, ids), [[np.array([0, 0, 1])]])
    np.testing.assert_array_equal(xtpu.segment_sum(p, np.array([0, 0, 2])), [[2, 4], [0, 0], [4, 5]])
    with pytest.raises(ValueError, match="segment ids must be >= 0, got -1"):  # TF's kernel raises too
        xtpu.segment_sum(p, np.array([-1, 0, 0]))
    with pytest.raises(ValueError, match="invalid subscripts"):
        xtpu.einsum("...i...,i->...", p, p[0])
    with pytest.raises(NotImplementedError, match="repeated index"):
        xtpu.einsum("ii->i", p[:2])
    with pytest.raises(ValueError, match="index 'j' has dimensions 2 and 3"):
        xtpu.einsum("ij,jk->ik", p, p)
    with pytest.raises(TypeError, match="logical_xor: operands must be bool"):
        xtpu.logical_xor(p, p)
    np.testing.assert_array_equal(xtpu.where(np.array([[True, False], [False, True]])), [[0, 0], [1, 1]])


def test_gradients_flow_through_the_composite_ops():
    """gather, unsorted_segment_sum, einsum, tile and clip_by_value
    differentiate through their StableHLO ops' rules; checked against the
    analytic gradients."""
    p = np.arange(6, dtype=F64).reshape(3, 2)
    idx = np.array([2, 0, 2])
    with xtpu.GradientTape() as tape:
        v = xtpu.constant(p)
        tape.watch(v)
        y = xtpu.reduce_sum(xtpu.gather(v, idx) * 2.0) + xtpu.reduce_sum(xtpu.tile(v, [2, 1]))
        y = y + xtpu.reduce_sum(xtpu.einsum("ij,ij->i", v, v)) + xtpu.reduce_sum(xtpu.clip_by_value(v, 1.0, 4.0))
    g = tape.gradient(y, v)
    want = np.zeros_like(p)
    np.add.at(want, idx, 2.0)
    want += 2.0 + 2 * p + ((p >= 1.0) & (p <= 4.0))  # TF's ClipByValue gradient includes the bounds
    np.testing.assert_allclose(g, want)
    with xtpu.GradientTape() as tape:
        d = xtpu.constant(p)
        tape.watch(d)
        s = xtpu.unsorted_segment_sum(d, np.array([1, 1, 0]), 2)
        z = xtpu.reduce_sum(s * np.array([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_allclose(tape.gradient(z, d), [[3, 4], [3, 4], [1, 2]])


def test_floor_is_not_differentiable_as_in_tf():
    x = xtpu.constant(np.array([1.5, -2.5]))
    with xtpu.GradientTape() as tape:
        tape.watch(x)
        y = xtpu.reduce_sum(xtpu.floordiv(x, 1.0))
    # TF 2.21 (CPU): tape.gradient(tf.reduce_sum(tf.math.floordiv(x, 1.0)), x) is None
    # (FloorDiv has no gradient, math_grad.py); zeros would be a different answer.
    assert tape.gradient(y, x) is None


def test_tf_math_names_are_reachable_under_xtpu_math():
    """TF has these under tf.math (some only there): xtpu.math has them, with
    numpy's values, eagerly and compiled."""
    x = np.array([[5.0, -3.0, 0.5], [7.0, 2.0, -4.5]], F32)
    i = np.array([[7, -7, 3], [-2, 9, 0]], I32)
    b = np.array([[True, False, True], [False, False, True]])
    data = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], F64)
    x64 = x.astype(F64)

    def e(z):
        return np.exp(z - z.max(axis=-1, keepdims=True))

    cases = [
        (lambda: xtpu.math.floordiv(x, 2.0), np.floor_divide(x, F32(2))),
        (lambda: xtpu.math.floordiv(i, -2), np.floor_divide(i, -2)),
        (lambda: xtpu.math.floormod(i, 4), np.mod(i, 4)),
        (lambda: xtpu.math.mod(x, -2.0), np.mod(x, F32(-2))),
        (lambda: xtpu.math.logical_xor(b, b[::-1]), np.logical_xor(b, b[::-1])),
        (lambda: xtpu.math.reduce_prod(i, axis=1), np.prod(i, axis=1, dtype=I32)),
        (lambda: xtpu.math.reduce_any(b, axis=0), np.any(b, axis=0)),
        (lambda: xtpu.math.reduce_all(b, axis=1, keepdims=True), np.all(b, axis=1, keepdims=True)),
        (lambda: xtpu.math.square(i), i * i),
        (lambda: xtpu.math.segment_sum(data, [0, 0, 2]), np.array([[4.0, 6.0], [0.0, 0.0], [5.0, 6.0]])),
        (
            lambda: xtpu.math.unsorted_segment_sum(data, np.array([1, -1, 1], I32), 3),
            np.array([[0.0, 0.0], [6.0, 8.0], [0.0, 0.0]]),
        ),  # a negative id's row is dropped (TF's doc)
        (lambda: xtpu.math.softmax(x), (e(x64) / e(x64).sum(axis=-1, keepdims=True)).astype(F32)),
        (lambda: xtpu.math.log_softmax(x, axis=0), (x64 - np.log(np.exp(x64).sum(axis=0, keepdims=True))).astype(F32)),
    ]
    for fn, want in cases:
        got = np.asarray(fn())
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        (compiled,) = xtpu.replicate(lambda: fn(), [[]])
        np.testing.assert_array_equal(
            np.asarray(compiled if not isinstance(compiled, (list, tuple)) else compiled[0]), got
        )
