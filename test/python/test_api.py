"""The Python API against TF's documented behaviour (the seeds)."""

import numpy as np
import pytest

import xtpu


def seed_computation(x):
    x = x + 1
    return xtpu.math.reduce_mean(x)


def test_seed_replicate_example():
    # tpu_replicate.txt: replicate(computation, inputs=[[x], [y]]) with
    # x = [1., 2., 3.], y = [4., 5., 6.] gives (3.0,) and (6.0,).
    x = np.array([1.0, 2.0, 3.0], np.float32)
    y = np.array([4.0, 5.0, 6.0], np.float32)
    out = xtpu.replicate(seed_computation, inputs=[[x], [y]])
    assert len(out) == 2
    assert isinstance(out[0], tuple) and len(out[0]) == 1
    assert out[0][0] == pytest.approx(np.mean(x + 1)) and out[0][0].dtype == np.float32
    assert out[1][0] == pytest.approx(np.mean(y + 1))
    assert float(out[0][0]) == 3.0 and float(out[1][0]) == 6.0


def computation_with_string_ops(x):
    output = xtpu.strings.format("1{}", x)
    return xtpu.strings.to_number(output)


def tpu_computation():
    return xtpu.outside_compilation(computation_with_string_ops, 1)


def test_seed_outside_compilation_example_replicated_and_eager():
    # tpu_outside_compilation.txt: "Expected output is 11."
    assert float(tpu_computation()) == 11.0  # eager: outside_compilation just calls
    out = xtpu.replicate(tpu_computation)
    assert float(out[0][0]) == 11.0
    out = xtpu.replicate(tpu_computation, [[], [], []])
    assert [float(o[0]) for o in out] == [11.0, 11.0, 11.0]


def test_inputs_none_means_one_replica_without_inputs():
    out = xtpu.replicate(lambda: xtpu.constant(2.0) * 3.0)
    assert len(out) == 1 and float(out[0][0]) == 6.0


def test_bare_value_per_replica_is_one_input():
    out = xtpu.replicate(lambda x: x * 2, [np.int32(1), np.int32(2)])
    assert [int(o[0]) for o in out] == [2, 4]


def test_output_structures_follow_the_seed():
    x = np.arange(3, dtype=np.float32)
    none_out = xtpu.replicate(lambda x: None, [[x], [x]])
    assert none_out == [None, None]
    pair = xtpu.replicate(lambda x: (x, x * 2), [[x]])[0]
    assert isinstance(pair, tuple) and len(pair) == 2
    np.testing.assert_array_equal(pair[1], x * 2)
    nested = xtpu.replicate(lambda x: {"a": x, "b": [x + 1, (x * 3,)]}, [[x], [x + 10]])
    np.testing.assert_array_equal(nested[1]["b"][1][0], (x + 10) * 3)
    np.testing.assert_array_equal(nested[0]["b"][0], x + 1)


def test_nested_inputs_keep_their_structure():
    def f(pair, d):
        a, b = pair
        return a * b + d["c"]

    x = np.array([1.0, 2.0], np.float32)
    out = xtpu.replicate(f, [[(x, x), {"c": x}], [(x + 1, x), {"c": x}]])
    np.testing.assert_array_equal(out[1][0], (x + 1) * x + x)


def test_unequal_numbers_of_inputs_is_a_value_error():
    x = np.float32(1)
    with pytest.raises(ValueError, match="Replica 0 had 2 inputs, replica 1 had 1 inputs"):
        xtpu.replicate(lambda a, b: a + b, [[x, x], [x]])


def test_input_count_must_match_the_parameters():
    x = np.float32(1)
    with pytest.raises(ValueError, match="cannot be called with the specified inputs"):
        xtpu.replicate(lambda a, b: a + b, [[x], [x]])


def test_unequal_shapes_across_replicas_is_a_value_error():
    with pytest.raises(ValueError, match="replica 1"):
        xtpu.replicate(lambda a: a, [[np.zeros(2, np.float32)], [np.zeros(3, np.float32)]])


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"maximum_shapes": [None]}, "structure of maximum_shapes"),
        ({"padding_spec": "POWER_OF_TWO"}, "padding_spec must be a PaddingSpec"),
    ],
)
def test_bad_padding_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        xtpu.replicate(lambda: xtpu.constant(1.0), **kwargs)


def test_nested_outside_compilation_is_not_implemented():
    def inner():
        return xtpu.outside_compilation(lambda: xtpu.constant(1.0))

    with pytest.raises(NotImplementedError, match="Cannot nest outside_compilation clusters"):
        xtpu.replicate(lambda: xtpu.outside_compilation(inner))


def test_outside_compilation_moves_values_both_ways():
    def host(v, w):
        text = xtpu.strings.format("{}", v)
        return xtpu.strings.to_number(text) + w, v * 2

    def f(x):
        y = x * 3
        a, b = xtpu.outside_compilation(host, y, x)
        return a + b

    xs = [np.float32(1.5), np.float32(-2.0)]
    out = xtpu.replicate(f, [[x] for x in xs])
    for x, o in zip(xs, out):
        np.testing.assert_allclose(o[0], f(x), rtol=1e-6)
        np.testing.assert_allclose(o[0], (3 * x + x) + 2 * 3 * x, rtol=1e-6)


def test_values_defined_in_a_cluster_can_be_used_after_it():
    holder = {}

    def host(v):
        holder["t"] = v + 1  # not returned: still usable on the device later
        return v * 2

    def f(x):
        a = xtpu.outside_compilation(host, x)
        return a + holder["t"]

    out = xtpu.replicate(f, [[np.float32(2)], [np.float32(5)]])
    assert [float(o[0]) for o in out] == [2 * 2 + 3, 5 * 2 + 6]


def test_soft_placement_moves_string_ops_to_the_host():
    def f(x):
        return xtpu.strings.to_number(xtpu.strings.format("{}0", x))

    out = xtpu.replicate(f, [[np.int32(4)], [np.int32(7)]])
    assert [float(o[0]) for o in out] == [40.0, 70.0]
    stages = xtpu.lower(f, [[np.int32(4)]]).compile().stages
    assert '"auto0"' in stages["tpu-mark-outside-compilation"]


def test_print_runs_on_the_host_once_per_replica(capsys):
    def f(x):
        xtpu.print("value:", x)
        return x

    xtpu.replicate(f, [[np.int32(r)] for r in range(3)])
    lines = sorted(capsys.readouterr().out.splitlines())
    assert lines == ["value: 0", "value: 1", "value: 2"]


def test_cross_replica_sum_over_all_replicas_and_groups():
    xs = [np.array([r, 10 * r], np.float32) for r in range(4)]
    total = sum(xs)
    out = xtpu.replicate(lambda x: xtpu.cross_replica_sum(x), [[x] for x in xs])
    for o in out:
        np.testing.assert_array_equal(o[0], total)
    groups = [[0, 2], [1, 3]]
    out = xtpu.replicate(lambda x: xtpu.cross_replica_sum(x, groups), [[x] for x in xs])
    np.testing.assert_array_equal(out[0][0], xs[0] + xs[2])
    np.testing.assert_array_equal(out[3][0], xs[1] + xs[3])


@pytest.mark.parametrize(
    "groups, match",
    [
        ([[0, 1], [2]], "same size"),
        ([[0, 1], [1, 2]], "more than once"),
        ([[0, 1]], "misses replicas"),
        ([[0, 1, 2, 5]], "do not exist"),
    ],
)
def test_bad_group_assignment_is_a_value_error(groups, match):
    xs = [[np.float32(r)] for r in range(4)]
    with pytest.raises(ValueError, match=match):
        xtpu.replicate(lambda x: xtpu.cross_replica_sum(x, groups), xs)


def test_cross_replica_sum_outside_a_replicated_computation_raises():
    """TF's CrossReplicaSum has no kernel outside a TPU computation (eagerly
    NotFoundError); it used to return x here, silently."""
    x = np.array([1.0, 2.0], np.float32)
    match = r"cross_replica_sum must be called inside a replicated computation \(xtpu.replicate, xtpu.lower or strategy.run\)"
    with pytest.raises(RuntimeError, match=match):
        xtpu.cross_replica_sum(x)
    with pytest.raises(RuntimeError, match=match):
        xtpu.cross_replica_sum(x, group_assignment=[[0]])
    with pytest.raises(RuntimeError, match=match):
        xtpu.tpu.cross_replica_sum(x)
    # Inside one, a single replica's sum is its value.
    np.testing.assert_array_equal(xtpu.replicate(xtpu.cross_replica_sum, [[x]])[0][0], x)


def test_cross_replica_sum_raises_eagerly_under_a_tape_too():
    x = xtpu.constant(np.array([1.0, 2.0], np.float32))
    with xtpu.GradientTape() as tape:
        tape.watch(x)
        with pytest.raises(RuntimeError, match="must be called inside a replicated computation"):
            xtpu.cross_replica_sum(x * 2.0)


def test_cross_replica_sum_inside_strategy_run():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    out = strategy.run(lambda v: xtpu.cross_replica_sum(v), args=(np.float32(1.5),))
    assert [float(v) for v in out.values] == [3.0, 3.0]


def test_the_ops_eager_kernel_keeps_one_replica_semantics():
    """Binding tpu.cross_replica_sum directly (as gradient rules do when
    they are checked eagerly) still gives one replica's sum."""
    from xtpu.core.tracing import bind
    from xtpu.dialects.tpu import CrossReplicaSumOp

    x = np.array([1.0, 2.0], np.float32)
    (out,) = bind(CrossReplicaSumOp, [x], group_assignment=None)
    np.testing.assert_array_equal(out, x)


def test_lower_compile_and_stages():
    x = np.array([1.0, 2.0, 3.0], np.float32)
    lowered = xtpu.lower(seed_computation, [[x], [x + 3]])
    text = lowered.as_text()
    assert "tpu.replicate" in text and "{n = 2 : i64}" in text and "hlo.reduce" in text
    compiled = lowered.compile()
    from xtpu.passes import DEFAULT_PIPELINE, FUSION_PIPELINE

    assert list(compiled.stages) == list(DEFAULT_PIPELINE) + list(FUSION_PIPELINE)
    out = compiled([[x], [x + 3]])
    assert float(out[0][0]) == 3.0 and float(out[1][0]) == 6.0
    with pytest.raises(ValueError, match="compiled for 2 replicas"):
        compiled([[x]])


def test_lowered_cross_replica_sum_becomes_all_reduce():
    compiled = xtpu.lower(lambda x: xtpu.cross_replica_sum(x), [[np.float32(1)], [np.float32(2)]]).compile()
    text = compiled.as_text()
    assert "ccl.all_reduce" in text and "tpu.cross_replica_sum" not in text
    assert "dense<[[0, 1]]>" in text


def test_replicate_traces_once_per_signature():
    calls = []

    def f(x):
        calls.append(1)
        return x + 1

    for i in range(5):
        xtpu.replicate(f, [[np.float32(i)], [np.float32(i)]])
    assert len(calls) == 1
    xtpu.replicate(f, [[np.zeros(2, np.float32)], [np.zeros(2, np.float32)]])
    assert len(calls) == 2


def test_nested_replicate_is_rejected():
    def outer(x):
        return xtpu.replicate(lambda y: y, [[np.float32(1)]])

    with pytest.raises(ValueError, match="cannot be nested"):
        xtpu.replicate(outer, [[np.float32(1)]])


def test_traced_tensor_cannot_be_a_python_bool():
    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(TypeError, match="Python bool"):
        xtpu.replicate(f, [[np.float32(1)]])


def test_leaked_tensor_is_an_error():
    leaked = []
    xtpu.replicate(lambda x: leaked.append(x) or x, [[np.float32(1)]])
    with pytest.raises(RuntimeError, match="outside the replicated computation"):
        xtpu.math.add(leaked[0], 1.0)


def test_soft_placement_off_rejects_host_ops_with_the_source_line():
    def f(x):
        return xtpu.strings.to_number(xtpu.strings.format("{}", x))

    opts = xtpu.XLAOptions(allow_soft_placement=False)
    with pytest.raises(ValueError, match=r"hlo.string_format.*test_api.py:\d+"):
        xtpu.replicate(f, [[np.int32(1)]], xla_options=opts)


def test_a_cluster_must_end_in_the_control_flow_context_it_started_in():
    # The seed patch's check: outside_compilation raises when the
    # computation leaves a control-flow context open.
    from xdsl.ir import Block

    from xtpu.core.tracing import current_trace

    def leaves_a_context_open():
        current_trace().blocks.append(Block())
        return xtpu.constant(1.0)

    with pytest.raises(NotImplementedError, match="Control-flow context cannot be different at start and end"):
        xtpu.replicate(lambda: xtpu.outside_compilation(leaves_a_context_open))
