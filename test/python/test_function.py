"""xtpu.function (issue 15): TF's tf.function tracing rules, strategy.run and
distributed iterators compiled into one program, IR inspection."""

import logging

import numpy as np
import pytest

import xtpu


def test_traces_once_per_signature_and_python_value():
    calls = []

    @xtpu.function
    def f(x, k):
        calls.append(1)
        return x * k + 1.0

    x3 = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(f(x3, 2.0), x3 * 2 + 1)
    np.testing.assert_allclose(f(x3 + 1, 2.0), (x3 + 1) * 2 + 1)  # same signature: no retrace
    assert f.experimental_get_tracing_count() == 1 and len(calls) == 1
    f(np.ones(4, np.float32), 2.0)  # new shape
    assert f.experimental_get_tracing_count() == 2
    f(x3, 3.0)  # new Python value
    assert f.experimental_get_tracing_count() == 3
    f(x3.astype(np.float64), 3.0)  # new dtype
    assert f.experimental_get_tracing_count() == 4
    f(x3, 2.0)  # an old signature again: cached
    assert f.experimental_get_tracing_count() == 4
    assert len(calls) == 4


def test_result_is_an_eager_tensor_equal_to_eager_execution():
    def body(x, y):
        return {"s": xtpu.math.reduce_sum(x * y), "m": xtpu.matmul(x, y)}

    f = xtpu.function(body)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 3, 3)).astype(np.float32)
    got, want = f(x, y), body(x, y)
    assert isinstance(got["s"], xtpu.EagerTensor)
    np.testing.assert_allclose(got["s"], want["s"], rtol=1e-6)
    np.testing.assert_allclose(got["m"], x @ y, rtol=1e-6)


def test_input_signature_accepts_compatible_and_rejects_others():
    @xtpu.function(input_signature=[xtpu.TensorSpec([None], xtpu.float32)])
    def f(x):
        return x + 1.0

    np.testing.assert_allclose(f(np.zeros(2, np.float32)), [1, 1])
    np.testing.assert_allclose(f(np.zeros(5, np.float32)), np.ones(5))
    with pytest.raises(TypeError, match="not compatible with the input_signature"):
        f(np.zeros(2, np.int32))
    with pytest.raises(TypeError, match="not compatible"):
        f(np.zeros((2, 2), np.float32))
    with pytest.raises(TypeError, match="takes 1 positional"):
        f(np.zeros(2, np.float32), np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="xtpu.TensorSpec"):
        xtpu.function(lambda x: x, input_signature=[np.zeros(2)])


def test_get_concrete_function_traces_without_running_and_shows_ir():
    ran = []

    @xtpu.function(jit_compile=True, reduce_retracing=True)
    def f(x):
        ran.append(1)
        return xtpu.math.exp(x)

    cf = f.get_concrete_function(xtpu.TensorSpec([2, 3], "float32"))
    assert f.experimental_get_tracing_count() == 1
    assert "hlo.exponential" in cf.lowered.as_text()
    assert "tensor<2x3xf32>" in cf.as_text()
    assert cf.structured_input_signature == ((xtpu.TensorSpec((2, 3), "float32"),), {})
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(cf(x), np.exp(x), rtol=1e-6)  # reuses the trace
    assert f.experimental_get_tracing_count() == 1
    assert "hlo.exponential" in f.experimental_get_compiler_ir(x)(stage="hlo")
    with pytest.raises(ValueError, match="unknown dimensions"):
        f.get_concrete_function(xtpu.TensorSpec([None, 3], "float32"))


def test_more_than_five_traces_warn_naming_function_and_change(caplog):
    @xtpu.function
    def scale_by(x, k):
        return x * k

    x = np.ones(2, np.float32)
    with caplog.at_level(logging.WARNING, logger="xtpu"):
        for k in range(5):
            scale_by(x, float(k))
        assert not [r for r in caplog.records if "scale_by" in r.getMessage()]
        scale_by(x, 9.0)
    msgs = [r.getMessage() for r in caplog.records if "scale_by" in r.getMessage()]
    assert len(msgs) == 1
    assert "6 traces" in msgs[0] and "argument 1 changed from the Python value 4.0 to the Python value 9.0" in msgs[0]


def test_strategy_run_compiles_into_the_function_program():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        w = xtpu.Variable(np.ones(3, np.float32), aggregation=xtpu.VariableAggregation.MEAN)

    def step(x):
        w.assign_add(x)
        return xtpu.math.reduce_sum(x * w)

    @xtpu.function
    def train(x):
        per = strategy.run(step, args=(x,))
        return strategy.reduce(xtpu.ReduceOp.SUM, per, axis=None), per

    xs = [np.full(3, 1, np.float32), np.full(3, 3, np.float32)]
    wv = np.ones(3, np.float32)
    for _ in range(3):
        total, per = train(xtpu.PerReplica(xs))
        wv = wv + (xs[0] + xs[1]) / 2  # MEAN aggregation of the replicas' updates
        want = [float(np.sum(x * wv)) for x in xs]
        assert [float(v) for v in per.values] == pytest.approx(want)
        assert float(total) == pytest.approx(sum(want))
        np.testing.assert_allclose(w.numpy(), wv)
    assert train.experimental_get_tracing_count() == 1
    text = train.lower(xtpu.PerReplica(xs)).as_text()
    assert text.count("tpu.replicate") == 1 and "n = 2" in text


def test_loop_over_distributed_iterator_is_one_program_with_one_input_per_batch():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        total = xtpu.Variable(0.0, aggregation=xtpu.VariableAggregation.SUM)

    def step(x):
        s = xtpu.math.reduce_sum(xtpu.cast(x, "float32"))
        total.assign_add(s)
        return s

    @xtpu.function
    def train(iterator, steps):
        for _ in range(steps):
            out = strategy.run(step, args=(next(iterator),))
        return strategy.reduce("SUM", out, axis=None)

    ds = xtpu.data.Dataset.range(64).batch(4, drop_remainder=True)
    it = iter(strategy.experimental_distribute_dataset(ds))
    # Global batches of 4 (2 per replica): a call takes 3 of them.
    assert float(train(it, 3)) == float(np.sum(np.arange(8, 12)))
    assert float(train(it, 3)) == float(np.sum(np.arange(20, 24)))
    assert float(total.numpy()) == float(np.sum(np.arange(24)))
    assert train.experimental_get_tracing_count() == 1
    # One program input per (replica, batch): 3 batches + the variable.
    text = train.get_concrete_function(it, 3).lowered.as_text()
    assert text.count("tensor<2xi64>") >= 3 and text.count("tpu.replicate") == 1


def test_iterating_an_iterator_inside_the_function_is_an_error():
    ds = xtpu.data.Dataset.range(8).batch(2)

    @xtpu.function
    def f(iterator):
        for x in iterator:
            return x

    with pytest.raises(TypeError, match="next\\(iterator\\)"):
        f(iter(xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=1)).experimental_distribute_dataset(ds)))


def test_nested_function_is_inlined():
    @xtpu.function
    def inner(x):
        return x * 2.0

    @xtpu.function
    def outer(x):
        return inner(x) + 1.0

    np.testing.assert_allclose(outer(np.ones(2, np.float32)), [3.0, 3.0])
    assert inner.experimental_get_tracing_count() == 0
    assert outer.lower(np.ones(2, np.float32)).as_text().count("tpu.replicate") == 1


def test_strategy_run_inside_replicate_still_raises():
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=1))
    with pytest.raises(ValueError, match="cannot be called inside a replicated computation"):
        xtpu.replicate(lambda: s.run(lambda: 1.0))


def test_a_retrace_for_optimizer_slots_takes_each_batch_once():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        w = xtpu.Variable(np.ones(2, np.float32))
        opt = xtpu.optimizers.SGD(0.1, momentum=0.9)  # slots are made while the first call is traced

    def step(x):
        with xtpu.GradientTape() as tape:
            loss = xtpu.reduce_sum(w * xtpu.cast(x, "float32"))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return x

    @xtpu.function
    def train(iterator):
        return strategy.run(step, args=(next(iterator),))

    it = iter(
        strategy.experimental_distribute_dataset(
            xtpu.data.Dataset.range(40).batch(4).map(lambda b: xtpu.reshape(b, [2, 2]))
        )
    )
    first = train(it)
    np.testing.assert_array_equal(first.values[0], [[0, 1]])
    np.testing.assert_array_equal(train(it).values[1], [[6, 7]])
    assert train.experimental_get_tracing_count() == 1
    assert len(strategy._variables) == 3  # w, the iterations and the momentum slot


def test_unhashable_python_arguments_count_by_identity_and_stay_distinct():
    @xtpu.function
    def f(x, cfg):
        return x * cfg["scale"]

    x = np.ones(2, np.float32)
    outs = [float(f(x, {"scale": float(k)})[0]) for k in range(3)]  # a new dict each call
    assert outs == [0.0, 1.0, 2.0] and f.experimental_get_tracing_count() == 3
    cfg = {"scale": 5.0}
    assert float(f(x, cfg)[0]) == 5.0 and float(f(x, cfg)[0]) == 5.0
    assert f.experimental_get_tracing_count() == 4


def test_host_variables_written_in_the_function_are_program_inputs_and_outputs():
    step = xtpu.Variable(np.int64(0))  # outside any strategy scope: a host variable
    total = xtpu.Variable(np.float32(0.0))

    @xtpu.function
    def f(x):
        step.assign_add(1)
        total.assign_add(xtpu.reduce_sum(x))
        return total.read_value() * 2.0

    x = np.arange(3, dtype=np.float32)
    for k in range(1, 4):
        assert float(f(x)) == 2.0 * 3.0 * k
        assert int(step.numpy()) == k and float(total.numpy()) == 3.0 * k
    total.assign(10.0)  # host writes between calls are seen by the next call
    assert float(f(x)) == 26.0
    assert f.experimental_get_tracing_count() == 1

    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))
    calls = xtpu.Variable(np.int64(0))

    @xtpu.function
    def g(v):
        s.run(lambda y: calls.assign_add(np.int64(1)), args=(v,))  # once per replica, as each replica's update
        return calls.read_value()

    assert int(g(xtpu.PerReplica([np.float32(r) for r in range(4)]))) == 4 and int(calls.numpy()) == 4


def test_get_next_as_optional_inside_the_function():
    # TF's DistributedIterator.get_next_as_optional in a tf.function: has_value
    # is False once the data ends (the step is skipped under a cond); an
    # unguarded get_value of an empty Optional is TF's error.
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        total = xtpu.Variable(0.0, aggregation=xtpu.VariableAggregation.SUM)

    def step(x):
        s = xtpu.math.reduce_sum(xtpu.cast(x, "float32"))
        total.assign_add(s)  # inside the cond's branch: applied only when it runs
        return s

    @xtpu.function
    def train(iterator):
        opt = iterator.get_next_as_optional()

        def run():
            return strategy.reduce("SUM", strategy.run(step, args=(opt.get_value(),)), axis=None)

        return opt.has_value(), xtpu.cond(opt.has_value(), run, lambda: xtpu.constant(-1.0))

    ds = xtpu.data.Dataset.range(12).batch(4, drop_remainder=True)
    it = iter(strategy.experimental_distribute_dataset(ds))
    got = [train(it) for _ in range(4)]
    want = [(True, float(np.sum(np.arange(4 * k, 4 * k + 4)))) for k in range(3)] + [(False, -1.0)]
    assert [(bool(h), float(v)) for h, v in got] == want
    assert float(total.numpy()) == float(np.sum(np.arange(12)))
    assert train.experimental_get_tracing_count() == 1

    @xtpu.function
    def unguarded(iterator):
        opt = iterator.get_next_as_optional()
        return strategy.run(lambda x: x * 2, args=(opt.get_value(),))

    it = iter(strategy.experimental_distribute_dataset(xtpu.data.Dataset.range(4).batch(4)))
    out = unguarded(it)
    assert [np.asarray(v).tolist() for v in out.values] == [[0, 2], [4, 6]]
    with pytest.raises(ValueError, match="get_value\\(\\) of an empty Optional .*The optional does not have a value"):
        unguarded(it)
    empty = xtpu.data.Dataset.range(4).batch(4, drop_remainder=True).take(0)
    h, v = train(iter(strategy.experimental_distribute_dataset(empty)))  # traced already: the call's pull is empty
    assert (bool(h), float(v)) == (False, -1.0)
    with pytest.raises(ValueError, match="exhausted when the function is traced"):
        xtpu.function(unguarded.python_function)(iter(strategy.experimental_distribute_dataset(empty)))


def test_variable_updates_in_a_cond_branch_apply_only_when_it_runs():
    # TF's tf.cond with an assign in a branch: in strategy.run and in an
    # xtpu.function, the variable's value after the cond is the taken branch's.
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        v = xtpu.Variable(1.0, aggregation=xtpu.VariableAggregation.MEAN)
    host = xtpu.Variable(0.0)

    def step(x):
        def double():
            v.assign(v * 2.0)
            return v.read_value()

        def add():
            v.assign_add(x)
            return v.read_value() + 100.0

        return xtpu.cond(x > 0.0, double, add)

    xs = [np.float32(3.0), np.float32(5.0)]
    out = strategy.run(step, args=(xtpu.PerReplica(xs),))
    assert [float(o) for o in out.values] == [2.0, 2.0] and float(v.numpy()) == 2.0
    out = strategy.run(step, args=(xtpu.PerReplica([-x for x in xs]),))
    assert [float(o) for o in out.values] == [98.0, 98.0] and float(v.numpy()) == -2.0  # 2 + MEAN(-3, -5)

    @xtpu.function
    def f(flag):
        xtpu.cond(flag, lambda: host.assign_add(1.0), lambda: host.assign_sub(10.0))
        return host.read_value()

    assert [float(f(np.bool_(b))) for b in (True, True, False)] == [1.0, 2.0, -8.0]
    assert float(host.numpy()) == -8.0


def test_variable_update_in_a_while_loop_body_is_a_clear_error():
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        v = xtpu.Variable(0.0, aggregation=xtpu.VariableAggregation.ONLY_FIRST_REPLICA)

    def step():
        def body(i):
            v.assign_add(1.0)
            return i + 1

        return xtpu.while_loop(lambda i: i < 3, body, (np.int32(0),))

    with pytest.raises(NotImplementedError, match=f"while_loop: variable '{v.name}' is updated inside the loop body"):
        strategy.run(step)
    assert float(v.numpy()) == 0.0
