"""Linear algebra beyond contractions: ``hlo.svd``, the singular value
decomposition that ``tf.norm(x, ord=2, axis=[-2, -1])`` (the largest
singular value) and ``tf.linalg.svd`` are made of.

StableHLO has no SVD: XLA computes one with a library routine built of HLO
ops (``xla/hlo/builder/lib/svd.h``, one-sided Jacobi; TF's ``Svd`` op lowers
through it), and JAX's ``lax.linalg.svd`` calls LAPACK's ``gesdd`` on CPU.
``hlo.svd`` is that operation as one op with TF's ``Svd`` semantics
(``full_matrices=False``): the kernel is ``numpy.linalg.svd`` (LAPACK
``gesdd``), the gradient TF's ``_SvdGrad`` (``linalg_grad.py``; Giles 2008,
Townsend 2016).  StableHLO export refuses it (no StableHLO op).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, IntegerType, TensorType
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, traits_def, var_result_def
from xdsl.traits import Pure

from xtpu.dialects import vjp_util as G
from xtpu.dialects.hlo import FLOATS, ConstantOp, DotGeneralOp, _require_dtype
from xtpu.dialects.hlo_indexing import BoolParam
from xtpu.dialects.primitive import PrimitiveOp, ShapeError
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype

#: Element types LAPACK computes in; the others (bfloat16, float16) go through float32.
_LAPACK = (np.dtype(np.float32), np.dtype(np.float64))


@irdl_op_definition
class SvdOp(PrimitiveOp):
    """The singular value decomposition of each matrix in the last two
    dimensions of ``operand`` (TF's ``Svd`` with ``full_matrices=False``;
    no StableHLO op, see the module doc).

    For ``operand`` of shape ``B + [M, N]`` and ``K = min(M, N)``:

    * ``compute_uv = false``: one result, the singular values ``s`` of shape
      ``B + [K]``, in descending order;
    * ``compute_uv = true``: three results ``s``, ``u`` of shape
      ``B + [M, K]`` and ``v`` of shape ``B + [N, K]``, with
      ``operand = u @ diag(s) @ transpose(v)`` (TF's order and ``v``, not
      ``v^T``).  The signs of a singular vector pair are LAPACK's.

    Float operands (bfloat16 and float16 computed in float32 and rounded
    once); a non-finite matrix gives NaN results.  Verifier: one operand of
    rank at least 2 and a float dtype, results as above (a ShapeError /
    VerifyException otherwise).

    Syntax::

      %s = hlo.svd %x compute_uv = false : (tensor<3x4xf32>) -> tensor<3xf32>
      %s, %u, %v = hlo.svd %x compute_uv = true
          : (tensor<3x4xf32>) -> (tensor<3xf32>, tensor<3x3xf32>, tensor<4x3xf32>)

    Gradient (TF's ``_SvdGrad``): without ``u`` and ``v``, ``u @ diag(ds) @
    v^T``, from a second ``hlo.svd`` with ``compute_uv`` (so the gradient of
    the largest singular value is ``ds * u1 v1^T``); with them, Townsend's
    formula, which is unbounded where two singular values are equal (the
    vectors are then not unique), as TF's.
    """

    name = "hlo.svd"
    operand = operand_def(TensorType)
    compute_uv = prop_def(IntegerAttr[IntegerType])
    results_ = var_result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$operand `compute_uv` `=` $compute_uv attr-dict `:` functional-type(operands, results)"
    PARAMS: ClassVar = {"compute_uv": BoolParam()}

    @classmethod
    def make(cls, operands, **params):
        return super().make(operands, **{"compute_uv": False, **params})

    @classmethod
    def infer(cls, specs, compute_uv=False, **_):
        if len(specs) != 1:
            raise ShapeError(f"hlo.svd takes one operand, got {len(specs)}")
        (x,) = specs
        _require_dtype(x, FLOATS, cls.name)
        if x.rank < 2:
            raise ShapeError(f"hlo.svd needs an operand of rank at least 2 (matrices), got {x}")
        *batch, m, n = x.shape
        k = min(m, n)
        s = TensorSpec((*batch, k), x.dtype)
        if not compute_uv:
            return [s]
        return [s, TensorSpec((*batch, m, k), x.dtype), TensorSpec((*batch, n, k), x.dtype)]

    @classmethod
    def kernel(cls, compute_uv=False, **_):
        return _svd_uv if compute_uv else _svd_s

    @classmethod
    def vjp(cls, cotangents, inputs, outputs, compute_uv=False, **params):
        """TF's ``_SvdGrad`` (``full_matrices=False``), see the class doc."""
        (x,) = inputs
        if not G.is_float(x):
            return [None]
        *batch, m, n = G.shape(x)
        if min(m, n) == 0:
            return [G.zeros_like(x)]
        if not compute_uv:
            (ds,) = cotangents
            _, u, v = G.bind(SvdOp, [x], compute_uv=True)
            return [_mm(_scale_columns(u, ds), v, tb=True)]
        ds, du, dv = cotangents
        s, u, v = outputs
        return [_svd_uv_vjp(s, u, v, ds, du, dv, m, n)]


def _lapack(x: np.ndarray) -> tuple[np.ndarray, np.dtype]:
    x = np.asarray(x)
    return (x if x.dtype in _LAPACK else x.astype(np.float32)), x.dtype


def _svd_s(x):
    a, dt = _lapack(x)
    *batch, m, n = a.shape
    if min(m, n) == 0:
        return np.zeros((*batch, 0), dt)
    try:
        s = np.linalg.svd(a, compute_uv=False)
    except np.linalg.LinAlgError:  # LAPACK did not converge (a non-finite matrix)
        s = np.full((*batch, min(m, n)), np.nan, a.dtype)
    return s.astype(dt, copy=False)


def _svd_uv(x):
    a, dt = _lapack(x)
    *batch, m, n = a.shape
    k = min(m, n)
    if k == 0:
        return np.zeros((*batch, 0), dt), np.zeros((*batch, m, 0), dt), np.zeros((*batch, n, 0), dt)
    try:
        u, s, vh = np.linalg.svd(a, full_matrices=False)
    except np.linalg.LinAlgError:
        u = np.full((*batch, m, k), np.nan, a.dtype)
        s = np.full((*batch, k), np.nan, a.dtype)
        vh = np.full((*batch, k, n), np.nan, a.dtype)
    v = np.swapaxes(vh, -1, -2)
    return s.astype(dt, copy=False), u.astype(dt, copy=False), np.ascontiguousarray(v, dtype=dt)


# ---- the gradient's matrix algebra, as hlo ops ----------------------------


def _mm(a: Any, b: Any, ta: bool = False, tb: bool = False) -> Any:
    """``a @ b`` over the leading (batch) dimensions, ``a`` / ``b``
    transposed in their last two dimensions when ``ta`` / ``tb``."""
    r = len(G.shape(a))
    batch = tuple(range(r - 2))
    return G.bind1(
        DotGeneralOp,
        [a, b],
        lhs_batching_dimensions=batch,
        rhs_batching_dimensions=batch,
        lhs_contracting_dimensions=(r - 2 if ta else r - 1,),
        rhs_contracting_dimensions=(r - 1 if tb else r - 2,),
    )


def _t(x: Any) -> Any:
    r = len(G.shape(x))
    return G.transpose(x, (*range(r - 2), r - 1, r - 2))


def _scale_columns(a: Any, s: Any) -> Any:
    """``a @ diag(s)``: column ``j`` of each matrix times ``s[..., j]``."""
    shape = G.shape(a)
    r = len(shape)
    return G.mul(a, G.broadcast(s, (*range(r - 2), r - 1), shape))


def _scale_rows(a: Any, s: Any) -> Any:
    """``diag(s) @ a``."""
    shape = G.shape(a)
    r = len(shape)
    return G.mul(a, G.broadcast(s, (*range(r - 1),), shape))


def _eye_like(x: Any) -> Any:
    """The identity matrix in the last two dimensions of ``x`` (square)."""
    shape, dt = G.shape(x), G.dtype(x)
    k = shape[-1]
    eye = G.bind1(ConstantOp, [], value=np.eye(k, dtype=numpy_dtype(dt)))
    return G.broadcast(eye, (len(shape) - 2, len(shape) - 1), shape)


def _safe_reciprocal(x: Any) -> Any:
    """TF's ``_SafeReciprocal``: ``x / (x * x + 1e-20)``."""
    return G.div(x, G.add(G.mul(x, x), G.full_like(x, 1e-20)))


def _svd_uv_vjp(s, u, v, ds, du, dv, m, n):
    """TF's ``_SvdGrad`` with ``compute_uv`` and ``full_matrices=False``
    (Townsend's derivation), on ``A^T`` when ``m > n``."""
    adjoint = m > n
    if adjoint:
        m, n, u, v, du, dv = n, m, v, u, dv, du
    k_shape = (*G.shape(s), G.shape(s)[-1])
    r = len(k_shape)
    s2 = G.mul(s, s)
    # f[i, j] = 1 / (s_j^2 - s_i^2), 0 on the diagonal
    diff = G.sub(G.broadcast(s2, (*range(r - 2), r - 1), k_shape), G.broadcast(s2, (*range(r - 2), r - 2), k_shape))
    eye = _eye_like(G.full(0, k_shape, G.dtype(s)))
    f = G.mul(_safe_reciprocal(diff), G.sub(G.full_like(eye, 1), eye))
    f_u = G.mul(f, _mm(u, du, ta=True))
    f_v = G.mul(f, _mm(v, dv, ta=True))
    sym_u, sym_v = G.add(f_u, _t(f_u)), G.add(f_v, _t(f_v))
    inner = G.add(G.mul(eye, G.broadcast(ds, (*range(r - 2), r - 1), k_shape)), _scale_columns(sym_u, s))
    inner = G.add(inner, _scale_rows(sym_v, s))
    grad = _mm(u, _mm(inner, v, tb=True))
    if m != n:
        dvt = _t(dv)
        term2 = G.sub(dvt, _mm(_mm(dvt, v), v, tb=True))
        grad = G.add(grad, _mm(_scale_columns(u, _safe_reciprocal(s)), term2))
    return _t(grad) if adjoint else grad


LINALG_OPS = [SvdOp]
