#!/usr/bin/env bash
# Runs bench_kernels (ops beside raw BLIS sgemm and memcpy) and prints the Markdown summary.
#
#   bench/kernels/run.sh [OUT_DIR] [extra --benchmark_* flags...]
#
# OUT_DIR (default build/bench) receives kernels.json (Google Benchmark JSON: medians, means,
# stddev and cv of 5 repetitions) and kernels.md (the table of summarize.py).
# Environment:
#   BENCH_KERNELS  the executable to run (default: build it in BUILD_DIR)
#   BUILD_DIR      build tree to build bench_kernels in (default build/release, configured with
#                  the release preset if it is not yet)
#   MIN_TIME       seconds per repetition (default 0.2), REPETITIONS (default 5)
# Repetitions are interleaved at random across benchmarks, so each op and its baseline are
# measured alternately in one sitting: this machine is shared and noisy (see
# /work/shared/notes/machine.md), and only medians of alternated runs compare.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build/bench}
[[ $# -gt 0 ]] && shift
mkdir -p "$out"
out=$(cd "$out" && pwd)

bin=${BENCH_KERNELS:-}
if [[ -z $bin ]]; then
  build=${BUILD_DIR:-$root/build/release}
  if [[ ! -f $build/CMakeCache.txt ]]; then
    if [[ $build == "$root/build/release" ]]; then
      (cd "$root" && cmake --preset release >/dev/null)
    else
      cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    fi
  fi
  cmake --build "$build" --target bench_kernels
  bin=$build/bench/kernels/bench_kernels
fi

echo "load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$bin" \
  --benchmark_repetitions="${REPETITIONS:-5}" \
  --benchmark_report_aggregates_only=true \
  --benchmark_enable_random_interleaving=true \
  --benchmark_min_time="${MIN_TIME:-0.2}" \
  --benchmark_context=load_average_before="$(cut -d' ' -f1-3 /proc/loadavg)" \
  --benchmark_out="$out/kernels.json" \
  --benchmark_out_format=json \
  "$@"
echo "load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 "$here/summarize.py" "$out/kernels.json" | tee "$out/kernels.md"
