#!/usr/bin/env bash
# Iteration time and bubble of gpt-s as a 2-rank pipeline (one thread per rank), for each
# schedule and m in {2, 4, 8, 16} microbatches, beside the simulator's prediction for the
# same run (fed with the stage costs the run measured) and the closed form. Runs are
# repeated and interleaved (schedule, m, repeat) so machine noise spreads over all of them.
# The closed forms assume equal stages. By default (PARTITION=layers) 2 stages split gpt-s's
# 10 blocks (embedding, 8 layers, head) 5 | 5, and the 4 interleaved stages take two layers
# each, the embedding and the head (each a small fraction of a layer) with the first and the
# last ones. The rank that carries the head is the heavier one; PARTITION=split gives the
# other rank LN1 and the first attention head of the layer after its last one instead
# (model.split_layers), which moves about half the head's cost across.
# Writes OUT/pipeline.json (and OUT/core_paces.json, bench/core_paces.sh) and prints a
# markdown table.
#   [PARTITION=layers|split] bench/pipeline/run.sh [OUT_DIR] [REPEATS] [STEPS]
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
# Two stages: blocks 0-5 (embedding, layers 0-3, layer 4's front) | 6-10 with layer 4 split;
# four: 0-3 (embedding, layers 0-1, layer 2's front) | 4-5 | 6-7 | 8-10 with layer 2 split.
case ${PARTITION:-layers} in
  split)
    two="--set model.split_layers=[[4,1]] --set parallel.stages=[[0,5],[6,10]]"
    four="--set model.split_layers=[[2,1]] --set parallel.stages=[[0,3],[4,5],[6,7],[8,10]]";;
  layers)
    two="--set parallel.stages=2"
    four="--set parallel.stages=[[0,2],[3,4],[5,6],[7,9]]";;
  *) echo "run.sh: PARTITION must be layers or split, got '$PARTITION'" >&2; exit 2;;
esac
declare -A extra=(
  [gpipe]="$two"
  [1f1b]="$two"
  [interleaved]="$four --set parallel.chunks=2"
  [zb-h1]="$two"
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
