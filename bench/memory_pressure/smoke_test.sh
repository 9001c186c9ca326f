#!/usr/bin/env bash
# ctest bench.memory_pressure_quick: run.sh --quick on 2 ranks into a temporary directory, then
# checks that its results hold together: results.json, results.csv and both SVGs exist and agree,
# the no-offload reference has ratio 1, every offload run that ran moved bytes, every capped run
# stayed under its cap, the cap below the no-offload peak stops the job without offload, and
# the host tier is run or skipped with its reason. Bad input (no binary, unwritable OUT_DIR,
# unknown option) is one line and exit 1.
# Usage: smoke_test.sh SPILLWAY BENCH_CEILINGS MPIEXEC SOURCE_DIR
set -u
spillway=$1 ceilings=$2 mpiexec=$3 src=$4
run=$src/bench/memory_pressure/run.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$src/tests/cli/check.sh"
export SPILLWAY=$spillway BENCH_CEILINGS=$ceilings MPIEXEC=$mpiexec OFFLOAD_DIR=$work

start=$(date +%s)
timeout 300 "$run" "$work/out" --quick > "$work/run.txt" 2> "$work/run.err"
status=$?
cat "$work/run.err" "$work/run.txt"
echo "run.sh --quick: exit $status after $(( $(date +%s) - start ))s"
check "run.sh --quick exits 0" test $status -eq 0
for f in results.json results.csv memory_pressure.svg bandwidth.svg ceilings-start.json ceilings-end.json results.md; do
  check "it writes $f" test -s "$work/out/$f"
done
check "results hold together" python3 - "$work/out" <<'PY'
import csv, json, os, sys
import xml.etree.ElementTree as ET
out = sys.argv[1]
res = json.load(open(os.path.join(out, "results.json")))
runs = res["runs"]
ok = [r for r in runs if r["status"] == "ok"]
problems = []
def need(cond, what):
    if not cond:
        problems.append(what)
ref = [r for r in ok if r["tier"] == "none" and r["cap_fraction"] is None]
need(len(ref) == 1 and ref[0]["iteration_ratio"] == 1.0, "one no-offload reference with ratio 1")
offload = [r for r in ok if r["tier"] in ("file", "peer")]
need({r["tier"] for r in offload} == {"file", "peer"}, "file and peer runs completed")
need(all(r["bytes_moved"] > 0 and r["transfer_gb_per_s"] > 0 for r in offload),
     "every offload run moved bytes")
need(all((r.get("node_gb_per_s") or 0) > 0 for r in offload),
     "every offload run reports its node's combined copy rate")
need(all(r["bytes_moved"] == 0 for r in ref), "the reference moved nothing")
capped = [r for r in ok if r["cap_bytes"] is not None]
need(any(r["tier"] == "file" for r in capped), "a capped file-tier run completed")
need(all(0 < r["peak_bytes"] <= r["cap_bytes"] for r in capped), "capped runs stay under the cap")
need(all(r["stash_bytes"] < ref[0]["stash_bytes"] for r in capped),
     "capped runs hold less stash than the reference")
need(all(r["rss_bytes"] >= r["peak_bytes"] for r in ok), "RSS at least the ledger peak")
bound = [r for r in runs if r["tier"] == "none" and r["cap_fraction"] is not None]
need(bound and all(r["status"] == "failed" and "memory cap exceeded" in r["message"] for r in bound),
     "no offload under an 85% cap fails with the cap's message")
nodes = len([d for d in os.listdir("/sys/devices/system/node") if d.startswith("node") and d[4:].isdigit()])
host = [r for r in runs if r["tier"] == "host"]
need(host and (nodes >= 2 or all(r["status"] == "skipped" and "second NUMA node" in r["message"] for r in host)),
     "the host tier is skipped with its reason on a one-node machine")
rows = list(csv.DictReader(open(os.path.join(out, "results.csv"))))
need([r["name"] for r in rows] == [r["name"] for r in runs], "results.csv lists the same runs")
need(all(abs(float(c["iteration_s"]) - r["iteration_s"]) < 1e-9 for c, r in zip(rows, runs) if r["status"] == "ok"),
     "results.csv has the same iteration times")
svg = ET.parse(os.path.join(out, "memory_pressure.svg")).getroot()
filled = [c for c in svg.iter("{http://www.w3.org/2000/svg}circle") if c.find("{http://www.w3.org/2000/svg}title") is not None]
need(len(filled) == len(ok), f"the plot has a point per completed run ({len(filled)} vs {len(ok)})")
ET.parse(os.path.join(out, "bandwidth.svg"))
c = res["ceilings"]
need(all(c[k]["gb_per_s"] > 0 for k in ("memcpy", "mpi_p2p", "mpi_get", "mpi_put")), "MPI and memcpy ceilings")
need(c["file"]["one_stream"]["write_read"]["gb_per_s"] > 0 and c["osc"] == "sm", "storage ceiling, osc sm")
need(len(res["goals"]) >= 5 and all(g["status"] in ("met", "not met", "reported") for g in res["goals"]),
     "goals are stated")
for p in problems:
    print("  not so:", p)
sys.exit(1 if problems else 0)
PY
check "the Markdown table and the goals are printed" \
  bash -c "grep -q '^| tiny | file | 85% | 1 | ' '$work/run.txt' && grep -q '^- \*\*\(met\|not met\)\*\*: tiny, peer tier' '$work/run.txt'"

# Bad input: one line, exit 1.
SPILLWAY=$work/no-such-binary "$run" "$work/bad" --quick > "$work/nobin.txt" 2>&1
check "a missing binary exits 1" test $? -eq 1
check "with one line naming it" bash -c "test \$(wc -l < '$work/nobin.txt') -eq 1 && grep -q '^run.sh: no spillway binary at $work/no-such-binary' '$work/nobin.txt'"
"$run" /proc/forbidden/out --quick > "$work/nodir.txt" 2>&1
check "an unwritable OUT_DIR exits 1" test $? -eq 1
check "with one line naming it" bash -c "test \$(wc -l < '$work/nodir.txt') -eq 1 && grep -q '^run.sh: cannot write to OUT_DIR /proc/forbidden/out' '$work/nodir.txt'"
"$run" "$work/bad" --caps 1.5 > "$work/badcap.txt" 2>&1
check "a cap above 1 exits 1" test $? -eq 1
check "with one line saying what caps are" bash -c "test \$(wc -l < '$work/badcap.txt') -eq 1 && grep -q 'caps takes fractions' '$work/badcap.txt'"
"$run" "$work/bad" --keep -1 > "$work/badkeep.txt" 2>&1
check "a negative keep exits 1" test $? -eq 1
check "with one line saying what keep takes" bash -c "test \$(wc -l < '$work/badkeep.txt') -eq 1 && grep -q 'keep takes a non-negative integer' '$work/badkeep.txt'"

finish
