#!/usr/bin/env bash
# The load-latency benchmark suite: builds Release into build/, runs
# ptd_suite_bench (ours and the ceilings), ptd_upstream_bench (upstream's
# FlatTensorDataMap; when the executorch package was found) and
# ptd_cuda_bench (when CUDA was found; it skips without a GPU), then writes
# bench/results/<machine>.md, its PNG plots, and the README's Benchmarks block.
#
# Usage: scripts/bench.sh [--quick] [--machine NAME] [--no-setup] [--report-only]
#                         [--build-only] [--help]
#   --quick        smaller sets and fewer repetitions: under 5 minutes on a
#                  2-core machine once built (see below)
#   --machine N    name of the results page (default: CPU model, cores, memory)
#   --no-setup     skip scripts/setup.sh --deps (package check)
#   --report-only  no build, no runs: re-render the page, the plots and the
#                  README block from the last run's JSON (build/bench-results)
#   --build-only   build the benchmarks (Release, warnings as errors) and stop:
#                  CI's check that this configuration builds (scripts/test.sh)
# Environment: PTD_BENCH_DIR   where the model sets are written once and
#                              reused (default build/bench-data; never in git)
#              BUILD_DIR       build directory (default build)
#              CMAKE_ARGS      extra configure flags (e.g. -DPTD_CUDA_ARCHITECTURES=90-real)
#              PTD_BENCH_ARGS  extra flags for both suite binaries
#                              (--big_mib=, --mid_mib=, --small_mib=,
#                              --xfmr_mib=, --reps=, --cold=0, --verify=a,b,c,
#                              --upstream_max_keys=, --sets=)
#
# Full:  4 MiB x 256 (1 GiB), 64 KiB x 4096 (256 MiB), 1 KiB x 65,536 (64 MiB),
#        transformer ~1 GiB; 10 repetitions; upstream samples at most 4096 keys.
# Quick: 4 MiB x 64 (256 MiB), 64 KiB x 1024 (64 MiB), 1 KiB x 65,536 (64 MiB,
#        unchanged), transformer ~256 MiB; 5 repetitions; upstream samples at
#        most 1024 keys. Verification at 1k, 10k, 100k weights in both.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
quick=0
setup=1
report_only=0
build_only=0
machine=""
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --no-setup) setup=0 ;;
    --report-only) report_only=1 ;;
    --build-only) build_only=1 ;;
    --machine) machine=${2:?--machine needs a name}; shift ;;
    --machine=*) machine=${1#--machine=} ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [[ -z $machine ]]; then
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  mem=$(awk '/^MemTotal/ {printf "%d", $2 / 1048576 + 0.5}' /proc/meminfo)
  machine=$(echo "${cpu:-cpu}" | sed -E 's/\((R|TM|tm|r)\)//g; s/ (CPU|Processor|processor)//g; s/@.*//' |
            tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-|-$//g')-$(nproc)c-${mem}g
fi

out=$build/bench-results
render() {
  local mode notes=() jsons=() note_args=()
  mode=$(cat "$out/mode")
  mapfile -t notes <"$out/notes.txt"
  for n in "${notes[@]}"; do note_args+=(--note "$n"); done
  # The page this run replaces, kept at the run's start: its summary is
  # listed as "before".
  if [[ -f $out/before.md ]]; then note_args+=(--before "$out/before.md"); fi
  if [[ -f $out/cli.json ]]; then note_args+=(--cli "$out/cli.json"); fi
  for j in "$out"/suite-*.json "$out"/upstream-*.json "$out"/verify.json "$out"/cuda.json; do
    if [[ -f $j ]]; then jsons+=("$j"); fi
  done
  mkdir -p "$root/bench/results"
  python3 "$root/scripts/bench_report.py" --mode "$mode" --commit "$(cat "$out/commit")" \
    --date "$(cat "$out/date")" \
    --out "$root/bench/results/$machine.md" --plots "$root/bench/results/$machine" \
    --readme "$root/README.md" "${note_args[@]}" "${jsons[@]}"
  echo "bench.sh: wrote bench/results/$machine.md (+ $machine-gbps.png, $machine-ratio.png) and README.md's Benchmarks block" >&2
}
if ((report_only)); then
  [[ -f $out/mode && -f $out/notes.txt && -f $out/commit && -f $out/date ]] || { echo "bench.sh: no earlier run in $out" >&2; exit 2; }
  render
  exit 0
fi

if ((setup)); then
  "$root/scripts/setup.sh" --deps
fi

# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPTD_WERROR=ON ${CMAKE_ARGS:-} >/dev/null
targets=(ptd_suite_bench ptd_pread_ceiling ptd-load ptd-verify)
help=$(cmake --build "$build" --target help)
for t in ptd_upstream_bench ptd_cuda_bench; do
  if grep -q "^\.\.\. $t\$" <<<"$help"; then targets+=("$t"); fi
done
build_args=()
for t in "${targets[@]}"; do build_args+=(--target "$t"); done
cmake --build "$build" --parallel "$(nproc)" "${build_args[@]}"
if ((build_only)); then
  echo "bench.sh: built ${targets[*]} (Release, -Werror) in $build" >&2
  exit 0
fi

data=${PTD_BENCH_DIR:-$build/bench-data}
mkdir -p "$data" "$out"
rm -f "$out"/*.json "$out"/mode "$out"/notes.txt "$out"/commit "$out"/date "$out"/before.md
if [[ -f $root/bench/results/$machine.md ]]; then cp "$root/bench/results/$machine.md" "$out/before.md"; fi
# The commit measured, kept for --report-only.
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  commit+=" (with uncommitted changes)"
fi
echo "$commit" >"$out/commit"
date -u '+%Y-%m-%d %H:%M UTC' >"$out/date"

if ((quick)); then
  args=(--big_mib=256 --mid_mib=64 --small_mib=64 --xfmr_mib=256 --reps=5 --upstream_max_keys=1024)
  mode=quick
  notes=("quick suite: 4 MiB x 64 (256 MiB), 64 KiB x 1024 (64 MiB), 1 KiB x 65,536 (64 MiB, as in the full suite), transformer ~256 MiB (d=1024); 5 repetitions; upstream samples at most 1024 keys (full: 1 GiB, 256 MiB, 64 MiB, ~1 GiB (d=2048); 10 repetitions; 4096 keys)")
else
  args=(--big_mib=1024 --mid_mib=256 --small_mib=64 --xfmr_mib=1024 --reps=10 --upstream_max_keys=4096)
  mode=full
  notes=("full suite: 4 MiB x 256 (1 GiB), 64 KiB x 4096 (256 MiB), 1 KiB x 65,536 (64 MiB), transformer ~1 GiB (d=2048); 10 repetitions; upstream samples at most 4096 keys")
fi
# shellcheck disable=SC2206
args+=(--data_dir="$data" ${PTD_BENCH_ARGS:-})
gb=(--benchmark_counters_tabular=true --benchmark_out_format=json)

start=$SECONDS
echo "bench.sh: $mode suite, data in $data" >&2
# Set by set, ours and the ceilings then upstream, so that the figures that
# are compared were taken within a minute of each other; verification last.
for set in ${PTD_BENCH_SETS:-4MiB 64KiB 1KiB xfmr}; do
  "$build/bench/ptd_suite_bench" "${args[@]}" --sets="$set" --verify= "${gb[@]}" \
    --benchmark_out="$out/suite-$set.json"
  if [[ -x $build/bench/ptd_upstream_bench ]]; then
    "$build/bench/ptd_upstream_bench" "${args[@]}" --sets="$set" "${gb[@]}" \
      --benchmark_out="$out/upstream-$set.json"
  fi
done
[[ -x $build/bench/ptd_upstream_bench ]] ||
  notes+=("upstream: ptd_upstream_bench not built (the executorch package was not found); no upstream rows")
"$build/bench/ptd_suite_bench" "${args[@]}" --sets= "${gb[@]}" --benchmark_out="$out/verify.json"
if [[ -x $build/bench/ptd_cuda_bench ]]; then
  # Without a GPU every case reports "no CUDA device"; the page says "skipped: no GPU".
  "$build/bench/ptd_cuda_bench" "${gb[@]}" --benchmark_out="$out/cuda.json" || true
fi
notes+=("Loader/host_mapped: its map phase is page-table work over the page cache, so it depends on the cache's folio sizes: large folios (a file cached by big sequential reads) map a GiB in a few ms, 4 KiB pages in tens of ms (about 45-65 ms per GiB measured here)")
# Whole processes (the command-line targets), on the sets written above.
python3 "$root/scripts/cli_bench.py" --build "$build" --data "$data" --out "$out/cli.json"
notes+=("suite wall time: $((SECONDS - start)) s (model sets cached in the data directory; the build not counted)")
echo "$mode" >"$out/mode"
printf '%s\n' "${notes[@]}" >"$out/notes.txt"
render
