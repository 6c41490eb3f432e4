"""Uniform numbers for ``xtpu.nn.dropout``: Philox words from
``hlo.rng_bit_generator`` (the generator of ``xtpu.random``), 23 bits each,
as a float in ``[0, 1)`` (TF's float32 mantissa construction)."""

from __future__ import annotations

from typing import Any

import numpy as np

from xtpu.core.tracing import Tensor, bind, convert, read_if_variable
from xtpu.dialects import hlo
from xtpu.dialects.hlo_random import RngBitGeneratorOp
from xtpu.ops.core import broadcast_to, scalar


def stateless_uniform_words(shape: tuple[int, ...], seed: Any, dtype: str) -> Any:
    """Uniform ``[0, 1)`` numbers of ``shape`` and ``dtype`` (float32 or
    float64, 23 random bits either way) from the Philox key ``seed`` (an
    int, or an int scalar tensor): the numbers of
    ``xtpu.random.stateless_uniform(shape, [seed, 0], dtype=float32)``.

    Raises:
      TypeError: a non-integer seed.
    """
    s = convert(read_if_variable(seed)) if isinstance(seed, Tensor) else convert(np.asarray(seed, np.int64))
    if s.dtype not in ("int32", "int64") or tuple(s.shape) != ():
        raise TypeError(f"dropout: seed must be an integer scalar, got {s.dtype}{list(s.shape)}")
    if s.dtype == "int32":
        (s,) = bind(hlo.ConvertOp, [s], dtype="int64")
    (key,) = bind(hlo.ReshapeOp, [s], shape=(1,))
    state = bind(hlo.ConcatenateOp, [key, convert(np.zeros(2, np.int64))], dimension=0)[0]
    _, words = bind(RngBitGeneratorOp, [state], rng_algorithm="PHILOX", shape=tuple(shape))
    (high,) = bind(hlo.DivideOp, [words, broadcast_to(scalar(512, "int64"), tuple(shape))])
    (f,) = bind(hlo.ConvertOp, [high], dtype=dtype)
    (u,) = bind(hlo.MultiplyOp, [f, broadcast_to(scalar(2.0**-23, dtype), tuple(shape))])
    return u
