"""TF's convolution, pooling and batch-norm ops (``tf.nn.conv2d`` and
friends) on ``hlo.convolution`` and ``hlo.reduce_window``.

Semantics and errors are TF's (``tensorflow/python/ops/nn_ops.py``):

* ``padding`` is ``"SAME"``, ``"VALID"`` or explicit ``[before, after]``
  pairs, one per dimension of the input (batch and channel pairs ``[0, 0]``).
  SAME gives ``ceil(size / stride)`` outputs and pads
  ``max((out - 1) * stride + dilated_window - size, 0)``, the odd pixel at the
  end (after), as TF and XLA do.
* ``strides``, ``dilations`` and ``ksize`` are an int, one int per spatial
  dimension, or one per input dimension with 1 at batch and channels.
* Kernels are TF's: ``[*spatial, in_channels / groups, out_channels]``; an
  input with ``k`` times the kernel's input channels is a grouped
  convolution (``feature_group_count = k``).
* Average pooling with SAME padding divides by the number of input elements
  in each window (padding is left out of the count).

Gradients come from the hlo ops' rules, so every op here differentiates
(max pooling through ``hlo.select_and_scatter``, TF's MaxPoolGrad).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, bind, convert, read_if_variable
from xtpu.dialects import tpu
from xtpu.dialects.autodiff import StopGradientOp
from xtpu.dialects.hlo_window import (
    ConvDimensionNumbers,
    ConvolutionOp,
    ReduceWindowOp,
    dilate,
    num_windows,
    reduce_window_numpy,
)
from xtpu.dialects.tensor_spec import FLOAT_DTYPES
from xtpu.ops import math_ops
from xtpu.ops.array_ops import concat, getitem, reshape
from xtpu.ops.core import dtype_of, scalar, shape_of

FLOATS = FLOAT_DTYPES


# --------------------------------------------------------------------------
# Argument handling (TF's _get_sequence and padding rules)
# --------------------------------------------------------------------------


def _layout(data_format: str | None, nsp: int, op: str) -> tuple[bool, str]:
    """(channels_last, canonical format name) for ``data_format``: None or
    N..C is channels last, NC.. channels first (TF also takes NHWC / NCHW
    for 1-D ops)."""
    last = {1: "NWC", 2: "NHWC", 3: "NDHWC"}[nsp]
    first = {1: "NCW", 2: "NCHW", 3: "NCDHW"}[nsp]
    if data_format is None or data_format in (last, "NHWC" if nsp == 1 else last):
        return True, last
    if data_format in (first, "NCHW" if nsp == 1 else first):
        return False, first
    raise ValueError(f"{op}: data_format must be {last} or {first}, got {data_format!r}")


def _sequence(value: Any, nsp: int, channels_last: bool, name: str, op: str) -> tuple[int, ...]:
    """TF's ``_get_sequence``: an int, ``nsp`` ints, or ``nsp + 2`` ints with
    the batch and channel entries 1; the spatial entries."""
    if value is None:
        return (1,) * nsp
    if isinstance(value, Tensor):
        raise TypeError(f"{op}: {name} must be static Python ints")
    vals = [int(v) for v in np.atleast_1d(np.asarray(value)).tolist()]
    if len(vals) == 1:
        return (vals[0],) * nsp
    if len(vals) == nsp:
        return tuple(vals)
    if len(vals) == nsp + 2:
        outer = (vals[0], vals[-1]) if channels_last else (vals[0], vals[1])
        if outer != (1, 1):
            raise ValueError(
                f"{op}: {name} {vals} must be 1 in the batch and channel dimensions "
                "(TF: current implementation does not yet support strides in the batch and depth dimensions)"
            )
        return tuple(vals[1:-1] if channels_last else vals[2:])
    raise ValueError(f"{op}: {name} should be of length 1, {nsp} or {nsp + 2}, got {len(vals)}")


def _padding(
    padding: Any,
    sizes: tuple[int, ...],
    windows: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    channels_last: bool,
    op: str,
) -> tuple[tuple[int, int], ...]:
    """Explicit (low, high) pairs per spatial dimension for TF's padding."""
    nsp = len(sizes)
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return ((0, 0),) * nsp
        if mode == "SAME":
            pads = []
            for n, k, s, d in zip(sizes, windows, strides, dilations):
                out = -(-n // s)
                total = max((out - 1) * s + dilate(k, d) - n, 0)
                pads.append((total // 2, total - total // 2))
            return tuple(pads)
        raise ValueError(f"{op}: padding must be 'SAME', 'VALID' or a list of pairs, got {padding!r}")
    pairs = [[int(v) for v in p] for p in padding]
    if len(pairs) != nsp + 2 or any(len(p) != 2 for p in pairs):
        raise ValueError(f"{op}: explicit padding {pairs} must have {nsp + 2} [before, after] pairs")
    outer = (pairs[0], pairs[-1]) if channels_last else (pairs[0], pairs[1])
    if outer != ([0, 0], [0, 0]):
        raise ValueError(f"{op}: explicit padding {pairs} must be [0, 0] in the batch and channel dimensions")
    if any(v < 0 for p in pairs for v in p):
        raise ValueError(f"{op}: explicit padding {pairs} must be non-negative")
    inner = pairs[1:-1] if channels_last else pairs[2:]
    return tuple((p[0], p[1]) for p in inner)


def _dims(nsp: int, channels_last: bool) -> ConvDimensionNumbers:
    """TF's layouts: NHWC / NCHW input and output, HWIO kernel."""
    if channels_last:
        act = (0, nsp + 1, *range(1, nsp + 1))
    else:
        act = (0, 1, *range(2, nsp + 2))
    kernel = (nsp + 1, nsp, *range(nsp))
    return ConvDimensionNumbers(act, kernel, act)


def _float_input(x: Any, op: str, what: str = "input") -> Any:
    v = convert(read_if_variable(x))
    if dtype_of(v) not in FLOATS:
        raise TypeError(f"{op}: {what} must be one of {', '.join(FLOATS)}, got {dtype_of(v)}")
    return v


# --------------------------------------------------------------------------
# Convolutions
# --------------------------------------------------------------------------


def convolution(
    input: Any,
    filters: Any,
    strides: Any = None,
    padding: Any = "VALID",
    data_format: str | None = None,
    dilations: Any = None,
    name: str | None = None,
    op: str = "convolution",
) -> Any:
    """An N-D convolution, N = 1, 2 or 3 (tf.nn.convolution; conv1d/2d/3d).

    Shapes: input ``[batch, *spatial, in]`` (``data_format`` N..C, the
    default) or ``[batch, in, *spatial]`` (NC..); filters
    ``[*window, in / groups, out]``; result ``[batch, *out_spatial, out]``
    (or NC..), of the input's dtype (float32 or float64).

    Raises:
      TypeError: a non-float input or filter, dtypes that differ.
      ValueError: ranks that do not match, input channels not a multiple of
        the filter's, output channels not divisible by the groups, a bad
        padding / strides / dilations / data_format (TF's messages), or both
        strides and dilations above 1 (TF: not supported).
    """
    x = _float_input(input, op)
    w = _float_input(filters, op, "filters")
    if dtype_of(x) != dtype_of(w):
        raise TypeError(f"{op}: input {dtype_of(x)} and filters {dtype_of(w)} must have the same dtype")
    xs, ws = shape_of(x), shape_of(w)
    nsp = len(ws) - 2
    if nsp not in (1, 2, 3) or len(xs) != len(ws):
        raise ValueError(
            f"{op}: input of shape {list(xs)} and filters of shape {list(ws)} must both have rank 3, 4 or 5"
        )
    last, _ = _layout(data_format, nsp, op)
    st = _sequence(strides, nsp, last, "strides", op)
    dl = _sequence(dilations, nsp, last, "dilations", op)
    if any(v <= 0 for v in st + dl):
        raise ValueError(f"{op}: strides {list(st)} and dilations {list(dl)} must be positive")
    if any(v > 1 for v in st) and any(v > 1 for v in dl):
        raise ValueError(f"{op}: strides {list(st)} > 1 together with dilations {list(dl)} > 1 are not supported (TF)")
    dn = _dims(nsp, last)
    cin = xs[dn.lhs[1]]
    if ws[nsp] == 0 or cin % ws[nsp]:
        raise ValueError(
            f"{op}: input depth {cin} must be a multiple of the filter's input depth {ws[nsp]} (input {list(xs)}, "
            f"filters {list(ws)})"
        )
    groups = cin // ws[nsp]
    if ws[-1] % groups:
        raise ValueError(f"{op}: output depth {ws[-1]} must be divisible by the number of groups {groups}")
    sizes = tuple(xs[d] for d in dn.lhs[2:])
    pads = _padding(padding, sizes, ws[:nsp], st, dl, last, op)
    (out,) = bind(
        ConvolutionOp,
        [x, w],
        dimension_numbers=dn,
        window_strides=st,
        padding=pads,
        lhs_dilation=(1,) * nsp,
        rhs_dilation=dl,
        feature_group_count=groups,
        batch_group_count=1,
    )
    return out


def conv2d(
    input: Any,
    filters: Any,
    strides: Any,
    padding: Any,
    data_format: str = "NHWC",
    dilations: Any = None,
    name: str | None = None,
) -> Any:
    """2-D convolution (tf.nn.conv2d): input ``[N, H, W, C]`` (NHWC) or
    ``[N, C, H, W]`` (NCHW), filters ``[h, w, C / groups, out]``; see
    :func:`convolution` for shapes and errors."""
    _rank(input, 4, "conv2d")
    return convolution(input, filters, strides, padding, data_format, dilations, op="conv2d")


def conv1d(
    input: Any,
    filters: Any,
    stride: Any,
    padding: Any,
    data_format: str = "NWC",
    dilations: Any = None,
    name: str | None = None,
) -> Any:
    """1-D convolution (tf.nn.conv1d): input ``[N, W, C]`` (NWC) or
    ``[N, C, W]`` (NCW), filters ``[w, C, out]``."""
    _rank(input, 3, "conv1d")
    return convolution(input, filters, stride, padding, data_format, dilations, op="conv1d")


def conv3d(
    input: Any,
    filters: Any,
    strides: Any,
    padding: Any,
    data_format: str = "NDHWC",
    dilations: Any = None,
    name: str | None = None,
) -> Any:
    """3-D convolution (tf.nn.conv3d): input ``[N, D, H, W, C]`` (NDHWC) or
    ``[N, C, D, H, W]`` (NCDHW), filters ``[d, h, w, C, out]``."""
    _rank(input, 5, "conv3d")
    return convolution(input, filters, strides, padding, data_format, dilations, op="conv3d")


def _rank(x: Any, rank: int, op: str) -> None:
    s = shape_of(convert(read_if_variable(x)))
    if len(s) != rank:
        raise ValueError(f"{op}: input must have rank {rank}, got shape {list(s)}")


def depthwise_conv2d(
    input: Any,
    filter: Any,
    strides: Any,
    padding: Any,
    data_format: str | None = None,
    dilations: Any = None,
    name: str | None = None,
) -> Any:
    """Depthwise 2-D convolution (tf.nn.depthwise_conv2d): each input channel
    ``c`` convolved with its own ``filter[:, :, c, :]``.

    Shapes: input ``[N, H, W, C]`` (or NCHW), filter ``[h, w, C, m]``;
    result ``[N, H', W', C * m]``, channel ``c * m + k`` from ``filter[..., c, k]``.

    Raises:
      ValueError: the filter's third dimension is not the input's channels;
        ``strides`` not of length 4 (TF); see :func:`convolution`.
    """
    op = "depthwise_conv2d"
    x = _float_input(input, op)
    w = _float_input(filter, op, "filter")
    xs, ws = shape_of(x), shape_of(w)
    if len(xs) != 4 or len(ws) != 4:
        raise ValueError(f"{op}: input {list(xs)} and filter {list(ws)} must have rank 4")
    if strides is not None and len(np.atleast_1d(strides)) != 4:
        raise ValueError(f"{op}: strides must be of length 4, got {list(np.atleast_1d(strides))}")
    last, fmt = _layout(data_format, 2, op)
    cin = xs[3] if last else xs[1]
    if ws[2] != cin:
        raise ValueError(f"{op}: filter {list(ws)} must have the input's {cin} channels in dimension 2")
    w2 = reshape(w, (ws[0], ws[1], 1, ws[2] * ws[3]))
    return convolution(x, w2, strides, padding, fmt, dilations, op=op)


def separable_conv2d(
    input: Any,
    depthwise_filter: Any,
    pointwise_filter: Any,
    strides: Any,
    padding: Any,
    data_format: str | None = None,
    dilations: Any = None,
    name: str | None = None,
) -> Any:
    """A depthwise convolution followed by a 1x1 convolution mixing the
    channels (tf.nn.separable_conv2d).

    Shapes: depthwise_filter ``[h, w, C, m]``, pointwise_filter
    ``[1, 1, C * m, out]``; result ``[N, H', W', out]``.

    Raises:
      ValueError: a pointwise filter that is not ``[1, 1, C * m, out]``; see
        :func:`depthwise_conv2d`.
    """
    op = "separable_conv2d"
    ps = shape_of(convert(read_if_variable(pointwise_filter)))
    ds = shape_of(convert(read_if_variable(depthwise_filter)))
    if len(ps) != 4 or ps[:2] != (1, 1) or (len(ds) == 4 and ps[2] != ds[2] * ds[3]):
        raise ValueError(f"{op}: pointwise_filter {list(ps)} must be [1, 1, {ds[2] * ds[3]}, out]")
    depthwise = depthwise_conv2d(input, depthwise_filter, strides, padding, data_format, dilations)
    _, fmt = _layout(data_format, 2, op)
    return convolution(depthwise, pointwise_filter, 1, "VALID", fmt, op=op)


def conv2d_transpose(
    input: Any,
    filters: Any,
    output_shape: Any,
    strides: Any,
    padding: Any = "SAME",
    data_format: str = "NHWC",
    dilations: Any = None,
    name: str | None = None,
) -> Any:
    """The transpose (gradient with respect to the input) of
    :func:`conv2d` (tf.nn.conv2d_transpose).

    Shapes: input ``[N, H, W, out]``, filters ``[h, w, C, out]`` (TF's
    order: output channels third), ``output_shape`` ``[N, H', W', C]`` (a
    static list), such that ``conv2d`` of an ``output_shape`` tensor with
    ``filters``, ``strides`` and ``padding`` has the input's shape.

    Raises:
      ValueError: an output_shape that the forward convolution does not
        map onto the input's shape, or channels that do not match.
    """
    op = "conv2d_transpose"
    x = _float_input(input, op)
    w = _float_input(filters, op, "filters")
    if isinstance(output_shape, Tensor):
        raise TypeError(f"{op}: output_shape must be a static list of ints")
    oshape = tuple(int(v) for v in np.asarray(output_shape).tolist())
    xs, ws = shape_of(x), shape_of(w)
    if len(xs) != 4 or len(ws) != 4 or len(oshape) != 4:
        raise ValueError(f"{op}: input {list(xs)}, filters {list(ws)} and output_shape {list(oshape)} must be rank 4")
    last, _ = _layout(data_format, 2, op)
    st = _sequence(strides, 2, last, "strides", op)
    dl = _sequence(dilations, 2, last, "dilations", op)
    dn = _dims(2, last)
    sizes = tuple(oshape[d] for d in dn.lhs[2:])
    pads = _padding(padding, sizes, ws[:2], st, dl, last, op)
    want = list(oshape)
    want[dn.out[1]] = ws[3]
    for i in range(2):
        want[dn.out[2 + i]] = num_windows(sizes[i], ws[i], st[i], *pads[i], 1, dl[i])
    if tuple(want) != xs or oshape[dn.lhs[1]] != ws[2]:
        raise ValueError(
            f"{op}: output_shape {list(oshape)} with filters {list(ws)}, strides {list(st)} and padding "
            f"{padding!r} gives a forward convolution of shape {want}, not the input's {list(xs)}"
        )
    params = {
        "dimension_numbers": dn,
        "window_strides": st,
        "padding": pads,
        "lhs_dilation": (1, 1),
        "rhs_dilation": dl,
        "feature_group_count": 1,
        "batch_group_count": 1,
    }
    # The input gradient of the forward convolution: only the shape of its
    # input is read.
    ghost = np.broadcast_to(np.zeros((), dtype=np.dtype(dtype_of(x))), oshape)
    gx, _ = ConvolutionOp.vjp([x], [ghost, w], [x], skip_input_indices={1}, **params)
    return gx


# --------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------


def _pool(kind: str, input: Any, ksize: Any, strides: Any, padding: Any, data_format: Any, op: str, nsp=None) -> Any:
    x = convert(read_if_variable(input))
    xs = shape_of(x)
    if nsp is None:
        nsp = len(xs) - 2
    if nsp not in (1, 2, 3) or len(xs) != nsp + 2:
        raise ValueError(f"{op}: input must have rank {nsp + 2 if nsp in (1, 2, 3) else '3, 4 or 5'}, got {list(xs)}")
    if kind == "avg" and dtype_of(x) not in FLOATS:
        raise TypeError(f"{op}: input must be float32 or float64, got {dtype_of(x)}")
    if dtype_of(x) not in FLOATS + ("int32", "int64"):
        raise TypeError(f"{op}: input must be a number, got {dtype_of(x)}")
    last, _ = _layout(data_format, nsp, op)
    ks = _sequence(ksize, nsp, last, "ksize", op)
    st = _sequence(strides, nsp, last, "strides", op)
    if any(v <= 0 for v in ks + st):
        raise ValueError(f"{op}: ksize {list(ks)} and strides {list(st)} must be positive")
    sp = tuple(range(1, nsp + 1)) if last else tuple(range(2, nsp + 2))
    sizes = tuple(xs[d] for d in sp)
    pads = _padding(padding, sizes, ks, st, (1,) * nsp, last, op)
    window, strides_all, pad_all = [1] * len(xs), [1] * len(xs), [(0, 0)] * len(xs)
    for i, d in enumerate(sp):
        window[d], strides_all[d], pad_all[d] = ks[i], st[i], pads[i]
    dt = dtype_of(x)
    if kind == "max":
        init = -np.inf if dt in FLOATS else np.iinfo(np.dtype(dt)).min
        computation = "max"
    else:
        init, computation = 0, "add"
    params = {
        "window_dimensions": tuple(window),
        "window_strides": tuple(strides_all),
        "base_dilations": (1,) * len(xs),
        "window_dilations": (1,) * len(xs),
        "padding": tuple(pad_all),
    }
    (out,) = bind(ReduceWindowOp, [x, scalar(init, dt)], computation=computation, **params)
    if kind == "avg":
        # The number of input elements in each window (padding left out): a
        # constant of the output's spatial shape, broadcast over the rest.
        ones_shape = tuple(xs[d] if d in sp else 1 for d in range(len(xs)))
        count = reduce_window_numpy(np.ones(ones_shape), 0.0, np.add, **params)
        out = math_ops.divide(out, count.astype(np.dtype(dt)))
    return out


def max_pool2d(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC", name=None) -> Any:
    """2-D max pooling (tf.nn.max_pool2d): input ``[N, H, W, C]`` (or NCHW);
    SAME pads with -inf.  Raises ValueError for a bad ksize / strides /
    padding / data_format or rank."""
    return _pool("max", input, ksize, strides, padding, data_format, "max_pool2d", 2)


def avg_pool2d(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC", name=None) -> Any:
    """2-D average pooling (tf.nn.avg_pool2d): the mean of each window's
    input elements (SAME padding is not counted).  Float input only."""
    return _pool("avg", input, ksize, strides, padding, data_format, "avg_pool2d", 2)


def max_pool1d(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NWC", name=None) -> Any:
    """1-D max pooling (tf.nn.max_pool1d): input ``[N, W, C]`` (or NCW)."""
    return _pool("max", input, ksize, strides, padding, data_format, "max_pool1d", 1)


def avg_pool1d(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NWC", name=None) -> Any:
    """1-D average pooling (tf.nn.avg_pool1d)."""
    return _pool("avg", input, ksize, strides, padding, data_format, "avg_pool1d", 1)


def max_pool3d(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NDHWC", name=None) -> Any:
    """3-D max pooling (tf.nn.max_pool3d): input ``[N, D, H, W, C]`` (or NCDHW)."""
    return _pool("max", input, ksize, strides, padding, data_format, "max_pool3d", 3)


def avg_pool3d(input: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NDHWC", name=None) -> Any:
    """3-D average pooling (tf.nn.avg_pool3d)."""
    return _pool("avg", input, ksize, strides, padding, data_format, "avg_pool3d", 3)


def max_pool(input: Any, ksize: Any, strides: Any, padding: Any, data_format: Any = None, name=None) -> Any:
    """N-D max pooling, N = 1, 2, 3 from the input's rank (tf.nn.max_pool)."""
    return _pool("max", input, ksize, strides, padding, data_format, "max_pool")


def avg_pool(input: Any, ksize: Any, strides: Any, padding: Any, data_format: Any = None, name=None) -> Any:
    """N-D average pooling, N = 1, 2, 3 from the input's rank (tf.nn.avg_pool)."""
    return _pool("avg", input, ksize, strides, padding, data_format, "avg_pool")


# --------------------------------------------------------------------------
# Batch normalization
# --------------------------------------------------------------------------


def _bn_axes(x: Any, data_format: str, op: str) -> tuple[tuple[int, ...], int]:
    rank = len(shape_of(x))
    if data_format in ("NHWC", "NDHWC", "NWC"):
        return tuple(range(rank - 1)), rank - 1
    if data_format in ("NCHW", "NCDHW", "NCW"):
        return (0, *range(2, rank)), 1
    raise ValueError(f"{op}: data_format must be NHWC, NCHW, NDHWC or NCDHW, got {data_format!r}")


def _per_channel(v: Any, rank: int, channel: int) -> Any:
    shape = [1] * rank
    shape[channel] = shape_of(v)[0]
    return reshape(v, shape)


def fused_batch_norm(
    x: Any,
    scale: Any,
    offset: Any,
    mean: Any = None,
    variance: Any = None,
    epsilon: float = 0.001,
    data_format: str = "NHWC",
    is_training: bool = True,
    name: str | None = None,
    exponential_avg_factor: float = 1.0,
) -> tuple[Any, Any, Any]:
    """Batch normalization over every dimension but the channels
    (tf.compat.v1.nn.fused_batch_norm).

    Training (``is_training``): ``y = scale * (x - m) / sqrt(v + epsilon) +
    offset`` with ``m``, ``v`` the batch mean and (biased) variance; returns
    ``(y, running_mean, running_variance)`` where the running values are
    ``(1 - f) * mean + f * m`` and ``(1 - f) * variance + f * v * n / (n - 1)``
    (TF returns the Bessel-corrected variance; ``f`` is
    ``exponential_avg_factor``, and with ``f = 1`` the batch's own values).
    Inference: normalizes with the given ``mean`` and ``variance`` and returns
    them.  As TF's gradient of FusedBatchNorm, only ``y``'s cotangent flows
    back (in training the returned moments are stop-gradient values).

    Shapes: x ``[N, H, W, C]`` (or NCHW, rank 4 or 5), scale / offset / mean /
    variance ``[C]``; dtype of x (float32 or float64).

    Raises:
      ValueError: inference without mean and variance; parameters not of
        shape ``[C]``; a bad data_format.
    """
    op = "fused_batch_norm"
    x = _float_input(x, op)
    axes, ch = _bn_axes(x, data_format, op)
    xs = shape_of(x)
    c, rank, dt = xs[ch], len(xs), dtype_of(x)
    params = []
    for what, v in (("scale", scale), ("offset", offset), ("mean", mean), ("variance", variance)):
        if v is None:
            params.append(None)
            continue
        v = convert(read_if_variable(v))
        if shape_of(v) != (c,):
            raise ValueError(f"{op}: {what} must have shape [{c}], got {list(shape_of(v))}")
        if dtype_of(v) != dt:
            v = math_ops.cast(v, dt)
        params.append(v)
    scale, offset, mean, variance = params
    if is_training:
        n = int(np.prod([xs[a] for a in axes], dtype=np.int64))
        m = math_ops.reduce_mean(x, axis=axes)
        centered = math_ops.subtract(x, _per_channel(m, rank, ch))
        v = math_ops.reduce_mean(math_ops.multiply(centered, centered), axis=axes)
        y = _normalize(centered, v, scale, offset, epsilon, rank, ch)
        unbiased = math_ops.multiply(v, scalar(n / max(n - 1, 1), dt))
        # TF's FusedBatchNorm gradient takes y's cotangent only: the moments
        # it returns carry none back.
        m, unbiased = _stop_gradient(m), _stop_gradient(unbiased)
        f = float(exponential_avg_factor)
        if f != 1.0 and mean is not None and variance is not None:
            keep = scalar(1.0 - f, dt)
            m_out = math_ops.add(math_ops.multiply(mean, keep), math_ops.multiply(m, scalar(f, dt)))
            v_out = math_ops.add(math_ops.multiply(variance, keep), math_ops.multiply(unbiased, scalar(f, dt)))
            return y, m_out, v_out
        return y, m, unbiased
    if mean is None or variance is None:
        raise ValueError(f"{op}: inference (is_training=False) needs mean and variance")
    centered = math_ops.subtract(x, _per_channel(mean, rank, ch))
    return _normalize(centered, variance, scale, offset, epsilon, rank, ch), mean, variance


def _stop_gradient(x):
    (out,) = bind(StopGradientOp, [x])
    return out


def _normalize(centered, var, scale, offset, epsilon, rank, ch):
    dt = dtype_of(centered)
    inv = math_ops.divide(scalar(1, dt), math_ops.sqrt(math_ops.add(var, scalar(epsilon, dt))))
    if scale is not None:
        inv = math_ops.multiply(inv, scale)
    y = math_ops.multiply(centered, _per_channel(inv, rank, ch))
    if offset is not None:
        y = math_ops.add(y, _per_channel(offset, rank, ch))
    return y


def sync_batch_normalization(
    x: Any,
    scale: Any = None,
    offset: Any = None,
    variance_epsilon: float = 0.001,
    axis: int = -1,
    group_assignment: Any = None,
    name: str | None = None,
) -> tuple[Any, Any, Any]:
    """Batch normalization with the moments of the whole global batch: each
    replica's per-channel sum and sum of squares (and element count) summed
    with ``cross_replica_sum`` over every replica, or within each group of
    ``group_assignment`` (the op of TF's
    ``tf.keras.layers.experimental.SyncBatchNormalization`` on TPU).

    Returns ``(y, mean, variance)``, the global mean and (biased) variance
    of shape ``[C]``; ``y`` has x's shape.  ``axis`` is the channel axis.
    Eagerly (one replica) it is ordinary batch normalization.

    Raises:
      ValueError: scale / offset not of shape ``[C]``; ``axis`` out of range.
    """
    op = "sync_batch_normalization"
    x = _float_input(x, op)
    xs, dt = shape_of(x), dtype_of(x)
    rank = len(xs)
    if not -rank <= axis < rank:
        raise ValueError(f"{op}: axis {axis} out of range for rank {rank}")
    ch = axis % rank
    axes = tuple(d for d in range(rank) if d != ch)
    groups = None
    if group_assignment is not None:
        groups = [[int(r) for r in g] for g in np.asarray(group_assignment).tolist()]
    local_n = int(np.prod([xs[a] for a in axes], dtype=np.int64))
    s1 = math_ops.reduce_sum(x, axis=axes)
    s2 = math_ops.reduce_sum(math_ops.multiply(x, x), axis=axes)
    stacked = _concat0([s1, s2, reshape(scalar(local_n, dt), (1,))])
    (total,) = bind(tpu.CrossReplicaSumOp, [stacked], group_assignment=groups)
    c = xs[ch]
    n = getitem(total, slice(2 * c, 2 * c + 1))
    mean = math_ops.divide(getitem(total, slice(0, c)), n)
    var = math_ops.subtract(math_ops.divide(getitem(total, slice(c, 2 * c)), n), math_ops.multiply(mean, mean))
    ps = []
    for what, v in (("scale", scale), ("offset", offset)):
        if v is not None:
            v = convert(read_if_variable(v))
            if shape_of(v) != (c,):
                raise ValueError(f"{op}: {what} must have shape [{c}], got {list(shape_of(v))}")
        ps.append(v)
    centered = math_ops.subtract(x, _per_channel(mean, rank, ch))
    return _normalize(centered, var, ps[0], ps[1], variance_epsilon, rank, ch), mean, var


def _concat0(values):
    return concat(values, axis=0)
