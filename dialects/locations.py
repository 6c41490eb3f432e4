"""Source locations of ops as users read them: ``file.py:LINE``.

The tracer gives every op the ``FileLineColLoc`` of the user's line
(:mod:`xtpu.core.locations`); errors of the tracer, the passes and the
runtime name that line with :func:`format_location`.
"""

from __future__ import annotations

import os
from typing import Any

from xdsl.dialects.builtin import FileLineColLoc


def format_location(loc: Any) -> str | None:
    """``file.py:LINE`` for a FileLineColLoc, else None."""
    if isinstance(loc, FileLineColLoc):
        return f"{os.path.basename(loc.filename.data)}:{loc.line.data}"
    return None


__all__ = ["format_location"]
