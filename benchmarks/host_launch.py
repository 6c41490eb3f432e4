"""Does one host program per replica (TF's ``parallel_execute`` host launch)
cost fewer threads or wake-ups than a host worker per (cluster, replica)?
``python benchmarks/host_launch.py`` (issue 31).

A program with K middle clusters, each between device ops that use its
result (so none is a head or tail cluster and none joins another), runs
on R replicas.  For each K it reports the host worker threads the executable starts,
the thread wake-ups per call (counted at ``runtime/channels.py``'s
``_Slot.wake``, one per waiting thread woken), and the median time per call.
Two kinds of cluster: ``inline`` (``v + 1.0``: short numpy code that the
device worker runs itself, ``runtime/host.py`` ``runs_inline``) and ``host``
(``to_number(format(v))``: host-only ops, served by the host worker).

A merged host program per replica would run the K clusters on one thread in
program order: it waits for each cluster's ``_args`` while the device
computes the value it sends, so each of the K requests still wakes it, and
each answer still wakes the device worker that waits for it: 2K wake-ups per
call and replica at best (the last column).  The device worker could no
longer serve a short cluster itself (the merged thread owns the order), so
``inline`` clusters would go from 0 wake-ups to 2K.  The merge saves threads
(K * R -> R), which cost their start on the first call and nothing while
they wait.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import threading
import time

import numpy as np

import xtpu
from xtpu.runtime import channels

WAKES = [0]
STARTED = [0]
_original_start = threading.Thread.start


def _counting_start(self) -> None:
    if self.name.startswith("xtpu-host-"):
        STARTED[0] += 1
    _original_start(self)


_original_wake = channels._Slot.wake


def _counting_wake(self) -> None:
    WAKES[0] += len(self.waiters)
    _original_wake(self)


def program(k: int, kind: str):
    def host(v):
        if kind == "inline":
            return v + 1.0
        return xtpu.strings.to_number(xtpu.strings.format("{}", v))

    def computation(x):
        y = x
        for _ in range(k):
            y = xtpu.outside_compilation(host, y * 1.5)
            y = xtpu.math.tanh(y)
        return y

    return computation


def measure(k: int, kind: str, replicas: int, calls: int) -> tuple[int, float, float]:
    inputs = [[np.float32(0.1 * (r + 1))] for r in range(replicas)]
    f = program(k, kind)
    gc.collect()  # the previous program's workers end now
    STARTED[0] = 0
    xtpu.replicate(f, inputs)  # compile, start the workers
    threads = STARTED[0]
    WAKES[0] = 0
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        xtpu.replicate(f, inputs)
        times.append(time.perf_counter() - t)
    return threads, WAKES[0] / calls / replicas, statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    channels._Slot.wake = _counting_wake
    threading.Thread.start = _counting_start
    print(f"R = {args.replicas}; per call: wake-ups per replica, median time")
    print(f"{'kind':>7} {'K':>3} {'host threads':>12} {'wakes/replica':>14} {'us/call':>9} {'merged: wakes >=':>17}")
    for kind in ("inline", "host"):
        for k in (1, 4, 16):
            threads, wakes, us = measure(k, kind, args.replicas, args.calls)
            print(f"{kind:>7} {k:>3} {threads:>12} {wakes:>14.1f} {us:>9.0f} {2 * k:>17}")


if __name__ == "__main__":
    main()
