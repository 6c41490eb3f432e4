"""No program of the outside-compilation tests gets more device<->host
transfers than before issue 31's folding, simplification and merging.

``test/data/outside_compilation_transfers.json`` holds, per test of the
files in :data:`FILES`, the ``tpu.send_to_host`` / ``tpu.recv_from_host`` ops
of every module the default pipeline compiled and the values they carry,
recorded with the ``transfer_counter`` plugin by the compiler of main at
f229deb (before issue 31) on these test files as they are now (the programs
of two tests in ``test_host_inline.py`` take a device value since issue 31,
so that their clusters stay apart: the counts are the old compiler's on the
new programs; that commit's ``run_pipeline`` was ``xtpu.replication``'s, where
the plugin wrapped it).  To record them again, run from ``test/python`` with
an install of that commit::

    XTPU_TRANSFERS_OUT=../data/outside_compilation_transfers.json \
        python -m pytest -q -p transfer_counter -p no:cacheprovider <FILES>

This test runs the same files with the plugin and the current compiler and
compares, test by test.  When its own session runs every test of those files
(the whole suite in one process, ``-n 0``), it takes their counts from that
session instead of running them again (``transfer_counter.InSession``,
registered by conftest.py; it runs this test after them); otherwise (a
pytest-xdist worker runs some of them) it runs them in a subprocess, in one
process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import transfer_counter
from transfer_counter import FILES

HERE = Path(__file__).parent
BEFORE = HERE.parent / "data" / "outside_compilation_transfers.json"
KINDS = ("sends", "receives", "values sent", "values received")


def test_no_program_gets_more_transfers(tmp_path, request):
    in_session = request.config.pluginmanager.get_plugin(transfer_counter.PLUGIN)
    after = in_session.counts() if in_session is not None else None
    if after is None:  # this session does not run every test of FILES: run them apart
        after = counts_in_a_subprocess(tmp_path)
    before = json.loads(BEFORE.read_text())
    assert set(before) <= set(after), f"recorded tests no longer run: {sorted(set(before) - set(after))}"
    # A test added since the recording has no old count to compare with;
    # one that moves nothing between device and host cannot have more.
    added = {t: after[t] for t in set(after) - set(before) if any(after[t])}
    assert not added, f"tests added since the recording transfer: record the counts again on main: {added}"
    worse = {t: (before[t], after[t]) for t in before if any(a > b for a, b in zip(after[t], before[t]))}
    assert not worse, f"more transfers than before ({', '.join(KINDS)}): {worse}"
    # The counts are real: some programs transfer, and the issue's
    # simplifications removed some transfers.
    assert sum(sum(v) for v in after.values()) > 0
    assert sum(sum(v) for v in after.values()) < sum(sum(v) for v in before.values())


def counts_in_a_subprocess(tmp_path) -> dict[str, list[int]]:
    """FILES run by pytest with the ``transfer_counter`` plugin: the counts
    of their tests."""
    out = tmp_path / "after.json"
    env = dict(os.environ, XTPU_TRANSFERS_OUT=str(out))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "transfer_counter", "-p", "no:cacheprovider", *FILES],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())
