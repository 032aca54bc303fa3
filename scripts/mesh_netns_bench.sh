#!/usr/bin/env bash
# mesh_bench on 4 hosts of the netns test cluster (scripts/netns_cluster.sh; needs root): rank 0
# calls from host 0, ranks 1..8 hold the members, 2 per host (rank r on host (r-1)/2), the single
# actor and the 4-member mesh on other hosts than the caller's where they can be; then
# all_reduce_bench at 64 MiB with one rank per host, the bus bandwidth call_reduce is held against.
#
#   scripts/mesh_netns_bench.sh [REPS=1000] [RATE]
#
# REPS: timed small calls per figure; 1000 keeps each figure's machine CPU time (mesh_bench's
# *_cpu_us, counted in 10 ms ticks) within a few percent. RATE (a tc rate, e.g. 1gbit) shapes
# each host's link (tc tbf on its eth0, both ways through the bridge), so that a link's
# bandwidth, not this machine's cores, bounds the 64 MiB figures.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "mesh_netns_bench: needs root (network namespaces)" >&2; exit 2; }
reps=${1:-1000}
rate=${2:-}
p=mnb$$
work=$(mktemp -d)
trap 'scripts/netns_cluster.sh down $p >/dev/null 2>&1; rm -rf "$work"' EXIT
build/bin/troupe secret "$work/secret" >/dev/null  # the job's secret, shared by its ranks
export TROUPE_JOB_SECRET_FILE="$work/secret"
scripts/netns_cluster.sh up 4 $p >/dev/null
a0=$(scripts/netns_cluster.sh addr 0 $p)
if [ -n "$rate" ]; then
  for h in 0 1 2 3; do
    ip netns exec $p-h$h tc qdisc add dev eth0 root tbf rate "$rate" burst 1mbit latency 100ms
  done
  echo "links shaped: $rate per host (tc tbf)"
fi

echo "machine: $(build/bin/troupe info 2>/dev/null | head -3 | tr '\n' ' ')(load $(cut -d' ' -f1-3 /proc/loadavg))"
for r in 8 7 6 5 4 3 2 1 0; do
  host=$(( r == 0 ? 0 : (r - 1) / 2 ))
  ip netns exec $p-h$host env RANK=$r WORLD_SIZE=9 MASTER_ADDR=$a0 MASTER_PORT=29600 \
    build/bin/mesh_bench --reps "$reps" --one 3 --four 2,3,5,7 --json >"$work/mesh$r" 2>&1 &
done
wait
echo "mesh_bench (9 ranks, 4 hosts): $(grep -h '^{' "$work/mesh0" || cat "$work/mesh0")"
for r in 3 2 1 0; do
  ip netns exec $p-h$r env RANK=$r WORLD_SIZE=4 MASTER_ADDR=$a0 MASTER_PORT=29601 \
    build/bin/all_reduce_bench --sizes 67108864 --json >"$work/ar$r" 2>&1 &
done
wait
echo "all_reduce_bench (4 ranks, 4 hosts): $(grep -h '^{' "$work/ar0" || cat "$work/ar0")"
