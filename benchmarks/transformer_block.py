"""A transformer block's training step, xtpu against JAX in one run (issue 29):
``python benchmarks/transformer_block.py [--rounds 3] [--steps 10]``.

The step, per replica: x[8, 128, 256], a pre-LayerNorm block (LayerNorm,
causal softmax attention with 4 heads, residual, LayerNorm, MLP 256 -> 1024
-> 256 with tanh-GELU, residual), loss = mean(y * y); the gradients of all
12 weights (xtpu: ``GradientTape``; JAX: ``jax.grad``), summed over the
replicas (``cross_replica_sum``; ``jax.lax.psum`` under ``jax.shard_map``
over R of 8 CPU devices), SGD with rate 0.01.  Each figure comes from a
fresh subprocess (so peak RSS is its own): xtpu and JAX alternate, for each
R in 1, 2, 8 and each state (``keep``, ``drop``: benchmarks/step_states.py
says what is measured), for ``--rounds`` rounds; the table shows medians
over the rounds.  xtpu runs with its default pipeline (fused) and, as a
second row, without ``hlo-fuse-elementwise`` (unfused).
``benchmarks/model_steps.py`` runs this step beside the transformer's and
the ResNet block's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from step_states import (  # benchmarks/ is on the path of a script run from it
    STATES,
    WARMUP,
    print_table,
    run_loop,
    run_rounds,
)

B, T, D, H, F = 8, 128, 256, 4, 1024
REPLICAS = [1, 2, 8]
LR = 0.01


def data(R: int):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((B, T, D)).astype(np.float32) for _ in range(R)]

    def w(*shape, scale=None):
        s = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        return (rng.standard_normal(shape) * s).astype(np.float32)

    weights = [
        np.ones(D, np.float32),  # ln1 gamma
        np.zeros(D, np.float32),  # ln1 beta
        w(D, D),  # wq
        w(D, D),  # wk
        w(D, D),  # wv
        w(D, D),  # wo
        np.ones(D, np.float32),  # ln2 gamma
        np.zeros(D, np.float32),  # ln2 beta
        w(D, F),  # w1
        np.zeros(F, np.float32),  # b1
        w(F, D),  # w2
        np.zeros(D, np.float32),  # b2
    ]
    return xs, weights


def xtpu_side(R: int, state: str, steps: int, fused: bool, warmup: int = WARMUP) -> dict:
    return run_loop(*xtpu_call(R, fused), state=state, steps=steps, warmup=warmup)


def xtpu_call(R: int, fused: bool = True):
    """(step, trace + compile seconds, loss of an output) of xtpu's step."""
    import xtpu
    from xtpu.passes import DEFAULT_PIPELINE

    xs, weights = data(R)
    mask = np.tril(np.ones((T, T), bool))

    def layer_norm(x, g, b):
        mu = xtpu.reduce_mean(x, axis=-1, keepdims=True)
        var = xtpu.reduce_mean(xtpu.math.square(x - mu), axis=-1, keepdims=True)
        return (x - mu) / xtpu.math.sqrt(var + 1e-5) * g + b

    def block(x, p):
        g1, b1_, wq, wk, wv, wo, g2, b2_, w1, b1, w2, b2 = p
        h = xtpu.reshape(layer_norm(x, g1, b1_), [B * T, D])

        def heads(w):
            return xtpu.transpose(xtpu.reshape(xtpu.matmul(h, w), [B, T, H, D // H]), [0, 2, 1, 3])

        q, k, v = heads(wq), heads(wk), heads(wv)
        s = xtpu.matmul(q, xtpu.transpose(k, [0, 1, 3, 2])) * float(1.0 / np.sqrt(D // H))
        s = xtpu.where(mask, s, xtpu.fill([B, H, T, T], -1e9))
        a = xtpu.matmul(xtpu.nn.softmax(s), v)
        a = xtpu.reshape(xtpu.transpose(a, [0, 2, 1, 3]), [B * T, D])
        x1 = xtpu.reshape(x, [B * T, D]) + xtpu.matmul(a, wo)
        u = xtpu.matmul(xtpu.reshape(layer_norm(x1, g2, b2_), [B * T, D]), w1) + b1
        u = 0.5 * u * (1.0 + xtpu.math.tanh(0.7978845608 * (u + 0.044715 * u * u * u)))
        return x1 + xtpu.matmul(u, w2) + b2

    def step(x, *p):
        with xtpu.GradientTape() as tape:
            tape.watch(list(p))
            y = block(x, p)
            loss = xtpu.reduce_mean(y * y)
        grads = tape.gradient(loss, list(p))
        return [loss] + [w - LR * xtpu.cross_replica_sum(g) for w, g in zip(p, grads)]

    inputs = [[x] + weights for x in xs]
    lower = xtpu.lower  # xtpu loads its API on first use: an import, not a compile
    t = time.perf_counter()
    lowered = lower(step, inputs)
    compiled = lowered.compile(None if fused else ",".join(DEFAULT_PIPELINE))
    compile_s = time.perf_counter() - t
    return lambda: compiled(inputs), compile_s, lambda out: float(np.asarray(out[0][0]))


def jax_side(R: int, state: str, steps: int, warmup: int = WARMUP) -> dict:
    return run_loop(*jax_call(R), state=state, steps=steps, warmup=warmup)


def jax_call(R: int):
    """(step, trace + compile seconds, loss of an output) of JAX's step."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    xs, weights = data(R)
    mask = np.tril(np.ones((T, T), bool))

    def layer_norm(x, g, b):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * g + b

    def block(x, p):
        g1, b1_, wq, wk, wv, wo, g2, b2_, w1, b1, w2, b2 = p
        h = layer_norm(x, g1, b1_).reshape(B * T, D)

        def heads(w):
            return (h @ w).reshape(B, T, H, D // H).transpose(0, 2, 1, 3)

        q, k, v = heads(wq), heads(wk), heads(wv)
        s = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / np.sqrt(D // H))
        s = jnp.where(mask, s, jnp.float32(-1e9))
        a = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(B * T, D)
        x1 = x.reshape(B * T, D) + a @ wo
        u = layer_norm(x1, g2, b2_) @ w1 + b1
        u = 0.5 * u * (1.0 + jnp.tanh(0.7978845608 * (u + 0.044715 * u * u * u)))
        return x1 + u @ w2 + b2

    def step(x, *p):
        x = x[0]
        p = [w[0] for w in p]
        loss, grads = jax.value_and_grad(lambda p: jnp.mean(jnp.square(block(x, p))))(p)
        new = [w - LR * jax.lax.psum(g, "r") for w, g in zip(p, grads)]
        return [loss[None]] + [w[None] for w in new]

    mesh = Mesh(np.array(jax.devices()[:R]), ("r",))
    spec = P("r")
    put = lambda a: jax.device_put(a, NamedSharding(mesh, spec))  # noqa: E731
    args = [put(np.stack(xs))] + [put(np.stack([w] * R)) for w in weights]
    t = time.perf_counter()
    jitted = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(spec,) * 13, out_specs=[spec] * 13))
    f = jitted.lower(*args).compile()  # trace + compile ahead of time, as xtpu's lower().compile()
    compile_s = time.perf_counter() - t
    return lambda: jax.block_until_ready(f(*args)), compile_s, lambda out: float(np.asarray(out[0])[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=["xtpu", "xtpu-unfused", "jax"])
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--state", choices=["keep", "drop"], default="keep")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=WARMUP, help="calls before the timed ones")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--replica-counts", default=",".join(map(str, REPLICAS)))
    ap.add_argument("--sides", default="xtpu,xtpu-unfused,jax")
    args = ap.parse_args(argv)
    if args.side == "jax":
        print(json.dumps(jax_side(args.replicas, args.state, args.steps, args.warmup)))
        return 0
    if args.side:
        print(json.dumps(xtpu_side(args.replicas, args.state, args.steps, args.side == "xtpu", args.warmup)))
        return 0
    sides = args.sides.split(",")
    counts = [int(r) for r in args.replica_counts.split(",")]
    load0 = os.getloadavg()[0]
    rows = [("block", R, state) for R in counts for state in STATES]
    got = run_rounds(
        __file__,
        rows,
        sides,
        args.rounds,
        lambda row: ["--replicas", row[1], "--state", row[2], "--steps", args.steps, "--warmup", args.warmup],
    )
    load1 = os.getloadavg()[0]
    print_table(
        f"transformer block step, medians of {args.rounds} rounds; load average {load0:.1f} -> {load1:.1f}",
        got,
        rows,
        sides,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
