"""``python -m xtpu``: version, dialects, passes, pipelines and backends."""

import argparse

from xtpu.about import version_line
from xtpu.dialects import DIALECTS
from xtpu.passes import ALL_PASSES, DEFAULT_PIPELINE, FUSION_PIPELINE, SPMD_PIPELINE


def backends() -> list[str]:
    """The runtime backends: ``threads`` always, ``mpi`` when mpi4py can load an MPI library."""
    names = ["threads"]
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return names
    return names + ["mpi"]


def info() -> str:
    """What ``python -m xtpu`` prints: version, dialects with their op
    counts, passes and pipelines, backends."""
    lines = [version_line("xtpu"), ""]
    lines.append("dialects:")
    for d in DIALECTS:
        lines.append(f"  {d.name:<5} {len(list(d.operations))} ops")
    lines.append("passes:")
    lines += [f"  {name}" for name in ALL_PASSES]
    lines.append("pipelines:")
    lines.append("  default: " + ",".join(DEFAULT_PIPELINE))
    lines.append("  logical devices (appended): " + ",".join(SPMD_PIPELINE))
    lines.append("  last: " + ",".join(FUSION_PIPELINE))
    lines.append("backends: " + ", ".join(backends()) + " (XTPU_BACKEND)")
    lines.append("docs: docs/ops.md (op reference), docs/passes/ (one page per pass), README.md")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m xtpu", description=__doc__)
    ap.add_argument("--version", action="version", version=version_line("xtpu"))
    ap.parse_args(argv)
    print(info())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
