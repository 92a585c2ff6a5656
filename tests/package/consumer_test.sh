#!/usr/bin/env bash
# The package as a consumer sees it:
#   1. `cmake --install` the build tree into a temporary prefix;
#   2. configure, build and run examples/consumer against it with
#      find_package(ptd), and check that the consumer's link line has no
#      OpenSSL, nlohmann-json or CLI11; run its use of ptd::testing;
#   3. the same consumer with add_subdirectory() of the source tree.
# Usage: consumer_test.sh SOURCE_DIR BUILD_DIR PTD_FILE PTD_VERIFY
set -euo pipefail
src=$1 build=$2 ptd=$3 verify=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -f "$tmp/prefix/lib/cmake/ptd/ptdConfig.cmake"
test -f "$tmp/prefix/lib/cmake/ptd/ptdConfigVersion.cmake"
test -f "$tmp/prefix/include/ptd/container.h"
test -f "$tmp/prefix/include/ptd/testing/fault_device.h"
test ! -e "$tmp/prefix/include/ptd/internal"
test ! -e "$tmp/prefix/include/ptd/status_macros.h"


check_consumer() {  # BUILD_DIR
  local out
  out=$("$1/ptd-keys" "$ptd")
  echo "$out"
  [[ -n $out ]] || { echo "consumer printed no keys" >&2; exit 1; }
  "$1/ptd-fault-check" >/dev/null || { echo "ptd-fault-check failed" >&2; exit 1; }
  # The link line of ptd::format alone: no crypto, JSON or CLI libraries.
  local link
  link=$(find "$1" -name link.txt -path '*ptd-keys*' -exec cat {} +)
  if grep -Eq 'ssl|crypto|nlohmann|CLI11' <<<"$link"; then
    echo "consumer link line pulls in OpenSSL/JSON/CLI11: $link" >&2
    exit 1
  fi
}

echo "== find_package(ptd) against an install prefix"
cmake -S "$src/examples/consumer" -B "$tmp/installed" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/installed" >/dev/null
a=$(check_consumer "$tmp/installed")

echo "== add_subdirectory(ptd source tree)"
cmake -S "$src/examples/consumer" -B "$tmp/subdir" \
  -DPTD_SOURCE_DIR="$src" -DCMAKE_BUILD_TYPE=Release -DPTD_WITH_CUDA=OFF >/dev/null
cmake --build "$tmp/subdir" --parallel "$(nproc)" >/dev/null
b=$(check_consumer "$tmp/subdir")

[[ $a == "$b" ]] || { echo "the two consumers disagree" >&2; exit 1; }
# The keys and sizes ptd-verify reports for the same file.
want=$("$verify" --json "$ptd" | python3 -c '
import json, sys
for e in json.load(sys.stdin)["ptd"]["named_data"]:
    print("%s\t%s" % (e["key"], e["size"]))')
[[ $a == "$want" ]] || { printf 'consumer printed:\n%s\nptd-verify says:\n%s\n' "$a" "$want" >&2; exit 1; }
echo "$a"
echo "consumer ok: $(wc -l <<<"$a") keys"
