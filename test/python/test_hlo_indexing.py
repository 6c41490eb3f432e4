"""``hlo.gather``, ``hlo.scatter``, ``hlo.sort`` and ``hlo.variadic_reduce``
(dialects/hlo_indexing.py) against XLA through JAX's ``lax`` ops, which
take StableHLO's dimension numbers as they are: the kernels eagerly, the
ops traced and compiled (one replica, the module printed and parsed back),
and the gradient rules against ``jax.vjp``.

Gather is compared with ``mode=CLIP`` (XLA's own clamp, StableHLO's
semantics), scatter with ``mode=FILL_OR_DROP`` (XLA drops a window whose
start is out of bounds)."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
from jax import lax  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402
from xdsl.parser import Parser  # noqa: E402

import xtpu  # noqa: E402
from xtpu.dialects import make_context  # noqa: E402
from xtpu.dialects.hlo_indexing import GatherOp, ScatterOp, SortOp, VariadicReduceOp  # noqa: E402
from xtpu.dialects.primitive import ShapeError  # noqa: E402
from xtpu.tracing import bind  # noqa: E402

os.environ.setdefault("JAX_PLATFORMS", "cpu")


@dataclasses.dataclass
class G:
    """A gather: operand shape, indices (values), dimension numbers."""

    id: str
    operand: tuple
    indices: np.ndarray
    offset_dims: tuple
    collapsed: tuple
    start_index_map: tuple
    index_vector_dim: int
    slice_sizes: tuple
    operand_batching: tuple = ()
    indices_batching: tuple = ()

    def params(self):
        return dict(
            offset_dims=self.offset_dims,
            collapsed_slice_dims=self.collapsed,
            operand_batching_dims=self.operand_batching,
            start_indices_batching_dims=self.indices_batching,
            start_index_map=self.start_index_map,
            index_vector_dim=self.index_vector_dim,
            slice_sizes=self.slice_sizes,
        )


def _jax_indices(idx, ivd):
    """JAX puts the index vector last; StableHLO anywhere (or implicit)."""
    idx = np.asarray(idx)
    if ivd == idx.ndim:
        return idx[..., None], list(range(idx.ndim))
    order = [d for d in range(idx.ndim) if d != ivd] + [ivd]
    return np.transpose(idx, order), [d for d in range(idx.ndim) if d != ivd]


def _remap(dims, order):
    """Indices batching dims renumbered after moving the index vector last."""
    return tuple(order.index(d) for d in dims)


GATHERS = [
    G("take-rows", (10, 4), np.array([3, -1, 12, 9], np.int32), (1,), (0,), (0,), 1, (1, 4)),
    G("take-rows-2d-ids", (10, 4), np.array([[3, 0], [12, 9]], np.int64), (2,), (0,), (0,), 2, (1, 4)),
    G("take-axis1", (3, 7, 2), np.array([6, 0, 8, -3, 2]), (0, 2), (1,), (1,), 1, (3, 1, 2)),
    G("take-axis1-offsets-first", (3, 7, 2), np.array([6, 0, 2]), (0, 1), (1,), (1,), 1, (3, 1, 2)),
    G("partial-slice", (10, 4), np.array([3, 9, -2]), (1,), (0,), (0,), 1, (1, 3)),
    G("window-not-collapsed", (10, 4), np.array([[3], [9], [-2]]), (1, 2), (), (0,), 1, (2, 3)),
    G("gather-nd", (4, 5, 3), np.array([[0, 1], [3, 4], [5, -1]]), (1,), (0, 1), (0, 1), 1, (1, 1, 3)),
    G("gather-nd-swapped-map", (4, 5, 3), np.array([[0, 1], [3, 4], [1, 2]]), (1,), (0, 1), (1, 0), 1, (1, 1, 3)),
    G("index-vector-first", (4, 5), np.array([[0, 3, 1], [4, 0, 2]]), (1,), (0,), (0, 1), 0, (1, 2)),
    G("scalar-index", (6, 2), np.array(4), (0,), (0,), (0,), 0, (1, 2)),
    G("batching", (2, 5, 3), np.array([[4, 0, 1], [2, 2, 9]]), (2,), (1,), (1,), 2, (1, 1, 3), (0,), (0,)),
    G(
        "batching-middle",
        (5, 2, 3),
        np.array([[4, 0], [1, 2], [3, 3]]).T.copy(),
        (1,),
        (0,),
        (0,),
        2,
        (1, 1, 3),
        (1,),
        (0,),
    ),
    G("dynamic-slice-like", (6, 8), np.array([2, 5]), (0, 1), (), (0, 1), 0, (3, 4)),
    G("empty-ids", (6, 2), np.zeros((0,), np.int32), (1,), (0,), (0,), 1, (1, 2)),
]


@pytest.mark.parametrize("case", GATHERS, ids=lambda c: c.id)
def test_gather_matches_xla(case):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(case.operand)
    got = GatherOp.eager([x, case.indices], **case.params())[0]
    idx, order = _jax_indices(case.indices, case.index_vector_dim)
    dn = lax.GatherDimensionNumbers(
        offset_dims=case.offset_dims,
        collapsed_slice_dims=case.collapsed,
        start_index_map=case.start_index_map,
        operand_batching_dims=case.operand_batching,
        start_indices_batching_dims=_remap(case.indices_batching, order),
    )
    want = np.asarray(lax.gather(x, idx, dn, case.slice_sizes, mode=lax.GatherScatterMode.CLIP))
    np.testing.assert_array_equal(got, want)
    # Gradient: jax.vjp of the same gather.
    ct = rng.standard_normal(want.shape)
    (dx, di) = GatherOp.vjp([ct], [x, case.indices], [got], **case.params())
    _, pull = jax.vjp(lambda v: lax.gather(v, idx, dn, case.slice_sizes, mode=lax.GatherScatterMode.CLIP), x)
    np.testing.assert_allclose(dx, np.asarray(pull(ct)[0]), rtol=1e-12, atol=1e-12)
    assert di is None
    _check_traced(GatherOp, [x, case.indices], case.params(), [got])


@dataclasses.dataclass
class S:
    """A scatter: input shape, indices, updates shape, dimension numbers."""

    id: str
    operand: tuple
    indices: np.ndarray
    updates: tuple
    update_window_dims: tuple
    inserted: tuple
    to_operand: tuple
    index_vector_dim: int
    input_batching: tuple = ()
    indices_batching: tuple = ()

    def params(self, computation):
        return dict(
            computation=computation,
            update_window_dims=self.update_window_dims,
            inserted_window_dims=self.inserted,
            input_batching_dims=self.input_batching,
            scatter_indices_batching_dims=self.indices_batching,
            scatter_dims_to_operand_dims=self.to_operand,
            index_vector_dim=self.index_vector_dim,
        )


SCATTERS = [
    S("rows-repeated", (10, 4), np.array([3, 3, -1, 12, 0, 3], np.int32), (6, 4), (1,), (0,), (0,), 1),
    S("rows-unique", (10, 4), np.array([3, 7, 0], np.int64), (3, 4), (1,), (0,), (0,), 1),
    S("rows-partial-window", (10, 4), np.array([3, 3, 8]), (3, 2), (1,), (0,), (0,), 1),
    S("axis1", (3, 7, 2), np.array([6, 0, 6, 9]), (3, 4, 2), (0, 2), (1,), (1,), 1),
    S("scatter-nd", (4, 5, 3), np.array([[0, 1], [3, 4], [0, 1], [4, 0]]), (4, 3), (1,), (0, 1), (0, 1), 1),
    S("window-not-inserted", (10, 4), np.array([[3], [8], [9], [-1]]), (4, 2, 3), (1, 2), (), (0,), 1),
    S("elements", (4, 5), np.array([[0, 1], [3, 4], [0, 1], [2, 2]]), (4,), (), (0, 1), (0, 1), 1),
    S("index-vector-first", (4, 5), np.array([[0, 3, 0], [4, 0, 4]]), (3,), (), (0, 1), (0, 1), 0),
    S("batching", (2, 5, 3), np.array([[4, 0, 4], [2, 2, 9]]), (2, 3, 3), (2,), (1,), (1,), 2, (0,), (0,)),
]


@pytest.mark.parametrize("computation", ["add", "max", "min", "mul", "replace"])
@pytest.mark.parametrize("case", SCATTERS, ids=lambda c: c.id)
def test_scatter_matches_xla(case, computation):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(case.operand)
    upd = rng.standard_normal(case.updates)
    params = case.params(computation)
    got = ScatterOp.eager([x, case.indices, upd], **params)[0]
    idx, order = _jax_indices(case.indices, case.index_vector_dim)
    dn = lax.ScatterDimensionNumbers(
        update_window_dims=case.update_window_dims,
        inserted_window_dims=case.inserted,
        scatter_dims_to_operand_dims=case.to_operand,
        operand_batching_dims=case.input_batching,
        scatter_indices_batching_dims=_remap(case.indices_batching, order),
    )
    fn = {
        "add": lax.scatter_add,
        "max": lax.scatter_max,
        "min": lax.scatter_min,
        "mul": lax.scatter_mul,
        "replace": lax.scatter,
    }[computation]

    def xla(v, u):
        return fn(v, idx, u, dn, mode=lax.GatherScatterMode.FILL_OR_DROP)

    want = np.asarray(xla(x, upd))
    count = ScatterOp.eager([np.zeros_like(x), case.indices, np.ones_like(upd)], **case.params("add"))[0]
    if computation == "replace" and count.max() > 1:
        # Repeated indices: one of the updates wins (any, in StableHLO); the
        # positions written at most once must agree.
        once = count <= 1
        np.testing.assert_array_equal(got[once], want[once])
        return
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if computation == "mul":
        return
    ct = rng.standard_normal(want.shape)
    dx, di, du = ScatterOp.vjp([ct], [x, case.indices, upd], [got], **params)
    assert di is None
    _, pull = jax.vjp(xla, x, upd)
    wx, wu = pull(ct)
    np.testing.assert_allclose(dx, np.asarray(wx), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(du, np.asarray(wu), rtol=1e-12, atol=1e-12)
    if computation == "add":
        _check_traced(ScatterOp, [x, case.indices, upd], params, [got])


@pytest.mark.parametrize(
    "keys,directions",
    [
        (1, ("LT",)),
        (1, ("GT",)),
        (2, ("LT", "LT")),
        (2, ("GT", "LT")),
        (2, ("LT", "GT")),
    ],
)
@pytest.mark.parametrize("dimension", [0, 1])
def test_sort_matches_a_stable_lexicographic_sort(keys, directions, dimension):
    rng = np.random.default_rng(2)
    k0 = rng.integers(0, 3, (5, 6)).astype(np.float64)  # many ties
    k1 = rng.integers(-2, 2, (5, 6)).astype(np.int32)
    payload = rng.standard_normal((5, 6))
    ops = [k0, k1, payload][:keys] + [payload] if keys == 1 else [k0, k1, payload]
    got = SortOp.eager(ops, dimension=dimension, comparison_directions=directions)
    # XLA: lax.sort is ascending and stable; descending keys negated (exact here).
    jkeys = [-k if d == "GT" else k for k, d in zip(ops, directions)]
    iota = np.broadcast_to(
        np.arange(ops[0].shape[dimension]).reshape([-1, 1][:2] if dimension == 0 else [1, -1]), k0.shape
    )
    out = lax.sort((*jkeys, *ops[keys:], iota), dimension=dimension, is_stable=True, num_keys=keys)
    perm = np.asarray(out[-1])
    for o, g in zip(ops, got):
        np.testing.assert_array_equal(g, np.take_along_axis(o, perm, axis=dimension))
    # Gradient through the permutation: jax.vjp of sorting the payload along.
    ct = [rng.standard_normal(o.shape) if o.dtype.kind == "f" else np.zeros_like(o) for o in ops]
    grads = SortOp.vjp(ct, ops, got, dimension=dimension, comparison_directions=directions)
    for o, c, g in zip(ops, ct, grads):
        if o.dtype.kind != "f":
            assert g is None
            continue
        want = np.zeros_like(o)
        np.put_along_axis(want, perm, c, axis=dimension)
        np.testing.assert_array_equal(g, want)
    _check_traced(SortOp, ops, {"dimension": dimension, "comparison_directions": directions}, got)


def test_sort_descending_keeps_the_lower_index_first_and_int_extremes():
    x = np.array([2, np.iinfo(np.int32).min, 2, np.iinfo(np.int32).max, 0], np.int32)
    v, i = SortOp.eager([x, np.arange(5)], comparison_directions=("GT",))
    np.testing.assert_array_equal(i, [3, 0, 2, 4, 1])
    f = np.array([1.0, np.nan, 3.0, 1.0])
    v, i = SortOp.eager([f, np.arange(4)], comparison_directions=("GT",))
    np.testing.assert_array_equal(i, [2, 0, 3, 1])  # NaN last, ties in order


@pytest.mark.parametrize("computation", ["argmax", "argmin"])
@pytest.mark.parametrize("dims", [(0,), (1,), (0, 1)])
def test_variadic_reduce_is_jax_argmax(computation, dims):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, (4, 5)).astype(np.float64)
    x[2, 3] = np.nan
    x[2, 1] = np.nan
    if dims == (0, 1):
        flat = np.arange(20).reshape(4, 5)
        idx = flat
    else:
        idx = np.broadcast_to(np.arange(x.shape[dims[0]]).reshape((-1, 1) if dims == (0,) else (1, -1)), x.shape)
    init = -np.inf if computation == "argmax" else np.inf
    v, i = VariadicReduceOp.eager([x, idx, np.float64(init), np.int64(0)], computation=computation, dimensions=dims)
    fn = jax.numpy.argmax if computation == "argmax" else jax.numpy.argmin
    want = np.asarray(fn(x.reshape(-1) if dims == (0, 1) else x, axis=None if dims == (0, 1) else dims[0]))
    np.testing.assert_array_equal(i, want)
    ints = x.copy()
    ints[np.isnan(ints)] = 7
    ints = ints.astype(np.int32)
    _, ii = VariadicReduceOp.eager(
        [
            ints,
            idx,
            np.int32(np.iinfo(np.int32).min if computation == "argmax" else np.iinfo(np.int32).max),
            np.int64(0),
        ],
        computation=computation,
        dimensions=dims,
    )
    want = np.asarray(fn(ints.reshape(-1) if dims == (0, 1) else ints, axis=None if dims == (0, 1) else dims[0]))
    np.testing.assert_array_equal(ii, want)
    _check_traced(
        VariadicReduceOp,
        [x, idx, np.float64(init), np.int64(0)],
        {"computation": computation, "dimensions": dims},
        [v, i],
    )


def test_variadic_reduce_init_is_a_candidate():
    x = np.array([[1.0, 3.0], [5.0, 5.0]])
    idx = np.array([[0, 1], [0, 1]])
    v, i = VariadicReduceOp.eager([x, idx, np.float64(4.0), np.int64(-1)], computation="argmax", dimensions=(1,))
    np.testing.assert_array_equal(v, [4.0, 5.0])
    np.testing.assert_array_equal(i, [-1, 0])
    ct = np.array([1.0, 2.0])
    dx, di, dv0, di0 = VariadicReduceOp.vjp(
        [ct, np.zeros(2, np.int64)],
        [x, idx, np.float64(4.0), np.int64(-1)],
        [v, i],
        computation="argmax",
        dimensions=(1,),
    )
    np.testing.assert_array_equal(dx, [[0, 0], [2, 0]])
    assert float(dv0) == 1.0 and di is None and di0 is None


def _check_traced(op, inputs, params, want):
    """The op traced in one replica: the module prints, parses back and
    verifies, and the compiled program gives the eager values."""

    def fn(*args):
        return tuple(bind(op, list(args), **params))

    args = [[np.asarray(a) for a in inputs]]
    lowered = xtpu.lower(fn, args)
    reparsed = Parser(make_context(), lowered.as_text()).parse_module()
    assert isinstance(reparsed, ModuleOp)
    reparsed.verify()
    (got,) = lowered.compile()(args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    "op,specs,params,match",
    [
        (
            GatherOp,
            [(10, 4), (3,)],
            dict(
                offset_dims=(1,), collapsed_slice_dims=(), start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 4)
            ),
            r"\(C1\)",
        ),
        (
            GatherOp,
            [(10, 4), (3,)],
            dict(
                offset_dims=(1,),
                collapsed_slice_dims=(0,),
                start_index_map=(0,),
                index_vector_dim=2,
                slice_sizes=(1, 4),
            ),
            r"\(C2\)",
        ),
        (
            GatherOp,
            [(10, 4), (3,)],
            dict(
                offset_dims=(1,),
                collapsed_slice_dims=(0,),
                start_index_map=(0,),
                index_vector_dim=1,
                slice_sizes=(2, 4),
            ),
            r"\(C9\)",
        ),
        (
            GatherOp,
            [(10, 4), (3,)],
            dict(
                offset_dims=(1,),
                collapsed_slice_dims=(0,),
                start_index_map=(0,),
                index_vector_dim=1,
                slice_sizes=(1, 5),
            ),
            r"\(C21\)",
        ),
        (
            ScatterOp,
            [(10, 4), (3,), (3, 5)],
            dict(
                update_window_dims=(1,),
                inserted_window_dims=(0,),
                scatter_dims_to_operand_dims=(0,),
                index_vector_dim=1,
            ),
            r"\(C4\)",
        ),
        (SortOp, [(3,), (4,)], dict(comparison_directions=("LT",)), r"\(C3\)"),
    ],
)
def test_shape_rules_name_the_constraint(op, specs, params, match):
    from xtpu.dialects.tensor_spec import TensorSpec

    types = [TensorSpec(s, "float32" if i == 0 or op is SortOp or i == 2 else "int32") for i, s in enumerate(specs)]
    with pytest.raises(ShapeError, match=match):
        op.infer(types, **params)
