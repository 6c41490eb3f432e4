"""Writes ``tf_reference_ops.npz`` (next to this script): for every case of
``test/python/tf_reference_cases.py``, TensorFlow's outputs and the
gradients of ``sum(w_j * output_j)`` (``w_j`` fixed random weights, stored
too) with respect to each float input, computed by ``tf.GradientTape``; and
for every error case the class of the exception TF raises.

Run with TensorFlow 2.21 on CPU (not part of the suite, which reads the file):

    /work/tfvenv/bin/python test/data/make_tf_reference.py
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from tf_reference_cases import CASES, ERROR_CASES, NAMES  # noqa: E402


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def main() -> None:
    data: dict[str, np.ndarray] = {}
    meta: dict[str, dict] = {"tensorflow": {"version": tf.__version__}, "cases": {}, "errors": {}}
    for case in CASES:
        rng = np.random.default_rng(sum(map(ord, case.name)))
        xs = [tf.constant(x) for x in case.inputs]
        floats = [i for i, x in enumerate(case.inputs) if np.asarray(x).dtype.kind == "f"]
        with tf.GradientTape(persistent=True) as tape:
            for i in floats:
                tape.watch(xs[i])
            outs = as_tuple(case.fn(tf, *xs))
            ws = [
                rng.standard_normal(np.shape(o)).astype(o.dtype.as_numpy_dtype) if o.dtype.is_floating else None
                for o in outs
            ]
            total = None
            for o, w in zip(outs, ws):
                if w is None:
                    continue
                term = tf.reduce_sum(o * tf.constant(w))
                total = term if total is None else total + tf.cast(term, total.dtype)
        for i, x in enumerate(case.inputs):
            data[f"{case.name}/in{i}"] = np.asarray(x)
        for j, (o, w) in enumerate(zip(outs, ws)):
            data[f"{case.name}/out{j}"] = o.numpy()
            if w is not None:
                data[f"{case.name}/w{j}"] = w
        grads = {}
        if case.grad and total is not None:
            g = tape.gradient(total, [xs[i] for i in floats])
            for i, gi in zip(floats, g):
                if gi is not None:
                    data[f"{case.name}/grad{i}"] = tf.convert_to_tensor(gi).numpy()
                grads[i] = gi is not None
        meta["cases"][case.name] = {
            "outputs": len(outs),
            "inputs": len(case.inputs),
            "grads": {str(k): v for k, v in grads.items()},
        }
    for name, fn, inputs, _fragment in ERROR_CASES:
        try:
            fn(tf, *[tf.constant(x) for x in inputs])
            raised = None
        except Exception as e:  # noqa: BLE001 - the class is the record
            raised = type(e).__name__
        meta["errors"][name] = raised
    import inspect

    meta["signatures"] = {}
    for ns, name in NAMES:
        fn = getattr(getattr(tf, ns) if ns else tf, name)
        meta["signatures"][f"{ns}.{name}"] = list(inspect.signature(fn).parameters)
    data["__meta__"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    np.savez_compressed(os.path.join(HERE, "tf_reference_ops.npz"), **data)
    print(f"{len(CASES)} cases, {len(ERROR_CASES)} error cases, {len(data)} arrays")


if __name__ == "__main__":
    main()
