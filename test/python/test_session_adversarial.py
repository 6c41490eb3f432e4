"""Adversarial tests of the call path, plan and runtime changes of one
session: plain inputs (compiler/replication.py ``_plain_inputs``), constant
folding in plans (runtime/plan.py ``Plan._fold``), reductions split over
threads (runtime/communicator.py ``reduce_in_order``), the counted BLAS
limit (runtime/blas_budget.py ``_Limit``), lazily built per-participant
kernels (runtime/executor.py ``_ParticipantKernels``) and the per-process
cache of parsed pipelines (compiler/pipeline.py ``parse_pipeline``).

Every result is checked against an independent reference: numpy, the
general call path (``Compiled._plain = None``), the plan without folding
(``FOLD_BYTES = -1``), the one-thread left fold, the threads mode.
"""

import threading
import time

import numpy as np
import pytest

import xtpu
from xtpu.passes import DEFAULT_PIPELINE
from xtpu.replication import program as replication
from xtpu.runtime import blas_budget
from xtpu.runtime import communicator as comm
from xtpu.runtime import plan as plan_mod
from xtpu.runtime.errors import XtpuRuntimeError


@pytest.fixture
def inter_op():
    """Sets the inter-op threads (replica threads) for a test, reset after."""
    yield xtpu.config.threading.set_inter_op_parallelism_threads
    xtpu.config.threading.set_inter_op_parallelism_threads(0)


@pytest.fixture
def intra_op():
    yield xtpu.config.threading.set_intra_op_parallelism_threads
    xtpu.config.threading.set_intra_op_parallelism_threads(0)


def on_threads(fn, n, timeout=60.0):
    """``fn(i)`` for ``i < n`` on ``n`` threads started together; the errors
    they raised.  Fails when a thread has not returned after ``timeout``
    seconds (a deadlock)."""
    errors, start = [], threading.Barrier(n)

    def run(i):
        try:
            start.wait(10)
            fn(i)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "deadlock: a thread did not return"
    return errors


def general(c, inputs):
    """``c(inputs)`` through the general path (pytree walk, conversions)."""
    saved, c._plain = c._plain, None
    try:
        return c(inputs)
    finally:
        c._plain = saved


def aliases(a, arrays):
    return any(np.shares_memory(a, b) for b in arrays if isinstance(a, np.ndarray) and isinstance(b, np.ndarray))


# -- plain inputs ------------------------------------------------------------------


def odd_layouts(base):
    """Arrays equal to ``base`` (a float32 4x6 array) in unusual layouts."""
    big = np.zeros((8, 12), np.float32)
    big[::2, ::2] = base
    ro = base.copy()
    ro.flags.writeable = False
    return {
        "strided view": big[::2, ::2],
        "fortran": np.asfortranarray(base),
        "transposed view": np.ascontiguousarray(base.T).T,
        "read-only": ro,
        "negative strides": base[::-1, ::-1].copy()[::-1, ::-1],
    }


@pytest.mark.parametrize("layout", ["strided view", "fortran", "transposed view", "read-only", "negative strides"])
def test_plain_inputs_in_any_layout_give_numpys_values_and_stay_untouched(layout):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    bases = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(3)]
    xs = [odd_layouts(b)[layout] for b in bases]
    before = [x.copy() for x in xs]
    inputs = [[x, w] for x in xs]

    def step(x, w):
        return x @ w, xtpu.cross_replica_sum(x * 2.0), x  # the last one: the input itself

    c = xtpu.lower(step, [[b, w] for b in bases]).compile()
    assert replication._plain_inputs(inputs, c._plain) is inputs
    fast = c(inputs)
    slow = general(c, inputs)
    total = (before[0] * np.float32(2) + before[1] * np.float32(2)) + before[2] * np.float32(2)
    for r in range(3):
        np.testing.assert_allclose(fast[r][0], before[r] @ w, rtol=1e-5, atol=1e-6)
        assert fast[r][1].tobytes() == total.tobytes()
        np.testing.assert_array_equal(fast[r][2], before[r])
        for a, b in zip(fast[r], slow[r]):
            assert a.tobytes() == b.tobytes()
        for out in fast[r] + slow[r]:
            assert not aliases(out, xs), "an output shares memory with a caller's input"
        np.testing.assert_array_equal(xs[r], before[r])  # the inputs are not written


@pytest.mark.parametrize("path", ["plain", "general"])
def test_a_zero_d_input_returned_by_the_program_is_not_the_callers_array(path):
    # The caller's 0-d arrays (and a 0-d view of a larger one) are mutable:
    # an output that is one of them would change when the caller writes it.
    big = np.arange(4, dtype=np.float32)
    inputs = [[np.array(1.5, np.float32)], [big[..., 2]]]
    assert inputs[1][0].base is big
    c = xtpu.lower(lambda x: (x, x * 2.0), [[np.float32(0)], [np.float32(0)]]).compile()
    assert replication._plain_inputs(inputs, c._plain) is inputs
    out = c(inputs) if path == "plain" else general(c, inputs)
    for r, want in enumerate([1.5, 2.0]):
        assert float(out[r][0]) == want and float(out[r][1]) == 2 * want
        assert not aliases(out[r][0], [inputs[r][0], big])
    inputs[0][0][()] = 7.0  # the caller reuses its buffers for the next step
    big[2] = 9.0
    assert [float(out[r][0]) for r in range(2)] == [1.5, 2.0]


def test_the_same_array_for_every_replica_and_caller_mutation_between_calls():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    inputs = [[x, np.array(r, np.int64)] for r in range(4)]  # one array object shared by every replica

    def step(x, k):
        return x, xtpu.cross_replica_sum(x * k), x + k

    c = xtpu.lower(step, inputs).compile()
    assert replication._plain_inputs(inputs, c._plain) is inputs
    first = c(inputs)
    kept = [[o.copy() for o in rep] for rep in first]
    outs = [first[r][0] for r in range(4)]
    assert all(not np.shares_memory(o, x) for o in outs)
    x += 100  # in place: the next call must see it, the last call's outputs must not
    second = c(inputs)
    for r in range(4):
        np.testing.assert_array_equal(first[r][0], kept[r][0])
        np.testing.assert_array_equal(first[r][2], kept[r][2])
        np.testing.assert_array_equal(second[r][0], x)
        np.testing.assert_array_equal(second[r][1], x * 6)  # 0 + 1 + 2 + 3
        np.testing.assert_array_equal(second[r][2], x + r)
        assert second[r][1].dtype == np.int64


@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.int64, np.float64])
def test_plain_inputs_of_every_dtype_match_the_general_path_and_numpy(dtype):
    rng = np.random.default_rng(3)
    if dtype is np.bool_:
        xs = [rng.integers(0, 2, (5,)).astype(bool) for _ in range(3)]

        def step(x):
            return xtpu.logical_and(x, xtpu.logical_not(x)), xtpu.logical_or(x, x), x

        want = [(np.zeros(5, bool), x, x) for x in xs]
    else:
        xs = [rng.integers(-50, 50, (5,)).astype(dtype) for _ in range(3)]

        def step(x):
            return xtpu.cross_replica_sum(x * x), x - 1, x

        total = xs[0] * xs[0] + xs[1] * xs[1] + xs[2] * xs[2]
        want = [(total, x - 1, x) for x in xs]
    inputs = [[x] for x in xs]
    c = xtpu.lower(step, inputs).compile()
    assert replication._plain_inputs(inputs, c._plain) is inputs
    fast, slow = c(inputs), general(c, inputs)
    for r in range(3):
        for a, b, w in zip(fast[r], slow[r], want[r]):
            assert a.dtype == b.dtype == w.dtype
            np.testing.assert_array_equal(a, w)
            np.testing.assert_array_equal(b, w)
            assert not aliases(a, xs)


def test_inputs_of_another_byte_order_or_a_nearby_dtype_are_not_taken_as_plain():
    x = np.arange(6, dtype=np.float32)
    c = xtpu.lower(lambda x: x * 2.0, [[x]]).compile()
    for other in (x.astype(">f4"), x.astype(np.float64), x.astype(np.int32), x.reshape(2, 3), x[:, None]):
        assert replication._plain_inputs([[other]], c._plain) is None
    assert replication._plain_inputs([[x.tolist()]], c._plain) is None
    assert replication._plain_inputs([x], c._plain) is None  # one input given bare: the general path's job
    np.testing.assert_array_equal(c([x])[0][0], x * 2)


# -- constant folding in plans -----------------------------------------------------


def no_fold(monkeypatch):
    """Plans built from now on fold nothing (every result is over the cap)."""
    monkeypatch.setattr(plan_mod, "FOLD_BYTES", -1)


def folded_ops(plan):
    return [plan.ops[i].name for i in plan._constants if not isinstance(plan.ops[i], plan_mod.CONSTANT_OPS)]


def constant_heavy(x, s):
    """Arithmetic of constants StableHLO leaves to the implementation's
    numpy meaning: integer division by zero, 0/0, x/0, log of negatives,
    iota, convert, reshape, transpose, dot, compare and select."""
    ci = xtpu.constant(np.array([[7, -7, 0], [1, 2, -3]], np.int32))
    zero = xtpu.zeros_like(ci)
    cf = xtpu.cast(ci, xtpu.float32)
    fzero = xtpu.cast(zero, xtpu.float32)
    r = xtpu.reshape(xtpu.range(6), (2, 3))
    rf = xtpu.cast(r, xtpu.float32)
    return (
        x + ci // zero,  # integer division by zero
        xtpu.math.floormod(ci, zero + 2),
        cf / fzero,  # inf, -inf and NaN
        xtpu.math.log(cf) + xtpu.math.sqrt(cf),
        r * x,
        xtpu.matmul(rf, xtpu.transpose(rf)) * s,
        xtpu.where(cf > 0.0, cf, rf),
        xtpu.cast(cf * 1e30, xtpu.float32) * 1e10,  # overflow to inf
    )


def constant_inputs():
    return [[np.arange(6, dtype=np.int32).reshape(2, 3) - r, np.float32(r + 0.5)] for r in range(3)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("threads, mode", [(1, "sequential"), (2, "blocks"), (3, "threads")])
def test_folded_constants_give_the_unfolded_plans_bits(monkeypatch, inter_op, threads, mode):
    inter_op(threads)
    inputs = constant_inputs()
    folded = xtpu.lower(constant_heavy, inputs).compile()
    assert folded.executable.replica_execution[0] == mode
    names = folded_ops(folded.executable.device_plan)
    assert {
        "hlo.divide",
        "hlo.broadcast_in_dim",
        "hlo.convert",
        "hlo.reshape",
        "hlo.dot_general",
        "hlo.log",
        "hlo.select",
    } <= set(names), names
    no_fold(monkeypatch)
    plain = xtpu.lower(constant_heavy, inputs).compile()
    assert folded_ops(plain.executable.device_plan) == []
    a, b = folded(inputs), plain(inputs)
    for r in range(3):
        for x, y in zip(a[r], b[r]):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert x.tobytes() == y.tobytes()
    # And numpy's meaning, spelled out.
    ci = np.array([[7, -7, 0], [1, 2, -3]], np.int32)
    cf = ci.astype(np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(a[1][2], cf / np.float32(0))
        np.testing.assert_array_equal(a[0][3], np.log(cf) + np.sqrt(cf))
    np.testing.assert_array_equal(a[2][4], np.arange(6).reshape(2, 3) * inputs[2][0])
    rf = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(a[2][5], (rf @ rf.T) * np.float32(2.5), rtol=1e-6)
    np.testing.assert_array_equal(a[0][6], np.where(cf > 0, cf, rf))
    assert np.isinf(a[0][7]).sum() == 5  # every nonzero entry overflows


def test_a_fold_that_raises_leaves_the_op_to_the_run_with_its_replica():
    def f(x):
        e = xtpu.constant(np.array([-1, 2], np.int32))  # numpy: no negative integer powers
        return x + xtpu.math.pow(e, e)

    inputs = [[np.ones(2, np.int32)] for _ in range(2)]
    c = xtpu.lower(f, inputs).compile()
    assert "hlo.power" not in folded_ops(c.executable.device_plan)
    with pytest.raises(XtpuRuntimeError, match="hlo.power") as e:
        c(inputs)
    assert e.value.replica is not None and "negative integer powers" in str(e.value)


def fold_writes(x):
    ones = xtpu.ones_like(x)
    return ones * 3.0, ones * x, xtpu.cross_replica_sum(ones), xtpu.zeros_like(x) + 1.0


def test_folded_outputs_agree_on_both_paths_and_survive_a_caller_writing(monkeypatch):
    inputs = [[np.full((2, 3), r, np.float32)] for r in range(2)]
    c = xtpu.lower(fold_writes, inputs).compile()
    assert folded_ops(c.executable.device_plan)
    fast, slow = c(inputs), general(c, inputs)
    no_fold(monkeypatch)
    ref = xtpu.lower(fold_writes, inputs).compile()(inputs)
    want = [
        [
            np.full((2, 3), 3, np.float32),
            inputs[r][0].copy(),
            np.full((2, 3), 2, np.float32),
            np.ones((2, 3), np.float32),
        ]
        for r in range(2)
    ]
    for r in range(2):
        for a, b, u, w in zip(fast[r], slow[r], ref[r], want[r]):
            np.testing.assert_array_equal(a, w)
            np.testing.assert_array_equal(b, w)
            np.testing.assert_array_equal(u, w)
            assert a.flags.writeable == b.flags.writeable
    # A caller writes into every output it may write into; no later call,
    # and no other replica, sees it.
    for r in range(2):
        for a in fast[r]:
            if a.flags.writeable:
                a[...] = -1
            else:
                with pytest.raises(ValueError, match="read-only"):
                    a[...] = -1
    again = c(inputs)
    for r in range(2):
        for a, w in zip(again[r], want[r]):
            np.testing.assert_array_equal(a, w)


def loop_and_cond(x):
    def body(i, acc):
        step = xtpu.constant(np.float32(0.5)) * xtpu.constant(np.float32(4.0))  # folded in the body's plan
        return i + 1, acc + xtpu.ones_like(acc) * step

    _, acc = xtpu.while_loop(lambda i, acc: i < 3, body, (xtpu.constant(np.int32(0)), x))
    return xtpu.cond(
        xtpu.reduce_sum(x) > 0.0,
        lambda: acc * (xtpu.constant(np.float32(2.0)) + xtpu.constant(np.float32(1.0))),
        lambda: acc - xtpu.ones_like(acc) * 10.0,
    )


def region_folds(c):
    plan = c.executable.device_plan
    names = []
    for subs, _ in plan.regions.values():
        for sub in subs:
            names += folded_ops(sub)
    return names


@pytest.mark.parametrize("threads", [1, 2])
def test_folds_inside_while_and_if_regions(monkeypatch, inter_op, threads):
    inter_op(threads)
    inputs = [[np.full(3, v, np.float32)] for v in (1.0, -1.0)]
    c = xtpu.lower(loop_and_cond, inputs).compile()
    assert region_folds(c), "no constant folded inside a region"
    out = c(inputs)
    np.testing.assert_array_equal(out[0][0], (1.0 + 3 * 2.0) * 3.0 * np.ones(3, np.float32))
    np.testing.assert_array_equal(out[1][0], (-1.0 + 3 * 2.0) - 10.0 * np.ones(3, np.float32))
    no_fold(monkeypatch)
    ref = xtpu.lower(loop_and_cond, inputs).compile()
    assert region_folds(ref) == []
    for r in range(2):
        assert out[r][0].tobytes() == ref(inputs)[r][0].tobytes()


def host_folds(x):
    def on_host(v):
        k = xtpu.ones_like(v) * (xtpu.constant(np.float32(1.5)) + 1.5)
        return v * k

    return xtpu.outside_compilation(on_host, x * 2.0) + 1.0


def test_folds_in_a_host_plan(monkeypatch):
    inputs = [[np.arange(4, dtype=np.float32) + r] for r in range(2)]
    # Without tpu-fold-host-constants, which folds these ops in the IR
    # already (issue 31): the plan's own folding is what is tested here.
    pipeline = [p for p in DEFAULT_PIPELINE if p != "tpu-fold-host-constants"]
    c = xtpu.lower(host_folds, inputs).compile(pipeline)
    host_plans = [w.plan for w in c.executable.host_workers if w.plan is not None]
    assert any(folded_ops(p) for p in host_plans), [p.source for p in host_plans]
    out = c(inputs)
    for r in range(2):
        np.testing.assert_array_equal(out[r][0], inputs[r][0] * 2 * np.float32(3.0) + 1)
    folded_in_the_ir = xtpu.lower(host_folds, inputs).compile()(inputs)
    no_fold(monkeypatch)
    ref = xtpu.lower(host_folds, inputs).compile(pipeline)(inputs)
    for r in range(2):
        assert out[r][0].tobytes() == ref[r][0].tobytes() == folded_in_the_ir[r][0].tobytes()


def test_the_fold_cap_is_inclusive_and_counts_the_result(monkeypatch):
    def f(x):
        return x + xtpu.constant(np.arange(8, dtype=np.float32)) * 2.0  # an 8 x 4 byte result

    inputs = [[np.ones(8, np.float32)]]
    for cap, folds in ((32, True), (31, False)):
        monkeypatch.setattr(plan_mod, "FOLD_BYTES", cap)
        c = xtpu.lower(f, inputs).compile()
        assert ("hlo.multiply" in folded_ops(c.executable.device_plan)) is folds
        np.testing.assert_array_equal(c(inputs)[0][0], 1 + np.arange(8, dtype=np.float32) * 2)


def test_a_profiled_run_of_a_folded_plan(tmp_path):
    # The profiler wraps each op's kernel: a folded op's entry is a value.
    ins = [[np.full((2, 3), r, np.float32)] for r in range(2)]
    c = xtpu.lower(fold_writes, ins).compile()
    want = c(ins)
    with xtpu.profiler.trace(str(tmp_path)):
        got = c(ins)
    for r in range(2):
        for a, b in zip(got[r], want[r]):
            assert a.tobytes() == b.tobytes()


# -- reductions split over threads -------------------------------------------------


def left_fold(values, reduction):
    fn = comm.REDUCTIONS[reduction]
    out = np.array(values[0], copy=True)
    for v in values[1:]:
        out = fn(out, v)
    return out


@pytest.fixture
def tiny_split(monkeypatch):
    """Every reduction of two or more operands splits, down to one element
    a thread, over ``cores()`` threads (set by the returned function),
    whatever ``XTPU_INTRA_OP_THREADS`` says."""
    monkeypatch.delenv("XTPU_INTRA_OP_THREADS", raising=False)
    monkeypatch.setattr(comm, "PARALLEL_REDUCE_OPS", 1)
    monkeypatch.setattr(comm, "PARALLEL_REDUCE_MIN_CHUNK", 1)
    return lambda k: monkeypatch.setattr(blas_budget, "cores", lambda: k)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_, np.complex64])
def test_split_reductions_at_every_chunk_boundary_are_the_left_fold(tiny_split, dtype):
    rng = np.random.default_rng(7)
    for cores in (2, 3, 7):
        tiny_split(cores)
        for shape in [(1,), (2,), (5,), (13,), (3, 4), (2, 1, 7), (0,), (0, 3)]:
            for R in (1, 2, 3, 5):
                if dtype is np.bool_:
                    values = [rng.integers(0, 2, shape).astype(bool) for _ in range(R)]
                elif np.dtype(dtype).kind == "i":
                    values = [rng.integers(-(2**20), 2**20, shape).astype(dtype) for _ in range(R)]
                else:
                    values = [(rng.standard_normal(shape) * 300).astype(dtype) for _ in range(R)]
                if np.dtype(dtype).kind == "f" and values[0].size > 2:
                    values[0].reshape(-1)[1] = np.nan
                    values[-1].reshape(-1)[2] = np.inf
                for reduction in comm.REDUCTIONS:
                    if dtype is np.complex64 and reduction in ("max", "min"):
                        continue
                    if reduction in ("and", "or") and np.dtype(dtype).kind not in "bi":
                        continue  # StableHLO's and/or take integers and booleans only
                    expect = comm._reduce_chunks(values)
                    assert expect == (1 if R < 2 or values[0].size < 1 else min(cores, values[0].size))
                    got = comm.reduce_in_order(values, reduction)
                    want = left_fold(values, reduction)
                    assert got.dtype == want.dtype and got.shape == want.shape
                    assert got.tobytes() == want.tobytes(), (cores, shape, R, reduction)


def test_operands_of_one_shape_with_different_strides(tiny_split):
    tiny_split(3)
    rng = np.random.default_rng(8)
    buf = rng.standard_normal((4, 10)).astype(np.float32)
    row = buf[2:3]  # C-contiguous, shape (1, 10), a row stride of 40 bytes
    fresh = rng.standard_normal((1, 10)).astype(np.float32)
    tall = np.ascontiguousarray(rng.standard_normal((10, 1)).astype(np.float32)).T  # (1, 10), strides (4, 4)
    strided = buf[:1, ::1].copy()[:, ::-1][:, ::-1]  # a view of a view, contiguous
    step = rng.standard_normal((1, 20)).astype(np.float32)[:, ::2]  # not contiguous
    for values, split in (([row, fresh, tall, strided], True), ([fresh, step, row], False), ([step, fresh], False)):
        assert (comm._reduce_chunks(values) > 1) is split
        for reduction in ("add", "mul", "max", "min"):  # the float reductions (and/or take integers)
            assert comm.reduce_in_order(values, reduction).tobytes() == left_fold(values, reduction).tobytes()
    np.testing.assert_array_equal(buf[2:3], row)  # the operands are read only


def test_a_split_reduction_uses_no_more_threads_than_the_intra_op_budget(monkeypatch, intra_op):
    # TF's intra_op_parallelism_threads bounds the threads one op uses; a
    # program that set it to 1 (one core for xtpu) gets no split reduction.
    monkeypatch.delenv("XTPU_INTRA_OP_THREADS", raising=False)
    monkeypatch.setattr(blas_budget, "cores", lambda: 8)
    values = [np.ones(4 * comm.PARALLEL_REDUCE_MIN_CHUNK, np.float32)] * 3
    values = [v.copy() for v in values]
    assert comm._reduce_chunks(values) == 4
    intra_op(1)
    assert comm._reduce_chunks(values) == 1
    intra_op(2)
    assert comm._reduce_chunks(values) == 2
    assert comm.reduce_in_order(values, "add").tobytes() == left_fold(values, "add").tobytes()


@pytest.fixture
def small_split(monkeypatch):
    """Reductions of 4096 elements and more split over 3 threads (so the
    tests below split with small operands), whatever
    ``XTPU_INTRA_OP_THREADS`` says."""
    monkeypatch.delenv("XTPU_INTRA_OP_THREADS", raising=False)
    monkeypatch.setattr(comm, "PARALLEL_REDUCE_OPS", 4096)
    monkeypatch.setattr(comm, "PARALLEL_REDUCE_MIN_CHUNK", 1024)
    monkeypatch.setattr(blas_budget, "cores", lambda: 3)
    seen = []
    real = comm._reduce_chunks
    monkeypatch.setattr(comm, "_reduce_chunks", lambda values: seen.append(real(values)) or seen[-1])
    return seen


def test_two_executables_reducing_from_two_python_threads_at_once(small_split, inter_op):
    inter_op(4)  # a thread per replica: the last to arrive reduces, in its own thread
    rng = np.random.default_rng(9)
    n = 3 * 1024 + 7
    progs = []
    for k in range(2):
        xs = [[rng.standard_normal(n).astype(np.float32) * (k + 1)] for _ in range(4)]
        c = xtpu.lower(lambda x: (xtpu.cross_replica_sum(x), xtpu.cross_replica_sum(x * x)), xs).compile()
        progs.append((c, xs))
    results = {}

    def loop(k):
        c, xs = progs[k]
        results[k] = [c(xs) for _ in range(5)]

    errors = on_threads(loop, 2)
    assert not errors, errors
    assert 3 in small_split
    for k, (_c, xs) in enumerate(progs):
        want = left_fold([x for (x,) in xs], "add")
        want_sq = left_fold([x * x for (x,) in xs], "add")
        for outs in results[k]:
            for r in range(4):
                assert outs[r][0].tobytes() == want.tobytes()
                assert outs[r][1].tobytes() == want_sq.tobytes()


@pytest.mark.parametrize("threads", [1, 4])
def test_a_failing_replica_while_another_group_reduces(small_split, inter_op, monkeypatch, threads):
    # Replicas 0 and 1 all-reduce a large operand (split over threads) while
    # replica 2 fails before its group's all-reduce: the error names it,
    # nothing hangs, and the next call gives the left fold again.  With a
    # thread per replica, replica 2 fails while the split reduction runs
    # (it waits for the reduction to start, the reduction for the abort).
    from xtpu.dialects import hlo
    from xtpu.runtime.workers import will_block

    inter_op(threads)
    reducing, seen_abort, armed = threading.Event(), [], [False]
    real_power = hlo.PowerOp.kernel.__func__

    def power(cls, **params):
        k = real_power(cls, **params)

        def run(x, y):
            if armed[0] and threads > 1 and np.any(np.asarray(y) < 0):
                will_block()  # waits for another task
                reducing.wait(5)
            return k(x, y)

        return run

    monkeypatch.setattr(hlo.PowerOp, "kernel", classmethod(power))
    n = 4 * 1024 + 1

    def step(x, e):
        bad = xtpu.math.pow(e, e)  # numpy refuses negative integer powers
        y = xtpu.cross_replica_sum(x * xtpu.cast(bad, xtpu.float32), group_assignment=[[0, 1], [2, 3]])
        return xtpu.cross_replica_sum(y)

    rng = np.random.default_rng(10)
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    good = [[x, np.int32(1)] for x in xs]
    c = xtpu.lower(step, good).compile()
    bad = [[x, np.int32(-1 if r == 2 else 1)] for r, x in enumerate(xs)]
    abort, real_fold = c.executable.abort, comm._fold

    def slow_fold(fn, values, out):
        reducing.set()
        for _ in range(500):
            if abort.is_set:
                seen_abort.append(True)
                break
            threading.Event().wait(0.01)
        return real_fold(fn, values, out)

    monkeypatch.setattr(comm, "_fold", slow_fold)
    armed[0] = True
    with pytest.raises(XtpuRuntimeError, match="negative integer powers") as e:
        c(bad)
    armed[0] = False
    monkeypatch.setattr(comm, "_fold", real_fold)
    assert e.value.replica == 2 and e.value.op == "hlo.power"
    if threads > 1:
        assert seen_abort, "the abort came before the reduction"
    for _ in range(2):
        out = c(good)
        pair = [left_fold(xs[:2], "add"), left_fold(xs[2:], "add")]
        want = left_fold([pair[0], pair[0], pair[1], pair[1]], "add")  # y of replicas 0, 1, 2, 3
        for r in range(4):
            assert out[r][0].tobytes() == want.tobytes()
    assert 3 in small_split


# -- the counted BLAS limit --------------------------------------------------------


def blas_counts():
    """Threads of numpy's BLAS, the one xtpu's kernels call (scipy, loaded
    by other tests after blas_budget found its libraries, brings a BLAS of
    its own that xtpu need not limit; test_blas_budget.py does the same)."""
    from threadpoolctl import threadpool_info

    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas" and "numpy" in i["filepath"]]


@pytest.mark.parametrize("found", [1, 3])
def test_blas_limits_nested_from_many_threads_restore_the_counts_found(intra_op, found):
    from threadpoolctl import threadpool_limits

    if not blas_counts():
        pytest.skip("numpy has no BLAS that threadpoolctl controls")
    # A run an earlier test abandoned (a worker blocked in host code past the
    # abort's grace) holds the limit until it returns: let it end first.
    deadline = time.monotonic() + 30
    while blas_budget._users and time.monotonic() < deadline:
        time.sleep(0.05)
    assert blas_budget._users == 0
    intra_op(6)
    limits = [blas_budget.limit(w) for w in (1, 2, 3, 6)]  # 6, 3, 2 and 1 threads
    assert sorted(lim.n for lim in limits) == [1, 2, 3, 6]
    with threadpool_limits(limits=found, user_api="blas"):
        before = blas_counts()
        seen = []

        def worker(i):
            rng = np.random.default_rng(i)
            for _ in range(40):
                outer, inner = (limits[j] for j in rng.integers(0, 4, 2))
                with outer:
                    with inner:
                        seen.append(tuple(blas_counts()))
                    if rng.integers(0, 4) == 0:
                        try:
                            with inner:
                                raise KeyError("inside")
                        except KeyError:
                            pass
                    seen.append(tuple(blas_counts()))

        errors = on_threads(worker, 6)
        assert not errors, errors
        # While any run is inside, BLAS is at some run's limit, never at a
        # count none of them asked for; once all are out, at what was found.
        assert seen and all(set(s) <= {1, 2, 3, 6} for s in seen)
        assert blas_counts() == before == [found] * len(before)
        assert blas_budget._users == 0 and blas_budget._restore == []

        # The limits take effect from each of several threads in turn
        # (threadpoolctl 3.6+ ignored every thread but one: BLAS stayed at
        # `found`).  One at a time: while the 6 workers above overlap, the
        # first one in holds its limit, which may be `found` throughout.
        def alone(i):
            lim = limits[i % 4]
            with lim:
                inside.append((lim.n, tuple(blas_counts())))

        inside = []
        for i in range(4):
            t = threading.Thread(target=alone, args=(i,))
            t.start()
            t.join()
        assert inside == [(n, (n,) * len(before)) for n in (lim.n for lim in limits)], inside
        assert blas_counts() == before and blas_budget._users == 0 and blas_budget._restore == []


# -- per-participant kernels built lazily -----------------------------------------


def test_participant_kernels_built_at_once_by_every_replica_thread(inter_op):
    R = 6
    inputs = [[np.full((3,), r, np.float32), np.float32(r + 1)] for r in range(R)]

    def step(x, s):
        y = xtpu.math.tanh(x * s) + xtpu.cast(xtpu.replica_id(), xtpu.float32)
        return xtpu.cross_replica_sum(y), y

    inter_op(1)
    c = xtpu.lower(step, inputs).compile()
    kernels = c.executable.device_kernels
    assert [k is not None for k in kernels._kernels] == [True] + [False] * (R - 1)
    sequential = c(inputs)
    built, real = [], kernels._build

    def slow_build(p):  # widen the window in which replica threads race
        built.append(p)
        threading.Event().wait(0.005)
        return real(p)

    kernels._build = slow_build
    inter_op(R)
    assert c.executable.replica_execution[0] == "threads"
    threads = c(inputs)
    again = c(inputs)
    assert sorted(built) == list(range(1, R))  # each once, participant 0 never again
    ys = [np.tanh(inputs[r][0] * inputs[r][1]) + np.float32(r) for r in range(R)]
    for r in range(R):
        np.testing.assert_allclose(threads[r][1], ys[r], rtol=1e-6)
        assert threads[r][0].tobytes() == sequential[r][0].tobytes() == again[r][0].tobytes()
        np.testing.assert_allclose(threads[r][0], left_fold(ys, "add"), rtol=1e-6)


def test_participant_kernels_from_many_threads_at_once_are_built_once():
    from xtpu.runtime.executor import _ParticipantKernels

    counts = [0] * 5
    lock = threading.Lock()

    def build(p):
        with lock:
            counts[p] += 1
        threading.Event().wait(0.002)
        return (object(),)

    kernels = _ParticipantKernels(5, build)
    got = [[] for _ in range(8)]

    def grab(i):
        for p in list(range(5))[:: (1 if i % 2 else -1)]:
            got[i].append(kernels[p])

    assert on_threads(grab, 8) == []
    assert counts == [1] * 5
    firsts = [g if i % 2 else g[::-1] for i, g in enumerate(got)]
    assert all(all(a is b for a, b in zip(f, firsts[0])) for f in firsts)
    assert len(kernels) == 5


def test_a_logical_core_program_builds_every_participant_and_matches_numpy():
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=2)

    def f(x):
        x = xtpu.split_to_logical_devices(x, [2, 1])
        return xtpu.cross_replica_sum(x * 2 + xtpu.ones_like(x))

    xs = [np.arange(8, dtype=np.int32).reshape(4, 2) * (r + 1) for r in range(2)]
    c = xtpu.lower(f, [[x] for x in xs], device_assignment=da).compile()
    assert c._plain is None  # logical cores: the general path
    assert all(k is not None for k in c.executable.device_kernels._kernels)
    assert len(c.executable.device_kernels) == 4
    out = c([[x] for x in xs])
    for r in range(2):
        np.testing.assert_array_equal(out[r][0], (xs[0] * 2 + 1) + (xs[1] * 2 + 1))


# -- the pipeline cache ------------------------------------------------------------


def two_sums(a, b):
    return xtpu.cross_replica_sum(a), xtpu.cross_replica_sum(b)


def test_pipelines_with_different_options_do_not_share_a_cache_entry():
    from xtpu.core.pipeline import parse_pipeline
    from xtpu.passes import DEFAULT_PIPELINE

    inputs = [[np.full(3, r, np.float32), np.full(2, r, np.float32)] for r in range(2)]

    def spec(threshold):
        return ",".join(DEFAULT_PIPELINE[:-1] + (f"ccl-combine-all-reduce{{threshold-bytes={threshold}}}",))

    counts = []
    for threshold in (1, 1024, 1):
        passes = parse_pipeline(spec(threshold))
        assert passes[-1].threshold_bytes == threshold
        c = xtpu.lower(two_sums, inputs).compile(spec(threshold))
        counts.append(c.as_text().count("ccl.all_reduce"))
        out = c(inputs)
        np.testing.assert_array_equal(out[0][0], np.ones(3, np.float32))
        np.testing.assert_array_equal(out[1][1], np.ones(2, np.float32))
    assert counts == [2, 1, 2]  # one all-reduce each, both combined, one each again
    assert parse_pipeline(list(DEFAULT_PIPELINE)) is parse_pipeline(",".join(DEFAULT_PIPELINE))


def test_a_pass_replaced_in_the_registry_is_the_one_parsed(monkeypatch):
    # available_passes() reads xtpu's registry at each call: a pass class
    # swapped in (a test's fault injection, a user's variant) must be the
    # one a compile runs, not the one cached before the swap.
    from xtpu.core.pipeline import parse_pipeline
    from xtpu.passes import ALL_PASSES, CombineAllReduce

    spec = "tpu-lower-cross-replica-sum,ccl-combine-all-reduce{threshold-bytes=64}"
    assert type(parse_pipeline(spec)[1]) is CombineAllReduce  # cached

    class Traced(CombineAllReduce):
        pass

    monkeypatch.setitem(ALL_PASSES, "ccl-combine-all-reduce", Traced)
    swapped = parse_pipeline(spec)
    assert type(swapped[1]) is Traced and swapped[1].threshold_bytes == 64
    monkeypatch.undo()
    assert type(parse_pipeline(spec)[1]) is CombineAllReduce


def test_an_op_whose_result_is_over_the_cap_is_not_evaluated_at_compile(monkeypatch):
    # An outer product of two small constants: 64 x 64 float32 (16 KiB)
    # against a 4 KiB cap, computed by the run, not once more by the plan
    # to be thrown away.
    from xtpu.dialects import hlo

    monkeypatch.setattr(plan_mod, "FOLD_BYTES", 4096)
    calls = []
    real = hlo.DotGeneralOp.kernel.__func__

    def counted(cls, **params):
        k = real(cls, **params)
        return lambda *xs: calls.append(1) or k(*xs)

    monkeypatch.setattr(hlo.DotGeneralOp, "kernel", classmethod(counted))

    def f(x):
        col = xtpu.constant(np.arange(64, dtype=np.float32).reshape(64, 1))
        return x + xtpu.reduce_sum(xtpu.matmul(col, xtpu.transpose(col)))

    inputs = [[np.float32(r)] for r in range(2)]
    c = xtpu.lower(f, inputs).compile()
    assert calls == [] and "hlo.dot_general" not in folded_ops(c.executable.device_plan)
    out = c(inputs)
    exe = c.executable
    batched = any(type(p).__name__ == "BatchedPlan" for _, p, _ in exe._grouped.get(exe.replica_threads, []))
    # Once per replica; once for both in a batched block (a value of
    # constants is the same for every replica: runtime/batching.py).
    assert len(calls) == (1 if batched else 2)
    total = np.float32(np.arange(64).sum() ** 2)
    for r in range(2):
        assert float(out[r][0]) == r + total


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_one_replica_with_collectives_inside_a_loop_and_a_conditional(inter_op, threads):
    # One replica on one core skips the cost model's walks (it always runs
    # in the calling thread): collectives inside regions still run there.
    inter_op(threads)

    def f(x):
        def body(i, acc):
            return i + 1, xtpu.cross_replica_sum(acc) * 2.0

        _, acc = xtpu.while_loop(lambda i, acc: i < 3, body, (xtpu.constant(np.int32(0)), x))
        return xtpu.cond(xtpu.reduce_sum(acc) > 0.0, lambda: xtpu.cross_replica_sum(acc) + 1.0, lambda: acc)

    x = np.arange(4, dtype=np.float32) - 1.0
    c = xtpu.lower(f, [[x]]).compile()
    assert c.executable.replica_execution[0] == "sequential"
    for _ in range(2):
        np.testing.assert_array_equal(c([[x]])[0][0], x * 8 + 1)


def test_soft_placement_on_and_off_alternate_through_the_cached_pipelines():
    # The default pipeline's spec carries the option: each compile gets its
    # own, whatever was parsed before.
    def f(x):
        return xtpu.strings.to_number(xtpu.strings.format("{}", x)) * 2.0

    on, off = xtpu.XLAOptions(allow_soft_placement=True), xtpu.XLAOptions(allow_soft_placement=False)
    for opts in (on, off, on, off):
        lowered = xtpu.lower(f, [[np.int32(3)]], xla_options=opts)
        if opts.allow_soft_placement:
            assert float(lowered.compile()([[np.int32(3)]])[0][0]) == 6.0
        else:
            with pytest.raises(ValueError, match="hlo.string_format"):
                lowered.compile()
