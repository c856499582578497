# prepare.sh, sourced by the Fashion-MNIST example scripts: with $build and $out set, checks the
# build and makes $out/data's libsvm files (once). Sets launch, gen and data.
# Usage: source prepare.sh NAME   (NAME: the calling script, for its messages)
launch="$build/bin/syncline-launch"
gen="$build/bin/syncline-gen"
[[ -x "$launch" && -x "$gen" ]] || { echo "$1: no build in $build" >&2; exit 2; }
data="$out/data"
mkdir -p "$data"
if [[ ! -s "$data/fashion-mnist-test.libsvm" ]]; then
  "$gen" fashion-mnist --out "$data"
fi
