#!/usr/bin/env bash
# The ABI as shipped matches the header: libspillway.so exports exactly the functions
# spillway.h declares (nothing of the C++ runtime, libstdc++ or the static libraries inside
# it), and each given test source calls every one of them.
# Usage: abi_symbols_test.sh LIBRARY HEADER SOURCE...
set -u
library=$1 header=$2
shift 2
failures=0
declared=$(grep -oE '^SPW_API [^(]*[^a-z_0-9](spw_[a-z_0-9]+)\(' "$header" |
  grep -oE 'spw_[a-z_0-9]+\($' | tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$library" | awk '{print $3}' | sed 's/@.*//' | sort -u)
count=$(echo "$declared" | wc -l)
if [ "$count" -lt 20 ]; then
  echo "FAIL: found only $count declarations in $header"; exit 1
fi
if [ "$declared" != "$exported" ]; then
  echo "FAIL: exports differ from the header's declarations:"
  diff <(echo "$declared") <(echo "$exported") | sed 's/^</  declared only:/; s/^>/  exported only:/'
  failures=$((failures + 1))
else
  echo "ok: $library exports exactly the $count functions of $(basename "$header")"
fi
for source in "$@"; do
  missing=""
  for name in $declared; do
    grep -qE "(^|[^a-z_0-9])$name\(" "$source" || missing="$missing $name"
  done
  if [ -n "$missing" ]; then
    echo "FAIL: $(basename "$source") does not call:$missing"; failures=$((failures + 1))
  else
    echo "ok: $(basename "$source") calls all $count functions"
  fi
done
test $failures -eq 0
