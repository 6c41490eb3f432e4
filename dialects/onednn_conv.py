"""float32 convolutions through oneDNN's convolution primitives.

``hlo.convolution``'s numpy kernel (:func:`xtpu.dialects.hlo_window.conv_numpy`)
copies every window into an im2col matrix and makes one BLAS call; oneDNN
(Intel's deep-learning kernel library, the one XLA's and PyTorch's CPU
backends call, already a dependency for bfloat16 GEMMs:
:mod:`xtpu.dialects.onednn`) has direct convolution kernels that read the
operands in place.  Measured here (AMD EPYC, AVX2, one thread): the ResNet
block's 3x3 convolution x[8, 16, 16, 16] (NHWC) * w[3, 3, 16, 16] (HWIO)
took 145-160 us (``brgconv:avx2``) against the im2col kernel's 360-410 us
and XLA's 240 us; its kernel gradient 170 us (``jit:avx2``) against 440 us.

Three mappings of StableHLO's convolution (StableHLO spec, "convolution")
onto oneDNN's primitives, for float32 operands and padding at least 0:

* **forward**: oneDNN's forward convolution with ``src`` the lhs (N, C,
  spatial), ``weights`` the rhs (O, I, spatial, or G, O/G, I/G, spatial for
  ``feature_group_count`` G), ``dst`` the result; strides, dilations minus
  one and padding as given.  Every operand is described by its own strides,
  so the dimension numbers cost no transpose; the weights are reordered into
  the layout the kernel chose (a few KB).
* **kernel gradient**: a convolution whose window is larger than its output
  is the kernel gradient of another (JAX's ``_conv_general_dilated_transpose_rhs``,
  which :meth:`ConvolutionOp.vjp` emits): out[b, o, s] = sum over f, k of
  lhs[b, f, s * stride + k * dilation - pad] * rhs[o, f, k].  That is oneDNN's
  backward-weights convolution with ``src`` the lhs with batch and feature
  swapped, ``diff_dst`` the rhs with its in-feature as batch, ``diff_weights``
  the result (feature as O, batch as I), the strides and dilations
  exchanged; ``batch_group_count`` G (the kernel gradient of a convolution
  of G feature groups, depthwise too) is oneDNN's G groups, weights [G,
  O/G, I, K].  (``feature_group_count`` 1 and ``lhs_dilation`` 1 only.)
  A depthwise 3x3 kernel gradient of x[8, 32, 32, 32] took 0.22 ms
  (``jit_dw:avx2``) against the im2col kernel's 2.7 ms.
* **input gradient**: a convolution whose lhs is dilated by ``s`` (window
  strides 1; JAX's ``_conv_general_dilated_transpose_lhs`` for a strided
  convolution): out[n, o, y] = sum over i, k of the dilated lhs[n, i, y + k
  * rd - lo] * rhs[o, i, k] is the ``diff_src`` of a forward convolution of
  stride ``s`` with ``diff_dst`` the lhs, weights [i, o, k] the rhs
  spatially flipped (the ``hlo.reverse`` before it undone as a view) and
  left padding (K - 1) * rd - lo: oneDNN's backward-data convolution.  The
  stride-2 3x3 input gradient of x[8, 32, 32, 32] took 2.3 ms against the
  im2col kernel's 14.7 ms (which multiplies the dilation's zeros).
  ``feature_group_count`` G is oneDNN's G groups, weights [G, I/G, O/G, K].

A mapping is used only when oneDNN has a direct kernel for it: its
reference implementation (``ref:any``, 300 ms for the kernel gradient above
in the forward mapping), its im2col + GEMM kernel (``gemm:jit``, 1.2-2x
slower than xtpu's own im2col) and shapes it rejects return None and the
caller runs the im2col kernel.  oneDNN's direct kernels want channels last:
a channels-first input (NCHW) is copied channels last first, and the result
is made in the input's layout (a view in the result's shape).  Results equal the im2col kernel's up to the order
of float32 additions (tests: ``test_onednn_conv.py``).

Each thread has its own stream, primitives' memory objects and scratchpad
(user-managed, so that two replicas' threads never share one); oneDNN's own
primitive cache shares the compiled kernels.  One OpenMP thread per call,
as :mod:`xtpu.dialects.onednn`'s GEMM.  ``XTPU_NO_ONEDNN=1`` (read when
xtpu is imported) turns this off.
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from xtpu.dialects import intra_op, onednn

__all__ = ["convolution", "implementation"]

_log = logging.getLogger(__name__)

_P = ctypes.c_void_p
_DIMS = ctypes.c_int64 * 12  # dnnl_dims_t
_F32 = np.dtype(np.float32)

# oneDNN 3's C API constants (dnnl_types.h, dnnl_common_types.h).
_CPU = 1  # dnnl_cpu
_IN_ORDER = 1  # dnnl_stream_in_order
_DT_F32 = 3  # dnnl_f32
_TAG_ANY = 1  # dnnl_format_tag_any
_FORWARD_TRAINING, _FORWARD_INFERENCE = 0x40, 0x60
_CONVOLUTION_DIRECT = 1
_SCRATCHPAD_USER = 1
_QUERY_IMPL = 8  # dnnl_query_impl_info_str
_QUERY_WEIGHTS_MD, _QUERY_DIFF_WEIGHTS_MD, _QUERY_SCRATCHPAD_MD = 131, 132, 136
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS, _ARG_SCRATCHPAD = 1, 17, 33, 80
_ARG_DIFF_SRC, _ARG_DIFF_DST, _ARG_DIFF_WEIGHTS = 129, 145, 161
_FROM, _TO = 1, 17  # a reorder's DNNL_ARG_FROM / DNNL_ARG_TO


class _Arg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _P)]


class _Api:
    """The loaded library's functions with their signatures, and the CPU
    engine (one per process)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        for name, args in (
            ("dnnl_engine_create", [ctypes.POINTER(_P), ctypes.c_int, ctypes.c_size_t]),
            ("dnnl_stream_create", [ctypes.POINTER(_P), _P, ctypes.c_uint]),
            ("dnnl_stream_wait", [_P]),
            ("dnnl_memory_desc_create_with_strides", [ctypes.POINTER(_P), ctypes.c_int, _DIMS, ctypes.c_int, _DIMS]),
            ("dnnl_memory_desc_create_with_tag", [ctypes.POINTER(_P), ctypes.c_int, _DIMS, ctypes.c_int, ctypes.c_int]),
            ("dnnl_memory_desc_destroy", [_P]),
            ("dnnl_memory_create", [ctypes.POINTER(_P), _P, _P, _P]),
            ("dnnl_memory_set_data_handle", [_P, _P]),
            ("dnnl_primitive_attr_create", [ctypes.POINTER(_P)]),
            ("dnnl_primitive_attr_set_scratchpad_mode", [_P, ctypes.c_int]),
            ("dnnl_primitive_attr_destroy", [_P]),
            (
                "dnnl_convolution_forward_primitive_desc_create",
                [ctypes.POINTER(_P), _P, ctypes.c_int, ctypes.c_int, _P, _P, _P, _P, _DIMS, _DIMS, _DIMS, _DIMS, _P],
            ),
            (
                "dnnl_convolution_backward_weights_primitive_desc_create",
                [ctypes.POINTER(_P), _P, ctypes.c_int, _P, _P, _P, _P, _DIMS, _DIMS, _DIMS, _DIMS, _P, _P],
            ),
            (
                "dnnl_convolution_backward_data_primitive_desc_create",
                [ctypes.POINTER(_P), _P, ctypes.c_int, _P, _P, _P, _DIMS, _DIMS, _DIMS, _DIMS, _P, _P],
            ),
            ("dnnl_reorder_primitive_desc_create", [ctypes.POINTER(_P), _P, _P, _P, _P, _P]),
            ("dnnl_primitive_desc_query", [_P, ctypes.c_int, ctypes.c_int, _P]),
            ("dnnl_primitive_desc_destroy", [_P]),
            ("dnnl_primitive_create", [ctypes.POINTER(_P), _P]),
            ("dnnl_primitive_execute", [_P, _P, ctypes.c_int, _P]),
            ("dnnl_primitive_destroy", [_P]),
            ("dnnl_memory_destroy", [_P]),
            ("dnnl_stream_destroy", [_P]),
        ):
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = ctypes.c_int
        lib.dnnl_primitive_desc_query_md.argtypes = [_P, ctypes.c_int, ctypes.c_int]
        lib.dnnl_primitive_desc_query_md.restype = _P
        lib.dnnl_memory_desc_get_size.argtypes = [_P]
        lib.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
        self.engine = _P()
        _check(lib.dnnl_engine_create(ctypes.byref(self.engine), _CPU, 0), "dnnl_engine_create")
        self.attr = _P()  # user-managed scratchpad: one buffer per thread and primitive
        _check(lib.dnnl_primitive_attr_create(ctypes.byref(self.attr)), "dnnl_primitive_attr_create")
        _check(lib.dnnl_primitive_attr_set_scratchpad_mode(self.attr, _SCRATCHPAD_USER), "scratchpad mode")


class _Unsupported(Exception):
    """oneDNN has no (optimized) kernel for this convolution."""


def _check(status: int, what: str) -> None:
    if status != 0:
        raise _Unsupported(f"{what}: oneDNN status {status}")


_lock = threading.Lock()
_api: _Api | None = None
_api_tried = False
_tls = threading.local()


def _get_api() -> _Api | None:
    global _api, _api_tried
    if _api_tried:
        return _api
    with _lock:
        if not _api_tried:
            lib = onednn.library()
            if lib is not None:
                try:
                    _api = _Api(lib)
                except (AttributeError, _Unsupported) as e:  # pragma: no cover - oneDNN 3 has all of them
                    _log.debug("oneDNN's convolution API is not usable: %s", e)
            _api_tried = True
    return _api


class _Desc:
    """A memory descriptor owned by Python (destroyed with the object)."""

    def __init__(self, api: _Api, dims: list[int], strides: list[int] | None) -> None:
        self.api, self.md = api, _P()
        if strides is None:
            status = api.lib.dnnl_memory_desc_create_with_tag(
                ctypes.byref(self.md), len(dims), _DIMS(*dims), _DT_F32, _TAG_ANY
            )
        else:
            status = api.lib.dnnl_memory_desc_create_with_strides(
                ctypes.byref(self.md), len(dims), _DIMS(*dims), _DT_F32, _DIMS(*strides)
            )
        _check(status, "dnnl_memory_desc_create")

    def __del__(self) -> None:
        if self.md:
            self.api.lib.dnnl_memory_desc_destroy(self.md)


def _memory(api: _Api, md: Any) -> _P:
    m = _P()
    _check(api.lib.dnnl_memory_create(ctypes.byref(m), md, api.engine, None), "dnnl_memory_create")
    return m


def _primitive(api: _Api, pd: _P) -> _P:
    prim = _P()
    _check(api.lib.dnnl_primitive_create(ctypes.byref(prim), pd), "dnnl_primitive_create")
    return prim


def _impl(api: _Api, pd: _P) -> str:
    s = ctypes.c_char_p()
    _check(api.lib.dnnl_primitive_desc_query(pd, _QUERY_IMPL, 0, ctypes.byref(s)), "query impl")
    return (s.value or b"").decode()


class _Prepared:
    """One convolution's primitives and memory objects in one thread: a
    reorder into the kernel's layout (the weights, forward) or out of it
    (the kernel gradient), the convolution, and the scratchpad."""

    def __init__(self, api: _Api, kind: str, mds: dict[str, _Desc], pd: _P, impl: str) -> None:
        lib = api.lib
        self.api, self.kind, self.impl, self._mds = api, kind, impl, mds
        self.stream = _stream(api)
        self.prim = _primitive(api, pd)
        weights_in = kind != "kernel gradient"  # the rhs is reordered in, else the result out
        inner_q = _QUERY_WEIGHTS_MD if weights_in else _QUERY_DIFF_WEIGHTS_MD
        inner_md = lib.dnnl_primitive_desc_query_md(pd, inner_q, 0)
        self.inner = np.empty(lib.dnnl_memory_desc_get_size(inner_md) // 4 + 1, np.float32)
        self.inner_mem = _memory(api, inner_md)
        lib.dnnl_memory_set_data_handle(self.inner_mem, self.inner.ctypes.data)
        scratch_md = lib.dnnl_primitive_desc_query_md(pd, _QUERY_SCRATCHPAD_MD, 0)
        self.scratch = np.empty(max(lib.dnnl_memory_desc_get_size(scratch_md), 1) // 4 + 1, np.float32)
        self.scratch_mem = _memory(api, scratch_md)
        lib.dnnl_memory_set_data_handle(self.scratch_mem, self.scratch.ctypes.data)
        user = mds["weights"].md
        rpd = _P()
        src_md, dst_md = (user, inner_md) if weights_in else (inner_md, user)
        _check(
            lib.dnnl_reorder_primitive_desc_create(ctypes.byref(rpd), src_md, api.engine, dst_md, api.engine, api.attr),
            "reorder",
        )
        try:
            self.reorder = _primitive(api, rpd)
            rscratch_md = lib.dnnl_primitive_desc_query_md(rpd, _QUERY_SCRATCHPAD_MD, 0)
            self.rscratch = np.empty(max(lib.dnnl_memory_desc_get_size(rscratch_md), 1) // 4 + 1, np.float32)
            self.rscratch_mem = _memory(api, rscratch_md)
            lib.dnnl_memory_set_data_handle(self.rscratch_mem, self.rscratch.ctypes.data)
        finally:
            lib.dnnl_primitive_desc_destroy(rpd)
        self.a_mem, self.b_mem, self.user_mem = (_memory(api, mds[k].md) for k in ("a", "b", "weights"))
        if weights_in:
            if kind == "forward":  # a = src, weights = the rhs, b = dst
                conv_args = [(_ARG_SRC, self.a_mem), (_ARG_WEIGHTS, self.inner_mem), (_ARG_DST, self.b_mem)]
            else:  # a = diff_dst, weights = the flipped rhs, b = diff_src
                conv_args = [(_ARG_DIFF_DST, self.a_mem), (_ARG_WEIGHTS, self.inner_mem), (_ARG_DIFF_SRC, self.b_mem)]
            self.reorder_args = self._args(
                [(_FROM, self.user_mem), (_TO, self.inner_mem), (_ARG_SCRATCHPAD, self.rscratch_mem)]
            )
        else:  # a = src, b = diff_dst, weights = the result
            conv_args = [(_ARG_SRC, self.a_mem), (_ARG_DIFF_DST, self.b_mem), (_ARG_DIFF_WEIGHTS, self.inner_mem)]
            self.reorder_args = self._args(
                [(_FROM, self.inner_mem), (_TO, self.user_mem), (_ARG_SCRATCHPAD, self.rscratch_mem)]
            )
        self.conv_args = self._args([*conv_args, (_ARG_SCRATCHPAD, self.scratch_mem)])

    def __del__(self) -> None:
        # A thread's cache goes with the thread (threading.local): its
        # oneDNN objects with it.
        lib = self.api.lib
        for name in ("prim", "reorder"):
            if getattr(self, name, None):
                lib.dnnl_primitive_destroy(getattr(self, name))
        for name in ("inner_mem", "scratch_mem", "rscratch_mem", "a_mem", "b_mem", "user_mem"):
            if getattr(self, name, None):
                lib.dnnl_memory_destroy(getattr(self, name))

    @staticmethod
    def _args(pairs):
        arr = (_Arg * len(pairs))(*(_Arg(a, m) for a, m in pairs))
        return (len(pairs), arr)

    def __call__(self, a: np.ndarray, b: np.ndarray, w: np.ndarray) -> None:
        lib = self.api.lib
        lib.dnnl_memory_set_data_handle(self.a_mem, a.ctypes.data)
        lib.dnnl_memory_set_data_handle(self.b_mem, b.ctypes.data)
        lib.dnnl_memory_set_data_handle(self.user_mem, w.ctypes.data)
        if self.kind != "kernel gradient":
            _check(lib.dnnl_primitive_execute(self.reorder, self.stream, *self.reorder_args), "the weights' reorder")
            _check(lib.dnnl_primitive_execute(self.prim, self.stream, *self.conv_args), "convolution")
        else:
            _check(lib.dnnl_primitive_execute(self.prim, self.stream, *self.conv_args), "convolution")
            _check(
                lib.dnnl_primitive_execute(self.reorder, self.stream, *self.reorder_args),
                "the kernel gradient's reorder",
            )
        _check(lib.dnnl_stream_wait(self.stream), "dnnl_stream_wait")


class _Stream:
    """A thread's oneDNN stream, destroyed with the thread's state."""

    def __init__(self, api: _Api) -> None:
        self.api, self.handle = api, _P()
        _check(api.lib.dnnl_stream_create(ctypes.byref(self.handle), api.engine, _IN_ORDER), "dnnl_stream_create")

    def __del__(self) -> None:
        if self.handle:
            self.api.lib.dnnl_stream_destroy(self.handle)


def _stream(api: _Api) -> _P:
    s = getattr(_tls, "stream", None)
    if s is None:
        s = _tls.stream = _Stream(api)
    return s.handle


def _elements(a: np.ndarray) -> list[int] | None:
    """``a``'s strides in elements, or None when oneDNN cannot read it in
    place (a negative, zero or unaligned stride).  A dimension of size 1
    keeps numpy's stride where it is one (oneDNN recognizes its dense
    layouts, NHWC for a batch of 1 too, by every stride: a stride of 1 there
    made it fall back to its reference kernel), else gets the outermost."""
    outer = max((s * n for s, n in zip(a.strides, a.shape) if n > 1 and s > 0), default=a.itemsize)
    out = []
    for s, n in zip(a.strides, a.shape):
        if s > 0 and s % a.itemsize == 0:
            out.append(s // a.itemsize)
        elif n == 1:
            out.append(outer // a.itemsize)
        else:
            return None
    return out


def _kind(w_shape, out_shape, p) -> str:
    """Which mapping runs the convolution: "input gradient" (oneDNN's
    backward data) when its lhs is dilated (a strided convolution's input
    gradient); "kernel gradient" (backward weights) when, without feature
    groups, its window (the rhs's spatial size) is larger than its output;
    else "forward"."""
    if any(d > 1 for d in p["lhs_dilation"]):
        return "input gradient"
    dn = p["dimension_numbers"]
    window = math.prod(w_shape[d] for d in dn.rhs[2:])
    if p["feature_group_count"] == 1 and window > math.prod(out_shape[d] for d in dn.out[2:]):
        return "kernel gradient"
    return "forward"


def _channels_last(x: np.ndarray, spec: Sequence[int]) -> bool:
    """Whether ``x``'s features (``spec[1]``) are its innermost dimension
    among the features and the spatial ones (or there is one feature)."""
    spatial = [x.strides[d] for d in spec[2:] if x.shape[d] > 1]
    return x.shape[spec[1]] == 1 or (bool(spatial) and x.strides[spec[1]] < min(spatial))


def _to_channels_last(x: np.ndarray, spec: Sequence[int]) -> np.ndarray:
    """``x`` copied into memory ordered batch, spatial..., features (a view
    with ``x``'s shape).  oneDNN's direct kernels want channels last: on
    channels-first operands it offers only an im2col and GEMM kernel
    (``gemm:jit``), 1.2-2x slower than xtpu's own; the copy costs about a
    tenth of the convolution."""
    order = [spec[0], *spec[2:], spec[1]]
    buf = np.empty([x.shape[d] for d in order], x.dtype)
    view = buf.transpose(sorted(range(len(order)), key=order.__getitem__))
    np.copyto(view, x)
    return view


def _result_array(x: np.ndarray, shape: tuple[int, ...], p: dict) -> np.ndarray:
    """A new float32 array of the result's ``shape`` whose memory order of
    batch, feature and spatial dimensions is ``x``'s (oneDNN's kernels want
    the source and destination in one layout: channels last, or first)."""
    dn = p["dimension_numbers"]
    if x.shape[dn.lhs[1]] == 1:
        return np.empty(shape, np.float32)  # x's layout says nothing of the features'
    spatial = [x.strides[d] for d in dn.lhs[2:] if x.shape[d] > 1]
    channels_last = bool(spatial) and x.strides[dn.lhs[1]] < min(spatial)
    roles = [0, *range(2, x.ndim), 1] if channels_last else list(range(x.ndim))
    order = [dn.out[r] for r in roles]  # the result's dimensions, outermost first
    buf = np.empty([shape[d] for d in order], np.float32)
    return buf.transpose(sorted(range(len(order)), key=order.__getitem__))


def _forward_pd(api: _Api, src: _Desc, weights: _Desc, dst: _Desc, geometry, attr: Any) -> _P:
    """A forward convolution's primitive descriptor (``geometry``: strides,
    dilations minus one, left and right padding)."""
    pd = _P()
    status = api.lib.dnnl_convolution_forward_primitive_desc_create(
        ctypes.byref(pd), api.engine, _FORWARD_TRAINING, _CONVOLUTION_DIRECT, src.md, weights.md, None, dst.md,
        *(_DIMS(*g) for g in geometry), attr,
    )  # fmt: skip
    _check(status, "convolution forward")
    return pd


def _backward_pd(api: _Api, what: str, create: Any, mds: tuple, hint: tuple[_Desc, _Desc, _Desc], geometry) -> _P:
    """A backward convolution's primitive descriptor: ``create`` (oneDNN's
    backward-data or backward-weights one) of ``mds``, with the forward
    convolution ``hint`` (src, weights, dst) it is the gradient of."""
    fwd = _forward_pd(api, *hint, geometry, None)
    pd = _P()
    try:
        status = create(
            ctypes.byref(pd), api.engine, _CONVOLUTION_DIRECT, *mds, *(_DIMS(*g) for g in geometry), fwd, api.attr
        )
    finally:
        api.lib.dnnl_primitive_desc_destroy(fwd)
    _check(status, what)
    return pd


def _plan(api: _Api, x: np.ndarray, w: np.ndarray, out: np.ndarray, p: dict, kind: str) -> _Prepared:
    """The primitives of one convolution of ``kind`` (see the module
    docstring and :func:`_kind`)."""
    dn = p["dimension_numbers"]
    xs, ws, os_ = _elements(x), _elements(w), _elements(out)
    lo = [int(a) for a, _ in p["padding"]]
    hi = [int(b) for _, b in p["padding"]]
    g = p["feature_group_count"]
    window = [w.shape[d] for d in dn.rhs[2:]]

    def pick(a, strides, dims):
        return [a.shape[d] for d in dims], [strides[d] for d in dims]

    if kind == "input gradient":
        # out[n, o, y] = sum over i, k of lhs dilated by s [n, i, y + k * rd - lo]
        # * rhs[o, i, k]: the diff_src of a forward convolution of stride s
        # whose diff_dst is the lhs and whose weights [i, o, k] are the rhs
        # flipped (w here, see _operands), left padding (K - 1) * rd - lo.
        a = _Desc(api, *pick(x, xs, dn.lhs))  # diff_dst
        b = _Desc(api, *pick(out, os_, dn.out))  # diff_src
        wdims, wstr = pick(w, ws, (dn.rhs[1], dn.rhs[0], *dn.rhs[2:]))
        if g > 1:
            # Feature groups: group j maps the result's features [j*O/G,
            # (j+1)*O/G) (oneDNN's IC) to the lhs's [j*I/G, ...) (its OC):
            # weights [G, I/G, O/G, K].
            og = w.shape[dn.rhs[0]] // g
            wdims = [g, wdims[0], og, *wdims[2:]]
            wstr = [ws[dn.rhs[0]] * og, *wstr]
        strides, rd = list(p["lhs_dilation"]), list(p["rhs_dilation"])
        pl = [(k - 1) * d - before for k, d, before in zip(window, rd, lo)]
        x_sp, out_sp = [x.shape[d] for d in dn.lhs[2:]], [out.shape[d] for d in dn.out[2:]]
        pr = [
            (t - 1) * s + (k - 1) * d + 1 - y - left
            for t, s, k, d, y, left in zip(x_sp, strides, window, rd, out_sp, pl)
        ]
        if min(pl) < 0:  # a right padding below 0 is oneDNN's to take or refuse
            raise _Unsupported(f"left padding {pl} of the backward-data convolution")
        geometry = (strides, [d - 1 for d in rd], pl, pr)
    elif kind == "forward":
        a = _Desc(api, *pick(x, xs, dn.lhs))
        b = _Desc(api, *pick(out, os_, dn.out))
        o_dim, i_dim = dn.rhs[0], dn.rhs[1]
        if g == 1:
            wdims, wstr = pick(w, ws, dn.rhs)
        else:
            og = w.shape[o_dim] // g
            wdims = [g, og, w.shape[i_dim], *window]
            wstr = [ws[o_dim] * og, ws[o_dim], ws[i_dim], *(ws[d] for d in dn.rhs[2:])]
        geometry = (list(p["window_strides"]), [d - 1 for d in p["rhs_dilation"]], lo, hi)
    else:  # the kernel gradient
        lhs_nc = (dn.lhs[1], dn.lhs[0], *dn.lhs[2:])  # batch <-> feature
        rhs_nc = (dn.rhs[1], dn.rhs[0], *dn.rhs[2:])  # in-feature as batch
        out_oi = (dn.out[1], dn.out[0], *dn.out[2:])  # feature as O, batch as I
        a = _Desc(api, *pick(x, xs, lhs_nc))
        b = _Desc(api, *pick(w, ws, rhs_nc))
        wdims, wstr = pick(out, os_, out_oi)
        bg = p["batch_group_count"]
        if bg > 1:
            # A grouped convolution's kernel gradient (batch groups: JAX's
            # rule, ConvolutionOp.vjp): oneDNN's groups, weights [G, O/G,
            # I, K] with O the result's features and I its batch.
            o_dim = dn.out[1]
            wdims = [bg, out.shape[o_dim] // bg, *wdims[1:]]
            wstr = [os_[o_dim] * (out.shape[o_dim] // bg), *wstr]
        geometry = (list(p["rhs_dilation"]), [s - 1 for s in p["window_strides"]], lo, hi)
    user = _Desc(api, wdims, wstr)  # the weights as the caller holds them
    any_w = _Desc(api, wdims, None)  # in the layout the kernel picks
    lib = api.lib
    if kind == "forward":
        pd = _forward_pd(api, a, any_w, b, geometry, api.attr)
    elif kind == "input gradient":
        create = lib.dnnl_convolution_backward_data_primitive_desc_create
        pd = _backward_pd(api, "convolution backward data", create, (b.md, any_w.md, a.md), (b, any_w, a), geometry)
    else:
        create = lib.dnnl_convolution_backward_weights_primitive_desc_create
        mds = (a.md, any_w.md, None, b.md)
        pd = _backward_pd(api, "convolution backward weights", create, mds, (a, any_w, b), geometry)
    try:
        impl = _impl(api, pd)
        if impl.startswith("ref") or "gemm" in impl:
            # The reference kernel (300 ms for the kernel gradient of the
            # module docstring in the forward mapping) or an im2col + GEMM
            # one (xtpu's own is as fast or faster): the im2col kernel.
            raise _Unsupported(f"only oneDNN's {impl} kernel")
        return _Prepared(api, kind, {"a": a, "b": b, "weights": user}, pd, impl)
    finally:
        lib.dnnl_primitive_desc_destroy(pd)


def _key(p: dict, *arrays: np.ndarray) -> tuple:
    params = (v for k, v in sorted(p.items()) if k not in ("precision_config", "preferred_element_type"))
    return (*((a.shape, a.strides) for a in arrays), *params)


def _usable(x: np.ndarray, w: np.ndarray, p: dict) -> bool:
    return (
        x.dtype == _F32
        and w.dtype == _F32
        and 3 <= x.ndim <= 5
        and p.get("preferred_element_type") in (None, "f32", np.float32, _F32)
        and (
            all(d == 1 for d in p["lhs_dilation"])
            or (all(s == 1 for s in p["window_strides"]) and p["batch_group_count"] == 1)
        )
        and all(lo >= 0 and hi >= 0 for lo, hi in p["padding"])
        and x.size > 0
        and w.size > 0
    )


def _cache() -> dict:
    cache = getattr(_tls, "convs", None)
    if cache is None:
        cache = _tls.convs = {}
    return cache


def _prepared(x: np.ndarray, w: np.ndarray, out: np.ndarray, p: dict, kind: str) -> _Prepared | None:
    """This thread's primitives for ``out = conv(x, w)``, made on first use,
    or None when oneDNN has no kernel for it."""
    cache = _cache()
    key = _key(p, x, w, out)
    prepared = cache.get(key, False)
    if prepared is False:
        try:
            prepared = _plan(_api, x, w, out, p, kind)
        except _Unsupported as e:
            _log.debug("convolution %s * %s through the im2col kernel: %s", x.shape, w.shape, e)
            prepared = None
        cache[key] = prepared
    return prepared


def _run(prepared: _Prepared, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    onednn.one_thread()
    if prepared.kind == "kernel gradient":
        prepared(x, w, out)
    else:
        prepared(x, out, w)


def _operands(x: np.ndarray, w: np.ndarray, shape: Sequence[int], p: dict):
    """(x, w, the result array, the mapping's kind) as oneDNN reads them,
    or None when the convolution is not for oneDNN (see
    :func:`convolution`)."""
    if not _usable(x, w, p) or _get_api() is None or 0 in shape:
        return None
    kind = _kind(w.shape, shape, p)
    if p["batch_group_count"] > 1 and kind != "kernel gradient":
        return None  # batch groups only as a grouped convolution's kernel gradient
    dn = p["dimension_numbers"]
    # A reversed (negative strides) or broadcast (zero strides) operand, as
    # the input gradient's reversed kernel: oneDNN reads strides >= 1 only.
    if _elements(x) is None:
        x = np.ascontiguousarray(x)
    if kind != "kernel gradient" and not _channels_last(x, dn.lhs):
        x = _to_channels_last(x, dn.lhs)
    if kind == "input gradient":
        # The backward-data mapping reads the kernel spatially flipped: the
        # hlo.reverse before it undone (a view), or the flip copied.
        w = w[tuple(slice(None, None, -1) if d in dn.rhs[2:] else slice(None) for d in range(w.ndim))]
    if _elements(w) is None:
        w = np.ascontiguousarray(w)
    # The kernel gradient's result is a kernel: C-contiguous.
    out = np.empty(tuple(shape), np.float32) if kind == "kernel gradient" else _result_array(x, tuple(shape), p)
    return x, w, out, kind


def _found(x: np.ndarray, w: np.ndarray, shape: Sequence[int], p: dict):
    """(primitives, x, w, result array) of a convolution oneDNN runs, or
    None.  A convolution found not to be oneDNN's is remembered by its
    operands' shapes and strides, so that later calls neither copy its
    operands nor make a result array for nothing."""
    cache = _cache()
    rejected = _key(p, x, w)
    if cache.get(rejected, False) is None:
        return None
    found = _operands(x, w, shape, p)
    prepared = None if found is None else _prepared(*found[:3], p, found[3])
    if prepared is None:
        cache[rejected] = None
        return None
    return (prepared, *found[:3])


def convolution(x: np.ndarray, w: np.ndarray, shape: Sequence[int], **p: Any) -> np.ndarray | None:
    """StableHLO's convolution of float32 ``x`` and ``w`` through oneDNN: a
    new float32 array of the result's ``shape`` (the op's shape rule gives
    it), or None when oneDNN is not loaded, the parameters are outside the
    three mappings of the module docstring, or oneDNN has only its reference
    or GEMM kernel for them (the caller then runs the im2col kernel).  ``p``:
    :func:`xtpu.dialects.hlo_window.conv_params`'s parameters.

    A convolution of at least :data:`xtpu.dialects.intra_op.MIN_WORK`
    multiply-adds is split along its batch over :func:`intra_op.parts`
    threads (each piece the same kernel on a slice of the batch), as a
    matmul is."""
    found = _found(x, w, shape, p)
    if found is None:
        return None
    prepared, x, w, out = found
    dn = p["dimension_numbers"]
    n = intra_op.parts()
    batch = x.shape[dn.lhs[0]]
    if (
        n > 1
        and batch > 1
        and p["batch_group_count"] == 1
        and out.size * (w.size // max(w.shape[dn.rhs[0]], 1)) >= intra_op.MIN_WORK
    ):
        pieces = []
        for sl in intra_op.slices(batch, n):
            xi = x[(slice(None),) * dn.lhs[0] + (sl,)]
            oi = out[(slice(None),) * dn.out[0] + (sl,)]
            pieces.append((xi, w, oi))

        def piece(xi, wi, oi):
            prep = _prepared(xi, wi, oi, p, prepared.kind)
            if prep is None:  # pragma: no cover - a slice of a batch oneDNN runs whole
                raise RuntimeError(f"oneDNN has no kernel for a slice {xi.shape} of the convolution's batch")
            _run(prep, xi, wi, oi)

        intra_op.run_pieces(piece, pieces)
    else:
        _run(prepared, x, w, out)
    return out


def implementation(x: np.ndarray, w: np.ndarray, shape: Sequence[int], **p: Any) -> str | None:
    """The oneDNN kernel :func:`convolution` uses for these operands (for
    example ``brgconv:avx2``, ``jit:avx2``), or None when it uses none."""
    found = _found(x, w, shape, p)
    return None if found is None else found[0].impl
