#!/usr/bin/env bash
# The main job on a built-in demo: sets up and builds, writes a demo weight
# file pair with the writer half (out/demo/demo.ptd + demo.manifest), then
# verifies it with ptd-verify and prints the report, then loads it onto the
# host with ptd-load and prints what it loaded (with digests of the loaded
# memory).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
# Only what the demo runs: the three tools, not the tests or the Python module.
PTD_SKIP_PYTHON=1 BUILD_TARGETS="ptd-verify ptd-load ptd-write-demo" "$root/scripts/setup.sh"

out=$root/out/demo
mkdir -p "$out"
"$build/examples/ptd-write-demo" "$out"
echo
"$build/verifier/ptd-verify" --digest --sm 90 \
  --manifest "$out/demo.manifest" "$out/demo.ptd"
echo
"$build/verifier/ptd-load" --device host --digest \
  --manifest "$out/demo.manifest" "$out/demo.ptd"
