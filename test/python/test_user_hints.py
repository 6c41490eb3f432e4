"""Habits from JAX and NumPy meet errors that say what to do instead, and
user errors from the passes are ValueErrors naming the user's line."""

import inspect

import numpy as np
import pytest
from xdsl.utils.exceptions import DiagnosticException

import xtpu
from xtpu.core.pipeline import PassError

X = np.array([0.5, -1.0, 2.0], np.float32)
HERE = "test_user_hints.py"


def line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_a_string_op_on_the_device_without_soft_placement_is_a_value_error_at_the_users_line():
    def f(x):
        s = xtpu.strings.format("1{}", x)
        return xtpu.strings.to_number(s)

    with pytest.raises(ValueError) as info:
        xtpu.replicate(f, [[np.float32(1)]], xla_options=xtpu.XLAOptions(allow_soft_placement=False))
    assert isinstance(info.value, PassError) and isinstance(info.value, DiagnosticException)
    assert str(info.value) == (
        f"'hlo.string_format' op cannot run on the device (at {HERE}:{line_of(f, 'strings.format')}): it has "
        "string values; place it in outside_compilation or allow soft placement"
    )
    # the same program with soft placement compiles and runs: 11.0
    assert xtpu.replicate(f, [[np.float32(1)]])[0][0] == 11.0


def test_numpy_function_on_a_traced_value_names_the_xtpu_op():
    def f(x):
        return np.exp(x)

    with pytest.raises(TypeError) as info:
        xtpu.replicate(f, [[X]])
    assert str(info.value).startswith(
        "numpy.exp cannot take a traced xtpu.Tensor: its value is only known when the program runs; "
        "use xtpu.math.exp, which traces"
    )
    assert f"(at {HERE}:{line_of(f, 'np.exp')})" in str(info.value)
    # the op it names does the job
    got = xtpu.replicate(lambda x: xtpu.math.exp(x), [[X]])[0][0]
    np.testing.assert_allclose(got, np.exp(X), rtol=1e-6)


def test_numpy_function_without_an_xtpu_op_and_in_place_updates_say_so():
    with pytest.raises(TypeError, match=r"numpy.sin cannot take a traced xtpu.Tensor: .*use the xtpu ops"):
        xtpu.replicate(lambda x: np.sin(x), [[X]])

    def inplace(x):
        a = np.zeros(3, np.float32)
        a += x
        return x

    with pytest.raises(
        TypeError,
        match=r"numpy.add cannot take a traced xtpu.Tensor: .*instead of updating an "
        r"array in place",
    ):
        xtpu.replicate(inplace, [[X]])


def test_numpy_operators_with_the_tensor_on_the_right_still_trace():
    a = np.array([1.0, 2.0, 3.0], np.float32)

    def f(x):
        return a + x, a * x, a - x, a / x, np.float32(2) * x, a < x, a[None] @ x[:, None]

    got = xtpu.replicate(f, [[X]])[0]
    want = (a + X, a * X, a - X, a / X, np.float32(2) * X, a < X, a[None] @ X[:, None])
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6)
        assert np.asarray(g).dtype == np.asarray(w).dtype


def test_float_of_a_traced_value_says_it_has_no_value_yet_and_where_it_was_made():
    def f(x):
        y = x * 2.0
        return float(y[0])

    with pytest.raises(TypeError) as info:
        xtpu.replicate(f, [[X]])
    msg = str(info.value)
    assert msg.startswith("float() of a traced xtpu.Tensor float32[]")
    assert f"at {HERE}:{line_of(f, 'float(y[0])')}" in msg  # the slice that made it
    assert "a traced value has no value yet" in msg

    with pytest.raises(TypeError, match=r"int\(\) of a traced xtpu.Tensor float32\[3\], input 0 of the computation"):
        xtpu.replicate(lambda x: int(x), [[X]])


@pytest.mark.parametrize("index", [[0, 1], np.array([True, False, True])])
def test_unsupported_index_spells_out_the_index_forms(index):
    with pytest.raises(IndexError) as info:
        xtpu.replicate(lambda x: x[index], [[X]])
    msg = str(info.value)
    assert "in dimension 0: xtpu indexes with Python ints (x[1], x[-1]), slices (x[1:3], x[::2], x[::-1])" in msg
    assert "Ellipsis (x[..., 0])" in msg and "xtpu.gather(x, indices, axis)" in msg
    assert not msg.rstrip().endswith("...")
    # the forms it names work, and the one it suggests for a list
    got = xtpu.replicate(lambda x: (x[1], x[-1], x[::2], x[None], x[..., 0], xtpu.gather(x, [0, 1])), [[X]])[0]
    for g, w in zip(got, (X[1], X[-1], X[::2], X[None], X[..., 0], X[[0, 1]])):
        np.testing.assert_array_equal(np.asarray(g), w)
