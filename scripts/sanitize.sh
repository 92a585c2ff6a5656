#!/usr/bin/env bash
# Builds the tests with GCC under a sanitizer and runs them (ctest).
#
#   scripts/sanitize.sh [CTEST_ARG...]           AddressSanitizer + LeakSanitizer
#                                                 + UBSan, into build-asan/: every
#                                                 test but the package test
#   scripts/sanitize.sh --thread [CTEST_ARG...]   ThreadSanitizer, into build-tsan/:
#                                                 the loader, device, data-map, CLI
#                                                 and simulator tests
#
# ASan: the fuzz replay tests (label "fuzz") run the seed corpora and saved
# crash inputs under the same sanitizers. TSan: only what the stage needs is
# built (ptd_tests, whose CLI tests run ptd-verify and ptd-load built with
# TSan too; ptd_executorch_tests when the executorch package is found; no
# CUDA, benchmarks, examples or fuzz targets); tests TSan cannot run carry
# label "no-tsan" (the SIGBUS death test: TSan intercepts the signal). Both:
# the gpu tests run on the CUDA runtime simulator (label "cudasim"), but
# those too large for a sanitizer (label "cudasim-large", README).
#
# Environment: SANITIZE_BUILD_DIR (default build-asan), TSAN_BUILD_DIR
# (default build-tsan), CMAKE_ARGS (extra configure flags).
# Exit status: ctest's (a configure or build failure exits non-zero first).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=address
if [[ ${1:-} == --thread ]]; then
  mode=thread
  shift
fi

common=(-DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=RelWithDebInfo
        -DPTD_BUILD_BENCH=OFF -DPTD_WERROR=ON)
if [[ $mode == address ]]; then
  build=${SANITIZE_BUILD_DIR:-$root/build-asan}
  configure=(-DPTD_SANITIZE=address,undefined)
else
  build=${TSAN_BUILD_DIR:-$root/build-tsan}
  configure=(-DPTD_SANITIZE=thread -DPTD_WITH_CUDA=OFF -DPTD_BUILD_EXAMPLES=OFF
             -DPTD_INSTALL=OFF)
fi

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [[ ! -f $build/CMakeCache.txt ]]; then
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build" "${generator[@]}" ${CMAKE_ARGS:-} "${common[@]}" "${configure[@]}"
fi

if [[ $mode == address ]]; then
  cmake --build "$build" --parallel "$(nproc)"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  select=(-LE 'package|cudasim-large|cudasim-no-ubsan')
else
  targets=(ptd_tests ptd-verify ptd-load ptd-extract ptd-reweight)
  labels=unit
  help=$(cmake --build "$build" --target help 2>/dev/null)
  if grep -q 'ptd_executorch_tests' <<<"$help"; then
    targets+=(ptd_executorch_tests)
    labels+='|executorch'
  fi
  # The CUDA path on the CUDA runtime simulator (tests/cudasim; it needs the
  # toolkit's headers only): every gpu test, its self-tests, ptd-load-cudasim.
  if grep -q 'ptd_cuda_sim_tests' <<<"$help"; then
    targets+=(ptd_cuda_sim_tests ptd_cudasim_selftests ptd-load-cudasim)
    labels+='|cudasim'
  fi
  cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]}"
  # halt_on_error: the first race fails its test. second_deadlock_stack: both
  # stacks of a lock-order inversion.
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
  select=(-L "$labels" -LE 'no-tsan|cudasim-large')
fi

rc=0
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" "${select[@]}" "$@" || rc=$?
exit "$rc"
