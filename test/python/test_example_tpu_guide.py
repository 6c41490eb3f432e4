"""examples/tpu_guide_training_loop.py (issue 15) on a few steps: the TF 2
TPU guide's training loop (xtpu.function around strategy.run, a Dataset
through distribute_datasets_from_function, Variables, SGD, a checkpoint
restored mid-training, TensorBoard scalars and a histogram)."""

import os
import re
import sys
import tempfile

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
sys.path.insert(0, os.path.dirname(__file__))

pytest.importorskip("sklearn")

import tpu_guide_training_loop as guide  # noqa: E402
from test_summary import read_events  # noqa: E402

import xtpu  # noqa: E402


@pytest.mark.parametrize("replicas", [2, 8])
def test_guide_loop_restores_identically_and_logs(replicas, tmp_path, capsys):
    logdir, ckdir = str(tmp_path / "logs"), str(tmp_path / "ckpt")
    rc = guide.main(
        [
            "--replicas",
            str(replicas),
            "--steps",
            "12",
            "--save-at",
            "6",
            "--log-every",
            "4",
            "--logdir",
            logdir,
            "--checkpoint-dir",
            ckdir,
            "--min-accuracy",
            "0",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "the remaining 6 steps match bit for bit" in out and "(1 trace)" in out
    assert os.path.exists(os.path.join(ckdir, "ckpt-1.npz"))
    assert xtpu.train.latest_checkpoint(ckdir) == os.path.join(ckdir, "ckpt-1")
    xtpu.dialects.summaries.release(logdir)

    events = read_events(logdir)
    losses = [(e.step, v.simple_value) for e in events for v in e.summary.value if v.tag == "train/loss"]
    histos = [(e.step, v.histo) for e in events for v in e.summary.value if v.tag == "weights/conv1"]
    # Steps 1..12, then 7..12 again after the restore (the same values).
    assert [s for s, _ in losses] == list(range(1, 13)) + list(range(7, 13))
    assert [v for _, v in losses[6:12]] == [v for _, v in losses[12:]]
    assert [s for s, _ in histos] == [4, 8, 12, 8, 12]
    assert all(h.num == 3 * 3 * 1 * 32 for _, h in histos)

    # The first step's loss against JAX: the initial weights (the model's
    # He initialization, drawn in its order) and the first global batch (the
    # replicas' per-replica batches, in replica order).
    import jax

    x_train, y_train, _, _ = guide.load_data(0)
    rng = np.random.default_rng(0)
    shapes = [(3, 3, 1, 32), (3, 3, 32, 32), (512, 256), (256, 128), (128, 10)]
    ws = [(rng.standard_normal(s) * np.sqrt(2.0 / np.prod(s[:-1]))).astype(np.float32) for s in shapes]
    ds = xtpu.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1024, seed=0).batch(64 // replicas)
    batches = list(ds.take(replicas).as_numpy_iterator())
    x = np.concatenate([b[0] for b in batches]).reshape(-1, 8, 8, 1)
    y = np.concatenate([b[1] for b in batches])
    for k in ws[:2]:
        x = np.maximum(
            np.asarray(jax.lax.conv_general_dilated(x, k, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))),
            0,
        )
    h = x.reshape(len(y), -1)
    h = np.maximum(np.maximum(h @ ws[2], 0) @ ws[3], 0)
    logits = h @ ws[4]
    logp = logits - logits.max(axis=1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
    want = -logp[np.arange(len(y)), y].mean()
    assert losses[0][1] == pytest.approx(want, rel=1e-5)


def _run_in(tmp_path, monkeypatch, argv):
    """main(argv) with tempfile's directory in tmp_path (what mkdtemp makes)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return guide.main(
        ["--replicas", "2", "--steps", "4", "--save-at", "2", "--log-every", "2", "--min-accuracy", "0", *argv]
    )


def test_temporary_checkpoints_removed_and_logs_kept_where_the_output_says(tmp_path, monkeypatch, capsys):
    rc = _run_in(tmp_path, monkeypatch, [])
    out = capsys.readouterr().out
    assert rc == 0, out
    left = os.listdir(tmp_path)
    assert len(left) == 1 and left[0].startswith("xtpu_tpu_guide_logs_"), left
    logdir = str(tmp_path / left[0])
    assert f"`tensorboard --logdir {logdir}`" in out and "kept" in out
    m = re.search(r"checkpoints were in the temporary directory (\S+), now removed", out)
    assert m and os.path.basename(m.group(1)).startswith("xtpu_tpu_guide_ckpt_") and not os.path.exists(m.group(1))
    assert xtpu.dialects.summaries.event_file(logdir) is None  # closed: the event file is complete
    losses = [e.step for e in read_events(logdir) for v in e.summary.value if v.tag == "train/loss"]
    assert losses == [1, 2, 3, 4, 3, 4]


def test_given_directories_are_kept(tmp_path, monkeypatch, capsys):
    logdir, ckdir = str(tmp_path / "given_logs"), str(tmp_path / "given_ckpt")
    rc = _run_in(tmp_path, monkeypatch, ["--logdir", logdir, "--checkpoint-dir", ckdir])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert sorted(os.listdir(tmp_path)) == ["given_ckpt", "given_logs"]
    assert xtpu.train.latest_checkpoint(ckdir) == os.path.join(ckdir, "ckpt-1")
    assert "now removed" not in out and f"TensorBoard logs in {logdir}" in out


def test_failed_run_leaves_no_temporary_directory(tmp_path, monkeypatch, capsys):
    calls = []
    real_train = guide.train

    def failing_train(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # after the checkpoint was saved and logs written
            assert os.listdir(tmp_path) and any(
                f.startswith("ckpt-1") for d in os.listdir(tmp_path) for f in os.listdir(tmp_path / d)
            )
            raise RuntimeError("injected failure")
        return real_train(*args, **kwargs)

    monkeypatch.setattr(guide, "train", failing_train)
    with pytest.raises(RuntimeError, match="injected failure"):
        _run_in(tmp_path, monkeypatch, [])
    assert os.listdir(tmp_path) == []
    assert "tensorboard --logdir" not in capsys.readouterr().out


def test_guide_loop_mixed_bfloat16_within_one_point_of_float32(tmp_path, capsys):
    """Issue 28: the guide's loop in TF's mixed_bfloat16 policy restores bit
    for bit (float32 checkpoints of autocast variables) and reaches the
    float32 run's held-out accuracy within 1 point.

    150 steps, restored at step 140, not the example's 300 restored at 150
    (450 steps per run, 39 s of the suite): by step 150 both runs are past
    0.98 held-out accuracy (0.981 and 0.983; 0.992 and 0.994 at 300), and a
    restore that is not bit for bit shows in the losses and weights of the
    10 steps after it as in 150."""
    accuracy = {}
    for precision in ("float32", "mixed_bfloat16"):
        rc = guide.main(
            ["--precision", precision, "--steps", "150", "--save-at", "140", "--log-every", "1000"]
            + ["--logdir", str(tmp_path / precision / "logs")]
        )
        out = capsys.readouterr().out
        assert rc == 0, out
        assert f"the remaining 10 steps match bit for bit ({precision})" in out
        accuracy[precision] = float(re.search(r"held-out accuracy ([0-9.]+)", out).group(1))
        xtpu.dialects.summaries.release(str(tmp_path / precision / "logs"))
    assert accuracy["float32"] >= 0.9
    assert abs(accuracy["mixed_bfloat16"] - accuracy["float32"]) <= 0.01, accuracy
    assert xtpu.keras.mixed_precision.global_policy().name == "float32"
