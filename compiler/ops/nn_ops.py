"""``xtpu.nn``: TF's neural-network activations, built from ``hlo`` ops."""

from __future__ import annotations

from typing import Any

from xtpu.core.tracing import convert
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


def softmax(logits: Any, axis: int = -1, name: str | None = None) -> Any:
    """exp(x) / sum(exp(x)) along ``axis``, computed as exp(x - max(x)) for
    stability (tf.nn.softmax).  Float tensors only."""
    x = convert(logits)
    (axis,) = normalize_axes(axis, len(shape_of(x)), "softmax")
    m = math_ops.reduce_max(x, axis=axis, keepdims=True)
    e = math_ops.exp(math_ops.subtract(x, m))
    return math_ops.divide(e, math_ops.reduce_sum(e, axis=axis, keepdims=True))


def log_softmax(logits: Any, axis: int = -1, name: str | None = None) -> Any:
    """x - log(sum(exp(x))) along ``axis``, shifted by max(x) (tf.nn.log_softmax)."""
    x = convert(logits)
    (axis,) = normalize_axes(axis, len(shape_of(x)), "log_softmax")
    m = math_ops.reduce_max(x, axis=axis, keepdims=True)
    shifted = math_ops.subtract(x, m)
    lse = math_ops.log(math_ops.reduce_sum(math_ops.exp(shifted), axis=axis, keepdims=True))
    return math_ops.subtract(shifted, lse)
