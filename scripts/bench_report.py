#!/usr/bin/env python3
"""Turns the load-latency suite's Google Benchmark JSON into a results page.

Usage: bench_report.py --out bench/results/<machine>.md --plots <prefix>
           [--readme README.md] [--mode quick|full] [--commit C] [--date D] [--note TEXT]...
           suite.json [upstream.json] [cuda.json]

Writes the page (machine, table, targets and misses with their measured
reasons), PNG plots drawn by gnuplot (<prefix>-gbps.png, <prefix>-ratio.png)
and, with --readme, the block between <!-- bench:begin --> and
<!-- bench:end --> in the README. Standard library only.
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
NEAR_CEILING = 0.8       # "near its ceiling": the loader's target ratio.
VERIFY_TARGET_MS = 30.0   # Verify/100000 p50 (issue 19).
LINEAR_GROWTH = 1.5       # Most per-weight growth from 1k to 100k weights (issue 19).
FIRST_WEIGHT_MS = 40.0    # Time to first weight on the 1 KiB set (issue 19).
# Per set: (the yardstick, the target ratio of ours to it). Issue 19: many
# small storages against the warm-pread ceiling, big ones against the
# fault-free read; other sets keep "near the warm-pread ceiling".
SET_TARGETS = {
    "1KiB": ("Ceiling/pread_warm", 0.5),
    "4MiB": ("Ceiling/pread_warm_reused", 0.65),
    "xfmr": ("Ceiling/pread_warm_reused", 0.65),
}
PHASES = ("verify_ms", "plan_ms", "map_ms", "alloc_ms", "read_ms", "finish_ms", "free_ms")
SET_ORDER = ["1KiB", "64KiB", "4MiB", "xfmr"]
SET_STORAGE = {"1KiB": 1024, "64KiB": 64 << 10, "4MiB": 4 << 20}


def load(paths):
    rows, ctx = {}, {}
    for p in paths:
        if not p or not os.path.exists(p):
            continue
        with open(p) as f:
            try:
                doc = json.load(f)
            except json.JSONDecodeError as e:
                print(f"bench_report: {p}: {e}", file=sys.stderr)
                continue
        ctx.update(doc.get("context", {}))
        for b in doc.get("benchmarks", []):
            name = b["name"].split("/iterations:")[0].split("/manual_time")[0]
            rows[name] = b
    return rows, ctx


def machine():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_gib": mem / 2**30,
            "kernel": platform.release(), "load": os.getloadavg()}


def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def fmt(x, digits=3):
    """Three significant figures (integers from 1000 up)."""
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def human_bytes(n):
    if n is None:
        return "-"
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            v = n / (1 << k)
            return f"{v:.3g} {unit}" if v < 1000 else f"{v:.0f} {unit}"
    return f"{int(n)} B"


class Results:
    def __init__(self, rows, ctx):
        self.rows, self.ctx = rows, ctx
        self.sets = [s for s in SET_ORDER if f"Loader/host_warm/{s}" in rows]

    def get(self, name, key="GBps"):
        b = self.rows.get(name)
        if b is None or b.get("error_occurred"):
            return None
        return b.get(key)

    def ratio(self, a, b):
        x, y = self.get(a), self.get(b)
        return x / y if x and y else None

    def set_desc(self, s):
        d = dict(kv.split("=") for kv in self.ctx.get(f"set.{s}", "").split())
        return {k: int(v) for k, v in d.items()}


# (case, ceiling, upstream baseline for the speed-up) per row of the table.
CASES = [
    ("Ceiling/memcpy", None, None, "memcpy, pre-faulted buffers (reused)"),
    ("Ceiling/pread_warm", "Ceiling/memcpy", None, "pread 4 MiB calls, warm cache, fresh buffer"),
    ("Ceiling/pread_warm_reused", "Ceiling/memcpy", None, "pread 4 MiB calls, warm cache, pre-faulted buffer"),
    ("Ceiling/pread_populated", "Ceiling/pread_warm", None, "pread 4 MiB calls, warm cache, fresh huge pages populated first (timed)"),
    ("Ceiling/read_cold", "Ceiling/pread_warm", None, "pread 4 MiB calls, cold cache, fresh buffer"),
    ("Loader/host_warm", "Ceiling/pread_warm", "Upstream/file_get_data", "ours: LoadWeights on HostDevice, warm"),
    ("Loader/host_warm_thp", "Ceiling/pread_warm", "Upstream/file_get_data", "ours: as host_warm with HugePages::kOn (fresh memory in huge pages wherever THP is on), warm"),
    ("Loader/host_mapped", "Ceiling/pread_warm", "Upstream/file_get_data", "ours: LoadWeights on HostDevice with LoadOptions::map_file (private file mappings), warm"),
    ("Loader/host_cold", "Ceiling/read_cold", "Upstream/file_get_data_cold", "ours: LoadWeights on HostDevice, cold"),
    ("Upstream/file_get_data", "Ceiling/pread_warm", None, "upstream FileDataLoader get_data + copy, warm"),
    ("Upstream/mmap_get_data", "Ceiling/pread_warm", None, "upstream MmapDataLoader get_data + copy, warm"),
    ("Upstream/file_get_data_cold", "Ceiling/read_cold", None, "upstream FileDataLoader get_data + copy, cold"),
]


def table(r):
    out = ["| set | case | GB/s (p50) | p50 ms | p90 ms | x ceiling | x upstream (file / mmap) | first weight ms | peak staging | notes |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for s in r.sets:
        for case, ceil, up, _ in CASES:
            name = f"{case}/{s}"
            b = r.rows.get(name)
            if b is None:
                continue
            if b.get("error_occurred"):
                out.append(f"| {s} | `{case}` | - | - | - | - | - | - | - | error: {b.get('error_message')} |")
                continue
            ratio = r.ratio(name, f"{ceil}/{s}") if ceil else None
            ceil_short = ceil.split("/")[1] if ceil else ""
            speed = "-"
            if up:
                a = r.ratio(name, f"{up}/{s}")
                m = r.ratio(name, f"Upstream/mmap_get_data/{s}") if case == "Loader/host_warm" else None
                speed = f"{fmt(a)}x" + (f" / {fmt(m)}x" if m else "") if a else "-"
            notes = []
            if case.startswith("Loader"):
                notes.append(" / ".join(f"{k[:-3]} {fmt(b.get(k))}" for k in PHASES if b.get(k) is not None) + " ms")
                if b.get("huge_page_bytes"):
                    notes.append(f"{human_bytes(b['huge_page_bytes'])} in huge pages")
            if b.get("extrapolated"):
                notes.append(f"sampled {int(b['sampled_keys'])} of {int(b['keys'])} keys, time scaled to all")
            if b.get("label"):
                notes.append(b["label"])
            staging = b.get("staging_peak_bytes")
            out.append("| {} | `{}` | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                s, case, fmt(b.get("GBps")), fmt(b.get("p50_ms")), fmt(b.get("p90_ms")),
                f"{fmt(ratio)}x {ceil_short}" if ratio else "-", speed,
                fmt(b.get("first_weight_ms")) if b.get("first_weight_ms") is not None else "-",
                human_bytes(staging) if staging is not None else "-", "; ".join(notes)))
    return "\n".join(out)


VERIFY_FAMILIES = (("VerifyKeptHeap/", "kept"), ("Verify/", "glibc defaults"))


def family_rows(r, prefix):
    return sorted((n for n in r.rows if n.startswith(prefix)), key=lambda n: int(n.split("/")[1]))


def cold_start_section(r):
    """The cold-start page (issue 42): each read engine, cold and warm, against the cold ceiling
    (parallel O_DIRECT, the best of the queue depths measured) and the warm one (pread_warm)."""
    rows = [n for n in r.rows if n.startswith("ColdStart/")]
    if not rows:
        return []
    out = ["## Cold starts: read engines (`LoadOptions::io`)", "",
           "`ColdStart/<engine>_<cold|warm>/<set>`: `LoadWeights` on `HostDevice` (open, verify, plan, "
           "allocate fresh memory, read) with `LoadOptions::io`. Cold runs drop the file's pages with "
           "`posix_fadvise(POSIX_FADV_DONTNEED)` right before each repetition and check it with `mincore` "
           "(`resident_after_drop`); `resident after` is the share of the file in the page cache after the "
           "load. The cold ceiling is `Ceiling/direct_cold/<set>/qdN`: 4 streams over quarters of the "
           "segment region, N 4 MiB O_DIRECT requests in flight in all, into reused page-aligned buffers "
           "(no page faults: the disk alone); the best N is the ceiling. The warm ceiling is "
           "`Ceiling/pread_warm` (4 MiB preads into fresh memory, faults included, as for the loads).", "",
           "| set | case | GB/s (p50) | p50 ms | x ceiling | direct bytes | buffered bytes | resident after |",
           "|---|---|---|---|---|---|---|---|"]
    sets = r.sets or [s for s in SET_ORDER if any(n.endswith(f"/{s}") for n in rows)]
    for s in sets:
        qds = [n for n in r.rows if n.startswith(f"Ceiling/direct_cold/{s}/")]
        best = max(qds, key=lambda n: r.get(n) or 0, default=None)
        for n in sorted(qds):
            b = r.rows[n]
            out.append(f"| {s} | `{n.split('/', 2)[2]}`{' (best)' if n == best else ''} | {fmt(b.get('GBps'))} | "
                       f"{fmt(b.get('p50_ms'))} | - | - | - | - |")
        for engine in ("buffered", "direct", "auto"):
            for state in ("cold", "warm"):
                n = f"ColdStart/{engine}_{state}/{s}"
                b = r.rows.get(n)
                if b is None:
                    continue
                ceil = best if state == "cold" else f"Ceiling/pread_warm/{s}"
                ratio = r.ratio(n, ceil) if ceil else None
                res = b.get("resident_after_load")
                out.append(f"| {s} | `{engine}_{state}` | {fmt(b.get('GBps'))} | {fmt(b.get('p50_ms'))} | "
                           f"{fmt(ratio) + 'x' if ratio else '-'} | {human_bytes(b.get('direct_bytes') or 0)} | "
                           f"{human_bytes(b.get('buffered_bytes') or 0)} | "
                           f"{'-' if res is None else f'{res * 100:.1f}%'} |")
    return out + [""]


def verify_table(r):
    """Both families of Verify rows; returns the table and the rows the targets are judged on:
    VerifyKeptHeap (repetitions reuse warm memory) when the run has it, else Verify."""
    out = ["| heap | weights | p50 ms | p90 ms | ns / weight | minor faults | container ms | manifest ms | resolve ms | sum of parts ms |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    judged = []
    for prefix, heap in VERIFY_FAMILIES:
        names = family_rows(r, prefix)
        if names and not judged:
            judged = names
        for n in names:
            b = r.rows[n]
            parts = [b.get(k) for k in ("container_ms", "manifest_ms", "resolve_ms")]
            rest = sum(p or 0 for p in parts)
            faults = b.get("minflt")
            out.append(f"| {heap} | {int(b['weights'])} | {fmt(b['p50_ms'])} | {fmt(b['p90_ms'])} | {fmt(b['ns_per_weight'])} | "
                       f"{int(faults) if faults is not None else '-'} | "
                       + " | ".join(fmt(p) for p in parts) + f" | {fmt(rest)} |")
    if not judged:
        return "", []
    return "\n".join(out), judged


def targets(r, verify_names):
    lines = []
    for s in r.sets:
        name = f"Loader/host_warm/{s}"
        b = r.rows[name]
        yard, want = SET_TARGETS.get(s, ("Ceiling/pread_warm", NEAR_CEILING))
        ratio = r.ratio(name, f"{yard}/{s}")
        if ratio is None:
            continue
        yard_short = yard.split("/")[1]
        ph = {k: b.get(k) or 0 for k in PHASES}
        total = b.get("p50_ms") or 0
        if ratio >= want:
            lines.append(f"- met: host loader, {s}, warm: {fmt(ratio)}x `{yard_short}` (target >= {want}x).")
        else:
            top = max(ph, key=ph.get)
            ceil_ms = r.get(f"{yard}/{s}", "p50_ms") or float("nan")
            storages = int(b.get("storages") or 0)
            before = ph["verify_ms"] + ph["plan_ms"] + ph["alloc_ms"]
            lines.append(
                f"- **missed**: host loader, {s}, warm: {fmt(ratio)}x `{yard_short}` (target >= {want}x). "
                f"Measured reason (p50 phases of {fmt(total)} ms): "
                + ", ".join(f"{k[:-3]} {fmt(v)}" for k, v in ph.items()) + f" ms; the largest is {top[:-3]}. "
                f"`{yard_short}` reads the same bytes in {fmt(ceil_ms)} ms (one buffer, 4 MiB preads, one thread"
                + (", into pre-faulted memory" if yard_short == "pread_warm_reused" else "") + "). "
                f"Before its first read the loader spends {fmt(before)} ms (verify + plan + alloc) on {storages} storages, "
                f"{fmt(before / ceil_ms)}x that whole time; its read phase ({int(b.get('reads') or 0)} reads into fresh memory) "
                f"takes {fmt(ph['read_ms'] / ceil_ms)}x it; finish (the result's names and lookup tables) and free "
                f"(the verified bundle freed before LoadWeights returns) add {fmt(ph['finish_ms'] + ph['free_ms'])} ms.")
        kname = f"Loader/host_warm_thp/{s}"
        kr = r.ratio(kname, f"{yard}/{s}") if kname in r.rows else None
        if kr is not None:
            kb = r.rows[kname]
            huge = b.get("huge_page_bytes") or 0
            khuge = kb.get("huge_page_bytes") or 0
            lines.append(
                f"- pages: `host_warm` (HugePages::kAuto) put {human_bytes(huge)} of fresh memory in transparent huge pages"
                + ("" if huge else " (THP off, free huge-page blocks reported to the hypervisor, or too few of them)")
                + f"; with HugePages::kOn (`host_warm_thp`, {human_bytes(khuge)} in huge pages) the load is {fmt(kr)}x "
                f"`{yard_short}` (p50 {fmt(kb.get('p50_ms'))} ms, p90 {fmt(kb.get('p90_ms'))} ms), its read phase "
                f"{fmt(kb.get('read_ms'))} ms against `host_warm`'s {fmt(ph['read_ms'])} ms (p90 {fmt(b.get('p90_ms'))} ms).")
        mname = f"Loader/host_mapped/{s}"
        mr = r.ratio(mname, f"{yard}/{s}") if mname in r.rows else None
        if mr is not None:
            mb = r.rows[mname]
            lines.append(
                f"- {'met' if mr >= want else '**missed**'}: host loader with `LoadOptions::map_file`, {s}, warm: "
                f"{fmt(mr)}x `{yard_short}` (target >= {want}x): {int(mb.get('mapped') or 0)} of "
                f"{int(mb.get('storages') or 0)} storages mapped in {fmt(mb.get('map_ms'))} ms, "
                f"{int(mb.get('reads') or 0)} reads; first weight at {fmt(mb.get('first_weight_ms'))} ms.")
        if s == "1KiB" and b.get("first_weight_ms") is not None:
            fw = b["first_weight_ms"]
            lines.append(f"- {'met' if fw < FIRST_WEIGHT_MS else '**missed**'}: time to first weight on {s}, warm: "
                         f"{fmt(fw)} ms (target < {FIRST_WEIGHT_MS:.0f} ms)"
                         + ("." if fw < FIRST_WEIGHT_MS else
                            f": verify {fmt(ph['verify_ms'])} + plan {fmt(ph['plan_ms'])} + alloc {fmt(ph['alloc_ms'])} ms come first."))
    by_n = {int(n.split("/")[1]): r.rows[n] for n in verify_names}
    if 100000 in by_n:
        p50 = by_n[100000]["p50_ms"]
        ok = p50 < VERIFY_TARGET_MS
        b = by_n[100000]
        why = "" if ok else (
            f" Measured reason (p50 of each part, timed separately): Container::Open {fmt(b.get('container_ms'))} ms, "
            f"ParseManifest {fmt(b.get('manifest_ms'))} ms, WeightSet::Open (resolution) {fmt(b.get('resolve_ms'))} ms; "
            f"the loader's own verify phase on the 65,536-storage set is in the table above.")
        kept = verify_names[0].startswith("VerifyKeptHeap/")
        heap = " (`VerifyKeptHeap`: repetitions reuse warm memory)" if kept else ""
        lines.append(f"- {'met' if ok else '**missed**'}: verification of 100,000 weights in {fmt(p50)} ms{heap} "
                     f"(target < {VERIFY_TARGET_MS:.0f} ms).{why}")
        d = r.rows.get("Verify/100000")
        if kept and d is not None:
            lines.append(f"- with glibc's defaults (`Verify/100000`) the same verification took {fmt(d['p50_ms'])} ms, with "
                         f"{int(d.get('minflt') or 0)} minor page faults a repetition (the median): memory the previous "
                         "repetition freed and glibc returned to the kernel, touched afresh. A one-shot process faults on all "
                         "of its memory: the command-line figures below include that.")
    if len(by_n) >= 2:
        lo, hi = min(by_n), max(by_n)
        growth = by_n[hi]["ns_per_weight"] / by_n[lo]["ns_per_weight"]
        ok = growth <= LINEAR_GROWTH
        steps = ", ".join(f"{fmt(by_n[n]['ns_per_weight'])} at {n:,}" for n in sorted(by_n))
        lines.append(f"- {'met' if ok else '**missed**'}: linear scaling: ns per weight {steps} weights: "
                     f"{fmt(growth)}x per weight from {lo:,} to {hi:,} (linear is 1x; the target is <= {LINEAR_GROWTH}x)."
                     + ("" if ok else " Per-weight growth of each part, timed separately, from "
                        f"{lo:,} to {hi:,}: " + ", ".join(
                            f"{part} {fmt((by_n[hi].get(k) or 0) / hi / ((by_n[lo].get(k) or float('nan')) / lo))}x"
                            for part, k in (("Container::Open", "container_ms"), ("ParseManifest", "manifest_ms"),
                                            ("WeightSet::Open", "resolve_ms")))
                        + " (the machine is shared: see the load average and the p90s)."))
    for s in r.sets:
        for name in (f"Loader/host_cold/{s}", f"Ceiling/read_cold/{s}", f"Upstream/file_get_data_cold/{s}"):
            b = r.rows.get(name)
            if b and (b.get("resident_after_drop") or 0) > 0.05:
                lines.append(f"- cold cache unavailable for `{name}`: {b['resident_after_drop']*100:.0f}% of the file stayed resident "
                             "after posix_fadvise(POSIX_FADV_DONTNEED) (mincore); that row is not a cold read.")
    return "\n".join(lines)


CLI_VERIFY_MS = 150.0   # ptd-verify --manifest on 100,000 weights, whole process (issue 19).
CLI_LOAD_RATIO = 0.5    # ptd-load on 65,536 x 1 KiB against the whole-process pread ceiling.


def cli_section(rows):
    by = {(r["set"], r["case"]): r for r in rows}
    out = ["## Command line (whole processes)", "",
           "`scripts/cli_bench.py`: each case a whole process, from fork to exit (`wait4`), files warmed right "
           "before it, all cases in turn for each run, medians over the runs; peak RSS is `ru_maxrss`. "
           "`ceiling` is `ptd_pread_ceiling FILE` (4 MiB preads on one thread into one fresh, page-aligned "
           "buffer of the file's size: first-touch faults included, as for a loader's fresh memory); "
           "`ceiling_reused` reads into one 4 MiB buffer over and over (as `dd bs=4M`: no faults). "
           "`x ceiling` is the ceiling's time over the case's.", "",
           "| set | case | p50 ms | p90 ms | x ceiling | x ceiling_reused | peak RSS MiB | command |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = by.get((r["set"], "ceiling"))
        cr = by.get((r["set"], "ceiling_reused"))
        x = f"{fmt(c['p50_ms'] / r['p50_ms'])}x" if c else "-"
        xr = f"{fmt(cr['p50_ms'] / r['p50_ms'])}x" if cr else "-"
        out.append(f"| {r['set']} | `{r['case']}` | {fmt(r['p50_ms'])} | {fmt(r['p90_ms'])} | {x} | {xr} | "
                   f"{fmt(r['rss_mib'])} | `{r['command']}` |")
    out += ["", "Command-line targets:", ""]
    c = by.get(("1KiB", "ceiling"))
    for case, what in (("load", "`ptd-load --device host`"), ("load_map", "`ptd-load --map --device host`")):
        r = by.get(("1KiB", case))
        if c and r:
            x = c["p50_ms"] / r["p50_ms"]
            out.append(f"- {'met' if x >= CLI_LOAD_RATIO else '**missed**'}: {what} on 65,536 x 1 KiB: "
                       f"{fmt(r['p50_ms'])} ms, {fmt(x)}x the whole-process pread ceiling ({fmt(c['p50_ms'])} ms; "
                       f"target >= {CLI_LOAD_RATIO}x).")
    v = by.get(("verify-100000", "verify"))
    if v:
        out.append(f"- {'met' if v['p50_ms'] < CLI_VERIFY_MS else '**missed**'}: `ptd-verify --manifest` on 100,000 "
                   f"weights: {fmt(v['p50_ms'])} ms (target < {CLI_VERIFY_MS:.0f} ms), peak RSS {fmt(v['rss_mib'])} MiB.")
    out.append("")
    return out


def cuda_status(rows):
    names = [n for n in rows if n.startswith("BM_")]  # Only ptd_cuda_bench's names start so.
    if not names:
        return "not built (no CUDA toolkit at configure time)", []
    errors = [rows[n].get("error_message", "") for n in names if rows[n].get("error_occurred")]
    if len(errors) == len(names):
        if all("no CUDA device" in e for e in errors):
            return "skipped: no GPU", []
        return "failed: " + "; ".join(sorted(set(errors))), []
    out = ["| case | GB/s | ms | notes |", "|---|---|---|---|"]
    for n in names:
        b = rows[n]
        if b.get("error_occurred"):
            out.append(f"| `{n}` | - | - | {b.get('error_message')} |")
            continue
        gbps = b.get("bytes_per_second", 0) / 1e9
        out.append(f"| `{n}` | {fmt(gbps)} | {fmt(b.get('real_time'))} | |")
    return "ran", out


def gnuplot(r, prefix):
    exe = shutil.which("gnuplot")
    if not exe:
        return "gnuplot not found: no plots drawn (scripts/setup.sh installs gnuplot-nox)"
    sets = [s for s in r.sets if s in SET_STORAGE]
    if not sets:
        return "no block sets: no plots"
    series = [
        ("ours, warm", "Loader/host_warm", "Ceiling/pread_warm"),
        ("upstream file, warm", "Upstream/file_get_data", "Ceiling/pread_warm"),
        ("upstream mmap, warm", "Upstream/mmap_get_data", "Ceiling/pread_warm"),
        ("ours, cold", "Loader/host_cold", "Ceiling/read_cold"),
        ("upstream file, cold", "Upstream/file_get_data_cold", "Ceiling/read_cold"),
        ("ceiling: warm pread", "Ceiling/pread_warm", None),
        ("ceiling: cold read", "Ceiling/read_cold", None),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        dat = os.path.join(tmp, "d.dat")
        with open(dat, "w") as f:
            f.write("# storage_bytes " + " ".join(f"gbps{i} ratio{i}" for i in range(len(series))) + "\n")
            for s in sets:
                cols = []
                for _, case, ceil in series:
                    g = r.get(f"{case}/{s}")
                    q = r.ratio(f"{case}/{s}", f"{ceil}/{s}") if ceil else None
                    cols += ["NaN" if g is None else f"{g:.6g}", "NaN" if q is None else f"{q:.6g}"]
                f.write(f"{SET_STORAGE[s]} " + " ".join(cols) + "\n")
        def label(s):
            d = r.set_desc(s)
            return f"{s} x {d['storages']} ({human_bytes(d['data_bytes'])})" if d.get("storages") else s
        xtics = ", ".join(f'"{label(s)}" {SET_STORAGE[s]}' for s in sets)
        common = f"""set terminal pngcairo size 800,500 noenhanced font ",10"
set logscale x 2
set xtics ({xtics})
unset xlabel
set key below maxrows 4
set xrange [512:8388608]
set grid
set datafile missing "NaN"
"""
        lines = []
        for i, (title, _, _) in enumerate(series):
            style = "dashtype 2" if title.startswith("ceiling") else ""
            lines.append(f"'{dat}' using 1:{2 + 2 * i} with linespoints lw 2 {style} title '{title}'")
        gbps = common + f"""set output '{prefix}-gbps.png'
set ylabel "GB/s (p50)"
set title "Host load throughput by storage size (storage x count (total), one weight each)"
plot """ + ", \\\n  ".join(lines) + "\n"
        rlines = [f"'{dat}' using 1:{3 + 2 * i} with linespoints lw 2 title '{t} / its ceiling'"
                  for i, (t, _, c) in enumerate(series) if c]
        ratio = common + f"""set output '{prefix}-ratio.png'
set ylabel "ratio to ceiling (warm: warm pread; cold: cold read)"
set title "Ratio to ceiling by storage size (storage x count (total), one weight each)"
set yrange [0:*]
plot """ + ", \\\n  ".join(rlines) + f", \\\n  {NEAR_CEILING} with lines dashtype 2 lw 1.5 lc rgb '#606060' title 'target {NEAR_CEILING}x'\n"
        for script in (gbps, ratio):
            gp = os.path.join(tmp, "p.gp")
            with open(gp, "w") as f:
                f.write(script)
            res = subprocess.run([exe, gp], capture_output=True, text=True)
            if res.returncode != 0:
                return "gnuplot failed: " + res.stderr.strip()
    return None


def headline(r):
    out = ["| set | ours warm GB/s | x warm-pread ceiling | x fault-free read | x upstream (file) | ours cold GB/s | x cold-read ceiling | first weight ms (warm) | mapped (`map_file`) GB/s | mapped x fault-free read | huge pages (`kOn`) x fault-free read |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in r.sets:
        w, c, mp = f"Loader/host_warm/{s}", f"Loader/host_cold/{s}", f"Loader/host_mapped/{s}"
        up = r.ratio(w, f"Upstream/file_get_data/{s}")
        mx = r.ratio(mp, f"Ceiling/pread_warm_reused/{s}")
        kx = r.ratio(f"Loader/host_warm_thp/{s}", f"Ceiling/pread_warm_reused/{s}")
        out.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            s, fmt(r.get(w)), fmt(r.ratio(w, f"Ceiling/pread_warm/{s}")),
            fmt(r.ratio(w, f"Ceiling/pread_warm_reused/{s}")), fmt(up) if up else "-",
            fmt(r.get(c)), fmt(r.ratio(c, f"Ceiling/read_cold/{s}")), fmt(r.get(w, "first_weight_ms")),
            fmt(r.get(mp)) if r.get(mp) else "-", fmt(mx) if mx else "-", fmt(kx) if kx else "-"))
    return "\n".join(out)


def before_after(before_page, r):
    """Rows of an earlier page's summary (its own run) beside this run's, per set."""
    text = open(before_page).read()
    run = re.search(r"^Run: (.*?)\.?$", text, re.M)
    old = {}
    in_summary = False
    for line in text.splitlines():
        if line.startswith("## "):
            in_summary = line.strip() == "## Summary"
            continue
        if in_summary and line.startswith("| ") and not line.startswith("| set") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            old[cells[0]] = cells[1:]
    if not old:
        return []
    new = {}
    for line in headline(r).splitlines():
        if line.startswith("| ") and not line.startswith("| set") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            new[cells[0]] = cells[1:]
    cols = ["warm GB/s", "x warm-pread ceiling", "x fault-free read", "x upstream (file)", "cold GB/s",
            "x cold-read ceiling", "first weight ms (warm)", "mapped GB/s", "mapped x fault-free read",
            "huge pages (`kOn`) x fault-free read"]
    out = ["## Before and after", "",
           f"Before: the previous page of this machine ({run.group(1) if run else 'its run line is missing'}); "
           "after: this run. Each from one run of the suite; the machine is shared, so compare ratios (each "
           "taken within its own run) rather than absolute figures.", "",
           "| set | | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for s in sorted(set(old) | set(new), key=lambda x: list(new).index(x) if x in new else 99):
        for label, row in (("before", old.get(s)), ("after", new.get(s))):
            cells = (row or ["-"] * len(cols))[:len(cols)]
            cells += ["-"] * (len(cols) - len(cells))
            out.append(f"| {s} | {label} | " + " | ".join(cells) + " |")
    return out + [""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--plots", required=True, help="path prefix of the PNGs")
    ap.add_argument("--readme")
    ap.add_argument("--mode", default="full")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--commit", help="the commit measured (default: HEAD now)")
    ap.add_argument("--date", help="when it was measured (default: now)")
    ap.add_argument("--before", help="an earlier page of this machine: its summary is listed beside this run's")
    ap.add_argument("--cli", help="scripts/cli_bench.py's JSON: the whole-process section")
    ap.add_argument("json", nargs="+")
    a = ap.parse_args()

    rows, ctx = load(a.json)
    r = Results(rows, ctx)
    if not r.sets:
        sys.exit("bench_report: no Loader/host_warm rows in the JSON")
    m = machine()
    commit = a.commit
    if not commit:
        commit = git("rev-parse", "--short", "HEAD")
        if git("status", "--porcelain", "--untracked-files=no"):
            commit += " (with uncommitted changes)"
    date = a.date or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    plot_err = gnuplot(r, a.plots)
    page_dir = os.path.dirname(os.path.abspath(a.out))
    rel = lambda p: os.path.relpath(os.path.abspath(p), page_dir)
    vt, vnames = verify_table(r)
    cstat, ctable = cuda_status(rows)

    sets_desc = []
    for s in r.sets:
        d = r.set_desc(s)
        if d:
            sets_desc.append(f"- `{s}`: {d.get('storages')} storages"
                             + (f" of {human_bytes(d.get('storage_bytes'))}" if d.get("storage_bytes") else " (mixed sizes)")
                             + f", {d.get('keys')} keys, {d.get('weights')} weights, {human_bytes(d.get('data_bytes'))} of data, "
                             + f"file {human_bytes(d.get('file_bytes'))}"
                             + (f": {ctx[f'desc.{s}']}" if ctx.get(f"desc.{s}") else ""))

    page = [f"# Load-latency benchmarks: {os.path.splitext(os.path.basename(a.out))[0]}", "",
            f"Run: `scripts/bench.sh{' --quick' if a.mode == 'quick' else ''}` ({a.mode} suite), {date}, commit `{commit}`.", "",
            "## Machine", "",
            f"- CPU: {m['cpu']}, {m['cores']} cores", f"- memory: {m['mem_gib']:.1f} GiB",
            f"- kernel: Linux {m['kernel']}",
            f"- load average when the report was written: {m['load'][0]:.2f} / {m['load'][1]:.2f} / {m['load'][2]:.2f} (a shared machine: figures are noisy)",
            f"- repetitions per case: {ctx.get('reps', '?')} (p50 and p90 over them)", ""]
    for n in a.note:
        page.append(f"- {n}")
    page += ["", "## Model sets (written by CudaWeightWriter, cached in the data directory)", ""] + sets_desc + [
        "", "## Summary", "", headline(r), "",
        "## Targets and misses", "", targets(r, vnames), ""] + (
        before_after(a.before, r) if a.before and os.path.exists(a.before) else []) + [
        "## All cases", "",
        "GB/s is the distinct stored bytes of the set (what our loader moves) over the p50 time; upstream copies "
        "a segment once per key that names it (fused QKV, tied embeddings), so on `xfmr` it moves more bytes "
        "than that. Ratios are of GB/s in the same run: `x ceiling` to the ceiling named, `x upstream` "
        "ours over upstream's FileDataLoader (and MmapDataLoader) case.", "",
        table(r), "",
        "What each figure includes:", "",
        "- every load (ours and upstream) opens the file and parses it; ours also verifies every rule "
        "(container, manifest, geometry) before it allocates; upstream verifies nothing beyond its header checks;",
        "- destinations are fresh memory in every load and in the pread/cold ceilings (first-touch page faults "
        "included: about 1-2.5 s/GiB on this kind of machine); the memcpy ceiling copies between two "
        "pre-faulted (reused) buffers. Ours asks HostDevice for every storage in one `AllocateMany` call; upstream "
        "makes one `new[]` per key, which glibc may serve from memory freed by the previous repetition;",
        "- `x fault-free read` (summary): ours over `Ceiling/pread_warm_reused`, the same one-thread preads into a "
        "pre-faulted buffer: what the read would cost without first-touch faults. The warm-pread ceiling itself is "
        "fault-bound here (compare the two rows of each set), so it is the stricter yardstick;",
        "- threads: our loader reads with its default 4 reader threads (on however many cores the machine has); "
        "the pread and cold-read ceilings and upstream use one thread. A ratio above 1x means the loader overlapped "
        "first-touch faults or I/O that the one-thread ceiling serializes; `pread_warm_reused` shows the same read "
        "without the faults;",
        "- warm: the file was read into the page cache right before each repetition (the machine pages out "
        "cache left idle); cold: its pages were dropped right before (fsync + POSIX_FADV_DONTNEED, checked "
        "with mincore);",
        "- peak staging: host memory held beyond the destinations during a load. Ours on the host device reads "
        "straight into the destinations (0); upstream's FileDataLoader allocates a heap buffer per key and "
        "frees it after the copy (its largest key); MmapDataLoader maps the range instead (0 heap, the "
        "mapping counted as page cache);",
        "- upstream's `load_data_into` is not measured: on keys without a tensor layout (what the CUDA weight "
        "writer and the exporter write) it segfaults;",
        "- upstream looks keys up by a linear scan: with more keys than the cap, a sample spread over the "
        "whole key list is loaded and its per-key time scaled to every key (`sampled` in the notes).", ""]
    if a.cli and os.path.exists(a.cli):
        page += cli_section(json.load(open(a.cli))["cli"])
    if vt:
        page += ["## Verification alone", "",
                 "`WeightBundle::Open` (pread) of a .ptd + manifest of N float32 4x4 weights, one 64-byte storage each, warm. "
                 "Its parts were timed again separately in each repetition (`Container::Open` of the .ptd, `ParseManifest`, "
                 "`WeightSet::Open`, the resolution: X*, G*): their p50s show where the time goes. Their sum exceeds "
                 "the whole's p50: `WeightBundle::Open` decodes a manifest of 256 KiB or more on a second thread "
                 "while it verifies the container, so those two overlap (and the parts are separate runs on a "
                 "noisy machine). `minor faults` is the median count of the timed open. `glibc defaults` rows "
                 "(`Verify/N`) run first: between repetitions glibc may return what the last one freed to the kernel "
                 "(it trims a freed heap top over a threshold it adjusts as it goes, and maps large chunks afresh), "
                 "and how much varies between builds and runs. `kept` rows (`VerifyKeptHeap/N`) run last, after "
                 "`mallopt` told glibc to keep freed memory (as tcmalloc and jemalloc do by default): the "
                 "verification's own work, which the targets are judged on.", "",
                 vt, ""]
    page += cold_start_section(r)
    page += ["## CUDA device", "", f"`ptd_cuda_bench` (pinned H2D ceiling, upstream-style cudaMalloc per storage, the loader's device path): {cstat}.", ""]
    page += ctable + ([""] if ctable else [])
    page += ["## Plots", ""]
    if plot_err:
        page.append(plot_err)
    else:
        page += [f"![GB/s by storage size]({rel(a.plots + '-gbps.png')})", "",
                 f"![Ratio to ceiling by storage size]({rel(a.plots + '-ratio.png')})"]
    page.append("")
    with open(a.out, "w") as f:
        f.write("\n".join(page))

    if a.readme:
        readme_dir = os.path.dirname(os.path.abspath(a.readme))
        relr = lambda p: os.path.relpath(os.path.abspath(p), readme_dir)
        block = [BEGIN,
                 f"Host loader against its ceilings and upstream's `FlatTensorDataMap`, measured by "
                 f"`scripts/bench.sh{' --quick' if a.mode == 'quick' else ''}` on {m['cpu']} ({m['cores']} cores), {date}, "
                 f"commit `{commit}`; full table, misses and their reasons: [{relr(a.out)}]({relr(a.out)}).", "",
                 headline(r), ""]
        if not plot_err:
            block += [f"![GB/s by storage size]({relr(a.plots + '-gbps.png')})", ""]
        block.append(END)
        text = open(a.readme).read()
        if BEGIN in text and END in text:
            pre, rest = text.split(BEGIN, 1)
            post = rest.split(END, 1)[1]
            text = pre + "\n".join(block) + post
        else:
            text = text.rstrip("\n") + "\n\n## Benchmarks\n\n" + "\n".join(block) + "\n"
        with open(a.readme, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
