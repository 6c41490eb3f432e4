"""The sequential mode (runtime/sequential.py): every replica of a step in
one thread (replica after replica between collectives), against a thread per replica and numpy."""

import importlib.util
import os

import numpy as np
import pytest
from xdsl.parser import Parser

import xtpu
from xtpu.dialects import make_context
from xtpu.passes import DEFAULT_PIPELINE
from xtpu.runtime import blas_budget, sequential
from xtpu.runtime.errors import XtpuRuntimeError
from xtpu.runtime.executor import Executable


@pytest.fixture(autouse=True)
def xtpus_choice(monkeypatch):
    """The tests set the mode themselves: none from the environment."""
    monkeypatch.delenv("XTPU_INTER_OP_THREADS", raising=False)


@pytest.fixture
def mode():
    """``mode(n)``: TF's inter-op parallelism threads (1: sequential, 2: a
    thread per replica); reset after the test."""
    yield xtpu.config.threading.set_inter_op_parallelism_threads
    xtpu.config.threading.set_inter_op_parallelism_threads(0)


@pytest.fixture
def one_blas_thread():
    """Both modes' matmuls on one BLAS thread: OpenBLAS's result depends on
    its thread count, and only that differs between the modes."""
    blas_budget.set_intra_op_parallelism_threads(1)
    yield
    blas_budget.set_intra_op_parallelism_threads(0)


def run_both(exe: Executable, args, mode):
    """The run with a thread per replica and the sequential one; with more
    than 2 replicas also the one on 2 threads each running a block of
    replicas, which must equal the sequential one bit for bit."""
    R = exe.num_replicas
    mode(R)
    assert exe.replica_execution[0] == "threads"
    threads = exe.run(args)
    mode(1)
    assert exe.replica_execution[0] == "sequential", exe.replica_execution
    seq = exe.run(args)
    assert 1 in exe._grouped  # the sequential plan ran
    if R > 2 and exe._groups_ok:
        mode(2)
        assert exe.replica_execution[0] == "blocks"
        assert_bitwise(exe.run(args), seq)
        assert 2 in exe._grouped
    return threads, seq


def assert_bitwise(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


# Every collective of the ccl dialect, with groups, at 4 replicas.
CCL_MODULE = """
builtin.module {
  func.func @main(%a: tensor<4x2xf32>, %b: tensor<4x2xf32>, %c: tensor<4x2xf32>, %d: tensor<4x2xf32>)
      -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>,
          tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>,
          tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>,
          tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>,
          tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) {
    %r:20 = tpu.replicate([%a, %b, %c, %d] as %x: tensor<4x2xf32>) {n = 4 : i64} {
      %e = hlo.exponential %x : tensor<4x2xf32>
      %s = ccl.all_reduce %e applies add groups = dense<[[0, 3], [2, 1]]> : tensor<2x2xi64> : tensor<4x2xf32>
      %g = ccl.all_gather %x dim = 0 groups = dense<[[1, 0], [3, 2]]> : tensor<2x2xi64> : (tensor<4x2xf32>) -> tensor<8x2xf32>
      %rs = ccl.reduce_scatter %e applies max dim = 0 groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64> : (tensor<4x2xf32>) -> tensor<2x2xf32>
      %t = ccl.all_to_all %x split = 0 concat = 0 groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64> : (tensor<4x2xf32>) -> tensor<4x2xf32>
      %p = ccl.collective_permute %s pairs = dense<[[0, 1], [1, 2], [3, 3]]> : tensor<3x2xi64> : tensor<4x2xf32>
      tpu.yield %s, %g, %rs, %t, %p : tensor<4x2xf32>, tensor<8x2xf32>, tensor<2x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
    }
    func.return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %r#6, %r#7, %r#8, %r#9, %r#10, %r#11, %r#12, %r#13, %r#14, %r#15, %r#16, %r#17, %r#18, %r#19 : tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
  }
}
"""


def test_every_collective_equals_the_threads_bit_for_bit_and_numpy(mode):
    module = Parser(make_context(), CCL_MODULE).parse_module()
    module.verify()
    exe = Executable(module, timeout=10)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((4, 2)).astype(np.float32) for _ in range(4)]
    threads, seq = run_both(exe, xs, mode)
    assert_bitwise(threads, seq)
    out = [seq[i * 4 : (i + 1) * 4] for i in range(5)]  # per result, per replica
    e = [np.exp(x) for x in xs]
    s = {0: e[0] + e[3], 3: e[0] + e[3], 2: e[1] + e[2], 1: e[1] + e[2]}  # ascending replica order
    for r in range(4):
        np.testing.assert_array_equal(out[0][r], s[r])
    np.testing.assert_array_equal(out[1][0], np.concatenate([xs[1], xs[0]]))
    np.testing.assert_array_equal(out[1][3], np.concatenate([xs[3], xs[2]]))
    m01, m23 = np.maximum(e[0], e[1]), np.maximum(e[2], e[3])
    np.testing.assert_array_equal(out[2][1], m01[2:])
    np.testing.assert_array_equal(out[2][2], m23[:2])
    for r in range(4):
        np.testing.assert_array_equal(out[3][r], np.stack([xs[j][r] for j in range(4)]))
    np.testing.assert_array_equal(out[4][1], s[0])
    np.testing.assert_array_equal(out[4][2], s[1])
    np.testing.assert_array_equal(out[4][3], s[3])
    np.testing.assert_array_equal(out[4][0], np.zeros((4, 2), np.float32))  # no source


# benchmarks/jax_compare.py's MLP step: the loss and the all-reduced
# hand-written gradient of w.
_spec = importlib.util.spec_from_file_location(
    "jax_compare", os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "jax_compare.py")
)
jax_compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(jax_compare)
mlp_step = jax_compare.xtpu_mlp_step


def mlp_inputs(R, B=16, D=32):
    rng = np.random.default_rng(R)
    w = (rng.standard_normal((D, D)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((D, D)) * 0.1).astype(np.float32)
    return [[rng.standard_normal((B, D)).astype(np.float32), w, w2] for _ in range(R)]


@pytest.mark.parametrize("R", [2, 8])
def test_a_training_step_equals_the_threads_bit_for_bit_on_one_blas_thread(R, mode, one_blas_thread):
    inputs = mlp_inputs(R)
    c = xtpu.lower(mlp_step, inputs).compile()
    mode(R)
    threads = c(inputs)
    mode(1)
    seq = c(inputs)
    assert c.executable.replica_execution[0] == "sequential"
    for t, s in zip(threads, seq):
        assert_bitwise(t, s)
    if R > 2:  # 2 threads, each running a block of 4 replicas
        mode(2)
        assert c.executable.replica_execution[0] == "blocks"
        for t, s in zip(threads, c(inputs)):
            assert_bitwise(t, s)
    # numpy, one replica after the other
    g_total = 0
    for (x, w, w2), (loss, _g) in zip(inputs, seq):
        h = np.tanh(x @ w)
        np.testing.assert_allclose(loss, (h @ w2).mean(), rtol=1e-5)
        g_y = np.full(x.shape, 1.0 / x.size, np.float32)
        g_total = g_total + x.T @ ((g_y @ w2.T) * (1 - h * h))
    for _, g in seq:
        np.testing.assert_allclose(g, g_total, rtol=1e-4, atol=1e-6)


def test_xtpu_chooses_one_thread_for_small_work_and_a_thread_per_core_for_large_work():
    small = xtpu.lower(mlp_step, mlp_inputs(8)).compile()
    assert small.executable.replica_execution == ("sequential", "xtpu's cost model")
    # 8 replicas of x[64,256] (about 0.7 ms of work each): a block per core
    mid = xtpu.lower(mlp_step, mlp_inputs(8, B=64, D=256)).compile()
    assert mid.executable.replica_threads == min(xtpu.runtime.blas_budget.cores(), 8)
    assert xtpu.lower(mlp_step, mlp_inputs(2, B=64, D=256)).compile().executable.replica_threads == 1
    # 8 replicas of [256,1024] x [1024,1024] matmuls: a block of replicas per core
    large = xtpu.lower(mlp_step, mlp_inputs(8, B=256, D=1024)).compile()
    cores = xtpu.runtime.blas_budget.cores()
    assert large.executable.replica_execution == ("blocks" if cores < 8 else "threads", "xtpu's cost model")
    assert large.executable.replica_threads == min(cores, 8)

    def elementwise(x):  # 8 replicas x 10 ops x 2e6 elements, no matmul
        for _ in range(10):
            x = xtpu.math.tanh(x) * 1.5
        return xtpu.cross_replica_sum(x)

    big = xtpu.lower(elementwise, [[np.zeros(1_000_000, np.float32)] for _ in range(8)]).compile()
    assert big.executable.replica_execution == ("blocks" if cores < 8 else "threads", "xtpu's cost model")
    two = xtpu.lower(elementwise, [[np.zeros(1_000_000, np.float32)] for _ in range(2)]).compile()
    assert two.executable.replica_execution == ("threads", "xtpu's cost model")


def test_programs_the_sequential_mode_cannot_run_keep_a_thread_per_replica(mode):
    mode(1)
    x = [[np.float32(r)] for r in range(2)]
    host = xtpu.lower(lambda v: xtpu.outside_compilation(lambda u: u + 1.0, v * 3.0) * 2.0, x).compile()
    kind, why = host.executable.replica_execution
    assert kind == "threads" and "outside-compilation clusters" in why
    np.testing.assert_array_equal([o[0] for o in host(x)], [2.0, 8.0])


def test_loops_and_branches_with_collectives_run_for_all_replicas_at_once(mode):
    def step(v):
        def body(i, a):
            a = xtpu.cond(i < 1, lambda: xtpu.cross_replica_sum(a), lambda: a * 2.0)
            return i + 1, xtpu.cross_replica_sum(a * 0.5)

        return xtpu.while_loop(lambda i, a: i < 3, body, (0, v))[1]

    x = [[np.float32(r + 1)] for r in range(4)]
    c = xtpu.lower(step, x).compile()
    assert c.executable.replica_execution == ("sequential", "xtpu's cost model")
    threads, seq = run_both(c.executable, [a[0] for a in x], mode)
    assert_bitwise(threads, seq)
    a = 10.0 * 0.5 * 4  # i = 0: sum, then the halves summed
    a = a * 2.0 * 0.5 * 4  # i = 1, 2: doubled, then the halves summed
    a = a * 2.0 * 0.5 * 4
    np.testing.assert_array_equal(seq, [a] * 4)


def test_replicas_that_leave_a_loop_with_collectives_at_different_times_run_a_thread_each(mode):
    # Replicas 0, 1 loop twice and 2, 3 four times; each pair sums within
    # itself (the groups), so the threads run it; sequentially the
    # replicas' conditions differ after two trips and the step runs again
    # with a thread per replica.
    def step(v, n):
        def body(i, a):
            return i + 1, xtpu.cross_replica_sum(a, group_assignment=[[0, 1], [2, 3]])

        return xtpu.while_loop(lambda i, a: i < n, body, (0, v))[1]

    x = [[np.float32(r + 1), np.int32(2 if r < 2 else 4)] for r in range(4)]
    c = xtpu.lower(step, x).compile()
    flat = [a[0] for a in x] + [a[1] for a in x]
    threads, seq = run_both(c.executable, flat, mode)
    assert_bitwise(threads, seq)
    np.testing.assert_array_equal(seq, [3.0 * 2, 3.0 * 2, 7.0 * 8, 7.0 * 8])


def test_a_failing_kernel_names_the_same_replica_op_and_line_in_both_modes(mode, monkeypatch):
    # Replica by replica: a batched block runs one kernel for all its
    # replicas (test_batching.py has its failure and rerun).
    monkeypatch.setenv("XTPU_BATCH_REPLICAS", "0")
    inputs = [[np.full(3, r, np.float32)] for r in range(4)]

    def step(x):
        return xtpu.cross_replica_sum(xtpu.math.tanh(x))  # the failing line

    c = xtpu.lower(step, inputs).compile()
    exe = c.executable
    original = Executable._device_kernel

    def failing(self, op, r, core=0):
        k = original(self, op, r, core)
        if op.name == "hlo.tanh" and r == 2:

            def boom(v):
                raise FloatingPointError("overflow in replica 2's data")

            return boom
        return k

    monkeypatch.setattr(Executable, "_device_kernel", failing)
    errors = []
    for n in (4, 2, 1):
        mode(n)
        exe.device_kernels = [exe.device_plan.kernels(lambda op, r=r: exe._device_kernel(op, r)) for r in range(4)]
        exe._grouped = {}
        with pytest.raises(XtpuRuntimeError) as info:
            c(inputs)
        errors.append(info.value)
    for e in errors:
        assert e.replica == 2 and e.op == "hlo.tanh"
        assert "test_sequential.py" in e.location and "overflow in replica 2's data" in str(e)
    assert errors[0].location == errors[1].location
    # The executable still runs after the failure.
    monkeypatch.setattr(Executable, "_device_kernel", original)
    exe._grouped = {}
    out = c(inputs)
    np.testing.assert_allclose(out[0][0], sum(np.tanh(np.full(3, r, np.float32)) for r in range(4)), rtol=1e-6)


def test_inter_op_setting_is_checked(mode, monkeypatch):
    with pytest.raises(ValueError, match="integer >= 0"):
        xtpu.config.threading.set_inter_op_parallelism_threads(-1)
    with pytest.raises(ValueError, match="integer >= 0"):
        xtpu.config.threading.set_inter_op_parallelism_threads(True)
    mode(1)
    assert xtpu.config.threading.get_inter_op_parallelism_threads() == 1
    mode(0)
    inputs = mlp_inputs(2)
    c = xtpu.lower(mlp_step, inputs).compile()
    monkeypatch.setenv("XTPU_INTER_OP_THREADS", "2")
    assert c.executable.replica_execution == ("threads", "inter-op parallelism threads = 2")
    monkeypatch.setenv("XTPU_INTER_OP_THREADS", "many")
    with pytest.raises(ValueError, match="XTPU_INTER_OP_THREADS must be a whole number of threads, got 'many'"):
        c(inputs)


def test_the_cost_model_counts_matmul_flops_and_elements():
    lowered = xtpu.lower(mlp_step, mlp_inputs(2, B=16, D=32))
    exe = lowered.compile().executable
    flops, elements = sequential.work(exe.replicate)
    assert flops == 4 * 2 * 16 * 32 * 32  # four [16,32]x[32,32]-sized matmuls
    assert elements > 16 * 32  # tanh, the products, the mean ...


def test_a_block_runs_each_segment_replica_after_replica():
    # Between two collectives a block's plan runs replica 0's ops, then
    # replica 1's, ... (its values stay in cache); a collective is one call.
    from xtpu.runtime.plan import Plan, pure_kernel
    from xtpu.runtime.sequential import COLLECTIVES, together_kernel

    xs = [[np.full(3, r + 1.0, np.float32)] for r in range(3)]
    c = xtpu.lower(lambda x: xtpu.math.exp(xtpu.cross_replica_sum(xtpu.math.tanh(x) * 2.0)) + 1.0, xs).compile()
    body = c.executable.replicate
    plan = Plan(body.body.block, "recorded", replicas=3, together=lambda op: isinstance(op, COLLECTIVES))
    calls = []

    def factory(op, j=0):
        if j is None:
            k = together_kernel(op, 3)
            return lambda vals: (calls.append((op.name, "all")), k(vals))[1]
        k = pure_kernel(op)
        return lambda *a: (calls.append((op.name, j)), k(*a))[1]

    out = plan.run([tuple(x for (x,) in xs)], plan.kernels(factory))
    assert plan.source.count("for j in range(3):") == 2
    before = [(n, j) for n, j in calls[: calls.index(("ccl.all_reduce", "all"))]]
    assert [j for _, j in before] == sorted(j for _, j in before)  # replica after replica
    assert [n for n, j in before if j == 0] == [n for n, j in before if j == 2]
    total = sum(np.tanh(x) * np.float32(2) for (x,) in xs)
    for r in range(3):
        np.testing.assert_allclose(out[0][r], np.exp(total) + 1, rtol=1e-6)
        np.testing.assert_array_equal(out[0][r], c(xs)[r][0])


def test_a_plans_frame_does_not_grow_with_its_kernels():
    """A plan's generated function reads its kernels as ``K[i]``: unpacked
    into locals they took a local and a stack slot per op, and a frame near
    the end of one of CPython's 16 KB frame-stack chunks made every kernel
    call push a new chunk and free it on return (an mmap and a munmap per
    call: 800 a step in the mixed transformer example).  Its stack stays
    small however many ops it runs; its locals are the values, not the
    kernels.  The values are still the chain's: 1 + 600 adds."""

    def chain(x):
        for _ in range(600):
            x = x + 1.0
        return x

    c = xtpu.lower(chain, [[np.float32(0)]]).compile(",".join(DEFAULT_PIPELINE))  # unfused: 600 ops
    assert float(c([[np.float32(0)]])[0][0]) == 600.0
    code = c.executable.device_plan.run.__code__
    assert code.co_stacksize < 16, code.co_stacksize
    assert code.co_nlocals < 700, code.co_nlocals
