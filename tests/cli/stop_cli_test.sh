#!/usr/bin/env bash
# `spillway train` stopped by a signal, as a batch system stops a job near its time limit:
# SIGUSR1 or SIGTERM ends the run after the step it lands in, with a checkpoint, the report
# and exit status 75; resuming from that checkpoint ends where a run straight through ends.
# Under mpiexec a signal to one rank stops every rank after the same step, and mpiexec passes
# SIGUSR1 on to the ranks.
# Usage: stop_cli_test.sh SPILLWAY MPIEXEC [MPIEXEC FLAGS...]
set -u
spillway=$1 mpiexec=$2
shift 2
mpi_flags=("$@")
source "$(dirname "$0")/cli_support.sh"
# Whatever happens, no run outlives the test: every one names $work on its command line.
trap 'pkill -9 -f -- "$work/" 2>/dev/null; rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

write_tiny_gpt "$work/tiny.toml"
sed -i 's/^steps = 5$/steps = 100000/' "$work/tiny.toml"
cp "$work/tiny.toml" "$work/tiny2.toml"
printf '[parallel]\nstages = 2\nschedule = "1f1b"\n' >> "$work/tiny2.toml"

# started LOG: the job has printed its header, so its handlers are in place (waits up to 60 s).
started() {
  local i
  for i in $(seq 600); do grep -q '^spillway: gpt' "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
# rank_pid LAUNCHER_PID RANK: the pid of that rank among mpiexec's children.
rank_pid() {
  local child
  for child in $(pgrep -P "$1"); do
    if tr '\0' '\n' < "/proc/$child/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$child"; return
    fi
  done
}
# finished PID: waits for the background job PID, killing it after 120 s; its exit status.
finished() {
  local i
  for i in $(seq 1200); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$1" 2>/dev/null && { echo "killed: still running after 120 s"; kill -9 "$1"; }
  wait "$1"
}
# stopped_at REPORT: the step report.json says the run stopped after.
stopped_at() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stopped"]["step"])' "$1"
}
last_loss() {
  python3 -c 'import json,sys; print(repr(json.load(open(sys.argv[1]))["loss"][-1]))' "$1"
}
report_says() {  # report_says REPORT SIGNAL STEP CHECKPOINT
  python3 - "$@" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["stopped"]
sys.exit(0 if (s["signal"] == sys.argv[2] and s["step"] == int(sys.argv[3])
               and s["steps"] == 100000 and s["checkpoint"] == sys.argv[4]
               and len(r["loss"]) == int(sys.argv[3])) else 1)
PY
}

"$spillway" train --help > "$work/help.txt" 2>&1
check "train --help says what the signals do" grep -q "SIGUSR1 or SIGTERM stops the run" \
  "$work/help.txt"

# ---- one rank ----
"$spillway" train "$work/tiny.toml" --set "output.dir=$work/one" > "$work/one.txt" 2>&1 &
pid=$!
check "one rank: starts" started "$work/one.txt"
kill -USR1 $pid
finished $pid
status=$?
cat "$work/one.txt" | tr '\r' '\n' | grep -v '^step' | tail -n 4
check "one rank: SIGUSR1 ends the run with status 75" test $status -eq 75
k=$(stopped_at "$work/one/report.json")
echo "stopped after step $k"
check "one rank: it says where it stopped and how to go on" grep -q \
  "stopped after step $k of 100000 on SIGUSR1; checkpoint $work/one/checkpoint-$k.h5" "$work/one.txt"
check "one rank: the checkpoint of that step is written" test -s "$work/one/checkpoint-$k.h5"
check "one rank: report.json says so" report_says "$work/one/report.json" SIGUSR1 "$k" \
  "$work/one/checkpoint-$k.h5"
check "one rank: no temporary is left" test -z "$(ls "$work/one" | grep tmp)"
timeout 120 "$spillway" train "$work/tiny.toml" --set "output.dir=$work/one" \
  --set "train.steps=$((k + 3))" --resume "$work/one/checkpoint-$k.h5" > "$work/resumed.txt" 2>&1
check "one rank: the resumed run completes" test $? -eq 0
timeout 120 "$spillway" train "$work/tiny.toml" --set "output.dir=$work/straight" \
  --set "train.steps=$((k + 3))" > "$work/straight.txt" 2>&1
check "one rank: resumed, it ends with the loss of a run straight through" test \
  "$(last_loss "$work/one/report.json")" = "$(last_loss "$work/straight/report.json")"

"$spillway" train "$work/tiny.toml" --set "output.dir=$work/term" > "$work/term.txt" 2>&1 &
pid=$!
started "$work/term.txt"
kill -TERM $pid
finished $pid
check "one rank: SIGTERM stops it the same way" test $? -eq 75
check "one rank: ... and is named" grep -q "on SIGTERM; checkpoint" "$work/term.txt"

# ---- two ranks ----
"$mpiexec" -n 2 "${mpi_flags[@]}" -x OMP_NUM_THREADS=1 "$spillway" train \
  "$work/tiny2.toml" --set "output.dir=$work/two" > "$work/two.txt" 2>&1 &
launcher=$!
check "two ranks: start" started "$work/two.txt"
rank1=$(rank_pid $launcher 1)
check "two ranks: rank 1 is found" test -n "$rank1"
kill -USR1 "$rank1"
finished $launcher
status=$?
grep -v '^step' "$work/two.txt" | tail -n 3
check "two ranks: SIGUSR1 to rank 1 alone ends the job with status 75" test $status -eq 75
k=$(stopped_at "$work/two/report.json")
check "two ranks: both stopped after the same step, with one checkpoint" report_says \
  "$work/two/report.json" SIGUSR1 "$k" "$work/two/checkpoint-$k.h5"
timeout 120 "$mpiexec" -n 2 "${mpi_flags[@]}" -x OMP_NUM_THREADS=1 "$spillway" train \
  "$work/tiny2.toml" --set "output.dir=$work/two" --set "train.steps=$((k + 2))" \
  --resume "$work/two/checkpoint-$k.h5" > "$work/two-resumed.txt" 2>&1
check "two ranks: the resumed run completes" test $? -eq 0
timeout 120 "$mpiexec" -n 2 "${mpi_flags[@]}" -x OMP_NUM_THREADS=1 "$spillway" train \
  "$work/tiny2.toml" --set "output.dir=$work/two-straight" --set "train.steps=$((k + 2))" \
  > "$work/two-straight.txt" 2>&1
check "two ranks: resumed, it ends with the loss of a run straight through" test \
  "$(last_loss "$work/two/report.json")" = "$(last_loss "$work/two-straight/report.json")"

"$mpiexec" -n 2 "${mpi_flags[@]}" -x OMP_NUM_THREADS=1 "$spillway" train \
  "$work/tiny2.toml" --set "output.dir=$work/forwarded" > "$work/forwarded.txt" 2>&1 &
launcher=$!
started "$work/forwarded.txt"
kill -USR1 $launcher
finished $launcher
check "two ranks: SIGUSR1 to mpiexec reaches the ranks and stops the job" test $? -eq 75
check "two ranks: ... with its checkpoint" test -n "$(ls "$work/forwarded" | grep '^checkpoint-')"
finish
