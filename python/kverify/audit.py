"""`kverify audit`: the gates aimed at a corpus of accepted kernels, journalled and resumable.

Rows are taken in file order; `--shard i/n` keeps the rows whose position p has p % n == i
(deterministic, disjoint, covering). Rows already in the journal are skipped, so an audit killed
at any moment resumes where it stopped. A row that cannot be judged (its reference or candidate
does not load) is recorded with class UNJUDGED and the reason.
"""
from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from kverify.check import check
from kverify.corpus import iter_rows, row_sources
from kverify.errors import KverifyError, UsageError
from kverify.journal import Journal


def parse_shard(spec: str | None) -> tuple[int, int]:
    """"i/n" -> (i, n) with 0 <= i < n. Raises UsageError."""
    if not spec:
        return 0, 1
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise UsageError(f"--shard must look like i/n, got {spec!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise UsageError(f"--shard {spec}: need 0 <= i < n")
    return i, n


def run_audit(corpus: str, journal: str, shard: str | None = None, device: str | None = None, seed: int = 0,
              timeout: float = 120.0, limit: int | None = None, ids: list[str] | None = None) -> int:
    i, n = parse_shard(shard)
    rows = []
    for p, (_, r) in enumerate(iter_rows(corpus)):
        r.setdefault("id", f"{corpus}:row{p}")  # CUDA-L1 records carry no id: their position is one
        if p % n == i and (ids is None or r["id"] in ids):
            rows.append(r)
    rows = rows[:limit] if limit else rows
    j = Journal(journal)
    done = j.done()
    todo = [r for r in rows if r.get("id") not in done]
    counts = {"BROKEN": 0, "VIOLATION": 0, "CLEAN": 0, "UNJUDGED": 0}
    counts.update({k: v for k, v in j.counts().items() if k in counts})
    console = Console(stderr=True)
    cols = [TextColumn("[bold]audit"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[counts]}")]
    fmt = lambda: " ".join(f"{k} {v}" for k, v in counts.items())  # noqa: E731
    with Progress(*cols, console=console, transient=False) as bar:
        task = bar.add_task("audit", total=len(rows), completed=len(rows) - len(todo), rate="", counts=fmt())
        t0 = time.monotonic()
        for k, row in enumerate(todo, 1):
            t = time.monotonic()
            try:
                src = row_sources(corpus, row)
                report = check(src.reference, src.paths(corpus)[0], src.candidate, src.paths(corpus)[1], device=device,
                               seed=seed, timeout=timeout, tolerance=src.tolerance)
                klass, reason = report["class"], ""
            except KverifyError as e:
                report, klass, reason = None, "UNJUDGED", str(e)[:500]
            except Exception as e:  # noqa: BLE001 — kverify's own fault: record it and go on
                report, klass, reason = None, "UNJUDGED", f"kverify fault: {type(e).__name__}: {e}"[:500]
            j.record(row, report, klass, reason, round(time.monotonic() - t, 3))
            counts[klass] = counts.get(klass, 0) + 1
            bar.update(task, advance=1, counts=fmt(), rate=f"{k / (time.monotonic() - t0) * 60:.1f}/min")
    j.close()
    Console().print(f"journal {journal}: {sum(counts.values())} kernels — {fmt()}", soft_wrap=True)
    return 0
