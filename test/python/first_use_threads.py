"""8 threads make their first xtpu calls at once in a fresh interpreter
(issue 25, item 1); run by test_first_use_threads.py as
``python first_use_threads.py``.

Nothing of xtpu's API is loaded before the threads start (only ``import
xtpu``, which loads the version): every lazily loaded module, every cache a
first call fills (the op registry, the compile cache, the kernels per form,
the worker pool, the strategy's and the function's caches) is raced.  Each
thread runs one entry point: ``xtpu.replicate``, ``xtpu.lower(...).compile()``,
``TPUStrategy.run`` and an ``xtpu.function``, two threads each.  Then the main
thread runs the same four alone and the script prints one JSON line:
``{"errors": [...], "mismatches": [...]}``.
"""

import json
import sys
import threading
import traceback

import numpy as np

import xtpu

X = np.arange(4, dtype=np.float32)


def replicate():
    out = xtpu.replicate(lambda x: xtpu.cross_replica_sum(x * 3.0), [[X], [X + 1]])
    return [np.asarray(o[0]).tolist() for o in out]


def lower_compile():
    compiled = xtpu.lower(lambda x: xtpu.math.reduce_sum(x * x) + 1.0, [[X], [X * 2]]).compile()
    return [np.asarray(o[0]).tolist() for o in compiled([[X], [X * 2]])]


def strategy_run():
    s = xtpu.TPUStrategy(xtpu.TPUClusterResolver(num_cores=2))
    out = s.run(lambda x: xtpu.math.square(x) - 1.0, args=(X,))
    return [np.asarray(v).tolist() for v in s.experimental_local_results(out)]


def function():
    @xtpu.function
    def f(x):
        return xtpu.nn.relu(x - 1.5) * 2.0

    return [np.asarray(f(X)).tolist(), np.asarray(f(X + 1)).tolist()]


ENTRY_POINTS = [replicate, lower_compile, strategy_run, function]
THREADS = 8
SWITCH_INTERVAL = 1e-4  # switch threads every 0.1 ms (Python: 5 ms) so that more interleavings are tried


def main() -> int:
    assert "xtpu.replication" not in sys.modules, "the API must not be loaded before the threads start"
    sys.setswitchinterval(SWITCH_INTERVAL)
    barrier = threading.Barrier(THREADS)
    results: dict[int, object] = {}
    errors: list[str] = []
    defaults: dict[int, int] = {}

    def worker(i):
        fn = ENTRY_POINTS[i % len(ENTRY_POINTS)]
        barrier.wait()
        try:
            results[i] = fn()
            defaults[i] = id(xtpu.get_strategy())  # the default strategy: one for the process
        except BaseException:  # noqa: BLE001 - every failure is reported
            errors.append(f"thread {i} ({fn.__name__}): {traceback.format_exc()}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    hung = [i for i, t in enumerate(threads) if t.is_alive()]
    errors += [f"thread {i} still running after 120 s" for i in hung]
    alone = {fn.__name__: fn() for fn in ENTRY_POINTS}
    mismatches = [
        f"thread {i} ({ENTRY_POINTS[i % len(ENTRY_POINTS)].__name__}): {r} != {alone[ENTRY_POINTS[i % len(ENTRY_POINTS)].__name__]}"
        for i, r in results.items()
        if r != alone[ENTRY_POINTS[i % len(ENTRY_POINTS)].__name__]
    ]
    if len(set(defaults.values())) != 1 or set(defaults.values()) != {id(xtpu.get_strategy())}:
        mismatches.append(f"the threads got {len(set(defaults.values()))} default strategies")
    print(json.dumps({"errors": errors, "mismatches": mismatches, "alone": alone}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
