"""``xtpu.keras``: the Keras names of xtpu's TF 2 API (``xtpu.keras.optimizers``).

A public namespace, beside ``xtpu``: it may import every room (the
optimizers live in ``xtpu.train``); no room imports it.
"""

from xtpu.keras import optimizers  # noqa: F401

__all__ = ["optimizers"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
