"""xtpu registered with xDSL's plugin entry point (``xdsl.universe``):
xDSL's own ``xdsl-opt`` parses xtpu IR and runs xtpu's passes."""

import shutil
import subprocess

import numpy as np
import pytest
from xdsl.universe import Universe

import xtpu
from xtpu.dialects import DIALECTS
from xtpu.passes import ALL_PASSES


def test_the_multiverse_holds_xtpu_dialects_and_passes():
    multiverse = Universe.get_multiverse()
    for d in DIALECTS:
        assert multiverse.all_dialects[d.name]() is d
    for name, cls in ALL_PASSES.items():
        assert multiverse.all_passes[name]() is cls
    assert {"cse", "dce", "canonicalize"} <= set(multiverse.all_passes)  # xDSL's own are still there


@pytest.mark.skipif(shutil.which("xdsl-opt") is None, reason="xdsl-opt is not on PATH")
def test_xdsl_opt_parses_a_lowered_module_and_runs_an_xtpu_pass(tmp_path):
    def f(x):
        return xtpu.cross_replica_sum(x * 2.0, group_assignment=[[0, 2], [1, 3]])

    inputs = [[np.float32(r)] for r in range(4)]
    path = tmp_path / "lowered.mlir"
    path.write_text(xtpu.lower(f, inputs).as_text())
    p = subprocess.run(
        ["xdsl-opt", str(path), "-p", "tpu-lower-cross-replica-sum"], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    assert "tpu.cross_replica_sum" not in p.stdout
    assert (
        "ccl.all_reduce %5 applies add groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64> channel 1 : tensor<f32>"
        in p.stdout
    )
    # xtpu-opt, the same driver with xtpu's parser, prints the same module
    q = subprocess.run(
        ["xtpu-opt", str(path), "-p", "tpu-lower-cross-replica-sum"], capture_output=True, text=True, timeout=120
    )
    assert q.returncode == 0, q.stderr
    assert p.stdout == q.stdout
    # and the module xdsl-opt wrote runs: the sums over {0, 2} and {1, 3}
    out = tmp_path / "out.mlir"
    out.write_text(p.stdout)
    r = subprocess.run(
        ["xtpu-run", str(out), *sum((["-i", str(_save(tmp_path, i))] for i in range(4)), [])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    got = [float(line.split("= ")[1]) for line in r.stdout.splitlines() if "output 0" in line]
    assert got == [2.0 * (0 + 2), 2.0 * (1 + 3), 2.0 * (0 + 2), 2.0 * (1 + 3)]


def _save(d, i):
    path = d / f"x{i}.npy"
    np.save(path, np.float32(i))
    return path
