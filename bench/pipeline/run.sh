#!/usr/bin/env bash
# Iteration time and bubble of gpt-s as a 2-rank pipeline (one thread per rank), for each
# schedule and m in {2, 4, 8, 16} microbatches, beside the simulator's prediction for the
# same run (fed with the stage costs the run measured) and the closed form. Runs are
# repeated and interleaved (schedule, m, repeat) so machine noise spreads over all of them.
# The closed forms assume equal stages: 2 stages split gpt-s's 10 blocks (embedding, 8
# layers, head) 5 | 5, and the 4 interleaved stages take two layers each, the embedding and
# the head (each a small fraction of a layer) with the first and the last ones.
# Writes OUT/pipeline.json (and OUT/core_paces.json, bench/core_paces.sh) and prints a
# markdown table.
#   bench/pipeline/run.sh [OUT_DIR] [REPEATS] [STEPS]
set -euo pipefail
set -f  # the stage ranges below are word-split on purpose and must not glob
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-$root/build/bench}
repeats=${2:-3}
steps=${3:-12}
mkdir -p "$out"
spillway=${SPILLWAY:-$root/build/release/runtime/spillway}
mpiexec=${MPIEXEC:-mpiexec}
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
declare -A extra=(
  [gpipe]="--set parallel.stages=2"
  [1f1b]="--set parallel.stages=2"
  [interleaved]="--set parallel.stages=[[0,2],[3,4],[5,6],[7,9]] --set parallel.chunks=2"
  [zb-h1]="--set parallel.stages=2"
)
# How evenly cores 0 and 1, where the two ranks run, went when the sitting started.
"$root/bench/core_paces.sh" "$spillway" "$out/core_paces.json"
runs=()
for ((r = 0; r < repeats; r++)); do
  for m in 2 4 8 16; do
    for schedule in gpipe 1f1b interleaved zb-h1; do
      dir="$out/pipeline-$schedule-m$m-r$r"
      "$mpiexec" -n 2 -x OMP_NUM_THREADS=1 "$spillway" train "$root/examples/gpt-s.toml" \
        --set data.source=synthetic --set "train.steps=$steps" --set "train.microbatches=$m" \
        --set "parallel.schedule=\"$schedule\"" ${extra[$schedule]} \
        --set "output.dir=$dir" > "$dir.log" 2>&1
      echo "$schedule m=$m run=$r: $(grep "^spillway: \(final\|error\)" "$dir.log" | tail -1)"
      runs+=("$dir/report.json")
    done
  done
done
python3 "$root/bench/pipeline/summarize.py" "$out/pipeline.json" "${runs[@]}"
