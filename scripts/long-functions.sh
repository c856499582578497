#!/usr/bin/env bash
# Lists the product functions longer than N lines (default 150), longest first, as
#   LINES  FILE:LINE  NAME
# Product means the library and program folders: tests (*_test.cc, *_test.cu, tests/), benchmarks
# (bench/), fuzzers (fuzz/), test fixtures (testing/) and examples are left out.
#
#   scripts/long-functions.sh [N] [--rev COMMIT] [FOLDER...]
#
# --rev lists the functions of a commit (read with `git archive`, the work tree is not touched),
# so that a change can be shown before and after. FOLDERs narrow the listing (default: all).
# A function's length is its last line minus its first plus one, as universal-ctags finds them
# (`--fields=+e`); lambdas count within the function that holds them and are not listed alone.
# Needs universal-ctags (scripts/install-deps.sh --for-tests).
set -euo pipefail

limit=150
rev=""
folders=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rev) rev="$2"; shift 2 ;;
    --rev=*) rev="${1#--rev=}"; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) limit="$1"; shift ;;
    *) folders+=("${1%/}"); shift ;;
  esac
done

if ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
  echo "long-functions: needs universal-ctags (scripts/install-deps.sh --for-tests)" >&2
  exit 2
fi

root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
tree="$root"
if [ -n "$rev" ]; then
  tree="$(mktemp -d)"
  trap 'rm -rf "$tree"' EXIT
  git -C "$root" archive "$rev" | tar -x -C "$tree"
fi

cd "$tree"
if [ ${#folders[@]} -eq 0 ]; then
  folders=(.)
fi
find "${folders[@]}" -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
    -not -path './build*' -not -path './bench/*' -not -path './fuzz/*' -not -path './testing/*' \
    -not -path './tests/*' -not -path './examples/*' -not -path './.git/*' \
    -not -name '*_test.cc' -not -name '*_test.cu' -not -name '*.capnp.*' |
  sed 's|^\./||' | sort |
  ctags -L - -x --_xformat='%K|%N|%s|%n|%e|%F' --langmap='C++:+.cu.cuh' --language-force=C++ \
    --kinds-C++=f --fields=+nes 2>/dev/null |
  awk -F'|' -v limit="$limit" '
    $1 == "function" && $2 !~ /^__anon/ && $5 != "" {
      name = ($3 != "" && $3 !~ /__anon/) ? $3 "::" $2 : $2
      lines = $5 - $4 + 1
      if (lines > limit) printf "%5d  %s:%d  %s\n", lines, $6, $4, name
    }' |
  sort -k1,1nr -k2,2
