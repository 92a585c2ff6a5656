#!/usr/bin/env bash
# The GPU check, run from the bundle that scripts/gpu-bundle.sh builds (this
# file is copied there as run.sh). Needs only the NVIDIA driver, bash,
# coreutils and python3: no compiler, CMake, apt or pip.
#
#   1. probe: ptd-load --device cuda on a tiny conformance file; without a
#      GPU, one line "no CUDA device: ..." and exit 3;
#   2. the GPU tests (bin/ptd_cuda_tests, gtest JSON output; a skipped test
#      is a failure);
#   3. ptd-load --device cuda --json --digest on every ok conformance case,
#      digests compared with cases.json (check.py digests);
#   4. the CUDA benchmark (bin/ptd_cuda_bench) on 1 GiB in 1024 storages, then
#      on 4 GiB if the time left allows;
#   5. summary.md and summary.json (check.py summary).
# Logs go to $OUT/logs and the summary to $OUT when OUT is set, else beside
# this script. The whole run stays under PTD_CHECK_BUDGET_S (default 285) s.
#
# Usage: run.sh            the whole check
#        run.sh --probe    only the probe: exit 0 with the device's name, or 3
# Environment: OUT, PTD_CHECK_BUDGET_S, PTD_GPU_TEST_FILTER (default *: every
#   test of ptd_cuda_tests, all labelled "gpu"), PTD_CHECK_DEVICE=host (runs
#   the plumbing without a GPU, for the bundle's CPU-side test; such a run
#   never passes: the GPU tests skip and the benchmark needs a GPU).
# Exit status: 0 every check ran and passed; 1 a check failed; 2 the bundle
# cannot run here (a binary does not start, python3 missing); 3 no CUDA device.
set -uo pipefail
case ${1:-} in
  ""|--probe) ;;
  -h|--help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "run.sh: unknown argument '$1' (run.sh [--probe | --help])" >&2; exit 2 ;;
esac
export PATH=${PATH:-/usr/local/bin:/usr/bin:/bin}
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The binaries find lib/ through their $ORIGIN RUNPATH; this keeps a
# LD_LIBRARY_PATH of the machine (a conda libcrypto, say) from overriding it.
export LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-$here}
logs=$out/logs
budget=${PTD_CHECK_BUDGET_S:-285}
dev=${PTD_CHECK_DEVICE:-cuda}
start=$(date +%s)
mkdir -p "$logs" || { echo "run.sh: cannot create $logs" >&2; exit 2; }
: >"$logs/steps.tsv"
rm -f "$logs"/*.json "$out/summary.json" "$out/summary.md"  # Nothing stale from an earlier run.

elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( budget - $(elapsed) )); }
say() { printf '== [%3ss] %s\n' "$(elapsed)" "$*"; }
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr -d '\n\r\t')"; }

# A summary without python3, for the runs that stop before the checks.
early_summary() {  # result, message
  printf '{"result": %s, "message": %s, "seconds": %s, "checks": []}\n' \
    "$(json_str "$1")" "$(json_str "$2")" "$(elapsed)" >"$out/summary.json"
  printf '# GPU check: %s\n\n%s\n' "$1" "$2" >"$out/summary.md"
}

# step NAME TIMEOUT_S CMD...: runs CMD with its output in logs/NAME.log and
# records its exit status and time in logs/steps.tsv.
step() {
  local name=$1 limit=$2; shift 2
  (( limit >= 5 )) || limit=5  # timeout 0 would mean none.
  local t0; t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$limit" >>"$logs/steps.tsv"
  return $rc
}

# ---- 0. the binaries start here ----
for b in ptd-load ptd_cuda_tests ptd_cuda_bench; do
  [[ -x $here/bin/$b ]] || { echo "run.sh: $here/bin/$b is missing: rebuild the bundle (scripts/gpu-bundle.sh)"; early_summary error "bin/$b missing"; exit 2; }
done
if ! v=$("$here/bin/ptd-load" --version 2>&1); then
  msg="bin/ptd-load does not start on this machine: $(head -1 <<<"$v") (the bundle needs: $(grep '^needs:' "$here/BUNDLE.txt" 2>/dev/null | cut -c8-))"
  echo "run.sh: $msg"; early_summary error "$msg"; exit 2
fi

# ---- 1. probe ----
probe_file=$here/data/conformance/files/c01_layouts_and_shared_segment.ptd
probe=$(timeout 60 "$here/bin/ptd-load" --device "$dev" --json "$probe_file" 2>&1 >"$logs/probe.json")
probe_rc=$?
if (( probe_rc != 0 )); then
  line=$(grep -m1 -o 'no CUDA device.*' <<<"$probe")
  if [[ -n $line ]]; then
    echo "$line"
    early_summary no_device "$line"
    exit 3
  fi
  msg="probe failed: ptd-load --device $dev exited $probe_rc: $(head -1 <<<"$probe")"
  echo "run.sh: $msg"; early_summary error "$msg"; exit 2
fi
device=$(grep -A4 '"device": {' "$logs/probe.json" | grep -m1 '"name"' | cut -d'"' -f4)
say "device: ${device:-?} ($(head -1 "$here/BUNDLE.txt" 2>/dev/null))"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
    --format=csv >"$logs/nvidia-smi.csv" 2>&1 || true
fi
[[ ${1:-} == --probe ]] && exit 0
command -v python3 >/dev/null || { echo "run.sh: python3 not found (the checker, check.py, needs it)"; early_summary error "python3 not found"; exit 2; }

# ---- 2. the GPU tests ----
say "GPU tests (bin/ptd_cuda_tests)"
rm -f "$logs/gpu_tests.json"
step gpu_tests "$(( $(left) < 150 ? $(left) : 150 ))" \
  env PTD_TEST_DATA_DIR="$here/data" PTD_LOAD_BINARY="$here/bin/ptd-load" \
  "$here/bin/ptd_cuda_tests" --gtest_filter="${PTD_GPU_TEST_FILTER:-*}" \
  --gtest_output="json:$logs/gpu_tests.json"
grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$logs/gpu_tests.log"

# ---- 3. digests through ptd-load ----
say "ptd-load --device $dev --json --digest on every ok conformance case"
step digests 90 python3 "$here/check.py" digests --bundle "$here" --logs "$logs" --device "$dev"
tail -3 "$logs/digests.log"

# ---- 4. the CUDA benchmark: 1 GiB, then 4 GiB when there is time ----
bench_dir=$(mktemp -d "${TMPDIR:-/tmp}/ptd-gpu-check.XXXXXX")
trap 'rm -rf "$bench_dir"' EXIT
bench() {  # NAME BYTES TIMEOUT MIN_TIME
  PTD_CUDA_BENCH_BYTES=$2 PTD_CUDA_BENCH_STORAGES=1024 \
  PTD_CUDA_LOADER_BYTES=$2 PTD_CUDA_LOADER_STORAGES=1024 PTD_CUDA_BENCH_DIR="$bench_dir" \
    step "$1" "$3" "$here/bin/ptd_cuda_bench" --benchmark_min_time="$4" \
      --benchmark_counters_tabular=true --benchmark_out="$logs/$1.json" --benchmark_out_format=json
  grep -E '^BM_Loader' "$logs/$1.log" | cut -c1-160
  rm -f "$bench_dir"/*
}
say "CUDA benchmark, 1 GiB in 1024 storages"
bench bench_1g $((1 << 30)) "$(( $(left) - 20 < 100 ? $(left) - 20 : 100 ))" 0.5
if (( $(left) >= 110 )); then
  say "CUDA benchmark, 4 GiB in 1024 storages ($(left)s left)"
  bench bench_4g $((4 << 30)) "$(( $(left) - 15 ))" 1
else
  say "CUDA benchmark, 4 GiB: not run, $(left)s left of ${budget}s"
  printf 'bench_4g\tnot_run\t0\t0\n' >>"$logs/steps.tsv"
fi

# ---- 5. summary ----
say "summary"
python3 "$here/check.py" summary --bundle "$here" --logs "$logs" --out "$out" --seconds "$(elapsed)"
