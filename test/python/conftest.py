"""pytest configuration shared by test/python.

The tests start ``python3``, ``xtpu-opt``, ``xtpu-run``, ``xdsl-opt`` and
``mpiexec`` as subprocesses (test_cli, test_docs' shell snippets, ...).  They
must be the ones of the environment under test, the bin directory of the
Python that runs pytest (where ``pip install -e '.[test]'`` put them), as
test/lit/lit.cfg.py does for lit: found through an unrelated ``PATH`` entry,
an un-activated venv's tests would run another checkout's xtpu (or fail on a
machine where none is installed).
"""

import os
import sys
import sysconfig

import pytest


def _environment_bin_dirs() -> list[str]:
    dirs = []
    for d in (os.path.dirname(sys.executable), sysconfig.get_path("scripts")):
        if d and os.path.isdir(d) and d not in dirs:
            dirs.append(d)
    return dirs


os.environ["PATH"] = os.pathsep.join(_environment_bin_dirs() + [os.environ.get("PATH", "")])

# XLA's CPU client gets 8 devices (the exported programs of test_stablehlo_*,
# test_fusion, ... run with up to 8 replicas), whichever test module imports
# jax first: the flag only counts before jax is imported.
_DEVICES_FLAG = "--xla_force_host_platform_device_count"
if "jax" not in sys.modules and _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_DEVICES_FLAG}=8").strip()


@pytest.fixture
def logdir(tmp_path):
    """A fresh TensorBoard log folder; any writer a test left open on it is released."""
    import xtpu
    from xtpu.dialects import summaries

    d = str(tmp_path / "logs")
    yield d
    summaries.release(d)  # in case a test left a reopened writer behind
    xtpu.summary.experimental.set_step(None)


def pytest_configure(config):
    # test_transfer_counts.py takes the counts of the tests this session runs
    # (transfer_counter.InSession) instead of running them again.
    import transfer_counter

    config.pluginmanager.register(transfer_counter.InSession(), transfer_counter.PLUGIN)
