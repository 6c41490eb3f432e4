"""The worked example: a model in plain JAX imported with from_jax, trained
with xtpu.TPUStrategy and xtpu's GradientTape, equal to the same training in
JAX."""

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
sys.path.insert(0, os.path.dirname(__file__))

import xla_reference  # noqa: E402, F401  (before jax: 8 CPU devices)

pytest.importorskip("jax")

import jax_model_in_tpu_strategy as example  # noqa: E402


def test_weights_equal_jax_training(capsys):
    rc = example.main(["--replicas", "8", "--steps", "6"])
    out = capsys.readouterr().out
    assert rc == 0, out
    diff = float(out.split("largest difference from the JAX run's weights: ")[1].split()[0])
    assert diff <= 1e-5
    first, last = re.search(r"loss ([\d.]+) -> ([\d.]+)", out).groups()
    assert float(last) < float(first)


def test_a_difference_fails_the_run(capsys, monkeypatch):
    """The check can fail: a wrong learning rate in the JAX run is caught."""
    train_jax = example.train_jax
    monkeypatch.setattr(example, "train_jax", lambda p, b, r, lr, m, g: train_jax(p, b, r, lr * 1.01, m, g))
    assert example.main(["--replicas", "2", "--steps", "3"]) == 1
