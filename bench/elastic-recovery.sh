#!/usr/bin/env bash
# elastic-recovery.sh: how long an elastic all-reduce (--sync allreduce --min-workers 3) takes to
# train again after one of its 4 workers is SIGKILLed: from the kill until every survivor has
# re-formed the collective over the others (logged "all-reduce re-formed over"; its next line of
# work is its first step over the shrunk ring). Prints each run and the median.
#
#   bench/elastic-recovery.sh [--node w0..w3] [--runs N] [--build DIR] [--out DIR]
#
# The job: logreg on 20k generated examples, 4 workers, 3 epochs, batch 64, 10 ms a step
# (--min-step-ms, so that the kill lands mid-run), heartbeats every 0.1 s, no checkpoints; the
# node is killed 0.3 s after the first row of metrics.csv (a fixed delay from the start lands in
# the start-up on a loaded machine). Each run is also read from the logs' timestamps, from the
# launcher's line on the kill to the last survivor's "re-formed" line: that leaves out this
# script's polling and forks. Timings are this machine's and its load's: a figure, never a test.
set -euo pipefail
runs=10 node=w1 build=build out=/tmp/syncline-elastic-recovery
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib-recovery.sh
. bench/lib-recovery.sh
recovery_args "$@"
recovery_setup "$build" "$out"
job=(--workers 4 --min-workers 3 --sync allreduce --train "$out/train.libsvm"
  --test "$out/test.libsvm" --epochs 3 --batch-size 64 --min-step-ms 10 --heartbeat-interval 0.1)
# The survivors that have re-formed the collective.
reformed() { grep -l "all-reduce re-formed over" "$1"/logs/w{0,1,2,3}.log 2>/dev/null | wc -l; }
# Milliseconds from the launcher's line on the kill in $1 (its log) to the last survivor's
# "re-formed" line under $2.
log_span() {
  local from last=0 f t
  from=$(grep -m1 -oE "[EWI] [0-9:]+\.[0-9]+ launch .*killed by signal" "$1" | log_ms)
  [ -n "$from" ] || return 0
  for f in "$2"/logs/w{0,1,2,3}.log; do
    t=$(grep -m1 "all-reduce re-formed over" "$f" | log_ms)
    [ -n "$t" ] && [ "$t" -gt "$last" ] && last=$t
  done
  echo $((last - from))
}
log_ms() { sed 's/^\[[^]]*\] //' | awk '{split($2, t, ":"); printf "%d\n", ((t[1] * 60 + t[2]) * 60 + t[3]) * 1000}'; }
start_and_kill_training() {
  local pattern=$1 folder=$2
  shift 2
  rm -rf "$folder"
  "$launch" "${job[@]}" "$@" --out "$folder" >"$folder.log" 2>&1 &
  pid=$!
  wait_for '[ "$({ wc -l <"$folder/metrics.csv"; } 2>/dev/null || echo 0)" -gt 1 ]'
  sleep 0.3
  t0=$(ms)
  pkill -9 -P "$pid" -f "$pattern"
}
seen=() logged=()
for i in $(seq "$runs"); do
  run=$out/run$i
  time_in_place start_and_kill_training '[ "$(reformed "$run")" -ge 3 ]' "$run"
  span=$(log_span "$run.log" "$run")
  seen+=("$elapsed")
  [ -z "$span" ] || logged+=("$span")
  echo "run $i: the survivors re-formed $elapsed ms after the kill (${span:-?} ms in the logs);" \
    "$(grep -o '"world_sizes": \[.*\]\]' "$run/summary.json")"
done
echo "killed $node; median over $runs runs: $(printf '%s\n' "${seen[@]}" | median) ms" \
  "($(printf '%s\n' "${logged[@]}" | median) ms in the logs)"
