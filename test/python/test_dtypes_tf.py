"""bfloat16 against TF 2.21 (issue 28), from committed generated data.

``test/data/bf16_tf.npz`` is written by ``test/data/gen_bf16_tf.py`` with
TensorFlow on CPU (bfloat16 arrays as uint16 bit patterns).
"""

import json
import pathlib

import ml_dtypes
import numpy as np
import pytest

import xtpu
from xtpu.keras import mixed_precision

BF16 = np.dtype(ml_dtypes.bfloat16)
DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "bf16_tf.npz"


@pytest.fixture(scope="module")
def tf_data():
    with np.load(DATA) as d:
        return {k: d[k] for k in d.files}


def as_bf16(u16):
    return np.asarray(u16, np.uint16).view(BF16)


def test_cast_equals_tf_bit_for_bit(tf_data):
    x = tf_data["cast_in"]
    (got,) = xtpu.replicate(lambda x: (xtpu.cast(x, xtpu.bfloat16), xtpu.cast(x, xtpu.float16)), [[x]])
    np.testing.assert_array_equal(got[0].view(np.uint16), tf_data["cast_bf16"])
    np.testing.assert_array_equal(got[1].view(np.uint16), tf_data["cast_f16"])
    eager = np.asarray(xtpu.cast(x, xtpu.bfloat16))
    np.testing.assert_array_equal(eager.view(np.uint16), tf_data["cast_bf16"])


@pytest.mark.parametrize("case", ["exact", "random"])
def test_matmul_against_tf(tf_data, case):
    a, b = as_bf16(tf_data[f"matmul_{case}_a"]), as_bf16(tf_data[f"matmul_{case}_b"])
    want_f32 = tf_data[f"matmul_{case}_f32"]
    (got,) = xtpu.replicate(lambda a, b: xtpu.matmul(a, b), [[a, b]])
    got = got[0]
    assert got.dtype == BF16
    tf_bf16 = as_bf16(tf_data[f"matmul_{case}_bf16"])
    if case == "exact":
        # float32 sums are exact here: TF, xtpu and the float32 product
        # rounded once agree bit for bit.
        np.testing.assert_array_equal(got.view(np.uint16), tf_bf16.view(np.uint16))
        np.testing.assert_array_equal(got.view(np.uint16), want_f32.astype(BF16).view(np.uint16))
    else:
        # the float32 product rounded once (the TPU's answer, up to the
        # order of the float32 additions): within one bfloat16 ulp
        ulps = np.abs(got.view(np.uint16).astype(np.int32) - want_f32.astype(BF16).view(np.uint16).astype(np.int32))
        assert ulps.max() <= 1
        np.testing.assert_allclose(got.astype(np.float32), tf_bf16.astype(np.float32), rtol=2**-6)


def test_reduce_sum_of_ones_equals_tf(tf_data):
    got = np.asarray(xtpu.reduce_sum(np.ones(2048, BF16)))
    np.testing.assert_array_equal(got.view(np.uint16), tf_data["sum_ones"])


def test_policy_and_gradient_dtypes_equal_tf(tf_data):
    info = json.loads(str(tf_data["policy"]))
    policy = mixed_precision.Policy("mixed_bfloat16")
    assert (policy.compute_dtype, policy.variable_dtype) == (info["compute_dtype"], info["variable_dtype"])
    mixed_precision.set_global_policy(policy)
    try:
        strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=1))
        with strategy.scope():
            kernel = xtpu.Variable(np.ones((4, 3), np.float32))
            bias = xtpu.Variable(np.zeros(3, np.float32))

        def step(x):
            with xtpu.GradientTape() as tape:
                y = xtpu.cast(x, policy.compute_dtype) @ kernel + bias
                loss = xtpu.reduce_sum(xtpu.cast(y, xtpu.float32))
            return (y, *tape.gradient(loss, [kernel, bias]))

        y, gk, gb = strategy.run(step, args=(np.ones((2, 4), np.float32),))
    finally:
        mixed_precision.set_global_policy("float32")
    assert y.dtype.name == info["output_dtype"]
    assert kernel.numpy().dtype.name == info["kernel_dtype"]
    assert [gk.dtype.name, gb.dtype.name] == info["gradient_dtypes"]
