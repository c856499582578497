#!/usr/bin/env bash
# ctr-vs-pytorch.sh: the CTR job against PyTorch on the same cores (docs/PERFORMANCE.md).
#
# Generates Criteo-format data (syncline-gen criteo), then for each seed runs, one after the
# other so that all three meet the same machine load:
#   - bench/ctr_pytorch.py: the same model in PyTorch, one process, --threads (default 1);
#   - syncline-launch with 1 server + 1 worker;
#   - syncline-launch with 2 servers + 2 workers;
#   - the same two jobs with the PyTorch model as every worker (examples/pytorch/dlrm.py through
#     syncline.torch: rows on the servers, dense layers on them too), named syncline.torch;
# all BSP (Syncline) or plain SGD steps (PyTorch) with Adagrad, the same batch, learning rate and
# epochs. The seed changes the models' initial values (the data stays the same).
#
# The rate of a run is its training examples over the span of its progress reports (Syncline:
# the rows of metrics.csv; PyTorch: every 10 batches), so start-up, parsing before training and
# the test pass are left out of both. Prints a row per run, then per system the median rate,
# its ratio to PyTorch's median, and the mean and spread of test AUC over the seeds: one run's
# AUC moves by a few hundredths with the seed, more than the systems differ.
#
# Needs Debian's python3-torch and libopenblas0-openmp (bench only, never the build or tests):
#   apt-get install python3-torch libopenblas0-openmp
#
# Usage: bench/ctr-vs-pytorch.sh [--build DIR] [--out DIR] [--rows N] [--test-rows N]
#          [--seeds "1 2 3 4 5"] [--embedding-dim D] [--hidden H] [--batch-size B] [--lr X]
#          [--epochs E] [--threads T] [--extra "FLAGS"] [--also-build NAME=DIR]...
#   --extra       more syncline-launch flags for both Syncline runs (e.g. "--sync ssp:1")
#   --also-build  run the two Syncline jobs of another build too, named NAME in the table (an
#                 earlier commit's build: a before/after comparison in one sitting)
# Each Syncline row also shows its workers' step-time split (the worker log's "step time"
# line: next batch, read = pull, compute, update = push, end of iteration).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
out=runs/ctr-vs-pytorch
rows=200000
test_rows=50000
seeds="1 2 3 4 5"
dim=8
hidden=64
batch=256
lr=0.05
epochs=1
threads=1
extra=""
builds=("syncline=$build")
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --test-rows) test_rows=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --embedding-dim) dim=$2; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --lr) lr=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    --also-build) builds+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "ctr-vs-pytorch: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "ctr-vs-pytorch: $py cannot import torch; apt-get install python3-torch libopenblas0-openmp" >&2
  exit 1
fi
builds[0]="syncline=$build"
for nb in "${builds[@]}"; do
  b="${nb#*=}/bin/syncline-launch"
  [ -x "$b" ] || { echo "ctr-vs-pytorch: $b is missing; build first" >&2; exit 1; }
done
for b in "$build/bin/syncline-gen"; do
  [ -x "$b" ] || { echo "ctr-vs-pytorch: $b is missing; build first (ninja -C $build)" >&2; exit 1; }
done
mkdir -p "$out"
train="$out/train.tsv"
test="$out/test.tsv"
if [ ! -s "$train" ] || [ ! -s "$test" ] || [ "$(wc -l <"$train")" != "$rows" ]; then
  "$build/bin/syncline-gen" criteo --rows "$rows" --test-rows "$test_rows" --seed 7 \
    --out "$train" --test-out "$test" >/dev/null
fi
echo "ctr-vs-pytorch: $rows train rows, $test_rows test rows, D=$dim H=$hidden batch $batch" \
  "lr $lr epochs $epochs, seeds: $seeds; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
results="$out/results.tsv"
printf 'system\tseed\texamples_per_s\ttest_auc\tstep_time\n' >"$results"

syncline_rate() {  # RUN_DIR: examples over the span of metrics.csv's rows, after the first
  "$py" - "$1" <<'EOF'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/metrics.csv")))
times = [float(r["wall_seconds"]) for r in rows]
t0, t1 = min(times), max(times)
examples = sum(int(r["examples"]) for r, t in zip(rows, times) if t > t0)
auc = json.load(open(sys.argv[1] + "/summary.json"))["test_auc"]
print(f"{examples / (t1 - t0):.0f}\t{auc:.4f}")
EOF
}

for seed in $seeds; do
  line=$("$py" "$here/ctr_pytorch.py" --train "$train" --test "$test" --embedding-dim "$dim" \
    --hidden "$hidden" --batch-size "$batch" --lr "$lr" --epochs "$epochs" --threads "$threads" \
    --seed "$seed")
  rate=$(sed -E 's/.*examples_per_s=([0-9]+).*/\1/' <<<"$line")
  auc=$(sed -E 's/.*test_auc=([0-9.]+).*/\1/' <<<"$line")
  printf 'pytorch\t%s\t%s\t%s\t\n' "$seed" "$rate" "$auc" | tee -a "$results"
  for nb in "${builds[@]}"; do
    name="${nb%%=*}"
    launch="${nb#*=}/bin/syncline-launch"
    for sw in "1 1" "2 2"; do
      set -- $sw
      run="$out/$name-$1+$2-seed$seed"
      rm -rf "$run"
      # shellcheck disable=SC2086
      "$launch" --servers "$1" --workers "$2" --sync bsp --model ctr --train "$train" \
        --test "$test" --embedding-dim "$dim" --hidden "$hidden" --batch-size "$batch" \
        --optimizer adagrad --lr "$lr" --epochs "$epochs" --seed "$seed" $extra --out "$run" \
        >"$run.log" 2>&1 || { tail -20 "$run.log" >&2; exit 1; }
      split=$(grep -h "step time:" "$run"/logs/w0*.log 2>/dev/null | sed 's/.*step time: //' | head -1)
      printf '%s %s+%s\t%s\t%s\t%s\n' "$name" "$1" "$2" "$seed" "$(syncline_rate "$run")" \
        "$split" | tee -a "$results"
    done
  done
  # The PyTorch model as Syncline's workers (this build's Python package).
  for sw in "1 1" "2 2"; do
    set -- $sw
    run="$out/torch-$1+$2-seed$seed"
    rm -rf "$run"
    # shellcheck disable=SC2086
    PYTHONPATH="$build/python" "$build/bin/syncline-launch" --servers "$1" --workers "$2" \
      --sync bsp $extra --out "$run" -- "$py" "$here/../examples/pytorch/dlrm.py" \
      --train "$train" --test "$test" --embedding-dim "$dim" --hidden "$hidden" \
      --batch-size "$batch" --lr "$lr" --epochs "$epochs" --seed "$seed" --threads "$threads" \
      >"$run.log" 2>&1 || { tail -20 "$run.log" >&2; exit 1; }
    split=$(grep -h "step time:" "$run"/logs/w0.log | sed 's/.*step time: //' | head -1)
    printf 'syncline.torch %s+%s\t%s\t%s\t%s\n' "$1" "$2" "$seed" "$(syncline_rate "$run")" \
      "$split" | tee -a "$results"
  done
done

"$py" - "$results" <<'EOF'
import csv, re, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
systems = list(dict.fromkeys(r["system"] for r in rows))
med = {s: statistics.median(float(r["examples_per_s"]) for r in rows if r["system"] == s)
       for s in systems}
print()
print("| system | median examples/s | vs PyTorch | test AUC median | mean | min..max | runs |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for s in systems:
    aucs = [float(r["test_auc"]) for r in rows if r["system"] == s]
    print(f"| {s} | {med[s]:.0f} | {med[s] / med['pytorch']:.2f} | {statistics.median(aucs):.4f} |"
          f" {statistics.mean(aucs):.4f} |"
          f" {min(aucs):.4f}..{max(aucs):.4f} | {len(aucs)} |")
split_rows = []
for s in systems:
    splits = [r["step_time"] for r in rows if r["system"] == s and r.get("step_time")]
    if not splits:
        continue
    shares = [dict((k, float(v)) for k, v in re.findall(r"([a-z]+) ([\d.]+)%", x)) for x in splits]
    share = {p: statistics.mean(x.get(p, 0.0) for x in shares) for p in shares[0]}
    secs = statistics.mean(float(re.search(r"of ([\d.]+) s", x).group(1)) for x in splits)
    split_rows.append(f"| {s} | " + ", ".join(f"{p} {v:.1f}%" for p, v in share.items()) +
                      f" | {secs:.2f} |")
if split_rows:
    print()
    print("Worker 0's step time, mean over the seeds (built-in workers: the worker log's split;")
    print("syncline.torch: glue = the package's own Python and native glue, pull/push/clock =")
    print("Syncline's calls, compute = PyTorch and the rest of the loop):")
    print()
    print("| system | split | training s |")
    print("| --- | --- | ---: |")
    print("\n".join(split_rows))
EOF
