#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for launch tests: munge, slurmctld and slurmd with a
# private configuration in a directory of their own. Needs root and Debian's slurm-wlm and munge.
#
#   scripts/slurm_one_node.sh start DIR     # waits until the node is idle
#   srun -n 2 build/bin/dist_sgd --epochs 1  # as the README says
#   scripts/slurm_one_node.sh stop DIR      # stops the daemons, removes DIR
#
# srun reads /etc/slurm/slurm.conf unless SLURM_CONF says otherwise: where this machine has none,
# start links it to DIR/slurm.conf (stop removes the link), so srun works as on a real cluster.
# Where one exists, it is left alone and start prints the SLURM_CONF=DIR/slurm.conf to export.
set -euo pipefail
mode=${1:-}
dir=${2:-}
[[ -n $mode && -n $dir ]] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

start() {
  mkdir -p "$dir"/{state,spool,log}
  dir=$(cd "$dir" && pwd)
  local host cpus
  host=$(hostname -s)
  cpus=$(nproc)
  # The daemons, and through them every task srun starts, keep this shell's CPU mask: a mask
  # narrower than the machine puts the ranks on fewer CPUs than they would have (two ranks on one
  # CPU: a 4-byte all_reduce takes ~10 us instead of ~2).
  if [[ $cpus -lt $(nproc --all) ]]; then
    echo "slurm_one_node: this shell may run on $cpus of $(nproc --all) CPUs ($(taskset -cp $$ | sed 's/.*: //')); so will srun's tasks" >&2
  fi
  cat >"$dir/slurm.conf" <<EOF
ClusterName=troupe
SlurmctldHost=$host
SlurmctldPort=$(( 16817 + RANDOM % 1000 ))
SlurmdPort=$(( 17817 + RANDOM % 1000 ))
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
  # munge: the key Debian's package made, a daemon of our own if none answers.
  if ! munge -n >/dev/null 2>&1; then
    mkdir -p /run/munge
    chown munge:munge /run/munge 2>/dev/null || true
    if id munge >/dev/null 2>&1; then runuser -u munge -- munged --force; else munged --force; fi
  fi
  SLURM_CONF="$dir/slurm.conf" slurmctld -f "$dir/slurm.conf"
  SLURM_CONF="$dir/slurm.conf" slurmd -f "$dir/slurm.conf"
  for _ in $(seq 1 60); do
    if SLURM_CONF="$dir/slurm.conf" sinfo -h -o %t 2>/dev/null | grep -q idle; then
      mkdir -p /etc/slurm
      if [[ ! -e /etc/slurm/slurm.conf && ! -L /etc/slurm/slurm.conf ]]; then
        ln -s "$dir/slurm.conf" /etc/slurm/slurm.conf
        echo "slurm_one_node: /etc/slurm/slurm.conf -> $dir/slurm.conf (srun finds it without SLURM_CONF)"
      else
        echo "slurm_one_node: /etc/slurm/slurm.conf exists and is left alone: export the line below for srun"
      fi
      echo "SLURM_CONF=$dir/slurm.conf"
      return 0
    fi
    sleep 0.5
  done
  echo "slurm_one_node: the node did not become idle; logs in $dir/log" >&2
  SLURM_CONF="$dir/slurm.conf" sinfo >&2 || true
  return 1
}

stop() {
  dir=$(cd "$dir" 2>/dev/null && pwd || echo "$dir")
  if [[ -L /etc/slurm/slurm.conf && $(readlink /etc/slurm/slurm.conf) == "$dir/slurm.conf" ]]; then
    rm -f /etc/slurm/slurm.conf
  fi
  for pid_file in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
    [[ -f $pid_file ]] && kill "$(cat "$pid_file")" 2>/dev/null || true
  done
  sleep 0.5
  rm -rf "$dir"
}

case $mode in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
