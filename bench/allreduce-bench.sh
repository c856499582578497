#!/usr/bin/env bash
# allreduce-bench.sh: syncline-bench-allreduce (bench/allreduce_bench.cc) for N = 2, 4, 8
# processes under mpirun on this machine, over loopback TCP: Syncline's ring and recursive
# doubling beside Gloo's tcp transport and Open MPI's MPI_Allreduce, forced onto TCP as well
# (--mca btl self,tcp: without it Open MPI would use shared memory between local ranks).
# Ranks beyond the cores are oversubscribed (--oversubscribe); the output says so.
#
# Usage: bench/allreduce-bench.sh [--build DIR] [--np "2 4 8"] [-- BENCH_ARGS...]
#   --build DIR   the build folder (default: build/ beside this script's folder)
#   --np LIST     process counts (default "2 4 8")
#   BENCH_ARGS    passed to every run (e.g. --max-mib 64, --impls syncline-ring,mpi, --quick)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
build="$here/../build"
nps="2 4 8"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --np) nps="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "allreduce-bench.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
bin="$build/bench/syncline-bench-allreduce"
[[ -x "$bin" ]] || { echo "allreduce-bench.sh: no $bin (ninja -C $build syncline-bench-allreduce)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "allreduce-bench.sh: no mpirun (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }

# Open MPI refuses to run as root unless told to.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for n in $nps; do
  echo "== N=$n: mpirun -np $n --oversubscribe --bind-to none --mca pml ob1 --mca btl self,tcp" \
       "--mca btl_tcp_if_include lo $bin $*"
  mpirun -np "$n" --oversubscribe --bind-to none --mca pml ob1 --mca btl self,tcp \
    --mca btl_tcp_if_include lo "$bin" "$@"
  echo
done
