"""Issue 26's TF names against TensorFlow 2.21 itself.

Each case of ``tf_reference_cases.py`` runs on xtpu eagerly, and compiled
through ``xtpu.replicate`` with 1 and 2 replicas; its outputs (values,
dtypes, shapes) and the gradients of ``sum(w_j * output_j)`` with respect to
its float inputs must equal TF's, read from ``test/data/tf_reference_ops.npz``
(made by ``test/data/make_tf_reference.py`` with TF 2.21 on CPU; the suite
does not import TF).  The cases include TF's tie rules (``maximum`` /
``minimum`` give a tied gradient to the first operand, ``reduce_max`` splits
it among the tied maxima), ``round``'s half to even, the kinks of relu6 /
leaky_relu / softplus, and default dtypes (``rank`` int32,
``count_nonzero`` int64).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from tf_reference_cases import CASES, ERROR_CASES, NAMES

import xtpu

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "tf_reference_ops.npz")
REF = np.load(DATA)
META = json.loads(bytes(REF["__meta__"]).decode())


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _inputs(case):
    return [REF[f"{case.name}/in{i}"] for i in range(len(case.inputs))]


def _weights(case, n):
    return [REF[f"{case.name}/w{j}"] if f"{case.name}/w{j}" in REF else None for j in range(n)]


def _floats(inputs):
    return [i for i, x in enumerate(inputs) if np.dtype(x.dtype).kind == "f"]


def _run_with_gradient(case, inputs):
    """The case's outputs and the gradients of sum(w * outputs) (eager or traced)."""
    n_out = META["cases"][case.name]["outputs"]
    ws = _weights(case, n_out)
    floats = _floats(inputs)
    with xtpu.GradientTape(persistent=True) as tape:
        for i in floats:
            tape.watch(inputs[i])
        outs = _tuple(case.fn(xtpu, *inputs))
        total = None
        for o, w in zip(outs, ws):
            if w is None:
                continue
            term = xtpu.reduce_sum(o * w)
            total = term if total is None else total + xtpu.cast(term, term.dtype if total is None else total.dtype)
    grads = ()
    if case.grad and total is not None:
        grads = tuple(tape.gradient(total, [inputs[i] for i in floats]))
    return outs, grads


def _check(case, outs, grads, where):
    meta = META["cases"][case.name]
    assert len(outs) == meta["outputs"], f"{where}: {len(outs)} outputs, TF has {meta['outputs']}"
    for j, o in enumerate(outs):
        want = REF[f"{case.name}/out{j}"]
        got = np.asarray(o)
        assert got.dtype == want.dtype, f"{where} output {j}: dtype {got.dtype}, TF {want.dtype}"
        assert got.shape == want.shape, f"{where} output {j}: shape {got.shape}, TF {want.shape}"
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol, err_msg=f"{where} output {j}")
            np.testing.assert_array_equal(
                np.signbit(got[got == 0]), np.signbit(want[got == 0]), err_msg=f"{where} -0.0"
            )
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{where} output {j}")
    if not case.grad:
        return
    inputs = case.inputs
    for i, g in zip(_floats([np.asarray(x) for x in inputs]), grads):
        key = f"{case.name}/grad{i}"
        if key not in REF:  # TF: no gradient reaches this input
            assert g is None or not np.any(np.asarray(g)), f"{where}: input {i} gets a gradient, TF's is None"
            continue
        assert g is not None, f"{where}: input {i} gets no gradient, TF's is {REF[key]}"
        g = np.asarray(g)
        assert g.dtype == REF[key].dtype and g.shape == REF[key].shape, f"{where}: gradient {i} {g.dtype}{g.shape}"
        np.testing.assert_allclose(g, REF[key], rtol=case.rtol * 5, atol=case.atol * 5, err_msg=f"{where} gradient {i}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_eager_matches_tensorflow(case):
    inputs = [xtpu.constant(x) for x in _inputs(case)]
    outs, grads = _run_with_gradient(case, inputs)
    _check(case, outs, grads, f"{case.name} eager")


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_compiled_matches_tensorflow(case, replicas):
    inputs = _inputs(case)
    n_out = META["cases"][case.name]["outputs"]

    def computation(*xs):
        outs, grads = _run_with_gradient(case, list(xs))
        return tuple(outs) + tuple(grads)

    for r, res in enumerate(xtpu.replicate(computation, [list(inputs)] * replicas)):
        res = _tuple(res)
        _check(case, res[:n_out], res[n_out:], f"{case.name} compiled replica {r}/{replicas}")


@pytest.mark.parametrize("error", ERROR_CASES, ids=lambda e: e[0])
def test_errors_where_tensorflow_raises(error):
    name, fn, inputs, fragment = error
    assert META["errors"][name] is not None, f"TF accepts {name}"
    with pytest.raises((ValueError, TypeError), match=None) as eager:
        fn(xtpu, *inputs)
    assert fragment in str(eager.value)
    with pytest.raises((ValueError, TypeError)) as traced:
        xtpu.replicate(lambda *xs: fn(xtpu, *xs), [list(inputs)])
    assert fragment in str(traced.value)


def test_reference_data_is_tensorflows():
    assert META["tensorflow"]["version"].startswith("2.21")
    assert set(META["cases"]) == {c.name for c in CASES}


@pytest.mark.parametrize("where", NAMES, ids=lambda w: f"{w[0]}.{w[1]}")
def test_names_exist_with_tensorflows_parameters(where):
    """TF's parameter names, in TF's order (xtpu may add keywords after them)."""
    import inspect

    ns, name = where
    fn = getattr(getattr(xtpu, ns) if ns else xtpu, name)
    tf_params = META["signatures"][f"{ns}.{name}"]
    ours = list(inspect.signature(fn).parameters)
    assert ours[: len(tf_params)] == tf_params, f"xtpu.{ns}.{name}{ours} vs TF's {tf_params}"
