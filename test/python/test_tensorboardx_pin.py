"""What xtpu takes from tensorboardX, pinned: the public ``RecordWriter``
and ``summary`` builders, and the generated protocol-buffer modules under
``tensorboardX.proto`` (a path tensorboardX does not promise to keep), for
the versions ``pyproject.toml`` allows (2.6.x)."""

import importlib
import re
import tomllib
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_tensorboardx_is_in_the_pinned_range():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if d.lower().startswith("tensorboardx")]
    lo, hi = re.fullmatch(r"tensorboardX>=([\d.]+),<([\d.]+)", spec).groups()
    version = tuple(int(x) for x in metadata.version("tensorboardX").split(".")[:2])
    assert tuple(map(int, lo.split("."))) <= version < tuple(map(int, hi.split(".")))


@pytest.mark.parametrize(
    "module, names",
    [
        ("tensorboardX", ["RecordWriter"]),
        ("tensorboardX.summary", ["scalar", "histogram"]),
        ("tensorboardX.proto.event_pb2", ["Event"]),
        ("tensorboardX.proto.summary_pb2", ["HistogramProto", "Summary", "SummaryMetadata"]),
    ],
)
def test_every_name_xtpu_uses_is_there(module, names):
    mod = importlib.import_module(module)
    for name in names:
        assert hasattr(mod, name), f"{module}.{name}"


def test_the_file_written_is_tfs_event_file(tmp_path):
    """The first record names the format, the next holds the scalar; the
    framing is checked by test_summary's reader (CRCs computed there)."""
    from test_summary import read_events

    import xtpu
    from xtpu.dialects import summaries

    logdir = str(tmp_path)
    writer = xtpu.summary.create_file_writer(logdir)
    with writer.as_default():
        xtpu.summary.scalar("loss", np.float32(0.25), step=3)
    writer.flush()
    path = summaries.event_file(logdir)
    assert re.fullmatch(r"events\.out\.tfevents\.\d{10}\.[^/]+\.\d+\.\d+\.v2", Path(path).name)
    events = read_events(logdir)
    assert events[0].file_version == "brain.Event:2"
    assert [(v.tag, v.simple_value, e.step) for e in events[1:] for v in e.summary.value] == [("loss", 0.25, 3)]
    writer.close()
