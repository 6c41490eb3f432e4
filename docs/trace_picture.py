"""Draw one replicated step of an xtpu trace (xtpu.profiler) as a PNG.

``python docs/trace_picture.py TRACE.json OUT.png`` draws the last run of
``@main`` in the trace: a row per thread, the plans' spans as pale bars and
their ops on top, coloured by kind (matmuls, collectives, host transfers,
other ops). Needs matplotlib (``pip install -e '.[docs]'``). The README's
picture of the main job was made with::

    XTPU_PROFILE=/tmp/trace python3 examples/train_digits.py --steps 8
    python3 docs/trace_picture.py /tmp/trace/xtpu-*.trace.json docs/trace_train_digits.png
"""

from __future__ import annotations

import json
import sys

KINDS = [  # (label, colour, test on the op's name)
    ("dot_general (matmul)", "tab:blue", lambda n: n == "hlo.dot_general"),
    ("collectives (ccl.*)", "tab:red", lambda n: n.startswith("ccl.")),
    ("host transfers", "tab:orange", lambda n: "host" in n and n.startswith("tpu.")),
    ("other ops", "tab:gray", lambda n: True),
]


def main(argv: list[str]) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    trace, out = argv
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in events if e["ph"] == "X"]
    main_runs = [e for e in spans if e["cat"] == "plan" and e["name"] == "main"]
    if not main_runs:
        sys.exit("the trace has no run of @main")
    run = main_runs[-1]
    t0, t1 = run["ts"], run["ts"] + run["dur"]
    inside = [e for e in spans if e["ts"] >= t0 and e["ts"] + e["dur"] <= t1 + 1]

    def label(t):  # the device replica a thread ran, else the thread's name
        plans = sorted(e["name"] for e in inside if e["tid"] == t and e["name"].startswith("device replica"))
        return plans[0] if plans else names.get(t, str(t))

    def order(t):
        lab = label(t)
        return (0, int(lab.split()[-1])) if lab.startswith("device replica") else (1, lab)

    tids = sorted({e["tid"] for e in inside}, key=order)
    row = {t: i for i, t in enumerate(tids)}
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(tids) + 1.4))
    inside.sort(key=lambda e: (e["cat"] != "plan", -e["dur"]))  # plans first, then outer ops before inner ones
    for e in inside:
        y = row[e["tid"]]
        x, w = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
        if e["cat"] == "plan":
            ax.broken_barh([(x, w)], (y - 0.4, 0.8), facecolors="#e8eef7", edgecolors="#9ab")
        elif e["cat"] == "op" and e["name"] != "tpu.replicate":  # @main's op that holds the whole step
            colour = next(c for _, c, test in KINDS if test(e["name"]))
            ax.broken_barh([(x, max(w, 0.002))], (y - 0.3, 0.6), facecolors=colour)
    ax.set_yticks(range(len(tids)), [label(t) for t in tids])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the step started")
    ax.set_title("one replicated step of examples/train_digits.py (xtpu.profiler trace)")
    ax.legend(
        handles=[Patch(color=c, label=label) for label, c, _ in KINDS],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
