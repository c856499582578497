#!/usr/bin/env bash
# netns-hosts.sh: fake multi-host networks for integration tests, made of Linux network namespaces.
#
# Source it (do not execute it):
#
#   source scripts/testenv/netns-hosts.sh
#   netns_can_run || { echo "SKIP"; exit 0; }     # prints the reason when it cannot
#   trap 'netns_hosts_down sltst' EXIT
#   netns_hosts_up sltst 3                        # namespaces sltst1..sltst3 on bridge sltstbr
#   netns_write_rsh "$tmp/rsh"                    # ssh stand-in: "$tmp/rsh" sltst2 'cmd ...'
#   ip netns exec sltst1 some-command --peer "$(netns_host_ip sltst 2)"
#   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --hostfile F \
#       --mca plm_rsh_agent "$tmp/rsh" --mca plm_rsh_no_tree_spawn 1 \
#       --mca oob_tcp_if_include "$(netns_subnet_cidr)" \
#       --mca btl_tcp_if_include "$(netns_subnet_cidr)" ...
#
# Functions (all safe to call from scripts running under `set -euo pipefail`: they never exit the
# caller, they report failure by their return status and a message):
#   netns_can_run              0 if namespaces can be made here; else prints why, returns 1
#   netns_hosts_up PREFIX N    hosts PREFIX1..PREFIXN (the netns names), bridge PREFIXbr at
#                              SUBNET.1/24 in the root namespace, host i at SUBNET.(10+i)/24 on its
#                              eth0 (root-side veth PREFIXv<i>), lo up, default route via SUBNET.1;
#                              removes leftovers of PREFIX first, checks TCP reachability after
#   netns_hosts_down PREFIX    kills processes in the namespaces, deletes them, the veths and the
#                              bridge; idempotent; always returns 0
#   netns_host_ip PREFIX I     prints host I's address
#   netns_subnet_cidr          prints the subnet in CIDR form (10.231.0.0/24 by default)
#   netns_exec PREFIX I CMD..  runs CMD in host I with its own hostname PREFIX<I> (see below)
#   netns_write_rsh PATH       writes an executable ssh stand-in: PATH [ssh opts] HOST CMD...
#                              runs CMD (its words joined with spaces, like ssh) under `sh -c` in
#                              the namespace HOST; exits 255 if HOST is not a namespace.
#                              Set NETNS_RSH_LOG=FILE to append each call's argv to FILE.
#                              The command inherits the caller's whole environment (unlike ssh:
#                              every variable of mpirun's environment reaches the ranks, -x or
#                              not); set NETNS_RSH_CLEAN_ENV=1 for an ssh-like fresh one (PATH,
#                              HOME, USER, LOGNAME, SHELL, LANG only). The command runs in a
#                              private UTS namespace with hostname HOST (NETNS_RSH_HOSTNAME=0: the
#                              machine's); the name is not resolvable (not in /etc/hosts).
#
# Environment: NETNS_SUBNET (first three octets, default 10.231.0; use another one when two test
# runs must coexist, and keep it the same for every call of one run). PREFIX: 1-6 characters,
# [A-Za-z0-9_], starting with a letter and not ending with a digit (so "ab" and "ab1" hosts
# cannot be confused).
#
# Needs root, iproute2 (`ip`) and python3 (the reachability probe; ping is not installed here).

_netns_err() { printf 'netns-hosts: %s\n' "$*" >&2; }

_netns_subnet() { printf '%s\n' "${NETNS_SUBNET:-10.231.0}"; }

netns_subnet_cidr() { printf '%s.0/24\n' "$(_netns_subnet)"; }

_netns_check_prefix() {
  local p=${1:-}
  if [[ ! $p =~ ^[A-Za-z][A-Za-z0-9_]{0,5}$ || $p =~ [0-9]$ ]]; then
    _netns_err "bad PREFIX '$p': 1-6 chars [A-Za-z0-9_], starting with a letter, not ending with a digit"
    return 1
  fi
}

# Prints the namespace names that belong to PREFIX (PREFIX followed by digits only).
_netns_list_ns() {
  local prefix=$1 out name rest
  out=$(ip netns list 2>/dev/null) || out=""
  while read -r name rest; do
    [[ -n ${name:-} && $name =~ ^${prefix}[0-9]+$ ]] && printf '%s\n' "$name"
  done <<<"$out"
  return 0
}

netns_can_run() {
  local probe
  if [[ $(id -u) -ne 0 ]]; then
    echo "netns: not root (network namespaces need root)"
    return 1
  fi
  if ! command -v ip >/dev/null 2>&1; then
    echo "netns: 'ip' (iproute2) is not installed"
    return 1
  fi
  if ! command -v python3 >/dev/null 2>&1; then
    echo "netns: python3 is not installed (needed for the reachability check)"
    return 1
  fi
  probe="nsprobe$$"
  probe=${probe:0:15}
  if ! ip netns add "$probe" >/dev/null 2>&1; then
    echo "netns: 'ip netns add' fails here (no CAP_SYS_ADMIN or no netns support)"
    return 1
  fi
  if ! ip link add "${probe:0:10}b" type bridge >/dev/null 2>&1; then
    ip netns del "$probe" >/dev/null 2>&1 || true
    echo "netns: cannot create a bridge (no bridge support in this kernel)"
    return 1
  fi
  ip link del "${probe:0:10}b" >/dev/null 2>&1 || true
  if ! ip netns del "$probe" >/dev/null 2>&1; then
    echo "netns: 'ip netns del' fails here"
    return 1
  fi
  return 0
}

netns_host_ip() {
  local i=${2:-}
  if [[ ! $i =~ ^[0-9]+$ ]] || ((i < 1 || i > 244)); then
    _netns_err "netns_host_ip: bad host index '$i'"
    return 1
  fi
  printf '%s.%d\n' "$(_netns_subnet)" $((10 + i))
}

netns_hosts_down() {
  local prefix=${1:-} ns pids links name rest
  _netns_check_prefix "$prefix" || return 0
  while read -r ns; do
    [[ -n $ns ]] || continue
    # Kill whatever still runs inside (twice: a dying parent may have just forked).
    pids=$(ip netns pids "$ns" 2>/dev/null) || pids=""
    if [[ -n $pids ]]; then
      # shellcheck disable=SC2086  # word splitting of the pid list is intended
      kill -9 $pids 2>/dev/null || true
      sleep 0.1
      pids=$(ip netns pids "$ns" 2>/dev/null) || pids=""
      # shellcheck disable=SC2086
      [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
    fi
    ip netns del "$ns" >/dev/null 2>&1 || true
  done < <(_netns_list_ns "$prefix")
  # Root-side veth ends that survived (deleting a namespace normally removes its veth pair).
  links=$(ip -o link show 2>/dev/null) || links=""
  while read -r _ name rest; do
    name=${name%%@*}
    name=${name%:}
    if [[ -n ${name:-} && $name =~ ^${prefix}v[0-9]+$ ]]; then
      ip link del "$name" >/dev/null 2>&1 || true
    fi
  done <<<"$links"
  ip link del "${prefix}br" >/dev/null 2>&1 || true
  return 0
}

# _netns_tcp_probe SRC DST IP: a listener bound to IP inside namespace DST, a client connecting to
# it from namespace SRC ("-" = the root namespace). Bounded to ~10 s.
_netns_tcp_probe() {
  local src=$1 dst=$2 ip=$3 out
  # shellcheck disable=SC2016  # python code, not shell
  local code='
import subprocess, sys
src, dst, ip = sys.argv[1:4]
LISTEN = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 0)); s.listen(1); s.settimeout(5)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); c.sendall(b"netns-ok"); c.close()
"""
CONNECT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
d = c.recv(16); sys.exit(0 if d == b"netns-ok" else 3)
"""
def cmd(ns, *a):
    base = [sys.executable, "-c", *a]
    return base if ns == "-" else ["ip", "netns", "exec", ns, *base]
lst = subprocess.Popen(cmd(dst, LISTEN, ip), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
port = lst.stdout.readline().strip()
if not port:
    err = lst.communicate()[1].strip().splitlines()
    sys.exit("cannot listen on %s: %s" % (ip, err[-1] if err else lst.returncode))
try:
    r = subprocess.run(cmd(src, CONNECT, ip, port), timeout=8, capture_output=True, text=True)
    rc, err = r.returncode, r.stderr.strip().splitlines()
except subprocess.TimeoutExpired:
    rc, err = 1, ["timed out"]
lst.kill(); lst.wait()
if rc != 0:
    sys.exit("connect to %s:%s failed: %s" % (ip, port, err[-1] if err else rc))
'
  if ! out=$(timeout 15 python3 -c "$code" "$src" "$dst" "$ip" 2>&1); then
    _netns_err "reachability: ${src/#-/root ns} -> $ip (${dst/#-/root ns}): ${out:-timed out}"
    return 1
  fi
  return 0
}

netns_hosts_up() {
  local prefix=${1:-} n=${2:-} subnet br i ns veth used
  _netns_check_prefix "$prefix" || return 1
  if [[ ! $n =~ ^[0-9]+$ ]] || ((n < 1 || n > 244)); then
    _netns_err "netns_hosts_up: N must be 1..244, got '$n'"
    return 1
  fi
  subnet=$(_netns_subnet)
  if [[ ! $subnet =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]]; then
    _netns_err "NETNS_SUBNET must be three octets like 10.231.0, got '$subnet'"
    return 1
  fi
  br="${prefix}br"
  netns_hosts_down "$prefix"
  # Refuse to shadow a subnet that another bridge (another test run) already uses.
  used=$(ip -4 -o addr show to "${subnet}.0/24" 2>/dev/null) || used=""
  if [[ -n $used ]]; then
    _netns_err "subnet ${subnet}.0/24 is already used in the root namespace: ${used%%$'\n'*}" \
      "(set NETNS_SUBNET to another one)"
    return 1
  fi
  if ! {
    ip link add "$br" type bridge forward_delay 0 &&
      ip addr add "${subnet}.1/24" dev "$br" &&
      ip link set "$br" up
  } >/dev/null; then
    _netns_err "cannot create bridge $br with ${subnet}.1/24"
    netns_hosts_down "$prefix"
    return 1
  fi
  for ((i = 1; i <= n; i++)); do
    ns="${prefix}${i}"
    veth="${prefix}v${i}"
    if ! {
      ip netns add "$ns" &&
        ip link add "$veth" type veth peer name eth0 netns "$ns" &&
        ip link set "$veth" master "$br" up &&
        ip -n "$ns" addr add "${subnet}.$((10 + i))/24" dev eth0 &&
        ip -n "$ns" link set eth0 up &&
        ip -n "$ns" link set lo up &&
        ip -n "$ns" route add default via "${subnet}.1"
    } >/dev/null; then
      _netns_err "cannot set up host $ns (veth $veth, ${subnet}.$((10 + i)))"
      netns_hosts_down "$prefix"
      return 1
    fi
  done
  # Reachability: every host -> root (its veth and the bridge), root -> host 2 (or 1), and
  # host 1 -> host N across the bridge.
  local ok=1 dst=1
  ((n >= 2)) && dst=2
  for ((i = 1; i <= n; i++)); do
    _netns_tcp_probe "${prefix}${i}" - "${subnet}.1" || ok=0
  done
  _netns_tcp_probe - "${prefix}${dst}" "${subnet}.$((10 + dst))" || ok=0
  if ((n >= 2)); then
    _netns_tcp_probe "${prefix}1" "${prefix}${n}" "${subnet}.$((10 + n))" || ok=0
  fi
  if ((ok == 0)); then
    _netns_err "hosts ${prefix}1..${prefix}${n} are not reachable; removing them"
    netns_hosts_down "$prefix"
    return 1
  fi
  return 0
}

# netns_exec PREFIX I CMD [ARGS...]: runs CMD inside host I, with hostname PREFIX<I> (as the rsh
# stand-in does; NETNS_RSH_HOSTNAME=0 keeps the machine's hostname). Returns CMD's status.
netns_exec() {
  local prefix=${1:-} i=${2:-} ns
  if (($# < 3)); then
    _netns_err "usage: netns_exec PREFIX I CMD [ARGS...]"
    return 1
  fi
  shift 2
  ns="${prefix}${i}"
  if [[ ! -e /run/netns/$ns ]]; then
    _netns_err "netns_exec: no host $ns"
    return 1
  fi
  if [[ ${NETNS_RSH_HOSTNAME:-1} == 1 ]] && command -v unshare >/dev/null 2>&1; then
    # shellcheck disable=SC2016  # expanded by the inner sh
    ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
  else
    ip netns exec "$ns" "$@"
  fi
}

netns_write_rsh() {
  local path=${1:-}
  if [[ -z $path ]]; then
    _netns_err "netns_write_rsh: PATH missing"
    return 1
  fi
  if ! cat >"$path" <<'RSH'; then
#!/usr/bin/env bash
# ssh stand-in for network-namespace test hosts (written by scripts/testenv/netns-hosts.sh).
# Usage: THIS [ssh options] [user@]HOST [COMMAND...]
# Runs COMMAND (its words joined with spaces, as ssh does) with `sh -c` inside the network
# namespace HOST. Works as Open MPI's plm_rsh_agent, which passes the command as several words
# that the remote shell must re-parse (e.g. ` orted` ... `"env"` with literal quotes).
# NETNS_RSH_LOG=FILE appends each call's argv to FILE; NETNS_RSH_CLEAN_ENV=1 gives the command an
# ssh-like fresh environment instead of the caller's.
if [[ -n ${NETNS_RSH_LOG:-} ]]; then
  { printf '%q ' "$0" "$@"; printf '\n'; } >>"$NETNS_RSH_LOG" 2>/dev/null || true
fi
while (($# > 0)); do
  case $1 in
    --) shift; break ;;
    -[BbcDEeFIiJLlmOopQRSWw])   # ssh options that take a value
      if (($# < 2)); then echo "netns-rsh: option $1 needs a value" >&2; exit 255; fi
      shift 2 ;;
    -*) shift ;;                # flags (-x, -T, -n, -q, -4, ...) and -oKey=value forms
    *) break ;;
  esac
done
if (($# == 0)); then
  echo "netns-rsh: usage: $0 [ssh options] HOST [COMMAND...]" >&2
  exit 255
fi
host=${1#*@}
shift
nslist=$(ip netns list 2>/dev/null) || nslist=""
found=0
while read -r name _; do
  [[ ${name:-} == "$host" ]] && found=1
done <<<"$nslist"
if [[ $found -ne 1 || $host == */* ]]; then
  echo "netns-rsh: $host: no such network namespace (see 'ip netns list')" >&2
  exit 255
fi
envcmd=()
if [[ ${NETNS_RSH_CLEAN_ENV:-0} == 1 ]]; then
  # Like ssh: the remote side gets a fresh environment, not the caller's.
  envcmd=(env -i "PATH=${PATH:-/usr/local/bin:/usr/bin:/bin}" "HOME=${HOME:-/root}"
    "USER=${USER:-root}" "LOGNAME=${LOGNAME:-root}" "SHELL=/bin/sh" "LANG=${LANG:-C.UTF-8}")
fi
# Give the fake host its own hostname (a private UTS namespace): all namespaces share the
# machine's hostname otherwise, and programs that key on it (Open MPI's shared-memory BTL names
# its segments after it) mix up the hosts. NETNS_RSH_HOSTNAME=0 keeps the machine's hostname.
uts=()
if [[ ${NETNS_RSH_HOSTNAME:-1} == 1 ]] && command -v unshare >/dev/null 2>&1; then
  uts=(unshare --uts)
fi
if ((${#uts[@]} > 0)); then
  # shellcheck disable=SC2016  # expanded by the inner sh
  set -- 'hostname "$0" && exec sh -c "$1"' "$host" "${*:-exec sh}"
else
  set -- "${*:-exec sh}"
fi
# No command: like ssh, read commands from stdin.
exec ip netns exec "$host" "${envcmd[@]}" "${uts[@]}" sh -c "$@"
RSH
    _netns_err "netns_write_rsh: cannot write $path"
    return 1
  fi
  chmod 0755 "$path" || {
    _netns_err "netns_write_rsh: cannot chmod $path"
    return 1
  }
  return 0
}
