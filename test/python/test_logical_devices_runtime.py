"""The runtime with several logical cores per replica (docs/logical-devices.md).

The modules here are hand-written in the partitioned form that
``tpu-spmd-partition`` produces: the replicate body is the per-core program
with local shapes, the replicate carries ``tpu.input_shardings`` /
``tpu.output_shardings`` and keeps its global operand and result types, and
collectives name participants ``r * C + c``.  The replicate is written in the
generic form, the only one that can spell operands and results whose types
differ from the body's.  Results are checked against numpy on the full
arrays (integer-valued data, so exactly).
"""

import time

import numpy as np
import pytest
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import xtpu
from xtpu.core.pipeline import parse_pipeline, run_pipeline
from xtpu.dialects import make_context
from xtpu.runtime.errors import RuntimeTimeoutError
from xtpu.runtime.executor import Executable

T84 = "tensor<8x4xf32>"
T44 = "tensor<4x4xf32>"
SPLIT_ROWS = "#tpu.sharding<{devices=[2,1]0,1}>"
SPLIT_COLS = "#tpu.sharding<{devices=[1,2]0,1}>"
REPLICATED = "#tpu.sharding<{replicated}>"


def parse(text, verify=True):
    module = Parser(make_context(), text).parse_module()
    if verify:
        module.verify()
    return module


def partitioned(*, n, cores, inputs, outputs, body, in_shardings=None, out_shardings=None):
    """A module whose @main holds one partitioned ``tpu.replicate``.

    Args:
      inputs: ``(global type, body argument type)`` per input; the body's
        arguments are ``%x0, %x1, ...``.
      outputs: ``(global type, yielded type)`` per output.
      body: the body's ops, ending with ``tpu.yield``.
      in_shardings, out_shardings: sharding texts (None: attribute absent).
    """
    args = [(f"%a{i}_{r}", g) for i, (g, _) in enumerate(inputs) for r in range(n)]
    results = [g for g, _ in outputs for _ in range(n)]
    m = len(results)
    rname = "%r" if m <= 1 else f"%r:{m}"
    refs = ["%r"] if m == 1 else [f"%r#{k}" for k in range(m)]
    attrs = []
    if in_shardings is not None:
        attrs.append("tpu.input_shardings = [" + ", ".join(in_shardings) + "]")
    if out_shardings is not None:
        attrs.append("tpu.output_shardings = [" + ", ".join(out_shardings) + "]")
    attr_text = (" {" + ", ".join(attrs) + "}") if attrs else ""
    block_args = ", ".join(f"%x{i}: {local}" for i, (_, local) in enumerate(inputs))
    indented = "\n".join("      " + line.strip() for line in body.strip().splitlines())
    return f"""
builtin.module {{
  func.func @main({", ".join(f"{a}: {t}" for a, t in args)}) -> ({", ".join(results)}) {{
    {rname + " = " if m else ""}"tpu.replicate"({", ".join(a for a, _ in args)}) <{{n = {n} : i64, num_cores_per_replica = {cores} : i64}}> ({{
    ^bb0({block_args}):
{indented}
    }}){attr_text} : ({", ".join(t for _, t in args)}) -> ({", ".join(results)})
    func.return {", ".join(refs) + " : " + ", ".join(results) if m else ""}
  }}
}}
"""


def run(text, per_replica, timeout=10.0, **kw):
    """Run ``text`` on ``per_replica[r][i]``; returns ``[replica][output]``."""
    exe = Executable(parse(text), timeout=timeout, **kw)
    n = len(per_replica)
    k = len(per_replica[0])
    outs = exe.run([per_replica[r][i] for i in range(k) for r in range(n)])
    m = len(outs) // n
    return [[outs[j * n + r] for j in range(m)] for r in range(n)]


def ints(shape, seed, lo=-8, hi=8, dtype=np.float32):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


# ---------------------------------------------------------------------------
# Elementwise programs: inputs split into shards, outputs assembled.


@pytest.mark.parametrize("n", [1, 2])
def test_elementwise_on_rows_split_over_two_cores(n):
    text = partitioned(
        n=n,
        cores=2,
        inputs=[(T84, T44)],
        outputs=[(T84, T44)],
        in_shardings=[SPLIT_ROWS],
        out_shardings=[SPLIT_ROWS],
        body=f"""
            %sq = hlo.multiply %x0, %x0 : {T44}
            %y = hlo.add %sq, %x0 : {T44}
            tpu.yield %y : {T44}
        """,
    )
    xs = [ints((8, 4), r) for r in range(n)]
    out = run(text, [[x] for x in xs])
    for r in range(n):
        assert out[r][0].shape == (8, 4) and out[r][0].dtype == np.float32
        np.testing.assert_array_equal(out[r][0], xs[r] * xs[r] + xs[r])


def test_columns_split_with_a_replicated_scalar_and_a_replicated_output():
    t82 = "tensor<8x2xf32>"
    text = partitioned(
        n=2,
        cores=2,
        inputs=[(T84, t82), ("tensor<f32>", "tensor<f32>")],
        outputs=[(T84, t82), ("tensor<f32>", "tensor<f32>")],
        in_shardings=[SPLIT_COLS, REPLICATED],
        out_shardings=[SPLIT_COLS, REPLICATED],
        body=f"""
            %b = hlo.broadcast_in_dim %x1, dims = [] : (tensor<f32>) -> {t82}
            %y = hlo.multiply %x0, %b : {t82}
            %s = hlo.add %x1, %x1 : tensor<f32>
            tpu.yield %y, %s : {t82}, tensor<f32>
        """,
    )
    xs = [ints((8, 4), 10 + r) for r in range(2)]
    ss = [np.float32(3), np.float32(-2)]
    out = run(text, [[xs[r], ss[r]] for r in range(2)])
    for r in range(2):
        np.testing.assert_array_equal(out[r][0], xs[r] * ss[r])
        assert out[r][1] == 2 * ss[r]


def test_partially_replicated_tiles_are_split_and_assembled():
    # 4 cores: rows in 2 tiles, each tile held by 2 cores ({0,1} and {2,3}).
    sh = "#tpu.sharding<{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}>"
    text = partitioned(
        n=1,
        cores=4,
        inputs=[(T84, T44)],
        outputs=[(T84, T44)],
        in_shardings=[sh],
        out_shardings=[sh],
        body=f"""
            %y = hlo.add %x0, %x0 : {T44}
            tpu.yield %y : {T44}
        """,
    )
    x = ints((8, 4), 3)
    (out,) = run(text, [[x]])
    np.testing.assert_array_equal(out[0], 2 * x)


def test_without_shardings_every_core_gets_the_whole_value_and_core_0_gives_the_result():
    text = partitioned(
        n=2,
        cores=2,
        inputs=[(T84, T84)],
        outputs=[(T84, T84)],
        body=f"""
            %c = tpu.logical_core_id : tensor<i32>
            %cf = hlo.convert %c : (tensor<i32>) -> tensor<f32>
            %b = hlo.broadcast_in_dim %cf, dims = [] : (tensor<f32>) -> {T84}
            %y = hlo.add %x0, %b : {T84}
            tpu.yield %y : {T84}
        """,
    )
    xs = [ints((8, 4), 20 + r) for r in range(2)]
    out = run(text, [[x] for x in xs])
    for r in range(2):
        np.testing.assert_array_equal(out[r][0], xs[r])  # core 0 added 0


# ---------------------------------------------------------------------------
# Ids: tpu.replica_id is r, tpu.logical_core_id is c.


IDS_BODY = """
    %r = tpu.replica_id : tensor<i32>
    %c = tpu.logical_core_id : tensor<i32>
    %ten = hlo.constant dense<10> : tensor<i32>
    %r10 = hlo.multiply %r, %ten : tensor<i32>
    %v = hlo.add %r10, %c : tensor<i32>
    %v1 = hlo.reshape %v : (tensor<i32>) -> tensor<1xi32>
    tpu.yield %v1, %v1, %v1, %v1 : tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>
"""


def test_replica_and_logical_core_ids_and_output_owners():
    t1, t2 = "tensor<1xi32>", "tensor<2xi32>"
    text = partitioned(
        n=2,
        cores=2,
        inputs=[],
        outputs=[(t2, t1), (t2, t1), (t1, t1), (t1, t1)],
        out_shardings=[
            "#tpu.sharding<{devices=[2]0,1}>",
            "#tpu.sharding<{devices=[2]1,0}>",  # core 1 holds the first tile
            "#tpu.sharding<{maximal device=1}>",
            REPLICATED,
        ],
        body=IDS_BODY,
    )
    exe = Executable(parse(text), timeout=10)
    outs = exe.run([])
    n = 2
    for r in range(n):
        in_order, swapped, owner, replicated = (outs[j * n + r] for j in range(4))
        assert in_order.tolist() == [10 * r, 10 * r + 1]
        assert swapped.tolist() == [10 * r + 1, 10 * r]
        assert owner.tolist() == [10 * r + 1]  # from core 1, its owner
        assert replicated.tolist() == [10 * r]  # from core 0


def test_maximal_input_goes_whole_to_every_core():
    text = partitioned(
        n=1,
        cores=2,
        inputs=[(T84, T84)],
        outputs=[(T84, T84)],
        in_shardings=["#tpu.sharding<{maximal device=1}>"],
        out_shardings=["#tpu.sharding<{maximal device=1}>"],
        body=f"""
            %y = hlo.multiply %x0, %x0 : {T84}
            tpu.yield %y : {T84}
        """,
    )
    x = ints((8, 4), 4)
    (out,) = run(text, [[x]])
    np.testing.assert_array_equal(out[0], x * x)


# ---------------------------------------------------------------------------
# Collectives within a replica and across replicas.


@pytest.mark.parametrize("n", [1, 2])
def test_dot_with_a_split_contracting_dim_all_reduced_over_the_replicas_cores(n):
    # x[4,8] split in columns and w[8,3] in rows: each core's partial product
    # [4,3] over its half of the contracting dim; the sum over the replica's
    # cores is the full product, replicated.
    groups = ", ".join(f"[{2 * r}, {2 * r + 1}]" for r in range(n))
    text = partitioned(
        n=n,
        cores=2,
        inputs=[("tensor<4x8xf32>", T44), ("tensor<8x3xf32>", "tensor<4x3xf32>")],
        outputs=[("tensor<4x3xf32>", "tensor<4x3xf32>")],
        in_shardings=[SPLIT_COLS, SPLIT_ROWS],
        out_shardings=[REPLICATED],
        body=f"""
            %p = hlo.dot_general %x0, %x1, batching_dims = [] x [], contracting_dims = [1] x [0] : ({T44}, tensor<4x3xf32>) -> tensor<4x3xf32>
            %s = ccl.all_reduce %p applies add groups = dense<[{groups}]> : tensor<{n}x2xi64> channel 1 : tensor<4x3xf32>
            tpu.yield %s : tensor<4x3xf32>
        """,
    )
    xs = [ints((4, 8), 30 + r) for r in range(n)]
    ws = [ints((8, 3), 40 + r) for r in range(n)]
    out = run(text, [[xs[r], ws[r]] for r in range(n)])
    for r in range(n):
        np.testing.assert_array_equal(out[r][0], xs[r] @ ws[r])


def test_all_gather_within_a_replica_rebuilds_the_global_value():
    text = partitioned(
        n=2,
        cores=2,
        inputs=[(T84, T44)],
        outputs=[(T84, T84)],
        in_shardings=[SPLIT_ROWS],
        out_shardings=[REPLICATED],
        body=f"""
            %g = ccl.all_gather %x0 dim = 0 groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64> : ({T44}) -> {T84}
            tpu.yield %g : {T84}
        """,
    )
    xs = [ints((8, 4), 50 + r) for r in range(2)]
    out = run(text, [[x] for x in xs])
    for r in range(2):
        np.testing.assert_array_equal(out[r][0], xs[r])


def test_cross_replica_all_reduce_per_logical_core():
    text = partitioned(
        n=2,
        cores=2,
        inputs=[(T84, T44)],
        outputs=[(T84, T44)],
        in_shardings=[SPLIT_ROWS],
        out_shardings=[SPLIT_ROWS],
        body=f"""
            %s = ccl.all_reduce %x0 applies add groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64> channel 1 : {T44}
            tpu.yield %s : {T44}
        """,
    )
    xs = [ints((8, 4), 60 + r) for r in range(2)]
    out = run(text, [[x] for x in xs])
    for r in range(2):
        np.testing.assert_array_equal(out[r][0], xs[0] + xs[1])


def test_lowered_cross_replica_sum_sums_over_replicas_per_core():
    text = partitioned(
        n=3,
        cores=2,
        inputs=[(T84, T44)],
        outputs=[(T84, T44)],
        in_shardings=[SPLIT_ROWS],
        out_shardings=[SPLIT_ROWS],
        body=f"""
            %s = tpu.cross_replica_sum %x0 : {T44}
            tpu.yield %s : {T44}
        """,
    )
    module = parse(text)
    run_pipeline(module, parse_pipeline("tpu-lower-cross-replica-sum"))
    (ar,) = [op for op in module.walk() if op.name == "ccl.all_reduce"]
    assert [list(g) for g in ar.params()["replica_groups"]] == [[0, 2, 4], [1, 3, 5]]
    exe = Executable(module, timeout=10)
    xs = [ints((8, 4), 70 + r) for r in range(3)]
    outs = exe.run(xs)
    for r in range(3):
        np.testing.assert_array_equal(outs[r], xs[0] + xs[1] + xs[2])


def test_outside_compilation_is_served_once_per_replica_and_seen_by_every_core():
    # Core 0 of each replica talks to the host; the answer reaches all cores.
    text = """
builtin.module {
  func.func @main(%a: tensor<f32>, %b: tensor<f32>) -> (tensor<2xf32>, tensor<2xf32>) {
    %r:2 = "tpu.replicate"(%a, %b) <{n = 2 : i64, num_cores_per_replica = 2 : i64}> ({
    ^bb0(%x: tensor<f32>):
      tpu.send_to_host "host_compute_channel_0_args"(%x : tensor<f32>)
      %h = tpu.recv_from_host "host_compute_channel_0_retvals" : tensor<f32>
      %c = tpu.logical_core_id : tensor<i32>
      %cf = hlo.convert %c : (tensor<i32>) -> tensor<f32>
      %y = hlo.add %h, %cf : tensor<f32>
      %y1 = hlo.reshape %y : (tensor<f32>) -> tensor<1xf32>
      tpu.yield %y1 : tensor<1xf32>
    }) {tpu.output_shardings = [#tpu.sharding<{devices=[2]0,1}>]} : (tensor<f32>, tensor<f32>) -> (tensor<2xf32>, tensor<2xf32>)
    func.return %r#0, %r#1 : tensor<2xf32>, tensor<2xf32>
  }
  func.func @host_0() attributes {tpu.outside_compilation_cluster = "0"} {
    %v = tpu.recv_at_host "host_compute_channel_0_args" : tensor<f32>
    %w = hlo.multiply %v, %v : tensor<f32>
    tpu.send_from_host "host_compute_channel_0_retvals"(%w : tensor<f32>)
    func.return
  }
}
"""
    exe = Executable(parse(text), timeout=10)
    for a, b in ((2.0, 3.0), (-1.0, 5.0)):
        outs = exe.run([np.float32(a), np.float32(b)])
        assert outs[0].tolist() == [a * a, a * a + 1]
        assert outs[1].tolist() == [b * b, b * b + 1]
    exe.close()


# ---------------------------------------------------------------------------
# Errors.


def test_a_body_that_was_not_partitioned_is_a_clear_error():
    # Shardings from tpu-propagate-sharding but the global body: it verifies
    # (the form before tpu-spmd-partition) but cannot run per core.
    text = partitioned(
        n=1,
        cores=2,
        inputs=[(T84, T84)],
        outputs=[(T84, T84)],
        in_shardings=[SPLIT_ROWS],
        out_shardings=[SPLIT_ROWS],
        body=f"""
            %y = hlo.add %x0, %x0 : {T84}
            tpu.yield %y : {T84}
        """,
    )
    with pytest.raises(
        ValueError,
        match=r"input 0 of tpu.replicate has global type tensor<8x4xf32> and sharding "
        r"\{devices=\[2,1\]0,1\}, so each logical core holds float32\[4x4\], but body argument 0 "
        r"has type tensor<8x4xf32>; the body has the global shape: run tpu-spmd-partition first",
    ):
        Executable(parse(text))


def test_wrong_local_shapes_are_a_clear_error():
    t24 = "tensor<2x4xf32>"
    text = partitioned(
        n=1,
        cores=2,
        inputs=[(T84, t24)],
        outputs=[(T84, t24)],
        in_shardings=[SPLIT_ROWS],
        out_shardings=[SPLIT_ROWS],
        body=f"""
            tpu.yield %x0 : {t24}
        """,
    )
    with pytest.raises(
        VerifyException,
        match=r"input 0 has type tensor<8x4xf32> and sharding \{devices=\[2,1\]0,1\}, "
        r"so the body's type must be tensor<4x4xf32> .* but the body argument has type tensor<2x4xf32>",
    ):
        parse(text)
    with pytest.raises(
        ValueError,
        match=r"so each logical core holds float32\[4x4\], but body argument 0 has type "
        r"tensor<2x4xf32>$",
    ):
        Executable(parse(text, verify=False))


def test_wrong_output_local_shape_is_a_clear_error():
    text = partitioned(
        n=1,
        cores=2,
        inputs=[(T84, T44)],
        outputs=[(T84, T84)],
        in_shardings=[SPLIT_ROWS],
        out_shardings=[SPLIT_COLS],
        body=f"""
            %g = ccl.all_gather %x0 dim = 0 groups = dense<[[0, 1]]> : tensor<1x2xi64> : ({T44}) -> {T84}
            tpu.yield %g : {T84}
        """,
    )
    with pytest.raises(
        ValueError,
        match=r"output 0 of tpu.replicate has global type tensor<8x4xf32> and sharding "
        r"\{devices=\[1,2\]0,1\}, so each logical core holds float32\[8x2\], but the yielded value 0",
    ):
        Executable(parse(text, verify=False))


def test_a_core_missing_from_a_collective_times_out_naming_the_participant():
    # Core 1 of the replica skips the all_reduce its group expects from it.
    text = partitioned(
        n=1,
        cores=2,
        inputs=[(T84, T44)],
        outputs=[(T84, T44)],
        in_shardings=[SPLIT_ROWS],
        out_shardings=[SPLIT_ROWS],
        body=f"""
            %c = tpu.logical_core_id : tensor<i32>
            %zero = hlo.constant dense<0> : tensor<i32>
            %first = hlo.compare EQ, %c, %zero : (tensor<i32>, tensor<i32>) -> tensor<i1>
            %y = hlo.if %first -> ({T44}) {{
              %s = ccl.all_reduce %x0 applies add groups = dense<[[0, 1]]> : tensor<1x2xi64> : {T44}
              hlo.return %s : {T44}
            }} else {{
              hlo.return %x0 : {T44}
            }}
            tpu.yield %y : {T44}
        """,
    )
    exe = Executable(parse(text), timeout=0.3)
    start = time.monotonic()
    with pytest.raises(RuntimeTimeoutError) as info:
        exe.run([ints((8, 4), 1)])
    assert time.monotonic() - start < 5
    err = info.value
    assert err.replica == 0 and err.logical_core == 0 and err.op == "ccl.all_reduce"
    assert "participants [1] ((replica, core) = (0, 1)) of group [0, 1] never arrived" in str(err)
    assert str(err).startswith("replica 0, logical core 0: timed out after 0.3 s in ccl.all_reduce")


def test_an_unpartitioned_sharding_constraint_is_an_error():
    text = partitioned(
        n=1,
        cores=2,
        inputs=[(T84, T84)],
        outputs=[(T84, T84)],
        body=f"""
            %y = tpu.sharding_constraint %x0 to {SPLIT_ROWS} : {T84}
            tpu.yield %y : {T84}
        """,
    )
    with pytest.raises(ValueError, match="run tpu-propagate-sharding and tpu-spmd-partition first"):
        Executable(parse(text))


# ---------------------------------------------------------------------------
# The replicate verifier with shardings.


def test_verifier_accepts_the_global_and_the_local_form_but_not_a_mix():
    common = dict(n=1, cores=2, in_shardings=[SPLIT_ROWS, SPLIT_ROWS], out_shardings=[SPLIT_ROWS])
    parse(partitioned(inputs=[(T84, T84), (T84, T84)], outputs=[(T84, T84)], body=f"tpu.yield %x0 : {T84}", **common))
    parse(partitioned(inputs=[(T84, T44), (T84, T44)], outputs=[(T84, T44)], body=f"tpu.yield %x0 : {T44}", **common))
    with pytest.raises(
        VerifyException,
        match=r"body mixes global types \(input 1\) and local per-core types "
        r"\(input 0\)",
    ):
        parse(
            partitioned(inputs=[(T84, T44), (T84, T84)], outputs=[(T84, T44)], body=f"tpu.yield %x0 : {T44}", **common)
        )


def test_verifier_checks_the_shardings_attributes():
    base = dict(n=1, cores=2, inputs=[(T84, T44)], outputs=[(T84, T44)], body=f"tpu.yield %x0 : {T44}")
    with pytest.raises(VerifyException, match=r"tpu.input_shardings has 2 entries, but the body has 1 arguments"):
        parse(partitioned(in_shardings=[SPLIT_ROWS, SPLIT_ROWS], out_shardings=[SPLIT_ROWS], **base))
    with pytest.raises(
        VerifyException,
        match=r"tpu.output_shardings entry 0 \(\{devices=\[4,1\]0,1,2,3\}\) tiles "
        r"over 4 devices, but a replica has 2 logical cores",
    ):
        parse(partitioned(in_shardings=[SPLIT_ROWS], out_shardings=["#tpu.sharding<{devices=[4,1]0,1,2,3}>"], **base))
    with pytest.raises(VerifyException, match=r"names logical core 2, but a replica has 2 logical cores"):
        parse(partitioned(in_shardings=["#tpu.sharding<{maximal device=2}>"], out_shardings=[SPLIT_ROWS], **base))
    # Without shardings the types must match exactly, as with one core.
    with pytest.raises(
        VerifyException,
        match=r"input 0 of replica 0 has type tensor<8x4xf32>, but the body "
        r"argument has type tensor<4x4xf32>",
    ):
        parse(partitioned(n=1, cores=2, inputs=[(T84, T44)], outputs=[(T44, T44)], body=f"tpu.yield %x0 : {T44}"))


# ---------------------------------------------------------------------------
# End to end through xtpu.replicate with a device assignment.


def test_replicate_with_two_cores_per_replica_matches_the_eager_run():
    from xtpu.passes import ALL_PASSES

    if "tpu-spmd-partition" not in ALL_PASSES:
        pytest.skip("tpu-spmd-partition is not implemented yet: a replica split over logical cores cannot compile")
    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 1, 1, 2], num_replicas=2)
    assert da.num_cores_per_replica == 2

    def step(x, w, split=True):
        if split:  # eagerly there is one logical device: nothing to split
            x = xtpu.split_to_logical_devices(x, [2, 1])
        h = x * 2.0 + 1.0
        y = xtpu.matmul(h, w)
        # Eagerly there are no replicas to sum over (cross_replica_sum
        # raises, as in TF): the sum is checked against the eager ys below.
        return y, (xtpu.cross_replica_sum(y) if split else None)

    xs = [ints((8, 4), 80 + r) for r in range(2)]
    ws = [ints((4, 3), 90 + r) for r in range(2)]
    eager = [step(xs[r], ws[r], split=False) for r in range(2)]
    out = xtpu.replicate(step, [[xs[r], ws[r]] for r in range(2)], device_assignment=da)
    total = eager[0][0] + eager[1][0]
    for r in range(2):
        np.testing.assert_array_equal(out[r][0], eager[r][0])
        np.testing.assert_array_equal(out[r][1], total)
