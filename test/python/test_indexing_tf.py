"""TF's indexing, scatter and sort ops (compiler/ops/gather_ops.py) against
TensorFlow 2.21's own outputs and gradients, stored in
test/data/indexing/ by its generator script (make_reference.py, run with
TensorFlow; the suite does not need TensorFlow).

Each case runs eagerly, compiled in ``xtpu.replicate`` over 1 and 2
replicas, and through its gradient (``GradientTape`` eagerly,
``xtpu.gradients`` compiled over 2 replicas), against TF's values: ties,
default dtypes, repeated indices and the out-of-range ids TF on CPU
defines.  Out-of-range gathers and scatters (TF on CPU refuses them by
default; xtpu follows TF on TPU / GPU: zeros, dropped updates) are compared
with TF's own values under ``bad_indices_policy="IGNORE"`` (TF 2.21) and
with JAX's ``mode="fill"`` / ``mode="drop"``.  The ops' cost is checked too: no op
builds a tensor of the size of the table times the ids.
"""

from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np
import pytest

import xtpu

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data", "indexing")
with open(os.path.join(DATA, "cases.json")) as _f:
    META = json.load(_f)
REF = np.load(os.path.join(DATA, "reference.npz"))
CASES = META["cases"]

OPS = {
    "gather": xtpu.gather,
    "gather_nd": xtpu.gather_nd,
    "embedding_lookup": xtpu.nn.embedding_lookup,
    "embedding_lookup_shards": lambda a, b, ids, **kw: xtpu.nn.embedding_lookup([a, b], ids, **kw),
    "scatter_nd": xtpu.scatter_nd,
    "tensor_scatter_nd_update": xtpu.tensor_scatter_nd_update,
    "tensor_scatter_nd_add": xtpu.tensor_scatter_nd_add,
    "tensor_scatter_nd_sub": xtpu.tensor_scatter_nd_sub,
    "tensor_scatter_nd_max": xtpu.tensor_scatter_nd_max,
    "tensor_scatter_nd_min": xtpu.tensor_scatter_nd_min,
    "unsorted_segment_sum": xtpu.math.unsorted_segment_sum,
    "unsorted_segment_max": xtpu.math.unsorted_segment_max,
    "unsorted_segment_min": xtpu.math.unsorted_segment_min,
    "unsorted_segment_mean": xtpu.math.unsorted_segment_mean,
    "unsorted_segment_prod": xtpu.math.unsorted_segment_prod,
    "segment_sum": xtpu.math.segment_sum,
    "one_hot": xtpu.one_hot,
    "argmax": xtpu.math.argmax,
    "argmin": xtpu.math.argmin,
    "sort": xtpu.sort,
    "argsort": xtpu.argsort,
    "top_k": xtpu.math.top_k,
    "in_top_k": xtpu.math.in_top_k,
    "where": xtpu.where,
    "where_gather_nd": lambda c, x: xtpu.gather_nd(x, xtpu.where(c)),
    "where_gather_nd_sq": lambda c, x: xtpu.math.reduce_sum(xtpu.math.square(xtpu.gather_nd(x, xtpu.where(c)))),
}
STATIC_INPUTS = {"segment_sum": (1,)}  # its row count depends on the ids' values


def case_data(case):
    cid = case["id"]
    inputs = [REF[f"{cid}:in{k}"] for k in range(case["inputs"])]
    outs = [REF[f"{cid}:out{j}"] for j in range(case["outputs"])]
    cts = [REF[f"{cid}:ct{j}"] if f"{cid}:ct{j}" in REF else None for j in range(case["outputs"])]
    grads = {i: REF[f"{cid}:grad{i}"] for i in case["grads"]}
    return inputs, outs, cts, grads


def call(case, *args):
    out = OPS[case["op"]](*args, **case["kwargs"])
    return list(out) if isinstance(out, (tuple, list)) else [out]


def assert_close(got, want, where):
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, TF {want.dtype}"
    assert got.shape == want.shape, f"{where}: shape {got.shape}, TF {want.shape}"
    if want.dtype.kind == "f":
        tol = 1e-6 if want.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=where)
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def compiled(case, inputs, replicas):
    static = STATIC_INPUTS.get(case["op"], ())
    fed = [x for k, x in enumerate(inputs) if k not in static]

    def fn(*args):
        it = iter(args)
        full = [inputs[k] if k in static else next(it) for k in range(len(inputs))]
        return tuple(call(case, *full))

    return xtpu.replicate(fn, [fed] * replicas)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_matches_tensorflow(case):
    inputs, outs, _, _ = case_data(case)
    for j, (g, w) in enumerate(zip(call(case, *inputs), outs)):
        assert_close(g, w, f"{case['id']} eager output {j}")
    for replicas in (1, 2):
        for r, per_replica in enumerate(compiled(case, inputs, replicas)):
            for j, (g, w) in enumerate(zip(per_replica, outs)):
                assert_close(g, w, f"{case['id']} compiled R={replicas} replica {r} output {j}")


GRAD_CASES = [c for c in CASES if c["grads"]]


def _loss(case, inputs, cts):
    outs = call(case, *inputs)
    terms = [xtpu.math.reduce_sum(o * ct) for o, ct in zip(outs, cts) if ct is not None]
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c["id"])
def test_gradient_matches_tensorflow(case):
    inputs, _, cts, grads = case_data(case)
    wrt = case["grads"]
    xs = [xtpu.constant(x) for x in inputs]
    with xtpu.GradientTape() as tape:
        for i in wrt:
            tape.watch(xs[i])
        loss = _loss(case, xs, cts)
    got = tape.gradient(loss, [xs[i] for i in wrt])
    for i, g in zip(wrt, got):
        assert_close(g, grads[i], f"{case['id']} eager gradient of input {i}")

    static = STATIC_INPUTS.get(case["op"], ())

    def step(*args):
        it = iter(args)
        full = [inputs[k] if k in static else next(it) for k in range(len(inputs))]
        loss = _loss(case, full, cts)
        return tuple(xtpu.gradients(loss, [full[i] for i in wrt]))

    fed = [x for k, x in enumerate(inputs) if k not in static]
    for r, per_replica in enumerate(xtpu.replicate(step, [fed, fed])):
        for i, g in zip(wrt, per_replica):
            assert_close(g, grads[i], f"{case['id']} compiled gradient of input {i}, replica {r}")


def test_the_reference_covers_every_op():
    assert {c["op"] for c in CASES} == set(OPS)
    assert META["tensorflow"].startswith("2.21")


# --------------------------------------------------------------------------
# Out-of-range indices: TF on TPU / GPU (zeros, dropped), against JAX
# --------------------------------------------------------------------------

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
lax = jax.lax
FILL = lax.GatherScatterMode.FILL_OR_DROP  # no negative-index wrapping, unlike jnp's


def _jax_gather(p, ids, m):
    """``p[ids[..., :m]]`` with zeros out of range (XLA with JAX's fill mode)."""
    dn = lax.GatherDimensionNumbers(
        offset_dims=tuple(range(ids.ndim - 1, ids.ndim - 1 + p.ndim - m)),
        collapsed_slice_dims=tuple(range(m)),
        start_index_map=tuple(range(m)),
    )
    return lax.gather(p, ids, dn, (1,) * m + p.shape[m:], mode=FILL, fill_value=0)


def _jax_scatter_add(t, ids, u):
    dn = lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(1, u.ndim)), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    return np.asarray(lax.scatter_add(t, ids, u, dn, mode=FILL))


def _eager_and_compiled(fn, *args, ct=None):
    """``fn``'s outputs (and, with ``ct``, the gradient of ``sum(ct * out0)``
    with respect to the first argument) eagerly, checked equal to those of
    2 compiled replicas."""
    xs = [xtpu.constant(a) for a in args]
    with xtpu.GradientTape() as tape:
        tape.watch(xs[0])
        outs = list(fn(*xs))
        loss = xtpu.math.reduce_sum(outs[0] * ct) if ct is not None else None
    eager = [np.asarray(v) for v in outs]
    if ct is not None:
        eager.append(np.asarray(tape.gradient(loss, xs[0])))

    def traced(*a):
        outs = list(fn(*a))
        if ct is not None:
            outs.append(xtpu.gradients(xtpu.math.reduce_sum(outs[0] * ct), [a[0]])[0])
        return tuple(outs)

    for per_replica in xtpu.replicate(traced, [list(args), list(args)]):
        for e, t in zip(eager, per_replica):
            np.testing.assert_array_equal(t, e)
    return eager


def test_out_of_range_gather_gives_zeros_and_no_gradient():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((6, 3)).astype(np.float32)
    ids = np.array([5, -1, 6, 0, 100, -7], np.int32)
    ct = rng.standard_normal((6, 3)).astype(np.float32)
    out, grad = _eager_and_compiled(lambda t, i: (xtpu.gather(t, i),), table, ids, ct=ct)
    want, pull = jax.vjp(lambda t: _jax_gather(t, ids[:, None], 1), table)
    np.testing.assert_array_equal(out, np.asarray(want))
    np.testing.assert_allclose(grad, np.asarray(pull(ct)[0]), rtol=1e-6)
    # embedding_lookup is the same gather.
    np.testing.assert_array_equal(xtpu.nn.embedding_lookup(table, ids), want)


def test_out_of_range_gather_nd_gives_zeros():
    rng = np.random.default_rng(1)
    p = rng.standard_normal((4, 5, 2))
    ids = np.array([[3, 4], [4, 0], [0, -1], [1, 2]], np.int64)

    ct = rng.standard_normal((4, 2))
    out, grad = _eager_and_compiled(lambda p, i: (xtpu.gather_nd(p, i),), p, ids, ct=ct)
    want, pull = jax.vjp(lambda v: _jax_gather(v, ids, 2), p)
    np.testing.assert_array_equal(out, np.asarray(want))
    np.testing.assert_allclose(grad, np.asarray(pull(ct)[0]), rtol=1e-12)


def test_out_of_range_scatters_are_dropped():
    rng = np.random.default_rng(2)
    idx = np.array([[1], [7], [-1], [1]], np.int32)
    upd = rng.standard_normal((4, 3))
    tensor = rng.standard_normal((5, 3))

    def fn(t, i, u):
        return (
            xtpu.scatter_nd(i, u, [5, 3]),
            xtpu.tensor_scatter_nd_add(t, i, u),
            xtpu.math.unsorted_segment_sum(u, i[:, 0], 5),
        )

    nd, add, seg = _eager_and_compiled(fn, tensor, idx, upd)
    np.testing.assert_allclose(nd, _jax_scatter_add(np.zeros((5, 3)), idx, upd), rtol=1e-12)
    np.testing.assert_allclose(add, _jax_scatter_add(tensor, idx, upd), rtol=1e-12)
    np.testing.assert_allclose(seg, _jax_scatter_add(np.zeros((5, 3)), idx, upd), rtol=1e-12)


def test_no_op_is_o_of_table_times_ids():
    """The traced module holds no tensor as big as the table times the ids
    (the one-hot gather this replaced built float32[512, 10000, 128])."""
    table = np.zeros((1000, 16), np.float32)
    ids = np.zeros((64,), np.int32)

    def step(t, i):
        out = xtpu.gather(t, i)
        loss = xtpu.math.reduce_sum(out)
        g = xtpu.gradients(loss, [t])[0]
        seg = xtpu.math.unsorted_segment_sum(out, i, 1000)
        oh = xtpu.one_hot(i, 1000)
        return g, seg, oh, xtpu.math.argmax(t, axis=0), xtpu.math.top_k(t[:, 0], 5).indices

    text = xtpu.lower(step, [[table, ids]]).as_text()
    import re

    biggest = 0
    for dims in re.findall(r"tensor<((?:\d+x)+)[a-z]", text):
        n = int(np.prod([int(d) for d in dims.rstrip("x").split("x")]))
        biggest = max(biggest, n)
    assert biggest <= 1000 * 64, f"a tensor of {biggest} elements in {text[:2000]}"
    assert "hlo.gather" in text and "hlo.scatter" in text and "hlo.variadic_reduce" in text and "hlo.sort" in text


def test_errors_name_the_op():
    with pytest.raises(TypeError, match="gather: indices must be int32 or int64"):
        xtpu.gather(np.zeros((3, 2)), np.array([0.5]))
    with pytest.raises(ValueError, match="gather: batch dimensions"):
        xtpu.gather(np.zeros((3, 2)), np.zeros((2, 1), np.int32), batch_dims=1)
    with pytest.raises(ValueError, match="tensor_scatter_nd_update: updates must have shape"):
        xtpu.tensor_scatter_nd_update(np.zeros((3, 2)), np.array([[0]]), np.zeros((1, 3)))
    with pytest.raises(ValueError, match="top_k: k \\(5\\) must be in \\[0, 4\\]"):
        xtpu.math.top_k(np.zeros(4), 5)
    with pytest.raises(ValueError, match="argsort: direction"):
        xtpu.argsort(np.zeros(4), direction="UP")
    with pytest.raises(ValueError, match="argmax: reduction axis 0 is empty"):
        xtpu.math.argmax(np.zeros((0, 2)))


def test_where_compiled_gives_each_replica_its_own_row_count():
    """tf.where(condition) compiled is a bounded dynamic shape (TF's XLA
    Where): each replica's coordinates come back with its real row count,
    equal to numpy's argwhere (tf.where's documented result), and
    tf.shape / gather_nd / reduce_sum read the real rows only."""
    rng = np.random.default_rng(7)
    conds = [rng.random((3, 4)) < p for p in (0.0, 0.3, 0.8, 1.0)]
    x = rng.standard_normal((3, 4)).astype(np.float32)

    def step(c, x):
        w = xtpu.where(c)
        return w, xtpu.shape(w), xtpu.math.reduce_sum(xtpu.gather_nd(x, w)), xtpu.size(w)

    out = xtpu.replicate(step, [[c, x] for c in conds])
    for c, (w, shape, total, size) in zip(conds, out):
        want = np.argwhere(c)
        assert w.dtype == np.int64
        np.testing.assert_array_equal(w, want)
        np.testing.assert_array_equal(shape, want.shape)
        assert int(size) == want.size
        np.testing.assert_allclose(total, x[c].sum(), rtol=1e-6)
    text = xtpu.lower(step, [[conds[1], x]]).as_text()
    assert "hlo.set_dimension_size" in text and "hlo.sort" in text


def test_where_compiled_inside_a_strategy_function():
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    c = np.array([[True, False], [False, True]])

    @xtpu.function
    def step(c):
        return s.run(lambda c: xtpu.where(c), args=(c,))

    got = s.experimental_local_results(step(c))
    assert len(got) == 2
    for w in got:
        np.testing.assert_array_equal(w, np.argwhere(c))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_sorts_in_float_order_with_nan_last(dtype):
    """bfloat16 keys sort as their float32 values (numpy cannot order
    ml_dtypes' bfloat16 itself), NaN last in both directions (XLA's and
    numpy's order), ties in index order."""
    np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)
    x = np.array([[3.0, np.nan, -1.0, 2.0, -0.0, 0.0, 2.0, -np.inf]], np.float32).astype(np_dtype)
    ref = x.astype(np.float32)
    asc = np.argsort(ref, axis=-1, kind="stable")
    desc = np.array([sorted(range(ref.shape[1]), key=lambda i: (np.isnan(ref[0, i]), -np.nan_to_num(ref[0, i])))])
    for fn in (lambda v: xtpu.argsort(v), lambda v: xtpu.argsort(v, direction="DESCENDING")):
        eager = np.asarray(fn(x))
        (compiled,) = xtpu.replicate(lambda v, fn=fn: fn(v), [[x]])[0]
        np.testing.assert_array_equal(compiled, eager)
    np.testing.assert_array_equal(xtpu.argsort(x), asc)
    np.testing.assert_array_equal(xtpu.argsort(x, direction="DESCENDING"), desc)
    vals, idx = xtpu.math.top_k(x, k=3)
    np.testing.assert_array_equal(idx, desc[:, :3])
    assert np.asarray(vals).dtype == np_dtype
    assert int(xtpu.math.argmax(x, axis=1)[0]) == 1  # NaN is the largest (XLA's argmax)
    assert int(xtpu.math.argmin(x, axis=1)[0]) == 1  # and the smallest
