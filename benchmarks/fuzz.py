"""The differential fuzzer at scale: ``python benchmarks/fuzz.py --programs 10000``.

Generates ``--programs`` random programs from ``--seed`` (program ``i`` is
drawn from ``random.Random(seed * 1000003 + i)``; see
``test/python/fuzz_programs.py`` for the generator and what is compared),
runs each eagerly and compiled with 1, 2 and 8 replicas and split over 2
logical cores, every ``--roundtrip-every``-th one also through the text
round trip, and prints

* throughput (programs and compiled runs per second, over ``--jobs``
  worker processes, one per core by default);
* the counts of mismatches, crashes and hangs, grouped into distinct
  failures (known defects of issue 10 named), each with a minimized
  reproducer printed as a Python script;
* coverage: how many programs used each op and feature.

Every program runs under a timeout: ``--timeout`` seconds for each channel
and collective (``XTPU_TIMEOUT``) and for the eager replicas' meetings; a
worker busy with one program for longer than ``--wall-limit`` seconds is
killed and the program counted as a hang.  Exit status 1 when a failure
that is not a known defect was found.
"""

from __future__ import annotations

import argparse
import collections
import faulthandler
import json
import multiprocessing as mp
import os
import queue
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "python"))


def program_seed(seed: int, i: int) -> int:
    return seed * 1000003 + i


def run_one(seed: int, i: int, args) -> dict:
    """Generate and check program ``i``; a JSON-able summary."""
    import fuzz_programs as fp

    t0 = time.perf_counter()
    ch = fp.RandomChooser(program_seed(seed, i))
    avoid = fp.ALWAYS_AVOID | (frozenset(fp.DEFECTS) if args.avoid_known else frozenset())
    if args.xla:
        avoid |= {"host_code"}  # no outside compilation, strings or print: programs StableHLO can say
    roundtrip = args.roundtrip_every > 0 and i % args.roundtrip_every == 0
    prog, configs, exported = None, [], False
    try:
        prog = fp.generate(ch, avoid)
        if args.xla:
            configs = [(fp.XLA_REPLICAS, 1)]
            roundtrip = False
            got = fp.run_xla(prog, fp.XLA_REPLICAS, args.timeout)
            failure = None if isinstance(got, str) else fp.check_xla(prog, args.timeout)
            exported = got if isinstance(got, str) else True
        else:
            configs = fp.configs_for(prog)
            failure = fp.check_program(prog, configs=configs, roundtrip=roundtrip, timeout=args.timeout, avoid=avoid)
    except Exception:  # noqa: BLE001 - the generator or harness itself failed: report it
        failure = fp.Failure("crash", "harness", traceback.format_exc(limit=6))
    out = {
        "i": i,
        "time": time.perf_counter() - t0,
        "features": sorted(prog.features) if prog else [],
        "lines": len(prog.lines) if prog else 0,
        "runs": len(configs) + (3 if roundtrip else 0),
        "status": "ok",
    }
    if args.xla:
        out["exported"] = exported if prog is not None else "the generator failed"
    if failure is not None:
        out.update(
            status=failure.kind,
            signature=failure.signature,
            known=fp.classify_known(failure, prog),
            failure=str(failure)[:3000],
            replicas=failure.replicas,
            cores=failure.cores,
            path=failure.path,
            choices=ch.choices,
            roundtrip=roundtrip,
        )
    return out


def worker(wid: int, seed: int, tasks, results, args) -> None:
    import warnings

    warnings.simplefilter("ignore")
    while True:
        try:
            i = tasks.get(timeout=1.0)
        except queue.Empty:
            continue
        if i is None:
            return
        results.put(("start", wid, i, time.monotonic()))
        # a program about to be killed at the wall limit: every thread's stack on stderr first
        faulthandler.dump_traceback_later(max(1.0, args.wall_limit - 10), exit=False)
        try:
            out = run_one(seed, i, args)
        finally:
            faulthandler.cancel_dump_traceback_later()
        results.put(("done", wid, i, out))


def run_all(args) -> tuple[list[dict], float]:
    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    for i in range(args.programs):
        tasks.put(i)
    procs: dict[int, mp.Process] = {}
    current: dict[int, tuple[int, float]] = {}
    next_wid = 0

    def spawn():
        nonlocal next_wid
        wid = next_wid
        next_wid += 1
        p = ctx.Process(target=worker, args=(wid, args.seed, tasks, results, args), daemon=True)
        p.start()
        procs[wid] = p

    for _ in range(args.jobs):
        spawn()
    done: dict[int, dict] = {}
    reported: set[int] = set()
    t0 = time.perf_counter()
    last_report = t0
    while len(done) < args.programs:
        try:
            msg = results.get(timeout=1.0)
        except queue.Empty:
            msg = None
        if msg is not None:
            kind, wid, i, payload = msg
            if kind == "start":
                current[wid] = (i, payload)
            else:
                current.pop(wid, None)
                done[i] = payload
        now = time.monotonic()
        for wid, (i, started) in list(current.items()):
            if now - started > args.wall_limit:
                procs[wid].kill()
                procs[wid].join()
                del procs[wid], current[wid]
                done[i] = {
                    "i": i,
                    "time": now - started,
                    "features": [],
                    "lines": 0,
                    "runs": 0,
                    "status": "hang",
                    "signature": "hang|wall-limit|worker killed",
                    "known": None,
                    "failure": f"hang (wall limit): program {i} ran longer than {args.wall_limit} s",
                    "replicas": 1,
                    "cores": 1,
                    "path": "wall-limit",
                    "choices": None,
                }
                spawn()
        for wid, p in list(procs.items()):
            if not p.is_alive() and wid not in current and len(done) < args.programs and p.exitcode not in (0, None):
                del procs[wid]
                spawn()
        for i in sorted(set(done) - reported):
            reported.add(i)
            r = done[i]
            if r["status"] != "ok":
                # Each failure as it is found (a long run's findings before it ends).
                print(
                    f"  program {i}: {r['status']} ({r.get('known') or r.get('signature')}): {r['failure'][:300]!r}",
                    file=sys.stderr,
                    flush=True,
                )
        if args.progress and time.perf_counter() - last_report > args.progress:
            last_report = time.perf_counter()
            bad = sum(1 for r in done.values() if r["status"] != "ok")
            print(
                f"  {len(done)}/{args.programs} programs, {bad} failures, "
                f"{len(done) / (last_report - t0):.1f} programs/s",
                file=sys.stderr,
                flush=True,
            )
    elapsed = time.perf_counter() - t0
    for _ in procs:
        tasks.put(None)
    for p in procs.values():
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    return [done[i] for i in range(args.programs)], elapsed


def minimize_one(rec: dict, args) -> str:
    """A minimized reproducer (Python source) for the failure in ``rec``."""
    import fuzz_programs as fp

    avoid = fp.ALWAYS_AVOID | (frozenset(fp.DEFECTS) if args.avoid_known else frozenset())
    if args.xla:
        avoid |= {"host_code"}  # no outside compilation, strings or print: programs StableHLO can say
    want = rec["known"] or rec["signature"]
    roundtrip = bool(rec.get("roundtrip"))

    def check(choices, replicas, cores):
        prog = fp.program_from_choices(choices, avoid)
        f = fp.check_program(prog, configs=[(replicas, cores)], roundtrip=roundtrip, timeout=args.timeout, avoid=avoid)
        return prog, f

    def same(prog, f):
        # a line-level cut that leaves a name undefined makes another failure,
        # whatever a classifier of the original would say of it
        return (
            f is not None
            and not any(e in str(f) for e in ("NameError", "UnboundLocalError", "SyntaxError"))
            and (fp.classify_known(f, prog) or f.signature) == want
        )

    replicas, cores = rec["replicas"], rec["cores"]
    # fewer replicas first: most failures do not need 8
    for r in sorted({1, 2, replicas}):
        if r <= replicas and (cores == 1 or r in (1, 2, 4)):
            prog, f = check(rec["choices"], r, cores)
            if same(prog, f):
                replicas = r
                break
    # the choices first (cheap, large steps), then the program's lines
    start = time.monotonic()
    best = fp.minimize(
        rec["choices"], lambda c: same(*check(c, replicas, cores)), deadline=start + args.minimize_budget / 2
    )
    prog, f = check(best, replicas, cores)
    if f is None:  # flaky: report the original
        prog, f = check(rec["choices"], rec["replicas"], rec["cores"])
        replicas, cores = rec["replicas"], rec["cores"]
        return fp.reproducer(prog, f, replicas, cores)

    def fails(candidate):
        g = fp.check_program(
            candidate, configs=[(replicas, cores)], roundtrip=roundtrip, timeout=args.timeout, avoid=avoid
        )
        return same(candidate, g)

    prog = fp.minimize_program(prog, fails, deadline=start + args.minimize_budget)
    f = fp.check_program(prog, configs=[(replicas, cores)], roundtrip=roundtrip, timeout=args.timeout, avoid=avoid)
    return fp.reproducer(prog, f, replicas, cores)


def _minimize_task(rec, args):
    import warnings

    warnings.simplefilter("ignore")
    try:
        return minimize_one(rec, args)
    except Exception:  # noqa: BLE001
        return "# minimizing failed:\n# " + traceback.format_exc().replace("\n", "\n# ")


def _label(fp, key: str) -> str:
    if key in fp.KNOWN_DEFECTS:
        return f"known defect of issue 10 '{key}'"
    if key in fp.FOUND_DEFECTS:
        return f"found defect '{key}'"
    if key in fp.GRAPH_MODE_DIFFERENCES:
        return f"TF graph-mode semantics '{key}' (compared leniently)"
    if key in fp.XLA_DIFFERENCES:
        return f"XLA's own deviation '{key}': {fp.XLA_DIFFERENCES[key]}"
    return "NEW"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--timeout", type=float, default=20.0, help="seconds a channel, collective or eager meeting may wait"
    )
    ap.add_argument(
        "--wall-limit", type=float, default=180.0, help="seconds one program may take before its worker is killed"
    )
    ap.add_argument("--roundtrip-every", type=int, default=4, help="text round trip for every k-th program (0: never)")
    ap.add_argument(
        "--avoid-known",
        action="store_true",
        help="do not generate programs that hit the known defects (issue 10's and those found so far)",
    )
    ap.add_argument("--minimize", type=int, default=12, help="distinct failures to minimize")
    ap.add_argument("--minimize-budget", type=float, default=120.0, help="seconds per minimization")
    ap.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines on stderr (0: none)")
    ap.add_argument("--json", default=None, help="also write every program's summary to this file")
    ap.add_argument(
        "--xla",
        action="store_true",
        help="xla mode: each program compiled by xtpu on 2 replicas, exported to StableHLO and run by XLA's CPU "
        "client; XLA's values against xtpu's (programs with host code have no StableHLO form and are counted)",
    )
    args = ap.parse_args(argv)

    sys.path.insert(0, os.path.join(HERE, "..", "test", "python"))
    import fuzz_programs as fp

    if args.xla:
        print("xla mode: xtpu's compiled program against XLA's CPU client running its StableHLO export", flush=True)

    print(
        f"fuzzing {args.programs} programs, seed {args.seed}, {args.jobs} worker processes, "
        f"timeout {args.timeout} s, round trip every {args.roundtrip_every}"
        + (", known defects avoided" if args.avoid_known else ""),
        flush=True,
    )
    records, elapsed = run_all(args)
    runs = sum(r["runs"] for r in records)
    counts = collections.Counter(r["status"] for r in records)
    print(
        f"\n{len(records)} programs in {elapsed:.1f} s: {len(records) / elapsed:.1f} programs/s, "
        f"{runs / elapsed:.1f} compiled runs/s ({runs} runs: each against its eager reference), "
        f"{sum(r['lines'] for r in records) / max(1, len(records)):.1f} lines per program, "
        f"mean {sum(r['time'] for r in records) / max(1, len(records)) * 1e3:.0f} ms per program per worker"
    )
    print(
        f"mismatches: {counts['mismatch']}, crashes: {counts['crash']}, hangs: {counts['hang']}, "
        f"agreeing: {counts['ok']}"
    )
    if args.xla:
        n = sum(1 for r in records if r.get("exported") is True)
        print(f"xla: {n} programs exported to StableHLO and run on XLA and xtpu; not run:")
        skipped = collections.Counter(r["exported"] for r in records if r.get("exported") is not True)
        for why, k in skipped.most_common():
            print(f"  {k:5d} x {why}")

    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for r in records:
        if r["status"] != "ok":
            groups[r["known"] or r["signature"]].append(r)
    explained = {**fp.DEFECTS, **fp.XLA_DIFFERENCES}
    ordered = sorted(groups.items(), key=lambda kv: (kv[0] not in explained, -len(kv[1])))
    if ordered:
        print("\ndistinct failures:")
    for key, recs in ordered:
        label = _label(fp, key)
        print(f"  {len(recs):5d} x {label}: {recs[0]['failure'][:300]!r} (programs {[r['i'] for r in recs[:5]]})")

    to_min = [(k, recs[0]) for k, recs in ordered if recs[0].get("choices") is not None][: args.minimize]
    if to_min:
        print(f"\nminimized reproducers ({len(to_min)}, up to {args.minimize_budget:.0f} s each):", flush=True)
        ctx = mp.get_context("spawn")
        with ctx.Pool(args.jobs) as pool:
            pending = [(k, rec, pool.apply_async(_minimize_task, (rec, args))) for k, rec in to_min]
            for k, rec, res in pending:
                try:
                    text = res.get(timeout=args.minimize_budget * 3 + 60)
                except mp.TimeoutError:
                    text = "# minimizing timed out\n"
                label = _label(fp, k)
                print(f"\n# ---- {label}, program {rec['i']} (seed {args.seed}) ----")
                print(text)
    features = collections.Counter(f for r in records for f in r["features"])
    print("\ncoverage (programs using each op / feature):")
    ops = sorted((k, v) for k, v in features.items() if k.startswith("op:"))
    print("  ops: " + ", ".join(f"{k[3:]} {v}" for k, v in ops))
    print("  features: " + ", ".join(f"{k} {v}" for k, v in sorted(features.items()) if not k.startswith("op:")))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"elapsed": elapsed, "records": records}, f)
    new = [k for k in groups if k not in fp.DEFECTS and k not in fp.XLA_DIFFERENCES]
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
