"""``hlo.host_variable_update``: read or update a host variable
(``xtpu.Variable`` created outside a strategy scope) from an
outside-compilation cluster.

Host only, with side effects: each host worker (one per replica) runs it, so
an ``assign_add`` in outside compilation adds once per replica, as the seed's
"logic in outside compilation is replicated and executed separately for each
replica".  The read-modify-write is atomic.  ``variable`` names the variable
in the process's registry (``xtpu.variables``).
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.irdl import irdl_op_definition, opt_operand_def, prop_def, result_def

from xtpu.dialects.primitive import PrimitiveOp, ShapeError, StrParam
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.runtime.host_variables import HOST_VARIABLES, KINDS


@irdl_op_definition
class HostVariableUpdateOp(PrimitiveOp):
    """``kind`` = read / assign / add / sub of the host variable ``variable``;
    returns its new value."""

    name = "hlo.host_variable_update"
    value = opt_operand_def(TensorType)
    variable = prop_def(StringAttr)
    kind = prop_def(StringAttr)
    result = result_def(TensorType)
    assembly_format = "$variable $kind (`(` $value^ `:` type($value) `)`)? attr-dict `:` type($result)"
    PARAMS: ClassVar = {"variable": StrParam(), "kind": StrParam()}
    HOST_ONLY: ClassVar = True
    SIDE_EFFECTS: ClassVar = True
    #: A side-effecting update of host state: gradients do not flow through
    #: host variables, which live outside the differentiated program.
    NOT_DIFFERENTIABLE: ClassVar = True

    def result_params(self):
        s = TensorSpec.of_type(self.result.type)
        return {"shape": s.shape, "dtype": s.dtype}

    @classmethod
    def infer(cls, specs, kind="read", shape=(), dtype="float32", **_):
        if kind not in KINDS:
            raise ShapeError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        want = 0 if kind == "read" else 1
        if len(specs) != want:
            raise ShapeError(f"kind {kind!r} takes {want} operand(s), got {len(specs)}")
        out = TensorSpec(tuple(shape), dtype)
        if specs and (specs[0].dtype != dtype or specs[0].shape != out.shape):
            raise ShapeError(f"value {specs[0]} does not match the variable's {out}")
        return [out]

    @classmethod
    def make(cls, operands, **params):
        specs = [TensorSpec.of_type(v.type) for v in operands]
        (spec,) = cls.infer(specs, **params)
        return cls.create_op(operands, [spec.to_type()], params)

    @classmethod
    def kernel(cls, variable, kind, store=None, **_):
        """Reads or updates ``variable`` in ``store``, the runtime's
        :class:`~xtpu.runtime.host_variables.HostVariableStore` (default:
        the process's, which ``xtpu.Variable`` fills)."""
        store = HOST_VARIABLES if store is None else store

        def run(*xs):
            return store.update(variable, kind, xs[0] if xs else None)

        return run


HOST_VARIABLE_OPS = [HostVariableUpdateOp]
