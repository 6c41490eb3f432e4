"""Gradients end to end: eager tapes, traced tapes and ``xtpu.gradients``
agree with each other and with central finite differences; gradients of
gradients; gradient clusters ``C.<uid>`` of the seed patch; the errors.

References are independent: float64 finite differences of the eager
function, the eager tape (numpy), and the closed-form derivatives.
"""

import re

import numpy as np
import pytest

import xtpu

RNG = np.random.default_rng(7)


def mlp_loss(x, y1h, w1, b1, w2):
    h = xtpu.math.tanh(xtpu.matmul(x, w1) + b1)
    logits = xtpu.matmul(h, w2)
    logp = xtpu.nn.log_softmax(logits)
    return -xtpu.math.reduce_mean(xtpu.math.reduce_sum(y1h * logp, axis=1))


def make_inputs(seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((5, 4)).astype(dtype)
    y1h = np.eye(3, dtype=dtype)[rng.integers(0, 3, 5)]
    w1 = rng.standard_normal((4, 6)).astype(dtype) * 0.5
    b1 = rng.standard_normal((6,)).astype(dtype) * 0.1
    w2 = rng.standard_normal((6, 3)).astype(dtype) * 0.5
    return [x, y1h, w1, b1, w2]


def finite_differences(f, args, wrt, eps=1e-6):
    """Central differences of scalar f w.r.t. args[i] for i in wrt (float64)."""
    out = []
    for i in wrt:
        a = np.array(args[i], dtype=np.float64)
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            hi, lo = a.copy(), a.copy()
            hi[idx] += eps
            lo[idx] -= eps
            fa = [np.asarray(v) for v in args]
            fa[i] = hi
            f_hi = float(np.asarray(f(*fa)))
            fa[i] = lo
            f_lo = float(np.asarray(f(*fa)))
            g[idx] = (f_hi - f_lo) / (2 * eps)
        out.append(g)
    return out


def eager_tape_grads(f, args, wrt):
    vals = [xtpu.constant(a) for a in args]
    with xtpu.GradientTape() as t:
        for i in wrt:
            t.watch(vals[i])
        loss = f(*vals)
    return [np.asarray(g) for g in t.gradient(loss, [vals[i] for i in wrt])]


WRT = [2, 3, 4]


def test_eager_tape_matches_finite_differences():
    args = make_inputs(0)
    got = eager_tape_grads(mlp_loss, args, WRT)
    want = finite_differences(mlp_loss, args, WRT)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("replicas", [1, 2, 8])
@pytest.mark.parametrize("api", ["tape", "tf1"])
def test_traced_gradients_match_eager_tape(replicas, api):
    per_replica = [make_inputs(10 + r) for r in range(replicas)]

    def computation(*args):
        if api == "tf1":
            loss = mlp_loss(*args)
            return xtpu.gradients(loss, [args[i] for i in WRT])
        with xtpu.GradientTape() as t:
            for i in WRT:
                t.watch(args[i])
            loss = mlp_loss(*args)
        return t.gradient(loss, [args[i] for i in WRT])

    out = xtpu.replicate(computation, per_replica)
    for r in range(replicas):
        want = eager_tape_grads(mlp_loss, per_replica[r], WRT)
        for g, w in zip(out[r], want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-9)


def test_gradients_through_cross_replica_sum():
    # loss_r = sum(crs(x_r * w)^2): d/dw = sum_r x_r * 2 * crs(...) summed over replicas
    xs = [RNG.standard_normal(3) for _ in range(4)]
    w = RNG.standard_normal(3)

    def computation(x, w):
        s = xtpu.cross_replica_sum(x * w)
        loss = xtpu.math.reduce_sum(s * s)
        return xtpu.gradients(loss, [w])[0]

    out = xtpu.replicate(computation, [[x, w] for x in xs])
    s = sum(x * w for x in xs)
    # TF's registered gradient: d(crs)/d(input) = crs(cotangent); the
    # cotangent of s is 2 s on every replica, so its sum is 4 * 2 s.
    ct = 4 * (2 * s)
    for r, x in enumerate(xs):
        want = ct * x
        np.testing.assert_allclose(out[r][0], want, rtol=1e-10)


def cube(x):
    return x * x * x


def test_second_derivative_eager_and_traced():
    x = xtpu.constant(3.0)
    with xtpu.GradientTape() as g:
        g.watch(x)
        with xtpu.GradientTape() as gg:
            gg.watch(x)
            y = cube(x)
        dy = gg.gradient(y, x)
    d2 = g.gradient(dy, x)
    assert float(dy) == 27.0 and float(d2) == 18.0

    def computation(x):
        with xtpu.GradientTape() as g:
            g.watch(x)
            with xtpu.GradientTape() as gg:
                gg.watch(x)
                y = cube(x)
            dy = gg.gradient(y, x)
        d2_tape = g.gradient(dy, x)
        d2_tf1 = xtpu.gradients(xtpu.gradients(cube(x), x)[0], x)[0]
        return d2_tape, d2_tf1

    vals = [np.float64(v) for v in (-1.5, 0.25, 2.0)]
    out = xtpu.replicate(computation, [[v] for v in vals])
    for v, (a, b) in zip(vals, out):
        assert a == pytest.approx(6 * v) and b == pytest.approx(6 * v)


def test_readme_example():
    x = xtpu.constant(3.0)
    with xtpu.GradientTape() as t:
        t.watch(x)
        y = x * x * x
    assert t.gradient(y, x) == 27.0


# --------------------------------------------------------------------------
# Outside compilation: the seed patch's gradient clusters
# --------------------------------------------------------------------------


def host_fn(x):
    return xtpu.math.exp(x) * 2.0


def second_order_through_host(x):
    with xtpu.GradientTape() as g:
        g.watch(x)
        with xtpu.GradientTape() as gg:
            gg.watch(x)
            z = xtpu.outside_compilation(host_fn, x * 3.0) * x
        dz = gg.gradient(z, x)
    return z, dz, g.gradient(dz, x)


def clusters(text):
    return re.findall(r'tpu\.outside_compilation "([^"]+)"', text)


def test_gradient_clusters_c_uid_and_c_uid_uid():
    lowered = xtpu.lower(second_order_through_host, [[np.float64(0.5)]])
    names = clusters(lowered.as_text())
    # forward "0"; first gradient call uid; the second call differentiates
    # both the forward op (0.uid_1) and the first gradient (0.uid.uid_1)
    assert names == ["0", "0.uid", "0.uid.uid_1", "0.uid_1"]
    stages = lowered.compile().stages
    assert clusters(stages["tpu-mark-outside-compilation"]) == names
    # The gradient clusters need no device value (the host has x, and the
    # forward cluster's results): they join cluster "0", whose one round
    # trip carries every result the device uses (issue 31).
    outlined = stages["tpu-outline-outside-compilation"]
    assert re.findall(r'tpu.outside_compilation_cluster = "([^"]+)"', outlined) == ["replica_inputs", "0"]
    assert outlined.count("tpu.send_to_host") == outlined.count("tpu.recv_from_host") == 1


@pytest.mark.parametrize("replicas", [1, 2])
def test_values_through_gradient_clusters(replicas):
    vals = [np.float64(0.5 - 0.3 * r) for r in range(replicas)]
    out = xtpu.replicate(second_order_through_host, [[v] for v in vals])
    for x, (z, dz, d2) in zip(vals, out):
        e = np.exp(3 * x)
        np.testing.assert_allclose([z, dz, d2], [2 * e * x, 2 * e * (3 * x + 1), 2 * e * (9 * x + 6)], rtol=1e-12)
    eager = second_order_through_host(xtpu.constant(vals[0]))
    np.testing.assert_allclose([float(v) for v in eager], [float(v) for v in out[0]], rtol=1e-12)


def test_tf1_colocation_flag():
    def computation(x, colocate):
        y = xtpu.outside_compilation(host_fn, x)
        return xtpu.gradients(y * y, x, colocate_gradients_with_ops=colocate)

    on = xtpu.lower(lambda x: computation(x, True), [[np.float64(1.0)]]).as_text()
    off = xtpu.lower(lambda x: computation(x, False), [[np.float64(1.0)]]).as_text()
    assert clusters(on) == ["0", "0.uid"]
    # without colocation the gradient of the host op runs on the device
    assert clusters(off) == ["0"]
    for fn in (lambda x: computation(x, True), lambda x: computation(x, False)):
        ((g,),) = xtpu.replicate(fn, [[np.float64(0.3)]])
        assert g == pytest.approx(2 * (2 * np.exp(0.3)) * 2 * np.exp(0.3))


def test_several_host_ops_of_one_call_share_one_cluster():
    def host(x):
        a = xtpu.math.exp(x)
        b = xtpu.math.tanh(a)
        return b * a

    def computation(x):
        y = xtpu.outside_compilation(host, x)
        return xtpu.gradients(xtpu.math.reduce_sum(y), x, colocate_gradients_with_ops=True)

    text = xtpu.lower(computation, [[np.ones(3)]]).as_text()
    assert clusters(text) == ["0", "0.uid"]
    x = RNG.standard_normal(3)
    ((g,),) = xtpu.replicate(computation, [[x]])
    a = np.exp(x)
    want = (1 - np.tanh(a) ** 2) * a * a + np.tanh(a) * a
    np.testing.assert_allclose(g, want, rtol=1e-12)


def test_gradient_cluster_name_rule():
    from xtpu.autodiff.gradients import gradient_cluster_name

    assert gradient_cluster_name("C", "uid") == "C.uid"
    assert gradient_cluster_name("C.uid", "uid") == "C.uid"
    assert gradient_cluster_name("C.uid", "uid_1") == "C.uid.uid_1"
    assert gradient_cluster_name("C.uid.uid_1", "uid_2") == "C.uid.uid_1.uid_2"


def test_seed_colocation_errors():
    from xtpu.autodiff.gradients import NESTED_COLOCATION, NO_GRADIENT_UID, Node, _Colocation
    from xtpu.core.tracing import current_trace

    seen = {}

    def computation(x):
        tr = current_trace()
        node = Node(object, {}, [], [], 0, None, "0")
        with pytest.raises(NotImplementedError, match=NO_GRADIENT_UID):
            with _Colocation(tr, True, None).node(node):
                pass
        tr.gradient_colocation = node  # a colocation whose cluster was left
        with pytest.raises(NotImplementedError, match=NESTED_COLOCATION):
            with _Colocation(tr, True, "uid").node(node):
                pass
        tr.gradient_colocation = None
        seen["ok"] = True
        return x

    xtpu.lower(computation, [[np.float64(1.0)]])
    assert seen["ok"]


# --------------------------------------------------------------------------
# API details and errors
# --------------------------------------------------------------------------


def test_gradients_eagerly_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="Use tf.GradientTape instead"):
        xtpu.gradients(xtpu.constant(1.0), xtpu.constant(1.0))


def test_non_persistent_tape_used_twice():
    x = xtpu.constant(2.0)
    with xtpu.GradientTape() as t:
        t.watch(x)
        y = x * x
    t.gradient(y, x)
    with pytest.raises(RuntimeError, match="non-persistent GradientTape can only be used to compute one set"):
        t.gradient(y, x)


def test_persistent_tape_and_unconnected():
    x, z = xtpu.constant(2.0), xtpu.constant(5.0)
    with xtpu.GradientTape(persistent=True) as t:
        t.watch([x, z])
        y = x * x
        w = y * 3.0
    assert t.gradient(y, x) == 4.0
    assert t.gradient(w, x) == 12.0
    assert t.gradient(w, y) == 3.0
    assert t.gradient(w, z) is None
    assert t.gradient(w, z, unconnected_gradients=xtpu.UnconnectedGradients.ZERO) == 0.0


def test_unwatched_is_none_and_stop_recording_and_reset():
    x = xtpu.constant(2.0)
    with xtpu.GradientTape(persistent=True) as t:
        y = x * x
        t.watch(x)
        with t.stop_recording():
            u = x * 10.0
        v = x * u
    assert t.gradient(y, x) is None
    assert t.gradient(v, x) == 20.0  # u is a constant to the tape
    t.reset()
    assert t.gradient(v, x) is None


def test_variables_are_watched_automatically():
    v = xtpu.Variable(np.array([1.0, 2.0]))
    frozen = xtpu.Variable(np.array([3.0]), trainable=False)
    with xtpu.GradientTape() as t:
        loss = xtpu.math.reduce_sum(v * v) * frozen
    g_v, g_f = t.gradient(loss, [v, frozen])
    np.testing.assert_allclose(g_v, 2 * np.array([1.0, 2.0]) * 3.0)
    assert g_f is None
    assert t.watched_variables() == (v,)


def test_output_gradients_and_grad_ys():
    x = xtpu.constant(np.array([1.0, 2.0]))
    with xtpu.GradientTape() as t:
        t.watch(x)
        y = x * x
    np.testing.assert_allclose(t.gradient(y, x, output_gradients=np.array([10.0, 100.0])), [20.0, 400.0])

    def computation(x):
        return xtpu.gradients(x * x, x, grad_ys=np.array([10.0, 100.0]))[0]

    np.testing.assert_allclose(xtpu.replicate(computation, [[np.array([1.0, 2.0])]])[0][0], [20.0, 400.0])


def test_jacobian():
    xv = np.array([0.5, -1.0, 2.0])
    x = xtpu.constant(xv)
    with xtpu.GradientTape() as t:
        t.watch(x)
        y = xtpu.math.exp(x[:2]) * x[2]
    j = np.asarray(t.jacobian(y, x))
    want = np.zeros((2, 3))
    want[0, 0] = np.exp(xv[0]) * xv[2]
    want[1, 1] = np.exp(xv[1]) * xv[2]
    want[:, 2] = np.exp(xv[:2])
    np.testing.assert_allclose(j, want, rtol=1e-12)


def test_stop_gradient():
    def f(x):
        return x * xtpu.stop_gradient(x * x)

    x = xtpu.constant(3.0)
    with xtpu.GradientTape() as t:
        t.watch(x)
        y = f(x)
    assert t.gradient(y, x) == 9.0
    out = xtpu.replicate(lambda x: xtpu.gradients(f(x), x), [[np.float32(3.0)]])
    assert out[0][0] == 9.0
    assert "hlo.stop_gradient" in xtpu.lower(lambda x: f(x), [[np.float32(3.0)]]).as_text()


def test_stop_gradients_argument():
    def computation(x):
        a = x * 2.0
        b = a * x
        return xtpu.gradients(b, x, stop_gradients=[a])[0]

    assert xtpu.replicate(computation, [[np.float64(3.0)]])[0][0] == 6.0


@xtpu.custom_gradient
def clipped_identity(x):
    def grad(dy):
        return xtpu.math.minimum(xtpu.math.maximum(dy, -1.0), 1.0)

    return x * 1.0, grad


def test_custom_gradient_eager_and_traced():
    x = xtpu.constant(np.array([1.0, 2.0]))
    with xtpu.GradientTape() as t:
        t.watch(x)
        y = clipped_identity(x) * np.array([0.5, 5.0])
    np.testing.assert_allclose(t.gradient(y, x), [0.5, 1.0])

    def computation(x):
        return xtpu.gradients(clipped_identity(x) * np.array([0.5, 5.0]), x)[0]

    np.testing.assert_allclose(xtpu.replicate(computation, [[np.array([1.0, 2.0])]])[0][0], [0.5, 1.0])
    assert "hlo.custom_gradient" in xtpu.lower(lambda x: clipped_identity(x), [[np.float64(1.0)]]).as_text()


def test_no_gradient_defined_names_op_and_line():
    def computation(x):
        s = xtpu.strings.format("{}", x)
        y = xtpu.strings.to_number(s)  # host op without a gradient path
        return xtpu.gradients(y * x, x)[0]

    # string ops are declared not differentiable: the gradient stops there
    out = xtpu.replicate(computation, [[np.float32(2.0)]])
    assert out[0][0] == pytest.approx(2.0)


def test_lookup_error_for_an_op_without_rule(monkeypatch):
    from xtpu.dialects.hlo import TanhOp

    monkeypatch.setattr(TanhOp, "has_gradient_rule", classmethod(lambda cls: False))

    def computation(x):
        y = xtpu.math.tanh(x)  # the line the error names
        return xtpu.gradients(y, x)[0]

    with pytest.raises(LookupError, match=r"No gradient defined for operation 'hlo.tanh'.*test_gradients.py:\d+"):
        xtpu.lower(computation, [[np.float32(2.0)]])


# --------------------------------------------------------------------------
# Logical devices: gradients of a replica split over two cores
# --------------------------------------------------------------------------


def test_gradients_of_split_replica_equal_unsplit():
    x = RNG.standard_normal((8, 4))
    w = RNG.standard_normal((4, 6))

    def computation(x, w, split):
        if split:
            x = xtpu.split_to_logical_devices(x, [2, 1])
        with xtpu.GradientTape() as t:
            t.watch(w)
            loss = xtpu.math.reduce_sum(xtpu.math.tanh(xtpu.matmul(x, w)) ** 2.0)
        return loss, t.gradient(loss, w)

    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=2)
    split = xtpu.replicate(lambda a, b: computation(a, b, True), [[x, w], [x * 2, w]], device_assignment=da)
    plain = xtpu.replicate(lambda a, b: computation(a, b, False), [[x, w], [x * 2, w]])
    for s, p in zip(split, plain):
        np.testing.assert_allclose(s[0], p[0], rtol=1e-12)
        np.testing.assert_allclose(s[1], p[1], rtol=1e-12)


def test_tape_misuse_errors():
    t = xtpu.GradientTape()
    with pytest.raises(RuntimeError, match="Trying to stop recording a tape which is not recording"):
        with t.stop_recording():
            pass
    with t:
        with pytest.raises(ValueError, match="Tape is still recording"):
            t.__enter__()
    with pytest.raises(TypeError, match="is a Python value"):
        xtpu.GradientTape().watch(3.0)


def test_custom_gradient_rule_with_wrong_arity():
    @xtpu.custom_gradient
    def f(x, y):
        return x * y, lambda dy: dy  # one cotangent for two inputs

    a, b = xtpu.constant(2.0), xtpu.constant(3.0)
    with xtpu.GradientTape() as t:
        t.watch([a, b])
        z = f(a, b)
    with pytest.raises(ValueError, match="returned 1 gradients for 2 inputs"):
        t.gradient(z, [a, b])


def test_tape_used_outside_its_computation():
    keep = {}

    def computation(x):
        with xtpu.GradientTape() as t:
            t.watch(x)
            y = x * x
        keep["tape"], keep["y"], keep["x"] = t, y, x
        return y

    xtpu.lower(computation, [[np.float32(1.0)]])
    with pytest.raises(RuntimeError, match="inside the replicated computation the tape recorded"):
        keep["tape"].gradient(keep["y"], keep["x"])


def test_traced_jacobian_matches_eager():
    def f(x):
        return xtpu.math.tanh(x) * x[0]

    xv = np.array([0.3, -0.7, 1.1])

    def computation(x):
        with xtpu.GradientTape() as t:
            t.watch(x)
            y = f(x)
        return t.jacobian(y, x)

    traced = xtpu.replicate(computation, [[xv]])[0][0]
    x = xtpu.constant(xv)
    with xtpu.GradientTape() as t:
        t.watch(x)
        y = f(x)
    np.testing.assert_allclose(traced, t.jacobian(y, x), rtol=1e-12)
    want = np.diag((1 - np.tanh(xv) ** 2) * xv[0])
    want[:, 0] += np.tanh(xv)
    np.testing.assert_allclose(traced, want, rtol=1e-12)


def test_gradients_of_mirrored_variables_are_per_replica():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))
    with strategy.scope():
        w = xtpu.Variable(np.array([1.0, 2.0], np.float32), aggregation=xtpu.VariableAggregation.MEAN)

    def step(x):
        with xtpu.GradientTape() as t:
            loss = xtpu.math.reduce_sum(w * w * x)
        g_tape = t.gradient(loss, w)
        g_tf1 = xtpu.gradients(xtpu.math.reduce_sum(w * w * x), w)[0]
        return g_tape, g_tf1

    data = np.arange(8, dtype=np.float32).reshape(4, 2)
    batch = next(iter(strategy.experimental_distribute_dataset([data])))
    g_tape, g_tf1 = strategy.run(step, args=(batch,))
    assert isinstance(g_tape, xtpu.PerReplica)
    for r, (a, b) in enumerate(
        zip(strategy.experimental_local_results(g_tape), strategy.experimental_local_results(g_tf1))
    ):
        np.testing.assert_allclose(a, 2 * np.array([1.0, 2.0]) * data[r])
        np.testing.assert_allclose(b, a)


def test_cotangent_shared_with_a_discarded_one_survives():
    # exp(x - 1.0): the cotangent of the constant 1.0 is discarded and erased;
    # the one of x, computed from the same ops, must stay.
    def computation(x):
        return xtpu.gradients(xtpu.math.exp(x - 1.0), x)[0]

    assert xtpu.replicate(computation, [[np.float64(2.0)]])[0][0] == pytest.approx(np.exp(1.0))


def test_ops_on_variables_read_them():
    # TF converts a Variable to a tensor by reading it: gradients flow.
    v = xtpu.Variable(np.array([1.0, 2.0, 3.0]))
    with xtpu.GradientTape() as t:
        loss = xtpu.math.reduce_sum(xtpu.math.exp(v))
    np.testing.assert_allclose(t.gradient(loss, v), np.exp([1.0, 2.0, 3.0]))

    def computation(p):
        with xtpu.GradientTape() as t:
            loss = xtpu.cond(p, lambda: xtpu.math.reduce_sum(v * v), lambda: xtpu.math.reduce_sum(v))
        return t.gradient(loss, v)

    out = xtpu.replicate(computation, [[np.bool_(True)], [np.bool_(False)]])
    np.testing.assert_allclose(out[0][0], [2.0, 4.0, 6.0])
    np.testing.assert_allclose(out[1][0], [1.0, 1.0, 1.0])


def test_second_order_gradient_through_an_outside_compilation_result():
    # Found by the fuzzer (seed 23): d/dv (d/dv v*v) with v the result of an
    # outside-compilation cluster was None compiled (2 eagerly): the inner
    # gradient's ops read the value inside the cluster, which the outer
    # tape did not watch.
    def computation(x):
        v = xtpu.outside_compilation(lambda: xtpu.cast(xtpu.replica_id(), xtpu.float64) + 1.5)
        with xtpu.GradientTape() as outer:
            outer.watch(v)
            with xtpu.GradientTape() as inner:
                inner.watch(v)
                y = v * v * v
            g = inner.gradient(y, v)
        return outer.gradient(g, v), g

    out = xtpu.replicate(computation, [[np.float32(0)], [np.float32(0)]])
    for r, (second, first) in enumerate(out):
        v = r + 1.5
        np.testing.assert_allclose(first, 3 * v * v)
        np.testing.assert_allclose(second, 6 * v)
    eager = computation(xtpu.constant(np.float32(0)))
    np.testing.assert_allclose(np.asarray(eager[0]), np.asarray(out[0][0]))


def test_traced_gradient_builds_no_op_it_then_erases(monkeypatch):
    # The cotangents of x (x @ w, x no source), of the count a mean divides
    # by and of a reduction's init are needed by nobody: the rules are told
    # (skip_input_indices) and do not build them, so every op the gradient
    # emits is in the program (it built 5 that it erased before).
    from xtpu.core import tracing

    real_emit = tracing.Trace.emit
    emitted = []

    def counting_emit(self, op_cls, operands, params):
        results = real_emit(self, op_cls, operands, params)
        emitted.append(results[0].value.owner)
        return results

    def step(x, w, w2):
        with xtpu.GradientTape() as tape:
            tape.watch([w, w2])
            h = xtpu.math.tanh(x @ w)
            y = h @ w2
            loss = xtpu.math.reduce_mean(y * y)
        monkeypatch.setattr(tracing.Trace, "emit", counting_emit)
        g_w, g_w2 = tape.gradient(loss, [w, w2])
        monkeypatch.setattr(tracing.Trace, "emit", real_emit)
        return g_w, g_w2

    rng = np.random.default_rng(3)
    x, w, w2 = rng.standard_normal((4, 5)), rng.standard_normal((5, 6)) * 0.3, rng.standard_normal((6, 3)) * 0.3
    ((g_w, g_w2),) = xtpu.replicate(step, [[x, w, w2]])
    assert emitted and all(op.parent is not None for op in emitted), [op.name for op in emitted if op.parent is None]
    h = np.tanh(x @ w)
    g_y = 2 * (h @ w2) / (h @ w2).size
    np.testing.assert_allclose(g_w2, h.T @ g_y, rtol=1e-12)
    np.testing.assert_allclose(g_w, x.T @ ((g_y @ w2.T) * (1 - h * h)), rtol=1e-12)
