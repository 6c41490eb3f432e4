"""The model of ``train_transformer.py`` written with ``jax.numpy``: the
reference of ``test/python/test_transformer.py`` (one step, same weights and
batch) and the JAX side of ``benchmarks/transformer.py``."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def layer_norm(x, g, b, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * g + b


def logits_fn(p, tokens, layers: int, heads: int):
    """Next-character logits [B, T, vocab] for int32 tokens [B, T]."""
    b, t = tokens.shape
    dim = p["wte"].shape[1]
    dh = dim // heads
    x = p["wte"][tokens] + p["wpe"][:t]
    mask = jnp.tril(jnp.ones((t, t), bool))
    for i in range(layers):
        pre = f"l{i}."
        h = layer_norm(x, p[pre + "ln1_g"], p[pre + "ln1_b"])
        q, k, v = jnp.split(h @ p[pre + "w_qkv"] + p[pre + "b_qkv"], 3, axis=-1)
        q, k, v = (z.reshape(b, t, heads, dh).transpose(0, 2, 1, 3) for z in (q, k, v))
        s = jnp.where(mask, q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh), -1e9)
        y = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, t, dim)
        x = x + y @ p[pre + "w_o"] + p[pre + "b_o"]
        h = layer_norm(x, p[pre + "ln2_g"], p[pre + "ln2_b"])
        x = x + jax.nn.gelu(h @ p[pre + "w_1"] + p[pre + "b_1"], approximate=False) @ p[pre + "w_2"] + p[pre + "b_2"]
    x = layer_norm(x, p["lnf_g"], p["lnf_b"])
    return x @ p["wte"].T


def loss_fn(p, tokens, targets, layers: int, heads: int, global_tokens: int | None = None):
    """The summed next-character cross-entropy over ``global_tokens`` (the
    batch's own token count when None)."""
    logp = jax.nn.log_softmax(logits_fn(p, tokens, layers, heads), axis=-1)
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)
    return nll.sum() / (global_tokens or nll.size)
