#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks, then configures and builds the
# project into build/ (RelWithDebInfo).
#
# Usage: scripts/setup.sh            install missing packages, configure, build
#        scripts/setup.sh --deps     install missing packages only
# Environment: BUILD_DIR (default build), CMAKE_ARGS (extra configure flags),
#              BUILD_TARGETS (default: everything), PTD_WITH_EXECUTORCH=0 (skip
#              the executorch package below).
#
# Packages are checked one by one with dpkg-query; only missing ones are
# installed, after a single `apt-get update`. Without root, the script prints
# the command to run and stops.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}

packages=(
  cmake make g++ pkg-config
  flatbuffers-compiler flatbuffers-compiler-dev libflatbuffers-dev
  libabsl-dev libssl-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev   # libFuzzer + sanitizer runtimes: the fuzz gate
  clang-format-14            # scripts/check_format.sh (.clang-format)
  gnuplot-nox                # scripts/bench.sh's plots
  patchelf                   # scripts/gpu_bundle.sh: $ORIGIN RUNPATHs in the GPU bundle
  clang-19                   # scripts/gpu_bundle.sh: the CUDA 12 build's kernels as PTX
  liburing-dev               # the loader's direct reads queue through io_uring (LoadOptions::io)
)
# The executorch package goes into a venv (below). Debian's own python3 needs
# python3-venv for that; another python3 on PATH (pyenv, ...) brings its own.
if [[ ${PTD_WITH_EXECUTORCH:-1} == 1 ]]; then
  if ! command -v python3 >/dev/null; then
    packages+=(python3 python3-venv)
  elif [[ $(command -v python3) == /usr/bin/python3 ]]; then
    packages+=(python3-venv)
  fi
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  else
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

venv=$root/.venv

# pip install "$@" into the venv. On success, pip's "dependency resolver"
# complaint about executorch's own Python dependencies (torch, pandas, ...),
# which are left out on purpose (--no-deps below: only its C++ runtime is
# used), is dropped; anything else pip says is kept. On failure, everything.
pip_install() {
  local log status=0
  log=$(mktemp)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>"$log" || status=$?
  if ((status == 0)); then
    grep -v -e "^ERROR: pip's dependency resolver does not currently take into account" \
            -e "^executorch [0-9][^ ]* requires " "$log" >&2 || true
  else
    cat "$log" >&2
  fi
  rm -f "$log"
  return "$status"
}

# The Python tools first: installing numpy after executorch makes pip list
# every dependency executorch was installed without. nanobind,
# scikit-build-core, numpy, pytest and safetensors (the interop tests), for
# the Python module below. Without PyPI this prints a note and goes on.
python_tools_ok=0
if [[ ${PTD_SKIP_PYTHON:-0} != 1 ]]; then
  if [[ ! -x $venv/bin/python ]] && ! python3 -m venv "$venv"; then
    echo "setup: note: python3 -m venv $venv failed; the Python module is not installed" >&2
  elif "$venv/bin/python" -c "import nanobind, scikit_build_core, numpy, pytest, safetensors" \
         2>/dev/null ||
       pip_install --timeout 20 --retries 1 nanobind scikit-build-core numpy pytest safetensors; then
    python_tools_ok=1
  else
    echo "setup: note: could not pip-install nanobind, scikit-build-core, numpy, pytest," \
         "safetensors (no network?); the Python module is not installed" >&2
  fi
fi

# OpenSSF model signing's reference implementation (model_signing, which
# imports OpenSSL from pyopenssl), pinned: the signing interop tests
# (python/tests/test_signing.py) sign folders with it and check that ptd
# accepts and refuses what it does. Apart from the tools above, so that
# without it only those tests are skipped (and say so).
if [[ $python_tools_ok == 1 ]] &&
   ! "$venv/bin/python" -c "import model_signing, OpenSSL" 2>/dev/null; then
  pip_install --timeout 20 --retries 1 model_signing==1.1.1 pyopenssl ||
    echo "setup: note: could not pip-install model_signing, pyopenssl (no network?);" \
         "the signing interop tests will be skipped" >&2
fi

# Whether the CUDA toolkit is here: CMake finds one through its nvcc (PATH,
# $CUDA_PATH/bin, /usr/local/cuda/bin), so that is the test.
have_nvcc() {
  command -v nvcc >/dev/null ||
    [[ -x /usr/local/cuda/bin/nvcc || (-n ${CUDA_PATH:-} && -x $CUDA_PATH/bin/nvcc) ]]
}

# The GPU bundle's CUDA 12 build (scripts/gpu_bundle.sh, cmake/PtdCuda12.cmake):
# the CUDA 12 runtime (headers, static cudart) and ptxas with libdevice, from
# PyPI's wheels (no nvcc in them), in .venv. Only where the bundle can be
# built (nvcc for its CUDA 13 build); without PyPI a note, and the bundle's
# test says what is missing.
cuda12_wheels=(nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86)
if [[ ${PTD_SKIP_PYTHON:-0} != 1 ]] && have_nvcc && [[ -x $venv/bin/python ]] &&
   ! compgen -G "$venv/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas" >/dev/null; then
  pip_install --timeout 20 --retries 1 --no-deps "${cuda12_wheels[@]}" ||
    echo "setup: note: could not pip-install ${cuda12_wheels[*]} (no network?);" \
         "the GPU bundle cannot be built" >&2
fi

# The executorch 1.5.1 wheel (C++ runtime, headers, CMake package; ~130 MB, no
# torch) in ${root}/.venv, where CMake looks for it (ptd::executorch and its
# tests). Installed once; without network this prints a note and goes on, and
# the executorch tests report themselves as skipped.
executorch_version=1.5.1
if [[ ${PTD_WITH_EXECUTORCH:-1} == 1 ]]; then
  if compgen -G "$venv/lib/python3*/site-packages/executorch/lib/cmake/executorch/executorch-config.cmake" >/dev/null; then
    :
  elif [[ ! -x $venv/bin/python ]] && ! python3 -m venv "$venv"; then
    echo "setup: note: python3 -m venv $venv failed; the executorch tests will be skipped" >&2
  elif pip_install --timeout 20 --retries 1 --no-deps "executorch==$executorch_version"; then
    echo "setup: installed executorch==$executorch_version into $venv"
  else
    echo "setup: note: could not pip-install executorch==$executorch_version (no network?);" \
         "the executorch tests will be skipped" >&2
  fi
fi

# The CUDA headers of the simulator build (tests/cudasim/; it needs no nvcc):
# on a machine without the CUDA toolkit, the CUDA 13.0 header wheels from PyPI
# into .venv, where CMake looks for them (nvidia/cu13/include), pinned to the
# toolkit CI builds with (have_nvcc: no toolkit).
# nvidia-cuda-crt holds crt/host_defines.h, which cuda_runtime_api.h includes.
# Installed once; without network this prints a note and goes on.
cuda_header_wheels=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88)
if have_nvcc; then
  :
elif compgen -G "$venv/lib/python3*/site-packages/nvidia/cu13/include/cuda_runtime_api.h" >/dev/null &&
     compgen -G "$venv/lib/python3*/site-packages/nvidia/cu13/include/crt/host_defines.h" >/dev/null; then
  :
elif [[ ! -x $venv/bin/python ]] && ! python3 -m venv "$venv"; then
  echo "setup: note: python3 -m venv $venv failed; without the CUDA toolkit or its" \
       "headers the simulator tests are not built" >&2
elif pip_install --timeout 20 --retries 1 --no-deps "${cuda_header_wheels[@]}"; then
  echo "setup: no CUDA toolkit: installed the CUDA headers (${cuda_header_wheels[*]}) into $venv"
else
  echo "setup: note: could not pip-install ${cuda_header_wheels[*]} (no network?);" \
       "without the CUDA toolkit the simulator tests are not built" >&2
fi
[[ ${1:-} == --deps ]] && exit 0

# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTD_WERROR=ON ${CMAKE_ARGS:-}
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" --parallel "$(nproc)" "${targets[@]}"

# The Python module `ptd` (python/, pyproject.toml) in the same .venv:
# `pip install .` without build isolation, with the tools installed above.
# Its CMake tree is build/python/<tag>, so a re-run rebuilds only what
# changed. CMAKE_ARGS reach its configure too. Skip with PTD_SKIP_PYTHON=1
# (scripts/test.sh then says the Python tests were skipped).
if [[ $python_tools_ok == 1 ]]; then
  echo "setup: pip install . (the Python module ptd) into $venv"
  # shellcheck disable=SC2086
  SKBUILD_CMAKE_ARGS=$(printf '%s;' ${CMAKE_ARGS:-}) \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    pip_install --no-build-isolation --no-deps "$root"
fi
