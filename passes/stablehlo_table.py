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

from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DictionaryAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    i1,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue

from xtpu.dialects import ccl, hlo, hlo_rounding, tpu
from xtpu.dialects.autodiff import CustomGradientOp, StopGradientOp
from xtpu.dialects.dynamic_shapes import GetDimensionSizeOp
from xtpu.dialects.primitive import GroupsParam, PrimitiveOp
from xtpu.dialects.tensor_spec import TensorSpec
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


def _export_compare(ex, op, xs):
    direction = op.params()["comparison_direction"]
    spec = TensorSpec.of_type(op.operands[0].type)
    kind = "FLOAT" if spec.dtype.startswith("float") else ("UNSIGNED" if spec.dtype == "bool" else "SIGNED")
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


# ---- the table ------------------------------------------------------------------

_ELEMENTWISE = [
    (hlo.AddOp, "stablehlo.add"),
    (hlo.SubtractOp, "stablehlo.subtract"),
    (hlo.MultiplyOp, "stablehlo.multiply"),
    (hlo.DivideOp, "stablehlo.divide"),
    (hlo.PowerOp, "stablehlo.power"),
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
    (hlo.SelectOp, "stablehlo.select"),
    (hlo.ConvertOp, "stablehlo.convert"),
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
    (GetDimensionSizeOp, "stablehlo.get_dimension_size", ("dimension",)),
]

_HOST_REASON = "runs on the host (no StableHLO form); it belongs in a host program, not the device program"

ENTRIES: list[Entry] = [
    *(same(cls, name) for cls, name in _ELEMENTWISE),
    *(same(cls, name, props) for cls, name, props in _WITH_PROPS),
    Entry("hlo.constant", "stablehlo.constant", _export_constant),
    Entry("hlo.compare", "stablehlo.compare", _export_compare),
    Entry("hlo.dot_general", "stablehlo.dot_general", _export_dot_general),
    Entry("hlo.reduce", "stablehlo.reduce", _export_reduce),
    Entry("hlo.rng_bit_generator", "stablehlo.rng_bit_generator", _export_rng),
    Entry("hlo.if", "stablehlo.if", _export_if),
    Entry("hlo.while", "stablehlo.while", _export_while),
    Entry("hlo.return", "stablehlo.return", _export_return),
    Entry(StopGradientOp.name, None, _identity, note="the identity (gradients are xtpu's, taken before export)"),
    Entry(CustomGradientOp.name, None, _identity, note="the identity on its outputs (its rule is Python)"),
    Entry(tpu.ReplicaIdOp.name, "stablehlo.replica_id", _export_id("stablehlo.replica_id")),
    Entry(tpu.LogicalCoreIdOp.name, "stablehlo.partition_id", _export_id("stablehlo.partition_id")),
    Entry(tpu.CrossReplicaSumOp.name, None, _export_cross_replica_sum),
    Entry(ccl.AllReduceOp.name, "stablehlo.all_reduce", _export_all_reduce),
    Entry(ccl.AllGatherOp.name, "stablehlo.all_gather", _export_all_gather),
    Entry(ccl.ReduceScatterOp.name, "stablehlo.reduce_scatter", _export_reduce_scatter),
    Entry(ccl.AllToAllOp.name, "stablehlo.all_to_all", _export_all_to_all),
    Entry(ccl.CollectivePermuteOp.name, "stablehlo.collective_permute", _export_collective_permute),
    Entry(tpu.SendToHostOp.name, "stablehlo.send", _export_send_to_host),
    Entry(tpu.RecvFromHostOp.name, "stablehlo.recv", _export_recv_from_host),
    Entry(tpu.ShardingConstraintOp.name, "stablehlo.custom_call", _export_sharding),
    Entry(
        "hlo.set_dimension_size",
        None,
        _refuse("is XLA's dynamic-size op, which StableHLO does not have (export before tpu-pad-dynamic-shapes)"),
    ),
    Entry("tpu.infeed_dequeue_tuple", None, _refuse("reads xtpu's infeed queue, which has no StableHLO form")),
    Entry("tpu.outside_compilation", None, _refuse(_HOST_REASON + "; compile the program first")),
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
            "hlo.host_variable_update",
            "tpu.recv_at_host",
            "tpu.send_from_host",
        )
    ),
]

EXPORT: dict[str, Entry] = {e.xtpu: e for e in ENTRIES if e.xtpu is not None and e.export is not None}
IMPORT: dict[str, Entry] = {}
