"""The training steps of the models' ops, xtpu against JAX in one run, in
both states of issue 29: ``python benchmarks/model_steps.py [--rounds 3]
[--steps 10] [--models block,transformer,resnet]``.

Models (each step: loss, gradients of every weight, ``cross_replica_sum``
of them over the replicas, SGD; JAX: ``jax.grad`` and ``psum`` under
``jax.shard_map`` over R of 8 CPU devices):

- ``block``: benchmarks/transformer_block.py's pre-LayerNorm transformer
  block, x[8, 128, 256] per replica;
- ``transformer``: benchmarks/transformer.py's step of
  examples/train_transformer.py (2 layers, 4 heads, dim 64, context 64,
  global batch 32 split over the replicas; embedding gathers, softmax
  cross-entropy);
- ``resnet``: benchmarks/conv.py's ResNet basic block (3x3 convolutions,
  batch norm, ReLU, residual, average pool, dense, softmax cross-entropy;
  [8, 16, 16, 16] per replica).

At R = 1, 2 and 8, in states ``keep`` and ``drop``, one fresh process a
figure, xtpu and JAX alternating, for ``--rounds`` rounds; the table shows
the medians of step time, page faults per step, peak RSS and trace +
compile (benchmarks/step_states.py says how each is measured).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from step_states import (  # benchmarks/ is on the path of a script run from it
    STATES,
    WARMUP,
    print_table,
    run_loop,
    run_rounds,
)

REPLICAS = [1, 2, 8]
MODELS = ("block", "transformer", "resnet")


def call_of(model: str, side: str, R: int):
    """(step, trace + compile seconds, loss of an output) of ``model``'s step
    on ``side`` at ``R`` replicas."""
    if model == "block":
        import transformer_block as m

        return m.xtpu_call(R) if side == "xtpu" else m.jax_call(R)
    if model == "transformer":
        import transformer as m

        return m.xtpu_call(R) if side == "xtpu" else m.jax_call(R)
    import conv as m

    return m.xtpu_resnet_call(R) if side == "xtpu" else m.jax_resnet_call(R)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=["xtpu", "jax"], help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=MODELS, help=argparse.SUPPRESS)
    ap.add_argument("--replicas", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--state", choices=STATES, default="keep", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=WARMUP, help="calls before the timed ones")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--replica-counts", default=",".join(map(str, REPLICAS)))
    args = ap.parse_args(argv)
    if args.side:
        print(json.dumps(run_loop(*call_of(args.model, args.side, args.replicas), args.state, args.steps, args.warmup)))
        return 0
    models = args.models.split(",")
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        ap.error(f"unknown models {unknown}; choose from {list(MODELS)}")
    counts = [int(r) for r in args.replica_counts.split(",")]
    sides = ["xtpu", "jax"]
    load0 = os.getloadavg()[0]
    rows = [(model, R, state) for model in models for R in counts for state in STATES]
    got = run_rounds(
        __file__,
        rows,
        sides,
        args.rounds,
        lambda row: (
            ["--model", row[0], "--replicas", row[1], "--state", row[2], "--steps", args.steps]
            + ["--warmup", args.warmup]
        ),
    )
    load1 = os.getloadavg()[0]
    title = f"training steps, medians of {args.rounds} rounds; load average {load0:.1f} -> {load1:.1f}"
    print_table(title, got, rows, sides)
    for model in models:
        for R in counts:
            for state in STATES:
                a, b = (sorted(r["loss"] for r in got[(model, R, state, s)])[0] for s in sides)
                if abs(a - b) > 1e-4 * max(1.0, abs(b)):
                    print(f"{model} R={R} {state}: the losses differ: xtpu {a}, JAX {b}")
                    return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
