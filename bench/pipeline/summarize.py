#!/usr/bin/env python3
"""Collects pipeline report.json files into OUT.json and prints the README table.

usage: summarize.py OUT.json REPORT.json...
Per (schedule, m): medians over repeats of the measured iteration time and bubble (each run's
own figures are medians over its steps after the first) and of the simulator's prediction.
Closed forms for P ranks, m microbatches, v chunks, with equal stages and free links:
  GPipe, 1F1B (atomic backward): (P-1)/(m+P-1); interleaved: (P-1)/(v*m+P-1);
  ZB-H1: (P-1) max(F, B, F+B-W) idle per rank, over an iteration of m(F+B+W) plus that;
  with F = B = W a third of 1F1B's, (P-1)/3 / (m + (P-1)/3). F+B-W is Qi et al.'s (2024)
  and the largest when W <= min(F, B); the other two are floors for any schedule that holds
  at most P stashes on the first rank: the last rank starts (P-1)F late, and the first one,
  done with its P forwards, waits (P-1)B for its first gradient with no W to run (the
  simulator's test ZeroBubbleH1IdlesTheLargestOfFBAndFPlusBMinusWPerHop holds our ZB-H1 to
  this form). The table gives it both for F = B = W and for the F, B and W the run measured
  (means over its stages), since it depends on them: on gpt-s they lie within a few percent
  of each other, W above F in about a third of the runs.
The closed forms assume equal stages. On a shared VM one core may run 10-20% slower than the
other for minutes, which makes one stage slower whatever the split, so each row also gives
the median stage imbalance (slowest stage's F + B + W over the mean) and the median bubble
of the runs whose stages were within 3% of each other ("balanced runs", with their count).
Even a balanced run has steps where one rank ran a few percent slower than the other, and a
schedule that keeps a rank idle until the end (ZB-H1's first rank waits for the last one's
final backward) pays for that lag in full; the last column is the median bubble of the
steps (after each run's first) whose slowest rank was busy at most 1% over the ranks' mean,
over all runs, with their count. A second table splits every step after the first of every run
by how far its slowest rank's busy time was over the ranks' mean (< 1%, 1-3%, >= 3%) and
gives the median of the step's bubble minus its schedule's closed form (at the run's measured
F, B, W for ZB-H1), with the count: how much of a bubble above the closed form the ranks'
uneven pace explains. Its last column compares every such step with the closed form at the
paces its ranks really ran: no schedule can end a step before its slowest rank has done its
work and idled the closed form's idle ((P-1)(F+B+W) per rank for GPipe, 1F1B and interleaved,
whose stages are chunks, (P-1) max(F, B, F+B-W) for ZB-H1, with the run's measured F, B, W),
so the step's bound is 1 - mean busy / (slowest rank's busy + that idle); with equal paces it
is the closed form itself.
"floor, any schedule" is what no schedule can beat on the stage costs the run measured (free
links): rank r runs m (F + B + W) of each of its stages (stage s on rank s mod P) and cannot
start before the first microbatch's forward has passed the stages before its first one, so an
iteration lasts at least the largest of those forwards plus that work. Where the stages are
unequal it can lie above a closed form that assumes equal ones: no schedule then meets it.
"""
import json
import os
import statistics
import sys


def closed_form_idle_seconds(schedule, P, f, b, w):
    """Idle per rank that the closed form counts, in seconds, at per-stage F, B, W (a stage of
    an interleaved pipeline is one chunk, so its closed form's v is already in them)."""
    if schedule == "zb-h1":
        return (P - 1) * max(f, b, f + b - w)
    return (P - 1) * (f + b + w)


def closed_form(schedule, P, m, v, f=1.0, b=1.0, w=1.0):
    """The closed form's bubble: its idle over a rank's m microbatches (v chunks each when
    interleaved) of F + B + W plus that idle."""
    idle = closed_form_idle_seconds(schedule, P, f, b, w)
    chunks = v if schedule == "interleaved-1f1b" else 1
    return idle / (chunks * m * (f + b + w) + idle)


BALANCED = 1.03
EVEN_STEP = 1.01


def step_busy(report):
    """(each rank's busy seconds, bubble) of every step after the first; none for a report
    from before busy_seconds_by_step."""
    measured = report["pipeline"]["measured"]
    ranks = measured["ranks"]
    if not all("busy_seconds_by_step" in r for r in ranks):
        return []
    bubbles = measured["bubble_fraction_by_step"]
    return [([r["busy_seconds_by_step"][k] for r in ranks], bubbles[k])
            for k in range(1, len(bubbles))]


def step_paces(report):
    """(pace, bubble) of every step after the first: how far its slowest rank's busy time was
    over the ranks' mean, and its bubble."""
    return [(max(busy) / statistics.mean(busy) - 1, bubble) for busy, bubble in step_busy(report)]


def step_excess_at_own_paces(report, schedule, P):
    """Each step's bubble over the closed form at the paces its ranks ran (see the docstring)."""
    idle = closed_form_idle_seconds(schedule, P, *measured_fbw(report))
    return [bubble - (1 - statistics.mean(busy) / (max(busy) + idle))
            for busy, bubble in step_busy(report)]


def even_step_bubbles(report):
    """Bubbles of the steps after the first whose slowest rank was busy at most EVEN_STEP x the mean."""
    return [bubble for pace, bubble in step_paces(report) if pace <= EVEN_STEP - 1]


def imbalance(report):
    """Slowest stage's F + B + W per microbatch over the stages' mean."""
    stages = report["pipeline"]["predicted"]["stage_costs"]
    work = [s["forward_seconds"] + s["backward_input_seconds"] + s["backward_weight_seconds"]
            for s in stages]
    return max(work) / statistics.mean(work)


def floor_any_schedule(report, m):
    """The lowest bubble any schedule could reach on the run's measured stage costs."""
    P = report["pipeline"]["layout"]["pipeline_ranks"]
    stages = report["pipeline"]["predicted"]["stage_costs"]
    work = [0.0] * P
    for s in stages:
        work[s["stage"] % P] += m * (s["forward_seconds"] + s["backward_input_seconds"] +
                                     s["backward_weight_seconds"])
    start = [sum(stages[s]["forward_seconds"] for s in range(r)) for r in range(P)]
    iteration = max(start[r] + work[r] for r in range(P))
    return 1 - sum(work) / (P * iteration)


def measured_fbw(report):
    """Mean forward, input-gradient and weight-gradient seconds per microbatch over stages."""
    stages = report["pipeline"]["predicted"]["stage_costs"]
    mean = lambda key: statistics.mean(s[key] for s in stages)
    return mean("forward_seconds"), mean("backward_input_seconds"), mean("backward_weight_seconds")


def bubble_steps(row):
    """From the closed form at the measured F, B, W to the measured bubble in three steps, in
    bubble fractions: what the stages' own costs add (the simulator over free links), what the
    transfers add (the simulator over the measured links) and what is left (the run). None
    for a step whose prediction is missing (reports written before free_links)."""
    start = row["closed_form_bubble_measured_fbw"]
    free = row.get("predicted_free_links_bubble")
    stages = None if free is None else free - start
    links = None if free is None else row["predicted_bubble"] - free
    return stages, links, row["bubble"] - row["predicted_bubble"]


# How far the slowest rank's busy time in a step is above the ranks' mean.
PACE_BANDS = [(0.0, 0.01, "< 1%"), (0.01, 0.03, "1-3%"), (0.03, float("inf"), ">= 3%")]


def step_excess_by_pace(runs, schedule, P, m, v):
    """[band] the steps' bubbles over the closed form, by their ranks' busy-time difference."""
    bands = [[] for _ in PACE_BANDS]
    for report in runs:
        fbw = measured_fbw(report) if schedule == "zb-h1" else (1.0, 1.0, 1.0)
        form = closed_form(schedule, P, m, v, *fbw)
        for pace, bubble in step_paces(report):
            for band, (low, high, _) in zip(bands, PACE_BANDS):
                if low <= pace < high:
                    band.append(bubble - form)
    return bands


def main():
    if len(sys.argv) < 3 or sys.argv[1].startswith("-"):
        sys.exit("usage: summarize.py OUT.json REPORT.json...")
    out, reports = sys.argv[1], sys.argv[2:]
    groups = {}
    for path in reports:
        report = json.load(open(path))
        layout = report["pipeline"]["layout"]
        key = (layout["schedule"], layout["microbatches_per_replica"])
        groups.setdefault(key, []).append(report)
    rows = []
    order = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1"]
    for (schedule, m), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], order.index(kv[0][0]))):
        layout = runs[0]["pipeline"]["layout"]
        P, v = layout["pipeline_ranks"], layout["chunks"]
        measured = [r["pipeline"]["measured"] for r in runs]
        predicted = [r["pipeline"]["predicted"] for r in runs]
        by_pace = step_excess_by_pace(runs, schedule, P, m, v)
        own_paces = [e for r in runs for e in step_excess_at_own_paces(r, schedule, P)]
        rows.append({
            "excess_at_own_paces": statistics.median(own_paces) if own_paces else None,
            "excess_at_own_paces_range": [min(own_paces), max(own_paces)] if own_paces else None,
            "steps_at_own_paces": len(own_paces),
            "excess_by_pace": [statistics.median(b) if b else None for b in by_pace],
            "steps_by_pace": [len(b) for b in by_pace],
            "schedule": schedule, "P": P, "m": m, "v": v, "runs": len(runs),
            "iteration_s": statistics.median(x["iteration_seconds"] for x in measured),
            "bubble": statistics.median(x["bubble_fraction"] for x in measured),
            "predicted_iteration_s": statistics.median(x["iteration_seconds"] for x in predicted),
            "predicted_bubble": statistics.median(x["bubble_fraction"] for x in predicted),
            "predicted_free_links_bubble": statistics.median(
                x["free_links"]["bubble_fraction"] for x in predicted)
            if all("free_links" in x for x in predicted) else None,
            "closed_form_bubble": closed_form(schedule, P, m, v),
            "closed_form_bubble_measured_fbw": statistics.median(
                closed_form(schedule, P, m, v, *measured_fbw(r)) for r in runs),
            "floor_any_schedule": statistics.median(floor_any_schedule(r, m) for r in runs),
            "tokens_per_s": statistics.median(r["throughput"]["median"] for r in runs),
            "stage_imbalance": statistics.median(imbalance(r) for r in runs),
            "balanced_runs": sum(imbalance(r) <= BALANCED for r in runs),
            "balanced_bubble": statistics.median(
                [r["pipeline"]["measured"]["bubble_fraction"] for r in runs
                 if imbalance(r) <= BALANCED] or [float("nan")]),
            "even_steps": sum(len(even_step_bubbles(r)) for r in runs),
            "even_step_bubble": statistics.median(
                [b for r in runs for b in even_step_bubbles(r)] or [float("nan")]),
        })
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rows, f, indent=1)
    os.replace(tmp, out)
    print("| schedule | m | iteration (ms) | simulator (ms) | bubble | simulator | closed form | "
          "closed form, measured F B W | floor, any schedule | stage imbalance | "
          "bubble, balanced runs | bubble, even steps | tokens/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        fbw = row["closed_form_bubble_measured_fbw"]
        fbw = f"{100 * fbw:.1f}%" if row["schedule"] == "zb-h1" else "same"
        print(f"| {row['schedule']} | {row['m']} | {1e3 * row['iteration_s']:.0f} | "
              f"{1e3 * row['predicted_iteration_s']:.0f} | {100 * row['bubble']:.1f}% | "
              f"{100 * row['predicted_bubble']:.1f}% | {100 * row['closed_form_bubble']:.1f}% | "
              f"{fbw} | {100 * row['floor_any_schedule']:.1f}% | {row['stage_imbalance']:.3f} | "
              + (f"{100 * row['balanced_bubble']:.1f}% ({row['balanced_runs']})"
                 if row["balanced_runs"] else "none")
              + " | "
              + (f"{100 * row['even_step_bubble']:.1f}% ({row['even_steps']})"
                 if row["even_steps"] else "none")
              + f" | {row['tokens_per_s']:.0f} |")
    print()
    print("| schedule | m | " + " | ".join(f"bubble - closed form, slowest rank {name} over the mean"
                                           for _, _, name in PACE_BANDS)
          + " | bubble - closed form at the step's own paces, median (range) |")
    print("| --- | --- |" + " --- |" * (len(PACE_BANDS) + 1))
    for row in rows:
        cells = [f"{100 * e:+.1f} pts ({n})" if e is not None else "none"
                 for e, n in zip(row["excess_by_pace"], row["steps_by_pace"])]
        if row["excess_at_own_paces"] is None:
            cells.append("none")
        else:
            low, high = row["excess_at_own_paces_range"]
            cells.append(f"{100 * row['excess_at_own_paces']:+.1f} pts ({100 * low:+.1f} to "
                         f"{100 * high:+.1f}; {row['steps_at_own_paces']})")
        print(f"| {row['schedule']} | {row['m']} | " + " | ".join(cells) + " |")
    print()
    print("| schedule | m | closed form, measured F B W | + the stages' own costs (simulator, "
          "free links) | + the links (simulator) | + the rest (measured) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        cells = [f"{100 * x:+.1f} pts" if x is not None else "none" for x in bubble_steps(row)]
        print(f"| {row['schedule']} | {row['m']} | "
              f"{100 * row['closed_form_bubble_measured_fbw']:.1f}% | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
