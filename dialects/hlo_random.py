"""``hlo.rng_bit_generator``: counter-based random bits with Philox4x32-10
(StableHLO spec: rng_bit_generator, ``rng_algorithm = PHILOX``).

Philox4x32-10 is the generator of Salmon et al., "Parallel Random Numbers:
As Easy as 1, 2, 3" (SC'11; the Random123 library), which TF's random ops
and JAX's ``rbg`` use: a 128-bit counter and a 64-bit key give four 32-bit
words through ten rounds of two 32x32->64-bit multiplications, with the key
bumped by the Weyl constants between rounds.

The state is ``int64[3]``: ``[key, counter_low, counter_high]`` (StableHLO
keeps PHILOX's state in ``ui64[2]`` or ``ui64[3]``; xtpu has no unsigned
dtypes, so the words are the same 64-bit patterns held in int64).  Output
words ``4 i .. 4 i + 3`` are block ``i``: Philox of the counter plus ``i``
under the key, in row-major order of the output shape; xtpu holds the 32-bit
words in ``int64`` (values in ``[0, 2**32)``, as StableHLO's ``ui32``).  The
output state is the input's with the counter advanced by the number of
blocks used, so consecutive calls draw fresh numbers.

Not differentiable (random bits have no gradient; TF declares its random
ops ``NotDifferentiable``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from xtpu.dialects.primitive import PrimitiveOp, ShapeError, StrParam
from xtpu.dialects.tensor_spec import TensorSpec

PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counters: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Philox4x32-10 of ``counters`` (``uint64[N, 4]`` holding 32-bit words)
    under ``key`` (two 32-bit words): ``uint64[N, 4]`` of 32-bit words."""
    c = [counters[:, j].astype(np.uint64) for j in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(PHILOX_W[0])) & MASK32
            k1 = (k1 + np.uint64(PHILOX_W[1])) & MASK32
        p0 = m0 * c[0]
        p1 = m1 * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & MASK32
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
    return np.stack(c, axis=1)


def philox_bits(state: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` 32-bit words (int64) from an ``int64[3]`` state, and the new state."""
    st = np.asarray(state, dtype=np.int64).view(np.uint64)
    key = (int(st[0] & MASK32), int(st[0] >> np.uint64(32)))
    blocks = -(-int(count) // 4)
    lo = st[1] + np.arange(blocks, dtype=np.uint64)  # wraps modulo 2**64
    carry = (lo < st[1]).astype(np.uint64)
    hi = st[2] + carry
    ctr = np.stack([lo & MASK32, lo >> np.uint64(32), hi & MASK32, hi >> np.uint64(32)], axis=1)
    words = philox4x32_10(ctr, key).reshape(-1)[:count].astype(np.int64)
    new_lo = st[1] + np.uint64(blocks)
    new_hi = st[2] + (np.uint64(1) if new_lo < st[1] else np.uint64(0))
    new_state = np.array([st[0], new_lo, new_hi], dtype=np.uint64).view(np.int64)
    return new_state, words


@irdl_op_definition
class RngBitGeneratorOp(PrimitiveOp):
    """``(output_state, output) = rng_bit_generator(initial_state)`` with
    Philox4x32-10 (see the module docstring).

    Operands: ``initial_state``, ``int64[3]``.  Results: the new state
    (``int64[3]``) and ``int64`` words of the requested shape.

    Raises (shape rule): ShapeError for another state type or algorithm.
    """

    name = "hlo.rng_bit_generator"
    initial_state = operand_def(TensorType)
    rng_algorithm = prop_def(StringAttr)
    output_state = result_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$initial_state `,` `algorithm` `=` $rng_algorithm attr-dict `:` functional-type(operands, results)"
    )
    PARAMS: ClassVar = {"rng_algorithm": StrParam()}
    NOT_DIFFERENTIABLE: ClassVar = True

    def result_params(self):
        return {"shape": TensorSpec.of_type(self.output.type).shape}

    @classmethod
    def infer(cls, specs, rng_algorithm="PHILOX", shape=(), **_):
        if len(specs) != 1:
            raise ShapeError(f"hlo.rng_bit_generator takes one operand, the state, got {len(specs)}")
        if specs[0] != TensorSpec((3,), "int64"):
            raise ShapeError(
                f"hlo.rng_bit_generator state must be int64[3] (key, counter low, counter high), got {specs[0]}"
            )
        if rng_algorithm != "PHILOX":
            raise ShapeError(f"hlo.rng_bit_generator implements rng_algorithm PHILOX, got {rng_algorithm!r}")
        if shape is None or any(int(d) < 0 for d in shape):
            raise ShapeError(f"hlo.rng_bit_generator output shape must be static and non-negative, got {shape}")
        return [TensorSpec((3,), "int64"), TensorSpec(tuple(int(d) for d in shape), "int64")]

    @classmethod
    def kernel(cls, shape=(), **_):
        shape = tuple(int(d) for d in shape)
        count = int(np.prod(shape, dtype=np.int64))

        def run(state):
            new_state, words = philox_bits(state, count)
            return new_state, words.reshape(shape)

        return run


RANDOM_OPS = [RngBitGeneratorOp]
