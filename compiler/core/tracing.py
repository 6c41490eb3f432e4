"""Tracing: the same Python function runs eagerly on numpy or builds IR.

Outside a replicated computation every xtpu op runs at once on numpy arrays
(TF eager).  Inside one, a :class:`Trace` is active and ops append IR to the
current block instead, returning :class:`Tensor` handles (the JAX tracer
pattern, ``jax/_src/core.py``).  Both paths go through :func:`bind`, which
finds everything about an op in its one class (shape rule, kernel, IR op).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.ir import Block, SSAValue

from xtpu.core import pytree
from xtpu.core.eager import EagerTensor, as_eager_results
from xtpu.core.locations import format_location, is_user_frame, user_location
from xtpu.core.recording import recording_tapes
from xtpu.core.recording import tape_state as _tape_state
from xtpu.dialects import DIALECTS, vjp_util
from xtpu.dialects.hlo import ConcatenateOp, ConstantOp, ReshapeOp
from xtpu.dialects.hlo_host import StringConstantOp
from xtpu.dialects.primitive import PrimitiveOp, ShapeError
from xtpu.dialects.tensor_spec import TensorSpec, dtype_of_numpy, np_kind, numpy_dtype


def _user_error(op_cls: type, e: ShapeError, loc: Any) -> ValueError:
    """A ValueError for a broken shape rule, naming the op and the user's line."""
    where = format_location(loc)
    return ValueError(e.for_op(op_cls.name) + (f" (at {where})" if where else ""))


class Tensor:
    """A symbolic tensor inside a traced computation (TF graph tensor).

    Attributes:
      shape: static shape, a tuple of ints.
      dtype: ``float32``, ``float64``, ``int32``, ``int64``, ``bool`` or ``string``.
    """

    __slots__ = ("value", "spec", "trace", "__weakref__")

    def __init__(self, value: SSAValue, spec: TensorSpec, trace: Trace):
        self.value = value
        self.spec = spec
        self.trace = trace

    @property
    def shape(self) -> tuple[int, ...]:
        return self.spec.shape

    @property
    def dtype(self) -> str:
        return self.spec.dtype

    @property
    def ndim(self) -> int:
        return len(self.spec.shape)

    def __repr__(self) -> str:
        return f"<xtpu.Tensor shape={self.shape} dtype={self.dtype} (traced)>"

    def __bool__(self) -> bool:
        raise TypeError(
            "using a traced xtpu.Tensor as a Python bool is not allowed inside a "
            "replicated computation: its value is not known while tracing; use xtpu.cond"
        )

    def __array__(self, *args, **kwargs):
        raise TypeError("a traced xtpu.Tensor has no value while tracing; it cannot become a numpy array")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a scalar tensor")
        return self.shape[0]

    __hash__ = object.__hash__

    # Operators are attached by xtpu.ops.operators.


_PRIMITIVE_MAKE = PrimitiveOp.make.__func__  # type: ignore[attr-defined]


class Trace:
    """The state of one traced replicated computation.

    Holds the stack of blocks ops are appended to, the number of replicas,
    and the outside-compilation state (the open cluster and TF's counter that
    names clusters "0", "1", ...).
    """

    def __init__(self, block: Block, num_replicas: int, num_cores: int = 1):
        self.blocks: list[Block] = [block]
        self.num_replicas = num_replicas
        self.num_cores = num_cores
        self.cluster: str | None = None
        self.cluster_counter = 0
        self.cluster_ops: list[Any] = []
        # id(block) -> cluster name, for the open outside-compilation blocks
        self.cluster_blocks: dict[int, str] = {}
        # TF's graph.unique_name("uid"): one gradient_uid per gradients call
        self.gradient_uid_counter = 0
        # The forward op whose gradient is being colocated (the seed's
        # _in_gradient_colocation), or None.
        self.gradient_colocation: Any = None
        # variable -> the tensors its reads gave (gradients w.r.t. variables)
        self.variable_reads: dict[Any, list[Tensor]] = {}
        # variable -> its value in a plain replicate (one constant per trace)
        self.variable_values: dict[Any, Tensor] = {}
        # replicate's maximum_shapes padded some inputs: reductions read the
        # real sizes with hlo.get_dimension_size (reduce_mean's count)
        self.padded = False

    def new_gradient_uid(self) -> str:
        """``uid``, ``uid_1``, ``uid_2``, ... (TF's ``graph.unique_name("uid")``)."""
        n = self.gradient_uid_counter
        self.gradient_uid_counter += 1
        return "uid" if n == 0 else f"uid_{n}"

    @property
    def block(self) -> Block:
        return self.blocks[-1]

    def emit(self, op_cls: type[PrimitiveOp], operands: Sequence[Tensor], params: dict) -> list[Tensor]:
        """Append ``op_cls`` to the current block; return its results."""
        loc = user_location()
        for t in operands:
            self._check_visible(t, op_cls, loc)
        try:
            if op_cls.make.__func__ is _PRIMITIVE_MAKE:
                # PrimitiveOp.make on the specs the tensors carry (their
                # values' types), keeping the inferred specs for the results.
                specs = op_cls.infer([t.spec for t in operands], **params)
                op = op_cls.create_op([t.value for t in operands], [s.to_type() for s in specs], params)
            else:
                op = op_cls.make([t.value for t in operands], **params)
                specs = [TensorSpec.of_type(r.type) for r in op.results]
        except ShapeError as e:
            raise _user_error(op_cls, e, loc) from None
        if loc is not None:
            op.location = loc
        self.block.add_op(op)
        results = [Tensor(r, s, self) for r, s in zip(op.results, specs)]
        tapes = getattr(_tape_state, "recording", None)
        if tapes:
            for tape in tapes:
                tape._record_traced(op, operands, results)
        return results

    def _check_visible(self, t: Tensor, op_cls: type, loc: Any) -> None:
        """Raise unless ``t`` may be used in the current block: defined in it
        or in an enclosing block, or inside a closed outside-compilation
        cluster of one (its value is then exported from the cluster)."""
        owner = t.value.owner
        block = owner if isinstance(owner, Block) else owner.parent_block()
        if block is self.block:
            return
        # While tracing, the enclosing blocks are the trace's block stack
        # (a branch's block is attached to its hlo.if only when it is done).
        enclosing = {id(b) for b in self.blocks}
        b = block
        while b is not None and id(b) not in enclosing:
            p = b.parent_op()
            if p is None or p.name != "tpu.outside_compilation":
                where = format_location(loc)
                raise ValueError(
                    f"{op_cls.name}: a tensor made inside an xtpu.cond branch or xtpu.while_loop body "
                    f"is used outside it{f' (at {where})' if where else ''}; return it from the branch or loop instead"
                )
            b = p.parent_block()

    def constant(self, array: np.ndarray) -> Tensor:
        """A constant tensor holding ``array``."""
        if array.dtype == object or array.dtype.kind in "US":
            (t,) = self.emit(StringConstantOp, [], {"value": np.asarray(array, dtype=object)})
        else:
            (t,) = self.emit(ConstantOp, [], {"value": array})
        return t


_state = threading.local()


def trace_stack() -> list[Trace]:
    st = getattr(_state, "stack", None)
    if st is None:
        st = _state.stack = []
    return st


def current_trace() -> Trace | None:
    """The innermost active trace of this thread, or None when eager."""
    st = getattr(_state, "stack", None)
    return st[-1] if st else None


# --------------------------------------------------------------------------
# Conversion of Python values
# --------------------------------------------------------------------------

_PY_DEFAULT = {bool: "bool", int: "int32", float: "float32", str: "string"}


def to_numpy(value: Any, dtype: str | None = None) -> np.ndarray:
    """Convert a Python or numpy value to an array (TF's convert_to_tensor).

    Python floats become float32 and ints int32, as in TF; Python complex
    numbers complex64 (TF makes complex128, which xtpu does not have); numpy
    arrays keep their dtype.  With ``dtype`` given, Python values take it.

    Raises:
      TypeError: the value has no xtpu dtype, or a Python float is given an
        integer ``dtype`` (TF refuses that too).
    """
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        arr = np.asanyarray(value)
        if arr.dtype.kind in "US":
            arr = arr.astype(object)
        elif not arr.dtype.isnative:  # big-endian data (a file's, say): the same values, native order
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if dtype is not None and dtype_of_numpy(arr.dtype) != dtype:
            raise TypeError(f"expected a {dtype} value, got a numpy array of dtype {arr.dtype.name}")
        dtype_of_numpy(arr.dtype)
        return arr
    arr = np.asarray(value, dtype=object if _is_string(value) else None)
    if arr.dtype == object:
        if not all(isinstance(v, (str, bytes)) for v in arr.reshape(-1)):
            raise TypeError(f"cannot convert {value!r} to a tensor")
        if dtype not in (None, "string"):
            raise TypeError(f"cannot convert strings {value!r} to {dtype}")
        return arr
    kind = arr.dtype.kind
    if dtype is None:
        dtype = {"b": "bool", "i": "int32", "u": "int32", "f": "float32", "c": "complex64"}.get(kind)
        if dtype is None:
            raise TypeError(f"cannot convert {value!r} to a tensor")
    elif kind == "f" and dtype in ("int32", "int64", "bool"):
        raise TypeError(f"cannot convert {value!r} (a float) to a {dtype} tensor")
    elif kind == "c" and dtype != "complex64":
        raise TypeError(f"cannot convert {value!r} (a complex) to a {dtype} tensor")
    elif dtype == "string":
        raise TypeError(f"cannot convert {value!r} to a string tensor")
    return arr.astype(numpy_dtype(dtype))


def _is_string(value: Any) -> bool:
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return isinstance(value, (str, bytes))


def is_tensor_like(value: Any) -> bool:
    return isinstance(value, (Tensor, np.ndarray, np.generic))


def spec_of(value: Any) -> TensorSpec:
    """The TensorSpec of a Tensor or a numpy value."""
    if isinstance(value, Tensor):
        return value.spec
    arr = np.asarray(value)
    return TensorSpec(arr.shape, dtype_of_numpy(arr.dtype))


def read_if_variable(value: Any) -> Any:
    """A variable's current value (TF converts a ``tf.Variable`` to a tensor
    by reading it); anything else unchanged.  Variables define
    ``_xtpu_read_``."""
    read = getattr(type(value), "_xtpu_read_", None)
    return read(value) if read is not None else value


def sparse_read(value: Any) -> tuple[Any, str | None]:
    """How a gather reads ``value``: the variable's stored value and the
    dtype to cast the gathered slices to (an autocast variable inside a
    replicated computation: TF's ``AutoCastVariable.sparse_read`` gathers
    the float32 rows and casts them, so the rows' gradient is summed in
    float32), else ``(read_if_variable(value), None)``.  Variables define
    ``_xtpu_sparse_read_``."""
    read = getattr(type(value), "_xtpu_sparse_read_", None)
    return read(value) if read is not None else (read_if_variable(value), None)


def is_variable(value: Any) -> bool:
    """Whether ``value`` is a variable (``xtpu.Variable``): its type tells
    xtpu ops how to read it (``_xtpu_read_``, see :func:`read_if_variable`).
    The tracer and the gradients know variables by this protocol alone."""
    return getattr(type(value), "_xtpu_read_", None) is not None


def convert(value: Any, dtype: str | None = None) -> Any:
    """A Tensor (while tracing) or a numpy array (eager) for ``value``;
    a variable is read."""
    value = read_if_variable(value)
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype != dtype:
            raise TypeError(f"expected a {dtype} tensor, got a {value.dtype} tensor")
        return value
    if isinstance(value, (list, tuple)) and _holds_tensor(value):
        return _pack(value, dtype)
    arr = to_numpy(value, dtype)
    tr = current_trace()
    if tr is None:
        # Eagerly an EagerTensor, as every eager op's result (a view: no copy)
        if np_kind(arr.dtype) in "biufc" and type(arr) is np.ndarray:
            return arr.view(EagerTensor)
        return arr
    return tr.constant(arr)


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    return isinstance(read_if_variable(value), Tensor)


def _first_tensor_dtype(value: Any) -> str | None:
    if isinstance(value, (list, tuple)):
        for v in value:
            d = _first_tensor_dtype(v)
            if d is not None:
                return d
        return None
    v = read_if_variable(value)
    return v.dtype if isinstance(v, Tensor) else None


def _pack(value: list | tuple, dtype: str | None) -> Any:
    """A (nested) list holding traced tensors as one tensor, stacked along a
    new first axis (TF's ``convert_to_tensor`` autopacking,
    array_ops._autopacking_helper): Python numbers take the tensors' dtype.

    Raises:
      ValueError: the elements' shapes differ (TF's message names them).
      TypeError: the elements' dtypes differ.
    """
    dtype = dtype or _first_tensor_dtype(value)
    parts = [convert(v, dtype) for v in value]
    shapes = {tuple(p.shape) for p in parts}
    if len(shapes) != 1:
        raise ValueError(f"cannot pack a list of tensors of different shapes {[tuple(p.shape) for p in parts]}")
    (shape,) = shapes
    rows = []
    for p in parts:
        if not isinstance(p, Tensor):
            p = current_trace().constant(np.asarray(p))
        (row,) = bind(ReshapeOp, [p], shape=(1, *shape))
        rows.append(row)
    if len(rows) == 1:
        return rows[0]
    (out,) = bind(ConcatenateOp, rows, dimension=0)
    return out


def bind(op_cls: type[PrimitiveOp], operands: Sequence[Any], **params: Any) -> list[Any]:
    """Apply an op: trace it when a trace is active, else run it on numpy.

    Returns the op's results: Tensors while tracing, numpy arrays eagerly.

    Raises:
      ValueError: the operands break the op's shape rule (with the user's line).
      RuntimeError: a traced Tensor is used after its computation was traced.
    """
    tr = current_trace()
    if tr is None:
        arrays = []
        for a in operands:
            if isinstance(a, Tensor):
                raise RuntimeError(f"a traced tensor ({a!r}) was used outside the replicated computation that made it")
            arrays.append(np.asarray(a) if not isinstance(a, np.ndarray) else a)
        tapes = getattr(_tape_state, "recording", None)
        try:
            # Kernels see plain arrays; the tape sees the operands themselves.
            results = op_cls.eager([np.asarray(a) for a in arrays], **params)
        except ShapeError as e:
            raise _user_error(op_cls, e, user_location()) from None
        if tapes:
            for tape in list(tapes):
                results = tape._record_eager(op_cls, params, arrays, results)
        # Every eager result is an EagerTensor (TF's eager ops return
        # tensors), so that a tape can record operators on it later.
        return as_eager_results(results)
    tensors = []
    for a in operands:
        if isinstance(a, Tensor):
            if a.trace is not tr:
                raise RuntimeError(f"a traced tensor ({a!r}) from another computation was used here")
            tensors.append(a)
        else:
            tensors.append(tr.constant(to_numpy(a)))
    return tr.emit(op_cls, tensors, params)


class _TracerBuilder:
    """The builder the ops' gradient rules emit through
    (:class:`xtpu.dialects.vjp_util.Builder`): this tracer's ``bind``, traced
    or eager."""

    bind = staticmethod(bind)
    spec_of = staticmethod(spec_of)
    convert = staticmethod(convert)
    is_tensor_like = staticmethod(is_tensor_like)
    flatten = staticmethod(pytree.flatten)

    @staticmethod
    def scalar(value: Any, dtype: str) -> Any:
        return convert(np.asarray(value, dtype=np.dtype(dtype)))

    @staticmethod
    def op_class(name: str) -> type:
        return _op_classes()[name]


@functools.cache
def _op_classes() -> dict[str, type]:
    """Op name -> class, over the registered dialects."""
    return {op.name: op for d in DIALECTS for op in d.operations}


vjp_util.set_builder(_TracerBuilder())


__all__ = [
    "Tensor",
    "Trace",
    "bind",
    "convert",
    "current_trace",
    "format_location",
    "is_tensor_like",
    "is_variable",
    "is_user_frame",
    "read_if_variable",
    "recording_tapes",
    "sparse_read",
    "spec_of",
    "to_numpy",
    "trace_stack",
    "user_location",
]
