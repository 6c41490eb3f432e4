"""xtpu.InfeedQueue: TF's ``tpu_feed.InfeedQueue`` configuration and its
errors (messages as in ``tensorflow/python/tpu/tpu_feed.py`` and
``tpu_sharding.py``), and ``replicate(..., infeed_queue=q)``: each replica
takes its shard of each tuple, with the results a run on the same values as
plain inputs gives."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import xtpu
from xtpu.runtime.errors import RuntimeTimeoutError

# --------------------------------------------------------------------------
# Configuration errors (TF's)
# --------------------------------------------------------------------------


def test_number_of_tuple_elements_is_inferred_or_an_error():
    assert xtpu.InfeedQueue(tuple_types=["float32", "int32"]).number_of_tuple_elements == 2
    assert xtpu.InfeedQueue(tuple_shapes=[[2]]).number_of_tuple_elements == 1
    assert xtpu.InfeedQueue(shard_dimensions=[0, 1, 0]).number_of_tuple_elements == 3
    with pytest.raises(ValueError, match="number of tuple elements cannot be inferred from InfeedQueue constructor"):
        xtpu.InfeedQueue()
    with pytest.raises(ValueError, match="number_of_tuple_elements 0 must be > 0"):
        xtpu.InfeedQueue(number_of_tuple_elements=0)


def test_lists_of_the_wrong_length_or_kind():
    q = xtpu.InfeedQueue(number_of_tuple_elements=2)
    with pytest.raises(ValueError, match="tuple_types is .*, but must be a list of length 2"):
        q.set_tuple_types(["float32"])
    with pytest.raises(TypeError, match="must be a list of elements each convertible to dtype"):
        q.set_tuple_types(["float32", "no-such-type"])
    with pytest.raises(ValueError, match="tuple_shapes is .*, but must be a list of length 2"):
        q.set_tuple_shapes([[2]])
    with pytest.raises(TypeError, match="must be a list of elements each convertible to TensorShape"):
        q.set_tuple_shapes([[2], [2.5]])
    with pytest.raises(ValueError, match=r"shard_dimensions is \[0\], but must be a list of length 2"):
        q.set_shard_dimensions([0])
    with pytest.raises(ValueError, match=r"Can't set sharding policy to use 0 shards; value must be >0"):
        q.set_number_of_shards(0)


def test_freeze_needs_types_and_shapes():
    q = xtpu.InfeedQueue(number_of_tuple_elements=1)
    with pytest.raises(ValueError, match="Can't freeze an InfeedQueue without setting all tuple types."):
        q.freeze()
    q.set_tuple_types(["float32"])
    with pytest.raises(ValueError, match="Can't freeze an InfeedQueue without setting all tuple shapes."):
        q.freeze()
    q.set_tuple_shapes([[None, 2]])
    with pytest.raises(ValueError, match="Can't freeze an InfeedQueue without setting all tuple shapes."):
        q.freeze()
    q.set_tuple_shapes([[4, 2]])
    q.freeze()
    assert q.number_of_shards == 1 and q.shard_dimensions == [0]  # TF's defaults


def test_a_frozen_configuration_cannot_change():
    q = xtpu.InfeedQueue(tuple_types=["float32"], tuple_shapes=[[4, 2]], shard_dimensions=[0])
    q.set_number_of_shards(2)
    q.freeze()
    q.set_tuple_types([np.float32])  # the same: fine
    q.set_tuple_shapes([xtpu.TensorShape([4, 2])])
    with pytest.raises(
        ValueError, match="Trying to update InfeedQueue with frozen configuration with an incompatible type"
    ):
        q.set_tuple_types(["int32"])
    with pytest.raises(
        ValueError, match="Trying to update InfeedQueue with frozen configuration with an incompatible shape"
    ):
        q.set_tuple_shapes([[8, 2]])
    with pytest.raises(
        ValueError, match="Can't set sharding policy to use 4 shards since it has been frozen to use 2."
    ):
        q.set_number_of_shards(4)
    with pytest.raises(ValueError, match="Can't set shard dimension to 1 since it has been frozen to use 0."):
        q.set_shard_dimensions([1])


def test_shapes_that_do_not_shard():
    q = xtpu.InfeedQueue(tuple_shapes=[[3, 2]], shard_dimensions=[0])
    with pytest.raises(ValueError, match=r"shape \[3, 2\] cannot be sharded 2 ways along dimension 0"):
        q.set_number_of_shards(2)
    q = xtpu.InfeedQueue(tuple_types=["float32"], tuple_shapes=[[3, 2]])
    q.set_number_of_shards(2)  # no shard dimension yet: checked when frozen (default 0), as TF
    with pytest.raises(ValueError, match=r"shape \[3, 2\] cannot be sharded 2 ways along dimension 0"):
        q.freeze()
    q = xtpu.InfeedQueue(tuple_shapes=[[4]], shard_dimensions=[1])
    with pytest.raises(ValueError, match=r"shape \[4\] does not contain shard_dimension 1"):
        q.set_number_of_shards(2)


def test_configuration_from_sharded_inputs():
    q = xtpu.InfeedQueue(number_of_tuple_elements=2, shard_dimensions=[1, 0])
    shards = [[np.zeros((3, 2), np.float32), np.zeros(5, np.int32)] for _ in range(4)]
    q.set_configuration_from_sharded_input_tensors(shards)
    assert q.number_of_shards == 4
    assert [s.as_list() for s in q.tuple_shapes] == [[3, 8], [20]]
    assert [t.name for t in q.tuple_types] == ["float32", "int32"]
    with pytest.raises(ValueError, match="each inner list has length number_of_tuple_elements=2"):
        xtpu.InfeedQueue(number_of_tuple_elements=2).set_configuration_from_sharded_input_tensors([[np.zeros(2)]])
    with pytest.raises(TypeError, match="types of the tuple elements of input_tensors are not consistent"):
        xtpu.InfeedQueue(number_of_tuple_elements=1).set_configuration_from_sharded_input_tensors(
            [[np.zeros(2, np.float32)], [np.zeros(2, np.float64)]]
        )
    with pytest.raises(ValueError, match="are not consistent shards of a full shape sharded 2 ways along dimension 0"):
        xtpu.InfeedQueue(number_of_tuple_elements=1).set_configuration_from_sharded_input_tensors(
            [[np.zeros(2)], [np.zeros(3)]]
        )
    with pytest.raises(ValueError, match="input_tensors has 1 elements, but should be a list of 2 Tensors"):
        xtpu.InfeedQueue(number_of_tuple_elements=2).set_configuration_from_input_tensors([np.zeros(2)])


def test_enqueue_and_dequeue_ops_are_generated_once():
    q = xtpu.InfeedQueue(number_of_tuple_elements=1)
    q.generate_enqueue_ops([[np.zeros(2)], [np.zeros(2)]])
    with pytest.raises(ValueError, match="Can't generate two enqueue Ops from the same queue"):
        q.generate_enqueue_ops([[np.zeros(2)], [np.zeros(2)]])
    with pytest.raises(ValueError, match="the dequeue runs inside a replicated computation"):
        q.generate_dequeue_op()


def test_each_dequeue_op_takes_one_tuple_per_step():
    """Two dequeues in one computation (a step traced twice, as
    steps_per_run does) take two tuples per run, in order."""
    q = xtpu.InfeedQueue(tuple_types=["int32"], tuple_shapes=[[1]], capacity=4)

    def two_steps():
        (a,) = q.generate_dequeue_op()
        (b,) = q.generate_dequeue_op()
        return a * 10 + b

    for k in range(4):
        q.enqueue([[np.array([k], np.int32)]])
    out = [xtpu.replicate(two_steps)[0][0] for _ in range(2)]
    assert [int(o[0]) for o in out] == [1, 23]


def test_replicate_checks_the_queue():
    x = np.zeros(2, np.float32)
    with pytest.raises(TypeError, match="infeed_queue must be an xtpu.InfeedQueue, got object"):
        xtpu.replicate(lambda a: a, [[x]], infeed_queue=object())
    q = xtpu.InfeedQueue(tuple_types=["float32"], tuple_shapes=[[2]])
    with pytest.raises(ValueError, match="Dynamic input shapes are not supported with infeed queues"):
        xtpu.replicate(lambda a, b: a, [[x]], infeed_queue=q, maximum_shapes=[[None]])
    q.set_number_of_shards(2)
    with pytest.raises(ValueError, match="infeed_queue 'InfeedQueue' has 2 shards but the computation has 3 replicas"):
        xtpu.replicate(lambda a, b: a, [[x], [x], [x]], infeed_queue=q)
    with pytest.raises(ValueError, match="is not configured"):
        xtpu.replicate(lambda a, b: a, [[x]], infeed_queue=xtpu.InfeedQueue(number_of_tuple_elements=1))
    with pytest.raises(
        ValueError,
        match="You specified 1 inputs per replica and 1 additional inputs from infeed, but the computation needs 1",
    ):
        xtpu.replicate(lambda a: a, [[x], [x]], infeed_queue=q)  # the tuple element is one more argument


# --------------------------------------------------------------------------
# Running with an infeed
# --------------------------------------------------------------------------


def _step(w, x, y):
    """One least-squares SGD step of a linear model, summed over replicas."""
    err = xtpu.matmul(x, w) - y
    grad = xtpu.matmul(xtpu.transpose(x), err)
    return w - 0.01 * xtpu.cross_replica_sum(grad)


def _eager_step(w, xs, ys):
    return w - 0.01 * sum(x.T @ (x @ w - y) for x, y in zip(xs, ys))


def test_dequeued_tuples_are_the_inputs_of_each_replica():
    """The infeed program equals the one taking the same values as inputs,
    step after step; the IR holds one tpu.infeed_dequeue_tuple."""
    rng = np.random.default_rng(0)
    R, steps = 2, 4
    data = [[(rng.standard_normal((4, 3)), rng.standard_normal((4, 1))) for _ in range(R)] for _ in range(steps)]
    q = xtpu.InfeedQueue(tuple_types=["float64", "float64"], tuple_shapes=[[8, 3], [8, 1]])
    w = np.zeros((3, 1))
    w_ref = w
    for k in range(steps):
        q.enqueue([list(d) for d in data[k]])
        out = xtpu.replicate(_step, inputs=[[w] for _ in range(R)], infeed_queue=q)
        w = out[0][0]
        np.testing.assert_allclose(out[1][0], w)
        w_ref = _eager_step(w_ref, [d[0] for d in data[k]], [d[1] for d in data[k]])
        np.testing.assert_allclose(w, w_ref, rtol=1e-12)
    assert q.pending() == [0, 0]
    text = xtpu.lower(_step, inputs=[[w], [w]], infeed_queue=q).as_text()
    assert text.count("tpu.infeed_dequeue_tuple") == 1
    assert 'tpu.infeed_dequeue_tuple "InfeedQueue#' in text and ": tensor<4x3xf64>, tensor<4x1xf64>" in text


def test_split_inputs_shards_each_element_along_its_dimension():
    q = xtpu.InfeedQueue(number_of_tuple_elements=2, shard_dimensions=[0, 1])
    q.set_number_of_shards(2)
    a, b = np.arange(12.0).reshape(4, 3), np.arange(8).reshape(2, 4).astype(np.int32)
    ops = q.split_inputs_and_generate_enqueue_ops([a, b])
    assert len(ops) == 2 and q.pending() == [0, 0]
    for op in ops:
        op()
    out = xtpu.replicate(lambda x, y: (x, y), inputs=[[], []], infeed_queue=q)
    np.testing.assert_array_equal(out[0][0], a[:2])
    np.testing.assert_array_equal(out[1][0], a[2:])
    np.testing.assert_array_equal(out[0][1], b[:, :2])
    np.testing.assert_array_equal(out[1][1], b[:, 2:])


def test_a_producer_thread_feeds_steps_while_they_run():
    rng = np.random.default_rng(1)
    R, steps = 2, 20
    data = [[(rng.standard_normal((4, 3)), rng.standard_normal((4, 1))) for _ in range(R)] for _ in range(steps)]
    q = xtpu.InfeedQueue(tuple_types=["float64", "float64"], tuple_shapes=[[8, 3], [8, 1]], capacity=2)

    def produce():
        for k in range(steps):
            q.enqueue([list(d) for d in data[k]])

    producer = threading.Thread(target=produce)
    producer.start()
    w = np.zeros((3, 1))
    for _ in range(steps):
        w = xtpu.replicate(_step, inputs=[[w] for _ in range(R)], infeed_queue=q)[0][0]
    producer.join(timeout=10)
    w_ref = np.zeros((3, 1))
    for k in range(steps):
        w_ref = _eager_step(w_ref, [d[0] for d in data[k]], [d[1] for d in data[k]])
    np.testing.assert_allclose(w, w_ref, rtol=1e-12)


def test_an_empty_queue_times_out_naming_replica_and_queue():
    q = xtpu.InfeedQueue(tuple_types=["float32"], tuple_shapes=[[2]], name="batches")
    compiled = xtpu.lower(lambda x: x * 2.0, inputs=[[], []], infeed_queue=q).compile(timeout=0.3)
    q.enqueue([[np.ones(1, np.float32)], [np.ones(1, np.float32)]])
    out = compiled([[], []])
    np.testing.assert_array_equal(out[1][0], [2.0])
    q.generate_enqueue_ops([[np.ones(1, np.float32)], [np.ones(1, np.float32)]])[1]()  # replica 1 only
    with pytest.raises(
        RuntimeTimeoutError,
        match=r"replica 0, op tpu.infeed_dequeue_tuple .*timed out after 0.3 s waiting for a tuple in infeed queue 'batches'",
    ):
        compiled([[], []])


def test_enqueue_checks_the_frozen_configuration():
    q = xtpu.InfeedQueue(tuple_types=["float32", "int32"], tuple_shapes=[[4, 2], [4]])
    q.set_number_of_shards(2)
    q.freeze()
    good = [np.zeros((2, 2), np.float32), np.zeros(2, np.int32)]
    with pytest.raises(
        ValueError,
        match=r"replica 1: tuple element 0 must be float32\[2, 2\] \(the frozen configuration\), got float32\[2, 3\]",
    ):
        q.enqueue([good, [np.zeros((2, 3), np.float32), np.zeros(2, np.int32)]])
    with pytest.raises(ValueError, match=r"replica 0: tuple element 1 must be int32\[2\] .*got int64\[2\]"):
        q.enqueue([[good[0], np.zeros(2, np.int64)], good])
    with pytest.raises(ValueError, match="feeds 2 replicas, got tuples for 1"):
        q.enqueue([good])
    assert q.pending() == [0, 0]  # nothing half-enqueued
    with pytest.raises(RuntimeTimeoutError, match="replica 0's queue stayed full"):
        for _ in range(3):
            q.enqueue([good, good], timeout=0.1)


def test_an_infeed_under_several_processes_is_refused(monkeypatch):
    """Under mpiexec each rank would hold its own queues (and a producer
    would fill queues no local replica reads): a clear error at trace time."""
    monkeypatch.setattr(xtpu.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(xtpu.distributed, "process_count", lambda: 2)
    q = xtpu.InfeedQueue(tuple_types=["float32"], tuple_shapes=[[2]])
    with pytest.raises(NotImplementedError, match="an infeed queue lives in one process; with 2 processes"):
        xtpu.lower(lambda x: x, inputs=[[], []], infeed_queue=q)


def test_xtpu_run_of_a_module_reading_an_infeed_names_the_op_not_a_traceback():
    # Found by benchmarks/malformed_ir.py: the queue of an IR file lives in
    # no process that xtpu-run starts.
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, "test", "lit", "passes", "infeed-device-program.mlir")
    proc = subprocess.run([sys.executable, "-m", "xtpu.tools.run", path], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (
        "infeed-device-program.mlir:17:5: tpu.infeed_dequeue_tuple: no infeed queue 'InfeedQueue#1' in this "
        "process" in proc.stderr
    ), proc.stderr
