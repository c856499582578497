#!/usr/bin/env bash
# node-recovery.sh: how long a BSP job takes to train again after a server (or a worker) is
# SIGKILLed, restarted in place (--max-restarts: a replacement restores the newest checkpoint
# and every other node rolls back to it without restarting) against the baseline of the job
# stopping and being relaunched with --resume from the same checkpoints. Prints each run and
# the medians.
#
#   bench/node-recovery.sh [--node ps1|w1] [--runs N] [--build DIR] [--out DIR]
#                          [--keys none|job|node]
#
# --keys: plaintext on loopback (none, the default), or keyed with one job key for every node
# (job) or a key of each node's own (node: a replacement gets its next incarnation's).
#
# The job: logreg on 20k generated examples, 2 servers, 4 workers, batch 64, 10 ms a step
# (--min-step-ms, so that the kill lands mid-run), heartbeats every 0.1 s, a checkpoint every
# 10 clocks; the node is killed 1 s after the start.
#   in place: from the kill until every worker has logged "resuming at clock" (it restored the
#             checkpoint after the job resumed, and trains from the next line on).
#   relaunch: from the kill until the launcher has exited (it stops the job), plus from the
#             relaunch until every worker of the resumed job has logged the same line.
# Both train the steps since the checkpoint again; that is not counted. Timings are this
# machine's and its load's: a figure, never a test.
set -euo pipefail
runs=10
node=ps1
build=build
out=/tmp/syncline-node-recovery
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib-recovery.sh
. bench/lib-recovery.sh
recovery_args "$@"
recovery_setup "$build" "$out"
job+=(--checkpoint-every 10)
resumed() { grep -l "resuming at clock" "$1"/logs/w{0,1,2,3}.log 2>/dev/null | wc -l; }

inplace=()
for i in $(seq "$runs"); do
  run=$out/inplace$i
  time_in_place start_and_kill '[ "$(resumed "$run")" -ge 4 ]' "$run" --max-restarts 1
  inplace+=("$elapsed")
  echo "in place, run $i: training again $elapsed ms after the kill"
done

relaunch=()
for i in $(seq "$runs"); do
  run=$out/relaunch$i
  start_and_kill "$binary.*--rank $rank$" "$run"
  wait "$pid" || true
  t1=$(ms)
  rm -f "$run"/logs/w*.log
  "$launch" "${job[@]}" --out "$run" --resume >"$run.resume.log" 2>&1 &
  pid=$!
  wait_for '[ "$(resumed "$run")" -ge 4 ]'
  t2=$(ms)
  wait "$pid"
  relaunch+=($((t2 - t0)))
  echo "relaunch, run $i: the job stopped $((t1 - t0)) ms after the kill, the resumed one trained" \
    "again $((t2 - t1)) ms later: $((t2 - t0)) ms"
done

print_medians "killed $node; "
