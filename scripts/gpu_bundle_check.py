#!/usr/bin/env python3
"""The GPU bundle's checker (copied into the bundle as check.py; run.sh calls it).

  check.py digests --bundle DIR --logs DIR [--device cuda]
      ptd-load --device cuda --json --digest on every ok case of
      DIR/data/conformance/cases.json (through --manifest, and again through
      --pte where the case has one); every weight's sha256 and
      materialized_sha256 (on cuda), and every key's sha256 for a container
      case, must equal cases.json. (--device host: the same check without a
      GPU, which the bundle's CPU-side test runs.) --device-budget B passes
      ptd-load's (0: everything in mapped host memory, read by the kernels
      there). Writes LOGS/NAME.json (--name, default digests); exit 0 when
      all match.
      --load BIN and --conformance DIR run it outside a bundle: CI runs
      ptd-load-cudasim so (tests/cudasim/CMakeLists.txt).
  check.py summary --bundle DIR --logs DIR --out DIR --seconds N
      Reads LOGS/steps.tsv, driver.json (the driver and CUDA versions that
      run.sh recorded), build.json (the build it picked), bench_1g.json,
      pin_1g.json, cold_direct_1g.json, cold_gds_1g.json, digests_mapped.json, small_*.json,
      gpu_tests.json,
      digests.json and bench_4g.json; writes
      OUT/summary.json and OUT/summary.md, prints the latter; exit 0 only when
      every check ran and passed (a check that run.sh did not run for want of
      time fails, the 4 GiB benchmark excepted).

Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys

LOADER_BENCHES = [
    "BM_Ceiling_PinnedH2D", "BM_Upstream_CudaMallocPerStorage", "BM_CudaDevice_CopyPipeline",
    "BM_LoaderCeiling_PinnedH2D", "BM_LoaderCeiling_PreadPinned",
    "BM_LoaderUpstream_MallocPreadCudaMemcpy", "BM_Loader_Cuda",
]


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, f"{os.path.basename(path)}: {e}"


def evict(path):
    """Drops the file's pages from the page cache (a cold load follows)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run_digests(args):
    conf = args.conformance or os.path.join(args.bundle, "data", "conformance")
    with open(os.path.join(conf, "cases.json")) as f:
        cases = json.load(f)["cases"]
    load = args.load or os.path.join(args.bundle, "bin", "ptd-load")
    results = []
    for tc in cases:
        if tc.get("expect") != "ok":
            continue
        runs = []
        if "manifest" in tc:
            runs.append(("manifest", ["--manifest", os.path.join(conf, tc["manifest"])]))
            if "pte" in tc:
                runs.append(("pte", ["--pte", os.path.join(conf, tc["pte"])]))
        else:
            runs.append(("container", []))
        for via, extra in runs:
            budget = [] if args.device_budget is None else ["--device-budget", args.device_budget]
            io = [] if args.io is None else ["--io", args.io]
            ptd = os.path.join(conf, tc["ptd"])
            cmd = [load, "--device", args.device, "--json", "--digest", *budget, *io, *extra, ptd]
            r = {"case": tc["name"], "via": via, "checked": 0, "problems": []}
            results.append(r)
            if args.cold:
                evict(ptd)
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                r["problems"].append("ptd-load timed out after 60 s")
                continue
            if p.returncode != 0:
                r["problems"].append(f"ptd-load exited {p.returncode}: {p.stderr.strip()[:300]}")
                continue
            try:
                j = json.loads(p.stdout)
            except ValueError as e:
                r["problems"].append(f"ptd-load printed no JSON: {e}")
                continue
            got_io = j.get("load", {}).get("io", {})
            r["io"] = got_io
            load_info = j.get("load", {})
            # The bytes the engine should have read: every storage (direct),
            # the device's (gds).
            owed = load_info.get("bytes", 0) if args.io == "direct" else \
                load_info.get("placement", {}).get("device", {}).get("bytes", 0)
            if args.io in ("direct", "gds") and owed > 0 and not got_io.get("fallbacks") and \
                    got_io.get("engines", {}).get(args.io, 0) < owed:
                r["problems"].append(f"--io {args.io} read less than {owed} bytes {args.io}, and "
                                     f"said no fallback: {got_io}")
            if args.io == "gds" and got_io.get("engines", {}).get("gds", 0) > 0 and \
                    got_io.get("gds_mode") != "p2p":
                r["problems"].append(f"gds read bytes in mode {got_io.get('gds_mode')}, not p2p")
            if j.get("device", {}).get("kind") != args.device:
                r["problems"].append(f"loaded on {j.get('device')}, not {args.device}")
            if "weights" in tc:
                got = {}
                for m in j.get("manifests", []):
                    for w in m.get("weights", []):
                        got[w["fqn"]] = w
                for want in tc["weights"]:
                    w = got.get(want["fqn"])
                    if w is None:
                        r["problems"].append(f"weight '{want['fqn']}' not in the report")
                        continue
                    r["checked"] += 1
                    if w.get("sha256") != want["sha256"]:
                        r["problems"].append(f"weight '{want['fqn']}': sha256 {w.get('sha256')}, "
                                             f"cases.json {want['sha256']}")
                    if args.device == "cuda" and want.get("device_type", 1) != 0 and \
                            w.get("materialized_sha256") != want["sha256"]:
                        r["problems"].append(
                            f"weight '{want['fqn']}': materialized_sha256 "
                            f"{w.get('materialized_sha256')}, cases.json {want['sha256']}")
            else:
                got = {nd["key"]: nd for nd in j.get("ptd", {}).get("named_data", [])}
                for want in tc.get("named_data", []):
                    nd = got.get(want["key"])
                    if nd is None:
                        r["problems"].append(f"key '{want['key']}' not in the report")
                        continue
                    r["checked"] += 1
                    if nd.get("sha256") != want["sha256"]:
                        r["problems"].append(f"key '{want['key']}': sha256 {nd.get('sha256')}, "
                                             f"cases.json {want['sha256']}")
            if r["checked"] == 0 and not r["problems"]:
                r["problems"].append("nothing to compare")
    ok = bool(results) and all(not r["problems"] for r in results)
    os.makedirs(args.logs, exist_ok=True)
    with open(os.path.join(args.logs, f"{args.name}.json"), "w") as f:
        json.dump({"ok": ok, "runs": results, "device_budget": args.device_budget}, f, indent=1)
    for r in results:
        state = "ok" if not r["problems"] else "FAILED: " + "; ".join(r["problems"][:3])
        print(f"{r['case']} ({r['via']}): {r['checked']} digests {state}")
    print(f"digests: {sum(not r['problems'] for r in results)} of {len(results)} runs match")
    return 0 if ok else 1


def read_steps(logs):
    steps = {}
    try:
        with open(os.path.join(logs, "steps.tsv")) as f:
            for line in f:
                name, rc, secs, limit = line.rstrip("\n").split("\t")
                steps[name] = {"rc": rc, "seconds": int(secs), "limit": int(limit)}
    except OSError:
        pass
    return steps


def rc_text(step):
    if step["rc"] in ("124", "137"):
        return f"timed out after {step['limit']} s"
    return f"exit {step['rc']}"


NOT_RUN = "not run: too little left of PTD_CHECK_BUDGET_S"


def gpu_tests_check(logs, step):
    c = {"name": "gpu_tests", "log": "logs/gpu_tests.log"}
    if step is not None and step["rc"] == "not_run":
        c.update(ok=False, not_run=True, detail=NOT_RUN)
        return c
    j, err = load_json(os.path.join(logs, "gpu_tests.json"))
    if j is None:
        c.update(ok=False, detail=f"no gtest JSON ({err}); {rc_text(step) if step else 'not run'}")
        return c
    passed, failed, skipped = [], [], []
    for suite in j.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f"{suite['name']}.{t['name']}"
            if t.get("status") == "NOTRUN":
                continue
            if t.get("failures"):
                failed.append(name)
            elif t.get("result") == "SKIPPED":
                skipped.append(name)
            else:
                passed.append(name)
    ok = bool(passed) and not failed and not skipped and step is not None and step["rc"] == "0"
    detail = f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped"
    if step is not None and step["rc"] != "0":
        detail += f" ({rc_text(step)})"
    if failed:
        detail += "; failed: " + ", ".join(failed[:5])
    if skipped:
        detail += "; skipped (a failure here): " + ", ".join(skipped[:5])
    c.update(ok=ok, detail=detail, passed=len(passed), failed=failed, skipped=skipped)
    return c


def digests_check(logs, step, name="digests"):
    c = {"name": "load_" + name, "log": f"logs/{name}.log"}
    if step is not None and step["rc"] == "not_run":
        c.update(ok=False, not_run=True, detail=NOT_RUN)
        return c
    j, err = load_json(os.path.join(logs, f"{name}.json"))
    if j is None:
        c.update(ok=False, detail=f"no result ({err}); {rc_text(step) if step else 'not run'}")
        return c
    runs = j["runs"]
    bad = [r for r in runs if r["problems"]]
    c.update(ok=j["ok"] and step is not None and step["rc"] == "0",
             detail=f"{len(runs) - len(bad)} of {len(runs)} ptd-load runs match cases.json "
                    f"({sum(r['checked'] for r in runs)} digests)" +
                    ("; " + "; ".join(f"{r['case']} ({r['via']}): {r['problems'][0]}"
                                      for r in bad[:3]) if bad else ""),
             runs=runs)
    return c


def bench_check(logs, name, step):
    c = {"name": name, "log": f"logs/{name}.log"}
    if step is None or step["rc"] == "not_run":
        c.update(ok=name != "bench_1g", not_run=True,
                 detail=NOT_RUN if step else "not run")
        return c
    j, err = load_json(os.path.join(logs, f"{name}.json"))
    if j is None:
        c.update(ok=False, detail=f"no benchmark JSON ({err}); {rc_text(step)}")
        return c
    by = {}
    for b in j.get("benchmarks", []):
        by[b["name"].split("/")[0]] = b
    problems = [] if step["rc"] == "0" else [rc_text(step)]
    for n in LOADER_BENCHES:
        b = by.get(n)
        if b is None:
            problems.append(f"{n} did not run")
        elif b.get("error_occurred") or b.get("skipped"):
            problems.append(f"{n}: {b.get('error_message') or b.get('skip_message') or 'skipped'}")
    loader = by.get("BM_Loader_Cuda", {})

    def gbps(n):
        return by.get(n, {}).get("GBps")
    m = {
        "GBps": loader.get("GBps"),
        "vs_ceiling": loader.get("vs_ceiling"),
        "vs_upstream": loader.get("vs_upstream"),
        "meets_targets": loader.get("meets_targets") == 1,
        "p50_ms": loader.get("p50_ms"),
        "p90_ms": loader.get("p90_ms"),
        "first_weight_ms": loader.get("first_weight_p50_ms"),
        "iterations": loader.get("iterations"),
        "ceiling_pinned_h2d_GBps": gbps("BM_LoaderCeiling_PinnedH2D"),
        "ceiling_pread_pinned_GBps": gbps("BM_LoaderCeiling_PreadPinned"),
        "upstream_GBps": gbps("BM_LoaderUpstream_MallocPreadCudaMemcpy"),
    }
    c.update(ok=not problems, metrics=m, problems=problems,
             detail="; ".join(problems) if problems else
             f"{fmt(m['GBps'])} GB/s, {fmt(m['vs_ceiling'])}x ceiling (>= 0.85), "
             f"{fmt(m['vs_upstream'])}x upstream (>= 4): "
             f"{'targets met' if m['meets_targets'] else 'TARGETS MISSED'}")
    return c


def pinning_check(logs, step):
    """ptd-load --device-budget 0 on the 1 GiB file: allocate_s is the
    cudaHostAlloc that pins it (and maps it for the GPU)."""
    c = {"name": "pinning", "log": "logs/pin_1g.log"}
    if step is None or step["rc"] == "not_run":
        c.update(ok=False, not_run=True, detail=NOT_RUN if step else "not run")
        return c
    j, err = load_json(os.path.join(logs, "pin_1g.json"))
    if j is None or step["rc"] != "0":
        c.update(ok=False, detail=f"{rc_text(step)}; {err or 'no JSON'}")
        return c
    t = j.get("timings", {})
    placement = j.get("load", {}).get("placement", {})
    mapped = placement.get("mapped_host", {}).get("bytes") or 0
    on_device = placement.get("device", {}).get("bytes")
    gib = mapped / (1 << 30)
    per_gib = t.get("allocate_s", 0) / gib if gib else None
    m = {"bytes": j.get("load", {}).get("bytes"), "mapped_host_bytes": mapped,
         "device_bytes": on_device, "allocate_s": t.get("allocate_s"), "pin_s_per_GiB": per_gib,
         "total_s": t.get("total_s"), "GBps": t.get("gbps")}
    ok = mapped > 0 and on_device == 0
    c.update(ok=ok, metrics=m,
             detail=f"{fmt(per_gib, 3)} s/GiB to pin {fmt(gib)} GiB (allocate_s, cudaHostAlloc "
                    f"mapped + portable){'' if ok else '; NOT all of it in mapped host memory'}; "
                    f"whole load {fmt(m['GBps'])} GB/s")
    return c


def cold_start_check(logs, steps):
    """The 1 GiB file dropped from the page cache, loaded with --io direct and
    --io gds: GB/s, the bytes each engine read, the mode cuFile ran in (or why
    the load fell back). A fallback is a finding, not a failure."""
    c = {"name": "cold_start", "log": "logs/cold_direct_1g.log, logs/cold_gds_1g.log"}
    rows, problems, not_run = {}, [], 0
    for io in ("direct", "gds"):
        step = steps.get(f"cold_{io}_1g")
        if step is None or step["rc"] == "not_run":
            problems.append(f"{io}: not run")
            not_run += 1
            continue
        j, err = load_json(os.path.join(logs, f"cold_{io}_1g.json"))
        if j is None or step["rc"] != "0":
            problems.append(f"{io}: {rc_text(step)}; {err or 'no JSON'}")
            continue
        rep = j.get("load", {}).get("io", {})
        rows[io] = {"GBps": j.get("timings", {}).get("gbps"), "engines": rep.get("engines"),
                    "gds_mode": rep.get("gds_mode"), "fallbacks": rep.get("fallbacks"),
                    "cached_bytes": rep.get("cached_bytes"), "queue": rep.get("queue")}

    def said(io, r):
        fb = "; ".join(f"{f['from']}->{f['to']}: {f['reason']}" for f in r["fallbacks"] or [])
        return (f"{io}: {fmt(r['GBps'])} GB/s, engines {r['engines']}"
                f"{', cuFile ' + r['gds_mode'] if r['gds_mode'] else ''}{', ' + fb if fb else ''}")
    c.update(ok=not problems, not_run=not_run == 2, metrics=rows, problems=problems,
             detail="; ".join(problems + [said(io, r) for io, r in rows.items()]))
    return c


def small_storages_check(logs, steps):
    """The loader on 65,536 storages of 1,000 B and of 1,024 B."""
    c = {"name": "small_storages", "log": "logs/small_1000.log, logs/small_1024.log"}
    rows, problems, not_run = {}, [], 0
    for each in (1000, 1024):
        step = steps.get(f"small_{each}")
        if step is None or step["rc"] == "not_run":
            problems.append(f"{each} B: not run")
            not_run += 1
            continue
        j, err = load_json(os.path.join(logs, f"small_{each}.json"))
        b = next((b for b in (j or {}).get("benchmarks", []) if b["name"].startswith("BM_Loader_Cuda")),
                 None)
        if b is None or b.get("error_occurred") or step["rc"] != "0":
            problems.append(f"{each} B: {rc_text(step)}; "
                            f"{(b or {}).get('error_message') or err or 'no BM_Loader_Cuda'}")
            continue
        rows[each] = {k: b.get(k) for k in ("p50_ms", "GBps", "copies", "copy_calls", "storages")}
    ratio = (rows[1000]["p50_ms"] / rows[1024]["p50_ms"]
             if len(rows) == 2 and rows[1024].get("p50_ms") else None)
    c.update(ok=not problems, not_run=not_run == 2, metrics=rows,
             problems=problems,
             detail="; ".join(problems) if problems else
             "; ".join(f"{k} B: {fmt(v['p50_ms'], 1)} ms, {fmt(v['copy_calls'], 0)} copy calls"
                       for k, v in rows.items()) + f"; 1,000 B / 1,024 B time {fmt(ratio)}x")
    return c


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def run_summary(args):
    steps = read_steps(args.logs)
    probe, _ = load_json(os.path.join(args.logs, "probe.json"))
    device = ((probe or {}).get("device") or {}).get("name", "?")
    driver, err = load_json(os.path.join(args.logs, "driver.json"))
    if driver is None:
        driver = {"driver_version": None, "cuda_version": None, "nvidia_smi": None,
                  "source": None, "text": f"driver unknown (no {err})"}
    build, _ = load_json(os.path.join(args.logs, "build.json"))
    checks = [
        bench_check(args.logs, "bench_1g", steps.get("bench_1g")),
        pinning_check(args.logs, steps.get("pin_1g")),
        digests_check(args.logs, steps.get("digests_mapped"), "digests_mapped"),
        small_storages_check(args.logs, steps),
        cold_start_check(args.logs, steps),
        gpu_tests_check(args.logs, steps.get("gpu_tests")),
        digests_check(args.logs, steps.get("digests")),
        bench_check(args.logs, "bench_4g", steps.get("bench_4g")),
    ]
    step_of = {"pinning": ["pin_1g"], "small_storages": ["small_1000", "small_1024"],
               "cold_start": ["cold_direct_1g", "cold_gds_1g"]}
    for c in checks:
        names = step_of.get(c["name"], [c["name"].replace("load_", "")])
        c["seconds"] = sum(steps[n]["seconds"] for n in names if n in steps)
    ok = all(c["ok"] for c in checks)
    bundle = ""
    try:
        with open(os.path.join(args.bundle, "BUNDLE.txt")) as f:
            bundle = f.readline().strip()
    except OSError:
        pass
    build_text = f"{build['build']} ({build['dir']}: {build['why']})" if build else "unknown"
    summary = {"result": "pass" if ok else "fail", "device": device, "driver": driver,
               "build": build, "bundle": bundle, "seconds": args.seconds, "checks": checks}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    md = [f"# GPU check: {'pass' if ok else 'FAIL'}", "",
          f"- device: {device}", f"- {driver.get('text')}", f"- build: {build_text}",
          f"- bundle: {bundle}",
          f"- total: {args.seconds} s", "",
          "| check | result | seconds | detail |", "|---|---|---|---|"]
    for c in checks:
        if c.get("not_run"):
            res = "not run" if c["ok"] else "NOT RUN (FAIL)"
        else:
            res = "pass" if c["ok"] else "FAIL"
        md.append(f"| {c['name']} | {res} | {c['seconds']} | {c['detail']} |")
    benches = [c for c in checks if c["name"].startswith("bench_") and c.get("metrics")
               and c["metrics"]["GBps"] is not None]
    if benches:
        md += ["", "BM_Loader_Cuda (1024 storages, warm page cache):", "",
               "| size | GB/s | vs ceiling | vs upstream | p50 ms | p90 ms | first weight ms | "
               "ceiling H2D GB/s | ceiling pread GB/s | upstream GB/s | targets |",
               "|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in benches:
            m = c["metrics"]
            md.append(f"| {c['name'][6:].upper().replace('G', ' GiB')} | {fmt(m['GBps'])} | "
                      f"{fmt(m['vs_ceiling'])} | {fmt(m['vs_upstream'])} | {fmt(m['p50_ms'], 1)} | "
                      f"{fmt(m['p90_ms'], 1)} | {fmt(m['first_weight_ms'], 1)} | "
                      f"{fmt(m['ceiling_pinned_h2d_GBps'])} | {fmt(m['ceiling_pread_pinned_GBps'])} | "
                      f"{fmt(m['upstream_GBps'])} | {'met' if m['meets_targets'] else 'MISSED'} |")
    text = "\n".join(md) + "\n"
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text, end="")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("digests")
    d.add_argument("--bundle", default=".")
    # Outside a bundle (the simulator's CI check, tests/cudasim): the ptd-load
    # to run and the conformance folder.
    d.add_argument("--load", help="the ptd-load binary (default BUNDLE/bin/ptd-load)")
    d.add_argument("--conformance", help="the conformance folder (default BUNDLE/data/conformance)")
    d.add_argument("--logs", required=True)
    d.add_argument("--device", default="cuda", choices=["cuda", "host"])
    d.add_argument("--device-budget", help="ptd-load's --device-budget (0: all in mapped host memory)")
    d.add_argument("--name", default="digests", help="the result: LOGS/NAME.json")
    d.add_argument("--io", choices=["auto", "buffered", "direct", "gds"],
                   help="ptd-load's --io (direct, gds: some bytes must be read by that "
                        "engine, or a fallback said why not)")
    d.add_argument("--cold", action="store_true",
                   help="drop each file from the page cache before its load")
    s = sub.add_parser("summary")
    s.add_argument("--bundle", required=True)
    s.add_argument("--logs", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--seconds", type=int, default=0)
    args = ap.parse_args()
    return run_digests(args) if args.cmd == "digests" else run_summary(args)


if __name__ == "__main__":
    sys.exit(main())
