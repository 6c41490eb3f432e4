"""Ops that only mean something to the gradient engine: ``hlo.stop_gradient``
and ``hlo.custom_gradient``.

Both are identities when the program runs; they exist so that gradients,
built at trace time as ordinary ops (TF's ``gradients_util`` model), stop or
take a user rule where the user asked.  ``hlo.stop_gradient`` is TF's
``StopGradient`` op (``tf.stop_gradient``); ``hlo.custom_gradient`` is the
``IdentityN`` with a gradient override that ``tf.custom_gradient`` builds:
its operands are the function's outputs followed by its inputs, its results
are the outputs again, and its gradient calls the user's ``grad_fn`` (named
by ``rule``, a key into this process's registry of rules).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from xdsl.dialects.builtin import I64, IntegerAttr, StringAttr, TensorType
from xdsl.irdl import (
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import Pure

from xtpu.dialects import vjp_util
from xtpu.dialects.primitive import IntParam, PrimitiveOp, ShapeError, StrParam
from xtpu.dialects.tensor_spec import TensorSpec


@irdl_op_definition
class StopGradientOp(PrimitiveOp):
    """The operand unchanged; no gradient flows through it (TF's
    ``StopGradient``, ``tf.stop_gradient``)."""

    name = "hlo.stop_gradient"
    T: ClassVar = VarConstraint("T", base(TensorType))
    operand = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$operand attr-dict `:` type($result)"
    NOT_DIFFERENTIABLE: ClassVar = True

    @classmethod
    def infer(cls, specs, **_):
        (s,) = specs
        return [s]

    @classmethod
    def kernel(cls, **_):
        return lambda x: x


_rules: dict[str, Callable[..., Any]] = {}
_rules_lock = threading.Lock()
_rule_ids = itertools.count()


def register_rule(grad_fn: Callable[..., Any], label: str) -> str:
    """Keep ``grad_fn`` for ``hlo.custom_gradient`` ops; return its key."""
    key = f"{label}#{next(_rule_ids)}"
    with _rules_lock:
        _rules[key] = grad_fn
    return key


def forget_rule(key: str) -> None:
    """Drop the rule registered under ``key`` (its op is gone)."""
    with _rules_lock:
        _rules.pop(key, None)


def lookup_rule(key: str) -> Callable[..., Any]:
    """The ``grad_fn`` registered under ``key``.

    Raises:
      LookupError: no rule of that name lives in this process (a module
        parsed from text cannot carry Python gradient functions).
    """
    with _rules_lock:
        fn = _rules.get(key)
    if fn is None:
        raise LookupError(
            f"No gradient defined for operation 'hlo.custom_gradient' with rule '{key}': the rule is a Python "
            "function registered by xtpu.custom_gradient in the process that traced the program"
        )
    return fn


@irdl_op_definition
class CustomGradientOp(PrimitiveOp):
    """The first ``num_outputs`` operands unchanged, with the gradient of the
    remaining operands (the function's inputs) given by the user rule
    ``rule`` (TF's ``tf.custom_gradient``: ``IdentityN`` with a gradient
    override).  No gradient flows to the outputs' own computation."""

    name = "hlo.custom_gradient"
    values = var_operand_def(TensorType)
    rule = prop_def(StringAttr)
    num_outputs = prop_def(IntegerAttr[I64])
    outs = var_result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$rule `outputs` `=` $num_outputs `(` $values `)` attr-dict `:` functional-type($values, $outs)"
    PARAMS: ClassVar = {"rule": StrParam(), "num_outputs": IntParam()}

    @classmethod
    def infer(cls, specs, num_outputs=0, **_):
        if not 0 < num_outputs <= len(specs):
            raise ShapeError(f"num_outputs {num_outputs} must be in 1..{len(specs)} (the number of operands)")
        return list(specs[:num_outputs])

    @classmethod
    def kernel(cls, num_outputs, **_):
        def run(*xs):
            return xs[0] if num_outputs == 1 else tuple(xs[:num_outputs])

        return run

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, rule=None, num_outputs=0, **_):
        """The user's ``grad_fn(*cotangents)`` gives the inputs' cotangents."""
        b = vjp_util.builder()
        fn = lookup_rule(rule)
        n_in = len(inputs) - num_outputs
        grads = fn(*cotangents)
        leaves = list(grads) if isinstance(grads, (list, tuple)) else [grads]
        leaves, _ = b.flatten(leaves, is_leaf=lambda v: v is None)
        if len(leaves) != n_in:
            raise ValueError(f"custom_gradient rule '{rule}' returned {len(leaves)} gradients for {n_in} inputs")
        # Python numbers take their input's dtype (TF converts them).
        leaves = [
            g if g is None or b.is_tensor_like(g) else b.convert(g, b.spec_of(x).dtype)
            for g, x in zip(leaves, inputs[num_outputs:])
        ]
        return [None] * num_outputs + leaves


AUTODIFF_OPS = [StopGradientOp, CustomGradientOp]

__all__ = ["StopGradientOp", "CustomGradientOp", "AUTODIFF_OPS", "register_rule", "lookup_rule", "TensorSpec"]
