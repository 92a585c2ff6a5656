#!/usr/bin/env bash
# Builds everything with GCC under AddressSanitizer (LeakSanitizer included
# on Linux) and UndefinedBehaviorSanitizer into build-asan/, then runs ctest.
# The fuzz replay tests (label "fuzz") run the seed corpora and saved crash
# inputs under the same sanitizers. The gpu tests run on the CUDA runtime
# simulator (label "cudasim"), but those too large for a sanitizer (label
# "cudasim-large", README).
#
# Usage: scripts/sanitize.sh [CTEST_ARG...]   e.g. scripts/sanitize.sh -L fuzz
# Environment: SANITIZE_BUILD_DIR (default build-asan).
# Exit status: ctest's (a configure or build failure exits non-zero first).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SANITIZE_BUILD_DIR:-$root/build-asan}

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S "$root" -B "$build" "${generator[@]}" \
    -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
    -DPTD_SANITIZE=address,undefined -DPTD_BUILD_BENCH=OFF -DPTD_WERROR=ON
fi
cmake --build "$build" --parallel "$(nproc)"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
rc=0
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" -LE 'package|cudasim-large' "$@" ||
  rc=$?
exit "$rc"
