"""``xtpu.linalg``: TF's ``tf.linalg`` ops that xtpu has (``matmul``,
``band_part``, ``norm``, ``svd``, ``l2_normalize``, ``global_norm``)."""

from xtpu.ops.array_more import band_part
from xtpu.ops.math_more import global_norm, l2_normalize, norm, svd
from xtpu.ops.math_ops import matmul

__all__ = ["band_part", "global_norm", "l2_normalize", "matmul", "norm", "svd"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
