"""One table of xtpu's ops and their StableHLO forms: each op is one entry.

An :class:`Entry` pairs an xtpu op (by name) with a StableHLO op and holds
the two directions of the conversion:

* ``export(ex, op, operands)`` writes the xtpu op ``op`` as StableHLO ops
  through the exporter ``ex`` (:class:`xtpu.passes.stablehlo_export.Exporter`)
  and returns the values that replace its results;
* ``import_(im, op, operands)`` reads the StableHLO op ``op`` (an xDSL
  unregistered op in generic form) and applies xtpu ops to ``operands``
  through the importer ``im`` (:class:`xtpu.passes.stablehlo_import.Importer`),
  which builds IR or runs them through the tracer (eagerly, inside a
  replicated computation, under a ``GradientTape``); it returns the values
  of the op's results.

Semantics are StableHLO's on both sides (xtpu's ``hlo`` ops follow the
StableHLO op of the same name); where xtpu's op differs in form (types held
differently, a reduction named instead of written as a region) the entry
says how.  Ops without an xtpu counterpart are imported as compositions of
xtpu ops when the composition is exact (``rsqrt``, ``clamp``, ...); the
others are refused at import, naming the op and its location.

The mapping of attributes is the StableHLO spec's
(https://openxla.org/stablehlo/spec); host transfers follow TF's TPU bridge
(``legalize_tf_communication.cc``: one ``send``/``recv`` per value with
``is_host_transfer``, frontend attributes ``_xla_host_transfer_handler_name
= "tf_rendezvous"`` and ``_xla_host_transfer_rendezvous = "<key>_dtoh_<i>"`` /
``"<key>_htod_<i>"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DenseArrayBase,
    DictionaryAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue

from xtpu.dialects import ccl, hlo, hlo_bits, hlo_complex, hlo_indexing, hlo_math, hlo_rounding, hlo_window, tpu
from xtpu.dialects.autodiff import CustomGradientOp, StopGradientOp
from xtpu.dialects.dynamic_shapes import GetDimensionSizeOp
from xtpu.dialects.fusion import FusionRegionOp, FusionYieldOp
from xtpu.dialects.primitive import GroupsParam, PrimitiveOp, array_from_dense, dense_from_array
from xtpu.dialects.tensor_spec import FLOAT_DTYPES, TensorSpec, numpy_dtype
from xtpu.passes import stablehlo_syntax as S

Export = Callable[[Any, Operation, list[SSAValue]], list[SSAValue]]
Import = Callable[[Any, Operation, list[Any]], list[Any]]


@dataclass(frozen=True)
class Entry:
    """One op: its xtpu name, its StableHLO name and the two conversions."""

    xtpu: str | None
    stablehlo: str | None
    export: Export | None = None
    import_: Import | None = None
    note: str = ""


def _result_types(op: Operation) -> list[Attribute]:
    return [r.type for r in op.results]


# ---- building blocks ----------------------------------------------------------


def same(xtpu_cls: type[PrimitiveOp], name: str, props: tuple[str, ...] = ()) -> Entry:
    """An op whose operands, results and properties (``props``, builtin
    attributes of the same names and types on both sides, e.g.
    ``broadcast_dimensions = array<i64: ...>``) are StableHLO's."""

    def export(ex, op, xs):
        properties = {k: op.properties[k] for k in props if k in op.properties}
        return ex.emit(name, xs, _result_types(op), properties)

    def import_(im, op, xs):
        properties = {k: im.attr(op, k) for k in props if im.attr(op, k) is not None}
        return im.apply(xtpu_cls, xs, properties, _result_types(op))

    return Entry(xtpu_cls.name, name, export, import_)


def _reduction_region(ex, kind: str, dtype_type: Attribute):
    """The one-op region of a reduction: ``add`` -> ``stablehlo.add`` ..."""
    body_op = REDUCTION_OPS[kind]
    scalar = TensorType(dtype_type, [])
    return ex.region([scalar, scalar], lambda a, b: ex.emit(body_op, [a, b], [scalar]))


REDUCTION_OPS = {
    "add": "stablehlo.add",
    "mul": "stablehlo.multiply",
    "max": "stablehlo.maximum",
    "min": "stablehlo.minimum",
    "and": "stablehlo.and",
    "or": "stablehlo.or",
}
REDUCTION_KINDS = {v: k for k, v in REDUCTION_OPS.items()}


def _element(v: SSAValue) -> Attribute:
    t = v.type
    assert isinstance(t, TensorType)
    return t.element_type


# ---- export rules that are more than a rename -----------------------------------


def _export_constant(ex, op, xs):
    return ex.emit("stablehlo.constant", [], _result_types(op), {"value": op.properties["value"]})


def _splat(ex, value, like: SSAValue) -> SSAValue:
    """A constant of ``like``'s type filled with ``value``."""
    spec = TensorSpec.of_type(like.type)
    arr = np.asarray(value, dtype=spec.dtype)
    (c,) = ex.emit("stablehlo.constant", [], [TensorType(_element(like), [])], {"value": dense_from_array(arr)})
    if not spec.shape:
        return c
    (b,) = ex.emit(
        "stablehlo.broadcast_in_dim",
        [c],
        [like.type],
        {"broadcast_dimensions": DenseArrayBase.from_list(i64, [])},
    )
    return b


def _compare(ex, a, b, direction, kind):
    t = TensorType(i1, TensorSpec.of_type(a.type).shape)
    props = {
        "comparison_direction": S.enum_attr("comparison_direction", direction),
        "compare_type": S.enum_attr("comparison_type", kind),
    }
    return ex.emit("stablehlo.compare", [a, b], [t], props)[0]


def _export_convert(ex, op, xs):
    """Float to integer: where StableHLO leaves the result implementation
    defined (NaN, infinities, values out of the integer's range) xtpu's
    runtime gives numpy's answer, the integer's minimum (x86's "integer
    indefinite"); the export writes that choice out with a ``select``, so
    XLA (which saturates, NaN to 0) computes what xtpu computes."""
    (x,) = xs
    src = TensorSpec.of_type(op.operands[0].type).dtype
    dst = TensorSpec.of_type(op.results[0].type).dtype
    (y,) = ex.emit("stablehlo.convert", xs, _result_types(op))
    if not (src.startswith("float") and dst.startswith("int")):
        return [y]
    bits = np.iinfo(dst).bits
    ftype = np.dtype(src).type
    hi = ftype(2.0 ** (bits - 1))
    lo = ftype(-(2.0 ** (bits - 1)))
    below = ftype(-(2.0 ** (bits - 1)) - 1)
    ok_hi = _compare(ex, x, _splat(ex, hi, x), "LT", "FLOAT")
    ok_lo = (
        _compare(ex, x, _splat(ex, lo, x), "GE", "FLOAT")
        if below == lo
        else _compare(ex, x, _splat(ex, below, x), "GT", "FLOAT")
    )
    t = ok_hi.type
    (ok,) = ex.emit("stablehlo.and", [ok_hi, ok_lo], [t])  # false for NaN too
    return ex.emit("stablehlo.select", [ok, y, _splat(ex, np.iinfo(dst).min, y)], _result_types(op))


def _export_divide(ex, op, xs):
    """Integer division by zero is implementation defined in StableHLO (XLA
    gives -1); xtpu's runtime gives numpy's 0, written out with ``select``s."""
    a, b = xs
    dtype = TensorSpec.of_type(op.results[0].type).dtype
    if not dtype.startswith(("int", "uint")):
        return ex.emit("stablehlo.divide", xs, _result_types(op))
    zero = _splat(ex, 0, b)
    is_zero = _compare(ex, b, zero, "EQ", _compare_kind(dtype))
    (safe,) = ex.emit("stablehlo.select", [is_zero, _splat(ex, 1, b), b], [b.type])
    (q,) = ex.emit("stablehlo.divide", [a, safe], _result_types(op))
    return ex.emit("stablehlo.select", [is_zero, zero, q], _result_types(op))


def _export_power(ex, op, xs):
    """Floats: ``pow(1, y)`` and ``pow(x, 0)`` are 1 for every ``x`` and ``y``,
    NaN included (IEEE 754's pow, which StableHLO's power follows and xtpu's
    numpy kernel gives); XLA's CPU client gives NaN for ``pow(1, NaN)`` and
    ``pow(1, +-inf)`` when it fuses the power (measured by the fuzzer's xla
    mode), so the export writes the two cases out with a ``select``."""
    x, y = xs
    (p,) = ex.emit("stablehlo.power", xs, _result_types(op))
    if not TensorSpec.of_type(op.results[0].type).dtype.startswith("float"):
        return [p]
    one = _splat(ex, 1, x)
    base_one = _compare(ex, x, one, "EQ", "FLOAT")
    exp_zero = _compare(ex, y, _splat(ex, 0, y), "EQ", "FLOAT")
    (either,) = ex.emit("stablehlo.or", [base_one, exp_zero], [base_one.type])
    return ex.emit("stablehlo.select", [either, one, p], _result_types(op))


def _compare_kind(dtype: str) -> str:
    """StableHLO's ``compare_type`` for an element type: ``FLOAT``,
    ``UNSIGNED`` (bool and unsigned integers) or ``SIGNED``."""
    if dtype.startswith("float") or dtype == "bfloat16":
        return "FLOAT"
    return "UNSIGNED" if dtype == "bool" or dtype.startswith("uint") else "SIGNED"


def _export_compare(ex, op, xs):
    direction = op.params()["comparison_direction"]
    kind = _compare_kind(TensorSpec.of_type(op.operands[0].type).dtype)
    props = {
        "comparison_direction": S.enum_attr("comparison_direction", direction),
        "compare_type": S.enum_attr("comparison_type", kind),
    }
    return ex.emit("stablehlo.compare", xs, _result_types(op), props)


def _export_dot_general(ex, op, xs):
    """Precision HIGHEST on both operands: xtpu's kernels multiply in the
    operand type (numpy's BLAS), never in a reduced precision."""
    p = op.params()
    props = {
        "dot_dimension_numbers": S.dot_dimension_numbers(
            p["lhs_batching_dimensions"],
            p["rhs_batching_dimensions"],
            p["lhs_contracting_dimensions"],
            p["rhs_contracting_dimensions"],
        ),
        "precision_config": ArrayAttr([S.enum_attr("precision", "HIGHEST")] * 2),
    }
    return ex.emit("stablehlo.dot_general", xs, _result_types(op), props)


def _export_reduce(ex, op, xs):
    p = op.params()
    region = _reduction_region(ex, p["computation"], _element(op.operands[0]))
    props = {"dimensions": op.properties["dimensions"]}
    return ex.emit("stablehlo.reduce", xs, _result_types(op), props, regions=[region])


def _export_rng(ex, op, xs):
    """xtpu's state is ``int64[3]`` and its words ``int64`` in ``[0, 2**32)``;
    StableHLO's are ``ui64[3]`` and ``ui32``: bitcast and convert around it."""
    state_t = TensorType(S.ui64, [3])
    out_shape = TensorSpec.of_type(op.results[1].type).shape
    (state,) = ex.emit("stablehlo.bitcast_convert", xs, [state_t])
    new_state, bits = ex.emit(
        "stablehlo.rng_bit_generator",
        [state],
        [state_t, TensorType(S.ui32, out_shape)],
        {"rng_algorithm": S.enum_attr("rng_algorithm", "PHILOX")},
    )
    (new_state,) = ex.emit("stablehlo.bitcast_convert", [new_state], [op.results[0].type])
    (bits,) = ex.emit("stablehlo.convert", [bits], [op.results[1].type])
    return [new_state, bits]


def _export_id(name: str) -> Export:
    """``replica_id`` / ``partition_id`` are ``ui32`` in StableHLO, ``int32`` in xtpu."""

    def export(ex, op, xs):
        (v,) = ex.emit(name, [], [TensorType(S.ui32, [])])
        return ex.emit("stablehlo.convert", [v], _result_types(op))

    return export


def _export_if(ex, op, xs):
    regions = [ex.convert_region(r, []) for r in (op.true_branch, op.false_branch)]
    return ex.emit("stablehlo.if", xs, _result_types(op), regions=regions)


def _export_while(ex, op, xs):
    """Values the regions use from outside the loop become extra loop values
    that the body passes on unchanged (XLA's while takes every value it
    reads as an operand; JAX lowers loops the same way)."""
    captured = ex.captured(op)
    n = len(xs)
    operands = xs + [ex.value(v) for v in captured]
    types = [v.type for v in operands]
    cond = ex.convert_region(op.cond, types, captures=captured, keep=0)
    body = ex.convert_region(op.body, types, captures=captured, keep=len(captured))
    return ex.emit("stablehlo.while", operands, types, regions=[cond, body])[:n]


def _export_return(ex, op, xs):
    ex.emit("stablehlo.return", xs + ex.region_extra(), [])
    return []


def _export_fusion_region(ex, op, xs):
    """A ``fusion.region`` is inlined: its body's ops, in order, on ``xs``."""
    return ex.inline(op.body.block, xs)


def _identity(ex, op, xs):
    return xs[: len(op.results)]


def _collective_props(ex, op, groups_key="replica_groups", channel=True):
    p = op.params()
    props: dict[str, Attribute] = {groups_key: op.properties[groups_key]}
    cid = p.get("channel_id")
    if ex.num_cores > 1:
        # Participants are r * C + c: XLA's global device ids with C partitions.
        props["use_global_device_ids"] = UnitAttr()
        if cid is None:
            cid = ex.new_channel()
    if channel and cid is not None:
        props["channel_handle"] = S.channel_handle(cid, 1)
    return props


def _export_all_reduce(ex, op, xs):
    props = _collective_props(ex, op)
    region = _reduction_region(ex, op.params()["computation"], _element(op.operands[0]))
    return ex.emit("stablehlo.all_reduce", xs, _result_types(op), props, regions=[region])


def _export_all_gather(ex, op, xs):
    props = _collective_props(ex, op)
    props["all_gather_dim"] = op.properties["all_gather_dim"]
    return ex.emit("stablehlo.all_gather", xs, _result_types(op), props)


def _export_reduce_scatter(ex, op, xs):
    props = _collective_props(ex, op)
    props["scatter_dimension"] = op.properties["scatter_dimension"]
    region = _reduction_region(ex, op.params()["computation"], _element(op.operands[0]))
    return ex.emit("stablehlo.reduce_scatter", xs, _result_types(op), props, regions=[region])


def _no_partitions(ex, op) -> None:
    if ex.num_cores > 1:
        ex.refuse(
            op,
            f"with {ex.num_cores} logical cores per replica has no StableHLO form that XLA's CPU client runs "
            "(a cross-partition exchange needs a channel handle, which it rejects); export the program with one "
            "logical core per replica",
        )


def _export_all_to_all(ex, op, xs):
    """No channel handle: with one partition XLA's CPU client rejects a
    cross-replica all_to_all that carries one (measured)."""
    _no_partitions(ex, op)
    p = op.params()
    props = {
        "replica_groups": op.properties["replica_groups"],
        "split_dimension": op.properties["split_dimension"],
        "concat_dimension": op.properties["concat_dimension"],
        "split_count": IntegerAttr(len(p["replica_groups"][0]), i64),
    }
    return ex.emit("stablehlo.all_to_all", xs, _result_types(op), props)


def _export_collective_permute(ex, op, xs):
    """No channel handle: with one partition XLA's CPU client returns zeros
    (or aborts) for a collective_permute that carries one (measured)."""
    _no_partitions(ex, op)
    props = {"source_target_pairs": op.properties["source_target_pairs"]}
    return ex.emit("stablehlo.collective_permute", xs, _result_types(op), props)


def _export_cross_replica_sum(ex, op, xs):
    """Before ``tpu-lower-cross-replica-sum`` (a ``Lowered`` program): an
    all_reduce add over ``group_assignment`` or every replica, as the pass
    makes it."""
    groups = op.params()["group_assignment"] or (tuple(range(ex.num_replicas)),)
    props = {
        "replica_groups": GroupsParam().encode(groups),
        "channel_handle": S.channel_handle(ex.new_channel(), 1),
    }
    region = _reduction_region(ex, "add", _element(op.operands[0]))
    return ex.emit("stablehlo.all_reduce", xs, _result_types(op), props, regions=[region])


def _transfer_attrs(rendezvous: str, t: Attribute) -> dict[str, Attribute]:
    spec = TensorSpec.of_type(t)
    original = {"float32": "f32", "float64": "f64", "int32": "s32", "int64": "s64", "bool": "pred"}[spec.dtype]
    return {
        "mhlo.frontend_attributes": DictionaryAttr(
            {
                "_xla_host_transfer_handler_name": StringAttr("tf_rendezvous"),
                "_xla_host_transfer_rendezvous": StringAttr(rendezvous),
                "_xla_host_transfer_original_type": StringAttr(original),
            }
        ),
        "mhlo.sharding": StringAttr("{maximal device=0}"),
    }


def _export_send_to_host(ex, op, xs):
    key = op.params()["key"]
    for i, (x, v) in enumerate(zip(xs, op.operands)):
        props = {"channel_handle": S.channel_handle(ex.new_channel(), 2), "is_host_transfer": BoolAttr(True, i1)}
        (tok,) = ex.emit(
            "stablehlo.send",
            [x, ex.token()],
            [S.token_type()],
            props,
            _transfer_attrs(f"{key}_dtoh_{i}", v.type),
        )
        ex.set_token(tok)
    return []


def _export_recv_from_host(ex, op, xs):
    key = op.params()["key"]
    out = []
    for i, r in enumerate(op.results):
        props = {"channel_handle": S.channel_handle(ex.new_channel(), 3), "is_host_transfer": BoolAttr(True, i1)}
        value, tok = ex.emit(
            "stablehlo.recv",
            [ex.token()],
            [r.type, S.token_type()],
            props,
            _transfer_attrs(f"{key}_htod_{i}", r.type),
        )
        ex.set_token(tok)
        out.append(value)
    return out


def _export_infeed(ex, op, xs):
    """XLA's infeed, as TF's TPU bridge lowers ``InfeedDequeueTuple``: one
    ``stablehlo.infeed`` of the whole tuple, ordered by the token chain;
    ``infeed_config`` names xtpu's queue."""
    outs = ex.emit(
        "stablehlo.infeed",
        [ex.token()],
        _result_types(op) + [S.token_type()],
        {"infeed_config": StringAttr(op.params()["queue"])},
    )
    ex.set_token(outs[-1])
    return outs[:-1]


def _export_sharding(ex, op, xs):
    """XLA's form of a sharding annotation: ``custom_call @Sharding`` with the
    ``mhlo.sharding`` string (what JAX emits without Shardy)."""
    props = {
        "call_target_name": StringAttr("Sharding"),
    }
    attrs = {"mhlo.sharding": StringAttr(str(op.sharding.sharding))}
    return ex.emit("stablehlo.custom_call", xs, _result_types(op), props, attrs)


def _refuse(reason: str) -> Export:
    def export(ex, op, xs):
        ex.refuse(op, reason)
        return []

    return export


# ---- import rules that are more than a rename -------------------------------------


def _import_constant(im, op, xs):
    return im.apply(hlo.ConstantOp, [], {"value": im.attr(op, "value")}, _result_types(op))


def _total_order_key(im, x):
    """An integer whose signed order is IEEE 754's totalOrder of float
    ``x`` (``-NaN < -inf < ... < -0.0 < 0.0 < ... < inf < NaN``): the bits
    as a signed integer, the magnitude bits flipped where the sign is set."""
    spec = im.spec(x)
    width = numpy_dtype(spec.dtype).itemsize * 8
    itype = f"int{width}"
    (i,) = im.bind(hlo_bits.BitcastConvertOp, [x], dtype=itype)
    (sign,) = im.bind(hlo_bits.ShiftRightArithmeticOp, [i, _full_like(im, i, width - 1)])
    (mask,) = im.bind(hlo.AndOp, [sign, _full_like(im, i, np.iinfo(itype).max)])
    return im.bind(hlo_bits.XorOp, [i, mask])[0]


def _import_compare(im, op, xs):
    """``TOTALORDER`` on floats (JAX's sort and searchsorted) compares the
    integer keys of the bits (:func:`_total_order_key`): exact."""
    kind = im.attr(op, "compare_type")
    direction = S.enum_value(im.attr(op, "comparison_direction"))
    if kind is not None and S.enum_value(kind) == "TOTALORDER" and im.spec(xs[0]).dtype in FLOAT_DTYPES:
        xs = [_total_order_key(im, x) for x in xs]
    return im.bind(hlo.CompareOp, xs, comparison_direction=direction)


def _dot_params(attr) -> dict[str, tuple[int, ...]]:
    f = S.fields(attr)
    return {
        k: S.int_list(f.get(k, "[]"))
        for k in (
            "lhs_batching_dimensions",
            "rhs_batching_dimensions",
            "lhs_contracting_dimensions",
            "rhs_contracting_dimensions",
        )
    }


def _import_dot_general(im, op, xs):
    """Precision and algorithm attributes are not kept: xtpu multiplies in
    the operand type (HIGHEST); a result type other than the operands' (a
    mixed-precision dot) is refused."""
    _same_result_dtype(im, op)
    return im.bind(hlo.DotGeneralOp, xs, **_dot_params(im.attr(op, "dot_dimension_numbers")))


def _import_dot(im, op, xs):
    _same_result_dtype(im, op)
    lhs_rank = len(im.spec(xs[0]).shape)
    return im.bind(
        hlo.DotGeneralOp,
        xs,
        lhs_batching_dimensions=(),
        rhs_batching_dimensions=(),
        lhs_contracting_dimensions=(lhs_rank - 1,),
        rhs_contracting_dimensions=(0,),
    )


def _same_result_dtype(im, op) -> None:
    if TensorSpec.of_type(op.results[0].type).dtype != TensorSpec.of_type(op.operands[0].type).dtype:
        im.refuse(op, "has a result type other than its operands' (xtpu's dot_general keeps the operand type)")


def _reduction_kind(im, op, region: int = 0) -> str:
    """The binary op of a reduction region (``op``'s region ``region``): one
    StableHLO op applied to the two block arguments, returned (what JAX and
    TF emit for sum, max, ...)."""
    block = op.regions[region].block
    ops = list(block.ops)
    if len(ops) == 2 and im.op_name(ops[1]) in ("stablehlo.return", "func.return"):
        kind = REDUCTION_KINDS.get(im.op_name(ops[0]))
        if (
            kind is not None
            and set(ops[0].operands) == set(block.args)
            and list(ops[1].operands) == [ops[0].results[0]]
        ):
            return kind
    im.refuse(op, "has a reduction body other than one add/multiply/maximum/minimum/and/or of its two arguments")
    raise AssertionError


def _import_reduce(im, op, xs):
    dims = tuple(im.attr(op, "dimensions").get_values())
    if len(xs) == 4:
        return im.bind(hlo_indexing.VariadicReduceOp, xs, computation=_arg_reduction(im, op), dimensions=dims)
    if len(xs) != 2:
        im.refuse(op, f"reduces {len(xs) // 2} operands together, which xtpu does not have (only argmax / argmin)")
    kind = _reduction_kind(im, op)
    return im.bind(hlo.ReduceOp, xs, computation=kind, dimensions=dims)


def _import_id(cls) -> Import:
    """``ui32`` in StableHLO, ``int32`` in xtpu: the value is the same
    (ids are small); the ``convert`` that follows in JAX's programs keeps it."""

    def import_(im, op, xs):
        return im.bind(cls, [])

    return import_


def _import_if(im, op, xs):
    true_fn, false_fn = (im.region_fn(r) for r in op.regions)
    return im.sink.if_(xs[0], true_fn, false_fn)


def _import_case(im, op, xs):
    """``case``: branch ``index``, the last one for an index out of range
    (StableHLO spec: case)."""
    return im.sink.switch(xs[0], [im.region_fn(r) for r in op.regions])


def _import_while(im, op, xs):
    """A loop whose trip count its own regions fix (JAX's ``fori_loop`` and
    ``scan``: a counter from a constant, ``LT`` a constant, ``+ 1`` each
    step) is given that count as ``maximum_iterations``, which xtpu's
    gradient of a loop needs."""
    cond_fn, body_fn = (im.region_fn(r) for r in op.regions)
    return im.sink.while_(lambda *v: cond_fn(*v)[0], body_fn, xs, _trip_count(im, op))


def _constant_of(im, v) -> int | None:
    """The integer held by ``v`` when a StableHLO ``constant`` defines it."""
    owner = v.owner
    if isinstance(owner, Operation) and im.op_name(owner) == "stablehlo.constant":
        arr = np.asarray(array_from_dense(im.attr(owner, "value")))
        if arr.shape == () and arr.dtype.kind in "iu":
            return int(arr)
    return None


def _trip_count(im, op) -> int | None:
    cond, body = (r.block for r in op.regions)
    ret = cond.last_op
    if ret is None or len(ret.operands) != 1:
        return None
    cmp = ret.operands[0].owner
    if not isinstance(cmp, Operation) or im.op_name(cmp) != "stablehlo.compare":
        return None
    if S.enum_value(im.attr(cmp, "comparison_direction")) != "LT":
        return None
    counter, limit = cmp.operands
    if counter not in cond.args or (stop := _constant_of(im, limit)) is None:
        return None
    k = cond.args.index(counter)
    start = _constant_of(im, op.operands[k])
    step = body.last_op.operands[k].owner if body.last_op is not None else None
    if start is None or not isinstance(step, Operation) or im.op_name(step) != "stablehlo.add":
        return None
    a, b = step.operands
    if set((a, b)) - {body.args[k]} and [_constant_of(im, v) for v in (a, b) if v is not body.args[k]] != [1]:
        return None
    if body.args[k] not in (a, b):
        return None
    return max(stop - start, 0)


def _groups(im, op, key="replica_groups"):
    return GroupsParam().decode(im.attr(op, key))


def _channel(im, op) -> dict[str, int]:
    """``channel_id`` from a ``channel_handle``, when the op has one."""
    handle = im.attr(op, "channel_handle")
    return {"channel_id": int(S.fields(handle)["handle"])} if handle is not None else {}


def _import_all_reduce(im, op, xs):
    kind = _reduction_kind(im, op)
    return im.bind(ccl.AllReduceOp, xs, replica_groups=_groups(im, op), computation=kind, **_channel(im, op))


def _import_all_gather(im, op, xs):
    dim = im.attr(op, "all_gather_dim").value.data
    return im.bind(ccl.AllGatherOp, xs, replica_groups=_groups(im, op), all_gather_dim=dim, **_channel(im, op))


def _import_reduce_scatter(im, op, xs):
    kind = _reduction_kind(im, op)
    dim = im.attr(op, "scatter_dimension").value.data
    return im.bind(
        ccl.ReduceScatterOp,
        xs,
        replica_groups=_groups(im, op),
        scatter_dimension=dim,
        computation=kind,
        **_channel(im, op),
    )


def _import_all_to_all(im, op, xs):
    return im.bind(
        ccl.AllToAllOp,
        xs,
        replica_groups=_groups(im, op),
        split_dimension=im.attr(op, "split_dimension").value.data,
        concat_dimension=im.attr(op, "concat_dimension").value.data,
    )


def _import_collective_permute(im, op, xs):
    pairs = GroupsParam().decode(im.attr(op, "source_target_pairs"))
    return im.bind(ccl.CollectivePermuteOp, xs, source_target_pairs=pairs)


def _import_custom_call(im, op, xs):
    """Only XLA's sharding annotation (``@Sharding`` with ``mhlo.sharding``)
    has an xtpu form, ``tpu.sharding_constraint``."""
    target = im.attr(op, "call_target_name")
    name = target.data if isinstance(target, StringAttr) else str(target)
    sharding = im.attr(op, "mhlo.sharding")
    if name == "Sharding" and isinstance(sharding, StringAttr) and len(xs) == 1:
        return im.sharding(xs[0], sharding.data)
    im.refuse(op, f"calls custom_call target '{name}', which xtpu cannot run")
    raise AssertionError


def _import_identity(im, op, xs):
    return list(xs)


# ---- indexing ops: gather, scatter, sort, argmax / argmin, top_k -------------------


def _dimension_params(im, attr, keys: tuple[str, ...]) -> dict[str, Any]:
    """``{key: (..), index_vector_dim: n}`` from ``#stablehlo.gather<...>`` /
    ``#stablehlo.scatter<...>`` (missing fields are empty)."""
    f = S.fields(attr)
    out: dict[str, Any] = {k: S.int_list(f.get(k, "[]")) for k in keys}
    out["index_vector_dim"] = int(f.get("index_vector_dim", "0"))
    return out


def _import_gather(im, op, xs):
    """StableHLO's gather is xtpu's ``hlo.gather`` (the same dimension
    numbers; start indices clamped into range on both sides)."""
    params = _dimension_params(im, im.attr(op, "dimension_numbers"), _GATHER_KEYS)
    params["slice_sizes"] = tuple(im.attr(op, "slice_sizes").get_values())
    return im.bind(hlo_indexing.GatherOp, xs, **params)


def _expr(im, v, names: dict) -> Any:
    """A normal form of the scalar computation giving ``v`` inside a region
    (block arguments named by ``names``): nested tuples of ``compare``
    (operands ordered, the direction flipped to match), ``and`` / ``or``
    (operands sorted), ``not``, ``select`` and constants; JAX's
    canonicalization of a sort key (``-0.0`` to ``0.0``, every NaN to one
    NaN: xtpu's order already treats them so) is dropped."""
    if v in names:
        return names[v]
    owner = v.owner
    if not isinstance(owner, Operation):
        return ("?",)
    name = im.op_name(owner)
    args = [_expr(im, x, names) for x in owner.operands]
    if name == "stablehlo.compare":
        d = S.enum_value(im.attr(owner, "comparison_direction"))
        a, b = args
        if repr(a) > repr(b):
            a, b, d = b, a, {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(d, d)
        return ("cmp", d, a, b)
    if name in ("stablehlo.and", "stablehlo.or"):
        return (name[10:], *sorted(args, key=repr))
    if name == "stablehlo.not":
        return ("not", args[0])
    if name == "stablehlo.constant":
        arr = np.asarray(array_from_dense(im.attr(owner, "value")))
        return ("const", "nan" if arr.dtype.kind == "f" and np.isnan(arr).all() else repr(arr.tolist()))
    if name == "stablehlo.select":
        p, t, f = args
        # JAX's canonical sort key: select(x != x, NaN, select(x == 0, 0, x)) is x.
        if (
            p[:2] == ("cmp", "NE")
            and p[2] == p[3]
            and t == ("const", "nan")
            and f[0] == "select"
            and f[1][:2] == ("cmp", "EQ")
            and f[2][0] == "const"
            and f[1][2:] in ((p[2], f[2]), (f[2], p[2]))
            and f[3] == p[2]
        ):
            return p[2]
        return ("select", p, t, f)
    return ("?", name)


def _norm(e: Any) -> Any:
    """:func:`_expr`'s normal form of an expression written by hand."""
    if not isinstance(e, tuple) or e[0] not in ("cmp", "and", "or", "not", "select"):
        return e
    if e[0] == "cmp":
        _, d, a, b = e
        a, b = _norm(a), _norm(b)
        if repr(a) > repr(b):
            a, b, d = b, a, {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(d, d)
        return ("cmp", d, a, b)
    if e[0] in ("and", "or"):
        return (e[0], *sorted((_norm(x) for x in e[1:]), key=repr))
    return (e[0], *(_norm(x) for x in e[1:]))


def _orders(a: str, b: str, direction: str, nan_first: bool = False) -> tuple[list, list]:
    """The forms of "``a`` before ``b``" and "``a`` tied with ``b``" under
    ``direction`` that xtpu's order (NaN last, or first) matches: a plain
    compare (integers; floats, where NaN is then JAX's or the comparator's
    concern) and xtpu's own export with NaN written out."""
    nan_a, nan_b = ("cmp", "NE", a, a), ("cmp", "NE", b, b)
    first, second = (nan_b, nan_a) if nan_first else (nan_a, nan_b)
    before = [("cmp", direction, a, b), ("or", ("cmp", direction, a, b), ("and", ("not", first), second))]
    tie = [("cmp", "EQ", a, b), ("or", ("cmp", "EQ", a, b), ("and", nan_a, nan_b))]
    return [_norm(e) for e in before], [_norm(e) for e in tie]


def _sort_keys(im, op) -> list[tuple[int, str]]:
    """The keys of a sort comparator, in order: ``(operand, "LT" | "GT")``.
    A comparator xtpu reads is a lexicographic chain ``before_0 or (tie_0
    and (before_1 or ...))`` of compares between an operand's two block
    arguments (JAX's ``_sort_lt_comparator``, TOTALORDER after its
    canonicalization, and xtpu's own export)."""
    block = op.regions[0].block
    ret = block.last_op
    names = {a: f"{'ab'[i % 2]}{i // 2}" for i, a in enumerate(block.args)}
    if ret is None or len(ret.operands) != 1:
        im.refuse(op, "has a comparator that returns other than one boolean")
    n = len(op.operands)

    def key(e):
        for i in range(n):
            for d in ("LT", "GT"):
                if e in _orders(f"a{i}", f"b{i}", d)[0]:
                    return (i, d)
        return None

    def chain(e):
        k = key(e)
        if k is not None:
            return [k]
        if e[0] == "or" and len(e) == 3:
            for first, rest in ((e[1], e[2]), (e[2], e[1])):
                k = key(first)
                if k is None or rest[0] != "and" or len(rest) != 3:
                    continue
                ties = _orders(f"a{k[0]}", f"b{k[0]}", k[1])[1]
                for t, more in ((rest[1], rest[2]), (rest[2], rest[1])):
                    if t in ties and (tail := chain(more)) is not None:
                        return [k, *tail]
        return None

    keys = chain(_expr(im, ret.operands[0], names))
    if keys is None or len({i for i, _ in keys}) != len(keys):
        im.refuse(
            op,
            "has a comparator xtpu does not read (xtpu sorts by keys compared LT or GT in order, "
            "lexicographically: JAX's comparators and xtpu's own)",
        )
    return keys


def _import_sort(im, op, xs):
    """xtpu's ``hlo.sort`` with the comparator's keys first (the operands
    reordered around it when the keys are not the first ones).  xtpu's
    order puts NaN last and ``-0.0`` with ``0.0`` (numpy's), which is JAX's
    (its comparator canonicalizes both before a TOTALORDER compare); a
    comparator that compares TOTALORDER without canonicalizing would order
    ``-0.0`` before ``0.0`` and negative NaN first: xtpu keeps them
    tied / last.  Always stable."""
    keys = _sort_keys(im, op)
    dim = im.attr(op, "dimension").value.data
    order = [i for i, _ in keys] + [i for i in range(len(xs)) if i not in {k for k, _ in keys}]
    outs = im.bind(
        hlo_indexing.SortOp,
        [xs[i] for i in order],
        dimension=dim,
        is_stable=True,
        comparison_directions=tuple(d for _, d in keys),
    )
    back = [None] * len(xs)
    for pos, i in enumerate(order):
        back[i] = outs[pos]
    return back


def _import_top_k(im, op, xs):
    """``chlo.top_k(x, k)`` (what JAX's ``lax.top_k`` lowers to): the ``k``
    largest along the last dimension, the lower index first on ties, and
    their indices (int32): a stable descending ``hlo.sort`` of ``x`` with an
    iota, then the first ``k``.  Floats are sorted by their totalOrder key
    (:func:`_total_order_key`), XLA's order: NaN first, ``0.0`` before
    ``-0.0``."""
    (x,) = xs
    k = int(im.attr(op, "k").value.data)
    shape = im.spec(x).shape
    if not shape:
        im.refuse(op, "takes a scalar; top_k needs a dimension")
    axis = len(shape) - 1
    (iota,) = im.bind(hlo.IotaOp, [], iota_dimension=axis, shape=shape, dtype="int32")
    if im.spec(x).dtype in FLOAT_DTYPES:
        # XLA's order: totalOrder descending (NaN first, 0.0 before -0.0).
        key = _total_order_key(im, x)
        _, values, idx = im.bind(
            hlo_indexing.SortOp, [key, x, iota], dimension=axis, is_stable=True, comparison_directions=("GT",)
        )
    else:
        values, idx = im.bind(
            hlo_indexing.SortOp, [x, iota], dimension=axis, is_stable=True, comparison_directions=("GT",)
        )
    limit = shape[:-1] + (k,)
    out = []
    for v in (values, idx):
        (s,) = im.bind(
            hlo.SliceOp, [v], start_indices=(0,) * len(shape), limit_indices=limit, strides=(1,) * len(shape)
        )
        out.append(s)
    return out


def _scatter_computation(im, op) -> str:
    """The update computation of a scatter: ``replace`` (the region returns
    the update) or the one op of ``add`` / ``mul`` / ``max`` / ``min``
    (``or`` / ``and`` on booleans: ``max`` / ``min``)."""
    block = op.regions[0].block
    ops = list(block.ops)
    if len(ops) == 1 and list(ops[0].operands) == [block.args[1]]:
        return "replace"
    kind = _reduction_kind(im, op)
    if kind in ("and", "or"):
        if TensorSpec.of_type(op.operands[0].type).dtype != "bool":
            im.refuse(op, f"combines integers with '{kind}', which xtpu's scatter does not have")
        return {"or": "max", "and": "min"}[kind]
    return kind


def _import_scatter(im, op, xs):
    """StableHLO's scatter of one input is xtpu's ``hlo.scatter`` (the same
    dimension numbers; windows out of range dropped on both sides)."""
    if len(xs) != 3:
        im.refuse(op, f"scatters {len(xs) // 2} inputs together (a variadic scatter), which xtpu does not have")
    params = _dimension_params(im, im.attr(op, "scatter_dimension_numbers"), _SCATTER_KEYS)
    params["computation"] = _scatter_computation(im, op)
    return im.bind(hlo_indexing.ScatterOp, xs, **params)


def _arg_reduction(im, op) -> str:
    """``argmax`` / ``argmin`` for a reduce of ``(values, indices)`` whose
    body keeps the pair with the larger (smaller) value, NaN first, the
    lower index on ties: JAX's ``_compute_argminmax`` and xtpu's export."""
    block = op.regions[0].block
    ret = block.last_op
    a, ia, b, ib = block.args
    names = {a: "a", ia: "ia", b: "b", ib: "ib"}
    got = tuple(_expr(im, v, names) for v in ret.operands) if ret is not None else ()
    lower = ("cmp", "LT", "ia", "ib")
    for kind, d in (("argmax", "GT"), ("argmin", "LT")):
        # JAX: the value by (better or a is NaN), the index also on (a == b and lower index).
        val = ("or", ("cmp", d, "a", "b"), ("cmp", "NE", "a", "a"))
        jax_form = (
            ("select", val, "a", "b"),
            ("select", ("or", val, ("and", ("cmp", "EQ", "a", "b"), lower)), "ia", "ib"),
        )
        forms = [jax_form]
        befores, ties = _orders("a", "b", d, nan_first=True)
        for before, tie in zip(befores, ties):
            pick = ("or", before, ("and", tie, lower))
            forms.append((("select", pick, "a", "b"), ("select", pick, "ia", "ib")))
        forms = [tuple(_norm(e) for e in form) for form in forms]
        if got in forms:
            return kind
    im.refuse(
        op,
        "reduces 2 operands together with a body other than argmax's or argmin's (xtpu's variadic reduce)",
    )
    raise AssertionError


# Compositions: StableHLO ops xtpu has no op for, written with xtpu ops
# (each exact, or within the ulps of the op it replaces: noted).


def _full_like(im, x, value):
    spec = im.spec(x)
    c = im.bind(hlo.ConstantOp, [], value=np.asarray(value, dtype=spec.dtype))[0]
    return im.bind(hlo.BroadcastInDimOp, [c], broadcast_dimensions=(), shape=spec.shape)[0]


def _import_rsqrt(im, op, xs):
    """``1 / sqrt(x)``: two correctly rounded ops, within 1 ulp of XLA's rsqrt."""
    (x,) = xs
    (r,) = im.bind(hlo.SqrtOp, [x])
    return im.bind(hlo.DivideOp, [_full_like(im, x, 1), r])


def _import_clamp(im, op, xs):
    """``min(max(operand, min), max)`` (StableHLO spec: clamp); a scalar
    bound is broadcast."""
    lo, x, hi = xs
    shape = im.spec(x).shape

    def full(v):
        if im.spec(v).shape == shape:
            return v
        return im.bind(hlo.BroadcastInDimOp, [v], broadcast_dimensions=(), shape=shape)[0]

    (m,) = im.bind(hlo.MaximumOp, [x, full(lo)])
    return im.bind(hlo.MinimumOp, [m, full(hi)])


def _import_sign(im, op, xs):
    """-1, 0 or 1 by sign; NaN and +-0 return themselves (StableHLO spec: sign)."""
    (x,) = xs
    zero = _full_like(im, x, 0)
    (pos,) = im.bind(hlo.CompareOp, [x, zero], comparison_direction="GT")
    (neg,) = im.bind(hlo.CompareOp, [x, zero], comparison_direction="LT")
    (y,) = im.bind(hlo.SelectOp, [neg, _full_like(im, x, -1), x])
    return im.bind(hlo.SelectOp, [pos, _full_like(im, x, 1), y])


def _import_remainder(im, op, xs):
    """Integers: ``a - b * (a / b)`` with the truncating divide, exact
    (StableHLO spec: remainder).  Float remainder is refused: no exact
    composition of xtpu's ops."""
    a, b = xs
    if im.spec(a).dtype.startswith("float"):
        im.refuse(op, "on floats has no exact form in xtpu's ops")
    (q,) = im.bind(hlo.DivideOp, [a, b])
    (p,) = im.bind(hlo.MultiplyOp, [b, q])
    return im.bind(hlo.SubtractOp, [a, p])


def _import_is_finite(im, op, xs):
    """``x - x == 0``: false for inf and NaN (whose difference is NaN), exact."""
    (x,) = xs
    (d,) = im.bind(hlo.SubtractOp, [x, x])
    return im.bind(hlo.CompareOp, [d, _full_like(im, x, 0)], comparison_direction="EQ")


def _import_log1p(im, op, xs):
    """``log(1 + x)`` accurate near 0: ``u = 1 + x``; ``x`` where ``u == 1``,
    else ``log(u) * x / (u - 1)`` (Goldberg's formula, a few ulps)."""
    (x,) = xs
    one = _full_like(im, x, 1)
    (u,) = im.bind(hlo.AddOp, [one, x])
    (is_one,) = im.bind(hlo.CompareOp, [u, one], comparison_direction="EQ")
    (lg,) = im.bind(hlo.LogOp, [u])
    (d,) = im.bind(hlo.SubtractOp, [u, one])
    (t,) = im.bind(hlo.MultiplyOp, [lg, x])
    (r,) = im.bind(hlo.DivideOp, [t, d])
    (inf,) = im.bind(hlo.CompareOp, [u, _full_like(im, x, np.inf)], comparison_direction="EQ")
    (r,) = im.bind(hlo.SelectOp, [inf, u, r])
    return im.bind(hlo.SelectOp, [is_one, x, r])


def _import_expm1(im, op, xs):
    """``exp(x) - 1`` accurate near 0: ``u = exp(x)``; ``x`` where ``u == 1``,
    ``-1`` where ``u - 1 == -1``, else ``(u - 1) * x / log(u)`` (Kahan's, a few ulps)."""
    (x,) = xs
    one = _full_like(im, x, 1)
    (u,) = im.bind(hlo.ExpOp, [x])
    (d,) = im.bind(hlo.SubtractOp, [u, one])
    (lg,) = im.bind(hlo.LogOp, [u])
    (t,) = im.bind(hlo.MultiplyOp, [d, x])
    (r,) = im.bind(hlo.DivideOp, [t, lg])
    (is_one,) = im.bind(hlo.CompareOp, [u, one], comparison_direction="EQ")
    (is_inf,) = im.bind(hlo.CompareOp, [u, _full_like(im, x, np.inf)], comparison_direction="EQ")
    (minus,) = im.bind(hlo.CompareOp, [d, _full_like(im, x, -1)], comparison_direction="EQ")
    (r,) = im.bind(hlo.SelectOp, [minus, d, r])
    (r,) = im.bind(hlo.SelectOp, [is_inf, u, r])
    return im.bind(hlo.SelectOp, [is_one, x, r])


# Cephes's erf (ndtr.c): erf(x) = x T(x^2) / U(x^2) for |x| <= 1, else
# sign(x) (1 - erfc(|x|)) with erfc(a) = exp(-a^2) P(a) / Q(a) (|x| clamped
# to 6, where erf is 1 in float64); U and Q have a leading 1.
_ERF_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3, 7.00332514112805075473e3)
_ERF_T += (5.55923013010394962768e4,)
_ERF_U = (1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3)
_ERF_U += (2.26290000613890934246e4, 4.92673942608635921086e4)
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0, 4.86371970985681366614e1)
_ERFC_P += (1.96520832956077098242e2, 5.26445194995477358631e2, 9.34528527171957607540e2, 1.02755188689515710272e3)
_ERFC_P += (5.57535335369399327526e2,)
_ERFC_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2)
_ERFC_Q += (9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3, 1.65666309194161350182e3)
_ERFC_Q += (5.57535340817727675546e2,)


def _export_erf(ex, op, xs):
    """StableHLO has no erf (XLA's is ``chlo.erf``, outside StableHLO): the
    export writes Cephes's erf (``ndtr.c``, the algorithm of xtpu's kernel,
    SciPy's ``special.erf``) in float64 StableHLO ops, converted back to the
    operand's type: within 1 ulp of xtpu's kernel (measured over
    ``[-7, 7]`` in float32 and float64)."""
    (x,) = xs
    t64 = TensorType(f64, TensorSpec.of_type(x.type).shape)
    if x.type != t64:
        (x,) = ex.emit("stablehlo.convert", [x], [t64])

    def bin_(name, a, b):
        return ex.emit(f"stablehlo.{name}", [a, b], [t64])[0]

    def un(name, a):
        return ex.emit(f"stablehlo.{name}", [a], [t64])[0]

    def poly(coeffs, v):
        acc = _splat(ex, coeffs[0], v)
        for c in coeffs[1:]:
            acc = bin_("add", bin_("multiply", acc, v), _splat(ex, c, v))
        return acc

    a = un("abs", x)
    x2 = bin_("multiply", x, x)
    small = bin_("divide", bin_("multiply", x, poly(_ERF_T, x2)), poly(_ERF_U, x2))
    c = bin_("minimum", a, _splat(ex, 6.0, a))
    erfc = bin_(
        "divide",
        bin_("multiply", un("exponential", un("negate", bin_("multiply", c, c))), poly(_ERFC_P, c)),
        poly(_ERFC_Q, c),
    )
    big = bin_("multiply", un("sign", x), bin_("subtract", _splat(ex, 1.0, erfc), erfc))
    near = _compare(ex, a, _splat(ex, 1.0, a), "LE", "FLOAT")
    (y,) = ex.emit("stablehlo.select", [near, small, big], [t64])
    if op.results[0].type != t64:
        (y,) = ex.emit("stablehlo.convert", [y], _result_types(op))
    return [y]


def _dimension_numbers(p, keys: tuple[str, ...]) -> list[str]:
    """``key = [..]`` for each non-empty list of ``keys`` in ``p``, then ``index_vector_dim``."""
    nums = [f"{k} = {S.ints(p[k])}" for k in keys if p.get(k)]
    nums.append(f"index_vector_dim = {int(p['index_vector_dim'])}")
    return nums


_GATHER_KEYS = (
    "offset_dims",
    "collapsed_slice_dims",
    "operand_batching_dims",
    "start_indices_batching_dims",
    "start_index_map",
)


def _import_square(im, op, xs):
    """``chlo.square`` (JAX's ``jnp.var``, ``x ** 2``): ``x * x``, exact."""
    return im.bind(hlo.MultiplyOp, [xs[0], xs[0]])


def _import_round_afz(im, op, xs):
    """Round half away from zero (StableHLO spec: round_nearest_afz; JAX's
    float ``//`` and ``jnp.round`` with ``rounding_method=0``): ``t =
    floor(|x|)`` plus 1 where ``|x| - t >= 0.5`` (exact: ``|x| - t`` is),
    the sign of ``x`` put back with ``sign(x) *`` (``-0.0``, NaN and
    infinities kept): exact."""
    (x,) = xs
    (a,) = im.bind(hlo.AbsOp, [x])
    (t,) = im.bind(hlo_rounding.FloorOp, [a])
    (frac,) = im.bind(hlo.SubtractOp, [a, t])
    (up,) = im.bind(hlo.CompareOp, [frac, _full_like(im, x, 0.5)], comparison_direction="GE")
    (t1,) = im.bind(hlo.AddOp, [t, _full_like(im, x, 1)])
    (r,) = im.bind(hlo.SelectOp, [up, t1, t])
    (sg,) = im.bind(hlo_math.SignOp, [x])
    return im.bind(hlo.MultiplyOp, [sg, r])


def _builders(im):
    """``b(cls, *values, **params)``: one xtpu op's one result; and
    ``poly(coeffs, v)``: the polynomial (highest power first) at ``v`` by
    Horner's rule, in ``v``'s type."""

    def b(cls, *vs, **params):
        return im.bind(cls, list(vs), **params)[0]

    def poly(coeffs, v):
        acc = _full_like(im, v, coeffs[0])
        for c in coeffs[1:]:
            acc = b(hlo.AddOp, b(hlo.MultiplyOp, acc, v), _full_like(im, v, c))
        return acc

    return b, poly


# Giles's single-precision erfinv ("Approximating the erfinv function", GPU
# Computing Gems, 2011), the polynomial XLA's chlo.erf_inv expands to.
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087)
_ERFINV_CENTRAL += (-0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773)
_ERFINV_TAIL += (-0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _import_erf_inv(im, op, xs):
    """``chlo.erf_inv`` (JAX's normal random numbers, ``erfinv``): Giles's
    approximation, ``x p(w)`` with ``w = -log((1 - x)(1 + x))``, ``p`` a
    polynomial in ``w - 2.5`` (``w < 5``) or ``sqrt(w) - 3``; ``+-inf`` at
    ``+-1``.  Within 3e-7 relative of the true erfinv and 6e-6 of XLA's
    (measured over ``(-1, 1)`` in float32).  Float64 is refused: Giles's
    double-precision polynomial is not written here."""
    (x,) = xs
    if im.spec(x).dtype == "float64":
        im.refuse(op, "on float64 has no xtpu form (its single-precision approximation only)")

    b, poly = _builders(im)
    one = _full_like(im, x, 1)
    w = b(hlo.NegateOp, b(hlo.LogOp, b(hlo.MultiplyOp, b(hlo.SubtractOp, one, x), b(hlo.AddOp, one, x))))
    central = poly(_ERFINV_CENTRAL, b(hlo.SubtractOp, w, _full_like(im, x, 2.5)))
    # The tail is used where w >= 5: its sqrt reads max(w, 5), so that the
    # branch not taken has finite gradients (sqrt'(0) is inf).
    five = _full_like(im, x, 5)
    tail = poly(_ERFINV_TAIL, b(hlo.SubtractOp, b(hlo.SqrtOp, b(hlo.MaximumOp, w, five)), _full_like(im, x, 3)))
    small = b(hlo.CompareOp, w, five, comparison_direction="LT")
    y = b(hlo.MultiplyOp, b(hlo.SelectOp, small, central, tail), x)
    edge = b(hlo.CompareOp, b(hlo.AbsOp, x), one, comparison_direction="EQ")
    positive = b(hlo.CompareOp, x, _full_like(im, x, 0), comparison_direction="GT")
    inf = b(hlo.SelectOp, positive, _full_like(im, x, np.inf), _full_like(im, x, -np.inf))
    return [b(hlo.SelectOp, edge, inf, y)]


def _import_erfc(im, op, xs):
    """``chlo.erfc`` (JAX's exact ``gelu``, ``ndtr``): ``1 - erf(x)`` for
    ``|x| < 1``, else Cephes's ``exp(-x^2) P(|x|) / Q(|x|)`` (``2 -`` it for
    negative ``x``; ``|x|`` clamped to 30, where it is 0), in the operand's
    type: within a few ulps, without ``1 - erf``'s cancellation in the tail."""
    (x,) = xs

    b, poly = _builders(im)
    one = _full_like(im, x, 1)
    a = b(hlo.MinimumOp, b(hlo.AbsOp, x), _full_like(im, x, 30))
    tail = b(
        hlo.DivideOp,
        b(hlo.MultiplyOp, b(hlo.ExpOp, b(hlo.NegateOp, b(hlo.MultiplyOp, a, a))), poly(_ERFC_P, a)),
        poly(_ERFC_Q, a),
    )
    neg = im.bind(hlo.CompareOp, [x, _full_like(im, x, 0)], comparison_direction="LT")[0]
    tail = b(hlo.SelectOp, neg, b(hlo.SubtractOp, _full_like(im, x, 2), tail), tail)
    near = im.bind(hlo.CompareOp, [b(hlo.AbsOp, x), one], comparison_direction="LT")[0]
    return [b(hlo.SelectOp, near, b(hlo.SubtractOp, one, b(hlo_math.ErfOp, x)), tail)]


def _export_gather(ex, op, xs):
    """``#stablehlo.gather<...>`` from the op's dimension numbers (the same names)."""
    p = op.params()
    props = {
        "dimension_numbers": S.dialect_attr("stablehlo.gather", ", ".join(_dimension_numbers(p, _GATHER_KEYS))),
        "slice_sizes": op.properties["slice_sizes"],
        "indices_are_sorted": BoolAttr(False, i1),
    }
    return ex.emit("stablehlo.gather", xs, _result_types(op), props)


_SCATTER_KEYS = (
    "update_window_dims",
    "inserted_window_dims",
    "input_batching_dims",
    "scatter_indices_batching_dims",
    "scatter_dims_to_operand_dims",
)


def _export_scatter(ex, op, xs):
    """``#stablehlo.scatter<...>`` from the op's dimension numbers (the same
    names); the update computation is a one-op region (``add`` ...) or, for
    ``replace``, a region returning the update.  Repeated indices under
    ``replace``: StableHLO leaves the winner to the implementation; XLA's
    CPU client and xtpu's kernel both keep the last update (measured; the
    fuzzer's xla mode checks it)."""
    p = op.params()
    kind = p["computation"]
    elem = _element(op.operands[0])
    scalar = TensorType(elem, [])
    if kind == "replace":
        region = ex.region([scalar, scalar], lambda a, b: [b])
    else:
        body = REDUCTION_OPS[kind]
        if TensorSpec.of_type(op.operands[0].type).dtype == "bool":
            body = {"max": "stablehlo.or", "min": "stablehlo.and"}[kind]
        region = ex.region([scalar, scalar], lambda a, b: ex.emit(body, [a, b], [scalar]))
    props = {
        "scatter_dimension_numbers": S.dialect_attr(
            "stablehlo.scatter", ", ".join(_dimension_numbers(p, _SCATTER_KEYS))
        ),
        "indices_are_sorted": BoolAttr(False, i1),
        "unique_indices": BoolAttr(False, i1),
    }
    return ex.emit("stablehlo.scatter", xs, _result_types(op), props, regions=[region])


def _is_nan(ex, a):
    return _compare(ex, a, a, "NE", "FLOAT")


def _and(ex, a, b):
    return ex.emit("stablehlo.and", [a, b], [a.type])[0]


def _or(ex, a, b):
    return ex.emit("stablehlo.or", [a, b], [a.type])[0]


def _not(ex, a):
    return ex.emit("stablehlo.not", [a], [a.type])[0]


def _before_and_tie(ex, a, b, direction: str, dtype: str, nan_first: bool = False, tie: bool = True):
    """``a`` strictly before ``b`` under ``direction`` (``LT`` ascending,
    ``GT`` descending) with NaN after every number (before it with
    ``nan_first``), and (with ``tie``) ``a`` tied with ``b`` (equal, or
    both NaN): xtpu's order (numpy's), a strict weak order."""
    kind = _compare_kind(dtype)
    before = _compare(ex, a, b, direction, kind)
    a_nan = b_nan = None
    if kind == "FLOAT":
        a_nan, b_nan = _is_nan(ex, a), _is_nan(ex, b)
        first, second = (b_nan, a_nan) if nan_first else (a_nan, b_nan)
        before = _or(ex, before, _and(ex, _not(ex, first), second))
    if not tie:
        return before, None
    same = _compare(ex, a, b, "EQ", kind)
    if kind == "FLOAT":
        same = _or(ex, same, _and(ex, a_nan, b_nan))
    return before, same


def _export_sort(ex, op, xs):
    """The comparator region of xtpu's keys and directions: lexicographic
    over the keys, each ``LT`` or ``GT`` with NaN last (numpy's order, which
    xtpu's kernel sorts by); ``is_stable = true`` (xtpu's sort is always
    stable)."""
    p = op.params()
    dirs = p["comparison_directions"]
    dtypes = [TensorSpec.of_type(v.type).dtype for v in op.operands]
    arg_types = [TensorType(_element(v), []) for v in op.operands for _ in range(2)]

    def comparator(*args):
        result = None
        for k in reversed(range(len(dirs))):
            last = result is None
            before, tie = _before_and_tie(ex, args[2 * k], args[2 * k + 1], dirs[k], dtypes[k], tie=not last)
            result = before if result is None else _or(ex, before, _and(ex, tie, result))
        return [result]

    props = {
        "dimension": IntegerAttr(p["dimension"] % max(len(TensorSpec.of_type(op.operands[0].type).shape), 1), i64),
        "is_stable": BoolAttr(True, i1),
    }
    return ex.emit("stablehlo.sort", xs, _result_types(op), props, regions=[ex.region(arg_types, comparator)])


def _export_variadic_reduce(ex, op, xs):
    """StableHLO's reduce of ``(values, indices)`` with the body of xtpu's
    ``argmax`` / ``argmin``: the pair with the larger (smaller) value wins,
    NaN over any number, the lower index on ties (both NaN a tie).  The
    body is commutative and associative, so XLA's order of reduction gives
    xtpu's result."""
    p = op.params()
    direction = "GT" if p["computation"] == "argmax" else "LT"
    vt, it = (TensorType(_element(v), []) for v in op.operands[:2])
    dtype = TensorSpec.of_type(op.operands[0].type).dtype
    itype = TensorSpec.of_type(op.operands[1].type).dtype

    def body(a, ia, b, ib):
        better, tie = _before_and_tie(ex, a, b, direction, dtype, nan_first=True)
        lower = _compare(ex, ia, ib, "LT", _compare_kind(itype))
        pick = _or(ex, better, _and(ex, tie, lower))
        (v,) = ex.emit("stablehlo.select", [pick, a, b], [vt])
        (i,) = ex.emit("stablehlo.select", [pick, ia, ib], [it])
        return [v, i]

    region = ex.region([vt, it, vt, it], body)
    props = {"dimensions": op.properties["dimensions"]}
    return ex.emit("stablehlo.reduce", xs, _result_types(op), props, regions=[region])


# ---- windowed ops (issue 27): convolution, reduce_window, select_and_scatter --------


def _export_convolution(ex, op, xs):
    """``#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>`` is xtpu's
    own compact text; the window attributes have StableHLO's names and
    types.  Precision HIGHEST on both operands, as for ``dot_general``
    (xtpu's kernel multiplies exactly in float32 or wider); a result type
    wider than the operands' is the preferred element type."""
    p = op.params()
    props = {k: op.properties[k] for k in ("window_strides", "padding", "lhs_dilation", "rhs_dilation")}
    props["dimension_numbers"] = S.dialect_attr("stablehlo.conv", p["dimension_numbers"].to_text())
    props["feature_group_count"] = op.properties["feature_group_count"]
    props["batch_group_count"] = op.properties["batch_group_count"]
    props["precision_config"] = ArrayAttr([S.enum_attr("precision", "HIGHEST")] * 2)
    return ex.emit("stablehlo.convolution", xs, _result_types(op), props)


_RAW_CONV_FIELDS = (
    ("input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions"),
    ("kernel_output_feature_dimension", "kernel_input_feature_dimension", "kernel_spatial_dimensions"),
    ("output_batch_dimension", "output_feature_dimension", "output_spatial_dimensions"),
)


def _conv_dimension_numbers(im, op) -> hlo_window.ConvDimensionNumbers:
    """The compact form (``[b, 0, f]x[0, i, o]->[b, 0, f]``) or the raw one
    (``raw input_batch_dimension = 0, ...``) MLIR prints for the rest."""
    body = S.attr_body(im.attr(op, "dimension_numbers"))
    try:
        if body.startswith("raw"):
            f = S.fields(S.dialect_attr("stablehlo.conv", body[3:]))
            return hlo_window.ConvDimensionNumbers(
                *(
                    (int(f[first]), int(f[second]), *S.int_list(f[spatial]))
                    for first, second, spatial in _RAW_CONV_FIELDS
                )
            )
        return hlo_window.ConvDimensionNumbers.from_text(body)
    except (KeyError, ValueError) as e:
        im.refuse(op, f"has dimension numbers xtpu cannot read: {e}")
        raise AssertionError from None


def _ints_attr(im, op, name):
    a = im.attr(op, name)
    return None if a is None else tuple(int(v) for v in a.get_values())


def _pairs_attr(im, op, name="padding"):
    a = im.attr(op, name)
    return None if a is None else tuple(tuple(int(v) for v in row) for row in np.asarray(array_from_dense(a)))


def _import_convolution(im, op, xs):
    """A reversed window (``window_reversal``) is the kernel reversed along
    its spatial dimensions first (``hlo.reverse``, exact).  The result type
    may be a wider float than the operands' (the preferred element type);
    other mixed types are refused."""
    lhs, rhs = xs
    dn = _conv_dimension_numbers(im, op)
    src = TensorSpec.of_type(op.operands[0].type).dtype
    dst = TensorSpec.of_type(op.results[0].type).dtype
    if dst != src and not (src.startswith(("float", "bfloat")) and dst in ("float32", "float64")):
        im.refuse(op, f"has {dst} results for {src} operands (xtpu's convolution widens only to a float)")
    reversal = im.attr(op, "window_reversal")
    if reversal is not None:
        flags = [bool(v) for v in reversal.get_values()]
        dims = tuple(d for d, flip in zip(dn.rhs[2:], flags) if flip)
        if dims:
            (rhs,) = im.bind(hlo_math.ReverseOp, [rhs], dimensions=dims)
    prec = im.attr(op, "precision_config")
    params = {
        "dimension_numbers": dn,
        "window_strides": _ints_attr(im, op, "window_strides"),
        "padding": _pairs_attr(im, op),
        "lhs_dilation": _ints_attr(im, op, "lhs_dilation"),
        "rhs_dilation": _ints_attr(im, op, "rhs_dilation"),
        "feature_group_count": _int_attr(im, op, "feature_group_count", 1),
        "batch_group_count": _int_attr(im, op, "batch_group_count", 1),
        "precision_config": tuple(S.enum_value(a) for a in prec.data) if isinstance(prec, ArrayAttr) else None,
        "preferred_element_type": dst,
    }
    return im.bind(hlo_window.ConvolutionOp, [lhs, rhs], **params)


def _int_attr(im, op, name, default):
    a = im.attr(op, name)
    return default if a is None else int(a.value.data)


_WINDOW_PROPS = ("window_dimensions", "window_strides", "base_dilations", "window_dilations", "padding")


def _export_reduce_window(ex, op, xs):
    """One input, its body the one add / maximum / minimum xtpu names."""
    region = _reduction_region(ex, op.params()["computation"], _element(op.operands[0]))
    props = {k: op.properties[k] for k in _WINDOW_PROPS}
    return ex.emit("stablehlo.reduce_window", xs, _result_types(op), props, regions=[region])


def _window_params(im, op, names=_WINDOW_PROPS):
    out = {k: _ints_attr(im, op, k) for k in names if k != "padding"}
    out["padding"] = _pairs_attr(im, op)
    return out


def _import_reduce_window(im, op, xs):
    """One input reduced by add, maximum or minimum (JAX's sum / max / min
    pooling, ``cumsum`` on CPU); a variadic or other reduction is refused."""
    if len(xs) != 2:
        im.refuse(op, f"reduces {len(xs) // 2} inputs together (a variadic reduce_window), which xtpu does not have")
    kind = _reduction_kind(im, op)
    if kind not in hlo_window.ReduceWindowOp.KINDS:
        im.refuse(op, f"reduces its windows by {kind}; xtpu's reduce_window applies add, max or min")
    return im.bind(hlo_window.ReduceWindowOp, xs, computation=kind, **_window_params(im, op))


def _export_select_and_scatter(ex, op, xs):
    """The select region compares (``GE``: the first maximum, ``LE``: the
    first minimum), the scatter region adds."""
    elem = _element(op.operands[0])
    dtype = TensorSpec.of_type(op.operands[0].type).dtype
    kind = "FLOAT" if "float" in dtype else "SIGNED"
    scalar = TensorType(elem, [])
    select = ex.region([scalar, scalar], lambda a, b: [_compare(ex, a, b, op.params()["select"], kind)])
    scatter = _reduction_region(ex, "add", elem)
    props = {k: op.properties[k] for k in ("window_dimensions", "window_strides", "padding")}
    return ex.emit("stablehlo.select_and_scatter", xs, _result_types(op), props, regions=[select, scatter])


def _import_select_and_scatter(im, op, xs):
    """Select ``compare(a, b) GE`` or ``LE`` of its two arguments in order
    (the first maximum / minimum of each window), scatter ``add``; other
    bodies are refused."""
    block = op.regions[0].block
    ops = list(block.ops)
    direction = None
    if len(ops) == 2 and im.op_name(ops[0]) == "stablehlo.compare" and list(ops[0].operands) == list(block.args):
        kind = im.attr(ops[0], "compare_type")
        if (kind is None or S.enum_value(kind) != "TOTALORDER") and list(ops[1].operands) == [ops[0].results[0]]:
            direction = S.enum_value(im.attr(ops[0], "comparison_direction"))
    if direction not in ("GE", "LE"):
        im.refuse(
            op, "selects by something other than compare GE or LE of its two arguments (xtpu's select_and_scatter)"
        )
    if _reduction_kind(im, op, 1) != "add":
        im.refuse(op, "scatters by something other than add (xtpu's select_and_scatter)")
    params = _window_params(im, op, ("window_dimensions", "window_strides", "padding"))
    return im.bind(hlo_window.SelectAndScatterOp, xs, select=direction, **params)


# ---- the table ------------------------------------------------------------------

_ELEMENTWISE = [
    (hlo.AddOp, "stablehlo.add"),
    (hlo.SubtractOp, "stablehlo.subtract"),
    (hlo.MultiplyOp, "stablehlo.multiply"),
    (hlo.MaximumOp, "stablehlo.maximum"),
    (hlo.MinimumOp, "stablehlo.minimum"),
    (hlo.AndOp, "stablehlo.and"),
    (hlo.OrOp, "stablehlo.or"),
    (hlo.NegateOp, "stablehlo.negate"),
    (hlo.AbsOp, "stablehlo.abs"),
    (hlo.ExpOp, "stablehlo.exponential"),
    (hlo.LogOp, "stablehlo.log"),
    (hlo.SqrtOp, "stablehlo.sqrt"),
    (hlo.TanhOp, "stablehlo.tanh"),
    (hlo.LogisticOp, "stablehlo.logistic"),
    (hlo.NotOp, "stablehlo.not"),
    (hlo_rounding.FloorOp, "stablehlo.floor"),
    (hlo_math.SignOp, "stablehlo.sign"),
    (hlo_math.CeilOp, "stablehlo.ceil"),
    (hlo_math.RoundNearestEvenOp, "stablehlo.round_nearest_even"),
    (hlo_math.RsqrtOp, "stablehlo.rsqrt"),
    (hlo_math.LogPlusOneOp, "stablehlo.log_plus_one"),
    (hlo_math.SineOp, "stablehlo.sine"),
    (hlo_math.CosineOp, "stablehlo.cosine"),
    (hlo_math.IsFiniteOp, "stablehlo.is_finite"),
    (hlo_complex.RealOp, "stablehlo.real"),
    (hlo_complex.ImagOp, "stablehlo.imag"),
    (hlo_complex.ComplexOp, "stablehlo.complex"),
    (hlo_bits.XorOp, "stablehlo.xor"),
    (hlo_bits.ShiftLeftOp, "stablehlo.shift_left"),
    (hlo_bits.ShiftRightLogicalOp, "stablehlo.shift_right_logical"),
    (hlo_bits.ShiftRightArithmeticOp, "stablehlo.shift_right_arithmetic"),
    (hlo_bits.BitcastConvertOp, "stablehlo.bitcast_convert"),
    (hlo.SelectOp, "stablehlo.select"),
    (hlo.ReshapeOp, "stablehlo.reshape"),
    (hlo.DynamicUpdateSliceOp, "stablehlo.dynamic_update_slice"),
]

_WITH_PROPS = [
    (hlo.IotaOp, "stablehlo.iota", ("iota_dimension",)),
    (hlo.BroadcastInDimOp, "stablehlo.broadcast_in_dim", ("broadcast_dimensions",)),
    (hlo.TransposeOp, "stablehlo.transpose", ("permutation",)),
    (hlo.SliceOp, "stablehlo.slice", ("start_indices", "limit_indices", "strides")),
    (hlo.PadOp, "stablehlo.pad", ("edge_padding_low", "edge_padding_high", "interior_padding")),
    (hlo.DynamicSliceOp, "stablehlo.dynamic_slice", ("slice_sizes",)),
    (hlo.ConcatenateOp, "stablehlo.concatenate", ("dimension",)),
    (hlo_math.ReverseOp, "stablehlo.reverse", ("dimensions",)),
    (GetDimensionSizeOp, "stablehlo.get_dimension_size", ("dimension",)),
]

_HOST_REASON = "runs on the host (no StableHLO form); it belongs in a host program, not the device program"

ENTRIES: list[Entry] = [
    *(same(cls, name) for cls, name in _ELEMENTWISE),
    *(same(cls, name, props) for cls, name, props in _WITH_PROPS),
    Entry("hlo.constant", "stablehlo.constant", _export_constant, _import_constant),
    Entry(
        "hlo.convert",
        "stablehlo.convert",
        _export_convert,
        same(hlo.ConvertOp, "stablehlo.convert").import_,
        note="float to int: xtpu's (numpy's) INT_MIN where StableHLO leaves it to the implementation",
    ),
    Entry(
        "hlo.power",
        "stablehlo.power",
        _export_power,
        same(hlo.PowerOp, "stablehlo.power").import_,
        note="pow(1, y) = pow(x, 0) = 1 written out (IEEE 754; XLA's CPU client gives NaN when fused)",
    ),
    Entry(
        "hlo.divide",
        "stablehlo.divide",
        _export_divide,
        same(hlo.DivideOp, "stablehlo.divide").import_,
        note="integer division by zero: xtpu's (numpy's) 0",
    ),
    Entry("hlo.compare", "stablehlo.compare", _export_compare, _import_compare),
    Entry("hlo.dot_general", "stablehlo.dot_general", _export_dot_general, _import_dot_general),
    Entry("hlo.reduce", "stablehlo.reduce", _export_reduce, _import_reduce),
    Entry("hlo.convolution", "stablehlo.convolution", _export_convolution, _import_convolution),
    Entry("hlo.reduce_window", "stablehlo.reduce_window", _export_reduce_window, _import_reduce_window),
    Entry(
        "hlo.select_and_scatter",
        "stablehlo.select_and_scatter",
        _export_select_and_scatter,
        _import_select_and_scatter,
    ),
    Entry("hlo.rng_bit_generator", "stablehlo.rng_bit_generator", _export_rng),
    Entry("hlo.if", "stablehlo.if", _export_if, _import_if),
    Entry("hlo.while", "stablehlo.while", _export_while, _import_while),
    Entry("hlo.return", "stablehlo.return", _export_return),
    Entry(FusionRegionOp.name, None, _export_fusion_region, note="inlined: its body's ops (XLA fuses on its own)"),
    Entry(FusionYieldOp.name, None, _refuse("ends a fusion.region, whose body export inlines")),
    Entry(StopGradientOp.name, None, _identity, note="the identity (gradients are xtpu's, taken before export)"),
    Entry(CustomGradientOp.name, None, _identity, note="the identity on its outputs (its rule is Python)"),
    Entry(
        tpu.ReplicaIdOp.name, "stablehlo.replica_id", _export_id("stablehlo.replica_id"), _import_id(tpu.ReplicaIdOp)
    ),
    Entry(
        tpu.LogicalCoreIdOp.name,
        "stablehlo.partition_id",
        _export_id("stablehlo.partition_id"),
        _import_id(tpu.LogicalCoreIdOp),
    ),
    Entry(tpu.CrossReplicaSumOp.name, None, _export_cross_replica_sum),
    Entry(ccl.AllReduceOp.name, "stablehlo.all_reduce", _export_all_reduce, _import_all_reduce),
    Entry(ccl.AllGatherOp.name, "stablehlo.all_gather", _export_all_gather, _import_all_gather),
    Entry(ccl.ReduceScatterOp.name, "stablehlo.reduce_scatter", _export_reduce_scatter, _import_reduce_scatter),
    Entry(ccl.AllToAllOp.name, "stablehlo.all_to_all", _export_all_to_all, _import_all_to_all),
    Entry(
        ccl.CollectivePermuteOp.name,
        "stablehlo.collective_permute",
        _export_collective_permute,
        _import_collective_permute,
    ),
    Entry(tpu.SendToHostOp.name, "stablehlo.send", _export_send_to_host),
    Entry(tpu.RecvFromHostOp.name, "stablehlo.recv", _export_recv_from_host),
    Entry(tpu.ShardingConstraintOp.name, "stablehlo.custom_call", _export_sharding, _import_custom_call),
    Entry(
        "hlo.set_dimension_size",
        None,
        _refuse("is XLA's dynamic-size op, which StableHLO does not have (export before tpu-pad-dynamic-shapes)"),
    ),
    Entry("hlo.gather", "stablehlo.gather", _export_gather, _import_gather),
    Entry("hlo.scatter", "stablehlo.scatter", _export_scatter, _import_scatter),
    Entry("hlo.sort", "stablehlo.sort", _export_sort, _import_sort),
    Entry("hlo.variadic_reduce", None, _export_variadic_reduce, note="stablehlo.reduce of (values, indices)"),
    Entry("tpu.infeed_dequeue_tuple", "stablehlo.infeed", _export_infeed),
    Entry("tpu.outside_compilation", None, _refuse(_HOST_REASON + "; compile the program first")),
    Entry(
        "hlo.svd",
        None,
        _refuse("has no StableHLO op (XLA builds an SVD from a library routine, JAX calls LAPACK's gesdd)"),
    ),
    Entry(
        "hlo.erf",
        "chlo.erf",
        _export_erf,
        same(hlo_math.ErfOp, "chlo.erf").import_,
        note="no StableHLO op (XLA's is chlo.erf, which JAX emits): Cephes's erf in float64 ops on export",
    ),
    *(
        Entry(name, None, _refuse(_HOST_REASON))
        for name in (
            "hlo.real_dynamic_slice",
            "hlo.string_constant",
            "hlo.string_format",
            "hlo.string_to_number",
            "hlo.print",
            "hlo.summary_scalar",
            "hlo.summary_histogram",
            "hlo.summary_write",
            "hlo.summary_flush",
            "hlo.host_variable_update",
            "tpu.recv_at_host",
            "tpu.send_from_host",
        )
    ),
]

# StableHLO ops without an xtpu op of their own, imported as compositions.
ENTRIES += [
    Entry(None, "chlo.square", None, _import_square, note="x * x"),
    Entry(None, "stablehlo.round_nearest_afz", None, _import_round_afz, note="floor(|x|) + (frac >= 0.5), signed"),
    Entry(None, "chlo.erf_inv", None, _import_erf_inv, note="Giles's single-precision erfinv"),
    Entry(None, "chlo.erfc", None, _import_erfc, note="1 - erf near 0, Cephes's erfc in the tails"),
    Entry(None, "chlo.top_k", None, _import_top_k, note="a stable descending sort with an iota, then a slice"),
    Entry(None, "stablehlo.dot", None, _import_dot, note="dot_general contracting lhs's last dimension"),
    Entry(None, "stablehlo.case", None, _import_case, note="xtpu.switch_case / nested hlo.if"),
    Entry(None, "stablehlo.optimization_barrier", None, _import_identity, note="the identity"),
    Entry(None, "stablehlo.rsqrt", None, _import_rsqrt, note="1 / sqrt(x), within 1 ulp"),
    Entry(None, "stablehlo.clamp", None, _import_clamp, note="minimum(maximum(x, lo), hi)"),
    Entry(None, "stablehlo.sign", None, _import_sign, note="two selects"),
    Entry(None, "stablehlo.remainder", None, _import_remainder, note="integers only: a - b * (a / b)"),
    Entry(None, "stablehlo.is_finite", None, _import_is_finite, note="x - x == 0"),
    Entry(None, "stablehlo.log_plus_one", None, _import_log1p, note="Goldberg's log1p, a few ulps"),
    Entry(None, "stablehlo.exponential_minus_one", None, _import_expm1, note="Kahan's expm1, a few ulps"),
]

EXPORT: dict[str, Entry] = {e.xtpu: e for e in ENTRIES if e.xtpu is not None and e.export is not None}
IMPORT: dict[str, Entry] = {e.stablehlo: e for e in ENTRIES if e.stablehlo is not None and e.import_ is not None}
