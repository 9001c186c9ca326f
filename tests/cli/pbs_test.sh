#!/usr/bin/env bash
# jobscripts/pbs-train.pbs without PBS (Debian has none): PBS Pro runs a job script as a shell
# script in $HOME with PBS_NODEFILE (one line per MPI process), PBS_O_WORKDIR, PBS_JOBID and
# OMP_NUM_THREADS (from ompthreads) set, so this test does the same with a node file listing
# localhost twice. The 2-rank pipeline must finish with exit 0, bind its ranks to different
# cores, write its report under OUT with the loss falling, and put offload.dir on the job's
# TMPDIR; stopped by SIGUSR1 it must exit 75 with a checkpoint; outside a job and without a
# binary it must stop with its one-line message.
# Usage: pbs_test.sh SPILLWAY SOURCE_DIR MPIRUN [MPIRUN FLAGS...]
set -u
spillway=$1 src=$2 mpirun=$3
shift 3
script=$src/jobscripts/pbs-train.pbs
source "$(dirname "$0")/cli_support.sh"

check "the script parses" bash -n "$script"

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
printf 'localhost\nlocalhost\n' > "$work/nodefile"
mkdir -p "$work/home" "$work/submit" "$work/node-tmp"

# pbs_job LOG [VAR=value...]: the script as PBS would run it, started in $HOME with a clean
# environment; the launch flags this machine needs (root, 2 cores) come through MPIRUN_FLAGS.
pbs_job() {
  local log=$1; shift
  (cd "$work/home" && timeout 120 env -i PATH="$PATH" HOME="$work/home" \
     PBS_NODEFILE="$work/nodefile" PBS_O_WORKDIR="$work/submit" PBS_JOBID=4242.fakepbs \
     PBS_JOBNAME=spillway-train OMP_NUM_THREADS=1 TMPDIR="$work/node-tmp" \
     MPIRUN="$mpirun" MPIRUN_FLAGS="$*" SPILLWAY="$spillway" CONFIG="$work/tiny.toml" \
     "${job_env[@]}" bash "$script") > "$log" 2>&1
}

# The sanitizer build's settings (the asan preset turns leak checks off: Open MPI's own
# allocations outlive MPI_Finalize) pass through the clean environment, as qsub -v would, in
# every job below.
sanitizer_env=()
[ -n "${ASAN_OPTIONS:-}" ] && sanitizer_env+=(ASAN_OPTIONS="$ASAN_OPTIONS")
job_env=("${sanitizer_env[@]}")
start=$(date +%s)
pbs_job "$work/job.log" "$@"
status=$?
echo "pbs-train.pbs ran in $(( $(date +%s) - start ))s"
cat "$work/job.log"
out=$work/submit/runs/spillway-train-4242
check "the job exits 0" test $status -eq 0
check "it ran 2 ranks from the node file" grep -q "2 ranks (2 stages x 1 replica, 1f1b.*1 thread(s) per rank" "$work/job.log"
check "mpirun bound the two ranks to different cores" bash -c \
  "test \$(grep -o 'MCW rank [01] bound to .*' '$work/job.log' | sed 's/.*: //' | sort -u | wc -l) -eq 2"
check "OUT defaults under PBS_O_WORKDIR, named after the job" test -s "$out/report.json"
check "the loss falls (first step vs mean of the last 5, by > 1.0) and offload.dir is the job's TMPDIR" \
  python3 - "$out/report.json" "$work/node-tmp" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
loss = r["loss"]
tail = sum(loss[-5:]) / 5
print(f"first loss {loss[0]:.4f}, mean of last 5 {tail:.4f}, offload.dir {r['config']['offload']['dir']}")
sys.exit(0 if len(loss) == 20 and loss[0] - tail > 1.0 and r["config"]["offload"]["dir"] == sys.argv[2] else 1)
PY

# Stopped early (SIGUSR1 to mpirun, which passes it to the ranks, as a site's walltime
# warning would reach them): the job ends with spillway's status 75 and a checkpoint in OUT.
sed 's/^steps = 20$/steps = 100000/' "$work/tiny.toml" > "$work/long.toml"
job_env=("${sanitizer_env[@]}" CONFIG="$work/long.toml" OUT="$work/stopped")
pbs_job "$work/stopped.log" "$@" &
job_pid=$!
for i in $(seq 600); do grep -q '^spillway: gpt' "$work/stopped.log" 2>/dev/null && break; sleep 0.1; done
launcher=$(pgrep -f -- "--hostfile $work/nodefile .*long.toml" | head -n 1)
check "the stopped job's mpirun is found" test -n "$launcher"
[ -z "$launcher" ] || kill -USR1 "$launcher"
wait $job_pid
status=$?
grep -v '^step' "$work/stopped.log" | tail -n 3
check "a job stopped by SIGUSR1 exits 75" test $status -eq 75
check "with its checkpoint in OUT" test -n "$(ls "$work/stopped" | grep '^checkpoint-')"
check "and says how to go on" grep -q \
  "^pbs-train: stopped early; to go on, submit it again with -v RESUME=$work/stopped/checkpoint-[0-9]*.h5 (and the same OUT)$" \
  "$work/stopped.log"
latest=$(ls -1v "$work/stopped"/checkpoint-*.h5 | tail -n 1)
# Resumed to 5 steps past wherever the stop fell: a fast machine gets well past step 20
# before the signal lands (45 steps seen).
stopped_at=$(basename "$latest" .h5)
stopped_at=${stopped_at#checkpoint-}
end=$(( stopped_at + 5 ))
sed "s/^steps = 20\$/steps = $end/" "$work/tiny.toml" > "$work/resume.toml"
job_env=("${sanitizer_env[@]}" CONFIG="$work/resume.toml" OUT="$work/stopped" RESUME="$latest")
pbs_job "$work/resumed.log" "$@"
check "submitted again with RESUME, it goes on from that checkpoint to the end" bash -c \
  "grep -q -- '--resume $latest' '$work/resumed.log' && grep -q '^step $end/$end' '$work/resumed.log'"
check "its first step is the one after the checkpoint's" \
  test "$(grep -m 1 -o '^step [0-9]*/' "$work/resumed.log")" = "step $(( stopped_at + 1 ))/"
pkill -9 -f -- "$work/long.toml" 2>/dev/null

job_env=("${sanitizer_env[@]}" SPILLWAY="$work/no-such-binary")
pbs_job "$work/nobin.log" "$@"
status=$?
check "a missing binary exits 1" test $status -eq 1
check "with one line naming it" test "$(cat "$work/nobin.log")" = \
  "pbs-train: no spillway binary at $work/no-such-binary (build it, or set SPILLWAY)"
(cd "$work" && env -u PBS_NODEFILE bash "$script") > "$work/nojob.log" 2>&1
status=$?
check "outside a PBS job it exits 1" test $status -eq 1
check "with one line saying so" test "$(cat "$work/nojob.log")" = \
  "pbs-train: no readable \$PBS_NODEFILE: not inside a PBS job (submit with qsub)"

finish
