#!/usr/bin/env bash
# worker-join.sh: what a worker joining a running job (--max-workers, syncline-worker --join)
# costs and gains, by sync mode. Each run starts the job of bench/lib-recovery.sh with 2
# workers (--max-workers 3), starts a joiner 1 s in, and measures
#   join:     from starting the joiner to its first progress row in metrics.csv (it has asked
#             for a rank, registered, the donors have given their cuts, every server has taken
#             it into its clock set, it has read the data and trained an iteration; under
#             allreduce: the ring has re-formed with it, a member has broadcast it the model,
#             and it has answered the rounds up to its first clock);
#   start:    the baseline, from starting the launcher to the first row of any worker (the same
#             job's own start: what a relaunch with one more worker would cost at least);
#   wall:     the job's wall time with the join, against the same job without one;
#   waits:    iterations a donor waited at its cut for the arrival ("waited ... at its cut");
#   ring:     allreduce only: the joiner's own time from its meeting to holding the model
#             ("joined the ring ... in"), the rounds it answered before its first clock, and
#             how long each member waited in the meeting for it ("re-formed ... in").
# The job has 2 servers, none under allreduce and gossip.
# Usage: bench/worker-join.sh [BUILD] [RUNS] [SYNC...]   (defaults: build, 5, asp bsp)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${2:-5}
shift $(($# > 2 ? 2 : $#))
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(asp bsp)
out=/tmp/syncline-worker-join
# shellcheck source=bench/lib-recovery.sh
. bench/lib-recovery.sh
recovery_setup "$build" "$out"
worker=$build/bin/syncline-worker
[ -x "$worker" ] || { echo "${0##*/}: $worker is not built (./syncline build)" >&2; exit 2; }
job=(--workers 2 --max-workers 3 --train "$out/train.libsvm" --test "$out/test.libsvm"
  --epochs 3 --batch-size 64 --min-step-ms 10 --heartbeat-interval 0.1 --log-every 1)
# Rows of worker $2 (a regular expression) in run folder $1's metrics.csv; 0 before it exists.
rows_of() {
  local n
  n=$(grep -c "^[^,]*,$2," "$1/metrics.csv" 2>/dev/null || true)
  echo "${n:-0}"
}
wall_of() { sed -n 's/.*"wall_seconds": \([0-9.]*\).*/\1/p' "$1/summary.json"; }
trained_of() { sed -n 's/.*"examples_trained": \([0-9.]*\).*/\1/p' "$1/summary.json"; }

echo "worker-join: 2 servers (none under allreduce, gossip), 2 workers + 1 joiner, 3 epochs" \
  "of 20,000 examples, batch 64, 10 ms a step; $runs runs per mode"
for sync in "${modes[@]}"; do
  join=() start=() with=() without=() waits=0 trained=() ring=()
  servers=(--servers 2)
  case "$sync" in allreduce* | gossip*) servers=() ;; esac
  for r in $(seq "$runs"); do
    f=$out/$sync-$r
    t=$(ms)
    "$launch" "${job[@]}" "${servers[@]}" --sync "$sync" --out "$f" >"$f.log" 2>&1 &
    pid=$!
    wait_for "[ \"\$(rows_of '$f' '[01]')\" -gt 0 ]"
    start+=($(($(ms) - t)))
    sleep 1
    t=$(ms)
    "$worker" --coordinator "$(cat "$f/coordinator.address")" --join >"$f.joiner.log" 2>&1 &
    joiner=$!
    wait_for "[ \"\$(rows_of '$f' 2)\" -gt 0 ]"
    join+=($(($(ms) - t)))
    wait "$joiner" "$pid"
    with+=("$(wall_of "$f")")
    trained+=("$(trained_of "$f")")
    waits=$((waits + $(grep -c "at its cut for the arrival" "$f.log" || true)))
    took=$(sed -n 's/.*model of clock [0-9]* in \([0-9.]*[mu]*s*\); answers \([0-9]*\) rounds.*/\1 +\2/p' \
      "$f.joiner.log")
    met=$(sed -n 's/.*all-reduce re-formed over .* in \([0-9.]*[mu]*s*\)$/\1/p' "$f.log" | tr '\n' '/')
    [ -z "$took" ] || ring+=("$took (members met in ${met%/})")
    "$launch" "${job[@]}" "${servers[@]}" --sync "$sync" --out "$f-alone" >"$f-alone.log" 2>&1
    without+=("$(wall_of "$f-alone")")
  done
  j=$(printf '%s\n' "${join[@]}" | median)
  s=$(printf '%s\n' "${start[@]}" | median)
  a=$(printf '%s\n' "${with[@]}" | median)
  b=$(printf '%s\n' "${without[@]}" | median)
  echo "$sync: join ${j} ms (median), the job's own start $s ms (join / start:" \
    "$(awk -v a="$j" -v b="$s" 'BEGIN {printf "%.2f", a / b}')); wall $a s with the join," \
    "$b s without (ratio $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", a / b}'));" \
    "examples trained ${trained[*]}; donors waited at a cut $waits times" \
    "$([ ${#ring[@]} -eq 0 ] || echo "; joiner took the model in (+rounds answered):" \
      "${ring[*]}")"
done
