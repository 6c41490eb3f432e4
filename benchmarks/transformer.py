"""The transformer step of examples/train_transformer.py, xtpu against JAX
on CPU devices, side by side in one run: ``python benchmarks/transformer.py``.

The step (the example's model: 2 layers, 4 heads, dim 64, context 64, the
103-character vocabulary; global batch 32 split over R replicas): the mean
next-character cross-entropy, its gradients with respect to all 30 weights
summed over the replicas (xtpu: ``xtpu.GradientTape`` and
``xtpu.cross_replica_sum`` inside ``xtpu.replicate``; JAX: ``jax.grad`` and
``lax.psum`` inside ``jax.shard_map`` over R of 8 CPU devices), and an SGD
update, at R = 1, 2 and 8.  Each side runs in its own subprocess (so peak
RSS is its own); per R it reports the first call (trace + compile + one
step) and the median of ``--repeats`` timed steps; then the process's peak
resident set (``ru_maxrss``).  Both sides check their step's loss against
each other's eager value (JAX's un-jitted loss).
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

REPLICAS = [1, 2, 8]
VOCAB, SEQ, DIM, HEADS, LAYERS, BATCH, LR = 103, 64, 64, 4, 2, 32, 0.1


def data():
    import train_transformer as tt

    params = tt.init_params(VOCAB, SEQ, DIM, LAYERS, seed=0)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32)
    targets = rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32)
    return params, tokens, targets


def median_time(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def xtpu_step():
    """The step function (of tokens, targets and the weights in name order)
    and the weights' names."""
    import train_transformer as tt

    import xtpu

    names = sorted(data()[0])

    def step(tok, tgt, *values):
        p = dict(zip(names, values))
        with xtpu.GradientTape() as tape:
            for v in values:
                tape.watch(v)
            loss = tt.loss_fn(p, tok, tgt, LAYERS, HEADS, global_batch_size=BATCH * SEQ)
        grads = tape.gradient(loss, list(values))
        new = [v - LR * xtpu.cross_replica_sum(g) for v, g in zip(values, grads)]
        return [xtpu.cross_replica_sum(loss)] + new

    return step, names


def xtpu_inputs(R: int, names) -> list:
    params, tokens, targets = data()
    per = BATCH // R
    return [
        [tokens[r * per : (r + 1) * per], targets[r * per : (r + 1) * per], *[params[k] for k in names]]
        for r in range(R)
    ]


def xtpu_call(R: int):
    """(step, trace + compile seconds, loss of an output) of xtpu's step at
    ``R`` replicas, compiled ahead of time (benchmarks/model_steps.py)."""
    import xtpu

    step, names = xtpu_step()
    inputs = xtpu_inputs(R, names)
    lower = xtpu.lower  # xtpu loads its API on first use: an import, not a compile
    t = time.perf_counter()
    compiled = lower(step, inputs).compile()
    compile_s = time.perf_counter() - t
    return lambda: compiled(inputs), compile_s, lambda out: float(np.asarray(out[0][0]))


def xtpu_side(repeats: int) -> dict:
    import xtpu

    step, names = xtpu_step()
    res: dict = {}
    for R in REPLICAS:
        inputs = xtpu_inputs(R, names)
        t = time.perf_counter()
        out = xtpu.replicate(step, inputs)
        res[f"first call R={R}"] = time.perf_counter() - t
        res[f"loss R={R}"] = float(out[0][0])
        res[f"step R={R}"] = median_time(lambda: xtpu.replicate(step, inputs), repeats)
    res["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return res


def jax_step(R: int):
    """JAX's jitted step at ``R`` replicas and its arguments."""
    import jax
    import jax.numpy as jnp
    import transformer_jax as tj
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    params, tokens, targets = data()

    def step(tok, tgt, p):
        loss, grads = jax.value_and_grad(tj.loss_fn)(p, tok, tgt, LAYERS, HEADS, BATCH * SEQ)
        grads = jax.lax.psum(grads, "r")
        new = jax.tree_util.tree_map(lambda v, g: v - LR * g, p, grads)
        return jax.lax.psum(loss, "r")[None], new

    mesh = Mesh(np.array(jax.devices()[:R]), ("r",))
    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P("r"), P("r"), P()), out_specs=(P("r"), P())))
    tok = jax.device_put(tokens, NamedSharding(mesh, P("r")))
    tgt = jax.device_put(targets, NamedSharding(mesh, P("r")))
    p = jax.device_put({k: jnp.asarray(v) for k, v in params.items()}, NamedSharding(mesh, P()))
    return f, (tok, tgt, p)


def jax_call(R: int):
    """(step, trace + compile seconds, loss of an output) of JAX's step at
    ``R`` replicas (``jit(...).lower(...).compile()``)."""
    import jax

    f, args = jax_step(R)
    t = time.perf_counter()
    compiled = f.lower(*args).compile()
    compile_s = time.perf_counter() - t
    return lambda: jax.block_until_ready(compiled(*args)), compile_s, lambda out: float(np.asarray(out[0])[0])


def jax_side(repeats: int) -> dict:
    import jax

    res: dict = {}
    for R in REPLICAS:
        f, args = jax_step(R)
        t = time.perf_counter()
        out = jax.block_until_ready(f(*args))
        res[f"first call R={R}"] = time.perf_counter() - t
        res[f"loss R={R}"] = float(out[0][0])
        res[f"step R={R}"] = median_time(lambda: jax.block_until_ready(f(*args)), repeats)
    res["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return res


def run_side(side: str, repeats: int) -> dict:
    env = dict(os.environ)
    if side == "jax":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
        env["JAX_PLATFORMS"] = "cpu"
    cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--repeats", str(repeats)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        sys.exit(f"the {side} side failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fmt(key: str, v: float) -> str:
    if key == "rss":
        return f"{v / 2**20:.0f} MB"
    if key.startswith("loss"):
        return f"{v:.6f}"
    return f"{v * 1e3:.1f} ms"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--side", choices=["xtpu", "jax"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:
        res = (xtpu_side if args.side == "xtpu" else jax_side)(args.repeats)
        print(json.dumps(res))
        return 0
    x, j = run_side("xtpu", args.repeats), run_side("jax", args.repeats)
    print(
        f"transformer step (global batch {BATCH}x{SEQ}, dim {DIM}, {LAYERS} layers, vocab {VOCAB}; median of {args.repeats})"
    )
    print(f"{'':<20}{'xtpu':>14}{'JAX':>14}{'xtpu/JAX':>10}")
    for key in x:
        ratio = "" if key.startswith("loss") else f"{x[key] / j[key]:.2f}x"
        print(f"{key:<20}{fmt(key, x[key]):>14}{fmt(key, j[key]):>14}{ratio:>10}")
    for R in REPLICAS:
        a, b = x[f"loss R={R}"], j[f"loss R={R}"]
        if abs(a - b) > 1e-5 * abs(b):
            print(f"R={R}: the losses differ: xtpu {a}, JAX {b}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
