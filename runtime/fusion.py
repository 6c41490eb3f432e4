"""One kernel per ``fusion.region``: generated numpy code writing into
buffers the kernel keeps.

The body's ops run in order, each through its own kernel (its
``PrimitiveOp.kernel``), so the results are the unfused ops' bits.  What
fusion changes is where the values go: a value used only inside the region
(an intermediate) is written with ``out=`` into a buffer the kernel keeps
from call to call (one set per thread: replicas run the same kernel on
several threads), and a buffer is reused by a later value of the same shape
and dtype once every value that may share its memory is dead (liveness
over the body, views of a broadcast counted as uses of its operand).  Ufunc
ops (``hlo.add``, ``hlo.tanh``, ``hlo.compare``, float32/float64
``hlo.divide``, ...) write through ``out=``; ``hlo.select`` and
``hlo.convert`` through ``np.copyto`` (the same selection and the same cast
as ``np.where`` and ``astype``); the others (broadcasts, reductions,
``hlo.logistic``, integer division, and every arithmetic op on bfloat16 /
float16, whose kernel computes in float32 and rounds once per op as XLA
does) call their kernel as the unfused program does.  The region's
results are new arrays on every call (the caller and later ops own them).
So a chain of elementwise ops allocates no temporaries after its first
call, and takes no page faults for them.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.ir import Operation, SSAValue

from xtpu.dialects import hlo
from xtpu.dialects.fusion import FusionRegionOp
from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype

__all__ = ["fused_kernel", "inner_op"]


class _Lines:
    """The body op of each line of a fused kernel's code."""

    def __init__(self, ops: dict[int, Operation]):
        self.ops = ops


#: A fused kernel's code name -> its lines (alive while the kernel is).
_CODE: weakref.WeakValueDictionary[str, _Lines] = weakref.WeakValueDictionary()
_ids = itertools.count()


class _Kept(threading.local):
    """A fused kernel's buffers, one set per thread (made on the thread's
    first call)."""

    def __init__(self, shapes: list[tuple[tuple[int, ...], Any]]) -> None:
        self.buffers = [np.empty(shape, dtype) for shape, dtype in shapes]


def inner_op(frame_or_tb: Any) -> Operation | None:
    """The body op a traceback entry (or frame) of a fused kernel was
    running, None when it is not a fused kernel's: the executor names that
    op, not the region, when a kernel fails."""
    frame = getattr(frame_or_tb, "tb_frame", frame_or_tb)
    lineno = getattr(frame_or_tb, "tb_lineno", None) or frame.f_lineno
    lines = _CODE.get(frame.f_code.co_filename)
    return None if lines is None else lines.ops.get(lineno)


def _writer(op: Operation, kernel: Any) -> str | None:
    """How ``op`` writes into a kept buffer: ``"ufunc"``, ``"select"``,
    ``"convert"``, or None (its kernel allocates its result)."""
    if isinstance(op, hlo.SelectOp):
        return "select"
    if isinstance(op, hlo.ConvertOp):
        return "convert"
    if isinstance(kernel, np.ufunc) and kernel.nout == 1:
        return "ufunc"
    return None


def fused_kernel(op: FusionRegionOp, kernel_of: Callable[[Operation], Any] | None = None) -> Callable[..., Any]:
    """The kernel of ``op``: takes the region's operands, returns its result
    (a tuple of them when there are several); ``kernel_of(inner)`` gives an
    inner op's kernel (default: its ``PrimitiveOp.kernel``)."""
    block = op.body.block
    ops = [o for o in block.ops if o is not block.last_op]
    yielded = list(block.last_op.operands)
    kernels: list[Any] = []
    for o in ops:
        if not isinstance(o, PrimitiveOp):
            raise NotImplementedError(f"the runtime cannot execute '{o.name}' in a fusion.region")
        k = kernel_of(o) if kernel_of is not None else type(o).kernel(**o.params())
        if isinstance(o, hlo.DivideOp) and TensorSpec.of_type(o.result.type).dtype in ("float32", "float64"):
            # hlo.divide's kernel on float32/float64 is np.true_divide; on
            # bfloat16/float16 it computes in float32 and rounds once (XLA's
            # float normalization), so those keep the kernel itself.
            k = np.true_divide
        kernels.append(k)
    writers = [_writer(o, k) for o, k in zip(ops, kernels)]

    # Liveness: the last op reading each value; an op that may return a view
    # of its operands (writers None) keeps them alive as long as its result.
    INF = len(ops) + 1
    last: dict[SSAValue, int] = {v: INF for v in yielded}
    for i in range(len(ops) - 1, -1, -1):
        o = ops[i]
        r = o.results[0]
        for a in o.operands:
            last[a] = max(last.get(a, -1), i)
            if writers[i] is None:
                last[a] = max(last[a], last.get(r, i))

    names: dict[SSAValue, str] = {a: f"a{n}" for n, a in enumerate(block.args)}
    free: dict[tuple, list[int]] = {}
    shapes: list[tuple[tuple[int, ...], Any]] = []
    lines: list[str] = []
    line_op: dict[int, Operation] = {}
    dying: dict[int, list[SSAValue]] = {}
    for v, i in last.items():
        dying.setdefault(i, []).append(v)
    slot_of: dict[SSAValue, int] = {}
    for i, (o, w) in enumerate(zip(ops, writers)):
        r = o.results[0]
        args = [names[a] for a in o.operands]
        # Operands read for the last time here free their buffers first
        # (an elementwise op may write over its own operand), except for a
        # select, which writes on_false and then on_true where pred holds:
        # only on_false may share its buffer.
        late = []
        for v in dying.get(i, ()):
            if w == "select" and v is not o.operands[2]:
                late.append(v)
                continue
            s = slot_of.pop(v, None)
            if s is not None:
                free.setdefault(shapes[s], []).append(s)
        out = None
        if w is not None and last.get(r, INF) < INF:
            spec = TensorSpec.of_type(r.type)
            key = (tuple(spec.shape), numpy_dtype(spec.dtype))
            pool = free.get(key)
            if pool:
                s = pool.pop()
            else:
                s = len(shapes)
                shapes.append(key)
            slot_of[r] = s
            out = f"b{s}"
        for v in late:
            s = slot_of.pop(v, None)
            if s is not None:
                free.setdefault(shapes[s], []).append(s)
        name = names[r] = f"v{i}"
        line_op[len(lines) + 1] = o  # + the head's lines, below
        if out is None:
            lines.append(f"    {name} = k{i}({', '.join(args)})")
        elif w == "ufunc":
            lines.append(f"    {name} = k{i}({', '.join(args)}, out={out})")
        elif w == "select":
            p, t, f = args
            lines.append(f"    _copyto({out}, {f}); _copyto({out}, {t}, where={p}); {name} = {out}")
        else:  # convert
            lines.append(f"    _copyto({out}, {args[0]}, casting='unsafe'); {name} = {out}")
    rets = [names[v] for v in yielded]
    head = [f"def fused({', '.join(names[a] for a in block.args)}):"]
    if shapes:
        head.append("    " + "".join(f"b{s}, " for s in range(len(shapes))) + "= _kept.buffers")
    body = head + lines
    by_line = _Lines({n + len(head): o for n, o in line_op.items()})
    body.append(
        "    return None"
        if not rets
        else f"    return {rets[0]}"
        if len(rets) == 1
        else f"    return ({', '.join(rets)},)"
    )
    source = "\n".join(body) + "\n"

    namespace: dict[str, Any] = {f"k{i}": k for i, k in enumerate(kernels)}
    namespace.update(_copyto=np.copyto, _kept=_Kept(shapes), _lines=by_line)
    filename = f"<xtpu fusion #{next(_ids)}>"
    _CODE[filename] = by_line
    exec(compile(source, filename, "exec"), namespace)
    fused = namespace["fused"]
    fused.source = source
    return fused
