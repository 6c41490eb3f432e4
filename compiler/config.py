"""``xtpu.config``: runtime settings under TF's ``tf.config`` names.

``xtpu.config.threading.set_intra_op_parallelism_threads(n)`` is TF's
setting for the threads one op may use; in xtpu it is the core budget of a
replicated run, shared among the replicas running at once (BLAS threads per
replica = ``max(1, n // replicas)``; 0 lets xtpu choose: every core). See
``xtpu.runtime.blas_budget``.  ``set_inter_op_parallelism_threads(n)`` is
TF's setting for the threads that run independent operations: in xtpu the
replicas of a step (1: one after the other in one thread, op by op; 2 or
more: a thread each; 0: xtpu chooses per program).  See
``xtpu.runtime.sequential``.
"""

from __future__ import annotations

import types

from xtpu.runtime.blas_budget import get_intra_op_parallelism_threads, set_intra_op_parallelism_threads
from xtpu.runtime.sequential import get_inter_op_parallelism_threads, set_inter_op_parallelism_threads

threading = types.SimpleNamespace(
    set_intra_op_parallelism_threads=set_intra_op_parallelism_threads,
    get_intra_op_parallelism_threads=get_intra_op_parallelism_threads,
    set_inter_op_parallelism_threads=set_inter_op_parallelism_threads,
    get_inter_op_parallelism_threads=get_inter_op_parallelism_threads,
)


def experimental_connect_to_cluster(
    cluster_spec_or_resolver,
    job_name: str = "localhost",
    task_index: int = 0,
    protocol=None,
    make_master_device_default: bool = True,
    cluster_device_filters=None,
) -> None:
    """TF's ``tf.config.experimental_connect_to_cluster``: the simulated TPU
    system is in this process, so there is nothing to connect to (TPU
    guides call it before ``initialize_tpu_system``)."""
    return None


__all__ = ["experimental_connect_to_cluster", "threading"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
