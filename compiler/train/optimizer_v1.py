"""``xtpu.train``: TF 1's optimizers (``tf.compat.v1.train``).

``GradientDescentOptimizer``, ``MomentumOptimizer`` and ``AdamOptimizer``
with TF 1's ``compute_gradients`` / ``apply_gradients`` / ``minimize``,
``get_slot``, ``get_slot_names`` and ``variables``.

Where they run (see :mod:`xtpu.optimizer_util`):

* eagerly, ``loss`` must be a callable (TF 1's eager rule); gradients come
  from a ``GradientTape`` and the variables are updated in place;
* inside ``strategy.run`` (TF 1's DistributionStrategy path): gradients come
  from ``xtpu.gradients`` (or a tape for a callable loss); ``compute_gradients``
  scales the loss by ``1 / num_replicas_in_sync`` (TF's ``_scale_loss``
  for a MEAN loss reduction, the only one xtpu's losses report), and
  ``apply_gradients`` does a ``merge_call`` that sums the gradients over the
  replicas (one ``cross_replica_sum``) and applies the same update on every
  replica: the mirrored variables stay identical.  Wrapped in
  ``xtpu.tpu.CrossShardOptimizer`` the optimizer instead applies the
  cross-shard sums as they are (TPUEstimator's replicated model);
* inside a bare ``xtpu.replicate`` variables cannot be written:
  ``apply_gradients`` raises NotImplementedError.

Slot variables are created outside the trace (eagerly, or by a retrace of
the first ``strategy.run`` step; see :mod:`xtpu.optimizer_util`), placed like
their primary variable.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from xtpu.autodiff.gradients import gradients
from xtpu.autodiff.tape import GradientTape
from xtpu.core import pytree
from xtpu.core.tracing import Tensor, current_trace
from xtpu.distribute.strategy import (
    current_scope_strategy,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)
from xtpu.distribute.values import VariableAggregation
from xtpu.distribute.variables import Variable
from xtpu.ops.math_ops import cast, sqrt
from xtpu.train import optimizer_util as util

VALID_DTYPES = ("float32", "float64")


def _dtype_name(x: Any) -> str:
    if isinstance(x, Tensor):
        return x.dtype
    if isinstance(x, Variable):
        return np.dtype(x.dtype).name
    return np.asarray(x).dtype.name


def _flatten(var_list: Any) -> list[Any]:
    return list(pytree.flatten(var_list)[0])


class Optimizer:
    """Base class of TF 1's optimizers (``tf.compat.v1.train.Optimizer``).

    Subclasses define the update of one variable (``_apply_dense``), the
    zero-initialised slots each variable needs (``_slot_names``), the
    non-slot variables (``_non_slot_initial_values``), and optionally
    ``_prepare`` and ``_finish``.

    Args:
      use_locking: accepted for TF compatibility (updates are never racy here).
      name: the optimizer's name (slot variables are named ``var/name``).

    Raises:
      ValueError: an empty name.
    """

    GATE_NONE = 0
    GATE_OP = 1
    GATE_GRAPH = 2

    def __init__(self, use_locking: bool, name: str):
        if not name:
            raise ValueError("Must specify the optimizer name")
        self._use_locking = use_locking
        self._name = name
        # slot name -> {primary variable: slot variable}
        self._slots: dict[str, dict[Any, Any]] = {}
        self._non_slot_dict: dict[str, Any] = {}
        # False inside CrossShardOptimizer: it does the cross-replica work.
        self._strategy_reduction = True

    def get_name(self) -> str:
        return self._name

    # -- gradients ----------------------------------------------------------
    def minimize(
        self,
        loss: Any,
        global_step: Any = None,
        var_list: Any = None,
        gate_gradients: int = GATE_OP,
        aggregation_method: Any = None,
        colocate_gradients_with_ops: bool = False,
        name: str | None = None,
        grad_loss: Any = None,
    ) -> Any:
        """``compute_gradients`` then ``apply_gradients``.

        Raises:
          ValueError: no variable has a gradient ("No gradients provided for
            any variable, ...").
        """
        grads_and_vars = self.compute_gradients(
            loss,
            var_list=var_list,
            gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops,
            grad_loss=grad_loss,
        )
        vars_with_grad = [v for g, v in grads_and_vars if g is not None]
        if not vars_with_grad:
            raise ValueError(
                "No gradients provided for any variable, check your graph for ops that do not support gradients, "
                f"between variables {[str(v) for _, v in grads_and_vars]} and loss {loss}."
            )
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def compute_gradients(
        self,
        loss: Any,
        var_list: Any = None,
        gate_gradients: int = GATE_OP,
        aggregation_method: Any = None,
        colocate_gradients_with_ops: bool = False,
        grad_loss: Any = None,
    ) -> list[tuple[Any, Any]]:
        """Gradients of ``loss`` for the variables of ``var_list``
        (``tf.compat.v1.train.Optimizer.compute_gradients``).

        Args:
          loss: a traced scalar tensor, or a callable with no arguments that
            computes it (required eagerly).
          var_list: variables; default: the trainable variables the
            computation has read (for a callable loss: the ones it read).
          gate_gradients: ``GATE_NONE``, ``GATE_OP`` or ``GATE_GRAPH``.
          aggregation_method, colocate_gradients_with_ops, grad_loss: as
            ``xtpu.gradients`` (``grad_loss`` is the gradient of ``loss``).

        Returns:
          A list of ``(gradient, variable)`` pairs; a gradient may be None.

        Raises:
          RuntimeError: eagerly with a loss that is not callable.
          ValueError: a bad ``gate_gradients``; a loss or variable that is
            not float; no variables to optimize.
          NotImplementedError: ``var_list`` holds something other than
            ``xtpu.Variable`` s.
        """
        return self._compute_gradients(
            loss, var_list, gate_gradients, aggregation_method, colocate_gradients_with_ops, grad_loss
        )

    def _compute_gradients(
        self, loss, var_list, gate_gradients, aggregation_method, colocate_gradients_with_ops, grad_loss
    ):
        if callable(loss) and not isinstance(loss, Tensor):
            with GradientTape() as tape:
                if var_list is not None:
                    var_list = _flatten(var_list)
                    for v in var_list:
                        util.check_variable(v)
                    tape.watch(var_list)
                loss_value = loss()
                loss_value = self._scale_loss(loss_value)
            if var_list is None:
                var_list = list(tape.watched_variables())
            if not var_list:
                raise ValueError("No variables to optimize.")
            grads = tape.gradient(loss_value, var_list, grad_loss)
            return list(zip(grads, var_list))
        tr = current_trace()
        if tr is None:
            raise RuntimeError(
                "`loss` passed to Optimizer.compute_gradients should be a function when eager execution is enabled."
            )
        loss = self._scale_loss(loss)
        if gate_gradients not in (Optimizer.GATE_NONE, Optimizer.GATE_OP, Optimizer.GATE_GRAPH):
            raise ValueError(
                "gate_gradients must be one of: Optimizer.GATE_NONE, Optimizer.GATE_OP, Optimizer.GATE_GRAPH.  "
                f"Not {gate_gradients}"
            )
        self._assert_valid_dtypes([loss], "loss")
        if grad_loss is not None:
            self._assert_valid_dtypes([grad_loss], "grad_loss")
        if var_list is None:
            var_list = [v for v in tr.variable_reads if v.trainable]
        else:
            var_list = _flatten(var_list)
        for v in var_list:
            util.check_variable(v)
        if not var_list:
            raise ValueError("No variables to optimize.")
        grads = gradients(
            loss,
            var_list,
            grad_ys=grad_loss,
            gate_gradients=(gate_gradients == Optimizer.GATE_OP),
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops,
        )
        grads_and_vars = list(zip(grads, var_list))
        self._assert_valid_dtypes([v for g, v in grads_and_vars if g is not None], "variable")
        return grads_and_vars

    def _scale_loss(self, loss_value: Any) -> Any:
        """TF 1 under a strategy with several replicas divides the loss by
        their number (a MEAN loss reduction), so that summing the replicas'
        gradients averages them."""
        if not self._strategy_reduction or not has_strategy():
            return loss_value
        n = get_strategy().num_replicas_in_sync
        if n > 1:
            loss_value = loss_value * (1.0 / n)
        return loss_value

    @staticmethod
    def _assert_valid_dtypes(tensors: list[Any], what: str) -> None:
        for t in tensors:
            dtype = _dtype_name(t)
            if dtype not in VALID_DTYPES:
                name = getattr(t, "name", what)
                raise ValueError(f"Invalid type {dtype!r} for {name}, expected: {list(VALID_DTYPES)}.")

    # -- applying -------------------------------------------------------------
    def apply_gradients(self, grads_and_vars: Any, global_step: Any = None, name: str | None = None) -> None:
        """Apply gradients to variables (``tf.compat.v1.train.Optimizer.apply_gradients``).

        Pairs with a None gradient are skipped.  Inside ``strategy.run`` the
        gradients are summed over the replicas first (a ``merge_call``) and
        every replica applies the same update.

        Args:
          grads_and_vars: ``(gradient, variable)`` pairs.
          global_step: an integer variable incremented by one after the update.
          name: accepted for TF compatibility.

        Raises:
          ValueError: no pairs ("No variables provided."); no gradient at all.
          TypeError: a gradient that is no tensor.
          RuntimeError: in a strategy's cross-replica context (its scope,
            outside ``run``).
          NotImplementedError: inside a bare ``xtpu.replicate``; a variable
            that is not an ``xtpu.Variable``.
        """
        where = util.context()
        if where == "replicate":
            raise NotImplementedError(util.BARE_REPLICATE.format(what=f"{type(self).__name__}.apply_gradients"))
        if has_strategy():
            if in_cross_replica_context():
                raise RuntimeError(
                    "Use `_distributed_apply()` instead of `apply_gradients()` in a cross-replica context."
                )
            grads_and_vars = self._filtered(grads_and_vars)
            return get_replica_context().merge_call(self._distributed_apply, args=(grads_and_vars, global_step, name))
        return self._apply_local(grads_and_vars, global_step, name)

    @staticmethod
    def _filtered(grads_and_vars: Any) -> list[tuple[Any, Any]]:
        """TF's ``get_filtered_grad_fn``: drop None gradients (with a warning)."""
        pairs = list(grads_and_vars)
        if not pairs:
            raise ValueError("No variables provided.")
        for _, v in pairs:
            util.check_variable(v)
        return [(util.check_gradient(g, v), v) for g, v in util.filter_empty_gradients(pairs)]

    def _distributed_apply(
        self, distribution: Any, grads_and_vars: Any, global_step: Any = None, name: str | None = None
    ) -> None:
        """The cross-replica part of ``apply_gradients`` (merge_fn): sum the
        gradients over the replicas, then update every replica alike."""
        pairs = list(grads_and_vars)
        reduced = util.batch_sum(distribution, pairs)
        return self._apply_updates(list(zip(reduced, [v for _, v in pairs])), global_step)

    def _apply_local(self, grads_and_vars: Any, global_step: Any = None, name: str | None = None) -> None:
        """``apply_gradients`` without a strategy: the gradients as given."""
        pairs = tuple(grads_and_vars)
        if not pairs:
            raise ValueError("No variables provided.")
        converted = []
        for pair in pairs:
            try:
                g, v = pair
            except (TypeError, ValueError):
                raise TypeError(f"grads_and_vars must hold (gradient, variable) pairs, got {pair!r}") from None
            util.check_variable(v)
            if g is not None:
                g = util.check_gradient(g, v)
            converted.append((g, v))
        if not [v for g, v in converted if g is not None]:
            raise ValueError(f"No gradients provided for any variable: {([str(v) for _, v in converted],)}.")
        return self._apply_updates(converted, global_step)

    def _apply_updates(self, grads_and_vars: list[tuple[Any, Any]], global_step: Any) -> None:
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        self._ensure_slots([v for _, v in pairs])
        self._prepare()
        for g, v in pairs:
            self._apply_dense(g, v)
        self._finish()
        if global_step is not None:
            global_step.assign_add(1)
        return None

    # -- slots ----------------------------------------------------------------
    def _slot_names(self) -> tuple[str, ...]:
        """The zero-initialised slots every variable gets."""
        return ()

    def _non_slot_initial_values(self) -> dict[str, Any]:
        """Non-slot variables (one per optimizer) and their initial values."""
        return {}

    def _ensure_slots(self, var_list: list[Any]) -> None:
        """Create the missing slot and non-slot variables of ``var_list``,
        outside any trace (see :mod:`xtpu.optimizer_util`)."""
        creations = []
        pending: set = set()
        for v in var_list:
            for slot in self._slot_names():
                if v in self._slots.get(slot, {}) or (slot, id(v)) in pending:
                    continue
                util.check_placement(v)
                pending.add((slot, id(v)))
                creations.append(lambda v=v, slot=slot: self._make_slot(v, slot))
        missing = [n for n in self._non_slot_initial_values() if n not in self._non_slot_dict]
        if missing and var_list:
            first = min(var_list, key=lambda x: x.name)
            util.check_placement(first)
            for n in missing:
                creations.append(lambda n=n, first=first: self._make_non_slot(n, first))
        util.create_outside_trace(creations, f"{type(self).__name__}.apply_gradients")

    def _make_slot(self, var: Any, slot: str) -> None:
        """A zeros slot named like TF 1's: ``var/<optimizer name>``, then
        ``_1``, ``_2``, ... for the further slots of the same variable."""
        table = self._slots.setdefault(slot, {})
        if var in table:
            return
        i = self._slot_names().index(slot)
        name = f"{var.name}/{self._name}" + (f"_{i}" if i else "")
        table[var] = util.new_variable(np.zeros(var.shape, dtype=var.dtype), name, var._strategy)

    def _make_non_slot(self, name: str, colocate_with: Any) -> None:
        if name in self._non_slot_dict:
            return
        value = np.asarray(self._non_slot_initial_values()[name], dtype=np.float32)
        self._non_slot_dict[name] = util.new_variable(value, name, colocate_with._strategy)

    def _get_non_slot_variable(self, name: str) -> Any:
        return self._non_slot_dict.get(name)

    def get_slot(self, var: Any, name: str) -> Any:
        """The slot ``name`` of ``var``, or None when there is none."""
        return self._slots.get(name, {}).get(var)

    def get_slot_names(self) -> list[str]:
        """The names of the slots this optimizer creates, sorted."""
        return sorted(self._slot_names())

    def variables(self) -> list[Any]:
        """The optimizer's variables (slots and non-slot ones), sorted by name."""
        out = list(self._non_slot_dict.values())
        for table in self._slots.values():
            out.extend(table.values())
        return sorted(out, key=lambda v: v.name)

    # -- the update (subclasses) ----------------------------------------------
    def _prepare(self) -> None:
        return

    def _finish(self) -> None:
        return

    def _apply_dense(self, grad: Any, var: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<xtpu.train.{type(self).__name__} '{self._name}'>"


class GradientDescentOptimizer(Optimizer):
    """Gradient descent (``tf.compat.v1.train.GradientDescentOptimizer``):
    ``var -= learning_rate * grad``.

    Args:
      learning_rate: a float, a variable or tensor, or a callable returning one.
    """

    def __init__(self, learning_rate: Any, use_locking: bool = False, name: str = "GradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _apply_dense(self, grad: Any, var: Any) -> None:
        lr = util.hyper(self._learning_rate, var.dtype)
        var.assign_sub(lr * grad)


class MomentumOptimizer(Optimizer):
    """Momentum (``tf.compat.v1.train.MomentumOptimizer``, TF's
    ``ApplyMomentum`` kernel)::

        accum = accum * momentum + grad
        var -= lr * accum                                  # use_nesterov=False
        var -= lr * grad + lr * momentum * accum           # use_nesterov=True

    The slot is named ``"momentum"``.
    """

    def __init__(
        self,
        learning_rate: Any,
        momentum: Any,
        use_locking: bool = False,
        name: str = "Momentum",
        use_nesterov: bool = False,
    ):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._momentum = momentum
        self._use_nesterov = use_nesterov

    def _slot_names(self) -> tuple[str, ...]:
        return ("momentum",)

    def _apply_dense(self, grad: Any, var: Any) -> None:
        lr = util.hyper(self._learning_rate, var.dtype)
        m = util.hyper(self._momentum, var.dtype)
        accum_var = self.get_slot(var, "momentum")
        accum = util.read(accum_var) * m + grad
        accum_var.assign(accum)
        if self._use_nesterov:
            var.assign_sub(grad * lr + accum * m * lr)
        else:
            var.assign_sub(accum * lr)


class AdamOptimizer(Optimizer):
    """Adam (``tf.compat.v1.train.AdamOptimizer``), with TF 1's bias
    correction through the power accumulators ``beta1_power`` and
    ``beta2_power`` (``beta ** t`` at step ``t``)::

        lr_t = learning_rate * sqrt(1 - beta2^t) / (1 - beta1^t)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        var -= lr_t * m / (sqrt(v) + epsilon)

    Slots ``"m"`` and ``"v"``; the accumulators are non-slot variables
    placed like the first variable (by name), as in TF.
    """

    def __init__(
        self,
        learning_rate: Any = 0.001,
        beta1: Any = 0.9,
        beta2: Any = 0.999,
        epsilon: Any = 1e-08,
        use_locking: bool = False,
        name: str = "Adam",
    ):
        super().__init__(use_locking, name)
        self._lr = learning_rate
        self._beta1 = beta1
        self._beta2 = beta2
        self._epsilon = epsilon

    def _slot_names(self) -> tuple[str, ...]:
        return ("m", "v")

    def _non_slot_initial_values(self) -> dict[str, Any]:
        return {"beta1_power": self._beta1, "beta2_power": self._beta2}

    def _get_beta_accumulators(self) -> tuple[Any, Any]:
        return self._get_non_slot_variable("beta1_power"), self._get_non_slot_variable("beta2_power")

    def _prepare(self) -> None:
        # The accumulators' values for this step, read before _finish updates them.
        b1p, b2p = self._get_beta_accumulators()
        self._powers = (util.read(b1p), util.read(b2p))

    def _apply_dense(self, grad: Any, var: Any) -> None:
        dtype = var.dtype
        b1p, b2p = (cast(p, np.dtype(dtype).name) for p in self._powers)
        lr = util.hyper(self._lr, dtype)
        beta1 = util.hyper(self._beta1, dtype)
        beta2 = util.hyper(self._beta2, dtype)
        eps = util.hyper(self._epsilon, dtype)
        lr_t = lr * sqrt(1 - b2p) / (1 - b1p)
        m_var, v_var = self.get_slot(var, "m"), self.get_slot(var, "v")
        m = util.read(m_var) * beta1 + grad * (1 - beta1)
        v = util.read(v_var) * beta2 + (grad * grad) * (1 - beta2)
        m_var.assign(m)
        v_var.assign(v)
        var.assign_sub(lr_t * m / (sqrt(v) + eps))

    def _finish(self) -> None:
        b1p, b2p = self._get_beta_accumulators()
        p1, p2 = self._powers
        b1p.assign(p1 * util.hyper(self._beta1, np.float32))
        b2p.assign(p2 * util.hyper(self._beta2, np.float32))
        self._powers = None


# --------------------------------------------------------------------------
# The global step
# --------------------------------------------------------------------------

# strategy -> its global step; the host's is _host_step[0]
_global_steps: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_host_step: list[Any] = [None]


def get_global_step() -> Any:
    """The global step variable of the current strategy scope (or the
    host's), or None (``tf.compat.v1.train.get_global_step``)."""
    strategy = current_scope_strategy()
    return _host_step[0] if strategy is None else _global_steps.get(strategy)


def create_global_step() -> Any:
    """Create the global step: a non-trainable int64 scalar variable
    ``global_step`` (mirrored inside a strategy scope)
    (``tf.compat.v1.train.create_global_step``).

    Raises:
      ValueError: it exists already; called inside a replicated computation.
    """
    if get_global_step() is not None:
        raise ValueError('"global_step" already exists.')
    step = Variable(np.int64(0), trainable=False, name="global_step", aggregation=VariableAggregation.ONLY_FIRST_TOWER)
    strategy = current_scope_strategy()
    if strategy is None:
        _host_step[0] = step
    else:
        _global_steps[strategy] = step
    return step


def get_or_create_global_step() -> Any:
    """``get_global_step()``, created first when missing
    (``tf.compat.v1.train.get_or_create_global_step``)."""
    step = get_global_step()
    return step if step is not None else create_global_step()


__all__ = [
    "Optimizer",
    "GradientDescentOptimizer",
    "MomentumOptimizer",
    "AdamOptimizer",
    "get_global_step",
    "create_global_step",
    "get_or_create_global_step",
]
