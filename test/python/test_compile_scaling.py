"""Compile cost that grows with the program (issue 13), guarded by counts,
not timings: stage texts are built only when read, an op is verified once
per distinct form, the outline pass numbers a block once however many
clusters it holds, and no full garbage collection runs while compiling.
The timings themselves are in benchmarks/compile_scaling.py."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from xdsl.ir.core import Operation
from xdsl.utils.exceptions import VerifyException

import xtpu
from xtpu.core import pipeline
from xtpu.core.pipeline import parse_module, parse_pipeline, run_pipeline
from xtpu.passes import outline_outside_compilation as outline
from xtpu.replication.program import default_pipeline


def _chain(n):
    def f(x):
        for _ in range(n):
            x = x * 1.5 + 1.0
        return x

    return f


def _count_calls(monkeypatch, owner, name):
    calls = []
    original = getattr(owner, name)

    def counting(*args, **kwargs):
        calls.append(args[0] if args else None)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    return calls


def test_stage_texts_are_built_only_when_read(monkeypatch):
    printed = _count_calls(monkeypatch, pipeline, "module_text")
    x = np.arange(4, dtype=np.float32)
    compiled = xtpu.lower(_chain(5), [[x], [x + 1]]).compile()
    assert printed == []  # compiling printed nothing
    np.testing.assert_allclose(compiled([[x], [x + 1]])[1][0], _chain(5)(x + 1), rtol=1e-6)
    assert printed == []
    text = compiled.stages["hlo-fuse-elementwise"]  # the last pass: the compiled text
    assert len(printed) == len(compiled.stages)  # one text per pass, all at once
    assert text == compiled.as_text() and "hlo.multiply" in text
    compiled.stages["tpu-mark-outside-compilation"]
    assert len(printed) == len(compiled.stages)  # and only once


def test_identical_ops_are_verified_once(monkeypatch):
    text = "\n".join(
        ["func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {", "  %v0 = hlo.add %a, %a : tensor<3xf32>"]
        + [f"  %v{i} = hlo.add %v{i - 1}, %a : tensor<3xf32>" for i in range(1, 50)]
        + ["  func.return %v49 : tensor<3xf32>", "}"]
    )
    module = parse_module(text)
    from xtpu.dialects import primitive

    monkeypatch.setattr(primitive, "_VERIFIED", set())  # forms other tests verified
    monkeypatch.setattr(primitive, "_VERIFIED_IDS", {})
    verified = _count_calls(monkeypatch, Operation, "verify")
    module.verify()
    adds = [op for op in verified if getattr(op, "name", None) == "hlo.add"]
    assert len(adds) == 1  # the 49 others have the same class and attribute objects
    # An op of another form is verified in full, and still fails.
    bad = parse_module(
        text.replace(
            "%v7 = hlo.add %v6, %a : tensor<3xf32>",
            '%v7 = hlo.add %v6, %a : tensor<3xf32>\n  %w = "hlo.add"(%v6, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<4xf32>',
        )
    )
    with pytest.raises(VerifyException, match="hlo.add"):
        bad.verify()


def test_last_op_of_a_block_is_always_checked_for_a_terminator():
    ok = "func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {\n  %b = hlo.add %a, %a : tensor<3xf32>\n  func.return %b : tensor<3xf32>\n}"
    parse_module(ok).verify()  # the add's form is now known good
    body = ok.replace("  func.return %b : tensor<3xf32>\n", "")
    module = parse_module("builtin.module {\n" + body.replace("-> tensor<3xf32>", "") + "\n}")
    with pytest.raises(VerifyException, match="terminat"):
        module.verify()


def _outline_positions(monkeypatch, fn, inputs, spacing=None):
    """The module after tpu-outline-outside-compilation and the positions
    tables the pass made."""
    made = []
    init = outline._Positions.__init__

    def record(self):
        init(self)
        made.append(self)

    monkeypatch.setattr(outline._Positions, "__init__", record)
    if spacing is not None:
        monkeypatch.setattr(outline._Positions, "SPACING", spacing)
    module = xtpu.lower(fn, inputs).module.clone()
    passes = parse_pipeline(default_pipeline())
    upto = [p.name for p in passes].index("tpu-outline-outside-compilation") + 1
    run_pipeline(module, passes[:upto])
    return pipeline.module_text(module), made


def _many_clusters(k):
    def f(x):
        for _i in range(k):
            x = xtpu.outside_compilation(lambda v: v + 1.0, x * 2.0) * 1.0
        return x

    return f


def test_outline_numbers_a_block_once(monkeypatch):
    _, made = _outline_positions(monkeypatch, _many_clusters(200), [[np.float32(1)]])
    assert len(made) == 1 and made[0].numberings == 1  # 200 clusters, one block, numbered once


def _colliding_clusters(x):
    # Two results that one op uses: both recvs go right before that op, the
    # second between it and the first, halving the gap.
    y = xtpu.cross_replica_sum(x * 2.0)
    outs = [xtpu.outside_compilation(lambda v, i=i: v * float(i), y) for i in range(45)]
    for i in range(5):
        x = xtpu.outside_compilation(lambda v: v * 3.0, x + outs[i]) + 1.0
        xtpu.outside_compilation(xtpu.print, x)
    for a, b in zip(outs[::2], outs[1::2]):
        x = x + (a + b)
    return x + outs[-1]


def test_outline_positions_kept_up_to_date_equal_a_numbering_per_cluster(monkeypatch):
    """Positions kept up to date (spaced 2**32 apart, or 2 apart: numbered
    again when room runs out) give the program that numbering the block again
    on every insertion gives (spacing 1; what the pass did per cluster
    before)."""
    inputs = [[np.float32(1)], [np.float32(2)]]
    fast, made = _outline_positions(monkeypatch, _colliding_clusters, inputs)
    assert made[0].numberings == 1
    tight, made = _outline_positions(monkeypatch, _colliding_clusters, inputs, spacing=2)
    assert 1 < made[0].numberings
    slow, made_slow = _outline_positions(monkeypatch, _colliding_clusters, inputs, spacing=1)
    assert made[0].numberings < made_slow[0].numberings
    assert fast == tight == slow
    out = xtpu.replicate(_colliding_clusters, inputs)
    y = 2.0 * sum(x for (x,) in inputs)
    for r, (x,) in enumerate(inputs):
        for i in range(5):
            x = (x + y * i) * 3.0 + 1.0
        assert float(out[r][0]) == x + sum(y * i for i in range(45))


def test_no_full_collection_while_compiling_and_gc_state_restored():
    collections = []

    def seen(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    fn = _many_clusters(50)
    gc.callbacks.append(seen)
    try:
        assert gc.isenabled()
        xtpu.lower(fn, [[np.float32(1)]]).compile()
        assert gc.isenabled()
        gc.disable()
        try:
            xtpu.lower(fn, [[np.float32(1)]]).compile()
            assert not gc.isenabled()  # a program that turned it off keeps it off
        finally:
            gc.enable()
    finally:
        gc.callbacks.remove(seen)
    assert 2 not in collections


def test_walk_ops_visits_what_xdsl_walk_visits_in_its_order():
    from xtpu.passes._common import walk_ops

    def f(x):
        y = xtpu.cond(x > 0.0, lambda: xtpu.outside_compilation(lambda v: v * 2.0, x), lambda: x - 1.0)
        z = xtpu.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 1.5), (0, y))[1]
        return xtpu.outside_compilation(lambda v: v + 1.0, z)

    module = xtpu.lower(f, [[np.float32(2)], [np.float32(-1)]]).module
    for m in (module, xtpu.lower(f, [[np.float32(2)], [np.float32(-1)]]).compile().module):
        walked = list(m.walk())
        assert len(walked) > 20 and any(op.regions for op in walked[2:])
        assert list(walk_ops(m)) == walked


def test_equal_dimension_tuples_share_one_attribute():
    # Tracing encodes an op's int tuples (dot_general's dimensions, a
    # broadcast's, a reduce's) once per distinct tuple; the attribute is
    # immutable, prints and decodes as before, and verifies like any other.
    from xtpu.dialects import hlo

    def f(x, w):
        return (x @ w) @ w, xtpu.math.reduce_sum(x, axis=1)

    ops = [
        op
        for op in xtpu.lower(f, [[np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)]]).module.walk()
        if isinstance(op, hlo.DotGeneralOp)
    ]
    assert len(ops) == 2
    a, b = ops
    assert a.properties["lhs_contracting_dimensions"] is b.properties["lhs_contracting_dimensions"]
    assert a.params()["lhs_contracting_dimensions"] == (1,) and a.params()["rhs_contracting_dimensions"] == (0,)
    assert a.properties["lhs_batching_dimensions"] is a.properties["rhs_batching_dimensions"]
    assert a.params()["lhs_batching_dimensions"] == ()
    assert "contracting_dims = [1] x [0]" in str(a)


def test_integer_and_enum_parameters_share_one_attribute_and_decode_as_parsed():
    # Tracing makes one IntegerAttr per int parameter value and one
    # attribute per enum member (xDSL checks an IntegerAttr's range each
    # time one is made); a parsed op, whose attributes are its own,
    # decodes to the same parameters.
    from xtpu.dialects import ccl

    def f(x):
        return xtpu.cross_replica_sum(x) + xtpu.cross_replica_sum(x * 2.0)

    c = xtpu.lower(f, [[np.ones(3, np.float32)], [np.ones(3, np.float32)]]).compile()
    ars = [op for op in c.module.walk() if isinstance(op, ccl.AllReduceOp)]
    assert len(ars) == 1  # combined
    parsed = [op for op in parse_module(c.as_text()).walk() if isinstance(op, ccl.AllReduceOp)]
    assert parsed[0].params() == ars[0].params()
    assert ars[0].params()["replica_groups"] == ((0, 1),) and ars[0].params()["computation"] == "add"
    a = ccl.AllReduceOp.make([ars[0].operands[0]], replica_groups=((0, 1),), computation="add", channel_id=7)
    b = ccl.AllReduceOp.make([ars[0].operands[0]], replica_groups=((0, 1),), computation="add", channel_id=7)
    assert a.properties["channel_id"] is b.properties["channel_id"]
    assert a.properties["computation"] is b.properties["computation"]
    assert a.params()["channel_id"] == 7


def test_memo_by_identity_computes_once_per_object_and_never_confuses_two():
    from xtpu.dialects.by_identity import memo

    calls = []

    def compute(t):
        calls.append(t)
        return t.value * 2

    class Box:
        def __init__(self, value):
            self.value = value

    table: dict = {}
    a, b = Box(1), Box(1)
    assert memo(table, a, compute) == 2 and memo(table, a, compute) == 2
    assert calls == [a]
    assert memo(table, b, compute) == 2 and calls == [a, b]  # equal but another object
    # An id reused by a new object after the first died is not a hit:
    # the table keeps its objects alive, so the id cannot be reused.
    ids = {id(a), id(b)}
    del a, b
    c = Box(5)
    assert id(c) not in ids and memo(table, c, compute) == 10
    for k in range(10):  # emptied when full
        memo(table, Box(k), compute, limit=4)
    assert len(table) <= 4
