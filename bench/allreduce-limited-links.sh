#!/usr/bin/env bash
# allreduce-limited-links.sh: all-reduce against the bandwidth bound on rate-limited links
# between real separate hosts. Every rank of syncline-bench-allreduce (bench/allreduce_bench.cc:
# Syncline's ring beside Gloo's ring, ring-chunked and halving-doubling and Open MPI's
# MPI_Allreduce) runs on a host of its own: a network namespace on a bridge (see
# scripts/testenv/netns-hosts.sh), started by mpirun in the root namespace through a netns
# stand-in for ssh. Each host's link is limited in BOTH directions with tc tbf:
#
#   tc qdisc add dev eth0 root tbf rate RATE burst BURST latency 50ms     (in each namespace:
#                                                                          what the host sends)
#   tc qdisc add dev slarv<i> root tbf rate RATE burst BURST latency 50ms (root-side veth end:
#                                                                          what it receives)
#
# BURST is 32kb by default, not the 256kb of multihost-bottleneck.sh: the bucket refills while
# the ranks wait between ops, and a full bucket lets the first BURST bytes of every op through
# at the veth's speed, which a real link never does (with 256kb a 1 MiB op at N = 2 beat the
# bound by 1.25x). A smaller bucket needs smaller packets: tbf cuts every GSO packet larger
# than its bucket into 1514-byte frames in software, and with 16kb buckets and the kernel's
# 64 KiB GSO packets the softirq work took 69% of this 2-core machine at N = 4 (CPU-bound,
# 0.83 of the bound at 64 MiB). So every veth end's gso_max_size is set to 16384 (--gso-max):
# such packets (at most 12 frames, 18.2 KB) pass a 32kb bucket whole. The credit of one bucket
# is then worth 0.9 ms at 300mbit, at most 3% of a 1 MiB op at N = 2.
#
# The bound. A ring all-reduce of D bytes over N ranks moves 2(N-1)/N*D bytes through every
# rank's link each way, so its time is at least 2(N-1)/N*D/B and busbw = algbw*2(N-1)/N (as
# nccl-tests defines it) is at most B, the link's payload rate. tbf counts whole Ethernet
# frames (14 B header + IP packet); a full TCP segment carries 1448 B of payload in a 1514 B
# frame (MTU 1500 less 20 B IP, 20 B TCP, 12 B timestamps), so B = RATE/8 * 1448/1514. The
# script also MEASURES B: one TCP stream (one large send, host 1 -> host 2, about --probe-s
# seconds at the rate) under the same limits, payload bytes over time after the first 0.5 s;
# and both directions at once (host 1 <-> host 2, as a ring's hosts send and receive at once:
# the ACKs of the incoming stream then share the outgoing link). The ratios use the measured
# one-stream B.
#
# The bench binds its Syncline and Gloo sockets to 127.0.0.1, which is no address between hosts.
# Without changing it, every rank runs with a small LD_PRELOAD shim (built here from C in this
# script) that turns bind() to 127.0.0.1 into bind() to the host's eth0 address (same port):
# the addresses the ranks exchange (ZeroMQ's last endpoint, Gloo's getsockname) are then the
# hosts' own. MPI is told to use the hosts' subnet (btl self,tcp; pml ob1).
#
# Output: the bench's own tables per N, then per N and size for each implementation: time/op,
# busbw (MB/s = 1e6 B/s), B, busbw/B, the machine's CPU busy share during that figure (all
# cores, every process on the machine: the hosts share them), its irq+softirq and steal parts,
# and the bench's "other" share; last a table of busbw/B. The CPU must not be the bottleneck:
# compare a pass at a lower --rate (the ratios should not rise much) and read the cpu column.
#
# Usage: bench/allreduce-limited-links.sh [--build DIR] [--np "2 4"] [--rate 300mbit]
#            [--burst 32kb] [--gso-max 16384] [--min-kib 1024] [--max-mib 64] [--factor 4]
#            [--impls LIST] [--probe-s S] [-- BENCH_ARGS...]
#   --build DIR    the build folder (default: build/ beside this script's folder); its
#                  bench/syncline-bench-allreduce is copied to a private folder and the copy run
#   --np LIST      rank counts, one host each (default "2 4"; 2..16)
#   --rate R       tbf rate of every host's link, each direction (default 300mbit)
#   --burst S      tbf bucket size (default 32kb)
#   --gso-max B    gso_max_size of every veth end, bytes (default 16384; 0: the kernel's)
#   --min-kib K, --max-mib M, --factor F   sizes K KiB .. M MiB stepping by F (default 1024, 64,
#                  4: 1, 4, 16, 64 MiB)
#   --impls LIST   (default syncline-ring,gloo-ring,gloo-ring-chunked,gloo-halving-doubling,mpi)
#   --probe-s S    length of each link probe (default 6)
#   BENCH_ARGS     more flags for every rank (not the ones above), e.g. --budget-s 2, --quick,
#                  --retries 0 (by default a figure taken while other processes used over 10%
#                  of the cores is taken again, up to twice, and the quietest kept)
# At 300mbit the default --np "2 4" takes about 6 minutes (N = 2: 116 s, N = 4: 219 s); N = 8
# adds about 8 (466 s; Gloo's unchunked ring alone takes 14.5 s an op at 64 MiB).
# Needs root, iproute2 with tc (sch_tbf), python3, a C compiler, mpirun (openmpi-bin).
# Exit status: 0 ok, 1 a run failed, 2 bad usage, 77 this machine cannot make network
# namespaces. KEEP_TMP=1 keeps the run folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
nps="2 4"
rate=300mbit
burst=32kb
gso_max=16384
min_kib=1024
max_mib=64
factor=4
impls=syncline-ring,gloo-ring,gloo-ring-chunked,gloo-halving-doubling,mpi
probe_s=6
bench_args=()
while (($# > 0)); do
  case $1 in
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --np) nps=${2:?--np needs a list}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --burst) burst=${2:?--burst needs a size}; shift 2 ;;
    --gso-max) gso_max=${2:?--gso-max needs a byte count}; shift 2 ;;
    --min-kib) min_kib=${2:?--min-kib needs a number}; shift 2 ;;
    --max-mib) max_mib=${2:?--max-mib needs a number}; shift 2 ;;
    --factor) factor=${2:?--factor needs a number}; shift 2 ;;
    --impls) impls=${2:?--impls needs a list}; shift 2 ;;
    --probe-s) probe_s=${2:?--probe-s needs a number}; shift 2 ;;
    --) shift; bench_args=("$@"); break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "allreduce-limited-links: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
usage_error() { echo "allreduce-limited-links: $*" >&2; exit 2; }
[[ $rate =~ ^([0-9]+([.][0-9]+)?)([kmg]?)bit$ ]] || usage_error "bad --rate '$rate' (e.g. 300mbit)"
rate_bits=$(awk -v v="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" \
  'BEGIN { m = u == "k" ? 1e3 : u == "m" ? 1e6 : u == "g" ? 1e9 : 1; printf "%.0f", v * m }')
[[ $burst =~ ^[0-9]+[km]?b$ ]] || usage_error "bad --burst '$burst' (e.g. 16kb)"
[[ $gso_max =~ ^[0-9]+$ ]] || usage_error "bad --gso-max '$gso_max' (bytes)"
[[ $nps =~ ^[[:space:]]*[0-9]+([[:space:]]+[0-9]+)*[[:space:]]*$ ]] || usage_error "bad --np '$nps'"
max_n=2
for n in $nps; do
  ((n >= 2 && n <= 16)) || usage_error "--np: each count must be 2..16, got $n"
  ((n > max_n)) && max_n=$n
done
for v in min_kib max_mib factor probe_s; do
  [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || usage_error "--${v//_/-}: not a positive count: '${!v}'"
done
[[ $impls =~ ^[a-z-]+(,[a-z-]+)*$ ]] || usage_error "bad --impls '$impls'"
for a in "${bench_args[@]}"; do
  case $a in
    --min-kib* | --max-mib* | --factor* | --impls*)
      usage_error "give $a as the script's own option, not in BENCH_ARGS" ;;
  esac
done
build=$(cd "$build" && pwd)
bin_src="$build/bench/syncline-bench-allreduce"
[[ -x $bin_src ]] || {
  echo "allreduce-limited-links: no $bin_src (ninja -C $build syncline-bench-allreduce)" >&2
  exit 1
}

P=slar
export NETNS_SUBNET=10.235.0
# shellcheck source=scripts/testenv/netns-hosts.sh disable=SC1091
source "$root/scripts/testenv/netns-hosts.sh"
if ! reason=$(netns_can_run); then
  echo "SKIP: $reason"
  exit 77
fi
for c in tc mpirun cc python3; do
  command -v "$c" >/dev/null || {
    echo "allreduce-limited-links: $c is not installed (tc: iproute2, mpirun: openmpi-bin," \
      "cc: gcc)" >&2
    exit 1
  }
done

LIMIT="rate $rate burst $burst latency 50ms"
tmp=$(mktemp -d /tmp/allreduce-limited-links.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  netns_hosts_down "$P" # kills whatever still runs in the hosts, deletes them, veths, bridge
  if [[ -n ${KEEP_TMP:-} ]]; then echo "run folder kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
  echo "allreduce-limited-links: FAIL: $*" >&2
  exit 1
}
started=$(date +%s)

# A private copy of the bench: the build folder may be rebuilt while this runs.
mkdir "$tmp/bin"
cp "$bin_src" "$tmp/bin/syncline-bench-allreduce" || fail "cannot copy $bin_src"
bench="$tmp/bin/syncline-bench-allreduce"

# The bind shim: bind() to 127.0.0.1 becomes bind() to $SLAR_BIND_ADDR (the host's address).
cat >"$tmp/bindshim.c" <<'C'
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

int bind(int fd, const struct sockaddr* addr, socklen_t len) {
  static int (*real_bind)(int, const struct sockaddr*, socklen_t);
  if (real_bind == NULL) {
    real_bind = (int (*)(int, const struct sockaddr*, socklen_t))dlsym(RTLD_NEXT, "bind");
  }
  const char* to = getenv("SLAR_BIND_ADDR");
  if (to != NULL && addr != NULL && addr->sa_family == AF_INET &&
      len >= (socklen_t)sizeof(struct sockaddr_in)) {
    struct sockaddr_in in = *(const struct sockaddr_in*)addr;
    if (in.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && inet_pton(AF_INET, to, &in.sin_addr) == 1) {
      if (getenv("SLAR_BIND_LOG") != NULL) {
        fprintf(stderr, "bindshim: bind(127.0.0.1:%u) -> %s\n", ntohs(in.sin_port), to);
      }
      return real_bind(fd, (const struct sockaddr*)&in, sizeof in);
    }
  }
  return real_bind(fd, addr, len);
}
C
cc -O2 -shared -fPIC -o "$tmp/bin/bindshim.so" "$tmp/bindshim.c" -ldl || fail "cannot build the bind shim"
# Every rank: the shim on, bound to its host's eth0 address.
cat >"$tmp/bin/rank.sh" <<SH
#!/bin/sh
addr=\$(ip -4 -o addr show dev eth0 | awk '{ sub(/\/.*/, "", \$4); print \$4; exit }')
[ -n "\$addr" ] || { echo "rank.sh: no IPv4 address on eth0" >&2; exit 1; }
SLAR_BIND_ADDR=\$addr LD_PRELOAD=$tmp/bin/bindshim.so exec $bench "\$@"
SH
chmod +x "$tmp/bin/rank.sh"

netns_hosts_up "$P" "$max_n" || fail "could not make the network-namespace hosts"
rsh="$tmp/rsh"
netns_write_rsh "$rsh"
cidr=$(netns_subnet_cidr)
for ((i = 1; i <= max_n; i++)); do
  if ((gso_max > 0)); then
    ip -n "$P$i" link set dev eth0 gso_max_size "$gso_max" || fail "gso_max_size on $P$i's eth0"
    ip link set dev "${P}v$i" gso_max_size "$gso_max" || fail "gso_max_size on ${P}v$i"
  fi
  # shellcheck disable=SC2086  # $LIMIT is several words
  ip netns exec "$P$i" tc qdisc add dev eth0 root tbf $LIMIT || fail "tc on $P$i's eth0"
  # shellcheck disable=SC2086
  tc qdisc add dev "${P}v$i" root tbf $LIMIT || fail "tc on ${P}v$i"
done
mtu=$(ip netns exec "${P}1" cat /sys/class/net/eth0/mtu)
gso=$(ip -d -n "${P}1" link show dev eth0 | grep -o 'gso_max_size [0-9]*' || true)
echo "== $max_n hosts ${P}1..${P}$max_n on bridge ${P}br ($cidr), MTU $mtu, ${gso:-gso_max_size ?};" \
  "every host's link: tbf $LIMIT, both directions"

# The link probe: "recv IP" prints its port, then (after EOF) the payload bytes and seconds
# after the first 0.5 s; "send IP PORT BYTES" sends BYTES in one stream.
cat >"$tmp/probe.py" <<'PY'
import socket, sys, time
if sys.argv[1] == "recv":
    s = socket.socket()
    s.bind((sys.argv[2], 0))
    s.listen(1)
    s.settimeout(60)
    print(s.getsockname()[1], flush=True)
    c, _ = s.accept()
    c.settimeout(120)
    buf = bytearray(1 << 22)
    view = memoryview(buf)
    total, t_first, mark_t, mark_b = 0, None, None, 0
    while True:
        k = c.recv_into(view)
        now = time.time()
        if k == 0:
            break
        if t_first is None:
            t_first = now
        total += k
        if mark_t is None and now - t_first >= 0.5:
            mark_t, mark_b = now, total
    end = now
    if mark_t is None:
        mark_t, mark_b = t_first, 0
    print(total - mark_b, end - mark_t, total, end - t_first, flush=True)
else:
    ip, port, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    c = socket.create_connection((ip, port), timeout=30)
    c.settimeout(120)
    chunk = b"\0" * (1 << 22)
    left = n
    while left > 0:
        m = c.sendall(chunk[: min(left, len(chunk))])
        left -= min(left, len(chunk))
    c.close()
PY
probe_bytes=$((rate_bits * probe_s / 8))
# probe "SRC DST" pairs...: all streams at once; prints each receiver's steady MB/s. Runs in a
# command substitution: what it leaves behind on failure dies with the hosts.
probe() {
  local pair src dst port rdir
  local recvs=() sends=() outs=()
  rdir=$(mktemp -d "$tmp/probe.XXXX")
  for pair in "$@"; do
    src=${pair% *}
    dst=${pair#* }
    ip netns exec "$P$dst" python3 "$tmp/probe.py" recv "$(netns_host_ip "$P" "$dst")" \
      >"$rdir/$src-$dst" 2>"$rdir/$src-$dst.err" &
    recvs+=("$!")
    outs+=("$rdir/$src-$dst")
  done
  for pair in "$@"; do
    src=${pair% *}
    dst=${pair#* }
    for _ in $(seq 100); do [[ -s $rdir/$src-$dst ]] && break; sleep 0.05; done
    port=$(head -1 "$rdir/$src-$dst")
    [[ -n $port ]] || fail "link probe: no receiver on host $dst"
    ip netns exec "$P$src" timeout 120 python3 "$tmp/probe.py" send \
      "$(netns_host_ip "$P" "$dst")" "$port" "$probe_bytes" 2>"$rdir/$src-$dst.send.err" &
    sends+=("$!")
  done
  for p in "${sends[@]}" "${recvs[@]}"; do wait "$p" || fail "link probe failed ($rdir)"; done
  for o in "${outs[@]}"; do
    awk 'NR == 2 { printf "%.2f\n", $1 / $2 / 1e6 }' "$o"
  done
}
one=$(probe "1 2")
both=$(probe "1 2" "2 1" | awk '{ s += $1; n++ } END { printf "%.2f", s / n }')
frame_b=$(awk -v r="$rate_bits" -v m="$mtu" 'BEGIN { printf "%.2f", r / 8 * (m - 52) / (m + 14) / 1e6 }')
echo "== link payload rate B (MB/s = 1e6 B/s): tbf $rate = $(awk -v r="$rate_bits" \
  'BEGIN { printf "%.2f", r / 8e6 }') MB/s of frames, $frame_b MB/s of TCP payload in full" \
  "frames; measured: one stream $one MB/s, both directions at once $both MB/s each"
cat >"$tmp/link.txt" <<EOF
rate $rate
rate_bits $rate_bits
frame_payload $frame_b
one_stream $one
both_ways $both
EOF

# The machine's CPU, every 0.2 s: "unix_time busy total irq+softirq steal" (/proc/stat ticks,
# all cores; busy counts irq, softirq and steal too).
python3 - >"$tmp/cpu.samples" <<'PY' &
import time
end = time.time() + 3 * 3600
while time.time() < end:
    f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    busy = f[0] + f[1] + f[2] + f[5] + f[6] + f[7]
    print("%.3f %d %d %d %d" % (time.time(), busy, busy + f[3] + f[4], f[5] + f[6], f[7]),
          flush=True)
    time.sleep(0.2)
PY
pids+=("$!")
base_pids=${#pids[@]}

# run.py OUT CMD...: runs CMD, echoing its output and writing "unix_time<TAB>line" to OUT;
# on SIGTERM it stops CMD.
cat >"$tmp/run.py" <<'PY'
import signal, subprocess, sys, time
out = open(sys.argv[1], "w")
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                     errors="replace")
def stop(*_):
    p.terminate()
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        p.kill()
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
for line in p.stdout:
    out.write("%.3f\t%s" % (time.time(), line))
    out.flush()
    sys.stdout.write(line)
    sys.stdout.flush()
sys.exit(p.wait())
PY

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(--min-kib "$min_kib" --max-mib "$max_mib" --factor "$factor" --impls "$impls"
  "${bench_args[@]}")
for n in $nps; do
  hostfile="$tmp/hosts.$n"
  for ((i = 1; i <= n; i++)); do echo "$P$i slots=1"; done >"$hostfile"
  echo
  echo "== N=$n, one rank on each of ${P}1..${P}$n (load average $(cut -d' ' -f1-3 /proc/loadavg)):" \
    "mpirun -np $n --map-by node --bind-to none --mca pml ob1 --mca btl self,tcp" \
    "syncline-bench-allreduce ${args[*]}"
  python3 "$tmp/run.py" "$tmp/stamps.$n" timeout 1800 mpirun --hostfile "$hostfile" -np "$n" \
    --map-by node --bind-to none --mca plm_rsh_agent "$rsh" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$cidr" --mca btl_tcp_if_include "$cidr" \
    --mca pml ob1 --mca btl self,tcp "$tmp/bin/rank.sh" "${args[@]}" &
  runner=$!
  pids+=("$runner")
  n_started=$(date +%s)
  wait "$runner" || fail "N=$n: the bench failed (output above)"
  pids=("${pids[@]:0:$base_pids}")
  echo "== N=$n took $(($(date +%s) - n_started)) s"
done

cat >"$tmp/analyse.py" <<'PY'
import bisect, re, sys
tmp, nps = sys.argv[1], [int(x) for x in sys.argv[2].split()]
link = dict(l.split() for l in open(tmp + "/link.txt"))
B = float(link["one_stream"])
cpu = [tuple(map(float, l.split())) for l in open(tmp + "/cpu.samples") if len(l.split()) == 5]
ts = [c[0] for c in cpu]
def busy(a, b):  # the machine's busy, softirq and steal shares between unix times a and b
    i = max(bisect.bisect_left(ts, a) - 1, 0)
    j = min(bisect.bisect_left(ts, b), len(cpu) - 1)
    dt = cpu[j][2] - cpu[i][2]
    if dt <= 0:
        return (float("nan"),) * 3
    return tuple(100.0 * (cpu[j][k] - cpu[i][k]) / dt for k in (1, 3, 4))
row = re.compile(r"^\s*(\d+)([KM])\s+(\S+)\s+([\d.]+) (us|ms|s)\s+[\d.]+\s+[\d.]+\s+(\d+) x (\d+)"
                 r"\s+(\S+)")
unit = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
print("Busbw against the link bound (MB/s = 1e6 B/s). B = one TCP stream's measured payload "
      "rate, %.2f MB/s\n(tbf %s; full-frame payload %s MB/s; both directions at once %s MB/s "
      "each). busbw = D/time * 2(N-1)/N.\ncpu = the machine's busy share (all cores, every "
      "process, irq, softirq and steal included) while the\nfigure was taken, sirq = its irq "
      "and softirq part, steal = time the hypervisor gave to others;\nother = the bench's "
      "share of the cores used by other processes in its samples." % (B, link["rate"], link["frame_payload"],
                                          link["both_ways"]))
table = {}
for n in nps:
    lines = [l.rstrip("\n").split("\t", 1) for l in open("%s/stamps.%d" % (tmp, n))]
    start = next((float(t) for t, l in lines if l.strip().startswith("bytes ")), float(lines[0][0]))
    print("\nN=%d\n%7s  %-22s %11s %11s %8s %8s %5s %5s %5s %6s" % (
        n, "size", "implementation", "time/op", "busbw MB/s", "B MB/s", "busbw/B", "cpu", "sirq",
        "steal", "other"))
    prev = start
    for t, l in lines:
        m = row.match(l)
        if not m:
            continue
        t = float(t)
        size = int(m.group(1)) * (2**20 if m.group(2) == "M" else 2**10)
        sec = float(m.group(4)) * unit[m.group(5)]
        bus = size / sec * 2 * (n - 1) / n / 1e6
        impl = m.group(3)
        table.setdefault(impl, {})[(n, size)] = bus / B
        print("%5d %s  %-22s %8.2f ms %11.2f %8.2f %8.3f %4.0f%% %4.0f%% %4.0f%% %6s" % (
            size // (2**20 if size >= 2**20 else 2**10), "MiB" if size >= 2**20 else "KiB", impl,
            sec * 1e3, bus, B, bus / B, *busy(prev, t), m.group(8)))
        prev = t
sizes = sorted({k[1] for v in table.values() for k in v})
print("\nbusbw / B (B = %.2f MB/s, one stream measured):" % B)
head = "%-22s %3s " % ("implementation", "N") + " ".join(
    "%7s" % ("%dMiB" % (s >> 20) if s >= 2**20 else "%dKiB" % (s >> 10)) for s in sizes)
print(head)
for impl, v in table.items():
    for n in nps:
        if any(k[0] == n for k in v):
            print("%-22s %3d " % (impl, n) + " ".join(
                "%7.3f" % v[(n, s)] if (n, s) in v else "%7s" % "-" for s in sizes))
PY
echo
python3 "$tmp/analyse.py" "$tmp" "$nps" || fail "cannot analyse the runs"
echo
echo "allreduce-limited-links: ok ($(($(date +%s) - started)) s)"
