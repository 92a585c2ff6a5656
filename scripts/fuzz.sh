#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz/ and runs
# each one for FUZZ_SECONDS, one after another.
#
# Usage: scripts/fuzz.sh [TARGET...]     TARGET: container manifest pte weights
#                                        writer load safetensors datamap (default: all;
#                                        datamap only where the executorch
#                                        package is found, else it is skipped
#                                        with a note, or an error when named)
# Environment:
#   FUZZ_SECONDS    seconds per target (default 60)
#   FUZZ_RUNS       stop each target after this many executions instead
#                   (-runs; FUZZ_SECONDS then only caps it, default 1 day):
#                   how docs/reliability.md's campaign was run
#   FUZZ_BUILD_DIR  build directory (default build-fuzz)
#   FUZZ_MAX_LEN    libFuzzer -max_len (default 65536)
#   FUZZ_RSS_MB     libFuzzer -rss_limit_mb (default 1024)
#   FUZZ_MALLOC_MB  libFuzzer -malloc_limit_mb (default 64): no single
#                   allocation may exceed it. Inputs are at most 64 KiB, so
#                   this bounds what any input can make the library allocate
#                   to a thousand times its size; a valid file's declared
#                   sizes are checked against the file before allocation.
#
# Each target's corpus lives in $FUZZ_BUILD_DIR/work/<target>/corpus, seeded
# from tests/data/conformance/files and tests/fuzz/corpus/<target> (and kept
# between runs, so later runs start from what earlier ones found). A crash,
# leak, sanitizer report or timeout leaves its input in
# $FUZZ_BUILD_DIR/work/<target>/artifacts/ and makes the script exit 1; copy
# such an input into tests/fuzz/corpus/<target>/ so the replay test
# (ctest -L fuzz) keeps running it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
runs=${FUZZ_RUNS:-}
if [[ -n $runs ]]; then seconds=${FUZZ_SECONDS:-86400}; else seconds=${FUZZ_SECONDS:-60}; fi
runs_flag=()
if [[ -n $runs ]]; then runs_flag=(-runs="$runs"); fi
max_len=${FUZZ_MAX_LEN:-65536}
rss_mb=${FUZZ_RSS_MB:-1024}
malloc_mb=${FUZZ_MALLOC_MB:-64}
all_targets=(container manifest pte weights writer load safetensors signature datamap)
if [[ $# -gt 0 ]]; then targets=("$@"); else targets=("${all_targets[@]}"); fi
for t in "${targets[@]}"; do
  if [[ ! -f $root/tests/fuzz/${t}_fuzz.cc ]]; then
    echo "fuzz.sh: unknown target '$t' (known: ${all_targets[*]})" >&2
    exit 2
  fi
done

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S "$root" -B "$build" "${generator[@]}" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DPTD_LIBFUZZER=ON -DPTD_SANITIZE=address,undefined \
    -DPTD_BUILD_TESTS=OFF -DPTD_BUILD_BENCH=OFF
fi
# datamap_fuzz exists only where the configure found the executorch package.
skipped=()
if ! cmake --build "$build" --target help 2>/dev/null | grep -q datamap_fuzz; then
  kept=()
  for t in "${targets[@]}"; do
    if [[ $t == datamap ]]; then
      if [[ $# -gt 0 ]]; then
        echo "fuzz.sh: datamap needs the executorch package (see README); not found in $build" >&2
        exit 2
      fi
      skipped+=("datamap    SKIPPED (the executorch package was not found)")
    else
      kept+=("$t")
    fi
  done
  targets=("${kept[@]}")
fi
build_targets=()
for t in "${targets[@]}"; do build_targets+=("${t}_fuzz"); done
cmake --build "$build" --parallel "$(nproc)" --target "${build_targets[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

summary=()
failed=0
for t in "${targets[@]}"; do
  work=$build/work/$t
  mkdir -p "$work/corpus" "$work/artifacts"
  cp -n "$root"/tests/data/conformance/files/* "$work/corpus/" 2>/dev/null || true
  if compgen -G "$root/tests/fuzz/corpus/$t/*" >/dev/null; then
    cp -n "$root/tests/fuzz/corpus/$t"/* "$work/corpus/"
  fi
  log=$work/fuzz.log
  echo "== $t: ${runs:+$runs runs, at most }${seconds}s, corpus $work/corpus, log $log"
  touch "$work/.started"
  rc=0
  "$build/tests/fuzz/${t}_fuzz" \
    -max_total_time="$seconds" "${runs_flag[@]}" -max_len="$max_len" -timeout=10 \
    -rss_limit_mb="$rss_mb" -malloc_limit_mb="$malloc_mb" \
    -dict="$root/tests/fuzz/dict/ptd.dict" \
    -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
    "$work/corpus" >"$log" 2>&1 || rc=$?

  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  units=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
  artifacts=$(find "$work/artifacts" -type f -newer "$work/.started" | sort)
  status=ok
  if [[ $rc -ne 0 ]]; then
    status="CRASH (exit $rc)"
    failed=1
    echo "---- $t: last lines of $log"
    tail -60 "$log"
  fi
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  summary+=("$(printf '%-10s %-16s execs=%-9s secs=%-6s exec/s=%-6s cov=%-5s ft=%-6s corpus=%-12s peak_rss_mb=%s' \
    "$t" "$status" "${execs:-?}" "${secs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${units:-?}" "${rss:-?}")")
  if [[ -n $artifacts ]]; then
    summary+=("           new artifacts: $(tr '\n' ' ' <<<"$artifacts")")
  fi
done

echo
echo "== fuzz summary (${runs:+$runs runs or }${seconds}s per target; commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%FT%TZ))"
printf '%s\n' "${summary[@]}" "${skipped[@]}"
exit "$failed"
