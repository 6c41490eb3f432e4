"""The user's source line: which stack frame is the user's, and the
``FileLineColLoc`` an op traced from it carries (one attribute per line,
shared as MLIR uniques attributes).  Errors name this line."""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from typing import Any

import numpy as np
from xdsl.dialects.builtin import FileLineColLoc, IntAttr, StringAttr

import xtpu.dialects  # noqa: F401 - its folder is one of xtpu's own (_PKG_DIRS)
from xtpu.dialects.by_identity import memo
from xtpu.dialects.locations import format_location

_PKG_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (sys.modules["xtpu.dialects"],)) + (
    # the xtpu package's own folder (compiler/), this module's parent's parent
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
)


# Frames that are never the user's line: the Python standard library and
# numpy (an EagerTensor's operators and numpy functions reach xtpu ops through
# numpy's own Python code, e.g. ``np.mean`` through ``fromnumeric.py``).
_LIBRARY_DIRS = tuple(
    os.path.realpath(d) + os.sep
    for d in {sysconfig.get_paths()["stdlib"], os.path.dirname(os.path.abspath(np.__file__))}
)


@functools.lru_cache(maxsize=4096)
def _is_library_frame(filename: str) -> bool:
    return filename.startswith(("<frozen ",)) or os.path.realpath(filename).startswith(_LIBRARY_DIRS)


def is_user_frame(filename: str) -> bool:
    """True for source files outside the xtpu package, the standard library
    and numpy (the user's code)."""
    return not filename.startswith(_PKG_DIRS) and not _is_library_frame(filename)


_USER_CODE: dict[int, tuple[Any, bool]] = {}
"""Whether a code object's frames are the user's (:func:`is_user_frame`),
per code object (by identity: a code object hashes its contents, its
constants included, at every lookup, and a trace asks of about ten frames
an op)."""


def _is_user_code(code: Any) -> bool:
    return is_user_frame(code.co_filename)


_LOCATIONS: dict[tuple[str, int], FileLineColLoc] = {}
"""One location attribute per user line (attributes are immutable: the ops
of a line share it, as MLIR's uniqued attributes)."""


def user_location() -> FileLineColLoc | None:
    """The innermost stack frame outside xtpu, the standard library and
    numpy: the user's source line."""
    f = sys._getframe(1)
    user_code = _USER_CODE
    while f is not None:
        if memo(user_code, f.f_code, _is_user_code, 65536):
            code = f.f_code
            key = (code.co_filename, f.f_lineno)
            loc = _LOCATIONS.get(key)
            if loc is None:
                if len(_LOCATIONS) > 65536:
                    _LOCATIONS.clear()
                loc = _LOCATIONS[key] = FileLineColLoc(StringAttr(key[0]), IntAttr(key[1]), IntAttr(0))
            return loc
        f = f.f_back
    return None


__all__ = ["format_location", "is_user_frame", "user_location"]
