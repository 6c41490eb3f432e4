"""examples/train_transformer.py: one training step of its model equals the
same model written in JAX (examples/transformer_jax.py; same weights, same batch): the loss and every
gradient within 1e-5 relative, computed data-parallel over 2 replicas (the
gradients summed across replicas with ``cross_replica_sum``) and eagerly;
and the example itself runs in a short form and learns."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))

import train_transformer as tt  # noqa: E402

import xtpu  # noqa: E402

jax = pytest.importorskip("jax")
jnp = jax.numpy
import transformer_jax  # noqa: E402

VOCAB, SEQ, DIM, HEADS, LAYERS, BATCH = 13, 8, 16, 2, 2, 4


def jax_loss(p, tokens, targets):
    return transformer_jax.loss_fn(p, tokens, targets, LAYERS, HEADS)


def setup():
    rng = np.random.default_rng(5)
    params = tt.init_params(VOCAB, SEQ, DIM, LAYERS, seed=1)
    # Layer-norm gains and all biases away from 1 / 0, so every gradient is generic.
    params = {k: (v + rng.standard_normal(v.shape).astype(np.float32) * 0.1) for k, v in params.items()}
    params = {k: (v * 10 if k in ("wte", "wpe") else v) for k, v in params.items()}
    tokens = rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32)
    targets = rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32)
    return params, tokens, targets


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64)) / np.linalg.norm(b))


def test_one_step_equals_jax_over_two_replicas_and_eagerly():
    params, tokens, targets = setup()
    names = sorted(params)
    # One jitted computation: JAX's op-by-op mode compiled ~150 single-op XLA
    # programs here (8 s of the suite); jit compiles the same math once.
    want_loss, want_grads = jax.jit(jax.value_and_grad(jax_loss))(
        {k: jnp.asarray(v) for k, v in params.items()}, tokens, targets
    )
    want_grads = {k: np.asarray(v) for k, v in want_grads.items()}
    assert float(want_loss) > 0

    def step(tok, tgt, *values):
        p = dict(zip(names, values))
        with xtpu.GradientTape() as tape:
            for v in values:
                tape.watch(v)
            loss = tt.loss_fn(p, tok, tgt, LAYERS, HEADS, global_batch_size=BATCH * SEQ)
        grads = tape.gradient(loss, list(values))
        return [xtpu.cross_replica_sum(loss)] + [xtpu.cross_replica_sum(g) for g in grads]

    half = BATCH // 2
    per_replica = [
        [tokens[r * half : (r + 1) * half], targets[r * half : (r + 1) * half], *[params[k] for k in names]]
        for r in range(2)
    ]
    outs = xtpu.replicate(step, per_replica)
    for r in range(2):
        loss, *grads = outs[r]
        assert rel(loss, want_loss) <= 1e-5, (loss, want_loss)
        for k, g in zip(names, grads):
            assert g.dtype == np.float32 and g.shape == params[k].shape
            assert rel(g, want_grads[k]) <= 1e-5, f"replica {r}, gradient of {k}: {rel(g, want_grads[k])}"

    # Eagerly, the whole batch on one replica.
    values = [xtpu.constant(params[k]) for k in names]
    with xtpu.GradientTape() as tape:
        for v in values:
            tape.watch(v)
        loss = tt.loss_fn(dict(zip(names, values)), tokens, targets, LAYERS, HEADS)
    grads = tape.gradient(loss, values)
    assert rel(loss, want_loss) <= 1e-5
    for k, g in zip(names, grads):
        assert rel(g, want_grads[k]) <= 1e-5, f"eager gradient of {k}: {rel(g, want_grads[k])}"


def test_example_runs_short_and_learns_in_both_precisions(capsys):
    """The short form learns (held-out perplexity falls below the unigram
    baseline) in float32 and in mixed_bfloat16, and mixed_bfloat16's
    held-out perplexity is within 5% of float32's (issue 28); main restores
    the global policy."""
    final = {}
    for precision in ("float32", "mixed_bfloat16"):
        rc = tt.main(
            ["--steps", "12", "--eval-every", "6", "--eval-batches", "2", "--sample", "8", "--max-ratio", "1.0"]
            + ["--precision", precision]
        )
        out = capsys.readouterr().out
        assert rc == 0, out
        assert f"precision {precision}" in out
        assert "unigram baseline: held-out perplexity" in out and "sample: 'The " in out
        ppl = [
            float(line.split("held-out perplexity ")[1].split()[0])
            for line in out.splitlines()
            if line.startswith("step ") and "held-out" in line
        ]
        baseline = float(out.split("unigram baseline: held-out perplexity ")[1].split()[0])
        assert len(ppl) == 2 and ppl[-1] < ppl[0] and ppl[-1] < baseline, (precision, ppl, baseline)
        final[precision] = ppl[-1]
        assert xtpu.keras.mixed_precision.global_policy().name == "float32"
    assert abs(final["mixed_bfloat16"] / final["float32"] - 1) <= 0.05, final


def test_mixed_bfloat16_reads_layer_norm_and_output_layer_in_float32():
    """Under mixed_bfloat16 the step reads the layer-norm gains and biases
    and the tied output layer's embedding as float32 (Keras'
    LayerNormalization does not autocast its variables; TF's guide: the
    last layer in float32), the other weights as bfloat16: in the traced IR
    the only [DIM] variables converted to bfloat16 are the two bfloat16
    biases of each layer, the embedding table is never converted whole
    (its gathered rows are), and the logits are a float32 x float32
    dot_general with it; loss and gradients equal the float32 JAX model's
    to bfloat16's precision."""
    params, tokens, targets = setup()
    names = sorted(params)
    previous = xtpu.keras.mixed_precision.global_policy()
    xtpu.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=1))
        with strategy.scope():
            w = {k: xtpu.Variable(v, name=k) for k, v in params.items()}
    finally:
        xtpu.keras.mixed_precision.set_global_policy(previous)

    def step(tok, tgt):
        with xtpu.GradientTape() as tape:
            loss = tt.loss_fn(w, tok, tgt, LAYERS, HEADS, global_batch_size=BATCH * SEQ)
        return [loss] + tape.gradient(loss, [w[k] for k in names])

    @xtpu.function
    def run(tok, tgt):
        return strategy.run(step, args=(tok, tgt))

    text = run.experimental_get_compiler_ir(tokens, targets)("hlo")
    reads = [line.split(" : ")[-1] for line in text.splitlines() if re.search(r"hlo\.convert %input\d+ :", line)]
    assert reads.count(f"(tensor<{DIM}xf32>) -> tensor<{DIM}xbf16>") == 2 * LAYERS, reads
    assert f"(tensor<{VOCAB}x{DIM}xf32>) -> tensor<{VOCAB}x{DIM}xbf16>" not in reads
    logits = f"(tensor<{BATCH}x{SEQ}x{DIM}xf32>, tensor<{VOCAB}x{DIM}xf32>) -> tensor<{BATCH}x{SEQ}x{VOCAB}xf32>"
    assert any("hlo.dot_general" in line and logits in line for line in text.splitlines()), text
    got = [np.asarray(v) for v in strategy.experimental_local_results(run(tokens, targets))[0]]
    # One jitted computation: JAX's op-by-op mode compiled ~150 single-op XLA
    # programs here (8 s of the suite); jit compiles the same math once.
    want_loss, want_grads = jax.jit(jax.value_and_grad(jax_loss))(
        {k: jnp.asarray(v) for k, v in params.items()}, tokens, targets
    )
    assert rel(got[0], want_loss) <= 1e-2
    for k, g in zip(names, got[1:]):
        assert g.dtype == np.float32 and rel(g, want_grads[k]) <= 0.05, (k, rel(g, want_grads[k]))
