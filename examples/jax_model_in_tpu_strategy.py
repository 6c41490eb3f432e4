"""A model written in plain JAX, trained data-parallel by xtpu.

The model is a small pre-norm residual MLP classifier in plain JAX
(``jax.numpy``, ``jax.nn``; no JAX training code): layer norm, a residual
tanh block, a linear head and the softmax cross-entropy, a function of its
parameters and a batch.  Its forward pass and loss come into xtpu with
``xtpu.experimental.from_jax``, which lowers it with JAX to StableHLO and
inlines that as xtpu ops; xtpu then trains it as it trains its own models:

* ``xtpu.TPUStrategy`` over ``--replicas`` replicas (8 by default), the
  parameters are mirrored ``xtpu.Variable``s and each global batch is split
  evenly across the replicas by ``strategy.experimental_distribute_dataset``;
* the gradients come from ``xtpu.GradientTape`` (xtpu's gradient rules on
  the imported ops, not JAX's), ``xtpu.optimizers.SGD`` (momentum 0.9)
  all-reduces them over the replicas and updates the variables.

The same training runs in JAX as well: ``jax.grad`` of the same loss per
replica shard, the mean over the replicas' gradients, and SGD with momentum
written out.  The script prints the largest difference between the two
runs' weights and exits with status 1 when it is above ``--tolerance``
(1e-5).

Run: ``python examples/jax_model_in_tpu_strategy.py [--replicas 8] [--steps 30]``.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

import xtpu
from xtpu.experimental import from_jax

# ---------------------------------------------------------------------------
# The model, in plain JAX
# ---------------------------------------------------------------------------


def layer_norm(x, scale, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * scale


def forward(params, x):
    """Logits ``[batch, classes]`` for inputs ``[batch, features]``."""
    w_in, b_in, scale, w1, b1, w2, w_out, b_out = params
    h = jnp.tanh(x @ w_in + b_in)
    h = h + jnp.tanh(layer_norm(h, scale) @ w1 + b1) @ w2
    return h @ w_out + b_out


def loss_fn(params, x, labels_one_hot, global_batch):
    """The summed softmax cross-entropy of the batch over the global batch size."""
    logp = jax.nn.log_softmax(forward(params, x))
    return -jnp.sum(labels_one_hot * logp) / global_batch


def init_params(features: int, hidden: int, classes: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)

    def dense(n_in, n_out):
        return (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)

    return [
        dense(features, hidden),
        np.zeros(hidden, np.float32),
        np.ones(hidden, np.float32),
        dense(hidden, hidden),
        np.zeros(hidden, np.float32),
        dense(hidden, hidden),
        dense(hidden, classes),
        np.zeros(classes, np.float32),
    ]


def make_data(n: int, features: int, classes: int, seed: int):
    """Points around one centre per class."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((classes, features)).astype(np.float32) * 2.0
    y = rng.integers(0, classes, n)
    x = centres[y] + rng.standard_normal((n, features)).astype(np.float32)
    return x.astype(np.float32), np.eye(classes, dtype=np.float32)[y]


# ---------------------------------------------------------------------------
# Training with xtpu: TPUStrategy, GradientTape, xtpu.optimizers.SGD
# ---------------------------------------------------------------------------


def train_xtpu(params, batches, replicas: int, lr: float, momentum: float, global_batch: int):
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=replicas))
    with strategy.scope():
        weights = [xtpu.Variable(p, name=f"p{i}") for i, p in enumerate(params)]
        optimizer = xtpu.optimizers.SGD(learning_rate=lr, momentum=momentum)
    loss_in_xtpu = from_jax(loss_fn)

    def step_fn(batch):
        x, y = batch
        with xtpu.GradientTape() as tape:
            loss = loss_in_xtpu(list(weights), x, y, np.float32(global_batch))
        grads = tape.gradient(loss, weights)
        optimizer.apply_gradients(zip(grads, weights))
        return xtpu.get_replica_context().all_reduce(xtpu.ReduceOp.SUM, loss)

    iterator = iter(strategy.experimental_distribute_dataset(batches))
    losses = []
    for _ in batches:
        out = strategy.run(step_fn, args=(next(iterator),))
        losses.append(float(strategy.experimental_local_results(out)[0]))
    return [w.numpy() for w in weights], losses


# ---------------------------------------------------------------------------
# The same training in JAX
# ---------------------------------------------------------------------------


def train_jax(params, batches, replicas: int, lr: float, momentum: float, global_batch: int):
    """Per replica ``jax.grad`` of its shard's loss; the replicas' gradients
    summed (the loss is already over the global batch), as the strategy's
    all-reduce does; SGD with momentum as Keras writes it
    (``v = momentum * v - lr * g; w = w + v``)."""
    grad = jax.jit(jax.grad(loss_fn))
    params = [jnp.asarray(p) for p in params]
    velocity = [jnp.zeros_like(p) for p in params]
    per = global_batch // replicas
    for x, y in batches:
        shards = [
            grad(params, x[r * per : (r + 1) * per], y[r * per : (r + 1) * per], global_batch) for r in range(replicas)
        ]
        g = [sum(s[i] for s in shards) for i in range(len(params))]
        velocity = [momentum * v - lr * gi for v, gi in zip(velocity, g)]
        params = [p + v for p, v in zip(params, velocity)]
    return [np.asarray(p) for p in params]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64, help="global batch (split evenly over the replicas)")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tolerance", type=float, default=1e-5)
    args = ap.parse_args(argv)
    if args.batch % args.replicas:
        ap.error(f"--batch {args.batch} does not split evenly over {args.replicas} replicas")
    features, classes = 16, 4
    x, y = make_data(args.steps * args.batch, features, classes, args.seed)
    batches = [
        (x[i * args.batch : (i + 1) * args.batch], y[i * args.batch : (i + 1) * args.batch]) for i in range(args.steps)
    ]
    params = init_params(features, args.hidden, classes, args.seed + 1)

    trained, losses = train_xtpu(params, batches, args.replicas, args.lr, args.momentum, args.batch)
    reference = train_jax(params, batches, args.replicas, args.lr, args.momentum, args.batch)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(trained, reference))
    print(f"{args.steps} steps on {args.replicas} replicas: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    print(f"largest difference from the JAX run's weights: {diff:.2e} (tolerance {args.tolerance:g})")
    if diff > args.tolerance:
        print("FAILED: the weights differ from JAX's training", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
