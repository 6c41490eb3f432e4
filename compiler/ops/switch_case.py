"""``tf.switch_case``: run the branch ``branch_index`` selects.

Traced, it is a chain of ``hlo.if`` ops (``xtpu.cond``), one per branch but
the last: StableHLO's ``case`` has the same semantics, and the chain keeps
one control-flow op for the passes and the gradient engine to know.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, convert, read_if_variable
from xtpu.ops.control_flow import cond


def switch_case(
    branch_index: Any, branch_fns: Any, default: Callable[[], Any] | None = None, name: str | None = None
) -> Any:
    """``branch_fns[branch_index]()`` (tf.switch_case).

    Args:
      branch_index: an int32 / int64 scalar.
      branch_fns: a list of functions of no arguments, a dict ``{int: fn}``
        with keys ``0..n-1``, or a list of ``(int, fn)`` pairs; every branch
        returns the same structure of tensors of the same shapes and dtypes.
      default: run for an index out of range (default: the last branch, as TF).

    Raises:
      TypeError: ``branch_index`` is not an integer scalar.
      ValueError: no branches, or keys that are not ``0..n-1``.
    """
    if isinstance(branch_fns, dict):
        items = sorted(branch_fns.items())
    else:
        items = [b if isinstance(b, tuple) else (i, b) for i, b in enumerate(branch_fns)]
        items.sort(key=lambda kv: kv[0])
    if not items:
        raise ValueError("switch_case: branch_fns must not be empty")
    if [k for k, _ in items] != list(range(len(items))):
        raise ValueError(f"switch_case: branch keys must be 0..{len(items) - 1}, got {[k for k, _ in items]}")
    fns = [f for _, f in items]
    default = default or fns[-1]
    idx = convert(read_if_variable(branch_index))
    dt = idx.dtype if isinstance(idx, Tensor) else np.asarray(idx).dtype.name
    if dt not in ("int32", "int64") or tuple(idx.shape) != ():
        raise TypeError(f"switch_case: branch_index must be an int32 or int64 scalar, got {dt}{list(np.shape(idx))}")
    if not isinstance(idx, Tensor):
        i = int(idx)
        return (fns[i] if 0 <= i < len(fns) else default)()

    def chain(k: int) -> Any:
        if k == len(fns):
            return default()
        return cond(idx == np.asarray(k, dtype=dt), fns[k], lambda: chain(k + 1))

    return chain(0)


__all__ = ["switch_case"]
