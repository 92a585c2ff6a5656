#!/usr/bin/env bash
# Builds the loader, device, data-map and CLI tests under ThreadSanitizer
# (GCC, -fsanitize=thread) into build-tsan/ and runs them: ptd_tests (the
# CLI tests run ptd-verify and ptd-load, built with TSan too) and, when the
# executorch package is found, ptd_executorch_tests (ContainerDataMap and the
# loader over NamedDataMaps). Tests TSan cannot run carry ctest label
# "no-tsan" and are left out (the SIGBUS death test: TSan intercepts the
# signal). Only what the stage needs is built: no CUDA, no benchmarks, no
# examples, no fuzz targets. The simulator's tests (label "cudasim") run here
# too, but those too large for a sanitizer (label "cudasim-large", README).
#
# Usage: scripts/tsan.sh [CTEST_ARG...]   e.g. scripts/tsan.sh -R Loader
# Environment: TSAN_BUILD_DIR (default build-tsan).
# Exit status: ctest's (a configure or build failure exits non-zero first).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TSAN_BUILD_DIR:-$root/build-tsan}

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S "$root" -B "$build" "${generator[@]}" ${CMAKE_ARGS:-} \
    -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPTD_SANITIZE=thread -DPTD_WITH_CUDA=OFF -DPTD_BUILD_BENCH=OFF \
    -DPTD_BUILD_EXAMPLES=OFF -DPTD_INSTALL=OFF -DPTD_WERROR=ON
fi
targets=(ptd_tests ptd-verify ptd-load)
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
rc=0
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" \
  -L "$labels" -LE 'no-tsan|cudasim-large' "$@" || rc=$?
exit "$rc"
