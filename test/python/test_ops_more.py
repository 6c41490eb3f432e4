"""Issue 26's ops whose values TF cannot give (random numbers: TF's
generators differ from xtpu's Philox use), and the chosen behaviours TF's
CPU kernels do not have (out-of-range labels): checked against their
distributions, numpy, and eager against compiled."""

from __future__ import annotations

import numpy as np
import pytest

import xtpu


def test_stateless_truncated_normal_is_a_truncated_normal_and_compiles_to_the_same_numbers():
    eager = np.asarray(xtpu.random.stateless_truncated_normal([200, 100], seed=[3, 4]))
    assert eager.dtype == np.float32 and eager.shape == (200, 100)
    assert np.all(np.abs(eager) <= 2.0)
    # The standard normal truncated to [-2, 2]: mean 0, std 0.8796.
    assert abs(eager.mean()) < 0.01 and abs(eager.std() - 0.87963) < 0.01
    # A fifth of the mass beyond one sigma each side (0.1359 / 0.9545 / 2 ... = 0.2866 in total).
    assert abs(np.mean(np.abs(eager) > 1.0) - 0.28664) < 0.01
    (compiled,) = xtpu.replicate(lambda: xtpu.random.stateless_truncated_normal([200, 100], seed=[3, 4]))[0]
    np.testing.assert_array_equal(compiled, eager)
    other = np.asarray(
        xtpu.random.stateless_truncated_normal([200, 100], seed=[3, 5], mean=1.0, stddev=0.5, dtype="float64")
    )
    assert other.dtype == np.float64 and np.all(np.abs(other - 1.0) <= 1.0)
    with pytest.raises(TypeError, match="float32 or float64"):
        xtpu.random.stateless_truncated_normal([2], seed=[1, 2], dtype="int32")


def test_dropout_keeps_a_fraction_scaled_and_compiles_to_the_same_mask():
    x = np.ones((100, 200), np.float32)
    y = np.asarray(xtpu.nn.dropout(x, 0.3, seed=7))
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)
    (c,) = xtpu.replicate(lambda x: xtpu.nn.dropout(x, 0.3, seed=7), [[x]])[0]
    np.testing.assert_array_equal(c, y)
    # noise_shape shares the decision along dimensions of size 1
    z = np.asarray(xtpu.nn.dropout(x, 0.5, noise_shape=[100, 1], seed=1))
    assert np.all((z == 0).all(axis=1) | (z != 0).all(axis=1))
    # the gradient is the mask times 1 / (1 - rate)
    v = xtpu.constant(np.arange(6.0, dtype=np.float32).reshape(2, 3) + 1)
    with xtpu.GradientTape() as tape:
        tape.watch(v)
        out = xtpu.nn.dropout(v, 0.5, seed=2)
        total = xtpu.reduce_sum(out)
    g = np.asarray(tape.gradient(total, v))
    np.testing.assert_allclose(g, (np.asarray(out) != 0) * 2.0)
    assert np.asarray(xtpu.nn.dropout(x, 0.0)) is not None
    with pytest.raises(ValueError, match=r"range \[0, 1\)"):
        xtpu.nn.dropout(x, 1.0)


def test_out_of_range_labels_give_nan_eagerly_and_compiled():
    logits = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    labels = np.array([1, 4, -1], np.int32)
    f = lambda lab, lg: xtpu.nn.sparse_softmax_cross_entropy_with_logits(lab, lg)  # noqa: E731
    eager = np.asarray(f(labels, logits))
    (compiled,) = xtpu.replicate(f, [[labels, logits]])[0]
    for got in (eager, compiled):
        assert np.isfinite(got[0]) and np.isnan(got[1]) and np.isnan(got[2])
    want = -np.log(np.exp(logits[0, 1]) / np.exp(logits[0]).sum())
    np.testing.assert_allclose(eager[0], want, rtol=1e-6)


def test_data_dependent_shapes_need_static_arguments_inside_replicate():
    n = np.array([1, 3], np.int32)
    np.testing.assert_array_equal(xtpu.sequence_mask(n), [[True, False, False], [True, True, True]])
    with pytest.raises(ValueError, match="give maxlen inside a replicated computation"):
        xtpu.replicate(lambda n: xtpu.sequence_mask(n), [[n]])
    with pytest.raises(TypeError, match="must be static"):
        xtpu.replicate(lambda x, s: xtpu.roll(x, s, 0), [[np.zeros(3, np.float32), np.int32(1)]])


def test_matmul_with_a_rank_2_right_operand_does_not_broadcast_it():
    a = np.random.default_rng(1).standard_normal((2, 4, 8, 16)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((16, 8)).astype(np.float32)
    text = xtpu.lower(lambda a, b: a @ b, [[a, b]]).as_text()
    assert "hlo.broadcast_in_dim" not in text and "tensor<2x4x8x8xf32>" in text
    np.testing.assert_allclose(np.asarray(xtpu.matmul(a, b)), a @ b, rtol=1e-5, atol=1e-5)


def test_negative_step_slices_trace_to_reverse_and_slice():
    x = np.arange(10, dtype=np.float32)
    text = xtpu.lower(lambda x: x[8:1:-3], [[x]]).as_text()
    assert "hlo.reverse" in text and "hlo.slice" in text
    np.testing.assert_array_equal(xtpu.replicate(lambda x: x[8:1:-3], [[x]])[0][0], x[8:1:-3])


def test_cumsum_scan_is_logarithmic_in_depth():
    x = np.ones((1000,), np.float32)
    text = xtpu.lower(lambda x: xtpu.cumsum(x), [[x]]).as_text()
    assert text.count("hlo.add") == 10  # ceil(log2(1000)) shifted adds
    np.testing.assert_array_equal(np.asarray(xtpu.cumsum(x)), np.arange(1, 1001, dtype=np.float32))


def test_an_out_of_range_index_raises_numpys_index_error_eagerly_and_traced():
    """The same user error both ways (a fuzz finding: zero-size batch, x[0, 0, :])."""
    x = np.zeros((0, 2, 2), np.float32)
    with pytest.raises(IndexError) as eager:
        xtpu.constant(x)[0, 0, :]
    with pytest.raises(IndexError) as traced:
        xtpu.replicate(lambda v: v[0, 0, :], [[x]])
    assert str(eager.value) == "index 0 is out of bounds for axis 0 with size 0"
    assert str(eager.value) in str(traced.value)


def _norm2_fd(x, axis, d, eps=1e-6):
    """The central difference of ``sum(w * ||x||_2)`` along ``d`` (numpy's
    matrix 2-norm, LAPACK's largest singular value)."""
    f = lambda y: np.linalg.norm(np.moveaxis(y, axis, (-2, -1)), ord=2, axis=(-2, -1))  # noqa: E731
    return (f(x + eps * d) - f(x - eps * d)) / (2 * eps)


def test_matrix_2_norm_and_its_gradient_against_numpy_and_finite_differences():
    """``norm(x, ord=2, axis=pair)`` is the largest singular value (numpy's
    ``linalg.norm(..., 2)``) eagerly and compiled over 2 replicas, and its
    gradient ``u1 v1^T`` matches central differences along random
    directions; bfloat16 computes in float32; a NaN matrix gives NaN.  (TF's
    own values: test_tf_reference_ops.py, case norm_2.)"""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 4, 5))
    axis = (2, 0)
    want = np.linalg.norm(np.moveaxis(x, axis, (-2, -1)), ord=2, axis=(-2, -1))
    w = rng.standard_normal(want.shape)
    with xtpu.GradientTape() as tape:
        xv = xtpu.constant(x)
        tape.watch(xv)
        n = xtpu.norm(xv, ord=2, axis=axis)
        total = xtpu.reduce_sum(n * w)
    eager_grad = np.asarray(tape.gradient(total, xv))
    np.testing.assert_allclose(np.asarray(n), want, rtol=1e-12)

    def step(x):
        n = xtpu.norm(x, ord=2, axis=axis)
        return n, xtpu.gradients(xtpu.reduce_sum(n * w), [x])[0]

    for n_c, g_c in xtpu.replicate(step, [[x], [x]]):
        np.testing.assert_allclose(n_c, want, rtol=1e-12)
        np.testing.assert_allclose(g_c, eager_grad, rtol=1e-12, atol=1e-14)
    for _ in range(3):
        d = rng.standard_normal(x.shape)
        np.testing.assert_allclose(np.sum(eager_grad * d), np.sum(w * _norm2_fd(x, axis, d)), rtol=1e-6)
    import ml_dtypes

    xb = x.astype(ml_dtypes.bfloat16)
    got = np.asarray(xtpu.norm(xb, ord=2, axis=axis, keepdims=True))
    assert got.dtype == ml_dtypes.bfloat16 and got.shape == (1, 4, 1)
    ref = np.linalg.norm(np.moveaxis(xb.astype(np.float32), axis, (-2, -1)), ord=2, axis=(-2, -1))
    np.testing.assert_allclose(got.reshape(-1).astype(np.float32), ref, rtol=1e-2)
    assert np.isnan(np.asarray(xtpu.norm(np.full((2, 2), np.nan, np.float32), ord=2, axis=[0, 1])))


def test_svd_refuses_what_it_does_not_compute():
    with pytest.raises(NotImplementedError, match="full_matrices"):
        xtpu.linalg.svd(np.ones((2, 3), np.float32), full_matrices=True)
    with pytest.raises(TypeError, match="svd"):
        xtpu.linalg.svd(np.ones((2, 3), np.int32))
    s, u, v = xtpu.linalg.svd(np.zeros((0, 3), np.float32))
    assert np.shape(s) == (0,) and np.shape(u) == (0, 0) and np.shape(v) == (3, 0)


def test_bad_indices_policy_accepts_tfs_values_only():
    """TF 2.21's ``bad_indices_policy``: '' / 'DEFAULT' / 'IGNORE' give
    xtpu's zeros (TF's IGNORE values: test_indexing_tf.py); 'ERROR' with
    indices in range gathers; anything else is refused."""
    x = np.arange(12.0).reshape(4, 3)
    for policy in ("", "DEFAULT", "IGNORE", "ERROR"):
        np.testing.assert_array_equal(xtpu.gather_nd(x, [[1], [2]], bad_indices_policy=policy), x[1:3])
    with pytest.raises(ValueError, match="bad_indices_policy must be one of"):
        xtpu.tensor_scatter_nd_add(x, [[1]], np.ones((1, 3)), bad_indices_policy="error")
