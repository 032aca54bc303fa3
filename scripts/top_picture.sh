#!/usr/bin/env bash
# The README's picture of `troupe top`: a 4-rank job calling round a ring (the ring of
# tests/net/trace_test.cpp), troupe top finding its ranks from rank 0 (--job) in a detached tmux,
# the screen captured with its colours (capture-pane -e) and drawn as an SVG (ansi_to_svg.py).
#
#   scripts/top_picture.sh [docs/images/troupe_top.svg]     (PORT=9460, BIN=build/bin)
set -euo pipefail
out=${1:-docs/images/troupe_top.svg}
bin=${BIN:-build/bin}
port=${PORT:-9460}
here=$(cd "$(dirname "$0")" && pwd)
session=troupe-top-picture-$$
TROUPE_TRACE_LOAD_SECONDS=25 "$bin/troupe" launch --nproc 4 --metrics-port "$port" -- \
  "$bin/test_net" "trace rank: a ring of remote calls" >/dev/null &
job=$!
trap 'tmux kill-session -t "$session" 2>/dev/null || true; wait "$job" || true' EXIT
tmux new-session -d -s "$session" -x 112 -y 32 "$bin/troupe top --job 127.0.0.1:$port"
sleep 12  # the job starts and top has two samples for its rates
tmux capture-pane -e -p -t "$session" | python3 "$here/ansi_to_svg.py" > "$out"
tmux send-keys -t "$session" q
echo "wrote $out"
