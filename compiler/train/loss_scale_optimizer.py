"""TF's ``tf.keras.mixed_precision.LossScaleOptimizer``: dynamic loss
scaling for ``mixed_float16`` (see :mod:`xtpu.distribute.mixed_precision`
for why ``mixed_bfloat16`` needs none)."""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.tracing import convert
from xtpu.distribute.strategy import get_replica_context
from xtpu.distribute.values import VariableAggregation
from xtpu.ops import math_ops as m
from xtpu.ops.construction_ops import zeros_like
from xtpu.ops.control_flow import cond
from xtpu.ops.gather_ops import where
from xtpu.ops.math_ops import cast, reduce_min
from xtpu.train import optimizer_util as util
from xtpu.train.optimizers import Optimizer


class LossScaleOptimizer:
    """Dynamic loss scaling around an optimizer
    (``tf.keras.mixed_precision.LossScaleOptimizer``), for ``mixed_float16``.

    ``get_scaled_loss(loss)`` multiplies the loss by the current scale;
    ``get_unscaled_gradients(grads)`` divides the gradients by it;
    ``apply_gradients`` applies them with the inner optimizer when every
    gradient (of every replica) is finite, and otherwise skips the step and
    halves the scale; after ``dynamic_growth_steps`` finite steps in a row
    the scale doubles (TF's ``DynamicLossScale``).  With ``dynamic=False`` the
    scale stays ``initial_scale`` and every step is applied.

    Args:
      inner_optimizer: an ``xtpu.optimizers`` optimizer.
      dynamic: dynamic (default) or fixed loss scale.
      initial_scale: the first scale (TF's default 2**15).
      dynamic_growth_steps: finite steps before the scale doubles (2000).

    Raises:
      TypeError: ``inner_optimizer`` is not an ``xtpu.optimizers.Optimizer``.
    """

    def __init__(
        self,
        inner_optimizer: Any,
        dynamic: bool = True,
        initial_scale: float | None = None,
        dynamic_growth_steps: int | None = None,
    ):
        if not isinstance(inner_optimizer, Optimizer):
            raise TypeError(
                f'"inner_optimizer" must be an instance of `tf.keras.optimizers.Optimizer`, but got: {inner_optimizer}'
            )
        self.inner_optimizer = inner_optimizer
        self.dynamic = bool(dynamic)
        self.initial_scale = float(2**15 if initial_scale is None else initial_scale)
        self.dynamic_growth_steps = int(2000 if dynamic_growth_steps is None else dynamic_growth_steps)
        self._scale: Any = None
        self._good_steps: Any = None

    def _variables(self) -> None:
        if self._scale is None:
            strategy = self.inner_optimizer._strategy

            def make():
                self._scale = util.new_variable(
                    np.float32(self.initial_scale), "loss_scale", strategy, VariableAggregation.ONLY_FIRST_TOWER
                )
                self._good_steps = util.new_variable(
                    np.int64(0), "good_steps", strategy, VariableAggregation.ONLY_FIRST_TOWER
                )

            util.create_outside_trace([make], "LossScaleOptimizer.loss_scale")

    @property
    def loss_scale(self) -> Any:
        """The current loss scale, a float32 scalar variable."""
        self._variables()
        return self._scale

    @property
    def iterations(self) -> Any:
        return self.inner_optimizer.iterations

    @property
    def learning_rate(self) -> Any:
        return self.inner_optimizer.learning_rate

    def get_scaled_loss(self, loss: Any) -> Any:
        """``loss * loss_scale`` (in the loss's dtype)."""
        self._variables()
        loss = convert(loss)
        return loss * cast(self._scale.read_value(), loss.dtype)

    def get_unscaled_gradients(self, grads: Any) -> list:
        """Each gradient divided by ``loss_scale`` (None stays None)."""
        self._variables()
        inv = 1.0 / self._scale.read_value()
        out = []
        for g in grads:
            if g is None:
                out.append(None)
                continue
            g = convert(g)
            out.append(g * cast(inv, g.dtype))
        return out

    def apply_gradients(self, grads_and_vars: Any, name: str | None = None, **kwargs: Any) -> Any:
        """Apply the (unscaled) gradients when all are finite on every
        replica; update the dynamic scale (see the class docstring)."""
        self._variables()
        pairs = [(g, v) for g, v in grads_and_vars]
        if not self.dynamic:
            return self.inner_optimizer.apply_gradients(pairs, name, **kwargs)
        # finite: x - x is 0 for a finite x and NaN for inf and NaN
        flags = [reduce_min(cast(m.equal(g - g, 0), "float32")) for g, _ in pairs if g is not None]
        finite = flags[0]
        for f in flags[1:]:
            finite = m.minimum(finite, f)
        bad = np.float32(1.0) - finite  # 1 on a replica with a non-finite gradient
        ctx = get_replica_context()
        if ctx is not None:
            bad = ctx.all_reduce("sum", bad)
        ok = m.less(bad, np.float32(0.5))
        safe = [(None if g is None else xtpu_where(ok, g, zeros_like(g)), v) for g, v in pairs]

        def apply():
            self.inner_optimizer.apply_gradients(safe, name, **kwargs)
            return np.int64(0)

        cond(ok, apply, lambda: np.int64(0))
        good = self._good_steps.read_value()
        grow = m.logical_and(ok, good + 1 >= self.dynamic_growth_steps)
        scale = self._scale.read_value()
        new_scale = m.maximum(
            np.float32(1.0),
            xtpu_where(ok, xtpu_where(grow, scale * np.float32(2.0), scale), scale * np.float32(0.5)),
        )
        self._scale.assign(new_scale)
        self._good_steps.assign(xtpu_where(ok, xtpu_where(grow, np.int64(0), good + 1), np.int64(0)))
        return self.inner_optimizer.iterations


def xtpu_where(pred: Any, a: Any, b: Any) -> Any:
    """``pred ? a : b`` on scalars (``tf.where``)."""
    return where(pred, a, b)
