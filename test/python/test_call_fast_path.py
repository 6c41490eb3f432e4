"""A compiled program's call with plain inputs (replication.py's
``_plain_inputs``: per replica a list of numpy arrays of the compiled shapes
and dtypes) skips the pytree walk and conversions; every other input takes
the general path, with its conversions and its error messages.  And a plan
folds the pure ops of constants once (runtime/plan.py's ``Plan._fold``)."""

import numpy as np
import pytest

import xtpu
from xtpu.passes import DEFAULT_PIPELINE
from xtpu.replication import program as replication
from xtpu.runtime import plan as plan_mod
from xtpu.runtime.errors import XtpuRuntimeError


def step(x, w):
    return xtpu.cross_replica_sum(xtpu.math.tanh(x @ w) * 2.0)


def data(R=4, dtype=np.float32):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 6)).astype(dtype)
    return [[rng.standard_normal((3, 6)).astype(dtype), w] for _ in range(R)]


def reference(inputs):
    return sum(np.tanh(x @ w) * np.float32(2.0) for x, w in inputs)


def test_plain_inputs_take_the_fast_path_and_give_the_general_paths_bits(monkeypatch):
    inputs = data()
    c = xtpu.lower(step, inputs).compile()
    assert replication._plain_inputs(inputs, c._plain) is inputs
    fast = c(inputs)
    monkeypatch.setattr(c, "_plain", None)  # every call through _flatten_replicas
    slow = c(inputs)
    for r in range(4):
        np.testing.assert_array_equal(fast[r][0], slow[r][0])
        np.testing.assert_allclose(fast[r][0], reference(inputs), rtol=1e-5, atol=1e-6)


def test_tuples_and_other_values_still_work():
    inputs = data()
    c = xtpu.lower(step, inputs).compile()
    as_tuples = tuple(tuple(rep) for rep in inputs)
    assert replication._plain_inputs(as_tuples, c._plain) is as_tuples
    np.testing.assert_array_equal(c(as_tuples)[0][0], c(inputs)[0][0])
    # numpy and Python scalars (not arrays) are converted by the general path.
    scalars = [[np.float32(r), float(r)] for r in range(2)]
    s = xtpu.lower(lambda a, b: xtpu.cross_replica_sum(a * b), scalars).compile()
    assert replication._plain_inputs(scalars, s._plain) is None
    assert float(s(scalars)[1][0]) == 1.0


class Sub(np.ndarray):
    pass


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda i: [[x.astype(np.float64), w] for x, w in i], "input 0 must be float32\\[3x6\\], got float64\\[3x6\\]"),
        (lambda i: [[x[:2], w] for x, w in i], "input 0 must be float32\\[3x6\\], got float32\\[2x6\\]"),
        (lambda i: i[:3], "it was compiled for 4 replicas, got inputs for 3"),
        (lambda i: [[x] for x, _ in i], "each replica takes 2 inputs, got 1"),
        (lambda i: [[x, w, w] for x, w in i], "each replica takes 2 inputs, got 3"),
        (lambda i: [{"x": x, "w": w} for x, w in i], "the inputs must have the structure"),
    ],
)
def test_inputs_off_the_fast_path_get_the_general_paths_errors(change, message):
    inputs = data()
    c = xtpu.lower(step, inputs).compile()
    bad = change(inputs)
    assert replication._plain_inputs(bad, c._plain) is None
    with pytest.raises(ValueError, match="inputs do not match the compiled program: " + message):
        c(bad)


def test_an_ndarray_subclass_takes_the_general_path():
    inputs = data()
    c = xtpu.lower(step, inputs).compile()
    sub = [[x.view(Sub), w] for x, w in inputs]
    assert replication._plain_inputs(sub, c._plain) is None
    np.testing.assert_array_equal(c(sub)[0][0], c(inputs)[0][0])


def test_programs_with_nested_or_padded_inputs_have_no_fast_path():
    nested = [[(x, w)] for x, w in data()]
    c = xtpu.lower(lambda p: xtpu.cross_replica_sum(p[0] @ p[1]), nested).compile()
    assert c._plain is None
    np.testing.assert_allclose(c(nested)[0][0], sum(x @ w for ((x, w),) in nested), rtol=1e-5)
    strings = [[np.array("a", dtype=object)] for _ in range(2)]
    assert replication._plain_specs(xtpu.lower(lambda s: s, strings).signature) is None


def test_a_caller_array_returned_by_the_program_is_still_a_copy():
    # The fast path hands the caller's arrays to the executor unconverted:
    # an output that is an input must still not be the caller's array.
    inputs = [[np.arange(6, dtype=np.float32)]]
    c = xtpu.lower(lambda x: xtpu.cross_replica_sum(x), inputs).compile()
    out = c(inputs)[0][0]
    assert not np.shares_memory(out, inputs[0][0])
    np.testing.assert_array_equal(out, inputs[0][0])


# -- folding pure ops of constants ---------------------------------------------


def folded_program():
    def body(x):
        ones = xtpu.constant(np.float32(1.0)) + xtpu.zeros_like(x)  # a broadcast of a constant
        return x * (ones - 0.5)

    return body


def test_a_broadcast_constant_is_folded_out_of_the_plan():
    inputs = [[np.arange(6, dtype=np.float32).reshape(2, 3) + r] for r in range(2)]
    c = xtpu.lower(folded_program(), inputs).compile()
    plan = c.executable.device_plan
    folded = [i for i, op in enumerate(plan.ops) if not isinstance(op, plan_mod.CONSTANT_OPS) and i in plan._constants]
    assert folded, plan.source
    for i in folded:
        assert f"k{i}(" not in plan.source  # no line of its own
        value = plan._constants[i]
        assert not (isinstance(value, np.ndarray) and value.flags.writeable)
    out = c(inputs)
    for r in range(2):
        np.testing.assert_array_equal(out[r][0], inputs[r][0] * np.float32(0.5))


def test_a_fold_that_would_raise_is_left_to_the_run(monkeypatch):
    from xtpu.dialects import hlo

    def refuse(cls, **params):
        def k(*args):
            raise FloatingPointError("refused")

        return k

    inputs = [[np.ones((2, 3), np.float32)]]
    lowered = xtpu.lower(lambda x: x * (xtpu.constant(np.float32(2.0)) + xtpu.zeros_like(x)), inputs)
    monkeypatch.setattr(hlo.BroadcastInDimOp, "kernel", classmethod(refuse))
    c = lowered.compile()
    assert "hlo.broadcast_in_dim" in [op.name for op in c.executable.device_plan.ops]
    with pytest.raises(XtpuRuntimeError, match="hlo.broadcast_in_dim") as e:
        c(inputs)
    assert e.value.replica == 0 and "refused" in str(e.value)


def test_a_fold_larger_than_the_cap_stays_an_op(monkeypatch):
    monkeypatch.setattr(plan_mod, "FOLD_BYTES", 8)
    inputs = [[np.ones((2, 3), np.float32)]]
    c = xtpu.lower(folded_program(), inputs).compile()
    plan = c.executable.device_plan
    assert not [
        i for i, op in enumerate(plan.ops) if not isinstance(op, plan_mod.CONSTANT_OPS) and i in plan._constants
    ]
    np.testing.assert_array_equal(c(inputs)[0][0], inputs[0][0] * np.float32(0.5))


# -- what a compile builds ------------------------------------------------------


def test_participant_kernels_are_built_when_a_mode_needs_them():
    inputs = data(R=4)
    xtpu.config.threading.set_inter_op_parallelism_threads(1)
    try:
        c = xtpu.lower(step, inputs).compile()
        built = lambda: [k is not None for k in c.executable.device_kernels._kernels]  # noqa: E731
        assert built() == [True, False, False, False]  # the first checks every op's kernel
        sequential = c(inputs)
        assert built() == [True, False, False, False]  # one thread for all: its own kernels
        xtpu.config.threading.set_inter_op_parallelism_threads(4)  # a thread per replica
        threads = c(inputs)
        assert built() == [True] * 4
    finally:
        xtpu.config.threading.set_inter_op_parallelism_threads(0)
    for r in range(4):
        np.testing.assert_allclose(threads[r][0], sequential[r][0], rtol=1e-6)
        np.testing.assert_allclose(threads[r][0], reference(inputs), rtol=1e-5, atol=1e-6)


def test_a_program_with_a_host_cluster_builds_every_participant_at_compile():
    inputs = [[np.float32(r)] for r in range(3)]
    c = xtpu.lower(lambda x: xtpu.outside_compilation(lambda v: v + 1.0, xtpu.math.exp(x)) * 2.0, inputs).compile()
    assert c.executable.replica_execution[0] == "threads"
    assert all(k is not None for k in c.executable.device_kernels._kernels)
    assert [float(o[0]) for o in c(inputs)] == [(np.exp(np.float32(r)) + 1) * 2 for r in range(3)]


def test_a_pipeline_spec_is_parsed_once_and_bad_specs_still_fail_every_time():
    from xtpu.core.pipeline import PipelineError, parse_pipeline

    spec = "tpu-lower-cross-replica-sum,ccl-combine-all-reduce{threshold-bytes=1024}"
    first = parse_pipeline(spec)
    assert parse_pipeline(spec) is first
    assert first[1].threshold_bytes == 1024
    for _ in range(2):
        with pytest.raises(PipelineError, match="did you mean tpu-lower-cross-replica-sum"):
            parse_pipeline("tpu-lower-cross-replica-summ")


def test_one_replica_skips_the_execution_cost_model(monkeypatch):
    from xtpu.runtime import sequential

    def walked(*a, **k):
        raise AssertionError("walked the body")

    for name in ("ineligible", "collectives_in_regions", "work"):
        monkeypatch.setattr(sequential, name, walked)
    monkeypatch.delenv("XTPU_INTER_OP_THREADS", raising=False)  # the cost model's choice, not a setting
    one = [[np.arange(4, dtype=np.float32)]]
    c = xtpu.lower(lambda x: xtpu.cross_replica_sum(x * 2.0), one).compile()
    assert c.executable.replica_execution == ("sequential", "xtpu's cost model")
    np.testing.assert_array_equal(c(one)[0][0], one[0][0] * 2)
    with pytest.raises(AssertionError, match="walked the body"):  # two replicas need the model
        xtpu.lower(lambda x: xtpu.cross_replica_sum(x * 2.0), one * 2).compile()


@pytest.mark.parametrize("dtype", [">f4", ">i4", ">f8"])
def test_big_endian_inputs_are_their_values(dtype):
    # Data read from a big-endian file: the same numbers, in native order
    # (it was rejected as "must be float32[2x3], got float32[2x3]").
    x = np.arange(6).reshape(2, 3).astype(dtype)
    native = x.astype(x.dtype.newbyteorder("="))
    out = xtpu.replicate(lambda a: xtpu.cross_replica_sum(a * 2), [[x], [x]])
    np.testing.assert_array_equal(out[1][0], native * 2 * 2)
    c = xtpu.lower(lambda a: a + 1, [[native]]).compile()
    np.testing.assert_array_equal(c([[x]])[0][0], native + 1)


def test_ops_of_one_form_share_one_kernel_and_constants_decode_once():
    def chain(x):
        for _ in range(50):
            x = x * 1.5 + 1.0
        return x

    inputs = [[np.float32(0.5)]]
    # Unfused (the default pipeline fuses the chain into one fusion.region).
    c = xtpu.lower(chain, inputs).compile(",".join(DEFAULT_PIPELINE))
    exe = c.executable
    assert len(exe._pure_kernels) == 100  # every op has its kernel ...
    assert len(set(map(id, exe._pure_kernels.values()))) == 2  # ... one per form: multiply, add
    assert len(exe.device_plan._decoded) == 2  # the constants 1.5 and 1.0, decoded once each
    want = np.float32(0.5)
    for _ in range(50):
        want = want * np.float32(1.5) + np.float32(1.0)
    assert c(inputs)[0][0] == want


def test_a_host_only_op_left_on_the_device_is_still_refused():
    from xtpu.core.pipeline import parse_module
    from xtpu.runtime.executor import Executable

    text = xtpu.lower(lambda x: xtpu.strings.format("v={}", [x]), [[np.float32(1)]]).as_text()  # before the passes
    with pytest.raises(ValueError, match="cannot run on the device.*tpu-mark-outside-compilation"):
        Executable(parse_module(text))
