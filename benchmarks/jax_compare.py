"""xtpu against JAX on CPU devices, side by side in one run: ``python benchmarks/jax_compare.py``.

Each side runs in its own subprocess (so that peak RSS is its own), JAX with
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` and the replicas as
``jax.shard_map`` over a mesh of R CPU devices; the two sides alternate for
``--rounds`` rounds and the table shows each figure's median over the
rounds (each figure itself the best of ``--repeats`` timed loops,
``time.perf_counter``). Workloads (issue 13's table):

- ``mlp``: benchmarks/run.py's step (per replica x[B,D] @ W[D,D] -> tanh ->
  @ W2 -> mean, the hand-written gradient of W, summed over the replicas),
  B, D = 64, 256 and 256, 1024, at R = 1, 2, 8;
- ``crs``: a cross-replica sum of 1e6 float32 per replica at R = 1, 2, 8;
- ``host``: one host round trip (xtpu's outside compilation; JAX's
  ``io_callback``), per trip of 20 dependent trips in one step, R = 1;
- ``compile``: the first trace + compile of the process (the R = 1 small
  MLP step; JAX's backend and xtpu's API already loaded);
- ``rss``: the subprocess's peak resident set (``ru_maxrss``) at the end.

numpy running the replicas one after the other on one thread is printed
beside them as the floor of the work. Without JAX (``pip install
'xtpu[bench]'``) only xtpu's and numpy's figures are printed.
``python benchmarks/run.py`` prints this table after its own figures
(:func:`table`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MLP_SIZES = [(64, 256), (256, 1024)]
REPLICAS = [1, 2, 8]
CRS_N = 1_000_000
TRIPS = 20


def best(fn, repeats: int, inner: int | None = 1) -> float:
    """The fastest of ``repeats`` timed loops of ``inner`` calls of ``fn``,
    per call, in seconds (``inner=None``: calls for a ~20 ms loop, from one
    timed call)."""
    fn()
    if inner is None:
        t = time.perf_counter()
        fn()
        inner = inner_for(time.perf_counter() - t)
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t) / inner)
    return min(out)


def inner_for(seconds: float) -> int:
    """Calls per timed loop so that a loop takes about 20 ms."""
    return max(1, min(200, int(0.02 / max(seconds, 1e-6))))


def _busy() -> float:
    """Seconds of CPU the whole machine has used (/proc/stat; 0 elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return 0.0
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own() -> float:
    t = os.times()
    return t.user + t.system


#: Figures taken / taken while no other process used the CPU (:func:`alone`).
QUIET = [0, 0]


def alone(measure, tries: int = 5):
    """``measure()``, taken again while other processes used more than a
    tenth of a core meanwhile (the machine's CPU time, /proc/stat, against
    this process's), at most ``tries`` times; (its result, whether it ran
    alone).  The machine is shared: a figure taken while another process
    computes measures that process too."""
    for _ in range(tries):
        b0, o0, t0 = _busy(), _own(), time.perf_counter()
        out = measure()
        others = (_busy() - b0) - (_own() - o0)
        if others <= 0.1 * (time.perf_counter() - t0) + 0.02:
            return out, True
    return out, False


#: Seconds between two figures: after a call on several threads,
#: OpenBLAS's idle threads spin for about 2^28 cycles (0.1 s here) before
#: they sleep (OPENBLAS_THREAD_TIMEOUT), and took a core from the next
#: figure (xtpu's 8-replica step right after numpy's: 1.58 ms against 1.08).
SETTLE = 0.3


def timed(fn, repeats: int) -> float:
    """The best of ``repeats`` timed loops of ``fn`` (:func:`best`), taken
    alone where it can be (:func:`alone`), after the previous figure's
    threads have settled (:data:`SETTLE`)."""
    time.sleep(SETTLE)
    t = time.perf_counter()
    fn()
    inner = inner_for(time.perf_counter() - t)
    v, quiet = alone(lambda: best(fn, repeats, inner))
    QUIET[0] += 1
    QUIET[1] += quiet
    return v


def mlp_data(R: int, B: int, D: int):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((B, D)).astype(np.float32) for _ in range(R)]
    w = (rng.standard_normal((D, D)) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((D, D)) * 0.05).astype(np.float32)
    return xs, w, w2


def numpy_mlp(xs, w, w2):
    B, D = xs[0].shape
    g_y = np.full((B, D), 1.0 / (B * D), np.float32)
    total, losses = None, []
    for x in xs:
        h = np.tanh(x @ w)
        y = h @ w2
        losses.append(y.mean())
        g_w = x.T @ ((g_y @ w2.T) * (np.float32(1.0) - h * h))
        total = g_w if total is None else total + g_w
    return losses, total


# -- xtpu --------------------------------------------------------------------------


def xtpu_mlp_step(x, w, w2):
    """The MLP step in xtpu (per replica; the ``mlp`` workload): the loss
    and the all-reduced hand-written gradient of ``w``."""
    import xtpu

    B, D = x.shape
    h = xtpu.math.tanh(x @ w)
    y = h @ w2
    loss = xtpu.math.reduce_mean(y)
    g_y = xtpu.constant(np.full((B, D), 1.0 / (B * D), np.float32))
    g_z = xtpu.matmul(g_y, w2, transpose_b=True) * (1.0 - h * h)
    return loss, xtpu.cross_replica_sum(xtpu.matmul(x, g_z, transpose_a=True))


def xtpu_side(repeats: int, quick: bool) -> dict:
    import xtpu

    xtpu.lower  # noqa: B018 - import xtpu is lazy: load the API before any timer
    res: dict = {}

    mlp_step = xtpu_mlp_step
    for B, D in MLP_SIZES[:1] if quick else MLP_SIZES:
        for R in REPLICAS:
            xs, w, w2 = mlp_data(R, B, D)
            inputs = [[x, w, w2] for x in xs]
            t = time.perf_counter()
            c = xtpu.lower(mlp_step, inputs).compile()
            if "compile" not in res:  # the process's first trace + compile (R = 1)
                res["compile"] = time.perf_counter() - t
            out = c(inputs)
            _, ref = numpy_mlp(xs, w, w2)
            assert np.allclose(out[0][1], ref, rtol=1e-4, atol=1e-5), "xtpu's MLP step is wrong"
            res[f"mlp {B}x{D} R={R}"] = timed(lambda: c(inputs), repeats)
            res[f"numpy mlp {B}x{D} R={R}"] = timed(lambda: numpy_mlp(xs, w, w2), repeats)
    for R in REPLICAS:
        rng = np.random.default_rng(1)
        xs = [rng.standard_normal(CRS_N).astype(np.float32) for _ in range(R)]
        inputs = [[x] for x in xs]
        c = xtpu.lower(lambda x: xtpu.cross_replica_sum(x), inputs).compile()
        assert np.allclose(c(inputs)[0][0], np.sum(xs, axis=0), rtol=1e-5, atol=1e-5)
        res[f"crs 1e6 R={R}"] = timed(lambda: c(inputs), repeats)
        res[f"numpy crs 1e6 R={R}"] = timed(lambda: np.sum(xs, axis=0), repeats)

    def trips(x):
        for _ in range(TRIPS):
            x = xtpu.outside_compilation(lambda v: v + 1.0, x) * 1.0
        return x

    c = xtpu.lower(trips, [[np.float32(0)]]).compile()
    assert float(c([[np.float32(0)]])[0][0]) == TRIPS
    res["host round trip"] = timed(lambda: c([[np.float32(0)]]), repeats) / TRIPS
    res["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    res["quiet"] = QUIET[1] / max(1, QUIET[0])
    return res


# -- JAX ---------------------------------------------------------------------------


def jax_side(repeats: int, quick: bool) -> dict:
    import jax
    import jax.numpy as jnp
    from jax.experimental import io_callback
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    res: dict = {}
    devices = jax.devices()

    def sharded(R, fn, in_specs, out_specs):
        mesh = Mesh(np.array(devices[:R]), ("r",))
        f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs))
        return f, mesh

    def mlp_step(x, w, w2):
        x, w, w2 = x[0], w[0], w2[0]
        B, D = x.shape
        h = jnp.tanh(x @ w)
        y = h @ w2
        loss = jnp.mean(y)
        g_y = jnp.full((B, D), 1.0 / (B * D), jnp.float32)
        g_w = x.T @ ((g_y @ w2.T) * (1.0 - h * h))
        return loss[None], jax.lax.psum(g_w, "r")[None]

    for B, D in MLP_SIZES[:1] if quick else MLP_SIZES:
        for R in REPLICAS:
            xs, w, w2 = mlp_data(R, B, D)
            spec = P("r")
            f, mesh = sharded(R, mlp_step, (spec, spec, spec), (spec, spec))
            put = lambda a: jax.device_put(a, NamedSharding(mesh, spec))  # noqa: E731
            args = (put(np.stack(xs)), put(np.stack([w] * R)), put(np.stack([w2] * R)))
            t = time.perf_counter()
            jax.block_until_ready(f(*args))
            if "compile" not in res:  # the process's first trace + compile (R = 1)
                res["compile"] = time.perf_counter() - t
            _, ref = numpy_mlp(xs, w, w2)
            assert np.allclose(np.asarray(f(*args)[1][0]), ref, rtol=1e-4, atol=1e-5), "JAX's MLP step is wrong"
            res[f"mlp {B}x{D} R={R}"] = timed(lambda: jax.block_until_ready(f(*args)), repeats)
    for R in REPLICAS:
        rng = np.random.default_rng(1)
        xs = [rng.standard_normal(CRS_N).astype(np.float32) for _ in range(R)]
        f, mesh = sharded(R, lambda x: jax.lax.psum(x, "r"), (P("r"),), P("r"))
        a = jax.device_put(np.concatenate(xs), NamedSharding(mesh, P("r")))
        jax.block_until_ready(f(a))
        res[f"crs 1e6 R={R}"] = timed(lambda: jax.block_until_ready(f(a)), repeats)

    def trips(x):
        for _ in range(TRIPS):
            x = (
                io_callback(
                    lambda v: np.asarray(v + 1.0, np.float32), jax.ShapeDtypeStruct((), jnp.float32), x, ordered=True
                )
                * 1.0
            )
        return x

    f = jax.jit(trips)
    assert float(f(jnp.float32(0))) == TRIPS
    res["host round trip"] = timed(lambda: jax.block_until_ready(f(jnp.float32(0))), repeats) / TRIPS
    res["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    res["quiet"] = QUIET[1] / max(1, QUIET[0])
    return res


# -- the table ---------------------------------------------------------------------


def run_side(side: str, repeats: int, quick: bool) -> dict | None:
    env = dict(os.environ)
    if side == "jax":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
        env["JAX_PLATFORMS"] = "cpu"
    cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--repeats", str(repeats)]
    proc = subprocess.run(cmd + (["--quick"] if quick else []), capture_output=True, text=True, env=env)
    if proc.returncode:
        sys.exit(f"the {side} side failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fmt(key: str, v: float | None) -> str:
    if v is None:
        return "-"
    if key == "rss":
        return f"{v / 2**20:.0f} MB"
    if key == "compile":
        return f"{v * 1e3:.1f} ms"
    return f"{v * 1e3:.3f} ms" if v >= 1e-3 else f"{v * 1e6:.1f} us"


def _ratio(r: float) -> str:
    """xtpu/JAX with two decimals, or in e-notation below 0.01 (the host
    round trip's ratio is about 0.01: under load it would print 0.00)."""
    return f"{r:.2f}" if r >= 0.01 else f"{r:.1e}"


def table(rounds: int = 3, repeats: int = 7, quick: bool = False) -> list[str]:
    """Run both sides (JAX's only when JAX is installed) alternating for
    ``rounds`` rounds and return the table's lines: per workload the median
    over the rounds of xtpu's figure, JAX's, xtpu/JAX and numpy's.
    ``quick``: only the small MLP (the test suite's slice).

    Raises:
        SystemExit: a side's subprocess failed (its output in the message).
    """
    try:
        import jax  # noqa: F401

        version = jax.__version__
    except ImportError:
        version = None
    lines = []
    if version is None:
        lines.append("JAX is not installed (pip install 'xtpu[bench]'): xtpu's and numpy's figures only")
    runs: dict[str, list[dict]] = {"xtpu": [], "jax": []}
    for _ in range(rounds):
        runs["xtpu"].append(run_side("xtpu", repeats, quick))
        if version is not None:
            runs["jax"].append(run_side("jax", repeats, quick))
    med = {side: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for side, rs in runs.items() if rs}
    x, j = med["xtpu"], med.get("jax", {})
    lines.append(
        f"xtpu against JAX {'(' + version + ') ' if version else ''}on "
        f"{os.cpu_count()} cores, medians of {rounds} rounds"
    )
    lines.append(blas_kernels())
    lines.append(f"  {'workload':<24} {'xtpu':>11} {'JAX':>11} {'xtpu/JAX':>9} {'numpy':>11}")
    for key in [k for k in x if not k.startswith("numpy ") and k != "quiet"]:
        ratio = _ratio(x[key] / j[key]) if key in j else "-"
        lines.append(
            f"  {key:<24} {fmt(key, x[key]):>11} {fmt(key, j.get(key)):>11} {ratio:>9} "
            f"{fmt(key, x.get('numpy ' + key)):>11}"
        )
    quiet = [f"{side} {100 * m['quiet']:.0f}%" for side, m in (("xtpu", x), ("JAX", j)) if "quiet" in m]
    lines.append("  figures taken while no other process used the CPU (median over rounds): " + ", ".join(quiet))
    return lines


def blas_kernels() -> str:
    """Which kernels numpy's BLAS runs (threadpoolctl), and whether
    ``OPENBLAS_CORETYPE`` chose them (README: the machine sets it; the
    figures against JAX are measured with it unset)."""
    from threadpoolctl import threadpool_info

    libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    if not libs:
        return "numpy's BLAS: not found by threadpoolctl"
    i = libs[0]
    forced = os.environ.get("OPENBLAS_CORETYPE")
    return (
        f"numpy's BLAS: {i.get('internal_api')} {i.get('version') or ''}, {i.get('architecture') or '?'} kernels, "
        f"{i.get('num_threads')} threads" + (f" (OPENBLAS_CORETYPE={forced} chose them)" if forced else "")
    )


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The table's options (shared with benchmarks/run.py)."""
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of xtpu and JAX (default 3)")
    ap.add_argument("--quick", action="store_true", help="only the small MLP in the xtpu/JAX table (a slice for CI)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="timed loops per figure (default 7)")
    add_arguments(ap)
    ap.add_argument("--side", choices=["xtpu", "jax"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:
        fn = xtpu_side if args.side == "xtpu" else jax_side
        print(json.dumps(fn(args.repeats, args.quick)), flush=True)
        return 0
    print("\n".join(table(args.rounds, args.repeats, args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
