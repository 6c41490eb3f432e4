"""A small decoder-only transformer language model, trained data-parallel
with ``xtpu.TPUStrategy`` on 8 replicas, character by character, on real
English text: the 465 kB of Python's language reference that CPython ships
as ``pydoc_data.topics``.

The model (GPT-2's layout, as a TF user writes it with TF 2's names): token
embedding (``xtpu.gather``) plus learned positions; ``--layers`` blocks of
pre-norm causal multi-head self-attention (``xtpu.linalg.band_part`` for
the causal mask, ``xtpu.nn.softmax``) and a GELU MLP (``xtpu.nn.gelu``,
exact), each in a residual; layer norm (``xtpu.nn.moments``); the output
layer tied to the embedding (``x @ wte^T``); the loss
``xtpu.nn.sparse_softmax_cross_entropy_with_logits`` averaged over the
global batch with ``xtpu.nn.compute_average_loss``.  The gradients come from
``xtpu.GradientTape``, the updates from ``xtpu.optimizers.Adam``, whose
``apply_gradients`` all-reduces them over the replicas.

It prints the training loss and the held-out perplexity as it trains, the
unigram baseline (the held-out perplexity of the training text's character
frequencies), and a short sample at the end.  ``test_transformer.py``
checks one step against the same model written in JAX.

``--precision mixed_bfloat16`` trains in TF's TPU mixed precision
(``xtpu.keras.mixed_precision.set_global_policy("mixed_bfloat16")``):
float32 variables read as bfloat16 inside the step, so the embedding, the
matmuls and the residual stream are bfloat16 (float32 accumulation); as
Keras and BERT's TPU code do, layer norm, the attention softmax and the
loss compute in float32 (a bfloat16 softmax over a long row loses too
many bits); layer norm reads its gain and bias in float32 (Keras'
``LayerNormalization`` does not autocast its variables) and the tied
output layer is a float32 layer (TF's mixed-precision guide: the last
layer in float32, ``dtype='float32'``; Keras casts its input to float32
and reads its kernel in float32), so the logits and their gradient are
not rounded to bfloat16; the optimizer's slots and updates stay float32.

The default run is 1000 steps (``DEFAULT_STEPS``), long enough that the
held-out perplexity has levelled off (about 5.0, unigram 25.5; it falls
0-5% in the last hundred steps), and there mixed_bfloat16's perplexity is
within 1.6% of float32's on seeds 0-4.  At 300 steps it still falls
16-20% a hundred steps, and a perturbation as small as one bfloat16
rounding of the initial weights moves it by up to 12% (docs/dtypes.md).
The default run takes 1-2 min on this 2-core shared machine.

Run: ``python examples/train_transformer.py [--steps 1000] [--replicas 8] [--precision mixed_bfloat16]``;
``XTPU_EXAMPLE_STEPS=N`` overrides the default number of steps (the test
suite runs a short form).  It exits with status 1 if the final held-out
perplexity is not below ``--max-ratio`` times the unigram baseline.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

import xtpu

# The default number of training steps: where mixed_bfloat16's held-out
# perplexity is within 5% of float32's on every measured seed (docs/dtypes.md).
DEFAULT_STEPS = 1000

# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------


def load_text() -> str:
    """Python's language reference topics (``pydoc_data.topics``), in a fixed order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


class Data:
    """The text as int32 character ids; the first 90% trains, the rest is held out."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}
        ids = np.fromiter((self.index[c] for c in text), dtype=np.int32, count=len(text))
        n = int(0.9 * len(ids))
        self.train, self.held_out = ids[:n], ids[n:]

    @property
    def vocab(self) -> int:
        return len(self.chars)

    def batch(self, rng: np.random.Generator, batch: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
        """``batch`` random windows of the training text: inputs and next characters, int32 [batch, seq]."""
        starts = rng.integers(0, len(self.train) - seq - 1, size=batch)
        rows = np.stack([self.train[s : s + seq + 1] for s in starts])
        return rows[:, :-1], rows[:, 1:]

    def held_out_batches(self, batch: int, seq: int, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """``count`` batches of consecutive held-out windows (the same each time)."""
        out, pos = [], 0
        for _ in range(count):
            rows = []
            for _ in range(batch):
                rows.append(self.held_out[pos : pos + seq + 1])
                pos += seq
            rows = np.stack(rows)
            out.append((rows[:, :-1], rows[:, 1:]))
        return out

    def unigram_perplexity(self) -> float:
        """exp of the held-out cross-entropy of the training characters'
        frequencies (add-one smoothed): what a model without context gets."""
        counts = np.bincount(self.train, minlength=self.vocab).astype(np.float64) + 1.0
        logp = np.log(counts / counts.sum())
        return float(np.exp(-logp[self.held_out].mean()))


# --------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------

NAMES = ("wte", "wpe", "ln1_g", "ln1_b", "w_qkv", "b_qkv", "w_o", "b_o", "ln2_g", "ln2_b", "w_1", "b_1", "w_2", "b_2")


def init_params(vocab: int, seq: int, dim: int, layers: int, seed: int) -> dict[str, np.ndarray]:
    """GPT-2's initialisation (normal, std 0.02; the residual projections
    scaled by ``1 / sqrt(2 * layers)``), float32.  Names: ``wte`` [vocab,
    dim], ``wpe`` [seq, dim], per layer ``l{i}.<name>``, then ``lnf_g``,
    ``lnf_b``."""
    rng = np.random.default_rng(seed)

    def normal(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    p = {"wte": normal(vocab, dim), "wpe": normal(seq, dim, std=0.01)}
    proj = 0.02 / math.sqrt(2 * layers)
    for i in range(layers):
        p[f"l{i}.ln1_g"] = np.ones(dim, np.float32)
        p[f"l{i}.ln1_b"] = np.zeros(dim, np.float32)
        p[f"l{i}.w_qkv"] = normal(dim, 3 * dim)
        p[f"l{i}.b_qkv"] = np.zeros(3 * dim, np.float32)
        p[f"l{i}.w_o"] = normal(dim, dim, std=proj)
        p[f"l{i}.b_o"] = np.zeros(dim, np.float32)
        p[f"l{i}.ln2_g"] = np.ones(dim, np.float32)
        p[f"l{i}.ln2_b"] = np.zeros(dim, np.float32)
        p[f"l{i}.w_1"] = normal(dim, 4 * dim)
        p[f"l{i}.b_1"] = np.zeros(4 * dim, np.float32)
        p[f"l{i}.w_2"] = normal(4 * dim, dim, std=proj)
        p[f"l{i}.b_2"] = np.zeros(dim, np.float32)
    p["lnf_g"] = np.ones(dim, np.float32)
    p["lnf_b"] = np.zeros(dim, np.float32)
    return p


def float32(v):
    """``v`` in float32; a variable read as float32 (``read_value()``), as a
    Keras layer that does not autocast reads it (``LayerNormalization``, a
    layer made with ``dtype='float32'``), not its bfloat16 rounding."""
    return v.read_value() if isinstance(v, xtpu.Variable) else xtpu.cast(v, xtpu.float32)


def layer_norm(x, g, b, eps=1e-5):
    """``(x - mean) / sqrt(var + eps) * g + b`` over the last axis, in
    float32 with ``g`` and ``b`` read in float32 (Keras' LayerNormalization
    under a mixed policy), the result in ``x``'s dtype."""
    dtype = x.dtype
    x32, g32, b32 = (float32(v) for v in (x, g, b))
    mean, var = xtpu.nn.moments(x32, axes=[-1], keepdims=True)
    return xtpu.cast(xtpu.nn.batch_normalization(x32, mean, var, b32, g32, eps), dtype)


def attention(x, p, prefix: str, heads: int):
    """Causal multi-head self-attention: x [B, T, D] -> [B, T, D]."""
    b, t, d = x.shape
    dh = d // heads
    qkv = xtpu.matmul(x, p[prefix + "w_qkv"]) + p[prefix + "b_qkv"]  # [B, T, 3D]
    q, k, v = xtpu.split(qkv, 3, axis=-1)

    def heads_first(z):  # [B, T, D] -> [B, H, T, Dh]
        return xtpu.transpose(xtpu.reshape(z, [b, t, heads, dh]), [0, 2, 1, 3])

    q, k, v = heads_first(q), heads_first(k), heads_first(v)
    scores = xtpu.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(dh))  # [B, H, T, T]
    causal = xtpu.cast(xtpu.linalg.band_part(xtpu.ones([t, t]), -1, 0), xtpu.bool_)
    scores = xtpu.where(causal, xtpu.cast(scores, xtpu.float32), -1e9)  # the softmax in float32
    y = xtpu.matmul(xtpu.cast(xtpu.nn.softmax(scores), v.dtype), v)  # [B, H, T, Dh]
    y = xtpu.reshape(xtpu.transpose(y, [0, 2, 1, 3]), [b, t, d])
    return xtpu.matmul(y, p[prefix + "w_o"]) + p[prefix + "b_o"]


def mlp(x, p, prefix: str):
    h = xtpu.nn.gelu(xtpu.matmul(x, p[prefix + "w_1"]) + p[prefix + "b_1"])
    return xtpu.matmul(h, p[prefix + "w_2"]) + p[prefix + "b_2"]


def logits_fn(p, tokens, layers: int, heads: int):
    """Next-character logits [B, T, vocab] for int32 tokens [B, T]."""
    t = tokens.shape[1]
    x = xtpu.gather(p["wte"], tokens) + p["wpe"][:t]
    for i in range(layers):
        pre = f"l{i}."
        x = x + attention(layer_norm(x, p[pre + "ln1_g"], p[pre + "ln1_b"]), p, pre, heads)
        x = x + mlp(layer_norm(x, p[pre + "ln2_g"], p[pre + "ln2_b"]), p, pre)
    x = layer_norm(x, p["lnf_g"], p["lnf_b"])
    # The tied output layer, a float32 layer (TF's guide): float32 input, the embedding read in float32.
    return xtpu.matmul(float32(x), float32(p["wte"]), transpose_b=True)


def per_token_loss(p, tokens, targets, layers: int, heads: int):
    """The cross-entropy of each next character, float32 [B, T]."""
    logits = logits_fn(p, tokens, layers, heads)
    return xtpu.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)


def loss_fn(p, tokens, targets, layers: int, heads: int, global_batch_size=None):
    """The mean loss over the global batch's tokens (this replica's share of it:
    the sum of its per-token losses over ``global_batch_size * T``)."""
    losses = xtpu.reshape(per_token_loss(p, tokens, targets, layers, heads), [-1])
    return xtpu.nn.compute_average_loss(losses, global_batch_size=global_batch_size)


# --------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------


def train(args) -> int:
    data = Data(load_text())
    R, T = args.replicas, args.seq
    if args.batch % R:
        raise SystemExit(f"--batch {args.batch} must be a multiple of --replicas {R}")
    per_replica = args.batch // R
    params = init_params(data.vocab, T, args.dim, args.layers, args.seed)
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=R))
    with strategy.scope():
        weights = {k: xtpu.Variable(v, name=k) for k, v in params.items()}
        optimizer = xtpu.optimizers.Adam(learning_rate=args.lr)
    names = list(weights)

    def step_fn(tokens, targets):
        with xtpu.GradientTape() as tape:
            loss = loss_fn(weights, tokens, targets, args.layers, args.heads)
        grads = tape.gradient(loss, [weights[k] for k in names])
        optimizer.apply_gradients(zip(grads, [weights[k] for k in names]))
        return xtpu.get_replica_context().all_reduce(xtpu.ReduceOp.SUM, loss)

    def eval_fn(tokens, targets):
        losses = per_token_loss(weights, tokens, targets, args.layers, args.heads)
        return xtpu.get_replica_context().all_reduce(xtpu.ReduceOp.SUM, xtpu.reduce_sum(losses))

    def shards(*arrays):
        return [xtpu.PerReplica([a[r * per_replica : (r + 1) * per_replica] for r in range(R)]) for a in arrays]

    held_out = data.held_out_batches(args.batch, T, args.eval_batches)

    def perplexity() -> float:
        total = 0.0
        for x, y in held_out:
            total += float(strategy.experimental_local_results(strategy.run(eval_fn, args=shards(x, y)))[0])
        return math.exp(total / (len(held_out) * args.batch * T))

    baseline = data.unigram_perplexity()
    print(
        f"pydoc_data.topics: {len(data.train) + len(data.held_out)} characters, vocabulary {data.vocab}; "
        f"model: {args.layers} layers, {args.heads} heads, dim {args.dim}, context {T}, "
        f"{sum(v.size for v in params.values())} parameters; {R} replicas, global batch {args.batch}, "
        f"precision {args.precision}"
    )
    print(f"unigram baseline: held-out perplexity {baseline:.2f}")
    rng = np.random.default_rng(args.seed + 1)
    start = time.perf_counter()
    ppl = float("nan")
    for step in range(1, args.steps + 1):
        x, y = data.batch(rng, args.batch, T)
        loss = float(strategy.experimental_local_results(strategy.run(step_fn, args=shards(x, y)))[0])
        if step == 1:
            print(f"step 1: loss {loss:.3f} (trace and compile {time.perf_counter() - start:.1f} s)")
        if step % args.eval_every == 0 or step == args.steps:
            ppl = perplexity()
            print(
                f"step {step}: loss {loss:.3f}, held-out perplexity {ppl:.2f} "
                f"(unigram {baseline:.2f}), {time.perf_counter() - start:.1f} s"
            )
    print(f"sample: {sample(data, {k: w.numpy() for k, w in weights.items()}, args, args.sample)!r}")
    ok = ppl < args.max_ratio * baseline
    print(
        f"held-out perplexity {ppl:.2f} vs unigram {baseline:.2f} (ratio {ppl / baseline:.2f}, "
        f"required < {args.max_ratio}): {'OK' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


def sample(data: Data, params: dict[str, np.ndarray], args, length: int = 100, prompt: str = "The ") -> str:
    """``length`` characters after ``prompt``, each drawn from the model's
    next-character distribution (temperature 0.8), through one compiled
    one-replica forward pass of a full context window."""
    rng = np.random.default_rng(args.seed + 2)
    ids = [data.index[c] for c in prompt]
    names = sorted(params)

    def forward(tokens, *values):
        return logits_fn(dict(zip(names, values)), tokens, args.layers, args.heads)

    T = args.seq
    for _ in range(length):
        window = ids[-T:]
        n = len(window)
        tokens = np.zeros((1, T), np.int32)
        tokens[0, :n] = window
        (logits,) = xtpu.replicate(forward, [[tokens, *[params[k] for k in names]]])[0]
        z = logits[0, n - 1].astype(np.float64) / 0.8
        prob = np.exp(z - z.max())
        ids.append(int(rng.choice(len(prob), p=prob / prob.sum())))
    return "".join(data.chars[i] for i in ids)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=int(os.environ.get("XTPU_EXAMPLE_STEPS", DEFAULT_STEPS)))
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32, help="global batch (sequences)")
    ap.add_argument("--seq", type=int, default=64, help="context length")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample", type=int, default=100, help="characters to sample at the end")
    ap.add_argument("--max-ratio", type=float, default=0.5, help="fail unless perplexity < ratio * unigram")
    ap.add_argument(
        "--precision",
        choices=("float32", "mixed_bfloat16"),
        default="float32",
        help="mixed_bfloat16: TF's TPU mixed precision (float32 weights, bfloat16 compute)",
    )
    args = ap.parse_args(argv)
    previous = xtpu.keras.mixed_precision.global_policy()
    xtpu.keras.mixed_precision.set_global_policy(args.precision)
    try:
        return train(args)
    finally:
        xtpu.keras.mixed_precision.set_global_policy(previous)


if __name__ == "__main__":
    sys.exit(main())
