"""Static tensor descriptions shared by the tracer, the verifiers and the runtime.

A :class:`TensorSpec` is the abstract value of a tensor: a static shape and a
dtype name (TF's names: ``float32``, ``float64``, ``bfloat16``, ``float16``,
``int8`` ... ``int64``, ``uint8`` ... ``uint64``, ``complex64``, ``bool`` and
``string``).  It converts to and from the builtin MLIR ``tensor<...>`` type
(``f32``, ``bf16``, ``f16``, ``i8``, ``ui8``, ``complex<f32>``, ... as StableHLO
spells them); strings use
``tensor<...x!hlo.string>``, a type that only the host can hold.  At run time
``bfloat16`` is ml_dtypes' numpy type (the one JAX and TF use).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    ComplexType,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    Signedness,
    TensorType,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition

#: Floating-point dtypes; ``bfloat16`` and ``float16`` are the low-precision ones.
FLOAT_DTYPES = ("float32", "float64", "bfloat16", "float16")
LOW_PRECISION_FLOATS = ("bfloat16", "float16")
SIGNED_INT_DTYPES = ("int32", "int64", "int8", "int16")
UNSIGNED_INT_DTYPES = ("uint8", "uint16", "uint32", "uint64")
INT_DTYPES = SIGNED_INT_DTYPES + UNSIGNED_INT_DTYPES
NUMERIC_DTYPES = ("float32", "float64", "int32", "int64", "bool") + (
    "bfloat16",
    "float16",
    "int8",
    "int16",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "complex64",
)
#: Complex dtypes (TF's ``complex64``: two float32, the real part first).
COMPLEX_DTYPES = ("complex64",)
DTYPES = NUMERIC_DTYPES + ("string",)


def is_float_dtype(dtype: str) -> bool:
    """True for ``float32``, ``float64``, ``bfloat16`` and ``float16``."""
    return dtype in FLOAT_DTYPES


def is_complex_dtype(dtype: str) -> bool:
    """True for ``complex64``."""
    return dtype in COMPLEX_DTYPES


def is_int_dtype(dtype: str) -> bool:
    """True for the signed and unsigned integer dtypes (not ``bool``)."""
    return dtype in INT_DTYPES


@irdl_attr_definition
class StringType(ParametrizedAttribute, TypeAttribute):
    """The element type of host-only string tensors (TF's ``tf.string``).

    A device program may not hold values of this type; the
    ``tpu-mark-outside-compilation`` pass moves ops that produce or consume it
    to the host.
    """

    name = "hlo.string"


string = StringType()

_TO_ELEMENT: dict[str, Attribute] = {
    "float32": f32,
    "float64": f64,
    "int32": i32,
    "int64": i64,
    "bool": i1,
    "string": string,
    "bfloat16": bf16,
    "float16": f16,
    "int8": IntegerType(8),
    "int16": IntegerType(16),
    "uint8": IntegerType(8, Signedness.UNSIGNED),
    "uint16": IntegerType(16, Signedness.UNSIGNED),
    "uint32": IntegerType(32, Signedness.UNSIGNED),
    "uint64": IntegerType(64, Signedness.UNSIGNED),
    "complex64": ComplexType(f32),
}


def element_type(dtype: str) -> Attribute:
    """The MLIR element type of a dtype name; ValueError for an unknown one."""
    try:
        return _TO_ELEMENT[dtype]
    except KeyError:
        raise ValueError(f"unsupported dtype {dtype!r}; xtpu supports {', '.join(DTYPES)}") from None


def dtype_of_element(elem: Attribute) -> str:
    """The dtype name of an MLIR element type; ValueError if xtpu has none."""
    if isinstance(elem, Float32Type):
        return "float32"
    if isinstance(elem, Float64Type):
        return "float64"
    if isinstance(elem, BFloat16Type):
        return "bfloat16"
    if isinstance(elem, Float16Type):
        return "float16"
    if isinstance(elem, StringType):
        return "string"
    if isinstance(elem, ComplexType) and isinstance(elem.element_type, Float32Type):
        return "complex64"
    if isinstance(elem, IntegerType):
        width = elem.width.data
        if elem.signedness.data == Signedness.SIGNLESS:
            if width == 1:
                return "bool"
            if width in (8, 16, 32, 64):
                return f"int{width}"
        elif elem.signedness.data == Signedness.UNSIGNED and width in (8, 16, 32, 64):
            return f"uint{width}"
    raise ValueError(f"unsupported element type {elem}")


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype used at run time (strings are ``object`` arrays of str)."""
    if dtype == "string":
        return np.dtype(object)
    if dtype == "bfloat16":
        return _BFLOAT16
    return np.dtype(dtype)


_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_NUMPY_NAMES = {numpy_dtype(n): n for n in NUMERIC_DTYPES}


def dtype_of_numpy(dt: np.dtype) -> str:
    """The dtype name of a numpy dtype; TypeError for one xtpu does not support."""
    name = _NUMPY_NAMES.get(dt)
    if name is not None:
        return name
    dt = np.dtype(dt)
    if dt.kind in "USO":
        return "string"
    name = dt.name
    if name in NUMERIC_DTYPES:
        return name
    raise TypeError(f"unsupported numpy dtype {name}; xtpu supports {', '.join(DTYPES)}")


def np_kind(dt: np.dtype) -> str:
    """numpy's kind letter of ``dt`` (``"f"``, ``"i"``, ``"u"``, ``"b"``, ...),
    with ml_dtypes' ``bfloat16`` a float ``"f"`` (numpy files it under ``"V"``)."""
    return "f" if dt == _BFLOAT16 else dt.kind


_VOID2 = np.dtype("V2")


def from_saved(arr: np.ndarray) -> np.ndarray:
    """An array read back from ``.npy`` / ``.npz`` with its xtpu dtype.

    numpy's file format has no name for ml_dtypes' ``bfloat16``: ``np.save``
    writes its data with the descriptor ``|V2`` (two raw bytes).  That is the
    only 2-byte void dtype xtpu writes, so it is read back as ``bfloat16``
    (a view: the bits are kept exactly); every other array is returned as
    it is."""
    if arr.dtype == _VOID2:
        return arr.view(_BFLOAT16)
    return arr


_TYPES: dict = {}
_SPECS: dict = {}
#: ``id(type) -> (type, spec)``: the same, found without hashing the type
#: (an xDSL attribute hashes its whole contents at each call); the entry
#: holds the type, so its id is not reused while the entry lives.  Emptied
#: when full.
_SPECS_BY_ID: dict[int, tuple] = {}


@dataclass(frozen=True)
class TensorSpec:
    """The static shape and dtype of a tensor (TF's ``tf.TensorSpec``).

    Attributes:
      shape: a tuple of non-negative ints; ``()`` for a scalar.
      dtype: one of :data:`DTYPES` (``float32``, ``bfloat16``, ``int8``, ...,
        ``complex64``, ``bool``, ``string``).
    """

    shape: tuple[int, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def to_type(self) -> TensorType:
        """The ``tensor<...>`` type of this spec (attributes are immutable,
        so one object per spec is shared)."""
        t = _TYPES.get(self)
        if t is None:
            t = TensorType(element_type(self.dtype), self.shape)
            if len(_TYPES) < 4096:
                _TYPES[self] = t
        return t

    @staticmethod
    def of_type(t: Attribute) -> TensorSpec:
        """The spec of a ranked ``tensor<...>`` type; ValueError otherwise."""
        known = _SPECS_BY_ID.get(id(t))
        if known is not None and known[0] is t:
            return known[1]
        spec = _SPECS.get(t) if isinstance(t, TensorType) else None
        if spec is None:
            if not isinstance(t, TensorType):
                raise ValueError(f"expected a ranked tensor type, got {t}")
            spec = TensorSpec(t.get_shape(), dtype_of_element(t.element_type))
            if len(_SPECS) < 4096:
                _SPECS[t] = spec
        if len(_SPECS_BY_ID) >= 4096:
            _SPECS_BY_ID.clear()  # the types of programs compiled long ago
        _SPECS_BY_ID[id(t)] = (t, spec)
        return spec

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]" if self.shape else f"{self.dtype}[]"
