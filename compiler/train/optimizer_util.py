"""What the TF 1 (``xtpu.train``) and TF 2 (``xtpu.optimizers``) optimizers share.

Where an optimizer runs
-----------------------
``context()`` tells the three places apart:

* ``"eager"``: no replicated computation; variables are updated in place
  (numpy);
* ``"run"``: inside ``strategy.run`` (the step being traced); updates are
  traced into the replicated program and written to the (mirrored)
  variables when the program returns;
* ``"replicate"``: inside a bare ``xtpu.replicate``, where an
  ``xtpu.Variable`` is a value fixed when the computation is traced and
  cannot be written from the devices: optimizers refuse to apply updates
  there (:data:`BARE_REPLICATE`).

Slot variables
--------------
``xtpu.Variable`` refuses creation inside a traced computation.  Optimizers
therefore create their slot variables (momentum, Adam's m and v, TF 1's beta
power accumulators, TF 2's ``iterations``) outside any trace:

* eagerly, at once (the first ``apply_gradients``, or TF 2's ``build``);
* inside ``strategy.run``, by raising :class:`xtpu.strategy.RetraceRequest`
  the first time the step is traced: ``run`` creates them outside the trace
  (in the strategy's scope, placed like their primary variables) and traces
  the step again, now with them as inputs and outputs (TF's ``init_scope``
  followed by a retrace of the ``tf.function``).

A slot lives where its primary variable lives: mirrored in the primary's
strategy, or on the host.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, convert, current_trace, to_numpy
from xtpu.distribute.strategy import RetraceRequest, _TracedPerReplica, current_run_state, current_scope_strategy
from xtpu.distribute.values import ReduceOp, VariableAggregation
from xtpu.distribute.variables import Variable
from xtpu.ops.math_ops import cast

logger = logging.getLogger("xtpu")

BARE_REPLICATE = (
    "{what} inside xtpu.replicate: xtpu.Variables are updated on the devices only by computations that "
    "strategy.run runs (variables created in strategy.scope() are mirrored, passed in and written back); "
    "inside a bare xtpu.replicate a variable is a value fixed when the computation is traced. Run the step "
    "with xtpu.TPUStrategy.run, or return the gradients and update the variables outside"
)

SLOT_SCOPE_MISMATCH = (
    "Trying to create optimizer slot variable under the scope for tf.distribute.Strategy ({}), which is "
    "different from the scope used for the original variable ({}). Make sure the slot variables are created "
    "under the same strategy scope. This may happen if you're restoring from a checkpoint outside the scope."
)

UNSUPPORTED_VARIABLE = "Trying to optimize unsupported type {!r}: the optimizers update xtpu.Variable objects"


def context() -> str:
    """``"eager"``, ``"run"`` (tracing a step of ``strategy.run``) or
    ``"replicate"`` (tracing a bare ``xtpu.replicate``)."""
    if current_trace() is None:
        return "eager"
    return "run" if current_run_state() is not None else "replicate"


def running_strategy() -> Any:
    """The strategy whose ``run`` is being traced, or None."""
    state = current_run_state()
    return state.strategy if state is not None and current_trace() is not None else None


def num_replicas() -> int:
    """Replicas of the traced computation (1 eagerly)."""
    tr = current_trace()
    return tr.num_replicas if tr is not None else 1


def check_variable(v: Any) -> None:
    if not isinstance(v, Variable):
        raise NotImplementedError(UNSUPPORTED_VARIABLE.format(v))


def check_placement(var: Any) -> None:
    """TF's check that a slot is made under the strategy of its variable:
    the strategy in use (the running one, else the scope) must be the
    variable's, when there is one."""
    current = running_strategy() or current_scope_strategy()
    if current is not None and var._strategy is not current:
        owner = var._strategy if var._strategy is not None else "no strategy: a host variable"
        raise ValueError(SLOT_SCOPE_MISMATCH.format(current, f"{var!r} of {owner}"))


def new_variable(
    initial_value: np.ndarray, name: str, strategy: Any, aggregation: Any = None, trainable: bool = False
) -> Any:
    """A variable created outside any trace: mirrored in ``strategy`` (its
    scope), or a host variable when ``strategy`` is None."""
    if current_trace() is not None:  # pragma: no cover - guarded by the callers
        raise RuntimeError("optimizer variables are created outside the traced computation")
    agg = aggregation if aggregation is not None else VariableAggregation.NONE
    if strategy is None:
        if current_scope_strategy() is not None:
            raise ValueError(SLOT_SCOPE_MISMATCH.format(current_scope_strategy(), f"'{name}' of a host variable"))
        return Variable(initial_value, trainable=trainable, name=name, aggregation=agg)
    with strategy.scope():
        return Variable(initial_value, trainable=trainable, name=name, aggregation=agg)


def create_outside_trace(creations: list[Callable[[], None]], what: str) -> None:
    """Run ``creations`` (each makes variables) now when eager, or ask
    ``strategy.run`` to run them outside the trace and trace again.

    Raises:
      xtpu.strategy.RetraceRequest: tracing a step of ``strategy.run``.
      NotImplementedError: tracing a bare ``xtpu.replicate``.
    """
    if not creations:
        return
    where = context()

    def prepare() -> None:
        for make in creations:
            make()

    if where == "eager":
        prepare()
        return
    if where == "replicate":
        raise NotImplementedError(BARE_REPLICATE.format(what=what))

    raise RetraceRequest(prepare, f"{what} (creating optimizer slot variables)")


def hyper(value: Any, dtype: Any) -> Any:
    """A hyperparameter (number, variable, tensor or no-argument callable)
    as a scalar of ``dtype``: a numpy scalar array, or a traced tensor."""
    if callable(value) and not isinstance(value, Variable):
        value = value()
    if isinstance(value, Variable):
        value = value.read_value()
    if isinstance(value, Tensor):
        return cast(value, np.dtype(dtype).name)
    return np.asarray(np.asarray(value), dtype=dtype)


def read(var: Any) -> Any:
    """A variable's value (a traced tensor inside a replicated computation)."""
    return var.read_value()


def local(x: Any) -> Any:
    """This replica's value of a merge_call argument."""
    return x.local if isinstance(x, _TracedPerReplica) else x


def check_gradient(g: Any, var: Any = None) -> Any:
    """TF's conversion of a gradient (Python numbers become float32, as
    TF's ``convert_to_tensor``), checked against its variable's shape.

    Raises:
      TypeError: the gradient is no numeric tensor.
      ValueError: its shape is not the variable's.
    """
    if not isinstance(g, Tensor):
        try:
            arr = np.asarray(g) if isinstance(g, np.ndarray) else to_numpy(g)
            if arr.dtype == object or arr.dtype.kind in "USb":
                raise TypeError
        except (TypeError, ValueError):
            raise TypeError(f"Gradient must be convertible to a Tensor or IndexedSlices, or None: {g!r}") from None
        g = convert(arr) if current_trace() is not None else arr
    if var is not None and tuple(g.shape) != tuple(var.shape):
        raise ValueError(
            f"var and grad do not have the same shape{list(var.shape)} {list(g.shape)} (variable '{var.name}')"
        )
    return g


def filter_empty_gradients(grads_and_vars: Iterable[tuple[Any, Any]]) -> tuple[tuple[Any, Any], ...]:
    """TF's ``optimizer_utils.filter_empty_gradients``: drop pairs whose
    gradient is None, warning about them.

    Raises:
      ValueError: no variable has a gradient.
    """
    grads_and_vars = tuple(grads_and_vars)
    if not grads_and_vars:
        return grads_and_vars
    filtered = []
    vars_with_empty_grads = []
    for pair in grads_and_vars:
        try:
            grad, var = pair
        except (TypeError, ValueError):
            raise ValueError(f"grads_and_vars must hold (gradient, variable) pairs, got {pair!r}") from None
        if grad is None:
            vars_with_empty_grads.append(var)
        else:
            filtered.append((grad, var))
    if not filtered:
        names = ([getattr(v, "name", str(v)) for _, v in grads_and_vars],)
        raise ValueError(
            f"No gradients provided for any variable: {names}. Provided `grads_and_vars` is {grads_and_vars}."
        )
    if vars_with_empty_grads:
        logger.warning(
            "Gradients do not exist for variables %s when minimizing the loss. If you're using "
            "`model.compile()`, did you forget to provide a `loss` argument?",
            [getattr(v, "name", str(v)) for v in vars_with_empty_grads],
        )
    return tuple(filtered)


def batch_sum(strategy: Any, grads_and_vars: list[tuple[Any, Any]]) -> list[Any]:
    """Inside merge_fn: every gradient summed over the replicas, with one
    combined ``cross_replica_sum`` (``strategy.batch_reduce_to``)."""
    if not grads_and_vars:
        return []
    if strategy.num_replicas_in_sync == 1:
        return [local(g) for g, _ in grads_and_vars]
    return list(strategy.batch_reduce_to(ReduceOp.SUM, [(g, v) for g, v in grads_and_vars]))


class VariableList(list):
    """A list of variables that can also be called: ``opt.variables`` (Keras 3)
    and ``opt.variables()`` (TF 2's OptimizerV2) both give it."""

    def __call__(self) -> list:
        return list(self)


__all__ = ["context", "create_outside_trace", "filter_empty_gradients", "hyper", "VariableList"]
