#!/usr/bin/env bash
# The GPU check on one machine that has both the dev packages and a GPU:
# builds the relocatable bundle (scripts/gpu_bundle.sh) and runs its run.sh.
# On a bare GPU machine, build the bundle elsewhere and run only
# gpu-bundle/run.sh there (README, "The GPU check on a bare GPU machine").
#
# Usage: scripts/gpu_check.sh [run.sh's arguments]
# Environment: PTD_BUNDLE_DIR (default gpu-bundle/), and those of
#   scripts/gpu_bundle.sh and run.sh (OUT, PTD_CHECK_BUDGET_S, ...).
# Exit status: scripts/gpu_bundle.sh's when the build fails, else run.sh's
# (0 every check ran and passed, 1 a check failed, 2 the bundle cannot run,
# 3 no CUDA device).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=${PTD_BUNDLE_DIR:-$root/gpu-bundle}
"$root/scripts/gpu_bundle.sh" "$bundle"
exec "$bundle/run.sh" "$@"
