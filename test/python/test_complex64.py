"""complex64 (issue 28, "complex64 where cheap"), path by path.

Every complex64 value goes through a path and must come back with the same
bits, NaN (with sign and payload), inf and -0.0 in either part included:
the IR text (``as_text()``, the Python parser in the custom and the generic
form, ``xtpu-run``), eager and compiled ops, collectives, host transfers
(outside compilation) and checkpoints; the moving collectives are
test_dtypes.py's ``test_moving_collectives_keep_every_bit[complex64]``.
The ops' values and gradients are checked against TF 2.21 from committed
data (``test/data/complex64_tf.npz``, written by
``test/data/gen_complex64_tf.py``) and against numpy.
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
from io import StringIO

import numpy as np
import pytest
from xdsl.parser import Parser
from xdsl.printer import Printer

import xtpu
from xtpu.dialects import make_context
from xtpu.dialects.hlo import ConstantOp
from xtpu.dialects.primitive import array_from_dense
from xtpu.dialects.tensor_spec import TensorSpec

M = xtpu.math
DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "complex64_tf.npz"


@pytest.fixture(scope="module")
def tf():
    with np.load(DATA) as d:
        return {k: d[k] for k in d.files}


def same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype == np.bool_:
        np.testing.assert_array_equal(got, want)
        return
    u = {4: np.uint32, 8: np.uint32}[want.dtype.itemsize]
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(u), np.ascontiguousarray(want).view(u))


def parts(re, im):
    z = np.empty(np.shape(re), np.complex64)
    z.real, z.imag = re, im
    return z


def specials():
    """Complex values whose parts are NaN (quiet, negative with payload),
    inf, -inf, -0.0, 0, a subnormal, the largest float32 and 1, paired
    every way with a few: 8 x 8 values."""
    f = np.array(
        [0x7FC00000, 0xFFC00001, 0x7F800000, 0xFF800000, 0x80000000, 0x00000000, 0x00000001, 0x7F7FFFFF],
        np.uint32,
    ).view(np.float32)
    return parts(np.repeat(f, f.size), np.tile(f, f.size))


def subnormal_part(z):
    """Where a part is a float32 subnormal (TF's CPU kernels flush those to
    zero in arithmetic; xtpu keeps them, as numpy and as for float32)."""

    def sub(p):
        return (p != 0) & (np.abs(p) < np.finfo(np.float32).tiny)

    return sub(z.real) | sub(z.imag)


def close(got, want, rel=4e-7):
    """|got - want| within ``rel`` times |want| (complex results whose parts
    may cancel: a bound on the whole value, not per part), bit for bit
    where TF's result is exact (equal bits elsewhere are not required:
    numpy and Eigen round complex products and transcendentals differently
    in the last bits)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    err = np.abs(got.astype(np.complex128) - want.astype(np.complex128))
    assert np.all(err <= rel * np.abs(want.astype(np.complex128)) + 1e-30), np.max(err / np.abs(want))


def eager_and_compiled(fn, *args):
    """``fn`` eagerly and in one replica; the two must agree bit for bit."""
    eager = fn(*args)
    (compiled,) = xtpu.replicate(lambda *a: fn(*a), [list(args)])
    if not isinstance(eager, (tuple, list)):
        eager = (eager,)
    assert len(compiled) == len(eager)
    for e, c in zip(eager, compiled):
        same_bits(np.asarray(c), np.asarray(e))
    return [np.asarray(e) for e in eager]


# ---- names, types, the text form -------------------------------------------


def test_names_and_ir_type():
    assert xtpu.complex64 == xtpu.dtypes.complex64 == "complex64"
    t = TensorSpec((2, 3), "complex64").to_type()
    assert str(t) == "tensor<2x3xcomplex<f32>>"
    assert TensorSpec.of_type(t) == TensorSpec((2, 3), "complex64")
    assert np.asarray(xtpu.constant(1 + 2j)).dtype == np.complex64  # a Python complex: complex64
    with pytest.raises(TypeError, match="unsupported numpy dtype complex128"):
        xtpu.constant(np.array([1j]))


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
def test_text_round_trip_keeps_every_bit(generic):
    v = specials()
    small = v[:9].copy()  # a nested list of (re,im) pairs; the 64 values print as the hex string form
    text = xtpu.lower(lambda x, y: [x, y, xtpu.constant(v), xtpu.constant(small)], [[v, small]]).as_text()
    assert "(0x7FC00000,0xFFC00001)" in text and "tensor<9xcomplex<f32>>" in text
    module = Parser(make_context(), text).parse_module()
    out = StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    again = Parser(make_context(), out.getvalue()).parse_module()
    consts = [op for op in again.walk() if isinstance(op, ConstantOp)]
    assert len(consts) == 2
    same_bits(array_from_dense(consts[0].value), v)
    same_bits(array_from_dense(consts[1].value), small)


def test_xtpu_run_keeps_every_bit(tmp_path):
    """The module's text run by ``xtpu-run`` (its ``main``), a complex64
    constant and argument from .npy files, results saved to .npz."""
    from xtpu.tools import run as run_tool

    v = specials()[:12].copy()
    text = xtpu.lower(lambda x: (x, -x, M.conj(x) * xtpu.constant(np.complex64(1))), [[v]]).as_text()
    (tmp_path / "p.mlir").write_text(text)
    np.save(tmp_path / "x.npy", v)
    argv = [str(tmp_path / "p.mlir"), "-i", str(tmp_path / "x.npy"), "--save", str(tmp_path / "o.npz")]
    with contextlib.redirect_stdout(io.StringIO()):
        assert run_tool.main(argv) == 0
    with np.load(tmp_path / "o.npz") as o:
        same_bits(o["replica0_output0"], v)
        same_bits(o["replica0_output1"], -v)


# ---- elementwise ops against TF ----------------------------------------------

EXACT_SPECIAL = {
    "negative": M.negative,
    "conj": M.conj,
    "real": M.real,
    "imag": M.imag,
    "to_float32": lambda z: xtpu.cast(z, xtpu.float32),
    "to_bool": lambda z: xtpu.cast(z, xtpu.bool),
}


def test_ops_that_move_parts_equal_tf_bit_for_bit(tf):
    s = tf["special"]
    names = list(EXACT_SPECIAL)
    got = eager_and_compiled(lambda z: [EXACT_SPECIAL[n](z) for n in names], s)
    keep = ~subnormal_part(s)
    for n, g in zip(names, got):
        if n == "to_bool":  # TF's CPU reads a subnormal real part as 0 (xtpu: != 0, as for float32)
            same_bits(g[keep], tf[f"special_{n}"][keep])
            same_bits(g, s.real != 0)
        else:
            same_bits(g, tf[f"special_{n}"])
    (c,) = eager_and_compiled(lambda a, b: xtpu.complex(a, b), s.real.copy(), s.imag.copy())
    same_bits(c, tf["special_complex"])
    # addition of zero: TF's result bits, except where TF's CPU kernel flushed a subnormal part
    (a,) = eager_and_compiled(lambda z: z + xtpu.zeros_like(z), s)
    same_bits(a[keep], tf["special_add_zero"][keep])
    (i,) = eager_and_compiled(lambda z: xtpu.cast(z, xtpu.int32), tf["finite_special"])
    same_bits(i, tf["finite_special_to_int32"])
    f32 = s.real[:: int(np.sqrt(s.size))].copy()
    for src, want in ((f32, "float32_to_complex64"), (tf["int32_in"], "int32_to_complex64")):
        (c,) = eager_and_compiled(lambda x: xtpu.cast(x, xtpu.complex64), src)
        same_bits(c, tf[want])
    (c,) = eager_and_compiled(lambda x: xtpu.cast(x, xtpu.complex64), np.array([True, False]))
    same_bits(c, tf["bool_to_complex64"])


UNARY = {
    "negative": M.negative,
    "exp": M.exp,
    "log": M.log,
    "sqrt": M.sqrt,
    "square": M.square,
    "reciprocal": M.reciprocal,
    "abs": M.abs,
    "conj": M.conj,
    "real": M.real,
    "imag": M.imag,
    "sign": M.sign,
    "tanh": M.tanh,
    "sin": M.sin,
    "cos": M.cos,
    "rsqrt": M.rsqrt,
    "log1p": M.log1p,
}
BINARY = {
    "add": M.add,
    "subtract": M.subtract,
    "multiply": M.multiply,
    "divide": M.divide,
    "pow": M.pow,
    "equal": M.equal,
    "not_equal": M.not_equal,
}
BIT_EXACT = {"negative", "conj", "real", "imag", "add", "subtract", "equal", "not_equal"}


def test_elementwise_ops_equal_tf(tf):
    x, y = tf["finite_x"], tf["finite_y"]
    un, bi = list(UNARY), list(BINARY)
    got = eager_and_compiled(lambda a, b: [UNARY[n](a) for n in un] + [BINARY[n](a, b) for n in bi], x, y)
    for n, g in zip(un + bi, got):
        want = tf[f"unary_{n}"] if n in UNARY else tf[f"binary_{n}"]
        if n in BIT_EXACT:
            same_bits(g, want)
        else:
            # numpy's complex log1p is log(1 + z), a few more ulps than TF's near 0
            close(g, want, rel=4e-6 if n == "log1p" else 4e-7)
    assert np.asarray(M.abs(x)).dtype == np.float32
    same_bits(np.asarray(M.equal(x, tf["finite_x"].copy())), np.ones(x.shape, bool))


def test_reductions_and_contractions_equal_tf(tf):
    m, n, k = tf["m"], tf["n"], tf["k"]

    def f(m, n, k):
        return (
            xtpu.reduce_sum(m, axis=1),
            xtpu.reduce_mean(m, axis=0),
            M.reduce_prod(m, axis=1),
            xtpu.matmul(m, n),
            xtpu.matmul(m, k, adjoint_b=True),
            xtpu.einsum("ij,jk->ik", m, n),
        )

    got = eager_and_compiled(f, m, n, k)
    for g, name in zip(got, ["sum", "mean", "prod", "matmul", "matmul_adjoint_b", "einsum"]):
        want = tf[name]
        if name in ("matmul", "matmul_adjoint_b", "einsum"):
            # parts may cancel: bound the error by the sum of |products|
            scale = np.abs(m).astype(np.float64) @ np.abs(n if name != "matmul_adjoint_b" else k.T)
            assert np.all(np.abs(g.astype(np.complex128) - want) <= 4e-7 * scale)
            assert g.dtype == want.dtype and g.shape == want.shape
        else:
            close(g, want)
    same_bits(np.asarray(xtpu.reduce_sum(np.array([1e30 + 1j, -1e30 + 1j], np.complex64))), np.complex64(2j))


@pytest.mark.parametrize(
    "name, fn",
    [
        ("less", lambda x: M.less(x, x)),
        ("maximum", lambda x: M.maximum(x, x)),
        ("floor", lambda x: M.floor(x)),
        ("argmax", lambda x: M.argmax(x)),
        ("sort", lambda x: xtpu.sort(x)),
        ("reduce_max", lambda x: xtpu.reduce_max(x)),
    ],
)
def test_ops_tf_refuses_name_the_op_and_dtype(tf, name, fn):
    assert json.loads(str(tf["refused"]))[name] is True  # TF refuses it too
    x = tf["finite_x"][:4]
    for run in (lambda: fn(x), lambda: xtpu.replicate(fn, [[x]])):
        with pytest.raises((TypeError, ValueError), match="complex64") as e:
            run()
        assert name.split("_")[-1] in str(e.value) or "hlo." in str(e.value), str(e.value)


def test_shape_and_indexing_ops_move_bits():
    v = specials()
    w = v.reshape(8, 8)

    def f(w):
        return (
            xtpu.transpose(w),
            xtpu.concat([w, w[:2]], 0),
            w[1:5:2, ::3],
            xtpu.gather(w, [3, 0, 7], axis=1),
            xtpu.where(np.eye(8, dtype=bool), w, xtpu.zeros_like(w)),
            xtpu.stack([w[0], w[1]]),
            xtpu.tile(w[:1], [2, 1]),
            xtpu.reverse(w, [0]),
        )

    got = eager_and_compiled(f, w)
    want = [
        w.T,
        np.concatenate([w, w[:2]]),
        w[1:5:2, ::3],
        w[:, [3, 0, 7]],
        np.where(np.eye(8, dtype=bool), w, 0).astype(np.complex64),
        np.stack([w[0], w[1]]),
        np.tile(w[:1], [2, 1]),
        w[::-1],
    ]
    for g, e in zip(got, want):
        same_bits(g, e)


def test_weak_python_values_and_mixed_dtypes():
    x = np.array([1 + 2j, -3j], np.complex64)
    same_bits(np.asarray(x * 2), (x * np.complex64(2)))  # a Python int takes complex64
    same_bits(np.asarray(M.add(x, 1j)), x + np.complex64(1j))
    with pytest.raises(TypeError, match="a complex"):
        M.add(np.ones(2, np.float32), 1j)
    with pytest.raises(TypeError, match="same dtype"):
        M.add(x, np.ones(2, np.float32))
    with pytest.raises(TypeError, match="float32"):
        xtpu.complex(np.ones(2), np.ones(2))  # float64 parts: TF's complex128


# ---- collectives, host transfers, checkpoints --------------------------------


def test_cross_replica_sum_and_host_round_trip():
    """All-reduce of complex64 on 2 replicas (StableHLO all_reduce: the
    replicas' values added in order) and a host transfer each way."""
    v = specials()
    finite = v[np.isfinite(v.real) & np.isfinite(v.imag)]
    other = (finite[::-1] * np.complex64(0.5 - 2j)).astype(np.complex64)

    def f(x):
        return xtpu.cross_replica_sum(x), xtpu.outside_compilation(lambda y: y, x)

    got = xtpu.replicate(f, [[finite], [other]])
    for r, (total, back) in enumerate(got):
        same_bits(total, finite + other)
        same_bits(back, [finite, other][r])
    (only,) = xtpu.replicate(lambda x: xtpu.outside_compilation(lambda y: y, x), [[v]])
    same_bits(only[0], v)
    stages = xtpu.lower(lambda x: xtpu.cross_replica_sum(x), [[finite], [other]]).compile().stages
    assert f"tensor<{finite.size}xcomplex<f32>>" in stages["tpu-lower-cross-replica-sum"]


def test_checkpoint_keeps_bits(tmp_path):
    v = specials()
    var = xtpu.Variable(v)
    ckpt = xtpu.train.Checkpoint(v=var)
    path = ckpt.save(str(tmp_path / "ck"))
    var.assign(np.zeros_like(v))
    ckpt.restore(path)
    same_bits(var.numpy(), v)


# ---- gradients ----------------------------------------------------------------


def _tf_gradients(d, x, m):
    """The gradients ``gen_complex64_tf.py`` took with TF, here: of
    ``reduce_sum(real(f(z) * w))`` with respect to a complex64 ``z``, and
    the cases of abs, imag, complex, cast and matmul."""
    w, y, n = d["grad_w"], d["finite_y"], d["n"]
    fns = {
        "multiply": lambda z: z * y,
        "divide": lambda z: z / y,
        "exp": M.exp,
        "log": M.log,
        "sqrt": M.sqrt,
        "square": M.square,
        "conj": M.conj,
        "reciprocal": M.reciprocal,
    }
    out = {}

    def grad(loss_fn, *sources):
        with xtpu.GradientTape() as tape:
            tape.watch(list(sources))
            loss = xtpu.reduce_sum(loss_fn(*sources))
        return tape.gradient(loss, list(sources))

    for name, fn in fns.items():
        (out[name],) = grad(lambda z: M.real(fn(z) * w), x)
    (out["abs"],) = grad(lambda z: M.abs(z) * w.real, x)
    (out["imag"],) = grad(lambda z: M.imag(z) * w.real, x)
    a, b = M.real(x), M.imag(x)
    out["complex_re"], out["complex_im"] = grad(lambda a, b: M.real(xtpu.complex(a, b) * w), a, b)
    (out["cast_real_to_complex"],) = grad(lambda a: M.real(xtpu.cast(a, xtpu.complex64) * w), a)
    (out["cast_complex_to_real"],) = grad(lambda z: xtpu.cast(z, xtpu.float32) * w.real, x)
    (out["matmul"],) = grad(lambda m: M.real(xtpu.matmul(m, n) * (d["m"] @ n)), m)
    return out


def test_gradients_equal_tf(tf):
    """TF's complex gradient convention (math_grad.py: the cotangent times
    the conjugate of the derivative), eagerly and compiled, against TF's
    own gradients: within 4e-7 of each value's magnitude (exact for the
    part ops and casts), the two paths bit for bit."""
    eager = _tf_gradients(tf, xtpu.constant(tf["finite_x"]), xtpu.constant(tf["m"]))
    names = list(eager)
    (compiled,) = xtpu.replicate(lambda x, m: [_tf_gradients(tf, x, m)[k] for k in names], [[tf["finite_x"], tf["m"]]])
    assert len(names) == 15
    for name, c in zip(names, compiled):
        e, want = np.asarray(eager[name]), tf[f"grad_{name}"]
        same_bits(np.asarray(c), e)
        if name in ("conj", "imag", "complex_re", "complex_im", "cast_real_to_complex", "cast_complex_to_real"):
            same_bits(e, want)
        else:
            close(e, want)


def test_gradients_through_other_ops_are_refused_naming_the_op():
    x = np.array([1 + 2j, -0.5j], np.complex64)

    def grad(x):
        with xtpu.GradientTape() as tape:
            tape.watch(x)
            y = xtpu.reduce_sum(M.real(M.tanh(x)))
        return tape.gradient(y, x)

    with pytest.raises(TypeError, match="gradients of complex64 are not supported by hlo.tanh: the gradient reaches"):
        grad(xtpu.constant(x))
    with pytest.raises(TypeError, match=r"gradients of complex64 are not supported by hlo.tanh.*test_complex64.py"):
        xtpu.replicate(grad, [[x]])
    v = xtpu.Variable(x)
    with pytest.raises(TypeError, match="hlo.reduce applies mul"):
        with xtpu.GradientTape() as tape:
            y = M.real(M.reduce_prod(v))
        tape.gradient(y, v)


def test_numpy_reductions_of_tracked_complex_values_are_recorded():
    """``np.sum`` of a complex64 value a tape tracks runs as xtpu's
    reduce_sum (recorded, as for floats); a complex target's gradient is
    seeded with ones: ``conj(d(z*z)/dz) = 2 conj(z)``, as TF gives it."""
    z0 = np.array([1 + 2j, 3j], np.complex64)
    z = xtpu.constant(z0)
    with xtpu.GradientTape(persistent=True) as tape:
        tape.watch(z)
        real_loss = np.sum(M.real(z * z))
        complex_loss = np.sum(z * z)
    same_bits(np.asarray(tape.gradient(real_loss, z)), 2 * np.conj(z0))
    same_bits(np.asarray(tape.gradient(complex_loss, z)), 2 * np.conj(z0))
