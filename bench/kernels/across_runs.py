#!/usr/bin/env python3
"""The goal points of several whole bench_kernels runs side by side, judged at their median.

    python3 bench/kernels/across_runs.py RUN1/kernels.json RUN2/kernels.json [...]

Each file is one whole run of bench/kernels/run.sh (each of its figures already a median
over that run's repetitions). One run's verdict on a point near its goal flips with the
machine's mood of the moment, memcpy's above all; the median over runs made at different
times does not. For every goal point (summarize.py says which) this shows each run's ratio
to its baseline, their median and the verdict on the median: Linear forward + both
gradients against raw sgemm, element-wise ops against memcpy, with the element-wise
ceiling's median and, as summarize.py judges one run, whether the point is beyond reach.
A run in which the point was contended shows "?" and is left out of its median. Standard
library only.
"""

import importlib.util
import os
import statistics
import sys

_spec = importlib.util.spec_from_file_location(
    "summarize", os.path.join(os.path.dirname(os.path.abspath(__file__)), "summarize.py"))
summarize = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(summarize)


def percent(x):
    return "?" if x is None else f"{100 * x:.0f}%"


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def load_runs(paths):
    runs = []
    for path in paths:
        measurements = {}
        context = summarize.load(path, measurements)
        summarize.NUM_CPUS = int(context.get("num_cpus", summarize.NUM_CPUS))
        runs.append({"path": path, "context": context,
                     "linear": {(l["shape"], l["threads"]): l
                                for l in summarize.linear_layers(measurements) if l["goal"]},
                     "elementwise": {p["key"]: p
                                     for p in summarize.elementwise_points(measurements)
                                     if p["goal"] and p["ratio"] is not None}})
    return runs


def linear_section(runs):
    keys = sorted({k for r in runs for k in r["linear"]},
                  key=lambda st: (summarize.linear_order(st[0]), st[1]))
    rows, met, judged = [], 0, 0
    for shape, threads in keys:
        ratios = []
        for r in runs:
            layer = r["linear"].get((shape, threads))
            ratios.append(None if layer is None or layer["noisy"] else layer["ratio"])
        mid = median_or_none(ratios)
        if mid is not None:
            judged += 1
            met += mid >= summarize.LINEAR_GOAL
        rows.append(["linear fwd+bwd", summarize.linear_shape_text(shape), threads,
                     " / ".join(percent(x) for x in ratios), percent(mid),
                     summarize.verdict(mid, summarize.LINEAR_GOAL, mid is None)])
    return rows, met, judged


def elementwise_section(runs):
    keys = sorted({k for r in runs for k in r["elementwise"]},
                  key=lambda k: (summarize.op_order(k[1]), summarize.shape_sort_key(k[2]),
                                 k[3]))
    rows, tally = [], {"points": 0, "met": 0, "beyond": 0}
    for key in keys:
        ratios, ceilings, ceiling_texts, slack = [], [], [], summarize.CEILING_SLACK
        for r in runs:
            p = r["elementwise"].get(key)
            clean = p is not None and not p["noisy"]
            ratios.append(p["ratio"] if clean else None)
            ceilings.append(p["ceiling"] if clean else None)
            if not clean:
                ceiling_texts.append("?")
            else:
                ceiling_texts.append("—" if p["ceiling"] is None else percent(p["ceiling"]))
                slack = p["slack"]
        mid, mid_ceiling = median_or_none(ratios), median_or_none(ceilings)
        text = summarize.verdict(mid, summarize.ELEMENTWISE_GOAL, mid is None)
        if mid is not None:
            tally["points"] += 1
            tally["met"] += mid >= summarize.ELEMENTWISE_GOAL
            if summarize.beyond_reach({"ratio": mid, "ceiling": mid_ceiling, "slack": slack}):
                tally["beyond"] += 1
                text += " (ceiling under the goal)"
        rows.append([key[1], summarize.elementwise_shape_text(key[2]), key[3],
                     " / ".join(percent(x) for x in ratios), percent(mid),
                     "—" if set(ceiling_texts) <= {"—", "?"} else " / ".join(ceiling_texts),
                     "—" if mid_ceiling is None else percent(mid_ceiling), text])
    return rows, tally


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: across_runs.py RUN1/kernels.json RUN2/kernels.json [...]",
              file=sys.stderr)
        return 2
    try:
        runs = load_runs(argv[1:])
    except (OSError, ValueError, KeyError) as e:
        print(f"across_runs.py: cannot read the runs: {e}", file=sys.stderr)
        return 1
    out = [f"# bench_kernels: goal points across {len(runs)} runs", ""]
    for i, r in enumerate(runs, 1):
        load_avg = r["context"].get("load_avg")
        out.append(f"{i}. `{r['path']}`: {r['context'].get('date', '?')}, load average at "
                   f"start {', '.join(f'{x:.2f}' for x in load_avg) if load_avg else '?'}")
    out.append("")
    out.append("Each run's ratio in run order, then their median (\"?\": contended in that "
               "run, left out of the median); the verdict is the median's.")
    out.append("")

    rows, met, judged = linear_section(runs)
    if rows:
        out.append("## Linear, forward + input gradient + weight gradient, against raw sgemm")
        out.append("")
        out.append(summarize.table(["op", "shape", "threads", "ratio, each run", "median",
                                    "goal ≥ 90%"], rows))
        out.append("")
        out.append(f"Linear goal met at the median at {met} of {judged} points.")
        out.append("")

    rows, tally = elementwise_section(runs)
    if rows:
        out.append("## Element-wise, against memcpy")
        out.append("")
        out.append(summarize.table(["op", "shape", "threads", "ratio, each run", "median",
                                    "ceiling, each run", "median ceiling", "goal ≥ 70%"],
                                   rows))
        out.append("")
        missed = tally["points"] - tally["met"]
        out.append(f"Element-wise goal met at the median at {tally['met']} of "
                   f"{tally['points']} points; at {tally['beyond']} of the {missed} missed, "
                   "the median ceiling is under the goal (as summarize.py judges one run).")
        out.append("")
    print("\n".join(out).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
