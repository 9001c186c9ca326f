#!/usr/bin/env bash
# The planner's predicted iteration time beside the measured one, on this machine: gpt-s
# (examples/gpt-s.toml) and gpt-m (12 layers, d 512, 8 heads, seq 256, batch 8) on 2 ranks of
# one thread each, with the layout forced to 2 stages of 1F1B (`train --predict`) and with
# `parallel.stages = "auto"`. Runs are interleaved (repeat, model, mode) so machine noise
# spreads over all of them; the load average is kept beside each run, since on a shared
# machine it is the first thing that explains a miss. Writes OUT/plan_vs_measured.json and
# prints a markdown table (ratio = measured / predicted; the goal is within 15%).
#   bench/planner/predicted_vs_measured.sh [OUT_DIR] [REPEATS] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-$root/build/bench}
repeats=${2:-3}
steps=${3:-8}
mkdir -p "$out"
spillway=${SPILLWAY:-$root/build/release/runtime/spillway}
mpiexec=${MPIEXEC:-mpiexec}
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
declare -A model=(
  [gpt-s]="--set train.microbatches=8"
  [gpt-m]="--set model.layers=12 --set model.d_model=512 --set model.heads=8 --set model.seq=256 --set train.batch=8 --set train.microbatches=4"
)
declare -A mode=(
  [p2]="--set parallel.stages=2 --set parallel.schedule=\"1f1b\" --predict"
  [auto]="--set parallel.stages=\"auto\""
)
runs=()
for ((r = 0; r < repeats; r++)); do
  for m in gpt-s gpt-m; do
    for how in p2 auto; do
      dir="$out/plan-$m-$how-r$r"
      rm -rf "$dir"
      load=$(cut -d' ' -f1 /proc/loadavg)
      # shellcheck disable=SC2086 # the option strings are word lists
      "$mpiexec" -n 2 -x OMP_NUM_THREADS=1 "$spillway" train "$root/examples/gpt-s.toml" \
        --set "train.steps=$steps" --set "output.dir=$dir" ${model[$m]} ${mode[$how]} \
        > "$dir.log" 2>&1
      echo "$load" > "$dir/load_before"
      echo "$m $how run $r (load $load): $(grep -o 'iteration .* planned ([0-9.]*x)' "$dir.log")"
      runs+=("$dir")
    done
  done
done
python3 - "$out/plan_vs_measured.json" "${runs[@]}" <<'PY'
import json, os, statistics, sys
rows = []
for d in sys.argv[2:]:
    _, family, size, how, run = os.path.basename(d).split("-")  # plan-gpt-s-p2-r0
    model = family + "-" + size
    p = json.load(open(os.path.join(d, "report.json")))["pipeline"]
    vs, layout = p["plan_vs_measured"], p["plan"]["layout"]
    rows.append({"model": model, "mode": how, "run": run,
                 "load_before": float(open(os.path.join(d, "load_before")).read()),
                 "layout": f"P={layout['pipeline_ranks']} R={layout['replicas']} "
                           f"{layout['schedule']} v={layout['chunks']} m={layout['microbatches']}",
                 **vs})
json.dump(rows, open(sys.argv[1], "w"), indent=1)
print("| model | mode | layout | predicted s | measured s (median) | ratio (median, range) | load |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for key in sorted({(r["model"], r["mode"]) for r in rows}):
    g = [r for r in rows if (r["model"], r["mode"]) == key]
    ratios = [r["measured_over_predicted"] for r in g]
    print(f"| {key[0]} | {key[1]} | {', '.join(sorted({r['layout'] for r in g}))} | "
          f"{statistics.median(r['predicted_iteration_seconds'] for r in g):.3f} | "
          f"{statistics.median(r['measured_iteration_seconds'] for r in g):.3f} | "
          f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
          f"{min(r['load_before'] for r in g):.1f}-{max(r['load_before'] for r in g):.1f} |")
PY
