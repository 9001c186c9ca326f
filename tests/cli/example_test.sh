#!/usr/bin/env bash
# Runs a shipped example, shortened, and checks its report against a bound measured on a
# correct run. Usage: example_test.sh SPILLWAY EXAMPLE.toml CHECK -- [--set ...]
#   CHECK "loss-below X": mean of the last 10 losses < X, and the first loss > 5.3 (ln 256 = 5.55);
#     with evaluations (eval.every), the last held-out loss < X + 0.5 (measured ~0.1 above
#     the training losses' tail)
#   CHECK "accuracy-above X": final test accuracy > X
set -u
spillway=$1 example=$2 check=$3
shift 4
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if ! "$spillway" train "$example" --set "output.dir=$out" "$@" > "$out/log.txt" 2>&1; then
  cat "$out/log.txt"; echo "0 passed, 1 failed"; exit 1
fi
python3 - "$out/report.json" $check <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
kind, bound = sys.argv[2], float(sys.argv[3])
if kind == "loss-below":
    loss = report["loss"]
    tail = sum(loss[-10:]) / len(loss[-10:])
    print(f"first loss {loss[0]:.4f}, mean of last 10 {tail:.4f}, bound {bound}")
    ok = loss[0] > 5.3 and tail < bound
    if "eval" in report:
        held_out = report["eval"][-1]["loss"]
        print(f"held-out loss {held_out:.4f} after step {report['eval'][-1]['step']}")
        ok = ok and held_out < bound + 0.5
else:
    accuracy = report["test_accuracy"][-1]
    print(f"test accuracy {accuracy:.4f}, bound {bound}")
    ok = accuracy > bound
print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
sys.exit(0 if ok else 1)
PY
