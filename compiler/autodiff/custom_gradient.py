"""``xtpu.custom_gradient`` (TF's ``tf.custom_gradient``): a function with
its own gradient rule, traced or eager, with variables read inside it.

The call becomes one ``hlo.custom_gradient`` op whose VJP is the user's
``grad_fn`` (registered by name, :mod:`xtpu.dialects.autodiff`); variables
read inside are found by the tape's :class:`~xtpu.autodiff.tape.VariableWatcher`.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from typing import Any

from xtpu.autodiff.tape import VariableWatcher
from xtpu.core import pytree
from xtpu.core.tracing import Tensor, bind, convert
from xtpu.dialects.autodiff import CustomGradientOp, forget_rule, register_rule


def custom_gradient(f: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """Decorator for a function with its own gradient (``tf.custom_gradient``).

    ``f(*x)`` returns ``(y, grad_fn)``; ``grad_fn(*dy)`` returns the
    cotangents of ``x`` (one per input, a list or a single tensor; None for
    an input without gradient).  ``y`` may be a tensor or a nested structure
    of tensors, ``x`` nested structures of tensors (None entries are
    skipped).  When ``f`` reads trainable ``xtpu.Variable`` s it does not
    take as arguments, ``grad_fn`` must accept ``variables=`` (the variables
    read, in order) and return ``(x_grads, variable_grads)``, as in TF.
    Works traced and eagerly, on functions and methods: the result passes
    through an ``hlo.custom_gradient`` op whose gradient is ``grad_fn``.

    Raises:
      TypeError: ``f`` reads variables and ``grad_fn`` takes no
        ``variables`` keyword (TF's error).
    """
    if f is None:
        return custom_gradient
    return _CustomGradientFunction(f)


class _CustomGradientFunction:
    """``@custom_gradient`` applied to ``f``; binds like a function when
    ``f`` is a method (``self`` is not an input)."""

    def __init__(self, f: Callable[..., Any]):
        self._f = f
        functools.update_wrapper(self, f)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _call_custom_gradient(self._f, getattr(self._f, "__name__", "custom_gradient"), args, kwargs)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        bound = functools.partial(self._f, obj)
        name = getattr(self._f, "__name__", "custom_gradient")
        return functools.wraps(self._f)(lambda *a, **k: _call_custom_gradient(bound, name, a, k))


VARIABLES_KEYWORD = (
    "If using @custom_gradient with a function that uses variables, then grad_fn must accept a keyword "
    "argument 'variables'."
)


def _call_custom_gradient(f: Callable[..., Any], name: str, args: tuple, kwargs: dict) -> Any:
    leaves, args_tree = pytree.flatten(args)
    xs = [convert(a) for a in leaves]
    with VariableWatcher() as watcher:
        result, grad_fn = f(*pytree.unflatten(args_tree, xs), **kwargs)
    out_leaves, tree = pytree.flatten(result)
    ys = [convert(v) for v in out_leaves]
    # Variables read inside f (not passed in): their reads become inputs of
    # the op, so that their gradients (grad_fn's second result) flow.
    x_ids = {id(v) for v in xs}
    variables, reads = [], []
    for var, value in watcher.reads:
        if var.trainable and var not in variables and id(value) not in x_ids:
            variables.append(var)
            reads.append(value)
    if variables and not _accepts_variables(grad_fn):
        raise TypeError(VARIABLES_KEYWORD)
    rule = _CustomRule(grad_fn, name, len(xs), variables)
    key = register_rule(rule, name)
    outs = bind(CustomGradientOp, ys + xs + reads, rule=key, num_outputs=len(ys))
    _release_rule_with(outs, key)
    return pytree.unflatten(tree, list(outs))


def _accepts_variables(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "variables" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


class _CustomRule:
    """A ``grad_fn`` as the op's gradient: the cotangents of the inputs, then
    of the variables' reads."""

    def __init__(self, grad_fn: Callable[..., Any], name: str, n_inputs: int, variables: list[Any]):
        self.grad_fn = grad_fn
        self.name = name
        self.n_inputs = n_inputs
        self.variables = variables

    def __call__(self, *cotangents: Any) -> list[Any]:
        if self.variables:
            got = self.grad_fn(*cotangents, variables=list(self.variables))
            if not (isinstance(got, (tuple, list)) and len(got) == 2):
                raise ValueError(
                    f"custom_gradient '{self.name}': grad_fn was given variables and must return "
                    "(input gradients, variable gradients)"
                )
            gx, gv = got
            gv = list(gv) if isinstance(gv, (list, tuple)) else [gv]
            if len(gv) != len(self.variables):
                raise ValueError(
                    f"custom_gradient '{self.name}' returned {len(gv)} variable gradients for "
                    f"{len(self.variables)} variables"
                )
        else:
            gx, gv = self.grad_fn(*cotangents), []
        if isinstance(gx, (list, tuple)):
            gx = pytree.flatten(list(gx), is_leaf=lambda v: v is None)[0]
        else:
            gx = [gx]
        if len(gx) != self.n_inputs:
            raise ValueError(
                f"custom_gradient rule '{self.name}' returned {len(gx)} gradients for {self.n_inputs} inputs"
            )
        return gx + gv


def _release_rule_with(outs: list[Any], key: str) -> None:
    """Forget the rule with what it differentiates: the traced op (its
    module), or eagerly the op's first result (a tape that recorded the op
    holds it) -- a rule per call would otherwise live forever."""
    anchor = outs[0].value.owner if isinstance(outs[0], Tensor) else outs[0]
    try:
        weakref.finalize(anchor, forget_rule, key)
    except TypeError:  # not weakly referenceable: keep the rule
        pass


__all__ = ["custom_gradient"]
