"""``xtpu.nn``: TF's ``tf.nn`` ops (see :mod:`xtpu.ops.nn_ops`, :mod:`xtpu.ops.nn_more`; convolutions,
pooling and batch norm: :mod:`xtpu.ops.conv_ops`)."""

from xtpu.ops.conv_ops import (
    avg_pool,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    conv1d,
    conv2d,
    conv2d_transpose,
    conv3d,
    convolution,
    depthwise_conv2d,
    fused_batch_norm,
    max_pool,
    max_pool1d,
    max_pool2d,
    max_pool3d,
    separable_conv2d,
    sync_batch_normalization,
)
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
    "avg_pool",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "batch_normalization",
    "bias_add",
    "compute_average_loss",
    "conv1d",
    "conv2d",
    "conv2d_transpose",
    "conv3d",
    "convolution",
    "depthwise_conv2d",
    "dropout",
    "embedding_lookup",
    "fused_batch_norm",
    "gelu",
    "in_top_k",
    "l2_loss",
    "l2_normalize",
    "leaky_relu",
    "log_softmax",
    "max_pool",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "moments",
    "relu",
    "relu6",
    "separable_conv2d",
    "sigmoid",
    "sigmoid_cross_entropy_with_logits",
    "silu",
    "softmax",
    "softmax_cross_entropy_with_logits",
    "softplus",
    "sparse_softmax_cross_entropy_with_logits",
    "swish",
    "sync_batch_normalization",
]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
