"""Convolution and pooling split over logical devices (tpu-propagate-sharding,
tpu-spmd-partition with passes/spmd_windowed.py): the seed's example made real.

* The seed's image ``[batch, width, height, channel]`` split ``[1, 2, 4, 1]``
  over the 8 logical devices of one replica feeds two 3x3 convolutions (and
  a 2x2 max pool): the values equal the unsplit program's, the partitioned
  IR exchanges halos (``ccl.collective_permute``, no ``ccl.all_gather``),
  and one core receives no more bytes than XLA's SPMD partitioner makes it
  receive for the same program (JAX on 8 CPU devices, run in a subprocess).
* A CNN training step (conv, pool, conv, dense head, SGD) on the split image
  for three steps equals the unsplit run.
* Strided, SAME, depthwise, transposed convolutions and pooling with their
  gradients, split, against the eager values.
* The bytes per core of the lit cases of tpu-spmd-partition-windows.mlir.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from xdsl.parser import Parser

import xtpu
from xtpu.dialects import make_context
from xtpu.passes.spmd_cost import bytes_per_core, collective_costs
from xtpu.pipeline import parse_pipeline, run_pipeline

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cnn_programs as cnn  # noqa: E402


@pytest.fixture(scope="module")
def da():
    return cnn.device_assignment()


@pytest.fixture(scope="module")
def xla_bytes():
    """XLA's bytes per core for cnn_programs' programs (a fresh process:
    JAX must see 8 CPU devices from its start)."""
    code = f"import sys, json; sys.path.insert(0, {HERE!r}); import cnn_programs; print(json.dumps(cnn_programs.xla_bytes_per_core()))"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _kinds(module) -> set[str]:
    return {c.kind for c in collective_costs(module)}


@pytest.mark.parametrize("pool", [False, True], ids=["two-convs", "two-convs-max-pool"])
def test_seed_image_split_feeds_convolutions_with_halo_exchange(da, xla_bytes, pool):
    x, _, w1, w2, _ = cnn.data()
    want = cnn.xtpu_convs(x, w1, w2, split=False, pool=pool)
    compiled = xtpu.lower(lambda *a: cnn.xtpu_convs(*a, pool=pool), [[x, w1, w2]], device_assignment=da).compile()
    ((got,),) = xtpu.replicate(lambda *a: cnn.xtpu_convs(*a, pool=pool), [[x, w1, w2]], device_assignment=da)
    # The same sums, element by element, each core's a BLAS product of its
    # own rows, which a BLAS may round differently from the same rows among
    # all of them (OpenBLAS's float32 GEMM does; seen: 1.6 epsilons of the
    # magnitude); a wrong halo is O(1) off.
    want = np.asarray(want)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=8 * np.finfo(np.float32).eps * np.abs(want).max())
    module = compiled.module
    assert _kinds(module) == {"collective_permute"}, collective_costs(module)
    assert "ccl.all_gather" not in str(module)
    ours = bytes_per_core(module)
    xla = xla_bytes["convs_pool" if pool else "convs"]
    assert 0 < ours <= xla, (ours, xla)


def test_cnn_training_steps_on_the_split_image_equal_the_unsplit_run(da, xla_bytes):
    x, y, *ws = cnn.data(np.float64)
    split_ws, ref_ws = list(ws), list(ws)
    losses = []
    for _ in range(3):
        (split,) = xtpu.replicate(cnn.xtpu_train, [[x, y, *split_ws]], device_assignment=da)
        (ref,) = xtpu.replicate(lambda *a: cnn.xtpu_train(*a, split=False), [[x, y, *ref_ws]])
        for a, b in zip(split, ref):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-14)
        split_ws, ref_ws = list(split[1:]), list(ref[1:])
        losses.append(float(np.asarray(split[0])))
    assert losses[2] < losses[0], losses  # it trains
    xs, ys, *w32 = cnn.data()
    module = xtpu.lower(cnn.xtpu_train, [[xs, ys, *w32]], device_assignment=da).compile().module
    costs = collective_costs(module)
    # The convolutions, their input and kernel gradients exchange halos; the
    # kernel gradients sum partial kernels; only the dense head's flatten
    # gathers (as XLA's does).
    assert sum(c.kind == "collective_permute" for c in costs) >= 16
    assert {c.result for c in costs if c.kind == "all_reduce"} >= {(3, 3, 3, 8), (3, 3, 8, 8)}
    assert all(c.kind != "all_gather" or len(c.operand) <= 2 or c.operand[1:3] != (8, 4) for c in costs)
    # Within 1% of XLA's bytes per core (xtpu's dense head sums a partial
    # logits product where XLA gathers the activation first: 160 bytes).
    assert bytes_per_core(module) <= 1.01 * xla_bytes["train"], (bytes_per_core(module), xla_bytes["train"])


SPLIT_OPS = {
    "conv2d-stride2-same": lambda x, w: xtpu.nn.conv2d(x, w, 2, "SAME"),
    "conv2d-valid-dilated": lambda x, w: xtpu.nn.conv2d(x, w, 1, "VALID", dilations=2),
    "depthwise-same": lambda x, w: xtpu.nn.depthwise_conv2d(x, w[:, :, :, :2], [1, 1, 1, 1], "SAME"),
    "conv2d-transpose": lambda x, w: xtpu.nn.conv2d_transpose(
        x, xtpu.transpose(w, [0, 1, 3, 2]), [2, 32, 32, 4], 2, "SAME"
    ),
    "max-pool-3x3-same": lambda x, w: xtpu.nn.max_pool2d(x * w[0, 0, :, 0], 3, 1, "SAME"),
    "avg-pool-3x3-stride2-same": lambda x, w: xtpu.nn.avg_pool2d(x * w[0, 0, :, 0], 3, 2, "SAME"),
}


@pytest.mark.parametrize("name", sorted(SPLIT_OPS))
def test_split_op_and_its_gradients_equal_the_unsplit_ones(da, name):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 16, 16, 4))
    w = rng.standard_normal((3, 3, 4, 4)) * 0.3
    fn = SPLIT_OPS[name]

    def step(x, w, split=True):
        if split:
            x = xtpu.split_to_logical_devices(x, cnn.SPLIT)
        y = fn(x, w)
        loss = xtpu.math.reduce_sum(xtpu.math.multiply(y, y))
        gx, gw = xtpu.gradients(loss, [x, w])
        return y, gx, gw

    (got,) = xtpu.replicate(step, [[x, w]], device_assignment=da)
    (want,) = xtpu.replicate(lambda *a: step(*a, split=False), [[x, w]])
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-11, atol=1e-12)


LIT = os.path.join(HERE, "..", "lit", "passes", "tpu-spmd-partition-windows.mlir")


def test_bytes_per_core_of_the_lit_cases_are_those_their_comments_state():
    text = open(LIT).read()
    for chunk in text.split("// -----"):
        name = re.search(r"func.func @(\w+)", chunk).group(1)
        module = Parser(make_context(), chunk).parse_module()
        run_pipeline(module, parse_pipeline("tpu-propagate-sharding,tpu-spmd-partition"))
        got = bytes_per_core(module)
        stated = re.findall(r"(\d+) bytes per core", chunk)
        numbers = [int(v) for v in stated]
        if "is_local" in name or "are_local" in name:
            assert got == 0, name
        else:
            assert numbers and numbers[-1] == got, (name, numbers, got)


def test_input_feature_split_with_a_split_result_reduce_scatters(da):
    """Image channels and the filters' input channels split over the 8 cores,
    the result split over the same cores on its output channels: one
    ccl.reduce_scatter of the partial results (GSPMD's partial-sum output),
    no all_reduce, no all_gather; values equal to the unsplit run, fewer
    bytes per core than the operands' resharding."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 6, 16))
    w = rng.standard_normal((3, 3, 16, 8))

    def step(x, w, split=True):
        if split:
            x = xtpu.split_to_logical_devices(x, [1, 1, 1, 8])
            w = xtpu.split_to_logical_devices(w, [1, 1, 8, 1])
        y = xtpu.nn.conv2d(x, w, 1, "VALID")
        if split:
            y = xtpu.split_to_logical_devices(y, [1, 1, 1, 8])
        return xtpu.math.tanh(y)

    ((got,),) = xtpu.replicate(step, [[x, w]], device_assignment=da)
    ((want,),) = xtpu.replicate(lambda *a: step(*a, split=False), [[x, w]])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)
    module = xtpu.lower(step, [[x, w]], device_assignment=da).compile().module
    assert _kinds(module) == {"reduce_scatter"}, collective_costs(module)
    # 7/8 of the 2x4x4x8 float64 partial result.
    assert bytes_per_core(module) == 7 / 8 * 2 * 4 * 4 * 8 * 8
