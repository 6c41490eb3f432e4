"""``tf.einsum`` for one or two operands, lowered to StableHLO's reduce,
transpose and dot_general (the way XLA lowers TF's Einsum).

Supported equations: ``"ij,jk->ik"``, ``"bij,bjk->bik"``, ``"i,i->"``,
``"ij->ji"``, ``"ij->"``, implicit outputs (``"ij,jk"``: the letters that
appear once, in alphabetical order), ``...`` for leading dimensions
(``"...ij,jk->...ik"``; right-aligned, equal sizes).  Not supported
(``NotImplementedError``): a letter repeated within one operand (diagonals),
more than two operands.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from xtpu.core.tracing import read_if_variable
from xtpu.ops.array_ops import transpose
from xtpu.ops.core import dot_general, shape_of, unify
from xtpu.ops.math_ops import reduce_sum


def _expand_ellipsis(equation: str, ranks: list[int]) -> str:
    """The equation with each ``...`` replaced by letters it does not use,
    right-aligned across operands (numpy's rule; the dimensions must be
    equal, not broadcast); an implicit output lists them first."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"einsum: equation '{equation}' names {len(terms)} operands, got {len(ranks)}")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    widths = []
    for t, r in zip(terms, ranks):
        if t.count("...") > 1 or ("." in t.replace("...", "")):
            raise ValueError(f"einsum: invalid subscripts '{t}' in '{equation}'")
        widths.append(r - (len(t) - 3) if "..." in t else 0)
    if any(w < 0 for w in widths):
        raise ValueError(f"einsum: an operand of '{equation}' has fewer dimensions than its subscripts")
    n = max(widths, default=0)
    letters = "".join(free[:n])
    terms = [t.replace("...", letters[n - w :]) for t, w in zip(terms, widths)]
    if arrow:
        out = out.replace("...", letters)
    elif "..." in eq:
        counts = Counter("".join(terms))
        out = letters + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in letters))
    return ",".join(terms) + ("->" + out if arrow or "..." in eq else "")


def _parse(equation: str, count: int) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    if "." in eq:
        raise ValueError(f"einsum: invalid subscripts in '{equation}'")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != count:
        raise ValueError(f"einsum: equation '{equation}' names {len(terms)} operands, got {count}")
    letters = Counter("".join(terms))
    if not arrow:
        out = "".join(sorted(c for c, k in letters.items() if k == 1))
    for t in terms:
        if not all(c.isalpha() for c in t):
            raise ValueError(f"einsum: invalid subscripts '{t}' in '{equation}'")
        if len(set(t)) != len(t):
            raise NotImplementedError(f"einsum: a repeated index within one operand ('{t}') is not implemented")
    for c in out:
        if c not in letters:
            raise ValueError(f"einsum: output subscript '{c}' does not appear in an input of '{equation}'")
    if len(set(out)) != len(out):
        raise ValueError(f"einsum: output subscripts '{out}' repeat an index")
    return terms, out


def _sum_out(x: Any, term: str, keep: set[str]) -> tuple[Any, str]:
    """Sum the dimensions whose letter is not in ``keep``."""
    dims = tuple(i for i, c in enumerate(term) if c not in keep)
    if not dims:
        return x, term

    return reduce_sum(x, axis=dims), "".join(c for c in term if c in keep)


def einsum(equation: str, *inputs: Any, **kwargs: Any) -> Any:
    """The sum of products the subscripts describe (tf.einsum).

    Shapes: each operand's rank is its number of subscripts; a letter's
    dimensions must be equal; the result has the output subscripts' dims.

    Raises:
      ValueError: malformed equation, rank or dimension mismatch.
      NotImplementedError: see the module docstring.
    """
    if not 1 <= len(inputs) <= 2:
        raise NotImplementedError(f"einsum: {len(inputs)} operands; xtpu implements one or two")
    values = unify([read_if_variable(v) for v in inputs], "einsum")
    if "." in equation:
        equation = _expand_ellipsis(equation, [len(shape_of(v)) for v in values])
    terms, out = _parse(equation, len(values))
    sizes: dict[str, int] = {}
    for v, t in zip(values, terms):
        s = shape_of(v)
        if len(s) != len(t):
            raise ValueError(f"einsum: operand with subscripts '{t}' has rank {len(s)}, shape {list(s)}")
        for c, d in zip(t, s):
            if sizes.setdefault(c, d) != d:
                raise ValueError(f"einsum: index '{c}' has dimensions {sizes[c]} and {d} in '{equation}'")
    if len(values) == 1:
        x, t = _sum_out(values[0], terms[0], set(out))
        return x if t == out else transpose(x, [t.index(c) for c in out])
    (a, b), (ta, tb) = values, terms
    # Letters in only one operand and not in the output are summed first.
    a, ta = _sum_out(a, ta, set(out) | set(tb))
    b, tb = _sum_out(b, tb, set(out) | set(ta))
    batch = [c for c in ta if c in tb and c in out]
    contract = [c for c in ta if c in tb and c not in out]
    r = dot_general(
        a,
        b,
        lhs_batching_dimensions=tuple(ta.index(c) for c in batch),
        rhs_batching_dimensions=tuple(tb.index(c) for c in batch),
        lhs_contracting_dimensions=tuple(ta.index(c) for c in contract),
        rhs_contracting_dimensions=tuple(tb.index(c) for c in contract),
    )
    # dot_general's result: batch dims, then lhs free dims, then rhs free dims.
    got = (
        "".join(batch)
        + "".join(c for c in ta if c not in batch and c not in contract)
        + "".join(c for c in tb if c not in batch and c not in contract)
    )
    return r if got == out else transpose(r, [got.index(c) for c in out])


__all__ = ["einsum"]
