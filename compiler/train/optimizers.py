"""``xtpu.optimizers``: TF 2's Keras optimizers (``tf.keras.optimizers``).

``SGD`` and ``Adam`` with ``apply_gradients(zip(grads, vars))``,
``iterations``, ``variables``, ``get_slot`` / ``get_slot_names``, and
``build(var_list)``.  Also reachable as ``xtpu.keras.optimizers``.

Where they run (see :mod:`xtpu.optimizer_util`):

* eagerly (no replicated computation) the variables are updated in place,
  so a plain ``GradientTape`` loop works::

      with xtpu.GradientTape() as tape:
          loss = ...
      grads = tape.gradient(loss, variables)
      opt.apply_gradients(zip(grads, variables))

* inside ``strategy.run`` (replica context), as TF 2 does, the gradients are
  summed over the replicas (one combined ``cross_replica_sum``; scale the
  loss by ``1 / global_batch_size`` to average), then a ``merge_call``
  applies the same update on every replica, so mirrored variables stay
  identical; the slot variables (``momentum``, Adam's ``m`` / ``v`` /
  ``vhat``) and ``iterations`` are mirrored variables of the strategy;
* in a strategy's cross-replica context (its scope, outside ``run``)
  ``apply_gradients`` raises RuntimeError, and inside a bare
  ``xtpu.replicate`` NotImplementedError (variables cannot be written there).

Slot variables and ``iterations`` are created outside any trace: call
``build(var_list)`` eagerly, or let the first ``apply_gradients`` create
them (eagerly at once; inside ``strategy.run`` the first step is traced a
second time once they exist).  ``iterations`` lives in the strategy whose
scope the optimizer was created in, else in the strategy of the variables
it first updates, else on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.autodiff.tape import GradientTape
from xtpu.core import pytree
from xtpu.distribute.strategy import current_scope_strategy, get_replica_context, in_cross_replica_context
from xtpu.distribute.values import VariableAggregation
from xtpu.ops.math_ops import cast, maximum, pow, sqrt
from xtpu.train import optimizer_util as util

_ALLOWED_KWARGS = {"clipnorm", "clipvalue", "global_clipnorm", "lr", "decay"}


class Optimizer:
    """Base class of the TF 2 optimizers (``tf.keras.optimizers.Optimizer``).

    Subclasses name their slots (``_slot_names``, zero-initialised) and
    define the update of one variable (``_update_step``).

    Raises:
      TypeError: an unknown keyword argument.
      NotImplementedError: gradient clipping or decay arguments (not
        implemented).
    """

    def __init__(self, name: str, **kwargs: Any):
        for k in kwargs:
            if k not in _ALLOWED_KWARGS:
                raise TypeError(f"Unexpected keyword argument passed to optimizer: {k}")
            if k != "lr" and kwargs[k] is not None and not (k == "decay" and kwargs[k] == 0):
                raise NotImplementedError(f"the optimizer argument `{k}` is not implemented in xtpu")
        self._name = name
        self._strategy = current_scope_strategy()
        self._iterations: Any = None
        # slot name -> {variable: slot}
        self._slots: dict[str, dict[Any, Any]] = {}
        self._weights: list[Any] = []

    @property
    def name(self) -> str:
        return self._name

    # -- hyperparameters ------------------------------------------------------
    @property
    def learning_rate(self) -> Any:
        return self._learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._learning_rate = value

    lr = learning_rate

    def get_config(self) -> dict:
        return {"name": self._name, "learning_rate": self._learning_rate}

    # -- state ------------------------------------------------------------------
    @property
    def iterations(self) -> Any:
        """The number of steps applied: an int64 scalar variable (created
        at first use, outside any trace)."""
        if self._iterations is None:
            strategy = self._iterations_strategy([])
            util.create_outside_trace([lambda: self._make_iterations(strategy)], "optimizer.iterations")
        return self._iterations

    @iterations.setter
    def iterations(self, variable: Any) -> None:
        if self._iterations is not None:
            raise RuntimeError(
                "Cannot set `iterations` to a new Variable after the Optimizer weights have been created."
            )
        self._iterations = variable
        self._weights.insert(0, variable)

    def _make_iterations(self, strategy: Any) -> None:
        if self._iterations is None:
            self._iterations = util.new_variable(
                np.int64(0), f"{self._name}/iter", strategy, VariableAggregation.ONLY_FIRST_TOWER
            )
            self._weights.insert(0, self._iterations)

    @property
    def variables(self) -> util.VariableList:
        """The optimizer's variables: ``iterations`` then the slots, in the
        order they were created (``opt.variables`` or ``opt.variables()``)."""
        return util.VariableList(self._weights)

    def get_weights(self) -> list[np.ndarray]:
        return [v.numpy() for v in self._weights]

    def get_slot_names(self) -> list[str]:
        """The names of the slots this optimizer creates."""
        return list(self._slot_names())

    def get_slot(self, var: Any, slot_name: str) -> Any:
        """The slot variable ``slot_name`` of ``var``.

        Raises:
          KeyError: ``var`` has no such slot (yet).
        """
        table = self._slots.get(slot_name)
        if table is None or var not in table:
            raise KeyError(f"Slot variable key {slot_name} not found for variable {getattr(var, 'name', var)!r}")
        return table[var]

    def add_slot(self, var: Any, slot_name: str, initializer: Any = "zeros") -> Any:
        """The slot ``slot_name`` of ``var``, created (outside any trace, like
        ``build``) when missing, filled with ``initializer``: ``"zeros"``, a
        number, or a callable ``(shape=, dtype=)``."""
        util.check_variable(var)
        if var not in self._slots.get(slot_name, {}):
            util.check_placement(var)
            util.create_outside_trace(
                [lambda: self._make_slot(var, slot_name, initializer)], f"{type(self).__name__}.add_slot"
            )
        return self._slots[slot_name][var]

    def _slot_names(self) -> tuple[str, ...]:
        return ()

    def _make_slot(self, var: Any, slot: str, initializer: Any = "zeros") -> None:
        table = self._slots.setdefault(slot, {})
        if var in table:
            return
        if initializer == "zeros":
            value = np.zeros(var.shape, dtype=var.dtype)
        elif callable(initializer):
            value = np.asarray(initializer(shape=var.shape, dtype=var.dtype), dtype=var.dtype)
        else:
            value = np.broadcast_to(np.asarray(initializer, dtype=var.dtype), var.shape).copy()
        table[var] = util.new_variable(value, f"{var.name}/{slot}", var._strategy)
        self._weights.append(table[var])

    def _iterations_strategy(self, var_list: list[Any]) -> Any:
        if self._strategy is not None:
            return self._strategy
        running = util.running_strategy()
        if running is not None:
            return running

        if current_scope_strategy() is not None:
            return current_scope_strategy()
        for v in var_list:
            if v.mirrored:
                return v._strategy
        return None

    def build(self, var_list: Any) -> None:
        """Create ``iterations`` and the slot variables of ``var_list``
        (Keras' ``optimizer.build``).  Eagerly they are created at once;
        inside ``strategy.run`` the step is traced again once they exist.

        Raises:
          ValueError: a variable of another strategy than the one in use.
          NotImplementedError: inside a bare ``xtpu.replicate``; an entry
            that is not an ``xtpu.Variable``.
        """
        var_list = list(pytree.flatten(var_list)[0])
        for v in var_list:
            util.check_variable(v)
        running = util.running_strategy()
        if self._strategy is not None and running is not None and running is not self._strategy:
            raise ValueError(
                f"the optimizer was created in the scope of {self._strategy!r} but is used in "
                f"{running!r}.run; create it in the scope of the strategy that runs it"
            )
        creations = []
        if self._iterations is None:
            strategy = self._iterations_strategy(var_list)
            creations.append(lambda: self._make_iterations(strategy))
        for v in var_list:
            for slot in self._slot_names():
                if v not in self._slots.get(slot, {}):
                    util.check_placement(v)
                    creations.append(lambda v=v, slot=slot: self._make_slot(v, slot))
        util.create_outside_trace(creations, f"{type(self).__name__}.apply_gradients")

    # -- applying ---------------------------------------------------------------
    def apply_gradients(
        self, grads_and_vars: Any, name: str | None = None, experimental_aggregate_gradients: bool = True
    ) -> Any:
        """Apply gradients to variables (``tf.keras.optimizers.Optimizer.apply_gradients``).

        Args:
          grads_and_vars: ``(gradient, variable)`` pairs, e.g. ``zip(grads, vars)``;
            pairs with a None gradient are skipped with TF's warning
            ("Gradients do not exist for variables ...").
          name: accepted for TF compatibility.
          experimental_aggregate_gradients: inside ``strategy.run``, sum the
            gradients over the replicas first (TF 2's default); False when
            they are aggregated already.

        Returns:
          ``iterations`` (incremented).

        Raises:
          ValueError: no variable has a gradient.
          RuntimeError: in a strategy's cross-replica context.
          NotImplementedError: inside a bare ``xtpu.replicate``.
        """
        where = util.context()
        if where == "replicate":
            raise NotImplementedError(util.BARE_REPLICATE.format(what=f"{type(self).__name__}.apply_gradients"))
        grads_and_vars = util.filter_empty_gradients(grads_and_vars)
        var_list = [v for _, v in grads_and_vars]
        for v in var_list:
            util.check_variable(v)
        if not grads_and_vars:
            return None
        if in_cross_replica_context():
            raise RuntimeError(
                "`apply_gradients() cannot be called in cross-replica context. Use `tf.distribute.Strategy.run` "
                "to enter replica context. For more information, please see the docstring of "
                "`tf.distribute.get_replica_context`."
            )
        self.build(var_list)
        grads_and_vars = [(util.check_gradient(g, v), v) for g, v in grads_and_vars]
        if where == "eager":
            self._distributed_apply(None, grads_and_vars, aggregate=False)
            return self._iterations
        get_replica_context().merge_call(
            self._distributed_apply, args=(grads_and_vars,), kwargs={"aggregate": experimental_aggregate_gradients}
        )
        return self._iterations

    def minimize(self, loss: Any, var_list: Any, tape: Any = None) -> Any:
        """Compute the gradients of ``loss`` (a callable, or a tensor
        recorded by ``tape``) for ``var_list`` and apply them
        (``tf.keras.optimizers.Optimizer.minimize``)."""
        if not callable(loss) and tape is None:
            raise ValueError("`tape` is required when a `Tensor` loss is passed.")
        if callable(var_list):
            var_list = var_list()
        var_list = list(pytree.flatten(var_list)[0])
        if tape is None:
            with GradientTape() as tape:
                tape.watch(var_list)
                loss = loss()
        grads = tape.gradient(loss, var_list)
        return self.apply_gradients(zip(grads, var_list))

    def _distributed_apply(self, distribution: Any, grads_and_vars: Any, aggregate: bool = True) -> None:
        """merge_fn: sum the gradients over the replicas (when ``aggregate``),
        update every variable, count the step."""
        pairs = list(grads_and_vars)
        if aggregate and distribution is not None:
            grads = util.batch_sum(distribution, pairs)
        else:
            grads = [util.local(g) for g, _ in pairs]
        for g, (_, v) in zip(grads, pairs):
            self._update_step(g, v)
            if getattr(v, "constraint", None) is not None:  # Keras: the projection after the update
                v.assign(v.constraint(v))
        self._iterations.assign_add(1)

    def _local_step(self, dtype: Any) -> Any:
        """``iterations + 1`` as ``dtype`` (the step being applied)."""
        return cast(util.read(self._iterations) + np.int64(1), np.dtype(dtype).name)

    def _update_step(self, grad: Any, var: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<xtpu.optimizers.{type(self).__name__} '{self._name}'>"


class SGD(Optimizer):
    """Gradient descent with optional momentum (``tf.keras.optimizers.SGD``)::

        w -= learning_rate * g                              # momentum == 0
        velocity = momentum * velocity - learning_rate * g  # momentum > 0
        w += velocity                                       # nesterov=False
        w += momentum * velocity - learning_rate * g        # nesterov=True

    The velocity is the slot ``"momentum"`` (only when ``momentum > 0``).

    Raises:
      ValueError: ``momentum`` outside [0, 1].
    """

    def __init__(
        self, learning_rate: Any = 0.01, momentum: Any = 0.0, nesterov: bool = False, name: str = "SGD", **kwargs: Any
    ):
        if "lr" in kwargs:
            learning_rate = kwargs.pop("lr")
        super().__init__(name, **kwargs)
        self._learning_rate = learning_rate
        if isinstance(momentum, (int, float)) and (momentum < 0 or momentum > 1):
            raise ValueError(
                f"`momentum` must be between [0, 1]. Received: momentum={momentum} (of type {type(momentum)})."
            )
        # TF: a tensor, a callable or a positive number needs the velocity slot.
        self._momentum = not isinstance(momentum, (int, float)) or momentum > 0
        self.momentum = momentum
        self.nesterov = nesterov

    def _slot_names(self) -> tuple[str, ...]:
        return ("momentum",) if self._momentum else ()

    def get_config(self) -> dict:
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}

    def _update_step(self, grad: Any, var: Any) -> None:
        lr = util.hyper(self._learning_rate, var.dtype)
        if not self._momentum:
            var.assign_sub(grad * lr)
            return
        m = util.hyper(self.momentum, var.dtype)
        slot = self._slots["momentum"][var]
        velocity = util.read(slot) * m - grad * lr
        slot.assign(velocity)
        if self.nesterov:
            var.assign_add(velocity * m - grad * lr)
        else:
            var.assign_add(velocity)


class Adam(Optimizer):
    """Adam (``tf.keras.optimizers.Adam``)::

        t = iterations + 1
        lr_t = learning_rate * sqrt(1 - beta_2^t) / (1 - beta_1^t)
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g * g
        w -= lr_t * m / (sqrt(v) + epsilon)
        # amsgrad: vhat = max(vhat, v); w -= lr_t * m / (sqrt(vhat) + epsilon)

    Slots ``"m"``, ``"v"`` (and ``"vhat"`` with ``amsgrad``).
    """

    def __init__(
        self,
        learning_rate: Any = 0.001,
        beta_1: Any = 0.9,
        beta_2: Any = 0.999,
        epsilon: Any = 1e-7,
        amsgrad: bool = False,
        name: str = "Adam",
        **kwargs: Any,
    ):
        if "lr" in kwargs:
            learning_rate = kwargs.pop("lr")
        super().__init__(name, **kwargs)
        self._learning_rate = learning_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.amsgrad = amsgrad

    def _slot_names(self) -> tuple[str, ...]:
        return ("m", "v", "vhat") if self.amsgrad else ("m", "v")

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "amsgrad": self.amsgrad,
        }

    def _update_step(self, grad: Any, var: Any) -> None:
        dtype = var.dtype
        lr = util.hyper(self._learning_rate, dtype)
        beta_1 = util.hyper(self.beta_1, dtype)
        beta_2 = util.hyper(self.beta_2, dtype)
        eps = util.hyper(self.epsilon, dtype)
        t = self._local_step(dtype)
        lr_t = lr * sqrt(1 - pow(beta_2, t)) / (1 - pow(beta_1, t))
        m_var, v_var = self._slots["m"][var], self._slots["v"][var]
        m = util.read(m_var) * beta_1 + grad * (1 - beta_1)
        v = util.read(v_var) * beta_2 + (grad * grad) * (1 - beta_2)
        m_var.assign(m)
        v_var.assign(v)
        if self.amsgrad:
            vhat_var = self._slots["vhat"][var]
            v = maximum(util.read(vhat_var), v)
            vhat_var.assign(v)
        var.assign_sub(lr_t * m / (sqrt(v) + eps))


__all__ = ["Optimizer", "SGD", "Adam"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
