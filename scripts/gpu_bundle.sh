#!/usr/bin/env bash
# Builds the relocatable GPU bundle here, on the CPU machine, for a bare GPU
# machine (one that has the NVIDIA driver but none of our dev packages):
#
#   OUTDIR/run.sh                 the one command to run there (scripts/gpu_bundle_run.sh)
#   OUTDIR/check.py               its checker and summary writer (scripts/gpu_bundle_check.py)
#   OUTDIR/bin/ptd_cuda_tests     the CUDA 13 build: the "gpu"-labelled tests
#   OUTDIR/bin/ptd-load             (tests/cuda/), ptd-load and the CUDA benchmark,
#   OUTDIR/bin/ptd_cuda_bench       stripped; for drivers >= 580
#   OUTDIR/cuda12/bin/...         the CUDA 12 build of the same three, for
#                                 drivers >= 525 (CUDA 12 minor-version
#                                 compatibility); run.sh picks one of the two
#   OUTDIR/lib/                   every shared library they need except the base
#                                 system's (glibc family, libstdc++, libgcc_s) and
#                                 the driver's libcuda; RUNPATH $ORIGIN-relative
#   OUTDIR/data/conformance/      the conformance files the tests read
#   OUTDIR/BUNDLE.txt             what was built, from which commit, what it needs
#
# Kernels: the CUDA 13 build has native sm_90 (H100/H200) plus compute_90 PTX,
# from nvcc. The CUDA 12 build is made without nvcc, of PyPI's CUDA 12 wheels
# (nvidia-cuda-runtime-cu12: headers and static cudart; nvidia-cuda-nvcc-cu12:
# ptxas and libdevice; scripts/setup.sh puts both in .venv) and Debian's
# clang-19: host code by the host compiler, kernels as compute_80 PTX by clang
# and sm_80/90/100/120 cubins by ptxas, embedded and loaded through the
# runtime's library API (cmake/PtdCuda12.cmake). Both link the CUDA runtime
# statically, so only the driver is needed there.
#
# Usage: scripts/gpu_bundle.sh [OUTDIR]      (default: gpu-bundle/ in the checkout)
# Environment: PTD_BUNDLE_BUILD_DIR (default build-gpu-bundle/ in the checkout),
#   JOBS (default nproc), CMAKE_ARGS (extra configure flags, e.g. a compiler
#   launcher), PTD_BUNDLE_MAX_MIB (default 64: the bundle must not be larger),
#   PTD_CUDA12_WHEELS (default: the site-packages/nvidia folder of .venv).
# Needs: cmake, a C++ compiler, nvcc, clang-19, the CUDA 12 wheels, the Debian
# dev packages of scripts/setup.sh, and patchelf (scripts/setup.sh installs
# all but nvcc).
# Exit status: 0 built; 1 a step failed; 2 a tool is missing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/gpu-bundle}
build=${PTD_BUNDLE_BUILD_DIR:-$root/build-gpu-bundle}
jobs=${JOBS:-$(nproc)}
max_mib=${PTD_BUNDLE_MAX_MIB:-64}
start=$(date +%s)

die() { echo "gpu-bundle: $*" >&2; exit 1; }
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
for tool in cmake patchelf readelf strip ldd "$nvcc"; do
  command -v "$tool" >/dev/null || { echo "gpu-bundle: $tool not found (scripts/setup.sh installs what is missing; nvcc comes with the CUDA toolkit)" >&2; exit 2; }
done

mkdir -p "$build"
build=$(cd "$build" && pwd)

# The CUDA 12 build's toolkit: a folder laid out like one, of links into the
# wheels (runtime: include/, lib/; nvcc: bin/ptxas, include/crt, nvvm/).
wheels=${PTD_CUDA12_WHEELS:-$(compgen -G "$root/.venv/lib/python3*/site-packages/nvidia" | head -1 || true)}
[[ -n $wheels && -f $wheels/cuda_runtime/include/cuda_runtime_api.h && -x $wheels/cuda_nvcc/bin/ptxas ]] ||
  { echo "gpu-bundle: the CUDA 12 wheels are not in ${wheels:-.venv} (scripts/setup.sh installs nvidia-cuda-runtime-cu12 and nvidia-cuda-nvcc-cu12)" >&2; exit 2; }
command -v clang++-19 >/dev/null || { echo "gpu-bundle: clang++-19 not found (scripts/setup.sh installs clang-19)" >&2; exit 2; }
cuda12=$build/cuda12-root
rm -rf "$cuda12"
mkdir -p "$cuda12/include" "$cuda12/bin"
for f in "$wheels"/cuda_runtime/include/* "$wheels"/cuda_nvcc/include/*; do
  [[ $(basename "$f") == __init__.py || $(basename "$f") == __pycache__ ]] || ln -sfn "$f" "$cuda12/include/"
done
ln -s "$wheels/cuda_nvcc/bin/ptxas" "$cuda12/bin/ptxas"
ln -s "$wheels/cuda_nvcc/nvvm" "$cuda12/nvvm"
ln -s "$wheels/cuda_runtime/lib" "$cuda12/lib"
cuda12_version=$(grep -m1 -o 'define CUDART_VERSION *[0-9]*' "$cuda12/include/cuda_runtime_api.h" | grep -o '[0-9]*$')
cuda12_version=$((cuda12_version / 1000)).$(( (cuda12_version % 1000) / 10 ))
# No path of the source or build tree may end up in a binary: __FILE__ (gtest,
# abseil) and debug paths are mapped to relative ones.
map="-ffile-prefix-map=$build=build -ffile-prefix-map=$root=."
echo "gpu-bundle: configure $build"
# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DPTD_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DPTD_GPU_BUNDLE=ON \
  -DPTD_CUDA_ARCHITECTURES="90-real;90-virtual" -DPTD_CUDA12_ROOT="$cuda12" \
  -DPTD_WITH_EXECUTORCH=OFF -DPTD_BUILD_EXAMPLES=OFF -DPTD_INSTALL=OFF \
  -DPTD_BUILD_TESTS=ON -DPTD_BUILD_BENCH=ON -DPTD_BUILD_TOOLS=ON \
  -DCMAKE_CXX_FLAGS="$map" -DCMAKE_C_FLAGS="$map" \
  -DCMAKE_CUDA_FLAGS="-Xcompiler=${map// /,}" \
  ${CMAKE_ARGS:-} >"$build/gpu-bundle-configure.log" 2>&1 ||
  { tail -30 "$build/gpu-bundle-configure.log" >&2; die "configure failed (log: $build/gpu-bundle-configure.log)"; }
grep -q "^PTD_WITH_CUDA:BOOL=ON" "$build/CMakeCache.txt" || die "CUDA is not enabled in $build"

echo "gpu-bundle: build ptd_cuda_tests ptd-load ptd_cuda_bench, for CUDA 13 and CUDA $cuda12_version (-j$jobs)"
cmake --build "$build" --parallel "$jobs" --target ptd_cuda_tests ptd-load ptd_cuda_bench \
  ptd_cuda_tests-cuda12 ptd-load-cuda12 ptd_cuda_bench-cuda12 \
  >"$build/gpu-bundle-build.log" 2>&1 ||
  { grep -E "error|Error" "$build/gpu-bundle-build.log" | head -30 >&2; die "build failed (log: $build/gpu-bundle-build.log)"; }
built=$(( $(date +%s) - start ))

# ---- assemble (replacing an earlier bundle, never another folder) ----
if [[ -d $out && -n $(ls -A "$out") && ! -f $out/BUNDLE.txt ]]; then
  die "$out exists and is not a GPU bundle (no BUNDLE.txt): not replacing it"
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/cuda12/bin" "$out/lib" "$out/data"
cp "$build/tests/cuda/ptd_cuda_tests" "$build/verifier/ptd-load" "$build/bench/ptd_cuda_bench" "$out/bin/"
cp "$build/cuda12/bin/ptd_cuda_tests" "$build/cuda12/bin/ptd-load" "$build/cuda12/bin/ptd_cuda_bench" "$out/cuda12/bin/"
cp -r "$root/tests/data/conformance" "$out/data/"
cp "$root/scripts/gpu_bundle_run.sh" "$out/run.sh"
cp "$root/scripts/gpu_bundle_check.py" "$out/check.py"
chmod 755 "$out/run.sh" "$out/check.py"

# The base set: present on any glibc system with a C++ runtime, and the
# driver's libcuda (loaded by the static CUDA runtime with dlopen).
base_re='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libcuda\.so\.1)$'
for bin in "$out"/bin/* "$out"/cuda12/bin/*; do
  strip --strip-all "$bin"
  # ldd gives the closure (what the libraries need too), resolved here.
  while read -r name path; do
    [[ $name =~ $base_re ]] && continue
    [[ -f $path ]] || die "$(basename "$bin") needs $name, which ldd cannot find here"
    [[ -e $out/lib/$name ]] || cp -L "$path" "$out/lib/$name"
  done < <(ldd "$bin" | awk '$2 == "=>" {print $1, $3}')
  if [[ $bin == "$out"/cuda12/* ]]; then
    patchelf --set-rpath '$ORIGIN/../../lib' "$bin"
  else
    patchelf --set-rpath '$ORIGIN/../lib' "$bin"
  fi
done
for lib in "$out"/lib/*; do
  [[ -e $lib ]] || continue
  chmod 644 "$lib"
  patchelf --set-rpath '$ORIGIN' "$lib"
done

# What the bundle needs of the machine it runs on.
glibc=$(for f in "$out"/bin/* "$out"/cuda12/bin/* "$out"/lib/*; do [[ -e $f ]] && objdump -T "$f"; done |
        grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
glibcxx=$(for f in "$out"/bin/* "$out"/cuda12/bin/* "$out"/lib/*; do [[ -e $f ]] && objdump -T "$f"; done |
          grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)
{
  echo "ptd-loader GPU bundle: commit $commit$dirty, built $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cuda13: bin/, $("$nvcc" --version | grep -o 'release [0-9.]*' | head -1), sm_90 + compute_90 PTX (nvcc), CUDA runtime static; driver >= 580"
  echo "cuda12: cuda12/bin/, release $cuda12_version (PyPI wheels), sm_80/90/100/120 cubins + compute_80 PTX ($(clang++-19 --version | head -1 | sed 's/ *(.*//'), ptxas $("$cuda12/bin/ptxas" --version | grep -o 'V[0-9][0-9.]*' | head -1)), CUDA runtime static; driver >= 525"
  echo "needs: an NVIDIA driver (libcuda.so.1) for CUDA 12 or 13, $glibc, $glibcxx (libstdc++), python3 (run.sh's checker)"
  echo "libraries: $(cd "$out/lib" && ls | tr '\n' ' ')"
} >"$out/BUNDLE.txt"

mib=$(( ($(du -sb "$out" | cut -f1) + (1 << 20) - 1) >> 20 ))
(( mib <= max_mib )) || die "the bundle is $mib MiB, over the limit of $max_mib MiB"
echo "gpu-bundle: $out ($mib MiB, $(ls "$out/lib" | wc -l) libraries; build ${built}s, total $(( $(date +%s) - start ))s)"
echo "gpu-bundle: on the GPU machine run: $(basename "$out")/run.sh   (results in \$OUT, else beside run.sh)"
