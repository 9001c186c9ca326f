# Sourced by the shell tests: `check NAME CONDITION...` runs CONDITION and prints "ok: NAME" or
# "FAIL: NAME"; `finish` prints the tally and returns non-zero if any check failed.
failures=0
total=0
check() {
  local name=$1; shift
  total=$((total + 1))
  if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; failures=$((failures + 1)); fi
}
finish() {
  echo "$((total - failures)) passed, $failures failed"
  test $failures -eq 0
}
