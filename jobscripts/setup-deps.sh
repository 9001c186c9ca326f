#!/usr/bin/env bash
# Installs the Debian 12 packages spillway builds, tests and runs with.
# Idempotent: does nothing (and needs no root) when every package is already there.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config gfortran git
  # MPI, topology, BLAS
  openmpi-bin libopenmpi-dev
  hwloc-nox libhwloc-dev
  libblis-openmp-dev
  # tests and benchmarks
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  python3  # the CLI tests read JSON with it; the bench summaries are Python
  procps   # pgrep and pkill: the signal tests find and clean up their ranks
  # I/O and configuration
  libhdf5-openmpi-dev zlib1g-dev
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev
  # real data
  fortunes dataset-fashion-mnist
  # job-script tests on a local Slurm
  slurm-wlm munge
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "setup-deps: missing packages (${missing[*]}) and neither root nor sudo: install them as root" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup-deps: done"
