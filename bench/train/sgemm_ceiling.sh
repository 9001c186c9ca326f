#!/usr/bin/env bash
# How close a full gpt-m training step comes to raw sgemm on this machine, both measured in
# turn in one sitting (the VM's pace drifts by 10-20% between sittings, so a ceiling from
# another run is not a fair denominator). Per repeat and thread count: bench_kernels' raw
# bli_sgemm at the model's Linear shapes (2048 tokens; forward, input and weight gradient of
# qkv, proj, fc1, fc2), whose flops over its time is the ceiling, then a single-rank
# synthetic-data training whose tokens/s (median_rate.py) times (6*N + 12*L*T*d) flops per
# token (N all parameters) is the step's rate. Writes OUT/ceiling.json, prints a table.
#   bench/train/sgemm_ceiling.sh [OUT_DIR] [REPEATS]
# Needs build/release/runtime/spillway and build/release/bench/kernels/bench_kernels
# (SPILLWAY, BENCH_KERNELS override them).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build/bench}
repeats=${2:-3}
mkdir -p "$out"
spillway=${SPILLWAY:-$root/build/release/runtime/spillway}
bench=${BENCH_KERNELS:-$root/build/release/bench/kernels/bench_kernels}
for tool in "$spillway" "$bench"; do
  [[ -x $tool ]] || { echo "sgemm_ceiling.sh: $tool is missing; build the release preset" >&2; exit 1; }
done
layers=12 d_model=512 seq=256 batch=8 steps=6
rows=()
for ((r = 0; r < repeats; r++)); do
  for threads in 1 2; do
    cores=$(seq -s, 0 $((threads - 1)))
    json="$out/sgemm-t$threads-r$r.json"
    OMP_NUM_THREADS=$threads taskset -c "$cores" "$bench" \
      --benchmark_filter="^sgemm/linear_.*_d$d_model/t$threads/" --benchmark_repetitions=1 \
      --benchmark_min_time=0.2 --benchmark_format=json > "$json" 2> "$json.log"
    dir="$out/train-t$threads-r$r"
    OMP_NUM_THREADS=$threads taskset -c "$cores" "$spillway" train "$root/examples/gpt-s.toml" \
      --set model.layers=$layers --set model.d_model=$d_model --set model.heads=8 \
      --set model.seq=$seq --set train.batch=$batch --set data.source=synthetic \
      --set train.steps=$steps --set "output.dir=$dir" > "$dir.log" 2>&1
    rows+=("$(python3 "$here/ceiling_row.py" "$json" "$dir/report.json" "$threads" "$r" \
      "$layers" "$d_model" "$seq")")
    echo "${rows[-1]}"
  done
done
printf '[%s]\n' "$(IFS=,; echo "${rows[*]}")" > "$out/ceiling.json"
python3 - "$out/ceiling.json" <<'EOF'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))
print("| threads | gpt-m tokens/s | step GFLOP/s | raw sgemm GFLOP/s | ratio (median of per-run ratios) |")
print("| --- | --- | --- | --- | --- |")
for t in sorted({r["threads"] for r in rows}):
    mine = [r for r in rows if r["threads"] == t]
    med = lambda k: statistics.median(r[k] for r in mine)
    lo, hi = min(r["ratio"] for r in mine), max(r["ratio"] for r in mine)
    print(f"| {t} | {med('tokens_per_s'):,.0f} | {med('step_gflops'):.1f} | "
          f"{med('sgemm_gflops'):.1f} | {100 * med('ratio'):.0f}% ({100 * lo:.0f}-{100 * hi:.0f}%) |")
EOF
