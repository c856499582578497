#!/usr/bin/env bash
# python-vs-cpp.sh: a worker's dense push and pull throughput from Python (bench/python_link.py,
# syncline._native) against the C++ WorkerSession (syncline-bench-link), in one sitting, at
# request sizes of 4 KiB and 1 MiB: each pair of runs is a job of 1 server and 1 worker (asp,
# loopback, plaintext) whose worker is one or the other, alternated --turns times. Prints a row
# per run and the median ratio Python / C++ per size and direction (docs/PYTORCH.md).
# Usage: bench/python-vs-cpp.sh [--build DIR] [--out DIR] [--seconds S] [--turns N]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
out=runs/python-vs-cpp
seconds=3
turns=3
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "python-vs-cpp: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for b in bin/syncline-launch bench/syncline-bench-link python/syncline/_native*.so; do
  compgen -G "$build/$b" >/dev/null || { echo "python-vs-cpp: $build/$b is missing; build first" >&2; exit 1; }
done
mkdir -p "$out"
results="$out/results.tsv"
printf 'worker\trequest_bytes\tturn\tpush_MBps\tpull_MBps\n' >"$results"
run() {  # NAME REQUEST_BYTES TURN COMMAND...
  local name=$1 bytes=$2 turn=$3
  shift 3
  local dir="$out/$name-$bytes-$turn"
  rm -rf "$dir"
  PYTHONPATH="$build/python" "$build/bin/syncline-launch" --servers 1 --workers 1 --sync asp \
    --out "$dir" -- "$@" >"$dir.log" 2>&1 || { tail -20 "$dir.log" >&2; exit 1; }
  local line
  line=$(grep -h "^link_bench" "$dir/logs/w0.log")
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$bytes" "$turn" \
    "$(sed -E 's/.*push_MBps=([0-9.]+).*/\1/' <<<"$line")" \
    "$(sed -E 's/.*pull_MBps=([0-9.]+).*/\1/' <<<"$line")" | tee -a "$results"
}
common="--table-bytes 16777216 --window 4 --seconds $seconds"
for turn in $(seq "$turns"); do
  for bytes in 4096 1048576; do
    # shellcheck disable=SC2086,SC2016
    run cpp "$bytes" "$turn" sh -c 'exec "$0" --coordinator "$SYNCLINE_COORDINATOR" --rank "$SYNCLINE_RANK" "$@"' \
      "$build/bench/syncline-bench-link" $common --request-bytes "$bytes"
    # shellcheck disable=SC2086
    run python "$bytes" "$turn" /usr/bin/python3 "$here/python_link.py" $common --request-bytes "$bytes"
  done
done
/usr/bin/python3 - "$results" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print()
print("| request | direction | C++ MB/s (median) | Python MB/s (median) | Python / C++ |")
print("| ---: | --- | ---: | ---: | ---: |")
for size in sorted({int(r["request_bytes"]) for r in rows}):
    for d in ("push", "pull"):
        med = {w: statistics.median(float(r[d + "_MBps"]) for r in rows
                                    if r["worker"] == w and int(r["request_bytes"]) == size)
               for w in ("cpp", "python")}
        label = f"{size // 1024} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
        print(f"| {label} | {d} | {med['cpp']:.0f} | {med['python']:.0f} |"
              f" {med['python'] / med['cpp']:.2f} |")
PY
