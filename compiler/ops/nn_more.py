"""TF 2's remaining ``tf.nn`` ops: the activations ``relu6``,
``leaky_relu``, ``gelu``, ``silu`` (``swish``) and ``softplus``;
``bias_add``, ``moments``, ``batch_normalization``; the losses
``sparse_softmax_cross_entropy_with_logits``,
``softmax_cross_entropy_with_logits``,
``sigmoid_cross_entropy_with_logits`` and ``l2_loss``; and ``dropout``.

Each is built from hlo ops as TF's Python or kernel computes it, so values
and gradients are TF's, including at the kinks: ``relu6``'s gradient is 0 at
0 and at 6, ``leaky_relu``'s is ``alpha`` at 0 (TF's LeakyReluGrad takes
``x > 0``), ``softplus``' is ``sigmoid(x)`` everywhere (0.5 at 0).  Test
data from TF itself: ``test_tf_reference_ops.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.contexts import current_run_state, current_scope_strategy
from xtpu.core.tracing import Tensor, bind, convert, current_trace, read_if_variable
from xtpu.dialects import hlo
from xtpu.ops import math_ops as M
from xtpu.ops.array_ops import reshape
from xtpu.ops.core import broadcast_to, dtype_of, normalize_axes, scalar, shape_of, unify
from xtpu.ops.gather_ops import one_hot
from xtpu.ops.math_more import erf, log1p, rsqrt, squared_difference, stop_gradient
from xtpu.ops.nn_ops import log_softmax
from xtpu.ops.random_more import stateless_uniform_words

FLOATS = hlo.FLOATS


def _value(x: Any) -> Any:
    return convert(read_if_variable(x))


def _float(x: Any, op: str) -> Any:
    x = _value(x)
    if dtype_of(x) not in FLOATS:
        raise TypeError(f"{op}: features must be floats ({', '.join(FLOATS)}), got {dtype_of(x)}")
    return x


def _select(pred: Any, a: Any, b: Any) -> Any:
    (out,) = bind(hlo.SelectOp, [pred, a, b])
    return out


def _full(x: Any, value: Any) -> Any:
    return broadcast_to(scalar(value, dtype_of(x)), shape_of(x))


# --------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------


def relu6(features: Any, name: str | None = None) -> Any:
    """``min(max(features, 0), 6)`` (tf.nn.relu6), as two selects: the
    gradient is 0 at 0 and at 6, as TF's Relu6Grad (``0 < x < 6``), and
    ``relu6(-0.0)`` is ``+0.0``, as TF's."""
    x = _value(features)
    dt = dtype_of(x)
    y = _select(M.greater(x, scalar(0, dt)), x, _full(x, 0))
    return _select(M.less(y, scalar(6, dt)), y, _full(x, 6))


def leaky_relu(features: Any, alpha: float = 0.2, name: str | None = None) -> Any:
    """``x`` where ``x > 0``, else ``alpha * x`` (tf.nn.leaky_relu); integer
    features are cast to float32 first, as TF does.  The gradient is
    ``alpha`` at 0 (TF's LeakyReluGrad)."""
    x = _value(features)
    if dtype_of(x) not in FLOATS:
        x = M.cast(x, "float32")
    x = _float(x, "leaky_relu")
    return _select(M.greater(x, scalar(0, dtype_of(x))), x, M.multiply(x, scalar(alpha, dtype_of(x))))


def gelu(features: Any, approximate: bool = False, name: str | None = None) -> Any:
    """The Gaussian error linear unit (tf.nn.gelu): exact by default,
    ``0.5 x (1 + erf(x / sqrt(2)))``; with ``approximate=True`` the tanh
    form ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``.

    Raises:
      TypeError: non-float features.
    """
    x = _float(features, "gelu")
    dt = dtype_of(x)
    half = M.multiply(scalar(0.5, dt), x)
    if approximate:
        cube = M.multiply(M.multiply(x, x), x)
        inner = M.multiply(scalar(0.7978845608028654, dt), M.add(x, M.multiply(scalar(0.044715, dt), cube)))
        return M.multiply(half, M.add(scalar(1.0, dt), M.tanh(inner)))
    return M.multiply(half, M.add(scalar(1.0, dt), erf(M.divide(x, scalar(1.4142135623730951, dt)))))


def silu(features: Any, beta: float = 1.0) -> Any:
    """``features * sigmoid(beta * features)`` (tf.nn.silu = tf.nn.swish)."""
    x = _float(features, "silu")
    bx = x if beta == 1.0 else M.multiply(scalar(beta, dtype_of(x)), x)
    return M.multiply(x, M.sigmoid(bx))


swish = silu


def softplus(features: Any, name: str | None = None) -> Any:
    """``log(1 + exp(features))`` (tf.nn.softplus / tf.math.softplus),
    computed as ``max(x, 0) + log1p(exp(-|x|))`` without overflow; the
    gradient is ``sigmoid(x)``."""
    x = _float(features, "softplus")
    pos = M.greater(x, scalar(0, dtype_of(x)))
    zeros = _full(x, 0)
    neg_abs = _select(pos, M.negative(x), x)
    return M.add(_select(pos, x, zeros), log1p(M.exp(neg_abs)))


# --------------------------------------------------------------------------
# Bias, moments, normalization
# --------------------------------------------------------------------------


def bias_add(value: Any, bias: Any, data_format: str | None = None, name: str | None = None) -> Any:
    """``value + bias`` with the 1-D ``bias`` along the channel dimension:
    the last (``data_format`` None or ``'N...C'``) or dimension 1
    (``'NC...'``) (tf.nn.bias_add).

    Raises:
      ValueError: ``bias`` is not 1-D, its size is not the channel
        dimension's, ``value`` has rank below 2, or an unknown data_format.
    """
    v, b = unify([read_if_variable(value), read_if_variable(bias)], "bias_add")
    s, bs = shape_of(v), shape_of(b)
    if len(bs) != 1:
        raise ValueError(f"bias_add: bias must be 1-D, got shape {list(bs)}")
    if len(s) < 2:
        raise ValueError(f"bias_add: value must be at least 2-D, got shape {list(s)}")
    if data_format is None or (data_format.startswith("N") and data_format.endswith("C")):
        ch = len(s) - 1
    elif data_format.startswith("NC"):
        ch = 1
    else:
        raise ValueError(f"bias_add: data_format must start with 'NC' or be 'N...C', got {data_format!r}")
    if s[ch] != bs[0]:
        raise ValueError(
            f"bias_add: Must provide as many biases as the channel dimension of the input tensor: "
            f"{bs[0]} vs. {s[ch]} in {list(s)}"
        )
    (bb,) = bind(hlo.BroadcastInDimOp, [b], broadcast_dimensions=(ch,), shape=s)
    (out,) = bind(hlo.AddOp, [v, bb])
    return out


def moments(x: Any, axes: Any, shift: Any = None, keepdims: bool = False, name: str | None = None) -> tuple[Any, Any]:
    """``(mean, variance)`` of ``x`` over ``axes`` (tf.nn.moments); the
    variance is ``mean((x - stop_gradient(mean))**2)``, as TF computes it
    (``shift`` is unused, as in TF 2)."""
    x = _float(x, "moments")
    axes = normalize_axes(axes, len(shape_of(x)), "moments")
    mean = M.reduce_mean(x, axis=axes, keepdims=True)
    variance = M.reduce_mean(squared_difference(x, stop_gradient(mean)), axis=axes, keepdims=True)
    if not keepdims:
        kept = [n for i, n in enumerate(shape_of(x)) if i not in axes]
        mean, variance = reshape(mean, kept), reshape(variance, kept)
    return mean, variance


def batch_normalization(
    x: Any, mean: Any, variance: Any, offset: Any, scale: Any, variance_epsilon: float, name: str | None = None
) -> Any:
    """``scale * (x - mean) / sqrt(variance + variance_epsilon) + offset``
    (tf.nn.batch_normalization), computed as TF does: ``inv =
    rsqrt(variance + eps) * scale``, ``x * inv + (offset - mean * inv)``;
    ``offset`` and ``scale`` may be None."""
    x = _float(x, "batch_normalization")
    dt = dtype_of(x)
    inv = rsqrt(M.add(_value(variance), scalar(variance_epsilon, dt)))
    if scale is not None:
        inv = M.multiply(inv, scale)
    shift = M.negative(M.multiply(mean, inv)) if offset is None else M.subtract(offset, M.multiply(mean, inv))
    return M.add(M.multiply(x, inv), shift)


# --------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------


def sparse_softmax_cross_entropy_with_logits(labels: Any, logits: Any, name: str | None = None) -> Any:
    """``-log(softmax(logits)[label])`` per example
    (tf.nn.sparse_softmax_cross_entropy_with_logits): ``labels`` int
    ``[d0..dn-1]``, ``logits`` float ``[d0..dn-1, num_classes]`` -> float
    ``[d0..dn-1]``.  The gradient to the logits is ``softmax - onehot``.

    A label outside ``[0, num_classes)`` gives NaN in its row (TF's GPU and
    TPU kernels; TF's CPU kernel raises instead), eagerly and compiled alike.

    Raises:
      ValueError: the labels' shape is not the logits' without the last
        dimension, or the logits are a scalar; TypeError: labels not int32 /
        int64 or logits not float.
    """
    lab = _value(labels)
    x = _float(logits, "sparse_softmax_cross_entropy_with_logits")
    ls, xs = shape_of(lab), shape_of(x)
    if dtype_of(lab) not in ("int32", "int64"):
        raise TypeError(f"sparse_softmax_cross_entropy_with_logits: labels must be int32 or int64, got {dtype_of(lab)}")
    if not xs:
        raise ValueError("Logits cannot be scalars - received shape [].")
    if ls != xs[:-1]:
        raise ValueError(
            f"`labels.shape.rank` must equal `logits.shape.rank - 1`, and the shapes must match: "
            f"labels {list(ls)}, logits {list(xs)}"
        )
    dt = dtype_of(x)
    n = xs[-1]
    logp = log_softmax(x, len(xs) - 1)
    hot = one_hot(lab, n, dtype=dt)
    loss = M.negative(M.reduce_sum(M.multiply(hot, logp), axis=len(xs) - 1))
    # Out-of-range labels: NaN (TF on GPU / TPU).
    bad = M.logical_or(M.less(lab, scalar(0, dtype_of(lab))), M.greater_equal(lab, scalar(n, dtype_of(lab))))
    return _select(bad, _full(loss, np.nan), loss)


def softmax_cross_entropy_with_logits(labels: Any, logits: Any, axis: int = -1, name: str | None = None) -> Any:
    """``-sum(labels * log_softmax(logits), axis)`` per example
    (tf.nn.softmax_cross_entropy_with_logits, TF 2's v2).  Gradients are
    TF's: ``softmax(logits) - labels`` to the logits (exact when each row
    of labels sums to 1, as TF assumes) and ``-log_softmax(logits)`` to the
    labels.

    Raises:
      ValueError: the shapes differ; TypeError: the dtypes differ or are not float.
    """
    lab, x = unify([read_if_variable(labels), read_if_variable(logits)], "softmax_cross_entropy_with_logits")
    x = _float(x, "softmax_cross_entropy_with_logits")
    if shape_of(lab) != shape_of(x):
        raise ValueError(
            f"softmax_cross_entropy_with_logits: labels {list(shape_of(lab))} and logits {list(shape_of(x))} must have the same shape"
        )
    (ax,) = normalize_axes(axis, len(shape_of(x)), "softmax_cross_entropy_with_logits")
    logp = log_softmax(x, ax)
    loss = M.negative(M.reduce_sum(M.multiply(lab, logp), axis=ax))
    # TF's gradient (_SoftmaxCrossEntropyWithLogitsGrad): ``softmax - labels``
    # to the logits, which assumes each row of labels sums to 1, and
    # ``-log_softmax`` to the labels.  A surrogate with those derivatives,
    # its value cancelled by a stopped difference.
    backprop = stop_gradient(M.subtract(M.exp(logp), lab))
    surrogate = M.add(
        M.reduce_sum(M.multiply(backprop, x), axis=ax),
        M.reduce_sum(M.multiply(lab, stop_gradient(M.negative(logp))), axis=ax),
    )
    return M.add(stop_gradient(M.subtract(loss, surrogate)), surrogate)


def sigmoid_cross_entropy_with_logits(labels: Any = None, logits: Any = None, name: str | None = None) -> Any:
    """``max(x, 0) - x * z + log(1 + exp(-|x|))`` elementwise for logits
    ``x`` and labels ``z`` (tf.nn.sigmoid_cross_entropy_with_logits), with
    TF's selects, so the gradient is ``sigmoid(x) - z``.

    Raises:
      ValueError: labels and logits differ in shape (TF's message).
    """
    z, x = unify([read_if_variable(labels), read_if_variable(logits)], "sigmoid_cross_entropy_with_logits")
    x = _float(x, "sigmoid_cross_entropy_with_logits")
    if shape_of(z) != shape_of(x):
        raise ValueError(
            f"`logits` and `labels` must have the same shape, received ({list(shape_of(x))} vs {list(shape_of(z))})."
        )
    cond = M.greater_equal(x, scalar(0, dtype_of(x)))
    relu_logits = _select(cond, x, _full(x, 0))
    neg_abs = _select(cond, M.negative(x), x)
    return M.add(M.subtract(relu_logits, M.multiply(x, z)), log1p(M.exp(neg_abs)))


def l2_loss(t: Any, name: str | None = None) -> Any:
    """``sum(t**2) / 2``, a scalar (tf.nn.l2_loss)."""
    x = _float(t, "l2_loss")
    return M.divide(M.reduce_sum(M.multiply(x, x)), scalar(2, dtype_of(x)))


def compute_average_loss(per_example_loss: Any, sample_weight: Any = None, global_batch_size: Any = None) -> Any:
    """``sum(per_example_loss * sample_weight) / global_batch_size``
    (tf.nn.compute_average_loss).  Without ``global_batch_size`` it is the
    per-replica batch (``per_example_loss.shape[0]``) times the running
    strategy's ``num_replicas_in_sync`` (1 outside ``strategy.run``, as TF's
    default strategy), so that summing the replicas' gradients averages them
    over the global batch.

    Raises:
      ValueError: ``per_example_loss`` is a scalar (TF's message), or
        ``global_batch_size`` is not positive.
      TypeError: ``global_batch_size`` is not an integer.
      RuntimeError: called in a strategy's cross-replica context (TF's message).
    """
    loss = _value(per_example_loss)
    if not shape_of(loss):
        raise ValueError("Invalid value passed for `per_example_loss`. Expected a tensor with at least rank 1.")
    dt = dtype_of(loss)
    if sample_weight is not None:
        loss = M.multiply(loss, M.cast(sample_weight, dt))
    if global_batch_size is None:
        run = current_run_state()
        in_run = run is not None and current_trace() is not None
        if (in_run and run.in_merge) or (not in_run and current_scope_strategy() is not None):
            raise RuntimeError(
                "You are calling `compute_average_loss` in cross replica context, while it was expected to be "
                "called in replica context."
            )
        global_batch_size = shape_of(loss)[0] * (run.strategy.num_replicas_in_sync if in_run else 1)
    if isinstance(global_batch_size, float) or not float(global_batch_size).is_integer():
        raise TypeError(f"global_batch_size must be an integer, got {global_batch_size!r}")
    if int(global_batch_size) <= 0:
        raise ValueError(f"global_batch_size must be positive, got {global_batch_size}")
    return M.divide(M.reduce_sum(loss), scalar(int(global_batch_size), dt))


# --------------------------------------------------------------------------
# Dropout
# --------------------------------------------------------------------------


def dropout(
    x: Any, rate: Any, noise_shape: Any = None, seed: Any = None, name: str | None = None, rng_seed: Any = None
) -> Any:
    """Each element zeroed with probability ``rate``, the others scaled by
    ``1 / (1 - rate)`` (tf.nn.dropout); ``noise_shape`` (broadcast to
    ``x``'s) shares the decision across dimensions of size 1.

    The random numbers are ``xtpu.random.stateless_uniform`` of the seed
    ``[seed, 0]`` (``seed`` default 0): a function of the seed, not of a
    global state, eagerly and compiled alike (TF draws from its global
    generator, so the kept elements differ from TF's; their distribution is
    the same).  Inside a replicated computation each replica draws the same
    mask for the same seed: fold the replica id into ``seed`` for different
    ones.

    Raises:
      ValueError: ``rate`` outside ``[0, 1)``; TypeError: non-float ``x``.
    """
    x = _float(x, "dropout")
    if isinstance(rate, Tensor):
        raise TypeError("dropout: rate must be a static number")
    rate = float(rate)
    if not 0 <= rate < 1:
        raise ValueError(f"dropout: rate must be a scalar tensor or a float in the range [0, 1), got {rate}")
    if rate == 0:
        return x
    dt = dtype_of(x)
    shape = shape_of(x) if noise_shape is None else tuple(int(d) for d in np.asarray(noise_shape).reshape(-1))
    key = seed if seed is not None else 0
    u = stateless_uniform_words(shape, key, dt)
    keep = M.greater_equal(u, scalar(rate, dt))
    keep = broadcast_to(keep, shape_of(x))
    scaled = M.multiply(x, scalar(1.0 / (1.0 - rate), dt))
    return _select(keep, scaled, _full(x, 0))


__all__ = [
    "batch_normalization",
    "bias_add",
    "compute_average_loss",
    "dropout",
    "gelu",
    "l2_loss",
    "leaky_relu",
    "moments",
    "relu6",
    "sigmoid_cross_entropy_with_logits",
    "silu",
    "softmax_cross_entropy_with_logits",
    "softplus",
    "sparse_softmax_cross_entropy_with_logits",
    "swish",
]
