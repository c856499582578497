#!/usr/bin/env bash
# The GPU checks, prepared here and run once on a machine with a GPU (the device tool's H200,
# whose image has CUDA but none of the project's Debian libraries, and nothing to install
# them from).
#
#   scripts/gpu-check.sh bundle        here: builds the GPU tests, the binaries the launch tests
#                                      start and the benchmarks (sm_90), and packs them with
#                                      every library the other machine lacks into
#                                      .gpu-bundle/bundle.tar.xz (about 14 MB; ignored by git;
#                                      carry .gpu-bundle)
#   scripts/gpu-check.sh run [OUT]     there, from the repository root: puts the binaries where
#                                      the tests expect them, then runs, in this order,
#                                        1. the GPU tests (the CUDA executor's primitives against
#                                           the host's, device models against the CPU models,
#                                           the CUDA codecs, one-rank NCCL, the launch tests of
#                                           the mlp and the ctr model with GPU workers),
#                                        2. syncline-bench-gpu,
#                                        3. a ctr job at batch 4096 with embeddings on CPU
#                                           servers, on 2 GPU workers, on 2 CPU workers and on
#                                           1 GPU worker (under BSP, then ASP reading ahead,
#                                           then BSP with its embedding rows pushed top-K
#                                           compressed, encoded on the GPU),
#                                           for the step split (network, PCIe or compute?),
#                                           and syncline-bench-data on its file,
#                                        4. the CUDA tests again under compute-sanitizer:
#                                           memcheck, racecheck and initcheck on the models',
#                                           memcheck on NCCL's, memcheck and racecheck on the
#                                           codecs',
#                                        5. the codec benchmark,
#                                      printing a summary line per step, the benchmarks' tables
#                                      and the jobs' step_seconds, and packing every log into
#                                      OUT/logs.tar.gz (OUT: default $OUT, else
#                                      ./gpu-check-out). It never stops at the first failure:
#                                      one run must say everything, within GPU_CHECK_SECONDS
#                                      (default 540): steps that would run past it are cut
#                                      short or skipped, saying so. GPU_CHECK_ONLY (a bash
#                                      regular expression) runs only the steps whose names
#                                      match it, for a second, shorter run.
#
# Example with the device tool: `scripts/gpu-check.sh bundle` here, then
#   run(command="scripts/gpu-check.sh run", carry=[".gpu-bundle"], timeout_s=590)
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE=.gpu-bundle
mode=${1:-}

bundle() {
  set -e
  local build=${BUILD_DIR:-build}
  cmake -S . -B "$build" -G Ninja -DSYNCLINE_CUDA=ON >/dev/null
  local tests=(device/device_cuda_executor_test device/device_models_test
               compression/compression_cuda_test
               collective/nccl_communicator_test tests/integration_test)
  local tools=(bin/syncline-launch bin/syncline-ps bin/syncline-worker bin/syncline-gen
               bench/syncline-bench-gpu bench/syncline-bench-codec bench/syncline-bench-data)
  local targets=()
  for t in "${tests[@]}" "${tools[@]}"; do targets+=("$(basename "$t")"); done
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib"
  : >"$stage/paths"
  for t in "${tests[@]}" "${tools[@]}"; do
    local path
    path=$(find "$build" -type f -name "$(basename "$t")" -perm -u+x | head -1)
    [ -n "$path" ] || { echo "gpu-check: $t was not built" >&2; exit 1; }
    strip --strip-debug -o "$stage/bin/$(basename "$t")" "$path"
    # The launch tests start the node binaries by the absolute paths they were built at.
    echo "$(basename "$t") $(realpath "$path")" >>"$stage/paths"
    # Every library but the C library's and CUDA's (the other machine has its own of those).
    # The C++ runtime goes apart: the other machine's is likely newer, and an older one put
    # first on LD_LIBRARY_PATH would break its own tools (compute-sanitizer).
    ldd "$path" | awk '/=> \// {print $3}' | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*|libcudart.so*|\
        libcublas*|libnccl.so*) ;;
        libstdc++.so*|libgcc_s.so*) mkdir -p "$stage/compat" && cp -Ln "$lib" "$stage/compat/" ;;
        *) cp -Ln "$lib" "$stage/lib/" 2>/dev/null || true ;;
      esac
    done
  done
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE"
  tar -C "$stage" -cJf "$BUNDLE/bundle.tar.xz" .
  rm -rf "$stage"
  grep -qx "/$BUNDLE/" .git/info/exclude 2>/dev/null || echo "/$BUNDLE/" >>.git/info/exclude
  echo "gpu-check: $(du -sh "$BUNDLE" | cut -f1) in $BUNDLE (the device tool carries at most 64 MiB)"
}

# Finds a directory holding `lib` among CUDA's and the Python packages' (NVIDIA's wheels).
find_lib() {
  local lib=$1 d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/lib/x86_64-linux-gnu; do
    [ -e "$d/$lib" ] && { echo "$d"; return; }
  done
  python3 - "$lib" <<'EOF' 2>/dev/null
import glob, os, site, sys
for root in site.getsitepackages():
    for hit in glob.glob(os.path.join(root, "nvidia", "**", sys.argv[1]), recursive=True):
        print(os.path.dirname(hit)); sys.exit(0)
EOF
}

run() {
  local dest=${1:-${OUT:-gpu-check-out}}
  local out=/tmp/syncline-gpu-check
  rm -rf "$out" && mkdir -p "$out" "$dest"
  local summary="$out/summary.txt"
  : >"$summary"
  [ -f "$BUNDLE/bundle.tar.xz" ] || { echo "gpu-check: no $BUNDLE/bundle.tar.xz: run 'scripts/gpu-check.sh bundle' first and carry $BUNDLE" | tee -a "$summary"; return 1; }
  local unpacked=/tmp/syncline-gpu-bundle
  rm -rf "$unpacked" && mkdir -p "$unpacked" && tar -C "$unpacked" -xJf "$BUNDLE/bundle.tar.xz"
  local libs="$unpacked/lib"
  # The machine's C++ runtime if it is as new as the build's (GCC 12: GLIBCXX_3.4.30), else ours.
  local system_cxx
  system_cxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  if [ -z "$system_cxx" ] || ! grep -q GLIBCXX_3.4.30 "$system_cxx" 2>/dev/null; then
    libs="$libs:$unpacked/compat"
    echo "using the build's C++ runtime (the machine's is older or missing)" | tee -a "$summary"
  fi
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    local d
    d=$(find_lib "$lib")
    if [ -n "$d" ]; then libs="$libs:$d"; else echo "missing $lib" | tee -a "$summary"; fi
  done
  export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  while read -r name path; do
    mkdir -p "$(dirname "$path")" && cp "$unpacked/bin/$name" "$path"
  done <"$unpacked/paths"
  bin() { awk -v n="$1" '$1 == n {print $2}' "$unpacked/paths"; }
  { nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.mem --format=csv; } \
    >"$out/gpu.txt" 2>&1
  local failed=0 budget=${GPU_CHECK_SECONDS:-540}
  # step NAME LIMIT COMMAND...: runs it (at most LIMIT seconds), logs to NAME.log, one line of
  # summary; skipped when it could run past the budget. After each, the summary and the logs
  # are copied to DEST, so that a run cut short still returns what it did.
  step() {
    local name=$1 limit=$2
    shift 2
    [[ "$name" =~ ${GPU_CHECK_ONLY:-.} ]] || return 0
    if [ $((SECONDS + limit)) -gt "$budget" ]; then
      limit=$((budget - SECONDS))
      if [ "$limit" -lt 20 ]; then
        printf '%-28s skipped: the %ds budget is spent\n' "$name" "$budget" | tee -a "$summary"
        failed=1
        return
      fi
    fi
    local start=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || failed=1
    printf '%-28s rc=%-3d %4ds  %s\n' "$name" "$rc" $((SECONDS - start)) \
      "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test|ERROR SUMMARY|RACECHECK SUMMARY' \
           "$out/$name.log" | tr '\n' ' ' | cut -c1-160)" | tee -a "$summary"
    cp "$summary" "$dest/summary.txt"
    tar -C "$out" -czf "$dest/logs.tar.gz" .
  }
  # Most telling first: the tests, the benchmark, the ctr job's split, then the sanitizers
  # (slowest), the codec benchmark last (measured on an H200 before).
  step executor_test 60 "$(bin device_cuda_executor_test)"
  step device_model_test 120 "$(bin device_models_test)"
  step codec_cuda_test 90 "$(bin compression_cuda_test)"
  step nccl_test 90 "$(bin nccl_communicator_test)"
  step launch_tests 240 "$(bin integration_test)" --gtest_filter='MlpLaunchTest.*:CtrLaunchTest.Gpu*'
  step bench_gpu 180 "$(bin syncline-bench-gpu)" --seconds 0.3
  # ctr at batch 4096, 2 CPU servers, 2 workers, on GPUs (both on cuda:0 here) and on CPUs.
  local data=/tmp/syncline-gpu-check-data
  mkdir -p "$data"
  step ctr_data 60 "$(bin syncline-gen)" criteo --rows 400000 --test-rows 20000 --seed 7 \
    --out "$data/train.tsv" --test-out "$data/test.tsv"
  # How fast that file's examples come, parsed on 1, 2 and 4 threads (a worker uses a quarter
  # of the hardware threads, up to 4): what bounds a GPU worker's batch part.
  step bench_data 60 "$(bin syncline-bench-data)" --train "$data/train.tsv" --parsers 1,2,4
  # 100 steps per worker; then one GPU worker alone, whose split no second worker on the same
  # GPU disturbs; then that worker under ASP reading a batch ahead, so that its pull overlaps
  # the step before; then that worker under BSP pushing its embedding rows compressed (top-K
  # with a residual per row, kept on the GPU: only what is sent crosses PCIe); then pulling
  # them compressed as well (fp16 deltas, decoded on the GPU against the copy kept there).
  for device in cuda cpu cuda1 cuda1asp cuda1topk cuda1topkpull; do
    local sync=bsp
    [ "$device" = cuda1asp ] && sync="asp --read-ahead on"
    [ "$device" = cuda1topk ] && sync="bsp --compress topk:0.01"
    [ "$device" = cuda1topkpull ] && sync="bsp --compress topk:0.01 --compress-pull fp16"
    # shellcheck disable=SC2086
    step "ctr_job_$device" 120 "$(bin syncline-launch)" --servers 2 \
      --workers "$([ "${device#cuda1}" != "$device" ] && echo 1 || echo 2)" --sync $sync \
      --model ctr --train "$data/train.tsv" --test "$data/test.tsv" --batch-size 4096 \
      --epochs 2 --device "${device%%1*}" --out "$out/ctr-$device"
  done
  # Under the sanitizers, every CUDA case but the 100-step runs (the same kernels, 100 times).
  local cuda_only='*Cuda*:-*OneHundredSteps*' sanitizer
  sanitizer=$(command -v compute-sanitizer ||
              ls /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null |
              head -1)
  [ -n "$sanitizer" ] || { echo "compute-sanitizer not found: the sanitizer steps fail" | tee -a "$summary"; sanitizer=compute-sanitizer; }
  step memcheck_executor 60 "$sanitizer" --tool memcheck --error-exitcode 9 \
    "$(bin device_cuda_executor_test)"
  step memcheck_models 120 "$sanitizer" --tool memcheck --error-exitcode 9 \
    "$(bin device_models_test)" --gtest_filter="$cuda_only"
  step racecheck_models 120 "$sanitizer" --tool racecheck --error-exitcode 9 \
    "$(bin device_models_test)" --gtest_filter="$cuda_only"
  step initcheck_models 120 "$sanitizer" --tool initcheck --error-exitcode 9 \
    "$(bin device_models_test)" --gtest_filter="$cuda_only"
  # NCCL's initialisation asks for the attributes of kernels its build has no image of for this
  # GPU (cudaErrorNoKernelImageForDevice, 4 times, handled by NCCL): API errors of NCCL's own,
  # not ours, so only memory errors count here.
  step memcheck_nccl 60 "$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$(bin nccl_communicator_test)"
  step memcheck_codecs 60 "$sanitizer" --tool memcheck --error-exitcode 9 \
    "$(bin compression_cuda_test)"
  step racecheck_codecs 60 "$sanitizer" --tool racecheck --error-exitcode 9 \
    "$(bin compression_cuda_test)"
  step bench_codec 60 "$(bin syncline-bench-codec)" --size-mib 4 64 256
  echo
  cat "$out/bench_gpu.log" "$out/bench_data.log" 2>/dev/null
  for device in cuda cpu cuda1 cuda1asp cuda1topk cuda1topkpull; do
    echo "ctr job on $device:"
    grep -E '"(device|step_seconds|steps_per_worker|test_auc|wall_seconds|bytes_pushed|bytes_pulled)"' \
      "$out/ctr-$device/summary.json" 2>/dev/null
  done
  cp "$summary" "$dest/summary.txt"
  tar -C "$out" -czf "$dest/logs.tar.gz" .
  echo "gpu-check: logs in $dest/logs.tar.gz"
  return $failed
}

case "$mode" in
  bundle) bundle ;;
  run) shift; run "$@" ;;
  *) sed -n '2,25p' "$0"; exit 2 ;;
esac
