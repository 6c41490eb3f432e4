"""float32 against mixed_bfloat16 (issue 28): step time and all-reduce bytes.

``python benchmarks/mixed_precision.py [--replicas 2] [--batch 256] [--width 512]``

One data-parallel training step of a two-layer MLP (per replica
``x[batch, width] @ W1[width, width] -> tanh -> @ W2[width, 10]``, a float32
softmax cross-entropy, SGD with momentum) under ``xtpu.TPUStrategy``, traced
once into an ``xtpu.function`` and run repeatedly, in three precisions:

* ``float32``;
* ``mixed_bfloat16``: TF's TPU policy (float32 variables read as bfloat16,
  bfloat16 matmuls with float32 accumulation); its gradients arrive in
  float32 (TF's AutoCastVariable), so the optimizer's all-reduce moves as
  many bytes as float32's;
* ``mixed_bfloat16 + bf16 all-reduce``: the same, the gradients cast to
  bfloat16 for the all-reduce (``ReplicaContext.all_reduce``) and back to
  float32 for the update (``apply_gradients(...,
  experimental_aggregate_gradients=False)``), as TPU programs that compress
  their gradient all-reduce do: half the bytes.

Printed per precision: the best step time of several timed loops (the
precisions' loops interleaved, so that a change of the machine's load
touches all alike; the load average is printed first) and the median CPU
time of the process per step (steadier than the wall time when other work
shares the machine; with several replicas, the sum of their threads'), the bytes the step's
all-reduces move per replica (counted in the communicator), and the
training loss after the timed steps (to show the runs train alike).  Next to it, the same step with JAX on one CPU device (jit,
float32 and bfloat16 with ``preferred_element_type=float32``), when JAX is
installed.  Target (issue 28): mixed_bfloat16 no slower than float32; the
bf16 all-reduce half the bytes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import xtpu
from xtpu.dialects import bfloat16
from xtpu.keras import mixed_precision
from xtpu.runtime import communicator


def make_data(replicas: int, batch: int, width: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((batch, width)).astype(np.float32) for _ in range(replicas)]
    ys = [rng.integers(0, 10, size=batch).astype(np.int32) for _ in range(replicas)]
    w1 = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
    w2 = (rng.standard_normal((width, 10)) / np.sqrt(width)).astype(np.float32)
    return xs, ys, w1, w2


def build(precision: str, replicas: int, data, bf16_all_reduce: bool):
    xs, ys, w1, w2 = data
    mixed_precision.set_global_policy(precision)
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=replicas))
    with strategy.scope():
        v1 = xtpu.Variable(w1, name="w1")
        v2 = xtpu.Variable(w2, name="w2")
        opt = xtpu.optimizers.SGD(0.05, momentum=0.9)
    compute = mixed_precision.global_policy().compute_dtype
    global_batch = float(replicas * xs[0].shape[0])

    def step(x, y):
        with xtpu.GradientTape() as tape:
            h = xtpu.math.tanh(xtpu.cast(x, compute) @ v1)
            logits = xtpu.cast(h @ v2, xtpu.float32)
            loss = -xtpu.reduce_sum(xtpu.one_hot(y, 10) * xtpu.nn.log_softmax(logits)) / global_batch
        grads = tape.gradient(loss, [v1, v2])
        if bf16_all_reduce:
            ctx = xtpu.get_replica_context()
            grads = [
                xtpu.cast(ctx.all_reduce(xtpu.ReduceOp.SUM, xtpu.cast(g, xtpu.bfloat16)), xtpu.float32) for g in grads
            ]
            opt.apply_gradients(zip(grads, [v1, v2]), experimental_aggregate_gradients=False)
        else:
            opt.apply_gradients(zip(grads, [v1, v2]))
        return loss

    @xtpu.function
    def train(x, y):
        return strategy.run(step, args=(x, y))

    args = (xtpu.PerReplica(xs), xtpu.PerReplica(ys))
    mixed_precision.set_global_policy("float32")
    return lambda: train(*args)


def measure(fns: dict, repeats: int, inner: int) -> tuple[dict, dict]:
    """The best wall time per call of each function over ``repeats`` loops
    of ``inner`` calls, the functions' loops taken in turn, and the median
    over the loops of the process's CPU time per call (every thread's: on a
    machine shared with other work, the wall time's best loop swings by
    +-20% from run to run, the CPU time's median by a few percent)."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    cpu: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t, c = time.perf_counter(), time.process_time()
            for _ in range(inner):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t) / inner)
            cpu[name].append((time.process_time() - c) / inner)
    return best, {name: statistics.median(v) for name, v in cpu.items()}


def all_reduce_bytes(fn) -> int:
    """Bytes one replica's operands of the step's all-reduces hold."""
    seen = []
    original = communicator.reduce_in_order

    def spy(values, reduction):
        seen.append(values[0].nbytes)
        return original(values, reduction)

    communicator.reduce_in_order = spy
    try:
        fn()
    finally:
        communicator.reduce_in_order = original
    return sum(seen)


def jax_steps(data, width: int):
    """The same step in JAX on one CPU device (one replica's batch), float32
    and bfloat16 (bf16 matmuls accumulating in float32)."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}
    xs, ys, w1, w2 = data
    x, y = jnp.asarray(xs[0]), jnp.asarray(ys[0])

    def make(dt):
        def loss(w):
            a, b = w
            h = jnp.tanh(jnp.matmul(x.astype(dt), a.astype(dt), preferred_element_type=jnp.float32).astype(dt))
            logits = jnp.matmul(h, b.astype(dt), preferred_element_type=jnp.float32)
            return -jnp.sum(jax.nn.one_hot(y, 10) * jax.nn.log_softmax(logits)) / x.shape[0]

        @jax.jit
        def step(w):
            g = jax.grad(loss)(w)
            return [p - 0.05 * q for p, q in zip(w, g)]

        w = [jnp.asarray(w1), jnp.asarray(w2)]
        return lambda: jax.block_until_ready(step(w))

    return {"float32": make(jnp.float32), "mixed_bfloat16": make(jnp.bfloat16)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256, help="examples per replica")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--inner", type=int, default=5)
    args = ap.parse_args(argv)
    data = make_data(args.replicas, args.batch, args.width)
    # The compiled bfloat16 kernels load on a thread at the first bfloat16
    # op (the ml_dtypes fallback computes meanwhile): time them, not it.
    compiled = bfloat16.load(timeout=600)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"MLP step, {args.replicas} replicas x batch {args.batch}, width {args.width} "
        f"(best of {args.repeats} interleaved loops of {args.inner} steps; load average {load}; "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}; "
        f"bfloat16 kernels {'compiled' if compiled else 'ml_dtypes fallback'})"
    )
    runs = {
        "float32": build("float32", args.replicas, data, False),
        "mixed_bfloat16": build("mixed_bfloat16", args.replicas, data, False),
        "mixed_bfloat16 + bf16 all-reduce": build("mixed_bfloat16", args.replicas, data, True),
    }
    nbytes = {name: all_reduce_bytes(fn) for name, fn in runs.items()}
    times, cpu = measure(runs, args.repeats, args.inner)
    base, cbase = times["float32"], cpu["float32"]
    for name, fn in runs.items():
        out = fn()
        loss = float(np.asarray(getattr(out, "values", (out,))[0]))
        print(
            f"  xtpu {name:34s} {1e3 * times[name]:8.2f} ms/step ({times[name] / base:4.2f}x float32), "
            f"CPU {1e3 * cpu[name]:6.2f} ms ({cpu[name] / cbase:5.3f}x)  "
            f"all-reduce {nbytes[name]:>9,d} bytes/replica ({nbytes[name] / max(nbytes['float32'], 1):4.2f}x)  "
            f"loss {loss:.4f}"
        )
    jax_runs = jax_steps(data, args.width)
    if jax_runs:
        jtimes, jcpu = measure(jax_runs, args.repeats, args.inner)
        for name, t in jtimes.items():
            print(
                f"  JAX  {name:34s} {1e3 * t:8.2f} ms/step ({t / jtimes['float32']:4.2f}x float32), "
                f"CPU {1e3 * jcpu[name]:6.2f} ms ({jcpu[name] / jcpu['float32']:5.3f}x), one replica's batch"
            )


if __name__ == "__main__":
    main()
