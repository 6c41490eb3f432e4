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
# like an API name (``xtpu.function``) is bound only once the API is loaded
# (``_Package``), so the name always reads as the API's value.
#
# To export a new name, add it to ``_API`` under the module that defines it
# (a module with ``()`` is bound under its own last name, as ``from xtpu
# import math`` binds it) and to ``__all__`` if it is public; do not import
# API modules at the top of this file (test_lazy_import checks that
# ``xtpu-opt`` still starts without them).

import sys as _sys
import types as _types

from xtpu.about import __version__  # noqa: F401

_API: dict[str, tuple[str, ...]] = {
    "xtpu.math": (),
    "xtpu.nn": (),
    "xtpu.strings": (),
    "xtpu.summary": (),
    "xtpu.ops.operators": (),  # installs the Python operators on Tensor
    "xtpu.ops.control_flow": ("cond", "while_loop"),
    "xtpu.ops.sharding_ops": ("assign_to_logical_device", "replicate_to_logical_devices", "split_to_logical_devices"),
    "xtpu.ops.array_ops": ("concat", "constant", "one_hot", "replica_id", "reshape", "transpose"),
    "xtpu.ops.core": ("bool_", "float32", "float64", "int32", "int64", "string"),
    "xtpu.ops.math_ops": (
        "cast",
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
    "xtpu.replication": (
        "Compiled",
        "Lowered",
        "XLAOptions",
        "cross_replica_sum",
        "lower",
        "outside_compilation",
        "replicate",
    ),
    "xtpu.tracing": ("Tensor",),
    "xtpu.padding": ("PaddingSpec", "TensorShape"),
    "xtpu.infeed": ("InfeedQueue",),
    "xtpu.collectives": ("all_to_all", "collective_permute"),
    "xtpu.gradients": ("UnconnectedGradients", "custom_gradient", "gradients", "stop_gradient"),
    "xtpu.tape": ("EagerTensor", "GradientTape"),
    "xtpu.topology": ("Topology", "initialize_tpu_system"),
    "xtpu.device_assignment": ("DeviceAssignment", "DeviceOrderMode"),
    # Distribution strategy (issue 5).
    "xtpu.distribute_values": ("Mirrored", "PerReplica", "ReduceOp", "VariableAggregation", "VariableSynchronization"),
    "xtpu.variables": ("Variable",),
    "xtpu.strategy": (
        "TPUClusterResolver",
        "TPUStrategy",
        "get_replica_context",
        "get_strategy",
        "get_tower_context",
        "has_strategy",
        "in_cross_replica_context",
    ),
    # Optimizers: TF 1 (xtpu.train, xtpu.tpu.CrossShardOptimizer) and TF 2 (xtpu.optimizers).
    "xtpu.keras": (),
    "xtpu.losses": (),
    "xtpu.optimizers": (),
    "xtpu.tpu": (),
    "xtpu.train": (),
    "xtpu.distributed": (),  # multi-process runtime, issue 12
    "xtpu.config": (),  # tf.config.threading: the core budget
    "xtpu.profiler": (),  # Chrome trace-event traces
    # tf.function (issue 15).
    "xtpu.function": ("TensorSpec", "function"),
    "xtpu.data": (),  # tf.data
    "xtpu.distribute": (),  # tf.distribute
    "xtpu.random": (),  # tf.random
    "xtpu.input_lib": ("Optional",),
    "xtpu.experimental": (),  # tf.experimental.Optional
    # TF 2's top-level ops (issue 15); those TF has only under tf.math are here
    # too until the fuzzer generates them (test_fuzz checks xtpu.math's names).
    "xtpu.ops.construction_ops": ("fill", "ones", "ones_like", "range", "shape", "size", "zeros", "zeros_like"),
    "xtpu.ops.einsum_op": ("einsum",),
    "xtpu.ops.gather_ops": ("gather", "gather_nd", "segment_sum", "unsorted_segment_sum", "where"),
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
}
"""Module -> the names ``xtpu`` exports from it, in import order."""

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

_api_loaded = False


def _load_api() -> None:
    """Import the modules of ``_API`` in order and bind their names here
    (once; later reads find them in the module's namespace)."""
    global _api_loaded
    if _api_loaded:
        return
    import importlib

    _api_loaded = True
    g = globals()
    try:
        importlib.import_module("xtpu.dialects")  # the dialects first, as the API's modules build on them
        for module_name, names in _API.items():
            module = importlib.import_module(module_name)
            if not names:
                g[module_name.rsplit(".", 1)[1]] = module
            for name in names:
                g[name] = getattr(module, name)
    except BaseException:
        _api_loaded = False
        raise


def __getattr__(name: str):
    """PEP 562: an API name (``_API``) loads the API, see the comment at the
    top; any other ``xtpu.<submodule>`` (``xtpu.pipeline``, ``from xtpu
    import pytree``) imports that submodule alone, as ``import
    xtpu.<submodule>`` does.

    Raises:
      AttributeError: ``name`` is neither an API name nor a submodule.
    """
    if name in _API_NAMES:
        _load_api()
        return globals()[name]
    if not name.startswith("__"):
        import importlib.util

        if importlib.util.find_spec(f"xtpu.{name}") is not None:
            return importlib.import_module(f"xtpu.{name}")
    raise AttributeError(f"module 'xtpu' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the API's (loads the API)."""
    _load_api()
    return sorted(globals())


_API_NAMES = frozenset(n for m, names in _API.items() for n in (names or (m.rsplit(".", 1)[1],)))


class _Package(_types.ModuleType):
    """``xtpu``'s module type: before the API is loaded, the import system's
    binding of a submodule named like an API name (``import xtpu.function``
    binds the module ``xtpu.function`` where the API's ``xtpu.function`` is
    tf.function's decorator) is not kept, so reading the name loads the API
    and gives the API's value, as the eager import did."""

    def __setattr__(self, name: str, value) -> None:
        if not _api_loaded and name in _API_NAMES and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
