"""A custom training loop written the way TF 2's TPU guide writes one
(https://www.tensorflow.org/guide/tpu, "Train a model using a custom
training loop"), with ``import xtpu as tf`` in place of TensorFlow.

* ``tf.distribute.cluster_resolver.TPUClusterResolver(tpu='')``,
  ``tf.config.experimental_connect_to_cluster``,
  ``tf.tpu.experimental.initialize_tpu_system`` and
  ``tf.distribute.TPUStrategy`` set up ``--replicas`` simulated TPU cores;
* the input pipeline is a ``tf.data.Dataset`` (``from_tensor_slices``,
  seeded ``shuffle``, ``repeat``, ``batch(drop_remainder=True)``,
  ``prefetch``) built per input pipeline by
  ``strategy.distribute_datasets_from_function`` from the
  ``tf.distribute.InputContext``'s per-replica batch size;
* the model is the guide's CNN (two 3x3 convolutions with ReLU, flatten,
  dense layers of 256, 128 and 10 units), Keras-free: ``tf.Variable``s
  created in ``strategy.scope()`` (mirrored on every replica) and a
  ``__call__`` made of ``tf.nn.conv2d``, ``tf.nn.relu``, ``tf.reshape`` and
  ``tf.matmul``; the optimizer is ``tf.optimizers.SGD`` with momentum, the
  gradients ``tf.GradientTape``'s;
* ``train_step`` is a ``@tf.function`` around ``strategy.run(step_fn,
  args=(next(iterator),))``: one compiled program per signature, run every
  step; it reduces the per-replica losses with ``strategy.reduce`` and
  writes the loss to TensorBoard with ``tf.summary.scalar`` from inside the
  program; the weights' histogram (``tf.summary.histogram``) is written
  every ``--log-every`` steps;
* a ``tf.train.Checkpoint`` of the model and the optimizer is saved with a
  ``tf.train.CheckpointManager`` at step ``--save-at``; after training, the
  script restores it, rebuilds the input pipeline at that step, trains the
  remaining steps again and checks that the losses and the weights are
  identical, bit for bit, to those of the uninterrupted run;
* ``--precision mixed_bfloat16``: TF's TPU mixed precision
  (``tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")``): the
  variables and the optimizer state stay float32, the model computes in
  bfloat16 (its float32 variables read as bfloat16, convolutions and
  matmuls accumulating in float32) and the loss in float32.

It prints the loss and the held-out accuracy, and exits with status 1 if
the restored run differs or the accuracy is below ``--min-accuracy``.
Without ``--checkpoint-dir`` the checkpoints go to a temporary directory
that is removed at the end, also when the run fails; without ``--logdir``
the TensorBoard logs go to a temporary directory that is kept, and named
with the ``tensorboard`` command to open it, when the run gets to its
result, and removed when it fails before.

Run: ``python examples/tpu_guide_training_loop.py [--replicas 8] [--steps 300]
[--save-at 150] [--logdir DIR] [--checkpoint-dir DIR]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import numpy as np

import xtpu as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import load_data  # noqa: E402  (scikit-learn's digits, split 80/20)


class CNN:
    """The guide's model, built from variables (no Keras; Keras layers are a
    later issue): two 3x3 ``Conv2D`` with ReLU (VALID padding, Keras's
    default), ``Flatten``, ``Dense`` 256 / 128 with ReLU and ``Dense`` 10.
    The guide's 28x28 MNIST images are the digits' 8x8 here, and its 256
    filters ``--filters`` (32 by default)."""

    def __init__(self, filters: int, seed: int):
        rng = np.random.default_rng(seed)

        def he(*shape):
            fan_in = int(np.prod(shape[:-1]))
            return tf.Variable((rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32))

        def zeros(n):
            return tf.Variable(np.zeros(n, np.float32))

        flat = (8 - 4) * (8 - 4) * filters
        self.conv1, self.conv1_bias = he(3, 3, 1, filters), zeros(filters)
        self.conv2, self.conv2_bias = he(3, 3, filters, filters), zeros(filters)
        self.dense1, self.dense1_bias = he(flat, 256), zeros(256)
        self.dense2, self.dense2_bias = he(256, 128), zeros(128)
        self.dense3, self.dense3_bias = he(128, 10), zeros(10)

    @property
    def trainable_variables(self) -> list:
        return [
            self.conv1,
            self.conv1_bias,
            self.conv2,
            self.conv2_bias,
            self.dense1,
            self.dense1_bias,
            self.dense2,
            self.dense2_bias,
            self.dense3,
            self.dense3_bias,
        ]

    def __call__(self, images):
        """Logits, float32, computed in the mixed-precision policy's compute dtype."""
        compute = tf.keras.mixed_precision.global_policy().compute_dtype
        # Inside strategy.run the variables already read as `compute` (autocast
        # variables: the casts are no-ops); eagerly they read float32.
        (c1, c1b, c2, c2b, d1, d1b, d2, d2b, d3, d3b) = (tf.cast(v, compute) for v in self.trainable_variables)
        x = tf.reshape(tf.cast(images, compute), [-1, 8, 8, 1])  # NHWC
        x = tf.nn.relu(tf.nn.conv2d(x, c1, strides=1, padding="VALID") + c1b)
        x = tf.nn.relu(tf.nn.conv2d(x, c2, strides=1, padding="VALID") + c2b)
        x = tf.reshape(x, [-1, self.dense1.shape[0]])  # Flatten
        x = tf.nn.relu(tf.matmul(x, d1) + d1b)
        x = tf.nn.relu(tf.matmul(x, d2) + d2b)
        return tf.cast(tf.matmul(x, d3) + d3b, tf.float32)


def sparse_categorical_crossentropy(labels, logits):
    """Per-example cross-entropy of integer labels and logits."""
    return -tf.reduce_sum(tf.one_hot(labels, 10) * tf.nn.log_softmax(logits), axis=1)


def build(args, x_train, y_train):
    """The strategy, model, optimizer, input pipeline and compiled step."""
    # TF's guide: TPUClusterResolver(tpu=''); xtpu's simulated system takes a core count.
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="", num_cores=args.replicas)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
    global_batch = args.global_batch

    with strategy.scope():
        model = CNN(args.filters, args.seed)
        optimizer = tf.optimizers.SGD(learning_rate=args.lr, momentum=0.9)

    def distributed_dataset(start_step: int):
        def dataset_fn(input_context):
            batch_size = input_context.get_per_replica_batch_size(global_batch)
            dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
            dataset = dataset.shuffle(1024, seed=args.seed).repeat().batch(batch_size, drop_remainder=True)
            # One pipeline feeds every replica: a step takes one batch per replica.
            per_step = input_context.num_replicas_in_sync // input_context.num_input_pipelines
            return dataset.skip(start_step * per_step).prefetch(tf.data.AUTOTUNE)

        return strategy.distribute_datasets_from_function(dataset_fn)

    @tf.function
    def train_step(iterator):
        def step_fn(inputs):
            images, labels = inputs
            with tf.GradientTape() as tape:
                logits = model(images)
                # tf.nn.compute_average_loss: the sum over the replica's
                # examples divided by the global batch size.
                loss = tf.reduce_sum(sparse_categorical_crossentropy(labels, logits)) / float(global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(list(zip(grads, model.trainable_variables)))
            return loss

        per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
        loss = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)
        tf.summary.scalar("train/loss", loss, step=optimizer.iterations)
        return loss

    return strategy, model, optimizer, distributed_dataset, train_step


def train(train_step, iterator, optimizer, model, steps: range, writer, log_every: int) -> list[float]:
    losses = []
    with writer.as_default():
        for step in steps:
            losses.append(float(train_step(iterator)))
            if (step + 1) % log_every == 0:
                tf.summary.histogram("weights/conv1", model.conv1, step=optimizer.iterations.numpy())
                print(f"step {step + 1}: loss {losses[-1]:.4f}")
    writer.flush()
    return losses


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--replicas", type=int, default=8, help="TPU cores, one replica each")
    p.add_argument("--steps", type=int, default=300, help="training steps")
    p.add_argument("--save-at", type=int, default=150, help="the step whose checkpoint is restored")
    p.add_argument("--global-batch", type=int, default=64, help="examples per step over all replicas")
    p.add_argument("--filters", type=int, default=32, help="filters of each convolution (the guide: 256)")
    p.add_argument("--lr", type=float, default=0.03, help="learning rate (SGD with momentum 0.9)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split, the weights and the shuffle")
    p.add_argument("--log-every", type=int, default=50, help="steps between printed losses and weight histograms")
    p.add_argument(
        "--logdir",
        default=None,
        help="TensorBoard directory; when not given, a new temporary one, kept and printed at the end",
    )
    p.add_argument(
        "--checkpoint-dir",
        default=None,
        help="checkpoint directory; when not given, a new temporary one, removed at the end",
    )
    p.add_argument("--min-accuracy", type=float, default=0.9, help="exit with 1 below this held-out accuracy")
    p.add_argument(
        "--precision",
        choices=["float32", "mixed_bfloat16"],
        default="float32",
        help="mixed_bfloat16: TF's TPU mixed precision (float32 variables, bfloat16 compute)",
    )
    args = p.parse_args(argv)
    if not 0 < args.save_at < args.steps:
        p.error("--save-at must be between 0 and --steps")
    previous = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy(args.precision)
    try:
        return _run(args)
    finally:
        tf.keras.mixed_precision.set_global_policy(previous)


def _run(args) -> int:

    x_train, y_train, x_test, y_test = load_data(args.seed)
    # Directories the script makes itself (no --logdir / --checkpoint-dir):
    # the checkpoints are removed at the end, also when the run fails; the
    # TensorBoard logs are kept, and the last line says so, only when the run
    # got to its result, else removed too.
    made_logdir, made_ckpt_dir = args.logdir is None, args.checkpoint_dir is None
    logdir = args.logdir or tempfile.mkdtemp(prefix="xtpu_tpu_guide_logs_")
    ckpt_dir = args.checkpoint_dir or tempfile.mkdtemp(prefix="xtpu_tpu_guide_ckpt_")
    writer = None
    finished = False
    try:
        strategy, model, optimizer, distributed_dataset, train_step = build(args, x_train, y_train)
        writer = tf.summary.create_file_writer(logdir)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        manager = tf.train.CheckpointManager(checkpoint, ckpt_dir, max_to_keep=3)

        iterator = iter(distributed_dataset(0))
        train(train_step, iterator, optimizer, model, range(args.save_at), writer, args.log_every)
        saved = manager.save()
        print(f"saved {saved} at step {int(optimizer.iterations.numpy())}")
        losses = train(train_step, iterator, optimizer, model, range(args.save_at, args.steps), writer, args.log_every)
        weights = [v.numpy() for v in model.trainable_variables]

        # Restore mid-training and run the rest again: identical results.
        checkpoint.restore(manager.latest_checkpoint).assert_consumed()
        iterator = iter(distributed_dataset(args.save_at))
        again = train(train_step, iterator, optimizer, model, range(args.save_at, args.steps), writer, args.log_every)
        same = again == losses and all(np.array_equal(a, v.numpy()) for a, v in zip(weights, model.trainable_variables))

        accuracy = float(np.mean(np.argmax(np.asarray(model(x_test)), axis=1) == y_test))
        writer.close()  # the event file complete before the user opens it
        print(
            f"{strategy.num_replicas_in_sync} replicas, {args.steps} steps "
            f"({train_step.experimental_get_tracing_count()} trace): final loss {losses[-1]:.4f}, held-out "
            f"accuracy {accuracy:.3f}; restored at step {args.save_at}, the remaining "
            f"{args.steps - args.save_at} steps {'match' if same else 'DIFFER'} bit for bit ({args.precision})"
        )
        if made_ckpt_dir:
            print(
                f"checkpoints were in the temporary directory {ckpt_dir}, now removed (--checkpoint-dir DIR keeps them)"
            )
        if made_logdir:
            print(
                f"TensorBoard logs kept in the temporary directory {logdir}: open them with "
                f"`tensorboard --logdir {logdir}`, then delete the directory (--logdir DIR writes them there)"
            )
        else:
            print(f"TensorBoard logs in {logdir}: open them with `tensorboard --logdir {logdir}`")
        finished = True
    finally:
        if writer is not None:
            writer.close()
        if made_ckpt_dir:
            shutil.rmtree(ckpt_dir, ignore_errors=True)
        if made_logdir and not finished:
            shutil.rmtree(logdir, ignore_errors=True)
    if not same:
        return 1
    return 0 if accuracy >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
