"""bfloat16, float16 and the small integer dtypes (issue 28), path by path.

Every value goes through a path and must come back with the same bits:
eager ops, a replicated (compiled) computation, the IR text and the Python
parser, collectives, host transfers (outside compilation), checkpoints.
References: ml_dtypes' own casts, a bit-level round-to-nearest-even written
here, numpy in float64, and JAX/XLA with ``preferred_element_type=float32``.
"""

import ml_dtypes
import numpy as np
import pytest

import xtpu
from xtpu.dialects import make_context
from xtpu.dialects.tensor_spec import TensorSpec, from_saved, numpy_dtype
from xtpu.dialects.tpu import ReplicateOp  # noqa: F401  (the dialect is registered)

BF16 = np.dtype(ml_dtypes.bfloat16)
NEW_DTYPES = ["bfloat16", "float16", "int8", "int16", "uint8", "uint16", "uint32", "uint64"]


def bits(a):
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return a
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    np.testing.assert_array_equal(bits(got), bits(want))


def special_values(dtype):
    """Values of ``dtype`` that a path could lose: for floats inf, -inf, NaN
    (quiet, signalling, with payload), -0.0, subnormals, the largest finite;
    for integers the extremes."""
    dt = numpy_dtype(dtype)
    if dtype == "complex64":  # the float32 specials paired with each other: 16 values
        f = np.array([0x7FC00000, 0xFFC00001, 0x80000000, 0x00000001], np.uint32).view(np.float32)
        z = np.empty(16, np.complex64)
        z.real, z.imag = np.repeat(f, 4), np.tile(f, 4)
        return z
    if dtype == "bfloat16":
        return np.array(
            [0x7F80, 0xFF80, 0x7FC0, 0x7FC5, 0x7F81, 0x8000, 0x0000, 0x0001, 0x807F, 0x7F7F, 0x3F80, 0xBFC0], np.uint16
        ).view(dt)
    if dtype == "float16":
        return np.array(
            [0x7C00, 0xFC00, 0x7E00, 0x7E45, 0x7C01, 0x8000, 0x0000, 0x0001, 0x83FF, 0x7BFF, 0x3C00, 0xBE00], np.uint16
        ).view(dt)
    info = np.iinfo(dt)
    return np.array([info.min, info.max, 0, 1, info.max // 3, info.min // 2 if info.min else 7], dt)


# ---- names --------------------------------------------------------------


def test_tf_dtype_names():
    assert (xtpu.bfloat16, xtpu.float16, xtpu.half, xtpu.bool) == ("bfloat16", "float16", "float16", "bool")
    assert (xtpu.int8, xtpu.int16, xtpu.uint8, xtpu.uint16, xtpu.uint32, xtpu.uint64) == (
        "int8",
        "int16",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
    )


@pytest.mark.parametrize(
    "dtype, elem",
    [
        ("bfloat16", "bf16"),
        ("float16", "f16"),
        ("int8", "i8"),
        ("int16", "i16"),
        ("uint8", "ui8"),
        ("uint16", "ui16"),
        ("uint32", "ui32"),
        ("uint64", "ui64"),
    ],
)
def test_ir_element_types(dtype, elem):
    t = TensorSpec((2, 3), dtype).to_type()
    assert str(t) == f"tensor<2x3x{elem}>"
    assert TensorSpec.of_type(t) == TensorSpec((2, 3), dtype)


# ---- eager, compiled and the text form -------------------------------------


@pytest.mark.parametrize("dtype", NEW_DTYPES)
def test_identity_and_constants_keep_bits_eager_and_compiled(dtype):
    v = special_values(dtype)

    def f(x):
        return x, xtpu.constant(v), xtpu.reshape(x, [2, -1])

    (got,) = xtpu.replicate(f, [[v]])
    same_bits(got[0], v)
    same_bits(got[1], v)
    same_bits(got[2], v.reshape(2, -1))
    eager = f(v)
    same_bits(np.asarray(eager[1]), v)


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
def test_text_round_trip_of_every_dtype(generic):
    """One module holding a constant and an argument of every new dtype,
    printed, parsed back by the Python parser, printed again: the same
    text, and the constants the same bits."""
    from io import StringIO

    from xdsl.parser import Parser
    from xdsl.printer import Printer

    from xtpu.dialects.hlo import ConstantOp
    from xtpu.dialects.primitive import array_from_dense

    vs = [special_values(d) for d in NEW_DTYPES]
    text = xtpu.lower(lambda *xs: [*xs, *[xtpu.constant(v) for v in vs]], [vs]).as_text()
    module = Parser(make_context(), text).parse_module()
    out = StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    again = Parser(make_context(), out.getvalue()).parse_module()
    consts = [op for op in again.walk() if isinstance(op, ConstantOp)]
    assert len(consts) == len(vs)
    for op, v in zip(consts, vs):
        same_bits(array_from_dense(op.value), v)


def test_every_bfloat16_bit_pattern_round_trips_through_text():
    """All 65536 bfloat16 bit patterns, 100 at a time (decimal / hex element
    form, not the hex-string form of larger constants)."""
    from xdsl.parser import Parser

    from xtpu.dialects.primitive import array_from_dense, dense_from_array

    everything = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(BF16)
    for start in range(0, everything.size, 4096):
        chunk = everything[start : start + 4096].reshape(-1, 64)
        texts = [str(dense_from_array(row)) for row in chunk]
        for row, text in zip(chunk, texts):
            same_bits(array_from_dense(Parser(make_context(), text).parse_attribute()), row)


# ---- cast: round to nearest, ties to even ----------------------------------


def rne_bf16(f32):
    """float32 -> bfloat16 bits by the rule (independent of ml_dtypes):
    add 0x7FFF plus the lowest kept bit, drop 16 bits; NaN stays NaN."""
    b = np.asarray(f32, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(f32, np.float32))
    return np.where(nan, (b >> 16).astype(np.uint16) | 0x0040, rounded).astype(np.uint16)


def test_cast_to_bfloat16_rounds_ties_to_even():
    one = 0x3F800000
    cases = np.array(
        [
            one | 0x8000,  # 1 + half an ulp: tie, even is 1.0 (down)
            one | 0x18000,  # 1.0078125 + half: tie, even is up
            one | 0x8001,  # just above the tie: up
            one | 0x7FFF,  # just below: down
            0x7F7FFFFF,  # largest float32: rounds to inf
            0x00008000,  # a subnormal tie
            0x00018000,
            0x80008000,  # -subnormal tie: -0.0
            0x7F800000,
            0xFF800000,
            0x7FC00000,
            0x80000000,
        ],
        np.uint32,
    ).view(np.float32)
    cases = np.concatenate([cases, np.random.RandomState(0).randn(1000).astype(np.float32) * 1e3])
    want = rne_bf16(cases)
    np.testing.assert_array_equal(want, cases.astype(BF16).view(np.uint16))  # ml_dtypes agrees
    eager = np.asarray(xtpu.cast(cases, xtpu.bfloat16))
    np.testing.assert_array_equal(bits(eager), want)
    (compiled,) = xtpu.replicate(lambda x: xtpu.cast(x, xtpu.bfloat16), [[cases]])
    np.testing.assert_array_equal(bits(compiled[0]), want)
    # bfloat16 -> float32 is exact.
    (back,) = xtpu.replicate(lambda x: xtpu.cast(x, xtpu.float32), [[cases.astype(BF16)]])
    np.testing.assert_array_equal(bits(back[0]), want.astype(np.uint32) << 16)


# ---- arithmetic ----------------------------------------------------------


def test_elementwise_rounds_once_per_op():
    """An elementwise op on bfloat16 is the float32 op rounded once (XLA's
    float normalization), eager and compiled."""
    rng = np.random.RandomState(1)
    x = rng.randn(257).astype(BF16)
    y = rng.randn(257).astype(BF16)
    want = {
        "add": (x.astype(np.float32) + y.astype(np.float32)).astype(BF16),
        "mul": (x.astype(np.float32) * y.astype(np.float32)).astype(BF16),
        "div": (x.astype(np.float32) / y.astype(np.float32)).astype(BF16),
        "sigmoid": (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32).astype(BF16),
    }

    def f(x, y):
        return x + y, x * y, x / y, xtpu.math.sigmoid(x)

    (got,) = xtpu.replicate(f, [[x, y]])
    for g, k in zip(got, ["add", "mul", "div"]):
        same_bits(g, want[k])
    # sigmoid: float32's answer within 1 ulp of float64's, then one rounding
    np.testing.assert_allclose(got[3].astype(np.float32), want["sigmoid"].astype(np.float32), rtol=2**-8)
    for g, e in zip(got, f(x, y)):
        same_bits(g, np.asarray(e))


def test_reduce_sum_accumulates_in_float32():
    """2048 ones: a bfloat16 accumulator stops at 256 (256 + 1 rounds to
    256); float32 accumulation gives 2048 exactly, as a TPU does."""
    x = np.ones(2048, BF16)
    (got,) = xtpu.replicate(lambda x: xtpu.reduce_sum(x), [[x]])
    same_bits(got[0], np.array(2048, BF16))
    same_bits(np.asarray(xtpu.reduce_sum(x)), np.array(2048, BF16))
    y = np.random.RandomState(2).randn(64, 300).astype(BF16)
    want = y.astype(np.float64).sum(axis=1).astype(np.float32).astype(BF16)
    got = np.asarray(xtpu.reduce_sum(y, axis=1))
    np.testing.assert_array_less(
        np.abs(got.astype(np.float32) - want.astype(np.float32)), 0.01 * np.abs(want.astype(np.float32)) + 1e-3
    )


def exact_operands(shape, rng):
    """bfloat16 values whose products and sums float32 holds exactly:
    small integers times powers of two."""
    return (rng.randint(-8, 9, size=shape) * 2.0 ** rng.randint(-3, 3, size=shape)).astype(BF16)


def reference(lhs, rhs, equation):
    return np.einsum(equation, lhs.astype(np.float64), rhs.astype(np.float64)).astype(np.float32).astype(BF16)


# (name, fn, operand shapes, the numpy einsum equation of the reference)
CONTRACTIONS = [
    ("matmul", lambda a, b: xtpu.matmul(a, b), [(5, 64), (64, 7)], "ij,jk->ik"),
    ("matmul_t", lambda a, b: xtpu.matmul(a, b, transpose_b=True), [(5, 64), (7, 64)], "ij,kj->ik"),
    ("batched", lambda a, b: xtpu.matmul(a, b), [(3, 4, 32), (3, 32, 6)], "bij,bjk->bik"),
    ("einsum", lambda a, b: xtpu.einsum("bqhd,bkhd->bhqk", a, b), [(2, 3, 2, 16), (2, 5, 2, 16)], "bqhd,bkhd->bhqk"),
]


@pytest.mark.parametrize("name, fn, shapes, equation", CONTRACTIONS)
def test_contractions_are_exact_where_float32_accumulation_is(name, fn, shapes, equation):
    rng = np.random.RandomState(3)
    a, b = (exact_operands(s, rng) for s in shapes)
    want = reference(a, b, equation)
    same_bits(np.asarray(fn(a, b)), want)
    (got,) = xtpu.replicate(fn, [[a, b]])
    same_bits(got[0], want)


@pytest.mark.parametrize("name, fn, shapes, equation", [c for c in CONTRACTIONS if c[0] != "matmul_t"])
def test_contraction_gradients_are_exact_where_float32_accumulation_is(name, fn, shapes, equation):
    """The gradients of a bfloat16 contraction: the cotangent (exact small
    integers) contracted with the other operand in float32 and rounded
    once, against numpy's float64 einsum rounded to bfloat16; eager and
    compiled."""
    rng = np.random.RandomState(5)
    a, b = (exact_operands(s, rng) for s in shapes)
    out_shape = np.einsum(equation, a.astype(np.float32), b.astype(np.float32)).shape
    g = rng.randint(-4, 5, size=out_shape).astype(np.float32)
    ins, out = equation.split("->")
    la, lb = ins.split(",")
    want_a = np.einsum(f"{out},{lb}->{la}", g.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    want_b = np.einsum(f"{la},{out}->{lb}", a.astype(np.float64), g.astype(np.float64)).astype(np.float32)

    def grads(a, b):
        with xtpu.GradientTape() as tape:
            tape.watch([a, b])
            loss = xtpu.reduce_sum(xtpu.cast(fn(a, b), xtpu.float32) * g)
        return tape.gradient(loss, [a, b])

    (compiled,) = xtpu.replicate(grads, [[a, b]])
    eager = grads(xtpu.constant(a), xtpu.constant(b))
    for got in (compiled, [np.asarray(v) for v in eager]):
        same_bits(got[0], want_a.astype(BF16))
        same_bits(got[1], want_b.astype(BF16))


def test_matmul_equals_jax_preferred_float32():
    """Random operands: xtpu's bfloat16 matmul against XLA's
    ``dot_general(preferred_element_type=float32)`` rounded to bfloat16 --
    the same bits except where the two float32 sums, added in another
    order, round to neighbouring bfloat16 values (at most 1 ulp)."""
    import jax
    import jax.numpy as jnp

    rng = np.random.RandomState(4)
    a = rng.randn(16, 96).astype(BF16)
    b = rng.randn(96, 24).astype(BF16)
    want = np.asarray(jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16))
    (got,) = xtpu.replicate(lambda a, b: xtpu.matmul(a, b), [[a, b]])
    ulps = np.abs(bits(got[0]).astype(np.int32) - bits(want).astype(np.int32))
    assert ulps.max() <= 1 and (ulps == 0).mean() > 0.97
    # Gradients: bfloat16 cotangents contracted in float32, rounded once.
    ga, gb = jax.grad(
        lambda a, b: jnp.sum(
            jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16).astype(jnp.float32) ** 2
        ),
        argnums=(0, 1),
    )(a, b)

    def grads(a, b):
        with xtpu.GradientTape() as tape:
            tape.watch([a, b])
            c = xtpu.cast(xtpu.matmul(a, b), xtpu.float32)
            loss = xtpu.reduce_sum(c * c)
        return tape.gradient(loss, [a, b])

    (got,) = xtpu.replicate(grads, [[a, b]])
    for g, w in zip(got, (ga, gb)):
        assert g.dtype == BF16
        np.testing.assert_allclose(g.astype(np.float32), np.asarray(w).astype(np.float32), rtol=2**-6, atol=0.1)


def test_ir_shows_float32_accumulation():
    a = np.ones((2, 3), BF16)
    text = xtpu.lower(lambda a: xtpu.matmul(a, a, transpose_b=True), [[a]]).as_text()
    assert "(tensor<2x3xbf16>, tensor<2x3xbf16>) -> tensor<2x2xf32>" in text
    assert "hlo.convert %1 : (tensor<2x2xf32>) -> tensor<2x2xbf16>" in text


# ---- collectives, host transfers, checkpoints -------------------------------


@pytest.mark.parametrize("dtype", NEW_DTYPES)
def test_cross_replica_sum_and_host_round_trip(dtype):
    v = special_values(dtype)
    finite = v if dtype not in ("bfloat16", "float16") else v[5:]  # -0.0, 0, subnormals, finite
    replicas = [[finite], [finite[::-1].copy()], [finite]]

    def f(x):
        back = xtpu.outside_compilation(lambda y: y, x)
        return xtpu.cross_replica_sum(x), back

    got = xtpu.replicate(f, replicas)
    # StableHLO all_reduce: the replicas' values added in order, each add
    # rounded to the dtype (integers wrap).
    with np.errstate(over="ignore"):
        want = (replicas[0][0] + replicas[1][0]) + replicas[2][0]
    for r, (total, back) in enumerate(got):
        same_bits(total, want)
        same_bits(back, replicas[r][0])
    # specials (NaN payloads, inf) cross to the host and back unchanged
    (only,) = xtpu.replicate(lambda x: xtpu.outside_compilation(lambda y: y, x), [[v]])
    same_bits(only[0], v)


@pytest.mark.parametrize("dtype", NEW_DTYPES + ["complex64"])
def test_moving_collectives_keep_every_bit(dtype):
    """collective_permute, all_to_all and an all-gather move values without
    arithmetic: NaN payloads, inf, -0.0 and subnormals arrive as sent."""
    from xtpu.replication.collectives import all_gather, all_to_all, collective_permute

    v = special_values(dtype)
    w = v[::-1].copy()
    h = v.size // 2

    def f(x):
        return (
            collective_permute(x, [[0, 1], [1, 0]]),
            all_to_all(xtpu.reshape(x, [2, -1]), 0, 0, 2),
            all_gather(x, 0, 2),
        )

    (r0, r1) = xtpu.replicate(f, [[v], [w]])
    same_bits(r0[0], w)
    same_bits(r1[0], v)
    same_bits(r0[1], np.concatenate([v[:h], w[:h]]).reshape(2, h))
    same_bits(r1[1], np.concatenate([v[h:], w[h:]]).reshape(2, h))
    for r in (r0, r1):
        same_bits(r[2], np.concatenate([v, w]))


def test_all_reduce_of_bfloat16_moves_half_the_bytes():
    from xtpu.runtime import communicator

    sent = []
    original = communicator.reduce_in_order

    def spy(values, reduction):
        sent.append(sum(v.nbytes for v in values))
        return original(values, reduction)

    x32 = np.ones(1000, np.float32)
    try:
        communicator.reduce_in_order = spy
        xtpu.replicate(lambda x: xtpu.cross_replica_sum(x), [[x32], [x32]])
        xtpu.replicate(lambda x: xtpu.cross_replica_sum(x), [[x32.astype(BF16)], [x32.astype(BF16)]])
    finally:
        communicator.reduce_in_order = original
    assert len(sent) == 2 and sent[1] * 2 == sent[0], sent
    stages = xtpu.lower(lambda x: xtpu.cross_replica_sum(x), [[x32.astype(BF16)], [x32.astype(BF16)]]).compile().stages
    lowered = stages["tpu-lower-cross-replica-sum"]
    assert "channel 1 : tensor<1000xbf16>" in lowered  # the ccl.all_reduce moves bf16


@pytest.mark.parametrize("dtype", NEW_DTYPES)
def test_checkpoint_keeps_bits(dtype, tmp_path):
    v = special_values(dtype)
    var = xtpu.Variable(v)
    ckpt = xtpu.train.Checkpoint(v=var)
    path = ckpt.save(str(tmp_path / "ck"))
    var.assign(np.zeros_like(v))
    ckpt.restore(path)
    same_bits(np.asarray(var.numpy() if hasattr(var, "numpy") else var.value()), v)


def test_saved_bfloat16_files_read_back_as_bfloat16(tmp_path):
    v = special_values("bfloat16")
    np.save(tmp_path / "x.npy", v)
    same_bits(from_saved(np.load(tmp_path / "x.npy")), v)


def test_summaries_of_new_dtypes(tmp_path):
    """Scalar summaries of bfloat16 / float16 / uint32 values, eager and
    from a replicated computation: float32 ``simple_value``s (TF's
    ``tf.summary.scalar`` casts to float32), the values exact."""
    from test_summary import read_events

    logdir = str(tmp_path / "logs")
    writer = xtpu.summary.create_file_writer(logdir)
    values = [np.array(1.5, BF16), np.array(-0.375, np.float16), np.array(7, np.uint32)]
    with writer.as_default():
        for i, v in enumerate(values):
            assert xtpu.summary.scalar(f"eager{i}", v, step=i) is True

        def f(x):
            xtpu.summary.scalar("traced", x * x, step=np.int64(5))
            return x

        xtpu.replicate(f, [[np.array(-2.5, BF16)]])
    writer.close()
    got = {(v.tag, e.step): v.simple_value for e in read_events(logdir) for v in e.summary.value}
    assert got == {("eager0", 0): 1.5, ("eager1", 1): -0.375, ("eager2", 2): 7.0, ("traced", 5): 6.25}


# ---- uint32 from the random bit generator ------------------------------------


@pytest.mark.parametrize("dtype", ["uint32", "uint64", "int32", "int64"])
def test_full_range_random_integers_are_the_generators_words(dtype):
    """TF's full-range integers (``minval=None, maxval=None``): the Philox
    words as uint32 (two words, high first, for 64 bits), eager and
    compiled alike, against Philox4x32-10's words computed here from the
    counter (Random123's known-answer vector checks the rounds)."""
    from xtpu.dialects.hlo_random import philox4x32_10

    # Random123's known-answer test: key (0, 0), counter 0 -> these words.
    kat = philox4x32_10(np.zeros((1, 4), np.uint64), (0, 0))
    np.testing.assert_array_equal(kat[0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8])
    seed = np.array([7, 3], np.int64)
    f = lambda s: xtpu.random.stateless_uniform([3, 5], s, minval=None, maxval=None, dtype=dtype)  # noqa: E731
    eager = np.asarray(f(seed))
    (compiled,) = xtpu.replicate(f, [[seed]])
    assert eager.dtype == numpy_dtype(dtype)
    same_bits(compiled[0], eager)
    wide = dtype.endswith("64")
    blocks = -(-(30 if wide else 15) // 4)
    ctr = np.zeros((blocks, 4), np.uint64)
    ctr[:, 0] = np.arange(blocks)
    ctr[:, 2] = 3  # the seed's second word: the counter's high half
    words = philox4x32_10(ctr, (7, 0)).reshape(-1)
    if wide:
        want = ((words[0:30:2] << np.uint64(32)) | words[1:30:2]).view(np.int64).astype(numpy_dtype(dtype))
    else:
        want = words[:15].astype(np.uint32).view(np.int32).astype(numpy_dtype(dtype))
    np.testing.assert_array_equal(eager.reshape(-1), want)
    with pytest.raises(ValueError, match="full-range"):
        xtpu.random.stateless_uniform([2], seed, minval=0, maxval=10, dtype="uint32")
