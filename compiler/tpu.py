"""``xtpu.tpu``: TF 1's ``tf.compat.v1.tpu`` names, with ``CrossShardOptimizer``.

``replicate``, ``outside_compilation`` and ``cross_replica_sum`` are
``xtpu``'s; :class:`CrossShardOptimizer` follows TF's ``tpu_optimizer.py``.
"""

from __future__ import annotations

import logging
from typing import Any

from xtpu.core.tracing import current_trace
from xtpu.distribute.strategy import get_replica_context, in_cross_replica_context
from xtpu.replication.device_assignment import DeviceAssignment
from xtpu.replication.program import cross_replica_sum, outside_compilation, replicate
from xtpu.replication.topology import Topology, initialize_tpu_system
from xtpu.train import losses
from xtpu.train import optimizer_util as util
from xtpu.train.optimizer_v1 import Optimizer

logger = logging.getLogger("xtpu")


def _experimental():
    """``xtpu.tpu.experimental``: TF 2's ``tf.tpu.experimental`` names."""
    import types

    return types.SimpleNamespace(
        initialize_tpu_system=initialize_tpu_system, DeviceAssignment=DeviceAssignment, Topology=Topology
    )


experimental = _experimental()

UNSET_SHARDS = (
    "CrossShardOptimizer should be used within a tpu_shard_context, but got unset number_of_shards. Assuming 1."
)


class CrossShardOptimizer(Optimizer):
    """An optimizer that averages gradients across TPU shards
    (``tf.compat.v1.tpu.CrossShardOptimizer``).

    ``compute_gradients`` scales the loss by ``1 / num_shards`` (or
    ``1 / group size`` with ``group_assignment``) for ``Reduction.MEAN``, so
    that ``apply_gradients``, which sums every gradient over the replicas
    with ``xtpu.cross_replica_sum(grad, group_assignment)``, averages them;
    ``Reduction.SUM`` leaves the loss alone (the gradients are summed).  The
    wrapped optimizer then applies the sums.  As in TF the gradients
    ``compute_gradients`` returns are the scaled per-replica ones (clip them
    per replica if needed).

    Use it inside ``strategy.run`` with mirrored variables (xtpu's
    replicated computation that can update variables): there the wrapped
    optimizer applies the sums as they are on every replica (as under
    TPUEstimator: no second reduction by the strategy), so with a
    ``group_assignment`` each group trains its own copy of the weights
    (``strategy.run`` writes back replica 0's copy).  Eagerly it logs TF's
    warning and works as one shard.

    Args:
      opt: an ``xtpu.train`` optimizer.
      reduction: ``xtpu.losses.Reduction.MEAN`` (default) or ``SUM``.
      name: the optimizer's name.
      group_assignment: a list of lists of replica ids (groups of equal size
        covering every replica) over which gradients are summed.

    Raises:
      ValueError: a reduction other than SUM or MEAN.
      TypeError: ``opt`` is not an ``xtpu.train`` optimizer (e.g. a TF 2 one).
    """

    def __init__(
        self,
        opt: Any,
        reduction: str = losses.Reduction.MEAN,
        name: str = "CrossShardOptimizer",
        group_assignment: Any = None,
    ):
        accepted_reductions = (losses.Reduction.SUM, losses.Reduction.MEAN)
        if reduction not in accepted_reductions:
            raise ValueError(f"Argument `reduction` should be one of {accepted_reductions}. Received: {reduction}")
        if not isinstance(opt, Optimizer):
            raise TypeError(
                "CrossShardOptimizer only works with tf.training.Optimizer and not Keras Optimizer. "
                f"Received: {opt}. If you are using TPUStrategy, Keras Optimizer will sum gradients across "
                "replicas.If you are using TPUEstimator, you may instead sum your gradients with:\n"
                "`grads = [tf.compat.v1.tpu.cross_replica_sum(g) for g in grads]`\n"
                "If you want to average your gradients, rescale your loss with: `loss /= global_batch_size`"
            )
        super().__init__(False, name)
        self._opt = opt
        self._reduction = reduction
        self._group_assignment = group_assignment

    def _verify_and_get_subgroup_size(self, group_assignment: Any, num_shards: int) -> int | None:
        """The size of one group of ``group_assignment`` (None without one).

        Raises:
          ValueError: not a list of lists; not a permutation of
            ``range(num_shards)``; groups of different sizes.
        """
        if not group_assignment:
            return None
        if not (isinstance(group_assignment, list) and all(isinstance(i, list) for i in group_assignment)):
            raise ValueError(f"group_assignment must be a list of list. Got {group_assignment}")
        replica_ids = set()
        for g in group_assignment:
            for i in g:
                replica_ids.add(i)
        if set(range(num_shards)) != replica_ids:
            raise ValueError(
                f"group_assignment must be a permutation of range({num_shards}). Got group_assignment={group_assignment}"
            )
        subgroup_size_list = [len(group) for group in group_assignment]
        if all(subgroup_size_list[0] == size for size in subgroup_size_list):
            return subgroup_size_list[0]
        raise ValueError(
            f"The size of each subgroup in group_assignment must be equal. Got group_assignment={self._group_assignment}"
        )

    def compute_gradients(self, loss: Any, var_list: Any = None, **kwargs: Any) -> list[tuple[Any, Any]]:
        """The wrapped optimizer's ``compute_gradients`` of the loss scaled
        by ``1 / num_shards`` (MEAN; ``1 / group size`` with groups).

        Raises:
          ValueError: an invalid ``group_assignment``.
        """
        tr = current_trace()
        num_shards = tr.num_replicas if tr is not None else None
        if num_shards is None:
            logger.warning(UNSET_SHARDS)
            num_shards = 1
        subgroup_size = self._verify_and_get_subgroup_size(self._group_assignment, num_shards)
        if num_shards > 1 and self._reduction == losses.Reduction.MEAN:
            scale = 1.0 / subgroup_size if self._group_assignment else 1.0 / num_shards
            if callable(loss) and not hasattr(loss, "shape"):
                unscaled = loss
                loss = lambda: unscaled() * scale  # noqa: E731
            else:
                loss = loss * scale
        # The cross-replica sum is this optimizer's: no strategy scaling.
        prev = self._opt._strategy_reduction
        self._opt._strategy_reduction = False
        try:
            return self._opt.compute_gradients(loss, var_list=var_list, **kwargs)
        finally:
            self._opt._strategy_reduction = prev

    def apply_gradients(self, grads_and_vars: Any, global_step: Any = None, name: str | None = None) -> Any:
        """Sum every gradient over the replicas (``cross_replica_sum`` with
        ``group_assignment``), then apply the sums with the wrapped optimizer."""
        where = util.context()
        if where == "replicate":
            raise NotImplementedError(util.BARE_REPLICATE.format(what="CrossShardOptimizer.apply_gradients"))
        if where == "run" and in_cross_replica_context():
            raise RuntimeError("Use `_distributed_apply()` instead of `apply_gradients()` in a cross-replica context.")
        summed_grads_and_vars = []
        for grad, var in grads_and_vars:
            if grad is None or where == "eager":
                # Eagerly there is one shard (compute_gradients warned "Assuming
                # 1."): its sum is the gradient.  cross_replica_sum itself
                # refuses eager calls, as TF's op (no kernel outside a TPU
                # computation), which would fail this apply in TF.
                summed_grads_and_vars.append((grad, var))
            else:
                summed_grads_and_vars.append((cross_replica_sum(grad, self._group_assignment), var))
        if where == "run":
            # Every replica applies its sums as they are (merge context: the
            # mirrored variables take them without another reduction).
            return get_replica_context().merge_call(
                lambda _strategy: self._opt._apply_local(summed_grads_and_vars, global_step, name)
            )
        return self._opt.apply_gradients(summed_grads_and_vars, global_step, name)

    def get_slot(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped optimizer's ``get_slot``."""
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args: Any, **kwargs: Any) -> list[str]:
        """The wrapped optimizer's ``get_slot_names``."""
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self) -> list[Any]:
        """The wrapped optimizer's variables."""
        return self._opt.variables()


__all__ = ["CrossShardOptimizer", "replicate", "outside_compilation", "cross_replica_sum"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
