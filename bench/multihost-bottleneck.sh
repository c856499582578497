#!/usr/bin/env bash
# multihost-bottleneck.sh: the parameter-server bottleneck across real separate hosts with
# limited links. Every node runs on a host of its own (a network namespace on a bridge; see
# scripts/testenv/netns-hosts.sh): servers on hosts 1-2, workers on hosts 3-6, the coordinator
# (syncline-launch --external-workers --launcher ssh) in the root namespace. Each host's eth0
# is limited to 1 Gbit/s:
#
#   tc qdisc add dev eth0 root tbf rate 1gbit burst 256kb latency 50ms   (in each namespace)
#
# For servers in {1,2} x workers in {1,2,3,4} it runs a job of syncline-bench-link workers
# (bench/link_bench.cc: dense pushes of a 16 MiB table in 1 MiB requests for --seconds, then
# pulls), plaintext (--insecure), ASP, and prints per-worker and aggregate push and pull MB/s
# (1e6 value bytes/s), the busiest server link's MB/s (tx+rx bytes on its eth0 while every
# worker was in that phase, from counters sampled every 50 ms), and CPU use in the phase (the
# busiest syncline-ps, the workers, and the whole machine, whose cores all hosts share). Then a
# table of the bytes through every host's link over each whole job
# (/sys/class/net/eth0/statistics before and after).
# In the same run: 1 server + 1 worker without tc (the unlimited baseline), and 1 + 1 with
# CURVE (the default off loopback) under tc.
#
# A tbf root qdisc shapes what a host SENDS only. With --duplex the sweep is run once more
# with each host's receiving direction limited as well (a tbf on the root-side veth end, whose
# egress is the host's ingress), as a real full-duplex 1 Gbit/s link would be.
#
# Usage: bench/multihost-bottleneck.sh [--build DIR] [--seconds S] [--duplex] [--no-curve]
#                                      [--servers "1 2"] [--workers "1 2 3 4"] [--bench-args A]
#   --build DIR      the build folder (default: build/ beside this script's folder)
#   --seconds S      length of each push and each pull phase (default 5)
#   --duplex         also run the sweep with both directions of every link limited
#   --no-curve       skip the CURVE case
#   --servers LIST, --workers LIST   the sweep's server and worker counts (at most 2 and 4)
#   --bench-args A   more flags for every syncline-bench-link, e.g. "--window 16"
# Needs root, iproute2 with tc (sch_tbf), python3. Exit status: 0 ok, 1 a run failed, 2 bad
# usage, 77 this machine cannot make network namespaces. KEEP_TMP=1 keeps the run folders.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
phase_s=5
duplex=0
curve=1
server_counts="1 2"
worker_counts="1 2 3 4"
bench_args=""
while (($# > 0)); do
  case $1 in
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --seconds) phase_s=${2:?--seconds needs a number}; shift 2 ;;
    --duplex) duplex=1; shift ;;
    --no-curve) curve=0; shift ;;
    --servers) server_counts=${2:?--servers needs a list}; shift 2 ;;
    --workers) worker_counts=${2:?--workers needs a list}; shift 2 ;;
    --bench-args) bench_args=${2?--bench-args needs a value}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "multihost-bottleneck: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
usage_error() { echo "multihost-bottleneck: $*" >&2; exit 2; }
[[ $phase_s =~ ^[0-9]+([.][0-9]+)?$ ]] || usage_error "bad --seconds '$phase_s'"
[[ $server_counts =~ ^[[:space:]]*[12]([[:space:]]+[12])*[[:space:]]*$ ]] ||
  usage_error "--servers: a list of 1 and 2, got '$server_counts'"
[[ $worker_counts =~ ^[[:space:]]*[1-4]([[:space:]]+[1-4])*[[:space:]]*$ ]] ||
  usage_error "--workers: a list of 1..4, got '$worker_counts'"
build=$(cd "$build" && pwd)
for b in bin/syncline-launch bin/syncline-ps bench/syncline-bench-link; do
  [[ -x $build/$b ]] || {
    echo "multihost-bottleneck: $build/$b is missing (ninja -C $build ${b##*/})" >&2
    exit 1
  }
done

P=slbn
export NETNS_SUBNET=10.233.0
# shellcheck source=scripts/testenv/netns-hosts.sh
source "$root/scripts/testenv/netns-hosts.sh"
if ! reason=$(netns_can_run); then
  echo "SKIP: $reason"
  exit 77
fi
command -v tc >/dev/null || { echo "multihost-bottleneck: tc (iproute2) is not installed" >&2; exit 1; }

HOSTS=6 # servers on hosts 1-2, workers on hosts 3-6
LIMIT="rate 1gbit burst 256kb latency 50ms"
tmp=$(mktemp -d /tmp/multihost-bottleneck.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  netns_hosts_down "$P"
  if [[ -n ${KEEP_TMP:-} ]]; then echo "run folders kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
  echo "multihost-bottleneck: FAIL: $*" >&2
  local f
  for f in "${case_dir:-/nonexistent}"/*.log; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -15 "$f" >&2; }
  done
  if grep -qs "start every node from the same build" "${case_dir:-/nonexistent}"/*.log; then
    echo "(the binaries are of different builds: ninja -C $build syncline-launch" \
      "syncline-ps syncline-bench-link)" >&2
  fi
  exit 1
}

# A copy of the binaries, so that a rebuild while the sweep runs cannot mix builds (nodes of
# another build are refused). syncline-launch finds syncline-ps beside itself.
mkdir "$tmp/bin"
for b in bin/syncline-launch bin/syncline-ps bench/syncline-bench-link; do
  cp "$build/$b" "$tmp/bin/" || fail "cannot copy $build/$b"
done
launch="$tmp/bin/syncline-launch"
bench="$tmp/bin/syncline-bench-link"

started=$(date +%s)
netns_hosts_up "$P" "$HOSTS" || fail "could not make the network-namespace hosts"
rsh="$tmp/rsh"
netns_write_rsh "$rsh"

# shape on|off [duplex]: each host's eth0 (its sending side), and with duplex also the
# root-side veth end (its receiving side).
shape() {
  local i
  for ((i = 1; i <= HOSTS; i++)); do
    ip netns exec "$P$i" tc qdisc del dev eth0 root 2>/dev/null || true
    tc qdisc del dev "${P}v$i" root 2>/dev/null || true
    if [[ $1 == on ]]; then
      # shellcheck disable=SC2086  # $LIMIT is several words
      ip netns exec "$P$i" tc qdisc add dev eth0 root tbf $LIMIT || fail "tc on $P$i's eth0"
      if [[ ${2:-} == duplex ]]; then
        # shellcheck disable=SC2086
        tc qdisc add dev "${P}v$i" root tbf $LIMIT || fail "tc on ${P}v$i"
      fi
    fi
  done
}

# counters FILE: "host tx rx" of every host's eth0.
counters() {
  local i
  for ((i = 1; i <= HOSTS; i++)); do
    echo "$i $(ip netns exec "$P$i" cat /sys/class/net/eth0/statistics/tx_bytes)" \
      "$(ip netns exec "$P$i" cat /sys/class/net/eth0/statistics/rx_bytes)"
  done >"$1"
}

# Runs inside a host: every 50 ms (until killed, or 600 s) prints "unix_time tx rx busy total
# ps" = eth0's byte counters, the machine's busy and total CPU ticks (/proc/stat: every
# process on the machine, not only this benchmark's), and the CPU ticks of this host's
# syncline-ps (-1 until it is found).
SAMPLER='
import os, time
me = os.readlink("/proc/self/ns/net")
def find_ps():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if (open("/proc/%s/comm" % pid).read().strip() == "syncline-ps"
                    and os.readlink("/proc/%s/ns/net" % pid) == me):
                return pid
        except OSError:
            pass
    return None
ps = None
end = time.time() + 600
while time.time() < end:
    t = time.time()
    tx = open("/sys/class/net/eth0/statistics/tx_bytes").read().strip()
    rx = open("/sys/class/net/eth0/statistics/rx_bytes").read().strip()
    cpu = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    ticks = -1
    ps = ps or find_ps()
    if ps:
        try:
            f = open("/proc/%s/stat" % ps).read().rsplit(")", 1)[1].split()
            ticks = int(f[11]) + int(f[12])
        except (OSError, IndexError, ValueError):
            ps = None
    print(t, tx, rx, sum(cpu) - cpu[3] - cpu[4], sum(cpu), ticks, flush=True)
    time.sleep(0.05)
'

# analyse.py case CASE_DIR LABEL SERVERS WORKERS LINK SECURITY RESULTS: one JSON line per case;
# analyse.py report RESULTS: the tables.
cat >"$tmp/analyse.py" <<'PY'
import bisect, json, os, sys

def case(case_dir, label, servers, workers, link, security, results):
    servers, workers = int(servers), int(workers)
    ws = []
    for r in range(workers):
        lines = [l for l in open(os.path.join(case_dir, "w%d.out" % r))
                 if l.startswith("link_bench ")]
        if not lines:
            sys.exit("worker %d printed no link_bench line" % r)
        ws.append({k: float(v) for k, v in (f.split("=", 1) for f in lines[-1].split()[1:])})

    def samples(i):
        rows = [list(map(float, l.split()))
                for l in open(os.path.join(case_dir, "samples.%d" % i)) if len(l.split()) == 6]
        if len(rows) < 4:
            sys.exit("too few link samples on host %d" % i)
        return rows

    def at(rows, t, col):  # column `col` (tx, rx, busy, total, ps) interpolated at time t
        ts = [r[0] for r in rows]
        k = min(max(bisect.bisect_left(ts, t), 1), len(rows) - 1)
        (t0, *a), (t1, *b) = rows[k - 1], rows[k]
        f = 0 if t1 == t0 else min(max((t - t0) / (t1 - t0), 0), 1)
        return a[col] + f * (b[col] - a[col])

    def window(phase):  # while every worker was in `phase` (all of it if that is short)
        a = max(w[phase + "_t0"] for w in ws)
        b = min(w[phase + "_t1"] for w in ws)
        if b - a < 0.5:
            a = min(w[phase + "_t0"] for w in ws)
            b = max(w[phase + "_t1"] for w in ws)
        return a, b

    tick = os.sysconf("SC_CLK_TCK")
    srv = {i: samples(i) for i in range(1, servers + 1)}
    out = {"label": label, "servers": servers, "workers": workers, "link": link,
           "security": security, "table_bytes": ws[0]["table_bytes"],
           "request_bytes": ws[0]["request_bytes"], "window": ws[0]["window"],
           "seconds": ws[0]["push_s"],
           "skew": max(w["push_t0"] for w in ws) - min(w["push_t0"] for w in ws)}
    for phase in ("push", "pull"):
        mb = [w[phase + "_MBps"] for w in ws]
        a, b = window(phase)
        link_mbps, ps_cpu = 0, 0
        for rows in srv.values():
            moved = (at(rows, b, 0) - at(rows, a, 0)) + (at(rows, b, 1) - at(rows, a, 1))
            link_mbps = max(link_mbps, moved / (b - a) / 1e6)
            if at(rows, a, 4) >= 0:
                ps_cpu = max(ps_cpu, (at(rows, b, 4) - at(rows, a, 4)) / tick / (b - a) * 100)
        rows = srv[1]
        busy = (at(rows, b, 2) - at(rows, a, 2)) / max(at(rows, b, 3) - at(rows, a, 3), 1)
        out[phase] = {
            "mean": sum(mb) / len(mb), "min": min(mb), "max": max(mb), "sum": sum(mb),
            "server_link": link_mbps, "ps_cpu": ps_cpu, "machine_cpu": 100 * busy,
            "worker_cpu": sum(w[phase + "_cpu_s"] / w[phase + "_s"] for w in ws) / len(ws) * 100}

    def counters(name):
        return {int(h): (int(tx), int(rx)) for h, tx, rx in
                (l.split() for l in open(os.path.join(case_dir, name)))}
    before, after = counters("before"), counters("after")
    out["value_push_mb"] = sum(w["push_bytes"] for w in ws) / 1e6
    out["value_pull_mb"] = sum(w["pull_bytes"] for w in ws) / 1e6
    out["hosts"] = []
    for h in sorted(after):
        if h <= servers:
            node = "ps%d" % (h - 1)
        elif 3 <= h < 3 + workers:
            node = "w%d" % (h - 3)
        else:
            continue
        out["hosts"].append({"host": h, "node": node,
                             "tx_mb": (after[h][0] - before[h][0]) / 1e6,
                             "rx_mb": (after[h][1] - before[h][1]) / 1e6})
    with open(results, "a") as f:
        f.write(json.dumps(out) + "\n")
    print("   %-8s %-12s %-5s %ds %dw: push/worker %6.1f  pull/worker %6.1f  busiest server "
          "link push %6.1f  pull %6.1f MB/s" % (label, link, security, servers, workers,
          out["push"]["mean"], out["pull"]["mean"], out["push"]["server_link"],
          out["pull"]["server_link"]))

def report(results):
    rs = [json.loads(l) for l in open(results)]
    r0 = rs[0]
    size = lambda b: "%g MiB" % (b / 2**20) if b >= 2**20 else "%g KiB" % (b / 2**10)
    print("Parameter-server bottleneck: dense table of %s, %s requests, window %d, %.0f s per "
          "phase, ASP." % (size(r0["table_bytes"]), size(r0["request_bytes"]), r0["window"],
                           r0["seconds"]))
    print("MB/s = 1e6 value bytes/s. srv link = tx+rx bytes/s on the busiest server's eth0 while "
          "every worker was in\nthe phase. limit = 1 Gbit/s = 125 MB/s per direction (link "
          "'1gbit': the hosts' sending side only;\n'1gbit-duplex': both). cpu%%: the busiest "
          "server process and the workers' mean, %% of one core; mach:\nthe whole machine's "
          "%d cores (anything else running on it included). skew: spread of the workers'\n"
          "push start times, s." % os.cpu_count())
    hdr = ("%-8s %-12s %-5s %3s %3s | %-8s %-13s %-7s | %-8s %-13s %-7s | %-9s %-9s | %-5s | "
           "%-7s %-7s %-7s | %-5s")
    row = ("%-8s %-12s %-5s %3d %3d | %8.1f %5.1f-%-7.1f %7.1f | %8.1f %5.1f-%-7.1f %7.1f | "
           "%9.1f %9.1f | %-5s | %3.0f/%-3.0f %3.0f/%-3.0f %3.0f/%-3.0f | %5.3f")
    print(hdr % ("case", "link", "sec", "srv", "wrk", "push/wrk", "(min-max)", "agg",
                 "pull/wrk", "(min-max)", "agg", "srv link", "srv link", "limit", "ps cpu%",
                 "wrk cpu", "mach", "skew"))
    print(hdr % ("", "", "", "", "", "MB/s", "", "MB/s", "MB/s", "", "MB/s", "push", "pull",
                 "MB/s", "psh/pll", "psh/pll", "psh/pll", ""))
    for r in rs:
        u, l = r["push"], r["pull"]
        print(row % (r["label"], r["link"], r["security"], r["servers"], r["workers"],
                     u["mean"], u["min"], u["max"], u["sum"], l["mean"], l["min"], l["max"],
                     l["sum"], u["server_link"], l["server_link"],
                     "none" if r["link"] == "none" else "125", u["ps_cpu"], l["ps_cpu"],
                     u["worker_cpu"], l["worker_cpu"], u["machine_cpu"], l["machine_cpu"],
                     r["skew"]))
    print("\nBytes through each host's link over the whole job (eth0 counters before and after; "
          "MB = 1e6 bytes;\nvalue = pushed and pulled value bytes summed over the workers):")
    hdr = "%-8s %-12s %-5s %3s %3s  %-6s %-4s %9s %9s   %10s %10s"
    print(hdr % ("case", "link", "sec", "srv", "wrk", "host", "node", "tx MB", "rx MB",
                 "value push", "value pull"))
    for r in rs:
        for h in r["hosts"]:
            print("%-8s %-12s %-5s %3d %3d  %-6s %-4s %9.1f %9.1f   %10.1f %10.1f" % (
                r["label"], r["link"], r["security"], r["servers"], r["workers"],
                "h%d" % h["host"], h["node"], h["tx_mb"], h["rx_mb"], r["value_push_mb"],
                r["value_pull_mb"]))

if __name__ == "__main__":
    {"case": case, "report": report}[sys.argv[1]](*sys.argv[2:])
PY

results="$tmp/results.jsonl"
: >"$results"

# run_case LABEL SERVERS WORKERS LINK(1gbit|1gbit-duplex|none) SECURITY(plain|curve)
run_case() {
  local label=$1 servers=$2 workers=$3 link=$4 security=$5
  case_dir="$tmp/$label-s$servers-w$workers"
  mkdir -p "$case_dir"
  local server_hosts="" i r p budget address
  for ((i = 1; i <= servers; i++)); do server_hosts+="${server_hosts:+,}$P$i"; done
  local sec_launch=() sec_worker=()
  if [[ $security == plain ]]; then
    sec_launch=(--insecure)
    sec_worker=(--insecure)
  fi
  budget=$(awk -v s="$phase_s" 'BEGIN { printf "%d", 2 * s + 90 }')
  counters "$case_dir/before"
  (cd "$case_dir" && exec timeout "$budget" "$launch" --external-workers --servers "$servers" \
    --workers "$workers" --sync asp --launcher ssh --hosts "$server_hosts" --rsh "$rsh" \
    --coordinator-interface "${P}br" "${sec_launch[@]}" --request-timeout 60 \
    --gen-rows 200 --gen-test-rows 0 --gen-features 100 --gen-nnz 5 --out "$case_dir/run" \
    >"$case_dir/launch.log" 2>&1) &
  local launcher=$!
  pids+=("$launcher")
  for _ in $(seq 300); do
    [[ -s $case_dir/run/coordinator.address ]] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  [[ -s $case_dir/run/coordinator.address ]] || fail "$label: the launcher wrote no coordinator address"
  address=$(cat "$case_dir/run/coordinator.address")
  if [[ $security == curve ]]; then
    [[ -s $case_dir/run/job.key ]] || fail "$label: no job.key for a CURVE job"
    sec_worker=(--key-file "$case_dir/run/job.key")
  fi
  local samplers=()
  for ((i = 1; i <= servers; i++)); do
    ip netns exec "$P$i" python3 -c "$SAMPLER" >"$case_dir/samples.$i" 2>"$case_dir/sampler$i.log" &
    samplers+=("$!")
    pids+=("$!")
  done
  local worker_pids=() extra=()
  read -r -a extra <<<"$bench_args"
  for ((r = 0; r < workers; r++)); do
    timeout "$budget" "$rsh" "$P$((3 + r))" "exec $(printf '%q ' "$bench" --coordinator \
      "$address" --rank "$r" "${sec_worker[@]}" --seconds "$phase_s" "${extra[@]}")" \
      >"$case_dir/w$r.out" 2>"$case_dir/w$r.log" &
    worker_pids+=("$!")
    pids+=("$!")
  done
  for ((r = 0; r < workers; r++)); do
    wait "${worker_pids[$r]}" || fail "$label: worker $r (host $P$((3 + r))) failed"
  done
  wait "$launcher" || fail "$label: syncline-launch failed"
  for p in "${samplers[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${samplers[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=() # all of this case's processes have ended (and their ids may be reused)
  grep -q '"status": "ok"' "$case_dir/run/summary.json" || fail "$label: the job did not end ok"
  counters "$case_dir/after"
  python3 "$tmp/analyse.py" case "$case_dir" "$label" "$servers" "$workers" "$link" \
    "$security" "$results" || fail "$label: cannot analyse the run"
}

sweep() { # LABEL LINK
  local servers workers
  for servers in $server_counts; do
    for workers in $worker_counts; do
      run_case "$1" "$servers" "$workers" "$2" plain
    done
  done
}

echo "== unlimited baseline (no tc), 1 server, 1 worker"
shape off
run_case baseline 1 1 none plain

echo "== every host's eth0: tbf $LIMIT"
shape on
sweep tbf 1gbit
if ((curve)); then
  echo "== CURVE (the default off loopback), 1 server, 1 worker, tbf"
  run_case curve 1 1 1gbit curve
fi
if ((duplex)); then
  echo "== both directions of every host limited (tbf on eth0 and on the root-side veth)"
  shape on duplex
  sweep duplex 1gbit-duplex
fi
shape off

echo
python3 "$tmp/analyse.py" report "$results" || fail "cannot print the tables"
echo
echo "multihost-bottleneck: ok ($(($(date +%s) - started)) s)"
