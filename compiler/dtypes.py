"""TF's dtype names (``tf.dtypes``): ``xtpu.bfloat16``, ``xtpu.int8``, ...

A dtype is its name, a string (``xtpu.bfloat16 == "bfloat16"``); every op
that takes a ``dtype`` also takes a numpy dtype (``ml_dtypes.bfloat16``,
``np.float16``, ...) or a Python type.  ``bfloat16`` is the TPU's own number
type: 8 exponent bits like ``float32`` (the same range) and 8 significand
bits; at run time it is ml_dtypes' numpy type, the one JAX and TF use.  The
arithmetic xtpu does on it (float32 accumulation of products and sums) is
described in ``docs/dtypes.md``.  ``complex64`` is two float32 numbers, the
real part first (numpy's ``complex64``); the ops TF defines on it are listed
there too.
"""

from __future__ import annotations

float32 = "float32"
float64 = "float64"
double = "float64"
bfloat16 = "bfloat16"
float16 = "float16"
half = "float16"
int8 = "int8"
int16 = "int16"
int32 = "int32"
int64 = "int64"
uint8 = "uint8"
uint16 = "uint16"
uint32 = "uint32"
uint64 = "uint64"
complex64 = "complex64"
bool = "bool"  # noqa: A001 -- TF's name (tf.bool); this module uses no builtin bool
bool_ = "bool"
string = "string"


__all__ = [
    "bfloat16",
    "bool",
    "bool_",
    "complex64",
    "double",
    "float16",
    "float32",
    "float64",
    "half",
    "int8",
    "int16",
    "int32",
    "int64",
    "string",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
