"""Benchmark: wall time of a full twelve-gate `kverify check` on corpus rows, compile excluded.

First fills kverify's extension cache: every row is checked once with `--gates G01` (all rows at
once, --warm-jobs), so the timed checks compile nothing. Then, for each row, runs `kverify check
--corpus FILE --id ID --json ...` and reads the report's meta.seconds: `total` (check()'s wall
time with the cache warm: compile excluded; the process's own Python and torch start-up before
check() is not in it, and is shown apart as "process s") and `first_load` (the first worker's import and
load of the built extension). Prints one line per check as it finishes, then the median total
against the target of 10 s (issue "other six gates"), and the median seconds of each gate and of
the standard test (meta.seconds.gates / .standard), to show where the time goes.

--serial-baseline also checks every row with KVERIFY_SERIAL_CHECK=1 (the standard test and G11's
sanitizer runs after the main worker instead of beside it, as kverify did before) in the same
run, and prints the ratio of the medians, serial / overlapped; --no-prestart-baseline likewise
with KVERIFY_PRESTART=0 (the workers start only once the gates' jobs are prepared). The timed
checks always set KVERIFY_PRESTART explicitly (1 unless that baseline). --examples checks the embedded
example problems' correct candidates instead of corpus rows (runs on a CPU-only machine).

Usage: python bench/check_time.py --corpus FILE [--level 1] [--limit 6] [--jobs 1] [--device cuda]
       python bench/check_time.py --examples --device cpu --serial-baseline
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kverify.corpus import iter_rows


def main() -> int:
    ap = argparse.ArgumentParser()
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--corpus")
    src.add_argument("--examples", action="store_true", help="the embedded examples' correct candidates")
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=1, help="checks at once (1 = no contention in the timing)")
    ap.add_argument("--warm-jobs", type=int, default=0, help="cache-filling checks at once (0: all rows)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--serial-baseline", action="store_true",
                    help="also time each row with KVERIFY_SERIAL_CHECK=1 and print serial/overlapped")
    ap.add_argument("--no-prestart-baseline", action="store_true",
                    help="also time each row with KVERIFY_PRESTART=0 (workers started after the preparation)")
    ap.add_argument("--warm-only", action="store_true", help="fill the extension cache and stop")
    ap.add_argument("--no-warm", action="store_true", help="skip filling the cache (an earlier --warm-only did)")
    ap.add_argument("--json-dir", default=None, help="keep each check's JSON report here")
    a = ap.parse_args()
    if a.examples:
        from kverify.examples import ROOT
        rows = {p.name: ["check", str(p / "reference.py"), str(p / "correct.py")]
                for p in sorted(ROOT.iterdir()) if (p / "correct.py").is_file()}
    else:
        rows = {r["id"]: ["check", "--corpus", a.corpus, "--id", r["id"]] for _, r in iter_rows(a.corpus)
                if r.get("level") == a.level and r.get("backend") == "cuda"}
    ids = list(rows)[: a.limit]
    out = Path(a.json_dir) if a.json_dir else Path(tempfile.mkdtemp(prefix="kv-time-"))
    out.mkdir(parents=True, exist_ok=True)
    modes = ["overlapped"] + (["no-prestart"] if a.no_prestart_baseline else []) + (["serial"] if a.serial_baseline else [])

    def one(item):
        i, mode = item
        f = out / f"{i.replace('/', '__')}.{mode}.json"
        cmd = [sys.executable, "-m", "kverify", *rows[i], "--json", str(f)]
        if a.device:
            cmd += ["--device", a.device]
        env = {**os.environ, "KVERIFY_SERIAL_CHECK": "1" if mode == "serial" else "0",
               "KVERIFY_PRESTART": "0" if mode == "no-prestart" else "1"}
        t = time.monotonic()
        subprocess.run(cmd, capture_output=True, text=True, env=env)
        process[(i, mode)] = time.monotonic() - t
        if not f.exists():
            return i, mode, None, None
        s = json.loads(f.read_text())["meta"]["seconds"]
        if mode == "overlapped":
            per_gate[i] = {**s.get("gates", {}), "standard": s.get("standard", 0.0)}
        return i, mode, s["total"], s["total"] - s["first_load"]

    def warm(i):
        t = time.monotonic()
        cmd = [sys.executable, "-m", "kverify", *rows[i], "--gates", "G01"]
        r = subprocess.run(cmd + (["--device", a.device] if a.device else []), capture_output=True, text=True)
        print(f"cache filled: {i} ({time.monotonic() - t:.0f} s, exit {r.returncode})", flush=True)

    if not a.no_warm:
        with ThreadPoolExecutor(max_workers=a.warm_jobs or len(ids)) as pool:
            list(pool.map(warm, ids))
    if a.warm_only:
        return 0
    per_gate: dict[str, dict] = {}
    process: dict[tuple, float] = {}  # wall time of the whole `kverify check` process (its start-up included)
    print(f"{'row':60} {'mode':>11} {'total s':>8} {'first load s':>13} {'process s':>10}", flush=True)

    def timed(item):
        i, mode, tot, ex = one(item)
        print(f"{i:60} {mode:>11} {tot if tot is not None else float('nan'):8.1f} "
              f"{tot - ex if tot is not None else float('nan'):13.1f} {process[(i, mode)]:10.1f}", flush=True)
        return i, mode, tot, ex

    with ThreadPoolExecutor(max_workers=a.jobs) as pool:  # the modes alternate row by row
        res = list(pool.map(timed, [(i, m) for i in ids for m in modes]))
    if per_gate:
        names = sorted({g for d in per_gate.values() for g in d})
        print("median seconds per gate, overlapped (its calls in the worker + its judging; G11 includes waiting"
              " for its sanitizer runs):")
        print("  " + "  ".join(f"{g} {statistics.median(d.get(g, 0.0) for d in per_gate.values()):.1f}" for g in names))
    med = {}
    for m in modes:
        tot = [t for _, mode, t, _ in res if mode == m and t is not None]
        if tot:
            med[m] = statistics.median(tot)
            print(f"median wall time of a twelve-gate check ({m}), extension cache warm (compile excluded): "
                  f"{med[m]:.1f} s over {len(tot)} rows (target <= 10 s); without the first worker's load: "
                  f"{statistics.median(e for _, mode, _, e in res if mode == m and e is not None):.1f} s; "
                  f"whole process (Python and torch start-up included): "
                  f"{statistics.median(v for (_, mode), v in process.items() if mode == m):.1f} s")
    for m, how in (("no-prestart", "KVERIFY_PRESTART=0"), ("serial", "KVERIFY_SERIAL_CHECK=1")):
        if m in med and "overlapped" in med:
            print(f"ratio {m} / overlapped: {med[m] / med['overlapped']:.2f}x (baseline: {how}, same rows, same run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
