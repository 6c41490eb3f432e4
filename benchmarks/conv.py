"""Convolutions against JAX on CPU devices, side by side in one run:
``python benchmarks/conv.py [--repeats 7] [--quick]``.

Each side runs in its own subprocess (JAX with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``); the table gives
each figure (the best of ``--repeats`` timed loops) and xtpu / JAX.
Workloads (issue 27):

- ``conv``: the convolution kernel alone, xtpu's ``hlo.convolution``
  kernel (oneDNN's convolution where it has one, else im2col + one matmul
  per group; ``XTPU_NO_ONEDNN=1`` for the latter) against ``jax.jit`` of
  ``lax.conv_general_dilated`` on one device, for a few NHWC shapes;
- ``resnet``: a ResNet basic block's training step per replica (3x3 conv,
  batch norm, ReLU, 3x3 conv, batch norm, residual add, ReLU, 2x2 average
  pool, dense, softmax cross-entropy; gradients summed over the replicas,
  SGD) at R = 1, 2, 8 (xtpu.replicate; JAX's ``shard_map`` over R devices);
- ``split cnn``: the seed's image ``[4, 16, 16, 3]`` split ``[1, 2, 4, 1]``
  over the 8 logical cores of one replica feeding a CNN training step
  (test/python/cnn_programs.py), against the same step unsplit; with the
  bytes one core receives, xtpu's and XLA's (JAX's SPMD partitioner).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "python"))
sys.path.insert(0, HERE)

from jax_compare import best  # noqa: E402 - the timing helper of every benchmark here

CONV_SHAPES = [
    # (name, x NHWC, kernel HWIO, strides, padding, feature groups)
    ("8x28x28x1 * 3x3x1x32 SAME", (8, 28, 28, 1), (3, 3, 1, 32), 1, "SAME", 1),
    ("8x32x32x16 * 3x3x16x32 SAME", (8, 32, 32, 16), (3, 3, 16, 32), 1, "SAME", 1),
    ("32x16x16x64 * 3x3x64x64 SAME", (32, 16, 16, 64), (3, 3, 64, 64), 1, "SAME", 1),
    ("8x32x32x32 * 3x3x32x64 stride 2", (8, 32, 32, 32), (3, 3, 32, 64), 2, "SAME", 1),
    ("8x32x32x32 depthwise 3x3", (8, 32, 32, 32), (3, 3, 1, 32), 1, "SAME", 32),
]
REPLICAS = [1, 2, 8]
RB, RS, RC = 8, 16, 16  # ResNet block: per-replica batch, image size, channels


def _pads(n, k, s, mode):
    if mode == "VALID":
        return (0, 0)
    out = -(-n // s)
    total = max((out - 1) * s + k - n, 0)
    return (total // 2, total - total // 2)


def resnet_data(R: int):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((RB, RS, RS, RC)).astype(np.float32) for _ in range(R)]
    ys = [np.eye(10, dtype=np.float32)[rng.integers(0, 10, RB)] for _ in range(R)]
    k1 = (rng.standard_normal((3, 3, RC, RC)) * np.sqrt(2 / (9 * RC))).astype(np.float32)
    k2 = (rng.standard_normal((3, 3, RC, RC)) * np.sqrt(2 / (9 * RC))).astype(np.float32)
    wd = (rng.standard_normal(((RS // 2) ** 2 * RC, 10)) * 0.01).astype(np.float32)
    return xs, ys, [k1, k2, wd]


# -- xtpu ------------------------------------------------------------------------


def xtpu_resnet_step(x, y, k1, k2, wd, lr=0.01):
    import xtpu

    def bn(h):
        out, _, _ = xtpu.nn.fused_batch_norm(h, np.ones(RC, np.float32), np.zeros(RC, np.float32), epsilon=1e-3)
        return out

    h = xtpu.nn.relu(bn(xtpu.nn.conv2d(x, k1, 1, "SAME")))
    h = bn(xtpu.nn.conv2d(h, k2, 1, "SAME"))
    h = xtpu.nn.relu(h + x)
    h = xtpu.nn.avg_pool2d(h, 2, 2, "VALID")
    logits = xtpu.matmul(xtpu.reshape(h, [RB, -1]), wd)
    loss = xtpu.math.reduce_mean(xtpu.math.negative(xtpu.math.reduce_sum(y * xtpu.nn.log_softmax(logits), axis=1)))
    grads = xtpu.gradients(loss, [k1, k2, wd])
    return [loss] + [w - lr * xtpu.cross_replica_sum(g) for w, g in zip((k1, k2, wd), grads)]


def xtpu_resnet_call(R: int):
    """(step, trace + compile seconds, loss of an output) of xtpu's ResNet
    block step at ``R`` replicas (benchmarks/model_steps.py)."""
    import time

    import xtpu

    xs, ys, ws = resnet_data(R)
    inputs = [[x, y, *ws] for x, y in zip(xs, ys)]
    lower = xtpu.lower  # xtpu loads its API on first use: an import, not a compile
    t = time.perf_counter()
    c = lower(xtpu_resnet_step, inputs).compile()
    compile_s = time.perf_counter() - t
    return lambda: c(inputs), compile_s, lambda out: float(np.asarray(out[0][0]))


def xtpu_side(repeats: int, quick: bool) -> dict:
    import cnn_programs as cnn

    import xtpu
    from xtpu.dialects.hlo_window import ConvolutionOp
    from xtpu.passes.spmd_cost import bytes_per_core

    res: dict = {}
    rng = np.random.default_rng(0)
    for name, xs, ws, s, pad, g in CONV_SHAPES[:2] if quick else CONV_SHAPES:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        kern = ConvolutionOp.kernel(
            dimension_numbers="[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]",
            window_strides=(s, s),
            padding=tuple(_pads(n, k, s, pad) for n, k in zip(xs[1:3], ws[:2])),
            feature_group_count=g,
        )
        res[f"conv {name}"] = best(lambda kern=kern, x=x, w=w: kern(x, w), repeats, None)
    for R in REPLICAS:
        call, _, loss_of = xtpu_resnet_call(R)
        assert np.isfinite(loss_of(call()))
        res[f"resnet block step R={R}"] = best(call, repeats, None)
    x, y, w1, w2, wd = cnn.data()
    da = cnn.device_assignment()
    split = xtpu.lower(cnn.xtpu_train, [[x, y, w1, w2, wd]], device_assignment=da).compile()
    whole = xtpu.lower(lambda *a: cnn.xtpu_train(*a, split=False), [[x, y, w1, w2, wd]]).compile()
    a, b = split([[x, y, w1, w2, wd]])[0], whole([[x, y, w1, w2, wd]])[0]
    assert all(np.allclose(np.asarray(u), np.asarray(v), rtol=1e-4, atol=1e-5) for u, v in zip(a, b))
    res["split cnn step (8 cores)"] = best(lambda: split([[x, y, w1, w2, wd]]), repeats, None)
    res["unsplit cnn step (1 core)"] = best(lambda: whole([[x, y, w1, w2, wd]]), repeats, None)
    for prog, fn in (
        ("convs", lambda *a: cnn.xtpu_convs(*a)),
        ("convs_pool", lambda *a: cnn.xtpu_convs(*a, pool=True)),
    ):
        m = xtpu.lower(fn, [[x, w1, w2]], device_assignment=da).compile().module
        res[f"bytes/core {prog}"] = bytes_per_core(m)
    res["bytes/core train"] = bytes_per_core(split.module)
    return res


# -- JAX ---------------------------------------------------------------------------


def jax_resnet_call(R: int):
    """(step, trace + compile seconds, loss of an output) of JAX's ResNet
    block step at ``R`` replicas (``shard_map`` over R CPU devices)."""
    import time

    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    def conv(a, k):
        return jax.lax.conv_general_dilated(a, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def bn(h):
        m = h.mean((0, 1, 2))
        v = ((h - m) ** 2).mean((0, 1, 2))
        return (h - m) / jnp.sqrt(v + 1e-3)

    def loss_fn(ws, x, y):
        k1, k2, wd = ws
        h = jax.nn.relu(bn(conv(x, k1)))
        h = jax.nn.relu(bn(conv(h, k2)) + x)
        h = jax.lax.reduce_window(h, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0
        logits = h.reshape(RB, -1) @ wd
        return jnp.mean(-jnp.sum(y * jax.nn.log_softmax(logits), axis=1))

    def step(x, y, k1, k2, wd, lr=0.01):
        loss, grads = jax.value_and_grad(loss_fn)((k1[0], k2[0], wd[0]), x[0], y[0])
        new = [w[0] - lr * jax.lax.psum(g, "r") for w, g in zip((k1, k2, wd), grads)]
        return (loss[None], *[n[None] for n in new])

    xs, ys, ws = resnet_data(R)
    mesh = Mesh(np.array(jax.devices()[:R]), ("r",))
    spec = P("r")
    put = lambda a: jax.device_put(a, NamedSharding(mesh, spec))  # noqa: E731
    args = (put(np.stack(xs)), put(np.stack(ys)), *[put(np.stack([w] * R)) for w in ws])
    t = time.perf_counter()
    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(spec,) * 5, out_specs=(spec,) * 4)).lower(*args).compile()
    compile_s = time.perf_counter() - t
    return lambda: jax.block_until_ready(f(*args)), compile_s, lambda out: float(np.asarray(out[0])[0])


def jax_side(repeats: int, quick: bool) -> dict:
    import cnn_programs as cnn
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    res: dict = {}
    rng = np.random.default_rng(0)
    for name, xs, ws, s, pad, g in CONV_SHAPES[:2] if quick else CONV_SHAPES:
        x = jnp.asarray(rng.standard_normal(xs).astype(np.float32))
        w = jnp.asarray(rng.standard_normal(ws).astype(np.float32))
        f = jax.jit(
            lambda a, b, s=s, pad=pad, g=g: jax.lax.conv_general_dilated(
                a, b, (s, s), pad, dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=g
            )
        )
        res[f"conv {name}"] = best(lambda f=f, x=x, w=w: jax.block_until_ready(f(x, w)), repeats, None)

    for R in REPLICAS:
        call, _, loss_of = jax_resnet_call(R)
        assert np.isfinite(loss_of(call()))
        res[f"resnet block step R={R}"] = best(call, repeats, None)

    devices = jax.devices()
    mesh = Mesh(np.array(devices[:8]).reshape(2, 4), ("w", "h"))
    img, rep = NamedSharding(mesh, P(None, "w", "h", None)), NamedSharding(mesh, P())
    x, y, w1, w2, wd = cnn.data()
    train = cnn.jax_programs()["train"]
    fs = jax.jit(train, in_shardings=(img, rep, rep, rep, rep))
    args = [jax.device_put(x, img)] + [jax.device_put(a, rep) for a in (y, w1, w2, wd)]
    jax.block_until_ready(fs(*args))
    res["split cnn step (8 cores)"] = best(lambda: jax.block_until_ready(fs(*args)), repeats, None)
    fw = jax.jit(train)
    jax.block_until_ready(fw(x, y, w1, w2, wd))
    res["unsplit cnn step (1 core)"] = best(lambda: jax.block_until_ready(fw(x, y, w1, w2, wd)), repeats, None)
    for k, v in cnn.xla_bytes_per_core().items():
        res[f"bytes/core {k}"] = v
    return res


# -- the table ---------------------------------------------------------------------


def run_side(side: str, repeats: int, quick: bool) -> dict:
    env = dict(os.environ)
    if side == "jax":
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        env["JAX_PLATFORMS"] = "cpu"
    argv = [sys.executable, os.path.abspath(__file__), "--side", side, "--repeats", str(repeats)]
    if quick:
        argv.append("--quick")
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"the {side} side failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def fmt(key: str, v: float | None) -> str:
    if v is None:
        return "-"
    if key.startswith("bytes"):
        return f"{v:,.0f} B"
    return f"{v * 1e3:.2f} ms" if v >= 1e-3 else f"{v * 1e6:.0f} us"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="two convolution shapes")
    ap.add_argument("--side", choices=["xtpu", "jax"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:
        fn = xtpu_side if args.side == "xtpu" else jax_side
        print(json.dumps(fn(args.repeats, args.quick)))
        return
    ours = run_side("xtpu", args.repeats, args.quick)
    theirs = run_side("jax", args.repeats, args.quick)
    print(f"{'workload':44} {'xtpu':>12} {'JAX/XLA':>12} {'xtpu/JAX':>9}")
    for key in ours:
        a, b = ours[key], theirs.get(key)
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"{key:44} {fmt(key, a):>12} {fmt(key, b):>12} {ratio:>9}")


if __name__ == "__main__":
    main()
