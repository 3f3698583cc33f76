#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, from Debian's packages (scripts/install_slurm.sh), without systemd:
# munged, slurmctld and slurmd started as background processes, stopped by their PIDs. Everything it writes (config,
# MUNGE key and socket, state, logs, PIDs) is under DIR; its ports are free ones, its MUNGE socket its own, so it
# never talks to another cluster on the same machine, nor that cluster to it.
#
#   scripts/slurm_local.sh start DIR   # prints `export SLURM_CONF=DIR/slurm.conf ...`: eval it, then sbatch/squeue
#   scripts/slurm_local.sh stop DIR    # cancels its jobs, then stops slurmd, slurmctld and munged by PID
#
# Settings (shared/notes/engines.md): proctrack/linuxproc and task/none (no cgroups without systemd), cons_tres with
# CR_Core, JobRequeue=1, ReturnToService=2, no accounting, the node line from `slurmd -C` with ~90 % of its memory.
# cred_expire=10: a requeued job waits cred_expire before it starts again (120 s by default, slurm.conf(5)); the
# scheduler looks at pending jobs every 2 s (60 s by default): a requeued job starts again ~10 s later.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# = 2 ] || usage
action=$1
dir=$(realpath -m "$2")

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_gone() {  # PID SECONDS: wait for PID to exit, then SIGKILL it
  local pid=$1 left=$(($2 * 10))
  while kill -0 "$pid" 2>/dev/null && [ $left -gt 0 ]; do sleep 0.1; left=$((left - 1)); done
  kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid" 2>/dev/null || true; }
  return 0
}


fail() {  # a start that failed half-way stops what it started
  echo "$1" >&2
  stop
  exit 1
}

start() {
  for tool in munged slurmctld slurmd sbatch setpriv; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: run scripts/install_slurm.sh" >&2; exit 1; }
  done
  [ "$(id -u)" = 0 ] || { echo "run as root: slurmd runs jobs as their users, munged as munge" >&2; exit 1; }
  [ ! -e "$dir/pids" ] || { echo "$dir holds a cluster already: run '$0 stop $dir' first" >&2; exit 1; }
  mkdir -p "$dir"/{munge,state,spool,log}
  chmod 755 "$dir"  # munged runs as the munge user and must reach its folder
  chown munge:munge "$dir/munge"
  chmod 755 "$dir/munge"  # munged wants its socket's folder open to all (the key itself is 0400)
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"  # this cluster's own key
  chown munge:munge "$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  local host node mem ctld_port slurmd_port socket="$dir/munge/munge.socket"
  host=$(hostname -s)
  # slurmd -C: "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"
  node=$(slurmd -C)
  node=${node%%$'\n'*}
  mem=${node##*RealMemory=}
  node="${node% RealMemory=*} RealMemory=$((mem * 9 / 10))"
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  cat >"$dir/slurm.conf" <<EOF
ClusterName=crosstune
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobRequeue=1
ReturnToService=2
KillWait=5
SchedulerParameters=sched_interval=2,bf_interval=2
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  : >"$dir/pids"
  setpriv --reuid munge --regid munge --init-groups munged --foreground --socket="$socket" \
    --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/seed" \
    --log-file="$dir/munge/munged.log" </dev/null >"$dir/log/munged.out" 2>&1 &
  echo "munged $!" >>"$dir/pids"
  local i
  for i in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
  [ -S "$socket" ] || fail "munged did not start: $(cat "$dir/log/munged.out")"
  slurmctld -D -f "$dir/slurm.conf" </dev/null >"$dir/log/slurmctld.out" 2>&1 &
  echo "slurmctld $!" >>"$dir/pids"
  slurmd -D -f "$dir/slurm.conf" </dev/null >"$dir/log/slurmd.out" 2>&1 &
  echo "slurmd $!" >>"$dir/pids"
  export SLURM_CONF="$dir/slurm.conf"
  local state=""
  for i in $(seq 300); do
    state=$(sinfo -h -N -o %T 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.1
  done
  [ "$state" = idle ] || fail "the node did not come up (state '$state'): $(tail -n 5 "$dir"/log/*.log)"
  echo "export SLURM_CONF=$dir/slurm.conf"
}

stop() {
  [ -f "$dir/pids" ] || return 0
  export SLURM_CONF="$dir/slurm.conf"
  local pid name left
  if scancel --quiet --user="$(id -u)" 2>/dev/null; then  # its jobs end first, so no job outlives slurmd
    for left in $(seq 150); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  # slurmd, slurmctld, munged: the reverse of the start
  for name in slurmd slurmctld munged; do
    pid=$(sed -n "s/^$name //p" "$dir/pids")
    [ -n "$pid" ] || continue
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" 20
    if [ "$name" = slurmd ]; then  # a job's processes and step daemons left behind (no controller): by their PIDs
      for pid in $(python3 "${BASH_SOURCE[0]%/*}/slurm_jobs_left.py" "$dir"); do
        kill -KILL "$pid" 2>/dev/null || true
      done
    fi
  done
  rm -f "$dir/pids"
}

case $action in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
