"""``import xtpu`` loads the API lazily (issue 13: ``xtpu-opt`` starts in
under 0.3 s): the toolchain modules do not import it, every exported name
still resolves, and the first API name read does what the eager import did
(operators on ``Tensor``).  Each check runs in a fresh interpreter, since this
one has long since loaded the API."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import xtpu

API_MODULES = (
    "xtpu.core.tracing",
    "xtpu.core.eager",
    "xtpu.replication",
    "xtpu.distribute",
    "xtpu.ops",
    "xtpu.autodiff",
    "xtpu.train",
    # the flat layout's paths, for programs that still use them
    "xtpu.strategy",
    "xtpu.tracing",
    "xtpu.tape",
    "xtpu.function",
)


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "statement",
    ["import xtpu.tools.opt", "import xtpu.dialects", "import xtpu.passes", "import xtpu", "import xtpu.universe"],
)
def test_toolchain_does_not_import_the_api(statement):
    loaded = json.loads(_run(f"import sys, json; {statement}; print(json.dumps(sorted(sys.modules)))"))
    assert [m for m in API_MODULES if m in loaded] == []
    if statement == "import xtpu":
        assert [m for m in loaded if m.startswith("xtpu.")] == ["xtpu.about"]  # the version only


def test_xtpu_opt_runs_without_the_api(tmp_path):
    path = tmp_path / "one.mlir"
    path.write_text(
        "func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
        "  %b = hlo.add %a, %a : tensor<3xf32>\n  func.return %b : tensor<3xf32>\n}\n"
    )
    code = (
        f"import sys, json, io, contextlib; from xtpu.tools.opt import main; out = io.StringIO()\n"
        f"with contextlib.redirect_stdout(out): main([{str(path)!r}])\n"
        f"print(json.dumps([out.getvalue(), sorted(sys.modules)]))"
    )
    text, loaded = json.loads(_run(code))
    assert "hlo.add %a, %a : tensor<3xf32>" in text
    assert [m for m in API_MODULES if m in loaded] == []


def _openblas_threads(code: str) -> tuple[list[int], bool]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code + "\nimport os, json, threadpoolctl\n"
            "print(json.dumps([[i['num_threads'] for i in threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'],"
            " 'OPENBLAS_NUM_THREADS' in os.environ]))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def test_xtpu_opt_loads_numpy_with_one_blas_thread():
    pytest.importorskip("threadpoolctl")
    default, _ = _openblas_threads("import numpy")
    if not default:
        pytest.skip("numpy's BLAS is not OpenBLAS")
    # xtpu-opt's process: one BLAS thread, and the environment as it was.
    assert _openblas_threads("import xtpu.tools.opt") == ([1], False)
    # A program that loaded numpy first keeps its BLAS threads.
    assert _openblas_threads("import numpy, xtpu.tools.opt") == (default, False)


def test_every_exported_name_resolves_in_a_fresh_process():
    code = (
        "import json, xtpu, types\n"
        "names = list(xtpu.__all__)\n"
        "got = {n: (type(getattr(xtpu, n)).__name__, getattr(getattr(xtpu, n), '__module__', None)) for n in names}\n"
        "print(json.dumps([names, got, dir(xtpu)]))"
    )
    names, got, listed = json.loads(_run(code))
    got = {n: tuple(v) for n, v in got.items()}
    assert names == xtpu.__all__ and len(names) > 100
    assert set(got) == set(names)
    assert set(names) <= set(listed)
    assert got["replicate"] == ("function", "xtpu.replication.program")
    assert got["TPUStrategy"] == ("type", "xtpu.distribute.strategy")
    assert got["function"][0] == "function"  # tf.function, not the module xtpu.function
    assert got["math"][0] == got["random"][0] == "module"
    assert got["print"] == ("function", "xtpu.ops.string_ops")
    for n in names:  # the same objects as in this process, where the API is loaded
        obj = getattr(xtpu, n)
        assert got[n] == (type(obj).__name__, getattr(obj, "__module__", None)), n


@pytest.mark.parametrize(
    "statement",
    [
        "from xtpu import TPUStrategy as first",
        "import xtpu; first = xtpu.math",
        "from xtpu import optimizers as first",
        "import xtpu.optimizers as first",
        "from xtpu import *; first = replicate",
    ],
)
def test_first_api_name_installs_the_operators(statement):
    # The Python operators on Tensor are installed by xtpu.ops.operators when
    # the API loads: a traced x * 2 + 1 equals numpy's.
    code = (
        f"{statement}\nimport xtpu, numpy as np\n"
        "x = np.arange(3, dtype=np.float32)\n"
        "out = xtpu.replicate(lambda v: v * 2.0 + 1.0, [[x]])\n"
        "print(repr(np.asarray(out[0][0]).tolist()))"
    )
    assert _run(code) == repr((np.arange(3, dtype=np.float32) * 2 + 1).tolist())


@pytest.mark.parametrize(
    "statement", ["import xtpu.function", "from xtpu.function import TensorSpec", "import xtpu.strategy"]
)
def test_an_api_name_wins_over_a_submodule_of_that_name(statement):
    # xtpu.function is tf.function's decorator, also when the module
    # xtpu.function was imported before any API name was read.
    got = _run(f"{statement}\nimport xtpu\nprint(type(xtpu.function).__name__, xtpu.function.__name__)")
    assert got == "function function"


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'no_such_op'"):
        xtpu.no_such_op  # noqa: B018
    assert not hasattr(xtpu, "__no_such_dunder__")
