#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite, in this order:
#   1. the format check: clang-format (.clang-format) would change no line of
#      the C++ sources (scripts/check_format.sh). Skip with PTD_SKIP_FORMAT=1.
#   2. the normal build (build/): unit, conformance, CLI and fuzz-replay tests;
#   3. the Python module's tests (python/tests, pytest in .venv). Skip with
#      PTD_SKIP_PYTHON=1.
#   4. the same C++ suite under AddressSanitizer + LeakSanitizer + UBSan
#      (build-asan/, scripts/sanitize.sh). Skip with PTD_SKIP_SANITIZE=1.
#   5. the C++ suite (loader, device, data-map, CLI and simulator tests among
#      them) under ThreadSanitizer (build-tsan/, scripts/sanitize.sh --thread), the asynchronous
#      test device included. Skip with PTD_SKIP_TSAN=1.
#   6. the fuzz gate: every libFuzzer target built with clang, ASan + UBSan,
#      run for FUZZ_SECONDS (default 30) from the checked-in corpus
#      (build-fuzz/, scripts/fuzz.sh); any finding fails. Skip with
#      PTD_SKIP_FUZZ=1.
#   7. the benchmarks' own configuration builds: Release with warnings as
#      errors (scripts/bench.sh --build-only, build-release/). Skip with
#      PTD_SKIP_BENCH_BUILD=1.
#
# Every gpu test runs on the CUDA runtime simulator (label "cudasim") in
# stages 2, 4 and 5 (in stage 2 twice: with cudaFree/cudaFreeHost
# synchronizing, and without); after each, a line says how many ran there,
# and a simulator test that skipped fails the stage.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"

if [[ ${PTD_SKIP_FORMAT:-0} != 1 ]]; then
  echo "== 1/7 format (scripts/check_format.sh)"
  "$root/scripts/check_format.sh"
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/ptd-test.XXXXXX")
trap 'rm -rf "$logs"' EXIT

# simulator_summary STAGE LOG: the simulator's tests in a ctest log: how many
# ran (ctest's label summary: labels cudasim and cudasim-*), and none skipped.
simulator_summary() {
  local ran skipped
  # Labels cudasim, cudasim-large, cudasim-no-tsan: one line each.
  ran=$(grep -E '^cudasim(-[a-z-]+)? +=.*\([0-9]+ tests?\)' "$2" |
        grep -oE '\([0-9]+ tests?\)' | grep -oE '[0-9]+' | awk '{n += $1} END {print n + 0}')
  skipped=$(grep -cE '^ *[0-9]+ - cudasim\..*\(Skipped\)' "$2" || true)
  echo "== $1: ${ran:-0} tests ran on the CUDA runtime simulator (label cudasim), ${skipped} skipped"
  if [[ -z $ran || $ran == 0 ]]; then
    echo "$1: no test ran on the CUDA runtime simulator (no CUDA headers? the toolkit's, or those scripts/setup.sh pip-installs into .venv)"
    return 1
  fi
  if ((skipped > 0)); then
    echo "$1: a test on the CUDA runtime simulator skipped; there, every gpu test must run"
    return 1
  fi
}

echo "== 2/7 tests (build/)"
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" | tee "$logs/normal.log"
simulator_summary "tests (build/)" "$logs/normal.log"
# The simulator again with frees that do not synchronize (NVIDIA documents
# none for cudaFreeHost): freeing memory a pending copy reads ends the test.
# Not the self-test of free_sync itself, nor the large tests (nothing freed
# differs there).
echo "== 2/7 the simulator's tests with cudaFree/cudaFreeHost not synchronizing (PTD_CUDASIM_DISABLE=free_sync)"
PTD_CUDASIM_DISABLE=free_sync ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" \
  -L cudasim -LE cudasim-large -E 'FreeAndFreeHostSynchronize|cudasim\.without\.' | tee "$logs/nosync.log"
simulator_summary "tests (build/), frees not synchronizing" "$logs/nosync.log"

if [[ ${PTD_SKIP_PYTHON:-0} != 1 ]]; then
  echo "== 3/7 Python tests (python/tests, .venv)"
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
  echo "== 4/7 tests under ASan + LSan + UBSan (build-asan/)"
  "$root/scripts/sanitize.sh" | tee "$logs/asan.log"
  simulator_summary "ASan + UBSan" "$logs/asan.log"
fi

if [[ ${PTD_SKIP_TSAN:-0} != 1 ]]; then
  echo "== 5/7 loader, device, data-map, CLI and simulator tests under TSan (build-tsan/)"
  "$root/scripts/sanitize.sh" --thread | tee "$logs/tsan.log"
  simulator_summary "TSan" "$logs/tsan.log"
fi

if [[ ${PTD_SKIP_FUZZ:-0} != 1 ]]; then
  echo "== 6/7 fuzz gate: libFuzzer + ASan + UBSan, ${FUZZ_SECONDS:-30}s per target (build-fuzz/)"
  FUZZ_SECONDS=${FUZZ_SECONDS:-30} "$root/scripts/fuzz.sh"
fi

if [[ ${PTD_SKIP_BENCH_BUILD:-0} != 1 ]]; then
  echo "== 7/7 the benchmarks' Release -Werror build (scripts/bench.sh --build-only, build-release/)"
  # One GPU architecture: the kernels' Release build is nvcc's longest, and
  # every architecture is built in stage 2 already.
  BUILD_DIR="$root/build-release" CMAKE_ARGS="${CMAKE_ARGS:-} -DPTD_CUDA_ARCHITECTURES=90-real" \
    "$root/scripts/bench.sh" --build-only --no-setup
fi
