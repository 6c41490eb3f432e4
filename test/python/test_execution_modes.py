"""A few representative programs (collectives with groups, a GradientTape
step with its all-reduced gradient, outside compilation, a while loop with
collectives in it) run in every way a step's replicas can run
(docs/runtime.md "How the replicas run"): one thread for all replicas, a
thread per replica, threads each running a block of replicas, and xtpu's
own choice, whatever ``XTPU_INTER_OP_THREADS`` the suite runs under.
Every mode gives the threads mode's bits (one BLAS thread: OpenBLAS's
result depends on its thread count, and only that may differ) and numpy's
values."""

import numpy as np
import pytest

import xtpu
from xtpu.runtime import blas_budget

R = 4
#: The inter-op threads of each run: one thread, 2 threads (blocks of 2
#: replicas), a thread per replica, xtpu's choice; the threads' run last but
#: one, the reference.
MODES = (1, 2, R, 0)


@pytest.fixture(autouse=True)
def one_blas_thread():
    blas_budget.set_intra_op_parallelism_threads(1)
    yield
    blas_budget.set_intra_op_parallelism_threads(0)
    xtpu.config.threading.set_inter_op_parallelism_threads(0)


def run_in_every_mode(monkeypatch, compiled, inputs, kinds):
    """``compiled(inputs)`` in each mode of :data:`MODES`: per mode the
    flat list of per-replica numpy outputs; checks each mode ran as
    ``kinds`` says (mode -> kind) and that all give the threads' bits."""
    runs = {}
    for mode in MODES:
        if mode == 0:  # xtpu's own choice: 0 means "not set", so the environment's must go too
            monkeypatch.delenv("XTPU_INTER_OP_THREADS", raising=False)
        xtpu.config.threading.set_inter_op_parallelism_threads(mode)
        kind, why = compiled.executable.replica_execution
        if compiled.executable.world is not None:  # XTPU_BACKEND=mpi: a thread per replica whatever the setting
            assert kind == "threads" and why.startswith("the MPI backend runs a thread per replica"), why
        elif mode == 0:
            assert why == "xtpu's cost model" or why.startswith("the program cannot run sequentially"), why
        else:
            assert kind == kinds[mode], (mode, kind, why)
        outs = compiled(inputs)
        runs[mode] = [np.asarray(v) for per in outs for v in (per if isinstance(per, (list, tuple)) else [per])]
    for mode, got in runs.items():
        assert len(got) == len(runs[R])
        for a, b in zip(got, runs[R]):
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), mode
    return runs[R]


def test_collectives_with_groups_in_every_mode(monkeypatch):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(R)]

    def step(x):
        e = xtpu.math.exp(x)
        s = xtpu.cross_replica_sum(e, group_assignment=[[0, 3], [1, 2]])
        ring = xtpu.collective_permute(x * 2.0, [[r, (r + 1) % R] for r in range(R)])
        return s, ring, xtpu.cross_replica_sum(s * 0.5)

    c = xtpu.lower(step, [[x] for x in xs]).compile()
    out = run_in_every_mode(monkeypatch, c, [[x] for x in xs], {1: "sequential", 2: "blocks", R: "threads"})
    e = [np.exp(x) for x in xs]
    pair = {0: e[0] + e[3], 3: e[0] + e[3], 1: e[1] + e[2], 2: e[1] + e[2]}
    total = (pair[0] * 0.5 + pair[1] * 0.5) + (pair[1] * 0.5 + pair[0] * 0.5)
    for r in range(R):
        np.testing.assert_array_equal(out[3 * r], pair[r])
        np.testing.assert_allclose(out[3 * r + 2], total, rtol=1e-6)
        np.testing.assert_array_equal(out[3 * r + 1], xs[(r - 1) % R] * 2.0)


def test_a_gradient_tape_step_with_its_all_reduced_gradient_in_every_mode(monkeypatch):
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((8, 5)) for _ in range(R)]
    w = rng.standard_normal((5, 3))

    def step(x, w):
        with xtpu.GradientTape() as tape:
            tape.watch(w)
            h = xtpu.math.tanh(xtpu.linalg.matmul(x, w))
            loss = xtpu.math.reduce_sum(h * h)
        g = tape.gradient(loss, w)
        return loss, xtpu.cross_replica_sum(g) / float(R)

    inputs = [[x, w] for x in xs]
    c = xtpu.lower(step, inputs).compile()
    out = run_in_every_mode(monkeypatch, c, inputs, {1: "sequential", 2: "blocks", R: "threads"})
    grads = []
    for r, x in enumerate(xs):
        h = np.tanh(x @ w)
        np.testing.assert_allclose(out[2 * r], np.sum(h * h), rtol=1e-12)
        grads.append(x.T @ (2 * h * (1 - h * h)))
    for r in range(R):
        np.testing.assert_allclose(out[2 * r + 1], sum(grads) / R, rtol=1e-12, atol=1e-14)


def test_outside_compilation_in_every_mode(monkeypatch):
    xs = [[np.float32(r + 1)] for r in range(R)]

    def step(v):
        u = xtpu.outside_compilation(lambda a: a + 1.0, v * 3.0)
        return xtpu.cross_replica_sum(u * 2.0)

    c = xtpu.lower(step, xs).compile()
    out = run_in_every_mode(
        monkeypatch, c, xs, {1: "threads", 2: "threads", R: "threads"}
    )  # host code: a thread per replica
    if c.executable.world is None:
        assert "outside-compilation" in c.executable.replica_execution[1]
    want = sum((3.0 * (r + 1) + 1.0) * 2.0 for r in range(R))
    np.testing.assert_array_equal(out, [np.float32(want)] * R)


def test_a_while_loop_with_collectives_in_every_mode(monkeypatch):
    def step(v, n):
        def body(i, a):
            a = xtpu.cond(i < 1, lambda: xtpu.cross_replica_sum(a), lambda: a * 2.0)
            return i + 1, xtpu.cross_replica_sum(a * 0.5, group_assignment=[[0, 1], [2, 3]])

        return xtpu.while_loop(lambda i, a: i < n, body, (0, v))[1]

    xs = [[np.float32(r + 1), np.int32(3)] for r in range(R)]
    c = xtpu.lower(step, xs).compile()
    # A collective in a region: all replicas in one thread or a thread each, never blocks.
    out = run_in_every_mode(monkeypatch, c, xs, {1: "sequential", 2: "threads", R: "threads"})
    a = 10.0 * 0.5 * 2  # i = 0: the sum of all, then the halves summed in pairs
    for _ in range(2):  # i = 1, 2: doubled, then the halves summed in pairs
        a = a * 2.0 * 0.5 * 2
    np.testing.assert_array_equal(out, [np.float32(a)] * R)
