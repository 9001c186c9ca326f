#!/usr/bin/env bash
# PipeFB against 1F1B on the same ranks, each with and without offload: gpt-s on 2 ranks
# (one thread each) as 1F1B over 2 stages, and as PipeFB with 1 stage whose forwards run on
# rank 0 and backwards on rank 1. Offload: the file tier, keep 1, lookahead 1 (the only tier
# besides peer that this machine has; peer lends the partner's memory, which on 2 ranks
# saves nothing overall). Runs are repeated and interleaved so machine noise spreads over
# all variants. Writes OUT/pipefb.json and prints a markdown table.
#   bench/pipefb/run.sh [OUT_DIR] [REPEATS] [STEPS] [MICROBATCHES]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-$root/build/bench}
repeats=${2:-3}
steps=${3:-8}
m=${4:-8}
mkdir -p "$out" || { echo "bench/pipefb: cannot create $out" >&2; exit 1; }
spillway=${SPILLWAY:-$root/build/release/runtime/spillway}
[ -x "$spillway" ] || { echo "bench/pipefb: no spillway binary at $spillway (build it, or set SPILLWAY)" >&2; exit 1; }
mpiexec=${MPIEXEC:-mpiexec}
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
declare -A layout=(
  [1f1b]="--set parallel.stages=2 --set parallel.schedule=\"1f1b\""
  [pipefb]="--set parallel.stages=1 --set parallel.layout=\"pipefb\""
)
declare -A offload=(
  [none]=""
  [file]="--set offload.tier=\"file\" --set offload.keep=1 --set offload.lookahead=1"
)
runs=()
for ((r = 0; r < repeats; r++)); do
  for variant in 1f1b pipefb; do
    for tier in none file; do
      dir="$out/pipefb-$variant-$tier-r$r"
      mkdir -p "$dir"
      # shellcheck disable=SC2086  # the option strings are word lists on purpose
      "$mpiexec" -n 2 -x OMP_NUM_THREADS=1 "$spillway" train "$root/examples/gpt-s.toml" \
        --set data.source=synthetic --set "train.steps=$steps" --set "train.microbatches=$m" \
        ${layout[$variant]} ${offload[$tier]} --set "output.dir=\"$dir\"" > "$dir.log" 2>&1 ||
        { echo "bench/pipefb: $variant/$tier failed, see $dir.log" >&2; exit 1; }
      echo "$variant offload=$tier run=$r: $(grep "^spillway: \(final\|error\)" "$dir.log" | tail -1)"
      runs+=("$variant:$tier:$dir/report.json")
    done
  done
done
python3 "$root/bench/pipefb/summarize.py" "$out/pipefb.json" "${runs[@]}"
