"""Optimizers: TF 1's xtpu.train (and xtpu.tpu.CrossShardOptimizer) and
TF 2's xtpu.optimizers, against numpy implementations of TF's documented
update equations, eagerly and inside TPUStrategy.run."""

import logging

import numpy as np
import pytest

import xtpu
from xtpu.train import losses

f32 = np.float32


# --------------------------------------------------------------------------
# numpy references of TF's update equations
# --------------------------------------------------------------------------


class NpGD:
    """TF 1 GradientDescentOptimizer and TF 2 SGD(momentum=0): w -= lr * g."""

    def __init__(self, lr):
        self.lr = f32(lr)

    def __call__(self, ws, gs):
        return [w - self.lr * g for w, g in zip(ws, gs)]


class NpMomentumTF1:
    """TF 1 MomentumOptimizer (ApplyMomentum): a = a*m + g; w -= lr*a
    (nesterov: w -= lr*g + lr*m*a)."""

    def __init__(self, lr, momentum, nesterov=False):
        self.lr, self.m, self.nesterov = f32(lr), f32(momentum), nesterov
        self.accum = None

    def __call__(self, ws, gs):
        if self.accum is None:
            self.accum = [np.zeros_like(w) for w in ws]
        out = []
        for i, (w, g) in enumerate(zip(ws, gs)):
            a = self.accum[i] * self.m + g
            self.accum[i] = a
            out.append(w - (g * self.lr + a * self.m * self.lr) if self.nesterov else w - a * self.lr)
        return out


class NpAdamTF1:
    """TF 1 AdamOptimizer: beta power accumulators, lr_t = lr*sqrt(1-b2^t)/(1-b1^t)."""

    def __init__(self, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8):
        self.lr, self.b1, self.b2, self.eps = f32(lr), f32(beta1), f32(beta2), f32(eps)
        self.p1, self.p2 = f32(beta1), f32(beta2)
        self.m = self.v = None

    def __call__(self, ws, gs):
        if self.m is None:
            self.m = [np.zeros_like(w) for w in ws]
            self.v = [np.zeros_like(w) for w in ws]
        lr_t = self.lr * np.sqrt(f32(1) - self.p2) / (f32(1) - self.p1)
        out = []
        for i, (w, g) in enumerate(zip(ws, gs)):
            self.m[i] = self.m[i] * self.b1 + g * (f32(1) - self.b1)
            self.v[i] = self.v[i] * self.b2 + (g * g) * (f32(1) - self.b2)
            out.append(w - lr_t * self.m[i] / (np.sqrt(self.v[i]) + self.eps))
        self.p1, self.p2 = self.p1 * self.b1, self.p2 * self.b2
        return out


class NpSGD:
    """TF 2 SGD: v = m*v - lr*g; w += v (nesterov: w += m*v - lr*g)."""

    def __init__(self, lr=0.01, momentum=0.0, nesterov=False):
        self.lr, self.m, self.nesterov = f32(lr), f32(momentum), nesterov
        self.vel = None

    def __call__(self, ws, gs):
        if self.m == 0:
            return [w - g * self.lr for w, g in zip(ws, gs)]
        if self.vel is None:
            self.vel = [np.zeros_like(w) for w in ws]
        out = []
        for i, (w, g) in enumerate(zip(ws, gs)):
            v = self.vel[i] * self.m - g * self.lr
            self.vel[i] = v
            out.append(w + (v * self.m - g * self.lr) if self.nesterov else w + v)
        return out


class NpAdam:
    """TF 2 Adam: t = iterations+1, lr_t = lr*sqrt(1-b2^t)/(1-b1^t); amsgrad
    uses vhat = max(vhat, v)."""

    def __init__(self, lr=0.001, beta_1=0.9, beta_2=0.999, eps=1e-7, amsgrad=False):
        self.lr, self.b1, self.b2, self.eps = f32(lr), f32(beta_1), f32(beta_2), f32(eps)
        self.amsgrad = amsgrad
        self.t = 0
        self.m = self.v = self.vhat = None

    def __call__(self, ws, gs):
        if self.m is None:
            self.m = [np.zeros_like(w) for w in ws]
            self.v = [np.zeros_like(w) for w in ws]
            self.vhat = [np.zeros_like(w) for w in ws]
        self.t += 1
        t = f32(self.t)
        lr_t = self.lr * np.sqrt(f32(1) - self.b2**t) / (f32(1) - self.b1**t)
        out = []
        for i, (w, g) in enumerate(zip(ws, gs)):
            self.m[i] = self.m[i] * self.b1 + g * (f32(1) - self.b1)
            self.v[i] = self.v[i] * self.b2 + (g * g) * (f32(1) - self.b2)
            v = self.v[i]
            if self.amsgrad:
                self.vhat[i] = np.maximum(self.vhat[i], v)
                v = self.vhat[i]
            out.append(w - lr_t * self.m[i] / (np.sqrt(v) + self.eps))
        return out


# (xtpu optimizer factory, numpy reference factory, slot names)
TF1_CASES = {
    "gd": (lambda: xtpu.train.GradientDescentOptimizer(0.1), lambda: NpGD(0.1), []),
    "momentum": (lambda: xtpu.train.MomentumOptimizer(0.05, 0.9), lambda: NpMomentumTF1(0.05, 0.9), ["momentum"]),
    "nesterov": (
        lambda: xtpu.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True),
        lambda: NpMomentumTF1(0.05, 0.9, nesterov=True),
        ["momentum"],
    ),
    "adam": (lambda: xtpu.train.AdamOptimizer(0.01), lambda: NpAdamTF1(0.01), ["m", "v"]),
    "adam_hyper": (
        lambda: xtpu.train.AdamOptimizer(0.05, beta1=0.8, beta2=0.99, epsilon=1e-3),
        lambda: NpAdamTF1(0.05, 0.8, 0.99, 1e-3),
        ["m", "v"],
    ),
}
TF2_CASES = {
    "sgd": (lambda: xtpu.optimizers.SGD(0.1), lambda: NpSGD(0.1), []),
    "sgd_momentum": (lambda: xtpu.optimizers.SGD(0.05, momentum=0.9), lambda: NpSGD(0.05, 0.9), ["momentum"]),
    "sgd_nesterov": (
        lambda: xtpu.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
        lambda: NpSGD(0.05, 0.9, True),
        ["momentum"],
    ),
    "adam": (lambda: xtpu.optimizers.Adam(0.01), lambda: NpAdam(0.01), ["m", "v"]),
    "adam_amsgrad": (
        lambda: xtpu.optimizers.Adam(0.02, beta_1=0.8, beta_2=0.95, epsilon=1e-4, amsgrad=True),
        lambda: NpAdam(0.02, 0.8, 0.95, 1e-4, amsgrad=True),
        ["m", "v", "vhat"],
    ),
}

W0 = np.random.default_rng(7).standard_normal((3, 2)).astype(f32)
B0 = np.array([0.5, -0.25], f32)


def grad_sequence(steps, replicas=1, seed=0):
    """Arbitrary gradients: [step][replica] -> (gw, gb); they change sign and
    scale so that Adam's amsgrad max and the momentum matter."""
    rng = np.random.default_rng(seed)
    return [
        [
            (
                rng.standard_normal((3, 2)).astype(f32) * f32(1 + s % 3),
                rng.standard_normal(2).astype(f32) * f32(0.1 * (s + 1)),
            )
            for _ in range(replicas)
        ]
        for s in range(steps)
    ]


def close(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# --------------------------------------------------------------------------
# Update rules, eagerly
# --------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(TF1_CASES))
def test_tf1_update_rules_eager(case):
    make, make_ref, _ = TF1_CASES[case]
    opt, ref = make(), make_ref()
    w, b = xtpu.Variable(W0.copy(), name="w"), xtpu.Variable(B0.copy(), name="b")
    want = [W0.copy(), B0.copy()]
    for step in grad_sequence(6):
        gw, gb = step[0]
        assert opt.apply_gradients([(gw, w), (gb, b)]) is None
        want = ref(want, [gw, gb])
        close(w.numpy(), want[0])
        close(b.numpy(), want[1])


@pytest.mark.parametrize("case", sorted(TF2_CASES))
def test_tf2_update_rules_eager(case):
    make, make_ref, _ = TF2_CASES[case]
    opt, ref = make(), make_ref()
    w, b = xtpu.Variable(W0.copy(), name="w"), xtpu.Variable(B0.copy(), name="b")
    want = [W0.copy(), B0.copy()]
    for k, step in enumerate(grad_sequence(6)):
        gw, gb = step[0]
        opt.apply_gradients(zip([gw, gb], [w, b]))
        want = ref(want, [gw, gb])
        close(w.numpy(), want[0])
        close(b.numpy(), want[1])
        assert int(opt.iterations.numpy()) == k + 1


def test_tf1_slots_and_variables():
    opt = xtpu.train.AdamOptimizer(0.01)
    w, b = xtpu.Variable(W0.copy(), name="w"), xtpu.Variable(B0.copy(), name="b")
    assert opt.get_slot(w, "m") is None and opt.variables() == []
    opt.apply_gradients([(np.ones_like(W0), w), (np.ones_like(B0), b)])
    assert opt.get_slot_names() == ["m", "v"]
    m = opt.get_slot(w, "m")
    assert m.shape == w.shape and m.dtype == w.dtype and not m.trainable and not m.mirrored
    assert m.name == "w/Adam" and opt.get_slot(w, "v").name == "w/Adam_1"
    assert opt.get_slot(w, "nope") is None
    names = [v.name for v in opt.variables()]
    assert names == sorted(["b/Adam", "b/Adam_1", "beta1_power", "beta2_power", "w/Adam", "w/Adam_1"])
    b1p, b2p = opt._get_beta_accumulators()
    close(b1p.numpy(), f32(0.9) * f32(0.9))
    close(b2p.numpy(), f32(0.999) * f32(0.999))
    assert xtpu.train.MomentumOptimizer(0.1, 0.9).get_slot_names() == ["momentum"]
    assert xtpu.train.GradientDescentOptimizer(0.1).get_slot_names() == []


def test_tf2_slots_and_variables():
    opt = xtpu.optimizers.Adam(0.01, amsgrad=True)
    w = xtpu.Variable(W0.copy(), name="w")
    with pytest.raises(KeyError, match="Slot variable key m not found"):
        opt.get_slot(w, "m")
    opt.build([w])
    assert opt.get_slot_names() == ["m", "v", "vhat"]
    assert [v.name for v in opt.variables] == ["Adam/iter", "w/m", "w/v", "w/vhat"]
    assert opt.variables() == list(opt.variables)
    assert opt.iterations.dtype == np.int64 and int(opt.iterations.numpy()) == 0
    assert opt.get_slot(w, "vhat") is opt.variables[3]
    assert xtpu.optimizers.SGD(0.1).get_slot_names() == []
    assert xtpu.optimizers.SGD(0.1, momentum=0.5).get_slot_names() == ["momentum"]
    assert xtpu.keras.optimizers.Adam is xtpu.optimizers.Adam
    cfg = xtpu.optimizers.SGD(0.1, momentum=0.5, nesterov=True).get_config()
    assert cfg["learning_rate"] == 0.1 and cfg["momentum"] == 0.5 and cfg["nesterov"] is True


def test_hyperparameters_as_callables_and_variables():
    lr = xtpu.Variable(np.float32(0.5), trainable=False)
    w = xtpu.Variable(np.ones(2, f32))
    xtpu.train.GradientDescentOptimizer(lambda: lr).apply_gradients([(np.ones(2, f32), w)])
    close(w.numpy(), [0.5, 0.5])
    opt = xtpu.optimizers.SGD(learning_rate=lr)
    lr.assign(np.float32(0.25))
    opt.apply_gradients([(np.ones(2, f32), w)])
    close(w.numpy(), [0.25, 0.25])
    opt.learning_rate = 0.125
    assert opt.lr == 0.125
    opt.apply_gradients([(np.ones(2, f32), w)])
    close(w.numpy(), [0.125, 0.125])


def test_float64_variables():
    w = xtpu.Variable(np.array([1.0, -2.0]))
    opt = xtpu.optimizers.Adam(0.1)
    opt.apply_gradients([(np.array([0.5, 0.5]), w)])
    assert w.dtype == np.float64 and opt.get_slot(w, "m").dtype == np.float64
    close(w.numpy(), [0.9, -2.1], tol=1e-6)
    w1 = xtpu.Variable(np.array([1.0, -2.0]))
    xtpu.train.AdamOptimizer(0.1).apply_gradients([(np.array([0.5, 0.5]), w1)])
    close(w1.numpy(), [0.9, -2.1], tol=1e-6)


# --------------------------------------------------------------------------
# Eager training with GradientTape / callable losses
# --------------------------------------------------------------------------

X = np.random.default_rng(1).standard_normal((32, 3)).astype(f32)
Y = np.random.default_rng(2).standard_normal((32, 2)).astype(f32)


def np_grads(x, y, w, b, scale):
    """Gradients of scale * sum((x @ w + b - y)^2)."""
    d = (x @ w + b - y) * f32(2) * f32(scale)
    return [x.T @ d, d.sum(axis=0)]


def xtpu_loss(x, y, w, b, scale):
    p = xtpu.matmul(x, w.read_value()) + b.read_value()
    d = p - y
    return xtpu.math.reduce_sum(d * d) * f32(scale)


def np_train(ref, steps, batches, scale, shards=None):
    """Numpy training on whole global batches: one gradient per batch."""
    ws = [W0.copy(), B0.copy()]
    for s in range(steps):
        x, y = batches[s % len(batches)]
        ws = ref(ws, np_grads(x, y, ws[0], ws[1], scale))
    return ws


@pytest.mark.parametrize("case", ["sgd_momentum", "adam"])
def test_tf2_eager_gradient_tape_loop(case):
    make, make_ref, _ = TF2_CASES[case]
    opt = make()
    w, b = xtpu.Variable(W0.copy(), name="w"), xtpu.Variable(B0.copy(), name="b")
    for _ in range(4):
        with xtpu.GradientTape() as tape:
            loss = xtpu_loss(X, Y, w, b, 1 / 32)
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
    want = np_train(make_ref(), 4, [(X, Y)], 1 / 32)
    close(w.numpy(), want[0], 1e-6)
    close(b.numpy(), want[1], 1e-6)
    # minimize with a callable loss does the same
    opt2 = make()
    w2, b2 = xtpu.Variable(W0.copy()), xtpu.Variable(B0.copy())
    for _ in range(4):
        opt2.minimize(lambda: xtpu_loss(X, Y, w2, b2, 1 / 32), [w2, b2])
    close(w2.numpy(), w.numpy())


@pytest.mark.parametrize("case", ["momentum", "adam"])
def test_tf1_eager_minimize_with_callable_loss(case):
    make, make_ref, _ = TF1_CASES[case]
    opt = make()
    w, b = xtpu.Variable(W0.copy(), name="w"), xtpu.Variable(B0.copy(), name="b")
    step = xtpu.Variable(np.int64(0), trainable=False)
    for _ in range(4):
        opt.minimize(lambda: xtpu_loss(X, Y, w, b, 1 / 32), global_step=step)
    want = np_train(make_ref(), 4, [(X, Y)], 1 / 32)
    close(w.numpy(), want[0], 1e-6)
    close(b.numpy(), want[1], 1e-6)
    assert int(step.numpy()) == 4
    # compute_gradients with a callable: the variables it read, in order
    gv = opt.compute_gradients(lambda: xtpu_loss(X, Y, w, b, 1.0))
    assert [v for _, v in gv] == [w, b]
    close(gv[0][0], np_grads(X, Y, w.numpy(), b.numpy(), 1.0)[0], 1e-4)


def test_none_gradients_are_skipped_with_tf_warning(caplog):
    w, unused = xtpu.Variable(np.ones(2, f32), name="w"), xtpu.Variable(np.ones(2, f32), name="unused")
    opt = xtpu.optimizers.SGD(0.5)
    with caplog.at_level(logging.WARNING, logger="xtpu"):
        opt.apply_gradients([(np.ones(2, f32), w), (None, unused)])
    assert "Gradients do not exist for variables ['unused'] when minimizing the loss" in caplog.text
    close(w.numpy(), [0.5, 0.5])
    close(unused.numpy(), [1.0, 1.0])
    tf1 = xtpu.train.MomentumOptimizer(0.5, 0.5)
    tf1.apply_gradients([(np.ones(2, f32), w), (None, unused)])
    close(w.numpy(), [0.0, 0.0])
    assert tf1.get_slot(unused, "momentum") is None


# --------------------------------------------------------------------------
# Inside TPUStrategy.run: the update rules with per-replica gradients
# --------------------------------------------------------------------------


def _rules_in_run(make, make_ref, slots, n, tf2, steps_per_run=1):
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=n), steps_per_run=steps_per_run)
    with strategy.scope():
        w, b = xtpu.Variable(W0.copy(), name="w"), xtpu.Variable(B0.copy(), name="b")
        opt = make() if tf2 else None
    if not tf2:
        opt = make()

    def step(gw, gb):
        if tf2:
            opt.apply_gradients(zip([gw, gb], [w, b]))
        else:
            opt.apply_gradients([(gw, w), (gb, b)])
        return w.read_value(), b.read_value()

    ref = make_ref()
    want = [W0.copy(), B0.copy()]
    seq = grad_sequence(4 * steps_per_run, n, seed=3)
    for k in range(4):
        chunk = seq[k * steps_per_run : (k + 1) * steps_per_run]
        if steps_per_run == 1:
            args = (xtpu.PerReplica([g[0] for g in chunk[0]]), xtpu.PerReplica([g[1] for g in chunk[0]]))
            outs = strategy.run(step, args=args)
        else:
            data = [
                (np.concatenate([g[0][None] for g in st]), np.concatenate([g[1][None] for g in st])) for st in chunk
            ]
            it = iter(strategy.experimental_distribute_dataset(data))
            outs = strategy.run(lambda batch: step(batch[0][0], batch[1][0]), args=(it,))
        for st in chunk:
            want = ref(want, [sum(g[0] for g in st), sum(g[1] for g in st)])
        close(w.numpy(), want[0], 1e-6)
        close(b.numpy(), want[1], 1e-6)
        # every replica holds the same weights
        for out, var in zip(outs, (w, b)):
            vals = strategy.experimental_local_results(out)
            assert len(vals) == n
            for v in vals:
                np.testing.assert_array_equal(v, var.numpy())
    for name in slots:
        for var in (w, b):
            slot = opt.get_slot(var, name)
            assert slot.mirrored and slot in strategy._variables and slot._strategy is strategy
    if tf2:
        assert opt.iterations.mirrored and int(opt.iterations.numpy()) == 4 * steps_per_run
    return opt


@pytest.mark.parametrize("case", sorted(TF2_CASES))
def test_tf2_update_rules_in_strategy_run_8_replicas(case):
    _rules_in_run(*TF2_CASES[case], n=8, tf2=True)


@pytest.mark.parametrize("case", sorted(TF1_CASES))
def test_tf1_update_rules_in_strategy_run_8_replicas(case):
    opt = _rules_in_run(*TF1_CASES[case], n=8, tf2=False)
    if case.startswith("adam"):
        assert all(v.mirrored for v in opt._get_beta_accumulators())


@pytest.mark.parametrize("tf2,case", [(True, "adam_amsgrad"), (False, "nesterov")])
def test_update_rules_in_a_device_loop(tf2, case):
    cases = TF2_CASES if tf2 else TF1_CASES
    _rules_in_run(*cases[case], n=4, tf2=tf2, steps_per_run=3)


# --------------------------------------------------------------------------
# Training inside TPUStrategy.run equals numpy training on the global batch
# --------------------------------------------------------------------------

STEPS = 5
GLOBAL = 32
BATCHES = [
    (
        np.random.default_rng(10 + s).standard_normal((GLOBAL, 3)).astype(f32),
        np.random.default_rng(20 + s).standard_normal((GLOBAL, 2)).astype(f32),
    )
    for s in range(STEPS)
]


@pytest.mark.parametrize("case", ["sgd_nesterov", "adam"])
def test_tf2_training_in_strategy_run_8_replicas(case):
    make, make_ref, slots = TF2_CASES[case]
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=8))
    with strategy.scope():
        w, b = xtpu.Variable(W0.copy(), name="w"), xtpu.Variable(B0.copy(), name="b")
        opt = make()
    traces = []

    def step(batch):
        traces.append(1)
        x, y = batch
        with xtpu.GradientTape() as tape:
            loss = xtpu_loss(x, y, w, b, 1 / GLOBAL)  # TF 2: scale by the global batch size
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
        return w.read_value()

    for batch in strategy.experimental_distribute_dataset(BATCHES):
        out = strategy.run(step, args=(batch,))
        assert all(np.array_equal(v, w.numpy()) for v in out.values)
    want = np_train(make_ref(), STEPS, BATCHES, 1 / GLOBAL)
    close(w.numpy(), want[0], 1e-6)
    close(b.numpy(), want[1], 1e-6)
    assert int(opt.iterations.numpy()) == STEPS
    # The first call traced twice (the slots were created in between), then never again.
    assert len(traces) == 2
    assert all(v.mirrored for v in opt.variables)


def test_tf2_build_before_run_traces_once():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        w = xtpu.Variable(W0.copy(), name="w")
        opt = xtpu.optimizers.Adam(0.1)
        opt.build([w])
    traces = []

    def step():
        traces.append(1)
        opt.apply_gradients([(xtpu.constant(np.ones((3, 2), f32)), w)])

    strategy.run(step)
    strategy.run(step)
    assert len(traces) == 1
    ref = NpAdam(0.1)
    want = [W0.copy()]
    for _ in range(2):
        want = ref(want, [np.full((3, 2), 2, f32)])  # summed over 2 replicas
    close(w.numpy(), want[0])


@pytest.mark.parametrize("n", [1, 2, 8])
@pytest.mark.parametrize("case", ["gd", "adam"])
def test_tf1_minimize_in_strategy_run(n, case):
    """TF 1 under a strategy: the loss (a mean over the replica's batch) is
    divided by the number of replicas and the gradients summed: the mean
    gradient of the global batch."""
    make, make_ref, _ = TF1_CASES[case]
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=n))
    with strategy.scope():
        w, b = xtpu.Variable(W0.copy(), name="w"), xtpu.Variable(B0.copy(), name="b")
        step_var = xtpu.train.get_or_create_global_step()
    assert xtpu.train.get_global_step() is None  # the host has none
    with strategy.scope():
        assert xtpu.train.get_global_step() is step_var and step_var.mirrored
    opt = make()

    def step(batch):
        x, y = batch
        opt.minimize(xtpu_loss(x, y, w, b, n / GLOBAL), global_step=step_var)

    for batch in strategy.experimental_distribute_dataset(BATCHES):
        strategy.run(step, args=(batch,))
    want = np_train(make_ref(), STEPS, BATCHES, 1 / GLOBAL)
    close(w.numpy(), want[0], 1e-6)
    close(b.numpy(), want[1], 1e-6)
    assert int(step_var.numpy()) == STEPS


def test_tf1_compute_gradients_defaults_to_the_trainable_variables_read():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        w = xtpu.Variable(W0.copy(), name="w")
        frozen = xtpu.Variable(B0.copy(), name="frozen", trainable=False)
        xtpu.Variable(B0.copy(), name="unread")
    opt = xtpu.train.GradientDescentOptimizer(0.1)
    seen = []

    def step(x, y):
        p = xtpu.matmul(x, w.read_value()) + frozen.read_value()
        gv = opt.compute_gradients(xtpu.math.reduce_sum((p - y) * (p - y)))
        seen.append([v.name for _, v in gv])
        return gv[0][0]

    g = strategy.run(step, args=(X[:4], Y[:4]))
    assert seen == [["w"]]
    # scaled by 1/2 (two replicas, a MEAN loss reduction)
    close(g.values[0], np_grads(X[:4], Y[:4], W0, B0, 0.5)[0], 1e-6)


# --------------------------------------------------------------------------
# CrossShardOptimizer
# --------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 8])
@pytest.mark.parametrize("reduction", [losses.Reduction.MEAN, losses.Reduction.SUM])
@pytest.mark.parametrize("case", ["gd", "momentum", "adam"])
def test_cross_shard_optimizer_equals_global_batch_training(n, reduction, case):
    make, make_ref, _ = TF1_CASES[case]
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=n))
    with strategy.scope():
        w, b = xtpu.Variable(W0.copy(), name="w"), xtpu.Variable(B0.copy(), name="b")
    opt = xtpu.tpu.CrossShardOptimizer(make(), reduction=reduction)
    local = GLOBAL // n
    # MEAN: each shard's loss is the mean over its batch; SUM: the sum (scaled
    # down for gradient descent's sake).
    scale = 1 / local if reduction == losses.Reduction.MEAN else 1 / GLOBAL

    def step(batch):
        x, y = batch
        opt.minimize(xtpu_loss(x, y, w, b, scale))
        return w.read_value()

    for batch in strategy.experimental_distribute_dataset(BATCHES):
        out = strategy.run(step, args=(batch,))
        for v in strategy.experimental_local_results(out):
            np.testing.assert_array_equal(v, w.numpy())
    # MEAN: the mean of the shards' mean losses, i.e. the global mean;
    # SUM: the sum of the shards' losses.
    want = np_train(make_ref(), STEPS, BATCHES, 1 / GLOBAL)
    close(w.numpy(), want[0], 1e-6)
    close(b.numpy(), want[1], 1e-6)
    assert opt.get_slot_names() == opt._opt.get_slot_names()
    assert opt.variables() == opt._opt.variables()
    if case == "momentum":
        assert opt.get_slot(w, "momentum").mirrored


@pytest.mark.parametrize("reduction", [losses.Reduction.MEAN, losses.Reduction.SUM])
def test_cross_shard_optimizer_group_assignment(reduction):
    """Groups [[0, 1], [2, 3]]: each group averages (or sums) its gradients
    and trains its own copy of the weights (3 steps in a device loop)."""
    groups = [[0, 1], [2, 3]]
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4), steps_per_run=3)
    with strategy.scope():
        w, b = xtpu.Variable(W0.copy(), name="w"), xtpu.Variable(B0.copy(), name="b")
    opt = xtpu.tpu.CrossShardOptimizer(
        xtpu.train.MomentumOptimizer(0.05, 0.9), reduction=reduction, group_assignment=groups
    )
    local = GLOBAL // 4
    scale = 1 / local if reduction == losses.Reduction.MEAN else 1 / (2 * local)

    def step(batch):
        x, y = batch
        gv = opt.compute_gradients(xtpu_loss(x, y, w, b, scale))
        opt.apply_gradients(gv)
        return w.read_value(), b.read_value()

    it = iter(strategy.experimental_distribute_dataset(BATCHES[:3]))
    w_out, b_out = strategy.run(step, args=(it,))
    for _g, members in enumerate(groups):
        # numpy: the group's half of each global batch
        rows = slice(members[0] * local, (members[-1] + 1) * local)
        want = np_train(NpMomentumTF1(0.05, 0.9), 3, [(x[rows], y[rows]) for x, y in BATCHES[:3]], 1 / (2 * local))
        for r in members:
            close(w_out.values[r], want[0], 1e-6)
            close(b_out.values[r], want[1], 1e-6)
    assert not np.allclose(w_out.values[0], w_out.values[2])
    np.testing.assert_array_equal(w.numpy(), w_out.values[0])  # run writes back replica 0's copy


def test_cross_shard_optimizer_eager_warns_and_acts_as_one_shard(caplog):
    w = xtpu.Variable(W0.copy())
    b = xtpu.Variable(B0.copy())
    opt = xtpu.tpu.CrossShardOptimizer(xtpu.train.GradientDescentOptimizer(0.1))
    with caplog.at_level(logging.WARNING, logger="xtpu"):
        opt.minimize(lambda: xtpu_loss(X, Y, w, b, 1 / 32))
    assert (
        "CrossShardOptimizer should be used within a tpu_shard_context, but got unset number_of_shards. Assuming 1."
    ) in caplog.text
    want = np_train(NpGD(0.1), 1, [(X, Y)], 1 / 32)
    close(w.numpy(), want[0], 1e-6)


def test_cross_shard_compute_gradients_scales_the_loss_for_mean():
    """TF: compute_gradients returns the per-replica gradients of the loss
    divided by the number of shards; apply_gradients sums them."""
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))
    with strategy.scope():
        w = xtpu.Variable(W0.copy(), name="w")
    mean = xtpu.tpu.CrossShardOptimizer(xtpu.train.GradientDescentOptimizer(0.1))
    total = xtpu.tpu.CrossShardOptimizer(xtpu.train.GradientDescentOptimizer(0.1), reduction=losses.Reduction.SUM)

    def step(x):
        loss = xtpu.math.reduce_sum(xtpu.matmul(x, w.read_value()))
        return mean.compute_gradients(loss, [w])[0][0], total.compute_gradients(loss, [w])[0][0]

    x = np.ones((1, 3), f32)
    g_mean, g_sum = strategy.run(step, args=(x,))
    close(g_mean.values[0], np.full((3, 2), 0.25, f32))
    close(g_sum.values[0], np.ones((3, 2), f32))


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def test_cross_shard_optimizer_errors():
    gd = xtpu.train.GradientDescentOptimizer(0.1)
    for bad in (losses.Reduction.NONE, losses.Reduction.SUM_OVER_BATCH_SIZE, "mean"):
        with pytest.raises(
            ValueError, match=r"Argument `reduction` should be one of \('weighted_sum', 'weighted_mean'\)"
        ):
            xtpu.tpu.CrossShardOptimizer(gd, reduction=bad)
    with pytest.raises(TypeError, match="CrossShardOptimizer only works with tf.training.Optimizer and not Keras"):
        xtpu.tpu.CrossShardOptimizer(xtpu.optimizers.SGD(0.1))
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))
    with strategy.scope():
        w = xtpu.Variable(W0.copy(), name="w")
    cases = [
        ((0, 1, 2, 3), "group_assignment must be a list of list"),
        ([[0, 1], [2, 2]], r"group_assignment must be a permutation of range\(4\)"),
        ([[0, 1, 2], [3]], "The size of each subgroup in group_assignment must be equal"),
    ]
    for groups, msg in cases:
        opt = xtpu.tpu.CrossShardOptimizer(gd, group_assignment=groups)
        with pytest.raises(ValueError, match=msg):
            strategy.run(lambda: opt.minimize(xtpu.math.reduce_sum(w * w)))


def test_tf1_errors():
    w = xtpu.Variable(W0.copy(), name="w")
    opt = xtpu.train.GradientDescentOptimizer(0.1)
    with pytest.raises(ValueError, match="Must specify the optimizer name"):
        xtpu.train.GradientDescentOptimizer(0.1, name="")
    with pytest.raises(
        RuntimeError, match="`loss` passed to Optimizer.compute_gradients should be a function when eager"
    ):
        opt.compute_gradients(np.float32(1.0))
    with pytest.raises(ValueError, match="No variables to optimize."):
        opt.compute_gradients(lambda: xtpu.constant(np.float32(1.0)))
    with pytest.raises(
        ValueError,
        match="No gradients provided for any variable, check your graph for ops that do "
        "not support gradients, between variables",
    ):
        opt.minimize(lambda: xtpu.constant(np.float32(1.0)), var_list=[w])
    with pytest.raises(ValueError, match="No variables provided."):
        opt.apply_gradients([])
    with pytest.raises(ValueError, match="No gradients provided for any variable: "):
        opt.apply_gradients([(None, w)])
    with pytest.raises(NotImplementedError, match="Trying to optimize unsupported type"):
        opt.apply_gradients([(np.ones(2, f32), np.ones(2, f32))])
    with pytest.raises(TypeError, match="Gradient must be convertible to a Tensor or IndexedSlices, or None"):
        opt.apply_gradients([("grad", w)])
    with pytest.raises(ValueError, match=r"var and grad do not have the same shape\[3, 2\] \[2\]"):
        opt.apply_gradients([(np.ones(2, f32), w)])

    def traced(x):
        with pytest.raises(ValueError, match="gate_gradients must be one of: Optimizer.GATE_NONE"):
            opt.compute_gradients(xtpu.math.reduce_sum(x * w), gate_gradients=7)
        with pytest.raises(ValueError, match=r"Invalid type 'int32' for loss, expected: \['float32', 'float64'\]"):
            opt.compute_gradients(xtpu.constant(np.int32(3)), var_list=[w])
        with pytest.raises(NotImplementedError, match="Trying to optimize unsupported type"):
            opt.compute_gradients(xtpu.math.reduce_sum(x), var_list=[x])
        return x

    xtpu.replicate(traced, [[np.ones((3, 2), f32)]])


def test_tf2_errors():
    w = xtpu.Variable(W0.copy(), name="w")
    opt = xtpu.optimizers.SGD(0.1)
    with pytest.raises(ValueError, match=r"No gradients provided for any variable: \(\['w'\],\)"):
        opt.apply_gradients([(None, w)])
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"`momentum` must be between \[0, 1\]. Received: momentum="):
            xtpu.optimizers.SGD(0.1, momentum=bad)
    with pytest.raises(TypeError, match="Unexpected keyword argument passed to optimizer: foo"):
        xtpu.optimizers.Adam(foo=1)
    with pytest.raises(NotImplementedError, match="`clipnorm` is not implemented"):
        xtpu.optimizers.SGD(0.1, clipnorm=1.0)
    assert xtpu.optimizers.SGD(lr=0.5).learning_rate == 0.5
    with pytest.raises(NotImplementedError, match="Trying to optimize unsupported type"):
        opt.apply_gradients([(np.ones(2, f32), np.ones(2, f32))])
    with pytest.raises(ValueError, match=r"var and grad do not have the same shape\[3, 2\] \[3\]"):
        opt.apply_gradients([(np.ones(3, f32), w)])
    with pytest.raises(ValueError, match="`tape` is required when a `Tensor` loss is passed."):
        opt.minimize(np.float32(1.0), [w])
    with pytest.raises(RuntimeError, match="Cannot set `iterations` to a new Variable after"):
        opt.apply_gradients([(np.ones((3, 2), f32), w)])
        opt.iterations = xtpu.Variable(np.int64(0))


def test_apply_gradients_in_cross_replica_context():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        w = xtpu.Variable(W0.copy(), name="w")
        opt2 = xtpu.optimizers.SGD(0.1)
        with pytest.raises(RuntimeError, match="`apply_gradients\\(\\) cannot be called in cross-replica context"):
            opt2.apply_gradients([(np.ones((3, 2), f32), w)])
        with pytest.raises(
            RuntimeError,
            match=r"Use `_distributed_apply\(\)` instead of `apply_gradients\(\)` in a "
            "cross-replica context.",
        ):
            xtpu.train.GradientDescentOptimizer(0.1).apply_gradients([(np.ones((3, 2), f32), w)])
        # building (creating the slots) in the scope is fine
        xtpu.optimizers.Adam().build([w])
    # outside the scope a mirrored variable is updated in place
    opt2.apply_gradients([(np.ones((3, 2), f32), w)])
    close(w.numpy(), W0 - f32(0.1))


def test_optimizers_refuse_a_bare_replicate():
    w = xtpu.Variable(W0.copy(), name="w")
    opts = [
        xtpu.optimizers.SGD(0.1),
        xtpu.train.GradientDescentOptimizer(0.1),
        xtpu.tpu.CrossShardOptimizer(xtpu.train.GradientDescentOptimizer(0.1)),
    ]
    for opt in opts:

        def computation(x):
            with xtpu.GradientTape() as tape:
                loss = xtpu.math.reduce_sum(w * x)
            g = tape.gradient(loss, w)
            opt.apply_gradients([(g, w)])
            return g

        with pytest.raises(
            NotImplementedError,
            match="apply_gradients inside xtpu.replicate: xtpu.Variables are "
            "updated on the devices only by computations that strategy.run",
        ):
            xtpu.replicate(computation, [[np.ones((3, 2), f32)]])

    def iterations(x):
        return xtpu.optimizers.SGD(0.1).iterations.read_value() + x

    with pytest.raises(NotImplementedError, match="optimizer.iterations inside xtpu.replicate"):
        xtpu.replicate(iterations, [[np.int64(1)]])


def test_slot_variables_and_strategies():
    """Slots are created under the strategy of their variable (TF's check)."""
    s1 = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    s2 = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with s1.scope():
        w1 = xtpu.Variable(W0.copy(), name="w1")
    host = xtpu.Variable(W0.copy(), name="host")
    with s2.scope():
        with pytest.raises(
            ValueError,
            match=r"Trying to create optimizer slot variable under the scope for "
            r"tf.distribute.Strategy \(TPUStrategy",
        ):
            xtpu.optimizers.Adam().build([w1])
        with pytest.raises(ValueError, match="Trying to create optimizer slot variable under the scope"):
            xtpu.optimizers.SGD(momentum=0.5).build([host])
        opt_s2 = xtpu.optimizers.SGD(0.1)
    # an optimizer of s2 used in s1's run
    with pytest.raises(ValueError, match="the optimizer was created in the scope of"):
        s1.run(lambda: opt_s2.apply_gradients([(xtpu.constant(np.ones((3, 2), f32)), w1)]))
    # a host variable updated in s1's run: its slots cannot be made there
    opt = xtpu.train.MomentumOptimizer(0.1, 0.9)
    with pytest.raises(ValueError, match="Trying to create optimizer slot variable under the scope"):
        s1.run(lambda: opt.apply_gradients([(xtpu.constant(np.ones((3, 2), f32)), host)]))
    # built outside any scope, slots follow their variable
    opt = xtpu.optimizers.SGD(0.1, momentum=0.5)
    opt.build([w1, host])
    assert opt.get_slot(w1, "momentum").mirrored and not opt.get_slot(host, "momentum").mirrored
    assert opt.iterations.mirrored and opt.iterations._strategy is s1


def test_variables_cannot_be_created_in_a_step():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with pytest.raises(ValueError, match="xtpu.Variable must be created outside a replicated computation"):
        strategy.run(lambda: xtpu.train.create_global_step())
    with strategy.scope():
        xtpu.train.create_global_step()
        with pytest.raises(ValueError, match='"global_step" already exists.'):
            xtpu.train.create_global_step()

    def bad_request():
        raise xtpu.strategy.RetraceRequest(lambda: None, "a test step")

    with pytest.raises(RuntimeError, match="strategy.run: a test step created no variable in this strategy"):
        strategy.run(bad_request)


def test_losses_reduction():
    R = losses.Reduction
    assert (R.NONE, R.SUM, R.MEAN, R.SUM_OVER_BATCH_SIZE) == (
        "none",
        "weighted_sum",
        "weighted_mean",
        "weighted_sum_over_batch_size",
    )
    assert R.SUM_OVER_NONZERO_WEIGHTS == R.SUM_BY_NONZERO_WEIGHTS == "weighted_sum_by_nonzero_weights"
    assert set(R.all()) == {R.NONE, R.SUM, R.MEAN, R.SUM_OVER_BATCH_SIZE, R.SUM_BY_NONZERO_WEIGHTS}
    R.validate(R.MEAN)
    with pytest.raises(ValueError, match="Invalid Reduction Key bogus. Key should be one of"):
        R.validate("bogus")


def test_malformed_arguments():
    w = xtpu.Variable(W0.copy(), name="w")
    with pytest.raises(TypeError, match=r"grads_and_vars must hold \(gradient, variable\) pairs"):
        xtpu.train.GradientDescentOptimizer(0.1).apply_gradients([w])
    with pytest.raises(ValueError, match=r"grads_and_vars must hold \(gradient, variable\) pairs"):
        xtpu.optimizers.SGD(0.1).apply_gradients([w])
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        mw = xtpu.Variable(W0.copy(), name="mw")
    opt = xtpu.train.GradientDescentOptimizer(0.1)
    with pytest.raises(ValueError, match="No variables provided."):
        strategy.run(lambda: opt.apply_gradients([]))

    def no_variables(x):
        opt.compute_gradients(xtpu.math.reduce_sum(x * x))

    with pytest.raises(ValueError, match="No variables to optimize."):
        strategy.run(no_variables, args=(np.ones(2, f32),))
    cross = xtpu.tpu.CrossShardOptimizer(opt)

    def in_merge(x):
        g = xtpu.math.reduce_sum(mw * x)
        xtpu.get_replica_context().merge_call(lambda s: cross.apply_gradients([(mw.read_value(), mw)]))
        return g

    with pytest.raises(RuntimeError, match=r"Use `_distributed_apply\(\)` instead of `apply_gradients\(\)`"):
        strategy.run(in_merge, args=(np.ones((3, 2), f32),))


def test_add_slot():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        w = xtpu.Variable(W0.copy(), name="w")
        opt = xtpu.optimizers.SGD(0.1)
    eager = opt.add_slot(w, "accumulator", initializer=0.5)
    assert eager.mirrored and eager.name == "w/accumulator" and opt.add_slot(w, "accumulator") is eager
    np.testing.assert_array_equal(eager.numpy(), np.full((3, 2), 0.5, f32))
    made = []

    def step():
        made.append(opt.add_slot(w, "other", initializer=lambda shape, dtype: np.ones(shape, dtype)))
        return opt.get_slot(w, "other").read_value()

    out = strategy.run(step)
    assert len(made) == 1 and made[0].mirrored  # traced again once the slot existed
    np.testing.assert_array_equal(out.values[1], np.ones((3, 2), f32))

    host = xtpu.Variable(W0.copy(), name="host")

    def bare_slot(x):
        xtpu.optimizers.SGD(0.1).add_slot(host, "s")
        return x

    with pytest.raises(NotImplementedError, match="SGD.add_slot inside xtpu.replicate"):
        xtpu.replicate(bare_slot, [[np.ones(2, f32)]])
