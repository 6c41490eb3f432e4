"""TF 2's remaining array ops: ``split``, ``pad``, ``slice``, ``reverse``,
``roll``, ``repeat``, ``broadcast_to``, ``identity``, ``sequence_mask``,
``rank`` and ``tf.linalg.band_part``.

Shapes are static in xtpu, so every size, padding, shift and axis argument
is a Python value (or a concrete array); each op is built from StableHLO's
slice, pad, reverse, concatenate, broadcast_in_dim, iota, compare and
select, and differentiates through their rules.  Semantics, defaults and
errors are TF 2.21's (test data from TF itself in
``test_tf_reference_ops.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, bind, convert, read_if_variable, to_numpy
from xtpu.dialects import hlo
from xtpu.dialects.hlo_math import ReverseOp
from xtpu.ops.array_ops import concat, fresh, reshape
from xtpu.ops.core import broadcast_shapes, dtype_name, dtype_of, normalize_axes, scalar, shape_of
from xtpu.ops.core import broadcast_to as _broadcast_to
from xtpu.ops.gather_ops import gather


def _value(x: Any) -> Any:
    return convert(read_if_variable(x))


def _static_ints(v: Any, op: str, what: str) -> list[int]:
    if isinstance(v, Tensor):
        raise TypeError(f"{op}: {what} must be static (Python ints or a concrete array), not a traced tensor")
    arr = np.asarray(to_numpy(v) if not isinstance(v, (list, tuple, int, np.integer)) else v)
    if arr.dtype.kind not in "iu" and arr.size:
        raise TypeError(f"{op}: {what} must be integers, got {arr.dtype}")
    return [int(a) for a in arr.reshape(-1)]


def _slice(x: Any, start: list[int], limit: list[int]) -> Any:
    r = len(start)
    (out,) = bind(hlo.SliceOp, [x], start_indices=start, limit_indices=limit, strides=[1] * r)
    return out


def _slice_axis(x: Any, axis: int, a: int, b: int) -> Any:
    s = list(shape_of(x))
    start, limit = [0] * len(s), list(s)
    start[axis], limit[axis] = a, b
    return _slice(x, start, limit)


def split(value: Any, num_or_size_splits: Any, axis: Any = 0, num: Any = None, name: str = "split") -> list[Any]:
    """Pieces of ``value`` along ``axis`` (tf.split): an int ``n`` gives
    ``n`` equal pieces; a list of sizes gives pieces of those sizes, one of
    which may be -1 (the rest).

    Raises:
      ValueError: ``n`` does not divide the dimension; the sizes do not add
        up to it; more than one -1; ``axis`` out of range.
    """
    x = _value(value)
    s = shape_of(x)
    (ax,) = normalize_axes(_static_ints(axis, "split", "axis")[0], len(s), "split")
    n = s[ax]
    if np.ndim(num_or_size_splits) == 0 and not isinstance(num_or_size_splits, Tensor):
        k = int(num_or_size_splits)
        if k <= 0 or n % k:
            raise ValueError(
                f"split: Dimension size must be evenly divisible by {k} but is {n} for 'split' "
                f"(input shape {list(s)}, axis {ax})"
            )
        sizes = [n // k] * k
    else:
        sizes = _static_ints(num_or_size_splits, "split", "num_or_size_splits")
        if sizes.count(-1) > 1:
            raise ValueError(f"split: only one size may be -1, got {sizes}")
        if -1 in sizes:
            rest = n - sum(v for v in sizes if v != -1)
            if rest < 0:
                raise ValueError(f"split: sizes {sizes} exceed dimension {ax} of size {n}")
            sizes[sizes.index(-1)] = rest
        if any(v < 0 for v in sizes) or sum(sizes) != n:
            raise ValueError(
                f"split: Determined shape must either match input shape along split_dim exactly if fully "
                f"specified, or be less than the size of the input along split_dim if not fully specified. "
                f"Got sizes {sizes} for dimension {ax} of size {n}"
            )
    if num is not None and int(num) != len(sizes):
        raise ValueError(f"split: num {num} does not match the {len(sizes)} pieces")
    out, a = [], 0
    for size in sizes:
        out.append(_slice_axis(x, ax, a, a + size))
        a += size
    return out


def _reverse_axes(x: Any, axes: tuple[int, ...]) -> Any:
    if not axes:
        return x
    (out,) = bind(ReverseOp, [x], dimensions=tuple(axes))
    return out


def pad(tensor: Any, paddings: Any, mode: str = "CONSTANT", constant_values: Any = 0, name: str | None = None) -> Any:
    """``tensor`` padded by ``paddings[d] = [before, after]`` along each
    dimension ``d`` (tf.pad): ``'CONSTANT'`` with ``constant_values``,
    ``'REFLECT'`` (mirrored without the edge: ``before, after < dim``) or
    ``'SYMMETRIC'`` (with the edge: ``before, after <= dim``); the mode is
    case-insensitive.  CONSTANT is one ``hlo.pad``; the others concatenate
    reversed slices.

    Raises:
      ValueError: ``paddings`` is not ``[rank, 2]`` of non-negative ints, a
        REFLECT / SYMMETRIC padding is too large, or an unknown mode.
    """
    x = _value(tensor)
    s = shape_of(x)
    flat = _static_ints(paddings, "pad", "paddings")
    if len(flat) != 2 * len(s):
        raise ValueError(f"pad: paddings must be the rank of the input by 2 ([{len(s)}, 2]), got {len(flat)} values")
    pairs = [(flat[2 * d], flat[2 * d + 1]) for d in range(len(s))]
    if any(v < 0 for p in pairs for v in p):
        raise ValueError(f"pad: paddings must be non-negative, got {[list(p) for p in pairs]}")
    mode = str(mode).upper()
    if mode == "CONSTANT":
        value = _value(constant_values)
        if isinstance(constant_values, (int, float, bool)):
            value = scalar(constant_values, dtype_of(x))
        if shape_of(value) != ():
            raise ValueError("pad: constant_values must be a scalar")
        if dtype_of(value) != dtype_of(x):
            raise TypeError(f"pad: constant_values is {dtype_of(value)}, the tensor {dtype_of(x)}")
        r = len(s)
        (out,) = bind(
            hlo.PadOp,
            [x, value],
            edge_padding_low=[p[0] for p in pairs],
            edge_padding_high=[p[1] for p in pairs],
            interior_padding=[0] * r,
        )
        return out
    if mode not in ("REFLECT", "SYMMETRIC"):
        raise ValueError(
            f"pad: Value of argument `mode` expected to be one of 'CONSTANT', 'REFLECT', or 'SYMMETRIC'. Received `mode` = {mode}"
        )
    edge = 1 if mode == "REFLECT" else 0
    out = x
    for d, (lo, hi) in enumerate(pairs):
        n = s[d]
        limit = n - edge
        if lo > limit or hi > limit:
            raise ValueError(
                f"pad: paddings must be less than{' or equal to' if not edge else ''} the dimension size: "
                f"{lo}, {hi} for dimension {d} of size {n} in {mode} mode"
            )
        parts = []
        if lo:
            parts.append(_reverse_axes(_slice_axis(out, d, edge, edge + lo), (d,)))
        parts.append(out)
        if hi:
            parts.append(_reverse_axes(_slice_axis(out, d, n - edge - hi, n - edge), (d,)))
        if len(parts) > 1:
            out = concat(parts, d)
    return out


def slice(input_: Any, begin: Any, size: Any, name: str | None = None) -> Any:  # noqa: A001 - TF's name
    """``input_[begin[i] : begin[i] + size[i]]`` along every dimension, a
    size of -1 meaning "to the end" (tf.slice; StableHLO slice).

    Raises:
      ValueError: ``begin`` / ``size`` do not have one entry per dimension,
        or the slice leaves the tensor (TF's "Expected size[i] in [0, n - b]").
    """
    x = _value(input_)
    s = shape_of(x)
    b = _static_ints(begin, "slice", "begin")
    z = _static_ints(size, "slice", "size")
    if len(b) != len(s) or len(z) != len(s):
        raise ValueError(f"slice: begin {b} and size {z} must have one entry per dimension of shape {list(s)}")
    limit = []
    for i, (n, a, k) in enumerate(zip(s, b, z)):
        if k == -1:
            k = n - a
        if not 0 <= a <= n:
            raise ValueError(f"slice: Expected begin[{i}] in [0, {n}], but got {a}")
        if not 0 <= k <= n - a:
            raise ValueError(f"slice: Expected size[{i}] in [0, {n - a}], but got {k}")
        limit.append(a + k)
    return _slice(x, b, limit)


def reverse(tensor: Any, axis: Any, name: str | None = None) -> Any:
    """``tensor`` with the order of its elements reversed along each axis in
    ``axis`` (tf.reverse; StableHLO reverse).

    Raises:
      ValueError: an axis out of range or repeated.
    """
    x = _value(tensor)
    axes = _static_ints(axis, "reverse", "axis")
    return _reverse_axes(x, normalize_axes(axes, len(shape_of(x)), "reverse") if axes else ())


def roll(input: Any, shift: Any, axis: Any, name: str | None = None) -> Any:  # noqa: A002 - TF's name
    """Elements moved ``shift`` places along ``axis`` (positive: toward
    higher indices), wrapping around (tf.roll); ``shift`` and ``axis`` may be
    lists of one length, shifts on one axis add up.

    Raises:
      ValueError: ``shift`` and ``axis`` differ in length; an axis out of range.
    """
    x = _value(input)
    s = shape_of(x)
    shifts = _static_ints(shift, "roll", "shift")
    axes = _static_ints(axis, "roll", "axis")
    if len(shifts) != len(axes):
        raise ValueError(f"roll: shift and axis must have the same size, got {shifts} and {axes}")
    total: dict[int, int] = {}
    for k, a in zip(shifts, axes):
        if not -len(s) <= a < len(s):
            raise ValueError(f"roll: axis {a} is out of range for a rank-{len(s)} tensor")
        a %= len(s)
        total[a] = total.get(a, 0) + k
    out = x
    for a, k in sorted(total.items()):
        n = s[a]
        k = k % n if n else 0
        if k:
            out = concat([_slice_axis(out, a, n - k, n), _slice_axis(out, a, 0, n - k)], a)
    return out


def repeat(input: Any, repeats: Any, axis: Any = None, name: str | None = None) -> Any:  # noqa: A002
    """Each element (each slice along ``axis``) repeated ``repeats`` times,
    in place (tf.repeat, numpy's ``repeat``); ``axis`` None repeats the
    flattened tensor; ``repeats`` an int or one int per slice.  An int is a
    broadcast_in_dim and a reshape; a list gathers the static indices
    ``np.repeat(arange(n), repeats)``.

    Raises:
      ValueError: ``repeats`` has a length other than 1 or the dimension,
        or a negative entry.
    """
    x = _value(input)
    if axis is None:
        x = reshape(x, [-1])
        axis = 0
    s = shape_of(x)
    (ax,) = normalize_axes(_static_ints(axis, "repeat", "axis")[0], len(s), "repeat")
    reps = _static_ints(repeats, "repeat", "repeats")
    if any(v < 0 for v in reps):
        raise ValueError(f"repeat: repeats must be non-negative, got {reps}")
    n = s[ax]
    if len(reps) == 1:
        k = reps[0]
        wide = s[: ax + 1] + (k,) + s[ax + 1 :]
        dims = tuple(range(ax + 1)) + tuple(range(ax + 2, len(s) + 1))
        (b,) = bind(hlo.BroadcastInDimOp, [x], broadcast_dimensions=dims, shape=wide)
        return reshape(b, s[:ax] + (n * k,) + s[ax + 1 :])
    if len(reps) != n:
        raise ValueError(f"repeat: repeats has {len(reps)} entries, dimension {ax} has {n}")
    idx = np.repeat(np.arange(n, dtype=np.int32), reps)
    return gather(x, idx, axis=ax)


def broadcast_to(input: Any, shape: Any, name: str | None = None) -> Any:  # noqa: A002 - TF's name
    """``input`` broadcast to ``shape`` by numpy's rules (tf.broadcast_to;
    StableHLO broadcast_in_dim).

    Raises:
      ValueError: ``input``'s shape does not broadcast to ``shape`` (TF's
        "Incompatible shapes").
    """
    x = _value(input)
    target = tuple(_static_ints(shape, "broadcast_to", "shape"))
    s = shape_of(x)
    try:
        got = broadcast_shapes(s, target, op="broadcast_to")
    except ValueError:
        got = None
    if got != target:
        raise ValueError(f"broadcast_to: Incompatible shapes: {list(s)} vs. {list(target)}")
    return _broadcast_to(x, target)


def identity(input: Any, name: str | None = None) -> Any:  # noqa: A002 - TF's name
    """A new tensor with ``input``'s value (tf.identity); the gradient
    passes through unchanged.  Like TF's, it is a new tensor: a tape that
    did not watch ``input`` gives no gradient for it from ``identity(input)``."""
    return fresh(_value(input))


def rank(input: Any, name: str | None = None) -> Any:  # noqa: A002 - TF's name
    """The number of dimensions, an int32 scalar (tf.rank)."""
    return scalar(len(shape_of(_value(input))), "int32")


def sequence_mask(lengths: Any, maxlen: Any = None, dtype: Any = "bool", name: str | None = None) -> Any:
    """``mask[i..., j] = j < lengths[i...]`` for ``j`` in ``[0, maxlen)``, of
    ``dtype`` (tf.sequence_mask).  ``maxlen`` defaults to ``max(lengths)``,
    which only an eager call knows (the shape would depend on the values).

    Raises:
      TypeError: ``lengths`` not integers; ValueError: no ``maxlen`` inside a
        replicated computation, or a non-scalar ``maxlen``.
    """
    n = _value(lengths)
    if dtype_of(n) not in ("int32", "int64"):
        raise TypeError(f"sequence_mask: lengths must be integers, got {dtype_of(n)}")
    if maxlen is None:
        if isinstance(n, Tensor):
            raise ValueError(
                "sequence_mask: give maxlen inside a replicated computation (without it the result's shape "
                "would be max(lengths), a value known only when the program runs)"
            )
        maxlen = int(np.max(np.asarray(n), initial=0))
    if np.ndim(maxlen) != 0 or isinstance(maxlen, Tensor):
        raise ValueError("sequence_mask: maxlen must be a static scalar")
    m = int(maxlen)
    s = shape_of(n)
    out_shape = s + (m,)
    (iota,) = bind(hlo.IotaOp, [], iota_dimension=len(s), shape=out_shape, dtype=dtype_of(n))
    (nb,) = bind(hlo.BroadcastInDimOp, [n], broadcast_dimensions=tuple(range(len(s))), shape=out_shape)
    (mask,) = bind(hlo.CompareOp, [iota, nb], comparison_direction="LT")
    dt = dtype_name(dtype)
    if dt == "bool":
        return mask
    (out,) = bind(hlo.ConvertOp, [mask], dtype=dt)
    return out


def band_part(input: Any, num_lower: Any, num_upper: Any, name: str | None = None) -> Any:  # noqa: A002
    """The band of each innermost matrix: element ``[..., m, n]`` kept where
    ``(num_lower < 0 or m - n <= num_lower) and (num_upper < 0 or n - m <=
    num_upper)``, zero elsewhere (tf.linalg.band_part).  ``band_part(x, -1,
    0)`` is the lower triangle (a causal mask).

    Raises:
      ValueError: ``input`` has rank below 2.
    """
    x = _value(input)
    s = shape_of(x)
    if len(s) < 2:
        raise ValueError(f"band_part: input must be at least 2-dim, got shape {list(s)}")
    lo = _static_ints(num_lower, "band_part", "num_lower")[0]
    hi = _static_ints(num_upper, "band_part", "num_upper")[0]
    r = len(s)
    (rows,) = bind(hlo.IotaOp, [], iota_dimension=r - 2, shape=s, dtype="int64")
    (cols,) = bind(hlo.IotaOp, [], iota_dimension=r - 1, shape=s, dtype="int64")
    (diff,) = bind(hlo.SubtractOp, [rows, cols])
    keep = None
    if lo >= 0:
        (keep,) = bind(hlo.CompareOp, [diff, _broadcast_to(scalar(lo, "int64"), s)], comparison_direction="LE")
    if hi >= 0:
        (neg,) = bind(hlo.CompareOp, [diff, _broadcast_to(scalar(-hi, "int64"), s)], comparison_direction="GE")
        keep = neg if keep is None else bind(hlo.AndOp, [keep, neg])[0]
    if keep is None:
        return x
    zero = _broadcast_to(scalar(False if dtype_of(x) == "bool" else 0, dtype_of(x)), s)
    (out,) = bind(hlo.SelectOp, [keep, x, zero])
    return out


__all__ = [
    "band_part",
    "broadcast_to",
    "identity",
    "pad",
    "rank",
    "repeat",
    "reverse",
    "roll",
    "sequence_mask",
    "slice",
    "split",
]
