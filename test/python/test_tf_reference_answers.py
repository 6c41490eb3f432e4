"""xtpu against TensorFlow's own answers (issue 25): each test compares with
the value or error TF 2.21 on CPU gave, recorded in
test/data/issue25_tf_reference.json by test/data/gen_issue25_tf_reference.py
(MirroredStrategy over two logical CPU devices stands in for TPUStrategy: both
keep mirrored variables and run replica functions through
distribute_lib.StrategyExtendedV2)."""

import json
import pathlib

import numpy as np
import pytest

import xtpu

TF = json.loads((pathlib.Path(__file__).parents[1] / "data" / "issue25_tf_reference.json").read_text())


def tf_value(key):
    entry = TF[key]
    assert "value" in entry, entry
    return entry["value"]


# -- item 13: a numpy array on the left of | and & ----------------------------------------------


def _bitwise(v):
    a = np.array([True, False])
    return a | (v > 0), a & (v > 0)


def test_numpy_array_left_of_or_and_and_traces_as_tfs_tensor_operators():
    """TF: ``ndarray | tensor`` is the tensor's ``__ror__`` (Tensor's
    ``__array_priority__`` = 100 makes numpy defer), eagerly and in a
    tf.function; xtpu's traced tensor raised TypeError from numpy.bitwise_or."""
    ref = tf_value("13_numpy_left_of_bitwise_operator")
    (out,) = xtpu.replicate(_bitwise, [[np.array([-1.0, -1.0], np.float32)]])
    assert [o.tolist() for o in out] == [ref["function_or"], ref["function_and"]]
    eager = _bitwise(xtpu.constant([1.0, -1.0]))
    assert [np.asarray(e).tolist() for e in eager] == [ref["eager_or"], ref["eager_and"]]
    assert all(isinstance(e, xtpu.EagerTensor) for e in eager)  # TF: EagerTensor, not ndarray
    # integers: bitwise, as TF's Tensor.__rand__ (bitwise_and for ints)
    ((got,),) = xtpu.replicate(lambda v: np.array([1, 6], np.int32) & v, [[np.array([3, 3], np.int32)]])
    assert got.tolist() == [1, 2] == (np.array([1, 6]) & np.array([3, 3])).tolist()
    # a Python bool on the left (Tensor.__ror__ / __rand__)
    (t, f) = xtpu.replicate(lambda v: (True | (v > 0), False & (v > 0)), [[np.array([-1.0], np.float32)]])[0]
    assert t.tolist() == [True] and f.tolist() == [False]


# -- the strategy's and the function's semantics (items 2-11) ------------------------------------


@pytest.fixture
def s2():
    return xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))


def _floats(values):
    return [float(np.asarray(v)) for v in values]


def test_assign_in_a_function_without_run_updates_every_copy(s2):
    """Item 2: a cross-replica assign in a tf.function updates every
    component (TF: [5.0, 5.0]); xtpu updated the first copy only."""
    with s2.scope():
        v = xtpu.Variable(2.0)

    @xtpu.function
    def g():
        v.assign(5.0)

    g()
    assert _floats(s2.experimental_local_results(v)) == tf_value("2_assign_in_function_without_run")
    g()  # the second call runs the same program
    assert _floats(s2.experimental_local_results(v)) == [5.0, 5.0] and g.experimental_get_tracing_count() == 1


def test_a_function_running_two_strategies_stops_instead_of_retracing_forever():
    """Item 3: the retry that switched strategies bounced between the two
    (memory grew without bound).  TF runs both in one function (value
    recorded: s2's [2.0]); an xtpu.function's program runs one strategy's
    replicas, so xtpu raises at once, naming both, and traces nothing."""
    assert tf_value("3_function_running_two_strategies")["local_results"] == [2.0]
    r = xtpu.TPUClusterResolver(num_cores=2)
    t = xtpu.initialize_tpu_system(r)
    first = xtpu.TPUStrategy(r)
    second = xtpu.TPUStrategy(r, device_assignment=xtpu.DeviceAssignment.build(t, num_replicas=1))

    @xtpu.function
    def f():
        first.run(lambda: xtpu.constant(1.0))
        return second.run(lambda: xtpu.constant(2.0))

    with pytest.raises(ValueError, match="calls strategy.run of more than one strategy"):
        f()
    assert f.experimental_get_tracing_count() == 0
    # Each strategy from its own function works.
    one = xtpu.function(lambda: second.run(lambda: xtpu.constant(2.0)))
    assert _floats(second.experimental_local_results(one())) == [2.0]


def test_python_numbers_through_run_in_a_function_are_per_replica(s2):
    """Item 4: TF converts replica inputs and outputs to tensors, so each
    replica returns its own value (TF: [30.0, 30.0])."""

    @xtpu.function
    def step():
        return s2.run(lambda x: x + 5.0, args=(25.0,))

    assert _floats(s2.experimental_local_results(step())) == tf_value("4_python_number_through_run_in_function")

    @xtpu.function
    def constant_step():
        return s2.run(lambda: 7.0)

    assert _floats(s2.experimental_local_results(constant_step())) == [7.0, 7.0]


def test_a_python_list_of_traced_tensors_is_packed(s2):
    """Item 5: convert_to_tensor packs a list holding tensors (TF: [[4, 4]] per replica)."""
    ref = tf_value("5_python_list_through_run")
    got = s2.experimental_local_results(s2.run(lambda x: xtpu.math.square(x), args=([2.0, 2.0],)))
    assert [np.asarray(g).tolist() for g in got] == ref["eager"]

    @xtpu.function
    def step():
        return s2.run(lambda x: xtpu.math.square(x), args=([2.0, 2.0],))

    assert [np.asarray(g).tolist() for g in s2.experimental_local_results(step())] == ref["function"]
    # Nested lists mixing tensors and Python numbers take the tensors' dtype (TF's autopacking).
    ((packed,),) = xtpu.replicate(lambda x: xtpu.math.square([[x, 3.0], [x * 2, 1.0]]), [[np.float32(2)]])
    assert packed.dtype == np.float32 and packed.tolist() == [[4.0, 9.0], [16.0, 1.0]]
    with pytest.raises(ValueError, match="different shapes"):
        xtpu.replicate(lambda x: xtpu.math.square([x, xtpu.reshape(x, (1,))]), [[np.float32(2)]])


def test_tensorspec_takes_an_int_shape_and_nested_get_concrete_function():
    """Item 6: TensorSpec(shape=(1)) is the rank-1 shape [1]; a concrete
    function of a traced tensor inside another function (TF: [2.0, 4.0])."""
    ref = tf_value("6_tensorspec_int_shape_and_nested_concrete_function")
    assert list(xtpu.TensorSpec(shape=(1), dtype=xtpu.float32).shape) == ref["spec_shape"]

    @xtpu.function
    def inner(x):
        return x * 2.0

    @xtpu.function
    def outer(x):
        c = inner.get_concrete_function(x)
        return c(x)

    assert np.asarray(outer(xtpu.constant([1.0, 2.0]))).tolist() == ref["nested_concrete"]


def test_local_results_of_a_mirrored_variable_are_its_components(s2):
    """Item 7: TF returns the component variables (with assign, read_value
    and the replica's device); assigning one changes that copy only."""
    ref = tf_value("7_local_results_of_mirrored_variable")
    with s2.scope():
        v = xtpu.Variable(2.0)
    comps = s2.experimental_local_results(v)
    assert len(comps) == len(ref["types"]) and all(hasattr(c, "assign") for c in comps) == ref["has_assign"]
    assert [c.device for c in comps] == [s2.extended.worker_devices[i] for i in range(2)]
    assert comps[0].device != comps[1].device
    comps[1].assign(7.0)
    assert [float(c.read_value()) for c in s2.experimental_local_results(v)] == ref["after_component_assign"]
    # Each replica reads its own copy in the next step.
    assert _floats(s2.experimental_local_results(s2.run(lambda: v.read_value() + 1.0))) == [3.0, 8.0]


def test_summary_as_default_in_a_step_flushes_on_every_run(s2, tmp_path):
    """Item 8: TF's exit of as_default() in a traced step is a flush op, run
    each time (TF: the header and one event after one run, one more after
    the second); xtpu flushed once, while tracing."""
    from test_summary import read_events

    ref = tf_value("8_summary_as_default_in_run_flushes_each_run")
    w = xtpu.summary.create_file_writer(str(tmp_path))

    def step():
        with w.as_default():
            xtpu.summary.scalar("x", 1.0, step=0)

    def events():
        return len(read_events(str(tmp_path)))  # the file's header event and the scalars (TF counts both)

    s2.run(step)
    assert events() == ref["events_after_one_run"]
    s2.run(step)
    assert events() == ref["events_after_two_runs"]

    @xtpu.function
    def f():
        step()

    f()
    assert events() == ref["events_after_two_runs"] + 1


def test_too_many_positional_arguments_is_tfs_value_error(s2):
    """Item 9: TPUStrategy.run's own check (tpu_strategy.py
    _maybe_partial_apply_variables), with and without variables."""
    ref = tf_value("9_too_many_positional_arguments")
    for case in ("no_variables", "with_variable"):
        assert ref[case]["error"] == "ValueError"
    message = ref["no_variables"]["message"]
    with pytest.raises(ValueError) as info:
        s2.run(lambda x: x, args=(1.0, 2.0))
    assert str(info.value) == message
    with s2.scope():
        v = xtpu.Variable(1.0)
    with pytest.raises(ValueError) as info:
        s2.run(lambda x: x.read_value(), args=(v, 2.0))
    assert str(info.value) == ref["with_variable"]["message"]

    @xtpu.function
    def step():
        return s2.run(lambda x: x, args=(1.0, 2.0))

    with pytest.raises(ValueError, match="Too many positional arguments"):
        step()


def test_returning_a_variable_from_the_replica_function_returns_its_value(s2):
    """Item 10: TF returns the replica's value (TF: [2.0, 2.0])."""
    with s2.scope():
        v = xtpu.Variable(2.0)
    assert _floats(s2.experimental_local_results(s2.run(lambda: v))) == tf_value("10_return_variable_from_replica_fn")

    @xtpu.function
    def step():
        return s2.run(lambda: v)

    assert _floats(s2.experimental_local_results(step())) == [2.0, 2.0]


def test_an_on_read_variable_may_be_trainable(s2):
    """Item 11: tf.Variable keeps trainable=True with ON_READ, in and out of a scope."""
    ref = tf_value("11_on_read_trainable_variable")
    sync = xtpu.VariableSynchronization.ON_READ
    assert xtpu.Variable(1.0, synchronization=sync, trainable=True).trainable is ref["trainable"]
    with s2.scope():
        w = xtpu.Variable(1.0, synchronization=sync, aggregation=xtpu.VariableAggregation.SUM, trainable=True)
    assert w.trainable is ref["in_scope_trainable"]


# -- bounded retracing ----------------------------------------------------------------------------


def test_a_function_that_keeps_retracing_raises_past_the_limit(monkeypatch):
    """TF warns when a function retraces often (TF: 8 traces of f(i) over 8
    Python ints, with its retracing warning); xtpu raises past
    $XTPU_MAX_TRACES instead of compiling and keeping a program per call."""
    ref = tf_value("retracing_warning")
    assert ref == {"traces": 8, "warned": True}
    monkeypatch.setenv("XTPU_MAX_TRACES", "4")

    @xtpu.function
    def f(x):
        return x + 1

    for i in range(4):
        assert int(np.asarray(f(i))) == i + 1
    with pytest.raises(RuntimeError, match=r"traced 4 times, the limit .*argument 0 changed"):
        f(4)
    assert f.experimental_get_tracing_count() == 4
    assert int(np.asarray(f(2))) == 3  # a signature traced before still runs
