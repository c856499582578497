#!/usr/bin/env bash
# slurm-local.sh: a real single-node Slurm cluster (slurmctld + slurmd on this machine) for
# integration tests. Needs root, slurm-wlm and munge (Debian 12: slurm 22.05).
#
# Source it (do not execute it):
#
#   source scripts/testenv/slurm-local.sh
#   slurm_can_run || { echo "SKIP"; exit 0; }   # prints the reason when it cannot
#   dir=$(mktemp -d)
#   trap 'slurm_down "$dir"' EXIT
#   slurm_up "$dir"                              # exports SLURM_CONF=$dir/slurm.conf
#   salloc -n 4 --overcommit srun -n 4 my-binary
#   sbatch --wait job.sh
#
# Functions (all safe to call from scripts running under `set -euo pipefail`: they never exit the
# caller, they report failure by their return status and a message):
#   slurm_can_run   0 if slurmctld, slurmd, srun, sbatch, salloc, sinfo, scontrol, munged exist and
#                   we are root; else prints why and returns 1
#   slurm_up DIR    starts munged if it is not running, writes DIR/slurm.conf (node `hostname -s`
#                   with `nproc` CPUs, partition "debug" with OverSubscribe=FORCE:8), exports
#                   SLURM_CONF, starts slurmctld and slurmd with all state, spool, pid and log
#                   files inside DIR, waits (at most 30 s) until the node is idle. On failure it
#                   prints the logs' tails, stops what it started and returns 1.
#   slurm_down DIR  cancels the jobs, `scontrol shutdown`, kills the daemons of DIR's pid files
#                   that are still alive after a bounded wait, stops munged only if slurm_up
#                   started it, unsets SLURM_CONF if it points into DIR. Idempotent; returns 0.
#
# Environment: SLURM_LOCAL_CTLD_PORT / SLURM_LOCAL_SLURMD_PORT (defaults 6817 / 6818 when free,
# else a free port is picked, so two clusters in two DIRs can coexist); SLURM_LOCAL_CPUS
# (default `nproc`). Clients (srun, sbatch, ...) need SLURM_CONF, which slurm_up exports.
# The munged started here is shared by every cluster on the machine: the slurm_down of the DIR
# whose slurm_up started it stops it.

_slurm_err() { printf 'slurm-local: %s\n' "$*" >&2; }

_slurm_now_ms() { date +%s%3N; }

# _slurm_alive PID NAME: PID is a live process called NAME (not a reused pid, not a zombie:
# the daemons are orphans, and on some machines PID 1 reaps orphans only now and then).
_slurm_alive() {
  local pid=${1:-} name=${2:-} comm="" stat="" st
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/comm ]] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [[ $comm == "$name" ]] || return 1
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  st=${stat##*) }
  st=${st:0:1}
  [[ $st != Z && $st != X ]]
}

_slurm_pid_from() {
  local f=$1 pid=""
  [[ -r $f ]] || return 1
  read -r pid <"$f" 2>/dev/null || true
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  printf '%s\n' "$pid"
}

# _slurm_stop PID NAME WAIT_S: waits up to WAIT_S for PID to exit, then SIGTERM, then SIGKILL.
_slurm_stop() {
  local pid=$1 name=$2 wait_s=$3 deadline
  deadline=$(($(_slurm_now_ms) + wait_s * 1000))
  while _slurm_alive "$pid" "$name" && (($(_slurm_now_ms) < deadline)); do sleep 0.1; done
  _slurm_alive "$pid" "$name" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$(($(_slurm_now_ms) + 3000))
  while _slurm_alive "$pid" "$name" && (($(_slurm_now_ms) < deadline)); do sleep 0.1; done
  _slurm_alive "$pid" "$name" || return 0
  kill -KILL "$pid" 2>/dev/null || true
  sleep 0.1
  return 0
}

_slurm_port_free() {
  local port=$1
  python3 - "$port" <<'PY' 2>/dev/null
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("", int(sys.argv[1])))
except OSError:
    sys.exit(1)
PY
}

_slurm_pick_port() {
  local want=$1 port
  if ! command -v python3 >/dev/null 2>&1 || _slurm_port_free "$want"; then
    printf '%s\n' "$want"
    return 0
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])' 2>/dev/null) || port=""
  [[ -n $port ]] || port=$want
  printf '%s\n' "$port"
}

_slurm_munge_ok() {
  timeout 5 munge -n </dev/null 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1
}

_slurm_logs() {
  local dir=$1 f
  for f in "$dir/log/slurmctld.log" "$dir/log/slurmd.log"; do
    if [[ -r $f ]]; then
      printf -- '--- tail %s\n' "$f" >&2
      tail -n 25 "$f" >&2 || true
    else
      printf -- '--- %s: missing\n' "$f" >&2
    fi
  done
}

slurm_can_run() {
  local c
  if [[ $(id -u) -ne 0 ]]; then
    echo "slurm: not root (the local cluster runs slurmd/slurmctld as root)"
    return 1
  fi
  for c in slurmctld slurmd srun sbatch salloc sinfo scontrol squeue scancel munged munge unmunge; do
    if ! command -v "$c" >/dev/null 2>&1 && [[ ! -x /usr/sbin/$c ]]; then
      echo "slurm: $c is not installed (slurm-wlm, munge)"
      return 1
    fi
  done
  if [[ ! -e /etc/munge/munge.key ]]; then
    echo "slurm: /etc/munge/munge.key is missing"
    return 1
  fi
  return 0
}

slurm_up() {
  local dir=${1:-} host cpus ctld_port slurmd_port conf t0 deadline state="" pid
  if [[ -z $dir ]]; then
    _slurm_err "usage: slurm_up DIR"
    return 1
  fi
  mkdir -p "$dir" || {
    _slurm_err "cannot create $dir"
    return 1
  }
  dir=$(cd "$dir" && pwd -P) || return 1
  t0=$(_slurm_now_ms)
  slurm_down "$dir" # leftovers of an earlier run in DIR
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" || {
    _slurm_err "cannot create $dir/{state,spool,log}"
    return 1
  }

  # munge
  if ! _slurm_munge_ok; then
    if ! install -d -o munge -g munge -m 0755 /run/munge; then
      _slurm_err "cannot create /run/munge"
      return 1
    fi
    if ! runuser -u munge -- /usr/sbin/munged; then
      _slurm_err "munged did not start (see /var/log/munge/munged.log)"
      tail -n 5 /var/log/munge/munged.log >&2 2>/dev/null || true
      return 1
    fi
    deadline=$(($(_slurm_now_ms) + 5000))
    until _slurm_munge_ok; do
      if (($(_slurm_now_ms) > deadline)); then
        _slurm_err "munged started but munge -n | unmunge fails"
        return 1
      fi
      sleep 0.1
    done
    if pid=$(_slurm_pid_from /run/munge/munged.pid); then
      printf '%s\n' "$pid" >"$dir/munged.started-here"
    fi
  fi

  host=$(hostname -s) || host=""
  if [[ -z $host ]]; then
    _slurm_err "hostname -s is empty"
    return 1
  fi
  cpus=${SLURM_LOCAL_CPUS:-$(nproc)}
  ctld_port=${SLURM_LOCAL_CTLD_PORT:-$(_slurm_pick_port 6817)}
  slurmd_port=${SLURM_LOCAL_SLURMD_PORT:-$(_slurm_pick_port 6818)}
  if [[ $slurmd_port == "$ctld_port" ]]; then
    slurmd_port=$(_slurm_pick_port $((ctld_port + 1)))
  fi
  conf="$dir/slurm.conf"
  # NodeAddr/SlurmctldHost address 127.0.0.1: works even when the hostname does not resolve.
  if ! cat >"$conf" <<EOF; then
# Written by scripts/testenv/slurm-local.sh: a single-node test cluster.
ClusterName=synclinetest
SlurmctldHost=${host}(127.0.0.1)
SlurmctldPort=${ctld_port}
SlurmdPort=${slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
InactiveLimit=0
KillWait=5
MinJobAge=10
StateSaveLocation=${dir}/state
SlurmdSpoolDir=${dir}/spool
SlurmctldPidFile=${dir}/slurmctld.pid
SlurmdPidFile=${dir}/slurmd.pid
SlurmctldLogFile=${dir}/log/slurmctld.log
SlurmdLogFile=${dir}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
    _slurm_err "cannot write $conf"
    return 1
  fi
  export SLURM_CONF="$conf"

  if ! slurmctld -c -f "$conf" >>"$dir/log/slurmctld.stdout" 2>&1; then
    _slurm_err "slurmctld failed to start"
    _slurm_logs "$dir"
    slurm_down "$dir"
    return 1
  fi
  if ! slurmd -f "$conf" >>"$dir/log/slurmd.stdout" 2>&1; then
    _slurm_err "slurmd failed to start"
    _slurm_logs "$dir"
    slurm_down "$dir"
    return 1
  fi

  local start_ms daemon why=""
  start_ms=$(_slurm_now_ms)
  deadline=$((start_ms + 30000))
  while :; do
    state=$(timeout 3 sinfo -h -o %T 2>/dev/null) || state=""
    [[ $state == idle ]] && break
    # Fail fast when a daemon died (e.g. its port is taken): after 2 s each must be alive.
    if (($(_slurm_now_ms) - start_ms > 2000)); then
      for daemon in slurmctld slurmd; do
        if ! _slurm_alive "$(_slurm_pid_from "$dir/$daemon.pid" || true)" "$daemon"; then
          why="$daemon is not running"
        fi
      done
    fi
    if [[ -z $why ]] && (($(_slurm_now_ms) > deadline)); then
      why="node not idle after 30 s (sinfo state: '${state:-no answer}')"
    fi
    if [[ -n $why ]]; then
      _slurm_err "$why"
      _slurm_logs "$dir"
      slurm_down "$dir"
      return 1
    fi
    sleep 0.2
  done
  printf 'slurm-local: up in %d ms (node %s, %s CPUs, ports %s/%s, SLURM_CONF=%s)\n' \
    $(($(_slurm_now_ms) - t0)) "$host" "$cpus" "$ctld_port" "$slurmd_port" "$conf" >&2
  return 0
}

slurm_down() {
  local dir=${1:-} conf pid jobs deadline grace
  [[ -n $dir && -d $dir ]] || return 0
  dir=$(cd "$dir" && pwd -P) || return 0
  conf="$dir/slurm.conf"
  grace=0 # how long the daemons get to exit by themselves (only after a shutdown request)
  if [[ -r $conf ]] && _slurm_alive "$(_slurm_pid_from "$dir/slurmctld.pid" || true)" slurmctld; then
    # Cancel the jobs first so that no job steps outlive the daemons.
    jobs=$(SLURM_CONF=$conf timeout 5 squeue -h -o %i 2>/dev/null) || jobs=""
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086  # one word per job id
      SLURM_CONF=$conf timeout 5 scancel $jobs >/dev/null 2>&1 || true
      deadline=$(($(_slurm_now_ms) + 10000))
      while (($(_slurm_now_ms) < deadline)); do
        jobs=$(SLURM_CONF=$conf timeout 5 squeue -h -t R,CG,PD -o %i 2>/dev/null) || jobs=""
        [[ -z $jobs ]] && break
        sleep 0.2
      done
    fi
    if SLURM_CONF=$conf timeout 10 scontrol shutdown >/dev/null 2>&1; then
      grace=10
    fi
  fi
  if pid=$(_slurm_pid_from "$dir/slurmd.pid"); then
    _slurm_stop "$pid" slurmd "$grace"
  fi
  if pid=$(_slurm_pid_from "$dir/slurmctld.pid"); then
    _slurm_stop "$pid" slurmctld "$grace"
  fi
  rm -f "$dir/slurmd.pid" "$dir/slurmctld.pid"
  if pid=$(_slurm_pid_from "$dir/munged.started-here"); then
    if _slurm_alive "$pid" munged; then
      kill -TERM "$pid" 2>/dev/null || true
      _slurm_stop "$pid" munged 5
    fi
  fi
  rm -f "$dir/munged.started-here"
  if [[ ${SLURM_CONF:-} == "$conf" ]]; then
    unset SLURM_CONF
  fi
  return 0
}
