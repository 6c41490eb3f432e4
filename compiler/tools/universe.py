"""xtpu as an xDSL plugin: the ``xdsl.universe`` entry point.

``pyproject.toml`` names :data:`XTPU_UNIVERSE` under
``[project.entry-points.'xdsl.universe']``, so xDSL's own tools
(``xdsl-opt``, ``xdsl-gui``) find the ``hlo``, ``tpu`` and ``ccl`` dialects
and every ``tpu-*`` / ``ccl-*`` pass with nothing else installed, the way
xDSL describes in :mod:`xdsl.universe`.  ``xtpu-opt`` is the same driver
with xtpu's help, parser (ops keep their ``file:line:col``) and checks.
"""

from __future__ import annotations

from xdsl.universe import Universe

from xtpu.dialects import DIALECTS
from xtpu.passes import ALL_PASSES


def _constant(value):
    return lambda: value


XTPU_UNIVERSE = Universe(
    all_dialects={d.name: _constant(d) for d in DIALECTS},
    all_passes={name: _constant(cls) for name, cls in ALL_PASSES.items()},
)
