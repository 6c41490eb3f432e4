"""The seed's image split feeding a CNN, written for xtpu and for JAX: shared
by test_conv_spmd.py and benchmarks/conv.py.

The seed (``split_to_logical_devices``) splits an image ``[batch, width,
height, channel]`` with ``partition_dimensions = [1, 2, 4, 1]`` over the 8
logical devices of one replica and feeds it to ``model(inputs)``.  Here the
model is two 3x3 SAME convolutions with ReLU (``convs``), the same followed by
a 2x2 max pool (``convs_pool``), and a training step of a CNN (conv, ReLU,
pool, conv, ReLU, flatten, dense, softmax cross-entropy, SGD) (``train``).
"""

from __future__ import annotations

import numpy as np

SPLIT = [1, 2, 4, 1]
BATCH, SIZE, CIN, C1, C2, CLASSES = 4, 16, 3, 8, 8, 10


def data(dtype=np.float32, seed=0):
    """Image, one-hot labels and the three weights."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, SIZE, SIZE, CIN)).astype(dtype)
    y = np.eye(CLASSES, dtype=dtype)[rng.integers(0, CLASSES, BATCH)]
    w1 = (rng.standard_normal((3, 3, CIN, C1)) * 0.3).astype(dtype)
    w2 = (rng.standard_normal((3, 3, C1, C2)) * 0.2).astype(dtype)
    wd = (rng.standard_normal(((SIZE // 2) ** 2 * C2, CLASSES)) * 0.05).astype(dtype)
    return x, y, w1, w2, wd


# ---- xtpu ------------------------------------------------------------------


def xtpu_convs(x, w1, w2, split=True, pool=False):
    import xtpu

    if split:
        x = xtpu.split_to_logical_devices(x, SPLIT)
    h = xtpu.nn.relu(xtpu.nn.conv2d(x, w1, 1, "SAME"))
    h = xtpu.nn.relu(xtpu.nn.conv2d(h, w2, 1, "SAME"))
    if pool:
        h = xtpu.nn.max_pool2d(h, 2, 2, "VALID")
    return h


def xtpu_train(x, y, w1, w2, wd, split=True, lr=0.1):
    import xtpu

    if split:
        x = xtpu.split_to_logical_devices(x, SPLIT)
    h = xtpu.nn.relu(xtpu.nn.conv2d(x, w1, 1, "SAME"))
    h = xtpu.nn.max_pool2d(h, 2, 2, "VALID")
    h = xtpu.nn.relu(xtpu.nn.conv2d(h, w2, 1, "SAME"))
    logits = xtpu.matmul(xtpu.reshape(h, [BATCH, -1]), wd)
    loss = xtpu.math.reduce_mean(
        xtpu.math.negative(xtpu.math.reduce_sum(xtpu.math.multiply(y, xtpu.nn.log_softmax(logits)), axis=1))
    )
    g1, g2, gd = xtpu.gradients(loss, [w1, w2, wd])
    return loss, w1 - lr * g1, w2 - lr * g2, wd - lr * gd


def device_assignment():
    """One replica of 8 logical cores."""
    import xtpu

    return xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[2, 2, 1, 2], num_replicas=1)


# ---- JAX -------------------------------------------------------------------


def jax_programs():
    """``{name: (fn, args)}`` of the same programs in JAX."""
    import jax
    import jax.numpy as jnp

    def conv(a, w):
        return jax.lax.conv_general_dilated(a, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def convs(x, w1, w2):
        return jax.nn.relu(conv(jax.nn.relu(conv(x, w1)), w2))

    def convs_pool(x, w1, w2):
        return jax.lax.reduce_window(convs(x, w1, w2), -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def loss_fn(ws, x, y):
        w1, w2, wd = ws
        h = jax.nn.relu(conv(x, w1))
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = jax.nn.relu(conv(h, w2))
        logits = h.reshape(BATCH, -1) @ wd
        return jnp.mean(-jnp.sum(y * jax.nn.log_softmax(logits), axis=1))

    def train(x, y, w1, w2, wd, lr=0.1):
        loss, (g1, g2, gd) = jax.value_and_grad(loss_fn)((w1, w2, wd), x, y)
        return loss, w1 - lr * g1, w2 - lr * g2, wd - lr * gd

    return {"convs": convs, "convs_pool": convs_pool, "train": train}


def xla_bytes_per_core() -> dict[str, float]:
    """What XLA's SPMD partitioner (JAX on 8 CPU devices, the image sharded
    ``[1, 2, 4, 1]``, weights replicated) makes one core receive, for each
    program: the largest per-device sum of collective-permute operands, plus
    all-gathers ``(g - 1) * b`` and all-reduces ``2 (g - 1) / g * b`` (the
    measure of ``xtpu.passes.spmd_cost``).  Needs
    ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before JAX starts."""
    import re

    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("w", "h"))
    img, rep = NamedSharding(mesh, P(None, "w", "h", None)), NamedSharding(mesh, P())
    x, y, w1, w2, wd = data()
    sizes = {"f32": 4, "f64": 8, "s32": 4, "pred": 1, "bf16": 2}
    out = {}
    for name, fn in jax_programs().items():
        if name == "train":
            args, shard = (x, y, w1, w2, wd), (img, rep, rep, rep, rep)
        else:
            args, shard = (x, w1, w2), (img, rep, rep)
        text = jax.jit(fn, in_shardings=shard).lower(*args).compile().as_text()
        got: dict[int, float] = {}
        kinds = "collective-permute|all-gather|all-reduce|reduce-scatter|all-to-all"
        for line in text.splitlines():
            m = re.search(rf"= (.*?) ({kinds})(?:-start)?\(", line)
            if not m:
                continue
            result, kind = m.groups()
            b = sum(
                float(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64)) * sizes[dt]
                for dt, dims in re.findall(r"(\w+)\[([\d,]*)\]", result)
            )
            if kind == "collective-permute":
                pairs = re.search(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}", line).group(1)
                for s_, t in re.findall(r"\{(\d+),(\d+)\}", pairs):
                    if s_ != t:
                        got[int(t)] = got.get(int(t), 0.0) + b
                continue
            g = _group_size(line)
            each = 2 * (g - 1) / g * b if kind == "all-reduce" else (g - 1) / g * b
            for d in range(8):
                got[d] = got.get(d, 0.0) + each
        out[name] = max(got.values(), default=0.0)
    return out


def _group_size(line: str) -> int:
    """The size of the replica groups of an HLO collective's text: explicit
    ``{{0,1},...}``, iota ``[n,g]<=[N]`` or Shardy's ``mesh[...] {'axis'}``."""
    import re

    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\] \{([^}]*)\}", line)
    if mesh:
        sizes = dict(re.findall(r"'(\w+)'=(\d+)", mesh.group(1)))
        return int(np.prod([int(sizes[a]) for a in re.findall(r"'(\w+)'", mesh.group(2))]))
    iota = re.search(r"replica_groups=\[([\d,]+)\]<=", line)
    if iota:
        return int(iota.group(1).split(",")[-1])
    first = re.search(r"replica_groups=\{\{([\d,]*)\}", line)
    return len(first.group(1).split(",")) if first else 8
