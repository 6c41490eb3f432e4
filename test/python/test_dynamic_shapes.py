"""replicate's maximum_shapes and padding_spec (seed ``tpu_replicate.txt``):
inputs of different lengths per replica are padded to one shape, traced and
compiled once per padded signature, and every result equals the unpadded
computation run eagerly on each replica's own input.

The padding is filled with NaN in these tests (``xtpu.padding.FILL``), so an
op that let a padded element into a result would give NaN, not a close
number.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from xdsl.utils.exceptions import DiagnosticException

import xtpu
from xtpu.replication import padding


@pytest.fixture(autouse=True)
def nan_padding(monkeypatch):
    monkeypatch.setattr(padding, "FILL", np.nan)


def _close(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, eager {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, eager {want.dtype}"
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=what)


# --------------------------------------------------------------------------
# The seed's example and its ValueErrors
# --------------------------------------------------------------------------


def seed_computation(x):
    x = x + 1
    return xtpu.math.reduce_mean(x)


def test_seed_example_matches_each_replica_unpadded():
    """The seed's advanced example: two replicas of different lengths,
    ``maximum_shapes=[TensorShape([None, None])]``, POWER_OF_TWO."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 2)).astype(np.float32)
    y = rng.standard_normal((3, 2)).astype(np.float32)
    out = xtpu.replicate(
        seed_computation,
        inputs=[x, y],
        maximum_shapes=[xtpu.TensorShape([None, None])],
        padding_spec=xtpu.PaddingSpec.POWER_OF_TWO,
    )
    assert len(out) == 2 and all(isinstance(o, tuple) and len(o) == 1 for o in out)
    _close(out[0][0], seed_computation(x), "replica 0")
    _close(out[1][0], seed_computation(y), "replica 1")
    # The padded program: 8x2 (5 rounded up to a power of two), real sizes in the IR.
    text = xtpu.lower(
        seed_computation,
        inputs=[x, y],
        maximum_shapes=[xtpu.TensorShape([None, None])],
        padding_spec=xtpu.PaddingSpec.POWER_OF_TWO,
    ).as_text()
    assert "tensor<8x2xf32>" in text and "hlo.set_dimension_size" in text and "hlo.get_dimension_size" in text


def test_static_dimension_that_does_not_match_maximum_shapes():
    """Seed: ValueError "If the static inputs dimensions don't match with the
    values given in maximum_shapes"; the message names input, dimension and replica."""
    a, b = np.zeros((3, 2), np.float32), np.zeros((4, 3), np.float32)
    with pytest.raises(
        ValueError, match=r"static dimension 1 of input 0 of replica 1 has size 3.*TensorShape\(\[None, 2\]\)"
    ):
        xtpu.replicate(seed_computation, inputs=[[a], [b]], maximum_shapes=[xtpu.TensorShape([None, 2])])
    with pytest.raises(ValueError, match=r"input 0 of replica 0 does not match maximum_shapes .*rank 2 vs 3"):
        xtpu.replicate(seed_computation, inputs=[[a], [a]], maximum_shapes=[[None, 2, None]])


def test_structure_that_differs_from_inputs0():
    """Seed: ValueError "If the structure of inputs per replica does not match
    the structure of maximum_shapes"; the message gives the path."""
    a = np.zeros((3, 2), np.float32)
    with pytest.raises(
        ValueError,
        match=r"structure of maximum_shapes must be the same as inputs\[0\].*at maximum_shapes inputs\[0\] has a sequence of 1, maximum_shapes has a list of 2",
    ):
        xtpu.replicate(seed_computation, inputs=[[a], [a]], maximum_shapes=[[None, 2], [None, 2]])
    with pytest.raises(
        ValueError,
        match=r"at maximum_shapes\[0\]\[1\] inputs\[0\] has a sequence of 2, maximum_shapes has a shape \[None, 2\]",
    ):
        xtpu.replicate(lambda p: p[0], inputs=[[(a, (a, a))]], maximum_shapes=[([None, 2], [None, 2])])
    with pytest.raises(ValueError, match=r"padding_spec must be a PaddingSpec"):
        xtpu.replicate(seed_computation, inputs=[[a]], maximum_shapes=[[None, 2]], padding_spec=7)


def test_maximum_shape_forms_and_nested_inputs():
    """A list with -1, a tensor-like (its shape), None (no padding) and
    nested inputs; an output that is an input comes back with its real shape."""
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((n, 2)) for n in (2, 6)]
    w = rng.standard_normal((2, 2))

    def f(p):
        x, w = p["x"], p["w"]
        return x, xtpu.matmul(x, w)

    for ms in ([{"x": [-1, 2], "w": None}], [{"x": np.zeros((0, 2)) + np.zeros((1, 2)), "w": w}]):
        if isinstance(ms[0]["x"], np.ndarray):  # a tensor-like: its shape (1, 2) is a known shape
            with pytest.raises(ValueError, match="static dimension 0 of input 1 of replica 0 has size 2"):
                xtpu.replicate(f, inputs=[[{"x": x, "w": w}] for x in xs], maximum_shapes=ms)
            continue
        out = xtpu.replicate(f, inputs=[[{"x": x, "w": w}] for x in xs], maximum_shapes=ms)
        for o, x in zip(out, xs):
            _close(o[0], x, "identity output")
            _close(o[1], x @ w, "matmul output")
    assert xtpu.TensorShape([None, -1, 3]) == xtpu.TensorShape([None, None, 3])
    assert xtpu.TensorShape([None, 2]).as_list() == [None, 2]


# --------------------------------------------------------------------------
# The differential test: every padding-sensitive op, 1, 2 and 8 replicas
# --------------------------------------------------------------------------

W = np.random.default_rng(7).standard_normal((3, 2))


def _ops():
    m, n = xtpu.math, xtpu.nn
    return {
        "reduce_sum": lambda x: m.reduce_sum(x, axis=0),
        "reduce_sum_all": lambda x: m.reduce_sum(x * 2.0 + 1.0),
        "reduce_mean": lambda x: m.reduce_mean(x, axis=0),
        "reduce_mean_all": lambda x: m.reduce_mean(x),
        "reduce_max": lambda x: m.reduce_max(x, axis=0),
        "reduce_min": lambda x: m.reduce_min(x),
        "argmax": lambda x: m.argmax(x, axis=0),
        "softmax": lambda x: n.softmax(x, axis=0),
        "log_softmax": lambda x: n.log_softmax(x, axis=0),
        "softmax_other_axis": lambda x: n.softmax(x, axis=1),
        "dot_general_contracting": lambda x: xtpu.matmul(xtpu.transpose(x), x),
        "dot_general_free": lambda x: xtpu.matmul(x, W),
        "concat_padded_axis": lambda x: xtpu.concat([x, m.exp(x)], axis=0),
        "concat_other_axis": lambda x: xtpu.concat([x, x], axis=1),
        "reshape_flatten": lambda x: xtpu.reshape(x, [-1]),
        "reshape_compacting": lambda x: xtpu.reshape(xtpu.transpose(x), [-1]),
        "reshape_then_sum": lambda x: m.reduce_sum(xtpu.reshape(xtpu.transpose(x), [-1])),
        "host_transfer": lambda x: xtpu.outside_compilation(lambda v: (m.reduce_max(v, axis=0), v * 2.0), x),
    }


OPS = _ops()


@pytest.mark.parametrize("replicas", [1, 2, 8])
@pytest.mark.parametrize("name", sorted(OPS))
def test_padded_compiled_equals_unpadded_eager(name, replicas):
    fn = OPS[name]
    rng = np.random.default_rng(zlib.crc32(f"{name}-{replicas}".encode()))
    xs = [rng.standard_normal((int(rng.integers(1, 12)), 3)) for _ in range(replicas)]
    out = xtpu.replicate(
        fn, inputs=[[x] for x in xs], maximum_shapes=[[None, 3]], padding_spec=xtpu.PaddingSpec.POWER_OF_TWO
    )
    for r, x in enumerate(xs):
        want = fn(x)
        want = want if isinstance(want, tuple) else (want,)
        assert len(out[r]) == len(want)
        for k, (g, w) in enumerate(zip(out[r], want)):
            _close(g, w, f"{name}, replica {r} of {replicas} (length {len(x)}), output {k}")


@pytest.mark.parametrize("replicas", [1, 2, 8])
def test_cross_replica_sum_of_padded_values(replicas):
    """Each replica's value zero-padded to the largest real length, summed
    (the padding differs per replica); and the sum of a padded reduction."""
    rng = np.random.default_rng(replicas)
    xs = [rng.standard_normal((int(rng.integers(1, 12)), 3)) for _ in range(replicas)]

    def f(x):
        return xtpu.cross_replica_sum(x), xtpu.cross_replica_sum(xtpu.math.reduce_max(x, axis=0))

    out = xtpu.replicate(
        f, inputs=[[x] for x in xs], maximum_shapes=[[None, 3]], padding_spec=xtpu.PaddingSpec.POWER_OF_TWO
    )
    longest = max(len(x) for x in xs)
    want = sum(np.pad(x, ((0, longest - len(x)), (0, 0))) for x in xs)
    want_max = sum(x.max(axis=0) for x in xs)
    for r in range(replicas):
        _close(out[r][0], want, f"replica {r}")
        _close(out[r][1], want_max, f"replica {r}")


def test_cross_replica_sum_groups_take_the_longest_in_their_group():
    xs = [np.ones((n, 2)) for n in (1, 5, 2, 3)]
    out = xtpu.replicate(
        lambda x: xtpu.cross_replica_sum(x, [[0, 2], [1, 3]]), inputs=[[x] for x in xs], maximum_shapes=[[None, 2]]
    )
    for r, want_len in enumerate((2, 5, 2, 5)):
        assert out[r][0].shape == (want_len, 2)
    np.testing.assert_array_equal(out[1][0][:, 0], [2, 2, 2, 1, 1])


# --------------------------------------------------------------------------
# Gradients on padded values
# --------------------------------------------------------------------------


def _numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def test_gradients_on_padded_values_match_finite_differences():
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((n, 3)) for n in (2, 7)]

    def loss(x):
        return xtpu.math.reduce_sum(xtpu.nn.log_softmax(x, axis=0) * x) + xtpu.math.reduce_mean(
            xtpu.math.reduce_max(x, axis=0)
        )

    def f(x):
        y = loss(x)
        return y, xtpu.gradients(y, x)[0], xtpu.gradients(xtpu.math.reduce_sum(x), x)[0]

    out = xtpu.replicate(
        f, inputs=[[x] for x in xs], maximum_shapes=[[None, 3]], padding_spec=xtpu.PaddingSpec.POWER_OF_TWO
    )
    for r, x in enumerate(xs):
        _close(out[r][0], loss(x), f"loss, replica {r}")
        np.testing.assert_allclose(out[r][1], _numeric_grad(lambda v: float(loss(v)), x), atol=1e-6)
        _close(out[r][2], np.ones_like(x), f"gradient of a sum, replica {r}")


def test_gradient_tape_on_padded_values():
    xs = [np.array([[1.0, 5.0], [3.0, 2.0]]), np.array([[0.0, 1.0], [2.0, 9.0], [4.0, 3.0]])]

    def f(x):
        with xtpu.GradientTape() as tape:
            tape.watch(x)
            y = xtpu.math.reduce_max(x, axis=0)
        return tape.gradient(y, x)

    out = xtpu.replicate(f, inputs=[[x] for x in xs], maximum_shapes=[[None, 2]])
    for r, x in enumerate(xs):
        _close(out[r][0], (x == x.max(axis=0)).astype(float), f"replica {r}")


# --------------------------------------------------------------------------
# Compilation cache per padded signature
# --------------------------------------------------------------------------


def _step(x):
    return xtpu.math.reduce_sum(x, axis=0)


def test_power_of_two_compiles_once_per_bucket():
    """100 steps, 2 replicas, lengths drawn from 1..1000: at most 11 programs
    (buckets 1, 2, 4, ..., 1024), one per distinct bucket."""
    rng = np.random.default_rng(11)
    xtpu.replicate.cache_clear()
    buckets = set()
    for _ in range(100):
        lengths = rng.integers(1, 1001, size=2)
        xs = [np.ones((int(n), 1), np.float32) for n in lengths]
        out = xtpu.replicate(
            _step, inputs=[[x] for x in xs], maximum_shapes=[[None, 1]], padding_spec=xtpu.PaddingSpec.POWER_OF_TWO
        )
        assert [float(o[0][0]) for o in out] == [float(n) for n in lengths]
        buckets.add(1 << (int(max(lengths)) - 1).bit_length())
    info = xtpu.replicate.cache_info()
    assert info.misses == len(buckets) <= 11
    assert info.hits == 100 - info.misses
    assert info.currsize == len(buckets) and info.maxsize is None
    assert info._fields == ("hits", "misses", "maxsize", "currsize")


def test_auto_compiles_once_per_distinct_maximum():
    rng = np.random.default_rng(12)
    xtpu.replicate.cache_clear()
    maxima = set()
    for _ in range(20):
        lengths = rng.integers(1, 8, size=2)
        maxima.add(int(max(lengths)))
        xtpu.replicate(
            _step,
            inputs=[[np.ones((int(n), 1))] for n in lengths],
            maximum_shapes=[[None, 1]],
            padding_spec=xtpu.PaddingSpec.AUTO,
        )
    info = xtpu.replicate.cache_info()
    assert (info.misses, info.hits) == (len(maxima), 20 - len(maxima))
    xtpu.replicate.cache_clear()
    assert xtpu.replicate.cache_info() == (0, 0, None, 0)


# --------------------------------------------------------------------------
# What the pass cannot make exact is an error at the user's line
# --------------------------------------------------------------------------


def test_unsupported_op_on_a_padded_value_names_the_op_and_line():
    def f(x):
        return xtpu.reshape(x, [2, -1])  # splits the padded dimension

    with pytest.raises(
        DiagnosticException,
        match=r"'hlo.reshape' op \(at .*test_dynamic_shapes.py:\d+\) has operand 0 padded along dimension 0.*splits padded dimension 0",
    ):
        xtpu.replicate(f, inputs=[[np.ones(4)], [np.ones(6)]], maximum_shapes=[[None]])


# --------------------------------------------------------------------------
# Host transfers: outside compilation sees each replica's unpadded value
# --------------------------------------------------------------------------


def test_host_print_receives_the_unpadded_value(capfd):
    xs = [np.arange(6).reshape(3, 2), np.arange(4).reshape(2, 2) + 10]

    def f(x):
        xtpu.print("x =", x)  # soft placement moves it to the host
        return xtpu.outside_compilation(lambda v: xtpu.math.reduce_sum(v, axis=0), x)

    out = xtpu.replicate(f, inputs=[[x] for x in xs], maximum_shapes=[[None, 2]])
    printed = capfd.readouterr().out
    for r, x in enumerate(xs):
        _close(out[r][0], x.sum(axis=0), f"host sum, replica {r}")
        xtpu.print("x =", x)  # eagerly: the unpadded value
        eager = capfd.readouterr().out
        assert eager in printed, f"replica {r} printed {printed!r}, eager prints {eager!r}"
    assert "nan" not in printed.lower()


def test_lowered_program_pads_the_inputs_it_is_called_with():
    """xtpu.lower(..., maximum_shapes) compiles one program for the bucket;
    calling it pads each call's inputs, up to the bucket's size."""
    xs = [np.ones((3, 2)), np.ones((5, 2))]
    compiled = xtpu.lower(
        seed_computation,
        inputs=[[x] for x in xs],
        maximum_shapes=[[None, 2]],
        padding_spec=xtpu.PaddingSpec.POWER_OF_TWO,
    ).compile()
    assert "tensor<8x2xf64>" in compiled.as_text()
    rng = np.random.default_rng(5)
    for n0, n1 in ((1, 8), (7, 2)):
        ys = [rng.standard_normal((n0, 2)), rng.standard_normal((n1, 2))]
        out = compiled([[y] for y in ys])
        for r, y in enumerate(ys):
            _close(out[r][0], seed_computation(y), f"replica {r}")
    with pytest.raises(ValueError, match=r"input 0 of replica 1 has shape \[9, 2\], the program pads it to \[8, 2\]"):
        compiled([[np.ones((1, 2))], [np.ones((9, 2))]])
    with pytest.raises(ValueError, match=r"input 0 of replica 0 has shape \[1, 3\]"):
        compiled([[np.ones((1, 3))], [np.ones((2, 3))]])


def test_shape_and_size_are_the_real_ones():
    """tf.shape / tf.size of a padded value are each replica's real sizes
    (dynamic in TF), also through ops."""
    xs = [np.ones((3, 2)), np.ones((6, 2))]

    def f(x):
        y = xtpu.concat([x, x], axis=0)
        return xtpu.shape(x), xtpu.size(y), xtpu.shape(xtpu.transpose(y), out_type="int64")

    out = xtpu.replicate(
        f, inputs=[[x] for x in xs], maximum_shapes=[[None, 2]], padding_spec=xtpu.PaddingSpec.POWER_OF_TWO
    )
    for r, x in enumerate(xs):
        for got, want in zip(out[r], f(x)):
            _close(got, want, f"replica {r}")


GRADIENT_OPS = sorted(n for n in OPS if n not in ("argmax", "host_transfer"))


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("name", GRADIENT_OPS)
def test_gradient_of_each_op_on_padded_values(name, replicas):
    """d/dx sum(f(x)**2), padded and compiled, equals finite differences of
    the unpadded eager f and has each replica's real shape."""
    fn = OPS[name]

    def loss(x):
        y = fn(x)
        y = y[0] if isinstance(y, tuple) else y
        return xtpu.math.reduce_sum(y * y)

    def f(x):
        return xtpu.gradients(loss(x), x)[0]

    rng = np.random.default_rng(zlib.crc32(f"{name}-{replicas}-grad".encode()))
    xs = [rng.standard_normal((int(rng.integers(1, 6)), 3)) for _ in range(replicas)]
    out = xtpu.replicate(
        f, inputs=[[x] for x in xs], maximum_shapes=[[None, 3]], padding_spec=xtpu.PaddingSpec.POWER_OF_TWO
    )
    for r, x in enumerate(xs):
        want = _numeric_grad(lambda v: float(np.asarray(loss(v))), x)
        assert out[r][0].shape == x.shape
        np.testing.assert_allclose(out[r][0], want, rtol=1e-5, atol=1e-5, err_msg=f"{name}, replica {r}")


@pytest.mark.parametrize("start", [0, 2, 9])
def test_dynamic_slice_and_update_windows_clamp_to_the_real_bounds(start):
    """StableHLO clamps a window's start so that it fits; on a padded
    dimension it must fit the real size, as the unpadded eager op does."""
    from xtpu.core.tracing import bind
    from xtpu.dialects import hlo

    def f(x):
        i, z = xtpu.constant(np.int32(start)), xtpu.constant(np.int32(0))
        (window,) = bind(hlo.DynamicSliceOp, [x, i, z], slice_sizes=(2, 3))
        (updated,) = bind(hlo.DynamicUpdateSliceOp, [x, xtpu.constant(np.full((2, 3), 7.0)), i, z])
        return window, updated

    xs = [np.arange(12.0).reshape(4, 3), np.arange(21.0).reshape(7, 3)]
    out = xtpu.replicate(
        f, inputs=[[x] for x in xs], maximum_shapes=[[None, 3]], padding_spec=xtpu.PaddingSpec.POWER_OF_TWO
    )
    for r, x in enumerate(xs):
        for k, (got, want) in enumerate(zip(out[r], f(x))):
            _close(got, want, f"replica {r}, output {k}")


def test_while_loop_carries_padded_values():
    """A loop doubles x until its sum passes 50: the condition's reduction
    and the result see each replica's real rows only."""

    def f(x):
        def cond(v, k):
            return xtpu.math.less(xtpu.math.reduce_sum(v), 50.0)

        def body(v, k):
            return v * 2.0, k + 1

        v, k = xtpu.while_loop(cond, body, [x, xtpu.constant(np.int32(0))], maximum_iterations=20)
        return v, k, xtpu.math.reduce_max(v, axis=0)

    xs = [np.full((n, 2), 0.5) for n in (1, 3, 6)]
    out = xtpu.replicate(
        f, inputs=[[x] for x in xs], maximum_shapes=[[None, 2]], padding_spec=xtpu.PaddingSpec.POWER_OF_TWO
    )
    for r, x in enumerate(xs):
        for k, (got, want) in enumerate(zip(out[r], f(x))):
            _close(got, want, f"replica {r}, output {k}")
    assert len({int(o[1]) for o in out}) == 3  # each replica looped its own number of times


def test_a_loop_that_changes_a_padded_size_is_an_error():
    def f(x):
        return xtpu.while_loop(
            lambda v: xtpu.math.less(xtpu.math.reduce_sum(v), 5.0),
            lambda v: xtpu.math.reduce_sum(v, axis=0, keepdims=True) * np.ones((4, 1)),
            [x],
        )

    with pytest.raises(
        DiagnosticException, match=r"'hlo.while' op \(at .*\) carries loop value 0 padded along dimension\(s\) \[0\]"
    ):
        xtpu.replicate(f, inputs=[[np.ones((2, 1))], [np.ones((4, 1))]], maximum_shapes=[[None, 1]])
