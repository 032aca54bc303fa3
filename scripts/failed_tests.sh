#!/usr/bin/env bash
# The end of each failed test's output, from ctest's logs of a run (BUILD/Testing/Temporary/
# LastTest.log, or a copy). troupe.sh test prints it last, because a CI log keeps only the end of
# what a run printed, and ctest prints a failure's output where the test ended.
#
#   scripts/failed_tests.sh [LINES=60] LOG...
set -uo pipefail
lines=60
[[ "${1:-}" =~ ^[0-9]+$ ]] && { lines=$1; shift; }
for log in "$@"; do
  [ -f "$log" ] || continue
  # A test's block: "N/M Test: NAME", its output between "Output:" and "<end of output>", then
  # its status: "Test Passed." (or a pass reason: skipped), or another ("Test Failed.", a crash).
  awk -v keep="$lines" -v file="$log" '
    /^[0-9]+\/[0-9]+ Test: / { name = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", name); n = 0; inside = 0; next }
    /^Output:$/ { inside = 1; next }
    /^<end of output>$/ { inside = 0; next }
    inside { out[n % keep] = $0; n++; next }
    /^Test [A-Z]/ && !/^Test (Passed|Pass Reason|Skipped|Not Run)/ {
      printf "\n==== failed (%s): %s (the last %d of %d lines of its output)\n", file, name, (n < keep ? n : keep), n
      for (i = (n > keep ? n - keep : 0); i < n; i++) print out[i % keep]
    }' "$log"
done
