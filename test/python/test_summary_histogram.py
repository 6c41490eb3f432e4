"""xtpu.summary.histogram (issue 15) against TF 2's tf.summary.histogram and
numpy: the HistogramProto TensorBoard reads, eagerly, traced (replica 0
writes, as for scalars) and inside xtpu.function."""

import numpy as np
import pytest
from test_summary import read_events

import xtpu


def histos(logdir):
    return [(v.tag, e.step, v.histo) for e in read_events(logdir) for v in e.summary.value if v.HasField("histo")]


def _check_against_numpy(h, values, buckets):
    values = np.asarray(values, np.float64).reshape(-1)
    assert h.num == values.size and h.min == values.min() and h.max == values.max()
    assert h.sum == pytest.approx(values.sum()) and h.sum_squares == pytest.approx(values @ values)
    counts, edges = np.histogram(values, bins=buckets)
    # TensorBoard's HistogramProto keeps each bucket's right edge: numpy's
    # counts after one empty bucket whose right edge is numpy's first (left)
    # edge; every count and every edge is numpy's (issue 25: only the non-zero
    # counts and the last edge used to be compared).
    assert list(h.bucket) == [0.0] + counts.tolist()
    np.testing.assert_allclose(list(h.bucket_limit), edges, rtol=1e-12, atol=1e-12)


def test_eager_histogram_is_numpys(logdir):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 5)).astype(np.float32)
    w = xtpu.summary.create_file_writer(logdir)
    assert xtpu.summary.histogram("nothing", x, step=0) is False  # no default writer
    with w.as_default(step=7):
        assert xtpu.summary.histogram("weights", x) is True
        assert xtpu.summary.histogram("ints", np.arange(12), step=8, buckets=3, description="d") is True
        assert xtpu.summary.histogram("const", np.full(4, 2.0), step=9) is True
        assert xtpu.summary.histogram("empty", np.zeros((0,)), step=10) is True
    (t1, s1, h1), (t2, s2, h2), (t3, s3, h3), (t4, s4, h4) = histos(logdir)
    assert (t1, s1, t2, s2, t3, s3, t4, s4) == ("weights", 7, "ints", 8, "const", 9, "empty", 10)
    _check_against_numpy(h1, x, 30)
    _check_against_numpy(h2, np.arange(12), 3)
    assert h3.num == 4 and sum(h3.bucket) == 4 and h3.min == h3.max == 2.0
    assert h4.num == 0 and len(h4.bucket) == 0
    with pytest.raises(ValueError, match="buckets must be positive"):
        with w.as_default(step=1):
            xtpu.summary.histogram("bad", x, buckets=0)
    with pytest.raises(ValueError, match="No step set"):
        with w.as_default():
            xtpu.summary.histogram("nostep", x)


def test_traced_histogram_is_written_by_replica_zero(logdir):
    w = xtpu.summary.create_file_writer(logdir)
    xs = [np.arange(6.0) * (r + 1) for r in range(4)]

    def fn(x, step):
        xtpu.summary.histogram("act", x * 2.0, step=step, buckets=5)
        return x

    with w.as_default():
        xtpu.replicate(fn, [[x, np.int64(3)] for x in xs])
    w.flush()
    ((tag, step, h),) = histos(logdir)
    assert (tag, step) == ("act", 3)
    _check_against_numpy(h, xs[0] * 2.0, 5)


def test_histogram_inside_function_with_strategy(logdir):
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    with strategy.scope():
        v = xtpu.Variable(np.arange(4, dtype=np.float32))
    w = xtpu.summary.create_file_writer(logdir)

    @xtpu.function
    def log(step):
        def replica_fn():
            xtpu.summary.histogram("v", v.read_value(), step=step)
            return xtpu.reduce_sum(v.read_value())

        return strategy.run(replica_fn)

    with w.as_default():
        log(np.int64(1))
        log(np.int64(2))
    w.flush()
    got = histos(logdir)
    assert [(t, s) for t, s, _ in got] == [("v", 1), ("v", 2)]
    _check_against_numpy(got[0][2], np.arange(4), 30)
