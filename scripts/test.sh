#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite:
#   1. the normal build (build/): unit, conformance, CLI and fuzz-replay tests;
#   2. the same suite under AddressSanitizer + LeakSanitizer + UBSan
#      (build-asan/, scripts/sanitize.sh). Skip with PTD_SKIP_SANITIZE=1.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"

echo "== tests (build/)"
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)"

if [[ ${PTD_SKIP_SANITIZE:-0} != 1 ]]; then
  echo "== tests under ASan + LSan + UBSan (build-asan/)"
  "$root/scripts/sanitize.sh"
fi
