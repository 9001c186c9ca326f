#!/usr/bin/env bash
# An example driver stopped by SIGUSR1 (sent to mpiexec, which passes it to both ranks), as a
# batch system warns a job near its time limit: it leaves its checkpoint in the working
# directory, says so, and exits with status 75.
# Usage: driver_stop_test.sh DRIVER MPIEXEC [MPIEXEC FLAGS...]
set -u
driver=$1 mpiexec=$2
shift 2
name=$(basename "$driver")
source "$(dirname "$0")/../cli/cli_support.sh"
# Whatever happens, no run outlives the test.
trap 'pkill -9 -f -- "$driver 100000" 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 1

"$mpiexec" -n 2 "$@" -x OMP_NUM_THREADS=1 "$driver" 100000 > run.txt 2>&1 &
launcher=$!
for _ in $(seq 600); do grep -q '^step 3 ' run.txt 2>/dev/null && break; sleep 0.1; done
check "the driver trains" grep -q '^step 3 ' run.txt
kill -USR1 "$launcher"
for _ in $(seq 600); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
kill -9 "$launcher" 2>/dev/null
wait "$launcher"
status=$?
cat run.txt | tail -5
check "it exits with status 75" test "$status" -eq 75
check "it says where its checkpoint is" \
  grep -Eq "^$name: stopped by signal 10; checkpoint $name-stopped.h5$" run.txt
check "the checkpoint is there" test -s "$name-stopped.h5"
check "no temporary is left" test -z "$(find . -name '*.tmp.*')"
finish
