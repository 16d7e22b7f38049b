"""Benchmark: wall time of a full twelve-gate `kverify check` on corpus rows, compile excluded.

For each row, runs `kverify check --corpus FILE --id ID --json ...` and reads the report's
meta.seconds: `total` minus `first_load` (the first worker's import + compile of the candidate;
later workers load from the extension cache). Prints one row per check and the median, against
the target of 10 s (issue "other six gates"), and the median seconds of each gate and of the
standard test (meta.seconds.gates / .standard), to show where the time goes.

Usage: python bench/check_time.py --corpus FILE [--level 1] [--limit 6] [--jobs 1] [--device cuda]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kverify.corpus import iter_rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=1, help="checks at once (1 = no contention in the timing)")
    ap.add_argument("--device", default=None)
    a = ap.parse_args()
    ids = [r["id"] for _, r in iter_rows(a.corpus) if r.get("level") == a.level and r.get("backend") == "cuda"][: a.limit]
    out = Path(tempfile.mkdtemp(prefix="kv-time-"))

    def one(i):
        f = out / f"{i.replace('/', '__')}.json"
        cmd = [sys.executable, "-m", "kverify", "check", "--corpus", a.corpus, "--id", i, "--json", str(f)]
        if a.device:
            cmd += ["--device", a.device]
        subprocess.run(cmd, capture_output=True, text=True)
        if not f.exists():
            return i, None, None
        s = json.loads(f.read_text())["meta"]["seconds"]
        per_gate[i] = {**s.get("gates", {}), "standard": s.get("standard", 0.0)}
        return i, s["total"], s["total"] - s["first_load"]

    per_gate: dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        rows = list(pool.map(one, ids))
    print(f"{'row':60} {'total s':>8} {'excl. compile s':>16}")
    for i, tot, ex in rows:
        print(f"{i:60} {tot if tot is not None else float('nan'):8.1f} {ex if ex is not None else float('nan'):16.1f}")
    if per_gate:
        names = sorted({g for d in per_gate.values() for g in d})
        print("median seconds per gate (its calls in the worker + its judging; G11 includes the sanitizer runs):")
        print("  " + "  ".join(f"{g} {statistics.median(d.get(g, 0.0) for d in per_gate.values()):.1f}" for g in names))
    ex = [e for _, _, e in rows if e is not None]
    if ex:
        print(f"median wall time of a twelve-gate check, compile excluded: {statistics.median(ex):.1f} s "
              f"over {len(ex)} rows (target <= 10 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
