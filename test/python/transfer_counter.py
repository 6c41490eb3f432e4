"""A pytest plugin that counts the device<->host transfers of every program
the default pipeline compiles (issue 31).

Loaded with ``-p transfer_counter`` (from ``test/python``), it wraps the
``run_pipeline`` that ``xtpu.replication.program`` compiles programs with:
after a pipeline that outlines outside
compilation, it counts in the compiled module the ``tpu.send_to_host`` ops
(device to host messages), the ``tpu.recv_from_host`` ops (host to device
messages) and the values they carry, summed per test (its node id).  At the
end of the session it writes them as JSON to ``$XTPU_TRANSFERS_OUT``.
``test_transfer_counts.py`` compares them with the counts recorded on main
before issue 31 (``test/data/outside_compilation_transfers.json``).
"""

from __future__ import annotations

import json
import os

import pytest

import xtpu.replication.program as program
from xtpu.dialects import tpu

#: The test files whose programs' transfers ``test_transfer_counts.py`` checks.
FILES = (
    "test_outside_compilation.py",
    "test_outside_compilation_bridge.py",
    "test_host_inline.py",
    "test_gradients.py",
    "test_gradients_control_flow.py",
    "test_gradients_tf_cases.py",
    "test_control_flow.py",
    "test_summary.py",
    "test_api.py",
    "test_strategy.py",
    "test_user_hints.py",
)

COUNTS: dict[str, list[int]] = {}


def count(module) -> list[int]:
    """``[sends, receives, values sent, values received]`` of a module."""
    out = [0, 0, 0, 0]
    for op in module.walk():
        if isinstance(op, tpu.SendToHostOp):
            out[0] += 1
            out[2] += len(op.inputs)
        elif isinstance(op, tpu.RecvFromHostOp):
            out[1] += 1
            out[3] += len(op.results)
    return out


def install() -> None:
    """Wrap ``run_pipeline`` so that it counts into :data:`COUNTS` (once)."""
    original = program.run_pipeline
    if getattr(original, "counts_transfers", False):
        return

    def counting(module, passes, *args, **kwargs):
        result = original(module, passes, *args, **kwargs)
        if any(p.name == "tpu-outline-outside-compilation" for p in passes):
            test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
            total = COUNTS.setdefault(test, [0, 0, 0, 0])
            for i, n in enumerate(count(module)):
                total[i] += n
        return result

    counting.counts_transfers = True
    program.run_pipeline = counting


def pytest_configure(config) -> None:
    install()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config) -> None:
    path = os.environ.get("XTPU_TRANSFERS_OUT")
    if path:
        lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(COUNTS.items())]
        with open(path, "w") as f:
            f.write("{\n" + ",\n".join(lines) + "\n}\n")


# --------------------------------------------------------------------------
# Counting in the session that runs test_transfer_counts.py (conftest.py)
# --------------------------------------------------------------------------

#: The name conftest.py registers :class:`InSession` under.
PLUGIN = "transfer_counts_in_session"
#: test_transfer_counts.py's test, whose counts the session gathers.
CHECK = "test_transfer_counts.py::test_no_program_gets_more_transfers"


class InSession:
    """When one pytest session runs every test of :data:`FILES` (the whole
    suite does) and test_transfer_counts.py, that test need not run them
    again in a subprocess (17-40 s of the suite): conftest.py registers this
    plugin, which counts while they run and runs the check last.

    ``collected``: every test item the session collected, before ``-k``,
    ``--deselect`` and the like; :meth:`counts` is None unless every one of
    FILES' ran here and the check runs after them."""

    def __init__(self):
        self.collected: dict[str, set[str]] = {}
        self.expected: set[str] | None = None
        self.failed: set[str] = set()
        self.done: set[str] = set()

    @staticmethod
    def _file(nodeid: str) -> str:
        return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]

    def pytest_itemcollected(self, item) -> None:
        self.collected.setdefault(self._file(item.nodeid), set()).add(item.nodeid)

    @pytest.hookimpl(trylast=True)  # after -k / --deselect took their items out
    def pytest_collection_modifyitems(self, session, config, items) -> None:
        checks = [i for i in items if i.nodeid.endswith(CHECK)]
        if len(checks) != 1:
            return
        selected: dict[str, set[str]] = {}
        for i in items:
            selected.setdefault(self._file(i.nodeid), set()).add(i.nodeid)
        if not all(self.collected.get(f) and selected.get(f) == self.collected[f] for f in FILES):
            return
        self.expected = set().union(*(self.collected[f] for f in FILES))
        items.remove(checks[0])
        items.append(checks[0])  # the check runs after every test it counts
        install()

    def pytest_runtest_logreport(self, report) -> None:
        if self.expected is not None and report.nodeid in self.expected:
            if report.failed:
                self.failed.add(report.nodeid)
            if report.when == "teardown":
                self.done.add(report.nodeid)

    def counts(self) -> dict[str, list[int]] | None:
        """The counts of FILES' tests as ``-p transfer_counter`` on them
        alone gives them, or None when this session does not run them all
        before the check (then the check runs them in a subprocess)."""
        if self.expected is None or self.done != self.expected:
            return None
        assert not self.failed, f"tests whose transfers are counted failed: {sorted(self.failed)}"
        return {t: list(v) for t, v in COUNTS.items() if t in self.expected}
