"""The tracer core: what every part of xtpu's API is written with.

Holds the tracer (:mod:`~xtpu.core.tracing`: ``Tensor``, ``Trace``,
``bind``, source locations), eager values (:mod:`~xtpu.core.eager`:
``EagerTensor``), pytrees, the pass pipeline over IR text
(:mod:`~xtpu.core.pipeline`), logging and the GC pause of the compile path.

Layer: above the IR and the runtime. May import ``xtpu.dialects``,
``xtpu.passes`` and ``xtpu.runtime``; never the rooms above it (``ops``,
``autodiff``, ``replication``, ``distribute``, ``train``, ``tools``) nor
the ``xtpu`` namespace.  The import-linter contract in pyproject.toml
checks it.
"""

__all__: list[str] = []
