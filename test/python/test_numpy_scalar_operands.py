"""numpy scalars carry their dtype like 0-d arrays (issue 10).

``xtpu.math.minimum(np.float64(-0.75), 0.0)`` used to fail eagerly ("operands
of hlo.minimum must have the same dtype, got float64[] and float32[]"): the
numpy scalar was weak like a Python scalar, but kept its dtype.  As in TF
(``tf.convert_to_tensor`` keeps a numpy value's dtype), a numpy scalar is now
the same operand as the 0-d array of its value: Python scalars take its dtype
and another dtype is a TypeError.  Every binary op is checked eagerly against
the same call traced, for every combination of Python scalar, numpy scalar,
0-d array and array operands.
"""

import re

import numpy as np
import pytest

import xtpu
from xtpu.dialects.tensor_spec import NUMERIC_DTYPES

m = xtpu.math

BINARY_OPS = {
    "add": m.add,
    "subtract": m.subtract,
    "multiply": m.multiply,
    "divide": m.divide,
    "truediv": m.truediv,
    "pow": m.pow,
    "maximum": m.maximum,
    "minimum": m.minimum,
    "equal": m.equal,
    "not_equal": m.not_equal,
    "less": m.less,
    "less_equal": m.less_equal,
    "greater": m.greater,
    "greater_equal": m.greater_equal,
    "logical_and": m.logical_and,
    "logical_or": m.logical_or,
    "logical_xor": m.logical_xor,
    "floordiv": m.floordiv,
    "floormod": m.floormod,
    "mod": m.mod,
    "matmul": m.matmul,
    "squared_difference": m.squared_difference,
}


def test_every_binary_op_of_xtpu_math_is_covered():
    import inspect

    binary = {
        n
        for n in dir(m)
        if not n.startswith("_")
        and callable(getattr(m, n))
        and list(inspect.signature(getattr(m, n)).parameters)[:2] in (["x", "y"], ["a", "b"])
    }
    assert binary == set(BINARY_OPS)


def _value(dtype):
    return {"bool": True}.get(dtype, 2)


# (label, operand) for every kind of operand: Python scalars, and numpy
# scalars, 0-d arrays and 2x2 arrays of every numeric dtype.
OPERANDS = [("py_float", 2.0), ("py_int", 3), ("py_bool", True)]
for _dt in NUMERIC_DTYPES:
    _v = _value(_dt)
    OPERANDS += [
        (f"np_scalar_{_dt}", np.dtype(_dt).type(_v)),
        (f"0d_{_dt}", np.array(_v, _dt)),
        (f"array_{_dt}", np.array([[_v, 1], [1, _v]], _dt)),
    ]
PAIRS = [(a, b) for a in OPERANDS for b in OPERANDS]

_AT = re.compile(r" \(at [^)]*\)$")


def outcome(thunk):
    """("ok", dtype, shape, values) or ("error", type, message)."""
    try:
        r = np.asarray(thunk())
    except (TypeError, ValueError) as e:
        return ("error", type(e).__name__, _AT.sub("", str(e)))
    return ("ok", r.dtype.name, r.shape, r.tolist())


NUMPY_LABELS = [label for label, v in OPERANDS if isinstance(v, (np.generic, np.ndarray))]


def traced_outcomes(op, pairs, numpy_as_inputs=False):
    """Each pair's outcome with ``op`` traced in one replicated computation;
    the numpy operands are constants of the trace or, with
    ``numpy_as_inputs``, inputs of the replica (compiled tensors)."""
    results = {}
    values = dict(OPERANDS)

    def computation(*inputs):
        if numpy_as_inputs:
            values.update(zip(NUMPY_LABELS, inputs))
        outs = []
        for i, ((la, _), (lb, _)) in enumerate(pairs):
            try:
                outs.append(op(values[la], values[lb]))
            except (TypeError, ValueError) as e:
                results[i] = ("error", type(e).__name__, _AT.sub("", str(e)))
        return outs

    inputs = [dict(OPERANDS)[label] for label in NUMPY_LABELS] if numpy_as_inputs else [np.float32(0)]
    ((*values_out,),) = xtpu.replicate(computation, [inputs])
    it = iter(values_out)
    out = []
    for i in range(len(pairs)):
        if i in results:
            out.append(results[i])
        else:
            r = np.asarray(next(it))
            out.append(("ok", r.dtype.name, r.shape, r.tolist()))
    return out


@pytest.mark.parametrize("numpy_as_inputs", [False, True], ids=["constants", "inputs"])
@pytest.mark.parametrize("name", sorted(BINARY_OPS))
def test_eager_and_traced_agree_for_every_operand_kind(name, numpy_as_inputs):
    op = BINARY_OPS[name]
    eager = [outcome(lambda: op(a, b)) for (_, a), (_, b) in PAIRS]
    traced = traced_outcomes(op, PAIRS, numpy_as_inputs)
    for ((la, _), (lb, _)), e, t in zip(PAIRS, eager, traced):
        assert e == t, f"{name}({la}, {lb}): eager {e}, traced {t}"
    assert any(e[0] == "ok" for e in eager)


def _as_0d(x):
    return np.asarray(x) if isinstance(x, np.generic) else x


@pytest.mark.parametrize("name", sorted(BINARY_OPS))
def test_a_numpy_scalar_is_the_0d_array_of_its_value(name):
    op = BINARY_OPS[name]
    for (la, a), (lb, b) in PAIRS:
        if not (isinstance(a, np.generic) or isinstance(b, np.generic)):
            continue
        got = outcome(lambda: op(a, b))
        want = outcome(lambda: op(_as_0d(a), _as_0d(b)))
        assert got == want, f"{name}({la}, {lb})"


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize(
    "op, args, dtype, value",
    [
        (m.minimum, (np.float64(-0.75), 0.0), "float64", -0.75),  # the reproducer
        (m.minimum, (0.0, np.float64(-0.75)), "float64", -0.75),
        (m.maximum, (np.float64(-0.75), 0.0), "float64", 0.0),
        (m.add, (np.float64(0.5), 1), "float64", 1.5),
        (m.add, (1, np.int64(2)), "int64", 3),
        (m.subtract, (np.float32(1.5), 1.0), "float32", 0.5),
        (m.multiply, (np.int32(3), 2), "int32", 6),
        (m.divide, (np.int64(3), 2), "float64", 1.5),
        (m.pow, (2, np.float64(0.5)), "float64", 2**0.5),
        (m.less, (np.float64(-0.75), 0.0), "bool", True),
        (m.logical_or, (np.bool_(False), True), "bool", True),
    ],
)
def test_python_scalars_take_the_numpy_scalars_dtype(op, args, dtype, value, traced):
    if traced:
        ((r,),) = xtpu.replicate(lambda _: op(*args), [[np.float32(0)]])
    else:
        r = op(*args)
    r = np.asarray(r)
    assert r.dtype == np.dtype(dtype) and r.shape == ()
    assert r == pytest.approx(value)


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize(
    "args",
    [
        (np.float32(1), np.int32(2)),
        (np.float64(1), np.float32(2)),
        (np.float64(1), np.array([1.0, 2.0], np.float32)),
        (np.int64(1), np.array(2, np.int32)),
    ],
)
def test_numpy_scalars_of_different_dtypes_do_not_promote(args, traced):
    with pytest.raises(TypeError, match="operands must have the same dtype"):
        if traced:
            xtpu.replicate(lambda _: m.add(*args), [[np.float32(0)]])
        else:
            m.add(*args)


def test_a_tensor_and_a_numpy_scalar_of_another_dtype_do_not_promote():
    def f(x):
        with pytest.raises(TypeError, match="got float32 and float64"):
            x * np.float64(2.0)
        return x * np.float32(2.0)

    ((r,),) = xtpu.replicate(f, [[np.float32(1.5)]])
    assert r.dtype == np.float32 and r == 3.0
