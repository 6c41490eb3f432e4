"""Logical devices end to end: the seed's example and TF's API errors."""

import numpy as np
import pytest

import xtpu


def model(image, w1, w2):
    # The seed: an image [batch, width, height, channel] split [1, 2, 4, 1]
    # over 8 logical devices feeding a small model.
    x = xtpu.split_to_logical_devices(image, [1, 2, 4, 1])
    h = xtpu.nn.relu(x * 2.0 - 1.0)
    flat = xtpu.reshape(h, [image.shape[0], -1])
    logits = flat @ w1
    hidden = xtpu.math.tanh(logits)
    scores = hidden @ w2
    return xtpu.math.reduce_sum(scores, axis=1), xtpu.math.reduce_max(h, axis=[1, 2])


def seed_inputs(seed):
    rng = np.random.default_rng(seed)
    image = rng.integers(-3, 4, size=(2, 8, 8, 3)).astype(np.float32)
    w1 = rng.integers(-2, 3, size=(8 * 8 * 3, 16)).astype(np.float32) / 8
    w2 = rng.integers(-2, 3, size=(16, 4)).astype(np.float32)
    return [image, w1, w2]


@pytest.mark.parametrize("replicas, cores", [(1, 8), (2, 8)])
def test_seed_example_matches_the_unsplit_program(replicas, cores):
    topology = xtpu.initialize_tpu_system(num_cores=replicas * cores)
    da = xtpu.DeviceAssignment.build(topology, computation_shape=[2, 2, 1, 2], num_replicas=replicas)
    assert da.num_cores_per_replica == 8
    inputs = [seed_inputs(r) for r in range(replicas)]
    out = xtpu.replicate(model, inputs, device_assignment=da)
    for r in range(replicas):
        want = model(*inputs[r])  # eagerly: the unsplit program
        np.testing.assert_allclose(out[r][0], want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out[r][1], want[1])


def test_the_partitioned_program_has_local_shapes_and_collectives():
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[2, 2, 1, 2])
    compiled = xtpu.lower(model, [seed_inputs(0)], device_assignment=da).compile()
    text = compiled.stages["tpu-spmd-partition"]
    # The image's shard on each core: width 8/2, height 8/4.
    assert "as %input0: tensor<2x4x2x3xf32>" in text
    assert "ccl.all_reduce" in text or "ccl.all_gather" in text
    assert "num_cores_per_replica = 8" in text
    assert "tpu.sharding_constraint" not in text


@pytest.mark.parametrize(
    "pd, match",
    [
        ([1, 2, 4], "must equal to the rank"),
        (
            [1, 2, 2, 1],
            "product of `partition_dimensions` should be the same as the number of logical devices \\(=8\\)",
        ),
        ([1, 8, 1, 1], "not divisible"),
    ],
)
def test_the_seeds_three_value_errors(pd, match):
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[2, 2, 1, 2])
    image = np.zeros((2, 4, 8, 3), np.float32)
    with pytest.raises(ValueError, match=match):
        xtpu.lower(lambda x: xtpu.split_to_logical_devices(x, pd), [[image]], device_assignment=da)


def test_replicate_and_assign_to_logical_devices():
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=4)

    def f(x):
        a = xtpu.assign_to_logical_device(x * 3, 1)
        b = xtpu.replicate_to_logical_devices(x + 1)
        return xtpu.split_to_logical_devices(a + b, [2, 1])

    xs = [np.arange(8, dtype=np.int32).reshape(4, 2) + r for r in range(4)]
    out = xtpu.replicate(f, [[x] for x in xs], device_assignment=da)
    for x, o in zip(xs, out):
        np.testing.assert_array_equal(o[0], x * 3 + x + 1)
    with pytest.raises(ValueError, match="Received logical device id 2 but there are only total of 2"):
        xtpu.lower(lambda x: xtpu.assign_to_logical_device(x, 2), [[xs[0]]] * 4, device_assignment=da)


def test_cross_replica_sum_with_logical_devices():
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=4)

    def f(x):
        x = xtpu.split_to_logical_devices(x, [2, 1])
        return xtpu.cross_replica_sum(x * 2, group_assignment=[[0, 1], [2, 3]])

    xs = [np.arange(8, dtype=np.int32).reshape(4, 2) * (r + 1) for r in range(4)]
    out = xtpu.replicate(f, [[x] for x in xs], device_assignment=da)
    np.testing.assert_array_equal(out[0][0], 2 * (xs[0] + xs[1]))
    np.testing.assert_array_equal(out[3][0], 2 * (xs[2] + xs[3]))


def _assignment(replicas, cores):
    topology = xtpu.initialize_tpu_system(num_cores=replicas * cores)
    shapes = {2: [[1, 1, 1, 2]], 4: [[2, 1, 1, 2], [1, 2, 1, 2]], 8: [[2, 2, 1, 2]]}[cores]
    fits = [s for s in shapes if all(a <= b for a, b in zip(s, topology.mesh_shape))]
    da = xtpu.DeviceAssignment.build(topology, computation_shape=fits[0], num_replicas=replicas)
    assert da.num_cores_per_replica == cores
    return da


def _splits(cores):
    return {"rows": [cores, 1], "cols": [1, cores], "both": [2, cores // 2]}


OPS = {
    "elementwise": lambda x, w: xtpu.nn.relu(x * w - 3.0) + 1.0,
    "broadcast": lambda x, w: x + w[0],
    "reshape": lambda x, w: xtpu.reshape(x, [4, 32]) * 2.0,
    "transpose": lambda x, w: xtpu.transpose(x) - w,
    "dot": lambda x, w: x @ w,
    "reduce": lambda x, w: (xtpu.math.reduce_sum(x, axis=0), xtpu.math.reduce_max(x * w, axis=1)),
    "slice_concat": lambda x, w: xtpu.concat([x[2:6], x[0:4]], 0) * 2.0,
    "while": lambda x, w: xtpu.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2.0 + w), (0, x))[1],
}


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("cores", [2, 4, 8])
@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_kind_split_every_way_matches_the_unsplit_program(op, cores, replicas):
    da = _assignment(replicas, cores)
    rng = np.random.default_rng(cores * 10 + replicas)
    inputs = [
        [rng.integers(-4, 5, size=(8, 16)).astype(np.float32), rng.integers(-2, 3, size=(16, 16)).astype(np.float32)][
            :1
        ]
        + [rng.integers(-2, 3, size=(8, 16) if op != "dot" else (16, 16)).astype(np.float32)]
        for _ in range(replicas)
    ]
    if op == "transpose":
        inputs = [[x, rng.integers(-2, 3, size=(16, 8)).astype(np.float32)] for x, _ in inputs]
    for name, pd in _splits(cores).items():

        def fn(x, w, pd=pd):
            return OPS[op](xtpu.split_to_logical_devices(x, pd), w)

        out = xtpu.replicate(fn, inputs, device_assignment=da)
        for r in range(replicas):
            want = OPS[op](*inputs[r])  # eagerly, unsplit
            got = out[r] if isinstance(want, tuple) else out[r][0]
            for g, e in zip(got if isinstance(want, tuple) else [got], want if isinstance(want, tuple) else [want]):
                np.testing.assert_array_equal(g, e, err_msg=f"{op} split {name} {pd} over {cores} cores, replica {r}")
