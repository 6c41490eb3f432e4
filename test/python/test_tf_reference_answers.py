"""xtpu against TensorFlow's own answers (issue 25): each test compares with
the value or error TF 2.21 on CPU gave, recorded in
test/data/issue25_tf_reference.json by test/data/gen_issue25_tf_reference.py
(MirroredStrategy over two logical CPU devices stands in for TPUStrategy: both
keep mirrored variables and run replica functions through
distribute_lib.StrategyExtendedV2)."""

import json
import pathlib

import numpy as np

import xtpu

TF = json.loads((pathlib.Path(__file__).parents[1] / "data" / "issue25_tf_reference.json").read_text())


def tf_value(key):
    entry = TF[key]
    assert "value" in entry, entry
    return entry["value"]


# -- item 13: a numpy array on the left of | and & ----------------------------------------------


def _bitwise(v):
    a = np.array([True, False])
    return a | (v > 0), a & (v > 0)


def test_numpy_array_left_of_or_and_and_traces_as_tfs_tensor_operators():
    """TF: ``ndarray | tensor`` is the tensor's ``__ror__`` (Tensor's
    ``__array_priority__`` = 100 makes numpy defer), eagerly and in a
    tf.function; xtpu's traced tensor raised TypeError from numpy.bitwise_or."""
    ref = tf_value("13_numpy_left_of_bitwise_operator")
    (out,) = xtpu.replicate(_bitwise, [[np.array([-1.0, -1.0], np.float32)]])
    assert [o.tolist() for o in out] == [ref["function_or"], ref["function_and"]]
    eager = _bitwise(xtpu.constant([1.0, -1.0]))
    assert [np.asarray(e).tolist() for e in eager] == [ref["eager_or"], ref["eager_and"]]
    assert all(isinstance(e, xtpu.EagerTensor) for e in eager)  # TF: EagerTensor, not ndarray
    # integers: bitwise, as TF's Tensor.__rand__ (bitwise_and for ints)
    ((got,),) = xtpu.replicate(lambda v: np.array([1, 6], np.int32) & v, [[np.array([3, 3], np.int32)]])
    assert got.tolist() == [1, 2] == (np.array([1, 6]) & np.array([3, 3])).tolist()
    # a Python bool on the left (Tensor.__ror__ / __rand__)
    (t, f) = xtpu.replicate(lambda v: (True | (v > 0), False & (v > 0)), [[np.array([-1.0], np.float32)]])[0]
    assert t.tolist() == [True] and f.tolist() == [False]
