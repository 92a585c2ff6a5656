#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite:
#   1. the normal build (build/): unit, conformance, CLI and fuzz-replay tests;
#   2. the same suite under AddressSanitizer + LeakSanitizer + UBSan
#      (build-asan/, scripts/sanitize.sh). Skip with PTD_SKIP_SANITIZE=1.
#   3. the Python module's tests (python/tests, pytest in .venv). Skip with
#      PTD_SKIP_PYTHON=1.
#   4. the C++ suite (loader, device, data-map and CLI tests among them)
#      under ThreadSanitizer (build-tsan/, scripts/tsan.sh), the asynchronous
#      test device included. Skip with PTD_SKIP_TSAN=1.
#   5. the fuzz gate: every libFuzzer target built with clang, ASan + UBSan,
#      run for FUZZ_SECONDS (default 30) from the checked-in corpus
#      (build-fuzz/, scripts/fuzz.sh); any finding fails. Skip with
#      PTD_SKIP_FUZZ=1.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"

echo "== tests (build/)"
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)"

if [[ ${PTD_SKIP_PYTHON:-0} != 1 ]]; then
  echo "== Python tests (python/tests, .venv)"
  py=$root/.venv/bin/python
  if [[ -x $py ]] && "$py" -c "import pytest, numpy" 2>/dev/null; then
    # Exit code 5 (no tests collected) fails too.
    PTD_VERIFY=$build/verifier/ptd-verify "$py" -m pytest -q -p no:cacheprovider \
      "$root/python/tests" || { echo "Python tests failed (pytest exit $?)"; exit 1; }
  else
    echo "SKIPPED: pytest/numpy are not in .venv (scripts/setup.sh could not pip-install them)"
  fi
fi

if [[ ${PTD_SKIP_SANITIZE:-0} != 1 ]]; then
  echo "== tests under ASan + LSan + UBSan (build-asan/)"
  "$root/scripts/sanitize.sh"
fi

if [[ ${PTD_SKIP_TSAN:-0} != 1 ]]; then
  echo "== loader, device, data-map and CLI tests under TSan (build-tsan/)"
  "$root/scripts/tsan.sh"
fi

if [[ ${PTD_SKIP_FUZZ:-0} != 1 ]]; then
  echo "== fuzz gate: libFuzzer + ASan + UBSan, ${FUZZ_SECONDS:-30}s per target (build-fuzz/)"
  FUZZ_SECONDS=${FUZZ_SECONDS:-30} "$root/scripts/fuzz.sh"
fi
