"""``xtpu.nn``: TF's ``tf.nn`` ops (see :mod:`xtpu.ops.nn_ops` and :mod:`xtpu.ops.nn_more`)."""

from xtpu.ops.gather_ops import embedding_lookup, in_top_k
from xtpu.ops.math_more import l2_normalize
from xtpu.ops.nn_more import (
    batch_normalization,
    bias_add,
    compute_average_loss,
    dropout,
    gelu,
    l2_loss,
    leaky_relu,
    moments,
    relu6,
    sigmoid_cross_entropy_with_logits,
    silu,
    softmax_cross_entropy_with_logits,
    softplus,
    sparse_softmax_cross_entropy_with_logits,
    swish,
)
from xtpu.ops.nn_ops import log_softmax, relu, sigmoid, softmax

__all__ = [
    "embedding_lookup",
    "in_top_k",
    "log_softmax",
    "relu",
    "sigmoid",
    "softmax",
    # issue 26
    "batch_normalization",
    "bias_add",
    "compute_average_loss",
    "dropout",
    "gelu",
    "l2_loss",
    "l2_normalize",
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


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
