"""``xtpu.data``: the part of TF's ``tf.data`` that TPU input code uses.

A :class:`Dataset` is a thin layer over Python iterators: each transformation
wraps its input's iterator factory, so iterating *streams* (nothing is
materialised beyond ``batch``'s, ``shuffle``'s and ``prefetch``'s buffers),
and every ``iter(dataset)`` starts again from the beginning, as in TF.
Elements are nested structures (tuples, dicts, lists) of numpy arrays;
iteration yields them as ``xtpu.EagerTensor`` (strings stay numpy arrays).

Semantics follow ``tf.data.Dataset`` (https://www.tensorflow.org/api_docs/python/tf/data/Dataset):
``from_tensor_slices`` slices the first dimension, ``batch`` stacks
consecutive elements (the last batch is smaller unless
``drop_remainder=True``), ``shuffle`` keeps a buffer of ``buffer_size``
elements and emits a uniformly chosen one, refilling its slot (a seed makes
the order deterministic; with ``reshuffle_each_iteration`` each pass over the
dataset uses another order derived from the seed), ``repeat()`` repeats
forever, ``take(n)`` stops after ``n`` elements, ``zip`` stops with its
shortest input, ``range`` gives int64 scalars.  ``map`` calls its function
eagerly on each element (xtpu ops run eagerly on numpy), with the element's
components as positional arguments when the element is a tuple, as TF does.
``prefetch`` keeps up to ``buffer_size`` elements filled by a background
thread (``AUTOTUNE``: 2).
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from xtpu.core import pytree
from xtpu.core.eager import as_eager_tensor
from xtpu.core.tracing import to_numpy
from xtpu.dialects.tensor_spec import dtype_of_numpy, np_kind
from xtpu.distribute.function import TensorSpec
from xtpu.ops.core import dtype_name

AUTOTUNE = -1
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2


def _np(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return np.asarray(x)
    return to_numpy(x)


def _as_structure(element: Any) -> Any:
    leaves, td = pytree.flatten(element)
    return pytree.unflatten(td, [_np(x) for x in leaves])


def _to_eager(element: Any) -> Any:
    leaves, td = pytree.flatten(element)
    return pytree.unflatten(td, [as_eager_tensor(x) if np_kind(x.dtype) in "biufc" else x for x in leaves])


def _spec_of(element: Any, batch_dim: Any = "none") -> Any:
    leaves, td = pytree.flatten(element)
    specs = []
    for x in leaves:
        shape = tuple(x.shape)
        specs.append(TensorSpec(shape if batch_dim == "none" else (batch_dim,) + shape, dtype_of_numpy(x.dtype)))
    return pytree.unflatten(td, specs)


class Dataset:
    """A stream of elements (TF's ``tf.data.Dataset``); build one with the
    static constructors and chain transformations."""

    def __init__(self, make_iterator: Callable[[], Iterator[Any]], element_spec: Any, cardinality: int):
        self._make_iterator = make_iterator
        # A spec, or a callable computing it when first asked (map's needs
        # its function applied to an element).
        self._spec = element_spec
        self._cardinality = cardinality

    # -- constructors -------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors: Any, name: str | None = None) -> Dataset:
        """One element per index of the first dimension of every component.

        Raises:
          ValueError: a component is a scalar, or components' first
            dimensions differ (TF's message names both sizes).
        """
        tensors = _as_structure(tensors)
        leaves, td = pytree.flatten(tensors)
        if not leaves:
            raise ValueError("from_tensor_slices needs at least one tensor")
        sizes = set()
        for x in leaves:
            if x.ndim == 0:
                raise ValueError(f"from_tensor_slices: a component is a scalar ({x!r}); it has no dimension to slice")
            sizes.add(x.shape[0])
        if len(sizes) != 1:
            raise ValueError(
                f"Dimensions {sorted(sizes)} in the components of from_tensor_slices are not equal: "
                "every component must have the same size in dimension 0"
            )
        size = sizes.pop()

        def make():
            for i in range(size):
                yield pytree.unflatten(td, [x[i] for x in leaves])

        return Dataset(make, _spec_of(pytree.unflatten(td, [x[0] for x in leaves])), size)

    @staticmethod
    def from_tensors(tensors: Any, name: str | None = None) -> Dataset:
        """A dataset of one element, ``tensors``."""
        tensors = _as_structure(tensors)
        return Dataset(lambda: iter([tensors]), _spec_of(tensors), 1)

    @staticmethod
    def range(*args: int, dtype: Any = "int64", name: str | None = None) -> Dataset:
        """``range(stop)``, ``range(start, stop[, step])`` as int64 scalars
        (Python's ``range``)."""
        r = range(*[int(a) for a in args])
        dt = np.dtype(dtype_name(dtype))
        return Dataset(lambda: (np.asarray(i, dtype=dt) for i in r), _spec_of(np.asarray(0, dtype=dt)), len(r))

    @staticmethod
    def zip(*datasets: Any, name: str | None = None) -> Dataset:
        """Elements are tuples (or the given structure) of the datasets'
        elements; ends with the shortest dataset."""
        structure = datasets[0] if len(datasets) == 1 and not isinstance(datasets[0], Dataset) else tuple(datasets)
        dss, td = pytree.flatten(structure, is_leaf=lambda x: isinstance(x, Dataset))
        for d in dss:
            if not isinstance(d, Dataset):
                raise TypeError(f"Dataset.zip takes datasets, got {type(d).__name__}")

        def make():
            for parts in zip(*(iter(d._make_iterator()) for d in dss)):
                yield pytree.unflatten(td, list(parts))

        cards = [d._cardinality for d in dss]
        finite = [c for c in cards if c >= 0]
        card = (
            min(finite) if finite else (UNKNOWN_CARDINALITY if UNKNOWN_CARDINALITY in cards else INFINITE_CARDINALITY)
        )
        return Dataset(make, lambda: pytree.unflatten(td, [d.element_spec for d in dss]), card)

    # -- properties ---------------------------------------------------------
    @property
    def element_spec(self) -> Any:
        """The structure of one element, with an ``xtpu.TensorSpec`` per
        component (a dimension of ``None`` where batches may differ)."""
        if callable(self._spec):
            self._spec = self._spec()
        return self._spec

    def cardinality(self) -> int:
        """The number of elements; ``INFINITE_CARDINALITY`` (-1) after
        ``repeat()``, ``UNKNOWN_CARDINALITY`` (-2) when unknown."""
        return self._cardinality

    def __iter__(self) -> Iterator[Any]:
        return (_to_eager(e) for e in self._make_iterator())

    def __len__(self) -> int:
        if self._cardinality == INFINITE_CARDINALITY:
            raise TypeError("The dataset is infinite.")
        if self._cardinality < 0:
            raise TypeError("The dataset length is unknown.")
        return self._cardinality

    def as_numpy_iterator(self) -> Iterator[Any]:
        """The elements as numpy arrays."""
        return iter(self._make_iterator())

    # -- transformations ----------------------------------------------------
    def map(
        self, map_func: Callable, num_parallel_calls: Any = None, deterministic: Any = None, name: str | None = None
    ) -> Dataset:
        """``map_func(*element)`` for a tuple element, ``map_func(element)``
        otherwise, eagerly on each element."""
        src = self._make_iterator

        def call(e):
            out = map_func(*e) if isinstance(e, tuple) and not hasattr(e, "_fields") else map_func(e)
            return _as_structure(out)

        def make():
            return (call(e) for e in src())

        def spec():
            first = next(iter(src()), None)
            return None if first is None else _spec_of(call(first))

        return Dataset(make, spec, self._cardinality)

    def batch(
        self,
        batch_size: int,
        drop_remainder: bool = False,
        num_parallel_calls: Any = None,
        deterministic: Any = None,
        name: str | None = None,
    ) -> Dataset:
        """Stack ``batch_size`` consecutive elements along a new first
        dimension; the last batch has fewer unless ``drop_remainder``.

        Raises:
          ValueError: ``batch_size`` is not positive.
        """
        batch_size = int(batch_size)
        if batch_size <= 0:
            raise ValueError(f"batch_size must be greater than zero, got {batch_size}")
        src = self._make_iterator

        def make():
            it = src()
            while True:
                chunk = list(itertools.islice(it, batch_size))
                if not chunk or (drop_remainder and len(chunk) < batch_size):
                    return
                leaves = [pytree.flatten(e) for e in chunk]
                td = leaves[0][1]
                yield pytree.unflatten(td, [np.stack([lv[0][j] for lv in leaves]) for j in range(td.num_leaves)])

        def spec():
            inner = self.element_spec
            if inner is None:
                return None
            leaves, td = pytree.flatten(inner)
            dim = (
                batch_size
                if drop_remainder or (self._cardinality >= 0 and self._cardinality % batch_size == 0)
                else None
            )
            return pytree.unflatten(td, [TensorSpec((dim,) + s.shape, s.dtype) for s in leaves])

        card = self._cardinality
        if card >= 0:
            card = card // batch_size if drop_remainder else -(-card // batch_size)
        return Dataset(make, spec, card)

    def repeat(self, count: int | None = None, name: str | None = None) -> Dataset:
        """The dataset ``count`` times (forever when None or -1)."""
        src = self._make_iterator
        count = None if count is None or int(count) < 0 else int(count)

        def make():
            reps = itertools.count() if count is None else range(count)
            for _ in reps:
                yield from src()

        card = self._cardinality
        if count is None:
            card = INFINITE_CARDINALITY if card != 0 else 0
        elif card >= 0:
            card *= count
        return Dataset(make, lambda: self.element_spec, card)

    def shuffle(
        self, buffer_size: int, seed: int | None = None, reshuffle_each_iteration: bool = True, name: str | None = None
    ) -> Dataset:
        """Emit elements in random order from a buffer of ``buffer_size``.

        Deterministic with a ``seed``: the n-th iteration over the dataset
        uses ``numpy.random.default_rng([seed, n])`` (``[seed, 0]`` every time
        with ``reshuffle_each_iteration=False``).

        Raises:
          ValueError: ``buffer_size`` is not positive.
        """
        buffer_size = int(buffer_size)
        if buffer_size <= 0:
            raise ValueError(f"buffer_size must be greater than zero, got {buffer_size}")
        src = self._make_iterator
        epochs = itertools.count()
        base = int(np.random.SeedSequence().entropy % (2**63)) if seed is None else int(seed)

        def make():
            epoch = next(epochs) if reshuffle_each_iteration else 0
            rng = np.random.default_rng([base, epoch])
            buf: list[Any] = []
            it = src()
            for e in it:
                buf.append(e)
                if len(buf) >= buffer_size:
                    break
            for e in it:
                i = int(rng.integers(len(buf)))
                yield buf[i]
                buf[i] = e
            while buf:
                i = int(rng.integers(len(buf)))
                yield buf.pop(i)

        return Dataset(make, lambda: self.element_spec, self._cardinality)

    def take(self, count: int, name: str | None = None) -> Dataset:
        """The first ``count`` elements (all of them when -1)."""
        count = int(count)
        src = self._make_iterator

        def make():
            return src() if count < 0 else itertools.islice(src(), count)

        card = self._cardinality
        if count >= 0:
            card = count if card == INFINITE_CARDINALITY else (min(card, count) if card >= 0 else card)
        return Dataset(make, lambda: self.element_spec, card)

    def skip(self, count: int, name: str | None = None) -> Dataset:
        """All but the first ``count`` elements."""
        count = int(count)
        src = self._make_iterator
        card = self._cardinality
        if card >= 0:
            card = max(card - max(count, 0), 0)
        return Dataset(lambda: itertools.islice(src(), max(count, 0), None), lambda: self.element_spec, card)

    def prefetch(self, buffer_size: int, name: str | None = None) -> Dataset:
        """Produce up to ``buffer_size`` elements ahead, on a background
        thread (``AUTOTUNE``: 2).  The order is unchanged; an exception of
        the input is raised where its element would have been."""
        size = 2 if int(buffer_size) == AUTOTUNE else max(int(buffer_size), 1)
        src = self._make_iterator
        return Dataset(lambda: _Prefetcher(src(), size), lambda: self.element_spec, self._cardinality)

    def __repr__(self) -> str:
        return f"<xtpu.data.Dataset element_spec={self.element_spec!r}>"


class _Prefetcher:
    """An iterator a daemon thread fills ahead of the consumer."""

    _END = object()

    def __init__(self, it: Iterator[Any], size: int):
        self._q: queue.Queue = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(it,), daemon=True, name="xtpu-prefetch")
        self._thread.start()

    def _fill(self, it: Iterator[Any]) -> None:
        try:
            for e in it:
                while not self._stop.is_set():
                    try:
                        self._q.put(("ok", e), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self._q.put(("end", None))
        except BaseException as exc:  # handed to the consumer
            self._q.put(("error", exc))

    def __iter__(self):
        return self

    def __next__(self) -> Any:
        kind, e = self._q.get()
        if kind == "end":
            self._q.put(("end", None))
            raise StopIteration
        if kind == "error":
            raise e
        return e

    def __del__(self):
        self._stop.set()


__all__ = ["AUTOTUNE", "Dataset", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
