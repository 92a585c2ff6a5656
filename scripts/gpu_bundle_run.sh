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
#   1. the build: bin/ (CUDA 13, driver >= 580) or cuda12/bin/ (CUDA 12,
#      driver >= 525), the newest that the driver's CUDA version supports
#      (nvidia-smi, else the driver's version; when neither says, the builds
#      are probed newest first); one line "build: CUDA 12 (driver 550.54.15
#      supports CUDA 12.4)"; exit 4 at once when the driver supports neither;
#   then the probe: ptd-load --device cuda on a tiny conformance file; without
#      a GPU, one line "no CUDA device: ..." and exit 3; when every candidate
#      build gets cudaErrorInsufficientDriver, one line "driver too old: ..."
#      and exit 4;
#   2. the measurements, in the first minutes: the CUDA benchmark on 1 GiB
#      in 1024 storages (pinned-copy and pread ceilings, upstream's way, the
#      loader); pinning: that 1 GiB loaded with --device-budget 0; every ok
#      conformance case with --device-budget 0 --digest (the kernels reading
#      mapped host memory); the loader on 65,536 storages of 1,000 B and of
#      1,024 B (load time, copies and cudaMemcpyAsync calls);
#   3. the GPU tests (ptd_cuda_tests, gtest JSON output; a skipped test is a
#      failure);
#   4. ptd-load --device cuda --json --digest on every ok conformance case,
#      digests compared with cases.json (check.py digests); then the CUDA
#      benchmark on 4 GiB if the time left allows;
#   5. summary.md and summary.json (check.py summary).
# Logs go to $OUT/logs and the summary to $OUT when OUT is set, else beside
# this script. The whole run stays under PTD_CHECK_BUDGET_S (default 420) s:
# each step's timeout is what is left less a reserve for the steps after it
# (1 GiB benchmark at most 100 s, pinning 40 s, mapped digests 60 s, each
# small-storage run 45 s, GPU tests 150 s, digests 90 s); a step that would
# get too little is not run (logs/steps.tsv: not_run), and a check that did
# not run fails the run (the 4 GiB benchmark excepted).
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
#   4 the NVIDIA driver is too old for both of the bundle's builds (CUDA 13
#     needs driver >= 580, CUDA 12 driver >= 525).
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
budget=${PTD_CHECK_BUDGET_S:-420}
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

# ---- the build: the newest that the driver supports ----
# bin/ is the CUDA 13 build (driver >= 580), cuda12/bin/ the CUDA 12 one
# (driver >= 525: CUDA 12 minor-version compatibility). From nvidia-smi's
# "CUDA Version", else the driver's version; when neither says, the builds
# are probed newest first. A probe that gets cudaErrorInsufficientDriver
# goes on to the next build. One line says which build and why.
build_dir() { [[ $1 == cuda13 ]] && echo "$here/bin" || echo "$here/cuda12/bin"; }
build_name() { [[ $1 == cuda13 ]] && echo "CUDA 13" || echo "CUDA 12"; }
need_text="CUDA 13 needs driver >= 580, CUDA 12 driver >= 525"
cuda_major=${cuda_version%%.*}
driver_major=${driver_version%%.*}
if [[ $cuda_major =~ ^[0-9]+$ ]]; then
  why="driver ${driver_version:-unknown} supports CUDA $cuda_version"
  if (( cuda_major >= 13 )); then builds=(cuda13 cuda12)
  elif (( cuda_major == 12 )); then builds=(cuda12)
  else builds=()
  fi
elif [[ $driver_major =~ ^[0-9]+$ ]]; then
  if (( driver_major >= 580 )); then why="driver $driver_version >= 580, which supports CUDA 13"; builds=(cuda13 cuda12)
  elif (( driver_major >= 525 )); then why="driver $driver_version >= 525, which supports CUDA 12"; builds=(cuda12)
  else why="driver $driver_version"; builds=()
  fi
else
  why="the driver's CUDA version is unknown: probing the builds newest first"
  builds=(cuda13 cuda12)
fi
if (( ${#builds[@]} == 0 )); then
  line="driver too old: $driver_text supports neither of this bundle's builds; $need_text"
  echo "$line"; early_summary driver_too_old "$line"; exit 4
fi

for b in "${builds[@]}"; do
  for x in ptd-load ptd_cuda_tests ptd_cuda_bench; do
    [[ -x $(build_dir "$b")/$x ]] || { msg="$(build_dir "$b")/$x is missing: rebuild the bundle (scripts/gpu_bundle.sh)"; echo "run.sh: $msg"; early_summary error "$msg"; exit 2; }
  done
done

# ---- 1. probe, with each candidate build until one gets past the driver ----
probe_file=$here/data/conformance/files/c01_layouts_and_shared_segment.ptd
build='' tried=''
for b in "${builds[@]}"; do
  bin=$(build_dir "$b")
  echo "build: $(build_name "$b") ($why)"
  if ! v=$("$bin/ptd-load" --version 2>&1); then
    msg="$(build_name "$b")'s ptd-load does not start on this machine: $(head -1 <<<"$v") (the bundle needs: $(grep '^needs:' "$here/BUNDLE.txt" 2>/dev/null | cut -c8-))"
    echo "run.sh: $msg"; early_summary error "$msg"; exit 2
  fi
  probe=$(timeout 60 "$bin/ptd-load" --device "$dev" --json "$probe_file" 2>&1 >"$logs/probe.json")
  probe_rc=$?
  printf '%s\n' "$probe" >"$logs/probe.log"
  # The static CUDA runtime says cudaErrorInsufficientDriver both for a driver
  # older than it and for none at all; ptd-load tells the second apart ("no
  # NVIDIA driver found": no libcuda.so.1 and no /dev/nvidiactl).
  if (( probe_rc != 0 )) && grep -q 'cudaErrorInsufficientDriver' <<<"$probe" &&
     ! grep -q 'no NVIDIA driver found' <<<"$probe"; then
    tried+="${tried:+, }$(build_name "$b")"
    why="the $(build_name "$b") build's probe got cudaErrorInsufficientDriver"
    continue
  fi
  build=$b
  break
done
if [[ -z $build ]]; then
  if [[ $cuda_major =~ ^[0-9]+$ ]] && (( cuda_major >= 12 )); then
    line="driver too old: the bundle's $tried runtime gets cudaErrorInsufficientDriver from libcuda.so.1 although this is $driver_text: an older libcuda.so.1 (LD_LIBRARY_PATH, a compat package) is likely loaded instead of the driver's; $need_text"
  else
    line="driver too old: $driver_text cannot run this bundle's $tried runtime (cudaErrorInsufficientDriver); $need_text"
  fi
  echo "$line"; early_summary driver_too_old "$line"; exit 4
fi
bin=$(build_dir "$build")
printf '{"build": %s, "dir": %s, "why": %s}\n' "$(json_str "$(build_name "$build")")" \
  "$(json_str "${bin#"$here"/}")" "$(json_str "$why")" >"$logs/build.json"
if (( probe_rc != 0 )); then
  line=$(grep -m1 -o 'no CUDA device.*' <<<"$probe")
  if [[ -n $line ]]; then
    echo "$line"
    early_summary no_device "$line"
    exit 3
  fi
  msg="probe failed: $(build_name "$build")'s ptd-load --device $dev exited $probe_rc: $(head -1 <<<"$probe")"
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

# ---- 2. the measurements, first: the hardware's ceilings and ours ----
bench_dir=$(mktemp -d "${TMPDIR:-/tmp}/ptd-gpu-check.XXXXXX")
trap 'rm -rf "$bench_dir"' EXIT
bench() {  # NAME BYTES STORAGES TIMEOUT MIN_TIME [FILTER]
  PTD_CUDA_BENCH_BYTES=$2 PTD_CUDA_BENCH_STORAGES=$3 \
  PTD_CUDA_LOADER_BYTES=$2 PTD_CUDA_LOADER_STORAGES=$3 PTD_CUDA_BENCH_DIR="$bench_dir" \
    step "$1" "$4" "$bin/ptd_cuda_bench" --benchmark_min_time="$5" ${6:+--benchmark_filter="$6"} \
      --benchmark_counters_tabular=true --benchmark_out="$logs/$1.json" --benchmark_out_format=json
  grep -E '^BM_Loader' "$logs/$1.log" | cut -c1-200
}
# 2a. pinned-copy and pread ceilings, upstream's way and the loader, 1 GiB.
limit=$(limit_for 100 240)
if (( limit >= 20 )); then
  say "CUDA benchmark, 1 GiB in 1024 storages: ceilings, upstream, the loader (${limit}s at most)"
  bench bench_1g $((1 << 30)) 1024 "$limit" 0.5
else
  not_run bench_1g "CUDA benchmark, 1 GiB"
fi
# 2b. pinning: the same 1 GiB loaded into pinned host memory mapped for the
# GPU (--device-budget 0); its allocate_s is the cudaHostAlloc that pins it.
gib_ptd=$(compgen -G "$bench_dir/ptd_cuda_loader_1024x*.ptd" | head -1)
limit=$(limit_for 40 200)
if [[ -n $gib_ptd ]] && (( limit >= 10 )); then
  say "pinning: ptd-load --device-budget 0 on the 1 GiB file (${limit}s at most)"
  step pin_1g "$limit" sh -c '"$1" --device "$2" --device-budget 0 --json --manifest "$3" "$4" >"$5"' \
    sh "$bin/ptd-load" "$dev" "${gib_ptd%.ptd}.manifest" "$gib_ptd" "$logs/pin_1g.json"
else
  not_run pin_1g "pinning, 1 GiB"
fi
# 2b'. cold starts into device memory: the same 1 GiB dropped from the page
# cache, read with --io direct (O_DIRECT through the staging ring) and with
# --io gds (cuFile straight into device memory; the load reports the mode
# cuFile runs in, or why it fell back). libcufile comes from PyTorch's
# nvidia-cufile wheel when no PTD_CUFILE_LIBRARY is set.
if [[ -z ${PTD_CUFILE_LIBRARY:-} ]]; then
  cufile=$(python3 -c 'import glob, os, nvidia.cufile as m
print((glob.glob(os.path.join(list(m.__path__)[0], "lib", "libcufile.so*")) or [""])[0])' 2>/dev/null || true)
  if [[ -n $cufile ]]; then export PTD_CUFILE_LIBRARY=$cufile; fi
fi
for io in direct gds; do
  limit=$(limit_for 25 150)
  if [[ -n $gib_ptd ]] && (( limit >= 10 )); then
    say "cold start: ptd-load --io $io on the 1 GiB file, dropped from the page cache (${limit}s at most)"
    python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$gib_ptd"
    step "cold_${io}_1g" "$limit" sh -c '"$1" --device "$2" --io "$3" --json --manifest "$4" "$5" >"$6"' \
      sh "$bin/ptd-load" "$dev" "$io" "${gib_ptd%.ptd}.manifest" "$gib_ptd" "$logs/cold_${io}_1g.json"
  else
    not_run "cold_${io}_1g" "cold start with --io $io, 1 GiB"
  fi
done
rm -f "$bench_dir"/*
# 2c. kernels reading mapped host memory: every conformance case with
# --device-budget 0 --digest.
limit=$(limit_for 60 170)
if (( limit >= 15 )); then
  say "ptd-load --device $dev --device-budget 0 --digest on every ok conformance case (${limit}s at most)"
  step digests_mapped "$limit" python3 "$here/check.py" digests --bundle "$here" --logs "$logs" \
    --device "$dev" --load "$bin/ptd-load" --device-budget 0 --name digests_mapped
  tail -1 "$logs/digests_mapped.log"
else
  not_run digests_mapped "ptd-load --device-budget 0 --digest on the conformance cases"
fi
# 2d. small storages: 65,536 of 1,000 B (not a multiple of the arena's
# 256 B) against 65,536 of 1,024 B: load time and the copy calls issued.
for each in 1000 1024; do
  limit=$(limit_for 45 $(( each == 1000 ? 130 : 110 )))
  if (( limit >= 15 )); then
    say "the loader on 65,536 storages of $each B (${limit}s at most)"
    bench "small_$each" $((65536 * each)) 65536 "$limit" 0.5 '^BM_Loader_Cuda/'
    rm -f "$bench_dir"/*
  else
    not_run "small_$each" "the loader on 65,536 storages of $each B"
  fi
done

# ---- 3. the GPU tests: at most 150 s, leaving 50 s for the rest ----
rm -f "$logs/gpu_tests.json"
limit=$(limit_for 150 50)
if (( limit >= 20 )); then
  say "GPU tests (${bin#"$here"/}/ptd_cuda_tests, ${limit}s at most)"
  step gpu_tests "$limit" \
    env PTD_TEST_DATA_DIR="$here/data" PTD_LOAD_BINARY="$bin/ptd-load" \
    "$bin/ptd_cuda_tests" --gtest_filter="${PTD_GPU_TEST_FILTER:-*}" \
    --gtest_output="json:$logs/gpu_tests.json"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$logs/gpu_tests.log"
else
  not_run gpu_tests "GPU tests"
fi

# ---- 4. digests through ptd-load: at most 90 s, leaving 15 s for the rest ----
limit=$(limit_for 90 15)
if (( limit >= 20 )); then
  say "ptd-load --device $dev --json --digest on every ok conformance case (${limit}s at most)"
  step digests "$limit" python3 "$here/check.py" digests --bundle "$here" --logs "$logs" \
    --device "$dev" --load "$bin/ptd-load"
  tail -3 "$logs/digests.log"
else
  not_run digests "ptd-load --digest on the conformance cases"
fi

# The 4 GiB benchmark when there is time.
if (( $(left) >= 110 )); then
  say "CUDA benchmark, 4 GiB in 1024 storages ($(left)s left)"
  bench bench_4g $((4 << 30)) 1024 "$(( $(left) - 15 ))" 1
  rm -f "$bench_dir"/*
else
  not_run bench_4g "CUDA benchmark, 4 GiB"
fi

# ---- 5. summary ----
say "summary"
python3 "$here/check.py" summary --bundle "$here" --logs "$logs" --out "$out" --seconds "$(elapsed)"
