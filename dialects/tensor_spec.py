"""Static tensor descriptions shared by the tracer, the verifiers and the runtime.

A :class:`TensorSpec` is the abstract value of a tensor: a static shape and a
dtype name (TF's names: ``float32``, ``float64``, ``int32``, ``int64``,
``bool`` and ``string``).  It converts to and from the builtin MLIR
``tensor<...>`` type; strings use ``tensor<...x!hlo.string>``, a type that only
the host can hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    IntegerType,
    Signedness,
    TensorType,
    f32,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition

NUMERIC_DTYPES = ("float32", "float64", "int32", "int64", "bool")
DTYPES = NUMERIC_DTYPES + ("string",)


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
    if isinstance(elem, StringType):
        return "string"
    if isinstance(elem, IntegerType) and elem.signedness.data == Signedness.SIGNLESS:
        width = elem.width.data
        if width == 1:
            return "bool"
        if width == 32:
            return "int32"
        if width == 64:
            return "int64"
    raise ValueError(f"unsupported element type {elem}")


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype used at run time (strings are ``object`` arrays of str)."""
    if dtype == "string":
        return np.dtype(object)
    return np.dtype(dtype)


_NUMPY_NAMES = {np.dtype(n): n for n in NUMERIC_DTYPES}


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


_TYPES: dict = {}
_SPECS: dict = {}


@dataclass(frozen=True)
class TensorSpec:
    """The static shape and dtype of a tensor (TF's ``tf.TensorSpec``).

    Attributes:
      shape: a tuple of non-negative ints; ``()`` for a scalar.
      dtype: one of ``float32, float64, int32, int64, bool, string``.
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
        spec = _SPECS.get(t) if isinstance(t, TensorType) else None
        if spec is not None:
            return spec
        if not isinstance(t, TensorType):
            raise ValueError(f"expected a ranked tensor type, got {t}")
        spec = TensorSpec(t.get_shape(), dtype_of_element(t.element_type))
        if len(_SPECS) < 4096:
            _SPECS[t] = spec
        return spec

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]" if self.shape else f"{self.dtype}[]"
