#!/usr/bin/env bash
# The public API end to end: installs the build into a temporary prefix, builds
# examples/embed_client against the installed package, and runs two of its processes as the
# workers of a real job (syncline-launch --external-workers). Fails unless the job ends ok and
# the program's model learned (test loss below that of a constant guess, ln 2).
# Usage: scripts/test-embed-client.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: test-embed-client.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "test-embed-client: $*" >&2
  for f in "$tmp"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || fail "cmake --install failed"
cmake -S "$root/examples/embed_client" -B "$tmp/embed" -G Ninja \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/configure.log" 2>&1 || fail "configuring the example failed"
cmake --build "$tmp/embed" >"$tmp/build.log" 2>&1 || fail "building the example failed"

"$tmp/prefix/bin/syncline-launch" --external-workers --workers 2 --sync bsp \
  --out "$tmp/run" >"$tmp/launch.log" 2>&1 &
launcher=$!
pids+=("$launcher")
for _ in $(seq 200); do
  [ -s "$tmp/run/coordinator.address" ] && break
  sleep 0.1
done
[ -s "$tmp/run/coordinator.address" ] || fail "the launcher wrote no coordinator address"
address=$(cat "$tmp/run/coordinator.address")
workers=()
for rank in 0 1; do
  "$tmp/embed/embed_client" --coordinator "$address" --rank "$rank" >"$tmp/w$rank.log" 2>&1 &
  workers+=("$!")
  pids+=("$!")
done
for rank in 0 1; do
  wait "${workers[$rank]}" || fail "embed_client --rank $rank failed"
done
wait "$launcher" || fail "syncline-launch --external-workers failed"
summary="$tmp/run/summary.json"
grep -q '"status": "ok"' "$summary" || fail "the job did not end ok: $(cat "$summary")"
# The clients' own steps, and no data file that no client read.
grep -q '^  "steps": 0,' "$summary" && fail "the summary counts no steps: $(cat "$summary")"
grep -q '"train": "",' "$summary" || fail "the summary names a training file: $(cat "$summary")"
[ -e "$tmp/run/coordinator.address" ] && fail "coordinator.address outlived the job"
loss=$(sed -n 's/.*"test_loss": \([0-9.eE+-]*\).*/\1/p' "$summary")
awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 0.6931) }' ||
  fail "test loss '$loss' is no better than a constant guess"
# The Python package installs beside the C++ one and imports from there.
PYTHONPATH="$tmp/prefix/lib/python3/dist-packages" /usr/bin/python3 -c \
  "import syncline, syncline._native; assert syncline._native.__file__.startswith('$tmp/prefix')" ||
  fail "the installed Python package does not import"
echo "test-embed-client: ok (2 external workers, test loss $loss; $(cat "$tmp/w0.log"))"
