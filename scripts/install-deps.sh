#!/usr/bin/env bash
# Installs the Debian packages Syncline needs to build, test and run. Idempotent: installs only
# what is missing, and does nothing (not even apt-get update) when everything is present.
# Run as root, or as a user with sudo. `--for-tests` adds what the multi-host tests need.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache
  libzmq3-dev cppzmq-dev capnproto libcapnp-dev librocksdb-dev libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libtomlplusplus-dev
  gnuplot-nox clang-format clang libsodium-dev libssl-dev libopenblas-dev zlib1g-dev
  # The Python package (python/): pybind11 for Debian's python3.
  python3-dev pybind11-dev
  # The images `syncline-gen fashion-mnist` converts (/usr/share/datasets/fashion-mnist, 30 MB).
  dataset-fashion-mnist
)
# What the multi-host tests run against: real Open MPI, a real single-node Slurm, network
# namespaces for hosts (ip, python3 for socket checks), the all-reduce benchmark's baselines
# (Gloo, MPI), strace (the checkpoint test that watches for fsync), universal-ctags
# (scripts/long-functions.sh), PyTorch with pytest for the Python package's tests
# (libopenblas0-openmp: without it torch runs on the slow reference BLAS), a real Prometheus
# (its server and promtool) for the metrics test, and python3-venv for the test-only
# environment that TensorBoard's reader is installed into. `--for-tests` adds them.
TEST_PACKAGES=(openmpi-bin slurm-wlm munge iproute2 python3 libopenmpi-dev libgloo-dev strace
  universal-ctags python3-torch python3-numpy python3-pytest libopenblas0-openmp prometheus
  python3-venv)
if [ "${1:-}" = "--for-tests" ]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
fi
# Intel's ipsec-mb (x86-64 only): the sealed TCP plane's AES-256-GCM at 2-3x OpenSSL 3.0's
# speed where the CPU has VAES (core/seal.cc). Optional: without it OpenSSL seals.
if [ "$(dpkg --print-architecture 2>/dev/null)" = "amd64" ]; then
  PACKAGES+=(libipsec-mb-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run this script as root (or install sudo) to install them" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
