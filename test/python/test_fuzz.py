"""The differential fuzzer's CI slice, and the defects it found (issue 10).

``test_random_programs_agree`` draws programs over the whole public API with
hypothesis (``fuzz_programs.HypothesisChooser``: a failure shrinks to a short
program, printed as a Python script), runs each eagerly and compiled with 1,
2 and 8 replicas and split over 2 logical cores, some through the text round
trip, and checks the float64 gradients against finite differences.  The
slice avoids the defects below until their fixes land (``fp.DEFECTS``); each
has its own regression case here, ``xfail(strict=True)`` while it is open.

``python benchmarks/fuzz.py --programs 10000`` runs the fuzzer at scale.
"""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xtpu

sys.path.insert(0, os.path.dirname(__file__))

import fuzz_programs as fp  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# The defects still open: the slice does not build programs that hit them
# (each has an xfail(strict=True) regression case below).  When a fix lands,
# flip its case and take its name out of OPEN.
OPEN: frozenset = frozenset()
assert OPEN <= set(fp.DEFECTS)
# Where TF's graph mode, which compiled programs follow, differs from eager
# execution (the reference): avoided, compared leniently (fuzz_programs).
AVOID = OPEN | fp.ALWAYS_AVOID

# 100 programs (about 10 s here): the suite stays under its 10-minute budget;
# ``XTPU_FUZZ_EXAMPLES=N`` draws more, ``benchmarks/fuzz.py`` runs thousands.
SLICE = settings(
    max_examples=int(os.environ.get("XTPU_FUZZ_EXAMPLES", "100")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


# --------------------------------------------------------------------------
# The CI slice
# --------------------------------------------------------------------------


@SLICE
@given(data=st.data())
def test_random_programs_agree(data):
    ch = fp.HypothesisChooser(data)
    program = fp.generate(ch, avoid=AVOID)
    roundtrip = ch.bool(0.25)
    failure = fp.check_program(program, roundtrip=roundtrip, timeout=20.0, avoid=AVOID)
    if failure is not None:
        known = fp.classify_known(failure, program)
        pytest.fail(
            f"{failure}\n"
            + (f"(defect {known!r}: is it still open?)\n" if known else "")
            + "reproducer:\n"
            + fp.reproducer(program, failure),
            pytrace=False,
        )


def test_the_generator_covers_the_api():
    """2,000 programs (generated, not run) use every op and feature."""
    seen = set()
    for seed in range(2000):
        seen |= fp.generate(fp.RandomChooser(seed)).features
    ops = {
        "+",
        "-",
        "*",
        "/",
        "**",
        "@",
        "[]",
        "abs()",
        "<",
        "<=",
        ">",
        ">=",
        "==",
        "!=",
        "&",
        "|",
        "~",
        "add",
        "subtract",
        "multiply",
        "divide",
        "truediv",
        "pow",
        "maximum",
        "minimum",
        "negative",
        "abs",
        "exp",
        "log",
        "sqrt",
        "tanh",
        "sigmoid",
        "equal",
        "not_equal",
        "less",
        "less_equal",
        "greater",
        "greater_equal",
        "logical_and",
        "logical_or",
        "logical_not",
        "reduce_sum",
        "reduce_mean",
        "reduce_max",
        "reduce_min",
        "argmax",
        "matmul",
        "floordiv",
        "floormod",
        "mod",
        "logical_xor",
        "reduce_prod",
        "reduce_any",
        "reduce_all",
        "square",
        "segment_sum",
        "unsorted_segment_sum",
        "softmax",
        "log_softmax",
        "cast",
        "reshape",
        "transpose",
        "concat",
        "one_hot",
        "constant",
        "stop_gradient",
        "nn.relu",
        "nn.sigmoid",
        "nn.softmax",
        "nn.log_softmax",
        "strings.format",
        "strings.to_number",
        "print",
    }
    features = {
        "cond",
        "while_loop",
        "while_maximum_iterations",
        "while_counter",
        "host_cond",
        "host_while",
        "outside_compilation",
        "oc_in_control_flow",
        "oc_in_gradient",
        "soft_placement",
        "strings",
        "cross_replica_sum",
        "crs_all",
        "crs_groups",
        "replica_id",
        "logical:split",
        "logical:replicate",
        "logical:assign",
        "gradient",
        "gradient:tape",
        "gradient:tf1",
        "gradient:persistent",
        "second_order",
        "gradient_through_crs",
        "finite_differences",
        "invalid",
        "special_inputs",
        "nonfinite_constant",
        "nonfinite_literal",
        "numpy_scalar_literal",
        "zero_size_input",
        "zero_size_slice",
        "zero_size_reduction",
    }
    assert {f"op:{o}" for o in ops} - seen == set()
    assert features - seen == set()
    # every op of xtpu.math and xtpu.nn is one the generator builds
    for mod, prefix in ((xtpu.math, ""), (xtpu.nn, "nn.")):
        public = {n for n in dir(mod) if not n.startswith("_") and callable(getattr(mod, n))}
        assert {n for n in public if f"op:{prefix}{n}" not in seen} == set()


def test_a_seeded_failure_shrinks_to_a_short_runnable_reproducer():
    """The minimizer (for benchmarks/fuzz.py) on a planted failure: "the
    program has an xtpu.cond"; the reproducer is a script that runs."""
    prog = next(
        p
        for s in range(200)
        if "cond" in (p := fp.generate(fp.RandomChooser(s), fp.DEFECTS)).features and len(p.lines) > 15
    )

    def has_cond(program):
        src = program.source(fp.Ctx("compiled", 1, 1))
        compile(src, "<candidate>", "exec")
        return "xtpu.cond(" in src

    # the choices first, then the program's lines (as benchmarks/fuzz.py does)
    small = fp.program_from_choices(
        fp.minimize(prog.choices, lambda c: has_cond(fp.program_from_choices(c, fp.DEFECTS)), max_evals=300), fp.DEFECTS
    )
    small = fp.minimize_program(small, lambda p: has_cond(p) and fp.check_program(p, [(1, 1)]) is None)
    src = small.source(fp.Ctx("compiled", 1, 1))
    assert "xtpu.cond(" in src
    assert len(small.lines) < len(prog.lines) and len(small.lines) <= 8, src
    script = fp.reproducer(small, fp.Failure("mismatch", "compiled R=1 cores=1", "planted"))
    namespace = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(script, "<reproducer>", "exec"), namespace)
    assert len(namespace["compiled"]) == 1


def test_failures_are_classified():
    """Mismatch, crash (differing errors, or a non-user error) and hang; the
    same user error eagerly and compiled is agreement."""
    ok = fp.Outcome("ok", values=[[np.float32(1.0)]])
    assert fp.compare(ok, fp.Outcome("ok", values=[[np.float32(1.0 + 1e-7)]]), "p", 1, 1) is None
    assert fp.compare(ok, fp.Outcome("ok", values=[[np.float32(1.1)]]), "p", 1, 1).kind == "mismatch"
    assert fp.compare(ok, fp.Outcome("ok", values=[[np.float64(1.0)]]), "p", 1, 1).kind == "mismatch"
    nan = fp.Outcome("ok", values=[[np.array([np.nan, np.inf, -0.0])]])
    assert fp.compare(nan, fp.Outcome("ok", values=[[np.array([np.nan, np.inf, 0.0])]]), "p", 1, 1) is None
    assert fp.compare(nan, fp.Outcome("ok", values=[[np.array([np.nan, -np.inf, 0.0])]]), "p", 1, 1) is not None
    err = fp.Outcome("error", error=TypeError("add: operands must have the same dtype, got float32[] and float64[]"))
    same = fp.Outcome(
        "error", error=TypeError("add: operands must have the same dtype, got float32 and float64 (at f.py:3)")
    )
    assert fp.compare(err, same, "p", 1, 1) is None
    assert fp.compare(err, fp.Outcome("error", error=ValueError("add: no")), "p", 1, 1).kind == "crash"
    assert fp.compare(err, ok, "p", 1, 1).kind == "crash"
    assert fp.compare(ok, fp.Outcome("error", error=ZeroDivisionError("x")), "p", 1, 1).kind == "crash"
    assert fp.compare(ok, fp.Outcome("hang", error=TimeoutError("x")), "p", 1, 1).kind == "hang"


def test_the_eager_reference_emulates_cross_replica_sum_and_its_gradient():
    """The reference itself: sums per group in replica order, TF's gradient
    (the sum of the cotangents), replica ids, against xtpu.replicate."""
    source = fp.Program(
        inputs=[fp.Spec((2,), "float64")],
        value_seed=5,
        specials=(),
        outputs=["v1", "v2", "v3", "v4"],
        lines=[
            (
                0,
                lambda ctx: (
                    "v1 = "
                    + (
                        "crs(x0, [[0, 1], [2, 3]])"
                        if ctx.mode == "eager"
                        else "xtpu.cross_replica_sum(x0, group_assignment=[[0, 1], [2, 3]])"
                    )
                ),
            ),
            (
                0,
                lambda ctx: (
                    "v2 = xtpu.cast(" + ("rid()" if ctx.mode == "eager" else "xtpu.replica_id()") + ", xtpu.float64)"
                ),
            ),
            (0, "with xtpu.GradientTape() as tape:"),
            (0, "    tape.watch(x0)"),
            (
                0,
                lambda ctx: (
                    "    v3 = xtpu.math.reduce_sum("
                    + ("crs(x0)" if ctx.mode == "eager" else "xtpu.cross_replica_sum(x0)")
                    + " * x0)"
                ),
            ),
            (0, "v4 = tape.gradient(v3, x0)"),
        ],
    )
    eager = fp.run_eager(source, 4, 1)
    compiled = fp.run_compiled(source, 4, 1)
    assert eager.status == compiled.status == "ok"
    assert fp.compare(eager, compiled, "compiled", 4, 1) is None
    xs = [r[0] for r in source.input_values(4)]
    np.testing.assert_allclose(eager.values[2][0], xs[2] + xs[3])
    np.testing.assert_allclose(eager.values[3][1], 3.0)
    # d/dx_r sum(S * x_r) summed over replicas: S + sum_r' x_r' = 2 S
    np.testing.assert_allclose(eager.values[1][3], 2 * sum(xs))


def test_finite_differences_catch_a_wrong_gradient():
    """The gradient check itself: the eager tape's gradient of a smooth
    float64 function (through a cross_replica_sum) passes; a perturbed one
    fails."""
    program = fp.Program(
        inputs=[fp.Spec((3,), "float64")],
        value_seed=3,
        specials=(),
        outputs=["v3"],
        lines=[
            (0, "def loss_fn(a):"),
            (1, lambda ctx: "s = " + ("crs(a)" if ctx.mode == "eager" else "xtpu.cross_replica_sum(a)")),
            (1, "return xtpu.math.tanh(a) * s"),
            (0, "with xtpu.GradientTape() as tape:"),
            (0, "    tape.watch(x0)"),
            (0, "    v2 = loss_fn(x0)"),
            (0, "v3 = tape.gradient(v2, x0)"),
            (0, lambda ctx: "_fd_site(1, loss_fn, (x0,), 1, (v3,), True)" if ctx.fd else None),
        ],
    )
    eager = fp.run_eager(program, 2, 1, fd=True)
    assert eager.status == "ok" and fp.check_finite_differences(program, eager, 2) is None
    fn, args, n, grads, has_crs = eager.fd_sites[1][1]
    eager.fd_sites[1][1] = (fn, args, n, [grads[0] * 1.001], has_crs)
    failure = fp.check_finite_differences(program, eager, 2)
    assert failure is not None and failure.kind == "mismatch" and "replica 1" in failure.detail


# --------------------------------------------------------------------------
# Regressions: the known defects of issue 10
# --------------------------------------------------------------------------


def _both(f, *inputs):
    """``f`` eagerly (on EagerTensors) and compiled with one replica."""
    eager = f(*[xtpu.constant(a) for a in inputs])
    ((compiled,),) = xtpu.replicate(lambda *a: (f(*a),), [list(inputs)])
    return np.asarray(eager), np.asarray(compiled)


def test_numpy_scalar_with_a_python_scalar():
    """Issue 10: ``xtpu.math.minimum(np.float64(-0.75), 0.0)`` raised eagerly."""
    eager, compiled = _both(lambda x: xtpu.math.minimum(np.float64(-0.75), 0.0) + x, np.float64(0.0))
    assert eager.dtype == compiled.dtype == np.float64 and eager == compiled == -0.75


def test_numpy_scalar_of_another_width_in_an_operator_eagerly():
    """Issue 10 (numpy_scalar): eagerly numpy's operators on an EagerTensor
    promoted a numpy scalar of another width (float32 * np.float64 was
    float64); traced, and through xtpu.math, it is TF's TypeError."""
    x = xtpu.constant(np.array([1.5, 2.0], np.float32))
    with pytest.raises(TypeError, match="operands must have the same dtype"):
        x * np.float64(2.0)
    with pytest.raises(TypeError, match="operands must have the same dtype"):
        np.float64(2.0) * x


_OPERATORS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "**": lambda a, b: a**b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
}
_OTHERS = {
    "np.float64": np.float64(2.0),
    "np.float32": np.float32(2.0),
    "np.int32": np.int32(2),
    "np.int64": np.int64(2),
    "float": 2.0,
    "int": 2,
    "0-d float64": np.array(2.0),
    "float64 list": [2.0, 0.5],
}


def _outcome(thunk):
    try:
        v = np.asarray(thunk())
    except TypeError:
        return "TypeError"
    return v.dtype, v.tolist()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("other", list(_OTHERS))
@pytest.mark.parametrize("op", list(_OPERATORS))
def test_operators_follow_one_dtype_rule_eagerly_and_traced(op, other, dtype):
    """Issue 10 (numpy_scalar): a Python operator on an EagerTensor gives
    what it gives traced, with the other operand on either side: the same
    dtype and values, or TypeError."""
    fn, y = _OPERATORS[op], _OTHERS[other]
    x = np.array([1.5, 3.0]).astype(dtype)
    for f in (lambda v: fn(v, y), lambda v: fn(y, v)):
        eager = _outcome(lambda: f(xtpu.constant(x)))
        compiled = _outcome(lambda: xtpu.replicate(lambda v: (f(v),), [[x]])[0][0])
        assert eager == compiled


@pytest.mark.parametrize("op", ["reduce_max", "reduce_min", "reduce_sum", "reduce_mean"])
def test_zero_size_reductions(op):
    """Issue 10: reductions over zero elements raised (found by the fuzzer as
    crashes, eager ValueError vs compiled XtpuRuntimeError)."""
    f = getattr(xtpu.math, op)
    eager, compiled = _both(lambda x: f(x, axis=0), np.zeros((0, 3), np.float32))
    assert fp.compare_values(eager, compiled) is None and eager.shape == (3,)


def test_non_finite_constants_through_the_text_round_trip():
    """Issue 10: NaN and infinities in constants, through lower().as_text()
    and xtpu-run, float32 and float64."""

    def f(x, y):
        return (
            x + xtpu.constant([np.nan, np.inf, -np.inf, -0.0], dtype=xtpu.float32),
            y * xtpu.constant(-np.inf, dtype=xtpu.float64, shape=[2]),
        )

    inputs = [[np.ones(4, np.float32), np.ones(2)]]
    want = xtpu.replicate(f, inputs)
    got = fp.xtpu_run(xtpu.lower(f, inputs).as_text(), inputs, timeout=20.0)
    for w, g in zip(want[0], got[0]):
        assert fp.compare_values(w, g) is None


def test_cross_replica_sum_eagerly_is_an_error():
    """Issue 10: eagerly there are no replicas to sum over (the fuzzer's
    reference emulates the sum instead)."""
    with pytest.raises(RuntimeError, match="inside a replicated computation"):
        xtpu.cross_replica_sum(np.float32(1.0))


def test_compiled_with_logical_devices():
    """Issue 10: Compiled.__call__ refused the inputs of a program split over
    2 cores (found by the fuzzer's round trip through the Compiled object)."""
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=2)
    inputs = [[np.ones((2, 4), np.float32)], [np.full((2, 4), 2.0, np.float32)]]

    def f(v):
        return xtpu.math.reduce_sum(xtpu.split_to_logical_devices(v, [1, 2]) * 2.0, axis=1)

    got = xtpu.lower(f, inputs, device_assignment=da).compile()(inputs)
    np.testing.assert_array_equal(got[1][0], [16.0, 16.0])


# --------------------------------------------------------------------------
# Regressions: defects the fuzzer found
# --------------------------------------------------------------------------


def test_watching_an_operator_result_of_rank_0():
    def comp(v):
        s = v + 1.0
        with xtpu.GradientTape() as tape:
            tape.watch(s)
            y = s * s
        return tape.gradient(y, s)

    eager, compiled = _both(comp, np.float32(2.0))
    assert compiled == 6.0 and eager == compiled


@pytest.mark.parametrize("op", ["cast", "reshape", "split_to_logical_devices"])
def test_identity_like_ops_return_eager_tensors(op):
    x = np.array([1.5, 2.0], np.float32)
    y = {
        "cast": lambda: xtpu.cast(x, xtpu.float32),
        "reshape": lambda: xtpu.reshape(x, [2]),
        "split_to_logical_devices": lambda: xtpu.split_to_logical_devices(x, [1]),
    }[op]()
    assert isinstance(y, xtpu.EagerTensor)
    with xtpu.GradientTape() as tape:
        tape.watch(y)
        z = xtpu.math.reduce_sum(y * y)
    np.testing.assert_allclose(tape.gradient(z, y), [3.0, 4.0])


def test_getitem_with_an_int_index_and_a_new_axis():
    """Found by the fuzzer (getitem_int_none): traced getitem skipped its
    final reshape when an int index and a None left the rank unchanged."""
    x = np.arange(6.0).reshape(3, 2)
    eager, compiled = _both(lambda v: v[0, :, None], x)
    assert eager.shape == (2, 1)
    assert fp.compare_values(eager, compiled) is None


def test_xtpu_run_lowers_a_host_op_in_a_branch():
    """Found by the fuzzer (xtpu_run_region_host_op): xtpu-run's needs_lowering
    looked for host-only ops only directly in the replicate body, so a print
    in an xtpu.cond branch was not lowered ('hlo.print' cannot run on the
    device)."""

    def f(v):
        def true_fn():
            xtpu.print(v, output_stream=fp.DEVNULL)
            return v

        return xtpu.cond(xtpu.math.greater(v, 0.0), true_fn, lambda: v)

    inputs = [[np.float32(1.5)]]
    assert fp.xtpu_run(xtpu.lower(f, inputs).as_text(), inputs, timeout=20.0)[0][0] == 1.5


def test_xtpu_run_on_a_lowered_module_with_logical_devices_and_a_host_cluster():
    """Found by the fuzzer (xtpu_run_relowers): a lowered module whose host
    replicate (a head or tail cluster) holds a host-only op counted as
    needing lowering, and lowering a module partitioned over 2 cores again
    broke it ('tpu.replicate' op result 0 has type tensor<2x1xf32>, but the
    body yields tensor<1x1xf32>)."""
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=1)

    def f(v):
        c = xtpu.constant([[0.5], [0.5]])
        xtpu.print(c, output_stream=fp.DEVNULL)
        return c, xtpu.split_to_logical_devices(c, [2, 1])

    inputs = [[np.zeros((2, 2), np.float32)]]
    text = xtpu.lower(f, inputs, device_assignment=da).compile().as_text()
    got = fp.xtpu_run(text, inputs, timeout=20.0)
    np.testing.assert_array_equal(got[0][1], [[0.5], [0.5]])


def test_xtpu_run_on_a_compiled_module_with_a_folded_string_constant():
    """Found by the fuzzer (seed 25, program 4828): tpu-fold-host-constants
    leaves a folded ``strings.format`` of constants as an
    ``hlo.string_constant`` in the device program, which xtpu-run took for
    host code still to outline and lowered the compiled module again: with
    2 cores per replica the fused program was refused ('fusion.region' op is
    formed by hlo-fuse-elementwise, the last pass)."""
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=1)

    def f(v):
        s = xtpu.strings.format("{}", [xtpu.constant([1])])
        return s, xtpu.math.tanh(v * 2.0 + 1.0) - v

    inputs = [[np.full((4, 2), 0.5, np.float32)]]
    compiled = xtpu.lower(f, inputs, device_assignment=da).compile()
    assert "hlo.string_constant" in compiled.as_text() and "fusion.region" in compiled.as_text()
    got = fp.xtpu_run(compiled.as_text(), inputs, timeout=20.0)
    assert got[0][0] == "[1]"
    np.testing.assert_allclose(got[0][1], np.tanh(2.0) - 0.5, rtol=1e-6)


def test_a_string_used_in_a_branch():
    def f(v):
        s = xtpu.strings.format("{}", v)
        return xtpu.cond(xtpu.math.greater(v, 0.0), lambda: xtpu.strings.to_number(s), lambda: v)

    eager, compiled = _both(f, np.float32(1.5))
    assert eager == compiled == 1.5


def test_a_string_result_made_in_the_body():
    def f(v):
        s = xtpu.strings.format("{}", v * 2.0)
        return s, xtpu.strings.to_number(s) * 2.0

    (compiled,) = xtpu.replicate(f, [[np.float32(1.5)]])
    eager = f(xtpu.constant(np.float32(1.5)))
    assert compiled[0] == eager[0] and compiled[1] == eager[1] == 6.0


@pytest.mark.parametrize(
    "in_shape,in_split,out_shape,out_split",
    [
        ((2, 0), None, (2, 0, 1), [2, 1, 1]),
        ((0, 4), [1, 2], (4, 0), [2, 1]),
        ((4, 0), [2, 1], (0, 2, 2), [1, 2, 1]),
        ((2, 3, 0), [2, 1, 1], (6, 0), None),
    ],
)
def test_spmd_partition_of_a_zero_size_reshape(in_shape, in_split, out_shape, out_split):
    """Found by the fuzzer (spmd_zero_size_reshape): tpu-spmd-partition's
    reshape rule divided by a zero dimension (ZeroDivisionError) when a
    zero-size reshape was split; split over 2 cores it equals the unsplit
    run (and the eager one)."""
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=2)

    def f(v, split):
        if split and in_split:
            v = xtpu.split_to_logical_devices(v, in_split)
        y = xtpu.reshape(v + 1.0, list(out_shape))
        if split and out_split:
            y = xtpu.split_to_logical_devices(y, out_split)
        return y * 2.0, xtpu.math.reduce_sum(y) + 1.0

    inputs = [[np.zeros(in_shape, np.float32)]] * 2
    got = xtpu.replicate(lambda v: f(v, True), inputs, device_assignment=da)
    want = xtpu.replicate(lambda v: f(v, False), inputs)
    eager = f(xtpu.constant(inputs[0][0]), False)
    for g, w in zip(got, want):
        for a, b, e in zip(g, w, eager):
            assert a.shape == b.shape == e.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, e)
    assert got[1][0].shape == out_shape and got[1][1] == 1.0


@pytest.mark.parametrize("control_flow", ["cond", "while_loop"])
def test_gradient_through_control_flow_with_an_unused_singular_output(control_flow):
    def f(x, v):
        with xtpu.GradientTape() as tape:
            tape.watch(v)
            if control_flow == "cond":
                _, y = xtpu.cond(xtpu.math.less(v, 1.0), lambda: (xtpu.math.log(v), x), lambda: (v, x))
            else:
                _, y = xtpu.while_loop(
                    lambda a, b: xtpu.constant(True),
                    lambda a, b: (xtpu.math.log(a), b * 1.0),
                    (v, x),
                    maximum_iterations=1,
                )
        return tape.gradient(y, v, unconnected_gradients=xtpu.UnconnectedGradients.ZERO)

    eager, compiled = _both(f, np.float64(2.0), np.float64(0.0))
    assert eager == 0.0 and compiled == 0.0


@pytest.mark.parametrize(
    "text,out_type",
    [("12147483647", "int32"), ("-2147483649", "int32"), ("9223372036854775808", "int64"), ("1_000", "int32")],
)
def test_to_number_out_of_range(text, out_type):
    """Found by the fuzzer (to_number_overflow): an integer out of the
    out_type's range raised numpy's OverflowError, eagerly and on the host;
    TF's StringToNumberOp fails to convert it (as it does Python's digit
    separators)."""
    with pytest.raises(ValueError, match=f"could not correctly convert string: {text}$"):
        xtpu.strings.to_number(text, out_type=out_type)

    def f(v):
        return xtpu.strings.to_number(xtpu.strings.format(text, []), out_type=out_type) + v

    from xtpu.runtime.errors import HostComputeError

    with pytest.raises(
        HostComputeError, match=f"ValueError: StringToNumberOp could not correctly convert string: {text}"
    ):
        xtpu.replicate(f, [[np.zeros((), out_type)]])


def test_to_number_at_the_ends_of_the_range():
    for out_type in ("int32", "int64"):
        info = np.iinfo(out_type)
        got = xtpu.strings.to_number([str(info.min), str(info.max)], out_type=out_type)
        assert got.dtype == np.dtype(out_type) and got.tolist() == [info.min, info.max]


@pytest.mark.parametrize("control_flow", ["cond", "while_loop"])
def test_gradient_of_a_value_captured_by_a_region_that_does_not_run(control_flow):
    def f(x, v):
        with xtpu.GradientTape() as tape:
            tape.watch(v)
            t = xtpu.math.log(v)
            if control_flow == "cond":
                y = xtpu.cond(xtpu.math.less(x, 0.0), lambda: t * 2.0, lambda: v * 3.0)
            else:
                (y,) = xtpu.while_loop(
                    lambda a: xtpu.constant(True), lambda a: (a + t,), (v * 3.0,), maximum_iterations=0
                )
        return tape.gradient(y, v)

    # TF's semantics, eager and graph alike: eagerly the tape never reaches
    # log (the branch taken, the loop that ran zero times, does not use t),
    # so d/dv = 3; in graph mode (tf.function, TPU computations) cond_v2 /
    # while_v2's gradient gives t a zero cotangent, and log's partial at 0
    # makes it 0 * inf = NaN, which compiled programs compute as TF does.
    eager, compiled = _both(f, np.float64(1.0), np.float64(0.0))
    assert eager == 3.0 and np.isnan(compiled)
    eager, compiled = _both(f, np.float64(1.0), np.float64(2.0))
    assert eager == compiled == 3.0


def _loop_with_unused_singular_values(a, b, c, d, w, iterations):
    """(a, b, c, d) -> (a * b, tanh(b) * w, log(c), d * c) ``iterations``
    times: a and b do not depend on c and d, whose partials become infinite
    (c reaches 0, then -inf)."""
    return xtpu.while_loop(
        lambda a, b, c, d: xtpu.constant(True),
        lambda a, b, c, d: (a * b, xtpu.math.tanh(b) * w, xtpu.math.log(c), d * c),
        (a, b, c, d),
        maximum_iterations=iterations,
    )


@pytest.mark.parametrize("iterations", [1, 3])
def test_while_loop_gradient_carries_only_the_live_loop_values(iterations):
    """cf_zero_cotangent_nan: the reverse loop carries the cotangents of a
    and b (b by the fixed point: a's next value depends on it) and none of c
    and d; the gradients wrt a, b and the captured w match central finite
    differences, those wrt c and d are zero (nothing reaches them)."""

    def f(a, b, c, d, w):
        with xtpu.GradientTape() as tape:
            tape.watch([a, b, c, d, w])
            ra, _, rc, rd = _loop_with_unused_singular_values(a, b, c, d, w, iterations)
            y = ra * 3.0
        return tape.gradient(y, [a, b, c, d, w], unconnected_gradients=xtpu.UnconnectedGradients.ZERO)

    args = [np.float64(0.7), np.float64(0.4), np.float64(1.0), np.float64(2.0), np.float64(1.3)]
    eager = [np.asarray(g) for g in f(*[xtpu.constant(a) for a in args])]
    (compiled,) = xtpu.replicate(f, [args])

    def value(*xs):
        ra = _loop_with_unused_singular_values(*[xtpu.constant(x) for x in xs], iterations)[0]
        return 3.0 * float(ra)

    eps = 1e-6
    fd = []
    for k in (0, 1, 4):
        hi, lo = list(args), list(args)
        hi[k], lo[k] = args[k] + eps, args[k] - eps
        fd.append((value(*hi) - value(*lo)) / (2 * eps))
    for grads in (eager, compiled):
        assert np.all(np.isfinite(grads))
        np.testing.assert_allclose([grads[0], grads[1], grads[4]], fd, rtol=1e-6)
        assert grads[2] == 0.0 and grads[3] == 0.0


def test_while_loop_gradient_of_a_value_that_depends_on_a_singular_one():
    """The fixed point does not drop a loop value that a live one depends
    on: with d the target, c is live and its infinite partial is real (the
    gradient wrt c is the one finite differences give where it is finite)."""

    def f(c, d):
        with xtpu.GradientTape() as tape:
            tape.watch([c, d])
            _, _, _, rd = _loop_with_unused_singular_values(c * 0.0, c * 0.0, c, d, 1.0, 2)
        return tape.gradient(rd, [c, d])

    args = [np.float64(2.0), np.float64(0.5)]
    (compiled,) = xtpu.replicate(f, [args])
    eager = f(*[xtpu.constant(a) for a in args])
    # rd = d * c * log(c): d(rd)/dc = d * (log(c) + 1), d(rd)/dd = c * log(c)
    want = [0.5 * (np.log(2.0) + 1.0), 2.0 * np.log(2.0)]
    np.testing.assert_allclose(compiled, want, rtol=1e-12)
    np.testing.assert_allclose([np.asarray(g) for g in eager], want, rtol=1e-12)


def test_formatted_zeros_compare_without_their_sign():
    """A cotangent of a branch not taken is 0 negated (-0.0) compiled where
    the eager tape's unconnected zero is +0.0; formatted, only the sign
    differs, as the float comparison already allows (program 5461, seed 12)."""
    s = lambda *v: np.array(list(v), dtype=object)  # noqa: E731
    assert fp.compare_values(s("a0b1", "[0.5 0]"), s("a-0b1", "[0.5 -0]")) is None
    assert fp.compare_values(s("-0.0e+00"), s("0.0e+00")) is None
    for a, b in [("-0.5", "0.5"), ("1-0", "10"), ("-01", "01"), ("-0.01", "0.01")]:
        assert fp.compare_values(s(a), s(b)) is not None
