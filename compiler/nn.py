"""``xtpu.nn``: TF's ``tf.nn`` activations (see :mod:`xtpu.ops.nn_ops`)."""

from xtpu.ops.gather_ops import embedding_lookup, in_top_k
from xtpu.ops.nn_ops import log_softmax, relu, sigmoid, softmax

__all__ = ["embedding_lookup", "in_top_k", "log_softmax", "relu", "sigmoid", "softmax"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
