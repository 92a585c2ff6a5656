#!/usr/bin/env bash
# ctest gpu_bundle (label "bundle"): the GPU bundle of scripts/gpu_bundle.sh is
# self-contained. Builds it, copies it to a fresh temporary folder, and there:
#   - every ELF file: each NEEDED library is in the bundle's lib/ or in the
#     base set; every RUNPATH/RPATH entry is $ORIGIN-relative and stays inside
#     the bundle; ldd resolves every library that is not in the base set into
#     the bundle;
#   - no file holds the path of the source or build tree;
#   - the bundle is at most 64 MiB;
#   - the CUDA 12 build's embedded kernel images (cubins and PTX) carry every
#     entry point, and each device gets one that runs on it (its
#     PrebuiltKernelsTest, which needs no GPU);
#   - under env -i, from /: each binary's --help / --gtest_list_tests (the
#     conformance tests are listed, so the data is found from the binary);
#   - the checker (check.py) on the host device agrees with cases.json and
#     fails on a tampered one; run.sh's pipeline on the host device
#     (PTD_CHECK_DEVICE=host) counts the skipped GPU tests as a failure;
#   - run.sh with a fake driver (an nvidia-smi on PATH, each build's ptd-load
#     failing the probe as the CUDA runtime does): a CUDA 12.4 driver gets the
#     CUDA 12 build and its clean "no CUDA device" line; a CUDA 11 driver is
#     exit 4 at once; the CUDA 13 build rejected (cudaErrorInsufficientDriver)
#     leads to the CUDA 12 one, both rejected to exit 4; no driver version
#     known probes the builds newest first; no driver at all stays exit 3;
#     and the summaries carry the driver and CUDA versions (or that
#     nvidia-smi failed);
#   - run.sh's time budget: with a tiny PTD_CHECK_BUDGET_S the GPU tests,
#     the digests and the benchmarks are recorded as not run (a failure);
#     with a small one the digests run under a timeout below their 90 s;
#   - run.sh under env -i: without a GPU, exit 3, the build line and the line
#     "no CUDA device: ..." (with OUT set and without), never a loader error,
#     and a summary that says what it found of the driver.
# Exit 77 (skipped) when no GPU-free run is possible: this machine has a GPU
# (run.sh --probe finds one) or a driver too old for the bundle (exit 4),
# after the other checks passed.
#
# Usage: gpu_bundle_test.sh SOURCE_ROOT WORK_DIR [CMAKE_ARG...]
#   The bundle's build goes to WORK_DIR/build (kept: later runs rebuild
#   incrementally), the bundle to WORK_DIR/bundle.
set -uo pipefail
src=$(cd "$1" && pwd); work=$2; shift 2
mkdir -p "$work"
work=$(cd "$work" && pwd)
failures=0
fail_prefix="FAIL: "
fail() { echo "$fail_prefix$*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

t0=$(date +%s)
if ! CMAKE_ARGS="$*" PTD_BUNDLE_BUILD_DIR="$work/build" "$src/scripts/gpu_bundle.sh" "$work/bundle"; then
  echo "FAIL: scripts/gpu_bundle.sh failed"; exit 1
fi
echo "bundle built in $(( $(date +%s) - t0 ))s"

copy=$(mktemp -d "${TMPDIR:-/tmp}/ptd-bundle-test.XXXXXX")
trap 'rm -rf "$copy"' EXIT
cp -a "$work/bundle" "$copy/b"
b=$copy/b

# ---- ELF files and paths ----
base_re='^(ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libcuda\.so\.1)$'
# check_tree DIR: every ELF file under DIR and every path of this tree in
# DIR; each problem is a fail(); sets elfs.
check_tree() {
  local b=$1 f rel dyn lib path e entries resolved name arrow where _ p leaks
  elfs=0
  while IFS= read -r -d '' f; do
    [[ $(head -c4 "$f" | tr -d '\0') == $'\177ELF' ]] || continue
    elfs=$((elfs + 1))
    rel=${f#"$b"/}
    dyn=$(readelf -d "$f")
    while read -r lib; do
      [[ -z $lib ]] && continue
      [[ $lib =~ $base_re || -f $b/lib/$lib ]] || fail "$rel needs $lib, which is neither in the bundle nor in the base set"
    done < <(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$dyn")
    while read -r path; do
      [[ -z $path ]] && continue
      IFS=: read -ra entries <<<"$path"
      for e in "${entries[@]}"; do
        if [[ $e != '$ORIGIN'* ]]; then
          fail "$rel: RUNPATH/RPATH entry '$e' is not \$ORIGIN-relative"
          continue
        fi
        resolved=$(realpath -m "$(dirname "$f")${e#'$ORIGIN'}")
        [[ $resolved == "$b" || $resolved == "$b"/* ]] || fail "$rel: RUNPATH entry '$e' points outside the bundle ($resolved)"
      done
    done < <(sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p' <<<"$dyn")
    # What the dynamic loader would do: everything outside the base set from the bundle.
    while read -r name arrow where _; do
      [[ $arrow == "=>" ]] || continue
      [[ $name =~ $base_re ]] && continue
      if [[ $where == "not" ]]; then
        fail "$rel: ldd cannot find $name"
      elif [[ $(realpath -m "$where") != "$b"/* ]]; then
        fail "$rel: $name resolves to $where, outside the bundle"
      fi
    done < <(env -i ldd "$f" 2>&1)
  done < <(find "$b" -type f -print0)
  for p in "$src" "$(realpath "$src")" "$work"; do
    leaks=$(grep -a -r -l -F -- "$p" "$b" || true)
    [[ -z $leaks ]] || fail "these files hold the path $p: $leaks"
  done
}

before=$failures
check_tree "$b"
(( failures == before )) && ok "every NEEDED in the bundle or the base set, RUNPATHs \$ORIGIN-relative, no file holds $src or $work"
(( elfs >= 7 )) && ok "$elfs ELF files checked" || fail "only $elfs ELF files in the bundle"
for bin in {bin,cuda12/bin}/{ptd_cuda_tests,ptd-load,ptd_cuda_bench}; do
  [[ -x $b/$bin ]] || fail "$bin is missing"
  readelf -S "$b/$bin" 2>/dev/null | grep -q '\.symtab' && fail "$bin is not stripped"
done
# The CUDA 12 build's kernels: compiled ahead of time and embedded; their
# test needs no GPU.
r=$(env -i "$b/cuda12/bin/ptd_cuda_tests" --gtest_filter='PrebuiltKernelsTest.*' 2>&1); rc=$?
if (( rc == 0 )) && grep -q '\[  PASSED  \] 2 tests' <<<"$r"; then
  ok "cuda12/bin/ptd_cuda_tests PrebuiltKernelsTest: sm_80/90/100/120 cubins and compute_80 PTX, every entry point"
else
  fail "cuda12/bin/ptd_cuda_tests --gtest_filter=PrebuiltKernelsTest.*: exit $rc: $(tail -20 <<<"$r")"
fi
# sm_90 native code and compute_90 PTX in the kernels, nothing else: from
# cuobjdump where the toolkit has it, else from the kernels' compile flags.
nvcc_dir=$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")
if [[ -x $nvcc_dir/cuobjdump ]]; then
  list=$("$nvcc_dir/cuobjdump" --list-elf --list-ptx "$b/bin/ptd-load" 2>&1)
  grep -q 'sm_90' <<<"$list" && grep -qi 'ptx' <<<"$list" || fail "bin/ptd-load: no sm_90 code or PTX: $list"
  grep -qE 'sm_(80|100|120)' <<<"$list" && fail "bin/ptd-load carries code for other architectures: $list"
else
  flags=$(grep -h '^CUDA_FLAGS' "$work"/build/runtime/cuda/CMakeFiles/ptd_cuda_kernels.dir/flags.make 2>/dev/null ||
          grep -h -- '--generate-code=' "$work/build/build.ninja" 2>/dev/null)
  archs=$(grep -o -- '--generate-code=[^ ]*' <<<"$flags" | sort -u | tr '\n' ' ')
  [[ $archs == "--generate-code=arch=compute_90,code=[compute_90] --generate-code=arch=compute_90,code=[sm_90] " ]] &&
    ok "kernels: sm_90 + compute_90 PTX only" || fail "kernels are compiled for: '${archs:-?}' (want sm_90 and compute_90 PTX only)"
fi

# ---- the checks above can fail: a broken copy ----
cp -a "$b" "$copy/broken"
lib=$(cd "$copy/broken/lib" && ls | grep -m1 '^libcrypto')  # one that bin/ptd-load needs
rm "$copy/broken/lib/$lib"                                           # a NEEDED library missing
patchelf --set-rpath /usr/lib/x86_64-linux-gnu "$copy/broken/bin/ptd-load"  # RUNPATH outside
printf 'built in %s\n' "$src" >>"$copy/broken/data/conformance/README.md"  # a path of this tree
before=$failures; fail_prefix="  (expected) "
check_tree "$copy/broken" >"$copy/broken.log"
found=$((failures - before)); failures=$before; fail_prefix="FAIL: "
if grep -q "needs $lib, which is neither" "$copy/broken.log" && grep -q "not \$ORIGIN-relative" "$copy/broken.log" &&
   grep -Eq "ldd cannot find $lib|$lib resolves to .*outside the bundle" "$copy/broken.log" &&
   grep -q "hold the path $src" "$copy/broken.log"; then
  ok "a broken copy fails the checks ($found problems: missing library, RUNPATH outside, a path of this tree)"
else
  fail "a broken copy passed some checks: $(cat "$copy/broken.log")"
fi
rm -rf "$copy/broken"

# ---- size ----
bytes=$(du -sb "$b" | cut -f1)
(( bytes <= 64 << 20 )) && ok "size $((bytes >> 20)) MiB (limit 64)" || fail "the bundle is $bytes bytes, over 64 MiB"

# ---- the binaries start from the copy under env -i ----
cd /
for d in bin cuda12/bin; do
  r=$(env -i "$b/$d/ptd-load" --help 2>&1); rc=$?
  (( rc == 0 )) && grep -q "Usage: ptd-load" <<<"$r" && ok "$d/ptd-load --help" || fail "$d/ptd-load --help: exit $rc: $(head -3 <<<"$r")"
  r=$(env -i "$b/$d/ptd_cuda_bench" --help 2>&1); rc=$?
  (( rc == 0 )) && grep -q "benchmark_filter" <<<"$r" && ok "$d/ptd_cuda_bench --help" || fail "$d/ptd_cuda_bench --help: exit $rc: $(head -3 <<<"$r")"
  r=$(env -i "$b/$d/ptd_cuda_tests" --gtest_list_tests 2>&1); rc=$?
  if (( rc == 0 )) && grep -q "ViewsAndDenseCopiesHaveExpectedDigests/k01_view_geometry" <<<"$r"; then
    ok "$d/ptd_cuda_tests --gtest_list_tests: $(grep -c '^  ' <<<"$r") tests, the conformance cases found from the binary"
  else
    fail "$d/ptd_cuda_tests --gtest_list_tests: exit $rc: $(tail -3 <<<"$r")"
  fi
done

# ---- is there a GPU here? ----
r=$(env -i "$b/run.sh" --probe 2>&1); probe_rc=$?
(( probe_rc == 0 )) && echo "note: run.sh --probe found a GPU: $(tail -1 <<<"$r")"
(( probe_rc == 4 )) && echo "note: run.sh --probe: $r"

# ---- run.sh with a fake driver ----
# A bundle of run.sh and check.py whose two builds' ptd-load fail the probe
# with the messages the static CUDA runtime leads to, and an nvidia-smi first
# on PATH that reports a driver: what a GPU machine with such a driver shows.
fake=$copy/fake
mkdir -p "$fake/b/bin" "$fake/b/cuda12/bin" "$fake/b/data/conformance/files" "$fake/smi"
cp "$b/run.sh" "$b/check.py" "$b/BUNDLE.txt" "$fake/b/"
for d in bin cuda12/bin; do
  for bin in ptd_cuda_tests ptd_cuda_bench; do printf '#!/bin/sh\nexit 0\n' >"$fake/b/$d/$bin"; done
done
fake_load() {  # DIR MESSAGE: DIR's ptd-load starts, notes that it ran, and fails the probe with "ptd-load: MESSAGE"
  printf '#!/bin/sh\n[ "$1" = --version ] && { echo "ptd-load (fake)"; exit 0; }\necho %s >>"%s/probed"\necho "ptd-load: %s" >&2\nexit 2\n' \
    "$1" "$fake" "$2" >"$fake/b/$1/ptd-load"
  chmod 755 "$fake/b/$1"/*
}
insufficient="no CUDA device: cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)"
no_device="no CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected (cudaErrorNoDevice)"
no_driver="no CUDA device: no NVIDIA driver found (libcuda.so.1 cannot be loaded and /dev/nvidiactl does not exist)"
fake_smi() {  # DRIVER CUDA: nvidia-smi reports them; DRIVER "fail": it fails as without a driver
  if [[ $1 == fail ]]; then
    printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."\nexit 9\n' \
      >"$fake/smi/nvidia-smi"
  else
    printf '#!/bin/sh\ncase "$*" in\n  *--query-gpu=driver_version*) echo "%s"; exit 0 ;;\n  *--query-gpu*) echo "name, driver_version"; echo "NVIDIA H100 80GB HBM3, %s"; exit 0 ;;\nesac\necho "| NVIDIA-SMI %s              Driver Version: %s      CUDA Version: %s     |"\n' \
      "$1" "$1" "$1" "$1" "$2" >"$fake/smi/nvidia-smi"
  fi
  chmod 755 "$fake/smi/nvidia-smi"
}
fake_run() {  # NAME [ARG]: the fake bundle's run.sh under env -i; sets r, rc, where (its OUT) and probed
  where=$fake/$1
  rm -f "$fake/probed"
  r=$(env -i PATH="$fake/smi:/usr/local/bin:/usr/bin:/bin" OUT="$where" "$fake/b/run.sh" ${2:+"$2"} 2>&1); rc=$?
  probed=$(tr '\n' ' ' <"$fake/probed" 2>/dev/null)
}
# A CUDA 12.4 driver (550.x): the CUDA 12 build, then its probe's clean line.
fake_load bin "$insufficient"
fake_load cuda12/bin "$no_device"
fake_smi 550.54.15 12.4
fake_run cuda12
if (( rc == 3 )) && [[ $r == $'build: CUDA 12 (driver 550.54.15 supports CUDA 12.4)\n'"$no_device" && $probed == "cuda12/bin " ]]; then
  ok "run.sh, a CUDA 12.4 driver: the CUDA 12 build, then exit 3 and '$no_device'"
else
  fail "run.sh with a CUDA 12.4 driver: exit $rc, probed '$probed' (want 3, cuda12/bin only, 'build: CUDA 12 (...)' and the no-device line): $r"
fi
# A CUDA 11 driver: exit 4 at once, no build probed.
fake_smi 470.182.03 11.4
fake_run cuda11
if (( rc == 4 )) && [[ $(wc -l <<<"$r") == 1 && $r == "driver too old: driver 470.182.03 (CUDA 11.4) supports neither of this bundle's builds; CUDA 13 needs driver >= 580, CUDA 12 driver >= 525" && -z $probed ]]; then
  ok "run.sh, a CUDA 11.4 driver: exit 4 at once, '$r'"
else
  fail "run.sh with a CUDA 11.4 driver: exit $rc, probed '$probed' (want 4, nothing probed, one 'driver too old' line): $r"
fi
if grep -q '"result": "driver_too_old"' "$where/summary.json" 2>/dev/null &&
   grep -q '"driver_version": "470.182.03", "cuda_version": "11.4", "nvidia_smi": "ok"' "$where/summary.json" &&
   grep -q '^- driver 470.182.03 (CUDA 11.4)$' "$where/summary.md" && grep -q 'CUDA Version: 11.4' "$where/logs/nvidia-smi.txt"; then
  ok "run.sh, a driver too old: summary.json, summary.md and logs/ carry driver 470.182.03 and CUDA 11.4"
else
  fail "run.sh with a CUDA 11.4 driver: the summary lacks the driver: $(cat "$where/summary.json" "$where/summary.md" 2>&1)"
fi
fake_run cuda11-probe --probe
(( rc == 4 )) && [[ $r == "driver too old: "* ]] && ok "run.sh --probe, a CUDA 11.4 driver: exit 4" ||
  fail "run.sh --probe with a CUDA 11.4 driver: exit $rc (want 4): $r"
# A CUDA 13 driver whose libcuda.so.1 the CUDA 13 runtime rejects: the CUDA
# 12 build next; when that is rejected too, exit 4 saying so.
fake_smi 580.65.06 13.0
fake_run cuda13-fallback
if (( rc == 3 )) && [[ $probed == "bin cuda12/bin " && $r == *$'\nbuild: CUDA 12 (the CUDA 13 build\'s probe got cudaErrorInsufficientDriver)\n'"$no_device" ]]; then
  ok "run.sh, cudaErrorInsufficientDriver from the CUDA 13 build under driver 580.65.06: the CUDA 12 build next"
else
  fail "run.sh, the CUDA 13 build rejected under driver 580.65.06: exit $rc, probed '$probed' (want the CUDA 12 build next): $r"
fi
fake_load cuda12/bin "$insufficient"
fake_run new
(( rc == 4 )) && [[ $r == *$'\n'"driver too old: the bundle's CUDA 13, CUDA 12 runtime gets cudaErrorInsufficientDriver from libcuda.so.1 although this is driver 580.65.06 (CUDA 13.0)"* ]] &&
  ok "run.sh, both builds rejected under driver 580.65.06: exit 4, an older libcuda.so.1 suspected" ||
  fail "run.sh, both builds rejected under driver 580.65.06: exit $rc: $r"
# Neither nvidia-smi nor /proc says: the builds probed newest first.
fake_load cuda12/bin "$no_device"
fake_smi fail
fake_run unknown
if [[ -r /proc/driver/nvidia/version ]]; then
  echo "note: this machine has /proc/driver/nvidia/version: the probe order without a driver version is not tested"
elif (( rc == 3 )) && [[ $probed == "bin cuda12/bin " && $r == "build: CUDA 13 (the driver's CUDA version is unknown: probing the builds newest first)"*"build: CUDA 12 (the CUDA 13 build's probe got cudaErrorInsufficientDriver)"* ]]; then
  ok "run.sh, no driver version known: the CUDA 13 build probed first, then the CUDA 12 one"
else
  fail "run.sh, no driver version known: exit $rc, probed '$probed' (want bin, then cuda12/bin): $r"
fi
# No driver at all (no libcuda.so.1, no /dev/nvidiactl) stays "no CUDA device", exit 3.
fake_load bin "$no_driver"
fake_load cuda12/bin "$no_driver"
fake_run none
if (( rc == 3 )) && [[ $(wc -l <<<"$r") == 2 && $r == "build: CUDA 13 "*$'\n'"no CUDA device: no NVIDIA driver found"* && $probed == "bin " ]] &&
   grep -q '"nvidia_smi": "failed (exit 9): NVIDIA-SMI has failed' "$where/summary.json" 2>/dev/null &&
   grep -q '^- driver .*(CUDA unknown; nvidia-smi failed (exit 9)' "$where/summary.md"; then
  ok "run.sh, no driver and nvidia-smi failing: exit 3, the summary says nvidia-smi failed"
else
  fail "run.sh, no driver and nvidia-smi failing: exit $rc, probed '$probed' (want 3): $r: $(cat "$where/summary.json" 2>&1)"
fi
rm -rf "$fake"

# ---- the checker ----
if command -v python3 >/dev/null; then
  logs=$copy/checker; mkdir -p "$logs"
  if python3 "$b/check.py" digests --bundle "$b" --logs "$logs" --device host >"$logs/host.log" 2>&1; then
    ok "check.py digests --device host: $(tail -1 "$logs/host.log")"
  else
    fail "check.py digests --device host: $(cat "$logs/host.log")"
  fi
  # A wrong digest in cases.json must fail it.
  cp -a "$b" "$copy/tampered"
  python3 - "$copy/tampered/data/conformance/cases.json" <<'EOF'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
w = next(tc for tc in j["cases"] if tc.get("weights"))["weights"][0]
w["sha256"] = ("0" if w["sha256"][0] != "0" else "1") + w["sha256"][1:]
json.dump(j, open(p, "w"))
EOF
  if python3 "$copy/tampered/check.py" digests --bundle "$copy/tampered" --logs "$logs" --device host >"$logs/tampered.log" 2>&1; then
    fail "check.py digests passed a tampered cases.json"
  else
    grep -q "FAILED: weight" "$logs/tampered.log" && ok "check.py digests fails on a wrong digest" ||
      fail "check.py digests on a tampered cases.json: $(cat "$logs/tampered.log")"
  fi
  # The time budget: too little for any step; each recorded as not run, a
  # failure, and the summary written within the budget.
  r=$(env -i PTD_CHECK_DEVICE=host PTD_CHECK_BUDGET_S=30 OUT="$copy/budget30" "$b/run.sh" 2>&1); rc=$?
  if python3 - "$copy/budget30" "$rc" <<'EOF'
import json, os, sys
out = sys.argv[1]
assert sys.argv[2] == "1", f"exit {sys.argv[2]}"
steps = dict(l.split("\t")[:2] for l in open(os.path.join(out, "logs", "steps.tsv")))
assert all(steps.get(n) == "not_run" for n in (
    "bench_1g", "pin_1g", "digests_mapped", "small_1000", "small_1024", "gpu_tests", "digests",
    "bench_4g")), steps
s = json.load(open(os.path.join(out, "summary.json")))
c = {x["name"]: x for x in s["checks"]}
assert s["result"] == "fail" and s["seconds"] <= 30, s
assert c["gpu_tests"].get("not_run") and not c["gpu_tests"]["ok"], c["gpu_tests"]
assert c["load_digests"].get("not_run") and not c["load_digests"]["ok"], c["load_digests"]
for n in ("pinning", "load_digests_mapped", "small_storages"):
    assert c[n].get("not_run") and not c[n]["ok"], c[n]
assert "driver_version" in s["driver"], s
EOF
  then
    ok "run.sh with PTD_CHECK_BUDGET_S=30: measurements, GPU tests and digests not run, a failure (exit 1)"
  else
    fail "run.sh with PTD_CHECK_BUDGET_S=30: exit $rc: $r"
  fi
  # run.sh's whole pipeline on the host device: the digests pass, the skipped
  # GPU tests and the benchmark without a GPU fail it (on a GPU machine
  # nothing skips: run.sh there is the real check).
  if (( probe_rc != 0 )); then
    r=$(env -i PTD_CHECK_DEVICE=host OUT="$copy/host-run" "$b/run.sh" 2>&1); rc=$?
    if python3 - "$copy/host-run/summary.json" "$rc" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
c = {x["name"]: x for x in s["checks"]}
assert sys.argv[2] == "1", f"exit {sys.argv[2]}"
assert s["result"] == "fail", s["result"]
assert not c["gpu_tests"]["ok"] and c["gpu_tests"]["skipped"], c["gpu_tests"]
assert c["load_digests"]["ok"], c["load_digests"]
assert not c["bench_1g"]["ok"], c["bench_1g"]
EOF
    then
      ok "run.sh on the host device: digests pass, skipped GPU tests and the benchmark fail it (exit 1)"
    else
      fail "run.sh with PTD_CHECK_DEVICE=host: exit $rc: $r"
    fi
    # A small budget: the measurements and the GPU tests not run (they would
    # leave the rest too little), the digests under a timeout below their
    # 90 s, and passing.
    r=$(env -i PTD_CHECK_DEVICE=host PTD_CHECK_BUDGET_S=60 OUT="$copy/budget60" "$b/run.sh" 2>&1); rc=$?
    if python3 - "$copy/budget60" "$rc" <<'EOF'
import json, os, sys
out = sys.argv[1]
assert sys.argv[2] == "1", f"exit {sys.argv[2]}"
steps = {l.split("\t")[0]: l.rstrip("\n").split("\t")[1:] for l in open(os.path.join(out, "logs", "steps.tsv"))}
assert all(steps[n][0] == "not_run" for n in ("bench_1g", "small_1000", "gpu_tests")), steps
rc, secs, limit = steps["digests"]
assert rc == "0" and 20 <= int(limit) <= 60 - 15, steps
c = {x["name"]: x for x in json.load(open(os.path.join(out, "summary.json")))["checks"]}
assert c["load_digests"]["ok"], c["load_digests"]
EOF
    then
      ok "run.sh with PTD_CHECK_BUDGET_S=60: digests under a $(awk -F'\t' '$1 == "digests" {print $4}' "$copy/budget60/logs/steps.tsv")s timeout (not 90) and passing, measurements and GPU tests not run"
    else
      fail "run.sh with PTD_CHECK_BUDGET_S=60: exit $rc: $r: $(cat "$copy/budget60/logs/steps.tsv" 2>&1)"
    fi
  fi
else
  echo "note: python3 not found: check.py not tested"
fi

# ---- run.sh ----
if (( probe_rc == 0 || probe_rc == 4 )); then
  (( failures == 0 )) || { echo "$failures check(s) failed"; exit 1; }
  if (( probe_rc == 0 )); then
    echo "SKIP: the no-GPU exit of run.sh (this machine has a GPU; run gpu-bundle/run.sh for the real check)"
  else
    echo "SKIP: the no-GPU exit of run.sh (this machine's NVIDIA driver is too old for the bundle's CUDA 13 runtime)"
  fi
  exit 77
fi
for mode in beside out; do
  rm -f "$b/summary.json" "$b/summary.md"
  if [[ $mode == out ]]; then
    r=$(env -i OUT="$copy/out" "$b/run.sh" 2>&1); rc=$?; where=$copy/out
  else
    r=$(env -i "$b/run.sh" 2>&1); rc=$?; where=$b
  fi
  if (( rc == 3 )) && [[ $(wc -l <<<"$r") == 2 && $(head -1 <<<"$r") == "build: CUDA "* &&
                       $(tail -1 <<<"$r") == "no CUDA device: "* ]]; then
    ok "run.sh ($mode): exit 3, '$r'"
  else
    fail "run.sh ($mode): exit $rc (want 3 and one line 'no CUDA device: ...'): $r"
  fi
  grep -qi "error while loading\|cannot open shared" <<<"$r" && fail "run.sh ($mode): a loader error: $r"
  grep -q '"result": "no_device"' "$where/summary.json" 2>/dev/null && [[ -s $where/summary.md ]] &&
    ok "run.sh ($mode): summary.json and summary.md in $where" || fail "run.sh ($mode): no no_device summary in $where"
  # What it found of the driver before the probe: under env -i's PATH most
  # likely no nvidia-smi at all.
  if env -i PATH=/usr/local/bin:/usr/bin:/bin sh -c 'command -v nvidia-smi' >/dev/null; then
    grep -q '"driver": {"driver_version": ' "$where/summary.json" 2>/dev/null && grep -q '^- driver ' "$where/summary.md" &&
      ok "run.sh ($mode): the summary has the driver: $(grep '^- driver ' "$where/summary.md")" ||
      fail "run.sh ($mode): no driver in the summary: $(cat "$where/summary.json" 2>&1)"
  else
    grep -q '"nvidia_smi": "not found"' "$where/summary.json" 2>/dev/null && grep -q 'nvidia-smi not found' "$where/summary.md" &&
      ok "run.sh ($mode): the summary says nvidia-smi was not found" ||
      fail "run.sh ($mode): the summary does not say nvidia-smi was not found: $(cat "$where/summary.json" 2>&1)"
  fi
done

if (( failures )); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "gpu bundle: self-contained ($(( $(date +%s) - t0 ))s)"
