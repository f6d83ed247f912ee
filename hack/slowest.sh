#!/usr/bin/env bash
# Prints the N slowest tests (top-level and subtests) of go test -json
# streams, slowest first, each with the stream it came from:
#
#   hack/slowest.sh N FILE...     (make slowest: the files in .cache/test-reports)
#
# A test's time is go test's own Elapsed: for a parallel test, from when it
# resumed after t.Parallel, not the time it waited for its turn.
set -euo pipefail
n=$1
shift
# Sorted whole, then cut: head closing the pipe early would fail the
# script (SIGPIPE under pipefail).
sorted=$(for f in "$@"; do
  [ -s "$f" ] || continue
  # Fields are read by name, in any order: {"Action":"pass","Package":…,"Test":…,"Elapsed":…}.
  awk -v stream="$(basename "$f" .json)" '
    function field(name, pattern) {
      if (!match($0, "\"" name "\":" pattern)) return ""
      return substr($0, RSTART + length(name) + 3, RLENGTH - length(name) - 3)
    }
    /"Test":/ && /"Action":"(pass|fail)"/ {
      test = field("Test", "\"[^\"]*\""); sub(/"$/, "", test); sub(/^"/, "", test)
      action = field("Action", "\"[a-z]*\""); gsub(/"/, "", action)
      printf "%9.1f s  %-4s  %-12s %s\n", field("Elapsed", "[0-9.]+"), action, stream, test
    }' "$f"
done | sort -rn)
head -n "$n" <<<"$sorted"
