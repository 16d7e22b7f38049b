"""Run `kverify check` on selected corpus rows in parallel and print one summary table.

Each row runs as its own `kverify check --corpus FILE --id ID --json ...` process (so rows are
isolated from each other as candidates are from kverify); its table goes to OUT/<id>.txt and its
report to OUT/<id>.json.

Usage: python scripts/check_corpus.py --corpus FILE [--level 1] [--problem 19_ReLU ...]
                                      [--jobs 8] [--out DIR] [--device cuda] [--timeout 300]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kverify.corpus import iter_rows


def safe(row_id: str) -> str:
    return row_id.replace("/", "__")


def run_one(args, row_id: str) -> tuple[str, int, float]:
    out = Path(args.out)
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "kverify", "check", "--corpus", args.corpus, "--id", row_id,
           "--json", str(out / f"{safe(row_id)}.json"), "--timeout", str(args.timeout)]
    if args.device:
        cmd += ["--device", args.device]
    with open(out / f"{safe(row_id)}.txt", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env={"COLUMNS": "160", **__import__("os").environ}).returncode
    return row_id, rc, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--level", type=int, default=None)
    ap.add_argument("--problem", action="append", default=None, help="problem_name to include (repeatable)")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--out", default="out/corpus")
    ap.add_argument("--device", default=None)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--limit", type=int, default=None)
    a = ap.parse_args()
    Path(a.out).mkdir(parents=True, exist_ok=True)
    ids = [r["id"] for _, r in iter_rows(a.corpus)
           if (a.level is None or r.get("level") == a.level) and (a.problem is None or r.get("problem_name") in a.problem)]
    ids = ids[: a.limit] if a.limit else ids
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        done = list(pool.map(lambda i: run_one(a, i), ids))
    gates = ["G01", "G02", "G03", "G04", "G07", "G08"]
    print(f"{'id':58} " + " ".join(f"{g:5}" for g in gates) + f" {'std':5} {'class':9} {'rc':>2} {'sec':>5}")
    for row_id, rc, sec in done:
        p = Path(a.out) / f"{safe(row_id)}.json"
        if p.exists():
            r = json.loads(p.read_text())
            v = {g["gate"]: g["verdict"] for g in r["gates"]}
            print(f"{row_id:58} " + " ".join(f"{v.get(g, '-'):5}" for g in gates)
                  + f" {r['standard']['verdict']:5} {r['class']:9} {rc:2d} {sec:5.0f}")
        else:
            first = (Path(a.out) / f"{safe(row_id)}.txt").read_text().strip().splitlines()
            print(f"{row_id:58} no report (rc {rc}): {(first[-1] if first else '')[:120]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
