"""``xtpu.keras.mixed_precision``: TF's mixed-precision API (the policies in
:mod:`xtpu.distribute.mixed_precision`, loss scaling in
:mod:`xtpu.train.loss_scale_optimizer`; ``docs/dtypes.md``)."""

from xtpu.distribute.mixed_precision import Policy, global_policy, set_global_policy
from xtpu.train.loss_scale_optimizer import LossScaleOptimizer

__all__ = ["LossScaleOptimizer", "Policy", "global_policy", "set_global_policy"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
