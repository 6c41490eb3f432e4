"""``DeviceAssignment``: where each logical core of each replica runs.

Semantics follow TensorFlow's ``tf.tpu.experimental.DeviceAssignment`` and its
placement function ``device_assignment()``
(``tensorflow/python/tpu/device_assignment.py``, TF 2.x): a
``core_assignment`` array ``[num_replicas, num_cores_per_replica, mesh_rank]``
maps each (replica, logical core) to mesh coordinates of a ``Topology``
(``xtpu.topology``), and ``DeviceAssignment.build`` tiles the mesh with
blocks of ``computation_shape`` cores spaced by ``computation_stride``:

* the replica grid is chosen as close to a cube as possible, visiting mesh
  axes by increasing capacity with the core axis first, then x, y, z (so four
  single-core replicas on a v3-8 take a ``[2, 1, 1, 2]`` grid, not
  ``[1, 1, 2, 2]``);
* on a 4-D mesh, if every replica uses whole chips, the stride is all ones
  and the replicas fill the mesh, then both the replicas and the chips inside
  each replica follow TF's ring order (``_ring_3d``): a 2x2 chip grid is
  visited (0,0) (1,0) (1,1) (0,1);
* otherwise replica ``r`` is numbered core-fastest, then x, y, z, and its
  logical cores are the block's cores in row-major order;
* on a topology with missing devices, replicas take devices in task order.

xtpu's additions: ``device_id``/``device_ids``/``logical_devices_of`` (global
TPU ordinals, ``task * num_tpus_per_task + tpu_ordinal``, which is the device
number in xtpu's one-task simulated system), and checks TF leaves to the TPU
runtime: coordinates outside the mesh or on a missing device, two logical
cores on one physical core, and indices out of range are ``ValueError``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from xtpu.replication.topology import Topology

__all__ = [
    "SINGLE_CORE_ASSIGNMENT",
    "DeviceAssignment",
    "DeviceOrderMode",
    "device_assignment",
]

# The assignment of a one-replica, one-core computation on a 4-D TPU mesh.
SINGLE_CORE_ASSIGNMENT = [[[0, 0, 0, 0]]]


class DeviceOrderMode(enum.IntEnum):
    """How `DeviceAssignment.build` orders devices (TF's `DeviceOrderMode`).

    AUTO forms rings when that is possible, RING requires rings, MESH never
    forms rings (replicas and logical cores are numbered in mesh order).
    """

    AUTO = 0
    RING = 1
    MESH = 2


def _fmt(coords: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(c) for c in coords)


class DeviceAssignment:
    """Mapping from logical cores in a computation to the physical TPU topology.

    Prefer `DeviceAssignment.build()`; it is easier if less flexible than
    constructing a `DeviceAssignment` from a `core_assignment` directly.
    """

    def __init__(self, topology: Topology, core_assignment: Any):
        """Constructs a `DeviceAssignment` object.

        Args:
          topology: A `Topology` object that describes the physical TPU topology.
          core_assignment: A logical to physical core mapping, an int array of
            shape `[num_replicas, num_cores_per_replica, topology.mesh_rank]`
            (see the `core_assignment` property).

        Raises:
          ValueError: If `topology` is not a `Topology` object.
          ValueError: If `core_assignment` is not a rank 3 array whose minor
            dimension equals the topology rank.
          ValueError: If an entry lies outside the mesh or on a missing device,
            or two logical cores share one physical core.
        """
        if not isinstance(topology, Topology):
            raise ValueError(f"topology must be a Topology object, got {type(topology)}")
        core_assignment = np.array(core_assignment, dtype=np.int32)
        if core_assignment.ndim != 3:
            raise ValueError(f"core_assignment must be a rank 3 numpy array, got shape {core_assignment.shape}")
        if core_assignment.shape[-1] != topology.mesh_rank:
            raise ValueError(
                f"core_assignment.shape[-1] must have size equal to topology rank "
                f"({topology.mesh_rank}), got core_assignment.shape={core_assignment.shape}"
            )
        self._topology = topology
        self._num_replicas = int(core_assignment.shape[0])
        self._num_cores_per_replica = int(core_assignment.shape[1])
        core_assignment.setflags(write=False)
        self._core_assignment = core_assignment

        per_task = topology.num_tpus_per_task
        device_ids = np.zeros(core_assignment.shape[:2], dtype=np.int64)
        tasks = np.zeros(core_assignment.shape[:2], dtype=np.int64)
        owner: dict[tuple[int, ...], tuple[int, int]] = {}
        for replica in range(self._num_replicas):
            for core in range(self._num_cores_per_replica):
                coords = _fmt(core_assignment[replica, core])
                if any(c < 0 or c >= s for c, s in zip(coords, topology.mesh_shape)):
                    raise ValueError(
                        f"core_assignment maps replica {replica} logical core {core} to "
                        f"{coords}, outside the TPU mesh of shape {topology.mesh_shape}"
                    )
                task = topology.task_ordinal_at_coordinates(coords)
                if task < 0:
                    raise ValueError(
                        f"core_assignment maps replica {replica} logical core {core} to "
                        f"{coords}, a missing device of the topology"
                    )
                if coords in owner:
                    other = owner[coords]
                    raise ValueError(
                        f"core_assignment maps replica {other[0]} logical core {other[1]} and "
                        f"replica {replica} logical core {core} to the same core {coords}"
                    )
                owner[coords] = (replica, core)
                tasks[replica, core] = task
                device_ids[replica, core] = task * per_task + topology.tpu_device_ordinal_at_coordinates(coords)
        device_ids.setflags(write=False)
        self._device_ids = device_ids

        # task -> logical core -> sorted replicas (TF's lookup table).
        table: dict[int, dict[int, list[int]]] = {}
        for replica in range(self._num_replicas):
            for core in range(self._num_cores_per_replica):
                table.setdefault(int(tasks[replica, core]), {}).setdefault(core, []).append(replica)
        self._task_and_cores_to_replicas = table

    @property
    def topology(self) -> Topology:
        """A `Topology` that describes the TPU topology."""
        return self._topology

    @property
    def num_cores_per_replica(self) -> int:
        """The number of cores per replica."""
        return self._num_cores_per_replica

    @property
    def num_replicas(self) -> int:
        """The number of replicas of the computation."""
        return self._num_replicas

    @property
    def core_assignment(self) -> np.ndarray:
        """The logical to physical core mapping.

        Returns:
          A read-only int32 numpy array of rank 3, with shape `[num_replicas,
          num_cores_per_replica, topology_rank]`.  Maps (replica, logical core)
          pairs to physical topology coordinates.
        """
        return self._core_assignment

    def _check_index(self, replica: int, logical_core: int) -> None:
        if not 0 <= replica < self._num_replicas:
            raise ValueError(
                f"replica {replica} is out of range: the device assignment has {self._num_replicas} replicas"
            )
        if not 0 <= logical_core < self._num_cores_per_replica:
            raise ValueError(
                f"logical_core {logical_core} is out of range: the device assignment has "
                f"{self._num_cores_per_replica} cores per replica"
            )

    def coordinates(self, replica: int, logical_core: int) -> tuple[int, ...]:
        """Returns the physical topology coordinates of a logical core.

        Args:
          replica: the replica number, in `[0, num_replicas)`.
          logical_core: the logical core, in `[0, num_cores_per_replica)`.

        Returns:
          A tuple of `topology.mesh_rank` ints.

        Raises:
          ValueError: If `replica` or `logical_core` is out of range.
        """
        self._check_index(replica, logical_core)
        return _fmt(self._core_assignment[replica, logical_core, :])

    def lookup_replicas(self, task_id: int, logical_core: int) -> list[int]:
        """Lookup replica ids by task number and logical core.

        Args:
          task_id: TensorFlow task number.
          logical_core: An integer, identifying a logical core.

        Returns:
          A sorted list of the replicas that are attached to that task and
          logical_core.

        Raises:
          ValueError: If no replica exists in the task which contains the
            logical core.
        """
        try:
            return list(self._task_and_cores_to_replicas[task_id][logical_core])
        except (KeyError, TypeError):
            raise ValueError(
                f"Can not find any replica in task: {task_id} contains logical_core: {logical_core}"
            ) from None

    def tpu_ordinal(self, replica: int = 0, logical_core: int = 0) -> int:
        """Returns the ordinal, within its task, of the TPU device of a logical core.

        Raises:
          ValueError: If `replica` or `logical_core` is out of range.
        """
        return self._topology.tpu_device_ordinal_at_coordinates(self.coordinates(replica, logical_core))

    def host_device(self, replica: int = 0, logical_core: int = 0, job: str | None = None) -> str:
        """Returns the CPU device attached to a logical core, e.g. `/task:0/device:CPU:0`.

        Raises:
          ValueError: If `replica` or `logical_core` is out of range.
        """
        return self._topology.cpu_device_name_at_coordinates(self.coordinates(replica, logical_core), job=job)

    def tpu_device(self, replica: int = 0, logical_core: int = 0, job: str | None = None) -> str:
        """Returns the name of the TPU device assigned to a logical core, e.g. `/task:0/device:TPU:3`.

        Raises:
          ValueError: If `replica` or `logical_core` is out of range.
        """
        return self._topology.tpu_device_name_at_coordinates(self.coordinates(replica, logical_core), job=job)

    def device_id(self, replica: int = 0, logical_core: int = 0) -> int:
        """Returns the global TPU ordinal of a logical core (an xtpu addition).

        The global ordinal is `task * topology.num_tpus_per_task + tpu_ordinal`:
        the flat index of the physical core among all the system's TPU devices,
        in TPU order.  In a one-task topology it equals `tpu_ordinal`.

        Raises:
          ValueError: If `replica` or `logical_core` is out of range.
        """
        self._check_index(replica, logical_core)
        return int(self._device_ids[replica, logical_core])

    @property
    def device_ids(self) -> np.ndarray:
        """The global TPU ordinals, a read-only int array `[num_replicas, num_cores_per_replica]`."""
        return self._device_ids

    def logical_devices_of(self, replica: int) -> list[int]:
        """Returns the global TPU ordinals of a replica's logical cores, in logical-core order.

        Raises:
          ValueError: If `replica` is out of range.
        """
        if not 0 <= replica < self._num_replicas:
            raise ValueError(
                f"replica {replica} is out of range: the device assignment has {self._num_replicas} replicas"
            )
        return [int(d) for d in self._device_ids[replica]]

    def __repr__(self) -> str:
        return (
            f"DeviceAssignment(num_replicas={self._num_replicas}, "
            f"num_cores_per_replica={self._num_cores_per_replica}, topology={self._topology!r})"
        )

    @classmethod
    def build(
        cls,
        topology: Topology | bytes | str,
        computation_shape: Sequence[int] | np.ndarray | None = None,
        computation_stride: Sequence[int] | np.ndarray | None = None,
        num_replicas: int = 1,
        device_order_mode: DeviceOrderMode = DeviceOrderMode.AUTO,
    ) -> DeviceAssignment:
        """Computes a `DeviceAssignment` for a computation on a topology.

        The same as `device_assignment(...)`; see it for the arguments, the
        result and the errors.
        """
        return device_assignment(topology, computation_shape, computation_stride, num_replicas, device_order_mode)


def _open_ring_2d(x_size: int, y_size: int, z_coord: int) -> list[tuple[int, int, int]]:
    """A ring through an `x_size` by `y_size` grid at height `z_coord`, without (0, 0).

    Rows are walked in pairs, out along row `2i` and back along row `2i + 1`,
    never entering column 0; column 0 then closes the ring back towards (0, 0).
    A 4x4 grid (rows y, columns x) is visited::

        0 -- 1 -- 2 -- 3
        15   6 -- 5 -- 4
        14   7 -- 8 -- 9
        13 - 12 - 11 - 10
    """
    ring = []
    for pair in range(y_size // 2):
        ring += [(x, 2 * pair, z_coord) for x in range(1, x_size)]
        ring += [(x, 2 * pair + 1, z_coord) for x in reversed(range(1, x_size))]
    ring += [(0, y, z_coord) for y in reversed(range(1, y_size))]
    return ring


def _ring_3d(x_size: int, y_size: int, z_size: int) -> list[tuple[int, int, int]]:
    """TF's ring order of the chips of an `x_size` by `y_size` by `z_size` grid.

    A line is walked straight; a grid with an odd dimension (> 1) in row-major
    order (x fastest); a flat grid (one dimension of size 1) as one 2-D ring;
    otherwise 2-D rings stacked in z, alternately reversed, joined at (0, 0)
    and closed down the z axis at x = y = 0.
    """
    sizes = (x_size, y_size, z_size)
    if sum(s > 1 for s in sizes) <= 1:
        long_axis = next((a for a, s in enumerate(sizes) if s > 1), 0)
        line = []
        for i in range(sizes[long_axis]):
            point = [0, 0, 0]
            point[long_axis] = i
            line.append(tuple(point))
        return line
    if any(s > 1 and s % 2 for s in sizes):
        return [(x, y, z) for z in range(z_size) for y in range(y_size) for x in range(x_size)]
    ring = [(0, 0, 0)]
    if z_size == 1:
        return ring + _open_ring_2d(x_size, y_size, 0)
    if y_size == 1:
        return ring + [(x, 0, z) for (x, z, _) in _open_ring_2d(x_size, z_size, 0)]
    if x_size == 1:
        return ring + [(0, y, z) for (y, z, _) in _open_ring_2d(y_size, z_size, 0)]
    for z in range(z_size):
        layer = _open_ring_2d(x_size, y_size, z)
        ring += layer if z % 2 == 0 else layer[::-1]
    ring += [(0, 0, z) for z in reversed(range(1, z_size))]
    return ring


def _replica_grid(replica_counts: np.ndarray, num_replicas: int) -> list[int]:
    """TF's choice of how many replicas to lay along each mesh axis.

    Axes are visited by increasing capacity (`replica_counts`), ties broken by
    visiting the last axis (cores) first and then axes 0, 1, ...; each takes
    the ceiling of the remaining replicas' `k`-th root, `k` the number of axes
    left, capped by its capacity.
    """
    rank = len(replica_counts)
    grid = [0] * rank
    remaining, dims_left = num_replicas, rank
    order = sorted(range(rank), key=lambda a: (int(replica_counts[a]), (a + 1) % rank))
    for axis in order:
        target = int(math.ceil(remaining ** (1.0 / dims_left)))
        grid[axis] = min(target, int(replica_counts[axis]))
        remaining = -(-remaining // grid[axis])
        dims_left -= 1
    if remaining != 1:  # not reachable when num_replicas <= prod(replica_counts)
        raise ValueError(
            f"cannot lay out {num_replicas} replicas on a replica grid of capacity {[int(c) for c in replica_counts]}"
        )
    return grid


def device_assignment(
    topology: Topology | bytes | str,
    computation_shape: Sequence[int] | np.ndarray | None = None,
    computation_stride: Sequence[int] | np.ndarray | None = None,
    num_replicas: int = 1,
    device_order_mode: DeviceOrderMode = DeviceOrderMode.AUTO,
) -> DeviceAssignment:
    """Computes a device assignment of a computation across a TPU topology.

    Attempts to choose a compact grid of cores for locality: each replica gets
    a block of `computation_shape` cores, spaced `computation_stride` apart
    along each axis, and the replicas are packed into the free space of the
    mesh.  `computation_shape` and `computation_stride` values should be
    powers of 2 for optimal packing.

    For a v3-8 (`initialize_tpu_system()`, mesh `[2, 2, 1, 2]`):

    * `num_replicas=8` (shape `[1, 1, 1, 1]`): replica `r` on TPU `r`;
    * `computation_shape=[1, 1, 1, 2], num_replicas=4`: each replica uses both
      cores of one chip, the replicas on chips (0,0,0) (1,0,0) (1,1,0) (0,1,0);
    * `computation_shape=[2, 2, 1, 2]` (one replica, 8 logical cores): logical
      cores 2k and 2k + 1 on chip k of that same ring.

    Args:
      topology: A `Topology` object that describes the TPU cluster topology, or
        its `serialized()` form.
      computation_shape: A rank 1 int array with size equal to the topology
        rank, describing the shape of the computation's block of cores.  If
        None, it is `[1] * topology_rank`.
      computation_stride: A rank 1 int array of size `topology_rank`,
        describing the inter-core spacing of the `computation_shape` cores in
        the TPU topology.  If None, it is `[1] * topology_rank`.
      num_replicas: The number of computation replicas to run, a positive
        integer.  The replicas will be packed into the free spaces of the
        topology.
      device_order_mode: A `DeviceOrderMode`: AUTO forms rings when that is
        possible, RING requires it, MESH numbers replicas in mesh order.

    Returns:
      A `DeviceAssignment` object, which describes the mapping between the
      logical cores in each computation replica and the physical cores in the
      TPU topology.

    Raises:
      ValueError: If `topology` is not a valid `Topology` object.
      ValueError: If `computation_shape` or `computation_stride` are not 1D
        int arrays of size `topology_rank` where all values are positive.
      ValueError: If the footprint of one replica (`computation_shape *
        computation_stride`) does not fit in the mesh.
      ValueError: If `num_replicas` is not positive, or more replicas are
        requested than fit in the mesh (or in its present devices).
      ValueError: If `device_order_mode` is RING but the assignment cannot form
        rings.
    """
    if isinstance(topology, (bytes, str)):
        topology = Topology(serialized=topology)
    if not isinstance(topology, Topology):
        raise ValueError(f"`topology` is not a Topology object; got {type(topology)}")

    topology_rank = topology.mesh_rank
    mesh_shape = topology.mesh_shape

    def as_vector(value: Any) -> np.ndarray:
        if value is None:
            return np.ones(topology_rank, dtype=np.int32)
        return np.asarray(value, dtype=np.int32)

    computation_shape = as_vector(computation_shape)
    computation_stride = as_vector(computation_stride)
    if computation_shape.shape != (topology_rank,):
        raise ValueError(f"computation_shape must have shape [{topology_rank}]; got {computation_shape.shape}")
    if computation_stride.shape != (topology_rank,):
        raise ValueError(f"computation_stride must have shape [{topology_rank}]; got {computation_stride.shape}")
    if np.any(computation_shape < 1):
        raise ValueError(f"computation_shape must be positive; got computation_shape={computation_shape}")
    if np.any(computation_stride < 1):
        raise ValueError(f"computation_stride must be positive; got computation_stride={computation_stride}")
    if isinstance(num_replicas, bool) or not isinstance(num_replicas, (int, np.integer)) or num_replicas < 1:
        raise ValueError(f"num_replicas must be a positive integer; got num_replicas={num_replicas!r}")
    num_replicas = int(num_replicas)
    device_order_mode = DeviceOrderMode(device_order_mode)

    # The physical extent of one replica.
    computation_footprint = computation_shape * computation_stride
    if np.any(computation_footprint > mesh_shape):
        raise ValueError(
            f"computation footprint {computation_footprint} does not fit in TPU topology shape {mesh_shape}"
        )

    # How many footprints fit along each axis, and how many replicas the
    # stride lets interleave inside each footprint.
    block_counts = mesh_shape // computation_footprint
    replica_counts = block_counts * computation_stride
    max_replicas = int(np.prod(replica_counts))
    if num_replicas > max_replicas:
        raise ValueError(
            f"requested {num_replicas} replicas but only {max_replicas} replicas with shape "
            f"{computation_shape} and computation_stride {computation_stride} fit in a TPU mesh "
            f"of shape {mesh_shape}"
        )

    if topology.missing_devices.size:
        assignment = _assign_in_task_order(topology, computation_shape, computation_stride, num_replicas)
        return DeviceAssignment(topology, core_assignment=assignment)

    replica_shape = _replica_grid(replica_counts, num_replicas)
    rings = (
        topology_rank == 4
        and computation_shape[-1] == mesh_shape[-1]  # whole chips per replica
        and int(np.prod(computation_stride)) == 1
        and num_replicas == max_replicas  # the replicas fill the mesh
    )
    if device_order_mode == DeviceOrderMode.RING and not rings:
        raise ValueError(
            "device_order_mode=DeviceOrderMode.RING is not compatible with the 3D tiling of "
            f"computation_shape {computation_shape}, computation_stride {computation_stride} and "
            f"num_replicas={num_replicas} on a TPU mesh of shape {mesh_shape} (rings need a 4-D mesh, "
            "whole chips per replica, no stride and the mesh filled); try "
            "device_order_mode=DeviceOrderMode.AUTO"
        )
    if device_order_mode == DeviceOrderMode.MESH:
        rings = False

    if rings:
        cores_per_chip = int(mesh_shape[-1])
        chips_in_replica = _ring_3d(*(int(v) for v in computation_shape[:3]))
        replica_chips = _ring_3d(*replica_shape[:3])
        assignment = np.zeros((num_replicas, int(np.prod(computation_shape)), 4), dtype=np.int32)
        for replica in range(num_replicas):
            outer = np.array(replica_chips[replica])
            for logical_core in range(assignment.shape[1]):
                inner = np.array(chips_in_replica[logical_core // cores_per_chip])
                assignment[replica, logical_core, :3] = outer * computation_shape[:3] + inner
                assignment[replica, logical_core, 3] = logical_core % cores_per_chip
        return DeviceAssignment(topology, core_assignment=assignment)

    # Replica r's position in the replica grid: core axis fastest, then x, y, z.
    offsets = np.zeros((num_replicas, topology_rank), dtype=np.int32)
    visit = [topology_rank - 1] + list(range(topology_rank - 1))
    for replica in range(num_replicas):
        rest = replica
        position = np.zeros(topology_rank, dtype=np.int32)
        for axis in visit:
            position[axis] = rest % replica_shape[axis]
            rest //= replica_shape[axis]
        # Which footprint the replica is in, and its offset inside the stride.
        offsets[replica] = (position // computation_stride) * computation_footprint + position % computation_stride
    # A replica's logical cores: its block's cores in row-major order.
    axes = [np.arange(computation_shape[a]) * computation_stride[a] for a in range(topology_rank)]
    block = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, topology_rank)
    assignment = block[np.newaxis, :, :] + offsets[:, np.newaxis, :]
    return DeviceAssignment(topology, core_assignment=assignment)


def _assign_in_task_order(
    topology: Topology,
    computation_shape: np.ndarray,
    computation_stride: np.ndarray,
    num_replicas: int,
) -> np.ndarray:
    """TF's assignment on a topology with missing devices: devices in task order.

    The computation stride cannot be honoured (it must be all ones) and the
    shape of a replica only counts its cores.
    """
    if np.any(computation_stride != 1):
        raise ValueError(
            f"computation_stride must be all ones on a topology with missing devices "
            f"{[_fmt(c) for c in topology.missing_devices]}; got computation_stride={computation_stride}"
        )
    per_replica = int(np.prod(computation_shape))
    present = topology.num_tasks * topology.num_tpus_per_task
    if num_replicas * per_replica > present:
        raise ValueError(
            f"requested {num_replicas} replicas with shape {computation_shape} "
            f"({num_replicas * per_replica} cores) but the topology has only {present} devices "
            f"(missing devices {[_fmt(c) for c in topology.missing_devices]})"
        )
    flat = topology.device_coordinates.reshape(-1, topology.mesh_rank)
    return flat[: num_replicas * per_replica].reshape(num_replicas, per_replica, topology.mesh_rank)
