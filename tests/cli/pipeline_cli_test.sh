#!/usr/bin/env bash
# `spillway train` under mpiexec, as a batch job sees it: a 2-rank pipeline writes its report,
# trace and timeline; checkpoints it writes resume exactly; bad layouts and checkpoints that
# do not fit fail before any compute with one message and a non-zero exit; a rank failing
# mid-run ends the whole job quickly with that rank's message, with the peer tier too.
# Usage: pipeline_cli_test.sh SPILLWAY MPIEXEC [MPIEXEC FLAGS...]
set -u
spillway=$1 mpiexec=$2
shift 2
mpi_flags=("$@")
source "$(dirname "$0")/cli_support.sh"
run2() {  # run2 OUTFILE ARGS...: spillway train on 2 ranks, stdout+stderr to OUTFILE
  local out=$1; shift
  timeout 120 "$mpiexec" -n 2 "${mpi_flags[@]}" -x OMP_NUM_THREADS=1 "$spillway" train "$@" \
    > "$out" 2>&1
}

write_tiny_gpt "$work/tiny.toml"
cat >> "$work/tiny.toml" <<'TOML'
[parallel]
stages = 2
schedule = "1f1b"
TOML

run2 "$work/run.txt" "$work/tiny.toml" --set "output.dir=$work/out"
status=$?
cat "$work/run.txt"
check "a 2-rank pipeline exits 0" test $status -eq 0

# A bad command line under mpiexec: every rank reads it, the first says what is wrong.
run2 "$work/usage.txt" "$work/tiny.toml" --resume "$work/none.h5"
check "a missing --resume file on 2 ranks exits 2" test $? -eq 2
check "said once" test "$(grep -c "^spillway: error: --resume: File does not exist: $work/none.h5 (spillway train --help lists the options)$" "$work/usage.txt")" -eq 1

# An output directory rank 0 cannot create fails on every rank with rank 0's message, not
# with ranks left in different collectives (which MPI ended with MPI_ERR_TRUNCATE).
for stages in 2 '"auto"'; do
  run2 "$work/no-dir.txt" "$work/tiny.toml" --set "parallel.stages=$stages" \
    --set 'output.dir="/proc/spillway-cannot-create"'
  check "an output.dir that cannot be created exits 1 (stages $stages)" test $? -eq 1
  check "with one line naming it (stages $stages)" test "$(grep -c \
    "^spillway: error: rank 0: cannot create output directory /proc/spillway-cannot-create: .* (set output.dir to a writable place)$" \
    "$work/no-dir.txt")" -eq 1
  check "and no MPI abort (stages $stages)" test "$(grep -c "MPI_ERR\|MPI_ABORT" "$work/no-dir.txt")" -eq 0
done

# A model the node cannot hold, on two ranks: each rank's stage alone is checked with the
# other's, before either allocates, and rank 0 alone says so.
run2 "$work/huge.txt" "$work/tiny.toml" --set model.d_model=65536 --set model.layers=1000 \
  --set "output.dir=$work/huge"
check "a model too big for the node's 2 ranks exits 1" test $? -eq 1
check "one line says what the node's ranks need and how to fix it" test "$(grep -c \
  "^spillway: error: this node's memory exceeded: need 750.0 TiB for the parameters, gradients and optimizer state of the stages of this node's 2 ranks (51540494254080 parameters), the node's budget is .* for what the ranks hold beside tensors): spread the model over more ranks or nodes" \
  "$work/huge.txt")" -eq 1
# Planned stages: refused before the ranks profile the model's 1,000 blocks.
run2 "$work/huge-auto.txt" "$work/tiny.toml" --set model.d_model=65536 --set model.layers=1000 \
  --set 'parallel.stages="auto"' --set "output.dir=$work/huge-auto"
check "a model too big for the job's nodes exits 1 before planning" test $? -eq 1
check "one line says what one copy of it needs against the node's budget" test "$(grep -c \
  "^spillway: error: the model needs 750.0 TiB for its parameters, gradients and optimizer state (51540494254080 parameters), more than the .* the job's node has for them (this node's budget: .*): run it on more nodes, or make it smaller$" \
  "$work/huge-auto.txt")" -eq 1
check "and writes no profile or plan" test ! -e "$work/huge-auto/profile.json" -a ! -e "$work/huge-auto/plan.json"
check "rank 0 alone prints progress" test "$(grep -c '^step 5/5  loss' "$work/run.txt")" -eq 1
check "the header names the layout" grep -q "2 ranks (2 stages x 1 replica, 1f1b" "$work/run.txt"
check "report.json has the pipeline section" python3 - "$work/out/report.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
p = r["pipeline"]
ranks = p["measured"]["ranks"]
ok = (r["ranks"] == 2 and len(r["loss"]) == 5 and len(ranks) == 2
      and all(x["peak_bytes"] > 0 and x["busy_seconds"] > 0 for x in ranks)
      # per-step busy times, whose median after the first step is the rank's busy time
      and all(len(x["busy_seconds_by_step"]) == 5 for x in ranks)
      and all(abs(statistics.median(x["busy_seconds_by_step"][1:]) - x["busy_seconds"]) < 1e-12
              for x in ranks)
      and all(x["peak_bytes_by_category"]["parameters"] > 0 for x in ranks)
      # the process holds at least what the ledger counted (every tensor is touched), plus MPI
      and all(x["peak_rss_bytes"] > x["peak_bytes"] for x in ranks)
      and 0 <= p["measured"]["bubble_fraction"] < 1
      and 0 < p["predicted"]["bubble_fraction"] < 1
      and p["predicted"]["iteration_seconds"] > 0
      # free links can only shorten the simulated iteration
      and 0 < p["predicted"]["free_links"]["iteration_seconds"]
          <= p["predicted"]["iteration_seconds"]
      and 0 <= p["predicted"]["free_links"]["bubble_fraction"] < 1
      and p["layout"]["stages"] == [[0, 1], [2, 3]]
      and len(r["nodes"]) == 1 and r["nodes"][0]["ranks"] == [0, 1] and r["nodes"][0]["cores"] > 0)
sys.exit(0 if ok else 1)
PY
check "each rank's report gives its own ops' time" python3 - "$work/out/report.json" <<'PY'
import json, sys
ranks = json.load(open(sys.argv[1]))["pipeline"]["measured"]["ranks"]
ops = [{o["op"]: o for o in r["time_by_op"]["ops"]} for r in ranks]
# The embedding is on the first stage, the loss on the last; 4 microbatches a step.
ok = (all(r["time_by_op"]["steps"] == 4 for r in ranks)
      and ops[0]["embedding_forward"]["calls_per_step"] == 4 and "cross_entropy_forward" not in ops[0]
      and ops[1]["cross_entropy_forward"]["calls_per_step"] == 4 and "embedding_forward" not in ops[1]
      and all(0 < r["time_by_op"]["all_ops_share_of_step"] <= 1.0001 for r in ranks))
# Both ranks together: rank-seconds over the ranks' summed steps.
both = json.load(open(sys.argv[1]))["pipeline"]["measured"]["time_by_op"]
summed = {o["op"]: o for o in both["ops"]}
ok = ok and (both["steps"] == 4
             and abs(both["step_seconds"] - sum(r["time_by_op"]["step_seconds"] for r in ranks)) < 1e-9
             and summed["embedding_forward"]["calls_per_step"] == 4
             and summed["linear_forward"]["calls_per_step"]
                 == sum(o.get("linear_forward", {"calls_per_step": 0})["calls_per_step"] for o in ops))
sys.exit(0 if ok else 1)
PY
check "rank 0 prints both ranks' time by op" \
  grep -Eq "^spillway: time by op, per step, all ranks: [a-z_]+ [0-9]+%, .*outside ops [0-9]+%$" "$work/run.txt"
check "trace.json holds both ranks' instructions" python3 - "$work/out/trace.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
events = [e for e in t["traceEvents"] if e["ph"] == "X"]
names = {(e["pid"], e["name"]) for e in events}
# steps 2-4 are traced: each rank ran F and B of 4 microbatches in each
ok = all((0, f"F{mb}.0") in names and (1, f"B{mb}.0") in names for mb in range(4))
ok = ok and any(e["name"].startswith("SA") and e["pid"] == 0 for e in events)
ok = ok and {e["args"]["step"] for e in events} == {2, 3, 4}
sys.exit(0 if ok else 1)
PY
check "timeline.svg is drawn" grep -q "<svg" "$work/out/timeline.svg"

# stages = "auto": rank 0 profiles, the ranks measure their links (cached), the planner decides.
run2 "$work/auto.txt" "$work/tiny.toml" --set "output.dir=$work/auto" --set 'parallel.stages="auto"' \
  --set output.checkpoint_every=2
status=$?
cat "$work/auto.txt"
check "an automatic plan runs" test $status -eq 0
check "the plan is printed" grep -q "^spillway: automatic plan" "$work/auto.txt"
check "without memory.cap, planned within each rank's share of its node's memory" grep -Eq \
  "^peak .* on pipeline rank [0-9]+ of [0-9.e+-]+ GiB \([0-9]+ bytes\), each rank's share of its node's memory$" \
  "$work/auto.txt"
check "the profile is kept" python3 -c "import json,sys; p=json.load(open('$work/auto/profile.json')); sys.exit(0 if len(p['blocks'])==4 else 1)"
check "the link matrix is cached" bash -c "ls $work/auto/topology-2-*.json"
check "the planned run reports its layout" python3 - "$work/auto/report.json" <<'PY'
import json, sys
layout = json.load(open(sys.argv[1]))["pipeline"]["layout"]
P, R, v = layout["pipeline_ranks"], layout["replicas"], layout["chunks"]
sys.exit(0 if P * R == 2 and len(layout["stages"]) == P * v else 1)
PY
check "and the plan beside what it measured" python3 - "$work/auto/report.json" "$work/auto/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["pipeline"]
kept = json.load(open(sys.argv[2]))
plan, vs = p["plan"], p["plan_vs_measured"]
ok = (plan == kept and plan["how"] == "searched by the planner"
      and plan["layout"]["stages"] == p["layout"]["stages"]
      and len(plan["topology"]["nodes"]) == 1
      and vs["predicted_iteration_seconds"] == plan["predicted"]["iteration_seconds"] > 0
      and vs["measured_iteration_seconds"] == p["measured"]["iteration_seconds"] > 0
      and abs(vs["measured_over_predicted"] - vs["measured_iteration_seconds"]
              / vs["predicted_iteration_seconds"]) < 1e-12)
sys.exit(0 if ok else 1)
PY
check "the profile was taken on both ranks" grep -q "measured on all 2 ranks at once" "$work/auto/plan.json"
# A resumed planned run keeps the plan of the run it continues (its plan.json, made for the
# same job keys on as many ranks) instead of measuring and planning again, and goes on to
# that run's losses; a resumed run whose keys changed plans anew and says why.
cp "$work/auto/plan.json" "$work/auto-plan-straight.json"
cp "$work/auto/report.json" "$work/auto-report-straight.json"
resume_auto() {  # resume_auto OUT ARGS...: the automatic run, resumed at step 2
  local out=$1; shift
  run2 "$out" "$work/tiny.toml" --set "output.dir=$work/auto" --set 'parallel.stages="auto"' \
    --set output.checkpoint_every=2 --resume "$work/auto/checkpoint-2.h5" "$@"
}
resume_auto "$work/auto-resume.txt"
check "a resumed planned run exits 0" test $? -eq 0
check "keeping the plan of the run it continues" grep -q -F \
  "spillway: automatic plan kept from $work/auto/plan.json (the resumed run's, its job keys unchanged): " \
  "$work/auto-resume.txt"
check "without planning again" cmp "$work/auto-plan-straight.json" "$work/auto/plan.json"
check "and ends on the losses of the run it continues" python3 - \
  "$work/auto-report-straight.json" "$work/auto/report.json" <<'PY'
import json, sys
straight, resumed = (json.load(open(f)) for f in sys.argv[1:])
ok = resumed["loss"] == straight["loss"][2:] and resumed["pipeline"]["plan"] == straight["pipeline"]["plan"]
sys.exit(0 if ok else 1)
PY
# A kept plan must still fit each rank's share of its node's memory, which a requeued job
# may find smaller: a plan whose peak no node here holds is planned anew.
python3 - "$work/auto-plan-straight.json" "$work/auto/plan.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
plan["predicted"]["peak_bytes_by_pipeline_rank"] = [2**50] * len(plan["predicted"]["peak_bytes_by_pipeline_rank"])
json.dump(plan, open(sys.argv[2], "w"))
PY
resume_auto "$work/auto-resume-share.txt"
check "a resumed run whose plan no longer fits its node exits 0" test $? -eq 0
check "planning anew, saying why" grep -q -E \
  "^spillway: automatic plan \(profile, links and plan.json in $work/auto; the stored plan not kept: its peak of 1024.0 TiB a rank is more than each rank's share of its node's memory now, [0-9.]+ GiB\): " \
  "$work/auto-resume-share.txt"
resume_auto "$work/auto-resume-cap.txt" --set memory.cap='"1GiB"'
check "a resumed run with another memory.cap exits 0" test $? -eq 0
check "planning anew, saying why" grep -q -F \
  "spillway: automatic plan (profile, links and plan.json in $work/auto; the stored plan not kept: the job's [memory] changed since): " \
  "$work/auto-resume-cap.txt"
OMP_NUM_THREADS=1 "$spillway" plan "$work/tiny.toml" --ranks 2 --repeats 1 \
  --set "output.dir=$work/auto" --set 'parallel.stages="auto"' > "$work/replan.txt" 2>&1
check "spillway plan takes the links that run measured" \
  grep -q "^links: measured by an earlier run of 2 ranks on this node ($work/auto/topology-2-" \
  "$work/replan.txt"

# model.split_layers = "auto": the ranks profile the probe model (layer 0 cut after its first
# head), and the run builds the model with whatever cuts the plan keeps: its stages count
# those blocks.
run2 "$work/cuts.txt" "$work/tiny.toml" --set "output.dir=$work/cuts" \
  --set 'parallel.stages="auto"' --set model.layers=3 --set 'model.split_layers="auto"'
status=$?
cat "$work/cuts.txt"
check "a plan that may cut layers runs" test $status -eq 0
check "the probe model was profiled" python3 - "$work/cuts/profile.json" <<'PY'
import json, sys
names = [b["name"] for b in json.load(open(sys.argv[1]))["blocks"]]
sys.exit(0 if names == ["embedding", "blocks.0.front", "blocks.0.back", "blocks.1", "blocks.2",
                        "head"] else 1)
PY
check "the run's stages cover the model the plan cut" python3 - "$work/cuts/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["pipeline"]
cuts = p["plan"]["layout"].get("split_layers", [])
explained = p["plan"]["explanation"]
blocks = 3 + 2 + len(cuts)
ok = (r["config"]["model"]["split_layers"] == "auto"
      and p["layout"]["stages"][-1][1] == blocks - 1
      and all(1 <= heads <= 1 and 0 <= layer < 3 for layer, heads in cuts)
      and (("cut after" in explained) == bool(cuts))
      and (bool(cuts) or 'model.split_layers = "auto"' in explained))
sys.exit(0 if ok else 1)
PY

# model.head_chunk_rows = "auto": the ranks profile the head chunked on a one-layer probe too,
# the plan says what both heads would take and which it kept, and the run builds that head.
run2 "$work/heads.txt" "$work/tiny.toml" --set "output.dir=$work/heads" \
  --set 'parallel.stages="auto"' --set model.vocab=1024 --set 'model.head_chunk_rows="auto"'
status=$?
cat "$work/heads.txt"
check "a plan that may chunk the head runs" test $status -eq 0
check "the run builds the head the plan kept" python3 - "$work/heads/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["pipeline"]
rows = p["plan"]["layout"]["head_chunk_rows"]
explained = p["plan"]["explanation"]
chunked = rows > 0
ok = (r["config"]["model"]["head_chunk_rows"] == "auto"
      and rows in (0, 1024)
      and 'model.head_chunk_rows = "auto": head whole ' in explained
      and " s a step, peak " in explained
      and ("kept the head chunked" if chunked else "kept the head whole") in explained
      and p["model"].endswith(" head_chunk_rows=1024") == chunked
      and (not chunked or p["layout"]["schedule"] != "pipefb"))
sys.exit(0 if ok else 1)
PY

# An automatic plan for a job that fixes its offload: the ranks measure the file tier's rate
# together and every candidate is priced with the job's tier, keep and lookahead.
run2 "$work/auto-file.txt" "$work/tiny.toml" --set "output.dir=$work/auto-file" \
  --set 'parallel.stages="auto"' --set 'offload.tier="file"' --set offload.keep=0 \
  --set "offload.dir=$work"
status=$?
cat "$work/auto-file.txt"
check "an automatic plan with the file tier runs" test $status -eq 0
check "the plan keeps the job's offload and the file tier's measured rate" python3 - "$work/auto-file/plan.json" "$work" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
o = p["layout"]["offload"]
ok = (o["tier"] == "file" and o["keep"] == 0 and o["lookahead"] == 1
      and 0 < o["file_bytes_per_second"] < 1e12
      and "median of 2 rank(s) writing at once" in o["file_rate_source"]
      and o["file_rate_source"].endswith(" in " + sys.argv[2])
      and "(the job's policy)" in p["explanation"]
      # 2 ranks x 1 thread: the engines have a core of their own only on 3 cores or more
      and o["copies_take_compute"] == (p["topology"]["nodes"][0]["cores"] <= 2))
sys.exit(0 if ok else 1)
PY
run2 "$work/auto-nodir.txt" "$work/tiny.toml" --set "output.dir=$work/auto-nodir" \
  --set 'parallel.stages="auto"' --set 'offload.tier="file"' --set "offload.dir=$work/missing"
status=$?
cat "$work/auto-nodir.txt"
check "a missing offload directory fails the planned run" test $status -ne 0
check "naming the directory while measuring the file tier" \
  grep -q "^spillway: error: measuring the file tier's rate in $work/missing: " "$work/auto-nodir.txt"

# A forced layout with --predict: measured like "auto", predicted as it stands.
run2 "$work/predict.txt" "$work/tiny.toml" --set "output.dir=$work/predict" --predict
status=$?
cat "$work/predict.txt"
check "--predict with forced stages runs" test $status -eq 0
check "the prediction is printed" grep -q "^spillway: predicted (profile, links and plan.json in" "$work/predict.txt"
check "and the final line compares it" grep -q "iteration .* s against .* s planned (.*x)" "$work/predict.txt"
check "report.json has the forced layout's prediction" python3 - "$work/predict/report.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["pipeline"]
plan = p["plan"]
ok = (plan["how"] == "the job's own layout, predicted"
      and plan["layout"]["stages"] == [[0, 1], [2, 3]] and plan["layout"]["schedule"] == "1f1b"
      and p["plan_vs_measured"]["measured_over_predicted"] > 0)
sys.exit(0 if ok else 1)
PY

"$spillway" profile "$work/tiny.toml" --output "$work/profile.json" --repeats 2 > "$work/profile.txt" 2>&1
check "spillway profile exits 0" test $? -eq 0
check "spillway profile lists the blocks" grep -q "^blocks.1 " "$work/profile.txt"
check "and says it measured one block of each kind" grep -q \
  "^spillway: profiled 4 blocks (3 kinds, one of each measured: blocks of a kind share its figures), microbatch of 2, " \
  "$work/profile.txt"
check "spillway profile writes the profile" python3 -c "import json,sys; p=json.load(open('$work/profile.json')); sys.exit(0 if p['microbatch_samples']==2 and p['blocks'][3]['name']=='head' else 1)"

# Checkpoints: every 2 steps of the 5; resuming the one at step 2 continues to the straight
# run's losses exactly (same layout, same arithmetic), on 2 ranks and on one.
run2 "$work/ckpt.txt" "$work/tiny.toml" --set "output.dir=$work/ckpt" \
  --set output.checkpoint_every=2
check "a run with checkpoint_every exits 0" test $? -eq 0
check "checkpoint_every = 2 writes steps 2 and 4 only" \
  test "$(cd "$work/ckpt" && ls checkpoint-* | tr '\n' ' ')" = "checkpoint-2.h5 checkpoint-4.h5 "
check "no temporary is left" test -z "$(find "$work/ckpt" -name '*.tmp.*')"
run2 "$work/resume.txt" "$work/tiny.toml" --set "output.dir=$work/resumed" \
  --resume "$work/ckpt/checkpoint-2.h5"
status=$?
cat "$work/resume.txt"
check "--resume on 2 ranks exits 0" test $status -eq 0
check "the resumed run starts at step 3" \
  test "$(grep -c '^step [12]/5' "$work/resume.txt")" -eq 0 -a \
       "$(grep -c '^step 3/5' "$work/resume.txt")" -eq 1
same_losses() {  # same_losses REPORT: its losses are the straight run's steps 3-5
  python3 - "$work/out/report.json" "$1" <<'PY'
import json, sys
straight = json.load(open(sys.argv[1]))["loss"]
resumed = json.load(open(sys.argv[2]))["loss"]
print("straight", straight[2:], "resumed", resumed)
sys.exit(0 if resumed == straight[2:] else 1)
PY
}
check "it ends at the straight run's final loss" same_losses "$work/resumed/report.json"
OMP_NUM_THREADS=1 timeout 120 "$spillway" train "$work/tiny.toml" --set parallel.stages=1 \
  --set "output.dir=$work/single" --resume "$work/ckpt/checkpoint-2.h5" > "$work/single.txt" 2>&1
check "the single-rank trainer resumes a pipeline checkpoint" test $? -eq 0
check "to the same losses" same_losses "$work/single/report.json"

# A checkpoint that cannot be written (a directory holds its name) fails on every rank alike:
# one message, a clean non-zero exit, no temporary.
mkdir -p "$work/blocked/checkpoint-2.h5/inside"
run2 "$work/blocked.txt" "$work/tiny.toml" --set "output.dir=$work/blocked" \
  --set output.checkpoint_every=2
code=$?
cat "$work/blocked.txt"
check "an unwritable checkpoint ends the job non-zero" test $code -ne 0 -a $code -ne 124
check "with one message naming it" test "$(grep -c -F \
  "spillway: error: rank 0: writing checkpoint $work/blocked/checkpoint-2.h5: renaming" \
  "$work/blocked.txt")" -eq 1
check "without aborting the job" test "$(grep -c MPI_ABORT "$work/blocked.txt")" -eq 0
check "and leaves no temporary" test -z "$(find "$work/blocked" -name '*.tmp.*')"

# Bad layouts: one message (printed by rank 0 only), non-zero exit, before any step.
expect_error() {  # expect_error NAME TEXT ARGS...
  local name=$1 text=$2; shift 2
  run2 "$work/bad.txt" "$work/tiny.toml" --set "output.dir=$work/bad" "$@"
  local code=$?
  check "$name exits non-zero" test $code -ne 0 -a $code -ne 124
  check "$name says so once" test "$(grep -c -F "$text" "$work/bad.txt")" -eq 1
  check "$name runs no step" test "$(grep -c '^step ' "$work/bad.txt")" -eq 0
}
expect_error "3 stages on 2 ranks" "need 3 ranks, but the job was launched with 2: launch with mpirun -n 3" \
  --set parallel.stages=3
expect_error "more stages than blocks" "but the model has only 4 blocks" --set parallel.stages=6
expect_error "overlapping ranges" "must start at block 2" --set "parallel.stages=[[0,1],[1,3]]"
expect_error "a range gap" "must start at block 2" --set "parallel.stages=[[0,1],[3,3]]"
expect_error "ranges short of the last block" "the last range must end at 3" \
  --set "parallel.stages=[[0,1],[2,2]]"
expect_error "a checkpoint of another width" \
  "spillway: error: checkpoint $work/ckpt/checkpoint-2.h5 holds another model than the job's: model.d_model = 32 there, 64 in the job: give the job the checkpoint's model (--set model.d_model=32)" \
  --set model.d_model=64 --resume "$work/ckpt/checkpoint-2.h5"
# Keys that shape no tensor, or whose extra tensors a stage would not ask for, are compared
# with the job the checkpoint's run was started with.
expect_error "a checkpoint of other heads" \
  "holds another model than the job's: model.heads = 2 there, 4 in the job: give the job the checkpoint's model (--set model.heads=2)" \
  --set model.heads=4 --resume "$work/ckpt/checkpoint-2.h5"
expect_error "a checkpoint of more layers" \
  "holds another model than the job's: model.layers = 2 there, 1 in the job; model.ln_eps = 1e-05 there, 0.001 in the job: give the job the checkpoint's model (--set model.layers=2 --set model.ln_eps=1e-05)" \
  --set model.layers=1 --set model.ln_eps=1e-3 --resume "$work/ckpt/checkpoint-2.h5"
expect_error "a checkpoint past the last step" "is at step 4 and the job has 3 steps" \
  --set train.steps=3 --resume "$work/ckpt/checkpoint-4.h5"

# PipeFB: the one stage's forwards on rank 0, its backwards on rank 1, the same losses as
# the 1F1B run above (one stage here, so the same math as the single-rank trainer).
run2 "$work/fb.txt" "$work/tiny.toml" --set "output.dir=$work/fb" --set parallel.stages=1 \
  --set 'parallel.layout="pipefb"'
status=$?
cat "$work/fb.txt"
check "a PipeFB run exits 0" test $status -eq 0
check "its header names forward and backward ranks" \
  grep -q "1 stage on 2 ranks (forward and backward apart)" "$work/fb.txt"
check "it computes the 1f1b run's losses" python3 - "$work/out/report.json" "$work/fb/report.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["loss"] for p in sys.argv[1:3])
assert len(a) == len(b) == 5 and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
PY
check "its report shows the stash crossing" python3 - "$work/fb/report.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["pipeline"]
ranks = p["measured"]["ranks"]
assert p["layout"]["schedule"] == "pipefb" and p["layout"]["ranks_per_stage"] == 2
assert ranks[0]["sent_bytes_per_step"] > 0 and ranks[1]["sent_bytes_per_step"] > 0
# The forward rank holds no gradients or optimizer state; the backward rank does.
assert ranks[0]["peak_bytes_by_category"]["gradients"] == 0, ranks[0]
assert ranks[1]["peak_bytes_by_category"]["gradients"] > 0, ranks[1]
assert ranks[1]["peak_bytes_by_category"]["optimizer_state"] > 0, ranks[1]
# The simulator is fed the forward rank's forward and the backward rank's backward costs
# per microbatch, not a per-run sum: no microbatch's pass outlasts the busy time of the step
# it ran in. Timings are compared only where they must hold: these millisecond steps vary
# threefold when another process takes the cores, so predicted against measured cannot be.
cost = p["predicted"]["stage_costs"][0]
busy = [max(r["busy_seconds_by_step"]) for r in ranks]
m = p["layout"]["microbatches_per_replica"]
assert 0 < cost["forward_seconds"] <= busy[0], (cost, busy)
backward = cost["backward_input_seconds"] + cost["backward_weight_seconds"]
assert 0 < backward <= busy[1], (cost, busy)
predicted_busy = p["predicted"]["busy_seconds_by_pipeline_rank"]
assert predicted_busy[0] >= m * cost["forward_seconds"] * (1 - 1e-9), (predicted_busy, cost)
assert predicted_busy[1] >= m * backward * (1 - 1e-9), (predicted_busy, cost)
assert p["predicted"]["iteration_seconds"] >= max(predicted_busy) * (1 - 1e-9), p["predicted"]
PY
expect_error "PipeFB with 2 stages on 2 ranks" "need 4 ranks, but the job was launched with 2: launch with mpirun -n 4" \
  --set parallel.stages=2 --set 'parallel.layout="pipefb"'

# fails_mid_run LABEL REPORT [ARGS...]: a memory cap between the two ranks' peaks in REPORT
# lets both set up but stops the hungrier rank inside a step while its peer waits on it; the
# job must end at once, non-zero, with that rank's message.
fails_mid_run() {
  local label=$1 report=$2 cap start code elapsed
  shift 2
  cap=$(python3 - "$report" <<'PY'
import json, sys
ranks = json.load(open(sys.argv[1]))["pipeline"]["measured"]["ranks"]
peaks = sorted(x["peak_bytes"] for x in ranks)
# Close under the hungrier rank's peak: its setup (which with the peer tier runs one forward
# to size the window) must still fit.
print(max((peaks[0] + peaks[1]) // 2, peaks[1] - 32768) if peaks[1] > 1.1 * peaks[0] else 0)
PY
)
  check "$label: the two ranks' peaks differ enough to fail one" test "$cap" -gt 0
  start=$(date +%s)
  run2 "$work/fault-$label.txt" "$work/tiny.toml" --set "output.dir=$work/fault-$label" \
    --set "memory.cap=$cap" "$@"
  code=$?
  elapsed=$(( $(date +%s) - start ))
  cat "$work/fault-$label.txt"
  check "$label: a failing rank ends the job non-zero, not at the timeout" \
    test $code -ne 0 -a $code -ne 124
  check "$label: within seconds" test $elapsed -lt 30
  check "$label: with that rank's message" \
    grep -q "spillway: error: rank [01]: step [0-9]*, .*memory cap exceeded" "$work/fault-$label.txt"
}
fails_mid_run no-offload "$work/out/report.json"

# The same with the peer tier, whose teardown is collective (MPI_Win_free): the failing rank
# must not tear down while its peer waits (it did, and the job hung). The cap comes from an
# uncapped peer run, so setup (which lends the window) passes. Uneven stages keep the two
# peaks apart, and a keep above any stash count offloads nothing, so the hungrier rank
# cannot make room by evicting: the window is lent, but the cap still bites.
peer_args=(--set 'offload.tier="peer"' --set offload.keep=100 --set 'parallel.stages=[[0,0],[1,3]]')
OMPI_MCA_osc=sm run2 "$work/peer.txt" "$work/tiny.toml" --set "output.dir=$work/peer" \
  "${peer_args[@]}"
check "a peer-tier run exits 0" test $? -eq 0
check "each rank's offload engine is bound to a PU of its own, and says where and why" \
  python3 - "$work/peer/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ranks = [x["offload"] for x in r["pipeline"]["measured"]["ranks"]]
ok = r["config"]["offload"]["engine_pu"] == "auto"
for o in ranks:
    ok = ok and o["engine_pu"] >= 0 and o["engine_binding"].startswith(f"auto: PU {o['engine_pu']}, ")
    ok = ok and o["engine_shares_core"] == ("a core no compute thread" not in o["engine_binding"])
# each rank has its own cores when the node has enough, and so its own engine PU
if r["nodes"][0]["cores"] >= 2:
    ok = ok and len({o["engine_pu"] for o in ranks}) == 2
sys.exit(0 if ok else 1)
PY
OMPI_MCA_osc=sm fails_mid_run peer-tier "$work/peer/report.json" "${peer_args[@]}"

# Held-out evaluation: the last 5% of the fortunes text, every 2 steps and after the last; the
# 2-rank pipeline and the single-rank trainer agree to the bit, and training is unchanged.
eval_args=(--set 'data.source="text"' --set data.holdout=0.05 --set eval.every=2
           --set eval.batches=2)
run2 "$work/eval.txt" "$work/tiny.toml" --set "output.dir=$work/eval" "${eval_args[@]}" \
  --set output.checkpoint_every=5
check "a pipeline run with eval.every exits 0" test $? -eq 0
check "rank 0 alone logs each evaluation" test "$(grep -c '^step [245]: eval loss [0-9.]* on 2 held-out batches, [0-9.]* s$' "$work/eval.txt")" -eq 3
"$spillway" train "$work/tiny.toml" --set "output.dir=$work/eval1" --set parallel.stages=1 \
  "${eval_args[@]}" \
  > "$work/eval1.txt" 2>&1
check "the single-rank trainer evaluates too" test $? -eq 0
"$spillway" train "$work/tiny.toml" --set "output.dir=$work/noeval" --set parallel.stages=1 \
  --set 'data.source="text"' --set data.holdout=0.05 > "$work/noeval.txt" 2>&1
check "report.json lists the evaluations, the pipeline's equal to the trainer's" \
  python3 - "$work/eval/report.json" "$work/eval1/report.json" "$work/noeval/report.json" <<'PY'
import json, sys
pipe, single, plain = (json.load(open(f)) for f in sys.argv[1:])
steps = [e["step"] for e in pipe["eval"]]
losses = lambda r: [e["loss"] for e in r["eval"]]
ok = (steps == [2, 4, 5] and [e["step"] for e in single["eval"]] == steps
      and losses(pipe) == losses(single) and all(2.0 < x < 6.0 for x in losses(pipe))
      and all(e["seconds"] > 0 for e in pipe["eval"] + single["eval"])
      and pipe["config"]["eval"] == {"every": 2, "batches": 2}
      and pipe["loss"] == single["loss"] == plain["loss"] and "eval" not in plain)
sys.exit(0 if ok else 1)
PY
check "the trace draws the evaluations that follow traced steps 2 and 4, between the steps" \
  python3 - "$work/eval/trace.json" <<'PY'
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
evaluation = [e for e in events if "evaluation_batch" in e["args"]]
# Forwards and the activations between the two stages, for both batches after each step.
assert {(e["args"]["step"], e["args"]["evaluation_batch"]) for e in evaluation} == {
    (2, 1), (2, 2), (4, 1), (4, 2)}, evaluation
assert {(e["pid"], e["args"]["op"]) for e in evaluation} == {
    (0, "Forward"), (0, "SendAct"), (1, "RecvAct"), (1, "Forward")}, evaluation
for rank in (0, 1):
    for step in (2, 4):
        mine = [e for e in evaluation if e["pid"] == rank and e["args"]["step"] == step]
        before = [e for e in events if e["pid"] == rank and e["args"]["step"] == step
                  and "evaluation_batch" not in e["args"]]
        after = [e for e in events if e["pid"] == rank and e["args"]["step"] == step + 1]
        assert max(e["ts"] + e["dur"] for e in before) <= min(e["ts"] for e in mine), (rank, step)
        if after:
            assert max(e["ts"] + e["dur"] for e in mine) <= min(e["ts"] for e in after), (rank, step)
PY
# spillway evaluate: the checkpoint of step 5 scores what the run measured after step 5, on
# one rank (the trainer) and on two (the pipeline).
"$spillway" evaluate "$work/tiny.toml" --set parallel.stages=1 "${eval_args[@]}" \
  --set "output.dir=$work/eval" --checkpoint "$work/eval/checkpoint-5.h5" > "$work/ev1.txt" 2>&1
check "spillway evaluate exits 0" test $? -eq 0
check "it prints the checkpoint's step and loss" grep -Eq \
  "^spillway: $work/eval/checkpoint-5.h5 \(step 5\): eval loss [0-9.]+ on 2 held-out batches of 8, [0-9.]+ s; $work/eval/eval.json$" \
  "$work/ev1.txt"
timeout 120 "$mpiexec" -n 2 "${mpi_flags[@]}" -x OMP_NUM_THREADS=1 "$spillway" evaluate \
  "$work/tiny.toml" "${eval_args[@]}" --checkpoint "$work/eval/checkpoint-5.h5" \
  --output "$work/ev2.json" > "$work/ev2.txt" 2>&1
check "on 2 ranks too" test $? -eq 0
check "both give the loss the run measured after step 5" \
  python3 - "$work/eval/report.json" "$work/eval/eval.json" "$work/ev2.json" <<'PY'
import json, sys
run, one, two = (json.load(open(f)) for f in sys.argv[1:])
measured = run["eval"][-1]
ok = (measured["step"] == 5 and one["loss"] == measured["loss"] == two["loss"]
      and one["step"] == two["step"] == 5 and one["batches"] == 2 and two["ranks"] == 2)
sys.exit(0 if ok else 1)
PY
"$spillway" evaluate "$work/tiny.toml" --set parallel.stages=1 "${eval_args[@]}" \
  --set model.d_model=64 --checkpoint "$work/eval/checkpoint-5.h5" > "$work/ev-bad.txt" 2>&1
check "another model's checkpoint exits non-zero" test $? -ne 0
check "naming the key that differs" one_line "$work/ev-bad.txt" \
  "holds another model than the job's: model.d_model = 32 there, 64 in the job"
# Where eval.json cannot go is said before the ranks evaluate, not after.
timeout 120 "$mpiexec" -n 2 "${mpi_flags[@]}" -x OMP_NUM_THREADS=1 "$spillway" evaluate \
  "$work/tiny.toml" "${eval_args[@]}" --checkpoint "$work/eval/checkpoint-5.h5" \
  --set 'output.dir="/proc/spillway-cannot-create"' > "$work/ev-dir.txt" 2>&1
check "an output.dir evaluate cannot create exits 1" test $? -eq 1
check "before evaluating, in one line" test "$(grep -c "^spillway: error: rank 0: cannot create output directory /proc/spillway-cannot-create: .*$" "$work/ev-dir.txt")" -eq 1 -a "$(grep -c "evaluating on" "$work/ev-dir.txt")" -eq 0
# spillway sample on 2 ranks runs the job's pipeline, a forward through it a token, and prints
# what one process prints from the same checkpoint: text and ids, with stages given, planned
# (writing nothing beside the checkpoint) and as PipeFB on 4 ranks. A bad request stops every
# rank before any pass, with rank 0's one line.
sample2() {  # sample2 RANKS OUT ARGS...: spillway sample of step 5's checkpoint
  local ranks=$1 out=$2; shift 2
  timeout 120 "$mpiexec" -n "$ranks" "${mpi_flags[@]}" -x OMP_NUM_THREADS=1 "$spillway" sample \
    "$work/tiny.toml" --checkpoint "$work/eval/checkpoint-5.h5" "$@" > "$out" 2> "$out.err"
}
text_args=(--prompt "Once " --bytes 24 --seed 7)
ids_args=(--prompt-ids "5 60 7" --tokens 9 --temperature 0)
"$spillway" sample "$work/tiny.toml" --set parallel.stages=1 \
  --checkpoint "$work/eval/checkpoint-5.h5" "${text_args[@]}" > "$work/sample-one.txt"
check "spillway sample on one process exits 0" test $? -eq 0
"$spillway" sample "$work/tiny.toml" --set parallel.stages=1 \
  --checkpoint "$work/eval/checkpoint-5.h5" "${ids_args[@]}" > "$work/sample-one-ids.txt"
ls "$work/eval" > "$work/eval-files-before.txt"
sample2 2 "$work/sample-given.txt" "${text_args[@]}"
check "on 2 ranks (stages given) it exits 0" test $? -eq 0
check "through the job's pipeline, as rank 0 says on stderr" one_line "$work/sample-given.txt.err" \
  "spillway: sampling on 2 ranks (2 stages x 1 replica, 1f1b, 1 microbatch of 1 per replica), a"
check "and prints one process's text" cmp "$work/sample-one.txt" "$work/sample-given.txt"
check "which is the prompt and 24 bytes" test "$(head -c 5 "$work/sample-given.txt")" = "Once " -a \
  "$(wc -c < "$work/sample-given.txt")" -eq 30
sample2 2 "$work/sample-given-ids.txt" "${ids_args[@]}"
check "and one process's ids" cmp "$work/sample-one-ids.txt" "$work/sample-given-ids.txt"
check "the prompt's 3 and 9 more" test "$(wc -w < "$work/sample-given-ids.txt")" -eq 12
sample2 2 "$work/sample-planned.txt" "${text_args[@]}" --set 'parallel.stages="auto"' \
  --set "output.dir=$work/eval"
check "with planned stages too" cmp "$work/sample-one.txt" "$work/sample-planned.txt"
check "which the planner chose" grep -q "^spillway: sampling on 2 ranks (.*, planned)" \
  "$work/sample-planned.txt.err"
ls "$work/eval" > "$work/eval-files-after.txt"
check "whose planning wrote nothing in output.dir" \
  cmp "$work/eval-files-before.txt" "$work/eval-files-after.txt"
# A planned job whose output.dir holds the plan.json of a run on as many ranks (the automatic
# run above, same model and batch) takes that plan's layout instead of profiling and planning
# again, for sampling and evaluating alike; a plan made for another model is not taken, and
# the line says why.
ls "$work/auto" > "$work/auto-files-before.txt"
sample2 2 "$work/sample-stored.txt" "${text_args[@]}" --set 'parallel.stages="auto"' \
  --set "output.dir=$work/auto"
check "a stored plan samples one process's text" cmp "$work/sample-one.txt" "$work/sample-stored.txt"
check "in the layout it records, as rank 0 says" one_line "$work/sample-stored.txt.err" \
  ", the plan in $work/auto/plan.json), a forward through them a token"
check "and the layout is the planned run's" python3 - "$work/auto/plan.json" \
  "$work/sample-stored.txt.err" <<'PY'
import json, sys
layout = json.load(open(sys.argv[1]))["layout"]
line = open(sys.argv[2]).read()
stages = len(layout["stages"])
replicas = layout["replicas"]
ok = f"{stages} stages x {replicas} replica" in line and layout["schedule"] in line
sys.exit(0 if ok else 1)
PY
timeout 120 "$mpiexec" -n 2 "${mpi_flags[@]}" -x OMP_NUM_THREADS=1 "$spillway" evaluate \
  "$work/tiny.toml" "${eval_args[@]}" --checkpoint "$work/eval/checkpoint-5.h5" \
  --set 'parallel.stages="auto"' --set "output.dir=$work/auto" --output "$work/ev-stored.json" \
  > "$work/ev-stored.txt" 2> "$work/ev-stored.err"
check "evaluating with it exits 0" test $? -eq 0
check "and says so" one_line "$work/ev-stored.err" ", the plan in $work/auto/plan.json)"
check "scoring what the given stages score" python3 -c \
  "import json,sys; a,b=(json.load(open(f))['loss'] for f in sys.argv[1:]); sys.exit(0 if abs(a-b)<=1e-6*abs(a) else 1)" \
  "$work/ev2.json" "$work/ev-stored.json"
ls "$work/auto" > "$work/auto-files-after.txt"
check "neither wrote in output.dir" cmp "$work/auto-files-before.txt" "$work/auto-files-after.txt"
sample2 2 "$work/sample-other-model.txt" "${text_args[@]}" --set 'parallel.stages="auto"' \
  --set "output.dir=$work/cuts"
check "another model's plan is planned anew" cmp "$work/sample-one.txt" "$work/sample-other-model.txt"
check "naming why" one_line "$work/sample-other-model.txt.err" \
  ", planned ($work/cuts/plan.json not used: it was made for the model \"gpt layers=3 d_model=32 heads=2 seq=16 vocab=256"
sample2 4 "$work/sample-pipefb.txt" "${text_args[@]}" --set 'parallel.layout="pipefb"'
check "and as PipeFB on 4 ranks" cmp "$work/sample-one.txt" "$work/sample-pipefb.txt"
check "which it ran" grep -q "^spillway: sampling on 4 ranks (2 stages on 4 ranks (forward and backward apart) x 1 replica, pipefb" \
  "$work/sample-pipefb.txt.err"
# Forwards set up no offload (nothing to offload, and a peer tier would only hold memory): a
# file tier in a directory that is missing, which training refuses, stops neither spillway
# sample nor spillway evaluate.
missing_dir=(--set 'offload.tier="file"' --set "offload.dir=\"$work/no-such-dir\"")
sample2 2 "$work/sample-offload.txt" "${text_args[@]}" "${missing_dir[@]}"
check "sampling sets up no offload tier" cmp "$work/sample-one.txt" "$work/sample-offload.txt"
timeout 120 "$mpiexec" -n 2 "${mpi_flags[@]}" -x OMP_NUM_THREADS=1 "$spillway" evaluate \
  "$work/tiny.toml" "${eval_args[@]}" --checkpoint "$work/eval/checkpoint-5.h5" \
  "${missing_dir[@]}" --output "$work/ev-offload.json" > "$work/ev-offload.txt" 2>&1
check "nor does evaluating, which scores what it scores without offload" python3 -c \
  "import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); sys.exit(0 if a['loss']==b['loss'] else 1)" \
  "$work/ev2.json" "$work/ev-offload.json"
# A rank that runs out of memory inside a pass (its parameters fit 100,000 bytes, a window's
# activations do not) ends the job with its message while its peer waits on it.
sample2 2 "$work/sample-cap.txt" "${text_args[@]}" --set memory.cap=100000
status=$?
check "a rank out of memory mid-pass ends the job non-zero, not at the timeout" \
  test $status -ne 0 -a $status -ne 124
check "with its message" grep -q "sampling pass 1, instruction F.*: memory cap exceeded" \
  "$work/sample-cap.txt.err"
sample2 2 "$work/sample-bad.txt" "${text_args[@]}" --temperature -1
check "a negative temperature on 2 ranks exits non-zero" test $? -ne 0
check "with rank 0's one line" test "$(grep -c -F \
  "spillway: error: temperature must be 0 (greedy) or more, got -1" "$work/sample-bad.txt.err")" -eq 1
# output.keep_best: at lr 0.05 the held-out loss falls to step 4 and rises at 6 and 8
# (measured), so best.h5 is step 4's, and it scores exactly what the run measured there.
best_args=("${eval_args[@]}" --set train.steps=8 --set train.lr=0.05 --set output.keep_best=true)
run2 "$work/best.txt" "$work/tiny.toml" --set "output.dir=$work/best" "${best_args[@]}" \
  --set output.checkpoint_every=4
check "a run with output.keep_best exits 0" test $? -eq 0
check "it saves best.h5 when the eval loss is the lowest so far, and only then" \
  test "$(grep -c 'the lowest eval loss so far; saved' "$work/best.txt")" -eq \
  "$(python3 -c "import json; e=[x['loss'] for x in json.load(open('$work/best/report.json'))['eval']]; print(sum(1 for i,x in enumerate(e) if x < min(e[:i], default=1e9)))")"
"$spillway" evaluate "$work/tiny.toml" --set parallel.stages=1 "${eval_args[@]}" \
  --checkpoint "$work/best/best.h5" --output "$work/best-eval.json" > /dev/null 2>&1
check "best.json and the report name the step of the lowest eval loss, which best.h5 scores" \
  python3 - "$work/best/report.json" "$work/best/best.json" "$work/best-eval.json" <<'PY'
import json, sys
report, best, scored = (json.load(open(f)) for f in sys.argv[1:])
lowest = min(report["eval"], key=lambda e: e["loss"])
ok = (best["step"] == lowest["step"] == 4 == scored["step"] and best["loss"] == lowest["loss"]
      == scored["loss"] and report["best"] == best and best["checkpoint"].endswith("/best.h5"))
sys.exit(0 if ok else 1)
PY
cp "$work/best/best.json" "$work/best-before.json"
run2 "$work/best-resumed.txt" "$work/tiny.toml" --set "output.dir=$work/best" "${best_args[@]}" \
  --resume "$work/best/checkpoint-4.h5"
check "a run resumed at step 4 goes on from the record: steps 6 and 8 do not beat it" \
  bash -c "! grep -q 'lowest eval loss so far' '$work/best-resumed.txt' && cmp -s '$work/best/best.json' '$work/best-before.json'"
run2 "$work/best-fresh.txt" "$work/tiny.toml" --set "output.dir=$work/best" "${eval_args[@]}" \
  --set train.steps=2 --set output.keep_best=true
check "a fresh run in the same output.dir starts its own record" python3 -c \
  "import json,sys; b=json.load(open('$work/best/best.json')); sys.exit(0 if b['step']==2 else 1)"
run2 "$work/no-holdout.txt" "$work/tiny.toml" --set "output.dir=$work/no-holdout" \
  --set 'data.source="text"' --set eval.every=2
check "eval.every on text without data.holdout exits non-zero" test $? -ne 0
check "with one line naming both keys and the fix" test "$(grep -c -F \
  "'eval.every' evaluates on held-out text, but 'data.holdout' is 0: set it to the fraction" \
  "$work/no-holdout.txt")" -ge 1
run2 "$work/small-holdout.txt" "$work/tiny.toml" --set "output.dir=$work/small-holdout" \
  --set 'data.source="text"' --set data.holdout=1e-9 --set eval.every=2
check "a holdout too small for one window exits non-zero before training" test $? -ne 0
check "naming data.holdout" grep -q "data.holdout = 1e-09 leaves 0 of the [0-9]* bytes of text corpus /usr/share/games/fortunes for evaluation, fewer than model.seq + 2 = 18: raise data.holdout" "$work/small-holdout.txt"
check "before any step" test "$(grep -c '^step ' "$work/small-holdout.txt")" -eq 0

# A token file with a vocabulary beyond bytes (2-byte ids below 1000), its last 10% held out:
# the pipeline computes the single-rank trainer's losses and evaluations.
python3 - "$work/ids.bin" <<'PY'
import struct, sys
cycle = [(i * 619 + 13) % 1000 for i in range(40)]
open(sys.argv[1], "wb").write(struct.pack("<4000H", *(cycle[i % 40] for i in range(4000))))
PY
token_args=(--set 'data.source="tokens"' --set "data.path=\"$work/ids.bin\"" --set model.vocab=1000
  --set data.holdout=0.1 --set eval.every=2 --set eval.batches=2)
run2 "$work/tokens.txt" "$work/tiny.toml" --set "output.dir=$work/tokens" "${token_args[@]}"
check "a pipeline trains on a token file" test $? -eq 0
check "its header names the file and both parts" grep -q "^spillway: data: token file $work/ids.bin (3600 tokens of 2 bytes for training); held out: token file $work/ids.bin (400 tokens of 2 bytes held out)$" "$work/tokens.txt"
OMP_NUM_THREADS=1 timeout 120 "$spillway" train "$work/tiny.toml" --set parallel.stages=1 \
  --set "output.dir=$work/tokens1" "${token_args[@]}" > "$work/tokens1.txt" 2>&1
check "so does one rank" test $? -eq 0
check "to the same losses and held-out losses" \
  python3 - "$work/tokens/report.json" "$work/tokens1/report.json" <<'PY'
import json, sys
two, one = (json.load(open(f)) for f in sys.argv[1:])
ok = (len(two["loss"]) == 5 and two["loss"] == one["loss"] and len(two["eval"]) == 3
      and [e["loss"] for e in two["eval"]] == [e["loss"] for e in one["eval"]]
      and two["config"]["data"]["token_bytes"] == 2 and two["config"]["model"]["vocab"] == 1000
      and two["data"] == one["data"] and two["data"].endswith("(400 tokens of 2 bytes held out)"))
sys.exit(0 if ok else 1)
PY
# The same ids behind llm.c's header (magic 20240520, version 1, count): the same losses.
python3 - "$work/ids.bin" "$work/llmc.bin" <<'PY'
import struct, sys
ids = open(sys.argv[1], "rb").read()
header = struct.pack("<3i", 20240520, 1, len(ids) // 2) + bytes(253 * 4)
open(sys.argv[2], "wb").write(header + ids)
PY
run2 "$work/llmc.txt" "$work/tiny.toml" --set "output.dir=$work/llmc" "${token_args[@]}" \
  --set "data.path=\"$work/llmc.bin\""
check "a pipeline trains on a token file with llm.c's header" test $? -eq 0
check "its header says so" grep -q "^spillway: data: token file $work/llmc.bin (3600 tokens of 2 bytes after llm.c's header for training)" "$work/llmc.txt"
check "to the losses of the same ids without it" \
  python3 - "$work/tokens/report.json" "$work/llmc/report.json" <<'PY'
import json, sys
raw, llmc = (json.load(open(f)) for f in sys.argv[1:])
sys.exit(0 if llmc["loss"] == raw["loss"] and len(raw["eval"]) == 3
         and [e["loss"] for e in llmc["eval"]] == [e["loss"] for e in raw["eval"]] else 1)
PY
run2 "$work/tokens-bad.txt" "$work/tiny.toml" --set "output.dir=$work/tokens-bad" \
  "${token_args[@]}" --set model.vocab=900
check "ids beyond model.vocab exit non-zero before training" test $? -ne 0
check "naming the first such id" grep -q \
  "token file $work/ids.bin: token 9[0-9][0-9] at index [0-9]* is not below model.vocab = 900: raise model.vocab" \
  "$work/tokens-bad.txt"

finish
