"""``xtpu.profiler``: a Chrome trace-event trace of compiles and runs.

``with xtpu.profiler.trace(logdir): ...`` (JAX's ``jax.profiler.trace``),
``start_trace(logdir)`` / ``stop_trace()``, or ``XTPU_PROFILE=dir`` for the
whole process; the file opens in Perfetto and chrome://tracing. See
``xtpu.runtime.profiler`` for what it records.
"""

from xtpu.runtime.profiler import is_tracing, start_trace, stop_trace, trace

__all__ = ["trace", "start_trace", "stop_trace", "is_tracing"]


def __dir__() -> list[str]:
    """The public names (``__all__``), nothing internal."""
    return sorted(__all__)
