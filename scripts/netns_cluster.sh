#!/usr/bin/env bash
# A test cluster on one machine: N "hosts", each a network namespace with its own interface
# (eth0, 10.232.X.i+1/24), all joined by a bridge that lives in a namespace of its own, so the
# machine's own network is left alone. Traffic between hosts crosses real veth links and TCP, as
# between machines; ranks inside one host see each other as local (ipc://, shared memory).
# Needs root and iproute2.
#
#   scripts/netns_cluster.sh up 4 trc          # hosts trc-h0 .. trc-h3 at 10.232.X.1 .. 10.232.X.4
#   ip netns exec trc-h1 build/bin/...         # run something on host 1
#   scripts/netns_cluster.sh addr 0 trc        # host 0's address
#   scripts/netns_cluster.sh link 2 down trc   # pull host 2's cable (up: plug it back)
#   scripts/netns_cluster.sh down trc          # remove every namespace of the cluster
#
# The prefix (default "trc") names the cluster; X, the subnet, is derived from it, so clusters
# with different prefixes can exist side by side.
set -euo pipefail
mode=${1:-}

subnet() { echo $(( $(printf '%s' "$1" | cksum | cut -d' ' -f1) % 200 + 20 )); }
addr() { echo "10.232.$(subnet "$2").$(( $1 + 1 ))"; }

up() {
  local n=$1 p=$2 i
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || { echo "netns_cluster: host count 1..200, got '$n'" >&2; exit 2; }
  trap 'down "$p"' ERR
  ip netns add "$p-sw"
  ip -n "$p-sw" link add br0 type bridge
  ip -n "$p-sw" link set br0 up
  for (( i = 0; i < n; ++i )); do
    ip netns add "$p-h$i"
    ip link add "$p-e$i" type veth peer name "$p-s$i"
    ip link set "$p-e$i" netns "$p-h$i"
    ip link set "$p-s$i" netns "$p-sw"
    ip -n "$p-h$i" link set "$p-e$i" name eth0
    ip -n "$p-h$i" addr add "$(addr "$i" "$p")/24" dev eth0
    ip -n "$p-h$i" link set eth0 up
    ip -n "$p-h$i" link set lo up
    ip -n "$p-sw" link set "$p-s$i" master br0
    ip -n "$p-sw" link set "$p-s$i" up
  done
  trap - ERR
  for (( i = 0; i < n; ++i )); do echo "$p-h$i $(addr "$i" "$p")"; done
}

down() {
  local p=$1 ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$p-(h[0-9]+|sw)$" || true); do ip netns del "$ns"; done
}

case $mode in
  up) up "${2:?host count}" "${3:-trc}" ;;
  down) down "${2:-trc}" ;;
  addr) addr "${2:?host index}" "${3:-trc}" ;;
  link) ip -n "${4:-trc}-h${2:?host index}" link set eth0 "${3:?up or down}" ;;
  *) echo "usage: $0 up N [PREFIX] | down [PREFIX] | addr I [PREFIX] | link I up|down [PREFIX]" >&2; exit 2 ;;
esac
