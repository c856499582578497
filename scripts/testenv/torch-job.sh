# Sourced by the multi-host and Slurm tests: a small syncline.torch job (python/tests/workers/
# parity.py: a sharded embedding and dense layers, BSP, 2 servers and 2 workers) and how to
# compare two runs of it. Needs $root (the source tree) and $build.

# Whether /usr/bin/python3 has torch; otherwise prints why the steps are skipped.
torch_can_run() {
  /usr/bin/python3 -c "import torch" 2>/dev/null && return 0
  echo "   skipped: /usr/bin/python3 has no torch (install-deps.sh --for-tests installs it)"
  return 1
}

# The job's flags and worker command, for syncline-launch's command line.
torch_job_args() {
  echo --servers 2 --workers 2 --sync bsp --seed 11 -- /usr/bin/python3 \
    "$root/python/tests/workers/parity.py" adagrad 20 32
}

# Worker 0's result line of run folder $1 (under mpirun and srun a script's own output lands in
# the launcher's log, not in logs/w0.log).
torch_result() {
  grep -h '^RESULT {"rank": 0' "$1"/logs/*.log
}
