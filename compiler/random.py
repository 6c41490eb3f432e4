"""``xtpu.random``: TF 2's seed-driven random numbers, with Philox4x32-10.

Every number comes from ``hlo.rng_bit_generator`` (StableHLO's
rng_bit_generator with ``rng_algorithm = PHILOX``; the generator is TF's and
JAX's Philox4x32-10, :mod:`xtpu.dialects.hlo_random`), so eager execution
and compiled programs draw the same numbers from the same seed.

* ``stateless_uniform(shape, seed, minval=0, maxval=None, dtype=float32)``
  and ``stateless_normal(shape, seed, mean=0, stddev=1, dtype=float32)``
  (``tf.random.stateless_uniform`` / ``stateless_normal``): a function of
  ``seed`` (two integers: the key and the high word of the counter) and the
  shape only.  Inside a replicated computation every replica draws the same
  numbers from the same seed; fold the replica id into the seed for
  different ones (``seed=[s, xtpu.get_replica_context().replica_id_in_sync_group]``).
* ``Generator.from_seed(seed)`` with ``uniform`` / ``normal``
  (``tf.random.Generator``): a state variable ``int64[3]`` (key, counter)
  advanced by each draw.  Made in ``strategy.scope()`` it is mirrored, and in
  replica context each replica draws *different* numbers (TF: "each replica
  will get a different stream"): the replica id is folded into the key (key
  ``+ replica_id * 0x9E3779B97F4A7C15``) while the counter advances alike on
  every replica.

Floats from 32-bit words ``w``: float32 uniform is ``(w >> 9) * 2**-23``
(TF's mantissa construction), float64 uses 52 bits of two words; integers
are ``minval + w mod (maxval - minval)`` (TF's, with its small bias for
ranges that do not divide 2**32).  Normals are the inverse normal CDF of
``((w >> 9) + 0.5) * 2**-23`` (Acklam's rational approximation refined by
one Halley step, :func:`ndtri`; TF uses Box-Muller, so the normal values
differ from TF's while having the same distribution).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, bind, convert, current_trace, read_if_variable
from xtpu.dialects import hlo
from xtpu.dialects.hlo_random import RngBitGeneratorOp
from xtpu.distribute.strategy import current_run_state
from xtpu.distribute.values import VariableAggregation
from xtpu.distribute.variables import Variable
from xtpu.ops.array_ops import concat, getitem, replica_id, reshape
from xtpu.ops.core import broadcast_to, dtype_name, scalar
from xtpu.ops.gather_ops import where
from xtpu.ops.math_ops import abs as abs_
from xtpu.ops.math_ops import add, divide, exp, log, maximum, minimum, multiply, negative, sqrt, subtract
from xtpu.ops.more_math_ops import floormod

_WEYL64 = np.int64(np.uint64(0x9E3779B97F4A7C15).view(np.int64))


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, Tensor):
        raise TypeError("random: the shape must be static")
    return (
        tuple(int(d) for d in np.atleast_1d(np.asarray(shape, dtype=np.int64)))
        if np.ndim(shape)
        else (() if shape is None else (int(shape),))
    )


def _state_from_seed(seed: Any) -> Any:
    """``[seed[0], 0, seed[1]]`` as int64[3]: key, counter low, counter high."""
    s = convert(read_if_variable(seed))
    if tuple(s.shape) != (2,) or s.dtype not in ("int32", "int64"):
        raise ValueError(f"seed must be an int32 or int64 tensor of shape [2], got {s.dtype}{list(s.shape)}")
    if s.dtype == "int32":
        (s,) = bind(hlo.ConvertOp, [s], dtype="int64")

    zero = convert(np.zeros(1, np.int64))
    return concat([getitem(s, slice(0, 1)), zero, getitem(s, slice(1, 2))], 0)


def _bits(state: Any, shape: tuple[int, ...]) -> tuple[Any, Any]:
    new_state, words = bind(RngBitGeneratorOp, [state], rng_algorithm="PHILOX", shape=shape)
    return new_state, words


def _div(x: Any, k: int) -> Any:
    (out,) = bind(hlo.DivideOp, [x, broadcast_to(scalar(k, "int64"), tuple(x.shape))])
    return out


def _mul_const(x: Any, c: float, dtype: str) -> Any:
    (out,) = bind(hlo.MultiplyOp, [x, broadcast_to(scalar(c, dtype), tuple(x.shape))])
    return out


def _to_float(words: Any, dtype: str) -> Any:
    """23 (float32) or 52 (float64) bits as a float in [0, 1)."""
    (f,) = bind(hlo.ConvertOp, [words], dtype=dtype)
    return f


def _uniform_from_state(state: Any, shape: tuple[int, ...], minval: Any, maxval: Any, dtype: str) -> tuple[Any, Any]:
    if dtype in ("uint32", "uint64", "int32", "int64") and minval is None and maxval is None:
        # TF's full-range integers: the generator's 32-bit words as they
        # are (uint32, the type a bit generator gives), two words per
        # element for 64 bits (the first the high half).
        n = int(np.prod(shape, dtype=np.int64))
        wide = dtype.endswith("64")
        new_state, words = _bits(state, (2 * n,) if wide else shape)
        if wide:
            pairs = reshape(words, (n, 2))
            hi_w, lo_w = (reshape(pairs[:, k : k + 1], shape) for k in (0, 1))
            (words,) = bind(hlo.AddOp, [_mul_const(hi_w, 2**32, "int64"), lo_w])  # wraps as uint64 bits
        (r,) = bind(hlo.ConvertOp, [words], dtype=dtype)
        return new_state, r
    if dtype in ("int32", "int64"):
        if minval is None or maxval is None:
            raise ValueError("Must specify maxval for integer dtype (and minval)")
        new_state, words = _bits(state, shape)
        lo, hi = (np.asarray(v, dtype=np.int64) for v in (minval, maxval))
        if isinstance(minval, Tensor) or isinstance(maxval, Tensor):
            raise TypeError("random: integer minval / maxval must be static")
        if hi.shape or lo.shape or hi <= lo:
            raise ValueError(f"random: need scalar minval < maxval, got {minval}, {maxval}")

        r = floormod(words, np.int64(hi - lo))
        (r,) = bind(hlo.AddOp, [r, broadcast_to(scalar(int(lo), "int64"), shape)])
        if dtype == "int32":
            (r,) = bind(hlo.ConvertOp, [r], dtype="int32")
        return new_state, r
    if dtype == "float32":
        new_state, words = _bits(state, shape)
        u = _mul_const(_to_float(_div(words, 512), "float32"), 2.0**-23, "float32")
    elif dtype == "float64":
        n = int(np.prod(shape, dtype=np.int64))
        new_state, words = _bits(state, (2 * n,))

        pairs = reshape(words, (n, 2)) if n else reshape(words, (0, 2))
        hi_w = reshape(pairs[:, 0:1], shape)
        lo_w = reshape(pairs[:, 1:2], shape)
        (bits52,) = bind(hlo.AddOp, [_mul_const(hi_w, 2**20, "int64"), _div(lo_w, 4096)])
        u = _mul_const(_to_float(bits52, "float64"), 2.0**-52, "float64")
    else:
        raise TypeError(f"random: unsupported dtype {dtype}")
    if minval is None and maxval is None:
        return new_state, u

    lo = 0.0 if minval is None else minval
    hi = 1.0 if maxval is None else maxval
    return new_state, add(multiply(u, subtract(hi, lo)), lo)


_A = (
    -3.969683028665376e01,
    2.209460984245205e02,
    -2.759285104469687e02,
    1.383577518672690e02,
    -3.066479806614716e01,
    2.506628277459239e00,
)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01, -1.328068155288572e01)
_C = (
    -7.784894002430293e-03,
    -3.223964580411365e-01,
    -2.400758277161838e00,
    -2.549671010243303e00,
    4.374664141464968e00,
    2.938163982698783e00,
)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
_P_LOW = 0.02425


def _polyval(coeffs: tuple[float, ...], x: Any, dtype: str) -> Any:
    out = broadcast_to(scalar(coeffs[0], dtype), tuple(x.shape))
    for c in coeffs[1:]:
        out = add(multiply(out, x), scalar(c, dtype))
    return out


def ndtri(p: Any) -> Any:
    """The inverse of the standard normal CDF for ``p`` in (0, 1) (Acklam's
    algorithm: a rational function in the centre, of ``sqrt(-2 log p)`` in
    the tails, then one Halley step; absolute error below 3e-7 in float64
    for p in [1e-9, 1 - 1e-9]).  Built from xtpu ops, float32 or float64."""
    p = convert(p)
    dt = p.dtype
    one = scalar(1.0, dt)
    q = subtract(p, scalar(0.5, dt))
    r = multiply(q, q)
    central = divide(multiply(_polyval(_A, r, dt), q), add(multiply(_polyval(_B, r, dt), r), one))
    tail_p = where(p < scalar(0.5, dt), p, subtract(one, p))
    t = sqrt(multiply(scalar(-2.0, dt), log(tail_p)))
    tail = divide(_polyval(_C, t, dt), add(multiply(_polyval(_D, t, dt), t), one))
    tail = where(p < scalar(0.5, dt), tail, negative(tail))
    in_tail = (p < scalar(_P_LOW, dt)) | (p > scalar(1.0 - _P_LOW, dt))
    x = where(in_tail, tail, central)
    # One Halley step on Phi(x) - p (Acklam's refinement), with erfc from
    # Numerical Recipes' erfcc (fractional error < 1.2e-7).
    e = subtract(multiply(scalar(0.5, dt), _erfc(multiply(x, scalar(-0.7071067811865476, dt)))), p)
    u = multiply(multiply(e, scalar(2.5066282746310002, dt)), exp(multiply(multiply(x, x), scalar(0.5, dt))))
    return subtract(x, divide(u, add(one, multiply(multiply(x, u), scalar(0.5, dt)))))


_ERFC = (
    0.17087277,
    -0.82215223,
    1.48851587,
    -1.13520398,
    0.27886807,
    -0.18628806,
    0.09678418,
    0.37409196,
    1.00002368,
    -1.26551223,
)


def _erfc(z: Any) -> Any:
    """erfc(z) by Numerical Recipes' Chebyshev fit (erfcc), from xtpu ops."""
    dt = z.dtype
    az = abs_(z)
    t = divide(scalar(1.0, dt), add(scalar(1.0, dt), multiply(az, scalar(0.5, dt))))
    r = multiply(t, exp(add(negative(multiply(az, az)), _polyval(_ERFC, t, dt))))
    return where(z >= scalar(0.0, dt), r, subtract(scalar(2.0, dt), r))


def _normal_from_state(state: Any, shape: tuple[int, ...], mean: Any, stddev: Any, dtype: str) -> tuple[Any, Any]:
    if dtype not in ("float32", "float64"):
        raise TypeError(f"random.normal: dtype must be float32 or float64, got {dtype}")
    new_state, words = _bits(state, shape)
    half = _to_float(_div(words, 512), dtype)
    (half,) = bind(hlo.AddOp, [half, broadcast_to(scalar(0.5, dtype), shape)])
    z = ndtri(_mul_const(half, 2.0**-23, dtype))

    return new_state, add(multiply(z, stddev), mean)


def stateless_uniform(
    shape: Any,
    seed: Any,
    minval: Any = 0,
    maxval: Any = None,
    dtype: Any = "float32",
    name: str | None = None,
    alg: Any = "auto_select",
) -> Any:
    """Uniform numbers in ``[minval, maxval)`` (default ``[0, 1)``) that
    depend only on ``seed`` and ``shape`` (tf.random.stateless_uniform).

    Args:
      shape: static output shape.
      seed: int32 / int64 of shape [2].
      minval, maxval: floats (broadcast), or for int32 / int64 the static
        bounds (both required); for an integer dtype both None gives
        full-range integers (TF's), the generator's 32-bit words for
        uint32 / int32 (two words for uint64 / int64).
      dtype: float32, float64, int32, int64, uint32 or uint64.

    Raises:
      ValueError: a bad seed shape; an integer dtype without maxval (but
        for full range).
    """
    dt = dtype_name(dtype)
    if dt in ("float32", "float64") and minval == 0 and maxval is None:
        minval = None
    if dt in ("uint32", "uint64") and (minval is not None or maxval is not None):
        raise ValueError(f"random: {dt} takes full-range integers only (minval=None, maxval=None)")
    return _uniform_from_state(_state_from_seed(seed), _shape(shape), minval, maxval, dt)[1]


def stateless_normal(
    shape: Any,
    seed: Any,
    mean: Any = 0.0,
    stddev: Any = 1.0,
    dtype: Any = "float32",
    name: str | None = None,
    alg: Any = "auto_select",
) -> Any:
    """Normal numbers that depend only on ``seed`` and ``shape``
    (tf.random.stateless_normal); float32 or float64."""
    return _normal_from_state(_state_from_seed(seed), _shape(shape), mean, stddev, dtype_name(dtype))[1]


_PHI_MINUS_2 = 0.022750131948179195  # the standard normal CDF at -2


def stateless_truncated_normal(
    shape: Any,
    seed: Any,
    mean: Any = 0.0,
    stddev: Any = 1.0,
    dtype: Any = "float32",
    name: str | None = None,
    alg: Any = "auto_select",
) -> Any:
    """Normal numbers of ``mean`` and ``stddev`` truncated to within two
    standard deviations of the mean, a function of ``seed`` and ``shape``
    only (tf.random.stateless_truncated_normal); float32 or float64.

    Drawn by the inverse CDF: a uniform ``u`` (the words of
    ``stateless_uniform``) mapped into ``(Phi(-2), Phi(2))`` and through
    :func:`ndtri`, so every number is inside the bounds without rejection
    (TF resamples instead; the values differ from TF's, the distribution
    is the same).

    Raises:
      ValueError: a bad seed shape; TypeError: a non-float dtype.
    """
    dt = dtype_name(dtype)
    if dt not in ("float32", "float64"):
        raise TypeError(f"stateless_truncated_normal: dtype must be float32 or float64, got {dt}")
    shp = _shape(shape)
    _, words = _bits(_state_from_seed(seed), shp)
    half = _to_float(_div(words, 512), dt)
    (half,) = bind(hlo.AddOp, [half, broadcast_to(scalar(0.5, dt), shp)])
    u = _mul_const(half, 2.0**-23, dt)
    p = _mul_const(u, 1.0 - 2.0 * _PHI_MINUS_2, dt)
    (p,) = bind(hlo.AddOp, [p, broadcast_to(scalar(_PHI_MINUS_2, dt), shp)])
    z = ndtri(p)
    # ndtri's last digits may step past the bound: clamp to [-2, 2].
    z = minimum(maximum(z, scalar(-2.0, dt)), scalar(2.0, dt))
    return add(multiply(z, stddev), mean)


class Generator:
    """A random number generator with state (tf.random.Generator), Philox.

    Make one with :meth:`from_seed`; its ``state`` is an ``xtpu.Variable``
    ``int64[3]`` (mirrored when made in ``strategy.scope()``).
    """

    def __init__(self, state: Any, alg: Any = "philox"):
        if str(alg).lower() not in ("philox", "rng_alg_philox", "1"):
            raise ValueError(f"xtpu.random.Generator implements the Philox algorithm, got {alg!r}")
        self.state = Variable(
            np.asarray(state, dtype=np.int64).reshape(3),
            name="generator_state",
            aggregation=VariableAggregation.ONLY_FIRST_TOWER,
            trainable=False,
        )

    @classmethod
    def from_seed(cls, seed: int, alg: Any = "philox") -> Generator:
        """A generator whose key is ``seed`` and counter 0."""
        return cls([int(seed), 0, 0], alg)

    @property
    def algorithm(self) -> str:
        return "philox"

    def _draw(self, fn, *args):
        state = self.state.read_value()
        run = current_run_state()
        per_replica = (
            current_trace() is not None
            and run is not None
            and not run.in_merge
            and run.num_replicas > 1
            and self.state.mirrored
        )
        if per_replica:
            (rid,) = bind(hlo.ConvertOp, [replica_id()], dtype="int64")
            key = getitem(state, slice(0, 1))
            (fold,) = bind(hlo.MultiplyOp, [rid, scalar(_WEYL64, "int64")])

            (key,) = bind(hlo.AddOp, [key, reshape(fold, (1,))])
            state = concat([key, getitem(state, slice(1, 3))], 0)
        new_state, out = fn(convert(state), *args)
        if per_replica:
            new_state = concat(
                [getitem(convert(self.state.read_value()), slice(0, 1)), getitem(new_state, slice(1, 3))], 0
            )
        self.state.assign(new_state)
        return out

    def uniform(
        self, shape: Any, minval: Any = 0, maxval: Any = None, dtype: Any = "float32", name: str | None = None
    ) -> Any:
        """Uniform numbers in ``[minval, maxval)`` (tf.random.Generator.uniform);
        advances the state."""
        dt = dtype_name(dtype)
        if dt in ("float32", "float64") and minval == 0 and maxval is None:
            minval = None
        return self._draw(_uniform_from_state, _shape(shape), minval, maxval, dt)

    def normal(
        self, shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = "float32", name: str | None = None
    ) -> Any:
        """Normal numbers (tf.random.Generator.normal); advances the state."""
        return self._draw(_normal_from_state, _shape(shape), mean, stddev, dtype_name(dtype))


__all__ = ["Generator", "ndtri", "stateless_normal", "stateless_truncated_normal", "stateless_uniform"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
