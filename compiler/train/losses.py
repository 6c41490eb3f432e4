"""``xtpu.losses``: TF 1's loss reductions (``tf.compat.v1.losses.Reduction``)."""

from __future__ import annotations


class Reduction:
    """How a loss is reduced (``tf.compat.v1.losses.Reduction``); the values
    are TF's strings.

    * ``NONE``: un-reduced weighted losses with the same shape as the input.
    * ``SUM``: scalar sum of the weighted losses.
    * ``MEAN``: scalar ``SUM`` divided by the sum of the weights.
    * ``SUM_OVER_BATCH_SIZE``: scalar ``SUM`` divided by the number of elements.
    * ``SUM_OVER_NONZERO_WEIGHTS`` (``SUM_BY_NONZERO_WEIGHTS``): scalar
      ``SUM`` divided by the number of non-zero weights.

    ``xtpu.tpu.CrossShardOptimizer`` accepts ``SUM`` and ``MEAN``.
    """

    NONE = "none"
    SUM = "weighted_sum"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    MEAN = "weighted_mean"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls) -> tuple[str, ...]:
        return (
            cls.NONE,
            cls.SUM,
            cls.MEAN,
            cls.SUM_OVER_BATCH_SIZE,
            cls.SUM_OVER_NONZERO_WEIGHTS,
            cls.SUM_BY_NONZERO_WEIGHTS,
        )

    @classmethod
    def validate(cls, key: str) -> None:
        """Raises:
        ValueError: ``key`` is not a reduction.
        """
        if key not in cls.all():
            raise ValueError(f"Invalid Reduction Key {key}. Key should be one of {cls.all()}.")


__all__ = ["Reduction"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
