#!/bin/bash
# ε from `syncline-launch privacy` against an independent accountant, Google's dp-accounting
# (PyPI), over a grid of sampling rates, noise multipliers and steps: within 1% everywhere, and
# the noise it calibrates for a budget keeps dp-accounting's ε within that budget.
# dp-accounting goes into a test-only virtual environment in the build folder (made once,
# reused); where PyPI cannot be reached the test is skipped (exit 77), saying so.
# Usage: scripts/test-privacy-reference.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
venv="$build/privacy-reference-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import dp_accounting' 2>/dev/null; then
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  if ! timeout 600 "$venv/bin/pip" install --quiet --disable-pip-version-check \
      'dp-accounting==0.6.0' >"$build/privacy-reference-pip.log" 2>&1; then
    echo "SKIP: cannot install dp-accounting from PyPI (see $build/privacy-reference-pip.log)"
    rm -rf "$venv"
    exit 77
  fi
fi
exec "$venv/bin/python" "$(dirname "$0")/../tests/privacy/reference_accountant.py" \
  "$build/bin/syncline-launch"
