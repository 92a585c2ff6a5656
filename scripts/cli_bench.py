#!/usr/bin/env python3
"""Whole-process timings of ptd-load and ptd-verify against a whole-process
pread ceiling (issue 19's command-line targets), for scripts/bench.sh.

Each run goes through every case in turn (alternating, so that they share the
machine's state), warming the case's files right before it; a case's figure
is the median of its runs: wall time from fork to exit (os.wait4) and peak
RSS (ru_maxrss). Cases, on the model sets that ptd_suite_bench wrote into the
data directory:

  1KiB (65,536 x 1 KiB storages)
    ceiling        ptd_pread_ceiling FILE: 4 MiB preads into one fresh buffer
    ceiling_reused ptd_pread_ceiling FILE --reused: into one 4 MiB buffer
    load           ptd-load --device host --manifest M FILE
    load_map       the same with --map
  4MiB (256 x 4 MiB storages, 1 GiB), where fresh memory dominates
    ceiling        as above
    load           ptd-load --device host --manifest M FILE
    load_thp       the same with --huge-pages on (huge pages wherever THP
                   is on; the default decides: see include/ptd/host_device.h)
  verify-100000 (100,000 weights, one 64-byte storage each)
    verify         ptd-verify --manifest M FILE
    load, load_map as above

With --baseline DIR (another build of the project, e.g. of an earlier commit
in a git worktree), its ptd-load and ptd-verify run beside this build's in the
same alternation, as rows whose case ends in "@baseline": a same-run A/B.
--sets picks sets by name (e.g. --sets 1KiB,verify-100000).

Usage: cli_bench.py --build DIR --data DIR [--baseline DIR] [--sets A,B]
                    [--runs N] [--out FILE.json]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 22):
                pass


def run_once(argv):
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"cli_bench: {' '.join(argv)} exited {code}: {err.strip()}")
    return seconds, usage.ru_maxrss / 1024.0  # KiB -> MiB.


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--baseline", help="another build whose tools run beside this one's")
    ap.add_argument("--sets", help="comma-separated set names to run (default: all found)")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--out")
    a = ap.parse_args()

    ceiling = os.path.join(a.build, "bench", "ptd_pread_ceiling")
    # The builds whose tools are timed: this one's, and the baseline's.
    builds = [("", a.build)] + ([("@baseline", a.baseline)] if a.baseline else [])
    tools = {}
    for tag, build in builds:
        tools[tag] = (os.path.join(build, "verifier", "ptd-load"),
                      os.path.join(build, "verifier", "ptd-verify"))
    for exe in [ceiling] + [x for pair in tools.values() for x in pair]:
        if not os.access(exe, os.X_OK):
            sys.exit(f"cli_bench: {exe} is not built")
    load, verify = tools[""]

    def each_build(set_name, case, argv_of, files):
        # argv_of(load, verify) -> argv; one case per build, side by side.
        return [(set_name, case + tag, argv_of(*tools[tag]), files) for tag, _ in builds]

    def load_cmd(man, ptd, *flags):
        return lambda load, _: [load, *flags, "--device", "host", "--manifest", man, ptd]

    def stem(pattern):
        hits = sorted(glob.glob(os.path.join(a.data, pattern + ".ptd")))
        return hits[0][: -len(".ptd")] if hits else None

    cases = []
    small = stem("*-blocks-65536x1024")
    if small:
        ptd, man = small + ".ptd", small + ".manifest"
        files = [ptd, man]
        cases += [
            ("1KiB", "ceiling", [ceiling, ptd], [ptd]),
            ("1KiB", "ceiling_reused", [ceiling, ptd, "--reused"], [ptd]),
            *each_build("1KiB", "load", load_cmd(man, ptd), files),
            *each_build("1KiB", "load_map", load_cmd(man, ptd, "--map"), files),
        ]
    big = stem("*-blocks-256x4194304")
    if big:
        ptd, man = big + ".ptd", big + ".manifest"
        files = [ptd, man]
        cases += [
            ("4MiB", "ceiling", [ceiling, ptd], [ptd]),
            *each_build("4MiB", "load", load_cmd(man, ptd), files),
            *each_build("4MiB", "load_thp", load_cmd(man, ptd, "--huge-pages", "on"), files),
        ]
    many = stem("*-verify-100000")
    if many:
        ptd, man = many + ".ptd", many + ".manifest"
        files = [ptd, man]
        cases += [
            *each_build("verify-100000", "verify",
                        lambda _, verify: [verify, "--manifest", man, ptd], files),
            *each_build("verify-100000", "load", load_cmd(man, ptd), files),
            *each_build("verify-100000", "load_map", load_cmd(man, ptd, "--map"), files),
        ]
    if a.sets:
        wanted = set(a.sets.split(","))
        cases = [c for c in cases if c[0] in wanted]
    if not cases:
        sys.exit(f"cli_bench: no 1 KiB or verify-100000 set in {a.data} (run ptd_suite_bench first)")

    times = {i: [] for i in range(len(cases))}
    rss = {i: [] for i in range(len(cases))}
    for _ in range(a.runs):
        for i, (_, _, argv, files) in enumerate(cases):
            warm(files)
            s, m = run_once(argv)
            times[i].append(s)
            rss[i].append(m)
    rows = []
    for i, (set_name, case, argv, _) in enumerate(cases):
        t = sorted(times[i])
        rows.append({
            "set": set_name,
            "case": case,
            "build": a.baseline if case.endswith("@baseline") else a.build,
            "command": " ".join(os.path.basename(argv[0]) if k == 0 else
                                (os.path.basename(x) if os.path.isabs(x) else x)
                                for k, x in enumerate(argv)),
            "runs": a.runs,
            "p50_ms": statistics.median(t) * 1e3,
            "p90_ms": t[min(len(t) - 1, int(round(0.9 * (len(t) - 1))))] * 1e3,
            "rss_mib": statistics.median(rss[i]),
        })
    for r in rows:
        print(f"{r['set']:>14} {r['case']:>15} {r['p50_ms']:8.1f} ms (p90 {r['p90_ms']:.1f})"
              f"  rss {r['rss_mib']:6.1f} MiB  {r['command']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"cli": rows}, f, indent=1)


if __name__ == "__main__":
    main()
