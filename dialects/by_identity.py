"""Values worked out once per object, found by the object's identity.

xDSL's attributes and types are immutable, and tracing shares equal ones
(MLIR uniques them), so what is derived from one (a decoded parameter,
whether a type holds strings, an array's shape and dtype) can be kept per
object.  Hashing one, though, hashes its contents in Python at every
lookup, and a code object hashes its constants; a table keyed by ``id`` is
a C dict lookup.  Each entry keeps its object alive, so the id stays the
object's own; a table is emptied when it holds ``limit`` entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
V = TypeVar("V")

__all__ = ["memo"]


def memo(table: dict[int, tuple[Any, Any]], obj: T, compute: Callable[[T], V], limit: int = 4096) -> V:
    """``compute(obj)``, once per object while ``table`` keeps it: the
    value must not change while the object lives (it is derived from an
    immutable object) and is shared by every caller."""
    got = table.get(id(obj))
    if got is not None and got[0] is obj:
        return got[1]
    value = compute(obj)
    if len(table) >= limit:
        table.clear()
    table[id(obj)] = (obj, value)
    return value
