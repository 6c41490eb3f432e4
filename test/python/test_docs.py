"""The documentation holds: the generated op reference and pass pages equal
what their definitions generate, and every code block of the README and
docs/ runs and prints what the text says (doc_snippets.py)."""

import functools
import re
import subprocess
import textwrap
from pathlib import Path

import doc_snippets
import pytest

from xtpu.tools import docgen

ROOT = doc_snippets.ROOT
HAND_WRITTEN = ["README.md", "docs/logical-devices.md", "docs/optimizers.md"]


def test_generated_docs_equal_the_definitions():
    stale = docgen.stale(ROOT)
    assert stale == [], (
        f"{', '.join(stale)} differ from the op and pass definitions: "
        "run `python -m xtpu.tools.docgen` and commit the result"
    )


def test_every_op_and_pass_has_its_entry():
    from xtpu.dialects import DIALECTS
    from xtpu.passes import ALL_PASSES

    ops = (ROOT / "docs/ops.md").read_text()
    for d in DIALECTS:
        for op in d.operations:
            assert f"### `{op.name}`" in ops
            if getattr(op, "assembly_format", None):
                assert op.assembly_format in ops
    for name in ALL_PASSES:
        assert (ROOT / "docs/passes" / f"{name}.md").read_text().startswith("<!-- Generated")


@pytest.mark.parametrize("doc", HAND_WRITTEN)
def test_every_snippet_runs_and_prints_what_the_text_says(doc, tmp_path):
    failures, skipped = doc_snippets.run_file(ROOT / doc, tmp_path)
    assert not failures, "\n".join(map(str, failures))
    for reason in skipped:
        assert "skip " not in reason and reason.split(": ", 1)[1], f"a skip needs its reason: {reason}"


def test_the_checker_catches_wrong_output_and_what_the_repl_rejects(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        textwrap.dedent("""\
        ```python
        import numpy as np
        np.float32(2) * 3   # -> 7.0
        ```

        ```python
        def f(x):
            y = x + 1

            return y
        ```

        <!-- snippet-output: "a\\nb" -->
        ```mlir
        a
        c
        ```

        ```mlir
        unchecked
        ```
        """)
    )
    import doc_snippets as ds

    ds_root, ds.ROOT = ds.ROOT, tmp_path
    try:
        failures, _ = ds.run_file(doc, tmp_path)
    finally:
        ds.ROOT = ds_root
    messages = [f.message for f in failures]
    assert len(messages) == 4, messages
    assert "6.0)', the text says '7.0'" in messages[0]
    assert "IndentationError" in messages[1]  # the blank line ended the function, as in the REPL
    assert "does not print the line 'c'" in messages[2]
    assert "no <!-- snippet-output" in messages[3]


def test_the_checker_compares_numbers_not_their_spelling():
    assert doc_snippets.same("[(array(3., dtype=float32),)]", "[(3.0,)]")
    assert not doc_snippets.same("[(array(3., dtype=float32),)]", "[(4.0,)]")
    assert doc_snippets.same_lines("b 2\na 1\n", ["(any order)", "a 1", "b 2"])
    assert doc_snippets.contains_in_order("  %1 = x %a, %b : t\n  %2 = y\n", "%1 = x ... : t\n...\n%2 = y") is None
    assert doc_snippets.contains_in_order("%2 = y\n%1 = x\n", "%1 = x\n%2 = y") == "%2 = y"


PATH_LIKE = re.compile(r"`([\w./*-]+)`|\]\(([\w./#*-]+)\)")
REPO_DIRS = (
    "../",
    "compiler/",
    "dialects/",
    "passes/",
    "runtime/",
    "test/",
    "examples/",
    "benchmarks/",
    "docs/",
    "xtpu/",
)


@functools.cache
def committed() -> frozenset[str] | None:
    """The files git tracks under ROOT and their folders (relative paths), or
    None outside a git checkout (an unpacked sdist): a file only in one
    working tree is not in the repository a clone or CI sees."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    files = [f for f in out.split("\0") if f]
    return frozenset(files) | {str(Path(f).parents[i]) for f in files for i in range(len(Path(f).parents) - 1)}


def in_repository(path: Path) -> bool:
    if not path.resolve().is_relative_to(ROOT) or not path.exists():
        return False
    tracked = committed()
    return tracked is None or str(path.resolve().relative_to(ROOT)) in tracked | {"."}


@pytest.mark.parametrize("doc", HAND_WRITTEN + ["CHANGELOG.md"])
def test_every_path_the_docs_name_exists_in_the_repository(doc):
    """A reader of the repository, or a clean clone, can open every file
    the text names: committed to git (not only present in this working
    tree), no `../shared/...`, no `xtpu/...` package paths (the folders are
    compiler/, dialects/, passes/, runtime/)."""
    text = (ROOT / doc).read_text()
    missing = []
    for m in PATH_LIKE.finditer(text):
        path = (m.group(1) or m.group(2)).split("#")[0]
        if not path.startswith(REPO_DIRS):
            continue
        here = (ROOT / doc).parent if m.group(2) else ROOT  # links are relative to the page
        found = any(map(in_repository, here.glob(path))) if "*" in path else in_repository(here / path)
        if not found:
            missing.append(path + (" (in this working tree, not committed)" if (here / path).exists() else ""))
    assert missing == [], f"{doc} names files a clone of the repository lacks"
    assert "the seed's" not in text and "seed patch" not in text  # name TF's documents instead


def test_a_path_only_in_the_working_tree_is_not_in_the_repository(tmp_path, monkeypatch):
    """What a clean clone lacks fails the path check here too: a file git
    does not track (new, or ignored like *.egg-info/) is missing."""
    import test_docs

    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/kept.md").write_text("x")
    (tmp_path / "docs/new.md").write_text("x")
    run("add", "docs/kept.md")
    monkeypatch.setattr(test_docs, "ROOT", tmp_path.resolve())
    test_docs.committed.cache_clear()
    try:
        assert [in_repository(tmp_path / p) for p in ("docs/kept.md", "docs", "docs/new.md", "docs/gone.md")] == [
            True,
            True,
            False,
            False,
        ]
    finally:
        test_docs.committed.cache_clear()
