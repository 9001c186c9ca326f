#!/usr/bin/env bash
# Memory pressure: gpt-m and gpt-l as 2-rank GPipe pipelines (one thread per rank), swept over
# memory cap x offload tier x lookahead, beside the ceilings (memcpy, MPI point-to-point,
# MPI_Get/Put, storage) measured in the same run. Writes into OUT_DIR:
#   jobs/MODEL.toml          the job file of each model (the sweep adds --set overrides)
#   runs/NAME/               each run's output.dir (report.json, trace), NAME.log, NAME.command
#   ceilings-start.json, ceilings-end.json   bench_ceilings' figures before and after the runs
#   manifest.jsonl           one line per sweep point, skipped ones included
#   results.json, results.csv, memory_pressure.svg, bandwidth.svg, results.md (summarize.py)
#
#   bench/memory_pressure/run.sh OUT_DIR [--quick] [--models "gpt-m gpt-l"] [--caps "none 0.6"]
#                                [--tiers "file peer host"] [--lookaheads "1 2"] [--keep N]
#
# Caps are fractions of the model's measured no-offload peak (the largest rank's ledger peak),
# so a sweep means the same on any machine; "none" runs the tiers without a cap. By default
# gpt-m gets none, 0.6 and 0.45, gpt-l none and 0.7 (its weights, gradients and AdamW state
# alone are 46% of its peak); --caps sets the list for every model. Per model: the no-offload run first and last (two
# references for the iteration-time ratio, a machine this noisy needs both), then for each cap
# the no-offload job under it (it should fail: the cap binds) and every tier x lookahead.
# The host tier runs only where there is a second memory node (NUMA node or memory kind);
# elsewhere manifest.jsonl records it as skipped, with the reason.
# --quick: a small model, caps none and 0.85, lookahead 1, small ceilings (a smoke test: seconds).
# --keep N: offload.keep for every offload run (default 1, the job default: the newest stash
# stays resident; 0 offloads every stash, the least memory).
# Environment:
#   SPILLWAY        the binary (default build/release/runtime/spillway)
#   BENCH_CEILINGS  bench_ceilings (default: bench/memory_pressure/bench_ceilings in the
#                   build tree SPILLWAY is in)
#   MPIEXEC         the launcher (default mpiexec); --oversubscribe is added only when the
#                   machine has fewer than 2 CPUs and MPIEXEC is mpiexec or mpirun
#   OFFLOAD_DIR     the file tier's directory (default $SLURM_TMPDIR, else $TMPDIR, else /tmp)
#   OMP_NUM_THREADS threads per rank (default 1)
set -euo pipefail

die() { echo "run.sh: $*" >&2; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

[ $# -ge 1 ] || die "usage: bench/memory_pressure/run.sh OUT_DIR [--quick] [--models LIST] [--caps LIST] [--tiers LIST] [--lookaheads LIST] [--keep N]"
out=$1
shift
case $out in -*) die "OUT_DIR comes first, got option $out" ;; esac
quick=0 models="gpt-m gpt-l" caps="" tiers="file peer host" lookaheads="" keep=1
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1; shift ;;
    --models|--caps|--tiers|--lookaheads|--keep)
      [ $# -ge 2 ] || die "$1 needs a value"
      case $1 in
        --models) models=$2 ;; --caps) caps=$2 ;; --tiers) tiers=$2 ;; --lookaheads) lookaheads=$2 ;;
        --keep) keep=$2 ;;
      esac
      shift 2 ;;
    *) die "unknown option $1 (options: --quick, --models, --caps, --tiers, --lookaheads, --keep)" ;;
  esac
done
if [ $quick -eq 1 ]; then
  models=tiny caps=${caps:-none 0.85} lookaheads=${lookaheads:-1}
fi
for c in $caps; do
  [ "$c" = none ] && continue
  python3 -c "import sys; v = float(sys.argv[1]); sys.exit(0 if 0 < v <= 1 else 1)" "$c" 2>/dev/null \
    || die "--caps takes fractions of the no-offload peak in (0, 1], or none, got '$c'"
done
for t in $tiers; do
  case $t in file|peer|host) ;; *) die "--tiers takes file, peer and host, got '$t'" ;; esac
done
case $keep in ''|*[!0-9]*) die "--keep takes a non-negative integer, got '$keep'" ;; esac
for l in ${lookaheads:-1}; do
  case $l in ''|*[!0-9]*|0) die "--lookaheads takes positive integers, got '$l'" ;; esac
done
for m in $models; do
  case $m in gpt-m|gpt-l|tiny) ;; *) die "--models takes gpt-m and gpt-l, got '$m'" ;; esac
done

spillway=${SPILLWAY:-$root/build/release/runtime/spillway}
[ -x "$spillway" ] && [ -f "$spillway" ] \
  || die "no spillway binary at $spillway (build it: cmake --build --preset release --target spillway, or set SPILLWAY)"
spillway=$(cd "$(dirname "$spillway")" && pwd)/$(basename "$spillway")
ceilings=${BENCH_CEILINGS:-$(dirname "$(dirname "$spillway")")/bench/memory_pressure/bench_ceilings}
[ -x "$ceilings" ] && [ -f "$ceilings" ] \
  || die "no bench_ceilings at $ceilings (build it: cmake --build --preset release --target bench_ceilings, with SPILLWAY_BUILD_BENCH=ON, or set BENCH_CEILINGS)"
mkdir -p "$out" 2>/dev/null && [ -d "$out" ] && [ -w "$out" ] && touch "$out/.writable" 2>/dev/null \
  || die "cannot write to OUT_DIR $out: choose a writable directory"
rm -f "$out/.writable"
out=$(cd "$out" && pwd)
offload_dir=${OFFLOAD_DIR:-${SLURM_TMPDIR:-${TMPDIR:-/tmp}}}
[ -d "$offload_dir" ] && [ -w "$offload_dir" ] \
  || die "the file tier's directory $offload_dir is not a writable directory: set OFFLOAD_DIR"

mpiexec=${MPIEXEC:-mpiexec}
command -v "$mpiexec" >/dev/null 2>&1 || die "no MPI launcher '$mpiexec' on PATH (install Open MPI, or set MPIEXEC)"
launch=("$mpiexec" -n 2)
# GNU nproc honours OMP_NUM_THREADS: count the CPUs without it.
if [ "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" -lt 2 ]; then
  case $(basename "$mpiexec") in mpiexec|mpirun) launch+=(--oversubscribe) ;; esac
fi
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export BLIS_NUM_THREADS=${BLIS_NUM_THREADS:-$OMP_NUM_THREADS}
# Open MPI's default one-sided component is several times slower at MPI_Get on one node than
# osc sm; the peer tier and the RMA ceilings run with sm, as the job scripts do.
export OMPI_MCA_osc=sm

# The host tier needs a second memory node (NUMA node or memory kind).
numa_nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)

mkdir -p "$out/jobs" "$out/runs"
manifest=$out/manifest.jsonl
: > "$manifest"

# Per model: the job file, the bench's settings on top of it, steps, lookaheads.
declare -A bench_set steps look caps_of
if [ $quick -eq 1 ]; then
  cat > "$out/jobs/tiny.toml" <<'TOML'
# run.sh --quick: a small GPT whose 16 stashes outweigh everything else, so offload shows.
[model]
kind = "gpt"
layers = 6
d_model = 128
heads = 4
seq = 64
[data]
source = "synthetic"
[train]
batch = 16
microbatches = 16
steps = 4
[parallel]
stages = 2
schedule = "gpipe"
TOML
  bench_set[tiny]=""
  steps[tiny]=4
  look[tiny]=$lookaheads
  caps_of[tiny]=$caps
  ceiling_args=(--bytes $((16 << 20)) --file-bytes $((32 << 20)) --reps 3)
else
  for m in gpt-m gpt-l; do cp "$root/examples/$m.toml" "$out/jobs/$m.toml"; done
  # gpt-m: 16 microbatches of one sample, so stashes (about 50 MiB each per stage) are the
  # larger part of a rank's memory, as in the models offload is for; 4 steps (~10 s each here).
  bench_set[gpt-m]="--set train.batch=16 --set train.microbatches=16"
  steps[gpt-m]=4
  look[gpt-m]=${lookaheads:-1 2}
  caps_of[gpt-m]=${caps:-none 0.6 0.45}
  # gpt-l: 8 microbatches of one sample and 3 steps; a step is 4-8x gpt-m's, so one lookahead.
  bench_set[gpt-l]="--set train.batch=8 --set train.microbatches=8"
  steps[gpt-l]=3
  look[gpt-l]=${lookaheads:-1}
  caps_of[gpt-l]=${caps:-none 0.7}
  ceiling_args=()
fi
common=(--set data.source=synthetic --set "offload.keep=$keep" --set offload.verify=false
        --set "offload.dir=\"$offload_dir\"")

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "run.sh: load average before: $load_before; output in $out" >&2
start=$(date +%s)

# manifest_line KEY=VALUE...: one JSON object (values are numbers, or strings without quotes).
manifest_line() {
  python3 - "$@" >> "$manifest" <<'PY'
import json, sys
row = {}
for kv in sys.argv[1:]:
    k, v = kv.split("=", 1)
    if v == "none" and k.startswith("cap_"):
        row[k] = None  # no memory cap
    elif k == "cap_fraction":
        row[k] = float(v)
    else:
        row[k] = int(v) if v.isdigit() else v
print(json.dumps(row))
PY
}

# run NAME MODEL TIER CAP_FRACTION CAP_BYTES LOOKAHEAD: one spillway train; never fails the sweep.
run() {
  local name=$1 model=$2 tier=$3 fraction=$4 cap=$5 la=$6 status=0
  local dir=$out/runs/$name
  rm -rf "$dir"
  local args=("$out/jobs/$model.toml" ${bench_set[$model]} "${common[@]}"
              --set "train.steps=${steps[$model]}" --set "offload.tier=\"$tier\""
              --set "offload.lookahead=$la" --set "output.dir=\"$dir\"")
  [ "$cap" != none ] && args+=(--set "memory.cap=$cap")
  printf '%q ' "${launch[@]}" "$spillway" train "${args[@]}" > "$dir.command"
  echo >> "$dir.command"
  local t0=$(date +%s) load
  load=$(cut -d' ' -f1 /proc/loadavg)
  timeout "${RUN_TIMEOUT:-1800}" "${launch[@]}" "$spillway" train "${args[@]}" > "$dir.log" 2>&1 || status=$?
  local said
  said=$(grep -m1 '^spillway: error' "$dir.log" || grep -v '^step ' "$dir.log" | tail -1)
  echo "  $name: exit $status after $(( $(date +%s) - t0 ))s: ${said:0:160}" >&2
  manifest_line name="$name" model="$model" tier="$tier" cap_fraction="$fraction" cap_bytes="$cap" \
    lookahead="$la" keep="$keep" exit_code="$status" report="runs/$name/report.json" log="runs/$name.log" \
    load_at_start="$load"
  return 0
}

# Largest rank's ledger peak of a finished run.
peak_of() {
  python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print(max(x['peak_bytes'] for x in r['pipeline']['measured']['ranks']))" "$1"
}

# measure_ceilings WHEN: bench_ceilings into ceilings-WHEN.json. Measured before and after the
# runs; summarize.py takes the higher of the two for each figure, as other work on the machine
# only ever lowers them.
measure_ceilings() {
  echo "run.sh: ceilings, $1 (memcpy, MPI, storage in $offload_dir)" >&2
  "${launch[@]}" "$ceilings" --out "$out/ceilings-$1.json" --dir "$offload_dir" "${ceiling_args[@]}" \
    > "$out/ceilings-$1.log" 2>&1 || die "bench_ceilings failed: $(tail -1 "$out/ceilings-$1.log")"
}
measure_ceilings start

for model in $models; do
  echo "run.sh: $model" >&2
  run "$model-none-nocap-r0" "$model" none none none 1
  report=$out/runs/$model-none-nocap-r0/report.json
  [ -f "$report" ] || die "the no-offload run of $model failed, so there is nothing to compare with: $(grep -v '^step ' "$out/runs/$model-none-nocap-r0.log" | tail -1) (full log: $out/runs/$model-none-nocap-r0.log)"
  peak=$(peak_of "$report")
  for fraction in ${caps_of[$model]}; do
    if [ "$fraction" = none ]; then
      cap=none label=nocap
    else
      cap=$(python3 -c "import sys; print(int(float(sys.argv[1]) * int(sys.argv[2])))" "$fraction" "$peak")
      label=cap$(python3 -c "import sys; print(round(100 * float(sys.argv[1])))" "$fraction")
      # Under a cap below the peak the job without offload must fail: proof the cap binds.
      python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 1 else 1)" "$fraction" \
        && run "$model-none-$label" "$model" none "$fraction" "$cap" 1
    fi
    for tier in $tiers; do
      [ "$tier" = host ] && [ "$numa_nodes" -lt 2 ] && continue
      for la in ${look[$model]}; do
        run "$model-$tier-$label-la$la" "$model" "$tier" "$fraction" "$cap" "$la"
      done
    done
  done
  if [[ " $tiers " == *" host "* ]] && [ "$numa_nodes" -lt 2 ]; then
    manifest_line name="$model-host" model="$model" tier=host \
      skipped="this machine has $numa_nodes memory node (/sys/devices/system/node); the host tier needs a second NUMA node or memory kind"
  fi
  [ $quick -eq 1 ] || run "$model-none-nocap-r1" "$model" none none none 1
done

measure_ceilings end
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
echo "run.sh: sweep done in $(( $(date +%s) - start ))s; load average after: $load_after" >&2
# What the numbers were measured on and under.
python3 - "$out/environment.json" "$load_before" "$load_after" "$(( $(date +%s) - start ))" \
  "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" "$numa_nodes" "$OMP_NUM_THREADS" \
  "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" "$offload_dir" <<'PY'
import json, socket, sys, time
keys = ["load_before", "load_after", "seconds", "cpus", "memory_nodes", "threads_per_rank",
        "commit", "offload_dir"]
env = dict(zip(keys, sys.argv[2:]))
for k in ("seconds", "cpus", "memory_nodes", "threads_per_rank"):
    env[k] = int(env[k])
env.update(host=socket.gethostname(), ranks=2, date=time.strftime("%Y-%m-%d %H:%M"))
json.dump(env, open(sys.argv[1], "w"), indent=1)
PY
python3 "$here/summarize.py" "$out" | tee "$out/results.md"
