# lib-recovery.sh: what the recovery benchmarks (worker-recovery.sh, node-recovery.sh,
# collective-recovery.sh) share. Sourced from the repository root, not run; messages name the
# script that sourced it.
#   recovery_args ARG...       parses the flags --node, --runs, --build, --out (and --sync where
#                              the caller has set sync) over the caller's defaults, -h printing
#                              the caller's opening comment; sets binary and rank of the node
#   recovery_setup BUILD OUT   checks that syncline-launch and syncline-gen are built under BUILD,
#                              empties OUT, generates the data into it and sets launch (the
#                              launcher) and job (the flags of the job both benchmarks run)
#   ms                         the time now in milliseconds
#   median                     the median of the numbers on stdin, one a line
#   start_and_kill PATTERN FOLDER [FLAG...]
#                              starts the job into run folder FOLDER with the flags after it and
#                              SIGKILLs the launcher's child whose command line matches PATTERN
#                              (pkill -P -f: never another job's process) a second later; sets
#                              pid (the launcher's) and t0 (the time of the kill)
#   time_in_place START CONDITION FOLDER [FLAG...]
#                              runs START (start_and_kill or the caller's like it) with the node's
#                              pattern, FOLDER and the flags, waits for CONDITION and for the
#                              launcher; sets elapsed (ms from the kill until CONDITION held)
#   wait_for CONDITION         evaluates CONDITION every 50 ms until it holds, at most 600 times;
#                              fails with a message when it never does
#   print_medians PREFIX       prints the medians of the arrays inplace and relaunch over runs
#                              runs, after PREFIX
# The variables it sets (launch, job, pid, t0, elapsed, node, runs, build, out, sync, binary,
# rank) and reads (inplace, relaunch, runs) are the caller's.
# shellcheck shell=bash disable=SC2034,SC2154

recovery_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --sync) [ -n "${sync+set}" ] || recovery_usage "$1"; sync=$2; shift 2 ;;
      --node) node=$2; shift 2 ;;
      --runs) runs=$2; shift 2 ;;
      --build) build=$2; shift 2 ;;
      --out) out=$2; shift 2 ;;
      --keys) keys=$2; shift 2 ;;
      -h|--help)
        # (The caller has changed to the repository root.)
        awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "bench/${0##*/}"
        exit 0 ;;
      *) recovery_usage "$1" ;;
    esac
  done
  case "${keys:=none}" in
    none | job | node) ;;
    *) echo "${0##*/}: --keys must be none, job or node, not $keys" >&2; exit 2 ;;
  esac
  case "$node" in
    ps[01]) binary=syncline-ps; rank=${node#ps} ;;
    w[0-3]) binary=syncline-worker; rank=${node#w} ;;
    *) echo "${0##*/}: --node must be ps0, ps1 or w0..w3, not $node" >&2; exit 2 ;;
  esac
}

recovery_usage() {
  echo "${0##*/}: unknown argument $1 (see --help)" >&2
  exit 2
}

recovery_setup() {
  local build=$1 out=$2 gen b
  launch=$build/bin/syncline-launch
  gen=$build/bin/syncline-gen
  for b in "$launch" "$gen"; do
    [ -x "$b" ] || { echo "${0##*/}: $b is not built (./syncline build)" >&2; exit 2; }
  done
  rm -rf "$out" && mkdir -p "$out"
  "$gen" --out "$out/train.libsvm" --test-out "$out/test.libsvm" --rows 20000 --test-rows 4000 \
    --features 10000 --nnz 20 --seed 11 >/dev/null
  job=(--servers 2 --workers 4 --sync bsp --train "$out/train.libsvm" --test "$out/test.libsvm"
    --epochs 3 --batch-size 64 --min-step-ms 10 --heartbeat-interval 0.1)
  # --keys job|node: a keyed job (every connection authenticated and encrypted), its nodes
  # holding the one job key or keys of their own (a replacement then gets a new one).
  if [ "${keys:-none}" != none ]; then
    (umask 077 && printf 'syncline-job-key v1\n%s\n' \
      "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$out/job.key")
    job+=(--key-file "$out/job.key" --node-keys "$([ "$keys" = node ] && echo on || echo off)")
  fi
}

ms() { date +%s%3N; }

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

start_and_kill() {
  local pattern=$1 folder=$2
  shift 2
  "$launch" "${job[@]}" "$@" --out "$folder" >"$folder.log" 2>&1 &
  pid=$!
  sleep 1
  t0=$(ms)
  pkill -9 -P "$pid" -f "$pattern"
}

time_in_place() {
  local start=$1 condition=$2 t1
  shift 2
  "$start" "$binary.*--rank $rank$" "$@"
  wait_for "$condition"
  t1=$(ms)
  wait "$pid"
  elapsed=$((t1 - t0))
}

wait_for() {
  for _ in $(seq 600); do
    if eval "$1"; then return 0; fi
    sleep 0.05
  done
  echo "${0##*/}: timed out waiting for: $1" >&2
  return 1
}

print_medians() {
  local a b
  a=$(printf '%s\n' "${inplace[@]}" | median)
  b=$(printf '%s\n' "${relaunch[@]}" | median)
  echo "$1median over $runs runs: in place $a ms, relaunch with --resume $b ms" \
    "(in place / relaunch: $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", a / b}'))"
}
