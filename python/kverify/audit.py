"""`kverify audit`: the gates aimed at a corpus of accepted kernels, journalled and resumable.

Rows are taken in file order; `--shard i/n` keeps the rows whose position p has p % n == i
(deterministic, disjoint, covering). Rows already in the journal are skipped, so an audit killed
at any moment resumes where it stopped, losing only the kernels in flight.

Pipeline (``jobs`` > 1 or ``compile_jobs`` > 0): every row is first precompiled
(kverify.build.precompile), ``compile_jobs`` at once, ahead of and overlapped with the checks,
``jobs`` at once, which find the candidate's extensions built in the content-addressed cache.
Builds run at most ``2 * jobs`` rows ahead of the checks, so compilers do not take the CPU the
checks need. On a machine with several GPUs (``gpus``), each check process gets one
(``CUDA_VISIBLE_DEVICES``), the one with the fewest checks running. Each stage of each row runs in
its own process, so a process that dies is attributed to its row. Only this process writes the
journal.

Classes: CLEAN / VIOLATION / BROKEN from the gates (kverify.report); COMPILE_ERROR when an
extension of the candidate fails to build here (the row's reason holds the compiler's first error;
also when the candidate catches the failure and falls back to PyTorch: the kernel under audit then
never ran); UNJUDGED when the row cannot be judged (its reference or candidate does not load, or
kverify failed), with the reason.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import tempfile
import time
from collections import deque
from multiprocessing.connection import wait as mp_wait
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from kverify.errors import KverifyError, UsageError
from kverify.journal import CLASSES, Journal



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


def _failed_build(candidate_source: str) -> str:
    """kverify.build.failed_build of this candidate's recorded builds."""
    from kverify._internal.fastbuild import read_state
    from kverify.build import cache_dir, failed_build

    return failed_build(read_state(cache_dir(candidate_source)))


def check_row(corpus: str, row: dict, opts: dict) -> tuple[dict | None, str, str]:
    """(report or None, class, reason) for one row; never raises for a bad row. ``opts``: device,
    seed, timeout, load_timeout, gates (list or None) as for kverify.check.check. A row whose
    candidate failed to build is COMPILE_ERROR without a report, whatever its check found (in
    pipeline mode its check never runs), so the two modes journal the same."""
    from kverify.check import check
    from kverify.corpus import row_sources

    try:
        src = row_sources(corpus, row)
        ref_path, cand_path = src.paths(corpus)
        report = check(src.reference, ref_path, src.candidate, cand_path, tolerance=src.tolerance, **opts)
        klass, reason = report["class"], ""
    except KverifyError as e:
        report, klass, reason = None, "UNJUDGED", str(e)[:500]
    except Exception as e:  # noqa: BLE001 — kverify's own fault: record it and go on
        report, klass, reason = None, "UNJUDGED", f"kverify fault: {type(e).__name__}: {e}"[:500]
    if isinstance(row.get("candidate", row.get("custom_code")), str):
        failed = _failed_build(row.get("candidate", row.get("custom_code")))
        if failed:
            report, klass, reason = None, "COMPILE_ERROR", failed
    return report, klass, reason


def precompile_row(corpus: str, row: dict, opts: dict) -> tuple[str, str, float]:
    """(status, error, seconds) of kverify.build.precompile for one row; never raises."""
    from kverify.build import precompile
    from kverify.corpus import row_sources

    t = time.monotonic()
    try:
        src = row_sources(corpus, row)
        ref_path, cand_path = src.paths(corpus)
        p = precompile(src.reference, ref_path, src.candidate, cand_path, device=opts["device"], seed=opts["seed"],
                       timeout=opts["timeout"], load_timeout=opts["load_timeout"], tolerance=src.tolerance)
        return p.status, p.error, p.seconds
    except Exception as e:  # noqa: BLE001 — the check will meet the same problem and record it
        return "error", f"{type(e).__name__}: {e}"[:300], round(time.monotonic() - t, 3)


def _timed_check(*args) -> tuple:
    t = time.monotonic()
    return (*check_row(*args), time.monotonic() - t)


def run_audit(corpus: str, journal: str, shard: str | None = None, device: str | None = None, seed: int = 0,
              timeout: float = 120.0, limit: int | None = None, ids: list[str] | None = None,
              jobs: int = 1, compile_jobs: int = 0, gates: list[str] | None = None,
              load_timeout: float = 900.0, gpus: list[str] | None = None) -> int:
    """Audit the rows of ``corpus`` (this shard, not yet journalled) into ``journal``.

    Args:
        jobs: rows checked at once (each check runs its candidate in its own workers).
        compile_jobs: rows precompiled at once ahead of the checks; 0 = no separate compile step
            (each check builds its candidate when it first loads it).
        gpus: CUDA device ids (as CUDA_VISIBLE_DEVICES names them) to spread the check processes
            over; None or one id: every process sees the GPUs this process sees.
    Raises:
        UsageError: bad shard, jobs, or a file that is not a journal. LoadError: unreadable corpus.
    """
    from kverify.corpus import iter_rows

    if jobs < 1 or compile_jobs < 0:
        raise UsageError(f"--jobs must be >= 1 and --compile-jobs >= 0, got {jobs} and {compile_jobs}")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be >= 1, got {limit}")
    opts = {"device": device, "seed": seed, "timeout": timeout, "load_timeout": load_timeout, "gates": gates}
    i, n = parse_shard(shard)
    rows = []
    for p, (_, r) in enumerate(iter_rows(corpus)):
        r.setdefault("id", f"{corpus}:row{p}")  # CUDA-L1 records carry no id: their position is one
        if p % n == i and (ids is None or r["id"] in ids):
            rows.append(r)
    if ids is not None and not rows:
        raise UsageError(f"{corpus}: no row of shard {i}/{n} has the id(s) {', '.join(ids)}")
    rows = rows[:limit] if limit else rows
    j = Journal(journal)
    done = j.done()
    todo = [r for r in rows if r.get("id") not in done]
    counts = dict.fromkeys(CLASSES, 0)
    counts.update({k: v for k, v in j.counts().items() if k in counts})
    console = Console(stderr=True)
    cols = [TextColumn("[bold]audit"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[counts]}")]
    fmt = lambda: " ".join(f"{k} {v}" for k, v in counts.items() if v or k in CLASSES[:3])  # noqa: E731
    t0, finished = time.monotonic(), 0

    with Progress(*cols, console=console, transient=False) as bar:
        task = bar.add_task("audit", total=len(rows), completed=len(rows) - len(todo), rate="", counts=fmt())

        def record(row, report, klass, reason, seconds):
            nonlocal finished
            j.record(row, report, klass, reason, round(seconds, 3))
            counts[klass] = counts.get(klass, 0) + 1
            finished += 1
            bar.update(task, advance=1, counts=fmt(), rate=f"{finished / (time.monotonic() - t0) * 60:.1f}/min")

        if jobs == 1 and compile_jobs == 0:  # in this process, one row at a time
            for row in todo:
                t = time.monotonic()
                record(row, *check_row(corpus, row, opts), time.monotonic() - t)
        else:
            _pipeline(corpus, todo, opts, jobs, compile_jobs, record, gpus=gpus)
    j.close()
    Console().print(f"journal {journal}: {sum(counts.values())} kernels — {fmt()}", soft_wrap=True)
    return 0


def _task(stage: str, corpus: str, row: dict, opts: dict, out: str, gpu: str | None = None,
          serial: bool = False) -> None:
    """Body of one stage of one row in its own process: writes the result to ``out`` (JSON).
    ``gpu``: the only CUDA device this process and its workers see (set before CUDA starts).
    ``serial``: the check runs one worker at a time (KVERIFY_SERIAL_CHECK=1: no standard test or
    sanitizer beside the gates) — the re-run of a row that ran out of GPU memory beside others."""
    from kverify._internal.lifeline import exit_with_parent

    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    if serial:
        os.environ["KVERIFY_SERIAL_CHECK"] = "1"
    exit_with_parent()
    res = precompile_row(corpus, row, opts) if stage == "build" else _timed_check(corpus, row, opts)
    with open(out + ".tmp", "w") as f:
        json.dump(res, f)
    os.replace(out + ".tmp", out)


_OOM = ("out of memory", "outofmemoryerror", "cudaerrormemoryallocation")


def out_of_memory(report: dict | None, reason: str) -> bool:
    """True when the row's reason or any part of its report says the GPU ran out of memory."""
    text = (reason + (json.dumps(report) if report else "")).lower()
    return any(k in text for k in _OOM)


def pick_gpu(gpus: list[str] | None, busy: list[str | None]) -> str | None:
    """The GPU of ``gpus`` with the fewest entries in ``busy`` (the GPUs of the running checks),
    the first such in order; None when there is at most one GPU to choose from."""
    if not gpus or len(gpus) < 2:
        return None
    return min(gpus, key=lambda g: busy.count(g))


def _pipeline(corpus, todo, opts, jobs, compile_jobs, record, attempts: int = 2,
              gpus: list[str] | None = None) -> None:
    """Each stage of each row in its own process: precompiles (``compile_jobs`` at once) feed the
    checks (``jobs`` at once); ``record`` is called here, in the parent. A process that dies
    without a result (e.g. killed for memory) is retried; after ``attempts`` deaths the row is
    UNJUDGED with the exit status. A check that ran out of GPU memory while other rows shared the
    GPU is not recorded but run again at the end, alone and serial (one worker at a time, see
    _task); only what runs out of memory so is recorded so. Processes end with this one (lifeline)."""
    from kverify.sandbox import describe_exit

    ctx = multiprocessing.get_context("spawn")
    tmp = Path(tempfile.mkdtemp(prefix="kverify-audit-"))
    waiting = {"build": deque(todo) if compile_jobs else deque(), "check": deque() if compile_jobs else deque(todo),
               "alone": deque()}
    limit = {"build": compile_jobs, "check": jobs, "alone": 1}
    running: dict[int, tuple] = {}  # sentinel -> (process, stage, row, out file, gpu)
    built: dict[str, float] = {}
    deaths: dict[tuple, int] = {}
    n = 0
    try:
        while any(waiting.values()) or running:
            for stage in ("check", "build", "alone"):
                if stage == "alone" and (running or waiting["build"] or waiting["check"]):
                    continue  # rows that ran out of memory beside others run last, by themselves
                if stage != "alone" and any(r[1] == "alone" for r in running.values()):
                    continue
                while waiting[stage] and sum(r[1] == stage for r in running.values()) < limit[stage]:
                    if stage == "build" and len(waiting["check"]) + sum(r[1] == "build" for r in running.values()) >= 2 * jobs:
                        break  # far enough ahead of the checks
                    row = waiting[stage].popleft()
                    n += 1
                    out = str(tmp / f"{n}.json")
                    kind = "check" if stage == "alone" else stage
                    gpu = None if kind == "build" else pick_gpu(gpus, [r[4] for r in running.values()])
                    p = ctx.Process(target=_task, args=(kind, corpus, row, opts, out, gpu, stage == "alone"),
                                    daemon=True)
                    p.start()
                    running[p.sentinel] = (p, stage, row, out, gpu)
            for sentinel in mp_wait(list(running), timeout=1.0):
                p, stage, row, out, _ = running.pop(sentinel)
                p.join()
                try:
                    with open(out) as f:
                        res = json.load(f)
                except (OSError, ValueError):
                    k = (stage, row["id"])
                    deaths[k] = deaths.get(k, 0) + 1
                    if deaths[k] < attempts:
                        waiting[stage].append(row)
                    else:
                        record(row, None, "UNJUDGED", f"kverify's {stage} process for this row "
                                                      f"{describe_exit(p.exitcode)}, {attempts} times", 0.0)
                    continue
                if stage == "build":
                    status, error, seconds = res
                    if status == "compile_error":
                        record(row, None, "COMPILE_ERROR", error, seconds)
                    else:
                        built[row["id"]] = seconds
                        waiting["check"].append(row)
                else:
                    report, klass, reason, seconds = res
                    if stage == "check" and (jobs > 1 or compile_jobs) and out_of_memory(report, reason):
                        waiting["alone"].append(row)
                        continue
                    record(row, report, klass, reason, built.pop(row["id"], 0.0) + seconds)
    finally:
        for p, *_ in running.values():
            p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
