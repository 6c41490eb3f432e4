"""Generates issue25_tf_reference.json: TensorFlow's answers to issue 25's items.

Run with TensorFlow 2.x on CPU (not from the suite):

    /work/tfvenv/bin/python test/data/gen_issue25_tf_reference.py

TPUStrategy needs a TPU, so the reference is ``tf.distribute.MirroredStrategy``
over two logical CPU devices: it shares TPUStrategy's variable, replica-context
and ``run`` semantics (both derive from ``StrategyExtendedV2`` in
tensorflow/python/distribute/distribute_lib.py and keep mirrored variables
with tensorflow/python/distribute/values.py).  Each entry records what TF
returned or the type and message of what it raised.
"""

import json
import os
import pathlib
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
DEVICES = ["/cpu:0", "/cpu:1"]


def strategy(devices=DEVICES):
    return tf.distribute.MirroredStrategy(devices)


def local(s, x):
    return [np.asarray(r).tolist() for r in s.experimental_local_results(x)]


def outcome(fn):
    try:
        return {"value": fn()}
    except Exception as e:  # noqa: BLE001 - the reference records whatever TF raises
        return {"error": type(e).__name__, "message": str(e).splitlines()[0]}


ref = {"tensorflow": tf.__version__, "strategy": "MirroredStrategy over 2 logical CPU devices"}


def item2():
    s = strategy()
    with s.scope():
        v = tf.Variable(2.0)

    @tf.function
    def g():
        v.assign(5.0)

    g()
    return local(s, v)


ref["2_assign_in_function_without_run"] = outcome(item2)


def item3():
    s1 = strategy()
    s2 = strategy(["/cpu:0"])

    @tf.function
    def f():
        s1.run(lambda: tf.constant(1.0))
        return s2.run(lambda: tf.constant(2.0))

    out = f()
    traces = f.experimental_get_tracing_count()
    f()
    return {
        "local_results": local(s2, out),
        "traces_after_two_calls": f.experimental_get_tracing_count(),
        "traces_after_one": traces,
    }


ref["3_function_running_two_strategies"] = outcome(item3)


def item4():
    s = strategy()

    @tf.function
    def step():
        return s.run(lambda x: x + 5.0, args=(25.0,))

    return local(s, step())


ref["4_python_number_through_run_in_function"] = outcome(item4)


def item5():
    s = strategy()
    eager = local(s, s.run(lambda x: tf.math.square(x), args=([2.0, 2.0],)))

    @tf.function
    def step():
        return s.run(lambda x: tf.math.square(x), args=([2.0, 2.0],))

    return {"eager": eager, "function": local(s, step())}


ref["5_python_list_through_run"] = outcome(item5)


def item6():
    spec = tf.TensorSpec(shape=(1), dtype=tf.float32)

    @tf.function
    def inner(x):
        return x * 2.0

    @tf.function
    def outer(x):
        c = inner.get_concrete_function(x)
        return c(x)

    return {"spec_shape": spec.shape.as_list(), "nested_concrete": outer(tf.constant([1.0, 2.0])).numpy().tolist()}


ref["6_tensorspec_int_shape_and_nested_concrete_function"] = outcome(item6)


def item7():
    s = strategy()
    with s.scope():
        v = tf.Variable(2.0)
    comps = s.experimental_local_results(v)
    out = {
        "types": [type(c).__name__ for c in comps],
        "devices": [c.device for c in comps],
        "has_assign": all(hasattr(c, "assign") for c in comps),
    }
    comps[1].assign(7.0)
    out["after_component_assign"] = [float(c.read_value()) for c in comps]
    return out


ref["7_local_results_of_mirrored_variable"] = outcome(item7)


def item8():
    s = strategy()
    logdir = tempfile.mkdtemp()
    w = tf.summary.create_file_writer(logdir)

    def step():
        with w.as_default():
            tf.summary.write("x", 1.0, step=0)  # tf.summary.scalar needs TensorBoard; write is core TF

    s.run(step)
    after_one = sum(1 for f in os.listdir(logdir) for _ in tf.compat.v1.train.summary_iterator(os.path.join(logdir, f)))
    s.run(step)
    after_two = sum(1 for f in os.listdir(logdir) for _ in tf.compat.v1.train.summary_iterator(os.path.join(logdir, f)))
    return {"events_after_one_run": after_one, "events_after_two_runs": after_two}


ref["8_summary_as_default_in_run_flushes_each_run"] = outcome(item8)


def item9():
    # TPUStrategy.run checks the count before it replicates
    # (tpu_strategy.py _maybe_partial_apply_variables, called from TPUStrategy.run);
    # MirroredStrategy leaves it to Python's TypeError, so TPUStrategy's check is called itself.
    from tensorflow.python.distribute import tpu_strategy

    s = strategy()
    with s.scope():
        v = tf.Variable(1.0)
    return {
        "no_variables": outcome(
            lambda: tpu_strategy._maybe_partial_apply_variables(lambda x: x, (1.0, 2.0), {}) and None
        ),
        "with_variable": outcome(
            lambda: tpu_strategy._maybe_partial_apply_variables(lambda x: x, (v, 2.0), {}) and None
        ),
        "mirrored_strategy": outcome(lambda: s.run(lambda x: x, args=(1.0, 2.0))),
    }


ref["9_too_many_positional_arguments"] = outcome(item9)


def item10():
    s = strategy()
    with s.scope():
        v = tf.Variable(2.0)
    return local(s, s.run(lambda: v))


ref["10_return_variable_from_replica_fn"] = outcome(item10)


def item11():
    v = tf.Variable(1.0, synchronization=tf.VariableSynchronization.ON_READ, trainable=True)
    s = strategy()
    with s.scope():
        w = tf.Variable(
            1.0,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM,
            trainable=True,
        )
    return {"trainable": v.trainable, "in_scope_trainable": w.trainable, "in_scope_type": type(w).__name__}


ref["11_on_read_trainable_variable"] = outcome(item11)


def item13():
    a = np.array([True, False])
    eager = a | (tf.constant([1.0, -1.0]) > 0)
    eager_and = a & (tf.constant([1.0, -1.0]) > 0)

    @tf.function
    def f(v):
        return a | (v > 0), a & (v > 0)

    o, n = f(tf.constant([-1.0, -1.0]))
    return {
        "eager_or_type": type(eager).__name__,
        "eager_or": np.asarray(eager).tolist(),
        "eager_and": np.asarray(eager_and).tolist(),
        "function_or": o.numpy().tolist(),
        "function_and": n.numpy().tolist(),
    }


ref["13_numpy_left_of_bitwise_operator"] = outcome(item13)


def retracing():
    import logging

    records = []

    class H(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    tf.get_logger().addHandler(H())

    @tf.function
    def f(x):
        return x + 1

    for i in range(8):
        f(i)  # a Python int is part of the signature: each call retraces
    return {"traces": f.experimental_get_tracing_count(), "warned": any("retracing" in m for m in records)}


ref["retracing_warning"] = outcome(retracing)

out = pathlib.Path(__file__).with_name("issue25_tf_reference.json")
out.write_text(json.dumps(ref, indent=1, sort_keys=True) + "\n")
print(json.dumps(ref, indent=1, sort_keys=True))
