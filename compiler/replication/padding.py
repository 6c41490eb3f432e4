"""Dynamic input shapes for ``replicate``: ``maximum_shapes`` and ``PaddingSpec``.

TF's ``tf.compat.v1.tpu.replicate`` (seed ``tpu_replicate.txt``) pads each
component of each replica's inputs to ``maximum_shapes``: an unknown
dimension (``None`` in a :class:`TensorShape`, ``-1`` in a list or a
tensor-like) is padded to the largest size of that dimension over all
replicas, rounded up to a power of two with ``PaddingSpec.POWER_OF_TWO`` so
that varying lengths fall into few compiled programs (TF's
``tpu._pad_all_input``).  The real sizes travel with the padded values
(``hlo.set_dimension_size``) and ``tpu-pad-dynamic-shapes`` keeps every
result exact on them.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xtpu.core import pytree
from xtpu.dialects.tensor_spec import np_kind

FILL = 0
"""The value padding is filled with.  Results never depend on it (tests set
it to NaN to prove that)."""


class PaddingSpec(enum.IntEnum):
    """How ``replicate`` pads dynamic input dimensions (TF's ``tpu.PaddingSpec``).

    AUTO: to the largest size over all replicas.
    POWER_OF_TWO: to the next power of two of that largest size (0 stays 0),
      so that inputs of lengths 1..1000 compile at most 11 programs.
    """

    AUTO = 0
    POWER_OF_TWO = 1


class TensorShape:
    """A possibly partially known shape (TF's ``tf.TensorShape``).

    ``TensorShape([None, 2])``: rank 2, dimension 0 unknown.  ``-1`` is read
    as unknown, as in TF's tensor-like maximum shapes.  ``TensorShape(None)``
    has an unknown rank.
    """

    def __init__(self, dims: Any):
        if isinstance(dims, TensorShape):
            dims = dims.dims
        elif dims is not None and hasattr(dims, "shape") and not isinstance(dims, (list, tuple)):
            dims = tuple(np.shape(dims))
        if dims is None:
            self.dims: tuple[int | None, ...] | None = None
            return
        if isinstance(dims, (int, np.integer)):
            dims = [dims]
        out = []
        for d in dims:
            if d is None or (isinstance(d, (int, np.integer)) and int(d) == -1):
                out.append(None)
            elif isinstance(d, (int, np.integer)) and int(d) >= 0:
                out.append(int(d))
            else:
                raise ValueError(f"TensorShape: dimension {d!r} must be a non-negative int, -1 or None")
        self.dims = tuple(out)

    @property
    def rank(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    def as_list(self) -> list[int | None]:
        if self.dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape")
        return list(self.dims)

    def is_fully_defined(self) -> bool:
        return self.dims is not None and None not in self.dims

    def __iter__(self):
        return iter(self.as_list())

    def __len__(self) -> int:
        return len(self.as_list())

    def __eq__(self, other: object) -> bool:
        try:
            return self.dims == TensorShape(other).dims
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self) -> int:
        return hash(self.dims)

    def __repr__(self) -> str:
        return "TensorShape(None)" if self.dims is None else f"TensorShape({list(self.dims)})"


def _describe(x: Any) -> str:
    if isinstance(x, TensorShape) or (
        isinstance(x, (list, tuple)) and any(isinstance(d, (int, np.integer)) for d in x)
    ):
        return f"a shape {list(x.dims) if isinstance(x, TensorShape) else list(x)}"
    if isinstance(x, (list, tuple)):
        return f"a {type(x).__name__} of {len(x)}"
    if isinstance(x, dict):
        return f"a dict with keys {sorted(x)}"
    return repr(x)


def _match(want: pytree.TreeDef, m: Any, path: str, out: list) -> None:
    """Walk ``m`` (maximum_shapes) along replica 0's input structure
    ``want``; append one TensorShape (or None: no padding) per input leaf.
    Lists and tuples are alike (TF's ``nest.assert_same_structure`` with
    ``check_types=False``)."""
    if want.kind == "leaf":
        try:
            out.append(None if m is None else TensorShape(m))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path} must be a shape for an input tensor, got {_describe(m)}: {e}") from None
        return
    if m is None:
        out.extend([None] * want.num_leaves)
        return
    if want.kind == "dict":
        if not isinstance(m, dict) or sorted(m) != list(want.aux):
            raise ValueError(
                f"The structure of maximum_shapes must be the same as inputs[0]: at {path} inputs[0] has "
                f"a dict with keys {list(want.aux)}, maximum_shapes has {_describe(m)}"
            )
        for k, c in zip(want.aux, want.children):
            _match(c, m[k], f"{path}[{k!r}]", out)
        return
    if want.kind == "none":
        return
    shape_like = isinstance(m, TensorShape) or (
        isinstance(m, (list, tuple)) and any(isinstance(d, (int, np.integer)) for d in m)
    )
    if shape_like or not isinstance(m, (list, tuple)) or len(m) != len(want.children):
        raise ValueError(
            f"The structure of maximum_shapes must be the same as inputs[0]: at {path} inputs[0] has "
            f"a sequence of {len(want.children)}, maximum_shapes has {_describe(m)}"
        )
    for k, (c, x) in enumerate(zip(want.children, m)):
        _match(c, x, f"{path}[{k}]", out)


@dataclass(frozen=True)
class Padding:
    """The padded shape of each flat input and which dimensions carry a real size.

    Attributes:
      shapes: per flat input, the padded shape.
      dynamic: ``(input, dimension)`` pairs whose real size is passed along.
    """

    shapes: tuple[tuple[int, ...], ...]
    dynamic: tuple[tuple[int, int], ...]


def _round(n: int, spec: PaddingSpec) -> int:
    if spec == PaddingSpec.POWER_OF_TWO and n > 0:
        return 1 << (n - 1).bit_length()
    return n


def plan(
    treedef: pytree.TreeDef,
    flat: Sequence[Sequence[np.ndarray]],
    maximum_shapes: Any,
    padding_spec: Any,
) -> Padding:
    """The padding of ``flat`` (``[replica][flat input]`` arrays) for
    ``maximum_shapes`` (a structure like ``inputs[0]``, whose structure is
    ``treedef``).

    Raises:
      ValueError: ``maximum_shapes`` does not have the structure of
        ``inputs[0]``; a known dimension of a maximum shape differs from an
        input's size, or its rank from the input's rank (seed: "the static
        inputs dimensions don't match with the values given in
        maximum_shapes"); an unknown ``padding_spec``.
    """
    spec = PaddingSpec.AUTO if padding_spec is None else padding_spec
    if not isinstance(spec, PaddingSpec):
        try:
            spec = PaddingSpec(spec)
        except ValueError:
            raise ValueError(
                f"padding_spec must be a PaddingSpec (AUTO or POWER_OF_TWO), got {padding_spec!r}"
            ) from None
    per_input: list[TensorShape | None] = []
    _match(treedef, maximum_shapes, "maximum_shapes", per_input)
    shapes, dynamic = [], []
    for i, ms in enumerate(per_input):
        arrays = [rep[i] for rep in flat]
        if ms is None or ms.dims is None:
            first = arrays[0].shape
            for r, a in enumerate(arrays):
                if a.shape != first:
                    raise ValueError(
                        f"input {i} has shape {list(first)} in replica 0 but {list(a.shape)} in replica {r}, "
                        "and maximum_shapes gives it no shape to pad to"
                    )
            shapes.append(tuple(first))
            continue
        padded = []
        for r, a in enumerate(arrays):
            if a.ndim != len(ms.dims):
                raise ValueError(
                    f"The static shape {list(a.shape)} of input {i} of replica {r} does not match "
                    f"maximum_shapes {ms} (rank {a.ndim} vs {len(ms.dims)})"
                )
        for d, m in enumerate(ms.dims):
            sizes = [a.shape[d] for a in arrays]
            if m is None:
                padded.append(_round(max(sizes), spec))
                dynamic.append((i, d))
                continue
            for r, n in enumerate(sizes):
                if n != m:
                    raise ValueError(
                        f"The static dimension {d} of input {i} of replica {r} has size {n}, which does "
                        f"not match maximum_shapes {ms}: a known dimension must equal every replica's size"
                    )
            padded.append(m)
        shapes.append(tuple(padded))
    return Padding(tuple(shapes), tuple(dynamic))


def pad(flat: Sequence[Sequence[np.ndarray]], padding: Padding) -> list[list[np.ndarray]]:
    """Each replica's inputs padded to ``padding.shapes`` (with :data:`FILL`),
    followed by the real sizes (``int32`` scalars) of ``padding.dynamic``."""
    out = []
    for rep in flat:
        arrays = []
        for a, shape in zip(rep, padding.shapes):
            if a.shape != shape:
                b = np.full(shape, FILL, dtype=a.dtype) if np_kind(a.dtype) in "fc" else np.zeros(shape, a.dtype)
                b[tuple(slice(0, n) for n in a.shape)] = a
                a = b
            arrays.append(a)
        arrays += [np.int32(rep[i].shape[d]) for i, d in padding.dynamic]
        out.append(arrays)
    return out


def pad_to(flat: Sequence[Sequence[np.ndarray]], sig: Any, compiled: Any) -> tuple[list[list[np.ndarray]], Any]:
    """``flat`` padded for a program ``compiled`` for maximum_shapes (its
    ``Signature``), and the signature the padded inputs have; inputs whose
    number or dtypes differ are left for the caller's signature check.

    Raises:
      ValueError: an input is larger than its padded shape, or differs in a
        dimension that is not padded, naming the input and replica.
    """
    import dataclasses

    if len(sig.specs) != len(compiled.specs) or sig.treedef != compiled.treedef:
        return list(map(list, flat)), sig
    dynamic = set(compiled.dynamic)
    for r, rep in enumerate(flat):
        for i, (a, want) in enumerate(zip(rep, compiled.specs)):
            ok = a.ndim == len(want.shape) and all(
                n <= m if (i, d) in dynamic else n == m for d, (n, m) in enumerate(zip(a.shape, want.shape))
            )
            if not ok:
                raise ValueError(
                    f"inputs do not match the compiled program: input {i} of replica {r} has shape "
                    f"{list(a.shape)}, the program pads it to {list(want.shape)} (padded dimensions: "
                    f"{[d for j, d in compiled.dynamic if j == i]})"
                )
    plan = Padding(tuple(s.shape for s in compiled.specs), compiled.dynamic)
    specs = tuple(type(s)(w.shape, s.dtype) for s, w in zip(sig.specs, compiled.specs))
    return pad(flat, plan), dataclasses.replace(sig, specs=specs, dynamic=compiled.dynamic)
