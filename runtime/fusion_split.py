"""Where a fusion region's kernel may be split over intra-op threads: the
dimension of the region's iteration space it can be cut along.

A region body is elementwise ops, converts, selects, broadcasts and
reductions (passes/fuse_elementwise.py).  Each dimension of each value is
labelled, and two labels are made one where an op maps one dimension onto
the other: an elementwise op's operand and result dimensions position by
position, a ``broadcast_in_dim``'s operand dimension ``i`` and result
dimension ``broadcast_dimensions[i]`` when they have the same size (a size-1
operand dimension is broadcast, so the operand is read whole along it), a
``reduce``'s kept operand dimensions and its result's.  The region can be
cut along label ``L`` when every value an op of the body makes has ``L`` as
its leading dimension and nowhere else (so no op reduces over ``L``, and no
value is needed whole by an op that runs on a piece), and every region
operand has ``L`` as its leading dimension or not at all (then each piece
reads it whole).  Each piece then runs the region's ops on rows
``[a, b)`` of every value cut along ``L``: the same numpy kernels on outer
slices of the same arrays, whose strides are unchanged, so each element is
computed by the same operations in the same order, and the pieces together
give the whole region's bits (a reduction's order along its own axes does
not depend on the rows around it).  This is XLA's CPU backend's split of a
loop fusion over its thread pool along the outermost dimension
(``xla/service/cpu/parallel_task_assignment.cc``).

What is worth splitting on this kind of machine (2 cores of an AMD EPYC,
one L3 of 32 MB): transcendental arithmetic (``tanh`` of float32[4096,
256]: 3.5-4.3 ms on one thread, 2.4-2.5 ms in two halves on two; ``exp``
halves the same way), and loops of any kind over more data than the caches
hold (3 multiplies and adds over float32[1024, 1024] arrays read cold: 1.49-
1.56 ms on one thread, 1.03-1.07 ms on two); a small region of adds and
multiplies is not (handing a piece to a pool thread and waiting for it took
64 us).  :func:`heavy_elements` counts the elements made by ops whose
kernel computes more than it moves (a transcendental ufunc, or a kernel of
several numpy calls: ``logistic``, ``erf``), :func:`made_elements` all the
elements a region's ops make (runtime/fusion.py's thresholds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.ir import Operation, SSAValue

from xtpu.dialects import hlo
from xtpu.dialects.ir_walk import isa
from xtpu.dialects.tensor_spec import TensorSpec

__all__ = ["Cut", "cut_of", "heavy_elements", "made_elements"]

#: The one-loop numpy ufuncs that compute more than they move
#: (transcendental functions: libm's scalar loops on an AVX2 machine).
_HEAVY_UFUNCS = frozenset(
    [np.exp, np.expm1, np.log, np.log1p, np.log2, np.tanh, np.sinh, np.cosh, np.sin, np.cos, np.tan]
    + [np.arctan, np.arctan2, np.arcsin, np.arccos, np.arctanh, np.power, np.cbrt]
)


def made_elements(ops: Sequence[Operation]) -> int:
    """The elements the ops of ``ops`` make, in all."""
    return sum(math.prod(_shape(r)) for o in ops for r in o.results)


def heavy_elements(ops: Sequence[Operation]) -> int:
    """The elements made by ops of ``ops`` whose kernel computes more than
    it moves (module doc): an elementwise op whose ``UFUNC`` is a
    transcendental numpy ufunc or a function of several numpy calls."""
    n = 0
    for o in ops:
        fn = getattr(type(o), "UFUNC", None)
        if fn is not None and (fn in _HEAVY_UFUNCS or not isinstance(fn, np.ufunc)):
            n += math.prod(_shape(o.results[0]))
    return n


@dataclass(frozen=True)
class Cut:
    """How a region is cut: ``extent`` rows of the cut dimension, ``args``
    (per region operand) and ``values`` (the body's op results) cut along
    their leading dimension; everything else read whole."""

    extent: int
    args: frozenset[SSAValue]
    values: frozenset[SSAValue]


class _Labels:
    """Union-find over ``(value, dimension)`` pairs."""

    def __init__(self) -> None:
        self.parent: dict[tuple[SSAValue, int], tuple[SSAValue, int]] = {}

    def find(self, x: tuple[SSAValue, int]) -> tuple[SSAValue, int]:
        p = self.parent.get(x, x)
        if p == x:
            return x
        root = self.find(p)
        self.parent[x] = root
        return root

    def union(self, a: tuple[SSAValue, int], b: tuple[SSAValue, int]) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


def _shape(v: SSAValue) -> tuple[int, ...]:
    return tuple(TensorSpec.of_type(v.type).shape)


def cut_of(ops: Sequence[Operation], args: Sequence[SSAValue]) -> Cut | None:
    """The cut of a region body (``ops`` without its terminator, ``args``
    its block arguments) along its leading dimension (module doc), None
    when it has none: an op makes a value of rank 0, reduces over that
    dimension, or needs a value whole that another op makes in pieces."""
    if not ops:
        return None
    labels = _Labels()
    shapes: dict[SSAValue, tuple[int, ...]] = {}
    try:
        for v in args:
            shapes[v] = _shape(v)
        for o in ops:
            for r in o.results:
                shapes[r] = _shape(r)
    except (ValueError, TypeError):
        return None
    for o in ops:
        if len(o.results) != 1:
            return None
        r = o.results[0]
        rs = shapes[r]
        if isa(o, hlo.BroadcastInDimOp):
            (x,) = o.operands
            for i, d in enumerate(o.params()["broadcast_dimensions"]):
                if shapes[x][i] == rs[d]:
                    labels.union((x, i), (r, d))
        elif isa(o, hlo.ReduceOp):
            x = o.operands[0]
            reduced = set(o.params()["dimensions"])
            kept = [d for d in range(len(shapes[x])) if d not in reduced]
            for j, d in enumerate(kept):
                labels.union((x, d), (r, j))
        elif isa(o, (hlo.ElementwiseUnary, hlo.ElementwiseBinary, hlo.CompareOp, hlo.SelectOp, hlo.ConvertOp)):
            for x in o.operands:
                if shapes[x] == rs:  # a select's scalar predicate is read whole
                    for d in range(len(rs)):
                        labels.union((x, d), (r, d))
        else:
            return None
    made = [o.results[0] for o in ops]
    if any(not shapes[r] for r in made):
        return None
    cut = labels.find((made[0], 0))
    extent = shapes[made[0]][0]
    for v in (*args, *made):
        dims = [d for d in range(len(shapes[v])) if labels.find((v, d)) == cut]
        if v in made and dims != [0]:
            return None
        if dims and dims != [0]:
            return None
    split_args = frozenset(a for a in args if shapes[a] and labels.find((a, 0)) == cut)
    return Cut(extent, split_args, frozenset(made))
