"""``xtpu.keras``: the Keras names of xtpu's TF 2 API (``xtpu.keras.optimizers``,
``xtpu.keras.mixed_precision``).

A public namespace, beside ``xtpu``: it may import every room (the
optimizers live in ``xtpu.train``); no room imports it.
"""

from xtpu.keras import mixed_precision, optimizers  # noqa: F401

__all__ = ["mixed_precision", "optimizers"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
