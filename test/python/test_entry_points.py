"""Every entry point runs the same program to the same results.

``xtpu.replicate``, ``xtpu.lower(...).compile()(...)``, ``TPUStrategy.run``
and ``xtpu-run`` on ``lower(...).as_text()``, each with one core per replica
and with each replica split over 2 logical devices
(``DeviceAssignment.build(..., computation_shape=[1, 1, 1, 2])`` and
``split_to_logical_devices(x, [2, 1])``).
"""

import numpy as np
import pytest

import xtpu
from xtpu.tools.run import main as xtpu_run

R = 2


def device_assignment(cores: int, replicas: int = R):
    if cores == 1:
        return None
    return xtpu.DeviceAssignment.build(
        xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, cores], num_replicas=replicas
    )


def make_matmul(cores):
    def f(x, w):
        if cores > 1:
            x = xtpu.split_to_logical_devices(x, [2, 1])
        h = xtpu.math.tanh(x @ w)
        return xtpu.cross_replica_sum(h), xtpu.math.reduce_sum(h)

    return f


def make_host(cores):
    def f(x, w):
        if cores > 1:
            x = xtpu.split_to_logical_devices(x, [2, 1])
        y = x @ w
        s = xtpu.outside_compilation(lambda v: xtpu.math.reduce_max(v) * 2.0, y)
        return y + s

    return f


def make_groups(cores):
    def f(x, w):
        if cores > 1:
            x = xtpu.split_to_logical_devices(x, [2, 1])
        y = x * w[0]
        return xtpu.cross_replica_sum(y, group_assignment=[[1, 0]]) - xtpu.cross_replica_sum(y, [[0], [1]])

    return f


PROGRAMS = {"matmul": make_matmul, "outside_compilation": make_host, "groups": make_groups}


def inputs(replicas: int = R, n: int = 8):
    rng = np.random.default_rng(0)
    return [
        [rng.integers(-3, 4, (n, 4)).astype(np.float32), rng.integers(-3, 4, (4, 4)).astype(np.float32) / 4]
        for _ in range(replicas)
    ]


def flat(per_replica):
    """[replica][output] arrays from any entry point's result."""
    out = []
    for rep in per_replica:
        leaves = rep if isinstance(rep, (tuple, list)) else (rep,)
        out.append([np.asarray(v) for v in leaves])
    return out


def via_replicate(f, ins, da):
    return flat(xtpu.replicate(f, ins, device_assignment=da))


def via_compiled(f, ins, da):
    return flat(xtpu.lower(f, ins, device_assignment=da).compile()(ins))


def via_strategy(f, ins, da):
    strategy = xtpu.TPUStrategy(num_cores=len(ins)) if da is None else xtpu.TPUStrategy(device_assignment=da)
    args = tuple(xtpu.PerReplica([rep[i] for rep in ins]) for i in range(len(ins[0])))
    out = strategy.run(f, args=args)
    leaves = out if isinstance(out, tuple) else (out,)
    return [[np.asarray(v.values[r]) for v in leaves] for r in range(len(ins))]


def via_xtpu_run(f, ins, da, tmp_path):
    path = tmp_path / "program.mlir"
    path.write_text(xtpu.lower(f, ins, device_assignment=da).as_text())
    args = [str(path)]
    for r, rep in enumerate(ins):
        np.savez(tmp_path / f"replica{r}.npz", *rep)
        args += ["-i", str(tmp_path / f"replica{r}.npz")]
    saved = tmp_path / "out.npz"
    assert xtpu_run(args + ["--save", str(saved)]) == 0
    with np.load(saved) as z:
        m = sum(1 for k in z.files if k.startswith("replica0_"))
        return [[z[f"replica{r}_output{j}"] for j in range(m)] for r in range(len(ins))]


@pytest.mark.parametrize("program", sorted(PROGRAMS))
@pytest.mark.parametrize("cores", [1, 2])
def test_every_entry_point_gives_the_same_results(program, cores, tmp_path, capsys):
    f = PROGRAMS[program](cores)
    ins = inputs()
    da = device_assignment(cores)
    results = {
        "replicate": via_replicate(f, ins, da),
        "lower().compile()": via_compiled(f, ins, da),
        "TPUStrategy.run": via_strategy(f, ins, da),
        "xtpu-run": via_xtpu_run(f, ins, da, tmp_path),
    }
    capsys.readouterr()
    expected = results["replicate"]
    for name, got in results.items():
        assert len(got) == len(expected), name
        for r, (g, e) in enumerate(zip(got, expected)):
            assert len(g) == len(e), (name, r)
            for j, (a, b) in enumerate(zip(g, e)):
                assert a.dtype == b.dtype and a.shape == b.shape, (name, r, j)
                np.testing.assert_array_equal(a, b, err_msg=f"{name}, replica {r}, output {j}")


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_logical_devices_do_not_change_the_results(program):
    ins = inputs()
    one = via_compiled(PROGRAMS[program](1), ins, None)
    two = via_compiled(PROGRAMS[program](2), ins, device_assignment(2))
    for a, b in zip(one, two):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)


def test_a_compiled_program_over_logical_devices_can_be_called():
    """The issue's case: 1 replica over 2 cores, 64x64 inputs."""

    def f(x, w):
        return xtpu.split_to_logical_devices(x, [2, 1]) @ w

    rng = np.random.default_rng(1)
    ins = [[rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)]]
    da = device_assignment(2, replicas=1)
    compiled = xtpu.lower(f, ins, device_assignment=da).compile()
    assert compiled.signature.num_cores == 2
    (out,) = compiled(ins)
    np.testing.assert_array_equal(out[0], xtpu.replicate(f, ins, device_assignment=da)[0][0])
    np.testing.assert_allclose(out[0], ins[0][0] @ ins[0][1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda ins: ins[:1], "it was compiled for 2 replicas, got inputs for 1"),
        (lambda ins: [rep[:1] for rep in ins], "each replica takes 2 inputs, got 1"),
        (lambda ins: [[rep[0][:4], rep[1]] for rep in ins], "input 0 must be float32[8x4], got float32[4x4]"),
        (
            lambda ins: [[rep[0].astype(np.float64), rep[1]] for rep in ins],
            "input 0 must be float32[8x4], got float64[8x4]",
        ),
        (lambda ins: [[(rep[0], rep[1])] for rep in ins], "the inputs must have the structure [*, *], got [(*, *)]"),
    ],
)
def test_a_mismatch_says_what_differs(bad, message):
    compiled = xtpu.lower(make_matmul(2), inputs(), device_assignment=device_assignment(2)).compile()
    with pytest.raises(ValueError) as info:
        compiled(bad(inputs()))
    assert message in str(info.value)
    assert "got 2 replicas with" not in str(info.value)
