"""TPUStrategy's TF 2 details (issue 15), each with the value or the error
TF documents (tensorflow/python/distribute/tpu_strategy.py,
tpu_strategy_util.py, distribute_lib.py)."""

import logging
import re

import numpy as np
import pytest

import xtpu


def test_cluster_resolver_has_tfs_positional_order():
    local = xtpu.TPUClusterResolver("")  # TF's guides: TPUClusterResolver(tpu='')
    assert local.num_cores == 8 and local.master() == ""
    assert xtpu.TPUClusterResolver(tpu="local", num_cores=4).num_cores == 4
    assert xtpu.TPUClusterResolver(None, None, None, num_cores=2).num_accelerators() == {"TPU": 2}
    # TF's nine parameters, in TF's order (tpu, zone, project, job_name,
    # coordinator_name, coordinator_address, credentials, service, discovery_url).
    every = xtpu.TPUClusterResolver("", "us-central1-b", "proj", "worker", None, None, "default", None, None)
    assert every.num_cores == 8 and every.master() == ""
    with pytest.raises(TypeError):
        xtpu.TPUClusterResolver(
            "", None, None, "worker", None, None, "default", None, None, 4
        )  # num_cores is a keyword
    with pytest.raises(TypeError, match="give the number of cores as num_cores=4"):
        xtpu.TPUClusterResolver(4)
    with pytest.raises(ValueError, match="local TPU system only; tpu='grpc://10.0.0.2:8470'"):
        xtpu.TPUClusterResolver("grpc://10.0.0.2:8470")


def test_strategy_takes_tf2_keywords():
    resolver = xtpu.TPUClusterResolver("", num_cores=8)
    topology = xtpu.initialize_tpu_system(num_cores=8)
    da = xtpu.DeviceAssignment.build(topology, computation_shape=[1, 1, 1, 2], num_replicas=4)
    s = xtpu.TPUStrategy(resolver, experimental_device_assignment=da)
    assert s.num_replicas_in_sync == 4 and s.extended.num_replicas_per_host == 4
    assert xtpu.TPUStrategy(resolver, da).num_replicas_in_sync == 4  # TF 2's positional order
    assert xtpu.TPUStrategy(resolver, 2).steps_per_run == 2  # the contrib one
    # TF: worker_devices = _tpu_devices[:, logical device], each canonical
    # (device_util.canonicalize of da.tpu_device(r, core, job)).
    want = tuple(f"/job:localhost/replica:0/task:0/device:TPU:{da.tpu_ordinal(r, 0)}" for r in range(4))
    assert s.extended.worker_devices == want and s.extended.parameter_devices == want
    with s.extended.experimental_logical_device(1):
        assert s.extended.worker_devices == tuple(
            f"/job:localhost/replica:0/task:0/device:TPU:{da.tpu_ordinal(r, 1)}" for r in range(4)
        )
        with s.scope():
            on_core_1 = xtpu.Variable(0.0)
    assert on_core_1.device == f"/job:localhost/replica:0/task:0/device:TPU:{da.tpu_ordinal(0, 1)}"
    full = xtpu.TPUStrategy(resolver)
    assert full.extended.worker_devices == tuple(f"/job:localhost/replica:0/task:0/device:TPU:{r}" for r in range(8))
    # TF: num_of_cores_per_host without a device assignment; with one,
    # min(num_replicas, cores_per_host // num_cores_per_replica).
    assert full.extended.num_replicas_per_host == 8
    assert (
        xtpu.TPUStrategy(resolver, xtpu.DeviceAssignment.build(topology, num_replicas=3)).extended.num_replicas_per_host
        == 3
    )

    def assign(x):
        return s.experimental_assign_to_logical_device(x, 3)

    with pytest.raises(
        ValueError,
        match="`logical_core_id` to assign must be lower then total number of logical "
        "devices per replica. Received logical device id 3 but there are only "
        "total of 2 logical devices in replica.",
    ):
        s.run(assign, args=(np.zeros(4, np.float32),))
    spmd = xtpu.TPUStrategy(resolver, experimental_device_assignment=da, experimental_spmd_xla_partitioning=True)
    with pytest.raises(
        ValueError,
        match="Cannot assign a tensor to a logical device in SPMD mode. To disable SPMD, "
        "Please construct the TPUStrategy with "
        "`experimental_spmd_xla_partitioning=False`",
    ):
        spmd.experimental_assign_to_logical_device(np.zeros(2, np.float32), 0)


def test_extended_experimental_logical_device():
    topology = xtpu.initialize_tpu_system(num_cores=8)
    da = xtpu.DeviceAssignment.build(topology, computation_shape=[1, 1, 1, 2], num_replicas=4)
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(""), experimental_device_assignment=da)
    with s.extended.experimental_logical_device(1):
        assert s._logical_device_stack[-1] == 1
    assert s._logical_device_stack == [0]
    with pytest.raises(
        ValueError,
        match=r"`logical_device_id` not in range \(was 2, but there are only 2 logical "
        r"devices per replica\).",
    ):
        with s.extended.experimental_logical_device(2):
            pass


def test_variable_passed_as_argument_to_run():
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with s.scope():
        v = xtpu.Variable(np.float32(1.0), aggregation=xtpu.VariableAggregation.SUM)

    def step(x, var):
        var.assign_add(x)  # SUM of the replicas' x: 1 + 2
        return var.read_value() * 2.0

    out = s.run(step, args=(xtpu.PerReplica([np.float32(1), np.float32(2)]), v))
    assert [float(o) for o in out.values] == [8.0, 8.0] and float(v.numpy()) == 4.0
    out = s.run(step, args=(np.float32(0.5),), kwargs={"var": v})
    assert [float(o) for o in out.values] == [10.0, 10.0] and float(v.numpy()) == 5.0
    with pytest.raises(
        ValueError,
        match=r"TPUStrategy.run\(\) cannot handle Variables passed to \*args. Either name "
        r"the function argument, or capture the Variable implicitly.",
    ):
        s.run(lambda *a: a[0], args=(v,))
    with pytest.raises(
        ValueError, match=re.escape("Too many positional arguments passed to call to TPUStrategy.run().")
    ):
        s.run(lambda a: a, args=(np.float32(1), v))

    def star(var, *rest):
        return var.read_value() + rest[0]

    with pytest.raises(
        ValueError,
        match=re.escape(
            "TPUStrategy.run() cannot handle both Variables and a mix of "
            "positional args and *args. Either remove the *args, or capture "
            "the Variable implicitly."
        ),
    ):
        s.run(star, args=(v, np.float32(1)))

    def positional_only(var, /):
        return var.read_value()

    with pytest.raises(
        ValueError,
        match=re.escape(
            "Mixing Variables and positional-only parameters not supported by "
            "TPUStrategy. Received 0 DistributedVariables in **kwargs and 1 in "
            "*args, expected zero for both."
        ),
    ):
        s.run(positional_only, args=(v,))

    # Without variables, *args and positional-only parameters are passed as given.
    def plain(x, /, *rest):
        return x * 2.0 + rest[0]

    assert [float(o) for o in s.run(plain, args=(np.float32(3), np.float32(1))).values] == [7.0, 7.0]


def test_local_results_of_a_nested_structure_is_one_structure_per_replica():
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=3))
    out = s.run(lambda x: {"a": x * 2.0, "b": (x, x + 1.0)}, args=(xtpu.PerReplica([np.float32(r) for r in range(3)]),))
    local = s.experimental_local_results(out)
    assert len(local) == 3
    for r, d in enumerate(local):
        assert float(d["a"]) == 2.0 * r and [float(t) for t in d["b"]] == [r, r + 1.0]
    # StrategyExtendedV2._local_results: any nested structure gives one per
    # worker device (its plain leaves kept), a single plain value (value,).
    assert s.experimental_local_results((1.0, 2.0)) == ((1.0, 2.0),) * 3
    assert s.experimental_local_results([]) == ([],) * 3
    assert s.experimental_local_results(5.0) == (5.0,)
    assert s.experimental_local_results(out["a"]) == tuple(out["a"].values)
    # A distributed variable's components: one per copy, each its own value.
    with s.scope():
        acc = xtpu.Variable(
            0.0, synchronization=xtpu.VariableSynchronization.ON_READ, aggregation=xtpu.VariableAggregation.SUM
        )
        w = xtpu.Variable(np.float32(2.0))
    s.run(lambda x: acc.assign_add(x), args=(xtpu.PerReplica([np.float32(r + 1) for r in range(3)]),))
    assert [float(c) for c in s.experimental_local_results(acc)] == [1.0, 2.0, 3.0]
    assert float(acc.numpy()) == 6.0
    nested = s.experimental_local_results({"acc": acc, "w": w, "k": 7})
    assert [(float(d["acc"]), float(d["w"]), d["k"]) for d in nested] == [(1.0, 2.0, 7), (2.0, 2.0, 7), (3.0, 2.0, 7)]


def test_strategy_run_inside_merge_call_runs_and_lets_the_users_exception_through():
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))

    class UserError(Exception):
        pass

    def raising(x):
        raise UserError("raised by the user's function")

    def step(x):
        return xtpu.get_replica_context().merge_call(lambda strat, v: strat.run(raising, args=(v,)), args=(x,))

    with pytest.raises(UserError, match="raised by the user's function"):
        s.run(step, args=(np.float32(1),))

    # strategy_test_lib._test_call_and_merge_exceptions: the user's exception
    # comes through from the replica function, from merge_fn, from a run
    # inside merge_fn, and from merge_fn of a run inside merge_fn.
    def merge_raises():
        xtpu.get_replica_context().merge_call(raising)

    def merge_call_raises():
        xtpu.get_replica_context().merge_call(lambda dist: dist.run(raising, args=(np.float32(0),)))

    def merge_call_merge_raises():
        xtpu.get_replica_context().merge_call(lambda dist: dist.run(merge_raises))

    for fn in (lambda: raising(None), merge_raises, merge_call_raises, merge_call_merge_raises):
        with s.scope():
            with pytest.raises(UserError, match="raised by the user's function"):
                s.run(fn)

    def doubled_sum(x):
        return xtpu.get_replica_context().merge_call(
            lambda strat, v: strat.reduce("SUM", strat.run(lambda y: y * 2.0, args=(v,)), axis=None), args=(x,)
        )

    out = s.run(doubled_sum, args=(xtpu.PerReplica([np.float32(1), np.float32(2)]),))
    assert [float(o) for o in out.values] == [6.0, 6.0]


def test_second_initialize_tpu_system_warns_as_tf(caplog):
    resolver = xtpu.TPUClusterResolver("", num_cores=4)
    with caplog.at_level(logging.WARNING, logger="xtpu"):
        xtpu.initialize_tpu_system(resolver)  # warns too if another test initialized the local system
        caplog.clear()
        topology = xtpu.initialize_tpu_system(resolver)
    assert topology.num_tpus_per_task == 4
    assert [
        "TPU system local has already been initialized. Reinitializing the TPU can cause previously created "
        "variables on TPU to be lost."
    ] == [r.getMessage() for r in caplog.records if "already" in r.getMessage()]


def test_variable_constraint_is_applied_after_each_optimizer_update():
    clip = lambda v: xtpu.clip_by_value(v, -0.6, 0.6)  # noqa: E731
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with s.scope():
        w = xtpu.Variable(np.array([0.5, -0.5, 0.1], np.float32), constraint=clip)
        opt = xtpu.optimizers.SGD(0.1)
    g = np.array([-1.0, 1.0, 0.25], np.float32)

    def step():
        with xtpu.GradientTape() as tape:
            loss = xtpu.reduce_sum(w * g)
        opt.apply_gradients([(tape.gradient(loss, w), w)])

    want = np.array([0.5, -0.5, 0.1], np.float32)
    for _ in range(3):
        s.run(step)
        want = np.clip(want - np.float32(0.1) * (2 * g), -0.6, 0.6)  # the replicas' gradients summed
        np.testing.assert_allclose(w.numpy(), want, rtol=1e-6)
    eager = xtpu.Variable(np.float32(0.0), constraint=lambda v: xtpu.math.maximum(v, 0.0))
    xtpu.optimizers.SGD(1.0).apply_gradients([(np.float32(3.0), eager)])
    assert float(eager.numpy()) == 0.0 and eager.constraint is not None
    # resource_variable_ops.ResourceVariable._init_from_args, verbatim.
    with pytest.raises(
        ValueError,
        match=re.escape("Argument `constraint` must be None or a callable. a callable. Got a <class 'int'>:  3"),
    ):
        xtpu.Variable(1.0, constraint=3)


def test_the_tpu_guides_setup_lines_run_with_renames():
    import xtpu as tf

    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    assert tf.config.experimental_connect_to_cluster(resolver) is None
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    assert strategy.num_replicas_in_sync == 8 and topology.num_tpus_per_task == 8
    da = tf.tpu.experimental.DeviceAssignment.build(topology, computation_shape=[1, 1, 1, 2], num_replicas=4)
    assert tf.distribute.TPUStrategy(resolver, experimental_device_assignment=da).num_replicas_in_sync == 4


def test_on_read_variables_keep_a_copy_per_replica_and_aggregate_when_read_across():
    S, A = xtpu.VariableSynchronization, xtpu.VariableAggregation
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))
    with s.scope():
        total = xtpu.Variable(0.0, synchronization=S.ON_READ, aggregation=A.SUM)
        mean = xtpu.Variable(0.0, synchronization=S.ON_READ, aggregation=A.MEAN)
        first = xtpu.Variable(0.0, synchronization=S.ON_READ, aggregation=A.ONLY_FIRST_REPLICA)
    assert total.trainable is False  # TF's default for ON_READ
    xs = [np.float32(r + 1) for r in range(4)]

    def step(x):
        for v in (total, mean, first):
            v.assign_add(x)  # the replica's own copy, no all-reduce
        local = total.read_value()
        # In a TPU context (merge_fn included) TF's TPUVariableMixin reads the
        # replica's copy; the cross-replica sum is an all_reduce.
        in_merge = xtpu.get_replica_context().merge_call(lambda st: total.read_value())
        summed = xtpu.get_replica_context().all_reduce("SUM", total)
        return local, in_merge, summed

    local, in_merge, summed = s.run(step, args=(xtpu.PerReplica(xs),))
    assert [float(v) for v in local.values] == [1.0, 2.0, 3.0, 4.0]
    assert [float(v) for v in in_merge.values] == [1.0, 2.0, 3.0, 4.0]
    assert [float(v) for v in summed.values] == [10.0] * 4
    assert (float(total.numpy()), float(mean.numpy()), float(first.numpy())) == (10.0, 2.5, 1.0)
    # TPUOnReadPolicy assigns raw in a TPU context, in merge_fn too: no SUM
    # division, no cross-replica SUM error (those hold outside the step).
    s.run(lambda: xtpu.get_replica_context().merge_call(lambda st: total.assign_add(np.float32(1.0))))
    assert [float(v) for v in s.experimental_local_results(total)] == [2.0, 3.0, 4.0, 5.0]
    s.run(lambda: xtpu.get_replica_context().merge_call(lambda st: total.assign(np.float32(1.0))))
    assert [float(v) for v in s.experimental_local_results(total)] == [1.0] * 4
    total.assign(10.0)  # back to 10: 2.5 on each copy

    @xtpu.function
    def twice(x):
        s.run(lambda y: total.assign_add(y), args=(x,))
        return s.run(lambda y: total.assign_add(y), args=(x,))

    twice(xtpu.PerReplica(xs))
    assert float(total.numpy()) == 30.0
    total.assign(8.0)  # cross-replica assign of a SUM variable: 8 / 4 on each replica
    assert [float(v) for v in total._replica_values] == [2.0] * 4 and float(total.numpy()) == 8.0
    with pytest.raises(
        ValueError,
        match="SyncOnReadVariable does not support `assign_add` in cross-replica context "
        "when aggregation is set to `tf.VariableAggregation.SUM`.",
    ):
        total.assign_add(1.0)
    mean.assign_add(1.0)  # allowed for MEAN: every copy
    assert float(mean.numpy()) == 3.5
    with s.scope():  # TF 2.21: tf.Variable keeps trainable=True (test_tf_reference_answers, item 11)
        assert xtpu.Variable(0.0, synchronization=S.ON_READ, trainable=True).trainable is True
    with s.scope():
        none = xtpu.Variable(0.0, synchronization=S.ON_READ)
    with pytest.raises(ValueError, match="Could not convert from `tf.VariableAggregation`"):
        none.numpy()


def test_on_write_policy_of_aggregation_none_and_mean_in_replica_context():
    """TF 2's values_util._on_write_update_replica: NONE updates the
    replica's own copy (allowed); MEAN of a non-float variable with a
    per-replica tensor is TF's ValueError, with a value equal on every
    replica it is that value."""
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))
    with s.scope():
        v = xtpu.Variable(np.float32(1.0))  # AUTO synchronization, NONE aggregation: TF's defaults
        counter = xtpu.Variable(np.int32(0), aggregation=xtpu.VariableAggregation.MEAN)
    xs = xtpu.PerReplica([np.float32(r + 1) for r in range(4)])
    s.run(lambda x: v.assign_add(x), args=(xs,))
    assert float(v.numpy()) == 2.0  # the primary copy (replica 0's)
    assert [float(r) for r in s.run(lambda: v.read_value()).values] == [2.0, 3.0, 4.0, 5.0]  # each kept its own
    v.assign(0.0)  # a cross-replica assign sets every copy again
    assert [float(r) for r in s.run(lambda: v.read_value()).values] == [0.0] * 4
    with pytest.raises(
        ValueError,
        match="Cannot update non-float variables with tf.VariableAggregation.MEAN aggregation in replica context",
    ):
        s.run(lambda x: counter.assign_add(xtpu.cast(x, xtpu.int32)), args=(xs,))
    s.run(lambda: counter.assign_add(np.int32(2)))
    assert int(counter.numpy()) == 2
    # ON_WRITE with NONE: values_util.on_write_update_replica updates the
    # replica's own copy too (aggregation NONE: no merge_call).
    with s.scope():
        w = xtpu.Variable(np.float32(0.0), synchronization=xtpu.VariableSynchronization.ON_WRITE)
    out = s.run(lambda x: w.assign_sub(x), args=(xs,))
    assert [float(r) for r in out.values] == [-1.0, -2.0, -3.0, -4.0] and float(w.numpy()) == -1.0


def _mixing(current, owner) -> str:
    import re

    return re.escape(f"Mixing different tf.distribute.Strategy objects: {current} is not {owner}")


def test_variable_of_one_strategy_in_another_raises_tfs_error_only_where_tf_does():
    # TF (distribute_lib._assert_strategy via enter_or_assert_strategy):
    # read_value / numpy / assign* of a mirrored variable in the scope of
    # another strategy raise RuntimeError; value() and the conversion to a
    # tensor do not (values.py MirroredVariable); outside any scope the
    # variable's own strategy is entered.
    a = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    b = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))
    with a.scope():
        v = xtpu.Variable(np.float32(3.0), aggregation=xtpu.VariableAggregation.SUM)
        r = xtpu.Variable(
            np.float32(1.0),
            synchronization=xtpu.VariableSynchronization.ON_READ,
            aggregation=xtpu.VariableAggregation.SUM,
        )
    assert float(v.read_value()) == 3.0 and float(v.numpy()) == 3.0
    v.assign_add(np.float32(1.0))
    assert float(v.numpy()) == 4.0
    with b.scope():
        with pytest.raises(RuntimeError, match=_mixing(b, a)):
            v.read_value()
        with pytest.raises(RuntimeError, match=_mixing(b, a)):
            v.numpy()
        for update in (v.assign, v.assign_add, v.assign_sub):
            with pytest.raises(RuntimeError, match=_mixing(b, a)):
                update(np.float32(1.0))
        assert float(v.value()) == 4.0 and float(v * 2.0) == 8.0
        with pytest.raises(RuntimeError, match=_mixing(b, a)):
            r.value()  # SyncOnReadVariable.value asserts the strategy
        with pytest.raises(RuntimeError, match=_mixing(b, a)):
            r * 2.0
    assert float(v.numpy()) == 4.0 and float(r.numpy()) == 2.0  # SUM of the 2 replicas' copies


def test_variable_of_one_strategy_read_and_written_in_another_strategys_run():
    # In a TPU context (tpu_values.py) reads go through the replicated handle
    # (allowed); TPUOnWritePolicy updates call _update (TF's RuntimeError);
    # TPUAutoPolicy (AUTO, NONE) and ON_READ variables are assigned raw, each
    # replica its own copy.
    a = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    b = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    c = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))
    with a.scope():
        v = xtpu.Variable(np.float32(3.0), aggregation=xtpu.VariableAggregation.SUM)
        w = xtpu.Variable(np.float32(0.0))  # AUTO, NONE
    with b.scope():
        u = xtpu.Variable(np.float32(1.0), aggregation=xtpu.VariableAggregation.SUM)

    def read(x):
        u.assign_add(x)
        return v.read_value() + x

    out = b.run(read, args=(xtpu.PerReplica([np.float32(1), np.float32(2)]),))
    assert [float(o) for o in out.values] == [4.0, 5.0] and float(u.numpy()) == 4.0
    v.assign(np.float32(10.0))  # the next run reads the new value, not the traced one
    out = b.run(read, args=(xtpu.PerReplica([np.float32(1), np.float32(2)]),))
    assert [float(o) for o in out.values] == [11.0, 12.0] and float(v.numpy()) == 10.0
    # c's replicas 2 and 3 run on cores 2 and 3, where a (cores 0, 1) has no
    # copy: TF's get_replicated_var_handle raises, for a read as for a write.
    with pytest.raises(
        ValueError,
        match=r"variable '.*' \(copies on TPU cores \[0, 1\]\) used in a program of "
        r"TPUStrategy\(num_replicas_in_sync=4.* whose replica 2 runs on TPU cores "
        r"\[2\]: Failed to find a variable on any device in replica 2 for current "
        r"device assignment",
    ):
        c.run(lambda: v * 2.0)

    with pytest.raises(RuntimeError, match=_mixing(b, a)):
        b.run(lambda: v.assign_add(np.float32(1.0)))
    assert float(v.numpy()) == 10.0

    def write(x):
        w.assign(x)
        return w.read_value()

    out = b.run(write, args=(xtpu.PerReplica([np.float32(5), np.float32(6)]),))
    assert [float(o) for o in out.values] == [5.0, 6.0]
    assert float(w.numpy()) == 5.0  # reads outside a step see the primary (replica 0's copy)
    assert [float(o) for o in a.run(lambda: w.read_value() * 1.0).values] == [5.0, 6.0]
    with pytest.raises(
        ValueError, match="Failed to find a variable on any device in replica 2 for current device assignment"
    ):
        c.run(lambda: w.assign(np.float32(1.0)))
    assert [float(o) for o in a.run(lambda: w.read_value() * 1.0).values] == [5.0, 6.0]

    @xtpu.function
    def step(x):
        return b.run(lambda y: v.read_value() * y, args=(x,))

    out = step(xtpu.PerReplica([np.float32(1), np.float32(2)]))
    assert [float(o) for o in out.values] == [10.0, 20.0]


def _copies(var, strategy):
    """The variable's value on each replica of ``strategy`` (its copies)."""
    return [float(x) for x in strategy.run(lambda: var.read_value() * 1.0).values]


def test_another_strategys_replicas_use_the_copies_on_their_cores():
    """A program of another strategy, whatever its replica count, reads
    and writes the copy on each replica's core (TF's
    tpu_replication.get_replicated_var_handle: per replica, the copy on the
    first of its logical cores that holds one); the other copies keep their
    values.  SEED RL's normalizer test runs this way: ON_READ MEAN
    accumulators of an all-cores strategy updated by a one-replica
    training strategy, then read across replicas (the MEAN of all copies)."""
    S, A = xtpu.VariableSynchronization, xtpu.VariableAggregation
    topology = xtpu.initialize_tpu_system(num_cores=8)
    full = xtpu.TPUStrategy(xtpu.TPUClusterResolver(""))  # 8 replicas, core r
    one = xtpu.TPUStrategy(
        xtpu.TPUClusterResolver(""),
        experimental_device_assignment=xtpu.DeviceAssignment.build(topology, num_replicas=1),
    )
    pairs_da = xtpu.DeviceAssignment.build(topology, computation_shape=[1, 1, 1, 2], num_replicas=4)
    pairs = xtpu.TPUStrategy(xtpu.TPUClusterResolver(""), experimental_device_assignment=pairs_da)
    with full.scope():
        steps_acc = xtpu.Variable(0.0, trainable=False, synchronization=S.ON_READ, aggregation=A.MEAN)
        sum_acc = xtpu.Variable(np.zeros(2, np.float32), trainable=False, synchronization=S.ON_READ, aggregation=A.MEAN)
        total = xtpu.Variable(np.float32(0.0))  # AUTO, NONE: TPUAutoPolicy
    data = np.array([[1.0, 2.0], [3.0, 5.0]], np.float32)

    def accumulate():
        steps_acc.assign_add(float(data.shape[0]))
        sum_acc.assign_add(xtpu.reduce_sum(data, axis=0))
        total.assign_add(np.float32(1.0))

    for _ in range(2):
        one.run(accumulate)
    # Copy 0 (core 0, the one replica's core) took both updates; 7 kept 0.
    want_steps = [4.0] + [0.0] * 7
    assert float(steps_acc.numpy()) == np.mean(want_steps) == 0.5  # MEAN over the 8 copies
    np.testing.assert_allclose(sum_acc.numpy(), np.sum(data, axis=0) * 2 / 8)
    assert _copies(steps_acc, full) == want_steps
    assert float(total.numpy()) == 2.0  # the primary copy
    assert _copies(total, full) == [2.0] + [0.0] * 7
    steps_acc.assign(0.0)  # cross-replica: every copy (SEED RL's finish_update)
    assert _copies(steps_acc, full) == [0.0] * 8

    # An ON_READ read in another strategy's replica is the local copy, not
    # the aggregate (TF reads through the replicated handle).
    with full.scope():
        counts = xtpu.Variable(0.0, synchronization=S.ON_READ, aggregation=A.SUM)
    counts.assign(8.0)  # a cross-replica assign of a SUM variable: 8 / 8 on each copy
    assert float(counts.numpy()) == 8.0
    assert float(one.run(lambda: counts.read_value() * 1.0)) == 1.0

    # Replica r of `pairs` runs on cores pairs_da.logical_devices_of(r); its
    # first core holds a copy of `total`, so it reads and writes that one.
    def mark():
        r = xtpu.get_replica_context().replica_id_in_sync_group
        total.assign(xtpu.cast(r, xtpu.float32) + 10.0)
        return total.read_value()

    out = pairs.run(mark)
    assert [float(o) for o in out.values] == [10.0, 11.0, 12.0, 13.0]
    want = [2.0] + [0.0] * 7
    for r in range(4):
        want[pairs_da.logical_devices_of(r)[0]] = 10.0 + r
    assert _copies(total, full) == want == [10.0, 0.0, 11.0, 0.0, 13.0, 0.0, 12.0, 0.0]

    @xtpu.function
    def step():
        one.run(lambda: total.assign_add(np.float32(5.0)))

    step()
    want[0] += 5.0
    assert _copies(total, full) == want

    # A variable of `pairs` has copies on cores 0, 2, 6, 4 only: `full`'s
    # replica 1 (core 1) has none.
    with pairs.scope():
        p = xtpu.Variable(np.float32(1.0))
    with pytest.raises(
        ValueError,
        match=r"copies on TPU cores \[0, 2, 6, 4\]\) used in a program of "
        r"TPUStrategy\(num_replicas_in_sync=8.* replica 1 runs on TPU cores \[1\]: "
        r"Failed to find a variable on any device in replica 1",
    ):
        full.run(lambda: p.read_value())
    assert float(one.run(lambda: p.read_value() * 3.0)) == 3.0  # core 0 holds a copy
