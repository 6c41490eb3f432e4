"""``xtpu-run``: run a traced or lowered module on per-replica inputs.

Usage::

  xtpu-run FILE.mlir [-i REPLICA_INPUTS]... [--pipeline PASSES] [--save OUT.npz]

``FILE`` is a module with ``func.func @main`` holding a ``tpu.replicate``
(``-`` reads standard input).  A module that still has outside-compilation
regions, cross-replica sums or host-only ops in its device program is
lowered with the default pipeline first (or ``--pipeline``).

Each ``-i`` gives one replica's inputs, in replica order: an ``.npz`` file
(its arrays in the order they were saved, as ``numpy.savez`` writes them) or
comma-separated ``.npy`` files.  Files are loaded with
``allow_pickle=False``.  Results are printed per replica; ``--save`` also
writes them to an ``.npz`` with keys ``replica<R>_output<J>``.

With ``--backend mpi`` under ``mpiexec -n P xtpu-run ...`` the replicas are
spread over the ranks (``xtpu.distributed``); rank 0 prints and saves.

Exit status: 0 on success, 1 when the module or the inputs are bad or a
replica fails at run time (the message says which), 2 for usage errors.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException

from xtpu.about import version_line
from xtpu.core.pipeline import (
    PipelineError,
    module_text,
    op_position,
    parse_module,
    parse_pipeline,
    run_pipeline,
    verify_module,
)
from xtpu.dialects import tpu
from xtpu.dialects.hlo_host import StringConstantOp
from xtpu.dialects.tensor_spec import TensorSpec, dtype_of_numpy, from_saved
from xtpu.passes.batch_replicas import batch_body
from xtpu.replication import distributed
from xtpu.replication.program import default_pipeline
from xtpu.runtime.errors import XtpuRuntimeError
from xtpu.runtime.executor import Executable


class InputError(Exception):
    """Bad command-line input: the message says what and where."""


NPY_MAGIC = b"\x93NUMPY"
NPZ_MAGIC = b"PK\x03\x04"


def _check_magic(path: str, magic: bytes, kind: str) -> None:
    """An input file must start with its format's magic bytes: without the
    check numpy falls back to unpickling and reports any other file (a text
    file named ``t.npy``) as "pickled data"."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(magic))
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    if head != magic:
        what = "empty" if not head else "not in NumPy's format"
        raise InputError(f"cannot read {path}: the file is {what}; {kind} files are written by {_WRITER[kind]}")


_WRITER = {".npy": "numpy.save", ".npz": "numpy.savez"}


def load_replica_inputs(spec: str) -> list[np.ndarray]:
    """Arrays from an .npz file or comma-separated .npy files (no pickles);
    spaces around the commas are ignored.

    Raises:
      InputError: naming the file that is missing, of another format or
        holds objects.
    """
    paths = [p.strip() for p in spec.split(",")]
    if len(paths) == 1 and paths[0].endswith(".npz"):
        path = paths[0]
        _check_magic(path, NPZ_MAGIC, ".npz")
        try:
            with np.load(path, allow_pickle=False) as data:
                return [from_saved(data[k]) for k in data.files]
        except (OSError, ValueError) as e:
            raise InputError(f"cannot read {path}: {e}") from None
    arrays = []
    for path in paths:
        if not path.endswith(".npy"):
            raise InputError(f"input file {path!r} must be .npy or .npz")
        _check_magic(path, NPY_MAGIC, ".npy")
        try:
            arrays.append(from_saved(np.load(path, allow_pickle=False)))
        except (OSError, ValueError) as e:
            raise InputError(f"cannot read {path}: {e}") from None
    return arrays


def format_output(index: int, a: np.ndarray) -> str:
    """``  output J: float32[2x2] = [[...],`` with the rows of an array
    aligned under the first one."""
    head = f"  output {index}: {TensorSpec(a.shape, _dtype(a))} = "
    if a.ndim == 0:
        return head + str(a[()])
    return head + np.array2string(a, separator=", ", prefix=" " * len(head))


def needs_lowering(module) -> bool:
    """True when the device program still has ops the runtime cannot run
    (outside-compilation regions, cross-replica sums, sharding constraints,
    host-only ops anywhere in it, branches and loops included), or a
    replica split over logical cores that is not partitioned yet.  Host
    replicates (head and tail clusters) run host-only ops as they are, and a
    device program its string constants (tpu-fold-host-constants leaves a
    folded ``tf.strings.format`` of constants there)."""
    for op in module.walk():
        if isinstance(op, (tpu.OutsideCompilationOp, tpu.CrossReplicaSumOp, tpu.ShardingConstraintOp)):
            return True
        if isinstance(op, tpu.ReplicateOp) and not op.on_host:
            if op.num_cores > 1 and "tpu.input_shardings" not in op.attributes:
                return True
            if any(
                getattr(type(o), "HOST_ONLY", False)
                and not isinstance(o, StringConstantOp)
                and tpu.host_context(o) is None
                for o in op.body.walk()
            ):
                return True
    return False


def check_main(module) -> None:
    """``@main`` has a body (a declaration verifies but cannot run).

    Raises:
      ValueError: naming it and where it is.
    """
    from xdsl.dialects import func

    for op in module.ops:
        if isinstance(op, func.FuncOp) and op.sym_name.data == "main" and not op.body.blocks:
            where = op_position(op)
            raise ValueError(
                (f"{where}: " if where else "") + "'func.func' op @main is a declaration; it needs a body to run"
            )


def check_channels(module) -> None:
    """Every channel the program waits on has a sender: a device
    ``tpu.recv_from_host`` a host ``tpu.send_from_host`` of its key, a host
    function's ``tpu.recv_at_host`` a device ``tpu.send_to_host`` (its first,
    the cluster's arguments) or a host ``tpu.send_from_host`` (values passed
    from cluster to cluster).  Otherwise the run would wait until the timeout.

    Raises:
      ValueError: naming the op, its key and where it is.
    """
    sent: set[str] = set()
    waits = []
    for op in module.walk():
        if isinstance(op, (tpu.SendToHostOp, tpu.SendFromHostOp)):
            sent.add(op.key.data)
        elif isinstance(op, (tpu.RecvFromHostOp, tpu.RecvAtHostOp)):
            waits.append(op)
    for op in waits:
        if op.key.data not in sent:
            where = op_position(op)
            raise ValueError(
                (f"{where}: " if where else "")
                + f"'{op.name}' op waits on channel '{op.key.data}', which nothing in the module sends on "
                "(tpu.send_to_host / tpu.send_from_host of the same key)"
            )


def num_cores(module) -> int:
    """Logical cores per replica of the module's device replicate."""
    for op in module.walk():
        if isinstance(op, tpu.ReplicateOp) and not op.on_host:
            return op.num_cores
    return 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="xtpu-run", description="Run an xtpu module once per replica on inputs from .npy/.npz files."
    )
    ap.add_argument("--version", action="version", version=version_line("xtpu-run"))
    ap.add_argument("file", help="the .mlir module ('-' for standard input)")
    ap.add_argument(
        "-i",
        "--inputs",
        action="append",
        default=[],
        metavar="FILES",
        help="one replica's inputs: an .npz file or comma-separated .npy files; repeat per replica",
    )
    ap.add_argument("--pipeline", default=None, help="passes to run first (default: the default pipeline when needed)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds a channel or collective may wait")
    ap.add_argument("--save", default=None, metavar="OUT.npz", help="also write the results to this .npz")
    ap.add_argument("--print-ir", action="store_true", help="print the module that runs")
    ap.add_argument(
        "--backend",
        choices=("threads", "mpi"),
        default=None,
        help="replicas as threads of this process (default) or spread over the MPI ranks of "
        "`mpiexec -n P xtpu-run ...` (default: $XTPU_BACKEND)",
    )
    args = ap.parse_args(argv)
    rank = 0
    if args.backend == "mpi":
        distributed.initialize()
        rank = distributed.process_index()

    try:
        passes = parse_pipeline(args.pipeline) if args.pipeline is not None else None
    except PipelineError as e:
        print(f"xtpu-run: --pipeline: {e}", file=sys.stderr)
        return 1
    try:
        if args.file == "-":
            stream = getattr(sys.stdin, "buffer", sys.stdin)  # text when replaced by a StringIO
            text = stream.read()
        else:
            with open(args.file, "rb") as f:
                text = f.read()
    except OSError as e:
        print(f"xtpu-run: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 1
    name = "<stdin>" if args.file == "-" else args.file
    try:
        module = parse_module(text, name)
        verify_module(module)
        if passes is None:
            passes = parse_pipeline(default_pipeline(num_cores=num_cores(module)) if needs_lowering(module) else "")
        check_main(module)
        run_pipeline(module, passes)
        check_channels(module)
        exe = Executable(module, timeout=args.timeout, batcher=batch_body)
    except (ParseError, VerifyException, DiagnosticException, ValueError) as e:
        msg = str(e).rstrip()
        print(f"xtpu-run: {msg}" if msg.startswith(name + ":") else f"xtpu-run: {name}: {msg}", file=sys.stderr)
        return 1
    except MemoryError as e:
        print(f"xtpu-run: {name}: the program does not fit in memory: {e}", file=sys.stderr)
        return 1
    except NotImplementedError as e:
        # An op with no kernel where the runtime needs one (a device or host
        # transfer op directly in @main): name it and where it is.
        where = _where_is(module, str(e))
        print(f"xtpu-run: {where or name}: the runtime cannot run this module: {e}", file=sys.stderr)
        return 1
    if args.print_ir and rank == 0:
        print(module_text(module))

    n = exe.num_replicas
    in_types = exe.main.function_type.inputs.data
    k = len(in_types) // n
    try:
        replicas = [load_replica_inputs(s) for s in args.inputs]
        if k and len(replicas) != n:
            raise InputError(
                f"the module has {n} replicas with {k} inputs each; give -i once per replica, got {len(replicas)}"
            )
        if not k and replicas and any(replicas):
            raise InputError("the module takes no inputs")
        if not k:
            replicas = [[] for _ in range(n)]
        flat = []
        for i in range(k):
            want = TensorSpec.of_type(in_types[i * n])
            for r in range(n):
                if len(replicas[r]) != k:
                    raise InputError(f"replica {r} has {len(replicas[r])} inputs, the module needs {k}")
                a = replicas[r][i]
                if a.dtype.kind in "US":
                    a = a.astype(object)
                got = _spec_text(a)
                if tuple(a.shape) != want.shape or (want.dtype != "string" and a.dtype != np.dtype(want.dtype)):
                    raise InputError(f"input {i} of replica {r} must be {want}, got {got}")
                flat.append(a)
    except InputError as e:
        print(f"xtpu-run: {e}", file=sys.stderr)
        return 1

    try:
        outs = exe.run(flat)
    except XtpuRuntimeError as e:
        print(f"xtpu-run: {e}", file=sys.stderr)
        return 1
    except MemoryError as e:
        print(f"xtpu-run: {name}: the program does not fit in memory: {e}", file=sys.stderr)
        return 1
    if exe.world is not None and exe.world.rank != 0:
        return 0  # rank 0 prints and saves every replica's results
    m = len(outs) // n if n else 0
    saved = {f"replica{r}_output{j}": outs[j * n + r] for r in range(n) for j in range(m)}
    if args.save:
        np.savez(args.save, **saved)
    try:
        for r in range(n):
            print(f"replica {r}:")
            for j in range(m):
                print(format_output(j, outs[j * n + r]))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader left (`xtpu-run ... | head -3`): as a Unix filter, stop
        # quietly; stdout goes to devnull so the exit flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _where_is(module, message: str) -> str | None:
    """``file:line:col`` of the first op (outside the device program) whose
    name starts ``message`` or is quoted in it."""
    for op in module.walk():
        if op.name and (message.startswith(op.name + " ") or f"'{op.name}'" in message):
            if not isinstance(op.parent_op(), tpu.ReplicateOp):
                return op_position(op)
    return None


def _spec_text(a: np.ndarray) -> str:
    """``float32[2x3]`` as TensorSpec spells it, also for a dtype xtpu has not."""
    try:
        return str(TensorSpec(a.shape, _dtype(a)))
    except TypeError:
        return f"{a.dtype.name}[{'x'.join(map(str, a.shape))}]"


def _dtype(a: np.ndarray) -> str:
    return dtype_of_numpy(a.dtype)


if __name__ == "__main__":
    sys.exit(main())
