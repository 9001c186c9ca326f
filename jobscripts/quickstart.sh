#!/usr/bin/env bash
# Installs what is missing, builds, and runs the default job (examples/quickstart.toml):
# a small GPT on the fortunes corpus. Prints where its report is.
# Today the trainer runs on one rank; the 2-rank pipeline with automatic plan and offload
# replaces this job as those capabilities land (see README.md, "Where the project stands").
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
build/release/runtime/spillway train examples/quickstart.toml --set "output.dir=$out"
echo "report: $root/$out/report.json"
