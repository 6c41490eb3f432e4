"""erf on float32 by the rational approximation of Eigen and XLA, the
kernel of ``hlo.erf`` (:mod:`xtpu.dialects.hlo_math`) on float32, bfloat16
and float16 (the latter two computed in float32).

:func:`erf_f32` is the numpy form, every step a float32 op in a fixed
order; :mod:`xtpu.dialects.bfloat16` compiles the same steps into one pass
(float32 and bfloat16 in and out), the same bits, when numba is in.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ERF_P", "ERF_Q", "erf_f32"]

#: The float32 rational approximation of erf that Eigen's
#: ``generic_fast_erf_float`` and XLA's ``ErfImpl32`` used for years:
#: ``erf(x) = P(x**2) / Q(x**2) * x`` on ``x`` clamped to [-4, 4] (erf(4) is
#: 1 in float32), P of degree 6 and Q of degree 4 in ``x**2``, Horner's rule.
ERF_P = np.array(
    [
        -2.72614225801306e-10,
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,
    ],
    np.float32,
)
ERF_Q = np.array(
    [-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03, -1.42647390514189e-02],
    np.float32,
)


def _horner(x2: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    p = x2 * coefficients[0]
    p += coefficients[1]
    for c in coefficients[2:]:
        p *= x2
        p += c
    return p


def erf_f32(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """erf of a float32 array by the rational approximation above, each
    step rounded to float32 (numpy's own ops, so the same bits on every
    machine): within 8 ulp of the exact erf over all normal float32
    (checked exhaustively: 7.95 at 3.2030487; TF 2.21's CPU kernel within
    5 on the values tried, SciPy's Cephes 0.5); odd,
    +-0.0 kept, +-inf to +-1, NaN to NaN.  About 4x faster than
    ``scipy.special.erf`` on float32 (2.2 against 8.9 ms for 512K
    elements)."""
    if out is None:  # a 0-d operand: np.clip would return a scalar, which out= cannot take
        out = np.empty(np.shape(x), np.float32)
    x = np.clip(x, np.float32(-4), np.float32(4), out=out)
    x2 = x * x
    r = _horner(x2, ERF_P)
    r /= _horner(x2, ERF_Q)
    return np.multiply(r, x, out=x)  # r * x last: x * P would underflow for |x| < 1e-36
