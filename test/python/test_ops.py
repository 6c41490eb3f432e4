"""Tests of the public op API (xtpu.math, xtpu.nn, array ops, strings, print,
Python operators on tensors).

Every case is checked twice:

* eagerly, against an independent numpy reference written here (exact for
  integer and bool results, ``rtol=1e-6`` for float32), including TF's dtype;
* compiled through ``xtpu.replicate`` with 1 and 2 replicas (different data
  per replica), against the eager result of the same function on that
  replica's data, exactly (it is the same numpy kernel).

Python operators only exist on traced tensors: eagerly the same function
runs on numpy arrays, so for operator cases "eager" is numpy itself.
Related ops are grouped into one traced function to keep tracing cheap.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import xtpu
from xtpu.runtime.errors import XtpuRuntimeError

F32, F64, I32, I64 = np.float32, np.float64, np.int32, np.int64


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _ints(shape, lo=-5, hi=6, seed=0, dtype=F32):
    """Integer-valued data in [lo, hi) (exact in float32)."""
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


def _halves(shape, lo=-3.0, hi=3.0, seed=0):
    """Multiples of 0.5 in [lo, hi], float32."""
    n = int((hi - lo) * 2) + 1
    a = np.random.default_rng(seed).integers(0, n, size=shape) * 0.5 + lo
    return a.astype(F32)


def _tup(x):
    return x if isinstance(x, tuple) else (x,)


def assert_close(got, want, what="", atol=0.0):
    """dtype, shape and value equality; float32 to rtol 1e-6, others exact."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def assert_same(got, want, what=""):
    """Bit-for-bit equality with the same dtype and shape."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    np.testing.assert_array_equal(got, want, err_msg=what)


@dataclass
class Case:
    """``fn`` on each replica's ``inputs`` must equal ``ref`` (eager) and
    its own eager result (compiled).  For operator cases ``fn`` is plain
    numpy when eager; the compiled check is the one that tests xtpu."""

    name: str
    fn: Callable
    ref: Callable
    inputs: list  # two replicas, each a tuple of arrays
    atol: float = 0.0  # only where float32 rounding of an intermediate is unavoidable

    def __repr__(self) -> str:
        return self.name


# --------------------------------------------------------------------------
# Operators on tensors
# --------------------------------------------------------------------------


def _ops_float(x, y):
    return (
        x + y,
        x - y,
        x * y,
        x / y,
        x**2,
        2**y,
        -x,
        abs(x),
        x @ x.T,
        1 - x,
        3 / y,
        2 * x,
        x + 1,
        0.5 * x,
        x < y,
        x <= y,
        x > y,
        x >= y,
        x == y,
        x != y,
        x > 0,
    )


def _ops_float_ref(x, y):
    xf, yf = x.astype(F64), y.astype(F64)
    return (
        np.add(x, y),
        np.subtract(x, y),
        np.multiply(x, y),
        (xf / yf).astype(F32),
        np.multiply(x, x),
        np.exp2(y),
        np.negative(x),
        np.abs(x),
        np.einsum("ik,jk->ij", xf, xf).astype(F32),
        (1.0 - xf).astype(F32),
        (3.0 / yf).astype(F32),
        (2.0 * xf).astype(F32),
        (xf + 1.0).astype(F32),
        (0.5 * xf).astype(F32),
        xf < yf,
        xf <= yf,
        xf > yf,
        xf >= yf,
        xf == yf,
        xf != yf,
        xf > 0,
    )


def _ops_int(x, y):
    return (x + y, x - y, x * y, x / y, x**2, -x, abs(x), x @ x.T, 10 - x, 3 * x, x < y, x == y, x != y, x >= y)


def _ops_int_ref(x, y):
    xl, yl = x.astype(I64), y.astype(I64)
    return (
        (xl + yl).astype(I32),
        (xl - yl).astype(I32),
        (xl * yl).astype(I32),
        xl.astype(F64) / yl.astype(F64),  # tf.truediv: int32 / int32 -> float64
        (xl * xl).astype(I32),
        (-xl).astype(I32),
        np.abs(xl).astype(I32),
        np.einsum("ik,jk->ij", xl, xl).astype(I32),
        (10 - xl).astype(I32),
        (3 * xl).astype(I32),
        xl < yl,
        xl == yl,
        xl != yl,
        xl >= yl,
    )


def _slicing(x):
    return (
        x[1],
        x[-1],
        x[1:3],
        x[:, ::2],
        x[..., 1],
        x[1, ..., 2:5],
        x[::3, 1:4:2, -2],
        x[:, -3:],
        x[2:, :, ::4],
        x[1:100],
        x[:, 10:],
        x.T,
        x[0].T,
        x[-2, 3, 4],
    )


def _slicing_ref(x):
    # Spelled with np.take / explicit index lists, not with the same slices.
    take = np.take
    return (
        take(x, 1, axis=0),
        take(x, 3, axis=0),
        take(x, [1, 2], axis=0),
        take(x, [0, 2, 4], axis=1),
        take(x, 1, axis=2),
        take(take(x, 1, axis=0), [2, 3, 4], axis=1),
        take(take(take(x, [0, 3], axis=0), [1, 3], axis=1), 4, axis=2),
        take(x, [2, 3, 4], axis=1),
        take(take(x, [2, 3], axis=0), [0, 4], axis=2),
        take(x, [1, 2, 3], axis=0),
        np.zeros((4, 0, 6), F32),
        np.transpose(x, (2, 1, 0)),
        np.transpose(take(x, 0, axis=0)),
        np.asarray(x.reshape(-1)[2 * 30 + 3 * 6 + 4]),
    )


def _ops_int_slicing(x):
    return x[1], x[:, ::2], x[..., -1], x.T


def _ops_int_slicing_ref(x):
    return x[1].copy(), x[:, [0, 2]], x[:, 2], np.transpose(x)


_LEFT = np.array([[1.0, -2.0, 4.0]], F32)


def _ops_numpy_left(x, s):
    """A captured numpy array or numpy scalar on the left of an operator must
    defer to the tensor (TF's Tensor sets __array_priority__ for this)."""
    return (
        _LEFT + x,
        _LEFT - x,
        _LEFT * x,
        _LEFT / x,
        _LEFT > x,
        _LEFT == x,
        F32(2) * x,
        F32(1) - x,
        _LEFT.T @ x[:1],
        x + s,
        s * x,
    )


def _ops_numpy_left_ref(x, s):
    a, b, c = _LEFT.astype(F64), x.astype(F64), s.astype(F64)
    f = lambda z: z.astype(F32)  # noqa: E731
    return (
        f(a + b),
        f(a - b),
        f(a * b),
        f(a / b),
        a > b,
        a == b,
        f(2 * b),
        f(1 - b),
        f(_mm_ref(a.T, b[:1])),
        f(b + c),
        f(c * b),
    )


def _broadcast(x, col, row, s):
    return m.add(col, row), m.multiply(x, col), m.subtract(row, x), m.maximum(s, x), m.less(col, row), m.add(s, s)


def _broadcast_ref(x, col, row, s):
    a, c, r, z = (v.astype(F64) for v in (x, col, row, s))
    out = np.empty((3, 4)), np.empty((3, 4)), np.empty((3, 4)), np.empty((3, 4)), np.empty((3, 4), bool)
    for i in range(3):
        for j in range(4):
            out[0][i, j] = c[i, 0] + r[0, j]
            out[1][i, j] = a[i, j] * c[i, 0]
            out[2][i, j] = r[0, j] - a[i, j]
            out[3][i, j] = max(float(z), a[i, j])
            out[4][i, j] = c[i, 0] < r[0, j]
    return tuple(o.astype(F32) if o.dtype != bool else o for o in out) + (np.asarray(2 * z).astype(F32),)


# --------------------------------------------------------------------------
# xtpu.math
# --------------------------------------------------------------------------

m = xtpu.math


def _unary_float(x):
    p = m.add(m.abs(x), 1.0)
    return (m.exp(x), m.tanh(x), m.negative(x), m.abs(x), m.log(p), m.sqrt(p), m.sigmoid(x), xtpu.nn.sigmoid(x))


def _unary_float_ref(x):
    d = x.astype(F64)
    p = np.abs(d) + 1.0
    sig = 1.0 / (1.0 + np.exp(-d))
    return tuple(a.astype(F32) for a in (np.exp(d), np.tanh(d), -d, np.abs(d), np.log(p), np.sqrt(p), sig, sig))


def _sigmoid_wide(x):
    return m.sigmoid(x)


def _sigmoid_wide_ref(x):
    return (1.0 / (1.0 + np.exp(-x.astype(F64)))).astype(F32)


def _binary_float(x, y):
    return (
        m.add(x, y),
        m.subtract(x, y),
        m.multiply(x, y),
        m.divide(x, y),
        m.truediv(y, x + 10),
        m.pow(m.abs(x), y),
        m.pow(x, 2),
        m.pow(2.0, y),
        m.maximum(x, y),
        m.minimum(x, y),
        m.add(x, 2.5),
        m.multiply(0.5, x),
        m.maximum(x, 0.0),
        m.minimum(1, x),
        m.subtract(3, y),
    )


def _binary_float_ref(x, y):
    a, b = x.astype(F64), y.astype(F64)
    out = (
        a + b,
        a - b,
        a * b,
        a / b,
        b / (a + 10),
        np.abs(a) ** b,
        a**2,
        2.0**b,
        np.where(a > b, a, b),
        np.where(a < b, a, b),
        a + 2.5,
        0.5 * a,
        np.where(a > 0, a, 0.0),
        np.where(a < 1, a, 1.0),
        3 - b,
    )
    return tuple(np.asarray(o).astype(F32) for o in out)


def _binary_int(x, y):
    return (
        m.add(x, y),
        m.subtract(x, y),
        m.multiply(x, y),
        m.divide(x, y),
        m.divide(x, 2),
        m.pow(x, 2),
        m.pow(y, y),
        m.maximum(x, y),
        m.minimum(x, y),
        m.add(x, 7),
        m.subtract(1, x),
    )


def _binary_int_ref(x, y):
    a, b = x.astype(I64), y.astype(I64)
    i32 = lambda z: np.asarray(z).astype(I32)  # noqa: E731
    return (
        i32(a + b),
        i32(a - b),
        i32(a * b),
        a.astype(F64) / b.astype(F64),
        a.astype(F64) / 2.0,
        i32(a * a),
        i32([int(v) ** int(v) for v in b]),
        i32(np.where(a > b, a, b)),
        i32(np.where(a < b, a, b)),
        i32(a + 7),
        i32(1 - a),
    )


def _div_int64(x, y):
    return m.divide(x, y), m.add(x, y), m.multiply(x, 3)


def _div_int64_ref(x, y):
    return x.astype(F64) / y.astype(F64), (x + y).astype(I64), (x * 3).astype(I64)


def _compare_logical(x, y, p, q):
    lt = m.less(x, y)
    eq = m.equal(x, y)
    return (
        eq,
        m.not_equal(x, y),
        lt,
        m.less_equal(x, y),
        m.greater(x, y),
        m.greater_equal(x, y),
        m.greater(x, 0),
        m.equal(2.0, x),
        m.logical_and(lt, eq),
        m.logical_or(lt, eq),
        m.logical_not(lt),
        m.logical_and(p, q),
        m.logical_or(p, q),
        m.logical_not(p),
        m.logical_and(p, True),
    )


def _compare_logical_ref(x, y, p, q):
    a, b = x.astype(F64), y.astype(F64)
    lt = np.array([[u < v for u, v in zip(row, b)] for row in a])
    eq = np.array([[u == v for u, v in zip(row, b)] for row in a])
    return (
        eq,
        ~eq,
        lt,
        lt | eq,
        ~(lt | eq),
        ~lt,
        a > 0,
        a == 2.0,
        lt & eq,
        lt | eq,
        ~lt,
        np.array([u and v for u, v in zip(p.ravel(), q.ravel())]).reshape(p.shape),
        np.array([u or v for u, v in zip(p.ravel(), q.ravel())]).reshape(p.shape),
        np.array([not u for u in p.ravel()]).reshape(p.shape),
        p.copy(),
    )


def _compare_int(i, j):
    return m.equal(i, j), m.less(i, 0), m.greater_equal(j, i), m.not_equal(i, 2)


def _compare_int_ref(i, j):
    return i == j, i < 0, j >= i, i != 2


AXES = [None, 0, -1, [0, 2], [-1, 1]]
REDUCERS = [m.reduce_sum, m.reduce_mean, m.reduce_max, m.reduce_min]


def _reductions_float(x):
    return tuple(r(x, axis=ax, keepdims=k) for r in REDUCERS for ax in AXES for k in (False, True))


def _np_axes(ax, rank):
    if ax is None:
        return tuple(range(rank))
    return tuple(sorted(a % rank for a in np.atleast_1d(ax)))


def _reductions_float_ref(x):
    d = x.astype(F64)
    fns = [np.sum, np.mean, np.max, np.min]
    return tuple(
        np.asarray(f(d, axis=_np_axes(ax, 3), keepdims=k)).astype(F32)
        for f in fns
        for ax in AXES
        for k in (False, True)
    )


INT_AXES = [None, 0, 1, -1, [0, 1]]


def _reductions_int(x):
    return tuple(r(x, axis=ax, keepdims=k) for r in REDUCERS for ax in INT_AXES for k in (False, True))


def _int_mean(d, axes, keepdims):
    s = np.sum(d, axis=axes, keepdims=keepdims)
    n = int(np.prod([d.shape[a] for a in axes]))
    return (np.sign(s) * (np.abs(s) // n)).astype(I32)  # TF: integer division, toward zero


def _reductions_int_ref(x):
    d = x.astype(I64)
    out = []
    for name in ("sum", "mean", "max", "min"):
        for ax in INT_AXES:
            for k in (False, True):
                axes = _np_axes(ax, 2)
                if name == "mean":
                    out.append(_int_mean(d, axes, k))
                else:
                    out.append(np.asarray(getattr(np, name)(d, axis=axes, keepdims=k)).astype(I32))
    return tuple(out)


INT_MEAN_DATA = np.array([[-1, -2, -4, 3], [5, -7, 2, 0], [1, 1, 1, -9]], I32)


def _matmul(a, b, c, p, q, ai, bi):
    mm = xtpu.matmul
    return (
        mm(a, b),
        m.matmul(a, c, transpose_a=True),
        mm(c, b, transpose_b=True),
        mm(a, a, transpose_b=True),
        mm(a, a, transpose_a=True),
        mm(b, a, transpose_a=True, transpose_b=True),
        mm(p, q),
        mm(p, p, transpose_b=True),
        mm(p, p, transpose_a=True),
        mm(q, p, transpose_a=True, transpose_b=True),
        mm(ai, bi),
        mm(ai, ai, transpose_b=True),
    )


def _mm_ref(x, y):
    """Plain triple loop over float64 / int64."""
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim == 3:
        return np.stack([_mm_ref(u, v) for u, v in zip(x, y)])
    out = np.zeros((x.shape[0], y.shape[1]), np.result_type(x.dtype, y.dtype))
    for i in range(x.shape[0]):
        for j in range(y.shape[1]):
            out[i, j] = sum(x[i, k] * y[k, j] for k in range(x.shape[1]))
    return out


def _matmul_ref(a, b, c, p, q, ai, bi):
    T = lambda z: np.swapaxes(z, -1, -2)  # noqa: E731
    f = lambda z: z.astype(F32)  # noqa: E731
    a, b, c, p, q = (z.astype(F64) for z in (a, b, c, p, q))
    return (
        f(_mm_ref(a, b)),
        f(_mm_ref(T(a), c)),
        f(_mm_ref(c, T(b))),
        f(_mm_ref(a, T(a))),
        f(_mm_ref(T(a), a)),
        f(_mm_ref(T(b), T(a))),
        f(_mm_ref(p, q)),
        f(_mm_ref(p, T(p))),
        f(_mm_ref(T(p), p)),
        f(_mm_ref(T(q), T(p))),
        _mm_ref(ai.astype(I64), bi.astype(I64)).astype(I32),
        _mm_ref(ai.astype(I64), T(ai).astype(I64)).astype(I32),
    )


def _argmax(x, y, i):
    return (
        m.argmax(x),
        m.argmax(x, 1),
        m.argmax(x, axis=-1),
        m.argmax(x, 0, output_type=xtpu.int32),
        m.argmax(y, axis=1),
        m.argmax(y, axis=-1),
        m.argmax(i, 1),
    )


def _first_max(v):
    best = 0
    for k in range(1, len(v)):
        if v[k] > v[best]:
            best = k
    return best


def _argmax_ref(x, y, i):
    def am(a, axis):
        a = np.moveaxis(a, axis, -1)
        flat = a.reshape(-1, a.shape[-1])
        return np.array([_first_max(r) for r in flat], I64).reshape(a.shape[:-1])

    return (am(x, 0), am(x, 1), am(x, 1), am(x, 0).astype(I32), am(y, 1), am(y, 2), am(i, 1))


ARGMAX_X = [
    np.array([[1, 3, 3, 0], [5, 5, 5, 5], [-1, -2, -1, -3]], F32),
    np.array([[2, 2, 0, 7], [2, 9, 9, 7], [0, 9, -4, 7]], F32),
]
ARGMAX_I = [
    np.array([[4, 1, 4], [-3, -3, -5]], I32),
    np.array([[0, 0, 0], [-1, 6, 6]], I32),
]


# --------------------------------------------------------------------------
# xtpu.nn
# --------------------------------------------------------------------------


def _nn(x, i):
    nn = xtpu.nn
    return (
        nn.relu(x),
        nn.relu(i),
        nn.sigmoid(x),
        nn.softmax(x),
        nn.softmax(x, axis=0),
        nn.softmax(x, -2),
        nn.log_softmax(x),
        nn.log_softmax(x, axis=0),
        nn.log_softmax(x, axis=1),
    )


def _softmax_ref(d, axis):
    e = np.exp(d - d.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _nn_ref(x, i):
    d = x.astype(F64)
    f = lambda z: z.astype(F32)  # noqa: E731
    return (
        f(np.where(d > 0, d, 0.0)),
        np.where(i > 0, i, 0).astype(I32),
        f(1.0 / (1.0 + np.exp(-d))),
        f(_softmax_ref(d, 1)),
        f(_softmax_ref(d, 0)),
        f(_softmax_ref(d, 0)),
        f(np.log(_softmax_ref(d, 1))),
        f(np.log(_softmax_ref(d, 0))),
        f(np.log(_softmax_ref(d, 1))),
    )


# --------------------------------------------------------------------------
# Shape and construction ops
# --------------------------------------------------------------------------


def _shape_ops(x, y):
    return (
        xtpu.reshape(x, [-1]),
        xtpu.reshape(x, [4, -1]),
        xtpu.reshape(x, [2, -1, 2]),
        xtpu.reshape(x, [24]),
        xtpu.reshape(x, (3, 8)),
        xtpu.transpose(x),
        xtpu.transpose(x, [1, 0, 2]),
        xtpu.transpose(x, perm=[2, 0, 1]),
        xtpu.concat([x, y], -1),
        xtpu.concat([x, y], axis=2),
        xtpu.concat([x, x], 0),
        xtpu.concat([x, x, x], -3),
        xtpu.concat([y, x, y], axis=-1),
    )


def _shape_ops_ref(x, y):
    flat = list(x.reshape(-1))

    def rs(shape):
        return np.array(flat, F32).reshape(shape)

    def perm(a, p):
        out = np.empty(tuple(a.shape[k] for k in p), a.dtype)
        for idx in np.ndindex(*out.shape):
            src = [0] * a.ndim
            for k, pk in enumerate(p):
                src[pk] = idx[k]
            out[idx] = a[tuple(src)]
        return out

    def cat(parts, axis):
        axis %= parts[0].ndim
        moved = [np.moveaxis(z, axis, 0) for z in parts]
        return np.moveaxis(np.array([row for z in moved for row in z], F32), 0, axis)

    return (
        rs(24),
        rs((4, 6)),
        rs((2, 6, 2)),
        rs(24),
        rs((3, 8)),
        perm(x, (2, 1, 0)),
        perm(x, (1, 0, 2)),
        perm(x, (2, 0, 1)),
        cat([x, y], 2),
        cat([x, y], 2),
        cat([x, x], 0),
        cat([x, x, x], 0),
        cat([y, x, y], 2),
    )


CAST_F = [
    np.array([-1.7, 1.7, 0.0, 2.5, -0.5, -2.5, 3.99, -0.0], F32),
    np.array([9.9, -9.9, 0.25, -3.0, 1e-3, -1e-3, 100.5, 7.0], F32),
]


def _cast(x, i, b):
    c = xtpu.cast
    return (
        c(x, xtpu.int32),
        c(x, "int64"),
        c(x, xtpu.bool_),
        c(x, xtpu.float64),
        c(x, float),
        c(x, np.int32),
        c(i, xtpu.float32),
        c(i, bool),
        c(i, xtpu.int64),
        c(b, xtpu.int32),
        c(b, xtpu.float32),
        m.cast(i, int),
    )


def _cast_ref(x, i, b):
    tr = [float(np.trunc(v)) for v in x]  # toward zero
    return (
        np.array(tr).astype(I32),
        np.array(tr).astype(I64),
        np.array([v != 0 for v in x]),
        x.astype(F64),
        x.copy(),
        np.array(tr).astype(I32),
        np.array([float(v) for v in i], F32),
        np.array([v != 0 for v in i]),
        i.astype(I64),
        np.array([1 if v else 0 for v in b], I32),
        np.array([1.0 if v else 0.0 for v in b], F32),
        i.copy(),
    )


def _one_hot(idx, idx2, idx64):
    oh = xtpu.one_hot
    return (
        oh(idx, 3),
        oh(idx, 4, on_value=5.0, off_value=-1.0),
        oh(idx, 3, axis=0),
        oh(idx2, 4),
        oh(idx2, 4, axis=0),
        oh(idx2, 4, axis=1),
        oh(idx2, 3, axis=-1, dtype=xtpu.int32),
        oh(idx, 3, dtype=xtpu.bool_),
        oh(idx64, 5, on_value=7, off_value=2, dtype=xtpu.int64),
    )


def _one_hot_np(indices, depth, on=1, off=0, axis=-1, dtype=F32):
    flat = indices.reshape(-1)
    out = np.full((flat.size, depth), off, dtype)
    for n, k in enumerate(flat):
        if 0 <= k < depth:
            out[n, k] = on
    out = out.reshape(indices.shape + (depth,))
    return np.moveaxis(out, -1, axis) if axis != -1 else out


def _one_hot_ref(idx, idx2, idx64):
    return (
        _one_hot_np(idx, 3),
        _one_hot_np(idx, 4, 5.0, -1.0),
        _one_hot_np(idx, 3, axis=0),
        _one_hot_np(idx2, 4),
        _one_hot_np(idx2, 4, axis=0),
        _one_hot_np(idx2, 4, axis=1),
        _one_hot_np(idx2, 3, dtype=I32),
        _one_hot_np(idx, 3, True, False, dtype=bool),
        _one_hot_np(idx64, 5, 7, 2, dtype=I64),
    )


def test_one_hot_tf_documented_examples():
    got = xtpu.one_hot(np.array([0, 2, -1, 1], I32), 3, on_value=5.0, off_value=0.0, axis=-1)
    assert_close(got, np.array([[5, 0, 0], [0, 0, 5], [0, 0, 0], [0, 5, 0]], F32))
    got = xtpu.one_hot(np.array([[0, 2], [1, -1]], I32), 3, on_value=1.0, off_value=0.0, axis=-1)
    assert_close(got, np.array([[[1, 0, 0], [0, 0, 1]], [[0, 1, 0], [0, 0, 0]]], F32))


@pytest.mark.parametrize(
    "kwargs,dtype",
    [
        ({}, F32),
        ({"on_value": 5, "off_value": 1}, I32),
        ({"on_value": 2.0}, F32),
        ({"on_value": True, "off_value": False}, bool),
        ({"off_value": np.int64(-1)}, I64),
    ],
)
def test_one_hot_dtype_follows_on_off_values(kwargs, dtype):
    """tf.one_hot: without ``dtype``, the dtype is that of on_value/off_value
    if given, else float32."""
    got = np.asarray(xtpu.one_hot(np.array([1, 0], I32), 2, **kwargs))
    on = kwargs.get("on_value", 1)
    off = kwargs.get("off_value", 0)
    assert_close(got, np.array([[off, on], [on, off]], dtype))


def test_constant_wrong_number_of_values_raises():
    with pytest.raises(ValueError):
        xtpu.constant([1, 2, 3], shape=[2, 2])


def _constants(x):
    c = xtpu.constant
    return (
        x + c(2.0, shape=[3]),
        c([1, 2, 3], dtype=xtpu.float32) * x,
        c(3.0),
        c(3),
        c(7, shape=[2, 2]),
        c([1, 2, 3, 4], shape=[2, 2]),
        c(1.5, dtype=xtpu.float64),
        c([True, False]),
        c(np.arange(3, dtype=F64)),
        c(2, dtype=xtpu.int64, shape=(2,)),
        c([[0.5, 1.5]], dtype="float32"),
    )


def _constants_ref(x):
    return (
        (x.astype(F64) + 2.0).astype(F32),
        (np.array([1.0, 2.0, 3.0]) * x).astype(F32),
        np.array(3.0, F32),
        np.array(3, I32),
        np.array([[7, 7], [7, 7]], I32),
        np.array([[1, 2], [3, 4]], I32),
        np.array(1.5, F64),
        np.array([True, False]),
        np.array([0.0, 1.0, 2.0], F64),
        np.array([2, 2], I64),
        np.array([[0.5, 1.5]], F32),
    )


def _to_number(x):
    tn = xtpu.strings.to_number
    return (
        x + tn(["1", "2.5", "-3"]),
        tn(["12", "-7"], out_type=xtpu.int32),
        tn([["1e2", "0.5"]], out_type=xtpu.float64),
        tn("42", out_type="int64"),
        tn(np.array(["-0.25", "3"])),
    )


def _to_number_ref(x):
    return (
        (x.astype(F64) + np.array([1.0, 2.5, -3.0])).astype(F32),
        np.array([12, -7], I32),
        np.array([[100.0, 0.5]], F64),
        np.array(42, I64),
        np.array([-0.25, 3.0], F32),
    )


# --------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------


CASES = [
    Case(
        "operators_float",
        _ops_float,
        _ops_float_ref,
        [(_ints((3, 4), seed=s), _ints((4,), 1, 5, seed=s + 10)) for s in (1, 2)],
    ),
    Case(
        "operators_int",
        _ops_int,
        _ops_int_ref,
        [(_ints((2, 3), seed=s, dtype=I32), _ints((3,), 1, 6, seed=s + 10, dtype=I32)) for s in (3, 4)],
    ),
    Case(
        "operators_numpy_left",
        _ops_numpy_left,
        _ops_numpy_left_ref,
        [(_ints((2, 3), 1, 5, seed=s), np.array(s - 3.0, F32)) for s in (50, 51)],
    ),
    Case(
        "broadcast_size_one_and_scalar",
        _broadcast,
        _broadcast_ref,
        [
            (_ints((3, 4), seed=s), _ints((3, 1), seed=s + 1), _ints((1, 4), seed=s + 2), np.array(s % 3, F32))
            for s in (52, 53)
        ],
    ),
    Case("slicing", _slicing, _slicing_ref, [(np.arange(120, dtype=F32).reshape(4, 5, 6) * k,) for k in (1, -2)]),
    Case("slicing_int", _ops_int_slicing, _ops_int_slicing_ref, [(_ints((3, 3), seed=s, dtype=I32),) for s in (5, 6)]),
    Case("unary_float", _unary_float, _unary_float_ref, [(_halves((2, 6), seed=s),) for s in (7, 8)]),
    Case(
        "sigmoid_wide_range",
        _sigmoid_wide,
        _sigmoid_wide_ref,
        [
            (np.array([-20, -12, -8, -5, -3, -1, 0, 1, 5, 20], F32),),
            (np.array([-30, -15, -9, -4, -2, -0.5, 0.5, 2, 8, 30], F32),),
        ],
    ),
    Case(
        "binary_float",
        _binary_float,
        _binary_float_ref,
        [(_ints((3, 4), seed=s), _ints((4,), 1, 4, seed=s + 10)) for s in (9, 10)],
    ),
    Case(
        "binary_int",
        _binary_int,
        _binary_int_ref,
        [(_ints((3, 4), seed=s, dtype=I32), _ints((4,), 1, 5, seed=s + 10, dtype=I32)) for s in (11, 12)],
    ),
    Case(
        "int64",
        _div_int64,
        _div_int64_ref,
        [(_ints((5,), seed=s, dtype=I64), _ints((5,), 1, 9, seed=s + 1, dtype=I64)) for s in (13, 14)],
    ),
    Case(
        "compare_logical",
        _compare_logical,
        _compare_logical_ref,
        [
            (
                _ints((3, 4), -2, 3, seed=s),
                _ints((4,), -2, 3, seed=s + 10),
                np.random.default_rng(s).random((2, 3)) > 0.5,
                np.random.default_rng(s + 1).random((2, 3)) > 0.5,
            )
            for s in (15, 16)
        ],
    ),
    Case(
        "compare_int",
        _compare_int,
        _compare_int_ref,
        [(_ints((6,), -3, 4, seed=s, dtype=I32), _ints((6,), -3, 4, seed=s + 1, dtype=I32)) for s in (17, 18)],
    ),
    Case("reductions_float", _reductions_float, _reductions_float_ref, [(_ints((2, 3, 4), seed=s),) for s in (19, 20)]),
    Case("reductions_int", _reductions_int, _reductions_int_ref, [(INT_MEAN_DATA,), (-INT_MEAN_DATA[:, ::-1].copy(),)]),
    Case(
        "matmul",
        _matmul,
        _matmul_ref,
        [
            (
                _ints((3, 4), seed=s),
                _ints((4, 5), seed=s + 1),
                _ints((3, 5), seed=s + 2),
                _ints((2, 3, 4), seed=s + 3),
                _ints((2, 4, 5), seed=s + 4),
                _ints((2, 3), seed=s + 5, dtype=I32),
                _ints((3, 2), seed=s + 6, dtype=I32),
            )
            for s in (21, 31)
        ],
    ),
    Case(
        "argmax",
        _argmax,
        _argmax_ref,
        [(ARGMAX_X[r], _ints((2, 3, 4), -1, 2, seed=40 + r), ARGMAX_I[r]) for r in (0, 1)],
    ),
    # log_softmax near 0 is log(sum) - max with sum rounded to float32: an
    # absolute error of a few float32 ulps of 1 is inherent (TF's too).
    Case(
        "nn",
        _nn,
        _nn_ref,
        [(_halves((3, 4), -4, 4, seed=s), _ints((3, 4), seed=s, dtype=I32)) for s in (41, 42)],
        atol=3e-7,
    ),
    Case(
        "shape_ops",
        _shape_ops,
        _shape_ops_ref,
        [(_ints((2, 3, 4), seed=s), _ints((2, 3, 2), seed=s + 1)) for s in (43, 44)],
    ),
    Case(
        "cast",
        _cast,
        _cast_ref,
        [(CAST_F[r], _ints((5,), seed=45 + r, dtype=I32), np.array([True, False, True, r == 1])) for r in (0, 1)],
    ),
    Case(
        "one_hot",
        _one_hot,
        _one_hot_ref,
        [
            (np.array([0, 2, 5, -1], I32), np.array([[1, 0, 3], [2, -1, 1]], I32), np.array([4, 0, 9], I64)),
            (np.array([1, 1, 3, 0], I32), np.array([[4, 3, 2], [0, 1, -2]], I32), np.array([-5, 2, 5], I64)),
        ],
    ),
    Case("constant", _constants, _constants_ref, [(_ints((3,), seed=s),) for s in (46, 47)]),
    Case("to_number", _to_number, _to_number_ref, [(_ints((3,), seed=s),) for s in (48, 49)]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_eager_matches_numpy(case):
    """Each case runs eagerly on ``xtpu.constant`` inputs, so xtpu's ops (and the
    operators installed on its tensors) compute it; on plain numpy inputs the
    operator cases would compare numpy with numpy (issue 25)."""
    for r, args in enumerate(case.inputs):
        got = _tup(case.fn(*[xtpu.constant(a) for a in args]))
        assert any(isinstance(g, xtpu.EagerTensor) for g in got), f"{case.name}: no xtpu op ran"
        want = _tup(case.ref(*args))
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, f"{case.name} replica data {r}, output {k}", atol=case.atol)


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_compiled_matches_eager(case, n):
    inputs = [list(a) for a in case.inputs[:n]]
    outs = xtpu.replicate(case.fn, inputs)
    assert len(outs) == n
    for r in range(n):
        eager = _tup(case.fn(*case.inputs[r]))
        assert isinstance(outs[r], tuple) and len(outs[r]) == len(eager)
        for k, (g, w) in enumerate(zip(outs[r], eager)):
            assert_same(g, w, f"{case.name} replica {r} of {n}, output {k}")


def test_replicas_get_their_own_data():
    """The two replicas of a compiled case see different inputs (guards the
    compiled tests against comparing one replica's output twice)."""
    case = next(c for c in CASES if c.name == "binary_float")
    outs = xtpu.replicate(case.fn, [list(a) for a in case.inputs])
    assert not np.array_equal(outs[0][0], outs[1][0])


# --------------------------------------------------------------------------
# TF's dtype results, spot checks (eager and compiled)
# --------------------------------------------------------------------------


def test_python_values_take_tf_default_dtypes():
    assert_close(xtpu.constant(1.5), np.array(1.5, F32))
    assert_close(xtpu.constant(3), np.array(3, I32))
    assert_close(xtpu.constant([True]), np.array([True]))
    assert_close(m.add(1.5, 2.0), np.array(3.5, F32))
    assert_close(m.add(1, 2), np.array(3, I32))
    assert_close(m.divide(3, 2), np.array(1.5, F64))  # tf.truediv on int32 -> float64
    assert_close(m.argmax(np.array([1.0, 3.0, 2.0], F32)), np.array(1, I64))
    assert_close(m.reduce_mean(np.array([1, 2, 4], I32)), np.array(2, I32))
    assert_close(m.reduce_mean(np.array([-1, -2, -4], I32)), np.array(-2, I32))  # toward zero, not -3


def test_compiled_dtypes():
    def fn(i, f):
        return i / i, m.argmax(f), m.reduce_mean(i), f + 1, i * 2, xtpu.constant(0.5), xtpu.constant(2)

    i, f = np.array([3, -4, 2], I32), np.array([1.0, 5.0, 5.0], F32)
    (out,) = xtpu.replicate(fn, [[i, f]])
    want = (
        np.ones(3, F64),
        np.array(1, I64),
        np.array(0, I32),
        f + F32(1),
        i * 2,
        np.array(0.5, F32),
        np.array(2, I32),
    )
    for g, w in zip(out, want):
        assert_close(g, w)


# --------------------------------------------------------------------------
# strings.format and print
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "template,inputs,kwargs,want",
    [
        # The examples of tf.strings.format's documentation.
        ("tensor: {}, suffix", np.arange(5, dtype=I32), {}, "tensor: [0 1 2 3 4], suffix"),
        ("a: {}, b: {}, suffix", (np.arange(2, dtype=I32), np.array([1, 3], I32)), {}, "a: [0 1], b: [1 3], suffix"),
        ("a: %t, b: %t", [np.arange(2, dtype=I32), np.array([1, 3], I32)], {"placeholder": "%t"}, "a: [0 1], b: [1 3]"),
        # summarize: first and last N entries of each dimension; -1 shows all.
        ("{}", np.arange(10, dtype=I32), {}, "[0 1 2 ... 7 8 9]"),
        ("{}", np.arange(10, dtype=I32), {"summarize": 2}, "[0 1 ... 8 9]"),
        ("{}", np.arange(10, dtype=I32), {"summarize": -1}, "[0 1 2 3 4 5 6 7 8 9]"),
        ("{}", np.arange(6, dtype=I32), {"summarize": 3}, "[0 1 2 3 4 5]"),
        ("{}", np.arange(4, dtype=I32).reshape(2, 2), {}, "[[0 1]\n [2 3]]"),
        ("{}", np.arange(25, dtype=I32).reshape(5, 5), {"summarize": 1}, "[[0 ... 4]\n ...\n [20 ... 24]]"),
        ("{}", np.arange(8, dtype=I32).reshape(2, 2, 2), {}, "[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]"),
        ("{} and {}", [np.array(["a", "b"]), "hi"], {}, '["a" "b"] and hi'),
        # Scalars: floats in shortest form, 2.0 as 2.
        ("x={} y={} z={}", [np.float32(2.0), np.float32(2.5), np.int32(-7)], {}, "x=2 y=2.5 z=-7"),
        ("{}", 3, {}, "3"),
        ("{}", [np.array([0.5, -1.0, 4.0], F32)], {}, "[0.5 -1 4]"),
        ("b={}", [np.array([True, False])], {}, "b=[1 0]"),
        ("no placeholders", [], {}, "no placeholders"),
    ],
)
def test_strings_format_eager(template, inputs, kwargs, want):
    got = xtpu.strings.format(template, inputs, **kwargs)
    got = np.asarray(got)
    assert got.shape == () and got.dtype == object
    assert got[()] == want


def _fmt_and_print(x):
    s = xtpu.strings.format("x: {} sum: {}", [x, m.reduce_sum(x)], summarize=2)
    xtpu.print(s)
    xtpu.print("raw", x, m.reduce_max(x), sep="|", end="#\n")
    return x * 2


def test_strings_format_and_print_compiled(capsys):
    data = [np.arange(6, dtype=I32), np.arange(6, dtype=I32) * -3]
    eager = []
    for d in data:
        eager.append(_fmt_and_print(d))
    want_lines = capsys.readouterr().out.splitlines()
    # Independent check of the eager text (TF's format).
    assert want_lines[0] == "x: [0 1 ... 4 5] sum: 15"
    assert want_lines[1] == "raw|[0 1 2 3 4 5]|5#"
    for n in (1, 2):
        outs = xtpu.replicate(_fmt_and_print, [[d] for d in data[:n]])
        got_lines = capsys.readouterr().out.splitlines()
        expected = [line for r in range(n) for line in want_lines[2 * r : 2 * r + 2]]
        assert sorted(got_lines) == sorted(expected)
        for r in range(n):
            assert_same(outs[r][0], eager[r])


def test_print_eager_stdout(capsys):
    xtpu.print("x:", np.arange(3, dtype=I32), np.float32(2.5), np.array([[1.0, 2.0]], F32))
    xtpu.print(np.arange(10, dtype=I32))  # tf.print's documented example
    xtpu.print("a", "b", sep=", ", end="!\n")
    xtpu.print(np.arange(10, dtype=I32), summarize=1)
    assert capsys.readouterr().out == "x: [0 1 2] 2.5 [[1 2]]\n[0 1 2 ... 7 8 9]\na, b!\n[0 ... 9]\n"


def _print_to_file_fn(path):
    def fn(x):
        xtpu.print("v", x + 1, output_stream=f"file://{path}")
        return x

    return fn


def test_print_to_file(tmp_path, capsys):
    path = tmp_path / "out.txt"
    fn = _print_to_file_fn(path)
    fn(np.array([1, 2], I32))
    assert path.read_text() == "v [2 3]\n"
    path.unlink()
    xtpu.replicate(fn, [[np.array([1, 2], I32)], [np.array([5, 6], I32)]])
    assert sorted(path.read_text().splitlines()) == ["v [2 3]", "v [6 7]"]
    assert capsys.readouterr().out == ""


# --------------------------------------------------------------------------
# dtype rules
# --------------------------------------------------------------------------

_f32 = np.array([1.0, 2.0, 3.0], F32)
_i32 = np.array([1, 2, 3], I32)

MIXED = [
    ("add", lambda a, b: m.add(a, b)),
    ("operator_mul", lambda a, b: a * b),
    ("maximum", lambda a, b: m.maximum(a, b)),
    ("less", lambda a, b: m.less(a, b)),
    ("concat", lambda a, b: xtpu.concat([a, b], 0)),
    ("matmul", lambda a, b: xtpu.matmul(xtpu.reshape(a, [3, 1]), xtpu.reshape(b, [1, 3]))),
]


@pytest.mark.parametrize("name,fn", MIXED, ids=[n for n, _ in MIXED])
def test_mixing_float32_and_int32_raises(name, fn):
    if not name.startswith("operator"):
        with pytest.raises(TypeError):
            fn(_f32, _i32)
    with pytest.raises(TypeError):
        xtpu.replicate(fn, [[_f32, _i32]])


PY_FLOAT_WITH_INT = [
    ("add", lambda a: m.add(a, 1.5)),
    ("operator_mul", lambda a: a * 0.5),
    ("operator_radd", lambda a: 2.5 + a),
    ("maximum", lambda a: m.maximum(a, 0.5)),
    ("equal", lambda a: m.equal(a, 1.0)),
]


@pytest.mark.parametrize("name,fn", PY_FLOAT_WITH_INT, ids=[n for n, _ in PY_FLOAT_WITH_INT])
def test_python_float_with_int32_raises(name, fn):
    if not name.startswith("operator"):
        with pytest.raises(TypeError):
            fn(_i32)
    with pytest.raises(TypeError):
        xtpu.replicate(fn, [[_i32]])


def test_constant_float_value_with_int_dtype_raises():
    with pytest.raises(TypeError):
        xtpu.constant(1.5, dtype=xtpu.int32)


def _weak(i64, f64, f32, i32):
    return (
        i64 + 2,
        m.multiply(i64, 3),
        f64 + 1.5,
        m.maximum(f64, 0),
        f32 * 2,
        m.subtract(1, f32),
        i32 - 1,
        m.pow(i32, 2),
    )


def _weak_ref(i64, f64, f32, i32):
    return (
        (i64 + I64(2)).astype(I64),
        (i64 * I64(3)).astype(I64),
        f64 + 1.5,
        np.where(f64 > 0, f64, 0.0),
        (f32.astype(F64) * 2).astype(F32),
        (1 - f32.astype(F64)).astype(F32),
        (i32 - I32(1)).astype(I32),
        (i32 * i32).astype(I32),
    )


_WEAK_INPUTS = [
    [np.array([1, -2], I64), np.array([0.1, -2.25], F64), np.array([1.5, -3.0], F32), np.array([4, -5], I32)],
    [np.array([7, 0], I64), np.array([1e-300, 3.0], F64), np.array([0.0, 8.0], F32), np.array([0, 9], I32)],
]


def test_python_scalars_adopt_tensor_dtype():
    for args in _WEAK_INPUTS:
        for k, (g, w) in enumerate(zip(_weak(*args), _weak_ref(*args))):
            assert_close(g, w, f"output {k}")
    outs = xtpu.replicate(_weak, _WEAK_INPUTS)
    for r, args in enumerate(_WEAK_INPUTS):
        for k, (g, w) in enumerate(zip(outs[r], _weak(*args))):
            assert_same(g, w, f"replica {r} output {k}")


def _f64_ops(x, y):
    return (
        m.exp(x),
        m.reduce_mean(x),
        xtpu.matmul(y, y),
        xtpu.nn.softmax(x),
        m.sigmoid(x),
        x / 3,
        m.divide(x, x + 1),
        xtpu.cast(m.argmax(x), xtpu.float64),
        xtpu.constant(np.array([0.1, 0.2])),
    )


def _f64_ops_ref(x, y):
    e = np.exp(x - x.max())
    return (
        np.exp(x),
        np.asarray(np.sum(x) / x.size),
        _mm_ref(y, y),
        e / e.sum(),
        1.0 / (1.0 + np.exp(-x)),
        x / 3.0,
        x / (x + 1.0),
        np.asarray(float(_first_max(x))),
        np.array([0.1, 0.2]),
    )


def test_float64_stays_float64():
    data = [
        [np.array([0.1, 0.7, -1.3], F64), np.array([[0.1, 0.2], [0.3, 0.4]], F64)],
        [np.array([2.0, -0.5, 0.25], F64), np.array([[1.5, -2.0], [0.5, 3.0]], F64)],
    ]
    for x, y in data:
        for k, (g, w) in enumerate(zip(_f64_ops(x, y), _f64_ops_ref(x, y))):
            g, w = np.asarray(g), np.asarray(w)
            assert g.dtype == np.float64 and w.dtype == np.float64, f"output {k}: {g.dtype}"
            np.testing.assert_allclose(g, w, rtol=1e-12, err_msg=f"output {k}")
    outs = xtpu.replicate(_f64_ops, data)
    for r, (x, y) in enumerate(data):
        for k, (g, w) in enumerate(zip(outs[r], _f64_ops(x, y))):
            assert_same(g, w, f"replica {r} output {k}")


# --------------------------------------------------------------------------
# Error messages, eager and while tracing
# --------------------------------------------------------------------------
# Each function raises on the line after its ``def``; the traced error must
# name that line of this file.

_X23 = np.zeros((2, 3), F32)


def _err_broadcast_add(x):
    return m.add(x, np.zeros((4,), F32))


def _err_broadcast_operator(x):
    return x + xtpu.constant(np.zeros((4,), F32))


def _err_broadcast_compare(x):
    return m.less(x, xtpu.constant(np.zeros((4,), F32)))


def _err_reshape(x):
    return xtpu.reshape(x, [4])


def _err_reshape_minus_one(x):
    return xtpu.reshape(x, [4, -1])


def _err_matmul_inner(x):
    return xtpu.matmul(x, x)


def _err_matmul_transposed(x):
    return xtpu.matmul(x, xtpu.reshape(x, [3, 2]), transpose_b=True)


def _err_axis_reduce_sum(x):
    return m.reduce_sum(x, axis=2)


def _err_axis_reduce_mean_negative(x):
    return m.reduce_mean(x, axis=-3)


def _err_axis_argmax(x):
    return m.argmax(x, axis=2)


def _err_axis_concat(x):
    return xtpu.concat([x, x], 2)


def _err_axis_softmax(x):
    return xtpu.nn.softmax(x, axis=5)


def _err_axis_one_hot(x):
    return xtpu.one_hot(xtpu.cast(x, xtpu.int32), 3, axis=4)


ERRORS = [
    (_err_broadcast_add, ValueError),
    (_err_broadcast_operator, ValueError),
    (_err_broadcast_compare, ValueError),
    (_err_reshape, ValueError),
    (_err_reshape_minus_one, ValueError),
    (_err_matmul_inner, ValueError),
    (_err_matmul_transposed, ValueError),
    (_err_axis_reduce_sum, ValueError),
    (_err_axis_reduce_mean_negative, ValueError),
    (_err_axis_argmax, ValueError),
    (_err_axis_concat, ValueError),
    (_err_axis_softmax, ValueError),
    (_err_axis_one_hot, ValueError),
]
_ERR_IDS = [f.__name__[5:] for f, _ in ERRORS]


def _names_shape(msg, shape):
    forms = [str(list(shape)), str(tuple(shape)), "x".join(map(str, shape)), ",".join(map(str, shape))]
    return any(f in msg for f in forms)


@pytest.mark.parametrize("fn,exc", ERRORS, ids=_ERR_IDS)
def test_error_eager(fn, exc):
    with pytest.raises(exc) as ei:
        fn(_X23)
    if "broadcast" in fn.__name__:
        msg = str(ei.value)
        assert _names_shape(msg, (2, 3)) and _names_shape(msg, (4,)), msg


@pytest.mark.parametrize("fn,exc", ERRORS, ids=_ERR_IDS)
def test_error_traced_same_type(fn, exc):
    with pytest.raises(exc) as ei:
        xtpu.replicate(fn, [[_X23]])
    if "broadcast" in fn.__name__:
        msg = str(ei.value)
        assert _names_shape(msg, (2, 3)) and _names_shape(msg, (4,)), msg


@pytest.mark.parametrize("fn,exc", ERRORS, ids=_ERR_IDS)
def test_error_traced_names_source_line(fn, exc):
    with pytest.raises(exc) as ei:
        xtpu.lower(fn, [[_X23]])
    line = fn.__code__.co_firstlineno + 1
    assert f"test_ops.py:{line}" in str(ei.value), str(ei.value)


def test_to_number_not_a_number_eager():
    with pytest.raises(ValueError, match="StringToNumberOp could not correctly convert string"):
        xtpu.strings.to_number(["1.5", "abc"])
    with pytest.raises(ValueError, match="StringToNumberOp could not correctly convert string"):
        xtpu.strings.to_number("1.5", out_type=xtpu.int32)


def _bad_number(x):
    return x + xtpu.strings.to_number(["x1", "2", "3"])


def test_to_number_not_a_number_compiled():
    with pytest.raises(XtpuRuntimeError, match=re.escape("StringToNumberOp could not correctly convert string: x1")):
        xtpu.replicate(_bad_number, [[np.zeros(3, F32)], [np.ones(3, F32)]])
