"""``xtpu.experimental``: TF's ``tf.experimental`` names xtpu has, and
StableHLO programs run inside xtpu (``call_stablehlo``, ``from_jax``)."""

from xtpu.distribute.input_lib import Optional  # noqa: F401  (tf.experimental.Optional)
from xtpu.ops.stablehlo_call import StableHLOImportError, call_stablehlo, from_jax  # noqa: F401

__all__ = ["Optional", "call_stablehlo", "from_jax", "StableHLOImportError"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
