"""``xtpu.strings``: TF's ``tf.strings`` ops, host only (see :mod:`xtpu.ops.string_ops`)."""

from xtpu.ops.string_ops import format, to_number

__all__ = ["format", "to_number"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
