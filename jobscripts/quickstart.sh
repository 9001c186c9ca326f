#!/usr/bin/env bash
# Installs what is missing, builds, and runs the default job (examples/quickstart.toml):
# a small GPT on the fortunes corpus on 2 ranks, laid out by the automatic planner, with
# stashes offloaded to a file. Prints where its report, trace and timeline are.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
"$here/setup-deps.sh"
cd "$root"
cmake --preset release >/dev/null
cmake --build --preset release --target spillway
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
out=${SPILLWAY_OUT:-runs/quickstart}
# One thread per rank: the two ranks share this node's cores.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
threads=$(( cores / 2 > 0 ? cores / 2 : 1 ))
mpiexec -n 2 --oversubscribe -x OMP_NUM_THREADS=$threads \
  build/release/runtime/spillway train examples/quickstart.toml --set "output.dir=$out"
echo "report:   $root/$out/report.json"
echo "trace:    $root/$out/trace.json (open in https://ui.perfetto.dev)"
echo "timeline: $root/$out/timeline.svg"
