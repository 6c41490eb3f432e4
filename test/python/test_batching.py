"""Replica batching (runtime/batching.py): a thread's block of replicas run
as one program on stacked values, against the same program run replica by
replica (``XTPU_BATCH_REPLICAS=0``) bit for bit, numpy where it is simple,
and the fallback where the body has an op without a batching rule."""

import os
import sys
import weakref

import numpy as np
import pytest

import xtpu
from xtpu.passes.batch_replicas import Unbatchable, batch_body
from xtpu.runtime import batching, blas_budget
from xtpu.runtime.batching import BatchedPlan

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def settings(monkeypatch):
    monkeypatch.delenv("XTPU_INTER_OP_THREADS", raising=False)
    monkeypatch.delenv("XTPU_BATCH_REPLICAS", raising=False)
    blas_budget.set_intra_op_parallelism_threads(1)  # OpenBLAS's bits depend on its thread count
    yield
    blas_budget.set_intra_op_parallelism_threads(0)
    xtpu.config.threading.set_inter_op_parallelism_threads(0)


def run(fn, inputs, threads, batched=True):
    """``fn`` compiled for ``inputs`` and run on ``threads`` threads (blocks
    of replicas); returns (outputs, the plans the threads ran)."""
    os.environ["XTPU_BATCH_REPLICAS"] = "1" if batched else "0"
    try:
        c = xtpu.lower(fn, inputs).compile()
    finally:
        del os.environ["XTPU_BATCH_REPLICAS"]
    xtpu.config.threading.set_inter_op_parallelism_threads(threads)
    out = c(inputs)
    exe = c.executable
    plans = [p for _, p, _ in exe._grouped.get(exe.replica_threads, [])]
    return out, plans


def assert_bitwise(a, b):
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        ra = ra if isinstance(ra, (list, tuple)) else [ra]
        rb = rb if isinstance(rb, (list, tuple)) else [rb]
        for x, y in zip(ra, rb):
            x, y = np.asarray(x), np.asarray(y)
            assert x.dtype == y.dtype and x.shape == y.shape
            assert x.tobytes() == y.tobytes(), (x, y)


def check(fn, inputs, threads=(1, 2), batched_plans=True):
    """Batched against replica by replica, bit for bit, on each thread count."""
    for w in threads:
        want, plans0 = run(fn, inputs, w, batched=False)
        got, plans = run(fn, inputs, w)
        assert not any(isinstance(p, BatchedPlan) for p in plans0)
        sizes = [len(b) for b in _blocks(len(inputs), w)]
        assert [isinstance(p, BatchedPlan) for p in plans] == [batched_plans and s > 1 for s in sizes], plans
        assert_bitwise(got, want)
    return got


def _blocks(n, w):
    from xtpu.runtime import sequential

    return sequential.blocks(list(range(n)), w)


rng = np.random.default_rng(0)


def per_replica(R, *shapes, dtype=np.float32):
    return [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(R)]


def test_elementwise_broadcasts_reductions_and_layout_ops():
    def f(x, y):
        z = xtpu.nn.gelu(x * 2.0 + y) - xtpu.math.reduce_mean(x, axis=1, keepdims=True)
        t = xtpu.transpose(xtpu.reshape(z, [3, 2, 4]), [2, 0, 1])
        s = xtpu.concat([t[1:3], xtpu.pad(t[:1], [[0, 0], [1, 0], [0, 0]])[:, 1:]], axis=0)
        return xtpu.cast(s, xtpu.bfloat16), xtpu.math.reduce_max(z), xtpu.math.argmax(z, axis=1)

    inputs = per_replica(4, (6, 4), (6, 4))
    check(f, inputs)


@pytest.mark.parametrize("shared", ["none", "rhs", "lhs"])
def test_dot_general_with_an_operand_shared_by_every_replica_or_not(shared):
    # A shared operand (the same array for every replica: a mirrored weight)
    # runs unbatched, broadcast along the replica axis, a batching dimension.
    R = 4
    w = rng.standard_normal((8, 5)).astype(np.float32)
    a = rng.standard_normal((3, 8)).astype(np.float32)

    def f(x, m):
        h = xtpu.matmul(m, x) if shared == "lhs" else xtpu.matmul(x, m)
        q = xtpu.reshape(x, [2, 5, 4] if shared == "lhs" else [2, 3, 4])
        return h, xtpu.matmul(q, q, transpose_b=True)  # batch dimensions of its own

    if shared == "lhs":
        inputs = [[rng.standard_normal((8, 5)).astype(np.float32), a] for _ in range(R)]
    elif shared == "rhs":
        inputs = [[rng.standard_normal((3, 8)).astype(np.float32), w] for _ in range(R)]
    else:
        inputs = [[rng.standard_normal((3, 8)).astype(np.float32), w.copy()] for _ in range(R)]
    out = check(f, inputs)
    for r in range(R):
        x, m = inputs[r]
        np.testing.assert_allclose(out[r][0], m @ x if shared == "lhs" else x @ m, rtol=1e-5)
    _, plans = run(f, inputs, 1)
    assert plans[0].arg_batched == [True, shared == "none"]


@pytest.mark.parametrize("transpose_b", [False, True])
def test_a_shared_operand_with_batching_dimensions_of_its_own_is_not_copied(transpose_b, monkeypatch):
    """A mirrored weight with a batching dimension of its own (per-head
    weights): batched, the replica axis is one more batching dimension and
    the weight a stride-0 broadcast, which reaches the product as a view
    (numpy's stacking), not k copies; bit for bit the replica-by-replica
    products."""
    from xtpu.dialects import intra_op

    R = 4
    w = rng.standard_normal((2, 5, 8) if transpose_b else (2, 8, 5)).astype(np.float32)
    inputs = [[rng.standard_normal((2, 3, 8)).astype(np.float32), w] for _ in range(R)]

    def f(x, m):
        return xtpu.matmul(x, m, transpose_b=transpose_b)

    out = check(f, inputs)
    for r in range(R):
        np.testing.assert_allclose(out[r][0], inputs[r][0] @ (np.swapaxes(w, 1, 2) if transpose_b else w), rtol=1e-5)
    seen = []
    real = intra_op.matmul

    def spy(x, y, out=None):
        seen.append(y.strides[0])
        return real(x, y, out=out)

    monkeypatch.setattr(intra_op, "matmul", spy)
    _, plans = run(f, inputs, 1)
    assert plans[0].arg_batched == [True, False]
    assert seen and all(s == 0 for s in seen), seen  # the replica axis of the weight: a broadcast


def test_gather_and_its_gradient_scatter_with_a_shared_table_or_not():
    table = rng.standard_normal((10, 4)).astype(np.float32)

    def f(t, ids, g):
        with xtpu.GradientTape() as tape:
            tape.watch(t)
            y = xtpu.gather(t, ids)
            loss = xtpu.reduce_sum(y * g)
        return (
            y,
            tape.gradient(loss, t),
            xtpu.tensor_scatter_nd_add(t, xtpu.reshape(ids, [-1, 1]), xtpu.reshape(g, [6, 4])),
        )

    ids = [rng.integers(0, 10, (2, 3)).astype(np.int32) for _ in range(4)]
    gs = [rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(4)]
    shared = [[table, ids[r], gs[r]] for r in range(4)]
    own = [[table + r, ids[r], gs[r]] for r in range(4)]
    for inputs in (shared, own):
        out = check(f, inputs)
        for r, (t, i, g) in enumerate(inputs):
            np.testing.assert_array_equal(out[r][0], t[i])
            want = np.zeros_like(t)
            np.add.at(want, i, g)
            np.testing.assert_allclose(out[r][1], want, rtol=1e-6)


@pytest.mark.parametrize("R, threads", [(4, (1, 2)), (3, (1, 2)), (8, (2,))])
def test_collectives_meet_across_batched_blocks_and_a_block_of_one(R, threads):
    # R = 3 on 2 threads: a batched block of 2 and a block of 1 replica by
    # replica meet at each collective.
    from xtpu.replication.collectives import all_gather

    pairs = [[r, (r + 1) % R] for r in range(R)]

    def f(x):
        s = xtpu.cross_replica_sum(x * 2.0)
        g = all_gather(x, 0, R)  # [3 R, 4]
        t = xtpu.all_to_all(xtpu.reshape(g, [R, 3, 4]), 0, 0, R)
        return s, g, t, xtpu.collective_permute(x, pairs)

    inputs = per_replica(R, (3, 4))
    out = check(f, inputs, threads)
    xs = [np.float32(i[0]) for i in inputs]
    for r in range(R):
        np.testing.assert_allclose(out[r][0], sum(2.0 * x for x in xs), rtol=1e-6)
        np.testing.assert_array_equal(out[r][1], np.concatenate(xs))
        np.testing.assert_array_equal(out[r][3], xs[(r - 1) % R])


def test_the_transformer_step_is_batched_and_equal_bit_for_bit():
    sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
    import train_transformer as tt

    params = tt.init_params(20, 8, 16, 1, seed=0)
    names = sorted(params)
    R = 4
    tokens = rng.integers(0, 20, (R * 2, 8)).astype(np.int32)

    def step(tok, tgt, *values):
        p = dict(zip(names, values))
        with xtpu.GradientTape() as tape:
            for v in values:
                tape.watch(v)
            loss = tt.loss_fn(p, tok, tgt, 1, 2, global_batch_size=R * 2 * 8)
        grads = tape.gradient(loss, list(values))
        return [xtpu.cross_replica_sum(loss)] + [v - 0.1 * xtpu.cross_replica_sum(g) for v, g in zip(values, grads)]

    inputs = [
        [tokens[2 * r : 2 * r + 2], np.roll(tokens, 1)[2 * r : 2 * r + 2], *[params[k] for k in names]]
        for r in range(R)
    ]
    check(step, inputs)


def test_a_body_without_a_batching_rule_runs_replica_by_replica():
    def f(x):
        return xtpu.sort(x) + xtpu.cast(xtpu.replica_id(), xtpu.float32)

    inputs = per_replica(4, (5,))
    out = check(f, inputs, batched_plans=False)
    for r in range(4):
        np.testing.assert_array_equal(
            out[r][0] if isinstance(out[r], (list, tuple)) else out[r], np.sort(inputs[r][0]) + r
        )
    c = xtpu.lower(f, inputs).compile()
    with pytest.raises(Unbatchable, match="'hlo.sort' op .*test_batching.py.* has no batching rule"):
        batch_body(c.executable.replicate.body.block, 4)


def test_a_failing_batched_block_runs_again_a_thread_per_replica(monkeypatch):
    inputs = per_replica(4, (3,))
    want, _ = run(lambda x: x * 3.0, inputs, 1, batched=False)

    def fail(self, args, K):
        raise FloatingPointError("injected")

    monkeypatch.setattr(BatchedPlan, "run", fail)
    got, _ = run(lambda x: x * 3.0, inputs, 1)
    assert_bitwise(got, want)


def test_bad_setting():
    os.environ["XTPU_BATCH_REPLICAS"] = "yes"
    try:
        with pytest.raises(ValueError, match="XTPU_BATCH_REPLICAS must be 0 or 1"):
            batching.enabled()
    finally:
        del os.environ["XTPU_BATCH_REPLICAS"]


def test_a_scatter_with_a_leading_batching_dimension_is_each_batch_elements_scatter():
    # The kernel runs each batch element as one scatter (its fast path and
    # order of additions): bit for bit the unbatched scatters, stacked.
    from xtpu.dialects.hlo_indexing import ScatterOp

    ids = rng.integers(-1, 11, (3, 4, 16)).astype(np.int32)  # -1, 10: dropped
    upd = rng.standard_normal((3, 4, 16, 5)).astype(np.float32)
    x = rng.standard_normal((3, 10, 5)).astype(np.float32)
    one = dict(update_window_dims=[2], inserted_window_dims=[0], scatter_dims_to_operand_dims=[0], index_vector_dim=2)
    batched = dict(
        update_window_dims=[3],
        inserted_window_dims=[1],
        input_batching_dims=[0],
        scatter_indices_batching_dims=[0],
        scatter_dims_to_operand_dims=[1],
        index_vector_dim=3,
    )
    for computation in ("add", "max", "replace"):
        got = ScatterOp.kernel(computation=computation, **batched)(x, ids, upd)
        want = np.stack([ScatterOp.kernel(computation=computation, **one)(x[j], ids[j], upd[j]) for j in range(3)])
        assert got.tobytes() == want.tobytes()
    ref = x.astype(np.float64)
    for j in range(3):
        keep = (ids[j] >= 0) & (ids[j] < 10)
        np.add.at(ref[j], ids[j][keep], upd[j][keep])
    np.testing.assert_allclose(ScatterOp.kernel(computation="add", **batched)(x, ids, upd), ref, rtol=1e-5, atol=1e-5)


def test_blocks_of_large_ops_run_replica_by_replica():
    # Values of a megabyte a replica: op after op over the block would lose
    # in cache what batching saves in calls (batching.small_ops).
    w = (rng.standard_normal((512, 512)) * 0.05).astype(np.float32)
    inputs = [[rng.standard_normal((512, 512)).astype(np.float32), w] for _ in range(3)]

    def f(x, m):
        return xtpu.math.tanh(xtpu.matmul(x, m))

    c = xtpu.lower(f, inputs).compile()
    assert not batching.worth_batching(c.executable.replicate, [True, False])
    small = xtpu.lower(f, [[x[:8, :8], m[:8, :8]] for x, m in inputs]).compile()
    assert batching.worth_batching(small.executable.replicate, [True, False])
    check(f, inputs, threads=(1,), batched_plans=False)
    xtpu.config.threading.set_inter_op_parallelism_threads(1)
    c(inputs)
    assert c.executable._batchable is False  # asked once: later runs check no arguments


def test_a_program_of_collectives_alone_is_not_batched():
    # Nothing to save: stacking would only copy the operands.
    inputs = per_replica(4, (1000,))
    c = xtpu.lower(xtpu.cross_replica_sum, inputs).compile()
    assert not batching.worth_batching(c.executable.replicate, [True])
    out = check(xtpu.cross_replica_sum, inputs, batched_plans=False)
    np.testing.assert_allclose(np.reshape(out[0], -1), sum(i[0] for i in inputs), rtol=1e-6)


def test_unbatched_outputs_each_replica_owns_reuse_dropped_arrays():
    # A result every replica of a block shares (an update after an all-reduce)
    # is copied for each other replica into arrays the caller dropped (no
    # allocation); a kept output is never written again.
    R = 4
    w = rng.standard_normal((16, 16)).astype(np.float32)
    xs = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(R)]

    def f(x, w):
        g = xtpu.cross_replica_sum(xtpu.matmul(x, x, transpose_a=True))  # x^T x: a stack of transposed views
        return w - 0.1 * g

    inputs = [[x, w] for x in xs]
    want, _ = run(f, inputs, 1, batched=False)
    c = xtpu.lower(f, inputs).compile()
    xtpu.config.threading.set_inter_op_parallelism_threads(1)
    first = c(inputs)
    assert isinstance(c.executable._grouped[c.executable.replica_threads][0][1], BatchedPlan)
    assert_bitwise(first, want)
    kept = [[np.array(o, copy=True) for o in r] for r in first]
    refs = [weakref.ref(first[j][0]) for j in range(1, R)]
    second = c(inputs)  # the first outputs are still held: other arrays
    assert not any(second[j][0] is r() for j in range(1, R) for r in refs)
    assert_bitwise(first, kept)
    refs += [weakref.ref(second[j][0]) for j in range(1, R)]
    del first, second
    third = c(inputs)
    pooled = [r() for r in refs]
    assert all(any(third[j][0] is p for p in pooled) for j in range(1, R))  # dropped arrays reused
    assert_bitwise(third, want)
    assert all(third[j][0].flags.writeable for j in range(R))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_an_all_reduce_of_one_block_is_one_accumulate_with_the_in_order_bits(dtype, monkeypatch):
    # One block holding every replica: an all-reduce over them all of a small
    # operand (stacked, or one value for every replica) is one accumulate
    # over the replica axis, the left-to-right order of the replica-by-replica
    # reduction (int32 wraps; a NaN, -0.0 and rounding kept).
    from xtpu.runtime import communicator

    R = 5
    big = np.iinfo(np.int32).max // 3 if dtype == np.int32 else np.float32(1e8)
    rows = [np.array([big, 1, -1, 3], dtype) * (r + 1) for r in range(R)]
    if dtype == np.float32:
        rows[2][1], rows[3][2] = np.nan, -0.0
    inputs = [[row, np.array(7, dtype)] for row in rows]

    def f(x, s):
        ctx = xtpu.get_replica_context()
        a = ctx.all_reduce(xtpu.ReduceOp.SUM, x)
        b = xtpu.cross_replica_sum(s)  # one value for every replica
        c = ctx.all_reduce(xtpu.ReduceOp.SUM, x * s)
        return a, b, c, xtpu.cross_replica_sum(a)  # a: the same for every replica, no longer stacked

    want, _ = run(f, inputs, R, batched=False)  # a thread per replica
    calls = []
    original = communicator.reduce_in_order
    monkeypatch.setattr(communicator, "reduce_in_order", lambda *a: calls.append(1) or original(*a))
    got, plans = run(f, inputs, 1)
    assert isinstance(plans[0], BatchedPlan) and not calls
    assert_bitwise(got, want)
    flags = [[np.asarray(o).flags.writeable for o in r] for r in want]
    assert [[np.asarray(o).flags.writeable for o in r] for r in got] == flags
