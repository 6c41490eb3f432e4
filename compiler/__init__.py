"""xtpu: the TPU replication programming model, compiled with xDSL, run anywhere.

The API follows TensorFlow's names and semantics: ``replicate``,
``outside_compilation`` and ``cross_replica_sum`` from ``tf.tpu``, ops under
``xtpu.math``, ``xtpu.nn`` and ``xtpu.strings``, and TensorBoard summaries
under ``xtpu.summary``.  Outside a replicated
computation every op runs eagerly on numpy arrays.
"""

# How the API loads (issue 13: ``xtpu-opt`` starts in under 0.3 s).
#
# ``import xtpu`` loads only the version; the dialects and then the API
# below load, whole and in the order listed, the first time any of its names is
# read (``xtpu.replicate``, ``from xtpu import TPUStrategy``, ``xtpu.math``,
# ``dir(xtpu)`` ...), through PEP 562's module ``__getattr__`` / ``__dir__``
# as SciPy and scikit-image load theirs.  So ``xtpu.dialects``,
# ``xtpu.passes`` and ``xtpu.tools.opt`` (xtpu-opt) never pay for the API,
# and every import-time side effect of the API (the Python operators
# installed on ``Tensor`` by ``xtpu.ops.operators``, the log level read from
# ``XTPU_LOG``, ...) has happened before the first name is handed out.
# Any other ``xtpu.<submodule>`` imports that module alone; a submodule named
# like an API name (``xtpu.train``) is bound only once the API is loaded
# (``_Package``), so the name always reads as the API's value.
#
# To export a new name, add it to ``_API`` under the module that defines it,
# or a new public namespace to ``_NAMESPACES``, and to ``__all__`` if it is
# public; do not import API modules at the top of this file
# (test_lazy_import checks that ``xtpu-opt`` still starts without them).
# Module paths of the flat layout before the rooms of issue 24 stay
# importable through ``_MOVED``.

import importlib as _importlib
import importlib.abc as _importlib_abc
import importlib.util as _importlib_util
import sys as _sys
import threading as _threading
import types as _types

from xtpu.about import __version__

_API: dict[str, tuple[str, ...]] = {
    "xtpu.math": (),
    "xtpu.nn": (),
    "xtpu.strings": (),
    "xtpu.ops.operators": (),  # installs the Python operators on Tensor and EagerTensor
    "xtpu.ops.control_flow": ("cond", "while_loop"),
    "xtpu.ops.sharding_ops": ("assign_to_logical_device", "replicate_to_logical_devices", "split_to_logical_devices"),
    "xtpu.ops.array_ops": ("concat", "constant", "replica_id", "reshape", "transpose"),
    "xtpu.ops.core": ("bool_", "float32", "float64", "int32", "int64", "string"),
    # issue 28: TF's other dtype names (xtpu.bfloat16, xtpu.bool, ...)
    "xtpu.dtypes": (
        "bfloat16",
        "bool",
        "complex64",
        "double",
        "float16",
        "half",
        "int8",
        "int16",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
    ),
    "xtpu.ops.math_ops": (
        "cast",
        "complex",
        "matmul",
        "logical_and",
        "logical_not",
        "logical_or",
        "reduce_max",
        "reduce_mean",
        "reduce_min",
        "reduce_sum",
    ),
    "xtpu.ops.string_ops": ("print",),
    "xtpu.replication.program": (
        "Compiled",
        "Lowered",
        "XLAOptions",
        "cross_replica_sum",
        "lower",
        "outside_compilation",
        "replicate",
    ),
    "xtpu.core.tracing": ("Tensor",),
    "xtpu.replication.padding": ("PaddingSpec", "TensorShape"),
    "xtpu.replication.infeed": ("InfeedQueue",),
    "xtpu.replication.collectives": ("all_to_all", "collective_permute"),
    "xtpu.autodiff.gradients": ("UnconnectedGradients", "gradients", "stop_gradient"),
    "xtpu.autodiff.custom_gradient": ("custom_gradient",),
    "xtpu.core.eager": ("EagerTensor",),
    "xtpu.autodiff.tape": ("GradientTape",),
    "xtpu.replication.topology": ("Topology", "initialize_tpu_system"),
    "xtpu.replication.device_assignment": ("DeviceAssignment", "DeviceOrderMode"),
    # Distribution strategy (issue 5).
    "xtpu.distribute.values": ("Mirrored", "PerReplica", "ReduceOp", "VariableAggregation", "VariableSynchronization"),
    "xtpu.distribute.variables": ("Variable",),
    "xtpu.distribute.strategy": (
        "TPUClusterResolver",
        "TPUStrategy",
        "get_replica_context",
        "get_strategy",
        "get_tower_context",
        "has_strategy",
        "in_cross_replica_context",
    ),
    # tf.function (issue 15).
    "xtpu.distribute.function": ("TensorSpec", "function"),
    "xtpu.distribute.input_lib": ("Optional",),
    # TF 2's top-level ops (issue 15); those TF has only under tf.math are here
    # too until the fuzzer generates them (test_fuzz checks xtpu.math's names).
    "xtpu.ops.construction_ops": ("fill", "ones", "ones_like", "range", "shape", "size", "zeros", "zeros_like"),
    "xtpu.ops.einsum_op": ("einsum",),
    "xtpu.ops.gather_ops": (
        "argmax",
        "argmin",
        "argsort",
        "gather",
        "gather_nd",
        "one_hot",
        "scatter_nd",
        "segment_sum",
        "sort",
        "tensor_scatter_nd_add",
        "tensor_scatter_nd_max",
        "tensor_scatter_nd_min",
        "tensor_scatter_nd_sub",
        "tensor_scatter_nd_update",
        "unsorted_segment_sum",
        "where",
    ),
    "xtpu.ops.more_math_ops": (
        "clip_by_value",
        "floordiv",
        "floormod",
        "logical_xor",
        "mod",
        "reduce_all",
        "reduce_any",
        "reduce_prod",
        "square",
    ),
    "xtpu.ops.shape_ops": ("expand_dims", "squeeze", "stack", "tile", "unstack"),
    "xtpu.ops.switch_case": ("switch_case",),
    # Issue 26: the missing TF names.
    "xtpu.ops.array_more": (
        "broadcast_to",
        "identity",
        "pad",
        "rank",
        "repeat",
        "reverse",
        "roll",
        "sequence_mask",
        "slice",
        "split",
    ),
    "xtpu.ops.math_more": (
        "add_n",
        "clip_by_global_norm",
        "clip_by_norm",
        "cos",
        "cumsum",
        "floor",
        "norm",
        "reduce_logsumexp",
        "round",
        "sign",
        "sin",
    ),
}
"""Module -> the names ``xtpu`` exports from it, in import order (a module
with ``()`` is imported for its side effects, or is a namespace below)."""

_NAMESPACES: dict[str, str] = {
    "math": "xtpu.math",
    "nn": "xtpu.nn",
    "strings": "xtpu.strings",
    "summary": "xtpu.ops.summary_ops",
    # Optimizers: TF 1 (xtpu.train, xtpu.tpu.CrossShardOptimizer) and TF 2 (xtpu.optimizers).
    "keras": "xtpu.keras",
    "losses": "xtpu.train.losses",
    "optimizers": "xtpu.train.optimizers",
    "train": "xtpu.train",
    "tpu": "xtpu.tpu",
    "distributed": "xtpu.replication.distributed",  # multi-process runtime, issue 12
    "config": "xtpu.config",  # tf.config.threading: the core budget
    "profiler": "xtpu.profiler",  # Chrome trace-event traces
    "data": "xtpu.data",  # tf.data
    "distribute": "xtpu.distribute",  # tf.distribute
    "random": "xtpu.random",  # tf.random
    "linalg": "xtpu.linalg",  # tf.linalg (issue 26)
    "experimental": "xtpu.experimental",  # tf.experimental.Optional
}
"""The public namespaces: ``xtpu.<name>`` -> the module that holds it."""

_MOVED: dict[str, str] = {
    "xtpu.tracing": "xtpu.core.tracing",
    "xtpu.pytree": "xtpu.core.pytree",
    "xtpu.log": "xtpu.core.log",
    "xtpu.gc_pause": "xtpu.core.gc_pause",
    "xtpu.pipeline": "xtpu.core.pipeline",
    "xtpu.gradients": "xtpu.autodiff.gradients",
    "xtpu.gradients_control_flow": "xtpu.autodiff.gradients_control_flow",
    "xtpu.tape": "xtpu.autodiff.tape",
    "xtpu.collectives": "xtpu.replication.collectives",
    "xtpu.topology": "xtpu.replication.topology",
    "xtpu.device_assignment": "xtpu.replication.device_assignment",
    "xtpu.infeed": "xtpu.replication.infeed",
    "xtpu.padding": "xtpu.replication.padding",
    "xtpu.distributed": "xtpu.replication.distributed",
    "xtpu.distribute_values": "xtpu.distribute.values",
    "xtpu.distribute_context": "xtpu.distribute.context",
    "xtpu.variables": "xtpu.distribute.variables",
    "xtpu.function": "xtpu.distribute.function",
    "xtpu.input_lib": "xtpu.distribute.input_lib",
    "xtpu.strategy": "xtpu.distribute.strategy",
    "xtpu.run_arguments": "xtpu.distribute.run_arguments",
    "xtpu.optimizer_util": "xtpu.train.optimizer_util",
    "xtpu.optimizers": "xtpu.train.optimizers",
    "xtpu.checkpoint": "xtpu.train.checkpoint",
    "xtpu.losses": "xtpu.train.losses",
    "xtpu.summary": "xtpu.ops.summary_ops",
    "xtpu.launch": "xtpu.tools.launch",
    "xtpu.universe": "xtpu.tools.universe",
}
"""Module paths of the flat layout before the rooms (issue 24) -> where the
module is now: ``import xtpu.tracing`` and ``python -m xtpu.launch`` keep
working and give the module itself (not a copy)."""


class _MovedModuleFinder(_importlib_abc.MetaPathFinder, _importlib_abc.Loader):
    """Resolves an old module path (:data:`_MOVED`) to the module at its new
    path, so both names are one module object."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _MOVED:
            return None
        return _importlib_util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return _importlib.import_module(_MOVED[spec.name])

    def exec_module(self, module) -> None:
        """The module ran under its new name already."""

    def get_code(self, fullname):
        """For ``python -m <old path>`` (runpy)."""
        real = _MOVED[fullname]
        return _importlib_util.find_spec(real).loader.get_code(real)


if not any(isinstance(f, _MovedModuleFinder) for f in _sys.meta_path):
    _sys.meta_path.append(_MovedModuleFinder())

__all__ = [
    "replicate",
    "outside_compilation",
    "cross_replica_sum",
    "all_to_all",
    "collective_permute",
    "lower",
    "Lowered",
    "Compiled",
    "XLAOptions",
    "PaddingSpec",
    "TensorShape",
    "InfeedQueue",
    "Tensor",
    "EagerTensor",
    "GradientTape",
    "gradients",
    "stop_gradient",
    "custom_gradient",
    "UnconnectedGradients",
    "math",
    "nn",
    "strings",
    "summary",
    "constant",
    "reshape",
    "transpose",
    "concat",
    "cast",
    "one_hot",
    "matmul",
    "print",
    "replica_id",
    "Topology",
    "initialize_tpu_system",
    "DeviceAssignment",
    "DeviceOrderMode",
    "split_to_logical_devices",
    "replicate_to_logical_devices",
    "assign_to_logical_device",
    "cond",
    "while_loop",
    "float32",
    "float64",
    "int32",
    "int64",
    "bool_",
    "string",
]

# dtypes (issue 28).
__all__ += ["bfloat16", "bool", "double", "float16", "half", "int8", "int16", "uint8", "uint16", "uint32", "uint64"]
__all__ += ["complex64", "complex"]

# Distribution strategy (issue 5).
__all__ += [
    "TPUStrategy",
    "TPUClusterResolver",
    "ReduceOp",
    "VariableAggregation",
    "PerReplica",
    "Mirrored",
    "Variable",
    "get_replica_context",
    "get_tower_context",
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
]

# Indexing, scatter and sort (issue 26).
__all__ += [
    "argmax",
    "argmin",
    "argsort",
    "scatter_nd",
    "sort",
    "tensor_scatter_nd_add",
    "tensor_scatter_nd_max",
    "tensor_scatter_nd_min",
    "tensor_scatter_nd_sub",
    "tensor_scatter_nd_update",
]

# Optimizers.
__all__ += ["train", "optimizers", "keras", "tpu", "losses"]

# tf.function (issue 15).
__all__ += ["function", "TensorSpec", "data", "distribute", "random", "experimental"]

# TF 2's top-level ops (issue 15).
__all__ += [
    "fill",
    "ones",
    "ones_like",
    "range",
    "shape",
    "size",
    "zeros",
    "zeros_like",
    "einsum",
    "gather",
    "gather_nd",
    "segment_sum",
    "unsorted_segment_sum",
    "where",
    "clip_by_value",
    "floordiv",
    "floormod",
    "logical_xor",
    "mod",
    "reduce_all",
    "reduce_any",
    "reduce_prod",
    "square",
    "logical_and",
    "logical_not",
    "logical_or",
    "reduce_max",
    "reduce_mean",
    "reduce_min",
    "reduce_sum",
    "expand_dims",
    "squeeze",
    "stack",
    "tile",
    "unstack",
    "switch_case",
]

# Issue 26.
__all__ += ["linalg"] + list(_API["xtpu.ops.array_more"]) + list(_API["xtpu.ops.math_more"])

# The public extras of xtpu beside TF's names: the version, the IR's
# ``lower``/``compile`` stages, and the multi-process and profiler namespaces.
__all__ += [
    "__version__",
    "config",
    "profiler",
    "distributed",
    "EagerTensor",
    "VariableSynchronization",
    "Optional",
    "DeviceOrderMode",
]

__all__ = list(dict.fromkeys(__all__))

_api_loaded = False
_api_lock = _threading.RLock()


def _load_api() -> None:
    """Import the modules of ``_API`` and ``_NAMESPACES`` in order and bind
    their names here, once; later reads find them in the module's namespace.

    Thread-safe (issue 25): the first reads from several threads at once
    wait for one load, and no thread sees a half-bound namespace, since
    ``_api_loaded`` is set only after every name is bound."""
    global _api_loaded
    if _api_loaded:
        return
    with _api_lock:
        if _api_loaded:
            return
        g = globals()
        _importlib.import_module("xtpu.dialects")  # the dialects first, as the API's modules build on them
        for module_name, names in _API.items():
            module = _importlib.import_module(module_name)
            for name in names:
                g[name] = getattr(module, name)
        for name, module_name in _NAMESPACES.items():
            g[name] = _importlib.import_module(module_name)
        _api_loaded = True


def __getattr__(name: str):
    """PEP 562: an API name loads the API, see the comment at the top; any
    other ``xtpu.<submodule>`` (``from xtpu import tools``) imports that
    submodule alone, as ``import xtpu.<submodule>`` does.

    Raises:
      AttributeError: ``name`` is neither an API name nor a submodule.
    """
    if name in _API_NAMES:
        _load_api()
        return globals()[name]
    if not name.startswith("__"):
        if f"xtpu.{name}" in _MOVED or _importlib_util.find_spec(f"xtpu.{name}") is not None:
            return _importlib.import_module(f"xtpu.{name}")
    raise AttributeError(f"module 'xtpu' has no attribute {name!r}")


def __dir__() -> list[str]:
    """TF's names and xtpu's documented extras (``__all__``), nothing internal."""
    return sorted(__all__)


_API_NAMES = frozenset([n for names in _API.values() for n in names] + list(_NAMESPACES))


class _Package(_types.ModuleType):
    """``xtpu``'s module type: before the API is loaded, the import system's
    binding of a submodule named like an API name (``import xtpu.train``
    binds the package ``xtpu.train``, which is also the API's ``xtpu.train``;
    ``xtpu.random`` likewise) is kept only once the API has bound it, so
    reading the name always loads the API first and every import-time effect
    of the API has happened before the name is handed out."""

    def __setattr__(self, name: str, value) -> None:
        if not _api_loaded and name in _API_NAMES and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
