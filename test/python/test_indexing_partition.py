"""Gathers and scatters over logical cores (tpu-propagate-sharding,
tpu-spmd-partition): an embedding table split along its rows (each core
gathers the ids in its rows, masks the others, all-reduces: GSPMD), ids
split (local), and the gradient's scatter-add into the split table (local),
compiled over 2 replicas x 2 logical cores against the eager run."""

from __future__ import annotations

import numpy as np

import xtpu


def _assignment():
    return xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=2)


def test_row_split_table_gather_and_gradient_match_eager():
    rng = np.random.default_rng(0)
    # 64 rows: all-reducing the [8, 4] result (128 bytes per core) moves
    # less than gathering the table's other half (512 bytes).
    table = rng.standard_normal((64, 4)).astype(np.float32)
    ids = [np.array([63, 0, 31, 32, 32, -1, 70, 3], np.int32), np.array([1, 1, 40, 7, 6, 2, 0, 9], np.int32)]
    ct = rng.standard_normal((8, 4)).astype(np.float32)

    def step(t, i, split=True):
        if split:
            t = xtpu.split_to_logical_devices(t, [2, 1])
        out = xtpu.nn.embedding_lookup(t, i)
        seg = xtpu.math.unsorted_segment_sum(out * ct, i, 64)
        return out, seg

    def grad_step(t, i):
        t = xtpu.split_to_logical_devices(t, [2, 1])
        out = xtpu.gather(t, i)
        return (xtpu.gradients(xtpu.math.reduce_sum(out * ct), [t])[0],)

    got = xtpu.replicate(step, [[table, ids[r]] for r in range(2)], device_assignment=_assignment())
    grads = xtpu.replicate(grad_step, [[table, ids[r]] for r in range(2)], device_assignment=_assignment())
    for r in range(2):
        out, seg = step(table, ids[r], split=False)
        np.testing.assert_array_equal(got[r][0], out)
        np.testing.assert_allclose(got[r][1], seg, rtol=1e-6, atol=1e-6)
        want = np.zeros_like(table)
        ok = (ids[r] >= 0) & (ids[r] < 64)
        np.add.at(want, ids[r][ok], ct[ok])
        np.testing.assert_allclose(grads[r][0], want, rtol=1e-6, atol=1e-6)
    text = xtpu.lower(step, [[table, ids[r]] for r in range(2)], device_assignment=_assignment()).compile()
    partitioned = text.stages["tpu-spmd-partition"]
    assert "ccl.all_reduce" in partitioned and "ccl.all_gather" not in partitioned
    assert "tensor<32x4xf32>" in partitioned  # each core holds half the rows


def test_split_ids_gather_is_local():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((6, 3))
    ids = np.array([5, 0, 2, 2], np.int64)

    def step(t, i):
        i = xtpu.split_to_logical_devices(i, [2])
        return (xtpu.gather(t, i) * 2.0,)

    compiled = xtpu.lower(step, [[table, ids], [table, ids]], device_assignment=_assignment()).compile()
    got = compiled([[table, ids], [table, ids]])
    for r in range(2):
        np.testing.assert_array_equal(got[r][0], table[ids] * 2.0)
    partitioned = compiled.stages["tpu-spmd-partition"]
    assert "ccl." not in partitioned  # ids split, table whole: local
    assert "-> tensor<2x3xf64>" in partitioned  # each core gathers its 2 ids


def test_gather_from_an_empty_table_over_cores_gives_zeros():
    """A table with no rows, split or not: every id is out of range (zeros),
    as eagerly (a fuzz finding: the partitioned gather's slice size)."""

    def comp(x, split=True):
        if split:
            x = xtpu.split_to_logical_devices(x, [2, 1])
        return xtpu.gather(x, np.array([0, 1], np.int32)), xtpu.nn.embedding_lookup(x, np.array([1]))

    empty = np.zeros((0, 4), np.float32)
    got = xtpu.replicate(comp, [[empty]] * 2, device_assignment=_assignment())
    eager = comp(empty, split=False)
    for r in range(2):
        for g, e in zip(got[r], eager):
            np.testing.assert_array_equal(g, e)
            assert not np.any(g)
