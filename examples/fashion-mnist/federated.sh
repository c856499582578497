#!/usr/bin/env bash
# federated.sh: the federated experiments of docs/FEDERATED.md on Fashion-MNIST (Debian's
# dataset-fashion-mnist), softmax regression, 10 clients, 1 server, 30 rounds, local SGD.
#
#   1. FedAvg, 5 of 10 clients picked per round, 1 local epoch, on iid clients and on
#      Dirichlet(1), (0.5) and (0.1) label skews.
#   2. Dirichlet(0.1): FedProx (--prox-mu 0.01, 0.1) against FedAvg (--prox-mu 0).
#   3. Clients 1, 2 and 3 flip the sign of their update (and, a second sweep, scale it by -5):
#      mean, median, trimmed mean and Krum, with every client in every round (Krum with f = 3
#      needs n >= 9), against the clean run.
#   4. --client-dropout 0.3 with a 2 s round timeout: the rounds short of clients.
#
# Each sweep is a `syncline-launch experiment`: OUT/NAME/summary.csv, report.md and plots.
# Usage: examples/fashion-mnist/federated.sh [--build DIR] [--out DIR] [--seed S] [--lr X]
#   --build DIR  the build folder (default: build/ in the repository)
#   --out DIR    results (default runs/fashion-mnist-federated)
#   --seed S     the job seed: client picks, dropouts, partitions (default 1)
#   --lr X       the clients' local SGD learning rate (default 0.1; batch 32)
# Exit status: 0 when every run succeeded, 1 otherwise, 2 bad usage.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="$root/build"
out="$root/runs/fashion-mnist-federated"
seed=1
lr=0.1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --lr) lr=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "federated.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
source "$root/examples/fashion-mnist/prepare.sh" federated.sh
job=(--sync fedavg --servers 1 --workers 10 --model softmax --classes 10
     --train "$data/fashion-mnist-train.libsvm" --test "$data/fashion-mnist-test.libsvm"
     --rounds 30 --local-epochs 1 --optimizer sgd --lr "$lr" --batch-size 32 --seed "$seed"
     --log-every 1000)
status=0
run() {  # NAME ARGS...
  local name=$1; shift
  echo "== $name: syncline-launch experiment $*"
  rm -rf "${out:?}/$name"
  "$launch" experiment "${job[@]}" "$@" --out "$out/$name" > "$out/$name.log" 2>&1 || status=1
  if [[ -f "$out/$name/summary.csv" ]]; then
    python3 - "$out/$name" <<'PY'
import csv, json, os, sys
for r in csv.DictReader(open(os.path.join(sys.argv[1], "summary.csv"))):
    line = f"  {r['mode']:<18} {r['status']:<8} test accuracy {float(r['test_accuracy'] or 'nan'):.4f}" \
           f"  test loss {float(r['test_loss'] or 'nan'):.4f}  wall {float(r['wall_seconds'] or 'nan'):.1f} s"
    summary = os.path.join(sys.argv[1], r['folder'], "summary.json")
    if os.path.exists(summary):
        rounds = json.load(open(summary)).get("rounds")
        if rounds:
            line += f"  rounds {rounds['closed']} (short {rounds['short']}: {rounds['short_rounds']})"
    print(line)
PY
  else
    echo "  no summary.csv: see $out/$name.log"
  fi
}
run 1-partitions --partition iid,dirichlet:1,dirichlet:0.5,dirichlet:0.1 --participation 0.5
run 2-fedprox --prox-mu 0,0.01,0.1 --partition dirichlet:0.1 --participation 0.5
run 3-clean --participation 1 --partition iid
run 3-signflip --aggregate mean,median,trimmed-mean:0.3,krum:3 --byzantine 1,2,3:signflip \
  --partition iid --participation 1
run 3-scale --aggregate mean,median,trimmed-mean:0.3,krum:3 --byzantine 1,2,3:scale:-5 \
  --partition iid --participation 1
run 4-dropout --client-dropout 0,0.3 --round-timeout 2 --partition dirichlet:0.5 \
  --participation 0.5
echo "results: $out"
exit $status
