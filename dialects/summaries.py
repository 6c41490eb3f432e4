"""Process-wide TensorBoard event writers, one per log directory.

The kernel of ``hlo.summary_scalar`` (eagerly, and on the host workers of a
replicated program) and the :class:`xtpu.summary.SummaryWriter` objects of
the Python API meet here: a thread-safe table maps a log directory to one
writer of TFRecord event files, which TensorBoard reads.  The files, their
framing and the ``Event`` / ``Summary`` protocol buffers are tensorboardX's
(its public ``RecordWriter``, ``tensorboardX.summary.scalar`` /
``histogram``, and the generated ``tensorboardX.proto`` modules, whose path
``pyproject.toml`` pins by bounding tensorboardX to 2.6.x and
``test_summary.py`` checks); no record is framed by hand.

Buffering is TF's ``SummaryFileWriter``
(``tensorflow/core/summary/summary_file_writer.cc``): events wait in memory
and are written out, and the file flushed, when a write finds more than
``max_queue`` events waiting or more than ``flush_millis`` passed since the
last flush, and on :func:`flush` / :func:`release`.  (tensorboardX's own
``SummaryWriter`` hands events to a background thread whose queue its
``flush()`` does not drain, so a flushed file could still miss events.)

Keying by log directory is TF 1's shared summary writer
(``tf.compat.v1.summary.create_file_writer``: the resource's shared name is
``"logdir:" + logdir``, and a second writer for the same directory wraps the
first, its other arguments having no effect).  It is what lets a compiled
program, which carries only the directory in its ``logdir`` property, find
the writer the user created.

Lifetime: :func:`acquire` opens the writer (or shares the open one) and
counts a reference; :func:`release` drops it and flushes and closes the
writer when none is left.  A write to a directory with no open writer (a
program run after its writer was closed, or an ``.mlir`` file run by
``xtpu-run``) opens one with TF's defaults; such writers, like any still
open, are flushed and closed when the process exits.  Each writer gets a new
event file ``events.out.tfevents.<time>.<host>.<pid>.<n><suffix>``: the pid
and counter are TF's unique prefix (``create_file_writer_v2``), which keeps a
reopened writer from overwriting the file of one closed in the same second.

tensorboardX is imported on first use, so ``import xtpu`` does not pay for it.
"""

from __future__ import annotations

import atexit
import itertools
import os
import socket
import threading
import time
from typing import Any

from xtpu.dialects.tensor_spec import numpy_dtype

DEFAULT_MAX_QUEUE = 10
"""Events buffered before a flush (TF's default for ``max_queue``)."""

DEFAULT_FLUSH_MILLIS = 120_000
"""Longest time between flushes, in milliseconds (TF's ``flush_millis``)."""

DEFAULT_FILENAME_SUFFIX = ".v2"
"""Suffix of event file names (TF 2's ``filename_suffix`` default)."""


class _Writer:
    """One event file with TF's buffering; the caller holds ``_lock``.

    The file is TF's: named ``events.out.tfevents.<time>.<host><suffix>``
    (``EventsWriter`` in ``tensorflow/core/util/events_writer.cc``), TFRecord
    framing by tensorboardX's public ``RecordWriter``, a first event that
    names the format (``file_version = "brain.Event:2"``), then one
    serialized ``Event`` per record.
    """

    def __init__(self, logdir: str, max_queue: int, flush_millis: int, filename_suffix: str):
        from tensorboardX import RecordWriter
        from tensorboardX.proto.event_pb2 import Event

        if "://" not in logdir:
            # several processes (MPI ranks) may open the same logdir at once
            os.makedirs(logdir, exist_ok=True)
        suffix = f".{os.getpid()}.{next(_uid)}{filename_suffix}"
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}{suffix}"
        self.path: str = logdir.rstrip("/") + "/" + name if "://" in logdir else os.path.join(logdir, name)
        self.records = RecordWriter(self.path)
        self.max_queue = max_queue
        self.flush_millis = flush_millis
        self.queue: list[Any] = []
        self.last_flush = time.monotonic()
        self.refs = 0
        self.records.write(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        self.records.flush()  # the file exists from now on, as TF's does

    def write(self, event: Any) -> None:
        self.queue.append(event)
        if len(self.queue) > self.max_queue or (time.monotonic() - self.last_flush) * 1000 > self.flush_millis:
            self.flush()

    def flush(self) -> None:
        for event in self.queue:
            self.records.write(event.SerializeToString())
        self.queue.clear()
        self.records.flush()
        self.last_flush = time.monotonic()

    def close(self) -> None:
        self.flush()
        self.records.close()


_lock = threading.RLock()
_writers: dict[str, _Writer] = {}
_uid = itertools.count()
_atexit_registered = False


def _key(logdir: str) -> str:
    return os.path.abspath(os.path.expanduser(logdir))


def _open(key: str, max_queue: int | None, flush_millis: int | None, filename_suffix: str | None) -> _Writer:
    """The open writer of ``key``, opening it with these options if needed."""
    global _atexit_registered
    writer = _writers.get(key)
    if writer is None:
        if not _atexit_registered:
            atexit.register(close_all)
            _atexit_registered = True
        writer = _Writer(
            key,
            DEFAULT_MAX_QUEUE if max_queue is None else int(max_queue),
            DEFAULT_FLUSH_MILLIS if flush_millis is None else int(flush_millis),
            DEFAULT_FILENAME_SUFFIX if filename_suffix is None else str(filename_suffix),
        )
        _writers[key] = writer
    return writer


def acquire(
    logdir: str,
    max_queue: int | None = None,
    flush_millis: int | None = None,
    filename_suffix: str | None = None,
) -> str:
    """Open the writer of ``logdir`` (or share the open one); returns its key,
    the absolute path of ``logdir``.

    Args:
      logdir: the directory of the event files; created if missing.
      max_queue: events buffered before a flush (default 10).
      flush_millis: longest time between flushes in ms (default 120000),
        checked when an event is written.
      filename_suffix: suffix of the event file name (default ``.v2``).
      The options apply when this call opens the writer; a shared writer
      keeps its own (TF 1's shared-name rule).
    """
    key = _key(logdir)
    with _lock:
        _open(key, max_queue, flush_millis, filename_suffix).refs += 1
    return key


def release(logdir: str) -> None:
    """Drop one reference to the writer of ``logdir``; flush and close it when
    it was the last one.  Does nothing when no writer is open there."""
    key = _key(logdir)
    with _lock:
        writer = _writers.get(key)
        if writer is None:
            return
        writer.refs -= 1
        if writer.refs <= 0:
            del _writers[key]
            writer.close()


def write_scalar(logdir: str, tag: str, value: float, step: int, description: str | None = None) -> None:
    """Append a scalar event ``(tag, value, step)`` to the writer of ``logdir``
    (opened with the defaults if none is open).

    The value is stored as a float32 ``simple_value`` (TF 2's scalar summary
    casts to float32 too).  tensorboardX replaces characters TensorBoard does
    not allow in a tag by ``_`` and drops leading slashes.
    """
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.summary import scalar

    summary = scalar(tag, float(value), summary_description=description or "")
    for v in summary.value:
        if v.HasField("metadata"):  # a description: name the plugin, as TF's scalar metadata does
            v.metadata.plugin_data.plugin_name = "scalars"
    event = Event(wall_time=time.time(), step=int(step), summary=summary)
    key = _key(logdir)
    with _lock:
        _open(key, None, None, None).write(event)


def flush(logdir: str | None = None) -> None:
    """Write the buffered events of ``logdir``'s writer (every writer when
    None) to disk.  Does nothing for a directory with no open writer."""
    with _lock:
        if logdir is None:
            writers = list(_writers.values())
        else:
            writer = _writers.get(_key(logdir))
            writers = [] if writer is None else [writer]
        for writer in writers:
            writer.flush()


def event_file(logdir: str) -> str | None:
    """The path of the event file ``logdir``'s open writer writes, or None."""
    with _lock:
        writer = _writers.get(_key(logdir))
        return None if writer is None else writer.path


def close_all() -> None:
    """Flush and close every writer (run at process exit)."""
    with _lock:
        writers = list(_writers.values())
        _writers.clear()
        for writer in writers:
            writer.close()


def write_histogram(logdir: str, tag: str, values, step: int, buckets: int, description: str | None = None) -> None:
    """Append a histogram event of ``values`` (any shape, flattened, as
    float64) with ``buckets`` equal-width buckets between their min and max
    (TF 2's histogram summary; one bucket when they are all equal) to the
    writer of ``logdir``.  The ``HistogramProto`` is tensorboardX's
    (``tensorboardX.summary.histogram``); empty data gives an empty
    histogram, as TF's does."""
    import numpy as np
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.summary_pb2 import HistogramProto, Summary, SummaryMetadata
    from tensorboardX.summary import histogram

    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.size == 0:
        summary = Summary(value=[Summary.Value(tag=tag, histo=HistogramProto())])
    else:
        lo, hi = float(values.min()), float(values.max())
        bins = buckets if hi > lo else 1
        summary = histogram(tag, values, bins=bins)
    if description:
        for v in summary.value:
            v.metadata.CopyFrom(SummaryMetadata(summary_description=description))
            v.metadata.plugin_data.plugin_name = "histograms"
    event = Event(wall_time=time.time(), step=int(step), summary=summary)
    key = _key(logdir)
    with _lock:
        _open(key, None, None, None).write(event)


_TF_DTYPES = {
    "float32": "DT_FLOAT",
    "float64": "DT_DOUBLE",
    "int32": "DT_INT32",
    "int64": "DT_INT64",
    "bool": "DT_BOOL",
    "bfloat16": "DT_BFLOAT16",
    "float16": "DT_HALF",
    "int8": "DT_INT8",
    "int16": "DT_INT16",
    "uint8": "DT_UINT8",
    "uint16": "DT_UINT16",
    "uint32": "DT_UINT32",
    "uint64": "DT_UINT64",
}


def write_tensor(
    logdir: str,
    tag: str,
    value,
    step: int,
    plugin: str = "",
    metadata: bytes | None = None,
    description: str | None = None,
) -> None:
    """Append a tensor summary (TF 2's ``WriteSummary``) of ``value`` under
    ``tag`` to the writer of ``logdir``: numeric arrays as ``tensor_content``
    (little-endian), strings / bytes as ``string_val``; the metadata is the
    serialized ``SummaryMetadata`` given, else one naming ``plugin`` (the
    text plugin's content is its ``TextPluginData``)."""
    import numpy as np
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboardX.proto.tensor_pb2 import TensorProto
    from tensorboardX.proto.tensor_shape_pb2 import TensorShapeProto

    arr = np.asarray(value)
    shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=int(d)) for d in arr.shape])
    if arr.dtype.kind in "OUS":
        strings = [s if isinstance(s, bytes) else str(s).encode("utf-8") for s in arr.reshape(-1)]
        tensor = TensorProto(dtype="DT_STRING", tensor_shape=shape, string_val=strings)
    else:
        name = arr.dtype.name if arr.dtype.name in _TF_DTYPES else "float32"
        data = np.ascontiguousarray(arr, dtype=numpy_dtype(name)).astype(numpy_dtype(name).newbyteorder("<")).tobytes()
        tensor = TensorProto(dtype=_TF_DTYPES[name], tensor_shape=shape, tensor_content=data)
    if metadata is not None:
        meta = SummaryMetadata.FromString(metadata)
    else:
        meta = SummaryMetadata()
        if plugin:
            meta.plugin_data.plugin_name = plugin
            if plugin == "text":
                from tensorboardX.proto.plugin_text_pb2 import TextPluginData

                meta.plugin_data.content = TextPluginData(version=0).SerializeToString()
    if description:
        meta.summary_description = description
    summary = Summary(value=[Summary.Value(tag=tag, tensor=tensor, metadata=meta)])
    event = Event(wall_time=time.time(), step=int(step), summary=summary)
    key = _key(logdir)
    with _lock:
        _open(key, None, None, None).write(event)
