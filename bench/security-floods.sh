#!/usr/bin/env bash
# The floods of docs/SECURITY.md against a keyed job's ps0, as the audit of issue 46 ran them:
# a training job with --checkpoint-every under `ulimit -n 256` meets 300 idle connections, one under
# `ulimit -n 1024` meets 1000, and two meet a stream of bogus CURVE HELLOs for 3 s (sent with
# the greeting, and after the node's greeting as ZeroMQ clients do). Prints
# ps0's descriptors, resident memory and CPU (bench/flood.py), and each job's exit code,
# status and checkpoints. The job listens on --interface (default: the first interface off
# loopback), so that it is keyed.
# Usage: bench/security-floods.sh BIN_DIR [INTERFACE]   (BIN_DIR: a build's bin/)
# FLOODS="idle300 hello" runs only those.
set -uo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
iface=${2:-$(ip -o -4 addr show | awk '$4 !~ /^127\./ {print $2; exit}')}
[ -n "$iface" ] || { echo "no interface off loopback" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin/syncline-gen" --out "$tmp/train.libsvm" --rows 20000 --features 10000 --nnz 20 \
  --seed 11 >/dev/null

# run NAME NOFILE FLOOD...: a keyed job of about 20 s under `ulimit -n NOFILE`, flooded once
# ps0 listens.
run() {
  local name=$1 nofile=$2
  shift 2
  local out="$tmp/$name"
  (ulimit -n "$nofile" && exec "$bin/syncline-launch" --servers 1 --workers 1 --sync bsp \
    --train "$tmp/train.libsvm" --epochs 2 --batch-size 32 --min-step-ms 20 --checkpoint-every 50 \
    --interface "$iface" --out "$out") >"$tmp/$name.log" 2>&1 &
  local launcher=$!
  local address="" pid=""
  for _ in $(seq 1 200); do
    address=$(grep -ho 'ps0 on .* listening at tcp://[0-9.:]*' "$tmp/$name.log" 2>/dev/null |
      sed 's/.*listening at //' | head -1)
    pid=$(pgrep -P "$launcher" -f syncline-ps | head -1)
    [ -n "$address" ] && [ -n "$pid" ] && break
    sleep 0.1
  done
  sleep 3  # training (and its tables' stores) under way, as in the audit
  echo "== $name: ulimit -n $nofile, ps0 (pid $pid) at $address"
  /usr/bin/python3 "$here/flood.py" "$1" "$address" "${@:2}" "$pid"
  wait "$launcher"
  local code=$?
  echo "   checkpoint failures in the log: $(grep -c 'checkpoint [0-9]* failed' "$tmp/$name.log"), of them for descriptors: $(grep -c 'checkpoint [0-9]* failed.*Too many open files' "$tmp/$name.log")"
  echo "   job exit code $code; summary: $(grep -hoE '"(status|checkpoints_written|checkpoints_failed)": [^,]*' "$out/summary.json" | tr '\n' ' ')"
  [ "$code" = 0 ] || grep -hE 'failed|error|Too many' "$tmp/$name.log" | head -5 | cut -c1-300
}

for flood in ${FLOODS:-idle300 idle1000 quiet hello hello-after-greeting}; do
  case $flood in
    idle300) run idle300 256 idle 300 8 ;;
    idle1000) run idle1000 1024 idle 1000 8 ;;
    quiet | hello | hello-after-greeting) run "$flood" 1024 "$flood" 3 ;;
  esac
done
