#!/usr/bin/env bash
# CPU seconds per gpt-s training step on one thread, spillway beside PyTorch, for a machine
# too loaded for wall-clock tokens/s (vs_pytorch.sh): each is the difference between a 12-step
# and a 4-step run (2 + 10 against 2 + 2 for PyTorch), so start-up cancels, and CPU time does
# not count the time other jobs hold the core (their cache pollution still counts).
#   bench/train/cpu_per_step.sh [REPEATS] [SPILLWAY_BINARY...]   (default: this tree's build)
# Prints per run: seconds per step and tokens per CPU second, then the per-run ratios.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repeats=${1:-3}
shift || true
binaries=("$@")
[ ${#binaries[@]} -gt 0 ] || binaries=("$root/build/release/runtime/spillway")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
shape="--set model.layers=8 --set model.d_model=256 --set model.heads=8 --set model.seq=128
       --set train.batch=16 --set data.source=synthetic"
cpu() { /usr/bin/time -f "%U %S" "$@" 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}'; }
per_step() { python3 -c "print(f'{($2 - $1) / 8:.4f}')"; }
for ((r = 0; r < repeats; r++)); do
  for i in "${!binaries[@]}"; do
    run() { OMP_NUM_THREADS=1 cpu "${binaries[$i]}" train "$root/examples/gpt-s.toml" $shape \
              --set "train.steps=$1" --set "output.dir=$out/run"; }
    s=$(per_step "$(run 4)" "$(run 12)")
    echo "run=$r spillway[$i]=${binaries[$i]} s/step=$s tokens/cpu-s=$(python3 -c "print(round(2048 / $s))")"
  done
  torch() { cpu /usr/bin/python3 "$root/bench/pytorch/gpt_torch.py" --model gpt-s --threads 1 \
              --steps "$1" --warmup 2; }
  s=$(per_step "$(torch 2)" "$(torch 10)")
  echo "run=$r pytorch s/step=$s tokens/cpu-s=$(python3 -c "print(round(2048 / $s))")"
done
