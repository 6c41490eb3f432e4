"""Mixed precision (``tf.keras.mixed_precision``): the policies and what they do.

A :class:`Policy` names two dtypes: the *variable dtype* (the dtype of the
weights and the optimizer's state) and the *compute dtype* (the dtype of the
matmuls, convolutions and activations).  ``mixed_bfloat16`` is TF's TPU
policy: float32 variables, bfloat16 compute.

What a policy does in xtpu (TF's ``AutoCastVariable`` semantics, with
xtpu's replicated computation in the place of a Keras layer's ``call``):

* a float32 trainable ``xtpu.Variable`` made in a strategy's scope while the
  global policy is mixed is an *autocast* variable: inside ``strategy.run``
  (the traced computation) an op that reads it gets its value cast to the
  compute dtype (one ``hlo.convert`` in the IR); ``read_value()`` -- what the
  optimizers read -- and every read outside the computation give float32;
* the gradient with respect to such a variable flows back through the cast
  and so arrives in float32 (``hlo.convert``'s gradient converts the
  cotangent back), and the optimizer's update and its slots stay float32;
* the inputs are the user's to cast (``xtpu.cast(x, policy.compute_dtype)``,
  as a Keras layer casts its inputs), and the loss is best computed in
  float32 (cast the logits; TF's guide does the same).

Loss scaling: float16 has 5 exponent bits (smallest normal 6.1e-5), so small
gradients underflow to zero unless the loss is scaled up first;
:class:`xtpu.train.loss_scale_optimizer.LossScaleOptimizer` does that
(TF's dynamic loss scaling).  bfloat16
has float32's 8 exponent bits (smallest normal 1.2e-38): whatever float32
can represent, bfloat16 can represent to 3 significant digits, so gradients
do not underflow and ``mixed_bfloat16`` needs no loss scaling (TF's guide:
"loss scaling is not needed with mixed_bfloat16").
"""

from __future__ import annotations

from typing import Any

_POLICIES = {
    "float32": ("float32", "float32"),
    "float64": ("float64", "float64"),
    "bfloat16": ("bfloat16", "bfloat16"),
    "float16": ("float16", "float16"),
    "mixed_bfloat16": ("bfloat16", "float32"),
    "mixed_float16": ("float16", "float32"),
    "_infer": ("float32", "float32"),
}


class Policy:
    """A dtype policy (``tf.keras.mixed_precision.Policy``).

    Args:
      name: ``"float32"``, ``"float64"``, ``"bfloat16"``, ``"float16"``,
        ``"mixed_bfloat16"`` (compute bfloat16, variables float32) or
        ``"mixed_float16"`` (compute float16, variables float32).

    Raises:
      TypeError: ``name`` is not a string.
      ValueError: an unknown policy name (TF's message).
    """

    def __init__(self, name: str):
        if isinstance(name, Policy):
            name = name.name
        if not isinstance(name, str):
            raise TypeError(f"'name' must be a string, not a {type(name).__name__}: {name!r}")
        if name not in _POLICIES:
            raise ValueError(
                f"Cannot convert value {name} to a mixed precision Policy. Valid policies include "
                "'mixed_float16', 'mixed_bfloat16', and the name of any dtype such as 'float32'."
            )
        self._name = name
        self._compute_dtype, self._variable_dtype = _POLICIES[name]

    @property
    def name(self) -> str:
        return self._name

    @property
    def compute_dtype(self) -> str:
        """The dtype of the computation: ``bfloat16`` for ``mixed_bfloat16``."""
        return self._compute_dtype

    @property
    def variable_dtype(self) -> str:
        """The dtype of the variables: ``float32`` for the mixed policies."""
        return self._variable_dtype

    @property
    def is_mixed(self) -> bool:
        return self._compute_dtype != self._variable_dtype

    def __repr__(self) -> str:
        return f'<Policy "{self._name}">'

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and other._name == self._name

    def __hash__(self) -> int:
        return hash(self._name)

    def get_config(self) -> dict:
        return {"name": self._name}


_global = [Policy("float32")]


def global_policy() -> Policy:
    """The global policy (``tf.keras.mixed_precision.global_policy``);
    ``float32`` until :func:`set_global_policy` sets another."""
    return _global[0]


def set_global_policy(policy: Any) -> None:
    """Set the global policy (``tf.keras.mixed_precision.set_global_policy``):
    a :class:`Policy`, a policy name, or None for ``float32``.  It applies to
    variables made after the call."""
    _global[0] = Policy("float32") if policy is None else (policy if isinstance(policy, Policy) else Policy(policy))


def autocast_dtype_for_new_variable(dtype: str, trainable: bool, in_strategy_scope: bool) -> str | None:
    """The compute dtype a new variable is read as inside the computation:
    the global policy's when it is mixed and the variable is a float32
    trainable one made in a strategy's scope; else None (no autocast)."""
    policy = _global[0]
    if policy.is_mixed and trainable and in_strategy_scope and dtype == policy.variable_dtype:
        return policy.compute_dtype
    return None
