#!/usr/bin/env bash
# Chaos soak: chaos_soak (a graph split over 2 ranks and an all_reduce loop, examples/chaos_soak.cpp)
# runs under `troupe launch --max-restarts` for MINUTES while a random rank is killed (SIGKILL)
# again and again; every attempt's ranks report how each request ended and their RSS.
#
#   scripts/chaos_soak.sh [MINUTES=20] [SEED=1]
#
# The pauses between kills scale with the length: 30-120 s from 7 minutes up, shorter below (1
# minute: 10-24 s, 2 minutes: 20-49 s), and no kill in the last margin (30 s, a sixth of shorter
# runs), so every length kills at least once; CHAOS_MIN_PAUSE=seconds sets the shortest pause. Each rank keeps its tally in a file
# as it goes (chaos_soak --tally-dir), so a killed rank's requests are counted too: those it had in
# flight when it died are "lost_in_flight" (rank 0 sends them; killing it ends them with it).
#
# Prints the kills, each attempt's tally, and a summary: requests, completed, failed by error type,
# lost in flight, wrong answers, untyped failures, RSS growth within attempts. Exits 1 when nothing
# was killed, the job hangs (no end within 3 minutes of the deadline), a request is unaccounted
# for or ends other than completed, a typed error or lost with its rank, or an answer is wrong.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-20}
RANDOM=${2:-1}
[[ $minutes =~ ^[0-9]+$ && $minutes -ge 1 ]] ||
  { echo "chaos_soak: MINUTES must be a whole number from 1 (the job needs ~10 s to start before a kill), got '$minutes'" >&2; exit 2; }
length=$(( minutes * 60 ))
min_pause=${CHAOS_MIN_PAUSE:-$(( length / 6 < 30 ? length / 6 : 30 ))}
spread=$(( length / 4 < 91 ? length / 4 : 91 ))
margin=$(( length / 6 < 30 ? length / 6 : 30 ))
(( min_pause + spread - 1 + margin < length )) ||
  { echo "chaos_soak: CHAOS_MIN_PAUSE=$min_pause leaves no time for a kill in $minutes minute(s)" >&2; exit 2; }
log=$(mktemp)
tallies=$(mktemp -d)
trap 'rm -rf "$log" "$tallies"' EXIT
until_s=$(( $(date +%s) + length ))

timeout $(( length + 180 )) build/bin/troupe launch --nproc 2 --max-restarts 1000 -- \
  build/bin/chaos_soak --until "$until_s" --tally-dir "$tallies" >"$log" 2>&1 &
job=$!
kills=0
while true; do
  pause=$(( min_pause + RANDOM % spread ))
  [ $(( $(date +%s) + pause + margin )) -lt "$until_s" ] || break
  sleep "$pause"
  victim=$(( RANDOM % 2 ))
  # Between attempts the victim may not be running yet: look for it for up to 10 s.
  for _ in $(seq 1 100); do
    killed=0
    for p in $(pgrep -x chaos_soak || true); do
      if grep -qz "^RANK=$victim$" "/proc/$p/environ" 2>/dev/null; then
        kill -9 "$p" && killed=1 && kills=$((kills + 1)) && echo "$(date +%T) killed rank $victim (pid $p)"
      fi
    done
    [ "$killed" -eq 1 ] && break
    sleep 0.1
  done
done
status=0
wait "$job" || status=$?
[ "$status" -eq 124 ] && echo "HANG: the job did not end within 3 minutes of its deadline"
cat "$tallies"/attempt-*.json 2>/dev/null || true
cat "$tallies"/attempt-*.json 2>/dev/null | /usr/bin/python3 -c '
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
# A tally still "running" is a killed rank: the requests it had in flight died with it.
killed = [r for r in reports if r["end"] == "running"]
lost = sum(r["in_flight"] for r in killed)
unaccounted = requests - completed - sum(failed.values()) - wrong - untyped - lost
# RSS growth within an attempt, from its third sample (after start-up) to its last.
growth = [(r["rss_mb"][-1] - r["rss_mb"][2], r["seconds"], r["chaos"]) for r in reports if len(r["rss_mb"]) > 3]
longest = max(reports, key=lambda r: r["seconds"]) if reports else None
print(json.dumps({"kills": kills, "attempts": 1 + max((r["attempt"] for r in reports), default=0),
    "reports": len(reports), "killed_reports": len(killed), "requests": requests, "completed": completed,
    "failed": failed, "lost_in_flight": lost, "wrong": wrong, "untyped": untyped, "unaccounted": unaccounted,
    "all_reduces": sum(r["all_reduces"] for r in reports) // 2,
    "rss_growth_mb_max": round(max((g for g, _, _ in growth), default=0), 1),
    "longest_attempt": {"seconds": longest["seconds"], "rank": longest["chaos"],
                        "rss_mb_first_last": longest["rss_mb"][:1] + longest["rss_mb"][-1:]} if longest else None,
    "launch_status": status}))
if kills == 0: print("chaos_soak: nothing was killed")
sys.exit(0 if kills > 0 and status == 0 and wrong == 0 and untyped == 0 and unaccounted == 0 else 1)
' "$kills" "$status"
