"""The layers of xtpu, read from the imports of its source files.

The IR and runtime layers (``xtpu.dialects``, ``xtpu.passes``,
``xtpu.runtime``) never import the API (every other ``xtpu`` module) -- at
module level or inside a function.  Host-variable state, for instance, is a
store in the runtime that ``xtpu.Variable`` fills, not a registry the
dialect's kernel looks up in the API.

The one exception is the tracer core that an op's gradient rule is written
with: one definition per op holds its VJP, written with xtpu ops (JAX's
primitives bind through the tracer the same way), so ``xtpu.tracing``,
``xtpu.pytree`` and ``xtpu.ops.core`` sit below the dialects' gradient
rules; ``xtpu.pipeline`` (parsing and printing IR text) serves the
runtime's worker processes.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWER = {"dialects": "xtpu.dialects", "passes": "xtpu.passes", "runtime": "xtpu.runtime"}
CORE = {"xtpu.tracing", "xtpu.pytree", "xtpu.ops.core", "xtpu.pipeline"}


def imported_modules(path: pathlib.Path, package: str):
    """``(line, module)`` of every import in the file, relative ones resolved
    and ``from xtpu import x`` read as ``xtpu.x``."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == "xtpu":
                for alias in node.names:
                    yield node.lineno, f"xtpu.{alias.name}"
            else:
                yield node.lineno, module


def is_api(module: str) -> bool:
    parts = module.split(".")
    if parts[0] != "xtpu":
        return False
    if len(parts) == 1:
        return True
    if parts[1] in LOWER:
        return False
    return not any(module == c or module.startswith(c + ".") for c in CORE)


def violations() -> list[str]:
    found = []
    for folder, package in LOWER.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            for line, module in imported_modules(path, package):
                if is_api(module):
                    found.append(f"{folder}/{path.name}:{line} imports {module}")
    return found


def test_ir_and_runtime_never_import_the_api():
    assert violations() == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from xtpu.variables import lookup_host_variable\n", True),
        ("def f():\n    from xtpu import strategy\n", True),
        ("import xtpu.replication\n", True),
        ("from xtpu.tracing import bind\n", False),
        ("from xtpu.dialects.tensor_spec import TensorSpec\n", False),
        ("from .errors import Aborted\n", False),
    ],
)
def test_the_check_sees_function_level_and_package_imports(tmp_path, source, expected):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert any(is_api(m) for _, m in imported_modules(path, "xtpu.runtime")) is expected


def test_the_api_modules_named_in_issue_16_have_no_circle():
    """variables.py imports the strategy's context module, not the strategy,
    and no function-level imports; the strategy imports variables."""
    path = ROOT / "compiler" / "variables.py"
    tree = ast.parse(path.read_text())
    nested = [
        node.lineno
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    assert nested == []
    modules = {m for _, m in imported_modules(path, "xtpu")}
    assert "xtpu.strategy" not in modules and "xtpu.distribute_context" in modules
    context = {m for _, m in imported_modules(ROOT / "compiler" / "distribute_context.py", "xtpu")}
    assert not {"xtpu.strategy", "xtpu.variables"} & context


def test_the_executor_hands_its_store_to_the_host_variable_kernels():
    """A program that adds to a host variable in outside compilation, run by
    an Executable given its own store, updates that store (once per
    replica, TF's rule) and not the process's."""
    import numpy as np

    import xtpu
    from xtpu.runtime.executor import Executable
    from xtpu.runtime.host_variables import HOST_VARIABLES, HostVariableStore

    counter = xtpu.Variable(np.float32(1.0))

    def f(x):
        xtpu.outside_compilation(lambda v: counter.assign_add(v), x)
        return x

    compiled = xtpu.lower(f, [[np.float32(2.0)], [np.float32(3.0)]]).compile()
    store = HostVariableStore()
    store.add(counter._key, np.float32(10.0))
    exe = Executable(compiled.module, host_variables=store)
    exe.run([np.float32(2.0), np.float32(3.0)])
    assert float(store.get(counter._key)) == 10.0 + 2.0 + 3.0
    assert float(counter.numpy()) == 1.0 and float(HOST_VARIABLES.get(counter._key)) == 1.0
    # the default store is the variable's
    compiled([[np.float32(2.0)], [np.float32(3.0)]])
    assert float(counter.numpy()) == 1.0 + 2.0 + 3.0
