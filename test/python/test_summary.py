"""xtpu.summary against TF 2's tf.summary: event files TensorBoard reads.

The event files are read back by hand: TFRecord framing (length, masked
CRC-32C of the length, payload, masked CRC-32C of the payload) checked with
tensorboardX's CRC, payloads decoded with tensorboardX's ``Event`` protobuf.
"""

import glob
import os
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest
from tensorboardX.crc32c import crc32c
from tensorboardX.proto.event_pb2 import Event

import xtpu
from xtpu.dialects import summaries


def _masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_events(logdir):
    """Every Event in the event files of ``logdir``, checking the framing."""
    events = []
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        i = 0
        while i < len(data):
            header = data[i : i + 8]
            (length,) = struct.unpack("<Q", header)
            (header_crc,) = struct.unpack("<I", data[i + 8 : i + 12])
            assert header_crc == _masked_crc(header), f"bad length CRC in {path}"
            payload = data[i + 12 : i + 12 + length]
            (payload_crc,) = struct.unpack("<I", data[i + 12 + length : i + 16 + length])
            assert payload_crc == _masked_crc(payload), f"bad payload CRC in {path}"
            events.append(Event.FromString(payload))
            i += 16 + length
    return events


def scalars(logdir):
    """``[(tag, value, step), ...]`` of the scalar events in ``logdir``, in order."""
    out = []
    for e in read_events(logdir):
        for v in e.summary.value:
            out.append((v.tag, v.simple_value, e.step))
    return out


# --------------------------------------------------------------------------
# Eager
# --------------------------------------------------------------------------


def test_eager_scalars_round_trip(logdir):
    writer = xtpu.summary.create_file_writer(logdir)
    assert writer.logdir == os.path.abspath(logdir)
    files = glob.glob(os.path.join(logdir, "events.out.tfevents.*.v2"))
    assert len(files) == 1  # created at once, with TF's default suffix
    with writer.as_default():
        assert xtpu.summary.scalar("loss", 0.5, step=1) is True
        assert xtpu.summary.scalar("loss", np.float64(0.25), step=2) is True
        assert xtpu.summary.scalar("eval/count", np.int64(42), step=np.int32(2)) is True
        assert xtpu.summary.scalar("flag", True, step=3) is True  # TF casts bool to float32
        assert xtpu.summary.scalar("big_step", np.float32(-1.5), step=2**40) is True
    events = read_events(logdir)
    assert events[0].file_version == "brain.Event:2"
    assert scalars(logdir) == [
        ("loss", 0.5, 1),
        ("loss", 0.25, 2),
        ("eval/count", 42.0, 2),
        ("flag", 1.0, 3),
        ("big_step", -1.5, 2**40),
    ]
    writer.close()


def test_description_and_float32_storage(logdir):
    writer = xtpu.summary.create_file_writer(logdir)
    with writer.as_default(step=5):
        xtpu.summary.scalar("lr", 0.1, description="learning rate")
    (event,) = [e for e in read_events(logdir) if e.summary.value]
    (value,) = event.summary.value
    assert value.metadata.summary_description == "learning rate"
    assert value.metadata.plugin_data.plugin_name == "scalars"
    assert value.simple_value == np.float32(0.1)  # stored as float32, as TF does
    writer.close()


def test_default_step_from_as_default_and_set_step(logdir):
    writer = xtpu.summary.create_file_writer(logdir)
    assert xtpu.summary.experimental.get_step() is None
    xtpu.summary.experimental.set_step(10)
    with writer.as_default(step=20):
        assert xtpu.summary.experimental.get_step() == 20
        xtpu.summary.scalar("a", 1.0)
        xtpu.summary.scalar("a", 2.0, step=21)  # an explicit step wins
    assert xtpu.summary.experimental.get_step() == 10  # restored on exit
    with writer.as_default():  # step=None leaves the default step alone
        xtpu.summary.scalar("a", 3.0)
    assert scalars(logdir) == [("a", 1.0, 20), ("a", 2.0, 21), ("a", 3.0, 10)]
    writer.close()


def test_no_default_writer_returns_false_and_writes_nothing(logdir, tmp_path):
    assert xtpu.summary.scalar("loss", 1.0, step=1) is False
    assert xtpu.summary.scalar("loss", 1.0) is False  # no step needed without a writer
    assert list(tmp_path.iterdir()) == []
    writer = xtpu.summary.create_file_writer(logdir)  # made, but not the default
    assert xtpu.summary.scalar("loss", 1.0, step=1) is False
    writer.flush()
    assert scalars(logdir) == []
    with writer.as_default():
        pass
    assert xtpu.summary.scalar("loss", 1.0, step=1) is False  # the default is gone again
    writer.close()
    assert scalars(logdir) == []


def test_missing_step_raises_value_error(logdir):
    writer = xtpu.summary.create_file_writer(logdir)
    with writer.as_default(), pytest.raises(ValueError, match=r"No step set\. Please specify one"):
        xtpu.summary.scalar("loss", 1.0)
    writer.close()
    assert scalars(logdir) == []


def test_non_scalar_data_names_the_users_line(logdir):
    with pytest.raises(ValueError) as err:
        xtpu.summary.scalar("loss", np.ones(3, np.float32), step=1)  # checked even without a writer
    assert "hlo.summary_scalar: data must be a scalar" in str(err.value)
    assert "float32[3]" in str(err.value)
    assert "(at test_summary.py:" in str(err.value)
    writer = xtpu.summary.create_file_writer(logdir)
    with writer.as_default(step=1):
        with pytest.raises(ValueError, match=r"data must be a scalar .* \(at test_summary\.py:\d+\)"):
            xtpu.summary.scalar("loss", [[1.0]])
        with pytest.raises(
            ValueError, match=r"step must be an int64 or int32 scalar, got float32\[\] \(at test_summary"
        ):
            xtpu.summary.scalar("loss", 1.0, step=1.5)
        with pytest.raises(ValueError, match=r"data must be a scalar .*got string\[\]"):
            xtpu.summary.scalar("loss", "high")
    writer.close()
    assert scalars(logdir) == []


def test_writer_lifecycle(logdir):
    with pytest.raises(ValueError, match="logdir cannot be None"):
        xtpu.summary.create_file_writer(None)
    writer = xtpu.summary.create_file_writer(logdir, max_queue=100, flush_millis=10**7, filename_suffix=".mine")
    assert glob.glob(os.path.join(logdir, "*.mine"))
    writer.set_as_default(step=4)
    try:
        xtpu.summary.scalar("x", 1.0)
        assert scalars(logdir) == []  # buffered: max_queue=100
        writer.flush()
        assert scalars(logdir) == [("x", 1.0, 4)]
        xtpu.summary.scalar("x", 2.0)
        writer.close()  # flushes
        writer.close()  # a second close does nothing
        assert scalars(logdir) == [("x", 1.0, 4), ("x", 2.0, 4)]
        with pytest.raises(RuntimeError, match="already closed"):
            writer.as_default()
    finally:
        xtpu.summary._state.writer = None


def test_max_queue_flushes_when_exceeded(logdir):
    writer = xtpu.summary.create_file_writer(logdir, max_queue=2, flush_millis=10**7)
    with writer.as_default():
        for step in range(3):
            xtpu.summary.scalar("q", float(step), step=step)
            # TF's SummaryFileWriter: flush when more than max_queue events wait
            assert len(scalars(logdir)) == (3 if step == 2 else 0)
    writer.close()


def test_writers_of_one_directory_share_an_event_file(logdir):
    a = xtpu.summary.create_file_writer(logdir)
    b = xtpu.summary.create_file_writer(logdir)
    with a.as_default():
        xtpu.summary.scalar("s", 1.0, step=1)
    with b.as_default():
        xtpu.summary.scalar("s", 2.0, step=2)
    a.close()  # b still open: the file stays open
    with b.as_default():
        xtpu.summary.scalar("s", 3.0, step=3)
    b.close()
    assert len(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))) == 1
    assert scalars(logdir) == [("s", 1.0, 1), ("s", 2.0, 2), ("s", 3.0, 3)]


def test_default_writer_is_per_thread(logdir):
    writer = xtpu.summary.create_file_writer(logdir)
    seen = []
    with writer.as_default(step=1):
        t = threading.Thread(target=lambda: seen.append(xtpu.summary.scalar("t", 1.0, step=1)))
        t.start()
        t.join()
    assert seen == [False]  # TF's _SummaryState is thread-local
    writer.close()
    assert scalars(logdir) == []


# --------------------------------------------------------------------------
# Inside xtpu.replicate
# --------------------------------------------------------------------------


def test_replicate_one_replica_writes_once_per_execution(logdir):
    writer = xtpu.summary.create_file_writer(logdir)

    def step_fn(x, step):
        y = x * 2.0
        xtpu.summary.scalar("y", y, step=step)
        return y

    with writer.as_default():
        lowered = xtpu.lower(step_fn, [[np.float32(1.0), np.int64(0)]])
        assert 'hlo.summary_scalar "y"' in lowered.as_text()
        assert "tpu.replica_id" not in lowered.as_text()  # one replica: always replica 0
        for step in range(3):
            out = xtpu.replicate(step_fn, [[np.float32(step), np.int64(step)]])
            assert float(out[0][0]) == 2.0 * step
    assert scalars(logdir) == [("y", 0.0, 0), ("y", 2.0, 1), ("y", 4.0, 2)]
    writer.close()


def test_replicate_two_replicas_record_replica_zero_only(logdir):
    # TF: ReplicaContext sets is_recording_distribution_strategy to
    # replica_id_in_sync_group == 0, so one event per execution, replica 0's.
    writer = xtpu.summary.create_file_writer(logdir)

    def step_fn(x):
        loss = xtpu.math.reduce_sum(x)
        xtpu.summary.scalar("loss", loss)
        return loss

    with writer.as_default(step=7):
        compiled = xtpu.lower(step_fn, [[np.ones(2, np.float32)], [np.ones(2, np.float32)]]).compile()
        # Gated on the replica id; on the host (a device rejects a HOST_ONLY op).
        assert "if replica" in compiled.as_text()
        for k in range(2):
            out = compiled([[np.full(2, 1.0 + k, np.float32)], [np.full(2, 10.0 + k, np.float32)]])
            assert [float(o[0]) for o in out] == [2.0 + 2 * k, 20.0 + 2 * k]
    assert scalars(logdir) == [("loss", 2.0, 7), ("loss", 4.0, 7)]
    writer.close()


def test_replicate_without_writer_emits_nothing(logdir):
    results = []

    def step_fn(x):
        results.append(xtpu.summary.scalar("loss", 3.0, step=1))  # a Python value
        return x * x

    lowered = xtpu.lower(step_fn, [[np.float32(1.0)], [np.float32(2.0)]])
    assert results == [False]
    assert "summary" not in lowered.as_text() and "hlo.constant" not in lowered.as_text()
    assert not os.path.exists(logdir)


def test_replicate_in_outside_compilation_and_while_loop(logdir):
    writer = xtpu.summary.create_file_writer(logdir)

    def step_fn(x):
        def host(v):
            xtpu.summary.scalar("host", v, step=100)
            return v

        xtpu.outside_compilation(host, x)

        def body(i, v):
            xtpu.summary.scalar("loop", v, step=i)
            return i + 1, v * 2.0

        return xtpu.while_loop(lambda i, v: i < 3, body, (np.int32(0), x))[1]

    with writer.as_default():
        out = xtpu.replicate(step_fn, [[np.float32(1.0)], [np.float32(5.0)]])
    assert [float(o[0]) for o in out] == [8.0, 40.0]
    assert scalars(logdir) == [("host", 1.0, 100), ("loop", 1.0, 0), ("loop", 2.0, 1), ("loop", 4.0, 2)]
    writer.close()


def test_traced_errors_name_the_users_line(logdir):
    writer = xtpu.summary.create_file_writer(logdir)

    def bad_data(x):
        xtpu.summary.scalar("x", x, step=1)
        return x

    def no_step(x):
        xtpu.summary.scalar("x", x)
        return x

    with writer.as_default():
        with pytest.raises(ValueError, match=r"data must be a scalar .*float32\[2\] \(at test_summary\.py:\d+\)"):
            xtpu.replicate(bad_data, [[np.ones(2, np.float32)]])
        with pytest.raises(ValueError, match=r"No step set"):
            xtpu.replicate(no_step, [[np.float32(1.0)]])
    writer.close()
    assert scalars(logdir) == []


def test_program_run_after_its_writer_closed_reopens_the_directory(logdir):
    writer = xtpu.summary.create_file_writer(logdir)

    def step_fn(x):
        xtpu.summary.scalar("x", x, step=1)
        return x

    with writer.as_default():
        compiled = xtpu.lower(step_fn, [[np.float32(1.0)]]).compile()
        compiled([[np.float32(1.0)]])
    writer.close()
    compiled([[np.float32(2.0)]])  # the logdir is baked in: a new event file
    summaries.flush(logdir)
    assert len(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))) == 2
    assert sorted(scalars(logdir)) == [("x", 1.0, 1), ("x", 2.0, 1)]


def _open_writer_at_the_barrier(logdir, barrier, errors):
    barrier.wait()
    try:
        xtpu.summary.create_file_writer(logdir).close()
    except Exception:  # noqa: BLE001 - reported to the parent
        import traceback

        errors.put(traceback.format_exc())


def _race_for_one_logdir(root, trials=10, processes=6):
    """``trials`` times, ``processes`` forked processes open one new logdir
    at once (a barrier); returns the failures (none: an empty list)."""
    import multiprocessing as mp

    # Loaded before the forks (as in a rank, or in the suite after the tests
    # above): tensorboardX and its protobufs, imported by each child, took
    # 0.5 s of CPU each and spread the children out.
    xtpu.summary.create_file_writer(os.path.join(root, "warm-up")).close()
    ctx = mp.get_context("fork")
    errors = ctx.Queue()
    failures = []
    for trial in range(trials):
        logdir = os.path.join(root, f"run{trial}", "logs")
        barrier = ctx.Barrier(processes)
        procs = [
            ctx.Process(target=_open_writer_at_the_barrier, args=(logdir, barrier, errors)) for _ in range(processes)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        if [p.exitcode for p in procs] != [0] * processes:
            failures.append(f"trial {trial}: exit codes {[p.exitcode for p in procs]}")
        while not errors.empty():
            failures.append(f"trial {trial}: {errors.get()}")
        if len(os.listdir(logdir)) != processes:  # one event file each
            failures.append(f"trial {trial}: {sorted(os.listdir(logdir))}")
    return failures


def test_processes_opening_one_logdir_at_once(tmp_path):
    """MPI ranks open the same logdir at the same moment: tensorboardX's
    check-then-makedirs raced (FileExistsError on one rank of train_digits).

    The processes fork from a fresh interpreter that imported xtpu (as a
    rank does), not from the suite's: forked from a process of more than a
    GB (JAX and every earlier test loaded), each fork took 0.1-0.5 s, and
    the 60 forks 11-22 s of the suite."""
    script = (
        f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
        "from test_summary import _race_for_one_logdir\n"
        f"print(repr(_race_for_one_logdir({str(tmp_path)!r})))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout + proc.stderr
    assert sorted(os.listdir(tmp_path)) == [f"run{trial}" for trial in range(10)] + ["warm-up"]
