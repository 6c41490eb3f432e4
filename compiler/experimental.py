"""``xtpu.experimental``: TF's ``tf.experimental`` names xtpu has."""

from xtpu.distribute.input_lib import Optional  # noqa: F401  (tf.experimental.Optional)

__all__ = ["Optional"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
