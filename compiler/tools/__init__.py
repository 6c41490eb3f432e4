"""The command-line tools: ``xtpu-opt`` (:mod:`~xtpu.tools.opt`),
``xtpu-run`` (:mod:`~xtpu.tools.run`), ``python -m xtpu.tools.launch``
(a local MPI pool), the docs generator (:mod:`~xtpu.tools.docgen`) and the
xDSL plugin entry point (:mod:`~xtpu.tools.universe`).

Layer: the top, beside the ``xtpu`` namespace. May import every room below.
"""

__all__: list[str] = []
