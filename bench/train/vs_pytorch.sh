#!/usr/bin/env bash
# Tokens/s of a full training step, spillway beside PyTorch (Debian python3-torch), same model,
# same threads, runs alternated in one sitting (this machine is noisy). Writes OUT/train.json
# and OUT/core_paces.json (bench/core_paces.sh: how evenly the two cores ran at the start).
# Both programs run pinned to the same cores, the first THREADS of them: spillway binds its
# threads from core 0 on by itself, and a PyTorch left floating would get whichever core the
# host runs faster at the moment (this VM's cores drift apart by up to 15%).
# Both rates are tokens per step over the median step after the first two (median_rate.py).
#   bench/train/vs_pytorch.sh [OUT_DIR] [REPEATS]
# Needs: build/release/runtime/spillway, and /usr/bin/python3 with torch (apt install python3-torch).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build/bench}
repeats=${2:-3}
mkdir -p "$out"
spillway=${SPILLWAY:-$root/build/release/runtime/spillway}
declare -A shape=(
  [gpt-s]="--set model.layers=8 --set model.d_model=256 --set model.heads=8 --set model.seq=128 --set train.batch=16"
  [gpt-m]="--set model.layers=12 --set model.d_model=512 --set model.heads=8 --set model.seq=256 --set train.batch=8"
)
declare -A steps=([gpt-s]=12 [gpt-m]=6)
"$root/bench/core_paces.sh" "$spillway" "$out/core_paces.json"
results=()
for model in gpt-s gpt-m; do
  for threads in 1 2; do
    cores=$(seq -s, 0 $((threads - 1)))
    for ((r = 0; r < repeats; r++)); do
      dir="$out/train-$model-t$threads-r$r"
      OMP_NUM_THREADS=$threads taskset -c "$cores" "$spillway" train "$root/examples/gpt-s.toml" ${shape[$model]} \
        --set data.source=synthetic --set "train.steps=${steps[$model]}" \
        --set "output.dir=$dir" > "$dir.log" 2>&1
      s=$(python3 "$here/median_rate.py" spillway < "$dir/report.json")
      # PyTorch's BLAS is the same BLIS: give it the kernels spillway ran (spillway picks
      # them itself where this BLIS would fall back to its generic ones).
      arch=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["blas"]["arch_type"])' < "$dir/report.json")
      p=$(BLIS_ARCH_TYPE=$arch taskset -c "$cores" /usr/bin/python3 "$root/bench/pytorch/gpt_torch.py" --model "$model" --threads "$threads" \
            --steps $((steps[$model] - 2)) --warmup 2 | python3 "$here/median_rate.py" pytorch)
      echo "$model threads=$threads run=$r spillway=$s pytorch=$p"
      results+=("{\"model\":\"$model\",\"threads\":$threads,\"run\":$r,\"spillway\":$s,\"pytorch\":$p}")
    done
  done
done
printf '[%s]\n' "$(IFS=,; echo "${results[*]}")" > "$out/train.json.tmp" && mv "$out/train.json.tmp" "$out/train.json"
python3 - "$out/train.json" <<'PY'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))
print("| model | threads | spillway tokens/s | PyTorch tokens/s | ratio (median of per-run ratios) |")
print("| --- | --- | --- | --- | --- |")
for model in ("gpt-s", "gpt-m"):
    for t in (1, 2):
        rs = [r for r in rows if r["model"] == model and r["threads"] == t]
        s = statistics.median(r["spillway"] for r in rs)
        p = statistics.median(r["pytorch"] for r in rs)
        ratio = statistics.median(r["spillway"] / r["pytorch"] for r in rs)
        print(f"| {model} | {t} | {s:,.0f} | {p:,.0f} | {ratio:.2f}x |")
PY
