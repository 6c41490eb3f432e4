"""TPU replication: ``replicate``, ``outside_compilation``,
``cross_replica_sum`` and the other collectives, ``lower``/``compile`` (the
stages of a program), topology and device assignment, infeed, padding of
dynamic shapes, and the multi-process API (``xtpu.distributed``).

:mod:`~xtpu.replication.program` traces a computation into the ``tpu``
dialect, runs the pass pipeline and hands the lowered module to the
runtime.  This package re-exports its public names, so ``from
xtpu.replication import lower`` reads as before the rooms.

Layer: above ``xtpu.autodiff``, ``xtpu.ops`` and ``xtpu.core``. May import
those and the IR and runtime layers; never ``distribute``, ``train``,
``tools`` nor the ``xtpu`` namespace.
"""

from xtpu.replication.program import (
    Compiled,
    Lowered,
    XLAOptions,
    cross_replica_sum,
    lower,
    outside_compilation,
    replicate,
)

__all__ = ["Compiled", "Lowered", "XLAOptions", "cross_replica_sum", "lower", "outside_compilation", "replicate"]
