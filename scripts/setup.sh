#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks, then configures and builds the
# project into build/ (RelWithDebInfo).
#
# Usage: scripts/setup.sh            install missing packages, configure, build
#        scripts/setup.sh --deps     install missing packages only
# Environment: BUILD_DIR (default build), CMAKE_ARGS (extra configure flags),
#              BUILD_TARGETS (default: everything).
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
)

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
[[ ${1:-} == --deps ]] && exit 0

# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTD_WERROR=ON ${CMAKE_ARGS:-}
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" --parallel "$(nproc)" "${targets[@]}"
