"""The layers of xtpu, read from the imports of its source files.

From the bottom: the IR (``xtpu.dialects``), ``xtpu.passes``,
``xtpu.runtime``, the tracer core (``xtpu.core``), then the API's rooms
(``ops``, ``autodiff``, ``replication``, ``distribute``, ``train``,
``tools``) and the public namespaces.  Each imports only the layers below,
at module level or inside a function (docs/architecture.md).

The contract is import-linter's (``[tool.importlinter]`` in pyproject.toml)
over grimp's import graph.  The folders map onto one package through
``package-dir``, which grimp cannot see, so the checks run in a process
that finds ``xtpu`` in a tree of links joining the four folders.
"""

import ast
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWER = {"dialects": "xtpu.dialects", "passes": "xtpu.passes", "runtime": "xtpu.runtime"}
FOLDERS = {"dialects": "dialects", "passes": "passes", "runtime": "runtime"}


@pytest.fixture(scope="module")
def linked_tree(tmp_path_factory):
    """A folder holding ``xtpu/`` as one tree: compiler/'s entries and the
    dialects/, passes/ and runtime/ folders, as symbolic links."""
    base = tmp_path_factory.mktemp("tree")
    pkg = base / "xtpu"
    pkg.mkdir()
    for entry in (ROOT / "compiler").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name, folder in FOLDERS.items():
        (pkg / name).symlink_to(ROOT / folder)
    return base


def run_on_tree(base: pathlib.Path, code: str) -> subprocess.CompletedProcess:
    """Run ``code`` where ``import xtpu`` finds the linked tree (the editable
    install's finder is dropped: it maps ``xtpu`` to compiler/ alone)."""
    prelude = textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(base)!r})
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
        """)
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=base,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=300,
    )


def test_import_linter_contracts_hold(linked_tree):
    """The layers contract, the runtime services below the dialects, the
    independence of passes and runtime, and no room importing a public
    namespace (pyproject.toml): every contract kept."""
    proc = run_on_tree(
        linked_tree,
        f"""
        from importlinter.cli import lint_imports
        sys.exit(lint_imports(config_filename={str(ROOT / "pyproject.toml")!r}, no_cache=True))
        """,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BROKEN" not in proc.stdout and "0 broken" in proc.stdout


GRAPH = """
import json
import grimp
g = grimp.build_graph("xtpu", cache_dir=None)
edges = [(m, i) for m in g.modules for i in g.find_modules_directly_imported_by(m)]
cycles = [[a, b] for a, b in edges if g.chain_exists(importer=b, imported=a)]
print(json.dumps({"modules": len(g.modules), "edges": len(edges), "cycles": cycles}))
"""


def test_the_import_graph_has_no_cycle(linked_tree):
    """No import of any xtpu module (function-level imports included) lies
    on a circle: for every direct import a -> b, b never reaches a."""
    proc = run_on_tree(linked_tree, GRAPH)
    assert proc.returncode == 0, proc.stderr
    graph = json.loads(proc.stdout)
    assert graph["modules"] > 100 and graph["edges"] > 300  # the whole package, all four folders
    assert graph["cycles"] == []


def test_the_cycle_check_finds_a_cycle(tmp_path):
    """The check itself: a package whose two modules import each other
    (one of them inside a function) is a cycle."""
    pkg = tmp_path / "xtpu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from xtpu import b\n")
    (pkg / "b.py").write_text("def f():\n    from xtpu import a\n")
    proc = run_on_tree(tmp_path, GRAPH)
    assert proc.returncode == 0, proc.stderr
    assert sorted(map(sorted, json.loads(proc.stdout)["cycles"])) == [["xtpu.a", "xtpu.b"], ["xtpu.a", "xtpu.b"]]


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
    """Whether ``module`` is above the IR and runtime layers: the tracer
    core, the API's rooms or a public namespace."""
    parts = module.split(".")
    if parts[0] != "xtpu":
        return False
    return len(parts) == 1 or parts[1] not in LOWER


def violations() -> list[str]:
    found = []
    for folder, package in LOWER.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            for line, module in imported_modules(path, package):
                if is_api(module):
                    found.append(f"{folder}/{path.name}:{line} imports {module}")
    return found


def test_ir_and_runtime_never_import_the_tracer_or_the_api():
    """No module in dialects/, passes/ or runtime/ imports from the tracer
    or the API, at module level or inside a function (the same fact as the
    layers contract, read straight from the source, also for `from xtpu
    import x` forms)."""
    assert violations() == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from xtpu.distribute.variables import Variable\n", True),
        ("def f():\n    from xtpu.distribute import strategy\n", True),
        ("import xtpu.replication\n", True),
        ("from xtpu.core.tracing import bind\n", True),
        ("from xtpu import pytree\n", True),
        ("from xtpu.dialects.tensor_spec import TensorSpec\n", False),
        ("from .errors import Aborted\n", False),
    ],
)
def test_the_check_sees_function_level_and_package_imports(tmp_path, source, expected):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert any(is_api(m) for _, m in imported_modules(path, "xtpu.runtime")) is expected


def function_level_imports(path: pathlib.Path) -> list[int]:
    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
        if isinstance(node, ast.ImportFrom) and ((node.module or "").startswith("xtpu") or node.level)
    ]


def test_no_function_level_import_of_xtpu_modules():
    """With no cycle left, no module imports another xtpu module inside a
    function: every dependency is declared at the top, where the layers
    contract and the reader see it."""
    found = {}
    for folder in ["compiler", *FOLDERS.values()]:
        for path in sorted((ROOT / folder).rglob("*.py")):
            lines = function_level_imports(path)
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}


def test_compiler_is_rooms_with_at_most_15_modules_at_its_top():
    """compiler/ holds the public namespaces at its top and the rest in
    subpackages, each of which says what it holds and what it may import."""
    top = sorted(p.name for p in (ROOT / "compiler").glob("*.py"))
    assert len(top) <= 15, top
    for init in sorted((ROOT / "compiler").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "import" in doc and len(doc) > 80, f"{init.relative_to(ROOT)}: say what it holds and may import"


def test_the_variables_and_the_strategy_have_no_circle():
    """variables.py imports the distribution context, not the strategy; the
    context imports neither the strategy nor the variables."""
    path = ROOT / "compiler" / "distribute" / "variables.py"
    modules = {m for _, m in imported_modules(path, "xtpu.distribute")}
    assert "xtpu.distribute.strategy" not in modules and "xtpu.distribute.context" in modules
    context = {m for _, m in imported_modules(ROOT / "compiler" / "distribute" / "context.py", "xtpu.distribute")}
    assert not {"xtpu.distribute.strategy", "xtpu.distribute.variables"} & context


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
