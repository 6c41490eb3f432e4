"""Gradients through xtpu.cond and xtpu.while_loop (TF's cond_v2 / while_v2
gradients under XLA), traced (xtpu.gradients, GradientTape inside
xtpu.replicate) against the eager tape (Python if / while) and central
finite differences in float64."""

import re

import numpy as np
import pytest

import xtpu

F64 = np.float64


def fd(fn, args, i, eps=1e-6):
    """Central finite difference of the Python reference ``fn`` in its
    argument ``i``."""
    hi, lo = list(args), list(args)
    hi[i] = hi[i] + eps
    lo[i] = lo[i] - eps
    return (fn(*hi) - fn(*lo)) / (2 * eps)


def fd_grads(fn, args, eps=1e-6):
    return [fd(fn, args, i, eps) for i in range(len(args))]


def traced_grads(model, args_per_replica, mode):
    """Per replica: [y, dy/dx for each argument] from a traced computation."""

    def comp(*xs):
        if mode == "gradients":
            y = model(*xs)
            return [y] + xtpu.gradients(y, list(xs))
        with xtpu.GradientTape() as tape:
            tape.watch(list(xs))
            y = model(*xs)
        return [y] + tape.gradient(y, list(xs))

    out = xtpu.replicate(comp, [[F64(a) for a in args] for args in args_per_replica])
    return [[float(v) for v in o] for o in out]


def eager_grads(model, args):
    xs = [xtpu.constant(F64(a)) for a in args]
    with xtpu.GradientTape() as tape:
        tape.watch(xs)
        y = model(*xs)
    grads = tape.gradient(y, xs, unconnected_gradients=xtpu.UnconnectedGradients.ZERO)
    return [float(y)] + [float(g) for g in grads]


def check(model, reference, args_per_replica, mode, rtol=1e-6):
    got = traced_grads(model, args_per_replica, mode)
    for args, row in zip(args_per_replica, got):
        want = [reference(*args)] + fd_grads(reference, args)
        np.testing.assert_allclose(row, want, rtol=rtol, atol=1e-6)
        np.testing.assert_allclose(row, eager_grads(model, args), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------
# xtpu.cond
# --------------------------------------------------------------------------


def cond_model(x, w):
    c = x * 0.5 + w  # computed outside, captured by both branches
    return xtpu.cond(x > 0, lambda: x * x * w + c, lambda: xtpu.math.exp(x) * w * c)


def cond_ref(x, w):
    c = x * 0.5 + w
    return x * x * w + c if x > 0 else np.exp(x) * w * c


@pytest.mark.parametrize("mode", ["gradients", "tape"])
@pytest.mark.parametrize(
    "args", [[(1.5, 3.0)], [(-0.7, 3.0)], [(1.5, 3.0), (-0.7, -2.0)]], ids=["true", "false", "2-replicas"]
)
def test_cond_gradient_matches_finite_differences_and_eager(args, mode):
    check(cond_model, cond_ref, args, mode)


def test_cond_gradient_is_an_hlo_if_on_the_same_predicate():
    def comp(x, w):
        y = cond_model(x, w)
        return xtpu.gradients(y, [x, w])

    text = xtpu.lower(comp, [[F64(1), F64(2)]]).as_text()
    ifs = re.findall(r"= hlo\.if (%\w+)", text)
    assert len(ifs) == 2 and ifs[0] == ifs[1]


def nested_model(x, w):
    def outer_true():
        return xtpu.cond(w > 1.0, lambda: x * w * w, lambda: x + w)

    return xtpu.cond(x > 0, outer_true, lambda: xtpu.math.tanh(x) * w)


def nested_ref(x, w):
    if x > 0:
        return x * w * w if w > 1 else x + w
    return np.tanh(x) * w


@pytest.mark.parametrize("mode", ["gradients", "tape"])
def test_nested_cond_gradient(mode):
    check(nested_model, nested_ref, [(1.5, 3.0), (1.5, 0.5), (-0.5, 2.0)], mode)


def test_cond_with_an_int_output_and_an_int_capture():
    k = np.int32(3)

    def model(x, w, k):
        y, n = xtpu.cond(x > 0, lambda: (x * w, k + 1), lambda: (xtpu.math.exp(x), k * 2))
        return y * xtpu.cast(n, xtpu.float64)

    def comp(x, w, k):
        y = model(x, w, k)
        gx, gw, gk = xtpu.gradients(y, [x, w, k])
        return y, gx, gw, gk is None

    for x in (2.0, -1.0):
        y, gx, gw, none = xtpu.replicate(comp, [[F64(x), F64(3), k]])[0]
        n = 4 if x > 0 else 6
        assert float(y) == pytest.approx((x * 3 if x > 0 else np.exp(x)) * n)
        assert float(gx) == pytest.approx((3 if x > 0 else np.exp(x)) * n)
        assert float(gw) == pytest.approx(x * n if x > 0 else 0.0)
        assert bool(none)


def test_cond_unconnected_sources_and_branches_returning_captures():
    def comp(x, w, v):
        y = xtpu.cond(x > 0, lambda: x, lambda: w * 2.0)
        gx, gw, gv = xtpu.gradients(y, [x, w, v])
        (gz,) = xtpu.gradients(y, [v], unconnected_gradients=xtpu.UnconnectedGradients.ZERO)
        return gx, gw, gv is None, gz

    out = xtpu.replicate(comp, [[F64(1), F64(5), F64(7)], [F64(-1), F64(5), F64(7)]])
    assert [float(v) for v in out[0]] == [1.0, 0.0, 1.0, 0.0]
    assert [float(v) for v in out[1]] == [0.0, 2.0, 1.0, 0.0]


def test_cond_second_order():
    def comp(x, w):
        y = cond_model(x, w)
        gx, gw = xtpu.gradients(y, [x, w])
        return xtpu.gradients(gx, [x, w])

    for x, w in ((1.5, 3.0), (-0.7, 2.0)):
        got = [float(v) for v in xtpu.replicate(comp, [[F64(x), F64(w)]])[0]]
        dx = lambda x, w: fd(cond_ref, (x, w), 0, 1e-5)  # noqa: E731
        want = fd_grads(dx, (x, w), 1e-4)
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_cond_gradient_with_float32_and_a_vector():
    def comp(x, w):
        y = xtpu.math.reduce_sum(xtpu.cond(w > 0, lambda: x * w, lambda: x * x))
        return xtpu.gradients(y, [x, w])

    x = np.array([1, 2, 3], np.float32)
    (gx, gw), (gx2, gw2) = xtpu.replicate(comp, [[x, np.float32(2)], [x, np.float32(-1)]])
    np.testing.assert_allclose(gx, [2, 2, 2])
    assert float(gw) == 6.0
    np.testing.assert_allclose(gx2, 2 * x)
    assert float(gw2) == 0.0
    assert gx.dtype == np.float32


# --------------------------------------------------------------------------
# xtpu.while_loop
# --------------------------------------------------------------------------

MAX = 6


def loop_model(x, w):
    # x_{k+1} = x_k * w + 1 while x_k < 100, at most MAX times
    return xtpu.while_loop(lambda x: x < 100.0, lambda x: x * w + 1.0, [x], maximum_iterations=MAX)[0]


def loop_ref(x, w):
    n = 0
    while x < 100 and n < MAX:
        x, n = x * w + 1, n + 1
    return x


@pytest.mark.parametrize("mode", ["gradients", "tape"])
def test_while_gradient_data_dependent_trip_count(mode):
    # 4 iterations (stops early), 6 (maximum_iterations), 0, and per replica
    args = [(1.5, 3.0), (0.1, 1.1), (150.0, 2.0), (1.5, 2.0)]
    assert [sum(1 for _ in iter_states(*a)) for a in args] == [4, 6, 0, 6]
    check(loop_model, loop_ref, args, mode)


def iter_states(x, w):
    n = 0
    while x < 100 and n < MAX:
        yield x
        x, n = x * w + 1, n + 1


def test_while_gradient_stores_only_what_the_body_needs():
    def add_loop(x, w):
        return xtpu.while_loop(lambda x: x < 10.0, lambda x: x + w, [x], maximum_iterations=MAX)[0]

    def ref(x, w):
        n = 0
        while x < 10 and n < MAX:
            x, n = x + w, n + 1
        return x

    check(add_loop, ref, [(1.5, 2.0), (1.0, 0.5)], "gradients")

    def comp(x, w):
        return xtpu.gradients(add_loop(x, w), [x, w])

    text = xtpu.lower(comp, [[F64(1), F64(2)]]).as_text()
    # The body's gradient needs no state: no stacks, the loop's own counter.
    assert "dynamic_update_slice" not in text and text.count("hlo.while") == 2
    text = xtpu.lower(lambda x, w: xtpu.gradients(loop_model(x, w), [x, w]), [[F64(1), F64(2)]]).as_text()
    assert "tensor<6xf64>" in text and "tensor<6xi32>" not in text  # x is stored, the counter is not


def test_while_with_several_loop_values_and_a_matrix():
    def model(m, v):
        def body(i, acc, s):
            acc = xtpu.math.tanh(xtpu.matmul(acc, m))
            return i + 1, acc, s + xtpu.math.reduce_sum(acc) * v

        _, acc, s = xtpu.while_loop(
            lambda i, acc, s: s < 3.0, body, (0, xtpu.constant(np.eye(2)), v), maximum_iterations=5
        )
        return xtpu.math.reduce_sum(acc) + s

    def ref(m, v):
        acc, s, i = np.eye(2), v, 0
        while s < 3.0 and i < 5:
            acc = np.tanh(acc @ m)
            s, i = s + acc.sum() * v, i + 1
        return acc.sum() + s

    m = np.array([[0.3, -0.2], [0.5, 0.4]])

    def comp(m, v):
        y = model(m, v)
        return [y] + xtpu.gradients(y, [m, v])

    for v in (0.2, 0.7):
        y, gm, gv = xtpu.replicate(comp, [[m, F64(v)]])[0]
        assert float(y) == pytest.approx(ref(m, v))
        want_m = np.zeros((2, 2))
        for a in range(2):
            for b in range(2):
                d = np.zeros((2, 2))
                d[a, b] = 1e-6
                want_m[a, b] = (ref(m + d, v) - ref(m - d, v)) / 2e-6
        np.testing.assert_allclose(gm, want_m, rtol=1e-5, atol=1e-8)
        assert float(gv) == pytest.approx(fd(ref, (m, v), 1), rel=1e-5)


def test_while_with_bool_and_int_loop_values_and_a_cond_in_the_body():
    def model(x, w):
        def body(a, b, flag, k):
            na = xtpu.cond(flag, lambda: a * w, lambda: a + b)
            return na, b, xtpu.math.logical_not(flag), k + 2

        a, b, _, k = xtpu.while_loop(lambda a, b, f, k: a < 50.0, body, (x, w, True, 1), maximum_iterations=7)
        return a * xtpu.cast(k, xtpu.float64) + b

    def ref(x, w):
        a, b, f, k, n = x, w, True, 1, 0
        while a < 50 and n < 7:
            a = a * w if f else a + b
            f, k, n = not f, k + 2, n + 1
        return a * k + b

    check(model, ref, [(1.5, 2.0), (0.2, 1.5)], "gradients")


def test_while_bounds_zero_and_a_constant_tensor_and_a_single_tensor_loop_value():
    def model(x, w):
        a = xtpu.while_loop(lambda v: v < 50.0, lambda v: v * w, x, maximum_iterations=0)
        b = xtpu.while_loop(lambda v: v < 50.0, lambda v: v * w, x, maximum_iterations=xtpu.constant(np.int32(2)))
        return a + b

    check(model, lambda x, w: x + x * w * w, [(1.5, 2.0)], "gradients")

    def vec_model(x, w):
        v = xtpu.concat([xtpu.reshape(x, [1]), xtpu.reshape(w, [1]), xtpu.reshape(x * w, [1])], 0)
        v = xtpu.while_loop(
            lambda v: xtpu.math.reduce_sum(v) < 100.0,
            lambda v: xtpu.math.tanh(v) * 3.0 + v * w,
            v,
            maximum_iterations=5,
        )
        return xtpu.math.reduce_sum(v * v)

    def vec_ref(x, w):
        v, n = np.array([x, w, x * w]), 0
        while v.sum() < 100 and n < 5:
            v, n = np.tanh(v) * 3 + v * w, n + 1
        return (v * v).sum()

    check(vec_model, vec_ref, [(0.5, 1.3), (2.0, 1.9)], "tape", rtol=1e-5)


def test_gradients_through_cond_and_loop_in_tpu_strategy_with_a_mirrored_variable():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))
    with strategy.scope():
        w = xtpu.Variable(np.array([1.0, 2.0], np.float32), aggregation=xtpu.VariableAggregation.MEAN)

    def step(x):
        with xtpu.GradientTape() as tape:
            s = xtpu.math.reduce_sum(x)
            loss = xtpu.cond(s > 5.0, lambda: xtpu.math.reduce_sum(w * w * x), lambda: xtpu.math.reduce_sum(w * x))
            loss = xtpu.while_loop(
                lambda v: v < 50.0,
                lambda v: v * xtpu.math.reduce_sum(w.read_value()) + 1.0,
                loss,
                maximum_iterations=4,
            )
        return tape.gradient(loss, w)

    def ref(wv, x):
        loss = (wv * wv * x).sum() if x.sum() > 5 else (wv * x).sum()
        n = 0
        while loss < 50 and n < 4:
            loss, n = loss * wv.sum() + 1, n + 1
        return loss

    data = np.arange(8, dtype=np.float32).reshape(4, 2)
    batch = next(iter(strategy.experimental_distribute_dataset([data])))
    grads = strategy.experimental_local_results(strategy.run(step, args=(batch,)))
    w0 = np.array([1.0, 2.0])
    for r, g in enumerate(grads):
        want = [(ref(w0 + 1e-6 * e, data[r]) - ref(w0 - 1e-6 * e, data[r])) / 2e-6 for e in np.eye(2)]
        np.testing.assert_allclose(g, want, rtol=1e-5)


def test_while_second_order():
    def comp(x, w):
        _, gw = xtpu.gradients(loop_model(x, w), [x, w])
        return xtpu.gradients(gw, [x, w])

    def tape_comp(x, w):
        with xtpu.GradientTape() as outer:
            outer.watch(w)
            with xtpu.GradientTape() as inner:
                inner.watch(w)
                y = loop_model(x, w)
            gw = inner.gradient(y, w)
        return outer.gradient(gw, w)

    x, w = 1.5, 2.0
    dw = lambda x, w: fd(loop_ref, (x, w), 1, 1e-5)  # noqa: E731
    want = fd_grads(dw, (x, w), 1e-4)
    got = [float(v) for v in xtpu.replicate(comp, [[F64(x), F64(w)]])[0]]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    (got2,) = xtpu.replicate(tape_comp, [[F64(x), F64(w)]])[0]
    assert float(got2) == pytest.approx(want[1], rel=1e-5)


def test_cond_inside_while_and_while_inside_cond():
    def model(x, w):
        body = lambda x: xtpu.cond(x > 3.0, lambda: x * w, lambda: x * x + w)  # noqa: E731
        looped = xtpu.while_loop(lambda x: x < 100.0, body, [x], maximum_iterations=8)[0]
        return xtpu.cond(w > 1.5, lambda: looped, lambda: loop_model(x, w))

    def ref(x, w):
        if w <= 1.5:
            return loop_ref(x, w)
        n = 0
        while x < 100 and n < 8:
            x, n = (x * w if x > 3 else x * x + w), n + 1
        return x

    check(model, ref, [(1.5, 2.0), (0.5, 1.2)], "gradients")
    check(model, ref, [(1.5, 2.0)], "tape")


def test_while_without_maximum_iterations_has_no_gradient():
    def comp(x):
        y = xtpu.while_loop(lambda x: x < 100.0, lambda x: x * x, [x])[0]  # the loop's line
        return xtpu.gradients(y, x)

    with pytest.raises(ValueError) as e:
        xtpu.replicate(comp, [[np.float32(1.5)]])
    msg = str(e.value)
    assert msg.startswith("gradients of xtpu.while_loop need maximum_iterations")
    assert "store the loop's intermediates" in msg and "XLA" in msg
    line = comp.__code__.co_firstlineno + 1
    assert f"test_gradients_control_flow.py:{line})" in msg


def test_while_with_a_run_time_maximum_iterations_has_no_gradient():
    def comp(x, n):
        y = xtpu.while_loop(lambda x: x < 100.0, lambda x: x * x, [x], maximum_iterations=n)[0]
        return y, xtpu.gradients(y, x)

    with pytest.raises(ValueError, match="compile-time constant maximum_iterations"):
        xtpu.replicate(comp, [[np.float32(1.5), np.int32(3)]])


def test_while_loop_without_gradient_still_runs_with_its_bound_marked():
    def comp(x):
        return xtpu.while_loop(lambda x: x < 100.0, lambda x: x * 2.0, [x], maximum_iterations=3)[0]

    assert "xtpu.maximum_iterations = 3" in xtpu.lower(comp, [[np.float32(1)]]).as_text()
    assert float(xtpu.replicate(comp, [[np.float32(1)]])[0][0]) == 8.0


# --------------------------------------------------------------------------
# Host clusters inside differentiated control flow
# --------------------------------------------------------------------------


def host_cond_model(x, w):
    def host_branch():
        h = xtpu.outside_compilation(lambda a: a * a + 1.0, x)
        return h * w

    return xtpu.cond(x > 0, host_branch, lambda: xtpu.math.exp(x) * w)


def host_cond_ref(x, w):
    return (x * x + 1) * w if x > 0 else np.exp(x) * w


@pytest.mark.parametrize("mode", ["gradients", "tape"])
def test_host_cluster_inside_a_differentiated_cond(mode):
    def comp(x, w):
        if mode == "gradients":
            y = host_cond_model(x, w)
            return [y] + xtpu.gradients(y, [x, w], colocate_gradients_with_ops=True)
        with xtpu.GradientTape() as tape:
            tape.watch([x, w])
            y = host_cond_model(x, w)
        return [y] + tape.gradient(y, [x, w])

    args = [[F64(1.5), F64(3.0)], [F64(-0.5), F64(3.0)]]
    text = xtpu.lower(comp, args).as_text()
    names = re.findall(r'tpu\.outside_compilation "([^"]+)"', text)
    # The forward cluster, its re-run in the gradient branch, its gradient.
    assert names == ["0", "0.uid.forward", "0.uid"]
    out = xtpu.replicate(comp, args)
    for (x, w), row in zip(args, out):
        want = [host_cond_ref(x, w)] + fd_grads(host_cond_ref, (x, w))
        np.testing.assert_allclose([float(v) for v in row], want, rtol=1e-6)


def test_host_cluster_inside_a_differentiated_loop_runs_per_iteration():
    def model(x, w):
        def body(x):
            return xtpu.outside_compilation(lambda a: a * w, x) + 1.0

        return xtpu.while_loop(lambda x: x < 100.0, body, [x], maximum_iterations=MAX)[0]

    check(model, loop_ref, [(1.5, 3.0), (0.1, 1.1)], "tape")

    def comp(x, w):
        y = model(x, w)
        return xtpu.gradients(y, [x, w], colocate_gradients_with_ops=True)

    text = xtpu.lower(comp, [[F64(1.5), F64(2.0)]]).as_text()
    names = re.findall(r'tpu\.outside_compilation "([^"]+)"', text)
    assert names == ["0", "0.uid.forward", "0.uid"]
    assert len(set(names)) == len(names)


def test_two_gradient_calls_over_a_cond_with_a_host_cluster_keep_cluster_names_unique():
    def comp(x, w):
        y = host_cond_model(x, w)
        (gx,) = xtpu.gradients(y, [x], colocate_gradients_with_ops=True)
        (gw,) = xtpu.gradients(y, [w], colocate_gradients_with_ops=True)
        (gxx,) = xtpu.gradients(gx, [x], colocate_gradients_with_ops=True)
        return gx, gw, gxx

    args = [[F64(1.5), F64(3.0)], [F64(-0.5), F64(3.0)]]
    text = xtpu.lower(comp, args).as_text()
    names = re.findall(r'tpu\.outside_compilation "([^"]+)"', text)
    assert len(names) == len(set(names))
    # gx's and gw's gradient clusters, then those of the gradient of gx (its
    # hlo.if holds the clusters "0.uid.forward" and "0.uid"; the second
    # gradient differentiates what gx uses of them).
    assert {"0.uid", "0.uid_1", "0.uid.uid_2"} <= set(names)
    out = xtpu.replicate(comp, args)
    for (x, w), row in zip(args, out):
        dx = lambda x, w: fd(host_cond_ref, (x, w), 0, 1e-5)  # noqa: E731
        want = fd_grads(host_cond_ref, (x, w))[:2] + [fd(dx, (x, w), 0, 1e-4)]
        np.testing.assert_allclose([float(v) for v in row], want, rtol=1e-5)
