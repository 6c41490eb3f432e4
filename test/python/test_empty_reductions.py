"""Reductions over zero elements give TF's identity (issue 10).

``reduce_min(np.zeros((0,), np.float32))`` raised numpy's "zero-size array to
reduction operation minimum which has no identity", eagerly and compiled.  TF
fills the result with the reduction's identity: +inf / -inf for a float min /
max, the integer limits, 0 for a sum, 1 for a product, and for a mean NaN
(floats) or 0 (integers) -- its Mean kernel's identity, see TF's
``core/kernels/reduction_ops.h`` (``FIX_MEAN_IDENTITY``).  StableHLO's reduce
gives its ``init_value`` for an empty reduction, which xtpu's composites set
to that identity.  argmax over an empty axis is an error in TF ("Reduction
axis 0 is empty in shape [0]") and in xtpu.
"""

import re
import warnings

import numpy as np
import pytest

import xtpu
from xtpu.core.tracing import bind
from xtpu.dialects import hlo
from xtpu.dialects.tensor_spec import FLOAT_DTYPES, NUMERIC_DTYPES, numpy_dtype

m = xtpu.math


def identity(kind, dtype):
    dt = numpy_dtype(dtype)
    if dtype in FLOAT_DTYPES:  # bfloat16's numpy kind is "V"
        return {"reduce_sum": 0, "reduce_mean": np.nan, "reduce_max": -np.inf, "reduce_min": np.inf}[kind]
    if kind == "reduce_sum":
        return 0
    if kind == "reduce_mean":
        return np.nan if dt.kind == "f" else 0
    if kind == "reduce_max":
        return -np.inf if dt.kind == "f" else (False if dt.kind == "b" else np.iinfo(dt).min)
    if kind == "reduce_min":
        return np.inf if dt.kind == "f" else (True if dt.kind == "b" else np.iinfo(dt).max)
    raise AssertionError(kind)


KINDS = ["reduce_sum", "reduce_max", "reduce_min", "reduce_mean"]
CASES = [
    # (shape, axis): every case reduces at least one zero-size axis
    ((0,), None),
    ((0,), 0),
    ((0,), -1),
    ((3, 0), 1),
    ((3, 0), None),
    ((0, 3), 0),
    ((2, 0, 3), 1),
    ((2, 0, 3), (0, 1)),
    ((2, 0, 3), (1, 2)),
    ((2, 3, 0), (0, 2)),
    ((0, 0), (0, 1)),
    ((0, 4), (0, 1)),
]


def supported(kind, dtype):
    # TF sums and averages numbers only; xtpu's min / max also take bools;
    # complex64 is not ordered (no min / max), and its empty mean is 0 (TF 2.21).
    if dtype == "complex64":
        return kind in ("reduce_sum", "reduce_mean")
    return not (dtype == "bool" and kind in ("reduce_sum", "reduce_mean"))


def expected(kind, dtype, shape, axis, keepdims):
    out_shape = np.sum(np.zeros(shape), axis=axis, keepdims=keepdims).shape
    return np.full(out_shape, identity(kind, dtype), dtype=numpy_dtype(dtype))


def check(got, want):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == numpy_dtype("bfloat16"):  # numpy's NaN test does not know bfloat16
        got, want = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(got, want)  # NaN equals NaN here


PARAMS = [
    (kind, dtype, shape, axis)
    for kind in KINDS
    for dtype in NUMERIC_DTYPES
    if supported(kind, dtype)
    for shape, axis in CASES
]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("kind, dtype, shape, axis", PARAMS)
def test_eager(kind, dtype, shape, axis, keepdims):
    x = np.zeros(shape, numpy_dtype(dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no division by zero on the way
        got = getattr(m, kind)(x, axis=axis, keepdims=keepdims)
    check(got, expected(kind, dtype, shape, axis, keepdims))


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_compiled(dtype):
    """Every kind, case and keepdims of one dtype in one replicated computation."""
    cases = [(k, s, a, kd) for k in KINDS if supported(k, dtype) for s, a in CASES for kd in (False, True)]
    inputs = [np.zeros(s, numpy_dtype(dtype)) for _, s, _, _ in cases]

    def computation(*xs):
        return [getattr(m, k)(x, axis=a, keepdims=kd) for x, (k, _, a, kd) in zip(xs, cases)]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ((*outs,),) = xtpu.replicate(computation, [inputs])
    for got, (k, s, a, kd) in zip(outs, cases):
        check(got, expected(k, dtype, s, a, kd))


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize(
    "computation, dtype, init, want",
    [
        ("add", "float32", 0.0, 0.0),
        ("add", "int64", 5, 5),  # StableHLO: an empty reduction is init_value
        ("mul", "float32", 1.0, 1.0),
        ("mul", "float64", 1.0, 1.0),
        ("mul", "int32", 1, 1),
        ("mul", "int64", 1, 1),
        ("max", "float64", -np.inf, -np.inf),
        ("min", "int64", np.iinfo(np.int64).max, np.iinfo(np.int64).max),
        ("and", "bool", True, True),
        ("or", "bool", False, False),
        ("and", "int32", -1, -1),
        ("or", "int64", 0, 0),
    ],
)
def test_hlo_reduce_of_nothing_is_init_value(computation, dtype, init, want, traced):
    x = np.zeros((2, 0, 3), dtype)
    init = np.asarray(init, dtype)

    def run(x):
        (out,) = bind(hlo.ReduceOp, [x, init], computation=computation, dimensions=(1,))
        return out

    got = xtpu.replicate(run, [[x]])[0][0] if traced else run(x)
    check(got, np.full((2, 3), want, dtype))


def test_hlo_reduce_still_combines_init_value_with_the_elements():
    x = np.array([[1.0, 5.0], [2.0, -1.0]], np.float32)
    for computation, init, want in [("add", 10.0, [13.0, 14.0]), ("max", 3.0, [3.0, 5.0]), ("mul", 2.0, [4.0, -10.0])]:
        (got,) = bind(hlo.ReduceOp, [x, np.float32(init)], computation=computation, dimensions=(0,))
        check(got, np.array(want, np.float32))


def test_the_issue_reproducer():
    assert m.reduce_min(np.zeros((0,), np.float32)) == np.inf
    assert m.reduce_max(np.zeros((0,), np.float32)) == -np.inf
    ((lo, hi),) = xtpu.replicate(lambda x: (m.reduce_min(x), m.reduce_max(x)), [[np.zeros((0,), np.int32)]])
    assert lo == np.iinfo(np.int32).max and hi == np.iinfo(np.int32).min


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("shape, axis", [((0,), None), ((0,), 0), ((2, 0), 1), ((2, 0, 3), -2)])
def test_argmax_over_an_empty_axis_is_an_error(shape, axis, traced):
    x = np.zeros(shape, np.float32)
    ax = (axis or 0) % len(shape)
    with pytest.raises(ValueError, match=re.escape(f"argmax: reduction axis {ax} is empty in shape {list(shape)}")):
        if traced:
            xtpu.replicate(lambda v: m.argmax(v, axis=axis), [[x]])
        else:
            m.argmax(x, axis=axis)


def test_argmax_with_an_empty_result_but_a_full_axis():
    check(m.argmax(np.zeros((0, 2), np.float32), axis=1), np.zeros((0,), np.int64))
