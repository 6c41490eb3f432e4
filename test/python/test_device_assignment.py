"""Topology, initialize_tpu_system and DeviceAssignment against TF's behaviour.

Expected values come from TF's documentation and from working TF's
placement algorithm (tensorflow/python/tpu/device_assignment.py) by hand;
where TF's own tests pin a value (the v3-8 TopologyProto and a 4x2 device
assignment in tensorflow/compiler/mlir/tensorflow/tests/tpu_rewrite.mlir) the
test says so.
"""

import json
import re

import numpy as np
import pytest

from xtpu.replication.device_assignment import (
    SINGLE_CORE_ASSIGNMENT,
    DeviceAssignment,
    DeviceOrderMode,
    device_assignment,
)
from xtpu.replication.topology import Topology, default_mesh_shape, initialize_tpu_system

# A v3-8 as TF's tests write it: TopologyProto{mesh_shape: [2, 2, 1, 2],
# num_tasks: 1, num_tpu_devices_per_task: 8, device_coordinates: ...} from
# tpu_rewrite.mlir (the trailing field 5, tpu_hardware_feature, is skipped).
TF_V3_8_TOPOLOGY_PROTO = (
    b"\x0a\x04\x02\x02\x01\x02\x10\x01\x18\x08\x22\x20"
    b"\x00\x00\x00\x00\x00\x00\x00\x01\x01\x00\x00\x00\x01\x00\x00\x01"
    b"\x00\x01\x00\x00\x00\x01\x00\x01\x01\x01\x00\x00\x01\x01\x00\x01"
    b"\x2a\x02\x08\x01"
)
V3_8_TPU_ORDER = [
    (0, 0, 0, 0), (0, 0, 0, 1), (1, 0, 0, 0), (1, 0, 0, 1),
    (0, 1, 0, 0), (0, 1, 0, 1), (1, 1, 0, 0), (1, 1, 0, 1),
]  # fmt: skip


def assignment_list(da):
    return [[tuple(core) for core in replica] for replica in da.core_assignment.tolist()]


@pytest.fixture
def v3_8():
    return initialize_tpu_system(num_cores=8)


def two_task_topology():
    # mesh [2, 1, 1, 2]: chip x=0 on task 0, chip x=1 on task 1.
    return Topology(
        mesh_shape=[2, 1, 1, 2],
        device_coordinates=[[[0, 0, 0, 0], [0, 0, 0, 1]], [[1, 0, 0, 0], [1, 0, 0, 1]]],
    )


# ---------------------------------------------------------------- Topology


def test_initialize_tpu_system_default_is_a_v3_8(v3_8):
    assert initialize_tpu_system().mesh_shape.tolist() == [2, 2, 1, 2]
    assert v3_8.mesh_shape.tolist() == [2, 2, 1, 2]
    assert v3_8.mesh_shape.dtype == np.int32
    assert v3_8.mesh_rank == 4
    assert v3_8.num_tasks == 1
    assert v3_8.num_tpus_per_task == 8
    assert v3_8.device_coordinates.shape == (1, 8, 4)
    assert v3_8.missing_devices.shape == (0, 4)


def test_default_device_order_is_tf_v3_8_proto(v3_8):
    tf_topology = Topology(serialized=TF_V3_8_TOPOLOGY_PROTO)
    assert tf_topology.mesh_shape.tolist() == [2, 2, 1, 2]
    assert tf_topology.num_tasks == 1 and tf_topology.num_tpus_per_task == 8
    assert [tuple(c) for c in tf_topology.device_coordinates[0].tolist()] == V3_8_TPU_ORDER
    np.testing.assert_array_equal(v3_8.device_coordinates, tf_topology.device_coordinates)


def test_topology_lookups(v3_8):
    for ordinal, coords in enumerate(V3_8_TPU_ORDER):
        assert v3_8.task_ordinal_at_coordinates(coords) == 0
        assert v3_8.tpu_device_ordinal_at_coordinates(coords) == ordinal
    assert v3_8.tpu_device_name_at_coordinates((1, 0, 0, 1)) == "/task:0/device:TPU:3"
    assert v3_8.tpu_device_name_at_coordinates([0, 1, 0, 0], job="worker") == "/job:worker/task:0/device:TPU:4"
    assert v3_8.cpu_device_name_at_coordinates((1, 1, 0, 1)) == "/task:0/device:CPU:0"
    assert v3_8.cpu_device_name_at_coordinates(np.array([1, 1, 0, 1]), job="tpu_worker") == (
        "/job:tpu_worker/task:0/device:CPU:0"
    )


def test_topology_multi_task_lookups():
    t = two_task_topology()
    assert t.num_tasks == 2 and t.num_tpus_per_task == 2
    assert t.task_ordinal_at_coordinates((1, 0, 0, 1)) == 1
    assert t.tpu_device_ordinal_at_coordinates((1, 0, 0, 1)) == 1
    assert t.tpu_device_name_at_coordinates((1, 0, 0, 0), job="w") == "/job:w/task:1/device:TPU:0"
    assert t.cpu_device_name_at_coordinates((1, 0, 0, 0)) == "/task:1/device:CPU:0"


def test_topology_default_coordinates_any_rank():
    # Core (last axis) fastest, then axis 0, axis 1, ...
    t = Topology(mesh_shape=[3, 2])
    assert [tuple(c) for c in t.device_coordinates[0].tolist()] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)
    ]  # fmt: skip
    t1 = Topology(mesh_shape=[4])
    assert t1.mesh_rank == 1 and t1.device_coordinates[0, :, 0].tolist() == [0, 1, 2, 3]
    t3 = Topology(mesh_shape=[2, 3, 1])
    assert [tuple(c) for c in t3.device_coordinates[0].tolist()][:4] == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]


def test_topology_missing_devices():
    t = Topology(mesh_shape=[2, 1, 1, 2], device_coordinates=[[[0, 0, 0, 0], [0, 0, 0, 1], [1, 0, 0, 1]]])
    assert t.missing_devices.tolist() == [[1, 0, 0, 0]]
    # TF answers -1 for the ordinals of a missing device.
    assert t.task_ordinal_at_coordinates((1, 0, 0, 0)) == -1
    assert t.tpu_device_ordinal_at_coordinates((1, 0, 0, 0)) == -1
    with pytest.raises(ValueError, match=re.escape("no TPU device at coordinates (1, 0, 0, 0)")):
        t.tpu_device_name_at_coordinates((1, 0, 0, 0))


def test_topology_serialization_round_trip_tf_test_case():
    # TF's topology_test.testSerialization.
    original = Topology(mesh_shape=[1, 1, 1, 2], device_coordinates=[[[0, 0, 0, 0], [0, 0, 0, 1]]])
    serialized = original.serialized()
    assert isinstance(serialized, bytes)
    new = Topology(serialized=serialized)
    np.testing.assert_array_equal(original.mesh_shape, new.mesh_shape)
    np.testing.assert_array_equal(original.device_coordinates, new.device_coordinates)


def test_topology_serialized_form_is_documented_stable_json():
    t = two_task_topology()
    doc = json.loads(t.serialized())
    assert doc == {
        "format": "xtpu.Topology/1",
        "mesh_shape": [2, 1, 1, 2],
        "num_tasks": 2,
        "num_tpu_devices_per_task": 2,
        "device_coordinates": [0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1],
    }
    assert t.serialized() == two_task_topology().serialized()
    assert t.serialized() == Topology(serialized=t.serialized()).serialized()
    assert b" " not in t.serialized()
    # A str is read too; `serialized` wins over the other arguments, as in TF.
    again = Topology(serialized=t.serialized().decode(), mesh_shape=[8])
    assert again.mesh_shape.tolist() == [2, 1, 1, 2] and again.num_tasks == 2
    assert initialize_tpu_system(num_cores=4).serialized() == Topology(mesh_shape=[1, 2, 1, 2]).serialized()


def test_topology_arrays_are_read_only(v3_8):
    with pytest.raises(ValueError):
        v3_8.device_coordinates[0, 0, 0] = 1
    with pytest.raises(ValueError):
        v3_8.mesh_shape[0] = 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mesh_shape=[]), "`mesh_shape` must be a sequence of positive entries; got []"),
        (dict(mesh_shape=[2, 0, 1, 2]), "`mesh_shape` must be a sequence of positive entries; got [2, 0, 1, 2]"),
        (dict(mesh_shape=[[2, 2]]), "`mesh_shape` must be a sequence of positive entries"),
        (dict(mesh_shape=[2.5, 2]), "`mesh_shape` must be a sequence of positive entries"),
        (dict(), "Topology needs `serialized` or `mesh_shape`; got neither"),
        (
            dict(mesh_shape=[2, 2, 1, 2], device_coordinates=[[0, 0, 0, 0]]),
            "`device_coordinates` must be a rank 3 int32 array with minor dimension equal to the mesh "
            "shape rank (4); got shape (1, 4)",
        ),
        (
            dict(mesh_shape=[2, 2, 1, 2], device_coordinates=[[[0, 0, 0]]]),
            "minor dimension equal to the mesh shape rank (4); got shape (1, 1, 3)",
        ),
        (
            dict(mesh_shape=[1, 1, 1, 2], device_coordinates=[[[0, 0, 0, 0], [0, 0, 0, 2]]]),
            "`device_coordinates` of task 0 device 1 are (0, 0, 0, 2), outside the mesh of shape [1 1 1 2]",
        ),
        (
            dict(mesh_shape=[1, 1, 1, 2], device_coordinates=[[[0, 0, 0, 1]], [[0, 0, 0, 1]]]),
            "`device_coordinates` place task 1 device 0 and task 0 device 0 at the same coordinates (0, 0, 0, 1)",
        ),
    ],
)
def test_topology_errors(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Topology(**kwargs)


def _proto(mesh, num_tasks, per_task, coords):
    def varint(v):
        out = b""
        v &= (1 << 64) - 1
        while True:
            b, v = v & 0x7F, v >> 7
            out += bytes([b | (0x80 if v else 0)])
            if not v:
                return out

    def packed(field, values):
        body = b"".join(varint(v) for v in values)
        return bytes([field << 3 | 2]) + varint(len(body)) + body

    return packed(1, mesh) + b"\x10" + varint(num_tasks) + b"\x18" + varint(per_task) + packed(4, coords)


@pytest.mark.parametrize(
    "serialized, message",
    [
        (b'{"mesh_shape": [2]', "`serialized` is not a serialized xtpu topology"),
        (b"[1, 2]", "neither an xtpu topology (JSON) nor a TopologyProto"),
        (b'{"mesh_shape": [2]}', "`serialized` topology lacks the field(s) ['device_coordinates', 'num_tasks'"),
        (
            b'{"mesh_shape":[0,2],"num_tasks":1,"num_tpu_devices_per_task":0,"device_coordinates":[]}',
            "`mesh_shape` must be a vector of positive entries; got [0, 2]",
        ),
        (
            b'{"mesh_shape":[2],"num_tasks":-1,"num_tpu_devices_per_task":2,"device_coordinates":[]}',
            "`num_tasks` must be >= 0; got -1",
        ),
        (
            b'{"mesh_shape":[2],"num_tasks":1,"num_tpu_devices_per_task":-2,"device_coordinates":[]}',
            "`num_tpu_devices_per_task` must be >= 0; got -2",
        ),
        (
            b'{"mesh_shape":[2],"num_tasks":1,"num_tpu_devices_per_task":2,"device_coordinates":[0]}',
            "`device_coordinates` must have shape num_tasks (1) * num_tpu_devices_per_task (2) * "
            "len(mesh_shape) (1); got shape 1",
        ),
        (
            b'{"mesh_shape":[2],"num_tasks":1,"num_tpu_devices_per_task":2,"device_coordinates":[0,-1]}',
            "`device_coordinates` must be >= 0; got [0, -1]",
        ),
        (_proto([2, 2, 1, 2], 1, 2, [0, 0, 0, 0]), "num_tpu_devices_per_task (2) * len(mesh_shape) (4); got shape 4"),
        (b"\x0a\x09\x02", "truncated length-delimited field"),
    ],
)
def test_topology_serialized_errors(serialized, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Topology(serialized=serialized)


def test_topology_reads_tf_topology_proto():
    t = Topology(serialized=_proto([1, 1, 1, 2], 2, 1, [0, 0, 0, 1, 0, 0, 0, 0]))
    assert t.num_tasks == 2 and t.num_tpus_per_task == 1
    assert t.task_ordinal_at_coordinates((0, 0, 0, 0)) == 1


@pytest.mark.parametrize(
    "num_cores, mesh",
    [(1, [1, 1, 1, 1]), (2, [1, 1, 1, 2]), (4, [1, 2, 1, 2]), (8, [2, 2, 1, 2]), (32, [4, 4, 1, 2]), (3, [1, 3, 1, 1])],
)
def test_initialize_tpu_system_mesh_shapes(num_cores, mesh):
    assert default_mesh_shape(num_cores) == mesh
    t = initialize_tpu_system(num_cores=num_cores)
    assert t.mesh_shape.tolist() == mesh
    assert t.num_tasks == 1 and t.num_tpus_per_task == num_cores


def test_initialize_tpu_system_with_cluster_resolver():
    class Resolver:
        num_cores = 4

    class TFStyleResolver:
        def num_accelerators(self):
            return {"TPU": 2}

    class MethodResolver:
        def num_cores(self):
            return 32

    assert initialize_tpu_system(Resolver()).num_tpus_per_task == 4
    assert initialize_tpu_system(cluster_resolver=Resolver(), num_cores=4).mesh_shape.tolist() == [1, 2, 1, 2]
    assert initialize_tpu_system(TFStyleResolver()).mesh_shape.tolist() == [1, 1, 1, 2]
    assert initialize_tpu_system(MethodResolver()).mesh_shape.tolist() == [4, 4, 1, 2]
    with pytest.raises(ValueError, match=re.escape("num_cores=8 disagrees with the cluster_resolver's 4 cores")):
        initialize_tpu_system(Resolver(), num_cores=8)
    with pytest.raises(ValueError, match="cluster_resolver must have a `num_cores` attribute"):
        initialize_tpu_system(object())


@pytest.mark.parametrize("bad", [0, -8, 2.0, "8", True])
def test_initialize_tpu_system_bad_num_cores(bad):
    with pytest.raises(ValueError, match=re.escape(f"num_cores must be a positive integer; got {bad!r}")):
        initialize_tpu_system(num_cores=bad)


# ---------------------------------------------------------- DeviceAssignment


def test_build_default_is_one_replica_on_core_0(v3_8):
    da = DeviceAssignment.build(v3_8)
    assert da.num_replicas == 1 and da.num_cores_per_replica == 1
    assert da.topology is v3_8
    assert da.core_assignment.tolist() == SINGLE_CORE_ASSIGNMENT
    assert da.core_assignment.dtype == np.int32
    assert da.coordinates(0, 0) == (0, 0, 0, 0)
    assert da.tpu_ordinal() == 0
    assert da.host_device() == "/task:0/device:CPU:0"
    assert da.tpu_device() == "/task:0/device:TPU:0"


def test_build_8_replicas_one_core_each(v3_8):
    # replica_shape [2, 2, 1, 2], numbered core-fastest then x then y: replica r
    # lands on TPU r, as on a real v3-8.
    da = DeviceAssignment.build(v3_8, computation_shape=[1, 1, 1, 1], num_replicas=8)
    assert da.num_replicas == 8 and da.num_cores_per_replica == 1
    assert assignment_list(da) == [[c] for c in V3_8_TPU_ORDER]
    assert [da.tpu_ordinal(r) for r in range(8)] == list(range(8))
    assert [da.device_id(r, 0) for r in range(8)] == list(range(8))
    assert da.tpu_device(5, 0, job="worker") == "/job:worker/task:0/device:TPU:5"
    assert da.lookup_replicas(0, 0) == list(range(8))


def test_build_4_replicas_of_one_chip_is_tf_ring(v3_8):
    # Whole chips, no stride, the mesh filled: TF's ring.  The chips are taken
    # (0,0,0) (1,0,0) (1,1,0) (0,1,0) -- exactly the device_assignment of TF's
    # tpu_rewrite.mlir test for 4 replicas x 2 cores on this topology.
    da = DeviceAssignment.build(v3_8, computation_shape=[1, 1, 1, 2], num_replicas=4)
    assert da.num_replicas == 4 and da.num_cores_per_replica == 2
    tf_mlir_test = [0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1]
    assert da.core_assignment.reshape(-1).tolist() == tf_mlir_test
    assert [da.coordinates(r, 0)[:3] for r in range(4)] == [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)]
    assert [da.coordinates(r, 1)[3] for r in range(4)] == [1, 1, 1, 1]
    assert da.device_ids.tolist() == [[0, 1], [2, 3], [6, 7], [4, 5]]
    assert da.logical_devices_of(2) == [6, 7]
    assert da.tpu_ordinal(replica=3, logical_core=1) == 5
    assert da.lookup_replicas(0, 1) == [0, 1, 2, 3]


def test_build_one_replica_on_all_8_cores(v3_8):
    # One replica of 8 logical cores: logical cores 2k, 2k+1 on the k-th chip
    # of the 2x2 ring.
    da = DeviceAssignment.build(v3_8, computation_shape=[2, 2, 1, 2], num_replicas=1)
    assert da.num_replicas == 1 and da.num_cores_per_replica == 8
    assert assignment_list(da) == [
        [(0, 0, 0, 0), (0, 0, 0, 1), (1, 0, 0, 0), (1, 0, 0, 1), (1, 1, 0, 0), (1, 1, 0, 1), (0, 1, 0, 0), (0, 1, 0, 1)]
    ]
    assert da.logical_devices_of(0) == [0, 1, 2, 3, 6, 7, 4, 5]
    assert da.lookup_replicas(0, 7) == [0]


def test_build_partial_fill_uses_mesh_order(v3_8):
    # TF's own example: 4 single-core replicas take a (2,1,1,2) replica grid,
    # i.e. both cores of chips (0,0,0) and (1,0,0).
    da = DeviceAssignment.build(v3_8, num_replicas=4)
    assert assignment_list(da) == [[c] for c in V3_8_TPU_ORDER[:4]]
    # Two 2-core replicas do not fill the mesh: no ring, replica grid [2,1,1,1].
    da = DeviceAssignment.build(v3_8, computation_shape=[1, 1, 1, 2], num_replicas=2)
    assert assignment_list(da) == [[(0, 0, 0, 0), (0, 0, 0, 1)], [(1, 0, 0, 0), (1, 0, 0, 1)]]


def test_build_mesh_order_mode_disables_rings(v3_8):
    da = DeviceAssignment.build(
        v3_8, computation_shape=[1, 1, 1, 2], num_replicas=4, device_order_mode=DeviceOrderMode.MESH
    )
    # Replica grid [2, 2, 1, 1], x fastest: chips (0,0) (1,0) (0,1) (1,1).
    assert [da.coordinates(r, 0)[:3] for r in range(4)] == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    ring = DeviceAssignment.build(
        v3_8, computation_shape=[1, 1, 1, 2], num_replicas=4, device_order_mode=DeviceOrderMode.RING
    )
    assert [ring.coordinates(r, 0)[:3] for r in range(4)] == [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)]


def test_build_ring_on_4x4_follows_tf_picture():
    # _open_ring_2d's documented 4x4 order (rows y, columns x):
    #   0 -- 1 -- 2 -- 3 / 15 6 5 4 / 14 7 8 9 / 13 12 11 10
    picture = [[0, 1, 2, 3], [15, 6, 5, 4], [14, 7, 8, 9], [13, 12, 11, 10]]
    expected = [None] * 16
    for y, row in enumerate(picture):
        for x, k in enumerate(row):
            expected[k] = (x, y, 0)
    t = initialize_tpu_system(num_cores=32)  # [4, 4, 1, 2]
    da = DeviceAssignment.build(t, computation_shape=[1, 1, 1, 2], num_replicas=16)
    assert [da.coordinates(r, 0)[:3] for r in range(16)] == expected
    assert [da.coordinates(r, 1)[3] for r in range(16)] == [1] * 16


def test_build_ring_on_2x2x2_follows_tf_3d_ring():
    # _ring_3d: z=0 ring (0,0) (1,0) (1,1) (0,1), then the z=1 ring reversed
    # (0,1) (1,1) (1,0), closed by (0,0,1).
    t = Topology(mesh_shape=[2, 2, 2, 2])
    da = DeviceAssignment.build(t, computation_shape=[1, 1, 1, 2], num_replicas=8)
    assert [da.coordinates(r, 0)[:3] for r in range(8)] == [
        (0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 1, 1), (1, 1, 1), (1, 0, 1), (0, 0, 1)
    ]  # fmt: skip
    # Two replicas of 2x2x1 chips: the inner ring inside each, stacked in z.
    da = DeviceAssignment.build(t, computation_shape=[2, 2, 1, 2], num_replicas=2)
    chips = [da.coordinates(1, k)[:3] for k in range(0, 8, 2)]
    assert chips == [(0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)]


def test_build_odd_mesh_ring_is_row_major():
    t = Topology(mesh_shape=[3, 2, 1, 2])
    da = DeviceAssignment.build(t, computation_shape=[1, 1, 1, 2], num_replicas=6)
    assert [da.coordinates(r, 0)[:3] for r in range(6)] == [
        (0, 0, 0), (1, 0, 0), (2, 0, 0), (0, 1, 0), (1, 1, 0), (2, 1, 0)
    ]  # fmt: skip


def test_build_with_stride_interleaves_replicas():
    # mesh [4,1,1,1], shape [2,1,1,1], stride [2,1,1,1]: footprint 4, two
    # replicas interleaved: replica 0 on x=0,2 and replica 1 on x=1,3.
    t = Topology(mesh_shape=[4, 1, 1, 1])
    da = DeviceAssignment.build(t, computation_shape=[2, 1, 1, 1], computation_stride=[2, 1, 1, 1], num_replicas=2)
    assert assignment_list(da) == [[(0, 0, 0, 0), (2, 0, 0, 0)], [(1, 0, 0, 0), (3, 0, 0, 0)]]


def test_build_with_stride_on_the_core_axis(v3_8):
    # shape [2,1,1,1], stride [1,1,1,2]: each replica spans x=0..1 with one
    # core index; replica grid [1, 2, 1, 2] numbered core first, then y.
    da = DeviceAssignment.build(v3_8, computation_shape=[2, 1, 1, 1], computation_stride=[1, 1, 1, 2], num_replicas=4)
    assert assignment_list(da) == [
        [(0, 0, 0, 0), (1, 0, 0, 0)],
        [(0, 0, 0, 1), (1, 0, 0, 1)],
        [(0, 1, 0, 0), (1, 1, 0, 0)],
        [(0, 1, 0, 1), (1, 1, 0, 1)],
    ]
    assert da.device_ids.tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_build_any_rank():
    t = Topology(mesh_shape=[4])
    da = DeviceAssignment.build(t, computation_shape=[2], num_replicas=2)
    assert assignment_list(da) == [[(0,), (1,)], [(2,), (3,)]]
    t2 = Topology(mesh_shape=[2, 4])  # two chips of four cores
    da = DeviceAssignment.build(t2, computation_shape=[1, 2], num_replicas=4)
    # Replica grid [2, 2]: core axis first -> (0,0) (0,2) (1,0) (1,2).
    assert [da.coordinates(r, 0) for r in range(4)] == [(0, 0), (0, 2), (1, 0), (1, 2)]
    assert da.logical_devices_of(1) == [2, 3]


def test_build_accepts_serialized_topology(v3_8):
    da = DeviceAssignment.build(v3_8.serialized(), num_replicas=8)
    assert da.topology.mesh_shape.tolist() == [2, 2, 1, 2]
    assert device_assignment(TF_V3_8_TOPOLOGY_PROTO, num_replicas=8).device_ids.reshape(-1).tolist() == list(range(8))


def test_build_on_topology_with_missing_devices_uses_task_order():
    t = Topology(mesh_shape=[2, 1, 1, 2], device_coordinates=[[[0, 0, 0, 0], [0, 0, 0, 1], [1, 0, 0, 1]]])
    da = DeviceAssignment.build(t, num_replicas=3)
    assert assignment_list(da) == [[(0, 0, 0, 0)], [(0, 0, 0, 1)], [(1, 0, 0, 1)]]
    with pytest.raises(
        ValueError,
        match=re.escape("requested 4 replicas with shape [1 1 1 1] (4 cores) but the topology has only 3 devices"),
    ):
        DeviceAssignment.build(t, num_replicas=4)
    with pytest.raises(ValueError, match=re.escape("computation_stride must be all ones on a topology with missing")):
        DeviceAssignment.build(t, computation_stride=[2, 1, 1, 1])


def test_multi_task_lookups():
    da = DeviceAssignment.build(two_task_topology(), num_replicas=4)
    assert assignment_list(da) == [[(0, 0, 0, 0)], [(0, 0, 0, 1)], [(1, 0, 0, 0)], [(1, 0, 0, 1)]]
    assert da.lookup_replicas(0, 0) == [0, 1]
    assert da.lookup_replicas(1, 0) == [2, 3]
    assert da.host_device(2) == "/task:1/device:CPU:0"
    assert da.host_device(replica=1, job="worker") == "/job:worker/task:0/device:CPU:0"
    assert da.tpu_device(3, job="worker") == "/job:worker/task:1/device:TPU:1"
    assert da.tpu_ordinal(3) == 1
    assert [da.device_id(r) for r in range(4)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=re.escape("Can not find any replica in task: 2 contains logical_core: 0")):
        da.lookup_replicas(2, 0)
    with pytest.raises(ValueError, match=re.escape("Can not find any replica in task: 0 contains logical_core: 1")):
        da.lookup_replicas(0, 1)


def test_direct_construction(v3_8):
    da = DeviceAssignment(v3_8, [[[1, 1, 0, 1], [0, 0, 0, 0]]])
    assert da.num_replicas == 1 and da.num_cores_per_replica == 2
    assert da.coordinates(0, 0) == (1, 1, 0, 1)
    assert da.tpu_ordinal(0, 0) == 7 and da.logical_devices_of(0) == [7, 0]
    with pytest.raises(ValueError):
        da.core_assignment[0, 0, 0] = 0


@pytest.mark.parametrize(
    "topology, core_assignment, message",
    [
        ("v3_8", [[0, 0, 0, 0]], "core_assignment must be a rank 3 numpy array, got shape (1, 4)"),
        (
            "v3_8",
            [[[0, 0, 0]]],
            "core_assignment.shape[-1] must have size equal to topology rank (4), got core_assignment.shape=(1, 1, 3)",
        ),
        (
            "v3_8",
            [[[0, 0, 1, 0]]],
            "core_assignment maps replica 0 logical core 0 to (0, 0, 1, 0), outside the TPU mesh of shape [2 2 1 2]",
        ),
        (
            "v3_8",
            [[[0, 0, 0, 0]], [[0, 0, 0, 1]], [[0, 0, 0, 0]]],
            "core_assignment maps replica 0 logical core 0 and replica 2 logical core 0 to the same core (0, 0, 0, 0)",
        ),
        (
            "missing",
            [[[1, 0, 0, 0]]],
            "core_assignment maps replica 0 logical core 0 to (1, 0, 0, 0), a missing device of the topology",
        ),
        ("not a topology", [[[0, 0, 0, 0]]], "topology must be a Topology object, got <class 'str'>"),
    ],
)
def test_direct_construction_errors(v3_8, topology, core_assignment, message):
    topologies = {
        "v3_8": v3_8,
        "missing": Topology(mesh_shape=[2, 1, 1, 1], device_coordinates=[[[0, 0, 0, 0]]]),
    }
    with pytest.raises(ValueError, match=re.escape(message)):
        DeviceAssignment(topologies.get(topology, topology), core_assignment)


def test_index_errors(v3_8):
    da = DeviceAssignment.build(v3_8, computation_shape=[1, 1, 1, 2], num_replicas=4)
    with pytest.raises(ValueError, match=re.escape("replica 4 is out of range: the device assignment has 4 replicas")):
        da.coordinates(4, 0)
    with pytest.raises(ValueError, match=re.escape("replica -1 is out of range")):
        da.tpu_ordinal(-1)
    with pytest.raises(
        ValueError, match=re.escape("logical_core 2 is out of range: the device assignment has 2 cores per replica")
    ):
        da.device_id(0, 2)
    with pytest.raises(ValueError, match=re.escape("replica 9 is out of range")):
        da.logical_devices_of(9)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(computation_shape=[1, 1, 1]), "computation_shape must have shape [4]; got (3,)"),
        (dict(computation_shape=[[1, 1, 1, 1]]), "computation_shape must have shape [4]; got (1, 4)"),
        (dict(computation_stride=[1, 1, 1, 1, 1]), "computation_stride must have shape [4]; got (5,)"),
        (dict(computation_shape=[1, 0, 1, 1]), "computation_shape must be positive; got computation_shape=[1 0 1 1]"),
        (
            dict(computation_stride=[1, 1, -1, 1]),
            "computation_stride must be positive; got computation_stride=[ 1  1 -1  1]",
        ),
        # The seed's [1, 2, 2, 2] needs z = 2; a v3-8 has z = 1.
        (
            dict(computation_shape=[1, 2, 2, 2]),
            "computation footprint [1 2 2 2] does not fit in TPU topology shape [2 2 1 2]",
        ),
        (
            dict(computation_shape=[2, 1, 1, 1], computation_stride=[2, 1, 1, 1]),
            "computation footprint [4 1 1 1] does not fit in TPU topology shape [2 2 1 2]",
        ),
        (
            dict(num_replicas=9),
            "requested 9 replicas but only 8 replicas with shape [1 1 1 1] and computation_stride "
            "[1 1 1 1] fit in a TPU mesh of shape [2 2 1 2]",
        ),
        (
            dict(computation_shape=[1, 1, 1, 2], num_replicas=5),
            "requested 5 replicas but only 4 replicas with shape [1 1 1 2] and computation_stride "
            "[1 1 1 1] fit in a TPU mesh of shape [2 2 1 2]",
        ),
        (
            dict(computation_shape=[2, 2, 1, 2], num_replicas=2),
            "requested 2 replicas but only 1 replicas with shape [2 2 1 2] and computation_stride "
            "[1 1 1 1] fit in a TPU mesh of shape [2 2 1 2]",
        ),
        (dict(num_replicas=0), "num_replicas must be a positive integer; got num_replicas=0"),
        (
            dict(num_replicas=4, device_order_mode=DeviceOrderMode.RING),
            "device_order_mode=DeviceOrderMode.RING is not compatible with the 3D tiling",
        ),
    ],
)
def test_build_errors(v3_8, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        DeviceAssignment.build(v3_8, **kwargs)


def test_build_rejects_non_topology():
    with pytest.raises(ValueError, match=re.escape("`topology` is not a Topology object; got <class 'list'>")):
        DeviceAssignment.build([2, 2, 1, 2])


def test_every_build_is_a_valid_disjoint_assignment():
    # Whatever the arguments, no two logical cores share a physical core and
    # every replica has prod(computation_shape) cores.
    t = initialize_tpu_system(num_cores=32)
    for shape in ([1, 1, 1, 1], [1, 1, 1, 2], [2, 1, 1, 2], [2, 2, 1, 2], [4, 4, 1, 2], [1, 4, 1, 1]):
        capacity = 32 // int(np.prod(shape))
        for n in sorted({1, min(2, capacity), max(capacity // 2, 1), capacity}):
            da = DeviceAssignment.build(t, computation_shape=shape, num_replicas=n)
            assert da.core_assignment.shape == (n, int(np.prod(shape)), 4)
            assert len(set(da.device_ids.reshape(-1).tolist())) == da.device_ids.size
