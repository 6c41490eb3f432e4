"""How much of the transformer's float32 / mixed_bfloat16 perplexity gap is
bfloat16 and how much is the run (issue 28):
``python benchmarks/transformer_precision.py [--seeds 0 1 2 3 4] [--steps 1000] [--perturbations 0]``.

Two measurements of ``examples/train_transformer.py`` (its model, data and
defaults):

* **the step's gradient error** at fixed weights (seed 0's initial weights,
  and the weights float32 training reaches after ``--steps``): the relative
  error of the mixed_bfloat16 gradient (all 30 weights, summed over the 8
  replicas) against float32's, beside the minibatch noise (how far float32's
  gradient of a second batch is from the first's), and the held-out
  perplexity of those weights through a float32 and a mixed_bfloat16
  forward pass;
* **each rounding's share** of that error: the example's model in float32
  with mixed_bfloat16's roundings to bfloat16 made explicit, each site
  (the weights' autocast reads, the embedding rows, the residual stream,
  layer norm's output, q/k/v, the attention logits, the softmax output,
  the attention and MLP projections, GELU's steps) rounded alone, with and
  without the rounding of its gradient;
* **the trained perplexity**, per seed: float32; float32 started from the
  bfloat16 rounding of its initial weights (every step float32: what one
  rounding of the start alone does to the end); mixed_bfloat16; and the
  held-out perplexity of float32 and mixed_bfloat16 every 100 steps, with
  mixed_bfloat16's change against float32 (the learning curves: the gap
  closes as the figure levels off).  With ``--perturbations K``, float32
  and mixed_bfloat16 again from K random perturbations of the initial
  weights of bfloat16's size (each weight times ``1 +- 2**-9``), for the
  spread of the figure.

``--steps`` defaults to the example's default (``DEFAULT_STEPS``, 1000);
each run of it takes 1-2 min on this machine (2 cores, shared), the whole
benchmark over 5 seeds about half an hour.  ``--steps 300`` gives the
figures of the example's former default.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import math
import os
import re
import statistics
import sys
import time

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import train_transformer as tt  # noqa: E402

import xtpu  # noqa: E402

R, BATCH, SEQ, DIM, LAYERS, HEADS = 8, 32, 64, 64, 2, 4


def perturbed(params: dict[str, np.ndarray], how: str) -> dict[str, np.ndarray]:
    """``how``: "" (unchanged), "bf16" (each weight rounded to bfloat16) or
    "k<N>" (each weight times 1 +- 2**-9, the signs drawn with seed N)."""
    if how == "bf16":
        return {k: v.astype(ml_dtypes.bfloat16).astype(np.float32) for k, v in params.items()}
    if how.startswith("k"):
        rng = np.random.default_rng(int(how[1:]))
        return {k: (v * (1 + rng.choice([-1.0, 1.0], v.shape) * 2.0**-9)).astype(np.float32) for k, v in params.items()}
    return params


def train(seed: int, steps: int, precision: str, how: str = "") -> tuple[float, dict[str, np.ndarray], list[float]]:
    """The example's run; returns its final held-out perplexity, its
    weights and its held-out perplexity every 100 steps."""
    init, sample, kept = tt.init_params, tt.sample, {}
    tt.init_params = lambda *a, **k: perturbed(init(*a, **k), how)
    tt.sample = lambda data, params, *a, **k: kept.update(params) or ""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            tt.main(
                ["--seed", str(seed), "--steps", str(steps), "--precision", precision, "--sample", "0"]
                + ["--eval-every", "100"]
            )
    finally:
        tt.init_params, tt.sample = init, sample
    text = out.getvalue()
    curve = [float(v) for v in re.findall(r"^step \d+: .*held-out perplexity ([0-9.]+)", text, re.M)]
    return float(re.findall(r"^held-out perplexity ([0-9.]+)", text, re.M)[-1]), kept, curve


def _strategy_variables(params, precision):
    xtpu.keras.mixed_precision.set_global_policy(precision)
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=R))
    with strategy.scope():
        weights = {k: xtpu.Variable(v, name=k) for k, v in params.items()}
    return strategy, weights


def _shards(*arrays):
    n = BATCH // R
    return [xtpu.PerReplica([a[r * n : (r + 1) * n] for r in range(R)]) for a in arrays]


def gradients(params, precision: str, batch, logits=None) -> np.ndarray:
    """The loss's gradients (summed over the replicas, flattened) at
    ``params``; ``logits(p, tokens)`` in the place of the example's."""
    strategy, weights = _strategy_variables(params, precision)
    names = sorted(weights)

    def step(tokens, targets):
        with xtpu.GradientTape() as tape:
            if logits is None:
                loss = tt.loss_fn(weights, tokens, targets, LAYERS, HEADS)
            else:
                per_token = xtpu.nn.sparse_softmax_cross_entropy_with_logits(targets, logits(weights, tokens))
                loss = xtpu.nn.compute_average_loss(xtpu.reshape(per_token, [-1]))
        grads = tape.gradient(loss, [weights[k] for k in names])
        return [xtpu.get_replica_context().all_reduce(xtpu.ReduceOp.SUM, g) for g in grads]

    try:
        out = strategy.experimental_local_results(strategy.run(step, args=_shards(*batch)))[0]
    finally:
        xtpu.keras.mixed_precision.set_global_policy("float32")
    return np.concatenate([np.asarray(g, np.float64).ravel() for g in out])


def held_out_perplexity(params, precision: str, data) -> float:
    strategy, weights = _strategy_variables(params, precision)

    def eval_fn(tokens, targets):
        losses = tt.per_token_loss(weights, tokens, targets, LAYERS, HEADS)
        return xtpu.get_replica_context().all_reduce(xtpu.ReduceOp.SUM, xtpu.reduce_sum(losses))

    batches = data.held_out_batches(BATCH, SEQ, 8)
    try:
        total = sum(
            float(strategy.experimental_local_results(strategy.run(eval_fn, args=_shards(x, y)))[0]) for x, y in batches
        )
    finally:
        xtpu.keras.mixed_precision.set_global_policy("float32")
    return math.exp(total / (len(batches) * BATCH * SEQ))


SITES = (
    "weights",
    "embedding",
    "residual",
    "layer norm",
    "qkv",
    "logits",
    "probs",
    "attention",
    "mlp1",
    "gelu",
    "mlp2",
)


def rounded_logits(p, tokens, sites: set[str], gradients_too: bool):
    """The example's ``logits_fn`` in float32, with the bfloat16 roundings
    mixed_bfloat16 makes at ``sites`` made explicit (float32 -> bfloat16 ->
    float32; their gradients rounded too if ``gradients_too``)."""

    def rounded(x):
        return xtpu.cast(xtpu.cast(x, xtpu.bfloat16), xtpu.float32)

    @xtpu.custom_gradient
    def forward_only(x):
        return rounded(x), lambda dy: dy

    def q(site, x):
        return x if site not in sites else rounded(x) if gradients_too else forward_only(x)

    def dense(x, pre, name, site):  # x @ w_<name> + b_<name>: the product and the sum rounded
        return q(site, q(site, xtpu.matmul(x, q("weights", p[pre + "w_" + name]))) + q("weights", p[pre + "b_" + name]))

    def norm(x, name):
        mean, var = xtpu.nn.moments(x, axes=[-1], keepdims=True)
        return q("layer norm", xtpu.nn.batch_normalization(x, mean, var, p[name + "_b"], p[name + "_g"], 1e-5))

    b, t = tokens.shape
    dh = DIM // HEADS
    x = q("residual", q("embedding", xtpu.gather(p["wte"], tokens)) + q("weights", p["wpe"])[:t])
    causal = xtpu.cast(xtpu.linalg.band_part(xtpu.ones([t, t]), -1, 0), xtpu.bool_)
    for i in range(LAYERS):
        pre = f"l{i}."
        qkv = dense(norm(x, pre + "ln1"), pre, "qkv", "qkv")
        heads = [xtpu.transpose(xtpu.reshape(z, [b, t, HEADS, dh]), [0, 2, 1, 3]) for z in xtpu.split(qkv, 3, axis=-1)]
        logits = q("logits", q("logits", xtpu.matmul(heads[0], heads[1], transpose_b=True)) * (1.0 / math.sqrt(dh)))
        probs = q("probs", xtpu.nn.softmax(xtpu.where(causal, logits, -1e9)))
        y = xtpu.reshape(xtpu.transpose(q("attention", xtpu.matmul(probs, heads[2])), [0, 2, 1, 3]), [b, t, DIM])
        x = q("residual", x + dense(y, pre, "o", "attention"))
        h = dense(norm(x, pre + "ln2"), pre, "1", "mlp1")
        g = functools.partial(q, "gelu")
        h = g(g(0.5 * h) * g(1.0 + g(xtpu.math.erf(g(h / 1.4142135623730951)))))
        x = q("residual", x + dense(h, pre, "2", "mlp2"))
    return xtpu.matmul(tt.layer_norm(x, p["lnf_g"], p["lnf_b"]), p["wte"], transpose_b=True)


def gradient_error(params, data, label: str) -> None:
    rng = np.random.default_rng(7)
    b1, b2 = data.batch(rng, BATCH, SEQ), data.batch(rng, BATCH, SEQ)
    g32, gmixed, g32_other = (
        gradients(params, "float32", b1),
        gradients(params, "mixed_bfloat16", b1),
        gradients(params, "float32", b2),
    )
    norm = np.linalg.norm(g32)
    p32, pmixed = held_out_perplexity(params, "float32", data), held_out_perplexity(params, "mixed_bfloat16", data)
    print(
        f"{label}: |g_mixed - g_f32| / |g_f32| = {np.linalg.norm(gmixed - g32) / norm:.4f}, "
        f"minibatch noise |g_f32(b2) - g_f32(b1)| / |g_f32(b1)| = {np.linalg.norm(g32_other - g32) / norm:.3f}; "
        f"held-out perplexity, float32 forward {p32:.3f}, mixed_bfloat16 forward {pmixed:.3f} "
        f"({100 * (pmixed / p32 - 1):+.2f}%)"
    )
    shares = []
    for site in (*SITES, "all"):
        sites = set(SITES) if site == "all" else {site}
        errors = [
            np.linalg.norm(gradients(params, "float32", b1, lambda p, t: rounded_logits(p, t, sites, too)) - g32) / norm
            for too in (True, False)
        ]
        shares.append(f"{site} {errors[0]:.4f} ({errors[1]:.4f})")
    print("  rounded alone (its gradient not rounded): " + ", ".join(shares))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=tt.DEFAULT_STEPS)
    ap.add_argument("--perturbations", type=int, default=0, help="runs per seed from perturbed initial weights")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}; {args.steps} steps")
    data = tt.Data(tt.load_text())
    ppl0, trained, curve0 = train(0, args.steps, "float32")
    gradient_error(tt.init_params(data.vocab, SEQ, DIM, LAYERS, 0), data, "seed 0, initial weights")
    gradient_error(trained, data, f"seed 0, float32's weights after {args.steps} steps")
    configs = [("float32", "float32", ""), ("float32 from bf16-rounded start", "float32", "bf16")]
    configs.append(("mixed_bfloat16", "mixed_bfloat16", ""))
    print("held-out perplexity after training (change against float32 of the same seed):")
    start = time.perf_counter()
    columns: dict[str, list[float]] = {label: [] for label, _, _ in configs}
    worst: dict[int, float] = {}  # step -> the largest |mixed / float32 - 1| over the seeds
    for seed in args.seeds:
        curves = {}
        for label, precision, how in configs:
            first = seed == 0 and how == "" and precision == "float32"
            ppl, _, curves[label] = (ppl0, None, curve0) if first else train(seed, args.steps, precision, how)
            columns[label].append(ppl)
        base = columns["float32"][-1]
        gaps = [m / f - 1 for f, m in zip(curves["float32"], curves["mixed_bfloat16"])]
        for i, gap in enumerate(gaps):
            step = min(100 * (i + 1), args.steps)
            worst[step] = max(worst.get(step, 0.0), abs(gap))
        print(
            f"seed {seed}, every 100 steps, float32 / mixed_bfloat16: "
            + ", ".join(
                f"{f:.2f} / {m:.2f} ({100 * g:+.1f}%)"
                for f, m, g in zip(curves["float32"], curves["mixed_bfloat16"], gaps)
            ),
            flush=True,
        )
        print(
            f"seed {seed}: float32 {base:.2f}; "
            + "; ".join(
                f"{label} {v[-1]:.2f} ({100 * (v[-1] / base - 1):+.1f}%)"
                for label, v in columns.items()
                if v is not columns["float32"]
            ),
            flush=True,
        )
        for label, precision, _ in (configs[0], configs[2]) if args.perturbations else ():
            runs = [train(seed, args.steps, precision, f"k{k}")[0] for k in range(1, args.perturbations + 1)]
            print(
                f"  {label}, {len(runs)} perturbed starts: {' '.join(f'{v:.2f}' for v in runs)}; "
                f"mean {statistics.mean(runs):.2f}, range {min(runs):.2f}-{max(runs):.2f}",
                flush=True,
            )
    means = {label: statistics.mean(v) for label, v in columns.items()}
    print(
        f"mean over seeds {args.seeds}: float32 {means['float32']:.2f}; "
        + "; ".join(
            f"{label} {m:.2f} ({100 * (m / means['float32'] - 1):+.1f}%)"
            for label, m in means.items()
            if label != "float32"
        )
    )
    print(
        "largest |mixed_bfloat16 / float32 - 1| over the seeds, by step: "
        + ", ".join(f"{step} {100 * g:.1f}%" for step, g in sorted(worst.items()))
    )
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
