"""tpu-propagate-sharding: the sharding algebra, the API for the partitioner,
the locality its rules promise, and legal shardings on random traced programs."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from xdsl.dialects.builtin import ArrayAttr, ModuleOp
from xdsl.parser import Parser
from xdsl.utils.test_value import create_ssa_value

import xtpu
from xtpu.core.pipeline import module_text, parse_pipeline, run_pipeline
from xtpu.dialects import make_context
from xtpu.dialects.hlo import BroadcastInDimOp, SliceOp
from xtpu.dialects.hlo_control import WhileOp
from xtpu.dialects.sharding import SHARDING_KEY, Sharding
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.dialects.tpu import OutsideCompilationOp, ReplicateOp
from xtpu.passes import DEFAULT_PIPELINE
from xtpu.passes.propagate_sharding import (
    INPUT_SHARDINGS,
    OUTPUT_SHARDINGS,
    PropagateSharding,
    _shape,
    _slice_sharding,
    input_shardings,
    legalize,
    map_dims,
    merge_shardings,
    output_shardings,
    partially_replicate,
    reshape_sharding,
    sharding_of,
    shardings_of,
    specificity,
)

S = Sharding.parse


def parse(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def propagate(module: ModuleOp) -> ModuleOp:
    PropagateSharding().apply(make_context(), module)
    module.verify()
    return module


def replicates(module: ModuleOp) -> list[ReplicateOp]:
    return [op for op in module.walk() if isinstance(op, ReplicateOp)]


# --------------------------------------------------------------------------
# The algebra
# --------------------------------------------------------------------------


def test_map_dims_moves_unmapped_tiles_into_replication():
    s = S("{devices=[2,2]<=[4]}")
    assert map_dims(s, [1, 0], 2) == S("{devices=[2,2]0,2,1,3}")
    assert map_dims(s, [0, -1], 1) == S("{devices=[2,2]<=[4] last_tile_dim_replicate}")
    assert map_dims(s, [-1, 0], 1) == S("{devices=[2,2]0,2,1,3 last_tile_dim_replicate}")
    assert map_dims(s, [-1, -1], 0) == Sharding.replicated()
    assert map_dims(s, [0, 2], 3) == S("{devices=[2,1,2]<=[4]}")
    assert map_dims(s, [0, 1], 2) is s
    assert map_dims(Sharding.maximal(1), [-1], 0) == Sharding.maximal(1)
    with pytest.raises(ValueError, match="not injective"):
        map_dims(s, [0, 0], 2)


def test_partially_replicate_and_legalize():
    s = S("{devices=[2,4]<=[8]}")
    assert partially_replicate(s, [1]) == S("{devices=[2,1,4]<=[8] last_tile_dim_replicate}")
    assert partially_replicate(s, [0, 1]) == Sharding.replicated()
    assert legalize(s, [8, 8]) is s
    assert legalize(s, [8, 6]) == S("{devices=[2,1,4]<=[8] last_tile_dim_replicate}")
    assert legalize(s, [3, 6]) == Sharding.replicated()


def test_merge_shardings():
    rows = S("{devices=[2,1,2]<=[4] last_tile_dim_replicate}")
    cols = S("{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}")
    assert merge_shardings(rows, cols) == S("{devices=[2,2]<=[4]}")
    assert merge_shardings(rows, S("{devices=[2,2]<=[4]}")) == S("{devices=[2,2]<=[4]}")
    # Columns held by {0,1},{2,3}: device 0 would hold tile (0,0) and device
    # 1 tile (0,0) too -- no even 2x2 grid.
    assert merge_shardings(rows, S("{devices=[1,2,2]<=[4] last_tile_dim_replicate}")) is None
    assert merge_shardings(S("{devices=[2,1]<=[2]}"), S("{devices=[1,2]<=[2]}")) is None
    assert merge_shardings(S("{devices=[2]0,1}"), S("{devices=[2]1,0}")) is None
    assert merge_shardings(Sharding.replicated(), rows) == rows
    assert merge_shardings(Sharding.maximal(0), rows) is None
    assert specificity(None) < specificity(Sharding.replicated()) < specificity(Sharding.maximal(3))
    assert specificity(Sharding.maximal(3)) < specificity(S("{devices=[2,1,2]<=[4] last_tile_dim_replicate}"))


# --------------------------------------------------------------------------
# Locality: where a rule keeps a split, each device computes its piece of the
# result from its piece of the operand alone.
# --------------------------------------------------------------------------


def random_sharding(rng: random.Random, shape, cores: int) -> Sharding:
    """A random legal sharding of ``shape`` over ``cores`` devices."""
    tiles = [1] * len(shape)
    left = cores
    for _ in range(8):
        dims = [d for d in range(len(shape)) if shape[d] % (tiles[d] * 2) == 0]
        if left == 1 or not dims or rng.random() < 0.2:
            break
        d = rng.choice(dims)
        tiles[d] *= 2
        left //= 2
    devices = list(range(cores))
    rng.shuffle(devices)
    if math.prod(tiles) == 1:
        return Sharding.replicated()
    return Sharding.tiled(tiles, devices, replication=left)


def check_local(x, s_in: Sharding, s_out: Sharding, global_fn, local_fn, cores: int) -> None:
    y = global_fn(x)
    for d in range(cores):
        piece = x[s_in.shard_slices(x.shape, d)]
        want = y[s_out.shard_slices(y.shape, d)]
        got = local_fn(piece, s_out.shard_shape(y.shape))
        np.testing.assert_array_equal(got, want, err_msg=f"device {d}: {s_in} -> {s_out}")


SHAPES = [(8,), (4, 6), (8, 4), (2, 4, 8), (4, 2, 2, 6)]


@pytest.mark.parametrize("seed", range(40))
def test_transpose_and_reshape_keep_local_splits(seed):
    rng = random.Random(seed)
    cores = rng.choice([2, 4, 8])
    shape = rng.choice(SHAPES)
    x = np.arange(math.prod(shape)).reshape(shape)
    s = random_sharding(rng, shape, cores)
    perm = list(range(len(shape)))
    rng.shuffle(perm)
    inv = [perm.index(i) for i in range(len(shape))]
    t = map_dims(s, inv, len(shape))
    check_local(x, s, t, lambda a: a.transpose(perm), lambda a, _: a.transpose(perm), cores)
    n = x.size
    factors = [f for f in (1, 2, 3, 4, 6, 8, 12, 16) if n % f == 0]
    a = rng.choice(factors)
    b = rng.choice([f for f in factors if (n // a) % f == 0])
    new_shape = tuple(v for v in (a, b, n // (a * b)) if v != 1) or (n,)
    r = reshape_sharding(s, shape, new_shape)
    assert legalize(r, new_shape) == r
    # What the result keeps, mapped back, is the operand's split minus the
    # dimensions it dropped (a coarsening of it); between the two the reshape
    # is local.
    back = reshape_sharding(r, new_shape, shape)
    assert merge_shardings(s, back) == s
    assert specificity(back) == specificity(r)
    check_local(x, back, r, lambda v: v.reshape(new_shape), lambda v, local: v.reshape(local), cores)


@pytest.mark.parametrize("seed", range(60))
def test_broadcast_slice_reduce_keep_local_splits(seed):
    rng = random.Random(seed)
    cores = rng.choice([2, 4])
    shape = rng.choice([(4, 6), (8, 4), (2, 4, 8)])
    x = np.arange(math.prod(shape)).reshape(shape)
    s = random_sharding(rng, shape, cores)
    # broadcast_in_dim into a new leading dimension of 2
    out_shape = (2,) + shape
    dims = list(range(1, len(shape) + 1))
    b = map_dims(s, dims, len(out_shape))
    kernel = BroadcastInDimOp.kernel(broadcast_dimensions=dims, shape=out_shape)

    def local_broadcast(v, local_shape):
        return BroadcastInDimOp.kernel(broadcast_dimensions=dims, shape=local_shape)(v)

    check_local(x, s, b, kernel, local_broadcast, cores)
    # slice, by the pass's rule: where it keeps a cut dimension's split each
    # device slices its own tile; elsewhere the operand, gathered along the
    # dropped dimensions (the rule's result mapped back), slices locally.
    d = rng.randrange(len(shape))
    stride = rng.choice([1, 2])
    start = rng.randrange(min(stride, shape[d])) if rng.random() < 0.5 else rng.randrange(shape[d])
    stop = shape[d] if rng.random() < 0.5 else rng.randrange(start + 1, shape[d] + 1)
    starts = [start if i == d else 0 for i in range(len(shape))]
    limits = [stop if i == d else n for i, n in enumerate(shape)]
    strides = [stride if i == d else 1 for i in range(len(shape))]
    operand = create_ssa_value(TensorSpec(shape, "int64").to_type())
    op = SliceOp.make([operand], start_indices=starts, limit_indices=limits, strides=strides)
    sl = _slice_sharding(op, s)
    assert merge_shardings(s, sl) == s and legalize(sl, _shape(op.result)) == sl
    idx = tuple(slice(a, b, st) for a, b, st in zip(starts, limits, strides))

    def local_slice(v, local_shape):
        if sl.is_tiled and sl.tile_shape[d] > 1:
            cut = slice(start, start + local_shape[d] * stride, stride)
        else:
            cut = slice(start, stop, stride)
        return v[tuple(cut if i == d else slice(None) for i in range(len(shape)))]

    t = sl.tile_shape[d] if sl.is_tiled else 1
    m = _shape(op.result)[d]
    if t == 1 or (stride * (m // t) == shape[d] // t and start < stride):
        check_local(x, sl, sl, lambda v: v[idx], local_slice, cores)
    else:  # a shifted slice keeps its split as a window (halo exchange, test_spmd_programs)
        assert shape[d] % t == 0 and m % t == 0
    # reduce over an untiled dimension
    free = [i for i in range(len(shape)) if not s.is_tiled or s.tile_shape[i] == 1]
    if free:
        r = rng.choice(free)
        keep = [i for i in range(len(shape)) if i != r]
        red = map_dims(s, [keep.index(i) if i in keep else -1 for i in range(len(shape))], len(keep))
        check_local(x, s, red, lambda v: v.sum(axis=r), lambda v, _: v.sum(axis=r), cores)


def test_dot_contracting_split_sums_partial_products():
    """lhs split on k, rhs given the same split of k (the rule's sideways
    candidate): each device's local product, summed over the devices holding
    a result tile, is that tile."""
    text = """
func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x6xf32>) {
  %r = tpu.replicate([%a] as %x: tensor<4x8xf32>, [%b] as %w: tensor<8x6xf32>) {n = 1 : i64, num_cores_per_replica = 4 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,2]<=[4]}> : tensor<4x8xf32>
    %d = hlo.dot_general %xs, %w, batching_dims = [] x [], contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x6xf32>) -> tensor<4x6xf32>
    tpu.yield %d : tensor<4x6xf32>
  }
  func.return
}
"""
    module = propagate(parse(text))
    (rep,) = replicates(module)
    s_lhs, s_rhs = input_shardings(rep)
    (s_out,) = output_shardings(rep)
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 8)), rng.normal(size=(8, 6))
    y = a @ b
    partial = {d: a[s_lhs.shard_slices(a.shape, d)] @ b[s_rhs.shard_slices(b.shape, d)] for d in range(4)}
    for d in range(4):
        region = s_out.shard_slices(y.shape, d)
        holders = [e for e in range(4) if s_out.shard_slices(y.shape, e) == region]
        np.testing.assert_allclose(sum(partial[e] for e in holders), y[region])


# --------------------------------------------------------------------------
# The API
# --------------------------------------------------------------------------

LOOP = """
func.func @f(%a: tensor<8x4xf32>, %i: tensor<i32>) {
  %r:2 = tpu.replicate([%a] as %x: tensor<8x4xf32>, [%i] as %i0: tensor<i32>) {n = 1 : i64, num_cores_per_replica = 2 : i64} {
    %xs = tpu.sharding_constraint %x to #tpu.sharding<{devices=[2,1]<=[2]}> : tensor<8x4xf32>
    %w:2 = hlo.while(%k = %i0, %v = %xs) : tensor<i32>, tensor<8x4xf32> cond {
      %ten = hlo.constant dense<3> : tensor<i32>
      %p = hlo.compare LT, %k, %ten : (tensor<i32>, tensor<i32>) -> tensor<i1>
      hlo.return %p : tensor<i1>
    } do {
    ^bb0(%k1: tensor<i32>, %v1: tensor<8x4xf32>):
      %one = hlo.constant dense<1> : tensor<i32>
      %k2 = hlo.add %k1, %one : tensor<i32>
      %v2 = hlo.tanh %v1 : tensor<8x4xf32>
      hlo.return %k2, %v2 : tensor<i32>, tensor<8x4xf32>
    }
    %h = tpu.outside_compilation "c" -> (tensor<8x4xf32>) {
      %n = hlo.negate %w#1 : tensor<8x4xf32>
      tpu.yield %n : tensor<8x4xf32>
    }
    tpu.yield %w#0, %h : tensor<i32>, tensor<8x4xf32>
  }
  func.return
}
"""


def test_sharding_of_results_arguments_and_loop_arguments():
    module = propagate(parse(LOOP))
    (rep,) = replicates(module)
    split, whole = S("{devices=[2,1]<=[2]}"), Sharding.replicated()
    x, i0 = rep.body.block.args
    assert sharding_of(x) == split and sharding_of(i0) == whole
    assert input_shardings(rep) == [split, whole]
    assert output_shardings(rep) == [whole, whole]
    loop = next(op for op in module.walk() if isinstance(op, WhileOp))
    assert shardings_of(loop) == [whole, split]
    for region in (loop.cond, loop.body):
        assert [sharding_of(a) for a in region.block.args] == [whole, split]
    assert sharding_of(loop.body.block.last_op.operands[1]) == split
    cluster = next(op for op in module.walk() if isinstance(op, OutsideCompilationOp))
    assert shardings_of(cluster) == [whole]
    inner = cluster.body.block.first_op
    with pytest.raises(ValueError, match="not a value of a device tpu.replicate body"):
        sharding_of(inner.results[0])
    with pytest.raises(ValueError, match="not a value of a device tpu.replicate body"):
        sharding_of(rep.results[0])


def test_sharding_of_before_the_pass_and_with_one_core():
    module = parse(LOOP)
    (rep,) = replicates(module)
    with pytest.raises(ValueError, match="run tpu-propagate-sharding first"):
        sharding_of(rep.body.block.args[0])
    one = parse(
        LOOP.replace("num_cores_per_replica = 2 : i64", "num_cores_per_replica = 1 : i64").replace(
            "#tpu.sharding<{devices=[2,1]<=[2]}>", "#tpu.sharding<{replicated}>"
        )
    )
    before = module_text(one)
    propagate(one)
    assert module_text(one) == before  # one core: unchanged
    (rep1,) = replicates(one)
    assert input_shardings(rep1) == [Sharding.replicated()] * 2
    assert output_shardings(rep1) == [Sharding.replicated()] * 2
    assert sharding_of(rep1.body.block.first_op.results[0]) == Sharding.replicated()


def test_pass_is_idempotent_and_round_trips():
    module = propagate(parse(LOOP))
    text = module_text(module)
    again = propagate(parse(text))
    assert module_text(again) == text


# --------------------------------------------------------------------------
# Random programs traced by xtpu
# --------------------------------------------------------------------------


def assignment(cores: int):
    topology = xtpu.initialize_tpu_system()
    shape = {2: [1, 1, 1, 2], 4: [1, 2, 1, 2], 8: [2, 2, 1, 2]}[cores]
    return xtpu.DeviceAssignment.build(topology, computation_shape=shape, num_replicas=1)


def random_program(rng: random.Random, cores: int, annotate: bool = True):
    """A random computation on one [8, 8] input with random splits (drawn
    the same way without ``annotate``, which leaves them out: the eager
    reference)."""

    def maybe_split(v):
        if rng.random() < 0.35:
            shape = tuple(v.shape)
            s = random_sharding(rng, shape, cores)
            if s.is_tiled and s.replication == 1:
                return xtpu.split_to_logical_devices(v, list(s.tile_shape)) if annotate else v
            if rng.random() < 0.3:
                return xtpu.replicate_to_logical_devices(v) if annotate else v
        return v

    steps = [rng.randrange(12) for _ in range(rng.randint(3, 9))]

    def fn(x):
        vals = [maybe_split(x)]
        for step in steps:
            v = rng.choice(vals)
            shape = tuple(v.shape)
            if step == 0:
                out = xtpu.math.tanh(v) + v
            elif step == 1 and len(shape) == 2:
                w = maybe_split(xtpu.constant(np.ones((shape[1], 4), np.float32)))
                out = xtpu.matmul(v, w)
            elif step == 2 and len(shape) >= 1:
                out = xtpu.math.reduce_sum(v, axis=rng.randrange(len(shape)))
            elif step == 3 and len(shape) >= 2:
                out = xtpu.transpose(v)
            elif step == 4:
                out = xtpu.reshape(v, [-1])
            elif step == 5 and len(shape) == 1 and shape[0] % 4 == 0:
                out = xtpu.reshape(v, [4, shape[0] // 4])
            elif step == 6 and len(shape) >= 1 and shape[0] >= 2:
                out = v[1::2] if rng.random() < 0.5 else v[: shape[0] // 2]
            elif step == 7 and len(shape) >= 1:
                out = xtpu.concat([v, v], axis=rng.randrange(len(shape)))
            elif step == 8:
                out = v * 2.0 + xtpu.math.reduce_max(v)
            elif step == 9:
                out = xtpu.cond(xtpu.math.reduce_sum(v) > 0.0, lambda v=v: v * 2.0, lambda v=v: v - 1.0)
            elif step == 10:
                _, out = xtpu.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, xtpu.nn.relu(a)), (0, v))
            elif step == 11 and len(shape) == 2:
                out = v + xtpu.constant(np.ones((shape[1],), np.float32))
            else:
                out = -v
            vals.append(maybe_split(out))
        return vals[-1], vals[len(vals) // 2]

    return fn


def check_annotated(module: ModuleOp) -> int:
    """Every result in each multi-core device body has a legal sharding;
    returns how many values were checked."""
    count = 0
    for rep in replicates(module):
        if rep.on_host or rep.num_cores == 1:
            continue
        body = rep.body.block
        assert len(rep.attributes[INPUT_SHARDINGS].data) == len(body.args)
        assert len(rep.attributes[OUTPUT_SHARDINGS].data) == len(body.last_op.operands)
        values = list(body.args)
        for op in rep.body.walk():
            if any(isinstance(p, OutsideCompilationOp) for p in _ancestors(op, rep)):
                continue
            if op.results:
                attr = op.attributes[SHARDING_KEY]
                assert isinstance(attr, ArrayAttr) and len(attr.data) == len(op.results), op
                values.extend(op.results)
            if isinstance(op, WhileOp):
                values.extend(op.body.block.args)
                values.extend(op.cond.block.args)
        for v in values:
            s = sharding_of(v)
            shape = v.type.get_shape()
            s.check_rank(len(shape))
            s.shard_shape(shape)
            if s.is_tiled:
                assert s.num_devices == rep.num_cores
            if s.is_maximal:
                assert s.device < rep.num_cores
            count += 1
    return count


def _ancestors(op, stop):
    p = op.parent_op()
    while p is not None and p is not stop:
        yield p
        p = p.parent_op()


@pytest.mark.parametrize("seed", range(25))
def test_random_traced_programs_get_legal_shardings(seed):
    rng = random.Random(seed)
    cores = rng.choice([2, 4, 8])
    fn = random_program(rng, cores)
    x = np.arange(64, dtype=np.float32).reshape(8, 8) / 64.0
    lowered = xtpu.lower(fn, [[x]], device_assignment=assignment(cores))
    module = lowered.module.clone()
    run_pipeline(module, parse_pipeline(list(DEFAULT_PIPELINE) + ["tpu-propagate-sharding"]))
    assert check_annotated(module) > 0
    text = module_text(module)
    run_pipeline(module, parse_pipeline(["tpu-propagate-sharding"]))
    assert module_text(module) == text


@pytest.mark.parametrize("seed", range(10))
def test_random_programs_partitioned_match_eager(seed):
    """With tpu-spmd-partition after the pass, the per-core program computes
    what the unannotated program computes eagerly."""
    from xtpu.passes import ALL_PASSES

    if "tpu-spmd-partition" not in ALL_PASSES:
        pytest.skip("tpu-spmd-partition is not registered")
    rng = random.Random(seed)
    cores = rng.choice([2, 4, 8])
    fn = random_program(rng, cores)
    rng = random.Random(seed)
    rng.choice([2, 4, 8])
    reference = random_program(rng, cores, annotate=False)
    x = np.arange(64, dtype=np.float32).reshape(8, 8) / 64.0
    want = reference(x)
    (got,) = xtpu.replicate(fn, [[x]], device_assignment=assignment(cores))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)


def test_split_seed_example_traced():
    """The seed: [batch, width, height, channel] split [1, 2, 4, 1] over 8
    logical devices, traced through xtpu.lower."""

    def step(images, w):
        images = xtpu.split_to_logical_devices(images, [1, 2, 4, 1])
        flat = xtpu.reshape(images, [8, -1])
        return xtpu.math.reduce_sum(xtpu.nn.relu(xtpu.matmul(flat, w)), axis=1)

    images = np.ones((8, 32, 32, 3), np.float32)
    w = np.ones((3072, 16), np.float32)
    lowered = xtpu.lower(step, [[images, w]], device_assignment=assignment(8))
    module = lowered.module.clone()
    run_pipeline(module, parse_pipeline(list(DEFAULT_PIPELINE) + ["tpu-propagate-sharding"]))
    check_annotated(module)
    (rep,) = replicates(module)
    assert input_shardings(rep) == [
        S("{devices=[1,2,4,1]<=[8]}"),
        S("{devices=[2,1,4]<=[8] last_tile_dim_replicate}"),
    ]
    assert output_shardings(rep) == [Sharding.replicated()]


def test_pass_is_registered_but_not_in_the_default_pipeline():
    from xtpu.passes import ALL_PASSES

    assert ALL_PASSES["tpu-propagate-sharding"] is PropagateSharding
    assert "tpu-propagate-sharding" not in DEFAULT_PIPELINE
