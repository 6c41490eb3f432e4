"""Reference outputs and gradients of TF's indexing, scatter and sort ops,
made by TensorFlow 2.21 (CPU) itself, for test/python/test_indexing_tf.py.

Run with a Python that has TensorFlow (not xtpu's test environment)::

  /work/tfvenv/bin/python test/data/indexing/make_reference.py

It writes ``cases.json`` (each case: the op, its keyword arguments, which
inputs get gradients) and ``reference.npz`` (per case ``ID:inK`` the inputs,
``ID:outK`` TF's outputs, ``ID:ctK`` a random cotangent per float output and
``ID:gradK`` TF's gradient of ``sum(ct * out)`` with respect to input ``K``,
through ``tf.GradientTape``) beside this file.  The cases pin TF's rules a
re-implementation gets wrong: ties (argmax / argmin / top_k / argsort take
the lower index first; in_top_k counts tied entries in), default dtypes
(argmax int64, argsort and top_k int32), out-of-range ids where TF on CPU
defines them (one_hot rows of zeros, unsorted_segment_* dropping negative
ids), repeated indices (scatter_nd sums), dtypes (float32, float64, int32,
int64).  Out-of-range gathers and scatters, which TF on CPU refuses by
default, are TF's values under ``bad_indices_policy="IGNORE"`` (values only:
TF's gradients of them raise on CPU), and compared with JAX's
``mode="fill"`` in the test too.
"""

from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261127)

OPS = {
    "gather": tf.gather,
    "gather_nd": tf.gather_nd,
    "embedding_lookup": tf.nn.embedding_lookup,
    "embedding_lookup_shards": lambda a, b, ids, **kw: tf.nn.embedding_lookup([a, b], ids, **kw),
    "scatter_nd": tf.scatter_nd,
    "tensor_scatter_nd_update": tf.tensor_scatter_nd_update,
    "tensor_scatter_nd_add": tf.tensor_scatter_nd_add,
    "tensor_scatter_nd_sub": tf.tensor_scatter_nd_sub,
    "tensor_scatter_nd_max": tf.tensor_scatter_nd_max,
    "tensor_scatter_nd_min": tf.tensor_scatter_nd_min,
    "unsorted_segment_sum": tf.math.unsorted_segment_sum,
    "unsorted_segment_max": tf.math.unsorted_segment_max,
    "unsorted_segment_min": tf.math.unsorted_segment_min,
    "unsorted_segment_mean": tf.math.unsorted_segment_mean,
    "unsorted_segment_prod": tf.math.unsorted_segment_prod,
    "segment_sum": tf.math.segment_sum,
    "one_hot": tf.one_hot,
    "argmax": tf.math.argmax,
    "argmin": tf.math.argmin,
    "sort": tf.sort,
    "argsort": tf.argsort,
    "top_k": tf.math.top_k,
    "in_top_k": tf.math.in_top_k,
    "where": tf.where,
    "where_gather_nd": lambda c, x: tf.gather_nd(x, tf.where(c)),
    "where_gather_nd_sq": lambda c, x: tf.reduce_sum(tf.square(tf.gather_nd(x, tf.where(c)))),
}


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def distinct(*shape, dtype=np.float32):
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.25 - n * 0.1).reshape(shape).astype(dtype)


def ties(*shape, dtype=np.float32):
    return rng.integers(0, 3, shape).astype(dtype)


def i32(*values):
    return np.array(values, np.int32)


def i64(*values):
    return np.array(values, np.int64)


CASES: list[tuple[str, str, list, dict, list[int]]] = [
    # (id, op, inputs, kwargs, inputs that get gradients)
    ("gather-rows-f32", "gather", [normal(6, 4), i32(3, 0, 3, 5, 1)], {}, [0]),
    ("gather-rows-f64-2d-ids", "gather", [normal(6, 2, dtype=np.float64), i64(3, 0, 3, 5).reshape(2, 2)], {}, [0]),
    ("gather-axis1", "gather", [normal(3, 5, 2), i64(4, 0, 4)], {"axis": 1}, [0]),
    ("gather-axis-neg", "gather", [normal(3, 5), i32(1, 1, 4, 0)], {"axis": -1}, [0]),
    (
        "gather-batch-dims",
        "gather",
        [normal(2, 3, 5), i32(4, 0, 1, 1, 2, 2, 3, 3).reshape(2, 4)],
        {"axis": 2, "batch_dims": 1},
        [0],
    ),
    (
        "gather-batch-dims-axis1",
        "gather",
        [normal(2, 5, 3), i64(4, 0, 1, 2, 2, 3).reshape(2, 3)],
        {"batch_dims": 1},
        [0],
    ),
    ("gather-int32", "gather", [rng.integers(-9, 9, (5, 3)).astype(np.int32), i32(4, 0, 4)], {}, []),
    ("gather-int64-params", "gather", [rng.integers(-9, 9, (5,)).astype(np.int64), i64(2, 2, 1)], {}, []),
    ("gather_nd-elements", "gather_nd", [normal(4, 5), i32(0, 1, 3, 4, 0, 1).reshape(3, 2)], {}, [0]),
    ("gather_nd-slices", "gather_nd", [normal(4, 5, 3, dtype=np.float64), i64(3, 1, 3).reshape(3, 1)], {}, [0]),
    (
        "gather_nd-batch-dims",
        "gather_nd",
        [normal(2, 4, 3), i32(1, 3, 3, 0, 2, 2).reshape(2, 3, 1)],
        {"batch_dims": 1},
        [0],
    ),
    (
        "gather_nd-batch-dims-elements",
        "gather_nd",
        [normal(2, 4, 3), i32(1, 2, 3, 0, 0, 0, 2, 1).reshape(2, 2, 2)],
        {"batch_dims": 1},
        [0],
    ),
    ("embedding_lookup", "embedding_lookup", [normal(10, 3), i32(1, 2, 9, 1).reshape(2, 2)], {}, [0]),
    ("embedding_lookup-max-norm", "embedding_lookup", [normal(10, 3) * 2, i64(1, 2, 9, 1)], {"max_norm": 1.0}, [0]),
    ("embedding_lookup-shards", "embedding_lookup_shards", [normal(5, 3), normal(5, 3), i32(7, 0, 4, 5)], {}, [0, 1]),
    ("scatter_nd-repeated", "scatter_nd", [i32(1, 1, 3).reshape(3, 1), normal(3, 2)], {"shape": [5, 2]}, [1]),
    (
        "scatter_nd-elements",
        "scatter_nd",
        [i64(0, 1, 2, 2, 0, 1).reshape(3, 2), normal(3, dtype=np.float64)],
        {"shape": [3, 3]},
        [1],
    ),
    ("scatter_nd-int", "scatter_nd", [i32(1, 1, 0).reshape(3, 1), i32(5, 6, 7)], {"shape": [3]}, []),
    (
        "tensor_scatter_nd_update",
        "tensor_scatter_nd_update",
        [normal(5, 2), i32(4, 0).reshape(2, 1), normal(2, 2)],
        {},
        [0, 2],
    ),
    (
        "tensor_scatter_nd_update-elements",
        "tensor_scatter_nd_update",
        [normal(3, 4), i64(0, 1, 2, 3).reshape(2, 2), normal(2)],
        {},
        [0, 2],
    ),
    (
        "tensor_scatter_nd_add-repeated",
        "tensor_scatter_nd_add",
        [normal(5, 2), i32(4, 0, 4).reshape(3, 1), normal(3, 2)],
        {},
        [0, 2],
    ),
    (
        "tensor_scatter_nd_sub",
        "tensor_scatter_nd_sub",
        [normal(5, 2), i32(4, 1).reshape(2, 1), normal(2, 2)],
        {},
        [0, 2],
    ),
    (
        "tensor_scatter_nd_max",
        "tensor_scatter_nd_max",
        [distinct(5, 2), i32(4, 1, 4).reshape(3, 1), distinct(3, 2)],
        {},
        [0, 2],
    ),
    (
        "tensor_scatter_nd_min",
        "tensor_scatter_nd_min",
        [distinct(5, 2), i32(4, 1).reshape(2, 1), distinct(2, 2)],
        {},
        [0, 2],
    ),
    (
        "unsorted_segment_sum-negative",
        "unsorted_segment_sum",
        [normal(6, 2), i32(0, 2, -1, 2, 0, -3)],
        {"num_segments": 4},
        [0],
    ),
    (
        "unsorted_segment_sum-2d-ids",
        "unsorted_segment_sum",
        [normal(2, 3, dtype=np.float64), i64(1, 0, 1, 2, 2, -1).reshape(2, 3)],
        {"num_segments": 3},
        [0],
    ),
    ("unsorted_segment_sum-int", "unsorted_segment_sum", [i32(1, 2, 3, 4), i32(1, 1, 0, -1)], {"num_segments": 3}, []),
    (
        "unsorted_segment_max",
        "unsorted_segment_max",
        [distinct(6, 2), i32(0, 2, -1, 2, 0, 0)],
        {"num_segments": 4},
        [0],
    ),
    (
        "unsorted_segment_max-ties",
        "unsorted_segment_max",
        [np.array([1.0, 3.0, 3.0, 2.0], np.float32), i32(0, 0, 0, 1)],
        {"num_segments": 2},
        [0],
    ),
    (
        "unsorted_segment_min",
        "unsorted_segment_min",
        [distinct(6, dtype=np.float64), i64(1, 1, -2, 0, 0, 1)],
        {"num_segments": 3},
        [0],
    ),
    ("unsorted_segment_mean", "unsorted_segment_mean", [normal(5, 2), i32(0, 0, 2, -1, 0)], {"num_segments": 4}, [0]),
    ("unsorted_segment_prod", "unsorted_segment_prod", [normal(5), i32(0, 0, 2, -1, 0)], {"num_segments": 3}, []),
    ("segment_sum", "segment_sum", [normal(5, 2), i32(0, 0, 1, 3, 3)], {}, [0]),
    ("one_hot", "one_hot", [i32(0, 2, -1, 3, 1)], {"depth": 3}, []),
    (
        "one_hot-values-axis0",
        "one_hot",
        [i64(1, 0, 5, 2).reshape(2, 2)],
        {"depth": 3, "on_value": 5.0, "off_value": -1.0, "axis": 0},
        [],
    ),
    ("one_hot-int-dtype", "one_hot", [i32(1, 0, 9)], {"depth": 2, "dtype": tf.int32}, []),
    ("argmax-ties", "argmax", [ties(4, 5)], {"axis": 1}, []),
    ("argmax-default-axis", "argmax", [ties(4, 3, dtype=np.float64)], {}, []),
    (
        "argmax-int32-out",
        "argmax",
        [rng.integers(0, 3, (3, 4)).astype(np.int32)],
        {"axis": 0, "output_type": tf.int32},
        [],
    ),
    ("argmin-ties", "argmin", [ties(4, 5)], {"axis": 1}, []),
    ("argmin-int64", "argmin", [rng.integers(0, 3, (2, 3, 4)).astype(np.int64)], {"axis": 2}, []),
    ("sort-ties", "sort", [ties(3, 6) + normal(3, 6) * 0], {}, [0]),
    ("sort-desc-axis0", "sort", [distinct(4, 3, dtype=np.float64)], {"axis": 0, "direction": "DESCENDING"}, [0]),
    ("sort-int", "sort", [rng.integers(-5, 5, (2, 7)).astype(np.int32)], {"direction": "DESCENDING"}, []),
    ("argsort-ties", "argsort", [ties(3, 7)], {}, []),
    ("argsort-ties-desc", "argsort", [ties(3, 7)], {"direction": "DESCENDING"}, []),
    ("argsort-int-axis0", "argsort", [rng.integers(0, 3, (6, 2)).astype(np.int64)], {"axis": 0, "stable": True}, []),
    ("top_k-ties", "top_k", [ties(3, 6)], {"k": 3}, [0]),
    ("top_k-default", "top_k", [distinct(2, 5, dtype=np.float64)], {}, [0]),
    ("top_k-all", "top_k", [distinct(4)], {"k": 4}, [0]),
    ("top_k-int", "top_k", [rng.integers(0, 4, (2, 6)).astype(np.int32)], {"k": 4}, []),
    (
        "in_top_k-ties",
        "in_top_k",
        [i32(1, 0, 2, 2), np.array([[1, 3, 3], [2, 0, 2], [1, 1, 1], [3, 2, 1]], np.float32)],
        {"k": 1},
        [],
    ),
    ("in_top_k-k2", "in_top_k", [i64(0, 2, 1), np.array([[1, 3, 3], [2, 0, 2], [5, 4, 4]], np.float32)], {"k": 2}, []),
]

# Cases added later draw from their own generator, so the ones above keep their values.
rng2 = np.random.default_rng(20261128)


def coin(*shape, p=0.5):
    return rng2.random(shape) < p


CASES += [
    # tf.where(condition): the true elements' coordinates, row-major; compiled as a bounded dynamic shape.
    ("where-2d", "where", [coin(3, 4)], {}, []),
    ("where-1d", "where", [coin(7)], {}, []),
    ("where-3d", "where", [coin(2, 3, 4, p=0.3)], {}, []),
    ("where-none", "where", [np.zeros((2, 3), bool)], {}, []),
    ("where-all", "where", [np.ones((2, 2), bool)], {}, []),
    ("where-gather_nd", "where_gather_nd", [coin(3, 5), rng2.standard_normal((3, 5)).astype(np.float32)], {}, []),
    (
        "where-gather_nd-sq",
        "where_gather_nd_sq",
        [coin(4, 3), rng2.standard_normal((4, 3)).astype(np.float32)],
        {},
        [1],
    ),
    # The low-precision and narrow integer dtypes (issue 28's) through sort, top_k and the arg reductions.
    ("sort-f16", "sort", [(rng2.permutation(12) * 0.5 - 3).reshape(3, 4).astype(np.float16)], {}, [0]),
    ("argsort-uint8-desc", "argsort", [rng2.integers(0, 4, (2, 9)).astype(np.uint8)], {"direction": "DESCENDING"}, []),
    ("top_k-int8", "top_k", [rng2.integers(-100, 100, (3, 8)).astype(np.int8)], {"k": 3}, []),
    ("top_k-f16-ties", "top_k", [rng2.integers(0, 3, (2, 6)).astype(np.float16)], {"k": 4}, [0]),
    ("argmax-uint16", "argmax", [rng2.integers(0, 3, (3, 5)).astype(np.uint16)], {"axis": 1}, []),
    ("argmin-f16", "argmin", [rng2.integers(0, 3, (4, 3)).astype(np.float16)], {}, []),
]


rng3 = np.random.default_rng(20261128)  # the cases below: earlier cases' inputs and cotangents unchanged

CASES += [
    # TF 2.21's bad_indices_policy="IGNORE": out-of-range index vectors give zeros / drop their
    # updates on CPU too, xtpu's rule for every policy but "ERROR".  Values only: TF's gradients of
    # these ops index with the default policy and raise on CPU for those ids.
    (
        "gather_nd-ignore",
        "gather_nd",
        [rng3.standard_normal((4, 3)).astype(np.float32), i32(1, 7, -1, 2, 0, 4).reshape(6, 1)],
        {"bad_indices_policy": "IGNORE"},
        [],
    ),
    (
        "gather_nd-ignore-elements",
        "gather_nd",
        [rng3.standard_normal((4, 3)), i64(1, 2, 3, 3, 0, -1, 2, 0).reshape(4, 2)],
        {"bad_indices_policy": "IGNORE"},
        [],
    ),
    (
        "scatter_nd-ignore",
        "scatter_nd",
        [i32(1, 7, -2, 1).reshape(4, 1), rng3.standard_normal((4, 3)).astype(np.float32)],
        {"shape": [5, 3], "bad_indices_policy": "IGNORE"},
        [],
    ),
    (
        "tensor_scatter_nd_add-ignore",
        "tensor_scatter_nd_add",
        [rng3.standard_normal((5, 2)), i64(4, 5, 0, -3).reshape(4, 1), rng3.standard_normal((4, 2))],
        {"bad_indices_policy": "IGNORE"},
        [],
    ),
]


def tf_kwargs(kwargs: dict) -> dict:
    return dict(kwargs)


def json_kwargs(kwargs: dict) -> dict:
    out = {}
    for k, v in kwargs.items():
        out[k] = v.name if isinstance(v, tf.dtypes.DType) else v
    return out


def main() -> None:
    arrays: dict[str, np.ndarray] = {}
    cases = []
    for cid, op, inputs, kwargs, grads in CASES:
        fn = OPS[op]
        tensors = [tf.constant(x) for x in inputs]
        with tf.GradientTape(persistent=True) as tape:
            for i in grads:
                tape.watch(tensors[i])
            out = fn(*tensors, **tf_kwargs(kwargs))
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            cts = [
                rng.standard_normal(o.shape).astype(o.dtype.as_numpy_dtype) if o.dtype.is_floating else None
                for o in outs
            ]
            loss = tf.add_n([tf.reduce_sum(o * ct) for o, ct in zip(outs, cts) if ct is not None]) if grads else None
        for k, x in enumerate(inputs):
            arrays[f"{cid}:in{k}"] = np.asarray(x)
        for j, (o, ct) in enumerate(zip(outs, cts)):
            arrays[f"{cid}:out{j}"] = o.numpy()
            if ct is not None:
                arrays[f"{cid}:ct{j}"] = ct
        for i in grads:
            g = tape.gradient(loss, tensors[i])
            arrays[f"{cid}:grad{i}"] = tf.convert_to_tensor(g).numpy()
        cases.append(
            {
                "id": cid,
                "op": op,
                "inputs": len(inputs),
                "outputs": len(outs),
                "kwargs": json_kwargs(kwargs),
                "grads": grads,
            }
        )
    np.savez_compressed(os.path.join(HERE, "reference.npz"), **arrays)
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        json.dump({"tensorflow": tf.__version__, "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases, TensorFlow {tf.__version__}")


if __name__ == "__main__":
    main()
