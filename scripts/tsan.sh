#!/usr/bin/env bash
# The tests of the code that runs threads of its own, under ThreadSanitizer (clang): the
# prefetching reader (data_test), the server with its update pool and checkpoint
# writer (ps_test), servers and workers on threads over the in-process transport
# (consistency_property_test, client_test, worker_test), and the metrics registry and HTTP
# endpoint that serve scrapes from a thread of their own (core_test). Exits non-zero on any report.
# Environment: TSAN_BUILD_DIR (default build-tsan), JOBS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TSAN_BUILD_DIR:-build-tsan}
jobs=${JOBS:-$(nproc)}
targets=(data_test ps_test consistency_property_test client_test worker_test core_test)
# Where only some of a binary's tests are ours to check: core_test's CURVE tests trip TSan on
# Debian's abseil Mutex, which is not built with TSan's annotations (a false report); its
# metrics registry and HTTP endpoint, whose threads serve scrapes, are checked.
declare -A only=([core_test]='MetricsTest.*:HttpServerTest.*')
scripts/install-deps.sh
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DSYNCLINE_TSAN=ON -DSYNCLINE_CUDA=OFF \
  -DSYNCLINE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
# Libraries built without TSan (ZeroMQ, RocksDB, OpenBLAS) synchronise in ways it cannot see;
# the tests here run on the in-process transport and keep RocksDB calls on one thread.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp"
for t in "${targets[@]}"; do
  bin=$(find "$build" -name "$t" -type f -perm -u+x | head -1)
  echo "tsan: $t"
  "$bin" --gtest_brief=1 ${only[$t]:+"--gtest_filter=${only[$t]}"} ||
    { echo "tsan: $t failed" >&2; exit 1; }
done
echo "tsan: ok"
