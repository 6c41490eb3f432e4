"""One definition per op: the shape rule, the eager kernel and the IR op in one class.

Every op of the ``hlo``, ``tpu`` and ``ccl`` dialects subclasses
:class:`PrimitiveOp`.  The class is the single registry entry that the rest of
xtpu reads (the JAX primitive pattern, see ``jax/_src/core.py``):

* the tracer and the eager API call :meth:`PrimitiveOp.infer` (the shape and
  dtype rule) and :meth:`PrimitiveOp.make` (the IR op) or
  :meth:`PrimitiveOp.eager` (numpy);
* the verifier (:meth:`PrimitiveOp.verify_`) runs the same shape rule on the
  op's operand types and compares with its result types;
* the runtime asks :meth:`PrimitiveOp.kernel` for a numpy callable once, when
  it builds its execution plan.

Op parameters (dimensions, comparison direction, ...) are plain Python values
in ``params``; each class maps them to IR properties through :data:`PARAMS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, ErasedSSAValue, SSAValue
from xdsl.irdl import IRDLOperation
from xdsl.traits import OpTrait
from xdsl.utils.exceptions import VerifyException

from xtpu.dialects import dense_syntax
from xtpu.dialects.by_identity import memo
from xtpu.dialects.tensor_spec import TensorSpec, dtype_of_numpy, numpy_dtype

# Float dense<...> attributes print and parse bit for bit (inf, nan, -0.0):
# xDSL 0.74 reads MLIR's hex bit patterns back as integers (see dense_syntax).
dense_syntax.install()


class ShapeError(ValueError):
    """An op's operands do not satisfy its shape or dtype rule.

    Raised by :meth:`PrimitiveOp.infer`; the tracer adds the user's source line,
    the verifier turns it into a ``VerifyException``.
    """

    def for_op(self, op_name: str) -> str:
        """The message with the op named once: ``"hlo.add: ..."``."""
        msg = str(self)
        if msg.startswith(op_name + " "):
            msg = msg[len(op_name) + 1 :]
        return f"{op_name}: {msg}"


# --------------------------------------------------------------------------
# Parameter codecs: Python value <-> IR attribute
# --------------------------------------------------------------------------


class Param:
    """Converts one op parameter between a Python value and an attribute."""

    def encode(self, value: Any) -> Attribute:
        raise NotImplementedError

    def decode(self, attr: Attribute) -> Any:
        raise NotImplementedError


class IntArrayParam(Param):
    """A tuple of ints, stored as ``array<i64: ...>``; one attribute per
    distinct tuple (attributes are immutable: the ops that share
    dimensions share it, as MLIR's uniqued attributes)."""

    def encode(self, value: Sequence[int]) -> Attribute:
        key = tuple(int(v) for v in value)
        attr = _INT_ARRAYS.get(key)
        if attr is None:
            if len(_INT_ARRAYS) > 4096:
                _INT_ARRAYS.clear()
            attr = _INT_ARRAYS[key] = DenseArrayBase.from_list(i64, list(key))
        return attr

    def decode(self, attr: Attribute) -> tuple[int, ...]:
        # Once per attribute object (encode makes one per value).
        return memo(_INT_ARRAY_VALUES, attr, self._decode)

    @staticmethod
    def _decode(attr: Attribute) -> tuple[int, ...]:
        assert isinstance(attr, DenseArrayBase)
        return tuple(int(v) for v in attr.get_values())


_INT_ARRAYS: dict[tuple[int, ...], DenseArrayBase] = {}
_INT_ARRAY_VALUES: dict[int, tuple[Attribute, tuple[int, ...]]] = {}


class IntParam(Param):
    """An int, stored as ``N : i64``."""

    def encode(self, value: int) -> Attribute:
        # One attribute per value, as IntArrayParam's (xDSL checks an
        # IntegerAttr's range when it is made).
        value = int(value)
        attr = _INTS.get(value)
        if attr is None:
            if len(_INTS) > 4096:
                _INTS.clear()
            attr = _INTS[value] = IntegerAttr(value, i64)
        return attr

    def decode(self, attr: Attribute) -> int:
        assert isinstance(attr, IntegerAttr)
        return int(attr.value.data)


_INTS: dict[int, IntegerAttr] = {}


class StrParam(Param):
    """A string, stored as a ``StringAttr``."""

    def encode(self, value: str) -> Attribute:
        return StringAttr(str(value))

    def decode(self, attr: Attribute) -> str:
        assert isinstance(attr, StringAttr)
        return attr.data


class EnumParam(Param):
    """A member of a ``StrEnum``, stored as the dialect's enum attribute."""

    def __init__(self, attr_cls: type):
        self.attr_cls = attr_cls
        self._attrs: dict[Any, Attribute] = {}  # one attribute per member

    def encode(self, value: Any) -> Attribute:
        member = self.attr_cls.enum_type(value)
        attr = self._attrs.get(member)
        if attr is None:
            attr = self._attrs[member] = self.attr_cls(member)
        return attr

    def decode(self, attr: Attribute) -> str:
        return str(attr.data.value)  # type: ignore[attr-defined]


class GroupsParam(Param):
    """Replica groups: a tuple of equal-length tuples of ids, stored like
    StableHLO's ``replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>``."""

    def encode(self, value: Sequence[Sequence[int]]) -> Attribute:
        groups = [list(g) for g in value]
        n = len(groups[0]) if groups else 0
        arr = np.asarray(groups, dtype=np.int64).reshape(len(groups), n)
        return dense_from_array(arr)

    def decode(self, attr: Attribute) -> tuple[tuple[int, ...], ...]:
        # Once per attribute object (dense_from_array makes one per small value).
        return memo(_GROUPS_VALUES, attr, self._decode)

    @staticmethod
    def _decode(attr: Attribute) -> tuple[tuple[int, ...], ...]:
        arr = array_from_dense(attr)
        if arr.size == 0:  # no groups, or empty groups: reshape(-1) cannot infer
            return tuple(() for _ in range(arr.shape[0] if arr.ndim else 0))
        return tuple(tuple(int(v) for v in row) for row in arr.reshape(arr.shape[0], -1))


_GROUPS_VALUES: dict[int, tuple[Attribute, tuple[tuple[int, ...], ...]]] = {}


class PairsParam(GroupsParam):
    """Source-target pairs, stored as a ``tensor<Nx2xi64>`` dense attribute."""


def dense_from_array(arr: np.ndarray) -> DenseIntOrFPElementsAttr:
    """A dense elements attribute holding ``arr`` (numeric dtypes only).

    Small values (up to 64 bytes) get one shared attribute per dtype, shape
    and bytes (attributes are immutable, as MLIR's uniqued ones): the
    thousands of ``1.0`` a traced program holds are one attribute."""
    dtype = dtype_of_numpy(arr.dtype)
    if dtype == "bool":
        data = np.ascontiguousarray(arr, dtype=np.uint8).tobytes()
    else:
        data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
    small = len(data) <= 64
    if small:
        key = (dtype, arr.shape, data)
        attr = _SMALL_DENSE.get(key)
        if attr is not None:
            return attr
    attr = DenseIntOrFPElementsAttr(TensorSpec(tuple(arr.shape), dtype).to_type(), BytesAttr(data))
    if small:
        if len(_SMALL_DENSE) > 4096:
            _SMALL_DENSE.clear()
        _SMALL_DENSE[key] = attr
    return attr


_SMALL_DENSE: dict[tuple, DenseIntOrFPElementsAttr] = {}


def array_from_dense(attr: Attribute) -> np.ndarray:
    """The numpy array held by a dense elements attribute (read-only; small
    ones, up to 64 bytes, one per attribute object)."""
    assert isinstance(attr, DenseIntOrFPElementsAttr)
    raw = attr.data.data
    if len(raw) > 64:
        return _array_from_dense(attr, raw)
    got = _SMALL_ARRAYS.get(id(attr))
    if got is not None and got[0] is attr:
        return got[1]
    arr = _array_from_dense(attr, raw)
    if arr.nbytes <= 64:  # not a large splat
        if len(_SMALL_ARRAYS) > 4096:
            _SMALL_ARRAYS.clear()
        _SMALL_ARRAYS[id(attr)] = (attr, arr)  # the attribute kept: its id stays its own
    return arr


_SMALL_ARRAYS: dict[int, tuple[Attribute, np.ndarray]] = {}


def _array_from_dense(attr: DenseIntOrFPElementsAttr, raw: bytes) -> np.ndarray:
    spec = TensorSpec.of_type(attr.type)
    if spec.dtype == "bool":
        flat = np.frombuffer(raw, dtype=np.uint8).astype(bool)
    else:
        flat = np.frombuffer(raw, dtype=numpy_dtype(spec.dtype).newbyteorder("<"))
        flat = flat.astype(numpy_dtype(spec.dtype), copy=False)
    if flat.size == 1 and spec.size != 1:  # splat
        flat = np.broadcast_to(flat, (spec.size,))
    arr = np.array(flat.reshape(spec.shape))
    arr.setflags(write=False)
    return arr


# --------------------------------------------------------------------------
# The op base class
# --------------------------------------------------------------------------


class PrimitiveOp(IRDLOperation):
    """Base class of every xtpu op: IR definition, shape rule and kernel.

    Subclasses set ``PARAMS`` (parameter name -> :class:`Param`), implement
    :meth:`infer` and, when the op has a numpy meaning, :meth:`kernel`.
    ``HOST_ONLY`` marks ops a device cannot run (strings, printing); they are
    what ``tpu-mark-outside-compilation`` moves to the host.
    """

    PARAMS: ClassVar[dict[str, Param]] = {}
    HOST_ONLY: ClassVar[bool] = False
    SIDE_EFFECTS: ClassVar[bool] = False
    #: Declared not differentiable (TF's ``ops.NotDifferentiable``): a gradient
    #: that reaches the op stops there and its inputs get no cotangent.
    NOT_DIFFERENTIABLE: ClassVar[bool] = False
    #: The gradient rule takes complex64 values, with TF's convention (the
    #: input's cotangent is the cotangent times the conjugate of the
    #: derivative, ``math_grad.py``); the gradient engine refuses a gradient
    #: through a complex64 value of any other op.
    COMPLEX_GRADIENT: ClassVar[bool] = False
    #: The gradient engine differentiates this op through its regions
    #: (``hlo.if``, ``hlo.while``, ``tpu.outside_compilation``, terminators).
    STRUCTURAL_GRADIENT: ClassVar[bool] = False

    # ---- the shape rule -------------------------------------------------
    @classmethod
    def infer(cls, specs: Sequence[TensorSpec], **params: Any) -> list[TensorSpec]:
        """The result specs for operand specs and params; raises ShapeError."""
        raise NotImplementedError(f"{cls.name} has no shape rule")

    # ---- the kernel -----------------------------------------------------
    @classmethod
    def kernel(cls, **params: Any) -> Callable[..., Any]:
        """A numpy callable ``f(*operands)`` for these params.

        It returns one array for a one-result op, a tuple for several results
        and ``None`` for none.  Built once per op by the runtime's planner.
        """
        raise NotImplementedError(f"{cls.name} has no numpy kernel")

    #: :meth:`out_kernel` may write over an operand it reads (an elementwise
    #: op reading each element before it writes the same element).
    OUT_IN_PLACE: ClassVar[bool] = False

    @classmethod
    def out_kernel(cls, **params: Any) -> Callable[..., Any] | None:
        """A numpy callable ``f(out, *operands)`` that writes the op's one
        result into ``out`` (an array of the result's shape and dtype) and
        returns it, with :meth:`kernel`'s bits; None (the default) when the
        op has none for these params.  The runtime's buffer planner
        (runtime/buffers.py) writes into buffers it keeps from call to call
        through it; ``out`` never overlaps an operand unless
        :attr:`OUT_IN_PLACE`, and then only element for element.  An op
        that has one must also have a :meth:`kernel` that returns a new
        array, never a view of an operand: the planner runs that kernel for
        values it gives no buffer and counts on it (test_buffers.py checks
        every op with an ``out_kernel``)."""
        return None

    # ---- the gradient rule (VJP) ----------------------------------------
    @classmethod
    def vjp(
        cls,
        cotangents: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        **params: Any,
    ) -> list[Any]:
        """The cotangents of the inputs, given those of the outputs (the
        vector-Jacobian product; TF's registered gradient function).

        ``cotangents`` has one entry per result, of the result's shape and
        dtype (the engine fills zeros for results no gradient reached);
        ``inputs`` and ``outputs`` are the op's forward values and ``params``
        its parameters (as :meth:`params` gives them).  Values are traced
        tensors inside a replicated computation and numpy arrays eagerly: the
        rule is written with xtpu ops (:func:`xtpu.tracing.bind`), so it
        builds IR or runs eagerly like any forward op, and can itself be
        differentiated.  Returns one entry per input, ``None`` where the input
        gets no gradient (integer, bool and string inputs always get None).

        A rule may also take a keyword ``skip_input_indices``, a set of
        input positions whose cotangent nobody needs (no source depends on
        the input, or it is not float; TF's ``op.skip_input_indices``): the
        engine passes it only to rules that declare it, and such a rule
        returns None there instead of building ops the engine would erase.

        Ops without a rule either declare ``NOT_DIFFERENTIABLE`` or make the
        gradient engine raise ``LookupError`` ("No gradient defined for
        operation ...") when a gradient reaches them.
        """
        raise LookupError(f"No gradient defined for operation '{cls.name}'")

    @classmethod
    def has_gradient_rule(cls) -> bool:
        """True when the op defines :meth:`vjp` (or one of its bases does)."""
        return cls.vjp.__func__ is not PrimitiveOp.vjp.__func__  # type: ignore[attr-defined]

    # ---- params <-> properties ------------------------------------------
    def params(self) -> dict[str, Any]:
        """The op's parameters as Python values (inverse of :meth:`make`).

        Decoded once per set of property and result-type attributes (they are
        immutable, so the same attribute objects decode to the same values);
        callers get a fresh dict each time.
        """
        key = (*self.properties.values(), *(r.type for r in self.results))
        cached = self.__dict__.get("_params_cache")
        # Tuple equality tests identity first: equal attributes decode alike.
        if cached is not None and cached[0] == key:
            return dict(cached[1])
        out: dict[str, Any] = {}
        for name, codec in self.PARAMS.items():
            attr = self.properties.get(name)
            out[name] = None if attr is None else codec.decode(attr)
        out.update(self.result_params())
        self.__dict__["_params_cache"] = (key, out)
        return dict(out)

    def result_params(self) -> dict[str, Any]:
        """Parameters carried by the result types (e.g. convert's dtype)."""
        return {}

    @classmethod
    def encode_params(cls, params: dict[str, Any]) -> dict[str, Attribute]:
        return {key: codec.encode(params[key]) for key, codec in cls.PARAMS.items() if params.get(key) is not None}

    # ---- construction ---------------------------------------------------
    @classmethod
    def make(cls, operands: Sequence[SSAValue], **params: Any) -> PrimitiveOp:
        """Create the op for SSA operands, inferring its result types."""
        specs = [TensorSpec.of_type(v.type) for v in operands]
        results = cls.infer(specs, **params)
        return cls.create_op(operands, [r.to_type() for r in results], params)

    @classmethod
    def create_op(
        cls,
        operands: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        params: dict[str, Any],
    ) -> PrimitiveOp:
        return cls.create(
            operands=list(operands),
            result_types=list(result_types),
            properties=cls.encode_params(params),
        )

    @classmethod
    def eager(cls, arrays: Sequence[np.ndarray], **params: Any) -> list[np.ndarray]:
        """Run the op on numpy values now (TF eager semantics).

        Checks the shape rule first, so eager and traced code raise the same
        errors, and returns arrays of exactly the inferred dtypes.
        """
        specs = [TensorSpec(tuple(np.shape(a)), dtype_of_numpy(np.asarray(a).dtype)) for a in arrays]
        out_specs = cls.infer(specs, **params)
        with np.errstate(all="ignore"):
            res = cls.kernel(**params)(*arrays)
        if not out_specs:
            return []
        if len(out_specs) == 1:
            res = (res,)
        return [np.asarray(r, dtype=numpy_dtype(s.dtype)).reshape(s.shape) for r, s in zip(res, out_specs)]

    # ---- verification ---------------------------------------------------
    def verify(self, verify_nested_ops: bool = True) -> None:
        """xDSL's ``Operation.verify``, done once per distinct op: an op
        without regions or successors whose verifier reads only its own
        operand and result types, properties and attributes (IRDL's
        constraints, :meth:`verify_`'s shape rule, traits such as ``Pure``)
        is not verified again when an op of the same class with equal
        types, properties and attributes verified before (xDSL's attributes
        are immutable values, like MLIR's uniqued ones).  The last op of a
        block is always verified in full (whether the block needs a
        terminator).  Tracing builds thousands of ops of a few forms; each
        form's shape rule then runs once per process, not once per op."""
        cls = type(self)
        by_form = _VERIFIED_BY_TYPES.get(cls)
        if by_form is None:
            by_form = verified_by_form(cls)
        if not by_form or self.regions or self.successors:
            return super().verify(verify_nested_ops)
        props, attrs = self.properties, self.attributes
        operands = self.operands
        results = self.results
        # By identity first (no attribute is hashed), then by value.
        ids = (
            cls,
            *[id(v.type) for v in operands],
            None,
            *[id(r.type) for r in results],
            None,
            *props,
            *map(id, props.values()),
            None,
            *attrs,
            *map(id, attrs.values()),
        )
        key = _VERIFIED_IDS.get(ids)
        by_ids = key is not None
        known = by_ids
        if not by_ids:
            if any(
                isinstance(a, DenseIntOrFPElementsAttr) and len(a.data.data) > _MEMO_DATA_MAX for a in props.values()
            ):
                return super().verify(verify_nested_ops)  # not kept alive for a memo
            otypes = tuple(v.type for v in operands)
            rtypes = tuple(r.type for r in results)
            key = (cls, otypes, rtypes, tuple(props.items()), tuple(attrs.items()))
            known = key in _VERIFIED
        if known and self.next_op is not None:
            for v in operands:
                if isinstance(v, ErasedSSAValue):
                    raise ValueError("Erased SSA value is used by the operation")
            if not by_ids:
                _remember(ids, key)
            return
        super().verify(verify_nested_ops)
        if not known:
            _VERIFIED.add(key)
            _remember(ids, key)

    def verify_(self) -> None:
        try:
            specs = [TensorSpec.of_type(o.type) for o in self.operands]
            expected = type(self).infer(specs, **self.params())
            got = [TensorSpec.of_type(r.type) for r in self.results]
        except ShapeError as e:
            raise VerifyException(f"'{self.name}' op {e.for_op(self.name).split(': ', 1)[1]}") from None
        except ValueError as e:
            raise VerifyException(f"'{self.name}' op {e}") from None
        if expected != got:
            exp = ", ".join(str(s.to_type()) for s in expected)
            gt = ", ".join(str(s.to_type()) for s in got)
            raise VerifyException(f"'{self.name}' op inferred result type(s) ({exp}) do not match the declared ({gt})")


_VERIFIED: set[tuple] = set()
"""The forms of the ops that verified (see :meth:`PrimitiveOp.verify`)."""
_VERIFIED_IDS: dict[tuple, tuple] = {}
"""The same by the ids of the attributes, each with its form (which keeps
the attributes, and so their ids, alive)."""
_VERIFIED_MAX = 1 << 14


def _remember(ids: tuple, key: tuple) -> None:
    if len(_VERIFIED_IDS) >= _VERIFIED_MAX or len(_VERIFIED) >= _VERIFIED_MAX:
        _VERIFIED_IDS.clear()
        _VERIFIED.clear()
        _VERIFIED.add(key)
    _VERIFIED_IDS[ids] = key


_MEMO_DATA_MAX = 1024
"""Ops holding larger ``dense<...>`` data are verified each time, so the
memo keeps no large constant alive."""
_VERIFIED_BY_TYPES: dict[type, bool] = {}


def verified_by_form(cls: type) -> bool:
    """Whether an op of ``cls`` (a ``PrimitiveOp``) that is not the last of
    its block verifies as every op of its form does: equal types,
    properties and attributes (:meth:`PrimitiveOp.verify`'s memo)."""
    by_types = _VERIFIED_BY_TYPES.get(cls)
    if by_types is None:
        by_types = _VERIFIED_BY_TYPES[cls] = _verified_by_types(cls)
    return by_types


def _verified_by_types(cls: type) -> bool:
    """Whether ``cls``'s verifier reads nothing but the op's own types,
    properties and attributes: its custom verifier (the one IRDL's
    ``verify_`` calls after the op definition's constraints) is
    :meth:`PrimitiveOp.verify_` and its traits have no verifier."""
    cells = cls.verify_.__closure__ or ()
    custom = [c.cell_contents for c in cells if callable(c.cell_contents)]
    traits = cls.get_irdl_definition().traits
    return custom == [PrimitiveOp.__dict__["verify_"]] and all(type(t).verify is OpTrait.verify for t in traits)


def enum_value(value: Any) -> str:
    return value.value if isinstance(value, Enum) else str(value)
