#!/usr/bin/env python3
"""One row of sgemm_ceiling.sh: raw sgemm's GFLOP/s over its 12 Linear shapes (flops over
time, from bench_kernels' JSON) and the training step's GFLOP/s (tokens/s from report.json's
median step after the first two, times 6*N + 12*L*T*d flops per token), as one JSON line.

  ceiling_row.py SGEMM.json REPORT.json THREADS RUN LAYERS D_MODEL SEQ
"""
import json, statistics, sys
bench, report = (json.load(open(p)) for p in sys.argv[1:3])
threads, run, layers, d, seq = map(int, sys.argv[3:])
runs = [b for b in bench["benchmarks"] if b.get("run_type") == "iteration"]
if len(runs) != 12:
    sys.exit(f"sgemm_ceiling.sh: expected 12 sgemm shapes in {sys.argv[1]}, found {len(runs)}")
# real_time is in the benchmark's time_unit (ms here); flop_count is per iteration.
scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
seconds = sum(b["real_time"] * scale[b["time_unit"]] for b in runs)
ceiling = sum(b["flop_count"] for b in runs) / seconds / 1e9
tokens = report["throughput"]["items_per_step"] / statistics.median(report["step_seconds"][2:])
flops_per_token = 6 * report["parameters"] + 12 * layers * seq * d
step = tokens * flops_per_token / 1e9
print(json.dumps({"threads": threads, "run": run, "tokens_per_s": tokens,
                  "step_gflops": step, "sgemm_gflops": ceiling, "ratio": step / ceiling}))
