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


def pytest_configure(config) -> None:
    original = program.run_pipeline

    def counting(module, passes, *args, **kwargs):
        result = original(module, passes, *args, **kwargs)
        if any(p.name == "tpu-outline-outside-compilation" for p in passes):
            test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
            total = COUNTS.setdefault(test, [0, 0, 0, 0])
            for i, n in enumerate(count(module)):
                total[i] += n
        return result

    program.run_pipeline = counting


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config) -> None:
    path = os.environ.get("XTPU_TRANSFERS_OUT")
    if path:
        lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(COUNTS.items())]
        with open(path, "w") as f:
            f.write("{\n" + ",\n".join(lines) + "\n}\n")
