"""xtpu.random (issue 15): Philox4x32-10 against Random123's known-answer
vectors and a pure-Python reference; stateless ops equal eagerly and
compiled with 1, 2 and 8 replicas; Generator's per-replica streams."""

import numpy as np
import pytest
from scipy.special import ndtri

import xtpu
from xtpu.dialects.hlo_random import philox4x32_10

M32 = 0xFFFFFFFF


def ref_philox(ctr, key):
    """Philox4x32-10 in Python ints (Salmon et al., SC'11)."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
    return [c0, c1, c2, c3]


def ref_words(key, counter, count):
    """``count`` words from a 64-bit key and a 128-bit counter."""
    out = []
    i = 0
    while len(out) < count:
        c = (counter + i) % 2**128
        out += ref_philox([c & M32, (c >> 32) & M32, (c >> 64) & M32, c >> 96], [key & M32, (key >> 32) & M32])
        i += 1
    return out[:count]


def test_philox_known_answers_of_random123():
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((M32,) * 4, (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for ctr, key, want in cases:
        assert tuple(int(v) for v in philox4x32_10(np.array([ctr], np.uint64), key)[0]) == want
        assert tuple(ref_philox(ctr, key)) == want


def _uniform32(words):
    return np.array([(w >> 9) * 2.0**-23 for w in words], np.float32)


SEED = (12345, 678)


def _stateless_cases():
    key, hi = SEED
    counter = hi << 64
    w = ref_words(key, counter, 24)
    w2 = ref_words(key, counter, 12)
    return [
        (
            "uniform_f32",
            lambda: xtpu.random.stateless_uniform([2, 3, 4], seed=list(SEED)),
            _uniform32(w).reshape(2, 3, 4),
        ),
        (
            "uniform_range",
            lambda: xtpu.random.stateless_uniform([6], seed=np.array(SEED, np.int32), minval=-2.0, maxval=3.0),
            _uniform32(w[:6]) * np.float32(5.0) + np.float32(-2.0),
        ),
        (
            "uniform_f64",
            lambda: xtpu.random.stateless_uniform([6], seed=list(SEED), dtype=xtpu.float64),
            np.array([((w2[2 * i] << 20) | (w2[2 * i + 1] >> 12)) * 2.0**-52 for i in range(6)]),
        ),
        (
            "uniform_int",
            lambda: xtpu.random.stateless_uniform([8], seed=list(SEED), minval=-3, maxval=7, dtype=xtpu.int32),
            np.array([-3 + v % 10 for v in w[:8]], np.int32),
        ),
        (
            "normal_f32",
            lambda: xtpu.random.stateless_normal([5], seed=list(SEED), mean=1.0, stddev=2.0),
            (ndtri(((np.array(w[:5]) >> 9) + 0.5) * 2.0**-23) * 2.0 + 1.0).astype(np.float32),
        ),
    ]


@pytest.mark.parametrize("name,fn,want", _stateless_cases(), ids=lambda c: c if isinstance(c, str) else "")
def test_stateless_equals_reference_eager_and_compiled(name, fn, want):
    got = np.asarray(fn())
    assert got.dtype == want.dtype and got.shape == want.shape
    if name.startswith("normal"):
        np.testing.assert_allclose(got, want, rtol=0, atol=3e-5)  # ndtri in float32 arithmetic
    elif want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-7 if want.dtype == np.float32 else 1e-15)
    else:
        np.testing.assert_array_equal(got, want)
    for n in (1, 2, 8):
        outs = xtpu.replicate(fn, [[] for _ in range(n)])
        for r in range(n):  # same seed: the same numbers on every replica, bit for bit the eager ones
            np.testing.assert_array_equal(outs[r][0], got, err_msg=f"{name}: replica {r} of {n}")


def test_normal_distribution_and_ndtri_accuracy():
    z = np.asarray(xtpu.random.stateless_normal([20000], seed=[1, 2], dtype=xtpu.float64))
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1.0) < 0.03
    p = np.concatenate([np.logspace(-9, -1, 50), np.linspace(0.01, 0.99, 99), 1 - np.logspace(-9, -1, 50)])
    np.testing.assert_allclose(np.asarray(xtpu.random.ndtri(p)), ndtri(p), rtol=0, atol=3e-7)


def test_folding_the_replica_id_into_the_seed_gives_different_numbers():
    def fn():
        rid = xtpu.cast(xtpu.get_replica_context().replica_id_in_sync_group, xtpu.int64)
        return xtpu.random.stateless_uniform([4], seed=xtpu.stack([xtpu.constant(np.int64(5)), rid]))

    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))
    out = s.run(fn)
    for r in range(4):
        np.testing.assert_array_equal(out.values[r], _uniform32(ref_words(5, r << 64, 4)))


def test_generator_advances_its_state_and_gives_each_replica_its_stream():
    g = xtpu.random.Generator.from_seed(99)
    a, b = np.asarray(g.uniform([3])), np.asarray(g.uniform([5]))
    np.testing.assert_array_equal(a, _uniform32(ref_words(99, 0, 3)))
    np.testing.assert_array_equal(b, _uniform32(ref_words(99, 1, 5)))
    assert list(g.state.numpy()) == [99, 3, 0]  # 1 + 2 blocks of 4 words
    for n in (2, 8):
        s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=n))
        with s.scope():
            gen = xtpu.random.Generator.from_seed(99)

        @xtpu.function
        def draw():
            return s.run(lambda: gen.uniform([4]))

        for call in range(2):
            out = draw()
            for r in range(n):
                key = (99 + r * 0x9E3779B97F4A7C15) % 2**64
                np.testing.assert_array_equal(
                    out.values[r], _uniform32(ref_words(key, call, 4)), err_msg=f"replica {r}"
                )
        assert list(gen.state.numpy()) == [99, 2, 0]  # one block per call, the same on every replica


def test_errors():
    with pytest.raises(ValueError, match="seed must be an int32 or int64 tensor of shape \\[2\\]"):
        xtpu.random.stateless_uniform([2], seed=[1, 2, 3])
    with pytest.raises(ValueError, match="maxval"):
        xtpu.random.stateless_uniform([2], seed=[1, 2], dtype=xtpu.int32)
    with pytest.raises(TypeError, match="float32 or float64"):
        xtpu.random.stateless_normal([2], seed=[1, 2], dtype=xtpu.int32)
    with pytest.raises(ValueError, match="Philox"):
        xtpu.random.Generator([1, 0, 0], alg="threefry")


def _ndtri32(words):
    return ndtri(((np.array(words, np.uint64) >> 9) + 0.5) * 2.0**-23)


@pytest.mark.parametrize("n", [1, 2, 8])
def test_stateless_with_each_replicas_own_seed_equals_the_reference(n):
    """Each replica's seed is a program input (not a constant): every
    replica's numbers are the reference's for its seed and the eager ones."""
    seeds = [np.array([1000 + 7 * r - 4 * (r % 3) * 2**40, r - (r % 2) * 3], np.int64) for r in range(n)]

    def fn(seed):
        return (
            xtpu.random.stateless_uniform([5], seed=seed),
            xtpu.random.stateless_normal([3], seed=seed, mean=-1.0, stddev=0.5, dtype=xtpu.float64),
            xtpu.random.stateless_uniform([4], seed=seed, minval=-50, maxval=50, dtype=xtpu.int64),
        )

    outs = xtpu.replicate(fn, [[s] for s in seeds])
    for r, s in enumerate(seeds):
        key, counter = int(s[0]), int(s[1]) << 64
        want = (
            _uniform32(ref_words(key, counter, 5)),
            _ndtri32(ref_words(key, counter, 3)) * 0.5 - 1.0,
            np.array([-50 + w % 100 for w in ref_words(key, counter, 4)], np.int64),
        )
        eager = fn(s)
        for j, (got, e, w) in enumerate(zip(outs[r], eager, want)):
            got, e = np.asarray(got), np.asarray(e)
            assert got.dtype == e.dtype == w.dtype and got.shape == w.shape, f"replica {r} of {n}, output {j}"
            np.testing.assert_array_equal(got, e, err_msg=f"replica {r} of {n}, output {j}: compiled vs eager")
            np.testing.assert_allclose(got, w, rtol=0, atol=3e-7, err_msg=f"replica {r} of {n}, output {j}")


@pytest.mark.parametrize("n", [1, 2, 8])
def test_generator_normal_equals_the_reference_eagerly_and_on_each_replica(n):
    g = xtpu.random.Generator.from_seed(7)
    a = np.asarray(g.normal([6], mean=1.0, stddev=2.0))
    b = np.asarray(g.normal([2], dtype=xtpu.float64))
    assert a.dtype == np.float32 and b.dtype == np.float64
    np.testing.assert_allclose(a, _ndtri32(ref_words(7, 0, 6)) * 2.0 + 1.0, rtol=0, atol=6e-5)  # float32 ndtri
    np.testing.assert_allclose(b, _ndtri32(ref_words(7, 2, 2)), rtol=0, atol=3e-7)  # counter 2: 6 words took 2 blocks
    assert list(g.state.numpy()) == [7, 3, 0]

    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=n))
    with s.scope():
        gen = xtpu.random.Generator.from_seed(7)

    @xtpu.function
    def draw():
        return s.run(lambda: (gen.normal([5], dtype=xtpu.float64), gen.uniform([2])))

    for call in range(2):
        per_replica = s.experimental_local_results(draw())
        assert len(per_replica) == n
        for r, (z, u) in enumerate(per_replica):
            key = (7 + r * 0x9E3779B97F4A7C15) % 2**64  # the replica id folded into the key
            np.testing.assert_allclose(
                z, _ndtri32(ref_words(key, 3 * call, 5)), rtol=0, atol=3e-7, err_msg=f"replica {r} of {n}, call {call}"
            )
            np.testing.assert_array_equal(
                u, _uniform32(ref_words(key, 3 * call + 2, 2)), err_msg=f"replica {r} of {n}, call {call}"
            )
    assert list(gen.state.numpy()) == [7, 6, 0]  # 2 + 1 blocks per call, alike on every replica
