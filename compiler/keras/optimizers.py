"""``xtpu.keras.optimizers``: the same classes as :mod:`xtpu.optimizers`."""

from xtpu.train.optimizers import SGD, Adam, Optimizer  # noqa: F401

__all__ = ["Optimizer", "SGD", "Adam"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
