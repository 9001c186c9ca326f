#!/usr/bin/env python3
"""Collects the PipeFB-vs-1F1B report.json files into OUT.json and prints the README table.

usage: summarize.py OUT.json VARIANT:TIER:REPORT.json...
Per (variant, tier), medians over repeats of: iteration time (each run's own figure is the
median over its steps after the first), idle fraction (the measured bubble: 1 - busy / span
summed over ranks), per-rank peak memory (ledger total and stash), bytes each rank sends
per step (activations, gradients, stashes, parameters) and bytes offloaded per step.
"""
import json
import os
import statistics
import sys


def per_rank(report, field):
    return [rank[field] for rank in report["pipeline"]["measured"]["ranks"]]


def main():
    out, specs = sys.argv[1], sys.argv[2:]
    groups = {}
    for spec in specs:
        variant, tier, path = spec.split(":", 2)
        with open(path) as f:
            groups.setdefault((variant, tier), []).append(json.load(f))
    rows = []
    for (variant, tier), runs in groups.items():
        steps = [len(r["loss"]) if "loss" in r else 1 for r in runs]
        ranks = len(per_rank(runs[0], "peak_bytes"))

        def median_rank(get):
            return [statistics.median(get(r)[k] for r in runs) for k in range(ranks)]

        offloaded = []
        for r, n in zip(runs, steps):
            total = sum(rank["offload"]["bytes_evicted"] for rank in r["pipeline"]["measured"]["ranks"])
            offloaded.append(total / max(n, 1))
        rows.append({
            "variant": variant, "offload": tier, "runs": len(runs),
            "iteration_s": statistics.median(r["pipeline"]["measured"]["iteration_seconds"] for r in runs),
            "idle_fraction": statistics.median(r["pipeline"]["measured"]["bubble_fraction"] for r in runs),
            "tokens_per_s": statistics.median(r["throughput"]["median"] for r in runs),
            "peak_bytes_by_rank": median_rank(lambda r: per_rank(r, "peak_bytes")),
            "peak_stash_bytes_by_rank": median_rank(
                lambda r: [x["stash"] for x in per_rank(r, "peak_bytes_by_category")]),
            "sent_bytes_per_step_by_rank": median_rank(lambda r: per_rank(r, "sent_bytes_per_step")),
            "offloaded_bytes_per_step": statistics.median(offloaded),
        })
    order = {("1f1b", "none"): 0, ("1f1b", "file"): 1, ("pipefb", "none"): 2, ("pipefb", "file"): 3}
    rows.sort(key=lambda row: order.get((row["variant"], row["offload"]), 9))
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rows, f, indent=1)
    os.replace(tmp, out)

    def mib(values):
        return " / ".join(f"{v / 2**20:.0f}" for v in values)

    print("| layout | offload | iteration (ms) | tokens/s | idle | peak MiB per rank | "
          "stash MiB per rank | sent MiB/step per rank | offloaded MiB/step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['variant']} | {row['offload']} | {1e3 * row['iteration_s']:.0f} | "
              f"{row['tokens_per_s']:.0f} | {100 * row['idle_fraction']:.1f}% | "
              f"{mib(row['peak_bytes_by_rank'])} | {mib(row['peak_stash_bytes_by_rank'])} | "
              f"{mib(row['sent_bytes_per_step_by_rank'])} | "
              f"{row['offloaded_bytes_per_step'] / 2**20:.0f} |")


if __name__ == "__main__":
    main()
