#!/usr/bin/env bash
# Fails when clang-format (.clang-format) would change a line of the C++
# sources. The tree is kept formatted as a whole, so by default every
# tracked .h, .cc and .cu file is checked; with a base commit, only the lines
# changed since it (git clang-format), for a quick look before a commit.
#
# Usage: scripts/check_format.sh            every tracked C++ file
#        scripts/check_format.sh BASE       lines changed since BASE (e.g. main)
#        scripts/check_format.sh --fix      reformat every tracked C++ file
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
clang_format=${CLANG_FORMAT:-}
if [[ -z $clang_format ]]; then
  # 14 (Debian 12's) first: another version can format a line differently.
  for c in clang-format-14 clang-format; do
    if command -v "$c" >/dev/null; then clang_format=$c; break; fi
  done
fi
if [[ -z $clang_format ]]; then
  echo "check_format: clang-format not found (scripts/setup.sh installs it)" >&2
  exit 2
fi

# The C++ sources, without generated or vendored files.
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' | grep -v '^tests/fuzz/corpus/')

case ${1:-} in
  --fix)
    "$clang_format" -i "${files[@]}"
    ;;
  "")
    if ! "$clang_format" --dry-run -Werror "${files[@]}" 2>"${TMPDIR:-/tmp}/check_format.$$"; then
      grep -E '^[^ ].*: (error|warning):' "${TMPDIR:-/tmp}/check_format.$$" |
        cut -d: -f1,2 | head -40
      rm -f "${TMPDIR:-/tmp}/check_format.$$"
      echo "check_format: lines above are not formatted; run scripts/check_format.sh --fix"
      exit 1
    fi
    rm -f "${TMPDIR:-/tmp}/check_format.$$"
    echo "check_format: ${#files[@]} files formatted"
    ;;
  *)
    diff=$(git clang-format --binary "$clang_format" --diff "$1" -- "${files[@]}" || true)
    if [[ -n $diff && $diff != "no modified files to format" &&
          $diff != "clang-format did not modify any files" ]]; then
      echo "$diff"
      echo "check_format: changed lines above are not formatted (git clang-format $1 fixes them)"
      exit 1
    fi
    echo "check_format: the lines changed since $1 are formatted"
    ;;
esac
