#!/usr/bin/env bash
# The suite under AddressSanitizer + UndefinedBehaviorSanitizer (clang), then every libFuzzer
# target for a bounded time from its seed corpus. Exits non-zero on any finding.
# Environment: SAN_BUILD_DIR (default build-san), FUZZ_SECONDS (per target, default 30),
# JOBS (default: all cores), SAN_ALL=1 (also the multi-host and Slurm tests).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${SAN_BUILD_DIR:-build-san}
seconds=${FUZZ_SECONDS:-30}
jobs=${JOBS:-$(nproc)}
scripts/install-deps.sh
# -O0 -g1: half the compile time of -O1 on two cores (the suite then runs about half again as
# long); ASan and UBSan find the same errors, and line tables name the lines.
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DNDEBUG" -DSYNCLINE_SANITIZE=ON -DSYNCLINE_FUZZ=ON -DSYNCLINE_CUDA=OFF -DSYNCLINE_BUILD_BENCH=OFF \
  >/dev/null
cmake --build "$build" -j "$jobs"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The installed-package test builds with the system compiler against this build's libraries,
# which need the sanitizers' runtimes: it runs in the plain build only. The multi-host and
# Slurm tests (network namespaces, real mpirun and slurmd) run in the plain build too, unless
# SAN_ALL=1: here they would only repeat the launcher's paths, already covered by its unit
# tests under the sanitizers, for 40 s of CI.
skip='embed_client_example'
# The multi-host and Slurm tests, and the longest trainings (checkpoints against time, a killed
# server's resume, the ctr model's interactions, federated ctr, every codec by parameter
# servers and by all-reduce, two BSP equivalences, gossip peers as processes, raw and
# compressed, a crashed ASP worker, BSP jobs that lose workers, logreg's and softmax's documented runs, a diverging job,
# the federated attack, repeated ctr runs) and the longest loops of pure arithmetic (CHOCO's
# rounds to consensus, top-K selection against its definition, the robust rules against a
# direct computation), run in the plain build; their code paths run here in shorter tests.
# SAN_ALL=1 runs them here too.
long='TimeBasedCheckpointsCompleteAndResumeExactly|AKilledServerResumesFromTheLastCheckpoint'
long+='|CtrLearnsTheInteractionsThatLogregMisses|TheCtrModelTrainsFederatedOnEmbeddingTablesOnDisk'
long+='|EveryCodecConvergesAndCompressionShrinksTheWholeJob|CompressedAllReduceConvergesAndMovesFewerBytes'
long+='|BspWithTwoWorkersEqualsOneWorkerWithTheUnionBatch|AllReduceTrainsTheModelOfBsp'
long+='|GossipPeersTrainWithoutServers|GossipPeersTrainOnCompressedDifferences'
long+='|UnderAspTheJobGoesOnWithoutACrashedWorker|LogregConvergesAndTheRunIsDocumented'
long+='|UnderBspWithMinWorkersTheJobShrinksAndTrainsEveryExample|TwoWorkersKilledAtSeededMoments'
long+='|AJobThatLostAWorkerResumesIntoTheSamePlanExactly|RecoveryLaunchTest.Under'
long+='|SoftmaxOnCsvReportsAccuracy|ADivergingJobStopsWithStatusDivergedAndExitCode3'
long+='|MeanFollowsTheAttackersAndTheRobustRulesDoNot|BspRunsOfTheCtrModelRepeatExactly'
long+='|ChocoConsensusTest|SelectTopKTest.BothMethodsMatchTheDefinition|HybridTrainsEmbeddingsOnServers'
long+='|AggregateTest.RulesMatchADirectComputation|CoordinateRulesMatchADirectComputationForEveryN'
[ "${SAN_ALL:-0}" = 1 ] || skip="embed_client_example|^multihost\$|^slurm\$|$long"
(cd "$build" && ctest --output-on-failure -j "$jobs" -E "$skip")
corpus_copy=$(mktemp -d)
trap 'rm -rf "$corpus_copy"' EXIT
for target in request codec checkpoint_text checkpoint_file data_lines; do
  # Fuzz on a copy: the runs add what they find, which does not belong in the repository.
  cp -r "fuzz/corpus/$target" "$corpus_copy/$target"
  echo "sanitize: fuzzing $target for ${seconds}s"
  "$build/fuzz/${target}_fuzz" -max_total_time="$seconds" -print_final_stats=1 \
    -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$corpus_copy/" "$corpus_copy/$target" 2>"$corpus_copy/$target.log" || {
    tail -60 "$corpus_copy/$target.log" >&2
    echo "sanitize: $target_fuzz found a failure" >&2
    exit 1
  }
  grep -E '^stat::(number_of_executed_units|new_units_added)|cov: ' "$corpus_copy/$target.log" |
    tail -3 | sed "s/^/sanitize: $target: /"
done
echo "sanitize: ok"
