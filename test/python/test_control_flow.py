"""xtpu.cond and xtpu.while_loop: TF's semantics eagerly and compiled."""

import numpy as np
import pytest

import xtpu


def collatz_steps(n):
    # while n != 1: n = n/2 if even else 3n+1 -- counts the steps.
    def body(n, steps):
        half = xtpu.cast(xtpu.cast(n, xtpu.float32) / 2.0, xtpu.int32)  # truncates
        n = xtpu.cond(n - half * 2 == 0, lambda: half, lambda: 3 * n + 1)
        return n, steps + 1

    return xtpu.while_loop(lambda n, steps: n != 1, body, (n, 0))[1]


def python_collatz(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


@pytest.mark.parametrize("replicas", [1, 2, 8])
def test_loop_with_a_branch_matches_python_and_eager(replicas):
    starts = [np.int32(v) for v in (6, 7, 27, 1, 12, 3, 97, 5)[:replicas]]
    out = xtpu.replicate(collatz_steps, [[s] for s in starts])
    for s, o in zip(starts, out):
        assert int(o[0]) == python_collatz(int(s))
        assert int(o[0]) == int(collatz_steps(s))  # eager


def test_cond_picks_the_branch_per_replica():
    def f(x):
        return xtpu.cond(x > 0, lambda: x * 10.0, lambda: -x)

    xs = [np.float32(3), np.float32(-2)]
    out = xtpu.replicate(f, [[x] for x in xs])
    assert [float(o[0]) for o in out] == [30.0, 2.0]
    assert [float(f(x)) for x in xs] == [30.0, 2.0]


def test_cond_with_structured_outputs_and_no_outputs():
    def f(x):
        a, (b,) = xtpu.cond(x > 0, lambda: (x, [x + 1]), lambda: (x * 0, [x - 1]))
        xtpu.cond(x > 0, lambda: None, lambda: None)
        return a + b

    for x in (np.float32(2), np.float32(-2)):
        assert float(xtpu.replicate(f, [[x]])[0][0]) == float(f(x))


def test_while_loop_single_value_and_maximum_iterations():
    def f(x):
        return xtpu.while_loop(lambda v: v < 1000.0, lambda v: v * 2.0, [x], maximum_iterations=5)

    for x in (np.float32(1), np.float32(300)):
        got = xtpu.replicate(f, [[x]])[0]
        assert isinstance(got, list)  # the structure of loop_vars
        v, n = float(x), 0
        while v < 1000 and n < 5:
            v, n = v * 2, n + 1
        assert float(got[0]) == v
        assert float(f(x)[0]) == v


def test_nested_while_in_cond_and_matrix_loop_values():
    def f(m, k):
        def power(m):
            return xtpu.while_loop(
                lambda i, acc: i < k,
                lambda i, acc: (i + 1, xtpu.matmul(acc, m)),
                (0, xtpu.constant(np.eye(2, dtype=np.float32))),
            )[1]

        return xtpu.cond(k > 0, lambda: power(m), lambda: m)

    m = np.array([[1, 1], [1, 0]], np.float32)
    out = xtpu.replicate(f, [[m, np.int32(5)], [m, np.int32(0)]])
    np.testing.assert_array_equal(out[0][0], np.linalg.matrix_power(m, 5))
    np.testing.assert_array_equal(out[1][0], m)


def test_a_cross_replica_sum_inside_a_loop():
    def f(x):
        return xtpu.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, xtpu.cross_replica_sum(v)), (0, x))[1]

    xs = [np.float32(1), np.float32(2)]
    out = xtpu.replicate(f, [[x] for x in xs])
    # each iteration multiplies the common value by the number of replicas
    assert [float(o[0]) for o in out] == [3.0 * 4, 3.0 * 4]


def test_branches_must_agree():
    x = np.float32(1)
    with pytest.raises(ValueError, match="output 0 is float32\\[\\] in true_fn but int32\\[\\] in false_fn"):
        xtpu.replicate(lambda x: xtpu.cond(x > 0, lambda: x, lambda: xtpu.constant(1)), [[x]])
    with pytest.raises(ValueError, match="same structure"):
        xtpu.replicate(lambda x: xtpu.cond(x > 0, lambda: (x, x), lambda: x), [[x]])


def test_loop_values_keep_shape_and_dtype():
    x = np.zeros(2, np.float32)
    with pytest.raises(ValueError, match="before the loop but"):
        xtpu.replicate(lambda x: xtpu.while_loop(lambda v: True, lambda v: xtpu.concat([v, v], 0), [x]), [[x]])


def test_predicates_must_be_bool_scalars():
    x = np.float32(1)
    with pytest.raises(TypeError, match="bool scalar"):
        xtpu.replicate(lambda x: xtpu.cond(x, lambda: x, lambda: x), [[x]])
    with pytest.raises(TypeError, match="bool scalar"):
        xtpu.cond(np.array([True, False]), lambda: 1, lambda: 2)
    with pytest.raises(TypeError, match="cond must return a bool scalar"):
        xtpu.replicate(lambda x: xtpu.while_loop(lambda v: v, lambda v: v, [x]), [[x]])


def test_ir_has_regions():
    text = xtpu.lower(lambda x: xtpu.cond(x > 0, lambda: x, lambda: -x), [[np.float32(1)]]).as_text()
    assert "hlo.if" in text and "} else {" in text and "hlo.return" in text
    text = xtpu.lower(lambda x: xtpu.while_loop(lambda v: v < 3.0, lambda v: v + 1.0, [x]), [[np.float32(1)]]).as_text()
    assert "hlo.while(" in text and " cond {" in text and "} do {" in text


def test_a_failure_inside_a_loop_names_the_inner_op():
    def host(v):
        return xtpu.strings.to_number(xtpu.strings.format("{}x", v))

    def f(x):
        return xtpu.while_loop(lambda v: v < 3.0, lambda v: xtpu.outside_compilation(host, v), [x])

    from xtpu.runtime.errors import HostComputeError

    with pytest.raises(HostComputeError) as info:
        xtpu.replicate(f, [[np.float32(1)]])
    assert info.value.op == "hlo.string_to_number"
    assert "test_control_flow.py:" in str(info.value)


def test_a_tensor_from_inside_a_branch_cannot_leak_out():
    leaked = {}

    def f(x):
        def true_fn():
            leaked["t"] = x * 2.0
            return x

        y = xtpu.cond(x > 0, true_fn, lambda: x)
        return y + leaked["t"]

    with pytest.raises(
        ValueError, match=r"inside an xtpu.cond branch .* is used outside it \(at test_control_flow.py:\d+\)"
    ):
        xtpu.replicate(f, [[np.float32(1)]])


def test_eager_cond_returns_tensors_as_traced():
    """A branch returning a Python float gives float32 eagerly as compiled
    (it was float64 eagerly: the issue 11 reproducer's ``lambda: 1.0``)."""

    def f(v):
        return xtpu.cond(xtpu.math.greater(v, 0.0), lambda: 1.0, lambda: v * 2.0)

    for v in (np.float32(1.5), np.float32(-1.5)):
        eager = f(xtpu.constant(v))
        ((compiled,),) = xtpu.replicate(f, [[v]])
        assert isinstance(eager, xtpu.EagerTensor) and eager.dtype == compiled.dtype == np.float32
        assert eager == compiled
    with pytest.raises(TypeError, match="cond: output 0 cannot be a tensor"):
        xtpu.cond(xtpu.constant(True), lambda: object(), lambda: object())
