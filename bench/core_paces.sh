#!/usr/bin/env bash
# How fast each given core runs right now: one single-rank gpt-s training (1 thread, 6 steps,
# synthetic data) pinned to every core at once, its median tokens/s. This VM's cores drift
# apart by up to 15% for minutes at a time, which a two-rank benchmark shows as stage
# imbalance and a side-by-side benchmark as noise; the benchmarks record this beside their
# results so a reader can tell an even sitting from an uneven one.
#   bench/core_paces.sh SPILLWAY OUT.json [CORE...]   (default: cores 0 and 1, or 0 alone)
# Prints one line; writes OUT.json: {"cores": [...], "tokens_per_s": [...], "spread": max/min - 1}.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bench/core_paces.sh SPILLWAY OUT.json [CORE...]" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
spillway=$1
out=$2
shift 2
# The benchmarks that call this run on the first two cores (two ranks, or 1 and 2 threads).
[ $# -gt 0 ] || set -- $(seq 0 $(($(nproc) > 1 ? 1 : 0)))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for core in "$@"; do
  OMP_NUM_THREADS=1 taskset -c "$core" "$spillway" train "$root/examples/gpt-s.toml" \
    --set data.source=synthetic --set train.steps=6 --set "output.dir=$tmp/core$core" \
    > "$tmp/core$core.log" 2>&1 &
done
wait
python3 - "$tmp" "$out" "$@" <<'PY'
import json, os, sys
tmp, out, cores = sys.argv[1], sys.argv[2], [int(c) for c in sys.argv[3:]]
rates = []
for core in cores:
    report = os.path.join(tmp, f"core{core}", "report.json")
    if not os.path.exists(report):
        sys.exit(f"core_paces: the training pinned to core {core} wrote no report; "
                 f"see its log: {open(os.path.join(tmp, f'core{core}.log')).read()[-400:]}")
    rates.append(json.load(open(report))["throughput"]["median"])
record = {"cores": cores, "tokens_per_s": rates, "spread": max(rates) / min(rates) - 1}
with open(out + ".tmp", "w") as f:
    json.dump(record, f)
os.replace(out + ".tmp", out)
print("core paces (gpt-s tokens/s, 1 thread each, at once): "
      + ", ".join(f"core {c} {r:,.0f}" for c, r in zip(cores, rates))
      + f"; spread {100 * record['spread']:.1f}%")
PY
