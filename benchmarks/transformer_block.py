"""A transformer block's training step, xtpu against JAX in one run (issue 29):
``python benchmarks/transformer_block.py [--rounds 3] [--steps 10]``.

The step, per replica: x[8, 128, 256], a pre-LayerNorm block (LayerNorm,
causal softmax attention with 4 heads, residual, LayerNorm, MLP 256 -> 1024
-> 256 with tanh-GELU, residual), loss = mean(y * y); the gradients of all
12 weights (xtpu: ``GradientTape``; JAX: ``jax.grad``), summed over the
replicas (``cross_replica_sum``; ``jax.lax.psum`` under ``jax.shard_map``
over R of 8 CPU devices), SGD with rate 0.01.  Each figure comes from a
fresh subprocess (so peak RSS is its own): xtpu and JAX alternate, for each
R in 1, 2, 8 and each state, for ``--rounds`` rounds; the table shows
medians over the rounds.  States: ``keep`` (the caller keeps each step's
outputs until the next step returns, as a training loop that feeds the
weights back does) and ``drop`` (the caller drops them at once).  Per step:
the median time of ``--steps`` steps after 2 warm-up steps, and minor page
faults (``ru_minflt``) per step; per process: peak RSS (``ru_maxrss``) and
the first trace + compile (xtpu: ``lower(...).compile()``; JAX:
``jit(...).lower(...).compile()``; neither includes imports nor the first
execution).  xtpu runs with its default pipeline (fused) and,
as a second row, without ``hlo-fuse-elementwise`` (unfused).

The machine's 1-minute load average is printed beside each figure (the
median over the rounds of the mean before and after each run) and for the
whole table: on a shared machine, compare the two sides of one round, not
runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

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


def xtpu_side(R: int, state: str, steps: int, fused: bool) -> dict:
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
    return run_loop(lambda: compiled(inputs), state, steps, compile_s, lambda out: float(np.asarray(out[0][0])))


def jax_side(R: int, state: str, steps: int) -> dict:
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
    return run_loop(
        lambda: jax.block_until_ready(f(*args)), state, steps, compile_s, lambda out: float(np.asarray(out[0])[0])
    )


def run_loop(call, state: str, steps: int, compile_s: float, loss_of) -> dict:
    kept = call()
    kept = call()
    loss = loss_of(kept)
    if state == "drop":
        kept = None
    times = []
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
        t = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t)
        if state == "keep":
            kept = out  # the previous outputs die after the step returned
        out = None
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / steps
    del kept
    return {
        "time": statistics.median(times),
        "faults": faults,
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "compile": compile_s,
        "loss": loss,
    }


def run_side(side: str, R: int, state: str, steps: int) -> dict:
    env = dict(os.environ)
    if side == "jax":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
        env["JAX_PLATFORMS"] = "cpu"
    cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--replicas", str(R), "--state", state]
    load = os.getloadavg()[0]
    proc = subprocess.run(cmd + ["--steps", str(steps)], capture_output=True, text=True, env=env)
    if proc.returncode:
        sys.exit(f"the {side} side failed:\n{proc.stdout}\n{proc.stderr}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got["load"] = (load + os.getloadavg()[0]) / 2  # the 1-minute load average around the run
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=["xtpu", "xtpu-unfused", "jax"])
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--state", choices=["keep", "drop"], default="keep")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--replica-counts", default=",".join(map(str, REPLICAS)))
    ap.add_argument("--sides", default="xtpu,xtpu-unfused,jax")
    args = ap.parse_args(argv)
    if args.side == "jax":
        print(json.dumps(jax_side(args.replicas, args.state, args.steps)))
        return 0
    if args.side:
        print(json.dumps(xtpu_side(args.replicas, args.state, args.steps, fused=args.side == "xtpu")))
        return 0
    sides = args.sides.split(",")
    counts = [int(r) for r in args.replica_counts.split(",")]
    load0 = os.getloadavg()[0]
    got: dict = {}
    for _ in range(args.rounds):
        for R in counts:
            for state in ("keep", "drop"):
                for side in sides:
                    got.setdefault((side, R, state), []).append(run_side(side, R, state, args.steps))
    load1 = os.getloadavg()[0]
    print(f"transformer block step, medians of {args.rounds} rounds; load average {load0:.1f} -> {load1:.1f}")
    print("| R | state | side | step | / JAX | faults/step | peak RSS | trace+compile | / JAX | loss | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for R in counts:
        for state in ("keep", "drop"):
            med = {
                side: {k: statistics.median(r[k] for r in got[(side, R, state)]) for k in got[(side, R, state)][0]}
                for side in sides
            }
            jax_t = med.get("jax", {}).get("time")
            jax_c = med.get("jax", {}).get("compile")
            for side in sides:
                m = med[side]
                ratio = f"{m['time'] / jax_t:.2f}" if jax_t else "-"
                cratio = f"{m['compile'] / jax_c:.2f}" if jax_c else "-"
                print(
                    f"| {R} | {state} | {side} | {m['time'] * 1e3:.1f} ms | {ratio} | {m['faults']:.0f} | "
                    f"{m['rss'] / 2**20:.0f} MB | {m['compile'] * 1e3:.0f} ms | {cratio} | {m['loss']:.5f} | "
                    f"{m['load']:.1f} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
