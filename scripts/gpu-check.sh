#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU (written for one H200, 16
# cores, no network), configures a Release build with CUDA in build-gpu/,
# builds it, runs the GPU tests (ctest -L gpu), the whole suite, and the CUDA
# benchmarks, then prints a summary. Installs nothing (no apt-get, no pip):
# missing dependencies are reported and the script stops.
#
# Usage: scripts/gpu-check.sh
# Environment: BUILD_DIR (default build-gpu), JOBS (default nproc),
#   PTD_CUDA_BENCH_BYTES (default 4 GiB), PTD_CUDA_BENCH_STORAGES (default 1024),
#   PTD_CUDA_ARCHITECTURES (default: the project's list; e.g. 90-real to
#   build only for the GPU at hand), CMAKE_ARGS (extra configure flags).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
jobs=${JOBS:-$(nproc)}
log_dir=$build/gpu-check
start=$(date +%s)
declare -A result

say() { printf '== %s\n' "$*"; }
elapsed() { echo "$(( $(date +%s) - start ))s"; }

# ---- what this machine has (nothing is installed) ----
missing=()
command -v cmake >/dev/null || missing+=("cmake (Debian: cmake)")
command -v c++ >/dev/null || missing+=("a C++ compiler (Debian: g++)")
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[[ -x $nvcc ]] || missing+=("nvcc, the CUDA toolkit (expected on PATH or in /usr/local/cuda/bin)")
command -v flatc >/dev/null || missing+=("flatc (Debian: flatbuffers-compiler)")
for pair in "absl:abslConfig.cmake:libabsl-dev" "FlatBuffers:FlatBuffersConfig.cmake:libflatbuffers-dev" \
            "GTest:GTestConfig.cmake:libgtest-dev" "benchmark:benchmarkConfig.cmake:libbenchmark-dev" \
            "nlohmann_json:nlohmann_jsonConfig.cmake:nlohmann-json3-dev" "CLI11:CLI11Config.cmake:libcli11-dev"; do
  IFS=: read -r name file pkg <<<"$pair"
  if ! find /usr/lib /usr/share /usr/local/lib /usr/local/share -name "$file" -print -quit 2>/dev/null | grep -q .; then
    missing+=("$name's CMake config $file (Debian: $pkg)")
  fi
done
[[ -e /usr/include/openssl/sha.h ]] || missing+=("OpenSSL headers (Debian: libssl-dev)")
if ((${#missing[@]})); then
  say "missing dependencies: install them (scripts/setup.sh --deps does, with network) and rerun"
  printf '   - %s\n' "${missing[@]}"
  exit 2
fi
if command -v nvidia-smi >/dev/null; then
  say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
else
  say "nvidia-smi not found: the GPU tests will skip if CUDA sees no device"
fi

mkdir -p "$log_dir"
# ---- configure and build ----
say "configure (Release, CUDA) in $build"
arch_arg=()
[[ -n ${PTD_CUDA_ARCHITECTURES:-} ]] && arch_arg=(-DPTD_CUDA_ARCHITECTURES="$PTD_CUDA_ARCHITECTURES")
# shellcheck disable=SC2086
if cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPTD_WITH_CUDA=ON \
     -DCMAKE_CUDA_COMPILER="$nvcc" -DPTD_BUILD_BENCH=ON "${arch_arg[@]}" ${CMAKE_ARGS:-} \
     >"$log_dir/configure.log" 2>&1; then
  result[configure]=ok
else
  result[configure]=FAILED; tail -30 "$log_dir/configure.log"
  say "configure failed (log: $log_dir/configure.log)"; exit 1
fi
say "build (-j$jobs)"
build_start=$(date +%s)
if cmake --build "$build" -j"$jobs" >"$log_dir/build.log" 2>&1; then
  result[build]="ok ($(( $(date +%s) - build_start ))s)"
else
  result[build]=FAILED; grep -E "error|Error" "$log_dir/build.log" | head -30
  say "build failed (log: $log_dir/build.log)"; exit 1
fi

# ---- tests ----
say "GPU tests (ctest -L gpu)"
ctest --test-dir "$build" -L gpu --output-on-failure --parallel 1 2>&1 | tee "$log_dir/ctest-gpu.log" | tail -25
gpu_line=$(grep -E "tests passed|tests failed" "$log_dir/ctest-gpu.log" | tail -1)
skipped=$(grep -c "(Skipped)" "$log_dir/ctest-gpu.log")
result[gpu_tests]="$gpu_line; $skipped skipped"
if (( skipped > 0 )); then
  result[gpu_tests]+=" (skipped tests did not run: CUDA saw no device)"
fi

say "whole suite (ctest)"
ctest --test-dir "$build" --output-on-failure --parallel "$jobs" >"$log_dir/ctest-all.log" 2>&1
result[all_tests]=$(grep -E "tests passed|tests failed" "$log_dir/ctest-all.log" | tail -1)
grep -A30 "The following tests FAILED" "$log_dir/ctest-all.log" | head -30

# ---- benchmarks ----
say "CUDA benchmarks"
export PTD_CUDA_BENCH_BYTES=${PTD_CUDA_BENCH_BYTES:-$((4 << 30))}
export PTD_CUDA_BENCH_STORAGES=${PTD_CUDA_BENCH_STORAGES:-1024}
if "$build/bench/ptd_cuda_bench" --benchmark_min_time=1 --benchmark_counters_tabular=true \
     2>&1 | tee "$log_dir/cuda_bench.log"; then
  result[cuda_bench]="ok ($((PTD_CUDA_BENCH_BYTES >> 20)) MiB in $PTD_CUDA_BENCH_STORAGES storages)"
  if grep -q "ERROR OCCURRED" "$log_dir/cuda_bench.log"; then
    result[cuda_bench]="FAILED or skipped: $(grep -m1 -o "ERROR OCCURRED: .*" "$log_dir/cuda_bench.log")"
  fi
else
  result[cuda_bench]=FAILED
fi

# ---- summary ----
say "summary ($(elapsed), logs in $log_dir)"
for k in configure build gpu_tests all_tests cuda_bench; do
  printf '   %-11s %s\n' "$k" "${result[$k]:-not run}"
done
grep -E "^BM_" "$log_dir/cuda_bench.log" | sed 's/^/   /'
[[ ${result[all_tests]} == *" 0 tests failed"* && ${result[cuda_bench]} == ok* ]]
