#!/usr/bin/env bash
# Elastic trials on a 3-host test cluster (scripts/netns_cluster.sh; needs root): each trial trains
# dist_sgd --elastic under `troupe launch --nnodes 2:3 --rdzv-endpoint` (1 rank per host, host 0
# serving the rendezvous), loses host LOST_HOST (2 unless set; 0 loses the rendezvous' host and
# rank 0: in place a standby takes the quorum over, net/bootstrap/quorum_server.h) at a random step
# (every process of it killed, or its link cut: the trials alternate), and brings it back once the
# job runs on 2 hosts (started again, or its link restored). Then the same with torchrun's elastic agent (torch 1.13, --rdzv_backend c10d,
# its defaults) over examples/dist_sgd_elastic_torch.py, the same recipe, kills and cuts alternating;
# at its best here: gloo's wait for a peer cut to TORCH_PG_TIMEOUT seconds (default 10; torch's own,
# 30 minutes, keeps its ranks waiting on a cut link for that long) and the rendezvous' wait for
# more nodes once the minimum joined to TORCH_LAST_CALL seconds (default 1, as our 0.5 s settle;
# torch's own is 30). Its keep-alive (5 s, 3 misses) is fixed in torch 1.13. A job not resumed 3 minutes
# after the loss is recorded as such ("-") and stopped. First, uninterrupted troupe runs of 3 seeds
# give the accuracy spread.
#
#   scripts/elastic_trials.sh [TRIALS=20] [TORCH_TRIALS=4] [SUBSET=12800] [EPOCHS=3] [EVERY=20]
#
# TROUPE_MODE=in-place (the default): troupe launch --in-place (net/quorum.h): the survivors'
# group re-forms and they train on from memory, the returning rank takes the state from a live one;
# the transports' heartbeat timeout is TROUPE_PEER_TIMEOUT_MS (default here 500 ms, heartbeats every 125 ms; a cut link is
# found by it); JOIN_ROWS=cover (the default) or skip: dist_sgd --join-rows, whether the others run
# a returning rank's rows of the step in which it takes the state. TROUPE_MODE=restart: the launchers' rounds, every rank started again from the newest
# checkpoint (every EVERY steps).
#
# One table row per trial: the world size before/after the loss, steps lost (the last step rank 0
# logged before the loss minus the step the job went on from; -1 when the step in flight still
# ended after the loss), seconds from the loss to the first
# training step after it, whether the job grew back to 3 hosts, final accuracy; in place also the
# seconds from the host's return (started again, or its link restored) to its first step in the
# job (and from its join request, which a restarted process makes once it loaded the data and
# warmed its kernels: with several ranks a host, its first rank's and its last rank's), the bytes of state it took, the survivors' time from their last step before
# its joining to their first step after (the change of groups and that step), and that first step
# alone, during which its state moves (live_state.h), both against their median step. Then medians,
# and how many of the survivors' ordinary steps before the loss took over 1.5x their median anyway.
# Exits 1 when a troupe trial fails, hangs (10 minutes), loses more than EVERY steps (in place:
# any step) or ends outside the seeds' accuracy spread (widened by 0.01 each side; torch's
# accuracy is only shown).
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "elastic_trials: needs root (network namespaces)" >&2; exit 2; }
trials=${1:-20} torch_trials=${2:-4} subset=${3:-12800} epochs=${4:-3} every=${5:-20}
torch_pg_timeout=${TORCH_PG_TIMEOUT:-10} torch_last_call=${TORCH_LAST_CALL:-1}
troupe_mode=${TROUPE_MODE:-in-place} peer_timeout=${TROUPE_PEER_TIMEOUT_MS:-500} nproc=${NPROC:-1} lost_host=${LOST_HOST:-2}
join_rows=${JOIN_ROWS:-cover}
case $join_rows in cover|skip) ;; *) echo "elastic_trials: JOIN_ROWS is cover or skip, not $join_rows" >&2; exit 2 ;; esac
case $lost_host in 0|1|2) ;; *) echo "elastic_trials: LOST_HOST is 0, 1 or 2, not $lost_host" >&2; exit 2 ;; esac
full=$((3 * nproc))  # the world of 3 hosts
case $troupe_mode in in-place|restart) ;; *) echo "elastic_trials: TROUPE_MODE is in-place or restart, not $troupe_mode" >&2; exit 2 ;; esac
RANDOM=${SEED:-1}
steps=$(( (subset + 127) / 128 * epochs ))
p=etr$$
work=$(mktemp -d)
# KEEP=DIR: every trial's logs (DIR/troupe-N/hH.log) are kept there.
trap 'scripts/netns_cluster.sh down $p; [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp -r "$work"/. "$KEEP"/; rm -rf "$work"' EXIT
scripts/netns_cluster.sh up 3 $p >/dev/null || exit 2
rdzv=$(scripts/netns_cluster.sh addr 0 $p)
build/bin/troupe secret "$work/job.secret" >/dev/null  # every host's launcher holds the same one

stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }
# torch 1.13's torchrun, with two fixes: under Python 3.11 Std.from_str("0") finds no flag 0
# (IntFlag iteration skips it) and the agent fails: the same parse, fixed; and in a network
# namespace the machine's host name is not this host's address: rank 0's agent publishes
# $TORCH_HOST_ADDR as MASTER_ADDR instead (gloo takes eth0, the store's host is said by is_host).
torchrun() {
  /usr/bin/python3 -c "
import os
from torch.distributed.elastic.multiprocessing import Std
Std.from_str = classmethod(lambda cls, vm: cls(int(vm)) if vm.isdigit() else {int(i): cls(int(v)) for i, v in (m.split(':') for m in vm.split(','))})
import torch.distributed.elastic.agent.server.api as api
api._get_fq_hostname = lambda: os.environ['TORCH_HOST_ADDR']
from torch.distributed.run import main
main()" "$@"
}
# node SYSTEM HOST DIR LOG [SEED]: host HOST's launcher of the job, its output time-stamped into LOG.
node() {
  local sys=$1 h=$2 dir=$3 log=$4 seed=${5:-1234}
  if [ "$sys" = troupe ] && [ $troupe_mode = in-place ]; then
    TROUPE_PEER_TIMEOUT_MS=$peer_timeout ip netns exec $p-h$h timeout 600 build/bin/troupe launch --nproc $nproc --nnodes 2:3 \
      --max-restarts 9 --secret "$work/job.secret" --rdzv-endpoint $rdzv:29400 --in-place -- build/bin/dist_sgd --elastic \
      --seed "$seed" --subset $subset --epochs $epochs --join-rows $join_rows --json --log-every 1 2>&1 | stamp >"$log"
  elif [ "$sys" = troupe ]; then
    ip netns exec $p-h$h timeout 600 build/bin/troupe launch --nproc $nproc --nnodes 2:3 --max-restarts 9 \
      --secret "$work/job.secret" --rdzv-endpoint $rdzv:29400 -- build/bin/dist_sgd --elastic --seed "$seed" --subset $subset --epochs $epochs \
      --json --log-every 1 --checkpoint-dir "$dir/h$h" --checkpoint-every $every --resume 2>&1 | stamp >"$log"
  else
    TORCH_HOST_ADDR=$(scripts/netns_cluster.sh addr $h $p) GLOO_SOCKET_IFNAME=eth0 \
    ip netns exec $p-h$h timeout 600 bash -c "$(declare -f torchrun); torchrun --nnodes 1:3 --nproc_per_node 1 \
      --rdzv_backend c10d --rdzv_endpoint $rdzv:29500 --rdzv_conf is_host=$([ $h = 0 ] && echo 1 || echo 0),last_call_timeout=$torch_last_call \
      --max_restarts 9 examples/dist_sgd_elastic_torch.py \
      --seed $seed --subset $subset --epochs $epochs --checkpoint-dir $dir/h$h --checkpoint-every $every \
      --pg-timeout $torch_pg_timeout" 2>&1 |
      stamp >"$log"
  fi
}
# Rank 0's lines of every host, in time order.
merged() { cat "$1"/*.log | grep -E '^[0-9.]+ (\[rank [0-9]+\] )?(step [0-9]+ |resumed from|start world|quorum epoch|took the state|\{)' | sort -n; }
json_field() { grep -o "\"$1\":[^,}]*" | tail -1 | cut -d: -f2; }
# The quorum's lines of every host's launcher, a standby's that took over too, in time order.
quorum_log() { cat "$1"/h*.log 2>/dev/null | sed 's/quorum (standby):/quorum:/' | sort -n; }
# The job's world size now, as its rank 0 last said.
world_now() {
  if [ "$1" = troupe ] && [ $troupe_mode = in-place ]; then quorum_log "$2" | grep 'quorum: epoch [0-9]*: world' | tail -1 | awk '{ print $7 }'
  elif [ "$1" = troupe ]; then grep -h 'rendezvous: round [0-9]*: ' "$2"/h0.log 2>/dev/null | tail -1 | awk '{ print $NF }'
  else merged "$2" | awk '/start world/ { split($3, w, "="); n = w[2] } END { print n }'; fi
}
# The line saying the job trains again after a loss: in place, the survivors' new epoch.
resumed_re() { if [ "$1" = troupe ] && [ $troupe_mode = in-place ]; then echo 'quorum epoch [0-9]+: world'; else echo 'resumed from'; fi; }
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else print "-" }'; }
kill_host() { local pids; pids=$(ip netns pids $p-h$1); [ -n "$pids" ] && kill -9 $pids; }

echo "machine: $(build/bin/troupe info 2>/dev/null | head -3 | tr '\n' ' ')(load $(cut -d' ' -f1-3 /proc/loadavg))"
echo "job: $steps steps ($subset images x $epochs epochs, global batch 128), checkpoint every $every steps, 3 hosts x $nproc rank(s) (torch: x 1), host $lost_host lost, joining ranks' rows $join_rows"
accs=""
for seed in 1234 1235 1236; do
  d=$work/ref-$seed; mkdir -p $d
  for h in 0 1 2; do node troupe $h $d $d/h$h.log $seed & done
  wait
  acc=$(merged $d | json_field test_accuracy)
  echo "uninterrupted, seed $seed: accuracy $acc"
  accs="$accs $acc"
done
read -r lo hi < <(echo $accs | tr ' ' '\n' | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo - 0.01, hi + 0.01 }')
echo "accuracy spread (3 seeds, +-0.01): $lo .. $hi"
echo
echo "troupe: $troupe_mode$([ $troupe_mode = in-place ] && echo ", TROUPE_PEER_TIMEOUT_MS=$peer_timeout")"
echo "| system | trial | loss | at step | round (epoch) before -> after | world before -> after | steps lost | loss to next step (s) | grew back | return to its first step (s) (from its join$([ $nproc -gt 1 ] && echo ": its first rank's; its last's")) | state bytes taken | survivors' step spanning its join | their step during its transfer | accuracy | ok |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
bad=0
for sys in troupe torch; do
  n=$trials; [ $sys = torch ] && n=$torch_trials
  : >"$work/$sys.times"; : >"$work/$sys.back"
  allowed_lost=$every; [ $sys = troupe ] && [ $troupe_mode = in-place ] && allowed_lost=0
  for t in $(seq 1 "$n"); do
    d=$work/$sys-$t; mkdir -p $d
    mode=kill; [ $((t % 2)) = 0 ] && mode=cut
    at=$(( every + 2 + RANDOM % (steps / 2 - 2) ))  # past the first checkpoint
    pids=()
    # (In a subshell whose stderr goes nowhere: bash's own "Killed" notes stay out of the table.)
    for h in 0 1 2; do (node $sys $h $d $d/h$h.log) 2>/dev/null & pids+=($!); sleep 0.2; done
    # The loss comes once the job has run step $at on all 3 hosts (a node slow to start may miss
    # the first round and join the next).
    for _ in $(seq 1 3000); do merged $d | grep -q "step $at " && [ "$(world_now $sys $d)" = "$([ $sys = troupe ] && echo $full || echo 3)" ] && break; sleep 0.1; done
    if [ $mode = kill ]; then kill_host $lost_host; else scripts/netns_cluster.sh link $lost_host down $p; fi
    t_loss=$EPOCHREALTIME
    # Back once the job has resumed on 2 hosts (or after 3 minutes).
    for _ in $(seq 1 1800); do
      merged $d | awk -v t=$t_loss -v re="$(resumed_re $sys)" '$1 > t && $0 ~ re { found = 1 } END { exit !found }' && break
      sleep 0.1
    done
    t_back=$EPOCHREALTIME
    if [ $mode = kill ]; then (node $sys $lost_host $d $d/h$lost_host-again.log) 2>/dev/null & pids+=($!); else scripts/netns_cluster.sh link $lost_host up $p; fi
    status=0
    if ! merged $d | awk -v t=$t_loss -v re="$(resumed_re $sys)" '$1 > t && $0 ~ re { found = 1 } END { exit !found }'; then
      for h in 0 1 2; do kill_host $h; done  # not resumed within 3 minutes
    fi
    for i in "${!pids[@]}"; do
      [ $mode = kill ] && [ $i = $lost_host ] && continue  # the killed launcher
      wait "${pids[$i]}" || status=$?
    done
    m=$(merged $d)
    last=$(echo "$m" | awk -v t=$t_loss '$1 < t && $2 == "[rank" && $4 == "step" { s = $5 } $1 < t && $2 == "step" { s = $3 } END { print s }')
    resumed_line=$(echo "$m" | awk -v t=$t_loss -v re="$(resumed_re $sys)" '$1 > t && $0 ~ re { print; exit }')
    resumed=$(echo "$resumed_line" | grep -o 'step [0-9]*' | head -1 | awk '{ print $2 }')
    t_resumed=$(echo "$resumed_line" | awk '{ print $1 }')
    t_next=$(echo "$m" | awk -v t=${t_resumed:-0} '$1 >= t && / ?step [0-9]+ loss/ { print $1; exit }')
    if [ $sys = troupe ] && [ $troupe_mode = in-place ]; then
      rounds=$(quorum_log $d | grep 'quorum: epoch [0-9]*: world' | awk '{ r = $5; sub(":", "", r); print $1, r, $7 }')
    elif [ $sys = troupe ]; then
      rounds=$(grep -h 'rendezvous: round [0-9]*: ' $d/h0.log | awk '{ r = $5; sub(":", "", r); print $1, r, $NF }')
    else
      rounds=$(echo "$m" | awk '/start world/ { split($3, w, "="); split($4, r, "="); print $1, r[2], w[2] }')
    fi
    before=$(echo "$rounds" | awk -v t=$t_loss '$1 < t { r = $2; w = $3 } END { print r, w }')
    after=$(echo "$rounds" | awk -v t=$t_loss '$1 > t { print $2, $3; exit }')
    grew=$(echo "$rounds" | awk -v t=$t_loss -v w=$([ $sys = troupe ] && echo $full || echo 3) '$1 > t && $3 == w { g = "yes" } END { print g ? g : "no" }')
    # A late loss on this short job: the others may finish before the host is back in.
    [ "$grew" = no ] && [ $sys = troupe ] && cat $d/h$lost_host*.log | grep -q "the job ended" && grew="no (the job ended first)"
    acc=$(echo "$m" | json_field test_accuracy)
    lost=$(( ${last:-0} - ${resumed:-0} ))
    lost_shown=$lost
    # Rank 0 logs the steps. Lost with host 0, it may have finished the survivors' step in flight
    # alone (a ring all_reduce ends on one rank first): that step is the one they redo, not lost.
    if [ $sys = troupe ] && [ $troupe_mode = in-place ] && [ $lost_host = 0 ] && [ $lost = 1 ] &&
       [ "$(echo "$m" | json_field steps_redone)" -ge 1 ] 2>/dev/null; then
      lost=0 lost_shown="0 (rank 0 finished the step in flight alone; redone)"
    fi
    secs=$(awk -v a=$t_loss -v b=${t_next:-0} 'BEGIN { if (b > 0) printf "%.2f", b - a; else print "-" }')
    echo "$mode $secs" >>"$work/$sys.times"
    # In place: the returning host's first step in the job (from its restart or its link's return),
    # the state it took, and the survivors' step that spanned its joining against their median.
    back="" took="" pause="" during=""
    if [ $sys = troupe ] && [ $troupe_mode = in-place ]; then
      t_grown=$(echo "$m" | awk -v t=$t_back -v w="world $full " '$1 > t && /quorum epoch [0-9]+: / && index($0, w) { print $1; exit }')
      t_trains=$(echo "$m" | awk -v t=${t_grown:-9e99} '$1 > t && / ?step [0-9]+ loss/ { print $1; exit }')
      t_before=$(echo "$m" | awk -v t=${t_grown:-0} '$1 < t && / ?step [0-9]+ loss/ { s = $1 } END { print s }')
      back=$(awk -v a=$t_back -v b=${t_trains:-0} 'BEGIN { if (b > 0) printf "%.2f", b - a; else print "-" }')
      # From its join: its first rank's request, and (several ranks a host) its last rank's, once
      # the host was ready to train whole.
      joins=$(quorum_log $d | grep 'quorum: .* waits to join' | awk -v t=$t_back -v g=${t_grown:-9e99} '$1 > t && $1 < g { print $1 }')
      from_join() { awk -v a=${1:-0} -v b=${t_trains:-0} 'BEGIN { if (a > 0 && b > 0) printf "%.2f", b - a; else print "-" }'; }
      if [ $nproc -gt 1 ]; then
        back="$back ($(from_join $(echo "$joins" | head -1)); $(from_join $(echo "$joins" | tail -1)))"
      else
        back="$back ($(from_join $(echo "$joins" | head -1)))"
      fi
      took=$(echo "$m" | awk -v t=$t_back '$1 > t && /\] took the state/ { for (i = 1; i < NF; ++i) if ($(i + 1) == "bytes") print $i; exit }')
      normal=$(echo "$m" | awk -v t=$t_loss '$1 < t && / ?step [0-9]+ loss/ { if (p) print $1 - p; p = $1 }' | median)
      # The same steps against their median: how often an ordinary step takes over 1.5x anyway.
      echo "$m" | awk -v t=$t_loss -v n=${normal:-0} '$1 < t && / ?step [0-9]+ loss/ { if (p && n > 0) print ($1 - p) / n; p = $1 }' \
        >>"$work/troupe.ordinary"
      pause=$(awk -v a=${t_before:-0} -v b=${t_trains:-0} -v n=${normal:-0} 'BEGIN { if (a > 0 && b > 0 && n > 0) printf "%.0f ms (%.1fx)", (b - a) * 1000, (b - a) / n; else print "-" }')
      during=$(awk -v a=${t_grown:-0} -v b=${t_trains:-0} -v n=${normal:-0} 'BEGIN { if (a > 0 && b > 0 && n > 0) printf "%.0f ms (%.1fx)", (b - a) * 1000, (b - a) / n; else print "-" }')
      echo "$pause $during" | tr -d '()x' | awk 'NF == 6 { print $3, $6 }' >>"$work/troupe.join"  # "N ms (Rx)" twice
      echo "$mode $(echo "$back" | tr -d '();')" >>"$work/$sys.back"  # mode, return, from the first join[, the last]
    fi
    ok=yes
    if [ $status -ne 0 ] || [ -z "$acc" ] || [ $lost -gt $allowed_lost ] || [ "$secs" = - ] || { [ $sys = troupe ] &&
       awk -v a=${acc:-0} -v lo=$lo -v hi=$hi 'BEGIN { exit !(a < lo || a > hi) }'; }; then
      ok="NO (status $status)"
      [ $sys = troupe ] && bad=$((bad + 1))
      mkdir -p /tmp/elastic-trials; cp -r $d /tmp/elastic-trials/
    fi
    echo "| $sys | $t | $mode | $at | ${before% *} -> ${after% *} | ${before#* } -> ${after#* } | $lost_shown | $secs | $grew | ${back:--} | ${took:--} | ${pause:--} | ${during:--} | ${acc:--} | $ok |"
  done
done
echo
for sys in troupe torch; do
  [ -s "$work/$sys.times" ] || continue
  for mode in all kill cut; do
    picked=$(awk -v m=$mode 'm == "all" || $1 == m' "$work/$sys.times")
    [ -n "$picked" ] || continue
    echo "$sys, $mode: loss to next training step, median $(echo "$picked" | awk '$2 != "-" { print $2 }' | median) s" \
      "over $(echo "$picked" | awk '$2 != "-"' | wc -l) trials; not resumed within 3 minutes: $(echo "$picked" | awk '$2 == "-"' | wc -l)"
  done
done
if [ -s "$work/troupe.back" ]; then
  for mode in kill cut; do
    echo "troupe, $mode: return of the lost host to its first step in the job, median" \
      "$(awk -v m=$mode '$1 == m && $2 != "-" { print $2 }' "$work/troupe.back" | median) s;" \
      "from its join, median $(awk -v m=$mode '$1 == m && $3 != "-" { print $3 }' "$work/troupe.back" | median) s" \
      "$([ $nproc -gt 1 ] && echo "(its first rank's; from its last rank's, median $(awk -v m=$mode '$1 == m && $4 != "-" { print $4 }' "$work/troupe.back" | median) s)")"
  done
fi
if [ -s "$work/troupe.join" ]; then
  echo "troupe: the survivors' step spanning a join, median $(awk '{ print $1 }' "$work/troupe.join" | median)x their median step" \
    "($(awk '$1 <= 1.5' "$work/troupe.join" | wc -l) of $(wc -l <"$work/troupe.join") at most 1.5x); their step during the state's" \
    "transfer, median $(awk '{ print $2 }' "$work/troupe.join" | median)x ($(awk '$2 <= 1.5' "$work/troupe.join" | wc -l) at most 1.5x)"
  echo "troupe: ordinary steps (before the loss) over 1.5x their trial's median step: $(awk '$1 > 1.5' "$work/troupe.ordinary" | wc -l)" \
    "of $(wc -l <"$work/troupe.ordinary") ($(awk '$1 > 1.5 { c++ } END { printf "%.1f", NR ? 100 * c / NR : 0 }' "$work/troupe.ordinary")%)"
fi
echo "troupe trials $trials, bad $bad"
[ "$bad" -eq 0 ]
