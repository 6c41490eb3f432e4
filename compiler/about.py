"""xtpu's version and the xDSL it runs on (``import xtpu`` loads this alone).

The version is the installed distribution's (``pyproject.toml``), read with
:mod:`importlib.metadata`, so it is written in one place.
"""

from __future__ import annotations

from importlib import metadata


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown"


__version__: str = _version("xtpu")
XDSL_VERSION: str = _version("xdsl")


def version_line(tool: str) -> str:
    """``<tool> <xtpu version> (xDSL <xdsl version>)``, what ``--version`` prints."""
    return f"{tool} {__version__} (xDSL {XDSL_VERSION})"


__all__ = ["__version__", "XDSL_VERSION", "version_line"]
