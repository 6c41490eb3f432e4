"""Host-side string kernels: TF's tensor formatting, number parsing, printing.

Formatting follows ``tf.strings.format`` and ``tf.print``: a scalar shows its
value (floats in shortest form, ``2.0`` as ``2``), a tensor shows nested
brackets with elements separated by spaces, and only the first and last
``summarize`` elements of each dimension, with ``...`` between.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

# One lock per stream, so that lines written by several workers do not
# interleave. A write blocked on one stream (a FIFO nobody reads) must not
# block writes to the others, and a file is opened (which blocks on a FIFO
# until a reader comes) before its lock is taken.
_locks_lock = threading.Lock()
_stream_locks: dict[str, threading.Lock] = {}


def _lock_of(stream: str) -> threading.Lock:
    lock = _stream_locks.get(stream)
    if lock is None:
        with _locks_lock:
            lock = _stream_locks.setdefault(stream, threading.Lock())
    return lock


def _scalar(v) -> str:
    if isinstance(v, (bytes, bytearray)):
        return v.decode()
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (float, np.floating)):
        s = str(v)
        return s[:-2] if s.endswith(".0") else s
    return str(v)


def _quoted(v) -> str:
    return f'"{_scalar(v)}"' if isinstance(v, (str, bytes)) else _scalar(v)


def format_value(x, summarize: int = 3) -> str:
    """TF's text form of a tensor (``tf.print`` / ``tf.strings.format``).

    Args:
      x: a numpy array or scalar of any xtpu dtype.
      summarize: elements shown at each end of every dimension; -1 shows all.
    """
    arr = np.asarray(x)
    if arr.ndim == 0:
        return _scalar(arr[()])
    return _format_nd(arr, summarize, 1)


def _format_nd(arr: np.ndarray, summarize: int, depth: int) -> str:
    n = arr.shape[0]
    if summarize >= 0 and n > 2 * summarize:
        idx = list(range(summarize)) + [None] + list(range(n - summarize, n))
    else:
        idx = list(range(n))
    if arr.ndim == 1:
        parts = ["..." if i is None else _quoted(arr[i]) for i in idx]
        return "[" + " ".join(parts) + "]"
    sep = "\n" * (arr.ndim - 1) + " " * depth
    parts = ["..." if i is None else _format_nd(arr[i], summarize, depth + 1) for i in idx]
    return "[" + sep.join(parts) + "]"


def format_template(template: str, values, summarize: int = 3) -> str:
    """Replace each ``{}`` of ``template`` by the next value's text form."""
    pieces = template.split("{}")
    out = [pieces[0]]
    for value, piece in zip(values, pieces[1:]):
        out.append(format_value(value, summarize))
        out.append(piece)
    return "".join(out)


def to_number(x, dtype: np.dtype) -> np.ndarray:
    """Parse every string of ``x`` as a number of ``dtype``.

    Raises:
      ValueError: a string is not a number, or an integer out of the range
        of ``dtype``, in TF's words ("StringToNumberOp could not correctly
        convert string: ...").
    """
    arr = np.asarray(x, dtype=object)
    out = np.empty(arr.shape, dtype=dtype)
    flat_in, flat_out = arr.reshape(-1), out.reshape(-1)
    for i, s in enumerate(flat_in):
        text = s.decode() if isinstance(s, bytes) else str(s)
        try:
            # Python's int() and float() also take digit separators ("1_000"),
            # TF's parsers (safe_strto32 / safe_strtod) do not.
            if "_" in text:
                raise ValueError(text)
            if dtype.kind in "iu":
                value = int(text, 10)
                info = np.iinfo(dtype)
                if not info.min <= value <= info.max:
                    raise ValueError(text)  # TF: out of range fails to convert
            else:
                value = float(text)
            flat_out[i] = value
        except ValueError:
            raise ValueError(f"StringToNumberOp could not correctly convert string: {text}") from None
    return out


def check_stream(stream: str) -> None:
    """ValueError unless ``stream`` is ``stdout``, ``stderr`` or ``file://PATH``."""
    if stream in ("stdout", "stderr") or stream.startswith("file://"):
        return
    raise ValueError(f"output_stream must be sys.stdout, sys.stderr or a 'file://PATH' string, got {stream!r}")


def write(stream: str, text: str) -> None:
    """Write ``text`` to a stream named as in :func:`check_stream`."""
    if stream in ("stdout", "stderr"):
        out = sys.stdout if stream == "stdout" else sys.stderr
        with _lock_of(stream):
            out.write(text)
            out.flush()
        return
    with open(stream[len("file://") :], "a", encoding="utf-8") as f:
        with _lock_of(stream):
            f.write(text)
            f.flush()
