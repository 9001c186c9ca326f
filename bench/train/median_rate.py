#!/usr/bin/env python3
"""Tokens/s of one training run from its per-step times, read on stdin, the same way for both
programs the side-by-side benchmark compares: tokens per step over the median step time,
leaving out the steps before `--skip` (spillway's report.json holds every step, the first two
included; gpt_torch.py times only the steps after its two warm-up steps).

  median_rate.py spillway < report.json      median_rate.py pytorch < gpt_torch.py's output
"""
import json
import statistics
import sys

if len(sys.argv) != 2 or sys.argv[1] not in ("spillway", "pytorch"):
    sys.exit("usage: median_rate.py spillway|pytorch < JSON")
try:
    record = json.load(sys.stdin)
    if sys.argv[1] == "spillway":
        steps, tokens = record["step_seconds"][2:], record["throughput"]["items_per_step"]
    else:
        steps, tokens = record["step_seconds"], record["tokens_per_step"]
except (ValueError, KeyError, TypeError) as e:
    sys.exit(f"median_rate.py: stdin is not a {sys.argv[1]} run's JSON ({type(e).__name__}: {e})")
if not steps:
    sys.exit("median_rate.py: the run recorded no step after the first two")
print(tokens / statistics.median(steps))
