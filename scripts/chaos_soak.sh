#!/usr/bin/env bash
# Chaos soak: chaos_soak (a graph split over 2 ranks and an all_reduce loop, examples/chaos_soak.cpp)
# runs under `troupe launch --max-restarts` for MINUTES while a random rank is killed (SIGKILL)
# every 30-120 s; every attempt's ranks report how each request ended and their RSS.
#
#   scripts/chaos_soak.sh [MINUTES=20] [SEED=1]
#
# Prints the kills, each attempt's report, and a summary: requests, completed, failed by error type,
# wrong answers, untyped failures, RSS growth within attempts. Exits 1 when the job hangs (no end
# within 3 minutes of the deadline), a request ends other than completed or a typed error, or an
# answer is wrong.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-20}
RANDOM=${2:-1}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
until_s=$(( $(date +%s) + minutes * 60 ))

timeout $(( minutes * 60 + 180 )) build/bin/troupe launch --nproc 2 --max-restarts 1000 -- \
  build/bin/chaos_soak --until "$until_s" >"$log" 2>&1 &
job=$!
kills=0
while true; do
  pause=$(( ${CHAOS_MIN_PAUSE:-30} + RANDOM % 91 ))
  [ $(( $(date +%s) + pause + 30 )) -lt "$until_s" ] || break
  sleep "$pause"
  victim=$(( RANDOM % 2 ))
  for p in $(pgrep -x chaos_soak || true); do
    if grep -qz "^RANK=$victim$" "/proc/$p/environ" 2>/dev/null; then
      kill -9 "$p" && kills=$((kills + 1)) && echo "$(date +%T) killed rank $victim (pid $p)"
    fi
  done
done
status=0
wait "$job" || status=$?
[ "$status" -eq 124 ] && echo "HANG: the job did not end within 3 minutes of its deadline"
grep -o '{"chaos".*' "$log" || true
grep -o '{"chaos".*' "$log" | /usr/bin/python3 -c '
import json, sys
kills, status = int(sys.argv[1]), int(sys.argv[2])
reports = [json.loads(line) for line in sys.stdin]
requests = sum(r["requests"] for r in reports)
completed = sum(r["completed"] for r in reports)
failed = {}
for r in reports:
    for kind, n in r["failed"].items(): failed[kind] = failed.get(kind, 0) + n
wrong = sum(r["wrong"] for r in reports)
untyped = sum(r["untyped"] for r in reports)
unaccounted = requests - completed - sum(failed.values()) - wrong - untyped
# RSS growth within an attempt, from its third sample (after start-up) to its last.
growth = [(r["rss_mb"][-1] - r["rss_mb"][2], r["seconds"], r["chaos"]) for r in reports if len(r["rss_mb"]) > 3]
longest = max(reports, key=lambda r: r["seconds"]) if reports else None
print(json.dumps({"kills": kills, "attempts": 1 + max((r["attempt"] for r in reports), default=0),
    "reports": len(reports), "requests": requests, "completed": completed, "failed": failed,
    "wrong": wrong, "untyped": untyped, "unaccounted": unaccounted,
    "all_reduces": sum(r["all_reduces"] for r in reports) // 2,
    "rss_growth_mb_max": round(max((g for g, _, _ in growth), default=0), 1),
    "longest_attempt": {"seconds": longest["seconds"], "rank": longest["chaos"],
                        "rss_mb_first_last": [longest["rss_mb"][0], longest["rss_mb"][-1]]} if longest else None,
    "launch_status": status}))
sys.exit(0 if status == 0 and wrong == 0 and untyped == 0 and unaccounted == 0 else 1)
' "$kills" "$status"
