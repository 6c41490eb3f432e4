"""``xtpu.summary``: TensorBoard summaries with TF 2's ``tf.summary`` API.

``create_file_writer(logdir)`` returns a :class:`SummaryWriter`; inside
``with writer.as_default(step=...)`` (or after ``writer.set_as_default()``),
``scalar(name, data, step)`` writes a scalar event that TensorBoard shows.
Eagerly it writes at once; inside ``xtpu.replicate`` it binds the host-only op
``hlo.summary_scalar`` with the default writer's directory baked in, which
``tpu-mark-outside-compilation`` moves to the host, and the host runs it once
per replica per execution.  The event files are tensorboardX's, buffered as
TF's writer buffers them (:mod:`xtpu.dialects.summaries`, one writer per
directory).

Semantics are TF 2's (``tf.summary.create_file_writer``, ``tf.summary.scalar``,
``tf.summary.experimental.get_step`` / ``set_step``; TF's
``tensorflow/python/ops/summary_ops_v2.py`` and TensorBoard's
``tensorboard/plugins/scalar/summary_v2.py``):

* the default writer and the default step belong to the calling thread;
* ``scalar`` checks that ``data`` is a scalar first (``assert_scalar``), then
  returns False when there is no default writer, and raises ``ValueError``
  ("No step set ...") when there is one but neither ``step`` nor the default
  step is set; ``data`` is stored as float32;
* ``as_default`` flushes the writer when it exits.

Several replicas, one tag and step: TF records summaries on replica 0 only.
``_should_record_summaries_internal`` in ``summary_ops_v2.py`` ANDs the
user's ``record_if`` condition with ``is_recording_distribution_strategy``,
and ``ReplicaContext.__enter__`` in
``tensorflow/python/distribute/distribute_lib.py`` sets that flag to
``replica_id_is_zero``, i.e. ``math_ops.equal(self.replica_id_in_sync_group,
0)``.  ``TPUStrategy`` runs its function through ``tpu.replicate`` and feeds
each replica its id as a replicated input (``_TPUReplicaContext(strategy,
replica_id_in_sync_group=replica_id)`` in
``tensorflow/python/distribute/tpu_strategy.py``), so inside a replicated TPU
computation only replica 0 writes; TPUEstimator's
``_TPUEstimatorReplicaContext``
(``tensorflow_estimator/python/estimator/tpu/tpu_estimator.py``) does the
same "so that only summary ops from 0th replica is executed".  ``tf.summary.should_record_summaries`` documents it
as "it may return False for some replicas when using tf.distribute.Strategy".
xtpu follows this rule: with more than one replica, ``scalar`` passes
``tpu.replica_id`` to ``hlo.summary_scalar`` and the kernel writes only for
replica 0; every replica still runs the op (and its host round trip), as
every TPU replica runs TF's summary ``cond``.  Eagerly there is one replica,
replica 0, which always writes.

Tracing captures the default writer's directory and a Python default step
when the computation is traced, as ``tf.function`` does, and ``replicate``
compiles a computation once per input signature: to log a changing step,
pass it as an input of the computation and give it as ``step`` (TF's note on
``set_step``: "the step value will be captured at the time the function is
traced").  While tracing, ``scalar`` returns the Python bool True when it
emitted the op; TF returns a per-replica bool tensor (True on replica 0).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import numpy as np

from xtpu.core.tracing import (
    Tensor,
    bind,
    convert,
    current_trace,
    format_location,
    read_if_variable,
    spec_of,
    to_numpy,
    user_location,
)
from xtpu.dialects import summaries as _registry
from xtpu.dialects.hlo_host import SummaryFlushOp, SummaryScalarOp
from xtpu.dialects.primitive import ShapeError
from xtpu.dialects.summary_histogram import DEFAULT_BUCKETS, SummaryHistogramOp
from xtpu.dialects.summary_write import SummaryWriteOp
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.ops.array_ops import replica_id as _replica_id
from xtpu.ops.math_ops import cast as _cast


class _SummaryState(threading.local):
    """The calling thread's default writer and step (TF's ``_SummaryState``)."""

    def __init__(self) -> None:
        self.writer: SummaryWriter | None = None
        self.step: Any = None


_state = _SummaryState()


class SummaryWriter:
    """Writes summaries to the TensorBoard event files of a directory
    (TF 2's ``tf.summary.SummaryWriter``); made by :func:`create_file_writer`.

    Attributes:
      logdir: the absolute path of the log directory.
    """

    def __init__(self, logdir: str, max_queue: int | None, flush_millis: int | None, filename_suffix: str | None):
        self.logdir = _registry.acquire(logdir, max_queue, flush_millis, filename_suffix)
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<xtpu.summary.SummaryWriter logdir={self.logdir!r} ({state})>"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"SummaryWriter {self!r} is already closed")

    def as_default(self, step: Any = None) -> _DefaultWriter:
        """A context manager that makes this the thread's default writer.

        Args:
          step: when not None, also the default step inside the context (an
            ``int64``-castable value, or a traced int tensor); the previous
            default step comes back when it exits.

        The writer is flushed when the context exits.

        Raises:
          RuntimeError: the writer is closed.
        """
        self._check_open()
        return _DefaultWriter(self, step)

    def set_as_default(self, step: Any = None) -> None:
        """Make this the thread's default writer (and ``step``, when not None,
        the default step) until another is set.

        Raises:
          RuntimeError: the writer is closed.
        """
        self.as_default(step).__enter__()

    def flush(self) -> None:
        """Write buffered events to disk (does nothing once closed)."""
        if not self._closed:
            _registry.flush(self.logdir)

    def close(self) -> None:
        """Flush and close the writer; later calls do nothing.  The event file
        is closed when no other writer of the same directory is open."""
        if self._closed:
            return
        self._closed = True
        _registry.flush(self.logdir)
        _registry.release(self.logdir)


class _DefaultWriter:
    """``SummaryWriter.as_default``'s context manager (TF's ``_SummaryContextManager``)."""

    def __init__(self, writer: SummaryWriter, step: Any):
        self._writer = writer
        self._step = step
        self._old_writer: SummaryWriter | None = None
        self._old_step: Any = None

    def __enter__(self) -> SummaryWriter:
        self._old_writer = _state.writer
        _state.writer = self._writer
        if self._step is not None:
            self._old_step = _state.step
            _state.step = self._step
        return self._writer

    def __exit__(self, *exc: object) -> bool:
        if _state.writer is not None:
            if current_trace() is not None:
                # Traced (strategy.run, xtpu.function, replicate): the flush is
                # an op of the program, so every run flushes, as TF's exit
                # adds a flush op to the function (issue 25: it flushed once,
                # while tracing).
                bind(SummaryFlushOp, [], logdir=_state.writer.logdir)
            else:
                _state.writer.flush()
        _state.writer = self._old_writer
        if self._step is not None:
            _state.step = self._old_step
        return False


def create_file_writer(
    logdir: str,
    max_queue: int | None = None,
    flush_millis: int | None = None,
    filename_suffix: str | None = None,
    name: str | None = None,
) -> SummaryWriter:
    """A summary writer for the event files of ``logdir`` (tf.summary.create_file_writer).

    Args:
      logdir: the directory of the event files (created if missing).
      max_queue: events kept in memory before a flush; default 10.
      flush_millis: longest interval between flushes in milliseconds; default
        120000.  As in TF's ``SummaryFileWriter``, both limits are checked
        when an event is written.
      filename_suffix: suffix of the event file name; default ``.v2``.
      name: accepted for TF compatibility; does nothing.

    Returns:
      A :class:`SummaryWriter`.  Writers of the same directory share one
      event file (TF 1's shared writer); the options of the first one apply.

    Raises:
      ValueError: ``logdir`` is None or empty (TF: "logdir cannot be None").
    """
    del name
    if logdir is None or str(logdir) == "":
        raise ValueError("logdir cannot be None")
    return SummaryWriter(str(logdir), max_queue, flush_millis, filename_suffix)


def get_step() -> Any:
    """The thread's default summary step, or None (tf.summary.experimental.get_step)."""
    return _state.step


def set_step(step: Any) -> None:
    """Set the thread's default summary step (tf.summary.experimental.set_step).

    Args:
      step: an ``int64``-castable value, a traced int32/int64 scalar tensor,
        or None to unset.  A value is captured when a replicated computation
        is traced, as in a ``tf.function``.
    """
    _state.step = step


experimental = SimpleNamespace(get_step=get_step, set_step=set_step)
"""``xtpu.summary.experimental.get_step`` / ``set_step`` (TF's names)."""


def _located(e: ShapeError, op_name: str = SummaryScalarOp.name) -> ValueError:
    where = format_location(user_location())
    return ValueError(e.for_op(op_name) + (f" (at {where})" if where else ""))


def _operands(data: Any, step: Any) -> tuple[Any, list | None]:
    """The default writer and a summary op's operands: ``data``, the int64
    step (``get_step()`` when None) and, with several replicas, the
    replica id (replica 0 writes); ``(None, None)`` without a writer.

    Raises:
      ValueError: TF's "No step set" when neither ``step`` nor a default
        step is given.
    """
    writer = _state.writer
    if writer is None:
        return None, None
    if step is None:
        step = get_step()
    if step is None:
        raise ValueError(
            "No step set. Please specify one either through the `step` argument "
            "or through xtpu.summary.experimental.set_step()"
        )
    operands = [data, _as_step(step)]
    tr = current_trace()
    if tr is not None and tr.num_replicas > 1:
        operands.append(_replica_id())
    return writer, operands


def _as_step(step: Any) -> Any:
    """Integers become int64 (TF casts the step to int64); traced tensors and
    anything else go to the op's shape rule unchanged.  A variable (TF's
    ``step=optimizer.iterations``) is read where the summary is written."""
    step = read_if_variable(step)
    if isinstance(step, Tensor):
        return step
    arr = np.asarray(step)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    return convert(step)


def scalar(name: str, data: Any, step: Any = None, description: str | None = None) -> bool:
    """Write a scalar summary to the default writer (tf.summary.scalar).

    Args:
      name: the summary's tag.  tensorboardX replaces characters TensorBoard
        does not allow in tags with ``_``.
      data: a real numeric scalar: float32, float64, int32, int64 or bool,
        stored as float32.
      step: an ``int64``-castable step, or an int32/int64 scalar tensor;
        None uses :func:`get_step`.
      description: optional text TensorBoard shows with the plot.

    Returns:
      True when the summary was written (eagerly) or its op emitted (while
      tracing; at run time replica 0 writes it), False when there is no
      default writer (nothing is written).

    Raises:
      ValueError: ``data`` is not a numeric scalar (with the user's line),
        checked even without a writer as TF's ``assert_scalar`` is; a
        default writer exists but no step is given and none is set ("No
        step set. Please specify one ..."); ``step`` is not an integer
        scalar.
      TypeError: ``name`` is not a string.
    """
    if not isinstance(name, str):
        raise TypeError(f"summary name must be a string, got {type(name).__name__}")
    tag = name or "scalar_summary"  # TF's summary_scope default name
    if not isinstance(data, Tensor):
        data = to_numpy(data)  # no IR yet: nothing is emitted without a writer
    spec = spec_of(data)
    is_bool = spec.dtype == "bool"  # TF: tf.cast(data, tf.float32)
    try:
        SummaryScalarOp.check_data(TensorSpec(spec.shape, "float32") if is_bool else spec)
    except ShapeError as e:
        raise _located(e) from None
    if _state.writer is None:  # before the cast: nothing is emitted without a writer
        return False
    writer, operands = _operands(_cast(data, "float32") if is_bool else data, step)
    params: dict[str, Any] = {"tag": tag, "logdir": writer.logdir}
    if description:
        params["description"] = str(description)
    bind(SummaryScalarOp, operands, **params)
    return True


def histogram(
    name: str, data: Any, step: Any = None, buckets: int | None = None, description: str | None = None
) -> bool:
    """Write a histogram of ``data`` to the default writer (tf.summary.histogram).

    Args:
      name: the summary's tag.
      data: a numeric tensor of any shape (float32, float64, int32, int64;
        bool is cast to float32 as TF does).
      step: as for :func:`scalar`.
      buckets: the number of equal-width buckets between the data's min and
        max (default 30, TF 2's).
      description: optional text TensorBoard shows with the histogram.

    Returns:
      True when written (eagerly) or its op emitted (while tracing; replica 0
      writes at run time), False without a default writer.

    Raises:
      ValueError: a non-numeric ``data``, a non-positive ``buckets``, or no step
        (as :func:`scalar`).
      TypeError: ``name`` is not a string.
    """
    if not isinstance(name, str):
        raise TypeError(f"summary name must be a string, got {type(name).__name__}")
    data = read_if_variable(data)  # a variable's value where it is read (TF converts it)
    if not isinstance(data, Tensor):
        data = to_numpy(data)
    spec = spec_of(data)
    if spec.dtype == "bool":
        data = _cast(data, "float32")
    elif spec.dtype not in ("float32", "float64", "int32", "int64"):
        raise ValueError(f"histogram data must be numeric, got {spec}")
    buckets = DEFAULT_BUCKETS if buckets is None else int(buckets)
    if buckets < 1:
        raise ValueError(f"histogram buckets must be positive, got {buckets}")
    writer, operands = _operands(data, step)
    if writer is None:
        return False
    params: dict[str, Any] = {"tag": name or "histogram_summary", "logdir": writer.logdir, "buckets": buckets}
    if description:
        params["description"] = str(description)
    try:
        bind(SummaryHistogramOp, operands, **params)
    except ShapeError as e:
        raise _located(e, SummaryHistogramOp.name) from None
    return True


def _write(
    op_name: str,
    name: str,
    data: Any,
    step: Any,
    plugin: str,
    description: str | None,
    max_outputs: int | None = None,
    metadata: bytes | None = None,
) -> bool:
    """Emit (or run eagerly) ``hlo.summary_write`` for the default writer."""
    if not isinstance(name, str):
        raise TypeError(f"summary name must be a string, got {type(name).__name__}")
    data = read_if_variable(data)
    if not isinstance(data, Tensor):
        data = to_numpy(data)
    writer, operands = _operands(data, step)
    if writer is None:
        return False
    params: dict[str, Any] = {"tag": name or op_name, "logdir": writer.logdir, "plugin": plugin}
    if max_outputs is not None:
        params["max_outputs"] = int(max_outputs)
    if metadata:
        params["metadata"] = metadata.hex()
    if description:
        params["description"] = str(description)
    try:
        bind(SummaryWriteOp, operands, **params)
    except ShapeError as e:
        raise _located(e, f"xtpu.summary.{op_name}") from None
    return True


def image(name: str, data: Any, step: Any = None, max_outputs: int = 3, description: str | None = None) -> bool:
    """Write images to the default writer (tf.summary.image).

    Args:
      data: ``[k, h, w, c]`` with ``c`` 1 (grayscale), 3 (RGB) or 4 (RGBA);
        floats in [0, 1] or integers in [0, 255].
      max_outputs: how many of the ``k`` images to write (default 3).

    Returns / Raises: as :func:`scalar`; ValueError for another shape.
    """
    return _write("image", name, data, step, "images", description, max_outputs=max_outputs)


def text(name: str, data: Any, step: Any = None, description: str | None = None) -> bool:
    """Write a string tensor (any shape) to the default writer for
    TensorBoard's text plugin (tf.summary.text)."""
    return _write("text", name, data, step, "text", description)


def write(tag: str, tensor: Any, step: Any = None, metadata: Any = None, name: str | None = None) -> bool:
    """Write ``tensor`` under ``tag`` (tf.summary.write, the op the other
    summaries are built on); ``metadata`` is a ``SummaryMetadata`` protobuf
    or its serialized bytes."""
    if metadata is not None and not isinstance(metadata, (bytes, bytearray)):
        metadata = metadata.SerializeToString()
    return _write("write", tag, tensor, step, "", None, metadata=bytes(metadata) if metadata else None)


__all__ = [
    "SummaryWriter",
    "create_file_writer",
    "experimental",
    "get_step",
    "histogram",
    "image",
    "scalar",
    "set_step",
    "text",
    "write",
]


def trace_key() -> tuple:
    """What a traced program bakes in from the summary state: the default
    writer's logdir and a default step given as a Python number.  ``replicate``
    adds it to its cache key, so a program traced under one writer is not
    reused under another."""
    w, st = _state.writer, _state.step
    logdir = None if w is None else w.logdir
    step = int(st) if isinstance(st, (int, np.integer)) and not isinstance(st, bool) else None
    return (logdir, step)


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
