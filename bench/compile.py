"""Compile benchmark: stock ``load_inline`` against kverify's build path, same candidates, one run.

For each selected corpus candidate that calls ``load_inline`` the candidate is precompiled twice
(kverify.build.precompile: load it and call it once at the problem's own shape), each into its own
empty cache:

  stock   KVERIFY_FAST_BUILD=0: the candidate's own load_inline call, untouched
  kverify kverify's build (kverify/_internal/fastbuild.py): the CUDA file with the narrow torch
          header made for its source (kverify/_internal/narrow.py) or else the shim
          torch/extension.h, main.cpp with a precompiled torch/extension.h, stock as last resort

Both pools start together with the same number of processes; the kverify pool finishes first,
after which the stock builds have the machine to themselves (which favours stock). With
``--warm N`` kverify's pool first builds N other candidates, untimed, so that the precompiled
headers it shares between candidates exist (an audit's steady state); stock shares nothing.
Printed: median and p90 seconds per candidate for each, their ratio, and per candidate whether
the device code is identical (``cuobjdump -sass`` of both builds compared, where cuobjdump exists),
whether the host functions the CUDA source defines make the same calls (bench/cu_headers.py's
host_code on both ``cuda.cuda.o``)
and how the nvcc command lines differ (expected: only kverify's -I folder of the narrow header or shim).

Also printed: the same medians from ninja's own step log (the builds alone, without process start,
torch import or the call), and the median seconds per step kind.

Each candidate is printed as it ends (a run cut short by a time limit keeps those lines);
with --deadline (seconds from the start of the run, the warm-up included: stop 43's device call
lost its summary when the deadline was counted from after the warm-up and the call's own timeout
came first) the table and medians cover the candidates both modes built by then. The medians
are printed (and written to --json) before the builds are compared; the comparisons stop 30 s
after the deadline ("not compared: out of time"). A mode that loaded the candidate without
building an extension (it caught its own failed build) counts as "no extension built", not "ok".

Usage: python bench/compile.py --corpus FILE [--limit 16] [--jobs 8] [--json OUT] [--load-timeout 240]
                               [--deadline S] [--warm N]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures import TimeoutError as FuturesTimeout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cu_headers import host_code  # noqa: E402  (the host-code comparison, shared)


def _init(cache: str, stock: bool) -> None:
    os.environ["KVERIFY_CACHE"] = cache
    if stock:
        os.environ["KVERIFY_FAST_BUILD"] = "0"


def ninja_seconds(ext_dir: Path) -> tuple[float, dict[str, float]]:
    """Compile seconds of one candidate from the ``.ninja_log`` of each of its build folders
    (ninja's own record: start and end in ms per step): the sum over folders of the span from the
    first step's start to the last step's end (a folder's steps run in parallel; a failed tier's
    folder counts too), and the seconds per step kind (cuda.o, main.o, link) summed over folders.
    Both modes are timed by the same record, without process start, torch import or the call."""
    total, steps = 0.0, {}
    for log in sorted(ext_dir.glob("*/.ninja_log")):
        spans = []
        for ln in log.read_text().splitlines():
            f = ln.split("\t")
            if len(f) < 4 or ln.startswith("#"):
                continue
            start, end, out = int(f[0]) / 1e3, int(f[1]) / 1e3, f[3]
            spans.append((start, end))
            kind = "cuda.o" if out.endswith(".cuda.o") else "main.o" if out.endswith(".o") else "link"
            steps[kind] = round(steps.get(kind, 0.0) + end - start, 2)
        if spans:
            total += max(e for _, e in spans) - min(s for s, _ in spans)
    return round(total, 2), steps


def _one(row: dict, load_timeout: float) -> dict:
    from kverify.build import cache_dir, precompile

    trace = None
    if os.environ.get("KVERIFY_FAST_BUILD") != "0":  # kverify's nvcc says what it reused (pnvcc._trace)
        fd, trace = tempfile.mkstemp(prefix="kverify-bench-trace-")
        os.close(fd)
        os.environ["KVERIFY_PNVCC_TRACE"] = trace
    t = time.monotonic()
    p = precompile(row["reference"], row["id"] + ":reference", row["candidate"], row["id"] + ":candidate",
                   device=None, timeout=120, load_timeout=load_timeout,
                   tolerance=row.get("harness", {}).get("allclose_tol", 1e-2))
    ninja, steps = ninja_seconds(cache_dir(row["candidate"]))
    return {"id": row["id"], "seconds": round(time.monotonic() - t, 2), "status": p.status, "error": p.error,
            "builds": p.builds, "dir": str(cache_dir(row["candidate"])), "ninja_s": ninja, "steps": steps,
            **from_trace(trace)}


def from_trace(trace: str | None) -> dict:
    """What kverify's nvcc reused in a build and how long its steps took, from its trace file
    (pnvcc._trace; removed here): {"reused": "pp" when both lanes started from a kept preprocessed
    prefix (kverify._internal.ppcache), "pch" when the host compile used its precompiled header
    (hostpch), "-" for neither, "" without a trace; "tools": seconds per "LANE TOOL" (host gcc -E,
    host cudafe++, device cicc, final gcc, ...; summed over the build's CUDA files, a lane's
    preprocessing included where it ran beside a tool started early; "final gcc" also sums the
    precompile of the host header that runs beside a build's own compile the first time, and a
    compile refused with a header then run without: the table's "reused" column says which)}."""
    if not trace:
        return {"reused": "", "tools": {}}
    try:
        with open(trace) as f:
            lines = f.read().splitlines()
        os.unlink(trace)
    except OSError:
        return {"reused": "", "tools": {}}
    got = ["pp"] if {"pp host used", "pp device used"} <= set(lines) else []
    got += ["pch"] if "host pch: used" in lines else []
    tools: dict[str, float] = {}
    for ln in lines:
        w = ln.split()
        if len(w) >= 4 and w[0] == "step":
            try:
                tools[" ".join(w[1:-1])] = round(tools.get(" ".join(w[1:-1]), 0.0) + float(w[-1]), 2)
            except ValueError:
                continue
    return {"reused": "+".join(got) or "-", "tools": tools}


def _sass(so: Path) -> str | None:
    tool = shutil.which("cuobjdump")
    if not tool:
        return None
    out = subprocess.run([tool, "-sass", str(so)], capture_output=True, text=True).stdout
    return "\n".join(ln for ln in out.splitlines() if not ln.strip().startswith(("Fatbin", "=====", "code for", "arch", "identifier")))


def _cuda_flags(build: Path) -> list[str]:
    try:
        m = re.search(r"^cuda_cflags = (.*)$", (build / "build.ninja").read_text(), re.M)
    except OSError:
        return []
    return [f for f in shlex.split(m.group(1)) if not f.startswith("-DTORCH_EXTENSION_NAME=")] if m else []


def compare_builds(stock_dir: Path, ours_dir: Path) -> dict:
    """Device code and nvcc flags of the two builds of one candidate."""
    out = {"sass_identical": None, "host_identical": None, "flag_diff": []}
    # stock builds live in EXT_DIR/NAME; kverify's in NAME-<12 hex digits of the call>[-narrow|-stock]
    ext = lambda folder: re.sub(r"(-[0-9a-f]{12})?(-narrow|-stock)?$", "", folder)  # noqa: E731
    stock = {ext(p.parent.name): p for p in stock_dir.glob("*/*.so")}
    ours = {ext(p.parent.name): p for p in ours_dir.glob("*/*.so")}
    same, host = [], []
    for name, so in stock.items():
        if name not in ours:
            continue
        a, b = _sass(so), _sass(ours[name])
        if a is not None and b is not None:
            same.append(a == b)
        objs = [next(iter(sorted(d.parent.glob("*.cuda.o"))), None) for d in (so, ours[name])]
        src = so.parent / "cuda.cu"
        if all(objs) and src.exists():  # the host functions the CUDA source defines: same calls?
            ha, hb = host_code(objs[0], src.read_text()), host_code(objs[1], src.read_text())
            if ha is not None and (ha or hb):  # no function found in either (-ffunction-sections): no evidence
                host.append(ha == hb)
        fa, fb = _cuda_flags(so.parent), _cuda_flags(ours[name].parent)
        out["flag_diff"] += [f"+{f}" for f in fb if f not in fa] + [f"-{f}" for f in fa if f not in fb]
    out["sass_identical"] = all(same) if same else None
    out["host_identical"] = all(host) if host else None
    return out


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its descendants (a pool worker and the sandbox, ninja and compilers it
    started), read from /proc; gone processes are skipped."""
    import signal

    kids: dict[int, list[int]] = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open(f"/proc/{e}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(e))
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += kids.get(p, [])
    for p in seen:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


def build_status(r: dict) -> str:
    """A mode's status, "no extension built" where it loaded "ok" without one: with
    KVERIFY_FAST_BUILD=0 no build is recorded, so a candidate that catches its own failed
    load_inline and falls back to PyTorch loads "ok" (kverify's precompile calls that COMPILE_ERROR,
    kverify.build.failed_build; e.g. cudal1/h20/L1/T33, whose functions= names a kernel that
    main.cpp cannot see: stock "ok" and kverify compile_error in stop 26's run)."""
    if r["status"] == "ok" and not any(Path(r["dir"]).glob("**/*.so")):
        return "no extension built"
    return r["status"]


def summarize(table: list[dict], ok: list[dict], ours: list[dict], half: int, wall: float, selected: int) -> dict:
    """Medians and p90s (seconds) of the candidates both modes built (``ok``), per mode, whole
    precompile and ninja's builds alone; which step built kverify's extensions."""
    st, ou = [t["stock_s"] for t in ok], [t["ours_s"] for t in ok]
    sn, on = [t["stock_ninja_s"] for t in ok], [t["ours_ninja_s"] for t in ok]
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    summary = {"candidates": len(table), "left_out_at_deadline": selected - len(table), "both_ok": len(ok),
               "jobs_per_mode": half, "wall_s": round(wall, 1),
               "stock_median_s": med(st), "stock_p90_s": pct(st, 0.9), "ours_median_s": med(ou), "ours_p90_s": pct(ou, 0.9),
               "stock_ninja_median_s": med(sn), "stock_ninja_p90_s": pct(sn, 0.9),
               "ours_ninja_median_s": med(on), "ours_ninja_p90_s": pct(on, 0.9), "python": sys.version.split()[0]}
    built_by = [b.get("mode", "?") for o in ours for b in o["builds"].values() if b.get("ok")]
    summary["built_by"] = {m: built_by.count(m) for m in ("narrow", "fast", "stock")}
    pp = [t["ours_ninja_s"] for t in ok if "pp" in t.get("ours_reused", "").split("+")]
    summary["ours_pp_builds"] = len(pp)  # both lanes from a kept preprocessed prefix (ppcache)
    summary["ours_ninja_median_pp_s"] = med(pp)
    summary["narrow_fallbacks"] = sum(1 for o in ours for b in o["builds"].values() if "narrow_error" in b)
    if st and ou:
        summary["median_ratio_stock_over_ours"] = round(summary["stock_median_s"] / summary["ours_median_s"], 2)
    summary["step_medians"] = {m: {k: round(statistics.median([t[key].get(k, 0.0) for t in ok]), 1)
                                   for k in sorted({k for t in ok for k in t[key]})}
                               for m, key in (("stock", "stock_steps"), ("kverify", "ours_steps"))}
    tools = sorted({k for t in ok for k in t.get("ours_tools", {})})
    summary["tool_medians"] = {k: round(statistics.median([t["ours_tools"][k] for t in ok if k in t["ours_tools"]]), 2)
                               for k in tools}  # kverify's nvcc, per lane and tool (pnvcc's trace)
    return summary


def write_json(path: str | None, summary: dict, table: list[dict]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"summary": summary, "candidates": table}, indent=1))


def print_summary(summary: dict, ok: list[dict], half: int, wall: float) -> None:
    cut = f" ({summary['left_out_at_deadline']} left out at the deadline)" if summary["left_out_at_deadline"] else ""
    warm = f"; kverify's pool warmed by {summary['warm_up_candidates']} other candidates first" \
        if summary.get("warm_up_candidates") else ""
    print(f"\ncompile per candidate, {len(ok)} candidates built by both{cut}, {half} at a time per mode, same run{warm}:")
    print(f"  stock load_inline : median {summary['stock_median_s']} s, p90 {summary['stock_p90_s']} s")
    print(f"  kverify           : median {summary['ours_median_s']} s, p90 {summary['ours_p90_s']} s")
    print(f"  ratio (median stock / median kverify): {summary.get('median_ratio_stock_over_ours')}   wall {wall:.0f} s")
    print("  the builds alone (ninja's log: first step start to last step end, every build folder):")
    print(f"  stock load_inline : median {summary['stock_ninja_median_s']} s, p90 {summary['stock_ninja_p90_s']} s")
    print(f"  kverify           : median {summary['ours_ninja_median_s']} s, p90 {summary['ours_ninja_p90_s']} s")
    if summary.get("ours_pp_builds"):
        print(f"  kverify, the {summary['ours_pp_builds']} builds whose lanes started from a kept preprocessed prefix: "
              f"median {summary['ours_ninja_median_pp_s']} s")
    for m, steps in summary["step_medians"].items():
        print(f"  {m} step medians: " + ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()))
    if summary.get("tool_medians"):
        print("  kverify's nvcc, median seconds per lane and tool: "
              + ", ".join(f"{k} {v:.1f}" for k, v in summary["tool_medians"].items()))
    print("  kverify's extensions built by step: " + ", ".join(f"{m} {n}" for m, n in summary["built_by"].items())
          + f" (fell back from narrow: {summary['narrow_fallbacks']})", flush=True)


def print_row(t: dict | None) -> None:
    """One candidate's line of the comparison table (None: the header)."""
    if t is None:
        print(f"\n{'candidate':44} {'stock s':>8} {'ours s':>8} {'ninja st':>8} {'ninja us':>8} {'mode':>10} "
              f"{'same SASS':>9} {'same host':>9}  flag diff / status", flush=True)
        return
    note = (t.get("compare") or " ".join(t.get("flag_diff", []))) if t["stock_status"] == t["ours_status"] == "ok" \
        else f"stock {t['stock_status']}, ours {t['ours_status']}: {' | '.join(t['errors'])[:80]}"
    print(f"{t['id'][:44]:44} {t['stock_s']:8.1f} {t['ours_s']:8.1f} {t['stock_ninja_s']:8.1f} "
          f"{t['ours_ninja_s']:8.1f} {t['ours_mode']:>10} "
          f"{str(t.get('sass_identical', '-')):>9} {str(t.get('host_identical', '-')):>9}  {note[:90]}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--limit", type=int, default=16, help="candidates (default 16)")
    ap.add_argument("--jobs", type=int, default=8, help="processes in all, half per mode (default 8)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds from the run's start (warm-up included) after which unfinished builds are "
                         "stopped and left out of the table "
                         "(default: none; a device call should set one below its own limit)")
    ap.add_argument("--load-timeout", type=float, default=240.0,
                    help="seconds a candidate may take to load (build included) before it counts as failed (default 240)")
    ap.add_argument("--warm", type=int, default=0,
                    help="kverify's pool first builds this many other candidates, not timed, so that its shared "
                         "precompiled headers (main.cpp's, and the CUDA file's host code: a key is precompiled "
                         "the second time it is seen) exist, as in an audit after its first builds; at least "
                         "twice --jobs/2 to make them (default 0: the headers are made by the timed builds)")
    a = ap.parse_args()
    rows = [json.loads(ln) for ln in open(a.corpus) if ln.strip()]
    rows = [r for r in rows if "load_inline" in r.get("candidate", "")]
    rows.sort(key=lambda r: hashlib.sha256(r["id"].encode()).hexdigest())  # a fixed spread over sources
    rows, warm = rows[: a.limit], rows[a.limit: a.limit + max(a.warm, 0)]
    start = time.monotonic()  # --deadline counts from here, the warm-up included
    root = Path(tempfile.mkdtemp(prefix="kverify-compile-bench-"))
    half = max(1, a.jobs // 2)
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    po = ProcessPoolExecutor(half, mp_context=ctx, initializer=_init, initargs=(str(root / "ours"), False))
    try:  # before the clock starts, within the deadline too (the timed builds then get what is left)
        for f in as_completed([po.submit(_one, r, a.load_timeout) for r in warm],
                              timeout=None if a.deadline is None else a.deadline):
            r = f.result()
            print(f"  warm-up kverify {r['seconds']:6.1f} s (ninja {r['ninja_s']:5.1f} s) {r['status']:13} "
                  f"{r['reused']:7} {r['id']}", flush=True)
    except FuturesTimeout:
        print(f"  deadline ({a.deadline:.0f} s) during the warm-up: the timed builds are left out", flush=True)
    t0 = time.monotonic()
    ps = ProcessPoolExecutor(half, mp_context=ctx, initializer=_init, initargs=(str(root / "stock"), True))
    fs, fo = [ps.submit(_one, r, a.load_timeout) for r in rows], [po.submit(_one, r, a.load_timeout) for r in rows]
    mode_of = {**{f: "stock" for f in fs}, **{f: "kverify" for f in fo}}
    try:
        # each as it ends; at the deadline the candidates not built by both modes are left out
        left = None if a.deadline is None else max(1.0, a.deadline - (time.monotonic() - start))
        for f in as_completed(fs + fo, timeout=left):
            r = f.result()
            print(f"  {time.monotonic() - t0:6.0f}s {mode_of[f]:7} {r['seconds']:6.1f} s (ninja {r['ninja_s']:5.1f} s) "
                  f"{r['status']:13} {r['reused'] or '':7} {r['id']}", flush=True)
    except FuturesTimeout:
        print(f"  deadline ({a.deadline:.0f} s): {sum(not f.done() for f in fs + fo)} build(s) unfinished, left out",
              flush=True)
    finished = [(x.result(), y.result()) for x, y in zip(fs, fo) if x.done() and y.done()]
    for pool in (ps, po):  # stop what still runs (after the deadline): its processes and their compilers;
        procs = list((getattr(pool, "_processes", None) or {}).values())  # idle workers otherwise
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            _kill_tree(proc.pid)
    stock, ours = [x for x, _ in finished], [y for _, y in finished]
    wall = time.monotonic() - t0
    table = []
    for s, o in zip(stock, ours):
        modes = ",".join(sorted({b.get("mode", "?") for b in o["builds"].values()})) or "-"
        table.append({"id": s["id"], "stock_s": s["seconds"], "ours_s": o["seconds"],
                      "stock_ninja_s": s["ninja_s"], "ours_ninja_s": o["ninja_s"],
                      "stock_steps": s["steps"], "ours_steps": o["steps"], "ours_reused": o["reused"],
                      "ours_tools": o.get("tools", {}),
                      "stock_status": build_status(s),
                      "ours_status": build_status(o), "ours_mode": modes,
                      "errors": [e for e in (s["error"], o["error"]) if e]})
    ok = [t for t in table if t["stock_status"] == t["ours_status"] == "ok"]
    summary = summarize(table, ok, ours, half, wall, len(rows))
    summary["warm_up_candidates"] = len(warm)
    # the timings first (printed and written): comparing the builds takes a while and a time limit
    # may cut it short (stop 26: the whole output was lost so)
    write_json(a.json, summary, table)
    print_summary(summary, ok, half, wall)
    stop_by = start + a.deadline + 30 if a.deadline is not None else None
    print_row(None)
    for t, (s, o) in zip(table, finished):  # each row printed once compared (a time limit keeps those)
        if t["stock_status"] == t["ours_status"] == "ok":
            if stop_by is not None and time.monotonic() > stop_by:
                t["compare"] = "not compared: out of time"
            else:
                t.update(compare_builds(Path(s["dir"]), Path(o["dir"])))
        print_row(t)
    write_json(a.json, summary, table)
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
