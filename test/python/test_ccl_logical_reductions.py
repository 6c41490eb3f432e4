"""``ccl.all_reduce`` / ``ccl.reduce_scatter`` applying ``and`` / ``or``
(issue 25, item 12): the parser and verifier accepted them and no runtime
kernel ran them.  Semantics: StableHLO's ``and`` / ``or`` (bitwise on
integers, logical on booleans); the reference is numpy's bitwise_and /
bitwise_or reduced over the group."""

import numpy as np
import pytest

from xtpu.runtime.communicator import REDUCTIONS, ThreadCommunicator
from xtpu.runtime.workers import AbortSignal, run_workers
from xtpu.tools.run import main as xtpu_run

N = 4
MODULE = """func.func @main({args}) -> ({results}) {{
  %r:{n} = tpu.replicate([{operands}] as %x: {t}) {{n = {n} : i64}} {{
    %y = ccl.all_reduce %x applies {kind} groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64> : {t}
    %s = ccl.reduce_scatter %x applies {kind} dim = 0 groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64> : ({t}) -> {ts}
    tpu.yield %y, %s : {t}, {ts}
  }}
  func.return {rets} : {results}
}}
"""
UFUNC = {"and": np.bitwise_and, "or": np.bitwise_or}


def _inputs(dtype):
    rng = np.random.default_rng(25)
    if dtype == "i1":
        return [rng.random(8) < 0.5 for _ in range(N)]
    return [rng.integers(-(2**31), 2**31 - 1, 8, dtype=np.int32) for _ in range(N)]


@pytest.mark.parametrize("threads", ["1", "2"])  # sequential mode and one thread per replica
@pytest.mark.parametrize("dtype", ["i32", "i1"])
@pytest.mark.parametrize("kind", ["and", "or"])
def test_all_reduce_and_reduce_scatter_run_and_or(tmp_path, capsys, monkeypatch, kind, dtype, threads):
    monkeypatch.setenv("XTPU_INTER_OP_THREADS", threads)
    t, ts = f"tensor<8x{dtype}>", f"tensor<2x{dtype}>"
    text = MODULE.format(
        args=", ".join(f"%a{r}: {t}" for r in range(N)),
        results=", ".join([t] * N + [ts] * N),  # tpu.replicate's results: each output for every replica
        operands=", ".join(f"%a{r}" for r in range(N)),
        rets=", ".join(f"%r#{i}" for i in range(2 * N)),
        n=N,
        t=t,
        ts=ts,
        kind=kind,
    ).replace(f"%r:{N} =", f"%r:{2 * N} =")
    path = tmp_path / "m.mlir"
    path.write_text(text)
    xs = _inputs(dtype)
    args = []
    for r, x in enumerate(xs):
        np.save(tmp_path / f"x{r}.npy", x)
        args += ["-i", str(tmp_path / f"x{r}.npy")]
    out = tmp_path / "out.npz"
    assert xtpu_run([str(path), *args, "--save", str(out)]) == 0, capsys.readouterr().err
    uf = UFUNC[kind]
    pair = [uf.reduce(xs[0:2]), uf.reduce(xs[2:4])]
    whole = uf.reduce(xs)
    with np.load(out) as got:
        for r in range(N):
            np.testing.assert_array_equal(got[f"replica{r}_output0"], pair[r // 2])
            np.testing.assert_array_equal(got[f"replica{r}_output1"], whole[2 * r : 2 * r + 2])
            assert got[f"replica{r}_output0"].dtype == xs[0].dtype


def test_the_communicator_reduces_every_kind_the_ir_parses():
    from xtpu.dialects.hlo import ReductionKind

    assert set(REDUCTIONS) == {k.value for k in ReductionKind}
    sig = AbortSignal()
    comm = ThreadCommunicator(2, sig, timeout=5.0)
    xs = [np.array([0b1100, 0b1010], np.int64), np.array([0b0110, 0b0011], np.int64)]
    got = run_workers([(f"r{r}", (lambda r=r: comm.all_reduce(r, xs[r], None, "and"))) for r in range(2)], sig)
    np.testing.assert_array_equal(got[0], [0b0100, 0b0010])
