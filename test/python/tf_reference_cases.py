"""The cases of ``test_tf_reference_ops.py``, written once for TensorFlow
and xtpu: ``fn(t, *inputs)`` takes the module (``tf`` or ``xtpu``) as ``t``
and calls TF 2's API names on it.  ``test/data/make_tf_reference.py`` runs
each with TF 2.21 and stores inputs, outputs and gradients in
``test/data/tf_reference_ops.npz``; the suite reads that file and needs no
TensorFlow.

This module imports numpy only (TF's venv imports it too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

F32, F64, I32, I64 = np.float32, np.float64, np.int32, np.int64


@dataclass
class Case:
    name: str
    fn: Callable
    inputs: list
    grad: bool = True  # compare the gradient of sum(w * outputs) for float inputs
    rtol: float = 2e-6
    atol: float = 1e-6


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def normal(seed, *shape, dtype=F32):
    return _rng(seed).standard_normal(shape).astype(dtype)


def ints(seed, *shape, lo=-5, hi=6, dtype=I32):
    return _rng(seed).integers(lo, hi, size=shape).astype(dtype)


HALVES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -0.0, 0.0, 1.2, -1.7, 2.0], F32)
"""Ties for round (half to even), signed zeros for sign."""
TIED = np.array([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 2.0, 0.5], [0.0, -4.0, 0.0, 0.0]], F32)
"""Tied maxima and minima in rows and columns."""
KINKS = np.array([-3.0, -1.0, 0.0, 0.5, 3.0, 6.0, 7.5, -0.0], F32)
"""The kinks of relu6, leaky_relu and softplus."""


def _svd_invariants(t, x):
    s, u, v = t.linalg.svd(x)
    return s, t.math.abs(u), t.math.abs(v), t.matmul(u * t.expand_dims(s, -2), v, transpose_b=True)


CASES = [
    # ---- elementwise math ---------------------------------------------
    Case("sign", lambda t, x: t.math.sign(x), [HALVES]),
    Case("sign_int", lambda t, x: t.sign(x), [ints(1, 7)]),
    Case("floor_ceil", lambda t, x: (t.floor(x), t.math.ceil(x)), [HALVES], grad=False),
    Case("round_half_even", lambda t, x: t.round(x), [HALVES], grad=False),
    Case(
        "round_float64_int", lambda t, x, i: (t.math.round(x), t.round(i)), [HALVES.astype(F64), ints(2, 5)], grad=False
    ),
    Case("rsqrt", lambda t, x: t.math.rsqrt(x), [np.abs(normal(3, 3, 4)) + 0.1]),
    Case("log1p", lambda t, x: t.math.log1p(x), [np.array([1e-8, -0.5, 0.3, 3.0, 100.0], F32)]),
    Case("erf", lambda t, x: t.math.erf(x), [np.linspace(-4, 4, 17).astype(F32)]),
    Case("erf_float64", lambda t, x: t.math.erf(x), [np.linspace(-3, 3, 13)]),
    Case("sin_cos", lambda t, x: (t.sin(x), t.math.cos(x)), [normal(4, 2, 5) * 3]),
    Case(
        "is_finite",
        lambda t, x: t.math.is_finite(x),
        [np.array([1.0, np.inf, -np.inf, np.nan, 0.0], F32)],
        grad=False,
    ),
    Case("reciprocal", lambda t, x: t.math.reciprocal(x), [normal(5, 4) + 3]),
    Case(
        "squared_difference",
        lambda t, x, y: t.math.squared_difference(x, y),
        [normal(6, 3, 4), normal(7, 4)],
    ),
    Case("add_n", lambda t, a, b, c: t.add_n([a, b, c]), [normal(8, 2, 3), normal(9, 2, 3), normal(10, 2, 3)]),
    Case("add_n_one", lambda t, a: t.math.add_n([a]), [normal(11, 3)]),
    # ---- ties of the existing max / min ops -----------------------------
    Case(
        "maximum_minimum_ties",
        lambda t, x, y: (t.math.maximum(x, y), t.math.minimum(x, y)),
        [TIED, TIED[::-1].copy() * 0 + 2.0],
    ),
    Case("maximum_minimum_scalar_ties", lambda t, x: (t.math.maximum(x, 2.0), t.math.minimum(2.0, x)), [TIED]),
    Case(
        "reduce_max_min_ties",
        lambda t, x: (t.reduce_max(x, axis=1), t.reduce_min(x, axis=0), t.reduce_max(x)),
        [TIED],
    ),
    # ---- scans and reductions -------------------------------------------
    Case(
        "cumsum",
        lambda t, x: (
            t.cumsum(x),
            t.math.cumsum(x, axis=1),
            t.math.cumsum(x, axis=1, exclusive=True),
            t.math.cumsum(x, axis=-1, reverse=True),
            t.math.cumsum(x, axis=0, exclusive=True, reverse=True),
        ),
        [normal(12, 5, 7)],
    ),
    Case("cumsum_int", lambda t, x: t.math.cumsum(x, axis=0), [ints(13, 6, 2)], grad=False),
    Case(
        "reduce_logsumexp",
        lambda t, x: (
            t.reduce_logsumexp(x),
            t.math.reduce_logsumexp(x, axis=1),
            t.math.reduce_logsumexp(x, axis=0, keepdims=True),
        ),
        [normal(14, 3, 5) * 10],
    ),
    Case(
        "reduce_logsumexp_inf",
        lambda t, x: t.math.reduce_logsumexp(x, axis=1),
        [np.array([[-np.inf, -np.inf], [1.0, -np.inf]], F32)],
        grad=False,
    ),
    Case(
        "reduce_variance_std",
        lambda t, x: (
            t.math.reduce_variance(x),
            t.math.reduce_variance(x, axis=0),
            t.math.reduce_std(x, axis=1, keepdims=True),
        ),
        [normal(15, 4, 6)],
    ),
    Case(
        "count_nonzero",
        lambda t, x, b: (
            t.math.count_nonzero(x),
            t.math.count_nonzero(x, axis=1),
            t.math.count_nonzero(x, axis=0, keepdims=True, dtype=t.int32),
            t.math.count_nonzero(b, axis=1),
        ),
        [np.array([[0.0, 1.0, 0.0], [2.0, -0.0, 3.0]], F32), np.array([[True, False], [True, True]])],
        grad=False,
    ),
    # ---- norms and clipping ---------------------------------------------
    Case(
        "norm",
        lambda t, x: (
            t.norm(x),
            t.norm(x, axis=1),
            t.norm(x, ord=1, axis=0),
            t.norm(x, ord=np.inf, axis=1, keepdims=True),
            t.linalg.norm(x, ord=3, axis=1),
            t.norm(x, ord="fro", axis=[0, 1]),
            t.norm(x, ord=1, axis=(0, 1)),
            t.norm(x, ord=np.inf, axis=(0, 1)),
        ),
        [normal(16, 3, 4) + 0.5],
    ),
    Case(
        "l2_normalize",
        lambda t, x, z: (
            t.math.l2_normalize(x, axis=1),
            t.nn.l2_normalize(x),
            t.math.l2_normalize(z, axis=0),
        ),
        [normal(17, 3, 4), np.zeros((3,), F32)],
    ),
    Case(
        "clip_by_norm",
        lambda t, x, z: (
            t.clip_by_norm(x, 1.5),
            t.clip_by_norm(x, 0.5, axes=[1]),
            t.clip_by_norm(x, 100.0),
            t.clip_by_norm(z, 1.0),
        ),
        [normal(18, 3, 4), np.zeros((2, 2), F32)],
    ),
    Case(
        "clip_by_global_norm",
        lambda t, a, b: tuple(t.clip_by_global_norm([a, b], 1.0)[0]) + (t.clip_by_global_norm([a, None, b], 1.0)[1],),
        [normal(19, 3, 4), normal(20, 5)],
    ),
    Case(
        "clip_by_global_norm_no_clip",
        lambda t, a, b: tuple(t.clip_by_global_norm([a, b], 100.0)[0]),
        [normal(21, 2), normal(22, 3)],
    ),
    Case(
        "norm_2",
        lambda t, x, y: (
            t.norm(x, ord=2, axis=[0, 1]),
            t.norm(y, ord=2, axis=(2, 0)),
            t.linalg.norm(y, ord=2, axis=[-1, -2], keepdims=True),
            t.norm(x, ord=2, axis=(1, 0), keepdims=True),
        ),
        [normal(57, 3, 4), normal(58, 3, 2, 5)],
        rtol=1e-5,
        atol=1e-5,
    ),
    Case(
        "svd_values",
        lambda t, x, y: (t.linalg.svd(x, compute_uv=False), t.linalg.svd(y, compute_uv=False)),
        [normal(59, 4, 3), normal(72, 2, 3, 5)],
        rtol=1e-5,
        atol=1e-5,
    ),
    # u and v up to the signs of a pair (LAPACK's in xtpu, Eigen's in TF): |u|, |v| and u diag(s) v^T
    Case(
        "svd_vectors",
        lambda t, x, y: _svd_invariants(t, x) + _svd_invariants(t, y),
        [normal(74, 2, 3, 5, dtype=F64), normal(75, 5, 3, dtype=F64)],
        rtol=1e-9,
        atol=1e-9,
    ),
    # ---- array ops --------------------------------------------------------
    Case(
        "split",
        lambda t, x: tuple(t.split(x, 3, axis=1)) + tuple(t.split(x, [1, -1, 2], axis=0)),
        [normal(23, 5, 6)],
    ),
    Case(
        "pad",
        lambda t, x: (
            t.pad(x, [[1, 2], [0, 3]]),
            t.pad(x, [[1, 0], [2, 2]], constant_values=-1.5),
            t.pad(x, [[2, 1], [1, 2]], mode="REFLECT"),
            t.pad(x, [[3, 0], [0, 3]], mode="symmetric"),
        ),
        [normal(24, 3, 4)],
    ),
    Case("pad_int", lambda t, x: t.pad(x, [[1, 1]], constant_values=7), [ints(25, 4)], grad=False),
    Case(
        "slice",
        lambda t, x: (t.slice(x, [1, 0, 2], [2, -1, 1]), t.slice(x, [0, 1, 0], [-1, 1, -1])),
        [normal(26, 3, 4, 5)],
    ),
    Case("reverse", lambda t, x: (t.reverse(x, [1]), t.reverse(x, [0, -1]), t.reverse(x, [])), [normal(27, 2, 3, 4)]),
    Case(
        "roll",
        lambda t, x: (
            t.roll(x, 2, 1),
            t.roll(x, -1, 0),
            t.roll(x, [1, 2], [0, 1]),
            t.roll(x, [1, 1], [1, 1]),
            t.roll(x, 7, -1),
        ),
        [normal(28, 3, 5)],
    ),
    Case(
        "repeat",
        lambda t, x: (t.repeat(x, 2, axis=0), t.repeat(x, 3, axis=1), t.repeat(x, 2), t.repeat(x, [1, 0, 2], axis=0)),
        [normal(29, 3, 2)],
    ),
    Case(
        "broadcast_to", lambda t, x: (t.broadcast_to(x, [2, 3, 4]), t.broadcast_to(x[:1], [3, 4])), [normal(30, 3, 1)]
    ),
    Case("identity", lambda t, x: t.identity(x) * 2.0, [normal(31, 4)]),
    Case("rank", lambda t, x: (t.rank(x), t.rank(x[0, 0])), [normal(32, 2, 3, 4)], grad=False),
    Case(
        "sequence_mask",
        lambda t, n: (
            t.sequence_mask(n, 5),
            t.sequence_mask(n, maxlen=4, dtype=t.float32),
            t.sequence_mask(n[None], 3),
        ),
        [np.array([0, 2, 4, 1], I32)],
        grad=False,
    ),
    Case(
        "band_part",
        lambda t, x: (
            t.linalg.band_part(x, -1, 0),
            t.linalg.band_part(x, 0, -1),
            t.linalg.band_part(x, 1, 2),
            t.linalg.band_part(x, -1, -1),
        ),
        [normal(33, 2, 4, 5)],
    ),
    Case(
        "matmul_broadcast",
        lambda t, a, b, c: (t.matmul(a, b), t.linalg.matmul(a, c, transpose_b=True), a @ b),
        [normal(34, 2, 4, 8, 16), normal(35, 16, 8), normal(36, 1, 4, 8, 16)],
        rtol=2e-5,
        atol=2e-5,
    ),
    Case(
        "matmul_batch_broadcast",
        lambda t, a, b: (t.linalg.matmul(a, b), t.linalg.matmul(b, a, adjoint_a=True, adjoint_b=True)),
        [normal(37, 3, 1, 2, 4), normal(38, 5, 4, 2)],
        rtol=2e-5,
        atol=2e-5,
    ),
    Case(
        "negative_step_slicing",
        lambda t, x: (x[::-1], x[:, ::-2], x[3:0:-1, -1::-3], x[::-1, 1], x[1:1:-1]),
        [normal(39, 5, 7)],
    ),
    # ---- nn ---------------------------------------------------------------
    Case("relu6", lambda t, x: t.nn.relu6(x), [KINKS]),
    Case("leaky_relu", lambda t, x: (t.nn.leaky_relu(x), t.nn.leaky_relu(x, alpha=0.01)), [KINKS]),
    Case("leaky_relu_int", lambda t, x: t.nn.leaky_relu(x), [ints(40, 5)], grad=False),
    Case("gelu", lambda t, x: (t.nn.gelu(x), t.nn.gelu(x, approximate=True)), [np.linspace(-5, 5, 21).astype(F32)]),
    Case("gelu_float64", lambda t, x: t.nn.gelu(x), [np.linspace(-4, 4, 9)]),
    Case("silu", lambda t, x: (t.nn.silu(x), t.nn.silu(x, beta=2.0), t.nn.swish(x)), [KINKS]),
    Case("softplus", lambda t, x: (t.nn.softplus(x), t.math.softplus(x * 20.0)), [KINKS]),
    Case(
        "bias_add",
        lambda t, x, b, y: (t.nn.bias_add(x, b), t.nn.bias_add(y, b, data_format="NCHW")),
        [normal(41, 2, 3, 4), normal(42, 4), normal(43, 2, 4, 3, 2)],
    ),
    Case(
        "moments",
        lambda t, x: tuple(t.nn.moments(x, axes=[0, 1])) + tuple(t.nn.moments(x, axes=[1], keepdims=True)),
        [normal(44, 4, 3, 5)],
    ),
    Case(
        "batch_normalization",
        lambda t, x, m, v, o, s: (
            t.nn.batch_normalization(x, m, v, o, s, 1e-3),
            t.nn.batch_normalization(x, m, v, None, None, 1e-5),
        ),
        [normal(45, 4, 3), normal(46, 3), np.abs(normal(47, 3)) + 0.5, normal(48, 3), normal(49, 3)],
    ),
    Case(
        "sparse_softmax_cross_entropy",
        lambda t, labels, logits: t.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits),
        [np.array([0, 3, 2, 4], I32), normal(50, 4, 5) * 3],
    ),
    Case(
        "sparse_softmax_cross_entropy_rank3",
        lambda t, labels, logits: t.nn.sparse_softmax_cross_entropy_with_logits(labels, logits),
        [np.array([[1, 0, 6], [5, 5, 2]], I64), normal(51, 2, 3, 7)],
    ),
    Case(
        "softmax_cross_entropy",
        lambda t, labels, logits: (
            t.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits),
            t.nn.softmax_cross_entropy_with_logits(labels, logits, axis=0),
        ),
        [np.abs(normal(52, 3, 4)) / 4, normal(53, 3, 4)],
    ),
    Case(
        "sigmoid_cross_entropy",
        lambda t, labels, logits: t.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits),
        [np.array([0.0, 1.0, 0.3, 1.0, 0.0, 0.5], F32), np.array([0.0, -2.0, 1.5, 30.0, -40.0, 0.7], F32)],
    ),
    Case("l2_loss", lambda t, x: t.nn.l2_loss(x), [normal(54, 3, 4)]),
    Case(
        "compute_average_loss",
        lambda t, x, w: (
            t.nn.compute_average_loss(x),
            t.nn.compute_average_loss(x, global_batch_size=8),
            t.nn.compute_average_loss(x, sample_weight=w),
        ),
        [normal(55, 4), normal(56, 4)],
    ),
]

ERROR_CASES = [
    # (name, fn, inputs, a fragment of xtpu's message); TF's exception class is in the data
    ("split_uneven", lambda t, x: t.split(x, 4, axis=1), [normal(60, 2, 6)], "evenly divisible"),
    (
        "reflect_too_wide",
        lambda t, x: t.pad(x, [[3, 0], [0, 0]], mode="REFLECT"),
        [normal(61, 3, 2)],
        "paddings must be less than",
    ),
    ("slice_out_of_range", lambda t, x: t.slice(x, [1, 0], [3, 2]), [normal(62, 3, 2)], "Expected size[0] in [0, 2]"),
    ("broadcast_to_incompatible", lambda t, x: t.broadcast_to(x, [3, 5]), [normal(63, 3, 2)], "Incompatible shapes"),
    ("add_n_shapes", lambda t, a, b: t.add_n([a, b]), [normal(64, 2), normal(65, 3)], "same shape"),
    ("matmul_inner", lambda t, a, b: t.matmul(a, b), [normal(66, 2, 3), normal(67, 4, 2)], "size-incompatible"),
    ("bias_add_size", lambda t, x, b: t.nn.bias_add(x, b), [normal(68, 2, 3), normal(69, 4)], "as many biases"),
    (
        "sigmoid_xent_shapes",
        lambda t, z, x: t.nn.sigmoid_cross_entropy_with_logits(labels=z, logits=x),
        [normal(70, 2), normal(71, 3)],
        "must have the same shape",
    ),
    ("average_loss_scalar", lambda t, x: t.nn.compute_average_loss(x), [np.float32(1.0)], "at least rank 1"),
    ("svd_vector", lambda t, x: t.linalg.svd(x), [normal(73, 4)], "rank >= 2"),
    (
        "gather_nd_error_policy",
        lambda t, x, i: t.gather_nd(x, i, bad_indices_policy="ERROR"),
        [normal(76, 4, 3), np.array([[1], [7]], I32)],
        "bad_indices_policy='ERROR'",
    ),
    (
        "scatter_nd_error_policy",
        lambda t, i, u: t.scatter_nd(i, u, [4], bad_indices_policy="ERROR"),
        [np.array([[1], [-1]], I32), normal(77, 2)],
        "bad_indices_policy='ERROR'",
    ),
]


NAMES = [
    # (namespace, name): each exists in xtpu's namespace of the same name with TF 2's parameters
    *[("", n) for n in ("split", "pad", "slice", "reverse", "roll", "repeat", "broadcast_to", "identity")],
    *[("", n) for n in ("sequence_mask", "rank", "norm", "clip_by_norm", "clip_by_global_norm", "add_n", "cumsum")],
    *[("", n) for n in ("sign", "floor", "round", "sin", "cos", "reduce_logsumexp", "matmul")],
    *[("linalg", n) for n in ("matmul", "band_part", "norm", "l2_normalize", "global_norm")],
    *[("math", n) for n in ("cumsum", "squared_difference", "reciprocal", "sign", "floor", "ceil", "round", "rsqrt")],
    *[("math", n) for n in ("log1p", "erf", "sin", "cos", "is_finite", "add_n", "reduce_logsumexp", "reduce_std")],
    *[("math", n) for n in ("reduce_variance", "count_nonzero", "l2_normalize", "softplus")],
    *[("nn", n) for n in ("relu6", "leaky_relu", "gelu", "silu", "swish", "softplus", "bias_add", "moments")],
    *[("nn", n) for n in ("batch_normalization", "sparse_softmax_cross_entropy_with_logits", "l2_loss")],
    *[("nn", n) for n in ("softmax_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits", "dropout")],
    *[("nn", n) for n in ("compute_average_loss", "l2_normalize")],
    ("random", "stateless_truncated_normal"),
    # the indexing, sorting and arg-reduction names (test_indexing_tf.py compares their values)
    *[("", n) for n in ("gather", "gather_nd", "scatter_nd", "tensor_scatter_nd_update", "tensor_scatter_nd_add")],
    *[("", n) for n in ("sort", "argsort", "argmax", "argmin", "one_hot", "where")],
    *[("math", n) for n in ("top_k", "in_top_k", "argmax", "argmin", "unsorted_segment_sum")],
    ("nn", "embedding_lookup"),
    ("linalg", "svd"),
]
