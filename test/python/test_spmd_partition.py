"""tpu-spmd-partition: numerics of the per-core program.

Each case is a replicate body annotated as tpu-propagate-sharding leaves it
(docs/logical-devices.md).  The test runs the partitioned body on every
(replica, logical core) with numpy -- one thread per participant, the op
kernels through ``runtime.plan.Plan`` and the collectives through a
``ThreadCommunicator`` -- assembles the global outputs from the cores'
shards, and compares them with the unpartitioned body run once per replica
on the whole inputs.  Data are small integers, so results must be equal,
not close.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException

from xtpu.dialects import ccl, hlo, make_context
from xtpu.dialects.hlo_control import WhileOp
from xtpu.dialects.sharding import Sharding
from xtpu.dialects.tensor_spec import TensorSpec, numpy_dtype
from xtpu.dialects.tpu import (
    LogicalCoreIdOp,
    ReplicaIdOp,
    ReplicateOp,
    ShardingConstraintOp,
)
from xtpu.passes import ALL_PASSES, SpmdPartition
from xtpu.runtime.communicator import ThreadCommunicator
from xtpu.runtime.plan import Plan, pure_kernel
from xtpu.runtime.workers import AbortSignal, run_workers

# --------------------------------------------------------------------------
# Building annotated modules
# --------------------------------------------------------------------------


def S(*shardings: str) -> str:
    """The ``tpu.sharding`` attribute dictionary of an op."""
    return "{tpu.sharding = [" + ", ".join(f"#tpu.sharding<{s}>" for s in shardings) + "]}"


def module_text(R: int, C: int, inputs, body: str, outputs) -> str:
    """A ``func.func @main`` holding one replicate of ``R`` replicas x ``C``
    cores.  ``inputs``: (body argument, type, sharding); ``outputs``:
    (value, type, sharding)."""
    params, groups = [], []
    for i, (name, ty, _) in enumerate(inputs):
        names = [f"%in{i}_{r}" for r in range(R)]
        params += [f"{n}: {ty}" for n in names]
        groups.append(f"[{', '.join(names)}] as %{name}: {ty}")
    out_types = [ty for _, ty, _ in outputs for _ in range(R)]
    k = len(out_types)
    lhs = "" if k == 0 else ("%r = " if k == 1 else f"%r:{k} = ")
    attrs = [f"n = {R} : i64", f"num_cores_per_replica = {C} : i64"]
    attrs.append("tpu.input_shardings = [" + ", ".join(f"#tpu.sharding<{s}>" for _, _, s in inputs) + "]")
    attrs.append("tpu.output_shardings = [" + ", ".join(f"#tpu.sharding<{s}>" for _, _, s in outputs) + "]")
    rets = ["%r" if k == 1 else f"%r#{j}" for j in range(k)]
    yields = ", ".join(v for v, _, _ in outputs)
    ytypes = ", ".join(t for _, t, _ in outputs)
    return f"""
func.func @main({", ".join(params)}) -> ({", ".join(out_types)}) {{
  {lhs}tpu.replicate({", ".join(groups)}) {{{", ".join(attrs)}}} {{
{body}
    tpu.yield {yields}{" : " + ytypes if outputs else ""}
  }}
  func.return {", ".join(rets)}{" : " + ", ".join(out_types) if k else ""}
}}
"""


def parse(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def replicate_of(module: ModuleOp) -> ReplicateOp:
    (rep,) = [op for op in module.walk() if isinstance(op, ReplicateOp)]
    return rep


def partition(module: ModuleOp) -> ModuleOp:
    SpmdPartition().apply(make_context(), module)
    module.verify()
    return module


# --------------------------------------------------------------------------
# A small simulator: every (replica, core) in its own thread
# --------------------------------------------------------------------------


def _replica_groups(groups, R: int, C: int, partitioned: bool):
    """Groups as the worker ids of this run: participants r * C + c when
    partitioned, replicas otherwise (participant groups of core 0)."""
    ids = sorted(i for g in groups for i in g)
    if partitioned or ids == list(range(R)):
        return [list(g) for g in groups]
    return [[i // C for i in g] for g in groups if all(i % C == 0 for i in g)]


def _factory(r: int, c: int, R: int, C: int, comm, partitioned: bool):
    """Kernels of worker (r, c); ``C`` is the replicate's core count (the
    unpartitioned run has one worker per replica)."""
    me = r * C + c if partitioned else r

    def factory(op):
        if isinstance(op, LogicalCoreIdOp):
            cid = np.int32(c)
            return lambda: cid
        if isinstance(op, ReplicaIdOp):
            rid = np.int32(r)
            return lambda: rid
        if isinstance(op, ShardingConstraintOp):
            assert not partitioned, "sharding_constraint left after partitioning"
        if isinstance(op, ccl.CollectivePermuteOp):
            pairs = [list(p) for p in op.params()["source_target_pairs"]]
            return lambda x: comm.collective_permute(me, np.asarray(x), pairs)
        if isinstance(op, ccl.CollectiveOp):
            p = op.params()
            groups = _replica_groups(p["replica_groups"], R, C, partitioned)
            if isinstance(op, ccl.AllReduceOp):
                return lambda x: comm.all_reduce(me, np.asarray(x), groups, p["computation"])
            if isinstance(op, ccl.AllGatherOp):
                return lambda x: comm.all_gather(me, np.asarray(x), groups, p["all_gather_dim"])
            if isinstance(op, ccl.AllToAllOp):
                return lambda x: comm.all_to_all(me, np.asarray(x), groups, p["split_dimension"], p["concat_dimension"])
            if isinstance(op, ccl.ReduceScatterOp):
                return lambda x: comm.reduce_scatter(
                    me, np.asarray(x), groups, p["scatter_dimension"], p["computation"]
                )
            raise NotImplementedError(op.name)
        return pure_kernel(op)

    return factory


def _shardings(rep: ReplicateOp, key: str, count: int) -> list[Sharding]:
    attr = rep.attributes.get(key)
    if attr is None:
        return [Sharding.replicated()] * count
    return [a.sharding for a in attr.data]


def simulate(module: ModuleOp, inputs: list[list[np.ndarray]], partitioned: bool) -> list[list[np.ndarray]]:
    """Run the replicate's body: ``inputs[r]`` are replica ``r``'s global
    inputs; returns ``[r][j]`` global outputs.  When ``partitioned``, each
    core gets its shards and the outputs are assembled from the cores,
    checking that every copy of a tile agrees."""
    rep = replicate_of(module)
    R = rep.num_replicas
    C = rep.num_cores if partitioned else 1
    body = rep.body.block
    plan = Plan(body, "spmd_test")
    abort = AbortSignal()
    comm = ThreadCommunicator(R * C, abort, 20.0, cores_per_replica=C)
    ins = _shardings(rep, "tpu.input_shardings", len(body.args))
    tasks = []
    for r in range(R):
        for c in range(C):
            args = []
            for x, s, a in zip(inputs[r], ins, body.args):
                local = x
                if partitioned and s.is_tiled:
                    local = np.ascontiguousarray(x[s.shard_slices(x.shape, c)])
                assert local.shape == TensorSpec.of_type(a.type).shape, (local.shape, a.type)
                args.append(local)
            K = plan.kernels(_factory(r, c, R, rep.num_cores, comm, partitioned))
            tasks.append((f"replica {r} core {c}", lambda args=args, K=K: plan.run(args, K)))
    results = run_workers(tasks, abort)
    term = body.last_op
    outs = _shardings(rep, "tpu.output_shardings", len(term.operands))
    assembled = []
    for r in range(R):
        per_core = results[r * C : (r + 1) * C]
        row = []
        for j, s in enumerate(outs):
            spec = TensorSpec.of_type(rep.outputs[j * R].type)
            if not partitioned:
                row.append(np.asarray(per_core[0][j]))
                continue
            full = np.zeros(spec.shape, dtype=numpy_dtype(spec.dtype))
            filled = np.zeros(spec.shape, dtype=bool)
            for c in range(C):
                v = np.asarray(per_core[c][j])
                sl = s.shard_slices(spec.shape, c) if s.is_tiled else tuple(slice(None) for _ in spec.shape)
                if sl is None:
                    continue
                if filled[sl].any():  # another copy of this tile: must agree
                    np.testing.assert_array_equal(v, full[sl], err_msg=f"output {j}: core {c} disagrees")
                full[sl] = v
                filled[sl] = True
            assert filled.all(), f"output {j}: some elements are held by no core"
            row.append(full)
        assembled.append(row)
    return assembled


def random_inputs(module: ModuleOp, seed: int = 0) -> list[list[np.ndarray]]:
    rep = replicate_of(module)
    rng = np.random.default_rng(seed)
    out = []
    for _r in range(rep.num_replicas):
        row = []
        for a in rep.body.block.args:
            spec = TensorSpec.of_type(a.type)
            if spec.dtype == "bool":
                row.append(rng.integers(0, 2, spec.shape).astype(bool))
            else:
                row.append(rng.integers(-4, 5, spec.shape).astype(numpy_dtype(spec.dtype)))
        out.append(row)
    return out


def check(text: str, inputs=None) -> ModuleOp:
    """Partition ``text`` and compare its outputs with the unpartitioned run."""
    reference = parse(text)
    module = partition(reference.clone())
    if inputs is None:
        inputs = random_inputs(reference)
    want = simulate(reference, inputs, partitioned=False)
    got = simulate(module, inputs, partitioned=True)
    for r, (w_row, g_row) in enumerate(zip(want, got)):
        for j, (w, g) in enumerate(zip(w_row, g_row)):
            assert g.dtype == w.dtype, (r, j, g.dtype, w.dtype)
            np.testing.assert_array_equal(g, w, err_msg=f"replica {r} output {j}")
    return module


def ops(module: ModuleOp, cls) -> list:
    return [op for op in module.walk() if isinstance(op, cls)]


def data_slices(module: ModuleOp) -> list:
    """The dynamic slices that cut values (not the reads of per-core tables)."""
    return [op for op in ops(module, hlo.DynamicSliceOp) if not isinstance(op.operand.owner, hlo.ConstantOp)]


# --------------------------------------------------------------------------
# Shardings to try, per core count, for a rank-2 tensor
# --------------------------------------------------------------------------

RANK2 = {
    2: ["{devices=[2,1]0,1}", "{devices=[1,2]0,1}", "{devices=[2,1]1,0}", "{replicated}", "{maximal device=1}"],
    4: [
        "{devices=[4,1]0,1,2,3}",
        "{devices=[1,4]0,1,2,3}",
        "{devices=[2,2]0,1,2,3}",
        "{devices=[2,2]0,2,1,3}",
        "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
        "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}",
        "{replicated}",
    ],
    8: [
        "{devices=[8,1]<=[8]}",
        "{devices=[1,8]<=[8]}",
        "{devices=[2,4]<=[8]}",
        "{devices=[4,2]<=[2,4]T(1,0)}",
        "{devices=[2,2,2]<=[8] last_tile_dim_replicate}",
        "{devices=[1,2,4]<=[8] last_tile_dim_replicate}",
        "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}",
        "{replicated}",
        "{maximal device=3}",
    ],
}


def _pairs():
    for C, shardings in RANK2.items():
        for a, b in itertools.product(shardings, repeat=2):
            yield C, a, b


# --------------------------------------------------------------------------
# Resharding
# --------------------------------------------------------------------------


@pytest.mark.parametrize("C,src,dst", list(_pairs()))
def test_reshard_every_pair(C, src, dst):
    """A value laid out as ``src`` feeds an op computed as ``dst``; the output
    is yielded in ``src`` again (two reshards per case)."""
    t = "tensor<8x16xi32>"
    body = f"    %y = hlo.negate %x {S(dst)} : {t}"
    check(module_text(1, C, [("x", t, src)], body, [("%y", t, src)]))


@pytest.mark.parametrize("R", [1, 2])
def test_reshard_collectives(R):
    """The collective each kind of reshard uses, and its participant groups."""
    t = "tensor<8x16xi32>"
    cases = [
        # tiled -> replicated: all_gather along each tiled dim
        ("{devices=[2,2]0,1,2,3}", "{replicated}", [ccl.AllGatherOp, ccl.AllGatherOp], []),
        # replicated -> tiled: a slice at the core's offsets, no collective
        ("{replicated}", "{devices=[2,2]0,1,2,3}", [], [hlo.DynamicSliceOp]),
        # dim 0 -> dim 1: all_to_all
        ("{devices=[4,1]0,1,2,3}", "{devices=[1,4]0,1,2,3}", [ccl.AllToAllOp], []),
        # same tiles, other cores: collective_permute
        ("{devices=[2,2]0,1,2,3}", "{devices=[2,2]0,2,1,3}", [ccl.CollectivePermuteOp], []),
        # partial replication -> tiled: a slice only
        ("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}", "{devices=[2,2]0,1,2,3}", [], [hlo.DynamicSliceOp]),
    ]
    for src, dst, collectives, slices in cases:
        body = f"    %y = hlo.negate %x {S(dst)} : {t}"
        m = check(module_text(R, 4, [("x", t, src)], body, [("%y", t, dst)]))
        got = [type(op) for op in m.walk() if isinstance(op, (ccl.CollectiveOp, ccl.CollectivePermuteOp))]
        assert got == collectives, (src, dst, got)
        assert [type(op) for op in data_slices(m)] == slices, (src, dst)
        for op in m.walk():
            if isinstance(op, ccl.CollectiveOp):
                ids = sorted(i for g in op.params()["replica_groups"] for i in g)
                assert ids == list(range(R * 4))


def test_all_gather_groups_follow_the_device_order():
    t = "tensor<8x16xi32>"
    m = check(module_text(2, 4, [("x", t, "{devices=[2,2]0,2,1,3}")], "", [("%x", t, "{replicated}")]))
    gathers = ops(m, ccl.AllGatherOp)
    assert [g.params()["all_gather_dim"] for g in gathers] == [0, 1]
    # dim 0 tiles are held by (0, 1) and (2, 3) in column order 0,2,1,3
    assert gathers[0].params()["replica_groups"] == ((0, 1), (2, 3), (4, 5), (6, 7))
    # then dim 1 between the cores that now hold the same rows
    assert gathers[1].params()["replica_groups"] == ((0, 2), (1, 3), (4, 6), (5, 7))


# --------------------------------------------------------------------------
# Elementwise ops
# --------------------------------------------------------------------------


@pytest.mark.parametrize("C", [2, 4, 8])
@pytest.mark.parametrize("R", [1, 2])
def test_elementwise_ops(C, R):
    shardings = RANK2[C]
    t, b = "tensor<8x16xf32>", "tensor<8x16xi1>"
    for i, want in enumerate(shardings):
        a_sh, b_sh = shardings[i - 1], shardings[(i + 2) % len(shardings)]
        body = f"""
    %s = hlo.add %a, %b {S(want)} : {t}
    %m = hlo.multiply %s, %a {S(want)} : {t}
    %n = hlo.negate %m {S(a_sh)} : {t}
    %p = hlo.compare GT, %n, %b {S(want)} : ({t}, {t}) -> {b}
    %q = hlo.select %p, %n, %s {S(b_sh)} : ({b}, {t}, {t}) -> {t}
    %i = hlo.convert %q {S(want)} : ({t}) -> tensor<8x16xi64>
    %k = hlo.constant dense<true> : tensor<i1>
    %z = hlo.select %k, %q, %a {S(want)} : (tensor<i1>, {t}, {t}) -> {t}"""
        check(
            module_text(
                R,
                C,
                [("a", t, a_sh), ("b", t, b_sh)],
                body,
                [("%i", "tensor<8x16xi64>", want), ("%z", t, a_sh), ("%p", b, b_sh)],
            )
        )


def test_elementwise_on_tiles_needs_no_collective():
    t = "tensor<8x16xf32>"
    sh = "{devices=[2,4]<=[8]}"
    body = f"    %s = hlo.add %a, %b {S(sh)} : {t}\n    %e = hlo.exponential %s {S(sh)} : {t}"
    m = check(module_text(1, 8, [("a", t, sh), ("b", t, sh)], body, [("%e", t, sh)]))
    assert not ops(m, ccl.CollectiveOp) and not data_slices(m)
    (add,) = ops(m, hlo.AddOp)
    assert str(add.result.type) == "tensor<4x4xf32>"


# --------------------------------------------------------------------------
# Shape ops
# --------------------------------------------------------------------------


@pytest.mark.parametrize("C", [2, 4, 8])
def test_broadcast_in_dim(C):
    for want in RANK2[C]:
        body = f"""
    %b = hlo.broadcast_in_dim %v, dims = [0] {S(want)} : (tensor<8xi32>) -> tensor<8x16xi32>
    %c = hlo.broadcast_in_dim %v, dims = [1] {S(want)} : (tensor<8xi32>) -> tensor<16x8xi32>
    %s = hlo.constant dense<3> : tensor<i32>
    %d = hlo.broadcast_in_dim %s, dims = [] {S(want)} : (tensor<i32>) -> tensor<8x16xi32>
    %o = hlo.broadcast_in_dim %w, dims = [0, 1] {S(want)} : (tensor<1x16xi32>) -> tensor<8x16xi32>"""
        v_sh = {2: "{devices=[2]0,1}", 4: "{devices=[4]0,1,2,3}", 8: "{devices=[8]<=[8]}"}[C]
        check(
            module_text(
                1,
                C,
                [("v", "tensor<8xi32>", v_sh), ("w", "tensor<1x16xi32>", "{replicated}")],
                body,
                [
                    ("%b", "tensor<8x16xi32>", want),
                    ("%c", "tensor<16x8xi32>", "{replicated}"),
                    ("%d", "tensor<8x16xi32>", want),
                    ("%o", "tensor<8x16xi32>", RANK2[C][0]),
                ],
            )
        )


def test_broadcast_of_a_tiled_operand_is_local():
    body = (
        f"    %b = hlo.broadcast_in_dim %v, dims = [0] {S('{devices=[4,2]<=[8]}')} : (tensor<8xf32>) -> tensor<8x6xf32>"
    )
    m = check(
        module_text(
            1,
            8,
            [("v", "tensor<8xf32>", "{devices=[4,2]<=[8] last_tile_dim_replicate}")],
            body,
            [("%b", "tensor<8x6xf32>", "{devices=[4,2]<=[8]}")],
        )
    )
    assert not ops(m, ccl.CollectiveOp) and not data_slices(m)
    (b,) = ops(m, hlo.BroadcastInDimOp)
    assert str(b.result.type) == "tensor<2x3xf32>"


@pytest.mark.parametrize("C", [2, 4, 8])
def test_transpose(C):
    for src, want in itertools.product(RANK2[C], RANK2[C][:3]):
        body = f"    %t = hlo.transpose %x, dims = [1, 0] {S(want)} : (tensor<8x16xi32>) -> tensor<16x8xi32>"
        check(module_text(1, C, [("x", "tensor<8x16xi32>", src)], body, [("%t", "tensor<16x8xi32>", want)]))


def test_transpose_of_tiles_is_local():
    body = f"    %t = hlo.transpose %x, dims = [1, 0] {S('{devices=[4,2]0,4,1,5,2,6,3,7}')} : (tensor<8x16xi32>) -> tensor<16x8xi32>"
    m = check(
        module_text(
            1,
            8,
            [("x", "tensor<8x16xi32>", "{devices=[2,4]<=[8]}")],
            body,
            [("%t", "tensor<16x8xi32>", "{devices=[4,2]0,4,1,5,2,6,3,7}")],
        )
    )
    assert not ops(m, ccl.CollectiveOp)


RESHAPES = [
    # (operand shape, result shape, operand shardings to try, result shardings)
    (
        (8, 16),
        (8, 4, 4),
        {
            2: ["{devices=[2,1]0,1}", "{devices=[1,2]0,1}"],
            4: ["{devices=[2,2]0,1,2,3}", "{devices=[1,4]0,1,2,3}"],
            8: ["{devices=[2,4]<=[8]}", "{devices=[1,8]<=[8]}"],
        },
        {
            2: ["{devices=[2,1,1]0,1}", "{devices=[1,2,1]0,1}", "{devices=[1,1,2]0,1}", "{replicated}"],
            4: [
                "{devices=[2,2,1]0,1,2,3}",
                "{devices=[1,4,1]0,1,2,3}",
                "{devices=[1,2,2]0,1,2,3}",
                "{devices=[1,1,4]0,1,2,3}",
            ],
            8: [
                "{devices=[2,4,1]<=[8]}",
                "{devices=[1,4,2]<=[8]}",
                "{devices=[2,2,2]<=[8]}",
                "{devices=[1,1,4,2]<=[8] last_tile_dim_replicate}",
            ],
        },
    ),
    (
        (4, 6, 8),
        (24, 8),
        {
            2: ["{devices=[2,1,1]0,1}", "{devices=[1,2,1]0,1}"],
            4: ["{devices=[2,2,1]0,1,2,3}", "{devices=[4,1,1]0,1,2,3}"],
            8: ["{devices=[4,2,1]<=[8]}", "{devices=[2,1,4]<=[8]}"],
        },
        {
            2: ["{devices=[2,1]0,1}", "{devices=[1,2]0,1}"],
            4: ["{devices=[4,1]0,1,2,3}", "{devices=[2,2]0,1,2,3}", "{devices=[1,4]0,1,2,3}"],
            8: ["{devices=[8,1]<=[8]}", "{devices=[4,2]<=[8]}", "{devices=[2,4]<=[8]}", "{devices=[8,1]<=[2,4]T(1,0)}"],
        },
    ),
]


@pytest.mark.parametrize("C", [2, 4, 8])
@pytest.mark.parametrize("case", range(len(RESHAPES)))
def test_reshape(C, case):
    a, b, srcs, wants = RESHAPES[case]
    ta = f"tensor<{'x'.join(map(str, a))}xi32>"
    tb = f"tensor<{'x'.join(map(str, b))}xi32>"
    for src, want in itertools.product(srcs[C], wants[C]):
        body = f"    %y = hlo.reshape %x {S(want)} : ({ta}) -> {tb}"
        check(module_text(1, C, [("x", ta, src)], body, [("%y", tb, want)]))


def test_reshape_of_contiguous_tiles_is_local():
    body = f"    %y = hlo.reshape %x {S('{devices=[4,1]0,1,2,3}')} : (tensor<4x6x8xf32>) -> tensor<24x8xf32>"
    m = check(
        module_text(
            1,
            4,
            [("x", "tensor<4x6x8xf32>", "{devices=[4,1,1]0,1,2,3}")],
            body,
            [("%y", "tensor<24x8xf32>", "{devices=[4,1]0,1,2,3}")],
        )
    )
    assert not ops(m, ccl.CollectiveOp)
    (r,) = ops(m, hlo.ReshapeOp)[-1:]
    assert str(r.result.type) == "tensor<6x8xf32>"


def test_reshape_of_non_contiguous_tiles_gathers():
    # [32] in 4 tiles as [4, 8] tiled [1, 4]: not contiguous chunks
    body = f"    %y = hlo.reshape %x {S('{devices=[1,4]0,1,2,3}')} : (tensor<32xi32>) -> tensor<4x8xi32>"
    m = check(
        module_text(
            1,
            4,
            [("x", "tensor<32xi32>", "{devices=[4]0,1,2,3}")],
            body,
            [("%y", "tensor<4x8xi32>", "{devices=[1,4]0,1,2,3}")],
        )
    )
    assert ops(m, ccl.AllGatherOp)


# --------------------------------------------------------------------------
# dot_general
# --------------------------------------------------------------------------

DOTS = {
    # C: [(lhs [8,16], rhs [16,8], result [8,8])]
    2: [
        ("{devices=[1,2]0,1}", "{devices=[2,1]0,1}", "{replicated}"),
        ("{devices=[1,2]0,1}", "{replicated}", "{replicated}"),
        ("{devices=[2,1]0,1}", "{replicated}", "{devices=[2,1]0,1}"),
        ("{replicated}", "{devices=[1,2]0,1}", "{devices=[1,2]0,1}"),
        ("{devices=[1,2]0,1}", "{devices=[2,1]1,0}", "{devices=[2,1]0,1}"),
        ("{maximal device=1}", "{devices=[2,1]0,1}", "{maximal device=0}"),
    ],
    4: [
        (
            "{devices=[2,2]0,1,2,3}",
            "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}",
            "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
        ),
        ("{devices=[1,4]0,1,2,3}", "{devices=[4,1]0,1,2,3}", "{replicated}"),
        ("{devices=[2,2]0,1,2,3}", "{devices=[2,2]0,1,2,3}", "{devices=[2,2]0,1,2,3}"),
        (
            "{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}",
            "{devices=[2,2]0,2,1,3}",
            "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}",
        ),
        ("{devices=[4,1]0,1,2,3}", "{devices=[1,4]0,1,2,3}", "{devices=[2,2]0,1,2,3}"),
    ],
    8: [
        (
            "{devices=[2,4]<=[8]}",
            "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}",
            "{devices=[2,1,4]<=[8] last_tile_dim_replicate}",
        ),
        ("{devices=[1,8]<=[8]}", "{devices=[8,1]<=[8]}", "{replicated}"),
        (
            "{devices=[2,2,2]<=[8] last_tile_dim_replicate}",
            "{devices=[2,2,2]<=[8] last_tile_dim_replicate}",
            "{devices=[2,2,2]<=[8] last_tile_dim_replicate}",
        ),
        ("{devices=[4,2]<=[8]}", "{replicated}", "{devices=[4,2]<=[8]}"),
    ],
}


@pytest.mark.parametrize("R", [1, 2])
@pytest.mark.parametrize("C", [2, 4, 8])
def test_dot(C, R):
    for lhs, rhs, want in DOTS[C]:
        body = (
            f"    %d = hlo.dot_general %a, %b, batching_dims = [] x [], contracting_dims = [1] x [0] {S(want)}"
            " : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>"
        )
        check(
            module_text(
                R,
                C,
                [("a", "tensor<8x16xf32>", lhs), ("b", "tensor<16x8xf32>", rhs)],
                body,
                [("%d", "tensor<8x8xf32>", want)],
            )
        )


def test_dot_with_split_contraction_is_local_dot_and_all_reduce():
    body = (
        f"    %d = hlo.dot_general %a, %b, batching_dims = [] x [], contracting_dims = [1] x [0] {S('{replicated}')}"
        " : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>"
    )
    m = check(
        module_text(
            2,
            4,
            [("a", "tensor<8x16xf32>", "{devices=[1,4]0,1,2,3}"), ("b", "tensor<16x8xf32>", "{devices=[4,1]0,1,2,3}")],
            body,
            [("%d", "tensor<8x8xf32>", "{replicated}")],
        )
    )
    (dot,) = ops(m, hlo.DotGeneralOp)
    assert str(dot.lhs.type) == "tensor<8x4xf32>" and str(dot.rhs.type) == "tensor<4x8xf32>"
    (ar,) = ops(m, ccl.AllReduceOp)
    assert ar.params()["replica_groups"] == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert ar.params()["computation"] == "add"
    assert not ops(m, ccl.AllGatherOp)


def test_dot_partial_replication_groups():
    """Result [2,1] with 2-way replication: each all-reduce group holds one
    result tile's two contraction tiles."""
    body = (
        f"    %d = hlo.dot_general %a, %b, batching_dims = [] x [], contracting_dims = [1] x [0] "
        f"{S('{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}')}"
        " : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>"
    )
    m = check(
        module_text(
            1,
            4,
            [
                ("a", "tensor<8x16xf32>", "{devices=[2,2]0,1,2,3}"),
                ("b", "tensor<16x8xf32>", "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"),
            ],
            body,
            [("%d", "tensor<8x8xf32>", "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}")],
        )
    )
    (ar,) = ops(m, ccl.AllReduceOp)
    assert ar.params()["replica_groups"] == ((0, 1), (2, 3))
    assert not ops(m, ccl.AllGatherOp)


@pytest.mark.parametrize("C", [2, 4, 8])
def test_batched_dot(C):
    lhs_sh = {2: "{devices=[2,1,1]0,1}", 4: "{devices=[2,1,2]0,1,2,3}", 8: "{devices=[2,2,2]<=[8]}"}[C]
    rhs_sh = {
        2: "{devices=[2,1,1]0,1}",
        4: "{devices=[2,2,1]0,1,2,3}",
        8: "{devices=[2,2,1,2]<=[8] last_tile_dim_replicate}",
    }[C]
    outs = {
        2: ["{devices=[2,1,1]0,1}", "{replicated}"],
        4: ["{devices=[2,1,1,2]0,1,2,3 last_tile_dim_replicate}", "{devices=[2,1,2]0,1,2,3}"],
        8: ["{devices=[2,2,1,2]<=[8] last_tile_dim_replicate}", "{devices=[2,1,4]<=[8]}"],
    }[C]
    for want in outs:
        body = (
            f"    %d = hlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] {S(want)}"
            " : (tensor<4x8x6xi32>, tensor<4x6x8xi32>) -> tensor<4x8x8xi32>"
        )
        check(
            module_text(
                2,
                C,
                [("a", "tensor<4x8x6xi32>", lhs_sh), ("b", "tensor<4x6x8xi32>", rhs_sh)],
                body,
                [("%d", "tensor<4x8x8xi32>", want)],
            )
        )


# --------------------------------------------------------------------------
# reduce
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind,init", [("add", "0"), ("add", "5"), ("mul", "1"), ("mul", "2"), ("max", "-100"), ("min", "7")]
)
@pytest.mark.parametrize("C", [2, 4, 8])
def test_reduce(C, kind, init):
    """Reductions over tiled and untiled dims, results whole or tiled."""
    tiled_rows = {2: "{devices=[2]0,1}", 4: "{devices=[4]0,1,2,3}", 8: "{devices=[8]<=[8]}"}[C]
    for src in RANK2[C]:
        x = "%x" if kind != "mul" else "%m"  # products of small factors stay exact
        body = f"""
    %one = hlo.constant dense<1> : tensor<8x16xi32>
    %two = hlo.constant dense<2> : tensor<8x16xi32>
    %p = hlo.compare GT, %x, %one {S(src)} : (tensor<8x16xi32>, tensor<8x16xi32>) -> tensor<8x16xi1>
    %m = hlo.select %p, %two, %one {S(src)} : (tensor<8x16xi1>, tensor<8x16xi32>, tensor<8x16xi32>) -> tensor<8x16xi32>
    %i = hlo.constant dense<{init}> : tensor<i32>
    %r1 = hlo.reduce({x} init: %i) applies {kind} across dimensions = [1] {S("{replicated}")} : (tensor<8x16xi32>, tensor<i32>) -> tensor<8xi32>
    %t1 = hlo.reduce({x} init: %i) applies {kind} across dimensions = [1] {S(tiled_rows)} : (tensor<8x16xi32>, tensor<i32>) -> tensor<8xi32>
    %r0 = hlo.reduce({x} init: %i) applies {kind} across dimensions = [0] {S("{replicated}")} : (tensor<8x16xi32>, tensor<i32>) -> tensor<16xi32>
    %r01 = hlo.reduce({x} init: %i) applies {kind} across dimensions = [0, 1] {S("{replicated}")} : (tensor<8x16xi32>, tensor<i32>) -> tensor<i32>"""
        check(
            module_text(
                1,
                C,
                [("x", "tensor<8x16xi32>", src)],
                body,
                [
                    ("%r1", "tensor<8xi32>", "{replicated}"),
                    ("%t1", "tensor<8xi32>", tiled_rows),
                    ("%r0", "tensor<16xi32>", "{replicated}"),
                    ("%r01", "tensor<i32>", "{replicated}"),
                ],
            )
        )


def test_reduce_over_tiled_dim_all_reduces_with_its_computation():
    body = f"""
    %i = hlo.constant dense<-100.0> : tensor<f32>
    %r = hlo.reduce(%x init: %i) applies max across dimensions = [1] {S("{devices=[2,2]0,1,2,3 last_tile_dim_replicate}")} : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>"""
    m = check(
        module_text(
            2,
            4,
            [("x", "tensor<8x16xf32>", "{devices=[2,2]0,1,2,3}")],
            body,
            [("%r", "tensor<8xf32>", "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}")],
        )
    )
    (red,) = ops(m, hlo.ReduceOp)
    assert str(red.input.type) == "tensor<4x8xf32>"
    (ar,) = ops(m, ccl.AllReduceOp)
    assert ar.params()["computation"] == "max"
    assert ar.params()["replica_groups"] == ((0, 1), (2, 3), (4, 5), (6, 7))


def test_reduce_init_value_counts_once():
    body = f"""
    %i = hlo.constant dense<10> : tensor<i32>
    %r = hlo.reduce(%x init: %i) applies add across dimensions = [0] {S("{replicated}")} : (tensor<8xi32>, tensor<i32>) -> tensor<i32>"""
    m = check(
        module_text(
            1, 4, [("x", "tensor<8xi32>", "{devices=[4]0,1,2,3}")], body, [("%r", "tensor<i32>", "{replicated}")]
        )
    )
    assert ops(m, ccl.AllReduceOp) and ops(m, hlo.AddOp)


@pytest.mark.parametrize("kind", ["and", "or"])
def test_reduce_bool_and_or(kind):
    for C in (2, 4, 8):
        for src in RANK2[C]:
            body = f"""
    %i = hlo.constant dense<{"true" if kind == "and" else "false"}> : tensor<i1>
    %r = hlo.reduce(%x init: %i) applies {kind} across dimensions = [0] {S("{replicated}")} : (tensor<8x16xi1>, tensor<i1>) -> tensor<16xi1>"""
            check(module_text(1, C, [("x", "tensor<8x16xi1>", src)], body, [("%r", "tensor<16xi1>", "{replicated}")]))


def test_reduce_int_and_gathers():
    """Bitwise and of ints has no all-reduce: the input is gathered instead."""
    body = f"""
    %i = hlo.constant dense<-1> : tensor<i32>
    %r = hlo.reduce(%x init: %i) applies and across dimensions = [0] {S("{replicated}")} : (tensor<8xi32>, tensor<i32>) -> tensor<i32>"""
    m = check(
        module_text(1, 2, [("x", "tensor<8xi32>", "{devices=[2]0,1}")], body, [("%r", "tensor<i32>", "{replicated}")])
    )
    assert ops(m, ccl.AllGatherOp) and not ops(m, ccl.AllReduceOp)


# --------------------------------------------------------------------------
# iota, constants, slice, concatenate
# --------------------------------------------------------------------------


@pytest.mark.parametrize("C", [2, 4, 8])
def test_iota_and_constants(C):
    rng = np.random.default_rng(C)
    table = rng.integers(-9, 9, (8, 16))
    dense = "dense<[" + ", ".join("[" + ", ".join(map(str, row)) + "]" for row in table) + "]>"
    for want in RANK2[C]:
        body = f"""
    %i0 = hlo.iota dim = 0 {S(want)} : tensor<8x16xi32>
    %i1 = hlo.iota dim = 1 {S(want)} : tensor<8x16xi32>
    %f = hlo.iota dim = 1 {S(want)} : tensor<8x16xf32>
    %c = hlo.constant {S(want)} {dense} : tensor<8x16xi32>
    %s = hlo.constant {S(want)} dense<7> : tensor<8x16xi32>
    %a = hlo.add %i0, %c {S(want)} : tensor<8x16xi32>
    %b = hlo.add %i1, %s {S(want)} : tensor<8x16xi32>"""
        check(
            module_text(
                2,
                C,
                [],
                body,
                [("%a", "tensor<8x16xi32>", want), ("%b", "tensor<8x16xi32>", want), ("%f", "tensor<8x16xf32>", want)],
            )
        )


def test_tiled_iota_adds_the_core_offset():
    sh = "{devices=[4,1]0,1,2,3}"
    m = check(
        module_text(1, 4, [], f"    %i = hlo.iota dim = 0 {S(sh)} : tensor<8x3xi64>", [("%i", "tensor<8x3xi64>", sh)])
    )
    (iota,) = ops(m, hlo.IotaOp)
    assert str(iota.result.type) == "tensor<2x3xi64>"
    assert ops(m, LogicalCoreIdOp) and ops(m, hlo.AddOp)


@pytest.mark.parametrize("C", [2, 4, 8])
def test_slice_and_concatenate(C):
    for src, want in itertools.product(RANK2[C], RANK2[C][:4]):
        body = f"""
    %a = hlo.slice %x, start = [0, 0], limit = [8, 16], strides = [1, 1] {S(want)} : (tensor<8x16xi32>) -> tensor<8x16xi32>
    %b = hlo.slice %x, start = [0, 2], limit = [8, 10], strides = [1, 1] {S(want)} : (tensor<8x16xi32>) -> tensor<8x8xi32>
    %c = hlo.slice %x, start = [1, 0], limit = [7, 16], strides = [3, 2] {S("{replicated}")} : (tensor<8x16xi32>) -> tensor<2x8xi32>
    %d = hlo.concatenate %a, %x dim = 0 {S(want)} : (tensor<8x16xi32>, tensor<8x16xi32>) -> tensor<16x16xi32>
    %e = hlo.concatenate %b, %b dim = 1 {S(want)} : (tensor<8x8xi32>, tensor<8x8xi32>) -> tensor<8x16xi32>"""
        check(
            module_text(
                1,
                C,
                [("x", "tensor<8x16xi32>", src)],
                body,
                [
                    ("%a", "tensor<8x16xi32>", want),
                    ("%b", "tensor<8x8xi32>", want),
                    ("%c", "tensor<2x8xi32>", "{replicated}"),
                    ("%d", "tensor<16x16xi32>", want),
                    ("%e", "tensor<8x16xi32>", src),
                ],
            )
        )


# --------------------------------------------------------------------------
# Control flow, cross-replica sums, constraints
# --------------------------------------------------------------------------


@pytest.mark.parametrize("C", [2, 4, 8])
@pytest.mark.parametrize("R", [1, 2])
def test_while_and_if(C, R):
    tiled, other = RANK2[C][0], RANK2[C][2]
    body = f"""
    %zero = hlo.constant dense<0> : tensor<i32>
    %one = hlo.constant dense<1> : tensor<i32>
    %three = hlo.constant dense<3> : tensor<i32>
    %w:2 = hlo.while(%i = %zero, %acc = %x) : tensor<i32>, tensor<8x16xi32> attributes {S("{replicated}", tiled)} cond {{
      %c = hlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %c : tensor<i1>
    }} do {{
    ^bb0(%i1: tensor<i32>, %acc1: tensor<8x16xi32>):
      %n = hlo.add %i1, %one : tensor<i32>
      %d = hlo.add %acc1, %x {S(other)} : tensor<8x16xi32>
      %z = hlo.constant dense<0> : tensor<i32>
      %s = hlo.reduce(%d init: %z) applies add across dimensions = [0, 1] : (tensor<8x16xi32>, tensor<i32>) -> tensor<i32>
      %sb = hlo.broadcast_in_dim %s, dims = [] {S(tiled)} : (tensor<i32>) -> tensor<8x16xi32>
      %e = hlo.subtract %d, %sb {S(tiled)} : tensor<8x16xi32>
      hlo.return %n, %e : tensor<i32>, tensor<8x16xi32>
    }}
    %p = hlo.compare GT, %w#0, %one : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %f = hlo.if %p -> (tensor<8x16xi32>) {{
      %g = hlo.negate %w#1 {S(other)} : tensor<8x16xi32>
      hlo.return %g : tensor<8x16xi32>
    }} else {{
      hlo.return %x : tensor<8x16xi32>
    }} {S(tiled)}"""
    m = check(module_text(R, C, [("x", "tensor<8x16xi32>", tiled)], body, [("%f", "tensor<8x16xi32>", other)]))
    (w,) = ops(m, WhileOp)
    assert str(w.results[1].type) != "tensor<8x16xi32>"


@pytest.mark.parametrize("C", [2, 4, 8])
@pytest.mark.parametrize("R", [1, 2, 3])
def test_cross_replica_all_reduce(C, R):
    """A sum over replicas, per core: replica-id groups become participant
    groups; already-participant groups stay."""
    sh = RANK2[C][1]
    groups = "[[" + ", ".join(map(str, range(R))) + "]]"
    participants = "[" + ", ".join("[" + ", ".join(str(g * C + c) for g in range(R)) + "]" for c in range(C)) + "]"
    body = f"""
    %s = ccl.all_reduce %x applies add groups = dense<{groups}> : tensor<1x{R}xi64> channel 1 {S(sh)} : tensor<8x16xi32>
    %t = ccl.all_reduce %s applies max groups = dense<{participants}> : tensor<{C}x{R}xi64> channel 2 {S("{replicated}")} : tensor<8x16xi32>"""
    m = check(
        module_text(
            R,
            C,
            [("x", "tensor<8x16xi32>", RANK2[C][0])],
            body,
            [("%s", "tensor<8x16xi32>", sh), ("%t", "tensor<8x16xi32>", "{replicated}")],
        )
    )
    first = [op for op in ops(m, ccl.AllReduceOp) if op.params()["channel_id"] == 1]
    assert first[0].params()["replica_groups"] == tuple(tuple(g * C + c for g in range(R)) for c in range(C))


def test_sharding_constraint_is_a_reshard_and_goes_away():
    t = "tensor<8x16xi32>"
    body = f"""
    %c = tpu.sharding_constraint %x to #tpu.sharding<{{devices=[2,4]<=[8]}}> {S("{devices=[2,4]<=[8]}")} : {t}
    %r = tpu.sharding_constraint %c to #tpu.sharding<{{replicated}}> {S("{replicated}")} : {t}
    %y = hlo.add %c, %r {S("{devices=[2,4]<=[8]}")} : {t}"""
    m = check(module_text(1, 8, [("x", t, "{replicated}")], body, [("%y", t, "{devices=[2,4]<=[8]}")]))
    assert not ops(m, ShardingConstraintOp)
    assert "tpu.sharding =" not in str(m)


def test_maximal_values_are_computed_on_every_core():
    t = "tensor<8x16xi32>"
    body = f"""
    %c = tpu.sharding_constraint %x to #tpu.sharding<{{maximal device=2}}> {S("{maximal device=2}")} : {t}
    %y = hlo.multiply %c, %c {S("{maximal device=2}")} : {t}
    %z = hlo.add %y, %x {S("{devices=[4,1]0,1,2,3}")} : {t}"""
    check(
        module_text(
            2,
            4,
            [("x", t, "{devices=[1,4]0,1,2,3}")],
            body,
            [("%y", t, "{maximal device=2}"), ("%z", t, "{devices=[4,1]0,1,2,3}")],
        )
    )


def test_unannotated_values_are_replicated():
    """Without tpu.sharding (and without boundary shardings) every value is
    whole; the constraints still apply."""
    text = """
func.func @main(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %r = tpu.replicate([%a] as %x: tensor<8x4xf32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %c = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1]0,1}> : tensor<8x4xf32>
    %y = hlo.add %c, %c : tensor<8x4xf32>
    tpu.yield %y : tensor<8x4xf32>
  }
  func.return %r : tensor<8x4xf32>
}"""
    m = check(text)
    rep = replicate_of(m)
    assert str(rep.attributes["tpu.input_shardings"]) == "[#tpu.sharding<{replicated}>]"


# --------------------------------------------------------------------------
# The seed's model: a [batch, width, height, channel] image split [1, 2, 4, 1]
# --------------------------------------------------------------------------

IMAGE = "{devices=[1,2,4,1]<=[8]}"


@pytest.mark.parametrize("R", [1, 2])
def test_seed_image_over_8_cores(R):
    body = f"""
    %img = tpu.sharding_constraint %x to #tpu.sharding<{IMAGE}> {S(IMAGE)} : tensor<2x8x8x3xf32>
    %flat = hlo.reshape %img {S("{devices=[1,2,4]<=[8] last_tile_dim_replicate}")} : (tensor<2x8x8x3xf32>) -> tensor<2x192xf32>
    %h = hlo.dot_general %flat, %w, batching_dims = [] x [], contracting_dims = [1] x [0] {S("{replicated}")} : (tensor<2x192xf32>, tensor<192x16xf32>) -> tensor<2x16xf32>
    %z = hlo.constant dense<0.0> : tensor<2x16xf32>
    %relu = hlo.maximum %h, %z {S("{replicated}")} : tensor<2x16xf32>
    %zero = hlo.constant dense<0.0> : tensor<f32>
    %sum = hlo.reduce(%relu init: %zero) applies add across dimensions = [1] {S("{replicated}")} : (tensor<2x16xf32>, tensor<f32>) -> tensor<2xf32>
    %act = hlo.maximum %img, %img {S(IMAGE)} : tensor<2x8x8x3xf32>
    %pool = hlo.reduce(%act init: %zero) applies add across dimensions = [1, 2] {S("{replicated}")} : (tensor<2x8x8x3xf32>, tensor<f32>) -> tensor<2x3xf32>"""
    m = check(
        module_text(
            R,
            8,
            [("x", "tensor<2x8x8x3xf32>", IMAGE), ("w", "tensor<192x16xf32>", "{replicated}")],
            body,
            [("%sum", "tensor<2xf32>", "{replicated}"), ("%pool", "tensor<2x3xf32>", "{replicated}")],
        )
    )
    rep = replicate_of(m)
    assert str(rep.body.block.args[0].type) == "tensor<2x4x2x3xf32>"
    (gather,) = ops(m, ccl.AllGatherOp)  # height, to make the reshape's chunks contiguous
    assert gather.params()["all_gather_dim"] == 2
    reduces = ops(m, ccl.AllReduceOp)
    assert len(reduces) == 2  # the dot's partial sums, the pooling's


# --------------------------------------------------------------------------
# Random shardings on a chain of shape ops, dot and reductions
# --------------------------------------------------------------------------


def _random_sharding(rng, shape, C) -> str:
    """A random tiling of ``shape`` over ``C`` cores (even splits), with
    partial replication and a shuffled device order, or replicated/maximal."""
    roll = rng.random()
    if roll < 0.1:
        return "{replicated}"
    if roll < 0.15:
        return f"{{maximal device={int(rng.integers(C))}}}"
    counts, rep, rem = [1] * len(shape), 1, C
    while rem > 1:
        dims = [d for d in range(len(shape)) if shape[d] % (counts[d] * 2) == 0]
        if dims and rng.random() > 0.2:
            counts[int(rng.choice(dims))] *= 2
        else:
            rep *= 2
        rem //= 2
    return str(Sharding.tiled(counts, rng.permutation(C), replication=rep))


def _t(shape) -> str:
    return "tensor<" + "".join(f"{n}x" for n in shape) + "i32>"


@pytest.mark.parametrize("seed", range(24))
def test_random_shardings(seed):
    rng = np.random.default_rng(seed)
    C, R = int(rng.choice([2, 4, 8])), int(rng.choice([1, 2]))

    def r(shape):
        return S(_random_sharding(rng, shape, C))

    body = f"""
    %a = hlo.negate %x {r((8, 4, 6))} : {_t((8, 4, 6))}
    %b = hlo.transpose %a, dims = [1, 0, 2] {r((4, 8, 6))} : ({_t((8, 4, 6))}) -> {_t((4, 8, 6))}
    %c = hlo.reshape %b {r((32, 6))} : ({_t((4, 8, 6))}) -> {_t((32, 6))}
    %d = hlo.dot_general %c, %w, batching_dims = [] x [], contracting_dims = [1] x [0] {r((32, 8))} : ({_t((32, 6))}, {_t((6, 8))}) -> {_t((32, 8))}
    %z = hlo.constant dense<3> : tensor<i32>
    %e = hlo.reduce(%d init: %z) applies add across dimensions = [0] {r((8,))} : ({_t((32, 8))}, tensor<i32>) -> {_t((8,))}
    %f = hlo.broadcast_in_dim %d, dims = [0, 1] {r((32, 8, 2))} : ({_t((32, 8))}) -> {_t((32, 8, 2))}
    %g = hlo.reshape %a {r((4, 8, 6))} : ({_t((8, 4, 6))}) -> {_t((4, 8, 6))}
    %m = hlo.reduce(%g init: %z) applies max across dimensions = [1, 2] {r((4,))} : ({_t((4, 8, 6))}, tensor<i32>) -> {_t((4,))}
    %s = hlo.slice %f, start = [4, 0, 0], limit = [20, 8, 2], strides = [1, 1, 1] {r((16, 8, 2))} : ({_t((32, 8, 2))}) -> {_t((16, 8, 2))}"""
    outs = [
        ("%e", _t((8,)), _random_sharding(rng, (8,), C)),
        ("%s", _t((16, 8, 2)), _random_sharding(rng, (16, 8, 2), C)),
        ("%m", _t((4,)), _random_sharding(rng, (4,), C)),
        ("%b", _t((4, 8, 6)), _random_sharding(rng, (4, 8, 6), C)),
    ]
    ins = [
        ("x", _t((8, 4, 6)), _random_sharding(rng, (8, 4, 6), C)),
        ("w", _t((6, 8)), _random_sharding(rng, (6, 8), C)),
    ]
    check(module_text(R, C, ins, body, outs))


@pytest.mark.parametrize("R", [1, 2])
def test_zero_size_slice_and_pad(R):
    body = f"""
    %s = hlo.slice %x, start = [3, 0], limit = [3, 4], strides = [1, 1] {S("{devices=[2,1]0,1}")} : ({_t((8, 4))}) -> {_t((0, 4))}
    %z = hlo.constant dense<5> : tensor<i32>
    %p = hlo.pad %y, %z, low = [4, 0], high = [4, 0], interior = [0, 0] {S("{devices=[1,2]1,0}")} : ({_t((0, 4))}, tensor<i32>) -> {_t((8, 4))}"""
    ins = [("x", _t((8, 4)), "{devices=[2,1]0,1}"), ("y", _t((0, 4)), "{replicated}")]
    outs = [("%s", _t((0, 4)), "{devices=[2,1]0,1}"), ("%p", _t((8, 4)), "{devices=[1,2]1,0}")]
    module = check(module_text(R, 2, ins, body, outs))
    assert not ops(module, ccl.CollectiveOp) and not ops(module, ccl.CollectivePermuteOp)


@pytest.mark.parametrize("seed", range(24))
def test_random_windows(seed):
    """Slices, edge pads and concatenations (windowed operands: halo
    exchange, tiles by collective permute) between random layouts, with
    partial replication and shuffled device orders."""
    rng = np.random.default_rng(100 + seed)
    C, R = int(rng.choice([2, 4, 8])), int(rng.choice([1, 2]))

    def r(shape):
        return S(_random_sharding(rng, shape, C))

    d = int(rng.integers(2))
    n = (24, 16)[d]
    size = int(rng.choice([8, 16]))
    start = int(rng.integers(0, n - size + 1))
    stride = int(rng.choice([1, 1, 2])) if start + 2 * size - 1 <= n else 1
    sl_shape = (size, 16) if d == 0 else (24, size)
    lim = [24, 16]
    lim[d] = start + (size - 1) * stride + 1
    starts, strides = [0, 0], [1, 1]
    starts[d], strides[d] = start, stride
    low, high = [0, 0], [0, 0]
    low[d] = int(rng.integers(-3, 5))
    high[d] = int(rng.choice([8, 16])) - size - low[d]
    pad_shape = list(sl_shape)
    pad_shape[d] = size + low[d] + high[d]
    pad_shape = tuple(pad_shape)
    cat_shape = list(pad_shape)
    cat_shape[d] += 24 if d == 0 else 16
    cat_shape = tuple(cat_shape)
    body = f"""
    %s = hlo.slice %x, start = {starts}, limit = {lim}, strides = {strides} {r(sl_shape)} : ({_t((24, 16))}) -> {_t(sl_shape)}
    %z = hlo.constant dense<-7> : tensor<i32>
    %p = hlo.pad %s, %z, low = {low}, high = {high}, interior = [0, 0] {r(pad_shape)} : ({_t(sl_shape)}, tensor<i32>) -> {_t(pad_shape)}
    %c = hlo.concatenate %p, %x dim = {d} {r(cat_shape)} : ({_t(pad_shape)}, {_t((24, 16))}) -> {_t(cat_shape)}"""
    outs = [
        ("%c", _t(cat_shape), _random_sharding(rng, cat_shape, C)),
        ("%s", _t(sl_shape), _random_sharding(rng, sl_shape, C)),
    ]
    ins = [("x", _t((24, 16)), _random_sharding(rng, (24, 16), C))]
    check(module_text(R, C, ins, body, outs))


# --------------------------------------------------------------------------
# Structure and diagnostics
# --------------------------------------------------------------------------


def test_registered():
    assert ALL_PASSES["tpu-spmd-partition"] is SpmdPartition


def test_single_core_replicate_untouched():
    text = module_text(
        2,
        1,
        [("x", "tensor<4xf32>", "{replicated}")],
        "    %y = hlo.negate %x : tensor<4xf32>",
        [("%y", "tensor<4xf32>", "{replicated}")],
    ).replace(", num_cores_per_replica = 1 : i64", "")
    m = parse(text)
    before = str(m)
    partition(m)
    assert str(m) == before


def test_second_run_changes_nothing():
    t = "tensor<8x16xi32>"
    m = partition(
        parse(
            module_text(
                1,
                4,
                [("x", t, "{devices=[2,2]0,1,2,3}")],
                f"    %y = hlo.negate %x {S('{replicated}')} : {t}",
                [("%y", t, "{replicated}")],
            )
        )
    )
    once = str(m)
    assert str(partition(m)) == once


def test_channel_ids_are_fresh():
    t = "tensor<8x16xi32>"
    body = f"""
    %s = ccl.all_reduce %x applies add groups = dense<[[0]]> : tensor<1x1xi64> channel 7 {S("{devices=[2,2]0,1,2,3}")} : {t}
    %y = hlo.negate %s {S("{replicated}")} : {t}"""
    m = partition(parse(module_text(1, 4, [("x", t, "{devices=[2,2]0,1,2,3}")], body, [("%y", t, "{replicated}")])))
    ids = [op.params()["channel_id"] for op in m.walk() if isinstance(op, ccl.CollectiveOp)]
    assert ids == [7, 8, 9]


@pytest.mark.parametrize(
    "body,message",
    [
        (
            f"    %y = hlo.negate %x {S('{devices=[2,1]0,1}')} : tensor<8x16xi32>",
            "'hlo.negate' op result 0 has sharding {devices=[2,1]0,1} over 2 devices, but a replica has 4 logical devices",
        ),
        (
            f"    %y = hlo.negate %x {S('{devices=[1,4,1]0,1,2,3}')} : tensor<8x16xi32>",
            "'hlo.negate' op result 0: sharding {devices=[1,4,1]0,1,2,3} has 3 tile dimensions but the tensor has rank 2",
        ),
        (
            f"    %y = hlo.slice %x, start = [0, 0], limit = [6, 16], strides = [1, 1] {S('{devices=[4,1]0,1,2,3}')} : (tensor<8x16xi32>) -> tensor<6x16xi32>",
            (
                "'hlo.slice' op result 0: sharding {devices=[4,1]0,1,2,3} cuts dimension 0 of shape [6, 16] into 4 tiles, "
                "but 6 is not divisible by 4 (xtpu requires even splits)"
            ),
        ),
        (
            "    %y = ccl.all_gather %x dim = 0 groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64> : (tensor<8x16xi32>) -> tensor<32x16xi32>",
            "'ccl.all_gather' op is already a collective",
        ),
        (
            f"    %y = hlo.negate %x {S('{manual}')} : tensor<8x16xi32>",
            "'hlo.negate' op cannot reshard a value of shape [8, 16] from {replicated} to {manual}",
        ),
    ],
)
def test_diagnostics(body, message):
    m = parse(module_text(1, 4, [("x", "tensor<8x16xi32>", "{replicated}")], body, []))
    before = str(m)
    with pytest.raises(DiagnosticException) as e:
        SpmdPartition().apply(make_context(), m)
    assert message in str(e.value)
    assert str(m) == before  # nothing changed


def test_all_reduce_groups_that_are_neither():
    t = "tensor<4xi32>"
    body = f"    %s = ccl.all_reduce %x applies add groups = dense<[[0, 1, 2]]> : tensor<1x3xi64> : {t}"
    text = module_text(2, 2, [("x", t, "{replicated}")], body, [("%s", t, "{replicated}")])
    with pytest.raises(DiagnosticException, match=r"misses participants \[3\]"):
        parse(text)  # the verifier rejects them; the pass checks again on unverified IR
    m = Parser(make_context(), text).parse_module()
    with pytest.raises(DiagnosticException, match=r"neither the 2 replica ids nor the 4 participants"):
        SpmdPartition().apply(make_context(), m)


# --------------------------------------------------------------------------
# With tpu-propagate-sharding, when it is there
# --------------------------------------------------------------------------


needs_propagation = pytest.mark.skipif(
    "tpu-propagate-sharding" not in ALL_PASSES, reason="tpu-propagate-sharding is not registered"
)


@needs_propagation
@pytest.mark.parametrize("R", [1, 2])
def test_after_propagation_seed_model(R):
    text = f"""
func.func @main({", ".join(f"%a{r}: tensor<2x8x8x3xf32>, %b{r}: tensor<192x16xf32>" for r in range(R))}) -> ({", ".join(["tensor<2xf32>"] * R)}) {{
  %r{":" + str(R) if R > 1 else ""} = tpu.replicate([{", ".join(f"%a{r}" for r in range(R))}] as %x: tensor<2x8x8x3xf32>, [{", ".join(f"%b{r}" for r in range(R))}] as %w: tensor<192x16xf32>) {{n = {R} : i64, num_cores_per_replica = 8 : i64}} {{
    %img = tpu.sharding_constraint %x to #tpu.sharding<{IMAGE}> : tensor<2x8x8x3xf32>
    %act = hlo.maximum %img, %img : tensor<2x8x8x3xf32>
    %flat = hlo.reshape %act : (tensor<2x8x8x3xf32>) -> tensor<2x192xf32>
    %h = hlo.dot_general %flat, %w, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<2x192xf32>, tensor<192x16xf32>) -> tensor<2x16xf32>
    %z = hlo.constant dense<0.0> : tensor<2x16xf32>
    %relu = hlo.maximum %h, %z : tensor<2x16xf32>
    %zero = hlo.constant dense<0.0> : tensor<f32>
    %sum = hlo.reduce(%relu init: %zero) applies add across dimensions = [1] : (tensor<2x16xf32>, tensor<f32>) -> tensor<2xf32>
    tpu.yield %sum : tensor<2xf32>
  }}
  func.return {", ".join(f"%r#{r}" if R > 1 else "%r" for r in range(R))} : {", ".join(["tensor<2xf32>"] * R)}
}}"""
    reference = parse(text)
    module = parse(text)
    ALL_PASSES["tpu-propagate-sharding"]().apply(make_context(), module)
    module.verify()
    partition(module)
    inputs = random_inputs(reference)
    want = simulate(reference, inputs, partitioned=False)
    got = simulate(module, inputs, partitioned=True)
    for w_row, g_row in zip(want, got):
        for w, g in zip(w_row, g_row):
            np.testing.assert_array_equal(g, w)
    assert str(replicate_of(module).body.block.args[0].type) == "tensor<2x4x2x3xf32>"


# --------------------------------------------------------------------------
# End to end: xtpu.replicate with several logical devices per replica
# --------------------------------------------------------------------------


def _seed_model(x, w, split=True):
    import xtpu

    if split:  # eagerly there is one logical device: nothing to split
        x = xtpu.split_to_logical_devices(x, [1, 2, 4, 1])
    a = xtpu.nn.relu(x * 2.0 - 1.0)
    h = xtpu.matmul(xtpu.reshape(a, (2, 192)), w)
    return xtpu.math.reduce_sum(xtpu.nn.relu(h), axis=1), xtpu.math.reduce_max(a, axis=[1, 2])


@needs_propagation
def test_end_to_end_seed_model_over_8_logical_devices():
    import xtpu

    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[2, 2, 1, 2], num_replicas=1)
    assert da.num_cores_per_replica == 8
    rng = np.random.default_rng(7)
    ins = [[rng.integers(-3, 4, (2, 8, 8, 3)).astype(np.float32), rng.integers(-3, 4, (192, 16)).astype(np.float32)]]
    (out,) = xtpu.replicate(_seed_model, ins, device_assignment=da)
    for got, want in zip(out, _seed_model(*ins[0], split=False)):
        np.testing.assert_array_equal(got, want)
    text = xtpu.lower(_seed_model, ins, device_assignment=da).compile().stages["tpu-spmd-partition"]
    assert "as %input0: tensor<2x4x2x3xf32>" in text  # each core's tile of the image
    assert "ccl.all_gather" in text and "ccl.all_reduce" in text


@needs_propagation
def test_end_to_end_two_replicas_of_four_logical_devices():
    import xtpu

    da = xtpu.DeviceAssignment.build(xtpu.initialize_tpu_system(), computation_shape=[1, 2, 1, 2], num_replicas=2)
    assert (da.num_replicas, da.num_cores_per_replica) == (2, 4)

    def step(x, w, split=True):
        if split:
            x = xtpu.split_to_logical_devices(x, [2, 2])
        h = xtpu.matmul(x, w)
        s = xtpu.cross_replica_sum(h)
        i0 = xtpu.constant(0)

        def body(i, acc):
            return i + 1, acc + xtpu.transpose(xtpu.matmul(w, xtpu.transpose(s)))

        _, acc = xtpu.while_loop(lambda i, acc: i < 3, body, (i0, s))
        return xtpu.math.reduce_sum(acc, axis=0), xtpu.math.reduce_max(x, axis=1)

    rng = np.random.default_rng(11)
    ins = [
        [rng.integers(-3, 4, (8, 8)).astype(np.float32), rng.integers(-2, 3, (8, 8)).astype(np.float32)]
        for _ in range(2)
    ]
    out = xtpu.replicate(step, ins, device_assignment=da)
    s = sum(x @ w for x, w in ins)  # the cross-replica sum, by hand
    for r, (x, w) in enumerate(ins):
        acc = s.copy()
        for _ in range(3):
            acc = acc + (w @ s.T).T
        np.testing.assert_array_equal(out[r][0], acc.sum(axis=0))
        np.testing.assert_array_equal(out[r][1], x.max(axis=1))
