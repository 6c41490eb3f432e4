"""xtpu.TPUStrategy (issue 5): the contrib API of the seed
contrib_tpu_strategy.txt and the TF 2 names, variables, steps_per_run."""

import numpy as np
import pytest

import xtpu
from xtpu import ReduceOp, VariableAggregation


@pytest.fixture(scope="module")
def s4():
    return xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))


# -- construction -----------------------------------------------------------


def test_cluster_resolver_describes_the_local_system():
    r = xtpu.TPUClusterResolver()
    assert r.num_cores == 8
    assert r.num_accelerators() == {"TPU": 8}
    assert list(r.topology.mesh_shape) == [2, 2, 1, 2]
    t = xtpu.initialize_tpu_system(num_cores=4)
    assert xtpu.TPUClusterResolver(topology=t).num_cores == 4


def test_num_replicas_default_one_core_per_replica():
    s = xtpu.TPUStrategy()
    assert s.num_replicas_in_sync == 8 and s.num_towers == 8
    assert xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=8), num_cores=2).num_replicas_in_sync == 2


def test_num_replicas_from_device_assignment():
    topo = xtpu.initialize_tpu_system(num_cores=8)
    da = xtpu.DeviceAssignment.build(topo, computation_shape=[1, 1, 1, 2], num_replicas=4)
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(topology=topo), device_assignment=da)
    assert s.num_replicas_in_sync == 4
    assert len(s.worker_devices) == 4


def test_bad_arguments():
    with pytest.raises(ValueError, match="steps_per_run"):
        xtpu.TPUStrategy(steps_per_run=0)
    with pytest.raises(ValueError, match="num_cores"):
        xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2), num_cores=4)


# -- run / reduce / contexts -------------------------------------------------


def test_run_per_replica_and_broadcast_args(s4):
    x = xtpu.PerReplica([np.float32(r) for r in range(4)])
    out = s4.run(lambda a, b: a * b, args=(x, np.float32(2.0)))
    assert isinstance(out, xtpu.PerReplica)
    assert [float(v) for v in out.values] == [0.0, 2.0, 4.0, 6.0]
    assert [float(v) for v in s4.experimental_local_results(out)] == [0.0, 2.0, 4.0, 6.0]
    assert float(s4.reduce(ReduceOp.SUM, out, axis=None)) == 12.0
    assert float(s4.reduce(ReduceOp.MEAN, out, axis=None)) == 3.0


def test_run_kwargs_and_structure(s4):
    out = s4.run(
        lambda a, k=None: {"s": a + k, "d": a - k}, args=(np.ones(2, np.float32),), kwargs={"k": np.ones(2, np.float32)}
    )
    assert set(out) == {"d", "s"}
    np.testing.assert_array_equal(out["s"].values[3], [2.0, 2.0])


def test_run_reuses_the_replicate_cache(s4, monkeypatch):
    import xtpu.replication.program as rep

    calls = []
    real = rep.trace
    monkeypatch.setattr(rep, "trace", lambda *a: calls.append(1) or real(*a))

    def f(x):
        return x + 1.0

    for i in range(3):
        s4.run(f, args=(np.float32(i),))
    assert len(calls) == 1
    s4.run(f, args=(np.zeros(3, np.float32),))
    assert len(calls) == 2


def test_reduce_with_axis(s4):
    pr = xtpu.PerReplica([np.full((2,), r, np.float32) for r in range(4)])
    assert float(s4.reduce(ReduceOp.SUM, pr, axis=0)) == 12.0
    assert float(s4.reduce(ReduceOp.MEAN, pr, axis=0)) == 1.5
    np.testing.assert_array_equal(s4.gather(pr, 0), np.repeat(np.arange(4, dtype=np.float32), 2))


def test_replica_context_inside_run(s4):
    def f():
        ctx = xtpu.get_replica_context()
        rid = ctx.replica_id_in_sync_group
        assert isinstance(rid, xtpu.Tensor) and rid.dtype == "int32"
        assert ctx.num_replicas_in_sync == 4
        x = xtpu.cast(rid, xtpu.float32)
        return rid, ctx.all_reduce(ReduceOp.SUM, x), ctx.all_reduce(ReduceOp.MEAN, x)

    rid, total, mean = s4.run(f)
    assert [int(v) for v in rid.values] == [0, 1, 2, 3]
    assert all(float(v) == 6.0 for v in total.values)
    assert all(float(v) == 1.5 for v in mean.values)


def _traced_text(strategy, fn):
    """The module run traced for ``fn`` (after the first pass)."""
    from xtpu.replication.program import _cache

    wrapper = [w for k, w in strategy._wrappers.items() if k[0] is fn][0]
    return list(list(_cache[wrapper].values())[0].stages.values())[0]


def test_all_reduce_lowers_to_cross_replica_sum(s4):
    def f(x):
        return xtpu.get_replica_context().all_reduce(ReduceOp.SUM, x)

    s4.run(f, args=(np.float32(1),))
    assert _traced_text(s4, f).count("tpu.cross_replica_sum") == 1
    # Outside run (the default context, one replica) all_reduce is the identity.
    assert f(np.float32(3.0)) == 3.0


def test_default_replica_context_outside_run(s4):
    ctx = xtpu.get_replica_context()
    assert ctx is not None
    assert ctx.num_replicas_in_sync == 1 and int(ctx.replica_id_in_sync_group) == 0
    assert ctx.merge_call(lambda strat, x: x + 1, args=(1,)) == 2
    with s4.scope():
        assert xtpu.get_replica_context() is None  # cross-replica context, as in TF
        assert xtpu.in_cross_replica_context()
        assert xtpu.get_strategy() is s4


# -- merge_call ---------------------------------------------------------------


def test_seed_merge_call_example(s4):
    # Called once in "cross-tower" context.
    def merge_fn(distribution, three_plus_tower_id):
        # sum the values across towers
        return sum(distribution.unwrap(three_plus_tower_id))

    # Called once per tower in `distribution`, in a "tower" context.
    def fn(three):
        tower_ctx = xtpu.get_tower_context()
        v = three + tower_ctx.tower_id
        # Computes the sum of the `v` values across all towers.
        s = tower_ctx.merge_call(merge_fn, v)
        return s + v

    merge_calls = []

    def counting_merge_fn(d, v):
        merge_calls.append(1)
        return merge_fn(d, v)

    with s4.scope():
        merged_results = s4.call_for_each_tower(fn, 3)
    # sum over towers of 3 + tower_id = 3+4+5+6 = 18, added back to each tower's v
    assert [int(v) for v in s4.unwrap(merged_results)] == [21, 22, 23, 24]

    def fn2(three):
        ctx = xtpu.get_tower_context()
        v = three + ctx.tower_id
        return ctx.merge_call(counting_merge_fn, v) + v

    s4.call_for_each_tower(fn2, 3)
    s4.call_for_each_tower(fn2, 3)
    assert len(merge_calls) == 1  # traced once, then compiled collectives


def test_merge_call_becomes_collectives_not_python(s4):
    def fn(x):
        ctx = xtpu.get_replica_context()
        return ctx.merge_call(lambda strat, v: strat.reduce(ReduceOp.MEAN, v, axis=None) * 2.0, args=(x,))

    x = xtpu.PerReplica([np.float32(r) for r in range(4)])
    out = s4.run(fn, args=(x,))
    assert all(float(v) == 3.0 for v in out.values)
    assert "tpu.cross_replica_sum" in _traced_text(s4, fn)


def test_merge_call_only_first_tower_and_local_results(s4):
    def merge_fn(strat, v):
        first = strat.reduce(VariableAggregation.ONLY_FIRST_TOWER, v, None)
        locs = strat.experimental_local_results(v)
        return first, locs[3], strat.gather(v, 0)

    def fn():
        ctx = xtpu.get_replica_context()
        v = xtpu.reshape(xtpu.cast(ctx.replica_id_in_sync_group, xtpu.float32) + 10.0, (1,))
        return ctx.merge_call(merge_fn, args=(v,))

    first, last, gathered = s4.run(fn)
    assert all(float(x[0]) == 10.0 for x in first.values)
    assert all(float(x[0]) == 13.0 for x in last.values)
    np.testing.assert_array_equal(gathered.values[2], [10.0, 11.0, 12.0, 13.0])


def test_batch_reduce_one_collective(s4):
    def merge_fn(strat, a, b):
        return strat.batch_reduce(VariableAggregation.SUM, [(a, a), (b, b)])

    def fn():
        ctx = xtpu.get_replica_context()
        r = xtpu.cast(ctx.replica_id_in_sync_group, xtpu.float32)
        return ctx.merge_call(merge_fn, args=(xtpu.reshape(r, (1,)), xtpu.reshape(r * 2.0, (1, 1))))

    a, b = s4.run(fn)
    assert float(a.values[0][0]) == 6.0 and float(b.values[1][0, 0]) == 12.0
    assert _traced_text(s4, fn).count("tpu.cross_replica_sum") == 1


# -- contrib names --------------------------------------------------------------


def test_contrib_properties(s4):
    assert s4.between_graph is False
    assert s4.is_single_tower is False
    assert xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=1)).is_single_tower is True
    assert s4.num_towers == 4 and s4.num_hosts == 1 and s4.num_towers_per_host == 4
    assert len(s4.worker_devices) == 4 and "TPU:3" in s4.worker_devices[3]
    assert s4.parameter_devices == s4.worker_devices
    assert s4.should_checkpoint and s4.should_init and s4.should_save_summary
    assert xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=1)).worker_device_index == 0


def test_worker_device_index_passed_to_call_for_each_tower(s4):
    out = s4.call_for_each_tower(lambda device_id: device_id * 10, s4.worker_device_index)
    assert [int(v) for v in out.values] == [0, 10, 20, 30]


def test_contrib_reduce_returns_mirrored(s4):
    pr = xtpu.PerReplica([np.float32(r) for r in range(4)])
    m = s4.reduce(VariableAggregation.SUM, pr, pr)
    assert isinstance(m, xtpu.Mirrored) and [float(v) for v in m.values] == [6.0] * 4
    assert float(s4.reduce(VariableAggregation.MEAN, pr, "/device:CPU:0").values[0]) == 1.5
    assert float(s4.reduce(VariableAggregation.ONLY_FIRST_TOWER, pr, pr).values[2]) == 0.0
    out = s4.batch_reduce(VariableAggregation.SUM, [(pr, pr), (pr, pr)])
    assert len(out) == 2 and float(out[1].values[0]) == 6.0


def test_broadcast_unwrap_value_container_group(s4):
    b = s4.broadcast(np.float32(5))
    assert isinstance(b, xtpu.Mirrored) and len(b.values) == 4
    assert s4.unwrap(np.float32(1)) == [np.float32(1)]
    pr = xtpu.PerReplica([1, 2, 3, 4])
    assert s4.unwrap(pr) == [1, 2, 3, 4]
    assert 2 in s4.unwrap(s4.value_container(2))
    assert s4.group(pr) is None
    assert s4.initialize() is None and s4.finalize() is None
    s4.configure(session_config=None)


def test_update_and_non_slot(s4):
    with s4.scope():
        v = xtpu.Variable(np.float32(1.0))
        dev = s4.non_slot_devices([v])
        with s4.colocate_vars_with(v):
            step = xtpu.Variable(np.int32(0))
    assert step.mirrored and "CPU" in dev[0]
    s4.update(v, lambda var, d: var.assign_add(d), s4.broadcast(np.float32(2.0)))
    assert float(v.numpy()) == 3.0
    with pytest.raises(ValueError, match="per-device"):
        s4.update(v, lambda var, d: var.assign_add(d), xtpu.PerReplica([1.0] * 4))
    assert s4.update_non_slot(dev, lambda: 7) == 7
    assert float(s4.read_var(v)) == 3.0
    with pytest.raises(ValueError, match="scope"), s4.colocate_vars_with(v):
        pass


# -- datasets ----------------------------------------------------------------


def test_distribute_dataset_splits_batches(s4):
    xs = np.arange(16, dtype=np.float32).reshape(8, 2)
    ys = np.arange(8, dtype=np.int32)
    batches = list(s4.experimental_distribute_dataset([(xs, ys)]))
    x, y = batches[0]
    assert isinstance(x, xtpu.PerReplica)
    np.testing.assert_array_equal(x.values[1], xs[2:4])
    np.testing.assert_array_equal(y.values[3], ys[6:8])
    out = s4.run(lambda a, b: xtpu.math.reduce_sum(a), args=(x, y))
    assert float(s4.reduce(ReduceOp.SUM, out, axis=None)) == float(xs.sum())
    dd = s4.distribute_dataset(lambda: [xs])
    assert len(next(iter(dd)).values) == 4


def test_distribute_dataset_batch_must_divide(s4):
    it = iter(s4.experimental_distribute_dataset([np.zeros((6, 2), np.float32)]))
    with pytest.raises(ValueError, match="6 elements does not divide evenly across 4 replicas"):
        next(it)


# -- logical devices -----------------------------------------------------------


def test_logical_device_methods_delegate():
    topo = xtpu.initialize_tpu_system(num_cores=4)
    da = xtpu.DeviceAssignment.build(topo, computation_shape=[1, 1, 1, 2], num_replicas=2)
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(topology=topo), device_assignment=da)

    def f(x):
        y = s.experimental_split_to_logical_devices(x, [2, 1])
        z = s.experimental_replicate_to_logical_devices(y * 2.0)
        return s.experimental_assign_to_logical_device(z + 1.0, 0)

    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    out = s.run(f, args=(x,))
    np.testing.assert_allclose(out.values[1], x * 2 + 1)
    with pytest.raises(ValueError):
        s.run(lambda x: s.experimental_split_to_logical_devices(x, [3, 1]), args=(x,))


# -- variables -----------------------------------------------------------------


def test_host_and_mirrored_variables_eager():
    v = xtpu.Variable(np.float32(1.0))
    assert not v.mirrored and "CPU" in v.device
    v.assign_add(2.0)
    v.assign_sub(0.5)
    assert float(v.read_value()) == 2.5
    v.assign(np.float32(7.0))
    assert float(v.numpy()) == 7.0


@pytest.mark.parametrize(
    "agg,expected",
    [
        (VariableAggregation.SUM, 1.0 + 0 + 1 + 2 + 3),
        (VariableAggregation.MEAN, 1.0 + 1.5),
        (VariableAggregation.ONLY_FIRST_TOWER, 1.0),
    ],
)
def test_mirrored_variable_updates_are_aggregated(s4, agg, expected):
    with s4.scope():
        v = xtpu.Variable(np.float32(1.0), aggregation=agg)
    assert v.mirrored

    def f():
        r = xtpu.cast(xtpu.get_replica_context().replica_id_in_sync_group, xtpu.float32)
        v.assign_add(r)
        return v.read_value()

    out = s4.run(f)
    assert float(v.numpy()) == expected
    assert all(float(x) == expected for x in out.values)  # kept equal on every replica
    s4.run(f)
    assert float(v.numpy()) == expected + (expected - 1.0)


def test_mirrored_variable_assign_and_sub(s4):
    with s4.scope():
        v = xtpu.Variable(np.zeros(2, np.float32), aggregation=VariableAggregation.MEAN)

    def f():
        v.assign(xtpu.constant([4.0, 8.0]))
        v.assign_sub(xtpu.constant([1.0, 1.0]))
        return ()

    s4.run(f)
    np.testing.assert_array_equal(v.numpy(), [3.0, 7.0])


def test_mirrored_variable_none_aggregation_rejects_tower_updates(s4):
    """The contrib API keeps TF 1's rule (TF 2's OnWrite policy for `run`:
    test_strategy_tf2.py)."""
    with s4.scope():
        v = xtpu.Variable(np.float32(1.0))

    with pytest.raises(ValueError, match="You must specify an aggregation method"):
        s4.call_for_each_tower(lambda: v.assign_add(1.0))


def test_mean_mirrored_variable_ends_at_per_replica_update(s4):
    with s4.scope():
        v = xtpu.Variable(np.float32(0.0), aggregation=VariableAggregation.MEAN)
    s4.run(lambda: v.assign_add(np.float32(5.0)))
    assert float(v.numpy()) == 5.0


def test_device_variable_in_outside_compilation_is_rejected(s4):
    with s4.scope():
        v = xtpu.Variable(np.float32(1.0), aggregation=VariableAggregation.SUM)

    def f():
        return xtpu.outside_compilation(lambda: v.read_value() + 1.0)

    with pytest.raises(
        ValueError,
        match="For variables placed in TPU device.*outside compilation logic must not include variable read/write",
    ):
        s4.run(f)


def test_host_variable_on_host_and_device_is_rejected(s4):
    h = xtpu.Variable(np.float32(1.0))

    def f():
        a = h.read_value() * 2.0
        b = xtpu.outside_compilation(lambda: h.read_value() + 1.0)
        return a + b

    with pytest.raises(ValueError, match="may lead to deadlock"):
        s4.run(f)


def test_variables_inside_merge_call_update_once(s4):
    with s4.scope():
        v = xtpu.Variable(np.float32(0.0), aggregation=VariableAggregation.SUM)

    def merge_fn(strat, x):
        total = strat.reduce(ReduceOp.SUM, x, axis=None)
        strat.update(v, lambda var, t: var.assign_add(t), total)
        return total

    def f():
        ctx = xtpu.get_replica_context()
        return ctx.merge_call(merge_fn, args=(xtpu.cast(ctx.replica_id_in_sync_group, xtpu.float32),))

    s4.run(f)
    assert float(v.numpy()) == 6.0


# -- steps_per_run -----------------------------------------------------------------


def test_steps_per_run_device_loop():
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2), steps_per_run=3)
    with s.scope():
        c = xtpu.Variable(np.float32(0.0), aggregation=VariableAggregation.SUM)
        n = xtpu.Variable(np.int32(0), aggregation=VariableAggregation.ONLY_FIRST_TOWER)

    def f(x):
        c.assign_add(xtpu.math.reduce_sum(x))
        n.assign_add(np.int32(1))
        return c.read_value()

    it = iter(s.experimental_distribute_dataset([np.full((2,), i, np.float32) for i in range(1, 7)]))
    out = s.run(f, args=(it,))
    assert float(c.numpy()) == 2 + 4 + 6 and int(n.numpy()) == 3
    assert float(out.values[0]) == 12.0
    s.run(f, args=(it,))
    assert float(c.numpy()) == 42.0 and int(n.numpy()) == 6
    assert "hlo.while" in _traced_text(s, f)


def test_host_variable_in_outside_compilation_runs_once_per_replica(s4):
    h = xtpu.Variable(np.float32(0.0))
    assert not h.mirrored
    with s4.scope():
        m = xtpu.Variable(np.float32(0.0), aggregation=VariableAggregation.MEAN)

    def f():
        xtpu.outside_compilation(lambda: h.assign_add(2.0))
        m.assign_add(2.0)
        return m.read_value()

    s4.run(f)
    # host code runs once per replica; the MEAN mirrored variable gets the per-replica update
    assert float(h.numpy()) == 2.0 * 4
    assert float(m.numpy()) == 2.0
    s4.run(f)
    assert float(h.numpy()) == 16.0 and float(m.numpy()) == 4.0
    assert "hlo.host_variable_update" in _traced_text(s4, f)


def test_host_variable_update_op_round_trips():
    from xdsl.parser import Parser

    from xtpu.dialects import make_context

    text = """
    %0 = "test.op"() : () -> tensor<2xf32>
    %1 = hlo.host_variable_update "v#1" "add" (%0 : tensor<2xf32>) : tensor<2xf32>
    %2 = hlo.host_variable_update "v#1" "read" : tensor<2xf32>
    """
    from xdsl.dialects.test import Test

    ctx = make_context()
    ctx.load_dialect(Test)
    module = Parser(ctx, "builtin.module {" + text + "}").parse_module()
    module.verify()
    printed = str(module)
    assert 'hlo.host_variable_update "v#1" "add"(%0 : tensor<2xf32>) : tensor<2xf32>' in printed
    assert 'hlo.host_variable_update "v#1" "read" : tensor<2xf32>' in printed
    # The printed form parses back to the same module (a round trip, issue 25).
    again = Parser(ctx, printed).parse_module()
    again.verify()
    assert str(again) == printed and again.is_structurally_equivalent(module)


def test_host_variable_read_by_the_device_is_sent_by_the_host(s4):
    h = xtpu.Variable(np.float32(1.0))

    def f(x):
        return x * h.read_value()

    assert float(s4.run(f, args=(np.float32(3.0),)).values[2]) == 3.0
    h.assign(np.float32(2.0))  # not a constant baked into the cached program
    assert float(s4.run(f, args=(np.float32(3.0),)).values[2]) == 6.0
    with pytest.raises(NotImplementedError, match="outside_compilation"):
        s4.run(lambda: h.assign_add(1.0))


def test_batch_reduce_to_eager(s4):
    pr = xtpu.PerReplica([np.float32(r) for r in range(4)])
    (m,) = s4.batch_reduce_to(ReduceOp.MEAN, [(pr, pr)])
    assert float(m.values[0]) == 1.5


def test_cross_replica_ops_refused_in_replica_context(s4):
    with pytest.raises(RuntimeError, match="cross-replica context"):
        s4.run(lambda x: s4.reduce(ReduceOp.SUM, x, axis=None), args=(np.float32(1),))


def test_single_replica_returns_plain_values():
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=1))
    out = s.run(lambda x: (x + 1.0, xtpu.get_replica_context().replica_id_in_sync_group), args=(np.float32(1),))
    assert float(out[0]) == 2.0 and int(out[1]) == 0
    assert s.experimental_local_results(out[0]) == (out[0],)


def test_steps_per_run_with_merge_call_and_host_variable():
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2), steps_per_run=3)
    h = xtpu.Variable(np.float32(0.0))
    with s.scope():
        m = xtpu.Variable(np.float32(0.0), aggregation=VariableAggregation.SUM)

    def f(x):
        ctx = xtpu.get_replica_context()
        tot = ctx.merge_call(lambda st, v: st.reduce(ReduceOp.SUM, v, axis=None), args=(x,))
        xtpu.outside_compilation(lambda: h.assign_add(1.0))
        m.assign_add(tot)
        return tot

    out = s.run(f, args=(xtpu.PerReplica([np.float32(1), np.float32(2)]),))
    assert [float(v) for v in out.values] == [3.0, 3.0]
    assert float(h.numpy()) == 3 * 2  # steps x replicas: host code runs once per replica per step
    assert float(m.numpy()) == 3 * (3.0 * 2)  # SUM of the replicas' assign_add(3) per step
