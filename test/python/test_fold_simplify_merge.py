"""Issue 31: host clusters of constants fold, simplification comes before
head/tail extraction, and a cluster that needs no device value joins the
cluster it reads from.

Values: each program against its eager run (replica by replica), and the
gradients against numpy's closed form.  Structure: against TF's bridge run
on the same programs (``test/data/tf_bridge/summary.json``, made by
``test/data/tf_bridge/generate.py`` with TensorFlow 2.21).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import xtpu
from xtpu.dialects import tpu
from xtpu.replication.program import lower
from xtpu.runtime.errors import HostComputeError

TF_BRIDGE = json.loads((Path(__file__).parent.parent / "data" / "tf_bridge" / "summary.json").read_text())


def computation_with_string_ops(x):
    output = xtpu.strings.format("1{}", x)
    return xtpu.strings.to_number(output)


def seed_string_example():
    return xtpu.outside_compilation(computation_with_string_ops, 1)


def constant_cluster():
    return xtpu.outside_compilation(lambda v: v * 3.0 + 1.0, xtpu.constant(2.0))


def _gradient(scale: bool):
    def f(x, w):
        h = x * 0.5 if scale else x
        y = xtpu.math.reduce_sum(xtpu.outside_compilation(lambda v: xtpu.math.exp(v) * 2.0, h) * w)
        return xtpu.gradients(y, [x], colocate_gradients_with_ops=True)

    return f


gradient_cluster_in_the_head = _gradient(False)
gradient_cluster_with_a_device_input = _gradient(True)


def host_code(module) -> list[str]:
    """The host parts of a compiled module: host functions and host replicates."""
    out = []
    for op in module.walk():
        if isinstance(op, tpu.ReplicateOp) and op.on_host:
            out.append("host replicate")
        elif op.name == "func.func" and op.sym_name.data.startswith("host_"):
            out.append(op.sym_name.data)
    return out


def transfers(module) -> tuple[list[int], list[int]]:
    """Values carried by each tpu.send_to_host and each tpu.recv_from_host."""
    sends = [len(o.inputs) for o in module.walk() if isinstance(o, tpu.SendToHostOp)]
    recvs = [len(o.results) for o in module.walk() if isinstance(o, tpu.RecvFromHostOp)]
    return sends, recvs


@pytest.mark.parametrize("n", [1, 2, 8])
@pytest.mark.parametrize(("f", "want"), [(seed_string_example, 11.0), (constant_cluster, 7.0)])
def test_constant_clusters_compile_to_constants(f, want, n):
    inputs = [[] for _ in range(n)]
    module = lower(f, inputs).compile().module
    assert host_code(module) == []
    assert transfers(module) == ([], [])
    eager = float(np.asarray(f()))
    assert eager == want
    got = xtpu.replicate(f, inputs)
    assert [np.asarray(g[0]).tolist() for g in got] == [want] * n
    assert all(np.asarray(g[0]).dtype == np.float32 for g in got)
    # TF's bridge folds them to the same device constant, with no host code.
    tf = TF_BRIDGE[f.__name__]
    assert tf["host_launches"] == 0 and tf["host_computes"] == []
    assert [float(c) for c in tf["device_constants"]] == [want]


def _inputs(n):
    rng = np.random.default_rng(31)
    return [[rng.normal(size=3).astype(np.float32), rng.normal(size=3).astype(np.float32)] for _ in range(n)]


@pytest.mark.parametrize("n", [1, 2, 8])
@pytest.mark.parametrize("f", [gradient_cluster_in_the_head, gradient_cluster_with_a_device_input])
def test_gradient_values(f, n):
    inputs = _inputs(n)
    got = xtpu.replicate(f, inputs)
    for (x, w), (g,) in zip(inputs, got, strict=True):
        if f is gradient_cluster_in_the_head:
            want = 2.0 * np.exp(x.astype(np.float64)) * w
        else:
            want = 0.5 * 2.0 * np.exp(0.5 * x.astype(np.float64)) * w
        np.testing.assert_allclose(g, want, rtol=1e-6)


def test_gradient_cluster_runs_in_the_head():
    module = lower(gradient_cluster_in_the_head, _inputs(2)).compile().module
    assert transfers(module) == ([], [])
    assert host_code(module) == ["host replicate"]
    (head,) = [o for o in module.walk() if isinstance(o, tpu.ReplicateOp) and o.on_host]
    assert head.attributes[tpu.CLUSTER_ATTR].data == "0,0.uid"
    # No device program is left to run.
    assert not [o for o in module.walk() if isinstance(o, tpu.ReplicateOp) and not o.on_host]
    assert TF_BRIDGE["gradient_cluster_in_the_head"]["host_computes"] == []


def test_gradient_cluster_joins_the_forward_cluster():
    module = lower(gradient_cluster_with_a_device_input, _inputs(2)).compile().module
    sends, recvs = transfers(module)
    assert (sends, recvs) == ([1], [1])
    tf = TF_BRIDGE["gradient_cluster_with_a_device_input"]["host_computes"]
    assert sum(sends) <= sum(c["sent"] for c in tf) and len(sends) <= sum(1 for c in tf if c["sent"])
    assert sum(recvs) <= sum(c["received"] for c in tf) and len(recvs) <= sum(1 for c in tf if c["received"])


def test_a_folding_op_that_raises_is_reported_by_the_run():
    def f():
        return xtpu.outside_compilation(lambda: xtpu.strings.to_number(xtpu.constant("one")))

    module = lower(f, [[]]).compile().module
    assert any(o.name == "hlo.string_to_number" for o in module.walk())
    with pytest.raises(
        HostComputeError, match=r"replica 0, op hlo.string_to_number, cluster '0' .*convert string: one"
    ):
        xtpu.replicate(f, [[]])


def test_a_print_of_constants_still_prints_every_call(capsys):
    def f():
        xtpu.outside_compilation(lambda: xtpu.print(xtpu.strings.format("k={}", xtpu.constant(3))))
        return xtpu.constant(1.0)

    for _ in range(2):
        xtpu.replicate(f, [[], []])
    assert capsys.readouterr().out.count("k=3") == 4
