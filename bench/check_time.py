"""Benchmark: wall time of a full twelve-gate `kverify check` on corpus rows, compile excluded.

For each row, runs `kverify check --corpus FILE --id ID --json ...` and reads the report's
meta.seconds: `total` minus `first_load` (the first worker's import + compile of the candidate;
later workers load from the extension cache). Prints one row per check and the median, against
the target of 10 s (issue "other six gates"), and the median seconds of each gate and of the
standard test (meta.seconds.gates / .standard), to show where the time goes.

--serial-baseline also checks every row with KVERIFY_SERIAL_CHECK=1 (the standard test and G11's
sanitizer runs after the main worker instead of beside it, as kverify did before) in the same
run, and prints the ratio of the medians, serial / overlapped. --examples checks the embedded
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
    ap.add_argument("--device", default=None)
    ap.add_argument("--serial-baseline", action="store_true",
                    help="also time each row with KVERIFY_SERIAL_CHECK=1 and print serial/overlapped")
    a = ap.parse_args()
    if a.examples:
        from kverify.examples import ROOT
        rows = {p.name: ["check", str(p / "reference.py"), str(p / "correct.py")]
                for p in sorted(ROOT.iterdir()) if (p / "correct.py").is_file()}
    else:
        rows = {r["id"]: ["check", "--corpus", a.corpus, "--id", r["id"]] for _, r in iter_rows(a.corpus)
                if r.get("level") == a.level and r.get("backend") == "cuda"}
    ids = list(rows)[: a.limit]
    out = Path(tempfile.mkdtemp(prefix="kv-time-"))
    modes = ["overlapped", "serial"] if a.serial_baseline else ["overlapped"]

    def one(item):
        i, mode = item
        f = out / f"{i.replace('/', '__')}.{mode}.json"
        cmd = [sys.executable, "-m", "kverify", *rows[i], "--json", str(f)]
        if a.device:
            cmd += ["--device", a.device]
        env = {**os.environ, "KVERIFY_SERIAL_CHECK": "1" if mode == "serial" else "0"}
        subprocess.run(cmd, capture_output=True, text=True, env=env)
        if not f.exists():
            return i, mode, None, None
        s = json.loads(f.read_text())["meta"]["seconds"]
        if mode == "overlapped":
            per_gate[i] = {**s.get("gates", {}), "standard": s.get("standard", 0.0)}
        return i, mode, s["total"], s["total"] - s["first_load"]

    per_gate: dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:  # the modes alternate row by row
        res = list(pool.map(one, [(i, m) for i in ids for m in modes]))
    print(f"{'row':60} {'mode':>10} {'total s':>8} {'excl. compile s':>16}")
    for i, mode, tot, ex in res:
        print(f"{i:60} {mode:>10} {tot if tot is not None else float('nan'):8.1f} "
              f"{ex if ex is not None else float('nan'):16.1f}")
    if per_gate:
        names = sorted({g for d in per_gate.values() for g in d})
        print("median seconds per gate, overlapped (its calls in the worker + its judging; G11 includes waiting"
              " for its sanitizer runs):")
        print("  " + "  ".join(f"{g} {statistics.median(d.get(g, 0.0) for d in per_gate.values()):.1f}" for g in names))
    med = {}
    for m in modes:
        ex = [e for _, mode, _, e in res if mode == m and e is not None]
        if ex:
            med[m] = statistics.median(ex)
            print(f"median wall time of a twelve-gate check ({m}), compile excluded: {med[m]:.1f} s "
                  f"over {len(ex)} rows (target <= 10 s)")
    if len(med) == 2:
        print(f"ratio serial / overlapped: {med['serial'] / med['overlapped']:.2f}x "
              f"(baseline: KVERIFY_SERIAL_CHECK=1, same rows, same run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
