"""``xtpu.nn``: TF's neural-network activations, built from ``hlo`` ops."""

from __future__ import annotations

from typing import Any

from xtpu.core.tracing import bind, convert
from xtpu.dialects.autodiff import StopGradientOp
from xtpu.ops import math_ops
from xtpu.ops.core import dtype_of, normalize_axes, scalar, shape_of


def relu(features: Any, name: str | None = None) -> Any:
    """max(features, 0) (tf.nn.relu).  Its gradient is 0 where features is
    0, as TF's ``ReluGrad`` (``maximum`` gives a tie to its first operand,
    here the constant)."""
    x = convert(features)
    return math_ops.maximum(scalar(0, dtype_of(x)), x)


def sigmoid(x: Any, name: str | None = None) -> Any:
    """1 / (1 + e**-x) (tf.nn.sigmoid; StableHLO logistic)."""
    return math_ops.sigmoid(x)


def _shift(x: Any, axis: int) -> Any:
    """``x - max(x)`` along ``axis``, the gradient stopped at the max: the
    shift cancels in softmax and log_softmax, so its gradient is zero in
    exact arithmetic, and TF's SoftmaxGrad / LogSoftmaxGrad (``g - sum(g) *
    softmax``) have no term for it; without the stop the gradient would
    spend five passes over ``x`` (ties of the max) computing that zero."""
    (m,) = bind(StopGradientOp, [math_ops.reduce_max(x, axis=axis, keepdims=True)])
    return math_ops.subtract(x, m)


def softmax(logits: Any, axis: int = -1, name: str | None = None) -> Any:
    """exp(x) / sum(exp(x)) along ``axis``, computed as exp(x - max(x)) for
    stability (tf.nn.softmax).  Float tensors only."""
    x = convert(logits)
    (axis,) = normalize_axes(axis, len(shape_of(x)), "softmax")
    e = math_ops.exp(_shift(x, axis))
    return math_ops.divide(e, math_ops.reduce_sum(e, axis=axis, keepdims=True))


def log_softmax(logits: Any, axis: int = -1, name: str | None = None) -> Any:
    """x - log(sum(exp(x))) along ``axis``, shifted by max(x) (tf.nn.log_softmax).
    Gradient: TF's ``g - sum(g) * softmax(x)``."""
    x = convert(logits)
    (axis,) = normalize_axes(axis, len(shape_of(x)), "log_softmax")
    shifted = _shift(x, axis)
    lse = math_ops.log(math_ops.reduce_sum(math_ops.exp(shifted), axis=axis, keepdims=True))
    return math_ops.subtract(shifted, lse)
