#!/usr/bin/env bash
# The spillway command as a batch job sees it: exit codes, one-line errors, report.json.
# Usage: cli_test.sh SPILLWAY_BINARY
set -u
spillway=$1
source "$(dirname "$0")/cli_support.sh"

cat > "$work/tiny.toml" <<'TOML'
[model]
kind = "gpt"
layers = 1
d_model = 32
heads = 2
seq = 16
[data]
source = "synthetic"
[train]
batch = 4
steps = 3
TOML

"$spillway" --help > "$work/help.txt" 2>&1
check "--help exits 0" test $? -eq 0
check "--help names train" grep -q "train" "$work/help.txt"

"$spillway" train "$work/tiny.toml" --set "output.dir=$work/out" > "$work/run.txt" 2>&1
status=$?
check "a tiny job exits 0" test $status -eq 0
check "progress lines are printed" grep -q "^step 3/3  loss" "$work/run.txt"
# On a terminal the line is redrawn in place: carriage return + erase to end of line, one
# final newline. `script` gives the command a pseudo-terminal as its stdout.
script -qec "'$spillway' train '$work/tiny.toml' --set 'output.dir=$work/tty'" /dev/null \
  > "$work/tty.txt" 2>&1
check "on a terminal the progress line is redrawn in place" python3 - "$work/tty.txt" <<'PY'
import sys
text = open(sys.argv[1], "rb").read()
# Every step on one line, after the header (and the BLIS line where spillway chose kernels).
line = next((l for l in text.split(b"\n") if b"step 1/3" in l), b"")
ok = (text.count(b"\rstep ") == 3 and text.count(b"\x1b[K") == 3
      and b"step 1/3" in line and b"step 3/3" in line)
sys.exit(0 if ok else 1)
PY
check "report.json names the node's cores and NUMA memory" python3 -c "import json,sys; n=json.load(open('$work/out/report.json'))['nodes']; sys.exit(0 if len(n)==1 and n[0]['cores']>0 and len(n[0]['numa'])>=1 and n[0]['memory_bytes']>0 and n[0]['ranks']==[0] and n[0]['description'].startswith('node 0 (') else 1)"
check "report.json names the BLIS kernels, vector ones where the CPU has AVX2" python3 - "$work/out/report.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))["blas"]
flags = open("/proc/cpuinfo").read().split()
vector_cpu = "avx2" in flags and "fma" in flags
ok = b["kernels"] and b["arch_type"] >= 0 and b["chosen_by"] and (b["kernels"] != "generic" or not vector_cpu)
print(b)
sys.exit(0 if ok else 1)
PY
BLIS_ARCH_TYPE=fast "$spillway" train "$work/tiny.toml" --set "output.dir=$work/bad-blis" > "$work/bad-blis.txt" 2>&1
check "an unusable BLIS_ARCH_TYPE exits 1" test $? -eq 1
check "with one line naming the variable and the choices" one_line "$work/bad-blis.txt" \
  "spillway: error: BLIS_ARCH_TYPE=fast names none of the kernels BLIS"
# A model no node can hold: refused before anything is allocated, not killed by the kernel's
# OOM killer after filling the node (1,000 layers of width 65,536: 51,540,494,254,080
# parameters, 750 TiB with their gradients and AdamW state).
timeout 60 "$spillway" train "$work/tiny.toml" --set model.d_model=65536 --set model.layers=1000 \
  --set "output.dir=$work/huge" > "$work/huge.txt" 2>&1
check "a model too big for the node exits 1" test $? -eq 1
check "with one line naming what it needs, the node's budget and where that comes from" \
  one_line "$work/huge.txt" "spillway: error: this node's memory exceeded: need 750.0 TiB for the parameters, gradients and optimizer state of the model (51540494254080 parameters), the node's budget is "
check "which is MemAvailable's or a cgroup's, and how to fix it" grep -Eq \
  "\((.* available at the start by (MemAvailable \+ SwapFree in /proc/meminfo|the memory cgroup .*), less .* for what the rank holds beside tensors)\): spread the model over more ranks or nodes \(parallel.stages\)" \
  "$work/huge.txt"
# A bad command line: one line in spillway's words, the help to read, exit status 2.
"$spillway" evaluate "$work/tiny.toml" --checkpoint "$work/none.h5" > "$work/usage.txt" 2>&1
check "a missing --checkpoint file exits 2" test $? -eq 2
check "with one line naming it and the help" one_line "$work/usage.txt" \
  "spillway: error: --checkpoint: File does not exist: $work/none.h5 (spillway evaluate --help lists the options)"
"$spillway" train > "$work/usage.txt" 2>&1
check "a train without its job file exits 2" test $? -eq 2
check "saying so in one line" one_line "$work/usage.txt" \
  "spillway: error: config is required (spillway train --help lists the options)"
"$spillway" frobnicate > "$work/usage.txt" 2>&1
check "an unknown command exits 2" test $? -eq 2
check "naming it and the commands" one_line "$work/usage.txt" \
  "spillway: error: unknown command 'frobnicate': the commands are train, evaluate, sample, profile, plan (spillway --help)"
"$spillway" train --help > "$work/usage.txt" 2>&1
check "--help still exits 0" test $? -eq 0

# A microbatch no node can hold (2^31 - 1 samples of 1,024 tokens: 16 TiB of inputs and
# targets) is refused before its buffers are allocated, naming the fix.
timeout 60 "$spillway" train "$work/tiny.toml" --set train.batch=2147483647 \
  --set train.microbatches=1 --set model.seq=1024 --set "output.dir=$work/huge-batch" \
  > "$work/huge-batch.txt" 2>&1
check "a microbatch too big for the node exits 1" test $? -eq 1
check "with one line naming the samples, the bytes and the fix" grep -Eq \
  "^spillway: error: a microbatch of 2147483647 samples needs 16.0 TiB for its inputs and targets, more than the .* this node's memory budget has left \(.*\): raise train.microbatches or lower train.batch$" \
  "$work/huge-batch.txt"
check "report.json has three losses" python3 -c "import json,sys; r=json.load(open('$work/out/report.json')); sys.exit(0 if len(r['loss'])==3 and r['memory']['peak_bytes']>0 else 1)"
check "report.json has each step's learning rate, and no gradient norms without clipping" python3 -c "import json,sys; r=json.load(open('$work/out/report.json')); lr=r['config']['train']['lr']; sys.exit(0 if r['learning_rate']==[lr]*3 and 'grad_norm' not in r else 1)"
check "the run prints where a step's time went" grep -Eq "^spillway: time by op, per step: [a-z_]+ [0-9]+%, .*outside ops [0-9]+%$" "$work/run.txt"
check "report.json gives each op's time per step" python3 - "$work/out/report.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["time_by_op"]
ops = {o["op"]: o for o in t["ops"]}
shares = [o["share_of_step"] for o in t["ops"]]
# One layer: two LayerNorms and the final one; four products and the head's.
ok = (t["steps"] == 2 and t["step_seconds"] > 0
      and ops["layernorm_forward"]["calls_per_step"] == 3
      and ops["linear_backward_weight"]["calls_per_step"] == 5
      and ops["embedding_forward"]["calls_per_step"] == 1
      and ops["cross_entropy_forward"]["calls_per_step"] == 1
      and ops["optimizer_step"]["calls_per_step"] == 1
      and shares == sorted(shares, reverse=True) and all(s > 0 for s in shares)
      and abs(sum(shares) - t["all_ops_share_of_step"]) < 1e-9
      and 0 < t["all_ops_share_of_step"] <= 1.0001)
print(json.dumps(t)[:400])
sys.exit(0 if ok else 1)
PY

"$spillway" train "$work/tiny.toml" --set train.lrr=1 > "$work/bad.txt" 2>&1
status=$?
check "an unknown key exits non-zero" test $status -ne 0
check "an unknown key is one line naming it" \
  bash -c "[ \$(wc -l < '$work/bad.txt') -eq 1 ] && grep -q \"unknown key 'train.lrr'\" '$work/bad.txt'"

"$spillway" train "$work/tiny.toml" --set output.dir=/proc/forbidden > "$work/dir.txt" 2>&1
check "an unwritable output dir exits non-zero" test $? -ne 0
check "an unwritable output dir names it" grep -q "/proc/forbidden" "$work/dir.txt"

"$spillway" train "$work/missing.toml" > "$work/missing.txt" 2>&1
check "a missing job file exits non-zero" test $? -ne 0

# A stash copy that fails (here past a file-size limit of 4 MiB, with SIGXFSZ ignored so that
# the write returns EFBIG, as a full disk returns ENOSPC; MPI's own files need about 1 MiB)
# leaves the stash in memory and the run goes on; it says so at the end, where only
# report.json counted them. A microbatch of 4 x 128 tokens of width 256 stashes about 6 MiB.
(trap '' XFSZ; ulimit -f 4096
 "$spillway" train "$work/tiny.toml" --set "output.dir=$work/full-tier" --set model.d_model=256 \
   --set model.seq=128 --set train.batch=16 --set train.microbatches=4 --set parallel.stages=1 \
   --set 'parallel.schedule="gpipe"' --set 'offload.tier="file"' --set "offload.dir=\"$work\"" \
   --set output.trace=false) > "$work/full-tier.txt" 2>&1
check "a run whose stash copies fail ends well" test $? -eq 0
check "saying so at the end" grep -q \
  "^spillway: warning: rank 0: [0-9]* stash copies to the offload tier failed and those stashes stayed in memory; the first: evicting stash [0-9]* to the file tier: writing stash [0-9]* to a file in $work failed at byte .*(File too large)" \
  "$work/full-tier.txt"
check "report.json counts them and keeps the first error" python3 - "$work/full-tier/report.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))["pipeline"]["measured"]["ranks"][0]["offload"]
sys.exit(0 if o["failed_evictions"] > 0 and "File too large" in o["first_failed_eviction"] else 1)
PY

# Under a file-size limit a checkpoint that cannot fit it is refused in a line, before HDF5
# lays it out: HDF5 1.10 crashed at exit after the failed flush (segmentation fault). About
# 12 MiB of parameters and AdamW state against 4 MiB.
(ulimit -f 4096
 "$spillway" train "$work/tiny.toml" --set "output.dir=$work/fsize" --set model.d_model=256 \
   --set model.seq=128 --set train.steps=2 --set output.checkpoint_every=1) > "$work/fsize.txt" 2>&1
check "a checkpoint past ulimit -f exits 1" test $? -eq 1
check "naming the limit" grep -q "^spillway: error: writing checkpoint $work/fsize/checkpoint-1.h5: the checkpoint takes about 1[0-9.]* MiB, more than the largest file this process may write, 4.00 MiB (ulimit -f): raise that limit\$" "$work/fsize.txt"
check "and leaves no checkpoint or temporary" test -z "$(ls "$work/fsize" | grep -v report)"

# A checkpoint to sample and evaluate below.
"$spillway" train "$work/tiny.toml" --set "output.dir=$work/sampled" \
  --set output.checkpoint_every=3 > /dev/null 2>&1

# One training run at a time in an output.dir: a second is refused, naming the first, and
# the directory is free again once the first is gone, even killed.
"$spillway" train "$work/tiny.toml" --set "output.dir=$work/busy" --set train.steps=10000000 \
  > "$work/busy1.txt" 2>&1 &
first=$!
for i in $(seq 600); do grep -q "^step " "$work/busy1.txt" && break; sleep 0.1; done
"$spillway" train "$work/tiny.toml" --set "output.dir=$work/busy" > "$work/busy2.txt" 2>&1
check "a second run in a busy output.dir exits 1" test $? -eq 1
check "naming the run that holds it" one_line "$work/busy2.txt" \
  "spillway: error: output.dir $work/busy is in use by another spillway train (pid $first on "
"$spillway" evaluate "$work/tiny.toml" --set "output.dir=$work/busy" \
  --checkpoint "$work/sampled/checkpoint-3.h5" > /dev/null 2>&1
check "evaluating into it is not refused" test $? -eq 0
kill -KILL $first
wait $first 2>/dev/null
"$spillway" train "$work/tiny.toml" --set "output.dir=$work/busy" > "$work/busy3.txt" 2>&1
check "once that run is gone, even killed, the directory is free" test $? -eq 0

# spillway sample: the prompt and exactly --bytes more, the same for the same seed.
sample() {  # sample OUT ARGS...
  local out=$1; shift
  "$spillway" sample "$work/tiny.toml" --checkpoint "$work/sampled/checkpoint-3.h5" "$@" \
    > "$out" 2>&1
}
sample "$work/s1.txt" --prompt "Once " --bytes 40 --seed 5
check "spillway sample exits 0" test $? -eq 0
check "it prints the prompt and 40 more bytes and a newline" \
  python3 -c "import sys; t=open('$work/s1.txt','rb').read(); sys.exit(0 if t.startswith(b'Once ') and len(t)==5+40+1 and t.endswith(b'\n') else 1)"
sample "$work/s2.txt" --prompt "Once " --bytes 40 --seed 5
check "the same seed gives the same text" cmp -s "$work/s1.txt" "$work/s2.txt"
# A job whose head is chunked keeps no logits in training; sampling reads them whole.
sample "$work/s5.txt" --prompt "Once " --bytes 40 --seed 5 --set model.head_chunk_rows=64
check "a chunked head's job samples the same text" cmp -s "$work/s1.txt" "$work/s5.txt"
sample "$work/s3.txt" --temperature -0.5
check "a negative temperature exits non-zero" test $? -ne 0
check "with one line naming it" one_line "$work/s3.txt" \
  "temperature must be 0 (greedy) or more, got -0.5"
sample "$work/s7.txt" --bytes 0
check "no bytes to write is a usage error" test $? -eq 2
check "said in one line" one_line "$work/s7.txt" \
  "spillway: error: --bytes: must be a whole number of at least 1, got 0 (spillway sample --help lists the options)"
sample "$work/s4.txt" --prompt ""
check "an empty prompt is named" one_line "$work/s4.txt" \
  "the prompt is empty: give at least one byte"
# A checkpoint of another model is refused by the key that differs, also where no tensor's
# shape tells (heads, ln_eps) or where the job would just not ask for some of its tensors.
"$spillway" train "$work/tiny.toml" --set "output.dir=$work/other-heads" --set train.steps=4 \
  --set model.heads=4 --resume "$work/sampled/checkpoint-3.h5" > "$work/heads.txt" 2>&1
check "resuming another model's checkpoint exits 1" test $? -eq 1
check "naming the key, both values and the fix" one_line "$work/heads.txt" \
  "spillway: error: checkpoint $work/sampled/checkpoint-3.h5 holds another model than the job's: model.heads = 2 there, 4 in the job: give the job the checkpoint's model (--set model.heads=2)"
check "before it writes a report" test ! -e "$work/other-heads/report.json"
sample "$work/s6.txt" --set model.ln_eps=1e-6
check "sampling it names the key" one_line "$work/s6.txt" \
  "model.ln_eps = 1e-05 there, 1e-06 in the job: give the job the checkpoint's model (--set model.ln_eps=1e-05)"
"$spillway" evaluate "$work/tiny.toml" --checkpoint "$work/sampled/checkpoint-3.h5" \
  --set model.heads=1 --set "output.dir=$work/ev-heads" > "$work/ev-heads.txt" 2>&1
check "evaluating it exits 1" test $? -eq 1
check "naming the key" one_line "$work/ev-heads.txt" "model.heads = 2 there, 1 in the job"
check "and writes no eval.json" test ! -e "$work/ev-heads/eval.json"

# A model of 1,000 ids (synthetic data draws them all) is sampled in ids, and only so.
"$spillway" train "$work/tiny.toml" --set "output.dir=$work/ids" --set model.vocab=1000 \
  --set output.checkpoint_every=3 > /dev/null 2>&1
sample_ids() {  # sample_ids OUT ARGS...
  local out=$1; shift
  "$spillway" sample "$work/tiny.toml" --set model.vocab=1000 \
    --checkpoint "$work/ids/checkpoint-3.h5" "$@" > "$out" 2>&1
}
sample_ids "$work/i1.txt" --prompt-ids "999, 0 512" --tokens 7
check "spillway sample --prompt-ids exits 0" test $? -eq 0
check "it prints the prompt's ids and 7 more, below 1000, on one line" python3 -c "
import sys; t = open('$work/i1.txt').read(); ids = [int(x) for x in t.split()]
sys.exit(0 if t.count(chr(10)) == 1 and len(ids) == 10 and ids[:3] == [999, 0, 512]
         and all(0 <= x < 1000 for x in ids) else 1)"
sample_ids "$work/i2.txt" --prompt "Once "
check "a text prompt for a model of ids exits non-zero" test $? -ne 0
check "naming the way that works" one_line "$work/i2.txt" \
  "this model has model.vocab 1000, not bytes (256): sample it in token ids (spillway sample --prompt-ids)"
sample_ids "$work/i3.txt" --prompt-ids "5 1000"
check "an id beyond the vocabulary is named" one_line "$work/i3.txt" \
  "prompt token 1000 at index 1 is not in [0, model.vocab = 1000)"
sample_ids "$work/i4.txt" --prompt-ids "5 six"
check "so is a word that is no id" one_line "$work/i4.txt" \
  "--prompt-ids: 'six' is not a token id (a non-negative integer)"
sample_ids "$work/i5.txt" --prompt-ids "5" --prompt "x"
check "--prompt and --prompt-ids together exit non-zero" test $? -ne 0

finish
