"""xtpu.train.Checkpoint / CheckpointManager (issue 15): TF 2's object-based
checkpoints in a documented .npz format, restored mid-training with identical
results."""

import os

import numpy as np
import pytest

import xtpu


class Model:
    """A Keras-free model: attributes holding variables (TF's AutoTrackable)."""

    def __init__(self):
        self.w = xtpu.Variable(np.full((3, 1), 0.5, np.float32), name="w")
        self.layers = [xtpu.Variable(np.zeros(1, np.float32), name="b")]


def _setup(num_cores=2):
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=num_cores))
    with strategy.scope():
        model = Model()
        opt = xtpu.optimizers.SGD(0.05, momentum=0.9)

    def step(x, y):
        with xtpu.GradientTape() as tape:
            loss = xtpu.reduce_mean(xtpu.square(xtpu.matmul(x, model.w) + model.layers[0] - y))
        grads = tape.gradient(loss, [model.w, model.layers[0]])
        opt.apply_gradients(zip(grads, [model.w, model.layers[0]]))
        return loss

    @xtpu.function
    def train(iterator):
        return strategy.reduce("MEAN", strategy.run(step, args=next(iterator)), axis=None)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.25
    ds = xtpu.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8, drop_remainder=True)
    return strategy, model, opt, train, ds


def test_format_keys_and_values(tmp_path):
    strategy, model, opt, train, ds = _setup()
    it = iter(strategy.experimental_distribute_dataset(ds))
    train(it)
    ck = xtpu.train.Checkpoint(model=model, optimizer=opt)
    path = ck.save(str(tmp_path / "ck"))
    assert path == str(tmp_path / "ck-1") and int(ck.save_counter) == 1
    with np.load(path + ".npz", allow_pickle=False) as z:
        files = dict(z)
    assert sorted(files) == [
        "model/layers/0/.ATTRIBUTES/VARIABLE_VALUE",
        "model/layers/0/.OPTIMIZER_SLOT/optimizer/momentum/.ATTRIBUTES/VARIABLE_VALUE",
        "model/w/.ATTRIBUTES/VARIABLE_VALUE",
        "model/w/.OPTIMIZER_SLOT/optimizer/momentum/.ATTRIBUTES/VARIABLE_VALUE",
        "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE",
        "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
    ]
    np.testing.assert_array_equal(files["model/w/.ATTRIBUTES/VARIABLE_VALUE"], model.w.numpy())
    np.testing.assert_array_equal(
        files["model/w/.OPTIMIZER_SLOT/optimizer/momentum/.ATTRIBUTES/VARIABLE_VALUE"],
        opt.get_slot(model.w, "momentum").numpy(),
    )
    assert int(files["optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE"]) == 1
    # A mirrored variable reachable twice is saved once.
    ck2 = xtpu.train.Checkpoint(a=model.w, b=[model.w])
    with np.load(ck2.write(str(tmp_path / "two")) + ".npz") as z:
        assert [k for k in z.files if "VARIABLE_VALUE" in k and not k.startswith("save")] == [
            "a/.ATTRIBUTES/VARIABLE_VALUE"
        ]


def test_restore_mid_training_gives_identical_results(tmp_path):
    strategy, model, opt, train, ds = _setup()
    it = iter(strategy.experimental_distribute_dataset(ds))
    ck = xtpu.train.Checkpoint(model=model, optimizer=opt)
    manager = xtpu.train.CheckpointManager(ck, str(tmp_path), max_to_keep=2)
    for _ in range(3):
        train(it)
    saved = manager.save()
    after = [float(train(it)) for _ in range(4)]
    w_after = model.w.numpy()
    # Restore into the same objects, and into fresh ones (slots made on restore).
    ck.restore(saved).assert_consumed()
    it = iter(strategy.experimental_distribute_dataset(ds.skip(3)))
    assert [float(train(it)) for _ in range(4)] == after
    np.testing.assert_array_equal(model.w.numpy(), w_after)

    strategy2, model2, opt2, train2, ds2 = _setup()
    status = xtpu.train.Checkpoint(model=model2, optimizer=opt2).restore(xtpu.train.latest_checkpoint(str(tmp_path)))
    status.assert_consumed()
    it2 = iter(strategy2.experimental_distribute_dataset(ds2.skip(3)))
    assert [float(train2(it2)) for _ in range(4)] == after
    np.testing.assert_array_equal(model2.w.numpy(), w_after)


def test_manager_keeps_max_to_keep_and_errors(tmp_path):
    v = xtpu.Variable(np.float32(1.0))
    ck = xtpu.train.Checkpoint(v=v)
    manager = xtpu.train.CheckpointManager(ck, str(tmp_path), max_to_keep=2)
    paths = [manager.save() for _ in range(3)]
    assert manager.checkpoints == paths[1:] and manager.latest_checkpoint == paths[-1]
    assert not os.path.exists(paths[0] + ".npz") and os.path.exists(paths[2] + ".npz")
    assert 'model_checkpoint_path: "ckpt-3"' in open(tmp_path / "checkpoint").read()
    assert xtpu.train.CheckpointManager(ck, str(tmp_path), max_to_keep=2).checkpoints == paths[1:]
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ck.restore(str(tmp_path / "missing"))
    other = xtpu.train.Checkpoint(v=xtpu.Variable(np.zeros(2, np.float32)))
    with pytest.raises(ValueError, match="'v/.ATTRIBUTES/VARIABLE_VALUE' holds float32\\[\\] but its variable"):
        other.restore(paths[-1])
    extra = xtpu.train.Checkpoint(v=v, u=xtpu.Variable(np.float32(0.0)))
    with pytest.raises(AssertionError, match="objects with no value \\['u/"):
        extra.restore(paths[-1]).assert_consumed()
    # TF sets each keyword as an attribute: save_counter is a read-only
    # property; a keyword naming another object than root's attribute is
    # TF's ValueError.
    with pytest.raises(AttributeError, match="property 'save_counter' of 'Checkpoint' object has no setter"):
        xtpu.train.Checkpoint(save_counter=v)
    model = Model()
    with pytest.raises(
        ValueError, match="Cannot create a Checkpoint with keyword argument w if root.w already exists."
    ):
        xtpu.train.Checkpoint(model, w=v)
    assert xtpu.train.Checkpoint(model, w=model.w).w is model.w


def test_distributed_variables_save_one_value_and_restore_every_copy(tmp_path):
    """TF (values_util): an ON_READ variable saves its cross-replica value
    (SUM of the copies) and restores it to every copy, divided by the
    replicas for SUM (get_on_read_restore_ops), so the sum survives; a
    mirrored variable saves its primary copy and restores it to every copy
    (get_on_write_restore_ops)."""
    S, A = xtpu.VariableSynchronization, xtpu.VariableAggregation
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=4))
    with s.scope():
        acc = xtpu.Variable(0.0, synchronization=S.ON_READ, aggregation=A.SUM)
        own = xtpu.Variable(np.float32(0.0))  # AUTO, NONE: each replica may keep its own copy
    xs = xtpu.PerReplica([np.float32(r + 1) for r in range(4)])

    def step(x):
        acc.assign_add(x)
        own.assign(x)

    s.run(step, args=(xs,))
    ck = xtpu.train.Checkpoint(acc=acc, own=own)
    path = ck.write(str(tmp_path / "dist"))
    with np.load(path + ".npz") as z:
        assert float(z["acc/.ATTRIBUTES/VARIABLE_VALUE"]) == 10.0  # 1 + 2 + 3 + 4
        assert float(z["own/.ATTRIBUTES/VARIABLE_VALUE"]) == 1.0  # the primary copy
    s.run(step, args=(xs,))
    ck.read(path).assert_consumed()
    assert float(acc.numpy()) == 10.0
    assert list(s.experimental_local_results(acc)) == [2.5] * 4
    assert list(s.experimental_local_results(own)) == [1.0] * 4
