"""``Topology`` and ``initialize_tpu_system``: a simulated TPU system.

Semantics follow TensorFlow's ``tf.tpu.experimental.Topology``
(``tensorflow/python/tpu/topology.py``) and
``tf.tpu.experimental.initialize_tpu_system``
(``tensorflow/python/tpu/tpu_strategy_util.py``).  A topology is a mesh of
cores, ``mesh_shape`` (TF's TPUs use ``[x, y, z, cores_per_chip]``), plus the
map from TensorFlow devices to mesh coordinates, ``device_coordinates``: an
int32 array ``[num_tasks, num_tpus_per_task, mesh_rank]`` whose entry
``[task, device]`` gives the coordinates of ``/task:<task>/device:TPU:<device>``.

What xtpu adds or changes:

* Any mesh rank >= 1 is accepted (TF requires exactly 4); the placement
  algorithm of ``DeviceAssignment.build`` works for any rank.
* ``device_coordinates`` may be omitted: the default is one task that holds
  every core, numbered in TPU order -- the core index (last axis) varies
  fastest, then x, then y, then z (axis 0, 1, ... ``rank - 2``).  This is the
  order of a real v3-8, whose TopologyProto TF's own tests use
  (``tensorflow/compiler/mlir/tensorflow/tests/tpu_rewrite.mlir``):
  TPU:0..7 = (0,0,0,0) (0,0,0,1) (1,0,0,0) (1,0,0,1) (0,1,0,0) (0,1,0,1)
  (1,1,0,0) (1,1,0,1).  With it, ``DeviceAssignment.build(t, num_replicas=8)``
  puts replica ``r`` on TPU ``r``, as on the hardware.
* ``serialized()`` returns a small JSON document instead of a
  ``TopologyProto`` (see ``Topology.serialized``).  ``Topology(serialized=...)``
  reads that JSON and also TF's binary ``TopologyProto`` (fields 1-4).
* Coordinates outside the mesh, and two devices at one coordinate, are
  ``ValueError`` (TF fails later with an ``IndexError`` or silently keeps the
  last device).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["Topology", "default_mesh_shape", "initialize_tpu_system"]

# The JSON form written by ``Topology.serialized``.  The keys are the fields of
# TF's ``TopologyProto`` (tensorflow/core/protobuf/tpu/topology.proto).
_SERIAL_FORMAT = "xtpu.Topology/1"


def _tpu_device_name(job: str | None, task: int, device: int) -> str:
    if job is None:
        return f"/task:{task}/device:TPU:{device}"
    return f"/job:{job}/task:{task}/device:TPU:{device}"


def _host_device_name(job: str | None, task: int) -> str:
    if job is None:
        return f"/task:{task}/device:CPU:0"
    return f"/job:{job}/task:{task}/device:CPU:0"


def _default_device_coordinates(mesh_shape: np.ndarray) -> np.ndarray:
    """One task holding every core, in TPU order (core fastest, then x, y, z)."""
    rank = len(mesh_shape)
    # Axis visiting order, fastest first: the core axis, then axes 0..rank-2.
    order = [rank - 1] + list(range(rank - 1))
    total = int(np.prod(mesh_shape))
    coords = np.zeros((1, total, rank), dtype=np.int32)
    for ordinal in range(total):
        rest = ordinal
        for axis in order:
            coords[0, ordinal, axis] = rest % mesh_shape[axis]
            rest //= mesh_shape[axis]
    return coords


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _as_int32(value: int) -> int:
    # proto int32 values are varints of the two's complement 64-bit value.
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _parse_topology_proto(data: bytes) -> dict[str, Any]:
    """Reads TF's ``TopologyProto`` wire format (fields 1-4; others skipped)."""
    fields: dict[str, Any] = {
        "mesh_shape": [],
        "num_tasks": 0,
        "num_tpu_devices_per_task": 0,
        "device_coordinates": [],
    }
    repeated = {1: "mesh_shape", 4: "device_coordinates"}
    scalar = {2: "num_tasks", 3: "num_tpu_devices_per_task"}
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            if number in repeated:
                fields[repeated[number]].append(_as_int32(value))
            elif number in scalar:
                fields[scalar[number]] = _as_int32(value)
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            end = pos + length
            if end > len(data):
                raise ValueError("truncated length-delimited field")
            if number in repeated:
                while pos < end:
                    value, pos = _read_varint(data, pos)
                    fields[repeated[number]].append(_as_int32(value))
            pos = end
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated field")
    return fields


def _parse_serialized(serialized: bytes | str) -> dict[str, Any]:
    if isinstance(serialized, str):
        text = serialized
        raw = serialized.encode("utf-8")
    elif isinstance(serialized, (bytes, bytearray)):
        raw = bytes(serialized)
        text = None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
    else:
        raise ValueError(
            f"`serialized` must be bytes or str (the output of Topology.serialized()); got {type(serialized)}"
        )
    # A TopologyProto starts with byte 0x0a ("\n", field 1), which JSON may
    # also start with: a "\n{" that is not JSON is read as a proto.
    if text is not None and text.lstrip().startswith("{"):
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as e:
            if not raw.startswith(b"\x0a"):
                raise ValueError(f"`serialized` is not a serialized xtpu topology: {e}") from None
            fields = None
    else:
        fields = None
    if fields is not None:
        if not isinstance(fields, dict):
            raise ValueError("`serialized` is not a serialized xtpu topology: not a JSON object")
        missing = sorted(
            k for k in ("mesh_shape", "num_tasks", "num_tpu_devices_per_task", "device_coordinates") if k not in fields
        )
        if missing:
            raise ValueError(f"`serialized` topology lacks the field(s) {missing}; got {sorted(fields)}")
        return fields
    try:
        return _parse_topology_proto(raw)
    except ValueError as e:
        raise ValueError(f"`serialized` is neither an xtpu topology (JSON) nor a TopologyProto: {e}") from None


def _int_list(value: Any, name: str) -> list[int]:
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001 - any failure is a malformed field
        arr = None
    if arr is None or arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"`{name}` must be a list of integers; got {value!r}")
    return [int(v) for v in arr]


class Topology:
    """Describes a set of TPU devices (TF's ``tf.tpu.experimental.Topology``).

    Represents both the shape of the physical mesh, and the mapping between
    TensorFlow TPU devices and physical mesh coordinates.
    """

    def __init__(
        self,
        serialized: bytes | str | None = None,
        mesh_shape: Sequence[int] | np.ndarray | None = None,
        device_coordinates: Sequence | np.ndarray | None = None,
    ):
        """Builds a Topology object.

        If `serialized` is not `None`, the topology is parsed from `serialized`
        and the other arguments are ignored (as in TF).  Otherwise, the topology
        is computed from `mesh_shape` and `device_coordinates`.

        Args:
          serialized: the output of `Topology.serialized()` (bytes or str), or a
            serialized TF `TopologyProto` (bytes), or `None`.
          mesh_shape: a sequence of positive integers, the shape of the mesh in
            number of cores; for TPUs `[x, y, z, cores_per_chip]`.  Ignored if
            `serialized` is not `None`.
          device_coordinates: an int array of shape `[num_tasks,
            num_tpus_per_task, len(mesh_shape)]` mapping TensorFlow devices to
            mesh coordinates, or `None` for one task holding every core in TPU
            order (core fastest, then x, then y, then z).  Ignored if
            `serialized` is not `None`.

        Raises:
          ValueError: If `serialized` does not describe a well-formed topology.
          ValueError: If `serialized` is `None` and `mesh_shape` is not a
            non-empty sequence of positive integers.
          ValueError: If `serialized` is `None` and `device_coordinates` is not
            a rank 3 int array with minor dimension equal to the mesh rank.
          ValueError: If a device's coordinates lie outside the mesh, or two
            devices have the same coordinates.
        """
        self._serialized: bytes | None = None
        if serialized:
            self._parse(serialized)
        else:
            if mesh_shape is None:
                raise ValueError("Topology needs `serialized` or `mesh_shape`; got neither")
            self._mesh_shape = self._check_mesh_shape(mesh_shape, "a sequence of")
            if device_coordinates is None:
                self._device_coordinates = _default_device_coordinates(self._mesh_shape)
            else:
                coords = np.asarray(device_coordinates)
                if coords.size and not np.issubdtype(coords.dtype, np.integer):
                    raise ValueError(f"`device_coordinates` must be a rank 3 int32 array; got dtype {coords.dtype}")
                coords = coords.astype(np.int32)
                if coords.ndim != 3 or coords.shape[2] != len(self._mesh_shape):
                    raise ValueError(
                        "`device_coordinates` must be a rank 3 int32 array with minor "
                        "dimension equal to the mesh shape rank "
                        f"({len(self._mesh_shape)}); got shape {coords.shape} "
                        f"for mesh_shape={self._mesh_shape}"
                    )
                self._device_coordinates = coords
        self._device_coordinates.setflags(write=False)
        self._mesh_shape.setflags(write=False)
        self._topology_tasks, self._topology_devices = self._invert_topology()
        # Coordinates of the mesh positions that no device occupies.
        self._missing_devices = np.argwhere(self._topology_tasks < 0)
        self._missing_devices.setflags(write=False)

    @staticmethod
    def _check_mesh_shape(mesh_shape: Any, what: str) -> np.ndarray:
        arr = np.asarray(mesh_shape)
        if arr.ndim != 1 or arr.size < 1 or not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 1):
            raise ValueError(f"`mesh_shape` must be {what} positive entries; got {mesh_shape}")
        return arr.astype(np.int32)

    def _parse(self, serialized: bytes | str) -> None:
        fields = _parse_serialized(serialized)
        mesh_shape = _int_list(fields["mesh_shape"], "mesh_shape")
        self._mesh_shape = self._check_mesh_shape(mesh_shape, "a vector of")
        num_tasks = fields["num_tasks"]
        per_task = fields["num_tpu_devices_per_task"]
        if not isinstance(num_tasks, int) or num_tasks < 0:
            raise ValueError(f"`num_tasks` must be >= 0; got {num_tasks}")
        if not isinstance(per_task, int) or per_task < 0:
            raise ValueError(f"`num_tpu_devices_per_task` must be >= 0; got {per_task}")
        coords = _int_list(fields["device_coordinates"], "device_coordinates")
        expected = num_tasks * per_task * len(mesh_shape)
        if len(coords) != expected:
            raise ValueError(
                f"`device_coordinates` must have shape num_tasks ({num_tasks}) * "
                f"num_tpu_devices_per_task ({per_task}) * len(mesh_shape) ({len(mesh_shape)}); "
                f"got shape {len(coords)}"
            )
        if any(c < 0 for c in coords):
            raise ValueError(f"`device_coordinates` must be >= 0; got {coords}")
        self._device_coordinates = np.array(coords, dtype=np.int32).reshape((num_tasks, per_task, len(mesh_shape)))

    def _invert_topology(self) -> tuple[np.ndarray, np.ndarray]:
        """Inverts ``[task, device, axis]`` into mesh-shaped task / device maps."""
        tasks = np.full(list(self._mesh_shape), -1, dtype=np.int32)
        devices = np.full(list(self._mesh_shape), -1, dtype=np.int32)
        coords = self._device_coordinates
        for task in range(coords.shape[0]):
            for device in range(coords.shape[1]):
                c = coords[task, device, :]
                if np.any(c < 0) or np.any(c >= self._mesh_shape):
                    raise ValueError(
                        f"`device_coordinates` of task {task} device {device} are "
                        f"{tuple(int(v) for v in c)}, outside the mesh of shape {self._mesh_shape}"
                    )
                key = tuple(c)
                if tasks[key] >= 0:
                    raise ValueError(
                        f"`device_coordinates` place task {task} device {device} and "
                        f"task {tasks[key]} device {devices[key]} at the same coordinates "
                        f"{tuple(int(v) for v in c)}"
                    )
                tasks[key] = task
                devices[key] = device
        tasks.setflags(write=False)
        devices.setflags(write=False)
        return tasks, devices

    def _key(self, device_coordinates: Sequence[int]) -> tuple[int, ...]:
        coords = tuple(int(c) for c in np.asarray(device_coordinates).reshape(-1))
        if len(coords) != self.mesh_rank or any(c < 0 or c >= s for c, s in zip(coords, self._mesh_shape)):
            raise ValueError(f"device coordinates {coords} are not in the TPU mesh of shape {self._mesh_shape}")
        return coords

    def _present(self, device_coordinates: Sequence[int]) -> tuple[int, ...]:
        key = self._key(device_coordinates)
        if self._topology_tasks[key] < 0:
            raise ValueError(f"no TPU device at coordinates {key}: it is a missing device")
        return key

    @property
    def mesh_shape(self) -> np.ndarray:
        """A rank 1 int32 array describing the shape of the TPU topology."""
        return self._mesh_shape

    @property
    def mesh_rank(self) -> int:
        """Returns the number of dimensions in the mesh."""
        return len(self._mesh_shape)

    @property
    def device_coordinates(self) -> np.ndarray:
        """Describes the mapping from TPU devices to topology coordinates.

        Returns:
          A rank 3 int32 array with shape `[tasks, devices, axis]`: `tasks` is
          the number of tasks, `devices` the number of TPU devices per task and
          `axis` the mesh rank.  Entry `[task, device]` gives the coordinates of
          that task's TPU device.  TPU topologies have dimensions
          `(x, y, z, core number)`.
        """
        return self._device_coordinates

    @property
    def missing_devices(self) -> np.ndarray:
        """Array of the coordinates of missing devices, shape `[k, mesh_rank]`."""
        return self._missing_devices

    def task_ordinal_at_coordinates(self, device_coordinates: Sequence[int]) -> int:
        """Returns the TensorFlow task number attached to `device_coordinates`.

        Args:
          device_coordinates: An integer sequence describing a device's physical
            coordinates in the TPU fabric.

        Returns:
          The TensorFlow task number that contains the TPU device with those
          physical coordinates, or -1 for a missing device (as in TF).

        Raises:
          ValueError: If the coordinates are not inside the mesh.
        """
        return int(self._topology_tasks[self._key(device_coordinates)])

    def tpu_device_ordinal_at_coordinates(self, device_coordinates: Sequence[int]) -> int:
        """Returns the TensorFlow device number at `device_coordinates`.

        Args:
          device_coordinates: An integer sequence describing a device's physical
            coordinates in the TPU fabric.

        Returns:
          The TensorFlow device number, within its task, of the device with those
          physical coordinates, or -1 for a missing device (as in TF).

        Raises:
          ValueError: If the coordinates are not inside the mesh.
        """
        return int(self._topology_devices[self._key(device_coordinates)])

    def cpu_device_name_at_coordinates(self, device_coordinates: Sequence[int], job: str | None = None) -> str:
        """Returns the CPU device attached to a logical core.

        Args:
          device_coordinates: the physical coordinates of a TPU device.
          job: the job name, or `None` for a name without `/job:`.

        Returns:
          `/job:<job>/task:<t>/device:CPU:0` (or `/task:<t>/device:CPU:0`).

        Raises:
          ValueError: If the coordinates are not inside the mesh or name a
            missing device.
        """
        key = self._present(device_coordinates)
        return _host_device_name(job, int(self._topology_tasks[key]))

    def tpu_device_name_at_coordinates(self, device_coordinates: Sequence[int], job: str | None = None) -> str:
        """Returns the name of the TPU device assigned to a logical core.

        Args:
          device_coordinates: the physical coordinates of a TPU device.
          job: the job name, or `None` for a name without `/job:`.

        Returns:
          `/job:<job>/task:<t>/device:TPU:<d>` (or without `/job:`).

        Raises:
          ValueError: If the coordinates are not inside the mesh or name a
            missing device.
        """
        key = self._present(device_coordinates)
        return _tpu_device_name(job, int(self._topology_tasks[key]), int(self._topology_devices[key]))

    @property
    def num_tasks(self) -> int:
        """Returns the number of TensorFlow tasks in the TPU slice."""
        return int(self._device_coordinates.shape[0])

    @property
    def num_tpus_per_task(self) -> int:
        """Returns the number of TPU devices per task in the TPU slice."""
        return int(self._device_coordinates.shape[1])

    def serialized(self) -> bytes:
        """Returns the serialized form of the topology.

        The form is UTF-8 JSON with sorted keys and no spaces, so that equal
        topologies serialize to equal bytes; `Topology(serialized=...)` reads it
        back.  Its fields are those of TF's `TopologyProto`, plus a format tag::

          {"device_coordinates":[0,0,0,0,0,0,0,1,...],   # flattened, row-major
           "format":"xtpu.Topology/1",
           "mesh_shape":[2,2,1,2],
           "num_tasks":1,
           "num_tpu_devices_per_task":8}

        `device_coordinates` is the `[num_tasks, num_tpus_per_task, mesh_rank]`
        array flattened in row-major order.

        Returns:
          The JSON document as `bytes`.
        """
        if self._serialized is None:
            doc = {
                "format": _SERIAL_FORMAT,
                "mesh_shape": [int(v) for v in self._mesh_shape],
                "num_tasks": self.num_tasks,
                "num_tpu_devices_per_task": self.num_tpus_per_task,
                "device_coordinates": [int(v) for v in self._device_coordinates.reshape(-1)],
            }
            self._serialized = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
        return self._serialized

    def __repr__(self) -> str:
        return (
            f"Topology(mesh_shape={[int(v) for v in self._mesh_shape]}, "
            f"num_tasks={self.num_tasks}, num_tpus_per_task={self.num_tpus_per_task})"
        )


def default_mesh_shape(num_cores: int) -> list[int]:
    """The `[x, y, z, cores_per_chip]` mesh that `initialize_tpu_system` simulates.

    Chips have two cores when `num_cores` is even (as v2/v3 TPUs do) and one
    otherwise; the chips form a flat `x * y` grid with `x <= y` as close to
    square as the count allows.  `8` gives `[2, 2, 1, 2]` (a v3-8) and `32`
    gives `[4, 4, 1, 2]` (a v3-32).

    Args:
      num_cores: the number of TPU cores, a positive integer.

    Returns:
      The mesh shape, a list of 4 positive integers whose product is
      `num_cores`.

    Raises:
      ValueError: If `num_cores` is not a positive integer.
    """
    if isinstance(num_cores, bool) or not isinstance(num_cores, (int, np.integer)) or num_cores < 1:
        raise ValueError(f"num_cores must be a positive integer; got {num_cores!r}")
    num_cores = int(num_cores)
    cores_per_chip = 2 if num_cores % 2 == 0 else 1
    chips = num_cores // cores_per_chip
    x = max(d for d in range(1, math.isqrt(chips) + 1) if chips % d == 0)
    return [x, chips // x, 1, cores_per_chip]


def _resolver_num_cores(cluster_resolver: Any) -> int:
    num_cores = getattr(cluster_resolver, "num_cores", None)
    if callable(num_cores):
        num_cores = num_cores()
    if num_cores is None and callable(getattr(cluster_resolver, "num_accelerators", None)):
        # TF's ClusterResolver.num_accelerators() -> {"TPU": n}.
        accelerators = cluster_resolver.num_accelerators()
        if isinstance(accelerators, dict):
            num_cores = accelerators.get("TPU")
    if num_cores is None:
        raise ValueError(
            "cluster_resolver must have a `num_cores` attribute (or a "
            f"`num_accelerators()` method returning {{'TPU': n}}); got {cluster_resolver!r}"
        )
    return num_cores


def initialize_tpu_system(cluster_resolver: Any = None, num_cores: int | None = None) -> Topology:
    """Initializes a simulated TPU system and returns its `Topology`.

    TF's `tf.tpu.experimental.initialize_tpu_system(cluster_resolver)`
    initializes the TPUs of a cluster and returns their topology.  xtpu's
    system is simulated on the CPU: one task (this process) holding
    `num_cores` cores in the mesh `default_mesh_shape(num_cores)`, numbered in
    TPU order.  With the default 8 cores it is a v3-8: mesh `[2, 2, 1, 2]`,
    TPU:0..7 at (0,0,0,0) (0,0,0,1) (1,0,0,0) (1,0,0,1) (0,1,0,0) (0,1,0,1)
    (1,1,0,0) (1,1,0,1).

    Args:
      cluster_resolver: `None`, or an object describing the cluster: it must
        have a `num_cores` attribute (an int or a method returning one), or TF's
        `num_accelerators()` method returning `{"TPU": n}`.
      num_cores: the number of cores to simulate; `None` means the resolver's
        count, or 8 without a resolver.

    Returns:
      A `Topology` with `num_tasks == 1` and `num_tpus_per_task == num_cores`.

    Raises:
      ValueError: If the number of cores is not a positive integer.
      ValueError: If `cluster_resolver` has no core count.
      ValueError: If `num_cores` and the resolver's count disagree.
    """
    if cluster_resolver is not None:
        resolved = _resolver_num_cores(cluster_resolver)
        if num_cores is not None and num_cores != resolved:
            raise ValueError(f"num_cores={num_cores!r} disagrees with the cluster_resolver's {resolved!r} cores")
        num_cores = resolved
        # TF's tpu_strategy_util: initializing a system a second time warns
        # (the resolvers' own topology queries pass no resolver, so only the
        # user's calls count).
        name = str(getattr(cluster_resolver, "_tpu", None) or "local")
        if name in _INITIALIZED_TPU_SYSTEMS:
            logging.getLogger("xtpu").warning(
                "TPU system %s has already been initialized. Reinitializing the TPU can cause previously created "
                "variables on TPU to be lost.",
                name,
            )
        _INITIALIZED_TPU_SYSTEMS.add(name)
    elif num_cores is None:
        num_cores = 8
    return Topology(mesh_shape=default_mesh_shape(num_cores))


#: The TPU systems ``initialize_tpu_system(resolver)`` initialized, by name.
_INITIALIZED_TPU_SYSTEMS: set[str] = set()
