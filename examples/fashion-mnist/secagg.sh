#!/usr/bin/env bash
# secagg.sh: FedAvg with and without --secure-aggregation on Fashion-MNIST (Debian's
# dataset-fashion-mnist), softmax regression, 10 clients (5 a round), 1 server, 30 rounds of 1
# local epoch of SGD (lr 0.1, batch 32), iid clients; then both again under --client-dropout
# 0.3. Prints one line per run: test accuracy, wall seconds, seconds per round (from the first
# round's end to the last's, in metrics.csv), the rounds closed short, and per client the bytes
# it sent and received and its network seconds (for secure aggregation: the protocol's five
# stages in place of the push), each divided by the rounds it took part in.
# With --dp it runs instead DP-FedAvg (--dp client, clip 1) at a few epsilons, with the servers'
# noise (central) and with the clients' Skellam shares under secure aggregation (distributed),
# and secure aggregation without DP as the baseline; each line then adds the epsilon spent.
# docs/PRIVACY.md's secure-aggregation tables come from it.
# Usage: examples/fashion-mnist/secagg.sh [--build DIR] [--out DIR] [--seed S] [--dp]
#   --build DIR  the build folder (default: build/ in the repository)
#   --out DIR    results (default runs/fashion-mnist-secagg)
#   --seed S     the job seed: client picks, dropouts (default 1)
#   --dp         the DP table (epsilons 3, 8, 30 and 100) instead of the dropout one
# Exit status: 0 when every run succeeded, 1 otherwise, 2 bad usage.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="$root/build"
out="$root/runs/fashion-mnist-secagg"
seed=1
dp=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --dp) dp=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "secagg.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
source "$root/examples/fashion-mnist/prepare.sh" secagg.sh
job=(--sync fedavg --servers 1 --workers 10 --participation 0.5 --model softmax --classes 10
     --train "$data/fashion-mnist-train.libsvm" --test "$data/fashion-mnist-test.libsvm"
     --partition iid --rounds 30 --local-epochs 1 --optimizer sgd --lr 0.1 --batch-size 32
     --seed "$seed" --log-every 1000)
status=0
run() {  # NAME FLAGS...
  local name=$1
  shift
  if ! "$launch" "${job[@]}" --out "$out/$name" "$@" >"$out/$name.log" 2>&1; then
    echo "secagg.sh: $name failed (see $out/$name.log)" >&2
    status=1
    return
  fi
  /usr/bin/python3 - "$out/$name" "$name" <<'EOF'
import csv, json, re, sys, glob
d, name = sys.argv[1], sys.argv[2]
s = json.load(open(d + "/summary.json"))
rounds_in = []
for log in glob.glob(d + "/logs/w*.log"):
    m = re.search(r"trained in (\d+) rounds", open(log).read())
    if m:
        rounds_in.append(int(m.group(1)))
taken = sum(rounds_in) or 1
net = sum(w["network"] for w in s["worker_step_seconds"].values())
ends = {}
for r in csv.DictReader(open(d + "/metrics.csv")):
    if r["clock"] and r["train_loss"]:
        ends.setdefault(int(r["clock"]), []).append(float(r["wall_seconds"]))
first, last = min(ends), max(ends)
per_round = (max(ends[last]) - min(ends[first])) / max(1, last - first)
eps = f"\tepsilon {s['privacy']['epsilon']:.3g}" if "privacy" in s else ""
print(f"{name}\taccuracy {s['test_accuracy']:.4f}{eps}\twall {s['wall_seconds']:.1f} s"
      f"\t{per_round:.3f} s/round\tshort {s['rounds']['short']}/{s['rounds']['closed']}"
      f"\tclient rounds {taken}\tbytes/client-round {s['bytes_all'] / taken:.0f}"
      f"\tnetwork s/client-round {net / taken:.3f}")
EOF
}
mkdir -p "$out"
if [[ $dp == 1 ]]; then
  run secagg --secure-aggregation on
  for eps in 3 8 30 100; do
    run "central-eps$eps" --dp client --dp-clip 1 --dp-epsilon "$eps"
    run "distributed-eps$eps" --dp client --dp-clip 1 --dp-epsilon "$eps" --secure-aggregation on
  done
  exit $status
fi
run plain
run secagg --secure-aggregation on
run plain-dropout --client-dropout 0.3 --round-timeout 4
run secagg-dropout --secure-aggregation on --client-dropout 0.3 --round-timeout 4
exit $status
