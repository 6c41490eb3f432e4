"""TF's static shape manipulations: ``tf.expand_dims``, ``tf.squeeze``,
``tf.stack``, ``tf.unstack`` and ``tf.tile``, built from StableHLO's
reshape, broadcast_in_dim, concatenate and slice (so they trace, run eagerly
and differentiate through those ops' rules)."""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, bind, convert, read_if_variable
from xtpu.dialects import hlo
from xtpu.ops.array_ops import concat, reshape
from xtpu.ops.core import shape_of, unify


def expand_dims(input: Any, axis: int, name: str | None = None) -> Any:  # noqa: A002 - TF's name
    """A dimension of size 1 inserted at ``axis`` (negative counts from the
    end of the result) (tf.expand_dims).

    Raises:
      ValueError: ``axis`` outside ``[-rank-1, rank]``.
    """
    x = convert(read_if_variable(input))
    s = list(shape_of(x))
    r = len(s)
    axis = int(axis)
    if not -r - 1 <= axis <= r:
        raise ValueError(f"expand_dims: axis {axis} is out of range for a rank-{r} tensor (must be in [{-r - 1}, {r}])")
    s.insert(axis % (r + 1), 1)
    return reshape(x, s)


def squeeze(input: Any, axis: Any = None, name: str | None = None) -> Any:  # noqa: A002
    """Remove dimensions of size 1: all of them, or those in ``axis``
    (tf.squeeze).

    Raises:
      ValueError: a dimension in ``axis`` is not 1 (TF's message) or out of range.
    """
    x = convert(read_if_variable(input))
    s = shape_of(x)
    r = len(s)
    if axis is None:
        drop = {i for i, d in enumerate(s) if d == 1}
    else:
        axes = [int(a) for a in np.atleast_1d(axis)]
        drop = set()
        for a in axes:
            if not -r <= a < r:
                raise ValueError(f"squeeze: axis {a} is out of range for a rank-{r} tensor")
            if s[a % r] != 1:
                raise ValueError(f"Can not squeeze dim[{a % r}], expected a dimension of 1, got {s[a % r]}")
            drop.add(a % r)
    return reshape(x, [d for i, d in enumerate(s) if i not in drop])


def stack(values: Any, axis: int = 0, name: str | None = None) -> Any:
    """Join tensors of one shape along a new dimension ``axis`` (tf.stack).

    Raises:
      ValueError: the shapes differ, or ``axis`` is out of range.
    """
    values = unify([read_if_variable(v) for v in values], "stack")
    if not values:
        raise ValueError("stack: needs at least one tensor")
    s0 = shape_of(values[0])
    for i, v in enumerate(values[1:], start=1):
        if shape_of(v) != s0:
            raise ValueError(
                f"stack: shapes of all inputs must match: values[0].shape = {list(s0)} != "
                f"values[{i}].shape = {list(shape_of(v))}"
            )
    r = len(s0) + 1
    if not -r <= int(axis) < r:
        raise ValueError(f"stack: axis {axis} is out of range for the rank-{r} result")
    return concat([expand_dims(v, int(axis)) for v in values], int(axis) % r)


def unstack(value: Any, num: int | None = None, axis: int = 0, name: str | None = None) -> list[Any]:
    """The tensors along dimension ``axis``, in order (tf.unstack).

    Raises:
      ValueError: ``num`` differs from the dimension, or ``axis`` is out of range.
    """
    x = convert(read_if_variable(value))
    s = shape_of(x)
    r = len(s)
    if not -r <= int(axis) < r:
        raise ValueError(f"unstack: axis {axis} is out of range for a rank-{r} tensor")
    ax = int(axis) % r
    if num is not None and int(num) != s[ax]:
        raise ValueError(f"unstack: num {num} does not match dimension {ax} of size {s[ax]}")
    out = []
    rest = [d for i, d in enumerate(s) if i != ax]
    for k in range(s[ax]):
        starts = [k if i == ax else 0 for i in range(r)]
        limits = [k + 1 if i == ax else d for i, d in enumerate(s)]
        (piece,) = bind(hlo.SliceOp, [x], start_indices=starts, limit_indices=limits, strides=[1] * r)
        out.append(reshape(piece, rest))
    return out


def tile(input: Any, multiples: Any, name: str | None = None) -> Any:  # noqa: A002
    """``input`` repeated ``multiples[i]`` times along dimension ``i``
    (tf.tile): ``out[j] = input[j mod n]``.  One broadcast_in_dim to
    ``[m0, d0, m1, d1, ...]`` and one reshape.

    Raises:
      ValueError: ``multiples`` does not have one non-negative entry per dimension.
    """
    x = convert(read_if_variable(input))
    if isinstance(multiples, Tensor):
        raise TypeError("tile: multiples must be static inside a replicated computation")
    m = [int(v) for v in np.atleast_1d(np.asarray(multiples))]
    s = shape_of(x)
    if len(m) != len(s) or any(v < 0 for v in m):
        raise ValueError(f"tile: multiples {m} must have one non-negative entry per dimension of shape {list(s)}")
    wide = tuple(v for pair in zip(m, s) for v in pair)
    (b,) = bind(hlo.BroadcastInDimOp, [x], broadcast_dimensions=tuple(range(1, 2 * len(s), 2)), shape=wide)
    return reshape(b, [a * d for a, d in zip(m, s)])


__all__ = ["expand_dims", "squeeze", "stack", "tile", "unstack"]
