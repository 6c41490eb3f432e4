"""``xtpu.train``: TF's ``tf.compat.v1.train`` names (``Optimizer``,
``GradientDescentOptimizer``, ``MomentumOptimizer``, ``AdamOptimizer``, the
global step) and TF 2's object-based checkpoints (``Checkpoint``,
``CheckpointManager``, ``latest_checkpoint``).

The room holds the training utilities: TF 1 optimizers
(:mod:`~xtpu.train.optimizer_v1`), TF 2 optimizers
(:mod:`~xtpu.train.optimizers`, also ``xtpu.optimizers`` and
``xtpu.keras.optimizers``), what both share (:mod:`~xtpu.train.optimizer_util`),
checkpoints and loss reductions (``xtpu.losses``).

Layer: the top room. May import ``distribute``, ``replication``,
``autodiff``, ``ops``, ``core`` and the IR and runtime layers; never
``tools`` nor the ``xtpu`` namespace.
"""

from xtpu.train.checkpoint import Checkpoint, CheckpointManager, latest_checkpoint
from xtpu.train.optimizer_v1 import (
    AdamOptimizer,
    GradientDescentOptimizer,
    MomentumOptimizer,
    Optimizer,
    create_global_step,
    get_global_step,
    get_or_create_global_step,
)

__all__ = [
    "Optimizer",
    "GradientDescentOptimizer",
    "MomentumOptimizer",
    "AdamOptimizer",
    "get_global_step",
    "create_global_step",
    "get_or_create_global_step",
    "Checkpoint",
    "CheckpointManager",
    "latest_checkpoint",
]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
