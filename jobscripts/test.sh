#!/usr/bin/env bash
# Installs what is missing, builds (warnings are errors) and runs every test with ctest.
#   jobscripts/test.sh              release build in build/release
#   PRESET=asan jobscripts/test.sh  the same under AddressSanitizer + UBSan
# Extra arguments go to ctest (e.g. -R Linear, -L kernels).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
preset=${PRESET:-release}

"$here/setup-deps.sh"

# Root may launch MPI ranks only when told so; the flags live here and in the CTest MPI
# flags, never in library code.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Two ranks on two cores: one compute thread each unless the caller says otherwise.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# GNU nproc honours OMP_NUM_THREADS: ask for the machine's processors without it.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)

cd "$root"
cmake --preset "$preset" -DSPILLWAY_WERROR=ON >/dev/null
cmake --build --preset "$preset" -j "$cores"
ctest --preset "$preset" -j "$cores" --timeout 600 "$@"
