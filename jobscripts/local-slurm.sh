#!/usr/bin/env bash
# A real Slurm on this one machine, for testing the batch job scripts: munged, slurmctld and
# slurmd from Debian's slurm-wlm, one node called localhost with all of this machine's CPUs.
#   jobscripts/local-slurm.sh start    install if missing, configure, start, wait for an idle node
#   jobscripts/local-slurm.sh stop     stop the daemons this script started
#   jobscripts/local-slurm.sh status   say whether it runs; exit 0 only if the node is up
#   jobscripts/local-slurm.sh env      print the export line clients need (eval "$(... env)")
# Everything lives under $SPILLWAY_SLURM_DIR (default /tmp/spillway-slurm): slurm.conf, its own
# munge socket, state, spool, pid files and logs. Nothing under /etc/slurm or /run/munge is
# written or used, and the ports are not Slurm's defaults, so a site's own Slurm is left alone.
# Clients find this instance through SLURM_CONF, which `start` and `env` print.
# Needs root: slurmd runs jobs as their submitting user, and munged runs as the munge user.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${SPILLWAY_SLURM_DIR:-/tmp/spillway-slurm}
ctld_port=${SPILLWAY_SLURM_PORT:-6917}     # slurmd listens on the next port
start_timeout=${SPILLWAY_SLURM_TIMEOUT:-60}
conf=$dir/slurm.conf
export SLURM_CONF=$conf

die() { echo "local-slurm: $*" >&2; exit 1; }

# pid_alive FILE: the daemon whose pid FILE records still runs (a killed daemon nobody has
# reaped yet is a zombie, and does not count).
pid_alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) && [ -n "$pid" ] || return 1
  case $(ps -o stat= -p "$pid" 2>/dev/null) in ''|Z*) return 1 ;; esac
}

port_in_use() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

node_state() { timeout 10 sinfo -h -n localhost -o %t 2>/dev/null | head -1; }

show_logs() {
  local f
  for f in "$dir"/log/munged.log "$dir"/log/slurmctld.log "$dir"/log/slurmd.log; do
    [ -f "$f" ] || continue
    echo "---- last lines of $f" >&2
    tail -n 20 "$f" >&2
  done
}

install_if_missing() {
  local tools=(munged munge slurmctld slurmd sbatch sinfo scontrol scancel srun) tool
  # Debian puts the daemons in /usr/sbin, which a non-login root shell may not have on PATH.
  export PATH=$PATH:/usr/sbin:/sbin
  for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || { "$here/setup-deps.sh"; break; }
  done
  for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is missing after jobscripts/setup-deps.sh"
  done
  [ -r /etc/munge/munge.key ] || die "/etc/munge/munge.key is missing: reinstall munge (it creates the key)"
}

write_config() {
  local cpus mem_mb real_mb
  # GNU nproc honours OMP_NUM_THREADS (test.sh sets it to 1): count without it.
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  mem_mb=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
  # slurmd drains a node whose configured memory exceeds what it finds; leave 10% headroom.
  real_mb=$((mem_mb - mem_mb / 10))
  # Sockets and cores as slurmd finds them, so --cpu-bind=cores binds to real cores (CPUs alone
  # would make every CPU a socket); kept only when they add up to the CPUs we may use.
  local topo
  topo=$(slurmd -C | awk 'NR == 1 { for (i = 1; i <= NF; i++) { split($i, kv, "=");
           v[kv[1]] = kv[2] }
         if (v["SocketsPerBoard"] * v["CoresPerSocket"] * v["ThreadsPerCore"] == '"$cpus"')
           printf "Sockets=%d CoresPerSocket=%d ThreadsPerCore=%d", v["SocketsPerBoard"],
                  v["CoresPerSocket"], v["ThreadsPerCore"] }')
  mkdir -p "$dir/state" "$dir/spool" "$dir/log"
  # An empty plugin stack: a site's /etc/slurm/plugstack.conf.d plugins stay out of this instance.
  : > "$dir/plugstack.conf"
  cat > "$conf.new" <<EOF
# Written by jobscripts/local-slurm.sh: one node, no accounting, for testing job scripts.
ClusterName=spillway-local
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$((ctld_port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
PlugStackConfig=$dir/plugstack.conf
# No cgroup setup needed: linuxproc tracks processes, affinity binds them.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# A node that restarts comes back by itself; finished jobs stay visible to scontrol for 10 min.
ReturnToService=2
MinJobAge=600
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus $topo RealMemory=$real_mb State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$conf.new" "$conf"
}

start_munged() {
  pid_alive "$dir/munge/munged.pid" && return 0
  # munged runs as the munge user and wants a socket directory everyone may enter but only it
  # may write.
  mkdir -p "$dir/munge"
  chown munge:munge "$dir/munge"
  chmod 0755 "$dir/munge"
  touch "$dir/log/munged.log"
  chown munge:munge "$dir/log/munged.log"
  runuser -u munge -- munged --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" \
    || { show_logs; die "munged did not start"; }
  munge -n --socket="$dir/munge/munge.socket" | unmunge --socket="$dir/munge/munge.socket" >/dev/null \
    || { show_logs; die "munged runs but cannot encode and decode a credential"; }
}

start() {
  [ "$(id -u)" -eq 0 ] || die "needs root (slurmd and munged switch users)"
  install_if_missing
  if pid_alive "$dir/slurmctld.pid" && pid_alive "$dir/slurmd.pid"; then
    case $(node_state) in
      idle|mix|alloc) echo "local-slurm: already running (node $(node_state)); export SLURM_CONF=$conf"
                      return 0 ;;
    esac
  fi
  mkdir -p "$dir/log"
  # Rewrite the config only while no daemon reads it.
  pid_alive "$dir/slurmctld.pid" || pid_alive "$dir/slurmd.pid" || write_config
  # A port another Slurm holds would make our daemon exit while sinfo, asking that port, saw
  # the other instance's node and reported success.
  local port
  for port in "$ctld_port" "$((ctld_port + 1))"; do
    if { [ "$port" = "$ctld_port" ] && ! pid_alive "$dir/slurmctld.pid"; } \
        || { [ "$port" != "$ctld_port" ] && ! pid_alive "$dir/slurmd.pid"; }; then
      if port_in_use "$port"; then
        die "port $port is in use (another Slurm?): set SPILLWAY_SLURM_PORT to a free pair of ports"
      fi
    fi
  done
  start_munged
  # A pid file left by a daemon that died would read as "exited" below before the new one
  # replaces it.
  pid_alive "$dir/slurmctld.pid" || rm -f "$dir/slurmctld.pid"
  pid_alive "$dir/slurmd.pid" || rm -f "$dir/slurmd.pid"
  if ! pid_alive "$dir/slurmctld.pid"; then
    # -i: state files left by an earlier instance that was killed do not stop the start.
    slurmctld -i || { show_logs; die "slurmctld did not start"; }
  fi
  if ! pid_alive "$dir/slurmd.pid"; then
    # The node is called localhost whatever this machine's hostname is.
    slurmd -N localhost || { show_logs; die "slurmd did not start"; }
  fi
  local waited=0 state="" name
  while :; do
    # The daemons write their pid files a moment after the command that started them returns.
    for name in slurmctld slurmd; do
      if [ -s "$dir/$name.pid" ] && ! pid_alive "$dir/$name.pid"; then
        show_logs; die "$name exited; logs above"
      fi
    done
    state=$(node_state)
    [ "$state" = idle ] && break
    if [ $waited -ge "$start_timeout" ]; then
      show_logs
      die "node localhost not idle after ${start_timeout}s (state '${state:-no answer}'); logs above"
    fi
    # A node that a previous instance left down comes back once slurmd has registered.
    case $state in down*|drain*) scontrol update nodename=localhost state=resume 2>/dev/null || true ;; esac
    sleep 1
    waited=$((waited + 1))
  done
  echo "local-slurm: node localhost idle after ${waited}s; export SLURM_CONF=$conf"
}

# stop_daemon NAME PIDFILE: SIGTERM, then SIGKILL if it lingers past 20 s.
stop_daemon() {
  local name=$1 pidfile=$2 pid i
  pid_alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 200; i++)); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
    sleep 0.1
  done
  echo "local-slurm: $name (pid $pid) ignored SIGTERM for 20 s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

stop() {
  # Jobs still running would outlive slurmd as orphaned slurmstepd processes: cancel them first.
  if pid_alive "$dir/slurmctld.pid"; then
    timeout 10 scancel --full --quiet --partition=local 2>/dev/null || true
  fi
  stop_daemon slurmd "$dir/slurmd.pid"
  stop_daemon slurmctld "$dir/slurmctld.pid"
  stop_daemon munged "$dir/munge/munged.pid"
  echo "local-slurm: stopped"
}

status() {
  local name running=1
  for name in munge/munged slurmctld slurmd; do
    if pid_alive "$dir/$name.pid"; then
      echo "${name#*/}: running (pid $(cat "$dir/$name.pid"))"
    else
      echo "${name#*/}: not running"; running=0
    fi
  done
  [ $running -eq 1 ] || return 1
  local state
  state=$(node_state)
  echo "node localhost: ${state:-no answer from slurmctld}"
  [ -n "$state" ] || return 1
  echo "export SLURM_CONF=$conf"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) die "usage: $0 start|stop|status|env" ;;
esac
