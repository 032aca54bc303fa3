#!/usr/bin/env bash
# All-reduce between 2 hosts of the netns test cluster (scripts/netns_cluster.sh; needs root), one
# rank each, beside a raw TCP stream between the same two hosts, in alternating runs: what the
# network choices (stripes on or off) give against what the link carries.
#
#   scripts/two_host_bench.sh [RUNS=3] [REPS=15]
#
# Each run: the raw stream (256 MiB, python3 sockets, one connection) and the raw 4-byte exchange
# (tcp_floor: plain sockets, busy-polling, the median of REPS as all_reduce_bench takes it), then
# all_reduce_bench with the transport's own choices and with each of $SETTINGS (default: stripes
# off and on, busy-poll off and on, no job secret: TROUPE_INSECURE=1, the cost of authentication),
# sizes 4 B and 64 MiB. The ranks share a job secret made for the run (README, "Security"). Prints one line per run and setting:
# 4 B latency (us) beside the raw exchange's, 64 MiB bus bandwidth (GB/s) and its ratio to the
# stream measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "two_host_bench: needs root (network namespaces)" >&2; exit 2; }
runs=${1:-3} reps=${2:-15}
p=thb$$
work=$(mktemp -d)
trap 'scripts/netns_cluster.sh down $p >/dev/null 2>&1; rm -rf "$work"' EXIT
scripts/netns_cluster.sh up 2 $p >/dev/null
a0=$(scripts/netns_cluster.sh addr 0 $p)
a1=$(scripts/netns_cluster.sh addr 1 $p)
build/bin/troupe secret "$work/job.secret" >/dev/null
export TROUPE_JOB_SECRET_FILE="$work/job.secret"

# GB/s of one TCP stream of 256 MiB from host 0 to host 1, timed at the receiver.
raw_stream() {
  ip netns exec $p-h1 /usr/bin/python3 - "$a1" <<'PY' &
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 29501)); s.listen(1)
c, _ = s.accept(); buf = bytearray(4 << 20); view = memoryview(buf); n = 0; t0 = None
while True:
    k = c.recv_into(view)
    if t0 is None: t0 = time.perf_counter()
    if not k: break
    n += k
print(f"{n / (time.perf_counter() - t0) / 1e9:.2f}")
PY
  local receiver=$!
  sleep 0.5
  ip netns exec $p-h0 /usr/bin/python3 -c "
import socket, sys
s = socket.create_connection(('$a1', 29501)); data = bytes(256 << 20); s.sendall(data); s.close()"
  wait $receiver
}

# tcp_floor's 4-byte exchange between the two hosts (us, the median of $reps).
raw_exchange() {
  for r in 1 0; do
    ip netns exec $p-h$r env RANK=$r MASTER_ADDR=$a0 MASTER_PORT=29402 \
      build/bin/tcp_floor --reps $reps --stream-reps 1 --json >"$work/floor$r" 2>&1 &
  done
  wait
  sed -n 's/.*"exchange_us_4B":\([0-9.]*\).*/\1/p' "$work/floor0"
}

# all_reduce_bench on the two hosts, one rank each, with the given variables: "<4 B us> <64 MiB GB/s>".
all_reduce() {
  local out
  for r in 1 0; do
    local secret=(); [ "${1:-}" = TROUPE_INSECURE=1 ] && secret=(-u TROUPE_JOB_SECRET_FILE)
    ip netns exec $p-h$r env "${secret[@]}" "$@" RANK=$r WORLD_SIZE=2 MASTER_ADDR=$a0 MASTER_PORT=29400 \
      build/bin/all_reduce_bench --sizes 4,67108864 --reps $reps --json >"$work/rank$r" 2>&1 &
  done
  wait
  grep -h '^{' "$work/rank0" | sed 's/.*"time_us":\([0-9.]*\),"busbw_gbs":\([0-9.]*\).*/\1 \2/' | tr '\n' ' '
}

echo "machine: $(build/bin/troupe info 2>/dev/null | head -3 | tr '\n' ' ')(load $(cut -d' ' -f1-3 /proc/loadavg))"
echo "| run | setting | raw stream GB/s | raw 4 B exchange us | 4 B us | 64 MiB GB/s | ratio to the stream |"
echo "|---|---|---|---|---|---|---|"
for run in $(seq 1 "$runs"); do
  raw=$(raw_stream)
  floor=$(raw_exchange)
  # The first all_reduce of a run is the slowest at 4 B (by ~25% here): even runs take the
  # settings in reverse, so that each setting goes first as often as the others.
  settings=(${SETTINGS:-chosen TROUPE_STRIPES=0 TROUPE_STRIPES=2 TROUPE_BUSY_POLL_US=0 TROUPE_BUSY_POLL_US=50 TROUPE_INSECURE=1})
  if (( run % 2 == 0 )); then
    for ((i = 0, j = ${#settings[@]} - 1; i < j; i++, j--)); do
      t=${settings[i]} settings[i]=${settings[j]} settings[j]=$t
    done
  fi
  for setting in "${settings[@]}"; do
    env_set=(); [ $setting = chosen ] || env_set=("$setting")
    read -r small_us _ _ big_gbs < <(all_reduce "${env_set[@]}"; echo) || true
    ratio=$(awk -v a="$big_gbs" -v b="$raw" 'BEGIN { printf "%.2f", a / b }')
    echo "| $run | $setting | $raw | $floor | $small_us | $big_gbs | $ratio |"
  done
done
