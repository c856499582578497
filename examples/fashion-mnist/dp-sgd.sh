#!/usr/bin/env bash
# dp-sgd.sh: the DP-SGD figures of docs/PRIVACY.md. examples/fashion-mnist/dp-sgd.toml (softmax
# regression on Fashion-MNIST, 2 workers, BSP) at --dp-epsilon 1, 3 and 8, and the same job
# without DP (at batch 64 and lr 0.1); prints a Markdown table of test accuracy and, with
# gnuplot, writes OUT/accuracy_vs_epsilon.png.
#
# Usage: examples/fashion-mnist/dp-sgd.sh [--build DIR] [--out DIR] [--noise-seed S]
#   --build DIR      the build folder (default: build/ in the repository)
#   --out DIR        results (default runs/fashion-mnist-dp)
#   --noise-seed S   --dp-noise-seed for repeatable runs (default 1; 0: fresh noise)
# Exit status: 0 when every run succeeded, 1 otherwise, 2 bad usage.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="$root/build"
out="$root/runs/fashion-mnist-dp"
noise_seed=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --noise-seed) noise_seed=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "dp-sgd.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
source "$root/examples/fashion-mnist/prepare.sh" dp-sgd.sh
job=("$root/examples/fashion-mnist/dp-sgd.toml" --train "$data/fashion-mnist-train.libsvm"
     --test "$data/fashion-mnist-test.libsvm")
status=0
accuracy() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["test_accuracy"])' "$1/summary.json"; }
: > "$out/accuracy.tsv"
for eps in 1 3 8 off; do
  rm -rf "${out:?}/eps-$eps"
  if [[ $eps == off ]]; then
    # Without DP (--dp off quiets the file's dp-* keys), at the step that suits unclipped
    # gradients: lr 4 without clipping oscillates (0.75).
    flags=(--dp off --batch-size 64 --lr 0.1)
  else
    flags=(--dp-epsilon "$eps" --dp-noise-seed "$noise_seed")
  fi
  if "$launch" "${job[@]}" "${flags[@]}" --out "$out/eps-$eps" > "$out/eps-$eps.log" 2>&1; then
    printf '%s\t%s\n' "$eps" "$(accuracy "$out/eps-$eps")" >> "$out/accuracy.tsv"
  else
    echo "eps $eps failed: see $out/eps-$eps.log" >&2
    status=1
  fi
done
echo "| epsilon (delta 1e-5) | test accuracy |"
echo "| --- | ---: |"
while IFS=$'\t' read -r eps acc; do
  [[ $eps == off ]] && eps="no DP (batch 64, lr 0.1)"
  echo "| $eps | $acc |"
done < "$out/accuracy.tsv"
if command -v gnuplot > /dev/null; then
  nodp=$(awk -F'\t' '$1 == "off" {print $2}' "$out/accuracy.tsv")
  grep -v '^off' "$out/accuracy.tsv" > "$out/accuracy_dp.tsv" || true
  gnuplot <<GP
set terminal pngcairo size 640,400
set output "$out/accuracy_vs_epsilon.png"
set title "DP-SGD, softmax regression on Fashion-MNIST (delta 1e-5)"
set xlabel "epsilon"
set ylabel "test accuracy"
set logscale x
set xrange [0.8:10]
set yrange [0.6:0.9]
set key bottom right
set grid
plot "$out/accuracy_dp.tsv" using 1:2 with linespoints pt 7 title "DP-SGD", \
     ${nodp:-0} with lines dt 2 title "no DP (batch 64, lr 0.1)"
GP
  echo "plot: $out/accuracy_vs_epsilon.png"
fi
exit $status
