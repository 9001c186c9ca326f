#!/usr/bin/env bash
# The Slurm job scripts on a real Slurm: jobscripts/local-slurm.sh starts munged, slurmctld and
# slurmd (one localhost node) in a private directory on free ports; slurm-train.sbatch is
# submitted with sbatch as a 2-rank pipeline of a tiny GPT; the job must end COMPLETED with
# ExitCode 0:0, its log must show both ranks bound to their own core and the loss falling. The
# job scripts' error paths (missing binary, missing benchmark) must fail the job with their
# one-line message. A job stopped by SIGUSR1 (as --signal sends it near the time limit) must
# requeue itself and complete on its second run, resumed from its checkpoint. With
# BENCH_CEILINGS, slurm-memory-pressure.sbatch runs the benchmark's quick mode, which must
# complete with its results. Slurm is stopped at the end whatever happened.
# Exits 77 (ctest SKIP_RETURN_CODE) only when Slurm cannot run here: not root.
# Usage: slurm_test.sh SPILLWAY SOURCE_DIR [BENCH_CEILINGS]
set -u
spillway=$1 src=$2 ceilings=${3:-}
jobscripts=$src/jobscripts

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: a local Slurm needs root (slurmd and munged switch users)"
  exit 77
fi
export PATH=$PATH:/usr/sbin:/sbin

# munged runs as the munge user, which must reach its socket below here through every parent
# directory: under /tmp rather than $TMPDIR, and open to enter.
work=$(mktemp -d /tmp/spillway-slurm-test.XXXXXX)
chmod 0755 "$work"
export SPILLWAY_SLURM_DIR=$work/slurm
# Two free ports side by side (slurmctld, slurmd): a user's own local Slurm on the default
# ports, or another checkout's test, keeps running undisturbed.
SPILLWAY_SLURM_PORT=$(python3 - <<'PY'
import random, socket
for _ in range(200):
    port = random.randrange(20000, 30000, 2)
    try:
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", port)); b.bind(("127.0.0.1", port + 1))
        print(port); break
    except OSError:
        pass
PY
)
export SPILLWAY_SLURM_PORT
cleanup() {
  "$jobscripts/local-slurm.sh" stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
show_slurm_logs() {
  local f
  for f in "$SPILLWAY_SLURM_DIR"/log/*.log; do echo "---- $f"; tail -n 30 "$f"; done
}

for f in slurm-train.sbatch slurm-memory-pressure.sbatch local-slurm.sh; do
  check "$f parses" bash -n "$jobscripts/$f"
done

# The requeued run's choice of checkpoint, with a stand-in srun that prints what it was given:
# the newest by step number, none when there is none yet (a job requeued before its first
# checkpoint starts over rather than failing).
mkdir -p "$work/fake-bin" "$work/requeued"
touch "$work/requeue.toml"
printf '#!/bin/sh\necho "srun $*"\n' > "$work/fake-bin/srun"
chmod +x "$work/fake-bin/srun"
requeued_run() {  # requeued_run LOG [ARGS...]: slurm-train.sbatch as a first requeue would run it
  local log=$1; shift
  (cd "$work" && PATH="$work/fake-bin:$PATH" SLURM_JOB_ID=7 SLURM_JOB_NODELIST=localhost \
     SLURM_RESTART_COUNT=1 SPILLWAY=$spillway CONFIG=$work/requeue.toml OUT=$work/requeued \
     bash "$jobscripts/slurm-train.sbatch" "$@") > "$log" 2>&1
}
requeued_run "$work/requeued-none.log"
check "requeued without a checkpoint, the job starts over" bash -c \
  "grep -q '^srun .* train ' '$work/requeued-none.log' &&
   ! grep -q -- '--resume' '$work/requeued-none.log'"
touch "$work/requeued/checkpoint-2.h5" "$work/requeued/checkpoint-10.h5"
requeued_run "$work/requeued-two.log"
check "requeued with checkpoints, it resumes from the newest step" \
  grep -q -- "--resume $work/requeued/checkpoint-10.h5\$" "$work/requeued-two.log"
# A job file given as the first argument (relative to where sbatch ran) wins over CONFIG, and
# the arguments after it go to spillway train.
touch "$work/positional.toml"
requeued_run "$work/positional.log" positional.toml --set train.steps=9
check "a first argument that is no option is the job file" \
  grep -q -- "^srun .* train $work/positional.toml --set output.dir=$work/requeued .*--set train.steps=9\$" \
  "$work/positional.log"
requeued_run "$work/options-only.log" --set train.steps=9
check "options alone leave CONFIG's" \
  grep -q -- "^srun .* train $work/requeue.toml .*--set train.steps=9\$" "$work/options-only.log"

start=$(date +%s)
if ! "$jobscripts/local-slurm.sh" start; then
  echo "FAIL: local Slurm starts"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "local Slurm up in $(( $(date +%s) - start ))s"
check "start is idempotent" "$jobscripts/local-slurm.sh" start
check "status reports an idle node" bash -c "'$jobscripts/local-slurm.sh' status | grep -q 'node localhost: idle'"
eval "$("$jobscripts/local-slurm.sh" env)"

# wait_job ID SECONDS: polls scontrol (accounting is off, so no sacct) until the job ends; prints
# "STATE EXITCODE", or "TIMEOUT" after cancelling it.
wait_job() {
  local id=$1 limit=$2 waited=0 line state
  [ -n "$id" ] || { echo "NOT SUBMITTED"; return; }
  while :; do
    line=$(scontrol -o show job "$id" 2>/dev/null)
    state=$(sed -n 's/.* JobState=\([A-Z_]*\) .*/\1/p' <<< "$line")
    case $state in
      PENDING|CONFIGURING|RUNNING|COMPLETING|SUSPENDED|"") ;;
      *) echo "$state $(sed -n 's/.* ExitCode=\([0-9:]*\) .*/\1/p' <<< "$line")"; return ;;
    esac
    if [ $waited -ge "$limit" ]; then
      scancel "$id" 2>/dev/null
      echo TIMEOUT; return
    fi
    sleep 1
    waited=$((waited + 1))
  done
}

# A tiny GPT on the fortunes text: 2 stages on 2 ranks, 20 steps, 1 CPU per rank. Measured: the
# loss goes 5.55 -> about 3.4 (mean of the last 5 steps), in about 2 s.
cat > "$work/tiny.toml" <<'TOML'
[model]
kind = "gpt"
layers = 2
d_model = 64
heads = 2
seq = 32
[data]
source = "text"
[train]
batch = 8
microbatches = 4
steps = 20
lr = 3e-3
[parallel]
stages = 2
schedule = "1f1b"
TOML

# run_job LABEL SECONDS LOG SCRIPT [ARGS...]: sbatch SCRIPT from the checkout (its settings from
# the caller's environment), wait for it, print its log; the job must end COMPLETED 0:0. Sets
# job and result.
run_job() {
  local label=$1 limit=$2 log=$3 script=$4 start
  shift 4
  start=$(date +%s)
  job=$(cd "$src" && sbatch --parsable --output="$log" "$jobscripts/$script" "$@")
  check "sbatch accepts $script" test -n "$job"
  result=$(wait_job "$job" "$limit")
  echo "job $job: $result after $(( $(date +%s) - start ))s"
  cat "$log" 2>/dev/null
  [ "$result" = "COMPLETED 0:0" ] || show_slurm_logs
  check "the $label job completes with ExitCode 0:0" test "$result" = "COMPLETED 0:0"
}

# The script's own #SBATCH lines give 1 node, 2 tasks, 1 CPU each; only paths come from here.
# SLURM_TMPDIR stands for a site's node-local job directory: it must become offload.dir.
SPILLWAY=$spillway CONFIG=$work/tiny.toml OUT=$work/out SLURM_TMPDIR=$work/node-tmp \
  run_job training 90 "$work/train.out" slurm-train.sbatch
check "it ran 2 ranks with 1 thread each" \
  grep -q "2 ranks (2 stages x 1 replica, 1f1b.*1 thread(s) per rank, 20 steps" "$work/train.out"
check "srun bound the two ranks to different cores" bash -c \
  "test \$(grep -o 'task *[01] .*mask 0x[0-9a-f]*' '$work/train.out' | awk '{print \$NF}' | sort -u | wc -l) -eq 2"
check "the log shows all 20 steps" test "$(grep -c '^step [0-9]*/20  loss' "$work/train.out")" -eq 20
check "the loss falls (first step vs mean of the last 5, by > 1.0)" python3 - "$work/train.out" <<'PY'
import re, sys
loss = [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+  loss ([0-9.]+)", open(sys.argv[1]).read(), re.M)]
tail = sum(loss[-5:]) / 5 if len(loss) >= 5 else float("nan")
print(f"first loss {loss[0] if loss else 'none'}, mean of last 5 {tail:.4f}")
sys.exit(0 if len(loss) == 20 and loss[0] - tail > 1.0 else 1)
PY
check "the report lands in OUT, with offload.dir on SLURM_TMPDIR" python3 - "$work/out/report.json" "$work/node-tmp" <<'PY'
import json, sys
sys.exit(0 if json.load(open(sys.argv[1]))["config"]["offload"]["dir"] == sys.argv[2] else 1)
PY

# A run stopped early is requeued and goes on from its checkpoint. SIGUSR1 by hand, as
# --signal=USR1@120 sends it near the time limit: spillway stops after the step it is in
# with a checkpoint and exits 75, the script requeues the job, and its second run resumes
# and completes. Slurm holds a requeued job back for a while; the test releases it at once.
# 10000 steps of the tiny GPT take about 7 s here; the signal comes right after the start.
sed 's/^steps = 20$/steps = 10000/' "$work/tiny.toml" > "$work/long.toml"
start=$(date +%s)
job=$(cd "$src" && SPILLWAY=$spillway CONFIG=$work/long.toml OUT=$work/chain \
      sbatch --parsable --output="$work/chain.out" "$jobscripts/slurm-train.sbatch")
check "sbatch accepts the long job" test -n "$job"
for i in $(seq 300); do grep -q '^spillway: gpt' "$work/chain.out" 2>/dev/null && break; sleep 0.2; done
scancel --signal=USR1 "$job"
for i in $(seq 60); do
  scontrol -o show job "$job" 2>/dev/null | grep -q 'JobState=PENDING.*Restarts=1' && break
  sleep 1
done
scontrol update JobId="$job" StartTime=now
result=$(wait_job "$job" 120)
echo "job $job: $result after $(( $(date +%s) - start ))s"
grep -v '^step' "$work/chain.out"
check "the stopped job is requeued and completes with ExitCode 0:0" test "$result" = "COMPLETED 0:0"
check "once" bash -c "scontrol -o show job $job | grep -q ' Restarts=1 '"
stop=$(sed -n 's/^spillway: stopped after step \([0-9]*\) of 10000 on SIGUSR1; .*/\1/p' "$work/chain.out")
check "its first run stopped after a step, on SIGUSR1" test -n "$stop"
check "the script said it requeues" grep -q "^slurm-train: stopped early with a checkpoint in $work/chain; requeueing job $job" "$work/chain.out"
check "the second run resumed from that step's checkpoint" \
  grep -q -- "--resume $work/chain/checkpoint-$stop.h5" "$work/chain.out"
check "and trained the remaining steps to the end" python3 - "$work/chain/report.json" "$stop" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if len(r["loss"]) == 10000 - int(sys.argv[2]) and "stopped" not in r else 1)
PY

# The memory-pressure benchmark in quick mode (a small model, 6 points, ~20 s here) through
# slurm-memory-pressure.sbatch: its arguments after the script reach run.sh, it runs its own
# 2 ranks with mpiexec inside the allocation, and the results land in OUT.
if [ -n "$ceilings" ] && [ -x "$ceilings" ]; then
  SPILLWAY=$spillway BENCH_CEILINGS=$ceilings OUT=$work/mp \
    run_job memory-pressure 240 "$work/mp.out" slurm-memory-pressure.sbatch --quick
  check "it ran 2 ranks with 1 thread each" grep -q "^slurm-memory-pressure: job $job on localhost: 2 ranks x 1 threads" "$work/mp.out"
  check "its log has the table and the goals" \
    bash -c "grep -q '^| tiny | file | none | 1 | ' '$work/mp.out' && grep -q '^- \*\*\(met\|not met\)\*\*: tiny, file tier' '$work/mp.out'"
  check "results.json in OUT: the reference and file and peer runs without a cap, offload moved bytes" \
    python3 - "$work/mp/results.json" <<'PY'
import json, sys
runs = {r["name"]: r for r in json.load(open(sys.argv[1]))["runs"]}
ok = lambda n: runs.get(n, {}).get("status") == "ok"
sys.exit(0 if ok("tiny-none-nocap-r0") and all(ok(f"tiny-{t}-nocap-la1") and runs[f"tiny-{t}-nocap-la1"]["bytes_moved"] > 0 for t in ("file", "peer")) else 1)
PY
else
  echo "SKIP: slurm-memory-pressure.sbatch --quick: no bench_ceilings (configure with SPILLWAY_BUILD_BENCH=ON)"
fi

# Error paths end the job FAILED with one line naming what is missing.
job=$(cd "$work" && SPILLWAY=$work/no-such-binary CONFIG=$work/tiny.toml \
      sbatch --parsable --output="$work/nobin.out" "$jobscripts/slurm-train.sbatch")
result=$(wait_job "$job" 30)
check "a missing binary fails the job (exit 1)" test "$result" = "FAILED 1:0"
check "with one line naming it" grep -qx "slurm-train: no spillway binary at $work/no-such-binary (build it, or set SPILLWAY)" "$work/nobin.out"
# SPILLWAY_ROOT without bench/memory_pressure (a checkout that lacks it).
job=$(cd "$work" && SPILLWAY_ROOT=$work SPILLWAY=$spillway \
      sbatch --parsable --output="$work/nobench.out" "$jobscripts/slurm-memory-pressure.sbatch")
result=$(wait_job "$job" 30)
check "a missing benchmark fails the memory-pressure job (exit 1)" test "$result" = "FAILED 1:0"
check "with one line naming it" grep -q "^slurm-memory-pressure: no benchmark at $work/bench/memory_pressure/run.sh" "$work/nobench.out"

pids=$(cat "$SPILLWAY_SLURM_DIR"/{munge/munged,slurmctld,slurmd}.pid)
"$jobscripts/local-slurm.sh" stop
alive=0
for pid in $pids; do ! kill -0 "$pid" 2>/dev/null || alive=$((alive + 1)); done
check "stop ends munged, slurmctld and slurmd" test "$(wc -w <<< "$pids")" -eq 3 -a $alive -eq 0

finish
