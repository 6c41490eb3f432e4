"""XLA as a reference: StableHLO text checked by MLIR and run by XLA's CPU client.

* :func:`verify` parses a module with jaxlib's MLIR (StableHLO, func and
  builtin registered; any other dialect is an error) and runs MLIR's
  verifier; it raises :class:`MLIRError` with MLIR's diagnostics.
* :func:`run` compiles the text with XLA's CPU client for ``R`` replicas
  (``mhlo.num_replicas``) and runs it with per-replica inputs; it returns
  ``[replica][output]`` numpy arrays.
* :func:`check_against_xtpu` exports an xtpu program, runs it on XLA and on
  xtpu's runtime and compares (see :data:`ULPS`).

jax is imported on first use, with ``--xla_force_host_platform_device_count=8``
added to ``XLA_FLAGS`` (8 CPU devices: up to 8 replicas) and 64-bit types on.
A process that imported jax before with fewer devices can only run that many
replicas (:func:`run` says so).

Semantic differences between xtpu's runtime (numpy) and XLA, decided:

* float -> int ``convert`` of NaN, inf or an out-of-range value: numpy gives
  INT_MIN, XLA saturates (NaN -> 0).  StableHLO leaves it implementation
  defined; such elements are not compared (:func:`convert_undefined_mask`
  in the fuzzer finds them).
* integer ``divide`` / ``remainder`` by zero and INT_MIN / -1: StableHLO
  leaves them implementation defined (XLA gives -1 and INT_MIN); xtpu's
  kernel follows numpy (0, with a warning silenced).  Not compared.
* transcendental functions (``tanh``, ``exponential``, ``log``,
  ``logistic``, ``power``): XLA's CPU kernels are polynomial approximations
  within a few ulps of numpy's libm; compared within :data:`ULPS`.
* reductions and dot products: XLA may reassociate sums (tree order,
  vectorised), so results are compared with a tolerance relative to the
  magnitude of the summed terms (float32: 1e-5 of the largest, float64
  1e-12), not bit for bit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

ULPS = {"float32": 4, "float64": 4}
"""Elementwise transcendental results may differ by this many ulps."""

RTOL = {"float32": 2e-5, "float64": 1e-12, "bfloat16": 2.0**-7, "float16": 2.0**-10}
ATOL = {"float32": 1e-6, "float64": 1e-13, "bfloat16": 1e-6, "float16": 1e-6}
"""bfloat16 and float16 (compared in float32): one ulp of the type, relative."""


def _cpu_devices() -> None:
    """8 CPU devices for XLA, when jax is not imported yet (this module is
    imported before it by the tests that use it)."""
    flag = "--xla_force_host_platform_device_count"
    if "jax" not in sys.modules and flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {flag}=8").strip()


_cpu_devices()


def _jax():
    _cpu_devices()
    import jax
    import jax.extend  # noqa: F401  (the backend API run() uses)

    jax.config.update("jax_enable_x64", True)
    return jax


class MLIRError(AssertionError):
    """MLIR rejected the text; the message holds its diagnostics."""


def _context():
    from jax._src.interpreters import mlir as jmlir

    return jmlir.make_ir_context()


def verify(text: str) -> Any:
    """Parse and verify ``text`` with MLIR; returns the parsed module.

    Raises:
      MLIRError: a parse or verifier diagnostic (the message is MLIR's).
    """
    _jax()
    from jaxlib.mlir import ir

    with _context():
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as e:
            raise MLIRError(f"MLIR cannot parse the module: {e}") from None
        try:
            ok = module.operation.verify()
        except ir.MLIRError as e:
            raise MLIRError(f"MLIR's verifier rejects the module: {e}") from None
        if not ok:
            raise MLIRError("MLIR's verifier rejects the module")
        for op in _walk(module.operation):
            name = op.name
            if name.split(".")[0] not in ("stablehlo", "func", "builtin"):
                raise MLIRError(f"op {name} is not StableHLO")
        return module


def _walk(op):
    yield op
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield from _walk(inner.operation)


def pretty(text: str) -> str:
    """MLIR's custom form of a module (what ``stablehlo-opt`` prints)."""
    _jax()
    from jaxlib.mlir import ir

    with _context():
        return str(ir.Module.parse(text))


_EXECUTABLES: dict[tuple[str, int], Any] = {}


def compile_only(text: str, replicas: int, partitions: int = 1) -> Any:
    """XLA's executable of ``text`` for ``replicas`` x ``partitions``
    devices (device ``r * partitions + p``); raises what XLA raises."""
    jax = _jax()
    from jax._src.lib import xla_client

    n = replicas * partitions
    devices = jax.devices("cpu")[:n]
    backend = jax.extend.backend.get_backend("cpu")
    opts = jax.extend.backend.get_compile_options(
        replicas, partitions, device_assignment=np.arange(n).reshape(replicas, partitions), backend=backend
    )
    return backend.compile_and_load(text, xla_client.DeviceList(tuple(devices)), opts)


def run(
    text: str, inputs: Sequence[Sequence[np.ndarray]], num_replicas: int | None = None, disable_passes: str = ""
) -> list[list[np.ndarray]]:
    """Compile ``text`` with XLA's CPU client for ``num_replicas`` (default:
    ``len(inputs)``) and run it; ``inputs[replica][argument]``.  Returns
    ``[replica][output]``.  ``disable_passes``: XLA's
    ``xla_disable_hlo_passes`` (``"algsimp"``: without the algebraic
    simplifier, which is not IEEE-exact)."""
    jax = _jax()
    from jax._src.lib import xla_client

    n = len(inputs) if num_replicas is None else num_replicas
    devices = jax.devices("cpu")
    if len(devices) < n:
        raise RuntimeError(f"{n} replicas need {n} CPU devices; jax was imported with {len(devices)}")
    devices = devices[:n]
    backend = jax.extend.backend.get_backend("cpu")
    key = (text, n, disable_passes)
    exe = _EXECUTABLES.get(key)
    if exe is None:
        opts = jax.extend.backend.get_compile_options(
            n, 1, device_assignment=np.arange(n).reshape(n, 1), backend=backend
        )
        if disable_passes:
            opts.executable_build_options.debug_options.xla_disable_hlo_passes = disable_passes
        exe = backend.compile_and_load(text, xla_client.DeviceList(tuple(devices)), opts)
        if len(_EXECUTABLES) > 64:
            _EXECUTABLES.clear()
        _EXECUTABLES[key] = exe
    mesh = jax.sharding.Mesh(np.array(devices), ("r",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    args = []
    k = len(inputs[0]) if inputs else 0
    for i in range(k):
        shards = [jax.device_put(np.asarray(inputs[r][i]), devices[r]) for r in range(n)]
        args.append(jax.make_array_from_single_device_arrays(shards[0].shape, sharding, shards))
    outs = exe.execute_sharded(args).disassemble_into_single_device_arrays()
    return [[np.asarray(outs[j][r]) for j in range(len(outs))] for r in range(n)]


def _ulp_close(a: np.ndarray, b: np.ndarray, ulps: int) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):  # the spacing of inf and NaN
        spacing = np.spacing(np.maximum(np.abs(a), np.abs(b)).astype(a.dtype))
        return np.abs(a - b) <= ulps * spacing


def assert_close(got: np.ndarray, want: np.ndarray, what: str, mask: np.ndarray | None = None) -> None:
    """XLA's ``got`` equals xtpu's ``want``: same shape and dtype, integers
    and bools exactly, floats within :data:`ULPS` or :data:`RTOL` /
    :data:`ATOL`, NaN equal to NaN; elements where ``mask`` is False are not
    compared (an implementation-defined result)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind == "c":  # complex64: each part as a float32
        for part in ("real", "imag"):
            assert_close(
                np.ascontiguousarray(getattr(got, part)),
                np.ascontiguousarray(getattr(want, part)),
                f"{what}.{part}",
                mask,
            )
        return
    keep = np.ones(want.shape, bool) if mask is None else np.asarray(mask, bool)
    name = want.dtype.name
    if name in ("bfloat16", "float16"):
        got, want = got.astype(np.float32), want.astype(np.float32)
        nan = np.isnan(got) & np.isnan(want)
        ok = nan | (got == want) | np.isclose(got, want, rtol=RTOL[name], atol=ATOL[name])
    elif want.dtype.kind == "f":
        nan = np.isnan(got) & np.isnan(want)
        ok = nan | (got == want) | _ulp_close(got, want, ULPS[name])
        ok |= np.isclose(got, want, rtol=RTOL[name], atol=ATOL[name])
    else:
        ok = got == want
    bad = ~ok & keep
    if bad.any():
        idx = tuple(int(i[0]) for i in np.nonzero(bad)) if bad.ndim else ()
        raise AssertionError(
            f"{what}: XLA and xtpu differ at {int(bad.sum())} of {bad.size} elements; first at {idx}: "
            f"XLA {got[idx]!r}, xtpu {want[idx]!r}"
        )


def check_against_xtpu(compiled: Any, inputs: Sequence[Sequence[np.ndarray]], text: str | None = None) -> list:
    """Export ``compiled`` (an ``xtpu.Compiled``), verify it with MLIR, run it
    on XLA and on xtpu with ``inputs[replica][input]`` and compare every
    output; returns XLA's outputs ``[replica][output]``."""
    text = compiled.as_text(dialect="stablehlo") if text is None else text
    verify(text)
    flat = [[np.asarray(a) for a in rep] for rep in inputs]
    got = run(text, flat)
    want = compiled(inputs)
    for r, (g, w) in enumerate(zip(got, want)):
        w = list(w) if isinstance(w, (list, tuple)) else [w]
        assert len(g) == len(w), f"replica {r}: XLA gave {len(g)} outputs, xtpu {len(w)}"
        for j, (a, b) in enumerate(zip(g, w)):
            assert_close(a, np.asarray(b), f"replica {r} output {j}")
    return got
