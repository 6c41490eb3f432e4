"""Nested structures of values (TF's ``tf.nest``, JAX's pytrees), kept small.

Lists, tuples (named tuples included) and dicts (keys in sorted order, as
``tf.nest`` does) are structure; ``None`` is an empty structure; every other
object is a leaf.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class TreeDef:
    """The shape of a nested structure, without its leaves."""

    __slots__ = ("kind", "aux", "children")

    def __init__(self, kind: str, aux: Any, children: tuple[TreeDef, ...]):
        self.kind = kind
        self.aux = aux
        self.children = children

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TreeDef)
            and self.kind == other.kind
            and self.aux == other.aux
            and self.children == other.children
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.aux if not isinstance(self.aux, list) else tuple(self.aux), self.children))

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(map(repr, self.children))
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.aux, self.children))
            return "{" + inner + "}"
        return f"[{inner}]" if self.kind == "list" else f"({inner})"


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeDef]:
    """The leaves of ``tree`` in order, and its structure."""
    leaves: list[Any] = []
    return leaves, _flatten(tree, leaves, is_leaf)


# Module-level recursion, not a nested recursive function: a nested one
# refers to itself through its closure cell, a reference cycle that kept
# every call's leaves (a replicated call's inputs and outputs) alive until
# the cyclic garbage collector ran.


def _flatten(x: Any, leaves: list[Any], is_leaf: Callable[[Any], bool] | None) -> TreeDef:
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return TreeDef("leaf", None, ())
    if x is None:
        return TreeDef("none", None, ())
    if isinstance(x, tuple):
        kind = "namedtuple" if hasattr(x, "_fields") else "tuple"
        aux = type(x) if kind == "namedtuple" else None
        return TreeDef(kind, aux, tuple(_flatten(c, leaves, is_leaf) for c in x))
    if isinstance(x, list):
        return TreeDef("list", None, tuple(_flatten(c, leaves, is_leaf) for c in x))
    if isinstance(x, dict):
        keys = tuple(sorted(x))
        return TreeDef("dict", keys, tuple(_flatten(x[k], leaves, is_leaf) for k in keys))
    leaves.append(x)
    return TreeDef("leaf", None, ())


def unflatten(treedef: TreeDef, leaves: list[Any]) -> Any:
    """Rebuild a structure from :func:`flatten`'s structure and new leaves."""
    return _unflatten(treedef, iter(leaves))


def _unflatten(t: TreeDef, it: Any) -> Any:
    if t.kind == "leaf":
        return next(it)
    if t.kind == "none":
        return None
    children = [_unflatten(c, it) for c in t.children]
    if t.kind == "tuple":
        return tuple(children)
    if t.kind == "namedtuple":
        return t.aux(*children)
    if t.kind == "list":
        return children
    return dict(zip(t.aux, children))
