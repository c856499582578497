#!/usr/bin/env bash
# collective-recovery.sh: how long an all-reduce, hybrid or gossip job takes to train again after
# a node is SIGKILLed and restarted in place (--max-restarts: a replacement restores the newest
# checkpoint, every other node rolls back to it without restarting, and the peers meet again
# under a new generation), against the baseline of the job stopping and being relaunched with
# --resume from the same checkpoints. Prints each run and the medians.
#
#   bench/collective-recovery.sh [--sync allreduce|hybrid:ssp:0|gossip:ring] [--node w1|ps1]
#                                [--runs N] [--build DIR] [--out DIR]
#
# The job: logreg on 20k generated examples, 4 workers (hybrid: and 2 servers), batch 64, 10 ms
# a step (--min-step-ms, so that the kill lands mid-run), heartbeats every 0.1 s, a checkpoint
# every 10 clocks; the node is killed 0.2 s after checkpoint 20 is complete (a fixed delay from
# the start lands in the start-up on a loaded machine).
#   in place: from the kill until every worker has met its peers of the new generation (logged
#             "collectives of generation 1" or "gossip peers of generation 1") and then logged
#             "resuming at clock" (it has restored the checkpoint: its next step is the first
#             after).
#   relaunch: from the kill until the launcher has exited (it stops the job; a gossip job under
#             --min-workers 4, else it would go on without the peer), plus from the relaunch
#             until every worker of the resumed job has logged "resuming at clock".
# Both train the steps since the checkpoint again; that is not counted. Each is also read from
# the logs' timestamps, from the launcher's line on the failure to the last worker's "resuming
# at clock": that leaves out this script's polling and process forks, which on a loaded machine
# add hundreds of milliseconds. Timings are this machine's and its load's: a figure, never a
# test.
set -euo pipefail
# The defaults of the flags (bench/lib-recovery.sh's recovery_args parses them).
runs=10 sync=allreduce node=w1 build=build out=/tmp/syncline-collective-recovery
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib-recovery.sh
. bench/lib-recovery.sh
recovery_args "$@"
recovery_setup "$build" "$out"
# The shared job, in this mode: servers only where it has them.
job=(--workers 4 --sync "$sync" --train "$out/train.libsvm" --test "$out/test.libsvm" --epochs 3
  --batch-size 64 --min-step-ms 10 --heartbeat-interval 0.1 --checkpoint-every 10)
case "$sync" in hybrid*) job+=(--servers 2) ;; esac
# The baseline's job stops at the failure: a gossip job would go on without the lost peer.
stop=()
case "$sync" in gossip*) stop=(--min-workers 4) ;; esac
# Starts the job into run folder $2 with the flags after it and SIGKILLs the launcher's child
# matching $1 once checkpoint 20 is complete, 0.2 s later; sets pid and t0 (the kill). A job
# that ends before (a start-up failure on a loaded machine) is reported and started again, up
# to 3 times; failed_starts counts them.
failed_starts=0
start_and_kill_after_checkpoint() {
  local pattern=$1 folder=$2 try
  shift 2
  for try in 1 2 3; do
    rm -rf "$folder"
    "$launch" "${job[@]}" "$@" --out "$folder" >"$folder.log" 2>&1 &
    pid=$!
    wait_for 'grep -qs "checkpoint 20 complete" "$folder.log" || ! kill -0 "$pid" 2>/dev/null'
    if grep -qs "checkpoint 20 complete" "$folder.log"; then
      sleep 0.2
      t0=$(ms)
      pkill -9 -P "$pid" -f "$pattern"
      return 0
    fi
    wait "$pid" || true
    failed_starts=$((failed_starts + 1))
    echo "(the job into $folder ended before checkpoint 20: $(grep -m1 'job failed' "$folder.log"))"
    mv "$folder.log" "$folder.failed$try.log"
  done
  echo "collective-recovery.sh: the job failed to start 3 times in a row" >&2
  exit 1
}
# The workers that, after meeting their peers of generation 1, have restored the checkpoint (the
# line just before their first step of the new generation).
met() {
  local f
  for f in "$1"/logs/w{0,1,2,3}.log; do
    [ -f "$f" ] || continue
    awk '/(collectives|gossip peers) of generation 1 /{g = 1} g && /resuming at clock/{print; exit}' "$f"
  done | wc -l
}
resumed() { grep -l "resuming at clock" "$1"/logs/w{0,1,2,3}.log 2>/dev/null | wc -l; }
# A log line's time of day in milliseconds ("I 07:42:28.234 w1 ...", after an optional "[w1] ").
log_ms() { sed 's/^\[[^]]*\] //' | awk '{split($2, t, ":"); printf "%d\n", ((t[1] * 60 + t[2]) * 60 + t[3]) * 1000}'; }
# Milliseconds from the launcher's first line on the failure in $1 (its log) to the last
# "resuming at clock" in the workers' logs under $2 (after "of generation 1" with $3 = inplace).
log_span() {
  local from last=0 f t
  # (grep -o: a child's output may cut into the launcher's line.)
  from=$(grep -m1 -oE "[EWI] [0-9:]+\.[0-9]+ launch .*(killed by signal|job failed)" "$1" | log_ms)
  [ -n "$from" ] || return 0
  for f in "$2"/logs/w{0,1,2,3}.log; do
    if [ "$3" = inplace ]; then
      t=$(awk '/(collectives|gossip peers) of generation 1 /{g = 1} g && /resuming at clock/{print; exit}' "$f" | log_ms)
    else
      t=$(grep -m1 "resuming at clock" "$f" | log_ms)
    fi
    [ -n "$t" ] && [ "$t" -gt "$last" ] && last=$t
  done
  echo $((last - from))
}

# Records run folder $2 of kind $1 (inplace or relaunch), $3 ms after the kill as this script
# saw it: adds that, and its span in the logs (span, empty when unread), to the kind's arrays.
note_run() {
  local -n seen=$1 logged=${1}_log
  seen+=("$3")
  span=$(log_span "$2.log" "$2" "$1")
  [ -z "$span" ] || logged+=("$span")
}

inplace=() inplace_log=()
for i in $(seq "$runs"); do
  run=$out/inplace$i
  time_in_place start_and_kill_after_checkpoint '[ "$(met "$run")" -ge 4 ]' "$run" --max-restarts 1
  note_run inplace "$run" "$elapsed"
  echo "in place, run $i: peers met again $elapsed ms after the kill (${span:-?} ms in the logs)"
done

relaunch=() relaunch_log=()
for i in $(seq "$runs"); do
  run=$out/relaunch$i
  start_and_kill_after_checkpoint "$binary.*--rank $rank$" "$run" "${stop[@]}"
  wait "$pid" || true
  t1=$(ms)
  rm -f "$run"/logs/w*.log
  "$launch" "${job[@]}" "${stop[@]}" --out "$run" --resume >"$run.resume.log" 2>&1 &
  pid=$!
  wait_for '[ "$(resumed "$run")" -ge 4 ]'
  t2=$(ms)
  wait "$pid"
  # The failure is in the first launcher's log, the resumed workers' lines in the run's logs.
  note_run relaunch "$run" $((t2 - t0))
  echo "relaunch, run $i: the job stopped $((t1 - t0)) ms after the kill, the resumed one trained" \
    "again $((t2 - t1)) ms later: $((t2 - t0)) ms (${span:-?} ms in the logs)"
done

print_medians "$sync, killed $node; "
inplace=("${inplace_log[@]}") relaunch=("${relaunch_log[@]}")
print_medians "$sync, killed $node, in the logs; "
[ "$failed_starts" -eq 0 ] || echo "($failed_starts jobs failed before the kill and were started again)"
