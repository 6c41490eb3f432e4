"""``replicate``, ``outside_compilation``, ``cross_replica_sum`` and ``lower``.

Semantics are TF's (``tf.compat.v1.tpu.replicate``,
``tf.tpu.outside_compilation``, ``tf.compat.v1.tpu.cross_replica_sum``; see
the seeds ``tpu_replicate.txt``, ``tpu_outside_compilation.txt`` and
``outside_compilation_patch.diff.txt``).  A computation is traced once per
input signature into a module (``func.func @main`` holding one
``tpu.replicate``), the pass pipeline lowers it, and the runtime runs one
device worker per replica.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import Block, Operation, Region, SSAValue

from xtpu.core import pytree
from xtpu.core.gc_pause import paused_gc
from xtpu.core.log import describe, timed
from xtpu.core.pipeline import Stages, module_text, parse_pipeline, run_pipeline
from xtpu.core.tracing import (
    Tensor,
    Trace,
    bind,
    convert,
    current_trace,
    is_user_frame,
    recording_tapes,
    to_numpy,
    trace_stack,
    user_location,
)
from xtpu.dialects.dynamic_shapes import SIZE_DTYPE, GetDimensionSizeOp, SetDimensionSizeOp
from xtpu.dialects.tensor_spec import TensorSpec, dtype_of_numpy
from xtpu.dialects.tpu import (
    CrossReplicaSumOp,
    OutsideCompilationOp,
    ReplicateOp,
    YieldOp,
    check_group_assignment,
)
from xtpu.ops.summary_ops import trace_key
from xtpu.passes import ALL_PASSES, DEFAULT_PIPELINE, FUSION_PIPELINE, SPMD_PIPELINE
from xtpu.passes.batch_replicas import batch_body
from xtpu.passes.stablehlo_export import to_text
from xtpu.replication import padding
from xtpu.replication.infeed import InfeedQueue
from xtpu.replication.padding import PaddingSpec
from xtpu.runtime.executor import Executable

_log = logging.getLogger("xtpu.compile")


@dataclass(frozen=True)
class XLAOptions:
    """Compiler options (TF's ``tf.tpu.XLAOptions``).

    Attributes:
      use_spmd_for_xla_partitioning: accepted for TF compatibility.
      enable_xla_dynamic_padder: accepted for TF compatibility.
      allow_soft_placement: when True (default) ops a device cannot run are
        moved to the host by ``tpu-mark-outside-compilation``; when False they
        are a compile error naming the op and its source line.
    """

    use_spmd_for_xla_partitioning: bool = True
    enable_xla_dynamic_padder: bool = True
    allow_soft_placement: bool = True


DEFAULT_XLA_OPTIONS = XLAOptions()


def default_pipeline(xla_options: XLAOptions | None = None, num_cores: int = 1) -> str:
    """The pass pipeline ``replicate`` runs (``xtpu.passes.DEFAULT_PIPELINE``,
    plus sharding propagation and SPMD partitioning when a replica has
    several logical cores, then ``FUSION_PIPELINE``: elementwise fusion)."""
    opts = xla_options or DEFAULT_XLA_OPTIONS
    names = []
    for name in DEFAULT_PIPELINE:
        if name == "tpu-mark-outside-compilation" and not opts.allow_soft_placement:
            name += "{allow-soft-placement=false}"
        names.append(name)
    if num_cores != 1:
        names += list(SPMD_PIPELINE)
    names += list(FUSION_PIPELINE)
    return ",".join(names)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def _normalize_inputs(inputs: Any) -> list[list[Any]]:
    if inputs is None:
        return [[]]
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(
            f"inputs must be a list of lists of tensors indexed [replica][input], got {type(inputs).__name__}"
        )
    if len(inputs) == 0:
        raise ValueError("inputs must hold at least one replica; use None for one replica without inputs")
    out = []
    for r in inputs:
        out.append(list(r) if isinstance(r, (list, tuple)) else [r])
    return out


def _check_signature_arity(computation: Callable, sig: Signature) -> None:
    """The computation takes the inputs, then the infeed queue's tuple elements."""
    extra = 0 if sig.infeed is None else sig.infeed.number_of_tuple_elements
    _check_arity(computation, len(sig.treedef.children), extra)


def _check_arity(computation: Callable, count: int, infeed: int = 0) -> None:
    try:
        sig = inspect.signature(computation)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*([None] * (count + infeed)))
    except TypeError:
        params = [
            p.name
            for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
        raise ValueError(
            f"Supplied computation cannot be called with the specified inputs. You specified "
            f"{count} inputs per replica"
            + (f" and {infeed} additional inputs from infeed" if infeed else "")
            + f", but the computation needs {len(params)} "
            f"({', '.join(params) or 'none'})"
        ) from None


@dataclass(frozen=True)
class Signature:
    """What a compiled program was traced for: replicas and input specs."""

    num_replicas: int
    treedef: pytree.TreeDef
    specs: tuple[TensorSpec, ...]
    num_cores: int = 1
    #: ``(input, dimension)`` pairs padded by ``maximum_shapes``: each gets
    #: one more ``tensor<i32>`` input, its real size (after the inputs).
    dynamic: tuple[tuple[int, int], ...] = ()
    #: an ``xtpu.InfeedQueue`` whose tuple each replica takes as more inputs.
    infeed: Any = None

    @property
    def all_specs(self) -> tuple[TensorSpec, ...]:
        """The inputs' specs, then one ``int32`` scalar per real size."""
        return self.specs + (TensorSpec((), SIZE_DTYPE),) * len(self.dynamic)

    def mismatch(self, got: Signature) -> str:
        """What differs between this (the compiled) signature and ``got``, in
        words: the replicas, the number or structure of inputs, each input
        whose shape or dtype differs, the logical cores."""
        diffs = []
        if got.num_replicas != self.num_replicas:
            diffs.append(f"it was compiled for {self.num_replicas} replicas, got inputs for {got.num_replicas}")
        if len(got.specs) != len(self.specs):
            diffs.append(f"each replica takes {len(self.specs)} inputs, got {len(got.specs)}")
        elif got.treedef != self.treedef:
            diffs.append(f"the inputs must have the structure {self.treedef}, got {got.treedef}")
        else:
            diffs += [
                f"input {i} must be {want}, got {have}"
                for i, (want, have) in enumerate(zip(self.specs, got.specs))
                if want != have
            ]
        if got.num_cores != self.num_cores:
            diffs.append(f"it was compiled for {self.num_cores} logical cores per replica, got {got.num_cores}")
        return "; ".join(diffs) or "they are equal"


def _flatten_replicas(
    inputs: Any, same_shapes: bool = True, num_cores: int = 1, infeed: Any = None
) -> tuple[Signature, list[list[np.ndarray]]]:
    replicas = _normalize_inputs(inputs)
    flat: list[list[np.ndarray]] = []
    treedef = None
    for r, rep in enumerate(replicas):
        leaves, td = pytree.flatten(rep)
        if treedef is None:
            treedef = td
        elif td.num_leaves != treedef.num_leaves or td != treedef:
            raise ValueError(
                "Replicas must have the same number of inputs. Replica 0 had "
                f"{treedef.num_leaves} inputs, replica {r} had {td.num_leaves} inputs."
                if td.num_leaves != treedef.num_leaves
                else f"Replicas must have inputs of the same structure: replica 0 has {treedef}, replica {r} has {td}"
            )
        arrays = []
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, Tensor):
                raise TypeError("replicate inputs must be concrete values, not traced tensors")
            try:
                arrays.append(to_numpy(leaf))
            except TypeError as e:
                raise TypeError(f"input {i} of replica {r}: {e}") from None
        flat.append(arrays)
    specs = tuple(TensorSpec(a.shape, dtype_of_numpy(a.dtype)) for a in flat[0])
    for r, arrays in enumerate(flat[1:], start=1):
        for i, a in enumerate(arrays):
            s = TensorSpec(a.shape, dtype_of_numpy(a.dtype))
            if s != specs[i] and (same_shapes or s.dtype != specs[i].dtype):
                raise ValueError(
                    f"input {i} has {specs[i]} in replica 0 but {s} in replica {r}; replicas must "
                    "have inputs of the same shape and dtype (maximum_shapes pads them to one shape)"
                )
    return Signature(len(flat), treedef, specs, num_cores=num_cores, infeed=infeed), flat


# --------------------------------------------------------------------------
# Tracing
# --------------------------------------------------------------------------


def _export_escaping_values(cluster: OutsideCompilationOp) -> None:
    """Make values defined in ``cluster`` and used after it cluster results."""
    inside = {id(o) for o in cluster.walk()}
    # Values the cluster yields already but that are also used directly
    # after it (gradient ops see through clusters): use the results.
    for v, r in zip(cluster.body.block.last_op.operands, cluster.results):
        v.replace_uses_with_if(r, lambda use: id(use.operation) not in inside)
    escaping: list[SSAValue] = []
    for o in cluster.body.walk():
        for r in o.results:
            if r not in cluster.body.block.last_op.operands and any(id(u.operation) not in inside for u in r.uses):
                escaping.append(r)
    if not escaping:
        return
    old_yield = cluster.body.block.last_op
    assert isinstance(old_yield, YieldOp)
    values = list(old_yield.operands) + escaping
    new_yield = YieldOp.create(operands=values)
    cluster.body.block.insert_op_before(new_yield, old_yield)
    cluster.body.block.erase_op(old_yield)
    region = cluster.detach_region(0)
    new = OutsideCompilationOp.create(
        result_types=[v.type for v in values],
        properties=dict(cluster.properties),
        regions=[region],
    )
    new.location = cluster.location
    parent = cluster.parent_block()
    parent.insert_op_before(new, cluster)
    for old_r, new_r in zip(cluster.results, new.results):
        old_r.replace_all_uses_with(new_r)
    inside_new = {id(o) for o in new.walk()}
    for v, new_r in zip(escaping, new.results[len(cluster.results) :]):
        v.replace_uses_with_if(new_r, lambda use: id(use.operation) not in inside_new)
    parent.erase_op(cluster)


def _with_user_line(e: Exception) -> Exception:
    """``e`` again with the user's innermost source line appended, when it is a
    plain ValueError or TypeError that does not name one yet."""
    if type(e) not in (ValueError, TypeError) or "(at " in str(e):
        return e
    where = None
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user_frame(code.co_filename):
            where = f"{os.path.basename(code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    if where is None:
        return e
    new = type(e)(f"{e} (at {where})")
    new.__traceback__ = e.__traceback__
    return new


def _input_tensors(tr: Trace, body: Block, sig: Signature) -> list[Tensor]:
    """The computation's input tensors: the body's arguments, each padded
    dimension given its real size (``hlo.set_dimension_size``)."""
    k = len(sig.specs)
    tensors = [Tensor(a, s, tr) for a, s in zip(body.args[:k], sig.specs)]
    for j, (i, d) in enumerate(sig.dynamic):
        body.args[k + j].name_hint = f"input{i}_size{d}"
        size = Tensor(body.args[k + j], sig.all_specs[k + j], tr)
        (tensors[i],) = tr.emit(SetDimensionSizeOp, [tensors[i], size], {"dimension": d})
    tr.padded = bool(sig.dynamic)
    return tensors


@paused_gc()
def trace(computation: Callable, sig: Signature) -> tuple[ModuleOp, pytree.TreeDef]:
    """Trace ``computation`` for ``sig`` into a module; return it and the
    structure of one replica's outputs (after the seed's output rules)."""
    n = sig.num_replicas
    body = Block(arg_types=[s.to_type() for s in sig.all_specs])
    for i, a in enumerate(body.args):
        a.name_hint = f"input{i}"
    tr = Trace(body, n, sig.num_cores)
    stack = trace_stack()
    stack.append(tr)
    try:
        args = pytree.unflatten(sig.treedef, _input_tensors(tr, body, sig))
        if sig.infeed is not None:  # TF: the dequeued tuple follows the inputs
            args = list(args) + sig.infeed._dequeue()
        try:
            result = computation(*args)
        except (ValueError, TypeError) as e:
            located = _with_user_line(e)
            if located is e:
                raise
            raise located from None
        if result is not None and not isinstance(result, (tuple, list, dict)):
            result = (result,)  # seed: a single value comes back as a 1-tuple
        leaves, out_tree = pytree.flatten(result)
        out_tensors = []
        for j, leaf in enumerate(leaves):
            if isinstance(leaf, Operation):
                raise TypeError(f"output {j} is an operation, not a tensor")
            try:
                out_tensors.append(convert(leaf))
            except TypeError as e:
                raise TypeError(f"output {j} of the computation cannot be a tensor: {e}") from None
        if tr.padded:  # each output's real sizes, to return it unpadded
            out_tensors += [
                tr.emit(GetDimensionSizeOp, [t], {"dimension": d})[0] for t in list(out_tensors) for d in range(t.ndim)
            ]
    finally:
        stack.pop()
    body.add_op(YieldOp.create(operands=[t.value for t in out_tensors]))
    for cl in list(tr.cluster_ops):
        if cl.parent is not None:
            _export_escaping_values(cl)
    # Re-read the yield: exporting may have rewired its operands.
    out_types = [v.type for v in body.last_op.operands]
    # The body's arguments now: xtpu.function adds one per batch its
    # computation takes from an iterator while it is traced.
    arg_types = [a.type for a in body.args for _ in range(n)]
    outer = Block(arg_types=arg_types)
    for idx, a in enumerate(outer.args):
        a.name_hint = f"arg{idx}"
    rep = ReplicateOp.create(
        operands=list(outer.args),
        result_types=[t for t in out_types for _ in range(n)],
        properties={"n": IntegerAttr(n, i64)}
        | ({"num_cores_per_replica": IntegerAttr(sig.num_cores, i64)} if sig.num_cores != 1 else {}),
        regions=[Region(body)],
    )
    outer.add_op(rep)
    outer.add_op(func.ReturnOp(*rep.results))
    fn = func.FuncOp(
        "main",
        FunctionType.from_lists(arg_types, [t for t in out_types for _ in range(n)]),
        Region(outer),
    )
    module = ModuleOp([fn])
    # The module, func.func and func.return around it are built well-formed
    # here, and every traced op was made by its own shape rule (emit); what
    # tracing can still get wrong is the replicate's closure and the types
    # crossing it (exported cluster values), so only the tpu.replicate itself
    # is verified (a fifth of the whole module's cost at 10,000 ops; xDSL's
    # IsolatedFromAbove walks func.func's body again).  Lowered.compile
    # verifies the whole program after the passes.
    rep.verify(verify_nested_ops=False)
    return module, out_tree


# --------------------------------------------------------------------------
# Lowered and compiled programs
# --------------------------------------------------------------------------


def _module_text(module: ModuleOp, dialect: str | None, generic: bool) -> str:
    if dialect in (None, "xtpu"):
        return module_text(module, generic)
    if dialect == "stablehlo":
        return to_text(module)
    raise ValueError(f'as_text: unknown dialect {dialect!r}; expected None (xtpu\'s dialects) or "stablehlo"')


class Lowered:
    """A traced computation (``xtpu.lower``): the module before any pass."""

    def __init__(self, module: ModuleOp, sig: Signature, out_tree: pytree.TreeDef, xla_options: XLAOptions | None):
        self.module = module
        self.signature = sig
        self.out_tree = out_tree
        self.xla_options = xla_options

    def as_text(self, dialect: str | None = None, *, generic: bool = False) -> str:
        """The traced module as MLIR text: xtpu's dialects (default), or with
        ``dialect="stablehlo"`` one replica's program as StableHLO (JAX's
        ``Lowered.as_text(dialect=...)``; see :mod:`xtpu.passes.stablehlo_export`).

        Raises:
          ValueError: an unknown dialect; StableHLOExportError (a ValueError)
            when the program has host code or an op without a StableHLO form.
        """
        return _module_text(self.module, dialect, generic)

    @paused_gc()
    def compile(self, pipeline: str | Sequence[str] | None = None, timeout: float | None = None) -> Compiled:
        """Run the pass pipeline (default: ``default_pipeline()``) on a copy of
        the module and build the runtime program.

        Raises:
          ValueError: an unknown pass name or option.
          xdsl DiagnosticException: a pass rejected the program.
        """
        if self.signature.num_cores != 1 and pipeline is None:
            if "tpu-spmd-partition" not in ALL_PASSES:
                raise NotImplementedError(
                    f"compiling a replica split over {self.signature.num_cores} logical devices needs "
                    "tpu-spmd-partition, which is not implemented yet; lower(...).as_text() shows the traced program"
                )
        spec = default_pipeline(self.xla_options, self.signature.num_cores) if pipeline is None else pipeline
        passes = parse_pipeline(spec)
        module = self.module.clone()
        times: dict[str, float] = {}
        stages = Stages(self.module, passes, times)
        with timed(_log, logging.INFO, f"compiled for {self.signature.num_replicas} replicas") as extra:
            # Each pass is verified by its lit tests; the program once at the end
            # (XTPU_VERIFY_EACH_PASS=1 verifies after every pass).
            run_pipeline(module, passes, verify_each=os.environ.get("XTPU_VERIFY_EACH_PASS") == "1", times=times)
            compiled = Compiled(module, self.signature, self.out_tree, stages, timeout)
            extra["passes"] = len(passes)
        return compiled


class Compiled:
    """A lowered, runnable program: call it with per-replica inputs.

    Attributes:
      stages: pass name -> module text after that pass.
    """

    def __init__(self, module: ModuleOp, sig: Signature, out_tree: pytree.TreeDef, stages: Any, timeout: float | None):
        self.module = module
        self.signature = sig
        self.out_tree = out_tree
        self.stages = stages
        self.executable = Executable(module, timeout=timeout, batcher=batch_body)
        self._plain = _plain_specs(sig)
        # The program yields each output's real sizes after the outputs: its
        # inputs were padded (maximum_shapes) or an op made a dynamic size
        # (the one-argument where).
        self._sized = len(module.body.block.first_op.function_type.outputs) != sig.num_replicas * out_tree.num_leaves

    def as_text(self, dialect: str | None = None, *, generic: bool = False) -> str:
        """The lowered module as MLIR text: xtpu's dialects (default), or with
        ``dialect="stablehlo"`` the device program as StableHLO, ``@main``
        with ``mhlo.num_replicas`` (JAX's ``Compiled.as_text``; see
        :mod:`xtpu.passes.stablehlo_export`).

        Raises:
          ValueError: an unknown dialect; StableHLOExportError (a ValueError)
            when the program has host programs (outside compilation) or an
            op without a StableHLO form.
        """
        return _module_text(self.module, dialect, generic)

    def __call__(self, inputs: Any = None) -> list[Any]:
        """Run with ``inputs`` indexed ``[replica][input]``; returns a list
        indexed by replica with the seed's output rules.

        Raises:
          ValueError: the inputs do not match what the program was compiled
            for (with maximum_shapes: an input larger than its padded shape).
          xtpu.runtime.errors.XtpuRuntimeError: a worker failed.
        """
        flat = _plain_inputs(inputs, self._plain)
        if flat is not None:  # numpy arrays of the compiled shapes and dtypes
            return self._run(flat, checked=True)
        # Logical cores per replica come from the device assignment the
        # program was compiled with, not from the inputs.
        compiled = self.signature
        sig, flat = _flatten_replicas(
            inputs, same_shapes=not compiled.dynamic, num_cores=compiled.num_cores, infeed=compiled.infeed
        )
        if self.signature.dynamic:  # compiled for maximum_shapes: pad to its shapes
            flat, sig = padding.pad_to(flat, sig, self.signature)
        if sig != self.signature:
            raise ValueError(f"inputs do not match the compiled program: {self.signature.mismatch(sig)}")
        return self._run(flat)

    def _run(self, flat: Sequence[Sequence[np.ndarray]], checked: bool = False) -> list[Any]:
        n = self.signature.num_replicas
        k = len(self.signature.all_specs)
        args = [flat[r][i] for i in range(k) for r in range(n)]
        outs = self.executable.run(args, checked=checked)
        m = len(outs) // n if n else 0
        if self._sized:  # slice each output to its real sizes
            m = self.out_tree.num_leaves
            return [pytree.unflatten(self.out_tree, _real_outputs(outs, m, n, r)) for r in range(n)]
        return [pytree.unflatten(self.out_tree, [outs[j * n + r] for j in range(m)]) for r in range(n)]


def _plain_specs(sig: Signature) -> tuple[int, tuple[tuple[tuple[int, ...], np.dtype], ...]] | None:
    """``(replicas, ((shape, numpy dtype), ...))`` when each replica takes a
    flat list of numeric arrays (no ``maximum_shapes``, no infeed): the
    inputs :func:`_plain_inputs` takes without flattening; else None."""
    leaf = pytree.TreeDef("leaf", None, ())
    if sig.dynamic or sig.infeed is not None or sig.num_cores != 1:
        return None
    if sig.treedef != pytree.TreeDef("list", None, (leaf,) * len(sig.specs)):
        return None
    dtypes = tuple(np.dtype(s.dtype) for s in sig.specs if s.dtype != "string")
    if len(dtypes) != len(sig.specs):
        return None
    return sig.num_replicas, tuple(zip((s.shape for s in sig.specs), dtypes))


def _plain_inputs(inputs: Any, plain: Any) -> Sequence[Sequence[np.ndarray]] | None:
    """``inputs`` itself when it is what ``plain`` (:func:`_plain_specs`)
    describes: a list or tuple per replica of numpy arrays (not subclasses)
    of exactly the compiled shapes and dtypes, the common case of a training
    loop, checked without :func:`_flatten_replicas`'s pytree walk and
    conversions (40 us of an 8-replica, 3-input call).  None for anything
    else, which the general path converts, or rejects with its message."""
    if plain is None or type(inputs) not in (list, tuple):
        return None
    n, specs = plain
    if len(inputs) != n:
        return None
    k = len(specs)
    ndarray = np.ndarray
    for rep in inputs:
        if type(rep) not in (list, tuple) or len(rep) != k:
            return None
        for a, (shape, dtype) in zip(rep, specs):
            if type(a) is not ndarray or a.shape != shape or a.dtype != dtype:
                return None
    return inputs


def _real_outputs(outs: list[Any], m: int, n: int, r: int) -> list[Any]:
    """Replica ``r``'s ``m`` outputs, each sliced to the real sizes that
    follow them in ``outs`` (one per dimension of each output)."""
    real, k = [], m
    for j in range(m):
        x = outs[j * n + r]
        sizes = [int(outs[(k + d) * n + r]) for d in range(np.ndim(x))]
        k += len(sizes)
        real.append(x[tuple(slice(0, s) for s in sizes)] if tuple(sizes) != np.shape(x) else x)
    return real


def _prepare(computation, inputs, infeed_queue, device_assignment, maximum_shapes, padding_spec):
    """Check ``replicate``'s arguments; return the signature and flat inputs."""
    _check_unsupported(infeed_queue, device_assignment, maximum_shapes, padding_spec)
    if current_trace() is not None:
        raise ValueError("TPU computations cannot be nested")
    sig, flat = _flatten_replicas(inputs, same_shapes=maximum_shapes is None)
    if maximum_shapes is not None:
        plan = padding.plan(sig.treedef, flat, maximum_shapes, padding_spec)
        flat = padding.pad(flat, plan)
        specs = tuple(TensorSpec(shape, s.dtype) for shape, s in zip(plan.shapes, sig.specs))
        sig = dataclasses.replace(sig, specs=specs, dynamic=plan.dynamic)
    if device_assignment is not None:
        if device_assignment.num_replicas != sig.num_replicas:
            raise ValueError(
                f"device_assignment has {device_assignment.num_replicas} replicas but inputs are given "
                f"for {sig.num_replicas} replicas"
            )
        cores = int(getattr(device_assignment, "num_cores_per_replica", 1))
        if cores != 1:
            sig = dataclasses.replace(sig, num_cores=cores)
    if infeed_queue is not None:
        if sig.num_cores != 1:
            raise NotImplementedError(
                "replicate: an infeed_queue with more than one logical core per replica (model-parallel "
                "infeed) is not implemented"
            )
        _check_infeed(infeed_queue, sig.num_replicas)
        sig = dataclasses.replace(sig, infeed=infeed_queue)
    return sig, flat


def _check_infeed(queue: Any, n: int) -> None:
    """``queue`` feeds ``n`` replicas: its shards default to ``n``; it must
    be configured (TF: the dequeue op freezes the queue)."""
    if queue.number_of_shards is None:
        queue.set_number_of_shards(n)
    if queue.number_of_shards != n:
        raise ValueError(
            f"infeed_queue '{queue.name}' has {queue.number_of_shards} shards but the computation has {n} "
            "replicas: one shard per replica"
        )
    if queue.tuple_types is None or queue.tuple_shapes is None:
        raise ValueError(
            f"infeed_queue '{queue.name}' is not configured: set its tuple types and shapes (or generate its "
            "enqueue ops, or enqueue once) before replicate traces the computation"
        )
    queue.freeze()


def _check_unsupported(infeed_queue, device_assignment, maximum_shapes, padding_spec) -> None:
    if infeed_queue is not None:
        if not isinstance(infeed_queue, InfeedQueue):
            raise TypeError(f"infeed_queue must be an xtpu.InfeedQueue, got {type(infeed_queue).__name__}")
        if maximum_shapes is not None:
            raise ValueError("Dynamic input shapes are not supported with infeed queues")
    if padding_spec is not None:
        if padding_spec not in tuple(PaddingSpec):
            raise ValueError(f"padding_spec must be a PaddingSpec (AUTO or POWER_OF_TWO), got {padding_spec!r}")


def lower(
    computation: Callable,
    inputs: Any = None,
    infeed_queue: Any = None,
    device_assignment: Any = None,
    name: str | None = None,
    maximum_shapes: Any = None,
    padding_spec: Any = None,
    xla_options: XLAOptions | None = None,
) -> Lowered:
    """Trace ``computation`` for ``inputs`` (``[replica][input]``) without
    running it; ``.as_text()`` shows the traced module and ``.compile()``
    lowers it.  Takes ``replicate``'s arguments and raises its errors."""
    sig, _ = _prepare(computation, inputs, infeed_queue, device_assignment, maximum_shapes, padding_spec)
    _check_signature_arity(computation, sig)
    with timed(_log, logging.INFO, f"traced {describe(computation)}"):
        module, out_tree = trace(computation, sig)
    return Lowered(module, sig, out_tree, xla_options)


_cache_lock = threading.Lock()
_cache: weakref.WeakKeyDictionary[Any, dict] = weakref.WeakKeyDictionary()
_cache_stats = {"hits": 0, "misses": 0}


class CacheInfo(NamedTuple):
    """``replicate``'s compilation cache over all computations (the fields
    of ``functools.lru_cache``'s ``cache_info()``): ``maxsize`` is None, the
    cache is unbounded while its computations live."""

    hits: int
    misses: int
    maxsize: int | None
    currsize: int


def cache_info() -> CacheInfo:
    """Hits, misses and size of the compiled-program cache, over all
    computations; a program is cached per computation and (padded) input
    signature, so with ``PaddingSpec.POWER_OF_TWO`` one per bucket."""
    with _cache_lock:
        size = sum(len(v) for v in _cache.values())
        return CacheInfo(_cache_stats["hits"], _cache_stats["misses"], None, size)


def cache_clear() -> None:
    """Drop every compiled program and reset the counters."""
    with _cache_lock:
        _cache.clear()
        _cache_stats.update(hits=0, misses=0)


def _cached_compiled(computation: Callable, sig: Signature, xla_options: XLAOptions | None) -> Compiled:
    key = (sig, xla_options, trace_key())
    try:
        per_fn = _cache.get(computation)
    except TypeError:
        per_fn = None
    if per_fn is not None and key in per_fn:
        _cache_stats["hits"] += 1
        if _log.isEnabledFor(logging.DEBUG):  # describe() costs 4 us of a 20 us call
            _log.debug("cache hit: %s", describe(computation))
        return per_fn[key]
    if _log.isEnabledFor(logging.INFO):
        specs = [str(spec) for spec in sig.specs]
        shown = ", ".join(specs[:4]) + (f", ... ({len(specs)} in all)" if len(specs) > 4 else "") or "none"
        _log.info("cache miss: %s (%d replicas, inputs %s)", describe(computation), sig.num_replicas, shown)
    _check_signature_arity(computation, sig)
    with timed(_log, logging.INFO, f"traced {describe(computation)}"):
        module, out_tree = trace(computation, sig)
    compiled = Lowered(module, sig, out_tree, xla_options).compile()
    _cache_stats["misses"] += 1
    try:
        with _cache_lock:
            _cache.setdefault(computation, {})[key] = compiled
    except TypeError:
        pass
    return compiled


def replicate(
    computation: Callable,
    inputs: Any = None,
    infeed_queue: Any = None,
    device_assignment: Any = None,
    name: str | None = None,
    maximum_shapes: Any = None,
    padding_spec: Any = None,
    xla_options: XLAOptions | None = None,
) -> list[Any]:
    """Run ``computation`` once per replica (tf.compat.v1.tpu.replicate).

    Args:
      computation: a Python function building the per-replica computation.
      inputs: a list of lists of inputs indexed ``[replica][input]``, or None
        (``[[]]``); a replica's entry may be a bare value (one input); each
        input may be a nested structure of arrays / Python values.
      infeed_queue: an ``xtpu.InfeedQueue``: each replica's next tuple from
        it (``tpu.infeed_dequeue_tuple``) is appended to its inputs, as TF
        does; a step waits up to the runtime timeout for it.
      maximum_shapes: a structure like ``inputs[0]`` of shapes
        (``xtpu.TensorShape([None, 2])``, a list with None or -1, or an
        array whose shape is used) to pad each input to: an unknown
        dimension is padded to the largest size over the replicas, a known
        one must equal every replica's size.  The computation is traced for
        the padded shapes; ``tpu-pad-dynamic-shapes`` keeps its results
        exact on each replica's real sizes, and each output comes back
        with its replica's real shape.
      padding_spec: ``xtpu.PaddingSpec.AUTO`` (default) or
        ``POWER_OF_TWO``: round padded sizes up to a power of two, so that
        varying lengths reuse few compiled programs.
      device_assignment: an ``xtpu.DeviceAssignment``; with more than one
        core per replica each replica runs on its logical cores, and
        ``split_to_logical_devices`` & co. lay tensors out over them.
      name: deprecated, does nothing.
      xla_options: an :class:`XLAOptions`.

    Returns:
      A list indexed by replica of ``computation``'s outputs as numpy arrays,
      keeping their structure; a single value comes back as a 1-tuple and
      ``None`` as ``None``.

    Raises:
      ValueError: replicas have unequal numbers (or shapes, without
        maximum_shapes) of inputs; the number of inputs does not match the
        computation's parameters; a static input dimension does not match
        maximum_shapes; maximum_shapes does not have the structure of
        inputs[0] (the seed's four ValueErrors).
      NotImplementedError: an argument this version does not implement;
        nested outside_compilation.
      xtpu.runtime.errors.XtpuRuntimeError: a replica or host failed at run
        time (names the replica, the op and the source line).

    The program is cached per computation and (padded) input signature, so
    calling ``replicate`` in a loop traces and compiles once per signature;
    ``replicate.cache_info()`` / ``replicate.cache_clear()`` inspect and
    empty the cache (``functools``' names).  Python values the
    computation captures are constants fixed when it is traced.
    """
    sig, flat = _prepare(computation, inputs, infeed_queue, device_assignment, maximum_shapes, padding_spec)
    return _cached_compiled(computation, sig, xla_options)._run(flat)


replicate.cache_info = cache_info  # type: ignore[attr-defined]
replicate.cache_clear = cache_clear  # type: ignore[attr-defined]


# --------------------------------------------------------------------------
# outside_compilation and cross_replica_sum
# --------------------------------------------------------------------------


def outside_compilation(computation: Callable, *args: Any, **kwargs: Any) -> Any:
    """Build part of a computation on the host (tf.tpu.outside_compilation).

    Inside a replicated computation, the ops ``computation`` builds go into a
    new outside-compilation cluster (named "0", "1", ... as in TF) that the
    host runs once per replica; values flow between device and host over
    channels.  Outside one, it simply returns ``computation(*args, **kwargs)``.

    Returns:
      What ``computation`` returns.

    Raises:
      NotImplementedError: "Cannot nest outside_compilation clusters", or the
        control-flow context differs at the start and the end (the seed
        patch's errors).
    """
    tr = current_trace()
    if tr is None:
        return computation(*args, **kwargs)
    if tr.cluster is not None:
        raise NotImplementedError("Cannot nest outside_compilation clusters")
    cluster = str(tr.cluster_counter)
    tr.cluster_counter += 1
    block = Block()
    tr.blocks.append(block)
    tr.cluster_blocks[id(block)] = cluster
    depth = len(tr.blocks)
    tr.cluster = cluster
    loc = user_location()
    ok = False
    try:
        result = computation(*args, **kwargs)
        ok = True
    finally:
        final_depth = len(tr.blocks)
        del tr.blocks[depth - 1 :]
        tr.cluster = None
        tr.cluster_blocks.pop(id(block), None)
    if ok and final_depth != depth:
        raise NotImplementedError(
            "Control-flow context cannot be different at start and end of an outside_compilation scope"
        )
    leaves, tree = pytree.flatten(result)
    inner = [
        leaf
        for leaf in leaves
        if isinstance(leaf, Tensor) and leaf.value.owner is not None and _owned_by_block(leaf.value, block)
    ]
    block.add_op(YieldOp.create(operands=[t.value for t in inner]))
    op = OutsideCompilationOp.create(
        result_types=[t.value.type for t in inner],
        properties={"cluster": StringAttr(cluster)},
        regions=[Region(block)],
    )
    if loc is not None:
        op.location = loc
    tr.block.add_op(op)
    tr.cluster_ops.append(op)
    mapping = {id(t): Tensor(r, t.spec, tr) for t, r in zip(inner, op.results)}

    for tape in recording_tapes():
        for t in inner:
            tape._record_alias(t, mapping[id(t)])
    return pytree.unflatten(tree, [mapping.get(id(leaf), leaf) for leaf in leaves])


def _owned_by_block(value: SSAValue, block: Block) -> bool:
    owner = value.owner
    b = owner if isinstance(owner, Block) else owner.parent_block()
    while b is not None:
        if b is block:
            return True
        p = b.parent_op()
        b = p.parent_block() if p is not None else None
    return False


def cross_replica_sum(x: Any, group_assignment: Any = None, name: str | None = None) -> Any:
    """Sum ``x`` over all replicas, or within each group of
    ``group_assignment`` (tf.compat.v1.tpu.cross_replica_sum).

    Args:
      x: a numeric tensor.
      group_assignment: None, or a list of groups of replica ids covering
        every replica exactly once, all groups the same size.

    Returns:
      The sum, with ``x``'s shape and dtype.

    Raises:
      RuntimeError: called outside a replicated computation (eagerly): there
        are no replicas to sum over.  TF fails there too: its
        ``CrossReplicaSum`` op has kernels only in a TPU computation, so an
        eager call raises ``NotFoundError`` ("All kernels registered for op
        CrossReplicaSum: <no registered kernels>").  The op's eager kernel,
        the identity of one replica, stays for code that binds
        ``tpu.cross_replica_sum`` directly (gradient rules checked eagerly).
      ValueError: a bad ``group_assignment``, or a call inside an
        outside_compilation cluster (collectives run on devices).
    """
    tr = current_trace()
    if tr is None:
        raise RuntimeError(
            "cross_replica_sum must be called inside a replicated computation (xtpu.replicate, "
            "xtpu.lower or strategy.run): it sums over the computation's replicas, and eagerly there "
            "are none (TF: no kernel for op CrossReplicaSum outside a TPU computation)"
        )
    n = tr.num_replicas
    groups = None
    if group_assignment is not None:
        groups = (
            [[int(r) for r in g] for g in np.asarray(group_assignment, dtype=object).tolist()]
            if isinstance(group_assignment, np.ndarray)
            else [[int(r) for r in g] for g in group_assignment]
        )
        check_group_assignment(groups, n)
    if tr is not None and tr.cluster is not None:
        raise ValueError(
            f"cross_replica_sum cannot run inside outside_compilation cluster '{tr.cluster}': "
            "collectives run on the devices, not on the host"
        )
    (out,) = bind(CrossReplicaSumOp, [convert(x)], group_assignment=groups)
    return out
