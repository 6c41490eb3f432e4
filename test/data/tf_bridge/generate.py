"""TF's own TPU bridge on issue 31's programs: run with TensorFlow 2.21 (CPU),
``/work/tfvenv/bin/python test/data/tf_bridge/generate.py`` (not part of the
suite; TF is not an xtpu dependency).

Each program is built as a ``tf.compat.v1.tpu.replicate`` graph (2 replicas),
imported to TF-dialect MLIR and run through TF's
``tf-replicated-clustering-bridge-v2`` pipeline, as
/work/shared/REFERENCES_NOTES.md describes.  The output goes to
``<program>.mlir`` beside this file, and a summary (host launches, device-side
host computes and their operand / result counts) to ``summary.json``: the
reference for what xtpu folds, moves and merges
(``test/lit/passes/outside-compilation-fold-simplify-merge.mlir``).
"""

from __future__ import annotations

import json
import os
import re

import tensorflow as tf
from tensorflow.python import pywrap_mlir

tf.compat.v1.disable_eager_execution()
HERE = os.path.dirname(os.path.abspath(__file__))
R = 2


def seed_string_example():
    def computation_with_string_ops(x):
        # TF 2.21's tf.strings.format takes tensors: the Python int 1 fails
        # with "object of type 'int' has no len()", so it is converted.
        output = tf.strings.format("1{}", tf.convert_to_tensor(x))
        return tf.strings.to_number(output)

    def f():
        return tf.compat.v1.tpu.outside_compilation(computation_with_string_ops, 1)

    return f, [[] for _ in range(R)]


def constant_cluster():
    def f():
        return tf.compat.v1.tpu.outside_compilation(lambda v: v * 3.0 + 1.0, tf.constant(2.0))

    return f, [[] for _ in range(R)]


def _gradient(scale: bool):
    def f(x, w):
        h = x * 0.5 if scale else x
        y = tf.reduce_sum(tf.compat.v1.tpu.outside_compilation(lambda v: tf.exp(v) * 2.0, h) * w)
        return tf.compat.v1.gradients(y, [x], colocate_gradients_with_ops=True)

    def inputs():
        return [[tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])] for _ in range(R)]

    return f, inputs


def gradient_cluster_in_the_head():
    return _gradient(False)


def gradient_cluster_with_a_device_input():
    return _gradient(True)


PROGRAMS = [seed_string_example, constant_cluster, gradient_cluster_in_the_head, gradient_cluster_with_a_device_input]


def bridge(program) -> str:
    graph = tf.Graph()
    with graph.as_default():
        f, inputs = program()
        if callable(inputs):
            inputs = inputs()
        tf.compat.v1.tpu.replicate(f, inputs=inputs)
    text = pywrap_mlir.import_graphdef(graph.as_graph_def(), "", False)
    return pywrap_mlir.experimental_run_pass_pipeline(text, "tf-replicated-clustering-bridge-v2", False)


def summarize(text: str) -> dict:
    """Host launches, and per device-side host compute the values it sends
    (operands) and receives (results), with its keys."""
    computes = []
    for m in re.finditer(
        r'"tf._XlaHostComputeMlir"\(([^)]*)\) <\{[^}]*recv_key = "([^"]*)", send_key = "([^"]*)"\}> : \(([^)]*)\) -> (.*)',
        text,
    ):
        results = m.group(5).strip()
        computes.append(
            {
                "send_key": m.group(3),
                "recv_key": m.group(2),
                "sent": m.group(1).count("%"),
                "received": 0 if results == "()" else results.count("tensor<"),
            }
        )
    return {
        "host_launches": text.count('device = "TPU_REPLICATED_HOST_0"'),
        "host_computes": computes,
        "string_ops": len(re.findall(r"tf\.(StringFormat|StringToNumber)", text)),
        "device_constants": re.findall(r"tf\.Const.*value = dense<([^>]*)>\s*:\s*tensor<f32>", text),
    }


def main() -> None:
    summary = {}
    for p in PROGRAMS:
        try:
            text = bridge(p)
        except Exception as e:  # noqa: BLE001 - recorded as the reference
            text = f"// {type(e).__name__}: {e}\n"
        with open(os.path.join(HERE, p.__name__ + ".mlir"), "w") as out:
            out.write(text)
        summary[p.__name__] = summarize(text)
    with open(os.path.join(HERE, "summary.json"), "w") as out:
        json.dump(summary, out, indent=1)
        out.write("\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
