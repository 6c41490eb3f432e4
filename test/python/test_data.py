"""xtpu.data.Dataset and distributed input (issue 15), against numpy and
TF's documented results."""

import numpy as np
import pytest

import xtpu
from xtpu.data import Dataset
from xtpu.distribute import InputContext, InputOptions, InputReplicationMode


def _np(ds):
    return list(ds.as_numpy_iterator())


def test_from_tensor_slices_and_element_spec():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6)
    ds = Dataset.from_tensor_slices({"x": x, "y": y})
    assert ds.element_spec == {"x": xtpu.TensorSpec([2], "float32"), "y": xtpu.TensorSpec([], "int64")}
    got = _np(ds)
    assert len(got) == 6 == len(ds)
    for i, e in enumerate(got):
        np.testing.assert_array_equal(e["x"], x[i])
        assert e["y"] == y[i]
    first = next(iter(ds))
    assert isinstance(first["x"], xtpu.EagerTensor)
    with pytest.raises(ValueError, match="not equal"):
        Dataset.from_tensor_slices((np.zeros(3), np.zeros(4)))


def test_from_tensors_range_take_zip():
    assert [e.shape for e in _np(Dataset.from_tensors(np.zeros((2, 3))))] == [(2, 3)]
    assert _np(Dataset.range(2, 11, 3)) == [2, 5, 8]
    assert Dataset.range(5).element_spec == xtpu.TensorSpec([], "int64")
    assert _np(Dataset.range(10).take(3)) == [0, 1, 2]
    z = Dataset.zip((Dataset.range(3), Dataset.range(10, 20)))
    assert [tuple(map(int, e)) for e in _np(z)] == [(0, 10), (1, 11), (2, 12)]
    assert z.cardinality() == 3


def test_map_batch_drop_remainder_repeat():
    ds = Dataset.from_tensor_slices((np.arange(7, dtype=np.float32), np.arange(7))).map(lambda a, b: (a * 2.0, b + 1))
    b = ds.batch(3)
    got = _np(b)
    assert [len(e[0]) for e in got] == [3, 3, 1]
    np.testing.assert_array_equal(got[2][0], [12.0])
    np.testing.assert_array_equal(got[0][1], [1, 2, 3])
    assert b.element_spec[0] == xtpu.TensorSpec([None], "float32")
    bd = ds.batch(3, drop_remainder=True)
    assert bd.element_spec[0] == xtpu.TensorSpec([3], "float32") and len(_np(bd)) == 2
    r = Dataset.range(3).repeat(2)
    assert _np(r) == [0, 1, 2, 0, 1, 2] and r.cardinality() == 6
    assert Dataset.range(3).repeat().cardinality() == xtpu.data.INFINITE_CARDINALITY
    with pytest.raises(ValueError, match="batch_size"):
        Dataset.range(3).batch(0)
    with pytest.raises(ValueError, match="buffer_size must be greater than zero"):
        Dataset.range(3).shuffle(xtpu.data.AUTOTUNE)


def test_streaming_does_not_materialise():
    seen = []

    def f(x):
        seen.append(int(x))
        return x

    ds = Dataset.range(10**9).map(f).repeat().batch(2).take(3)
    assert [list(map(int, e)) for e in _np(ds)] == [[0, 1], [2, 3], [4, 5]]
    assert max(seen) <= 6  # only what was asked for (plus map's one-element spec probe)


def test_shuffle_is_a_seeded_permutation_and_buffer_bounds_displacement():
    ds = Dataset.range(20)
    a = _np(ds.shuffle(20, seed=7))
    b = _np(ds.shuffle(20, seed=7))
    assert sorted(a) == list(range(20)) and a == b and a != list(range(20))
    assert _np(ds.shuffle(1, seed=3)) == list(range(20))  # a buffer of one keeps the order
    # With a buffer of k the i-th output is one of the first i + k inputs (TF's buffer semantics).
    out = _np(ds.shuffle(4, seed=5))
    assert all(v < i + 4 for i, v in enumerate(out))
    s = ds.shuffle(20, seed=1)
    e1, e2 = _np(s), _np(s)
    assert e1 != e2 and sorted(e1) == sorted(e2)  # reshuffled each iteration, deterministically
    s2 = ds.shuffle(20, seed=1)
    assert (_np(s2), _np(s2)) == (e1, e2)
    fixed = ds.shuffle(20, seed=1, reshuffle_each_iteration=False)
    assert _np(fixed) == _np(fixed)


def test_prefetch_keeps_order_and_raises_input_errors():
    assert _np(Dataset.range(50).prefetch(xtpu.data.AUTOTUNE)) == list(range(50))

    def bad(x):
        if int(x) == 3:
            raise RuntimeError("element 3 is bad")
        return x

    it = iter(Dataset.range(1, 10).map(bad).prefetch(2))
    assert [int(next(it)) for _ in range(2)] == [1, 2]
    with pytest.raises(RuntimeError, match="element 3"):
        next(it)


# -- distributed input ---------------------------------------------------------


@pytest.fixture(scope="module")
def s2():
    return xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))


def test_experimental_distribute_dataset_splits_global_batches(s2):
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    ds = Dataset.from_tensor_slices(x).batch(4, drop_remainder=True)
    dist = s2.experimental_distribute_dataset(ds)
    assert dist.element_spec == xtpu.TensorSpec([2, 2], "float32")
    steps = list(dist)
    assert len(steps) == 2
    np.testing.assert_array_equal(steps[1].values[0], x[4:6])
    np.testing.assert_array_equal(steps[1].values[1], x[6:8])
    it = iter(dist)
    it.get_next(), it.get_next()
    opt = it.get_next_as_optional()
    assert not bool(opt.has_value())
    with pytest.raises(ValueError, match="does not have a value"):
        opt.get_value()
    it = iter(dist)
    opt = it.get_next_as_optional()
    assert bool(opt.has_value()) and isinstance(opt, xtpu.experimental.Optional)  # TF's tf.experimental.Optional
    np.testing.assert_array_equal(opt.get_value().values[1], x[2:4])
    with pytest.raises(ValueError, match="does not divide evenly"):
        next(iter(s2.experimental_distribute_dataset(Dataset.range(9).batch(3))))


def test_distribute_datasets_from_function_per_worker_and_per_replica(s2):
    contexts = []

    def dataset_fn(ctx):
        contexts.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync))
        bs = ctx.get_per_replica_batch_size(8)
        return Dataset.range(100 * ctx.input_pipeline_id, 100 * ctx.input_pipeline_id + 40).batch(bs)

    it = iter(s2.distribute_datasets_from_function(dataset_fn))
    assert contexts == [(1, 0, 2)]
    first = next(it)
    assert [list(map(int, v)) for v in first.values] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    opts = InputOptions(
        experimental_replication_mode=InputReplicationMode.PER_REPLICA, experimental_fetch_to_device=False
    )
    it = iter(s2.distribute_datasets_from_function(dataset_fn, opts))
    assert contexts[1:] == [(2, 0, 2), (2, 1, 2)]
    first = next(it)
    assert [list(map(int, v)) for v in first.values] == [[0, 1, 2, 3], [100, 101, 102, 103]]
    with pytest.raises(ValueError, match="experimental_fetch_to_device is True"):
        s2.distribute_datasets_from_function(
            dataset_fn,
            InputOptions(
                experimental_replication_mode=InputReplicationMode.PER_REPLICA,
                experimental_place_dataset_on_device=True,
            ),
        )
    with pytest.raises(NotImplementedError, match="PER_REPLICA"):
        s2.experimental_distribute_dataset(Dataset.range(4).batch(2), opts)


def test_input_context_and_value_context(s2):
    ctx = InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    assert ctx.get_per_replica_batch_size(64) == 16
    with pytest.raises(ValueError, match="The `global_batch_size` 10 is not divisible by `num_replicas_in_sync` 4"):
        ctx.get_per_replica_batch_size(10)
    vals = s2.experimental_distribute_values_from_function(
        lambda c: np.full(2, c.replica_id_in_sync_group * 10 + c.num_replicas_in_sync, np.int32)
    )
    assert [list(v) for v in vals.values] == [[2, 2], [12, 12]]
    out = s2.run(lambda v: v * 2, args=(vals,))
    assert [list(v) for v in out.values] == [[4, 4], [24, 24]]


def test_strategy_run_takes_a_distributed_iterator_batch(s2):
    ds = Dataset.from_tensor_slices(np.arange(8, dtype=np.float32)).batch(4)
    it = iter(s2.experimental_distribute_dataset(ds))
    out = s2.run(lambda x: xtpu.math.reduce_sum(x), args=(next(it),))
    assert [float(v) for v in out.values] == [1.0, 5.0]
