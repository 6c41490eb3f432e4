"""The command-line tools as a user meets them, each run as a subprocess:
``xtpu-opt --help`` / ``--version`` / ``--list-passes``, ``xtpu-run``'s
output and input messages, ``python -m xtpu``."""

import os
import subprocess
import sys
from importlib import metadata

import numpy as np
import pytest

import xtpu
from xtpu.passes import ALL_PASSES, DEFAULT_PIPELINE

XTPU = metadata.version("xtpu")
XDSL = metadata.version("xdsl")


def run(*argv, cwd=None, **kwargs):
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=120, **kwargs)


@pytest.fixture(scope="module")
def opt_help():
    p = run("xtpu-opt", "--help")
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_opt_help_lists_xtpu_passes_and_pipelines_before_anything_of_xdsl(opt_help):
    first_xdsl = opt_help.index("positional arguments:")
    for name in ALL_PASSES:
        assert -1 < opt_help.find(f"  {name}") < first_xdsl, name
    assert "-p " + ",".join(DEFAULT_PIPELINE) in opt_help[:first_xdsl]
    # xDSL's ~130 pass names are not in the help any more ...
    for other in ("convert-arith-to-riscv", "csl-stencil-to-csl-wrapper", "convert-ptr-to-x86"):
        assert other not in opt_help
    # ... but named as available, and listed on request, xtpu's first
    assert "canonicalize, cse, dce" in opt_help
    listed = run("xtpu-opt", "--list-passes").stdout.split()
    assert listed[: len(ALL_PASSES)] == list(ALL_PASSES)
    assert {"cse", "dce", "canonicalize", "convert-arith-to-riscv"} <= set(listed)


def test_opt_help_gives_each_pass_summary_whole(opt_help):
    from xtpu.tools.opt import pass_summary

    text = " ".join(opt_help.split())
    for cls in ALL_PASSES.values():
        summary = pass_summary(cls)
        assert summary.endswith("."), (cls.name, summary)
        assert summary in text, cls.name
    # the two that used to stop mid-sentence
    assert "before and after the device program." in text
    assert "(XLA's AllReduceCombiner; TF's batch all-reduce)." in text


def test_opt_still_runs_xdsl_generic_passes_after_xtpu_ones(tmp_path):
    def f(x):
        return xtpu.cross_replica_sum(x) + xtpu.cross_replica_sum(x)

    path = tmp_path / "m.mlir"
    path.write_text(xtpu.lower(f, [[np.float32(1)], [np.float32(2)]]).as_text())
    p = run("xtpu-opt", str(path), "-p", "tpu-lower-cross-replica-sum,cse")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("ccl.all_reduce") == 2 and "tpu.cross_replica_sum" not in p.stdout


@pytest.mark.parametrize(
    "argv, tool",
    [
        (["xtpu-opt", "--version"], "xtpu-opt"),
        (["xtpu-run", "--version"], "xtpu-run"),
        ([sys.executable, "-m", "xtpu", "--version"], "xtpu"),
    ],
)
def test_version_names_xtpu_and_xdsl(argv, tool):
    p = run(*argv)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"{tool} {XTPU} (xDSL {XDSL})"
    assert xtpu.__version__ == XTPU


def test_python_dash_m_xtpu_summarises_the_installation():
    p = run(sys.executable, "-m", "xtpu")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith(f"xtpu {XTPU} (xDSL {XDSL})\n")
    from xtpu.dialects import DIALECTS

    for d in DIALECTS:
        assert f"  {d.name:<5} {len(list(d.operations))} ops" in out
    for name in ALL_PASSES:
        assert f"\n  {name}\n" in out
    assert "default: " + ",".join(DEFAULT_PIPELINE) in out
    assert "backends: threads" in out


@pytest.fixture
def matmul_module(tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = np.arange(6, dtype=np.float32).reshape(3, 2) - 2

    def f(x, w):
        return x @ w

    (tmp_path / "mm.mlir").write_text(xtpu.lower(f, [[x, w]]).as_text())
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w)
    return tmp_path, x @ w


def test_run_prints_2d_outputs_with_rows_aligned(matmul_module):
    d, expected = matmul_module
    p = run("xtpu-run", "mm.mlir", "-i", "x.npy,w.npy", cwd=d)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    head = "  output 0: float32[2x2] = "
    assert lines[0] == "replica 0:"
    assert lines[1].startswith(head + "[[")
    assert lines[2].startswith(" " * len(head) + " [") and lines[2].endswith("]]")
    rows = [[float(v) for v in line.replace(head, "").strip(" [],").split(",")] for line in lines[1:3]]
    np.testing.assert_array_equal(rows, expected)


def test_run_accepts_spaces_around_the_commas_of_an_input_list(matmul_module):
    d, expected = matmul_module
    p = run("xtpu-run", "mm.mlir", "-i", "x.npy, w.npy", "--save", "out.npz", cwd=d)
    assert p.returncode == 0, p.stderr
    with np.load(d / "out.npz") as saved:
        np.testing.assert_array_equal(saved["replica0_output0"], expected)


def test_run_spells_shapes_one_way_in_a_mismatch(matmul_module):
    d, _ = matmul_module
    np.save(d / "big.npy", np.zeros((3, 3), np.float32))
    p = run("xtpu-run", "mm.mlir", "-i", "big.npy,w.npy", cwd=d)
    assert p.returncode == 1
    assert p.stderr.strip() == "xtpu-run: input 0 of replica 0 must be float32[2x3], got float32[3x3]"


def test_run_names_a_text_file_with_an_npy_name_as_not_numpy(matmul_module):
    d, _ = matmul_module
    (d / "t.npy").write_text("1 2 3\n")
    (d / "t.npz").write_text("1 2 3\n")
    p = run("xtpu-run", "mm.mlir", "-i", "t.npy,w.npy", cwd=d)
    assert p.returncode == 1
    assert p.stderr.strip() == (
        "xtpu-run: cannot read t.npy: the file is not in NumPy's format; .npy files are written by numpy.save"
    )
    assert "pickle" not in p.stderr
    p = run("xtpu-run", "mm.mlir", "-i", "t.npz", cwd=d)
    assert p.returncode == 1 and "cannot read t.npz: the file is not in NumPy's format" in p.stderr


def test_run_into_a_closed_pipe_exits_quietly(matmul_module):
    d, _ = matmul_module
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head -0`: the reader is gone before the first line
    try:
        p = subprocess.run(
            ["xtpu-run", "mm.mlir", "-i", "x.npy,w.npy"],
            cwd=d,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert p.returncode == 0
    assert p.stderr == ""


def test_run_piped_into_head_prints_the_first_lines_without_a_traceback(matmul_module):
    d, _ = matmul_module
    p = subprocess.run(
        "xtpu-run mm.mlir -i x.npy,w.npy | head -1", shell=True, cwd=d, capture_output=True, text=True, timeout=120
    )
    assert p.stdout == "replica 0:\n"
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr
