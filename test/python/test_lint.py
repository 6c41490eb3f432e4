"""The tree passes ruff's lint rules and is formatted by ruff
(``[tool.ruff]`` in pyproject.toml), as the test command checks."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check_passes():
    proc = ruff("check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_check_passes():
    proc = ruff("format", "--check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_finds_what_it_is_configured_to_find(tmp_path):
    """The configuration is read: an unused import and an unsorted import
    block fail the check."""
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport os\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "F401" in proc.stdout and "I001" in proc.stdout
