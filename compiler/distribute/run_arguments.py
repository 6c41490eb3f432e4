"""Variables passed as arguments to ``strategy.run`` (TF's
``tpu_strategy._maybe_partial_apply_variables``).

TF binds a mirrored variable given as an argument of the replica function by
name (``functools.partial``), so the function receives the variable itself,
not a tensor of its value: it can ``assign`` it, and its reads see the
variable's value where the function reads it.  xtpu does the same, with
TF's errors for what cannot be bound by name.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from xtpu.core import pytree
from xtpu.distribute.variables import Variable


def _is_variable(x: Any) -> bool:
    leaves = pytree.flatten(x, is_leaf=lambda v: isinstance(v, Variable))[0]
    return bool(leaves) and isinstance(leaves[0], Variable)


def partial_apply_variables(fn: Callable, args: tuple, kwargs: dict, cache: dict) -> tuple[Callable, tuple, dict]:
    """``(fn, args, kwargs)`` with the variable arguments bound into ``fn``
    by parameter name; ``cache`` (the strategy's, which holds its step
    functions anyway) keeps one bound function per function and variables,
    so ``run``'s trace cache still hits.

    Raises:
      ValueError: a variable passed to ``*args`` or to a positional-only
        parameter, too many positional arguments, with or without variables
        (TF's messages, tpu_strategy.py).
    """
    kwargs = dict(kwargs or {})
    args = tuple(args)
    var_kwargs = {k: v for k, v in kwargs.items() if _is_variable(v)}
    has_variables = bool(var_kwargs) or any(_is_variable(a) for a in args)
    nonvar_kwargs = {k: v for k, v in kwargs.items() if k not in var_kwargs}
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return fn, args, kwargs
    names, star_index = [], None
    for i, p in enumerate(params):
        if p.kind == p.POSITIONAL_OR_KEYWORD:
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            star_index = i
        elif p.kind == p.POSITIONAL_ONLY:
            if not has_variables:
                return fn, args, kwargs  # TF returns here too: nothing to bind, no count check
            raise ValueError(
                "Mixing Variables and positional-only parameters not supported by TPUStrategy. Received "
                f"{len(var_kwargs)} DistributedVariables in **kwargs and {sum(_is_variable(a) for a in args)} in "
                "*args, expected zero for both."
            )
    star_args, seen_var = [], False
    for i, a in enumerate(args):
        in_star = star_index is not None and i >= star_index
        if _is_variable(a):
            if in_star:
                raise ValueError(
                    "TPUStrategy.run() cannot handle Variables passed to *args. Either name the function "
                    "argument, or capture the Variable implicitly."
                )
            seen_var = True
        elif in_star:
            if seen_var:
                raise ValueError(
                    "TPUStrategy.run() cannot handle both Variables and a mix of positional args and "
                    "*args. Either remove the *args, or capture the Variable implicitly."
                )
            star_args.append(a)
            continue
        if len(names) <= i:
            # Also without variables (TF checks every argument; issue 25).
            raise ValueError("Too many positional arguments passed to call to TPUStrategy.run().")
        (var_kwargs if _is_variable(a) else nonvar_kwargs)[names[i]] = a
    if not var_kwargs:
        return fn, args, kwargs
    key = (fn, tuple(sorted((k, id(v)) for k, v in var_kwargs.items())))
    bound = cache.get(key)
    if bound is None:
        bound = cache[key] = functools.partial(fn, **var_kwargs)
    return bound, tuple(star_args), nonvar_kwargs


__all__ = ["partial_apply_variables"]
