#!/usr/bin/env bash
# Kill trials for `troupe launch --max-restarts`: each trial trains dist_sgd on 2 ranks with
# checkpoints, kills a random rank (SIGKILL) at a random moment, and checks that the job restarts,
# resumes from its last checkpoint and ends with the same weights (bitwise) as an uninterrupted run.
#
#   scripts/restart_trials.sh [TRIALS=20] [EPOCHS=2] [EVERY=50] [SEED=1]
#
# Prints one table row per trial (kill time, rank, restarts, step killed at, step resumed from,
# steps lost, accuracy, same weights) and a summary line; exits 1 when any trial hangs (no end
# within 10 minutes), fails, loses more than EVERY steps or ends with other weights.
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-20} epochs=${2:-2} every=${3:-50}
RANDOM=${4:-1}
bin=build/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

train() {  # train DIR LOG: dist_sgd on 2 ranks with checkpoints in DIR, output to LOG; 10 minutes at most
  timeout 600 "$bin/troupe" launch --nproc 2 --max-restarts 3 -- "$bin/dist_sgd" --epochs "$epochs" --json --log-every 1 --deterministic \
    --checkpoint-dir "$1" --checkpoint-every "$every" --resume >"$2" 2>&1
}
json_field() { grep -o "\"$1\":[^,}]*" "$2" | tail -1 | cut -d: -f2 || true; }

train "$work/reference" "$work/reference.log"
want=$(json_field params_fnv1a "$work/reference.log")
want_acc=$(json_field test_accuracy "$work/reference.log")
echo "uninterrupted: accuracy $want_acc, weights $want"
echo "| trial | kill at (s) | rank | restarts | killed at step | resumed from | steps lost | accuracy | same weights |"
echo "|---|---|---|---|---|---|---|---|---|"
bad=0 lost_max=0
for t in $(seq 1 "$trials"); do
  dir="$work/ckpt-$t" log="$work/trial-$t.log"
  delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.1f", 1.5 + 6.0 * r / 32767 }')
  victim=$((RANDOM % 2))
  train "$dir" "$log" &
  job=$!
  sleep "$delay"
  launcher=$(pgrep -P "$(pgrep -P $job | head -1)" | head -1 || true)  # this shell -> timeout -> troupe
  pid=""
  for p in $(pgrep -P "${launcher:-0}" || true); do
    grep -qz "^RANK=$victim$" "/proc/$p/environ" 2>/dev/null && pid=$p
  done
  [ -n "$pid" ] && { kill -9 "$pid" || pid=""; }
  status=0
  wait "$job" || status=$?
  restarts=$(grep -c "restarting every rank" "$log" || true)
  # The last step rank 0 logged before the restart, and the step the restarted job resumed from.
  killed_at=$(awk '/restarting every rank/ { print last; exit } /\[rank 0\] step [0-9]+ / { last = $4 }' "$log")
  resumed=$(grep -o "resumed from [^ ]*: step [0-9]*" "$log" | tail -1 | awk '{ print $NF }' || true)
  [ -n "$pid" ] || killed_at="(ended first)"
  lost=0
  if [ "$restarts" -gt 0 ]; then lost=$(( ${killed_at:-0} - ${resumed:-0} )); fi
  [ "$lost" -gt "$lost_max" ] && lost_max=$lost
  got=$(json_field params_fnv1a "$log")
  acc=$(json_field test_accuracy "$log")
  same=no
  [ "$got" = "$want" ] && same=yes
  if [ "$status" -ne 0 ] || [ "$same" != yes ] || [ "$lost" -gt "$every" ]; then
    bad=$((bad + 1))
    [ "$status" -eq 124 ] && acc="HANG"
    [ "$status" -ne 0 ] && [ "$status" -ne 124 ] && acc="FAILED ($status)"
    cp "$log" "/tmp/restart-trial-$t.log"
  fi
  echo "| $t | $delay | $victim | $restarts | ${killed_at:--} | ${resumed:-none} | $lost | ${acc:-?} | $same |"
done
echo "trials $trials, bad $bad, most steps lost $lost_max (checkpoint every $every)"
[ "$bad" -eq 0 ]
