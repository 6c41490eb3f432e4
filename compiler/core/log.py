"""xtpu's logging: the standard :mod:`logging` module, logger ``xtpu``.

As a library, xtpu only adds a :class:`logging.NullHandler` to its logger;
an application configures logging as it likes (``logging.basicConfig``).
For users, ``XTPU_LOG=info`` or ``XTPU_LOG=debug`` (also ``warning``,
``error``) prints xtpu's records to stderr:

* ``info``: each trace and compile with its time (``xtpu.compile``), cache
  misses;
* ``debug``: also cache hits, each pass's time (``xtpu.passes``), worker
  threads started, each run's workers started and finished (or its
  replicas run in one thread: runtime/sequential.py), and the host
  workers of outside-compilation clusters started and stopped
  (``xtpu.runtime``).

``Compiled.stages.times`` keeps each pass's time beside its text.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

logger = logging.getLogger("xtpu")
logger.addHandler(logging.NullHandler())

_handler: logging.Handler | None = None


def configure_from_env(value: str | None = None) -> None:
    """Apply ``XTPU_LOG`` (or ``value``): a stderr handler on the ``xtpu``
    logger at that level; unset or empty leaves logging to the application.
    An unknown level is a warning naming the known ones."""
    global _handler
    value = (os.environ.get("XTPU_LOG", "") if value is None else value).strip().lower()
    if not value:
        return
    if value not in LEVELS:
        warnings.warn(f"XTPU_LOG={value!r} is not one of {', '.join(LEVELS)}; ignored", stacklevel=2)
        return
    if _handler is None:
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter("xtpu %(levelname)-5s %(relativeCreated)7.0f ms %(name)s: %(message)s"))
        logger.addHandler(_handler)
    logger.setLevel(LEVELS[value])


def describe(fn: object) -> str:
    """``name (file.py:LINE)`` of a computation, for log records (the
    user's function, not a wrapper that names it in ``xtpu_user_function``)."""
    fn = getattr(fn, "xtpu_user_function", fn)
    name = getattr(fn, "__name__", None) or type(fn).__name__
    code = getattr(fn, "__code__", None)
    if code is None:
        return name
    return f"{name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"


@contextmanager
def timed(log: logging.Logger, level: int, what: str) -> Iterator[dict]:
    """Log ``<what> in X ms`` at ``level`` when the block ends; the yielded
    dict's items are appended (``key=value``)."""
    extra: dict = {}
    if not log.isEnabledFor(level):
        yield extra
        return
    start = time.perf_counter()
    yield extra
    ms = (time.perf_counter() - start) * 1e3
    tail = "".join(f", {k}={v}" for k, v in extra.items())
    log.log(level, "%s in %.1f ms%s", what, ms, tail)


configure_from_env()
