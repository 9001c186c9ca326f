#!/usr/bin/env bash
# `spillway plan` as a person planning a job sees it: the table, plan.json, topologies from
# a file or a spec, node facts from hwloc, and one-line errors for a cap nothing fits, a
# profile of another model or microbatch, and a missing topology file.
# Usage: plan_cli_test.sh SPILLWAY
set -u
spillway=$1
source "$(dirname "$0")/cli_support.sh"
export OMP_NUM_THREADS=1
plan() {  # plan OUTFILE ARGS...: spillway plan on the tiny job, stdout+stderr to OUTFILE
  local out=$1; shift
  timeout 120 "$spillway" plan "$work/tiny.toml" --repeats 2 --set "output.dir=$work/out" "$@" \
    > "$out" 2>&1
}
write_tiny_gpt "$work/tiny.toml"

plan "$work/plan.txt" --ranks 2
status=$?
cat "$work/plan.txt"
check "a plan for 2 ranks exits 0" test $status -eq 0
check "it prints the table's header" \
  grep -q "^stage  blocks    ranks           F+B+W ms/mb     stash/mb   parameters    rank peak$" "$work/plan.txt"
check "a row per stage" test "$(grep -c '^[0-9]  *[0-9]*-[0-9]' "$work/plan.txt")" -ge 1
check "the predicted iteration and bubble" grep -q "^predicted iteration .* s, bubble .*% (searched by the planner)$" "$work/plan.txt"
check "where the profile and the links came from" \
  bash -c "grep -q '^profile: measured now on this node, 1 thread' '$work/plan.txt' && grep -q '^links: defaults for ranks sharing this node, 5e+09 bytes/s and 1e-06 s' '$work/plan.txt'"
check "this node's facts" grep -q "^node 0 (.*): [0-9]* cores, [0-9]* NUMA node" "$work/plan.txt"
check "plan.json holds the layout, predictions, stages and facts" python3 - "$work/out/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
l, pr = p["layout"], p["predicted"]
P, R, v = l["pipeline_ranks"], l["replicas"], l["chunks"]
lists = P * (2 if l["schedule"] == "pipefb" else 1)  # PipeFB: a forward and a backward rank
stages = l["stages"]
covered = [b for s in stages for b in range(s[0], s[1] + 1)]
ok = (lists * R == 2 and len(stages) == P * v and covered == [0, 1, 2, 3]
      and sorted(l["world_rank"]) == [0, 1] and l["microbatches"] * l["microbatch_samples"] * R == 8
      and pr["iteration_seconds"] > 0 and 0 <= pr["bubble_fraction"] < 1
      and len(pr["peak_bytes_by_pipeline_rank"]) == lists and min(pr["peak_bytes_by_pipeline_rank"]) > 0
      and l["offload"]["tier"] == "none"
      and len(p["stages"]) == P * v
      and all(s["compute_seconds_per_microbatch"] > 0 and s["parameter_bytes"] > 0 for s in p["stages"])
      and p["profile"]["model"] == "gpt layers=2 d_model=32 heads=2 seq=16 vocab=256"
      and p["profile"]["microbatch_samples"] == 2
      and p["topology"]["ranks"] == 2 and len(p["topology"]["nodes"]) == 1
      and p["topology"]["nodes"][0]["cores"] > 0 and len(p["topology"]["nodes"][0]["numa"]) >= 1
      and p["explanation"].startswith(f"P={P} R={R}"))
sys.exit(0 if ok else 1)
PY

plan "$work/file.txt" --ranks 2 --set 'offload.tier="file"' --set "offload.dir=$work" \
  --output "$work/file.json"
check "a plan for a job with the file tier exits 0" test $? -eq 0
check "it says what the file tier was measured at" \
  grep -q "^file tier: [0-9]* MB/s each way (round trip, median of 1 rank(s) writing at once, .*), 3 x 16 MiB in $work$" "$work/file.txt"
check "and prices the plan with the job's offload at that rate" python3 - "$work/file.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
o = p["layout"]["offload"]
sys.exit(0 if o["tier"] == "file" and o["keep"] == 1 and o["file_bytes_per_second"] > 0
         and "(the job's policy)" in p["explanation"] else 1)
PY
check "a plan without the file tier measures none" \
  bash -c "! grep -q '^file tier:' '$work/plan.txt'"

plan "$work/forced.txt" --ranks 2 --set parallel.stages=2 --output "$work/forced.json"
check "a forced layout is predicted as it is" \
  bash -c "grep -q '(the job.s own layout, predicted)' '$work/forced.txt' && python3 -c \"import json,sys; p=json.load(open('$work/forced.json')); sys.exit(0 if p['layout']['stages']==[[0,1],[2,3]] and p['layout']['schedule']=='1f1b' and [s['ranks'] for s in p['stages']]==[[0],[1]] else 1)\""
check "--output leaves no temporary" test -z "$(find "$work" -maxdepth 1 -name '*.tmp.*')"

# A synthetic cluster: 2 nodes of 2 ranks, with node facts from the spec.
plan "$work/spec.txt" --ranks 4 --topology "2x2,inter=1e9@2e-5,memory=64GiB,cores=8" \
  --output "$work/spec.json"
check "a synthetic topology spec plans 4 ranks" test $? -eq 0
check "with its nodes' facts" \
  bash -c "[ \$(grep -c '^node [01]: 8 cores, 1 NUMA node (64.0 GiB, 8 cores); 2 ranks, 32.0 GiB each$' '$work/spec.txt') -eq 2 ]"
check "and its links" grep -q "^links: from --topology 2x2,inter=1e9@2e-5" "$work/spec.txt"
plan "$work/count.txt" --ranks 3 --topology 2x2
check "--ranks unlike the topology's is one line" \
  one_line "$work/count.txt" "spillway: error: --ranks 3 but the topology 2x2 has 4 ranks: give the same count"

# Without a cap the plan keeps each rank within its share of its node's memory, as a run
# with stages = "auto" does: 4 GiB less a sixteenth and 256 MiB a rank, over 2 ranks, is
# 1.62 GiB; a node of 1 GiB leaves 224 MiB a rank, which 8 layers of width 1024 cannot fit
# (one line).
plan "$work/share.txt" --ranks 2 --topology "1x2,memory=4GiB" --output "$work/share.json"
check "a plan without a cap on nodes of known memory exits 0" test $? -eq 0
check "names each rank's share of its node's memory" grep -q \
  "^peak .* on pipeline rank [0-9] of 1.62 GiB (1744830464 bytes), each rank's share of its node's memory$" \
  "$work/share.txt"
plan "$work/share-small.txt" --ranks 2 --topology "1x2,memory=1GiB" --set model.d_model=1024 \
  --set model.layers=8
code=$?
check "a model no rank's share holds exits non-zero" test $code -ne 0 -a $code -ne 124
check "with one line naming the share" one_line "$work/share-small.txt" \
  "spillway: error: planner: no plan keeps every rank within its share of its node's memory, 0.219 GiB (234881024 bytes): "
plan "$work/share-here.txt" --ranks 2 --output "$work/share-here.json"
check "on this node, its available memory's share" grep -q \
  "^peak .* on pipeline rank [0-9] of .*, each rank's share of its node's memory$" "$work/share-here.txt"

# A matrix file.
cat > "$work/matrix.json" <<'JSON'
{"ranks": 2, "node_of": [0, 1],
 "bandwidth_bytes_per_s": [[0, 1e9], [1e9, 0]], "latency_s": [[0, 1e-5], [1e-5, 0]]}
JSON
plan "$work/file.txt" --ranks 2 --topology "$work/matrix.json" --output "$work/file.json"
check "a matrix file plans" test $? -eq 0
check "and says it has no node facts" grep -q "^nodes: no facts known" "$work/file.txt"
plan "$work/missing.txt" --ranks 2 --topology "$work/missing.json"
code=$?
check "a missing topology file exits non-zero" test $code -ne 0 -a $code -ne 124
check "with one line naming it" one_line "$work/missing.txt" \
  "spillway: error: --topology: cannot open topology $work/missing.json: give a matrix file"

# A cap nothing fits names the smallest cap known to fit, and that cap does fit.
plan "$work/cap.txt" --ranks 2 --memory-cap 1KiB
code=$?
cat "$work/cap.txt"
check "a cap nothing fits exits non-zero" test $code -ne 0 -a $code -ne 124
check "with one line naming the cap" one_line "$work/cap.txt" \
  "spillway: error: planner: no plan keeps every rank within the memory cap of 9.54e-07 GiB (1024 bytes)"
check "the smallest cap known to fit and what dominates it" grep -q \
  "the smallest peak found is .* bytes) on pipeline rank [0-9] (P=.*), the smallest cap known to fit; .* dominate it" \
  "$work/cap.txt"
smallest=$(sed -n 's/.*the smallest peak found is [^(]*(\([0-9]*\) bytes).*/\1/p' "$work/cap.txt")
plan "$work/fits.txt" --ranks 2 --memory-cap "$smallest" --output "$work/fits.json"
check "a plan under that cap exists" test $? -eq 0

# Profiles: one of this job is used; one of another microbatch or model is refused.
"$spillway" profile "$work/tiny.toml" --repeats 2 --output "$work/profile.json" > /dev/null 2>&1
plan "$work/given.txt" --ranks 2 --profile "$work/profile.json" --output "$work/given.json"
check "a profile of this job is used" test $? -eq 0
# BLIS's kernels and the host, as the profile recorded them ("generic" would be a VM whose CPU
# BLIS does not know and spillway could not help).
kernels=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["blas_kernels"])' \
  "$work/profile.json")
check "the profile records BLIS's kernels" test -n "$kernels"
check "and named, with its kernels and host" grep -q \
  "^profile: read from $work/profile.json (measured with 1 thread(s) with BLIS's $kernels kernels on $(hostname))" \
  "$work/given.txt"
plan "$work/mb.txt" --ranks 2 --profile "$work/profile.json" --set train.microbatches=2
code=$?
check "a profile of another microbatch exits non-zero" test $code -ne 0 -a $code -ne 124
check "saying which" one_line "$work/mb.txt" \
  "spillway: error: $work/profile.json was measured on microbatches of 2 samples, the job's are 4"
plan "$work/model.txt" --ranks 2 --profile "$work/profile.json" --set model.d_model=64
check "a profile of another model says which" one_line "$work/model.txt" \
  "spillway: error: $work/profile.json was made for the model \"gpt layers=2 d_model=32 heads=2 seq=16 vocab=256\", not the job's \"gpt layers=2 d_model=64"

# hwloc's facts: a faked machine with two NUMA nodes is reported as such.
HWLOC_SYNTHETIC="pack:2 [numa] core:4 pu:1" HWLOC_THISSYSTEM=1 \
  plan "$work/numa.txt" --ranks 2 --output "$work/numa.json"
check "two NUMA nodes from hwloc are printed" grep -q "^node 0 (.*): 8 cores, 2 NUMA nodes (" "$work/numa.txt"
check "and written" python3 -c "import json,sys; n=json.load(open('$work/numa.json'))['topology']['nodes'][0]; sys.exit(0 if len(n['numa'])==2 and [x['cores'] for x in n['numa']]==[4,4] else 1)"

finish
