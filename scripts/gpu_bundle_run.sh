#!/usr/bin/env bash
# The GPU check, run from the bundle that scripts/gpu_bundle.sh builds (this
# file is copied there as run.sh). Needs only the NVIDIA driver, bash,
# coreutils and python3: no compiler, CMake, apt or pip.
#
#   0. the driver: nvidia-smi's driver version and "CUDA Version" (the newest
#      CUDA the driver supports) go to logs/driver.json and logs/nvidia-smi.txt
#      and into every summary, before anything can stop the run (without
#      nvidia-smi: the kernel module's version from /proc/driver/nvidia/version,
#      and the summary says nvidia-smi was not found);
#   1. probe: ptd-load --device cuda on a tiny conformance file; without a
#      GPU, one line "no CUDA device: ..." and exit 3; with a driver too old
#      for the bundle's CUDA 13 runtime (cudaErrorInsufficientDriver), one line
#      "driver too old: ..." and exit 4;
#   2. the GPU tests (bin/ptd_cuda_tests, gtest JSON output; a skipped test
#      is a failure);
#   3. ptd-load --device cuda --json --digest on every ok conformance case,
#      digests compared with cases.json (check.py digests);
#   4. the CUDA benchmark (bin/ptd_cuda_bench) on 1 GiB in 1024 storages, then
#      on 4 GiB if the time left allows;
#   5. summary.md and summary.json (check.py summary).
# Logs go to $OUT/logs and the summary to $OUT when OUT is set, else beside
# this script. The whole run stays under PTD_CHECK_BUDGET_S (default 285) s:
# each step's timeout is what is left less a reserve for the steps after it
# (GPU tests at most 150 s, digests 90 s, 1 GiB benchmark 100 s); a step that
# would get too little is not run (logs/steps.tsv: not_run), and a check that
# did not run fails the run (the 4 GiB benchmark excepted).
#
# Usage: run.sh            the whole check
#        run.sh --probe    only the driver and the probe: exit 0 with the
#                          device's name, else 3 or 4 as below
# Environment: OUT, PTD_CHECK_BUDGET_S, PTD_GPU_TEST_FILTER (default *: every
#   test of ptd_cuda_tests, all labelled "gpu"), PTD_CHECK_DEVICE=host (runs
#   the plumbing without a GPU, for the bundle's CPU-side test; such a run
#   never passes: the GPU tests skip and the benchmark needs a GPU).
# Exit status:
#   0 every check ran and passed;
#   1 a check failed or did not run;
#   2 the bundle cannot run here (a binary does not start, python3 missing);
#   3 no CUDA device (no GPU, or no NVIDIA driver at all);
#   4 the NVIDIA driver is too old for the bundle's CUDA 13 runtime (CUDA 13
#     needs driver >= 580; 580.65.06 for CUDA 13.0).
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
[[ $budget =~ ^[0-9]+$ ]] || { echo "run.sh: PTD_CHECK_BUDGET_S='$budget' is not a number of seconds" >&2; exit 2; }
dev=${PTD_CHECK_DEVICE:-cuda}
start=$(date +%s)
mkdir -p "$logs" || { echo "run.sh: cannot create $logs" >&2; exit 2; }
: >"$logs/steps.tsv"
rm -f "$logs"/*.json "$logs/nvidia-smi".* "$out/summary.json" "$out/summary.md"  # Nothing stale from an earlier run.

elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( budget - $(elapsed) )); }
say() { printf '== [%3ss] %s\n' "$(elapsed)" "$*"; }
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr -d '\n\r\t')"; }
json_str_or_null() { if [[ -n $1 ]]; then json_str "$1"; else printf null; fi; }

# ---- 0. the driver, recorded before anything can stop the run ----
# driver_version: nvidia-smi --query-gpu=driver_version (else "Driver
# Version:" of its header, else the kernel module's version in /proc);
# cuda_version: the "CUDA Version" of nvidia-smi's header, the newest CUDA
# the driver supports; smi: how nvidia-smi went ("ok", "not found", ...).
driver_version='' cuda_version='' driver_source='' smi=ok
if command -v nvidia-smi >/dev/null; then
  # nvidia-smi can hang on a wedged GPU: bounded like everything else.
  timeout --kill-after=5 30 nvidia-smi >"$logs/nvidia-smi.txt" 2>&1
  smi_rc=$?
  q=$(timeout --kill-after=5 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1)
  q_rc=$?
  printf '\n$ nvidia-smi --query-gpu=driver_version --format=csv,noheader (exit %s)\n%s\n' "$q_rc" "$q" >>"$logs/nvidia-smi.txt"
  q=$(head -1 <<<"$q" | tr -d ' \r')
  if (( q_rc == 0 )) && [[ $q =~ ^[0-9]+(\.[0-9]+)+$ ]]; then
    driver_version=$q driver_source=nvidia-smi
  else
    driver_version=$(grep -m1 -o 'Driver Version: *[0-9][0-9.]*' "$logs/nvidia-smi.txt" | grep -o '[0-9][0-9.]*$')
    [[ -n $driver_version ]] && driver_source=nvidia-smi
  fi
  cuda_version=$(grep -m1 -o 'CUDA Version: *[0-9][0-9.]*' "$logs/nvidia-smi.txt" | grep -o '[0-9][0-9.]*$')
  if (( smi_rc == 124 || smi_rc == 137 )); then
    smi="timed out after 30 s"
  elif (( smi_rc != 0 )); then
    smi="failed (exit $smi_rc): $(grep -m1 . "$logs/nvidia-smi.txt" | cut -c1-200)"
  fi
else
  smi="not found"
  echo "nvidia-smi: not found on PATH ($PATH)" >"$logs/nvidia-smi.txt"
fi
if [[ -z $driver_version && -r /proc/driver/nvidia/version ]]; then
  driver_version=$(grep -m1 '^NVRM version' /proc/driver/nvidia/version | grep -oE '[0-9]{3,}\.[0-9]+(\.[0-9]+)?' | head -1)
  [[ -n $driver_version ]] && driver_source=/proc/driver/nvidia/version
fi
# "driver 580.65.06 (CUDA 13.0)", "driver unknown (CUDA unknown; nvidia-smi not found)", ...
driver_text="driver ${driver_version:-unknown} (CUDA ${cuda_version:-unknown}"
[[ $smi != ok ]] && driver_text+="; nvidia-smi $smi"
[[ $driver_source == /proc/* ]] && driver_text+="; driver version from $driver_source"
driver_text+=")"
driver_json=$(printf '{"driver_version": %s, "cuda_version": %s, "nvidia_smi": %s, "source": %s, "text": %s}' \
  "$(json_str_or_null "$driver_version")" "$(json_str_or_null "$cuda_version")" "$(json_str "$smi")" \
  "$(json_str_or_null "$driver_source")" "$(json_str "$driver_text")")
printf '%s\n' "$driver_json" >"$logs/driver.json"

# A summary without python3, for the runs that stop before the checks.
early_summary() {  # result, message
  printf '{"result": %s, "message": %s, "seconds": %s, "driver": %s, "checks": []}\n' \
    "$(json_str "$1")" "$(json_str "$2")" "$(elapsed)" "$driver_json" >"$out/summary.json"
  printf '# GPU check: %s\n\n%s\n\n- %s\n- bundle: %s\n' "$1" "$2" "$driver_text" \
    "$(head -1 "$here/BUNDLE.txt" 2>/dev/null)" >"$out/summary.md"
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
# limit_for MAX RESERVE: a step's timeout: what is left of the budget less
# RESERVE (for the steps after it and the summary), at most MAX.
limit_for() { local l=$(( $(left) - $2 )); echo $(( l < $1 ? l : $1 )); }
# not_run NAME WHAT: a step skipped for want of time, recorded as such.
not_run() {
  say "$2: not run, $(left)s left of ${budget}s"
  printf '%s\tnot_run\t0\t0\n' "$1" >>"$logs/steps.tsv"
}

# ---- the binaries start here ----
for b in ptd-load ptd_cuda_tests ptd_cuda_bench; do
  [[ -x $here/bin/$b ]] || { echo "run.sh: $here/bin/$b is missing: rebuild the bundle (scripts/gpu_bundle.sh)"; early_summary error "bin/$b missing"; exit 2; }
done
if ! v=$("$here/bin/ptd-load" --version 2>&1); then
  msg="bin/ptd-load does not start on this machine: $(head -1 <<<"$v") (the bundle needs: $(grep '^needs:' "$here/BUNDLE.txt" 2>/dev/null | cut -c8-))"
  echo "run.sh: $msg"; early_summary error "$msg"; exit 2
fi

# ---- 1. probe ----
probe_file=$here/data/conformance/files/c01_layouts_and_shared_segment.ptd
probe=$(timeout 60 "$here/bin/ptd-load" --device "$dev" --json "$probe_file" 2>&1 >"$logs/probe.json")
probe_rc=$?
printf '%s\n' "$probe" >"$logs/probe.log"
if (( probe_rc != 0 )); then
  # The static CUDA runtime says cudaErrorInsufficientDriver both for a driver
  # older than it and for none at all; ptd-load tells the second apart ("no
  # NVIDIA driver found": no libcuda.so.1 and no /dev/nvidiactl), exit 3.
  if grep -q 'cudaErrorInsufficientDriver' <<<"$probe" && ! grep -q 'no NVIDIA driver found' <<<"$probe"; then
    need="CUDA 13 needs driver >= 580 (580.65.06 for CUDA 13.0)"
    major=${driver_version%%.*}
    if [[ $major =~ ^[0-9]+$ ]] && (( major >= 580 )); then
      line="driver too old: the bundle's CUDA 13 runtime gets cudaErrorInsufficientDriver from libcuda.so.1 although this is $driver_text: an older libcuda.so.1 (LD_LIBRARY_PATH, a compat package) is likely loaded instead of the driver's; $need"
    else
      line="driver too old: $driver_text cannot run this bundle's CUDA 13 runtime (cudaErrorInsufficientDriver); $need"
    fi
    echo "$line"
    early_summary driver_too_old "$line"
    exit 4
  fi
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
say "device: ${device:-?}, $driver_text ($(head -1 "$here/BUNDLE.txt" 2>/dev/null))"
if command -v nvidia-smi >/dev/null; then
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
    --format=csv >"$logs/nvidia-smi.csv" 2>&1 || true
fi
[[ ${1:-} == --probe ]] && exit 0
command -v python3 >/dev/null || { echo "run.sh: python3 not found (the checker, check.py, needs it)"; early_summary error "python3 not found"; exit 2; }

# ---- 2. the GPU tests: at most 150 s, leaving 100 s for the rest ----
rm -f "$logs/gpu_tests.json"
limit=$(limit_for 150 100)
if (( limit >= 20 )); then
  say "GPU tests (bin/ptd_cuda_tests, ${limit}s at most)"
  step gpu_tests "$limit" \
    env PTD_TEST_DATA_DIR="$here/data" PTD_LOAD_BINARY="$here/bin/ptd-load" \
    "$here/bin/ptd_cuda_tests" --gtest_filter="${PTD_GPU_TEST_FILTER:-*}" \
    --gtest_output="json:$logs/gpu_tests.json"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$logs/gpu_tests.log"
else
  not_run gpu_tests "GPU tests"
fi

# ---- 3. digests through ptd-load: at most 90 s, leaving 50 s for the rest ----
limit=$(limit_for 90 50)
if (( limit >= 15 )); then
  say "ptd-load --device $dev --json --digest on every ok conformance case (${limit}s at most)"
  step digests "$limit" python3 "$here/check.py" digests --bundle "$here" --logs "$logs" --device "$dev"
  tail -3 "$logs/digests.log"
else
  not_run digests "ptd-load --digest on the conformance cases"
fi

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
limit=$(limit_for 100 20)
if (( limit >= 20 )); then
  say "CUDA benchmark, 1 GiB in 1024 storages (${limit}s at most)"
  bench bench_1g $((1 << 30)) "$limit" 0.5
else
  not_run bench_1g "CUDA benchmark, 1 GiB"
fi
if (( $(left) >= 110 )); then
  say "CUDA benchmark, 4 GiB in 1024 storages ($(left)s left)"
  bench bench_4g $((4 << 30)) "$(( $(left) - 15 ))" 1
else
  not_run bench_4g "CUDA benchmark, 4 GiB"
fi

# ---- 5. summary ----
say "summary"
python3 "$here/check.py" summary --bundle "$here" --logs "$logs" --out "$out" --seconds "$(elapsed)"
