#!/usr/bin/env bash
# worker-recovery.sh: how long a BSP job takes to train again after a worker is SIGKILLed,
# in place (--min-workers: the others take over its batches) against the baseline of stopping
# and relaunching with --resume from the last checkpoint. Prints each run and the medians.
#
#   bench/worker-recovery.sh [--runs N] [--build DIR] [--out DIR]
#
# The job: logreg on 20k generated examples, 2 servers, 4 workers, batch 64, 10 ms a step
# (--min-step-ms, so that the kill lands mid-run), heartbeats every 0.1 s; w1 is killed 1 s
# after the start.
#   in place: from the kill until every other worker has logged the batches it takes over
#             (the line the trainer writes before the iteration that follows).
#   relaunch: from the kill until the launcher has exited (it stops the job) plus from the
#             relaunch until the resumed job's first progress row in metrics.csv; the steps
#             since the checkpoint (--checkpoint-every 10) are then trained again, not counted.
# Timings are this machine's and its load's: a figure, never a test.
set -euo pipefail
runs=10
build=build
out=/tmp/syncline-worker-recovery
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "worker-recovery.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib-recovery.sh
. bench/lib-recovery.sh
recovery_setup "$build" "$out"

inplace=()
for i in $(seq "$runs"); do
  run=$out/inplace$i
  start_and_kill "syncline-worker.*--rank 1$" "$run" --min-workers 3
  takers() { grep -l "takes" "$run"/logs/w{0,2,3}.log 2>/dev/null | wc -l; }
  wait_for '[ "$(takers)" -ge 3 ]'
  t1=$(ms)
  wait "$pid"
  inplace+=($((t1 - t0)))
  echo "in place, run $i: training again $((t1 - t0)) ms after the kill"
done

relaunch=()
for i in $(seq "$runs"); do
  run=$out/relaunch$i
  start_and_kill "syncline-worker.*--rank 1$" "$run" --checkpoint-every 10
  wait "$pid" || true
  t1=$(ms)
  "$launch" "${job[@]}" --checkpoint-every 10 --out "$run" --resume >"$run.resume.log" 2>&1 &
  pid=$!
  wait_for 'grep -q "resuming at clock" "$run/logs/w0.log" 2>/dev/null'
  rows=$(wc -l <"$run/metrics.csv")
  wait_for '[ "$(wc -l <"$run/metrics.csv")" -gt "$rows" ]'
  t2=$(ms)
  wait "$pid"
  relaunch+=($((t2 - t0)))
  echo "relaunch, run $i: the job stopped $((t1 - t0)) ms after the kill, the resumed one trained" \
    "again $((t2 - t1)) ms later: $((t2 - t0)) ms"
done

print_medians ""
