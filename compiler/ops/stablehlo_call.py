"""StableHLO programs run inside xtpu: ``call_stablehlo`` and ``from_jax``.

TF's ``XlaCallModule`` idea: a StableHLO module's ``@main`` (and every
function it calls) is inlined as xtpu ops where it is called, so xtpu's
passes, gradients (``GradientTape``), partitioner and runtime treat them as
their own.  Outside a replicated computation the ops run eagerly on numpy.
The conversion is the table of :mod:`xtpu.passes.stablehlo_table`; the ops
are bound through xtpu's tracer (:func:`xtpu.core.tracing.bind`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xtpu.core.tracing import bind, convert, read_if_variable, spec_of
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.ops.control_flow import cond, while_loop
from xtpu.ops.switch_case import switch_case
from xtpu.passes.stablehlo_import import Importer, Sink, StableHLOImportError, parse

__all__ = ["call_stablehlo", "from_jax", "StableHLOImportError"]


class _TracerSink(Sink):
    """Binds the imported ops with xtpu's tracer: eagerly, traced, taped."""

    def bind(self, cls, operands, **params):
        return bind(cls, list(operands), **params)

    def spec(self, value):
        return spec_of(value)

    def if_(self, pred, true_fn, false_fn):
        return list(cond(pred, lambda: tuple(true_fn()), lambda: tuple(false_fn())))

    def while_(self, cond_fn, body_fn, init, maximum_iterations=None):
        return list(
            while_loop(
                lambda *v: cond_fn(*v),
                lambda *v: tuple(body_fn(*v)),
                list(init),
                maximum_iterations=maximum_iterations,
            )
        )

    def switch(self, index, branches):
        """``xtpu.switch_case``: an index out of range runs the last branch,
        as StableHLO's ``case`` does."""
        return list(switch_case(index, [lambda b=b: tuple(b()) for b in branches]))


_SINK = _TracerSink()
_PARSED_LOCK = threading.Lock()
_PARSED: dict[Any, tuple[Any, Any]] = {}


def _parsed(module: str | bytes) -> tuple[Any, Any]:
    with _PARSED_LOCK:
        got = _PARSED.get(module)
    if got is None:
        got = parse(module)
        Importer(got[0], _SINK, got[1]).check()
        with _PARSED_LOCK:
            if len(_PARSED) > 64:
                _PARSED.clear()
            _PARSED[module] = got
    return got


def call_stablehlo(module: str | bytes, *args: Any) -> Any:
    """Run StableHLO ``module``'s ``@main`` on ``args`` as xtpu ops.

    Inside a replicated computation (``xtpu.replicate``, ``strategy.run``,
    ``xtpu.function``) the ops are traced into it; outside, they run
    eagerly.  ``GradientTape`` differentiates through them with xtpu's
    gradient rules.  ``mhlo.sharding`` annotations on ``@main``'s arguments
    and ``custom_call @Sharding`` become ``tpu.sharding_constraint``.

    Args:
      module: the module as text (MLIR's custom or generic form) or MLIR
        bytecode.
      *args: one tensor per argument of ``@main``, of its shape and dtype.

    Returns:
      ``@main``'s result, or a tuple of its results when it has several.

    Raises:
      StableHLOImportError: an op or a type xtpu cannot import, named with
        its location (an unknown op, a ``custom_call``, a variadic reduce,
        bf16, ...); raised before anything runs.
      ValueError: ``args`` do not match ``@main``'s arguments.
    """
    parsed, locations = _parsed(module)
    imp = Importer(parsed, _SINK, locations)
    main = imp.funcs.get("main")
    if main is None:
        raise StableHLOImportError("the module has no function @main")
    want = [a.type for a in main.body.block.args]
    if len(args) != len(want):
        raise ValueError(f"call_stablehlo: @main takes {len(want)} arguments, got {len(args)}")
    values = []
    for i, (a, t) in enumerate(zip(args, want)):
        spec = TensorSpec.of_type(t)
        a = read_if_variable(a)
        a = convert(a, spec.dtype) if not hasattr(a, "shape") else a
        if spec_of(a) != spec:
            raise ValueError(f"call_stablehlo: argument {i} of @main must be {spec}, got {spec_of(a)}")
        values.append(a)
    for i, text in enumerate(imp.argument_shardings()):
        if text is not None:
            values[i] = _SINK.sharding(values[i], text)
    out = imp.call("main", values)
    return out[0] if len(out) == 1 else tuple(out)


def from_jax(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A function that runs JAX function ``fn`` as xtpu ops.

    Each call lowers ``fn`` with JAX (``jax.jit(fn).lower``, 64-bit types
    kept) for the shapes and dtypes of its arguments (once per signature)
    and calls the StableHLO module with :func:`call_stablehlo`.  Arguments
    and results are pytrees as JAX's; leaves are xtpu tensors or numpy
    arrays.

    Raises:
      StableHLOImportError: JAX's program uses an op xtpu cannot import
        (named, with JAX's location of it).
    """
    cache: dict[Any, tuple[str, Any]] = {}
    lock = threading.Lock()

    def lowered(treedef, specs: Sequence[Any]) -> tuple[str, Any]:
        import jax

        key = (treedef, tuple(specs))
        with lock:
            got = cache.get(key)
        if got is not None:
            return got
        with jax.enable_x64(True):
            structs = [jax.ShapeDtypeStruct(s.shape, np.dtype(s.dtype)) for s in specs]

            def flat_fn(*leaves):
                return fn(*jax.tree_util.tree_unflatten(treedef, leaves))

            low = jax.jit(flat_fn, keep_unused=True).lower(*structs)
            text = low.as_text(debug_info=True)
            out_tree = low.out_tree
        got = (text, out_tree)
        with lock:
            cache[key] = got
        return got

    def wrapped(*args: Any) -> Any:
        import jax

        leaves, treedef = jax.tree_util.tree_flatten(args, is_leaf=lambda x: x is None)
        leaves = [read_if_variable(x) for x in leaves]  # a variable is read once, where the tape sees it
        specs = [spec_of(x) for x in leaves]
        text, out_tree = lowered(treedef, specs)
        out = call_stablehlo(text, *leaves)
        flat = [out] if out_tree.num_leaves == 1 else list(out)
        return jax.tree_util.tree_unflatten(out_tree, flat)

    wrapped.__wrapped__ = fn  # type: ignore[attr-defined]
    wrapped.__name__ = getattr(fn, "__name__", "from_jax")
    return wrapped
