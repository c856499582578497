#!/usr/bin/env bash
# The Slurm launcher on a real single-node Slurm (munge, slurmctld, slurmd started for the
# test in a temporary folder): one BSP job run locally, inside an allocation with
# `syncline-launch --launcher slurm` (srun starts the nodes), and submitted with --sbatch
# (the batch script runs the launcher in the batch step). The trained parameters
# (params.tsv) must be byte-identical. Skips (exit 77) where Slurm cannot run here.
# Usage: scripts/test-slurm.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: test-slurm.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=testenv/slurm-local.sh
source "$root/scripts/testenv/slurm-local.sh"
# shellcheck source=testenv/torch-job.sh
source "$root/scripts/testenv/torch-job.sh"
if ! reason=$(slurm_can_run); then
  echo "SKIP: $reason"
  exit 77
fi
tmp=$(mktemp -d)
cleanup() {
  slurm_down "$tmp/slurm" >/dev/null 2>&1 || true
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
step() { echo "== $*"; }
fail() {
  echo "test-slurm: FAIL: $*" >&2
  for f in "$tmp"/*.log "$tmp"/sbatch/slurm-*.out; do
    [ -f "$f" ] && { echo "--- $f" >&2; tail -25 "$f" >&2; }
  done
  exit 1
}
mkdir -p "$tmp/slurm"
slurm_up "$tmp/slurm" >"$tmp/slurm-up.log" 2>&1 || fail "could not start Slurm: $(tail -5 "$tmp/slurm-up.log")"
launch="$build/bin/syncline-launch"
# Four tasks on a two-core node: --overcommit, for salloc and for the launcher's srun.
job=(--servers 2 --workers 2 --sync bsp --epochs 2 --gen-rows 6000 --gen-test-rows 1000 --seed 11
  --checkpoint-every 20)
cd "$tmp"

step "local launch (the reference)"
timeout 120 "$launch" "${job[@]}" --out "$tmp/local" >"$tmp/local.log" 2>&1 || fail "local job failed"

step "inside an allocation: salloc, then srun starts the nodes"
timeout 180 salloc -n 4 --overcommit "$launch" "${job[@]}" --launcher slurm \
  --launcher-args "--overcommit" --out "$tmp/alloc" >"$tmp/alloc.log" 2>&1 ||
  fail "the job in an allocation failed"
grep -q "nodes by slurm" "$tmp/alloc.log" || fail "the launcher did not use srun"
cmp "$tmp/local/params.tsv" "$tmp/alloc/params.tsv" || fail "params.tsv differs from local"

step "PyTorch workers (syncline-launch -- COMMAND) inside an allocation: the local model"
if torch_can_run; then
  read -r -a torch_job <<<"$(torch_job_args)"
  export PYTHONPATH="$build/python"
  timeout 120 "$launch" --out "$tmp/torch-local" "${torch_job[@]}" >"$tmp/torch-local.log" 2>&1 ||
    fail "local PyTorch job failed"
  timeout 180 salloc -n 4 --overcommit "$launch" --launcher slurm --launcher-args "--overcommit" \
    --out "$tmp/torch-alloc" "${torch_job[@]}" >"$tmp/torch-alloc.log" 2>&1 ||
    fail "the PyTorch job in an allocation failed"
  unset PYTHONPATH
  [ "$(torch_result "$tmp/torch-local")" = "$(torch_result "$tmp/torch-alloc")" ] ||
    fail "the PyTorch model under Slurm differs from the local one"
fi

step "--sbatch: a batch script, submitted, resuming when requeued"
timeout 180 "$launch" "${job[@]}" --sbatch --sbatch-args "--wait --overcommit" \
  --launcher-args "--overcommit" --out "$tmp/sbatch" >"$tmp/sbatch.log" 2>&1 ||
  fail "the batch job failed"
grep -q -- "--resume-if-any" "$tmp/sbatch/job.sbatch" || fail "the batch script does not resume"
[ -f "$tmp/sbatch/params.tsv" ] || fail "the batch job wrote no params.tsv"
cmp "$tmp/local/params.tsv" "$tmp/sbatch/params.tsv" || fail "sbatch params.tsv differs from local"

step "a requeued batch job resumes from its newest checkpoint"
# The same script again, as Slurm runs it after a requeue: it must resume, not start afresh.
timeout 180 sbatch --wait --overcommit "$tmp/sbatch/job.sbatch" >"$tmp/requeue.log" 2>&1 ||
  fail "the second run of the batch script failed"
grep -hq "resum" "$tmp"/sbatch/slurm-*.out || fail "the second run did not resume"
cmp "$tmp/local/params.tsv" "$tmp/sbatch/params.tsv" || fail "resumed params.tsv differs"
echo "test-slurm: ok"
