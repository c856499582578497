#!/usr/bin/env bash
# sync-modes-experiment.sh: parameter servers against all-reduce against gossip, on separate
# hosts with limited links (the experiment of the all-reduce issue).
#
# Every node runs on a host of its own: a network namespace on a bridge (see
# scripts/testenv/netns-hosts.sh), servers on the first hosts, then the workers; the coordinator
# (syncline-launch --launcher ssh) runs in the root namespace. Both directions of every host's
# link are limited (a tbf on the host's eth0 for what it sends, and one on the root-side veth end
# for what it receives):
#
#   tc qdisc add dev eth0 root tbf rate RATE burst 128kb latency 50ms   (in each namespace)
#   tc qdisc add dev slexv<i> root tbf rate RATE burst 128kb latency 50ms (root namespace)
#
# It runs --sync bsp, allreduce, gossip:exp and ssp:3 with each worker count (bsp and ssp:3
# with 1 server, and with 2 as well unless --one-server), logistic regression on the same
# generated data (same seed) with the same optimizer and epochs, and prints:
#   - a table per run: wall time, steps, final training loss, test loss and AUC, the bytes
#     through each worker's link (mean), the busiest link and its host, the servers' links;
#   - the loss against wall time (the workers' mean smoothed training loss at a few times, and
#     the time each run needs to reach a target loss);
#   - BSP against all-reduce step by step (the same synchronous SGD: the same loss per step?);
#   - the bytes per node and step of all-reduce and gossip against the model size D.
# Bytes through a link: tx+rx of the host's eth0 (/sys/class/net/eth0/statistics) before and
# after the run, Ethernet and TCP overhead included; MB = 1e6 bytes. D = 4 (F + 1) bytes, the
# float32 weights and bias of the F-feature model; the all-reduce buffer is about 2D (a touched
# count per row rides along, docs/COLLECTIVES.md).
# If gnuplot is installed it plots the loss against wall time of each mode for one worker count
# into OUT/loss-vs-time-nN.png.
#
# Before measuring it waits (at most --wait-max seconds, default 1800, polling every 20 s) until
# no CI run (.ci/run), sanitizer run (sanitize.sh) or syncline-bench-allreduce runs on the
# machine: they would take the CPUs that all hosts share.
#
# Usage: bench/sync-modes-experiment.sh [--build DIR | --bin DIR] [--out DIR] [--rate R]
#          [--workers "2 4 8"] [--modes "bsp allreduce gossip:exp ssp:3"] [--one-server]
#          [--features F] [--nnz K] [--rows R] [--test-rows R] [--epochs E] [--batch-size B]
#          [--optimizer O] [--lr X] [--seed S] [--plot-workers N] [--run-timeout S]
#          [--wait-max S] [--no-wait]
#   --build DIR     the build folder whose binaries to copy (default: build/ beside bench/)
#   --bin DIR       a folder that already holds syncline-launch, -node, -ps and -worker of one
#                   build (they are copied all the same)
#   --out DIR       results: tables, results.jsonl, curves, the plot, the run folders
#                   (default /tmp/sync-modes; emptied first)
#   --rate R        the limit of each direction of each host's link (tc rate; default 50mbit)
#   --features F, --nnz K, --rows R, --test-rows R: the generated data (default 50000, 50,
#                   40000, 4000)
#   --epochs E, --batch-size B, --optimizer O, --lr X, --seed S: the training (default 4, 256,
#                   sgd, 1, 1)
#   --plot-workers N  the worker count of the plot (default 4)
#   --run-timeout S   the most one run may take (default 180)
# Needs root, iproute2 with tc (sch_tbf), python3. Exit status: 0 ok, 1 a run failed, 2 bad
# usage, 77 this machine cannot make network namespaces. Results stay in --out.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
bin_src=""
out=/tmp/sync-modes
rate=50mbit
worker_counts="2 4 8"
modes="bsp allreduce gossip:exp ssp:3"
two_servers=1
features=50000
nnz=50
rows=40000
test_rows=4000
epochs=4
batch=256
optimizer=sgd
lr=1
seed=1
plot_workers=4
run_timeout=180
wait_max=1800
wait_busy=1
while (($# > 0)); do
  case $1 in
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --bin) bin_src=${2:?--bin needs a folder}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --rate) rate=${2:?--rate needs a rate}; shift 2 ;;
    --workers) worker_counts=${2:?--workers needs a list}; shift 2 ;;
    --modes) modes=${2:?--modes needs a list}; shift 2 ;;
    --one-server) two_servers=0; shift ;;
    --features) features=${2:?}; shift 2 ;;
    --nnz) nnz=${2:?}; shift 2 ;;
    --rows) rows=${2:?}; shift 2 ;;
    --test-rows) test_rows=${2:?}; shift 2 ;;
    --epochs) epochs=${2:?}; shift 2 ;;
    --batch-size) batch=${2:?}; shift 2 ;;
    --optimizer) optimizer=${2:?}; shift 2 ;;
    --lr) lr=${2:?}; shift 2 ;;
    --seed) seed=${2:?}; shift 2 ;;
    --plot-workers) plot_workers=${2:?}; shift 2 ;;
    --run-timeout) run_timeout=${2:?}; shift 2 ;;
    --wait-max) wait_max=${2:?}; shift 2 ;;
    --no-wait) wait_busy=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "sync-modes-experiment: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
usage_error() { echo "sync-modes-experiment: $*" >&2; exit 2; }
for v in features nnz rows test_rows epochs batch seed plot_workers run_timeout wait_max; do
  [[ ${!v} =~ ^[0-9]+$ ]] || usage_error "--${v//_/-}: not a count: '${!v}'"
done
[[ $lr =~ ^[0-9]*[.]?[0-9]+([eE][-+]?[0-9]+)?$ ]] || usage_error "bad --lr '$lr'"
[[ $rate =~ ^[0-9]+([.][0-9]+)?[kmg]?bit$ ]] || usage_error "bad --rate '$rate' (e.g. 100mbit)"
[[ $worker_counts =~ ^[[:space:]]*[1-8]([[:space:]]+[1-8])*[[:space:]]*$ ]] ||
  usage_error "--workers: a list of 1..8, got '$worker_counts'"
for m in $modes; do
  [[ $m =~ ^(bsp|asp|ssp:[0-9]+|allreduce(:[a-z]+)?|gossip:[a-z]+(:async)?)$ ]] ||
    usage_error "--modes: unknown mode '$m'"
done
[[ $out == /* && $out != / ]] || usage_error "--out must be an absolute folder, not '$out'"

P=slex
export NETNS_SUBNET=10.234.0
# shellcheck source=scripts/testenv/netns-hosts.sh disable=SC1091  # shellcheck -x follows it
source "$root/scripts/testenv/netns-hosts.sh"
if ! reason=$(netns_can_run); then
  echo "SKIP: $reason"
  exit 77
fi
command -v tc >/dev/null || { echo "sync-modes-experiment: tc (iproute2) is not installed" >&2; exit 1; }

HOSTS=10 # at most 2 servers + 8 workers, one node per host
LIMIT="rate $rate burst 128kb latency 50ms"

tmp=$(mktemp -d /tmp/sync-modes-experiment.XXXXXX)
launcher_pid=""
cleanup() {
  if [[ -n $launcher_pid ]]; then kill "$launcher_pid" 2>/dev/null || true; fi
  netns_hosts_down "$P"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
  echo "sync-modes-experiment: FAIL: $*" >&2
  local f
  for f in "${case_dir:-/nonexistent}/launch.log" "${case_dir:-/nonexistent}"/run/logs/*.log; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -12 "$f" >&2; }
  done
  exit 1
}

# Bounded wait for the machine to be quiet.
busy() {
  local what
  for what in '.ci/run' 'sanitize.sh' 'syncline-bench-allreduce'; do
    if pgrep -f "$what" >/dev/null 2>&1; then
      echo "$what"
      return 0
    fi
  done
  return 1
}
if ((wait_busy)); then
  waited=0
  while what=$(busy); do
    if ((waited >= wait_max)); then
      echo "sync-modes-experiment: '$what' still runs after ${wait_max} s; measuring anyway" >&2
      break
    fi
    ((waited % 120 == 0)) && echo "waiting for '$what' to end (${waited} s so far)"
    sleep 20
    waited=$((waited + 20))
  done
fi

# A copy of the binaries of one build, so that a rebuild while the runs go cannot mix builds
# (nodes of another build are refused). The launcher finds the node binaries through
# SYNCLINE_BIN_DIR, which the ssh stand-in passes on to every host.
mkdir "$tmp/bin"
if [[ -n $bin_src ]]; then
  for b in syncline-launch syncline-node syncline-ps syncline-worker; do
    cp "$bin_src/$b" "$tmp/bin/" || fail "cannot copy $bin_src/$b"
  done
else
  for b in bin/syncline-launch bin/syncline-node bin/syncline-ps bin/syncline-worker; do
    cp "$build/$b" "$tmp/bin/" || fail "cannot copy $build/$b (ninja -C $build ${b##*/})"
  done
fi
export SYNCLINE_BIN_DIR="$tmp/bin"
launch="$tmp/bin/syncline-launch"

rm -rf "$out"
mkdir -p "$out/runs"
results="$out/results.jsonl"
: >"$results"

started=$(date +%s)
netns_hosts_up "$P" "$HOSTS" || fail "could not make the network-namespace hosts"
rsh="$tmp/rsh"
netns_write_rsh "$rsh"

for ((i = 1; i <= HOSTS; i++)); do
  # shellcheck disable=SC2086  # $LIMIT is several words
  ip netns exec "$P$i" tc qdisc add dev eth0 root tbf $LIMIT || fail "tc on $P$i's eth0"
  # shellcheck disable=SC2086
  tc qdisc add dev "${P}v$i" root tbf $LIMIT || fail "tc on ${P}v$i"
done

# counters FILE: "host tx rx" of every host's eth0.
counters() {
  local i
  for ((i = 1; i <= HOSTS; i++)); do
    echo "$i $(ip netns exec "$P$i" cat /sys/class/net/eth0/statistics/tx_bytes)" \
      "$(ip netns exec "$P$i" cat /sys/class/net/eth0/statistics/rx_bytes)"
  done >"$1"
}

# run_case MODE SERVERS WORKERS
run_case() {
  local mode=$1 servers=$2 workers=$3 hosts="" i rc
  case_dir="$out/runs/${mode//:/-}-s$servers-w$workers"
  mkdir -p "$case_dir"
  for ((i = 1; i <= servers + workers; i++)); do hosts+="${hosts:+,}$P$i"; done
  printf '== %-11s %d server(s), %d workers ... ' "$mode" "$servers" "$workers"
  counters "$case_dir/before"
  local t0 t1 server_flag=()
  # Serverless modes refuse --servers 0 (and ignore any other count).
  ((servers > 0)) && server_flag=(--servers "$servers")
  local contended=0
  busy >/dev/null && contended=1
  t0=$(date +%s.%N)
  (cd "$case_dir" && exec timeout "$run_timeout" "$launch" --launcher ssh --hosts "$hosts" \
    --rsh "$rsh" --coordinator-interface "${P}br" --insecure \
    "${server_flag[@]}" --workers "$workers" --sync "$mode" --model logreg \
    --gen-rows "$rows" --gen-test-rows "$test_rows" --gen-features "$features" --gen-nnz "$nnz" \
    --seed "$seed" --epochs "$epochs" --batch-size "$batch" --optimizer "$optimizer" --lr "$lr" \
    --log-every 1 --out "$case_dir/run" >"$case_dir/launch.log" 2>&1) &
  launcher_pid=$!
  rc=0
  wait "$launcher_pid" || rc=$?
  launcher_pid=""
  t1=$(date +%s.%N)
  busy >/dev/null && contended=1
  counters "$case_dir/after"
  ((rc == 0)) || fail "$mode, $servers servers, $workers workers: syncline-launch exited $rc" \
    "$( ((rc == 124)) && echo "(ran past --run-timeout $run_timeout s)")"
  grep -q '"status": "ok"' "$case_dir/run/summary.json" || fail "$mode: the job did not end ok"
  # The generated data and the servers' tables are large and are not needed any more.
  rm -rf "$case_dir/run/data" "$case_dir/run/embeddings"
  python3 "$tmp/analyse.py" case "$case_dir" "$mode" "$servers" "$workers" "$features" \
    "$t0" "$t1" "$contended" "$results" || fail "$mode: cannot analyse the run"
}

cat >"$tmp/analyse.py" <<'PY'
import csv, json, math, os, sys
from collections import defaultdict

def read_counters(path):
    return {int(h): (int(tx), int(rx)) for h, tx, rx in (l.split() for l in open(path))}

def case(case_dir, mode, servers, workers, features, t0, t1, contended, results):
    servers, workers, features = int(servers), int(workers), int(features)
    s = json.load(open(os.path.join(case_dir, "run", "summary.json")))
    before = read_counters(os.path.join(case_dir, "before"))
    after = read_counters(os.path.join(case_dir, "after"))
    hosts = []
    for h in range(1, servers + workers + 1):
        node = "ps%d" % (h - 1) if h <= servers else "w%d" % (h - 1 - servers)
        tx, rx = after[h][0] - before[h][0], after[h][1] - before[h][1]
        hosts.append({"host": h, "node": node, "tx": tx, "rx": rx})
    rows = []
    with open(os.path.join(case_dir, "run", "metrics.csv")) as f:
        for r in csv.DictReader(f):
            try:
                rows.append((float(r["wall_seconds"]), int(r["worker"]), int(r["clock"]),
                             float(r["train_loss"])))
            except (KeyError, ValueError):
                continue
    if not rows:
        sys.exit("no metrics rows in %s" % case_dir)
    out = {"mode": mode, "servers": servers, "workers": workers, "features": features,
           "model_bytes": 4 * (features + 1), "wall": s["wall_seconds"],
           "elapsed": float(t1) - float(t0), "steps": s["steps"],
           "steps_per_worker": s["steps_per_worker"], "train_loss": s["train_loss"],
           "test_loss": s.get("test_loss"), "test_auc": s.get("test_auc"),
           "bytes_pushed": s.get("bytes_pushed", 0), "bytes_pulled": s.get("bytes_pulled", 0),
           "contended": contended == "1", "hosts": hosts, "metrics": rows}
    with open(results, "a") as f:
        f.write(json.dumps(out) + "\n")
    w = [h for h in hosts if h["node"].startswith("w")]
    print("%s%.1f s wall, %d steps, train loss %.4f, test loss %s, worker link %.1f MB" % (
        "(machine busy: CI, sanitizer or bench-allreduce ran) " if out["contended"] else "",
        out["wall"], out["steps"], out["train_loss"],
        "%.4f" % out["test_loss"] if out["test_loss"] is not None else "-",
        sum(h["tx"] + h["rx"] for h in w) / len(w) / 1e6))

def label(r):
    name = "%s/%dps" % (r["mode"], r["servers"]) if r["servers"] else r["mode"]
    return name + ("!" if r.get("contended") else "")

def curve(r, window=5):
    """(wall, loss): after each metrics row, the mean over the workers of each worker's mean
    training loss over its last `window` reports (batch losses are noisy)."""
    last = defaultdict(list)
    pts = []
    for wall, worker, _, loss in sorted(r["metrics"]):
        last[worker].append(loss)
        if len(last[worker]) > window:
            last[worker].pop(0)
        if len(last) == r["workers"]:
            pts.append((wall, sum(sum(v) / len(v) for v in last.values()) / len(last)))
    return pts

def at(pts, t):
    if not pts or t > pts[-1][0]:
        return None  # the run had ended
    v = None
    for wall, loss in pts:
        if wall > t:
            break
        v = loss
    return v

def per_clock(r):
    """clock -> the workers' mean training loss at that clock (clocks every worker reported)."""
    by = defaultdict(dict)
    for _, worker, clock, loss in r["metrics"]:
        by[clock][worker] = loss
    return {c: sum(v.values()) / len(v) for c, v in by.items() if len(v) == r["workers"]}

def fmt(v, f="%.4f"):
    return "-" if v is None else f % v

def report(results, outdir, plot_workers):
    rs = [json.loads(l) for l in open(results)]
    plot_workers = int(plot_workers)
    r0 = rs[0]
    D = r0["model_bytes"]
    print("Model: logistic regression, %d features: D = 4 (F + 1) = %d bytes = %.3f MB." % (
        r0["features"], D, D / 1e6))
    print("MB = 1e6 bytes through a host's eth0 (tx+rx, headers included) over the whole run, "
          "startup and\nevaluation included; 'worker link' = the workers' mean, 'server link' = "
          "the busiest server's.\n"
          "A '!' after a mode: a CI run, sanitizer run or syncline-bench-allreduce ran at its start "
          "or end.\n")
    hdr = "%-14s %3s %3s %7s %6s %6s %8s %8s %7s %10s %10s %-9s %10s %9s"
    print(hdr % ("mode", "N", "S", "wall s", "steps", "st/wk", "train", "test", "test",
                 "worker", "busiest", "busiest", "server", "app push"))
    print(hdr % ("", "", "", "", "", "", "loss", "loss", "AUC", "link MB", "link MB", "host",
                 "link MB", "MB/worker"))
    for r in rs:
        w = [h for h in r["hosts"] if h["node"].startswith("w")]
        srv = [h for h in r["hosts"] if h["node"].startswith("ps")]
        busiest = max(r["hosts"], key=lambda h: h["tx"] + h["rx"])
        print("%-14s %3d %3d %7.2f %6d %6d %8.4f %8s %7s %10.2f %10.2f %-9s %10s %9.2f" % (
            label(r), r["workers"], r["servers"], r["wall"], r["steps"], r["steps_per_worker"],
            r["train_loss"], fmt(r["test_loss"]), fmt(r["test_auc"]),
            sum(h["tx"] + h["rx"] for h in w) / len(w) / 1e6,
            (busiest["tx"] + busiest["rx"]) / 1e6, "h%d(%s)" % (busiest["host"], busiest["node"]),
            "%.2f" % (max(h["tx"] + h["rx"] for h in srv) / 1e6) if srv else "-",
            r["bytes_pushed"] / r["workers"] / 1e6))

    print("\nBytes through each host's link (MB, tx/rx):")
    for r in rs:
        print("  %-14s N=%d: %s" % (label(r), r["workers"], "  ".join(
            "h%d %s %.1f/%.1f" % (h["host"], h["node"], h["tx"] / 1e6, h["rx"] / 1e6)
            for h in r["hosts"])))

    # Loss against wall time.
    walls = sorted({w for r in rs for w in (1, 2, 5, 10, 15, 20, 30, 45, 60) if w <= max(
        x["wall"] for x in rs) * 1.01})
    finals = {}
    for r in rs:
        pts = curve(r)
        finals[id(r)] = pts[-1][1] if pts else None
    print("\nLoss against wall time: the workers' mean training loss (each worker's last 5 "
          "reports) at wall time t\n(s since the job started; '-': the run had ended), and the "
          "time to reach the target loss (per N:\n1.02 x the final smoothed loss of BSP with 1 "
          "server; 'never': not reached):")
    hdr = "%-14s %3s " + " ".join(["%7s"] * len(walls)) + " %8s %8s %9s"
    print(hdr % tuple(["mode", "N"] + ["t=%gs" % w for w in walls] + ["final", "target",
                                                                       "t@target"]))
    targets = {}
    for n in sorted({r["workers"] for r in rs}):
        ref = [finals[id(r)] for r in rs if r["workers"] == n and r["mode"] == "bsp" and
               r["servers"] == 1 and finals[id(r)] is not None]
        vals = [finals[id(r)] for r in rs if r["workers"] == n and finals[id(r)] is not None]
        targets[n] = 1.02 * ref[0] if ref else (max(vals) if vals else None)
    for r in rs:
        pts = curve(r)
        tgt = targets[r["workers"]]
        reach = next((wall for wall, loss in pts if tgt is not None and loss <= tgt), None)
        print(hdr % tuple([label(r), r["workers"]] + [fmt(at(pts, w)) for w in walls] +
                          [fmt(finals[id(r)]), fmt(tgt),
                           "never" if reach is None else "%.2f" % reach]))
        with open(os.path.join(outdir, "curve-%s-s%d-w%d.dat" % (
                r["mode"].replace(":", "-"), r["servers"], r["workers"])), "w") as f:
            f.write("# wall_seconds smoothed_train_loss (%s, %d workers)\n" % (label(r),
                                                                             r["workers"]))
            for wall, loss in pts:
                f.write("%.3f %.6f\n" % (wall, loss))

    # BSP against all-reduce, step by step.
    print("\nBSP against all-reduce, step by step (the same synchronous SGD on the union "
          "batch): the workers'\nmean training loss at a step (metrics clock), and the largest "
          "relative difference from BSP\nwith 1 server over every step both reported:")
    for n in sorted({r["workers"] for r in rs}):
        group = [r for r in rs if r["workers"] == n and
                 (r["mode"] == "bsp" or r["mode"].startswith("allreduce"))]
        ref = next((r for r in group if r["mode"] == "bsp" and r["servers"] == 1), None)
        if ref is None or len(group) < 2:
            continue
        refc = per_clock(ref)
        clocks = sorted(refc)
        picks = sorted({clocks[min(len(clocks) - 1, int(f * len(clocks)))]
                        for f in (0, 0.1, 0.25, 0.5, 0.75, 1.0)})
        print("  N=%d  %-14s " % (n, "step") + " ".join("%8d" % c for c in picks) +
              "   max rel diff  test loss")
        for r in group:
            c = per_clock(r)
            common = [k for k in clocks if k in c]
            diff = max((abs(c[k] - refc[k]) / abs(refc[k]) for k in common), default=None)
            print("  N=%d  %-14s " % (n, label(r)) + " ".join("%8s" % fmt(c.get(k)) for k in picks)
                  + "   %12s  %s" % ("-" if r is ref else fmt(diff, "%.2e") +
                                    " (%d steps)" % len(common), fmt(r["test_loss"])))

    # Serverless traffic against the model size.
    print("\nServerless modes: bytes per node and step against D (tx/step = a worker host's "
          "eth0 tx bytes / its steps;\nmean over the workers, max in brackets; theory: ring "
          "all-reduce sends 2(N-1)/N x the buffer (about 2D)\n= 4(N-1)/N x D, 2 ranks use "
          "recursive doubling = the buffer; gossip:exp sends its model to one peer = 1 D):")
    hdr = "%-14s %3s %6s %12s %16s %14s %10s %12s"
    print(hdr % ("mode", "N", "steps", "tx/step KB", "tx/step/D", "(tx+rx)/st/D", "theory",
                 "app push/D"))
    for r in rs:
        if r["servers"]:
            continue
        w = [h for h in r["hosts"] if h["node"].startswith("w")]
        st = max(r["steps_per_worker"], 1)
        txs = [h["tx"] / st for h in w]
        both = [(h["tx"] + h["rx"]) / st for h in w]
        n = r["workers"]
        if r["mode"].startswith("allreduce"):
            theory = 2.0 if n == 2 else 4.0 * (n - 1) / n
        elif r["mode"].startswith("gossip:exp") or r["mode"].startswith("gossip:random"):
            theory = 1.0
        elif r["mode"].startswith("gossip:ring"):
            theory = 2.0
        else:
            theory = None
        print(hdr % (label(r), n, st, "%.1f" % (sum(txs) / len(txs) / 1e3),
                     "%.2f [%.2f]" % (sum(txs) / len(txs) / D, max(txs) / D),
                     "%.2f" % (sum(both) / len(both) / D), fmt(theory, "%.2f"),
                     "%.2f" % (r["bytes_pushed"] / r["workers"] / st / D)))

    print("\nServers: bytes through the busiest server's link per step (all workers' steps of a "
          "clock):")
    hdr = "%-14s %3s %3s %8s %14s %14s %16s"
    print(hdr % ("mode", "N", "S", "clocks", "srv link MB", "MB/clock", "MB/clock/worker"))
    for r in rs:
        srv = [h for h in r["hosts"] if h["node"].startswith("ps")]
        if not srv:
            continue
        b = max(h["tx"] + h["rx"] for h in srv)
        st = max(r["steps_per_worker"], 1)
        print(hdr % (label(r), r["workers"], r["servers"], st, "%.2f" % (b / 1e6),
                     "%.3f" % (b / st / 1e6), "%.3f" % (b / st / r["workers"] / 1e6)))

    # The plot's data file: one block per run of plot_workers workers.
    runs = [r for r in rs if r["workers"] == plot_workers]
    with open(os.path.join(outdir, "plot-w%d.gp" % plot_workers), "w") as f:
        f.write("set terminal pngcairo size 900,560\n" if os.environ.get("PNGCAIRO") == "1"
                else "set terminal png size 900,560\n")
        f.write("set output '%s'\n" % os.path.join(outdir, "loss-vs-time-n%d.png" % plot_workers))
        f.write("set title 'Training loss against wall time, %d workers, links limited' \n"
                % plot_workers)
        f.write("set xlabel 'wall time (s)'\nset ylabel 'training loss (smoothed)'\n"
                "set grid\nset key top right\n")
        # Diverging runs would squash the others: clip at twice the median final loss.
        fin = sorted(finals[id(r)] for r in runs if finals[id(r)] is not None)
        if fin:
            lo = min(l for r in runs for _, l in curve(r))
            f.write("set yrange [%g:%g]\n" % (0.9 * lo, max(0.75, 2 * fin[len(fin) // 2])))
        f.write("plot " + ", \\\n     ".join(
            "'%s' using 1:2 with lines lw 2 title '%s'" % (os.path.join(
                outdir, "curve-%s-s%d-w%d.dat" % (r["mode"].replace(":", "-"), r["servers"],
                                                  r["workers"])), label(r)) for r in runs) + "\n")

if __name__ == "__main__":
    {"case": case, "report": report}[sys.argv[1]](*sys.argv[2:])
PY

echo "sync-modes-experiment: links limited to $rate each way; $features features, $nnz" \
  "nonzeros, $rows rows, $epochs epochs, batch $batch, $optimizer lr $lr"
for workers in $worker_counts; do
  for mode in $modes; do
    case $mode in
      allreduce* | gossip*) run_case "$mode" 0 "$workers" ;;
      *)
        run_case "$mode" 1 "$workers"
        if ((two_servers)); then run_case "$mode" 2 "$workers"; fi
        ;;
    esac
  done
done
netns_hosts_down "$P"

echo
python3 "$tmp/analyse.py" report "$results" "$out" "$plot_workers" | tee "$out/tables.txt" ||
  fail "cannot print the tables"
if command -v gnuplot >/dev/null 2>&1; then
  if gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo; then
    PNGCAIRO=1 python3 "$tmp/analyse.py" report "$results" "$out" "$plot_workers" >/dev/null
  fi
  if gnuplot "$out/plot-w$plot_workers.gp" 2>"$out/gnuplot.log"; then
    echo
    echo "plot: $out/loss-vs-time-n$plot_workers.png"
  else
    echo "gnuplot failed (see $out/gnuplot.log)" >&2
  fi
fi
echo
echo "sync-modes-experiment: ok ($(($(date +%s) - started)) s); results in $out"
