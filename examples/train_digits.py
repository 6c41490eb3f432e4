"""Data-parallel training of a digits classifier with xtpu, gradients by autodiff.

Trains a one-hidden-layer MLP (tanh, ``--hidden`` units) on scikit-learn's
bundled 8x8 digits (1,797 images, 10 classes) with ``xtpu.TPUStrategy`` over
8 replicas by default, as a TF user writes it:

* the weights are ``xtpu.Variable``s created in ``strategy.scope()``
  (mirrored on every replica); the batches come from
  ``strategy.experimental_distribute_dataset``, which splits each global
  batch evenly across the replicas; ``--steps-per-run`` steps run in a
  device loop per ``strategy.run`` call;
* ``--api tf2`` (default): the step computes its gradients with
  ``xtpu.GradientTape`` and applies them with ``xtpu.optimizers.SGD``
  (momentum 0.9; ``--optimizer adam``: ``xtpu.optimizers.Adam``), whose
  ``apply_gradients`` all-reduces the gradients of the mirrored variables;
* ``--api tf1``: the step calls ``minimize`` of
  ``xtpu.tpu.CrossShardOptimizer(xtpu.train.MomentumOptimizer(...))`` (or
  ``AdamOptimizer``), which differentiates with ``xtpu.gradients`` and sums
  the gradients over the replicas with ``cross_replica_sum``;
* ``--precision mixed_bfloat16`` trains in TF's TPU mixed precision
  (``xtpu.keras.mixed_precision.set_global_policy("mixed_bfloat16")``): the
  weights and the optimizer state stay float32, the step reads the weights
  as bfloat16 (autocast variables), multiplies in bfloat16 with float32
  accumulation and computes the loss in float32; the numpy reference run
  stays float32, so the weights are compared with it only in float32;
* every ``--log-every`` steps the step logs through
  ``xtpu.outside_compilation`` inside an ``xtpu.cond``: the host formats each
  replica's loss with ``xtpu.strings.format``, prints it with ``xtpu.print``
  and, with ``--logdir``, writes the global loss to TensorBoard with
  ``xtpu.summary.scalar``.

The same training run is also computed in plain numpy, replica after
replica, with the backward pass written out and the optimizer's update
equations, and the script reports the largest difference between the two
sets of weights and the held-out accuracy.  It exits with status 1 if the
accuracy is below ``--min-accuracy`` or the weights differ by more than
``--tolerance``.

Run: ``python examples/train_digits.py [--replicas 8] [--steps 400] [--api tf1|tf2] [--optimizer momentum|adam]``.

On several processes (MPI ranks, ``pip install 'xtpu[mpi]'``):
``mpiexec -n 2 python examples/train_digits.py --backend mpi`` (or
``python -m xtpu.launch -n 2 examples/train_digits.py``): each rank runs
``R / P`` of the replicas, prints its replicas' log lines, and rank 0 the
report; the weights are bit for bit those of the threads backend
(``--save-weights`` writes them to an ``.npz`` to compare).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import numpy as np

import xtpu


def load_data(seed: int):
    """Digits scaled to [0, 1], shuffled, split 80/20: float32 [N, 64], int32 [N]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_train = int(0.8 * len(x))
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def init_params(hidden: int, seed: int):
    """w1 [64, hidden], b1 [hidden], w2 [hidden, 10], b2 [10], float32."""
    rng = np.random.default_rng(seed + 1)
    w1 = (rng.standard_normal((64, hidden)) / np.sqrt(64)).astype(np.float32)
    w2 = (rng.standard_normal((hidden, 10)) / np.sqrt(hidden)).astype(np.float32)
    return [w1, np.zeros((hidden,), np.float32), w2, np.zeros((10,), np.float32)]


def batch_order(rng, n_train: int, batch: int, steps: int):
    """The index arrays of the global batches: epochs of a random permutation."""
    order = rng.permutation(n_train)
    pos = 0
    for _ in range(steps):
        if pos + batch > len(order):
            order = rng.permutation(n_train)
            pos = 0
        yield order[pos : pos + batch]
        pos += batch


# ---------------------------------------------------------------------------
# The model and the replicated training step, written with xtpu ops
# ---------------------------------------------------------------------------


def summed_loss(x, y, weights):
    """Sum over the replica's examples of the cross-entropy of the MLP, the
    layers in the mixed-precision policy's compute dtype (float32 or
    bfloat16), the softmax and the loss in float32."""
    w1, b1, w2, b2 = weights
    x = xtpu.cast(x, xtpu.keras.mixed_precision.global_policy().compute_dtype)
    h = xtpu.math.tanh(x @ w1 + b1)
    logits = xtpu.cast(h @ w2 + b2, xtpu.float32)
    return -xtpu.math.reduce_sum(xtpu.one_hot(y, 10) * xtpu.nn.log_softmax(logits))


def make_optimizer(api: str, name: str, lr: float):
    if api == "tf2":
        if name == "adam":
            return xtpu.optimizers.Adam(learning_rate=lr)
        return xtpu.optimizers.SGD(learning_rate=lr, momentum=0.9)
    if name == "adam":
        inner = xtpu.train.AdamOptimizer(learning_rate=lr)
    else:
        inner = xtpu.train.MomentumOptimizer(learning_rate=lr, momentum=0.9)
    return xtpu.tpu.CrossShardOptimizer(inner)


def make_step(api: str, optimizer, weights, global_batch: int, per_replica: int, writer, logs: bool = True):
    """The per-replica step ``fn(batch) -> global loss`` for ``strategy.run``;
    without ``logs`` (``--log-every 0``) it has no host code at all."""

    def host_log(step, local_losses, global_loss):
        # One cluster prints every replica's line, in replica order: the same
        # output with threads and with MPI ranks (replica 0 is on rank 0).
        for r in range(local_losses.shape[0]):
            xtpu.print(
                xtpu.strings.format(
                    "[replica {}] step {}: local loss {}, global loss {}", [r, step, local_losses[r], global_loss]
                )
            )
        if writer is not None:
            with writer.as_default():
                xtpu.summary.scalar("loss", global_loss, step=step)

    def step_fn(batch):
        x, y, step, log = batch
        ctx = xtpu.get_replica_context()
        if api == "tf2":
            with xtpu.GradientTape() as tape:
                loss = summed_loss(x, y, weights) / float(global_batch)
            grads = tape.gradient(loss, weights)
            optimizer.apply_gradients(zip(grads, weights))
            local = loss * float(global_batch // per_replica)
        else:
            local = summed_loss(x, y, weights) / float(per_replica)
            optimizer.minimize(local, var_list=weights)
        global_loss = ctx.all_reduce(xtpu.ReduceOp.MEAN, local)
        if not logs:
            return global_loss

        def log_it():
            local_losses = ctx.all_gather(xtpu.reshape(local, [1]), axis=0)  # [replicas], every replica

            def on_replica_0():
                xtpu.outside_compilation(host_log, xtpu.cast(step[0], xtpu.int64), local_losses, global_loss)
                return global_loss

            return xtpu.cond(xtpu.math.equal(ctx.replica_id_in_sync_group, 0), on_replica_0, lambda: global_loss)

        return xtpu.cond(log[0], log_it, lambda: global_loss)

    return step_fn


# ---------------------------------------------------------------------------
# The same training run in plain numpy, replica after replica
# ---------------------------------------------------------------------------


def numpy_gradients(shards, params, global_batch):
    """The gradient of the global batch's mean loss, backward pass written
    out, summed over the replicas' shards."""
    w1, b1, w2, b2 = params
    total = [np.zeros_like(p) for p in params]
    for x, y in shards:
        onehot = np.eye(10, dtype=np.float32)[y]
        h = np.tanh(x @ w1 + b1)
        logits = h @ w2 + b2
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        g_logits = (p - onehot) / np.float32(global_batch)
        g_h = g_logits @ w2.T
        g_z = g_h * (np.float32(1.0) - h * h)
        for acc, g in zip(total, [x.T @ g_z, g_z.sum(axis=0), h.T @ g_logits, g_logits.sum(axis=0)]):
            acc += g
    return total


class NumpyOptimizer:
    """TF's update equations: momentum (TF 1 accumulator form / Keras
    velocity form) and Adam (TF 1 epsilon 1e-8 / Keras 1e-7)."""

    def __init__(self, api: str, name: str, lr: float, params):
        self.api, self.name, self.lr = api, name, np.float32(lr)
        self.slots = [[np.zeros_like(p), np.zeros_like(p)] for p in params]
        self.t = 0

    def apply(self, grads, params):
        self.t += 1
        out = []
        f = np.float32
        for (s1, s2), g, w in zip(self.slots, grads, params):
            if self.name == "adam":
                b1, b2 = f(0.9), f(0.999)
                eps = f(1e-7) if self.api == "tf2" else f(1e-8)
                lr_t = self.lr * np.sqrt(f(1) - b2**self.t) / (f(1) - b1**self.t)
                s1[...] = b1 * s1 + (f(1) - b1) * g
                s2[...] = b2 * s2 + (f(1) - b2) * g * g
                out.append(w - lr_t * s1 / (np.sqrt(s2) + eps))
            elif self.api == "tf2":
                s1[...] = f(0.9) * s1 - self.lr * g
                out.append(w + s1)
            else:
                s1[...] = f(0.9) * s1 + g
                out.append(w - self.lr * s1)
        return out


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


class Progress:
    """``step 120/400 (30%): 52.1 steps/s, ETA 5 s``, at most every
    ``every`` seconds (0: at every update, negative: never), not after the
    last step."""

    def __init__(self, total: int, every: float):
        self.total, self.every = total, every
        self.start = self.last = time.perf_counter()

    def update(self, done: int) -> None:
        now = time.perf_counter()
        if self.every < 0 or done >= self.total or now - self.last < self.every:
            return
        self.last = now
        rate = done / (now - self.start)
        eta = (self.total - done) / rate
        print(
            f"step {done}/{self.total} ({100 * done // self.total}%): {rate:.1f} steps/s, ETA {eta:.0f} s", flush=True
        )


def train(args, x_train, y_train, params):
    """Train through TPUStrategy; return the trained weights, the numpy
    reference run's, and the seconds spent in ``strategy.run``."""
    R, spr = args.replicas, args.steps_per_run
    per_replica = args.batch // R
    strategy = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=R), steps_per_run=spr)
    with strategy.scope():
        weights = [xtpu.Variable(p, name=n) for p, n in zip(params, ["w1", "b1", "w2", "b2"])]
        optimizer = make_optimizer(args.api, args.optimizer, args.lr)
    writer = xtpu.summary.create_file_writer(args.logdir) if args.logdir else None
    step_fn = make_step(args.api, optimizer, weights, args.batch, per_replica, writer, logs=bool(args.log_every))

    rng = np.random.default_rng(args.seed + 2)
    indices = list(batch_order(rng, len(x_train), args.batch, args.steps))
    batches = []
    for i, idx in enumerate(indices):
        log = bool(args.log_every) and (i % args.log_every == 0 or i == args.steps - 1)
        batches.append((x_train[idx], y_train[idx], np.full(args.batch, i, np.int32), np.full(args.batch, log)))
    if args.infeed:
        # A producer thread feeds each replica its shard of every batch
        # through an InfeedQueue (TF's tpu_feed.InfeedQueue) while the steps
        # run; the step dequeues its tuple on the device.
        def replica_shards(batch):
            return [[a[r * per_replica : (r + 1) * per_replica] for a in batch] for r in range(R)]

        infeed = xtpu.InfeedQueue(number_of_tuple_elements=4, name="digits")
        infeed.set_configuration_from_sharded_input_tensors(replica_shards(batches[0]))
        infeed.freeze()
        producer = threading.Thread(target=lambda: [infeed.enqueue(replica_shards(b)) for b in batches], daemon=True)
        producer.start()

        def infeed_step():
            return step_fn(tuple(infeed.generate_dequeue_op()))

        def run_steps():
            return strategy.run(infeed_step)
    else:
        iterator = iter(strategy.experimental_distribute_dataset(batches))

        def run_steps():
            return strategy.run(step_fn, args=(iterator,))

    ref_params = [p.copy() for p in params]
    ref_opt = NumpyOptimizer(args.api, args.optimizer, args.lr, params)
    t_xtpu = 0.0
    progress = Progress(args.steps, args.progress_every)
    for i in range(0, args.steps, spr):
        ts = time.perf_counter()
        loss = run_steps()
        t_xtpu += time.perf_counter() - ts
        progress.update(i + spr)
        for x, y, _, _ in batches[i : i + spr]:
            shards = [
                (x[r * per_replica : (r + 1) * per_replica], y[r * per_replica : (r + 1) * per_replica])
                for r in range(R)
            ]
            ref_params = ref_opt.apply(numpy_gradients(shards, ref_params, args.batch), ref_params)
        losses = strategy.experimental_local_results(loss)
        if any(not np.array_equal(losses[0], v) for v in losses[1:]):
            raise RuntimeError(f"step {i}: the replicas disagree on the global loss: {losses}")
    if writer is not None:
        writer.flush()
    return [w.numpy() for w in weights], ref_params, t_xtpu


def positive(text: str) -> int:
    """An int >= 1 (argparse type): ``--replicas 0`` is a one-line usage error."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag shows its default; a flag whose default is computed says it in its help."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """A usage error is one line on stderr (and exit status 2)."""
        self.exit(2, f"{self.prog}: error: {message} (--help lists the flags)\n")


def parser() -> argparse.ArgumentParser:
    ap = _Parser(description=__doc__.split("\n\n")[0], formatter_class=_Help)
    ap.add_argument("--replicas", type=positive, default=8, help="replicas (TPU cores) of the TPUStrategy")
    ap.add_argument("--hidden", type=positive, default=64, help="hidden units of the MLP")
    ap.add_argument("--batch", type=positive, default=256, help="global batch size (split across replicas)")
    ap.add_argument("--steps", type=positive, default=400, help="training steps")
    ap.add_argument(
        "--api",
        choices=["tf2", "tf1"],
        default="tf2",
        help="tf2: GradientTape + xtpu.optimizers; tf1: CrossShardOptimizer(xtpu.train...).minimize",
    )
    ap.add_argument(
        "--optimizer", choices=["momentum", "adam"], default="momentum", help="SGD with momentum 0.9, or Adam"
    )
    ap.add_argument(
        "--precision",
        choices=["float32", "mixed_bfloat16"],
        default="float32",
        help="mixed_bfloat16: TF's TPU mixed precision (float32 weights, bfloat16 compute)",
    )
    ap.add_argument("--lr", type=float, default=None, help="learning rate (default: 0.1 with momentum, 0.01 with adam)")
    ap.add_argument(
        "--steps-per-run",
        type=positive,
        default=None,
        help="steps per strategy.run, in a device loop (default: the largest of 4, 3, 2, 1 that divides --steps)",
    )
    ap.add_argument(
        "--log-every",
        type=non_negative,
        default=100,
        help="print every replica's loss every N steps from the device (0: never)",
    )
    ap.add_argument(
        "--logdir", default=None, help="write the global loss to TensorBoard event files here (default: no event files)"
    )
    ap.add_argument(
        "--progress-every",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="print a progress line (steps/s, ETA) at most this often (0: after every run; negative: never)",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the data split, the weights and the batches")
    ap.add_argument(
        "--min-accuracy",
        type=float,
        default=None,
        help="exit 1 below this held-out accuracy (default: 0.97 for runs of at least 400 steps; "
        "shorter runs, which do not reach it, are not checked)",
    )
    ap.add_argument(
        "--tolerance",
        type=float,
        default=1e-5,
        help="exit 1 when a weight differs from the numpy run by more (float32 precision only)",
    )
    ap.add_argument(
        "--backend",
        choices=["threads", "mpi"],
        default=None,
        help="replicas as threads or spread over the ranks of mpiexec (default: $XTPU_BACKEND, else threads)",
    )
    ap.add_argument(
        "--infeed",
        action="store_true",
        help="feed the batches through an xtpu.InfeedQueue from a producer thread (threads backend)",
    )
    ap.add_argument(
        "--save-weights",
        default=None,
        metavar="OUT.npz",
        help="write the trained weights here, on rank 0 (default: not written)",
    )
    return ap


def usage_error(ap: argparse.ArgumentParser, message: str) -> None:
    """One line on stderr, exit status 2 (argparse's status for usage errors)."""
    ap.error(message)


def main(argv=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    R = args.replicas
    if args.batch % R:
        usage_error(ap, f"--batch {args.batch} does not split evenly across {R} replicas")
    if args.steps_per_run is None:
        args.steps_per_run = next(k for k in (4, 3, 2, 1) if args.steps % k == 0)
    if args.steps % args.steps_per_run:
        usage_error(ap, f"--steps {args.steps} is not a multiple of --steps-per-run {args.steps_per_run}")
    if args.lr is None:
        args.lr = 0.01 if args.optimizer == "adam" else 0.1
    if args.infeed and (args.backend or __import__("os").environ.get("XTPU_BACKEND")) == "mpi":
        usage_error(ap, "--infeed runs with the threads backend (an infeed queue lives in one process)")
    if args.backend == "mpi":
        xtpu.distributed.initialize()
    rank = xtpu.distributed.process_index()
    if rank != 0:  # every rank trains; rank 0 reports
        global print
        print = _quiet  # noqa: A001

    x_train, y_train, x_test, y_test = load_data(args.seed)
    if args.batch > len(x_train):
        usage_error(ap, f"--batch {args.batch} is larger than the {len(x_train)} training images")
    params = init_params(args.hidden, args.seed)
    previous = xtpu.keras.mixed_precision.global_policy()
    xtpu.keras.mixed_precision.set_global_policy(args.precision)
    try:
        return _train_and_report(args, params, x_train, y_train, x_test, y_test, rank)
    finally:
        xtpu.keras.mixed_precision.set_global_policy(previous)


def _train_and_report(args, params, x_train, y_train, x_test, y_test, rank) -> int:
    R = args.replicas
    how = "GradientTape + xtpu.optimizers" if args.api == "tf2" else "CrossShardOptimizer(xtpu.train) + xtpu.gradients"
    print(
        f"training an MLP on digits with xtpu.TPUStrategy ({how}, {args.optimizer}): {len(x_train)} train / "
        f"{len(x_test)} test images, {R} replicas x {args.batch // R} examples per step, {args.steps} steps, "
        f"{args.steps_per_run} steps per run, precision {args.precision}"
    )
    t0 = time.perf_counter()
    params, ref_params, t_xtpu = train(args, x_train, y_train, params)
    if args.save_weights and rank == 0:
        np.savez(args.save_weights, **{n: p for n, p in zip(["w1", "b1", "w2", "b2"], params)})
    return _report(args, params, ref_params, x_test, y_test, time.perf_counter() - t0, t_xtpu)


def _quiet(*args, **kwargs) -> None:
    """``print`` on ranks other than 0."""


def _report(args, params, ref_params, x_test, y_test, elapsed, t_xtpu) -> int:
    # Held-out accuracy, computed eagerly with xtpu ops in the policy's compute dtype.
    compute = xtpu.keras.mixed_precision.global_policy().compute_dtype
    w1, b1, w2, b2 = (xtpu.cast(p, compute) for p in params)
    logits = xtpu.math.tanh(xtpu.cast(x_test, compute) @ w1 + b1) @ w2 + b2
    pred = xtpu.math.argmax(logits, axis=1)
    accuracy = float(np.mean(np.asarray(pred) == y_test))
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(params, ref_params))
    print(f"held-out accuracy: {accuracy:.4f}")
    print(f"largest difference from the numpy run: {diff:.3g}")
    procs = xtpu.distributed.process_count()
    where = f" on {procs} processes" if procs > 1 else ""
    print(f"time: {elapsed:.2f} s in all, {1e3 * t_xtpu / args.steps:.2f} ms per replicated step{where}")
    ok = True
    if args.min_accuracy is None:
        args.min_accuracy = 0.97 if args.steps >= 400 else 0.0
        if not args.min_accuracy:
            print(
                f"accuracy not checked: {args.steps} steps are fewer than the 400 that reach 0.97 "
                "(--min-accuracy sets a bound)"
            )
    if accuracy < args.min_accuracy:
        print(f"FAIL: accuracy {accuracy:.4f} < {args.min_accuracy}", file=sys.stderr)
        ok = False
    if args.precision != "float32":
        print(f"weights not compared with the float32 numpy run ({args.precision} rounds to bfloat16)")
    elif diff > args.tolerance:
        print(f"FAIL: weights differ from numpy by {diff:.3g} > {args.tolerance}", file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
