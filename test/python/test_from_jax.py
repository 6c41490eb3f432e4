"""JAX programs inside xtpu: ``xtpu.experimental.from_jax`` / ``call_stablehlo``.

Each kind of JAX function runs through ``from_jax`` eagerly and inside
``xtpu.replicate`` with 2 replicas; values and xtpu's gradients
(``GradientTape``) equal JAX's and ``jax.grad``'s.

Kinds xtpu cannot import yet: a windowed product (``cumprod``: a
``reduce_window`` multiply; windowed sums, maxima and minima and
convolutions import, see test_conv_stablehlo.py), float remainder
(``jnp.mod``, float ``//``), ``cbrt``, ``tan``, ``atan2`` and CHLO's inverse
trigonometric, hyperbolic and gamma functions.  Each is refused at import,
naming the op (tested below for some).

StableHLO has no ``stop_gradient`` (JAX lowers ``lax.stop_gradient`` and
``custom_jvp`` rules away): xtpu's gradients through an imported program
are those of its forward ops, which differ from JAX's where a function
stops or overrides its gradient (``logsumexp`` stops the gradient of its
max, which cancels: equal).
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import xla_reference  # noqa: E402, F401  (before jax: 8 CPU devices)

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

import xtpu  # noqa: E402
from xtpu.experimental import StableHLOImportError, call_stablehlo, from_jax  # noqa: E402
from xtpu.tracing import spec_of  # noqa: E402


def _mlp(x, w):
    return jnp.mean((jnp.tanh(x @ w) - 0.5) ** 2)


def _layer_norm(x, w):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + 1e-5) @ w


def _cross_entropy(x, w):
    logits = x @ w
    labels = jax.nn.one_hot(jnp.array([1, 3]), 4, dtype=x.dtype)
    return -jnp.sum(labels * jax.nn.log_softmax(logits))


def _sparse_cross_entropy(x, w):
    """Softmax cross-entropy with integer labels (optax's
    softmax_cross_entropy_with_integer_labels: take_along_axis of log_softmax)."""
    logits = x @ w
    labels = jnp.array([3, 0])
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def _convolution(x, w):
    """A 2-D convolution, NHWC / HWIO, stride and padding (issue 27's hlo.convolution)."""
    img = jnp.tile(x, (2, 2)).reshape(1, 4, 6, 1)
    kernel = w[:2, :2].reshape(2, 2, 1, 1) * jnp.ones((1, 1, 1, 2), x.dtype)
    return lax.conv_general_dilated(img, kernel, (1, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _pooling(x, w):
    """Max and average pooling (reduce_window; max pooling's gradient is a select_and_scatter)."""
    img = (x @ w).reshape(1, 2, 4, 1)
    window, strides = (1, 2, 2, 1), (1, 1, 2, 1)
    mx = lax.reduce_window(img, -jnp.inf, lax.max, window, strides, "VALID")
    avg = lax.reduce_window(img, 0.0, lax.add, window, strides, "SAME") / 4.0
    return mx, avg


def _scan(x, w):
    def step(c, row):
        c = jnp.tanh(c @ w[:3, :3] + row)
        return c, c.sum()

    c, ys = lax.scan(step, jnp.zeros(3, x.dtype), x)
    return c, ys


def _switch(x, w):
    i = jnp.int32(jnp.sum(x) > 0) + 1
    return lax.switch(i, [lambda: x * 2.0, lambda: jnp.exp(x), lambda: x @ w[:, :3]])


def _dynamic(x, w):
    i = jnp.int32(jnp.abs(jnp.sum(x))) % 2
    s = lax.dynamic_slice(w, (i, jnp.int32(1)), (2, 2))
    return lax.dynamic_update_slice(w, s * 3.0, (jnp.int32(1), i)), s


def _gather(x, w):
    return (
        w[jnp.array([2, 0, 2])],
        jnp.take(x, jnp.array([1, 1, 0, 2]), axis=1),
        jnp.take_along_axis(w, jnp.array([[0, 3], [1, 1], [2, 0]]), axis=1),
    )


def _scatter(x, w):
    w = jnp.asarray(w)
    return (
        w.at[jnp.array([0, 2, 0])].add(x[:1, :1] * jnp.ones((3, 4), x.dtype)),
        w.at[jnp.array([2, 0]), 1:3].set(x[:, 1:]),
        w.at[:, jnp.array([1, 3, 1])].max(jnp.concatenate([x.T, x.T[:, :1] * 0.5], axis=1)),
        w.at[jnp.array([1, 2])].mul(x[:, :1] + 2.0, unique_indices=True),  # JAX: no gradient otherwise
    )


def _sort(x, w):
    return jnp.sort(w, axis=1), jnp.sort(x, axis=0, descending=True), jnp.argsort(w, axis=0), lax.top_k(w, 2)


def _random(x, w):
    """JAX's threefry2x32 (uint32 adds, rotations by shifts, xor) and its
    uniform floats (mantissa bits bitcast to float32)."""
    key = jax.random.key(3)
    k1, k2 = jax.random.split(key)
    bits = jax.random.bits(k1, (2, 3), jnp.uint32)
    return bits, x * jax.random.uniform(k2, x.shape, x.dtype), jax.random.randint(key, (4,), 0, 10)


def _normal(x, w):
    """JAX's normal random numbers: threefry bits, uniform floats, Giles's
    erfinv (chlo.erf_inv)."""
    return x * jax.random.normal(jax.random.key(4), x.shape, x.dtype), jax.scipy.special.erfinv(jnp.tanh(w))


def _rounding(x, w):
    """``lax.round`` away from zero (round_nearest_afz, at halves too),
    ``jnp.var`` (chlo.square) and ``searchsorted`` (TOTALORDER compares)."""
    afz = lax.RoundingMethod.AWAY_FROM_ZERO
    halves = jnp.array([-2.5, -0.5, 0.5, 1.5, -0.0, 2.4999998], x.dtype)
    return (
        lax.round(x * 4.0, afz),
        lax.round(halves, afz),
        jnp.var(w, axis=0),
        jnp.searchsorted(jnp.sort(w[0]), x[0]),
        x * lax.round(x * 3.0, afz),
    )


def _argmax(x, w):
    return jnp.argmax(x, axis=1), jnp.argmin(w, axis=0), jnp.argmax(w), x[0, jnp.argmax(x[0])]


KINDS = {
    "arithmetic": lambda x, w: x * x[:, ::2].sum() + x / (jnp.abs(x) + 1.0) - 2.0 * x,
    "transcendental": lambda x, w: jnp.tanh(x) + jnp.exp(-x * x) + jnp.log(1.0 + x * x) + jnp.sqrt(x * x + 1.0),
    "activations": lambda x, w: jax.nn.sigmoid(x) + jax.nn.relu(x) + jax.nn.softplus(x) + jax.nn.gelu(x, True),
    "log1p_expm1": lambda x, w: jnp.log1p(x * x) + jnp.expm1(x / 4.0),
    "dot": lambda x, w: x @ w,
    "einsum": lambda x, w: jnp.einsum("bi,ij,bj->b", x, w[:, :3] @ w[:, :3].T, x),
    "batched_dot": lambda x, w: jnp.einsum("bij,bjk->bik", jnp.stack([x, x * 2]), jnp.stack([w, -w])),
    "reductions": lambda x, w: (jnp.sum(x, 0), jnp.mean(x), jnp.max(x, 1), jnp.min(w), jnp.prod(x[:, :2], 1)),
    "softmax": lambda x, w: jax.nn.softmax(x @ w, axis=-1),
    "cross_entropy": _cross_entropy,
    "sparse_cross_entropy": _sparse_cross_entropy,
    "mlp": _mlp,
    "layer_norm": _layer_norm,
    "where_compare": lambda x, w: jnp.where(x > 0.1, x, -x * 0.5) + jnp.where(x <= w[:2, :3], 1.0, x),
    "clip_clamp": lambda x, w: (
        jnp.clip(x, -0.5, 0.7) + lax.clamp(jnp.asarray(-0.2, x.dtype), x * 2.0, jnp.asarray(0.3, x.dtype))
    ),
    "shapes": lambda x, w: (x.T @ x.reshape(2, 3), jnp.concatenate([x, x * 2], 1), jnp.broadcast_to(x[0], (4, 3))),
    "slices_pad": lambda x, w: (x[1:, ::2], jnp.pad(x, ((1, 0), (0, 2))), w[::2, 1:3]),
    "dynamic_slice": _dynamic,
    "iota": lambda x, w: jnp.arange(3, dtype=x.dtype) * x + jnp.eye(3, dtype=x.dtype)[1],
    "fori_loop": lambda x, w: lax.fori_loop(0, 3, lambda i, a: jnp.tanh(a * 1.5 + i), x),
    "while_loop": lambda x, w: lax.while_loop(lambda a: jnp.sum(a) < 10.0, lambda a: a * 1.5 + 1.0, jnp.abs(x))[0],
    "scan": _scan,
    "cumsum": lambda x, w: (jnp.cumsum(x, axis=1), jnp.cumsum(w, axis=0)[::-1]),
    "convolution": _convolution,
    "pooling": _pooling,
    "cond": lambda x, w: lax.cond(jnp.sum(x) > 0, lambda: jnp.tanh(x), lambda: x * w[:2, :3]),
    "switch": _switch,
    "integers": lambda x, w: x * (jnp.arange(6).reshape(2, 3) // 2 % 2 + jnp.sign(jnp.int32(x * 4))),
    "logsumexp": lambda x, w: jax.nn.logsumexp(x @ w, axis=1),
    "bf16_casts": lambda x, w: (x.astype(jnp.bfloat16) * 2).astype(jnp.float32) + x,
    "float64": lambda x, w: jnp.tanh(x.astype(jnp.float64) @ w.astype(jnp.float64)).astype(jnp.float32),
    "gather": _gather,
    "scatter": _scatter,
    "sort_top_k": _sort,
    "argmax": _argmax,
    "random_bits": _random,
    "random_normal": _normal,
    "rounding_var_searchsorted": _rounding,
    "erf_sin_cos": lambda x, w: (jax.scipy.special.erf(x), jax.nn.gelu(x, approximate=False), jnp.sin(w) * jnp.cos(w)),
}


def _inputs(r):
    rng = np.random.default_rng(10 + r)
    return [rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)]


def _loss_weights(outs):
    return [np.linspace(0.5, 1.5, np.size(o)).reshape(np.shape(o)).astype(np.float32) for o in outs]


NO_JAX_GRADIENT = {"while_loop"}
"""JAX cannot differentiate a while_loop in reverse mode; its values are compared."""


_JITTED: dict = {}


def _jitted(fn):
    """``fn``'s flattened outputs and the gradient of their weighted sum
    (the weights an argument), each one jitted XLA program, made once per
    ``fn``: op by op, JAX compiled some 14 one-op programs per kind (35 s
    of the suite's XLA compiles)."""
    if fn not in _JITTED:

        def flat(x, w):
            return jax.tree_util.tree_leaves(fn(x, w))

        def loss(x, w, cs):
            return sum(jnp.sum(o * c) for o, c in zip(flat(x, w), cs) if jnp.issubdtype(o.dtype, jnp.floating))

        _JITTED[fn] = jax.jit(flat), jax.jit(jax.grad(loss, argnums=(0, 1)))
    return _JITTED[fn]


def _jax_reference(fn, x, w):
    flat, grad = _jitted(fn)
    with jax.enable_x64(True):
        outs = [np.asarray(o) for o in flat(x, w)]
        try:
            gx, gw = grad(x, w, _loss_weights(outs))
        except ValueError:
            return outs, []
    return outs, [np.asarray(gx), np.asarray(gw)]


def _xtpu_step(g, gradients=True):
    def step(x, w):
        if not gradients:
            return jax.tree_util.tree_leaves(g(x, w))
        with xtpu.GradientTape() as tape:
            tape.watch([x, w])
            outs = jax.tree_util.tree_leaves(g(x, w))
            cs = _loss_weights([np.zeros(o.shape) for o in outs])
            terms = [xtpu.reduce_sum(o * c) for o, c in zip(outs, cs) if spec_of(o).dtype.startswith("float")]
            loss = terms[0]
            for t in terms[1:]:
                loss = loss + t
        gx, gw = tape.gradient(loss, [x, w])
        gx = xtpu.zeros_like(x) if gx is None else gx
        gw = xtpu.zeros_like(w) if gw is None else gw
        return [*outs, gx, gw]

    return step


def _close(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=what)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_from_jax_eagerly_and_replicated_equals_jax(kind):
    check_from_jax(kind, KINDS[kind], [_inputs(r) for r in range(2)])


def check_from_jax(kind, fn, ins):
    """``from_jax(fn)`` eagerly on ``ins[0]`` and inside ``xtpu.replicate``
    with one replica per entry of ``ins``: values and GradientTape gradients
    equal to JAX's (also used by test_conv_stablehlo.py)."""
    g = from_jax(fn)
    step = _xtpu_step(g, kind not in NO_JAX_GRADIENT)
    references = [_jax_reference(fn, *i) for i in ins]
    # Eagerly.
    x, w = ins[0]
    want, want_grads = references[0]
    assert bool(want_grads) == (kind not in NO_JAX_GRADIENT)
    got = step(xtpu.constant(x), xtpu.constant(w))
    for i, (a, b) in enumerate(zip(got, want + want_grads)):
        _close(np.asarray(a), b, f"{kind} eager output {i}")
    # Inside xtpu.replicate, 2 replicas with their own inputs.
    outs = xtpu.replicate(step, ins)
    for r in range(len(ins)):
        want, want_grads = references[r]
        for i, (a, b) in enumerate(zip(outs[r], want + want_grads)):
            _close(a, b, f"{kind} replica {r} output {i}")


def test_at_least_twenty_kinds():
    assert len(KINDS) >= 20


@pytest.mark.parametrize(
    "fn,op",
    [
        (lambda x: jnp.cbrt(x), "stablehlo.cbrt"),
        (lambda x: jnp.mod(x, 0.7), "stablehlo.remainder"),  # float ``//`` too
        (lambda x: lax.reduce((x, x * 2, x * 3), (x[0], x[1], x[2]), lambda a, b: a, (0,)), "stablehlo.reduce"),
        (lambda x: jnp.cumprod(x), "stablehlo.reduce_window"),  # a windowed product
    ],
)
def test_what_xtpu_cannot_import_is_refused_naming_the_op_and_its_location(fn, op):
    with pytest.raises(StableHLOImportError, match=rf"'{op}' op in @\w+ at ") as e:
        from_jax(fn)(np.ones(4, np.float32))
    if op not in ("stablehlo.reduce_window", "stablehlo.remainder"):  # in private functions: no file position
        assert "at test_from_jax.py:" in str(e.value)


def test_a_sort_comparator_xtpu_does_not_read_is_refused():
    """xtpu's sort takes keys compared LT or GT, lexicographically; a
    comparator comparing one operand with another is refused at import."""
    text = """
    func.func @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {
      %0:2 = "stablehlo.sort"(%arg0, %arg1) <{dimension = 0 : i64, is_stable = true}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<f32>, %d: tensor<f32>):
        %1 = stablehlo.compare LT, %a, %d, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
        stablehlo.return %1 : tensor<i1>
      }) : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
      return %0#0 : tensor<4xf32>
    }
    """
    with pytest.raises(StableHLOImportError, match="'stablehlo.sort' op in @main .*comparator xtpu does not read"):
        call_stablehlo(text, np.ones(4, np.float32), np.ones(4, np.float32))


def test_total_order_compares_equal_xla():
    """StableHLO's TOTALORDER compare on floats (-NaN < -inf < ... < -0.0 <
    0.0 < ... < inf < NaN) against XLA running the same text, and chlo.top_k
    (XLA's descending totalOrder: NaN first, 0.0 before -0.0)."""
    import xla_reference as X

    text = """
    func.func @main(%a: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<8xi1>, tensor<8xi1>, tensor<8xi1>, tensor<3xf32>, tensor<3xi32>) {
      %0 = stablehlo.compare LT, %a, %b, TOTALORDER : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xi1>
      %1 = stablehlo.compare EQ, %a, %b, TOTALORDER : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xi1>
      %2 = stablehlo.compare GE, %a, %b, TOTALORDER : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xi1>
      %v, %i = chlo.top_k(%a, k = 3) : tensor<8xf32> -> (tensor<3xf32>, tensor<3xi32>)
      return %0, %1, %2, %v, %i : tensor<8xi1>, tensor<8xi1>, tensor<8xi1>, tensor<3xf32>, tensor<3xi32>
    }
    """
    neg_nan = np.float32(-np.nan) if np.signbit(np.float32(-np.nan)) else -np.float32(np.nan)
    a = np.array([-0.0, 0.0, np.nan, neg_nan, np.inf, -np.inf, 1.5, 0.0], np.float32)
    b = np.array([0.0, -0.0, 1e30, -np.inf, np.nan, neg_nan, 1.5, 0.0], np.float32)
    got = [np.asarray(v) for v in call_stablehlo(text, a, b)]
    (want,) = X.run(X.pretty(text), [[a, b]])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert got[4].tolist() == [2, 4, 6] and np.signbit(a[[0]]).all()


def test_custom_call_is_refused_by_name():
    text = """
    func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
      %0 = stablehlo.custom_call @my_kernel(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }
    """
    with pytest.raises(StableHLOImportError, match="custom_call target 'my_kernel'"):
        call_stablehlo(text, np.ones(4, np.float32))


def test_bytecode_and_shardings():
    """MLIR bytecode reads as text does; ``mhlo.sharding`` on an argument
    becomes an xtpu sharding annotation (tpu.sharding_constraint)."""
    from jax._src.interpreters import mlir as jmlir
    from jaxlib.mlir import ir

    text = """
    module attributes {mhlo.num_replicas = 1 : i32} {
      func.func @main(%arg0: tensor<4x2xf32> {mhlo.sharding = "{devices=[2,1]0,1}"}) -> tensor<4x2xf32> {
        %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{replicated}"} : (tensor<4x2xf32>) -> tensor<4x2xf32>
        %1 = stablehlo.multiply %0, %0 : tensor<4x2xf32>
        return %1 : tensor<4x2xf32>
      }
    }
    """
    with jmlir.make_ir_context():
        bytecode = jmlir.module_to_bytecode(ir.Module.parse(text))
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_array_equal(np.asarray(call_stablehlo(bytecode, x)), x * x)
    lowered = xtpu.lower(lambda v: call_stablehlo(text, v), [[x]])
    body = lowered.as_text()
    assert "tpu.sharding_constraint %input0 to #tpu.sharding<{devices=[2,1]0,1}>" in body
    assert "to #tpu.sharding<{replicated}>" in body
    da = xtpu.DeviceAssignment.build(
        xtpu.Topology(mesh_shape=[1, 1, 1, 2]), num_replicas=1, computation_shape=[1, 1, 1, 2]
    )
    out = xtpu.replicate(lambda v: call_stablehlo(text, v), [[x]], device_assignment=da)
    np.testing.assert_array_equal(out[0][0], x * x)


def test_arguments_are_checked():
    g = "func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n return %a : tensor<2xf32>\n}"
    with pytest.raises(ValueError, match=r"argument 0 of @main must be float32\[2\], got float32\[3\]"):
        call_stablehlo(g, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="takes 1 arguments, got 2"):
        call_stablehlo(g, np.ones(2, np.float32), np.ones(2, np.float32))


def test_export_import_round_trip_runs_the_same():
    """xtpu's compiled program exported to StableHLO and imported back with
    call_stablehlo gives xtpu's values."""

    def f(x, w):
        h = xtpu.math.tanh(xtpu.matmul(x, w))
        _, h = xtpu.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a * 0.5 + 1.0), [xtpu.constant(0), h])
        return xtpu.nn.softmax(h)

    x, w = _inputs(0)
    text = xtpu.lower(f, [[x, w]]).compile().as_text(dialect="stablehlo")
    got = call_stablehlo(text, x, w)
    want = xtpu.replicate(f, [[x, w]])[0][0]
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("spec", [("x", None), ("y", "x"), (None, "y"), ("x", "y"), (None, None), (("x", "y"), None)])
def test_simple_shardy_shardings_read_as_jax_writes_them_for_gspmd(spec):
    """A Shardy ``sdy.sharding`` on an argument becomes the sharding JAX
    itself writes as ``mhlo.sharding`` without Shardy (the reference); a
    dimension over several axes is refused as not simple."""
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from xtpu.dialects.sharding import Sharding
    from xtpu.passes.stablehlo_import import Importer, IRSink, parse

    mesh = Mesh(np.array(jax.devices("cpu")[:4]).reshape(2, 2), ("x", "y"))
    f = jax.jit(lambda a: a * 2, in_shardings=NamedSharding(mesh, P(*spec)))

    def shardings(shardy):
        jax.config.update("jax_use_shardy_partitioner", shardy)
        try:
            module, _ = parse(f.lower(jnp.ones((4, 4), jnp.float32)).as_text())
        finally:
            jax.config.update("jax_use_shardy_partitioner", True)
        return Importer(module, IRSink(None)).argument_shardings()

    (want,) = shardings(False)
    if isinstance(spec[0], tuple):
        with pytest.raises(StableHLOImportError, match="not simple"):
            shardings(True)
        return
    (got,) = shardings(True)
    assert Sharding.parse(got) == Sharding.parse(want or "{replicated}"), (got, want)
