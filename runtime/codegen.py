"""The code objects of the Python source the runtime generates (a plan's
``run``, a fusion region's kernel), compiled once per distinct source.

A program whose layers repeat (a transformer's blocks) generates the same
region source several times, and compiling the same program again
generates the same plans: ``compile()`` of that source is most of what a
fused kernel costs to build (about 0.4 ms a region).  The code object is
shared; each kernel gets its own globals (its kernels, buffers and the
object that maps its lines back to ops: :func:`owner`), so nothing of one
program leaks into another's error messages.
"""

from __future__ import annotations

import functools
import itertools
from types import CodeType, FrameType, TracebackType
from typing import Any

__all__ = ["define", "owner"]

_ids = itertools.count()

#: The name under which a generated function's globals hold its owner.
_OWNER = "__xtpu_owner__"


@functools.lru_cache(maxsize=1024)
def _code(source: str, kind: str) -> CodeType:
    return compile(source, f"<xtpu {kind} #{next(_ids)}>", "exec")


def define(source: str, kind: str, name: str, namespace: dict[str, Any], owner: Any) -> Any:
    """The function ``name`` that ``source`` defines, with ``namespace`` as
    its globals and ``owner`` (what maps its lines to ops) found from its
    frames by :func:`owner`; ``kind`` names the code in tracebacks."""
    namespace[_OWNER] = owner
    exec(_code(source, kind), namespace)
    return namespace[name]


def owner(frame_or_tb: FrameType | TracebackType) -> Any:
    """The ``owner`` given to :func:`define` for the generated function a
    frame (or traceback entry) runs, else None."""
    frame = getattr(frame_or_tb, "tb_frame", frame_or_tb)
    return frame.f_globals.get(_OWNER)
