# Sourced by the CLI tests: a scratch directory removed on exit, `check NAME CONDITION...`
# (counts and prints ok/FAIL), `one_line FILE TEXT`, `write_tiny_gpt FILE` (a 2-layer GPT on
# synthetic tokens, 4 blocks, batch 8 in 4 microbatches) and `finish` (the tally and the
# exit status).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
total=0
check() {  # check NAME CONDITION...
  local name=$1; shift
  total=$((total + 1))
  if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; failures=$((failures + 1)); fi
}
one_line() {  # one_line FILE TEXT: FILE is a single line holding TEXT
  [ "$(wc -l < "$1")" -eq 1 ] && grep -q -F -- "$2" "$1"
}
write_tiny_gpt() {  # write_tiny_gpt FILE
  cat > "$1" <<'TOML'
[model]
kind = "gpt"
layers = 2
d_model = 32
heads = 2
seq = 16
[data]
source = "synthetic"
[train]
batch = 8
microbatches = 4
steps = 5
TOML
}
finish() {
  echo "$((total - failures)) passed, $failures failed"
  [ $failures -eq 0 ]
}
