"""Infeed overlap: a producer thread fills an xtpu.InfeedQueue while the
replicated steps run (TF's tpu_feed.InfeedQueue with an input pipeline).

``python benchmarks/infeed.py [--steps N] [--produce-ms P] [--repeats K]``

Per step, 2 replicas each take a batch x[B, D] from the infeed and run an
MLP step (x @ W -> tanh -> @ W2, its gradient w.r.t. W, cross_replica_sum,
SGD).  The producer makes each step's batches in ``produce`` time:

* ``io``: waiting (``time.sleep``, a file or network read) for a batch
  made beforehand;
* ``cpu``: numpy work of about the same time (normalising and shuffling a
  larger array), which competes with the replicas for the 2 cores.

Figures, each the median over ``repeats`` runs of ``steps`` steps:

* ``compute``: a step whose batches are already in the queue;
* ``produce``: one step's batches made alone;
* ``serial``: produce, then step, one after the other (no producer thread);
* ``overlapped``: the producer thread runs ahead (queue capacity 2) while
  the steps run.

Target (issue 14): overlapped <= max(produce, compute) + 10%.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import numpy as np

import xtpu

R, B, D = 2, 1024, 256


def step(w, w2, x):
    h = xtpu.math.tanh(xtpu.matmul(x, w))
    y = xtpu.matmul(h, w2)
    g_h = xtpu.matmul(xtpu.constant(np.full((B, D), 1.0 / (B * D), np.float32)), xtpu.transpose(w2))
    g_w = xtpu.matmul(xtpu.transpose(x), g_h * (1.0 - h * h))
    return w - 0.1 * xtpu.cross_replica_sum(g_w), xtpu.math.reduce_mean(y)


def make_producer(kind: str, produce_s: float, seed: int):
    rng = np.random.default_rng(seed)
    big = rng.standard_normal((R, 4 * B, D)).astype(np.float32)

    pool = [[[rng.standard_normal((B, D), dtype=np.float32)] for _ in range(R)] for _ in range(4)]
    count = iter(range(1 << 62))

    def io():  # the batch arrives after a wait (a read): no CPU work here
        time.sleep(produce_s)
        return pool[next(count) % len(pool)]

    def cpu():
        t = time.perf_counter()
        out = None
        while out is None or time.perf_counter() - t < produce_s:
            a = (big - big.mean(axis=1, keepdims=True)) / (big.std(axis=1, keepdims=True) + 1e-6)
            out = [[np.ascontiguousarray(a[r, rng.permutation(4 * B)[:B]])] for r in range(R)]
        return out

    return io if kind == "io" else cpu


def run(kind: str, steps: int, produce_s: float, repeats: int) -> dict:
    w = np.random.default_rng(0).standard_normal((D, D)).astype(np.float32) * 0.05
    w2 = np.random.default_rng(1).standard_normal((D, D)).astype(np.float32) * 0.05
    produce = make_producer(kind, produce_s, 2)
    figures: dict[str, list[float]] = {"compute": [], "produce": [], "serial": [], "overlapped": []}

    for rep in range(repeats + 1):  # the first repeat warms up (traces and compiles)
        q = xtpu.InfeedQueue(tuple_types=["float32"], tuple_shapes=[[R * B, D]], capacity=2, name=f"bench{rep}")
        q.set_number_of_shards(R)
        q.freeze()
        inputs = [[w, w2] for _ in range(R)]

        def one_step():
            return xtpu.replicate(step, inputs=inputs, infeed_queue=q)

        # compute: the batch is in the queue before the step starts
        batch = produce()
        t_compute = 0.0
        for _ in range(steps):
            q.enqueue(batch)
            t = time.perf_counter()
            one_step()
            t_compute += time.perf_counter() - t
        # produce alone
        t = time.perf_counter()
        for _ in range(steps):
            produce()
        t_produce = time.perf_counter() - t
        # serial: produce, then step
        t = time.perf_counter()
        for _ in range(steps):
            q.enqueue(produce())
            one_step()
        t_serial = time.perf_counter() - t
        # overlapped: a producer thread runs ahead
        producer = threading.Thread(target=lambda: [q.enqueue(produce()) for _ in range(steps)])
        t = time.perf_counter()
        producer.start()
        for _ in range(steps):
            one_step()
        t_overlapped = time.perf_counter() - t
        producer.join()
        if rep:
            for name, total in (
                ("compute", t_compute),
                ("produce", t_produce),
                ("serial", t_serial),
                ("overlapped", t_overlapped),
            ):
                figures[name].append(total / steps * 1e3)
    return {name: statistics.median(v) for name, v in figures.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument(
        "--produce-ms",
        type=float,
        default=None,
        help="producer time per step (default: the measured compute time of a step)",
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--kind", choices=["io", "cpu", "both"], default="both")
    args = ap.parse_args()
    if args.produce_ms is None:  # balance the two: the case where overlap matters most
        args.produce_ms = run("io", 10, 0.0, 2)["compute"]
    print(f"infeed overlap: {R} replicas, x[{B},{D}] MLP step, {args.steps} steps, median of {args.repeats} runs")
    for kind in ["io", "cpu"] if args.kind == "both" else [args.kind]:
        f = run(kind, args.steps, args.produce_ms / 1e3, args.repeats)
        bound = max(f["produce"], f["compute"])
        print(
            f"  producer {kind:3s}: compute {f['compute']:.2f} ms, produce {f['produce']:.2f} ms, "
            f"serial {f['serial']:.2f} ms, overlapped {f['overlapped']:.2f} ms per step = "
            f"{f['overlapped'] / bound:.2f}x max(produce, compute) (target <= 1.10x)"
        )


if __name__ == "__main__":
    main()
