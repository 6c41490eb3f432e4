"""benchmarks/jax_compare.py's slice (``--quick``): both sides run, check
their results against numpy, and the table has a ratio on every row."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quick_side_by_side_prints_a_ratio_for_every_workload():
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "jax_compare.py"),
            "--quick",
            "--rounds",
            "1",
            "--repeats",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {
        m[0]: m[1]
        for m in re.findall(r"^  (\S.*?\S)\s{2,}\S+ \S+\s+\S+ \S+\s+(\d+\.\d+(?:e[-+]\d+)?)\s", proc.stdout, re.M)
    }
    expected = [f"mlp 64x256 R={r}" for r in (1, 2, 8)] + [f"crs 1e6 R={r}" for r in (1, 2, 8)]
    expected += ["host round trip", "compile", "rss"]
    assert sorted(rows) == sorted(expected), proc.stdout
    assert all(float(v) > 0 for v in rows.values())
