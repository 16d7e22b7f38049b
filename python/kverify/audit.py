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
kverify or the machine failed: a build that could not write its output, say), with the reason.

With a time limit (``time_limit``, ``--time-limit``) the audit starts no build or check that
cannot end within it (TimeLimit), stops early when nothing more can, and at the limit stops as an
interrupted one does: on a machine lent for a while, a row begun too late costs CPU the others
need and is lost at the end (H200, stop 21: 38 builds for 14 journalled rows in one call, and 7
checks killed in flight).

An interrupted audit (Ctrl-C, SIGTERM) logs the rows in flight, with their stage and seconds so
far; with KVERIFY_STACK_DIR set it first has them write their Python stacks there (STACK_ENV).
"""
from __future__ import annotations

import contextlib
import faulthandler
import json
import math
import multiprocessing
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import deque
from multiprocessing.connection import wait as mp_wait
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from kverify._internal import cpu_seconds, cuda_schedule, memory_wait
from kverify._internal.lifeline import start_whole
from kverify.errors import KverifyError, UsageError
from kverify.journal import (CLASSES, FAULT_PREFIX, OOM_CAP_TRY, OOM_NOTES, OOM_TRY, OOM_WHOLE_TRY, WHOLE_TRY, Journal,
                             cut_by_budget, not_the_row)

#: a folder: each check or build process of an audit writes its Python stacks (all threads) to a
#: file there when it gets SIGUSR1, and an interrupted audit sends SIGUSR1 to those still running
#: before it ends them (diagnosis of slow rows on a device; unset: no handler, no signal)
STACK_ENV = "KVERIFY_STACK_DIR"


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


#: In ``--journal``, replaced by a shard's "i-of-n": one journal per shard when ``--shard`` names several
SHARD_FIELD = "{shard}"


def parse_shards(spec: str | None) -> list[tuple[int, int]]:
    """"i/n" or "i/n,j/n,..." -> [(i, n), ...] in the order given (None: [(0, 1)], the whole corpus).
    Every shard splits the corpus the same way (one n) and none is named twice. Raises UsageError."""
    if not spec:
        return [(0, 1)]
    parts = [s.strip() for s in spec.split(",")]
    if not all(parts):  # "0/2," or "0/2,,1/2": a shard left out by a typo is not dropped without a word
        raise UsageError(f"--shard must look like i/n or i/n,j/n,..., got {spec!r}")
    shards = [parse_shard(s) for s in parts]
    if len({n for _, n in shards}) > 1:
        raise UsageError(f"--shard {spec}: the shards must split the corpus the same way (one n)")
    if len({i for i, _ in shards}) < len(shards):
        raise UsageError(f"--shard {spec}: a shard is named twice")
    return shards


def shard_journal(journal: str, i: int, n: int, several: bool) -> str:
    """The journal of shard ``i``/``n``: ``journal`` with SHARD_FIELD replaced by "i-of-n". Raises
    UsageError when ``several`` shards are audited and ``journal`` has no SHARD_FIELD (they would
    share one journal, which `kverify merge` could not split again)."""
    if SHARD_FIELD in journal:
        return journal.replace(SHARD_FIELD, f"{i}-of-{n}")
    if several:
        raise UsageError(f"--journal {journal}: --shard names several shards, so the journal path needs "
                         f"{SHARD_FIELD} (replaced by each shard's i-of-n, e.g. audit_shard_{SHARD_FIELD}.sqlite)")
    return journal


def _own_shard_only(j: Journal, path: str, i: int, n: int, place: dict[str, int]) -> None:
    """A journal named by a SHARD_FIELD path holds rows of its own shard only: raise UsageError
    when ``j`` holds a row the corpus puts in another shard of ``n`` (a journal copied onto another
    shard's file would otherwise resume silently and mix both shards' rows)."""
    foreign = sorted(x for x in j.done() if x in place and place[x] % n != i)
    if foreign:
        x = foreign[0]
        raise UsageError(f"{path}: holds {len(foreign)} row(s) of another shard ({x!r} is in shard "
                         f"{place[x] % n}/{n}), though its name says shard {i}/{n}: was it copied from another "
                         f"shard's journal? Use the right file (or, to keep several shards in one journal, a path "
                         f"without {SHARD_FIELD} and one shard per run; `kverify merge` joins shard journals)")


def _failed_build(candidate_source: str, caught: bool) -> str:
    """kverify.build.failed_build of this candidate's recorded builds (``caught``: it loaded anyway)."""
    from kverify._internal.fastbuild import read_state
    from kverify.build import cache_dir, failed_build

    return failed_build(read_state(cache_dir(candidate_source)), caught)


#: the reason of a row journalled UNJUDGED because its row budget cut gates short and none failed
BUDGET_REASON = "row budget spent"


def budget_cut_gates(report: dict) -> list[str]:
    """Ids of the gates (and "standard") of ``report`` that a check budget cut short
    (kverify.journal.cut_by_budget)."""
    std = report.get("standard") or {}
    return ([g["gate"] for g in report["gates"] if cut_by_budget(g["verdict"], g["summary"])]
            + (["standard"] if cut_by_budget(std.get("verdict", ""), std.get("summary")) else []))


def check_row(corpus: str, row: dict, opts: dict) -> tuple[dict | None, str, str]:
    """(report or None, class, reason) for one row; never raises for a bad row. ``opts``: device,
    seed, timeout, load_timeout, gates (list or None), budget as for kverify.check.check. A row whose
    candidate failed to build is COMPILE_ERROR without a report, whatever its check found (in
    pipeline mode its check never runs), so the two modes journal the same. A row that no gate
    failed but whose budget cut gates short is UNJUDGED (BUDGET_REASON), with its report: CLEAN
    needs every gate established."""
    from kverify.check import check
    from kverify.corpus import row_sources

    try:
        src = row_sources(corpus, row)
        ref_path, cand_path = src.paths(corpus)
        kw = {k: v for k, v in opts.items() if k != "threads"}  # threads: the process's env (_task)
        report = check(src.reference, ref_path, src.candidate, cand_path, tolerance=src.tolerance, **kw)
        klass, reason = report["class"], ""
        cut = budget_cut_gates(report)
        if cut and klass == "CLEAN":  # nothing failed, but not everything was established: not CLEAN
            klass, reason = "UNJUDGED", f"{BUDGET_REASON}: {', '.join(cut)} not established"
    except KverifyError as e:
        report, klass, reason = None, "UNJUDGED", str(e)[:500]
    except Exception as e:  # noqa: BLE001 — kverify's own fault: record it and go on
        report, klass, reason = None, "UNJUDGED", f"{FAULT_PREFIX}: {type(e).__name__}: {e}"[:500]
    if isinstance(row.get("candidate", row.get("custom_code")), str):
        # the check loaded the candidate and its own-shape call returned: it caught its failed build
        # (the rule of kverify.build.precompile, so that both modes journal the same)
        g01 = next((g for g in report["gates"] if g["gate"] == "G01"), {}) if report else {}
        caught = report is not None and g01.get("verdict") not in ("CRASH", "TIMEOUT") \
            and not (g01.get("evidence") or {}).get("exception")
        failed = _failed_build(row.get("candidate", row.get("custom_code")), caught=caught)
        if failed:  # a build the machine failed (FAULT_PREFIX, kverify.build.failed_build) is not judged
            report, klass, reason = None, ("UNJUDGED" if failed.startswith(FAULT_PREFIX) else "COMPILE_ERROR"), failed
    return report, klass, reason


def precompile_row(corpus: str, row: dict, opts: dict) -> tuple[str, str, float, int, int, int]:
    """(status, error, seconds, input bytes, parameter bytes, output bytes) of
    kverify.build.precompile for one row; never raises."""
    from kverify.build import precompile
    from kverify.corpus import row_sources

    t = time.monotonic()
    try:
        src = row_sources(corpus, row)
        ref_path, cand_path = src.paths(corpus)
        p = precompile(src.reference, ref_path, src.candidate, cand_path, device=opts["device"], seed=opts["seed"],
                       timeout=opts["timeout"], load_timeout=opts["load_timeout"], tolerance=src.tolerance)
        return p.status, p.error, p.seconds, p.input_bytes, p.param_bytes, p.output_bytes
    except Exception as e:  # noqa: BLE001 — the check will meet the same problem and record it
        return "error", f"{type(e).__name__}: {e}"[:300], round(time.monotonic() - t, 3), 0, 0, 0


def cpu_threads(jobs: int, compile_jobs: int, cpus: int | None = None) -> int:
    """CPU threads for each process of an audit's checks and builds (OMP_NUM_THREADS, unless set):
    the cores shared by the ~4 busy processes of each of ``jobs`` checks and the ``compile_jobs``
    builds, at least 1. ``cpus``: default the cores this process may run on (its affinity)."""
    cpus = cpus or len(os.sched_getaffinity(0)) or 1  # the cores this process may run on
    return max(1, cpus // (4 * jobs + compile_jobs))


def _version() -> str:
    """kverify's version (package metadata; "unknown" when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kverify")
    except PackageNotFoundError:
        return "unknown"


def _timed_check(*args) -> tuple:
    t = time.monotonic()
    return (*check_row(*args), time.monotonic() - t)


def run_audit(corpus: str, journal: str, shard: str | None = None, device: str | None = None, seed: int = 0,
              timeout: float = 120.0, limit: int | None = None, ids: list[str] | None = None,
              jobs: int = 1, compile_jobs: int = 0, gates: list[str] | None = None,
              load_timeout: float = 900.0, gpus: list[str] | None = None, gpu_gib: float = 0.0,
              redo: list[str] | None = None, redo_faults: bool = False, row_budget: float | None = None,
              redo_budget: bool = False, redo_stale: bool = False, time_limit: float | None = None,
              redo_elsewhere: str | None = None, redo_if_needed: list[str] | None = None) -> int:
    """Audit the rows of ``corpus`` (this shard, not yet journalled) into ``journal``.

    Args:
        shard: "i/n" (rows p with p % n == i), or several, "i/n,j/n,...", audited by one scheduler
            in that order, each into its own journal: ``journal`` then contains SHARD_FIELD, replaced
            by the shard's "i-of-n" (shard_journal). One run over several shards keeps the GPUs busy
            where one shard's last rows would leave them idle (H200 audit, stop 22: a shard's last
            2 rows took the last 4 minutes of a 10-minute call).
        jobs: rows checked at once (each check runs its candidate in its own workers).
        compile_jobs: rows precompiled at once ahead of the checks; 0 = no separate compile step
            (each check builds its candidate when it first loads it).
        gpus: CUDA device ids (as CUDA_VISIBLE_DEVICES names them, in PCI bus order as nvidia-smi
            numbers them) to spread the build and check processes over, each seeing only its own
            (CUDA_DEVICE_ORDER=PCI_BUS_ID unless set); None: every process sees the GPUs this one sees.
        gpu_gib: base GiB of GPU memory to expect per check (check_need_mib adds INPUT_FACTOR x
            its inputs) when deciding whether a GPU has room for one more (gpu_with_room); 0: no
            memory check, only ``jobs``.
        redo: journalled row ids to check again (their records move to the journal's
            ``forgotten`` table first, Journal.forget); ``redo_faults``: the same for every row
            journalled UNJUDGED by a fault of kverify's own (reason "kverify fault: ..."), e.g.
            after fixing that fault; ``redo_budget``: every row with a gate a row budget cut short
            (Journal.budget_cut), e.g. in a longer run.
        row_budget: seconds for each row's candidate calls (kverify.check.check's budget; None: no
            limit): gates it cuts short are ERROR, a row that nothing failed is then UNJUDGED
            (check_row), and the row is journalled, so a run of bounded length always moves on;
            ``redo_budget`` such rows in a longer run to judge them fully.
            ``redo_stale``: every row whose report was judged by older rules than this kverify's
            (kverify.check.RULES, Journal.stale). ``redo_elsewhere``: the name of this run's GPU
            (as kverify.check.judged_on gives it, e.g. "NVIDIA H200"; "cpu" on the CPU): every
            row judged on another one (Journal.judged_elsewhere), e.g. to have a whole audit
            judged on one GPU model; a run on another machine is refused (it would judge them
            elsewhere again, and the same command on the named GPU judges them no third time).
            ``redo_if_needed``: journalled row ids to check again where that could change them
            (Journal.needs_redo: no report, older rules, a gate record that is a fault of kverify's
            or the GPU's); the others are named on stderr with why, and left as they are.
        time_limit: seconds this call may take from the start of its first row (None: no limit):
            no row's build or check starts that would not end within it by this run's estimates
            (TimeLimit), and at the limit the rows in flight are ended and logged, not journalled
            (the same command resumes). Returns 0 then too; the log says it stopped. One row at a
            time (``jobs`` 1, no ``compile_jobs``) the row in flight runs in this process and
            ends on its own: the limit only keeps the next one from starting.
    Raises:
        UsageError: bad shard, jobs, a file that is not a journal, a --redo or --redo-if-needed
            id outside this run's rows (naming the shard that holds it) or not journalled, a
            --redo-elsewhere GPU this run does not judge on. LoadError: unreadable corpus.
    """
    from kverify.check import resolve_device
    from kverify.corpus import identified_rows

    try:  # its check processes apply it (_task): a bad value must stop the audit, not every row
        cuda_schedule.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None
    if jobs < 1 or compile_jobs < 0:
        raise UsageError(f"--jobs must be >= 1 and --compile-jobs >= 0, got {jobs} and {compile_jobs}")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be >= 1, got {limit}")
    if row_budget is not None and not (row_budget > 0 and math.isfinite(row_budget)):
        raise UsageError(f"--row-budget must be a positive number of seconds, got {row_budget}")
    if time_limit is not None and not (time_limit > 0 and math.isfinite(time_limit)):
        raise UsageError(f"--time-limit must be a positive number of seconds, got {time_limit}")
    dev = resolve_device(device)
    names = gpu_names() if dev == "cuda" else None  # once: the runs records and --redo-elsewhere's check
    if redo_elsewhere is not None:
        here = sorted(machine_names(dev, gpus, names))
        if here != [redo_elsewhere]:
            raise UsageError(f"--redo-elsewhere {redo_elsewhere!r}: this run judges on {' and '.join(map(repr, here))}"
                             " (as meta.judged_on and the report's 'Judged on' line name machines): give that name "
                             "exactly, or run on a machine with that GPU")
    opts = {"device": device, "seed": seed, "timeout": timeout, "load_timeout": load_timeout, "gates": gates,
            "budget": row_budget, "threads": cpu_threads(jobs, compile_jobs)}
    shards = parse_shards(shard)
    n = shards[0][1]
    spec = ",".join(f"{i}/{n}" for i, _ in shards)
    rank = {i: k for k, (i, _) in enumerate(shards)}  # the order the shards were named in
    rows = []
    shard_of: dict[str, int] = {}  # row id -> its shard's i
    place: dict[str, int] = {}  # every row id -> its position (its shard: place % n)
    line_of: dict[str, int] = {}  # row id -> its line in the corpus file
    for p, line, r in identified_rows(corpus):
        place[r["id"]] = p
        line_of[r["id"]] = line
        if p % n in rank and (ids is None or r["id"] in ids):
            rows.append(r)
            shard_of[r["id"]] = p % n
    if not place:  # before the journal is made: nothing to audit is a mistake, not an empty result
        raise UsageError(f"{corpus}: no rows (an empty corpus)")
    if ids is not None and not rows:
        raise UsageError(f"{corpus}: no row of shard {spec} has the id(s) {', '.join(ids)}")
    rows.sort(key=lambda r: rank[shard_of[r["id"]]])  # shard by shard, corpus order within each
    rows = rows[:limit] if limit else rows
    paths = {i: shard_journal(str(journal), i, n, len(shards) > 1) for i, _ in shards}
    if len(set(paths.values())) < len(paths):
        raise UsageError(f"--journal {journal}: two shards would share one journal")
    selected = {r["id"] for r in rows}
    for flag, named in (("--redo", redo), ("--redo-if-needed", redo_if_needed)):
        outside = list(dict.fromkeys(x for x in named or [] if x not in selected))
        if outside:  # forgotten but never checked again: the row would just be gone from the journal
            where = "; ".join(f"{x!r} is " + ("no row of the corpus" if x not in place
                                               else f"in shard {place[x] % n}/{n}" if place[x] % n not in rank
                                               else "not an --id of it" if ids is not None and x not in ids
                                               else "past --limit") for x in outside)
            raise UsageError(f"{flag} {', '.join(map(repr, outside))}: not among the rows this run audits "
                             f"(shard {spec}{', --limit' if limit else ''}{', --id' if ids else ''}): {where}")
    new = [p for p in paths.values() if not Path(p).exists()]  # made by this run: removed if it stops here
    journals: dict[int, Journal] = {}
    try:
        for i, path in paths.items():
            journals[i] = Journal(path)
            if SHARD_FIELD in str(journal):
                _own_shard_only(journals[i], path, i, n, place)
        again_of, pending, left, options = _check_journals(
            journals, paths, shard_of, selected, n, redo, redo_faults, redo_budget, redo_stale, redo_elsewhere,
            redo_if_needed, dev, names, seed, gates, timeout, load_timeout, row_budget, jobs, compile_jobs)
        _same_rows(journals, paths, corpus, rows, line_of, again_of)
    except UsageError:
        for j in journals.values():
            j.close()
        for made in new:  # an empty journal left behind would look like a begun audit
            for f in (made, made + "-wal", made + "-shm"):
                Path(f).unlink(missing_ok=True)
        raise
    for i, j in journals.items():
        j.begin_run(options[i])
    again = sorted(x for xs in again_of.values() for x in xs)
    for x, why in left.items():  # every id --redo-if-needed leaves to others, and why (a misspelt one is refused)
        Console(stderr=True).print(f"--redo-if-needed: {x!r}: {why}", soft_wrap=True, markup=False, highlight=False)
    _run_journals(corpus, rows, shard_of, journals, paths, again_of, again, pending, opts, jobs, compile_jobs,
                  gpus, gpu_gib, time_limit,
                  any((redo, redo_faults, redo_budget, redo_stale, redo_elsewhere, redo_if_needed)))
    return 0


#: _same_rows names every changed row in the --redo it suggests up to this many
REDO_LIST_MAX = 20


def _same_rows(journals, paths, corpus, rows, line_of, again_of) -> None:
    """Raise UsageError when a journal holds a row of this run judged from a corpus row with another
    content (kverify.corpus.row_digest; Journal.changed): a resumed audit would skip it and keep a
    verdict on other code (another corpus, or a row edited since). Rows this run checks again
    (``again_of``, --redo) and rows journalled before the digests table are not compared."""
    from kverify.corpus import row_digest

    now = {r["id"]: row_digest(r) for r in rows}
    for i, j in journals.items():
        changed = [x for x in j.changed(now) if x not in again_of.get(i, [])]
        if changed:
            how = (f"--redo {','.join(changed)} to judge {'it' if len(changed) == 1 else 'them'} again"
                   if len(changed) <= REDO_LIST_MAX else f"{len(changed)} rows changed: use another journal")
            raise UsageError(not_the_row(f"{corpus}:{line_of[changed[0]]}", changed, paths[i],
                                         ": another corpus, or the row was edited since",
                                         f"; use another journal, or {how}"))


def _check_journals(journals, paths, shard_of, selected, n, redo, redo_faults, redo_budget, redo_stale, redo_elsewhere,
                    redo_if_needed, dev, names, seed, gates, timeout, load_timeout, row_budget, jobs, compile_jobs):
    """run_audit's checks of every journal before any is written: the rows each run takes out to
    check again (``again_of``, shard -> {id: the options that take it out, as its ``forgotten.why``}),
    the pending ones, what --redo-if-needed does with each named id it does not take out itself
    ({id: what and why}), and each journal's
    run options (``names``: gpu_names(), for its runs record).
    Raises UsageError (a --redo or --redo-if-needed id not journalled, options that differ from
    the journal's)."""
    from kverify.check import RULES
    from kverify.gates import GATES

    again_of: dict[int, dict[str, str]] = {}
    pending: set[str] = set()
    left: dict[str, str] = {}
    for i, j in journals.items():
        mine = {x for x in selected if shard_of[x] == i}
        held = j.pending() & mine  # forgotten by an earlier --redo that stopped before them: to do anyway
        named = [x for x in redo_if_needed or [] if x in mine]
        unknown = sorted(set(named) - j.done() - held)
        if unknown:
            raise UsageError(f"{paths[i]}: --redo-if-needed: no journalled row has the id(s) {', '.join(unknown)}")
        needed, kept_as_is = j.needs_redo(named, RULES)
        why: dict[str, list[str]] = {}  # row id -> the options that take it out (its forgotten.why)
        for flag, ids in (("--redo", redo or []), ("--redo-if-needed", needed),
                          ("--redo-faults", j.faults() if redo_faults else []),
                          ("--redo-budget", j.budget_cut() if redo_budget else []),
                          ("--redo-stale", j.stale(RULES) if redo_stale else []),
                          (f"--redo-elsewhere {redo_elsewhere}", j.judged_elsewhere(redo_elsewhere) if redo_elsewhere
                           else [])):
            for x in dict.fromkeys(ids):
                if x in mine:
                    why.setdefault(x, []).append(flag)
        again_of[i] = {x: "kverify audit " + " ".join(why[x]) for x in sorted(set(why) - held)}
        # what --redo-if-needed does with each id it does not take out itself, and why
        left.update({x: "taken out by an earlier --redo and not judged since: judged in this run, as such rows are"
                     for x in named if x in held})
        left.update({x: f"{w}: judged again, as {again_of[i][x]} takes it out" if x in again_of[i]
                     else f"{w}: not judged again (--redo judges it again whatever; --redo-elsewhere GPU: the "
                          "rows judged on another GPU)" for x, w in kept_as_is.items()})
        pending |= held
        missing = sorted(set(again_of[i]) - j.done())
        if missing:
            raise UsageError(f"{paths[i]}: --redo: no journalled row has the id(s) {', '.join(missing)}")
    options = {i: {"device": dev, "seed": seed, "gates": list(gates or GATES), "shard": f"{i}/{n}",
                   "timeout": timeout, "load_timeout": load_timeout, "row_budget": row_budget, "jobs": jobs,
                   "compile_jobs": compile_jobs, "kverify": _version(), "gpu_names": names} for i in journals}
    for i, j in journals.items():
        j.check_options(options[i])
    return again_of, pending, left, options


def _run_journals(corpus, rows, shard_of, journals, paths, again_of, again, pending, opts, jobs, compile_jobs,
                  gpus, gpu_gib, time_limit, redoing) -> None:
    """run_audit once its journals are checked and begun: take the --redo rows out, check every row
    not journalled yet (those to check again first), and record each in its shard's journal.
    ``redoing``: a --redo option was given (the log says how many rows it takes out)."""
    if redoing:
        Console(stderr=True).print(f"checking again {len(again)} journalled row(s) (--redo...)", soft_wrap=True,
                                   markup=False, highlight=False)
    for i, j in journals.items():
        for why in sorted(set(again_of[i].values())):  # each row with the options that took it out
            j.forget([x for x, w in again_of[i].items() if w == why], why)
    done = {i: j.done() for i, j in journals.items()}
    todo = [r for r in rows if r["id"] not in done[shard_of[r["id"]]]]
    # the rows to check again first (also those an earlier --redo forgot and did not reach): a run
    # that stops before them leaves them out of the journal until one reaches them
    first = set(again) | pending
    # rows that earlier runs started (or set aside to run alone) and did not finish go after the
    # others, the fewest tries first (Journal.note_try): each run journals what it can finish
    tries = {k: v for j in journals.values() for k, v in j.tries().items()}
    todo.sort(key=lambda r: (tries.get(r["id"], 0), r["id"] not in first))
    late = sum(r["id"] in tries for r in todo)
    held = [x for x in pending if x not in tries]  # what the log says comes first comes first (a fresh user's find)
    if held:
        Console(stderr=True).print(f"{len(held)} row(s) an earlier --redo took out and did not check again "
                                   "are checked first", soft_wrap=True, markup=False, highlight=False)
    if late:
        tried_held = sum(x in tries for x in pending)
        Console(stderr=True).print(f"{late} row(s) that earlier runs tried and did not finish are checked after the "
                                   "others" + (f" ({tried_held} of them taken out by an earlier --redo)" if tried_held
                                               else ""), soft_wrap=True, markup=False, highlight=False)
    for i, path in paths.items():  # a resumed journal: say what is skipped, so a rerun is not mistaken for a no-op
        mine = sum(shard_of[r["id"]] == i for r in rows)
        left = sum(shard_of[r["id"]] == i for r in todo)
        if left < mine:
            Console(stderr=True).print(f"{path}: {mine - left} of this run's {mine} row(s) already journalled, "
                                       f"skipped; {left} to check", soft_wrap=True, markup=False, highlight=False)
    counts = dict.fromkeys(CLASSES, 0)
    for j in journals.values():
        for k, v in j.counts().items():
            if k in counts:
                counts[k] += v
    console = Console(stderr=True)
    cols = [TextColumn("[bold]audit"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[counts]}")]
    fmt = lambda: " ".join(f"{k} {v}" for k, v in counts.items() if v or k in CLASSES[:3])  # noqa: E731
    t0, finished = time.monotonic(), 0

    with Progress(*cols, console=console, transient=False) as bar:
        task = bar.add_task("audit", total=len(rows), completed=len(rows) - len(todo), rate="", counts=fmt())

        def log(msg: str) -> None:  # one line per event, above the bar (a plain line in a log file)
            bar.console.print(f"{time.monotonic() - t0:7.1f}s {msg}", soft_wrap=True, markup=False, highlight=False)

        tried: set[str] = set()

        def note_try(row, what: str) -> None:  # once per row and run: its check started, or it waits to run alone
            if what in OOM_NOTES:  # beside that once: why it is not journalled yet (kverify report --corpus)
                journals[shard_of[row["id"]]].note_try(row["id"], what)
            elif row["id"] not in tried:
                tried.add(row["id"])
                journals[shard_of[row["id"]]].note_try(row["id"], what)

        def record(row, report, klass, reason, seconds, note: str = ""):
            nonlocal finished
            journals[shard_of[row["id"]]].record(row, report, klass, reason, round(seconds, 3))
            counts[klass] = counts.get(klass, 0) + 1
            finished += 1
            bar.update(task, advance=1, counts=fmt(), rate=f"{finished / (time.monotonic() - t0) * 60:.1f}/min")
            log(row_line(row, report, klass, reason, seconds) + (f"  {note}" if note else ""))

        stacks = os.environ.get(STACK_ENV)
        if stacks and not (os.path.isdir(stacks) and os.access(stacks, os.W_OK)):
            log(f"{STACK_ENV}={stacks} is not a writable folder: no stack dumps of interrupted rows")
        limit = TimeLimit(time_limit, jobs) if time_limit is not None else None
        serial = set().union(*(j.serial() for j in journals.values()))
        if jobs == 1 and compile_jobs == 0:  # in this process, one row at a time
            for k, row in enumerate(todo):
                if limit is not None and not limit.may_check(idle=True):
                    log(limit.stop_line(len(todo) - k))
                    break
                t, cpu = time.monotonic(), cpu_seconds()
                note_try(row, "check started")
                with _serial_check(row["id"] in serial):  # ran out with a GPU to itself before (Journal.serial)
                    res = check_row(corpus, row, opts)
                seconds = time.monotonic() - t
                if limit is not None:
                    limit.note("check", seconds)
                record(row, *res, seconds, note=f"[check {seconds:.0f}s, cpu {cpu_seconds() - cpu:.0f}s]")
        else:
            capped = set().union(*(j.capped() for j in journals.values()))
            _pipeline(corpus, todo, opts, jobs, compile_jobs, record, gpus=gpus, log=log, gpu_gib=gpu_gib,
                      time_limit=limit, note_try=note_try, capped_before=capped, serial_before=serial)
    for i, j in journals.items():
        mine = dict.fromkeys(CLASSES, 0)
        mine.update({k: v for k, v in j.counts().items() if k in mine})
        j.close()
        Console().print(f"journal {paths[i]}: {sum(mine.values())} kernels — "
                        + " ".join(f"{k} {v}" for k, v in mine.items() if v or k in CLASSES[:3]), soft_wrap=True)


@contextlib.contextmanager
def _serial_check(on: bool):
    """KVERIFY_SERIAL_CHECK=1 (one worker at a time: kverify.check) while the block runs, where ``on``;
    the variable as it was afterwards. For a row checked in this process (--jobs 1 --compile-jobs 0)
    that an earlier run saw run out of GPU memory with a GPU to itself (Journal.serial), as _task
    does for the scheduler's serial checks."""
    if not on:
        yield
        return
    was = os.environ.get("KVERIFY_SERIAL_CHECK")
    os.environ["KVERIFY_SERIAL_CHECK"] = "1"
    try:
        yield
    finally:
        if was is None:
            os.environ.pop("KVERIFY_SERIAL_CHECK", None)
        else:
            os.environ["KVERIFY_SERIAL_CHECK"] = was


def row_line(row: dict, report: dict | None, klass: str, reason: str, seconds: float) -> str:
    """One log line for a journalled row: class, seconds, id, then the standard test's verdict and
    the gates that did not pass grouped by verdict ("FAIL G03,G12; ERROR G11"), or the reason."""
    if report:
        bad: dict[str, list[str]] = {}
        for g in report["gates"]:
            if g["verdict"] not in ("PASS", "N/A", "UNSUPPORTED"):
                bad.setdefault(g["verdict"], []).append(g["gate"])
        what = "; ".join(["standard " + report["standard"]["verdict"]] + [f"{v} {','.join(gs)}" for v, gs in bad.items()])
        if klass == "UNJUDGED" and reason:  # judged in part (a row budget): say why it is not CLEAN
            what += f"  ({reason.splitlines()[0][:120]})"
    else:
        what = reason.splitlines()[0][:120] if reason else ""
    return f"{klass:<13} {seconds:7.1f}s {row.get('id')}  {what}"


#: CPUs per compute-sanitizer run in an audit (KVERIFY_SANITIZER_CPUS, when not set already)
SANITIZER_CPUS = 2
#: Seconds a GPU audit's check process may pause, over all its retries, for GPU memory that other
#: checks hold (kverify._internal.memory_wait, KVERIFY_OOM_WAIT_S when not set already; not for a
#: row re-run alone serially) before an out-of-memory error stands and the row is deferred to run
#: alone. Small beside a row budget (--row-budget, 240 s in the device runs): the pauses come out of
#: the same budget as the later gates' runs.
OOM_WAIT_S = 30


def _task(stage: str, corpus: str, row: dict, opts: dict, out: str, gpu: str | None = None,
          serial: bool = False, gpu_cap_mib: int | None = None) -> None:
    """Body of one stage of one row in its own process: writes the result to ``out`` (JSON).
    ``gpu``: the only CUDA device this process and its workers see (set before CUDA starts).
    ``serial``: the check runs one worker at a time (KVERIFY_SERIAL_CHECK=1: no standard test or
    sanitizer beside the gates) — the re-run of a row that ran out of GPU memory beside others.
    ``gpu_cap_mib``: the most GPU memory (MiB) this check's own process may hold on a CUDA audit
    (check_cap_mib; kverify._internal.memory_wait.cap_process), None: no cap. A check's result on a
    CUDA audit ends with memory_wait.gpu_oom_status() (its own process's out-of-memory errors)."""
    from kverify._internal.lifeline import exit_with_parent

    # the sandboxes' folders go under the audit's own temporary folder (out's), which the audit
    # removes when it ends: a check it kills mid-row (an interrupt, a deadline) leaves nothing
    os.environ["KVERIFY_WORKDIR_ROOT"] = str(Path(out).parent)

    if gpu is not None:
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # the ids nvidia-smi reports (gpu_memory_mib)
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    if serial:
        os.environ["KVERIFY_SERIAL_CHECK"] = "1"
    # many processes share the GPUs in an audit: wait for them without spinning on a core
    # (kverify._internal.cuda_schedule), and give cached memory back after each job (worker);
    # its workers inherit both
    os.environ.setdefault(cuda_schedule.ENV, "block")
    os.environ.setdefault("KVERIFY_EMPTY_CACHE", "1")
    if opts.get("device") == "cuda" and not serial:  # out of GPU memory beside other checks: wait a
        os.environ.setdefault(memory_wait.ENV, str(OOM_WAIT_S))  # while first (alone, nothing frees it)
    # ~9 processes per check and several checks at once: torch's CPU thread pools (one thread per
    # core each by default) would oversubscribe the cores many times over (opts["threads"])
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(opts.get("threads", 1)))
    # and each compute-sanitizer run (G11) on at most SANITIZER_CPUS cores: racecheck's analysis
    # threads took most of the machine for minutes on a few rows (kverify.gates.g11_memory_safety.CPUS_ENV)
    os.environ.setdefault("KVERIFY_SANITIZER_CPUS", str(SANITIZER_CPUS))
    if opts.get("device") == "cuda":
        cuda_schedule.apply()
        if stage == "check" and gpu_cap_mib is not None:
            memory_wait.cap_process(gpu_cap_mib)
    stacks = os.environ.get(STACK_ENV)
    dump = Path(stacks) / f"{stage}-{os.getpid()}.txt" if stacks else None
    if dump is not None:  # diagnosis: SIGUSR1 writes this process's Python stacks (all threads) there
        try:
            f = open(dump, "w")  # noqa: SIM115 — open until the process ends
            f.write(f"{stage} of {row.get('id')}\n")
            f.flush()
            faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
        except OSError:  # a folder that cannot be written: no dump, the row is checked all the same
            dump = None
    exit_with_parent()
    res = precompile_row(corpus, row, opts) if stage == "build" else _timed_check(corpus, row, opts)
    if dump is not None:  # finished: nothing to diagnose
        faulthandler.unregister(signal.SIGUSR1)
        dump.unlink(missing_ok=True)
    res = (*res, cpu_seconds())  # this row's processes: the check or build and everything it waited for
    if stage == "check" and opts.get("device") == "cuda":
        # GPU out-of-memory errors of its own process, whatever the report (or a load error) says
        res = (*res, memory_wait.gpu_oom_status())
    with open(out + ".tmp", "w") as f:
        json.dump(res, f)
    os.replace(out + ".tmp", out)


def oom_where(report: dict | None, reason: str) -> str:
    """Where the row's reason or report says the GPU ran out of memory (memory_wait.MARKS):
    "reason", a gate id, or "standard" (comma-separated), "" when nowhere."""
    def hit(x) -> bool:
        return memory_wait.says_oom(x if isinstance(x, str) else json.dumps(x))

    where = ["reason"] if hit(reason) else []
    for g in (report or {}).get("gates", []):
        where += [g.get("gate", "?")] if hit(g) else []
    if report and hit(report.get("standard", {})):
        where.append("standard")
    if report and not where and hit(report):
        where.append("report")
    return ",".join(where)


def oom_detail(report: dict | None, reason: str, limit: int = 200) -> str:
    """What the first part oom_where names says (the reason, else that gate's or the standard
    test's summary), on one line and cut to ``limit`` characters, for the audit log's line about a
    row set aside: whether the check's own oracle run (G05's planning: "ran out of memory while
    planning") or the candidate's worker ran out. "" when nothing ran out of memory, or when the
    part's summary does not say so itself (the mark only in its evidence: nothing to tell)."""
    where = oom_where(report, reason).split(",")[0]
    if where == "reason":
        text = reason
    elif where == "standard":
        std = (report or {}).get("standard")
        text = std.get("summary") if isinstance(std, dict) else ""
    else:
        text = next((g.get("summary") for g in (report or {}).get("gates", [])
                     if isinstance(g, dict) and g.get("gate") == where), "")
    text = " ".join(str(text or "").split())
    if not memory_wait.says_oom(text):
        return ""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def pick_gpu(gpus: list[str] | None, busy: list[str | None]) -> str | None:
    """The GPU of ``gpus`` with the fewest entries in ``busy`` (the GPUs of the running processes
    of one stage), the first such in order; None when there is no GPU to choose from."""
    if not gpus:
        return None
    return min(gpus, key=lambda g: busy.count(g))


#: A check's GPU memory, estimated from its problem's tensor inputs at the problem's own shape:
#: the parent's fp64 oracle copies (2x an fp32 input), G05's variants (up to BUDGET_FACTOR = 2 times
#: the inputs, with their fp64 oracle), and the workers that run beside each other (gates, gates-b,
#: G05, standard: each holds inputs and outputs) -- about 12x the inputs, plus a base for the CUDA
#: contexts of its ~9 processes and small problems (``--gpu-gib``). A guess for scheduling, not a limit.
INPUT_FACTOR = 12


#: A row expected to need more than this share of a GPU's memory (check_need_mib) is booked for
#: the whole GPU: it starts only on an idle GPU and no other check joins it there (H200 audit,
#: stop 17: two rows of 8 GiB inputs shared a GPU, filled its 141 GiB, and the rows beside them
#: ran out of memory).
EXCLUSIVE_SHARE = 0.5


#: The same for the reference model's parameters and buffers (fp32 bytes): a copy in most of the
#: check's ~9 processes (the reference in the parent, the standard test's and the candidates'
#: models) and the parent's fp64 copy.
PARAM_FACTOR = 12


#: A check on a GPU that other checks share may hold at most GPU_CAP_FACTOR times its booking
#: (check_need_mib), at least GPU_CAP_FLOOR_GIB, in its own process (the fp64 oracle, the reference's
#: runs, expected outputs; kverify._internal.memory_wait.cap_process): past that it runs out of memory
#: itself, is set aside to run alone and, in later runs, is booked for a whole GPU (journal.OOM_CAP_TRY),
#: instead of taking its neighbours' memory. H200 audit logs, stops 17-39 (468 rows with the estimate
#: and the process's peak, kverify.check.gpu_peak_mib): median peak 0.18x the estimate; over this cap
#: only kbleaderboard/deepseek-coder/L2/P96 (129.6 GiB against 8 GiB, 12 neighbours set aside in stop
#: 39's 3 calls), yenhao/openrouter_deepseek_v4_pro_leaderboard_l2/L2/P44 and
#: technoabsurdist/opus4_level2_20250903_065424/L2/P44 (52.1 GiB against 9) and kbleaderboard/gpt-o1/L2/P78
#: (37.8 GiB against 8).
GPU_CAP_FACTOR = 4
GPU_CAP_FLOOR_GIB = 32


def check_cap_mib(need_mib: int, total_mib: int) -> int | None:
    """The GPU memory cap (MiB) of a check's own process booked ``need_mib`` on a GPU of
    ``total_mib`` that it shares: max(GPU_CAP_FACTOR x need, GPU_CAP_FLOOR_GIB); None (no cap)
    where that is not below the GPU's memory."""
    cap = max(GPU_CAP_FACTOR * int(need_mib), GPU_CAP_FLOOR_GIB * 1024)
    return cap if cap < total_mib else None


def check_need_mib(base_gib: float, input_bytes: int, param_bytes: int = 0) -> int:
    """GPU memory (MiB) to expect for one check: ``base_gib`` GiB + INPUT_FACTOR x its inputs
    (the audit passes inputs and outputs together: Precompiled.output_bytes) + PARAM_FACTOR x its
    reference's parameters and buffers."""
    return int(base_gib * 1024 + (INPUT_FACTOR * input_bytes + PARAM_FACTOR * param_bytes) / 2**20)


def gpu_names() -> list[str] | None:
    """Model names of every GPU of the machine in nvidia-smi's index order (e.g. ["NVIDIA H200"];
    nvidia-smi ignores CUDA_VISIBLE_DEVICES and --gpus, so on a host of mixed GPUs it may name one the
    run did not use: each row's ``meta.judged_on`` names its own), for the journal's ``runs`` record
    (not a fixed option: an audit may go on on another machine). None when nvidia-smi cannot tell."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [x.strip() for x in r.stdout.splitlines() if x.strip()]
    return names if r.returncode == 0 and names else None


def machine_names(device: str, gpus: list[str] | None, names: list[str] | None) -> set[str]:
    """The names a run's reports will give the machine that judged them (meta.judged_on,
    kverify.check.judged_on): "cpu" off CUDA; on CUDA the models of ``gpus`` (nvidia-smi indices,
    as run_audit's ``gpus``; None: every GPU) in ``names``, nvidia-smi's (gpu_names()), which
    names them as torch does (the journals' runs records: "NVIDIA H200", "NVIDIA H100 80GB
    HBM3"), so this process does not initialise CUDA; where nvidia-smi cannot tell (``names``
    None, or ``gpus`` holds UUIDs), torch's name of the current device."""
    from kverify.check import judged_on

    if device != "cuda":
        return {judged_on(device)}
    if names and gpus is None:
        return set(names)
    if names and gpus and all(g.isdigit() and int(g) < len(names) for g in gpus):
        return {names[int(g)] for g in gpus}
    return {judged_on(device)}


def gpu_memory_mib(gpus: list[str]) -> dict[str, tuple[int, int]] | None:
    """(free, total) memory in MiB of each of ``gpus`` (nvidia-smi indices, as CUDA_VISIBLE_DEVICES
    names them by default), read with nvidia-smi; None when it cannot be read (no nvidia-smi, an id
    that is not an index)."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.free,memory.total", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    mem = {}
    for line in r.stdout.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            mem[parts[0]] = (int(parts[1]), int(parts[2]))
    return {g: mem[g] for g in gpus} if all(g in mem for g in gpus) else None


def gpu_with_room(gpus: list[str], running: list[tuple[str | None, float, int]],
                  memory: dict[str, tuple[int, int]] | None, need_mib: int, now: float,
                  settle_s: float = 30.0) -> str | None:
    """The GPU to start the next check on, or None to wait.

    ``running``: (gpu, start time, need in MiB) of the running checks; ``memory``: gpu_memory_mib's
    reading (None: unknown, only the idle rule and the accounting below cannot apply, so every GPU
    has room). A GPU has room when no check runs on it (so every row runs, however large), or when
    both (a) its total memory less the needs of its running checks and (b) its free memory less the
    needs of its checks started under ``settle_s`` seconds ago (they may not have allocated yet)
    are at least ``need_mib``. Of the GPUs with room, the one running the fewest checks.
    """
    def room(g: str) -> bool:
        mine = [(t, need) for gg, t, need in running if gg == g]
        if not mine or memory is None:
            return True
        free, total = memory[g]
        booked = sum(need for _, need in mine)
        fresh = sum(need for t, need in mine if now - t < settle_s)
        return total - booked >= need_mib and free - fresh >= need_mib

    ok = [g for g in gpus if room(g)]
    return min(ok, key=lambda g: sum(1 for gg, *_ in running if gg == g)) if ok else None


def next_fitting(queue: list[tuple[int, float]], fits, look: int = 8,
                 patience_s: float = 300.0) -> tuple[int, str | None] | None:
    """(index in the queue, GPU) of the row to start now, or None to wait.

    ``queue``: (memory need in MiB, seconds waited) of the queued rows, in order; ``fits(need)``
    -> (may it start now, GPU). The first of the first ``look`` rows that fits starts, so a row
    too big for the memory left does not hold back smaller ones behind it -- until it has waited
    ``patience_s``: then nothing passes it, the running checks drain, and an idle GPU always takes
    it (gpu_with_room), so no row waits forever."""
    for i, (need, waited) in enumerate(queue[:look]):
        may, gpu = fits(need)
        if may:
            return i, gpu
        if i == 0 and waited >= patience_s:
            return None
    return None


#: Host memory an audit leaves free: a build or check starts only when /proc/meminfo's
#: MemAvailable, less the whole expected need of every process started in the last HOST_RAMP_S
#: seconds (part of it may show in MemAvailable already: conservative), covers its own expected
#: need plus this share of MemTotal (H200 audit, stop 26: with about 6 checks of shard 3/8's yenhao
#: rows, several with 0.3-0.5 GB inputs, and 6 builds at once, 106 of 126 GiB were used ~100 s into
#: the audit, and three check processes died by SIGKILL 136-240 s into it; the kernel's OOM killer
#: is the likely cause, not proven). With nothing running, a process always starts; a check that waits for memory holds
#: every later start back, so the memory that frees goes to it (a row booked for a whole GPU or
#: re-run alone among them: it is not passed for ever by smaller ones).
HOST_RESERVE = 0.1
#: Expected host memory of one check (its ~9 processes each hold a CUDA context, torch, the inputs,
#: outputs and fp64 oracle copies on the host): a base, plus HOST_OUTPUT_FACTOR x the bytes of its
#: problem's outputs up to HOST_OUTPUT_KNEE_GIB of them and HOST_LARGE_FACTOR x those beyond, plus
#: HOST_INPUT_FACTOR x its input and parameter bytes (all from its build); of one build (compilers,
#: then the warm-up call at the problem's shape). Fitted on the H200 audits of stops 29-33
#: (results/audit/NOTES.md, stop 33): over the 262 journalled rows whose build logged their sizes,
#: a check process's peak (meta.host_peak_mib) follows its outputs, not its inputs: up to ~20x the
#: output bytes above the base (yenhao/ralph_codex_cuda_all/L2/P87, 0.25 GiB in, 1.97 out: 45.0
#: GiB; ralph_qwen36.../L2/P52, 0.48 out: 15.5), 5-7x at 4 GiB of outputs (gemini_level1_run/L1/P7
#: 33.2, gemini_level3_run/L3/P17 26.5), while 4 GiB of inputs or parameters took 5.2-7.7 GiB
#: (gemini_level1_run/L1/P43, ralph_gemma4_cuda_all/L2/P56). Every one of the 262 is covered (the
#: closest: P87 and P52 at 0.90), and so is stop 28's gemini_level2_run/L2/P19 (2 GiB in, 2.03
#: out, 47.6 GiB before stop 30's fp64_copy fix: 0.85). Stop 32's rule (20x inputs + outputs +
#: parameters up to 1 GiB, 8x beyond) expected 36 GiB of P87 (1.26 of it taken: an under-estimate,
#: no process killed) and ~50 GiB of those rows of 4 GiB of inputs or parameters.
HOST_CHECK_GIB = 6.0
HOST_OUTPUT_FACTOR = 22
HOST_OUTPUT_KNEE_GIB = 2.0
HOST_LARGE_FACTOR = 8
HOST_INPUT_FACTOR = 3
HOST_BUILD_GIB = 3.0
#: A process's memory grows over its first ~minute (the check's workers start, import torch and
#: load the candidate; stop 26 call 2: 14 -> 106 GiB in the first 64 s): until then its whole
#: expected need is counted as still to come.
HOST_RAMP_S = 90.0


def host_memory_mib() -> tuple[int, int] | None:
    """(MemAvailable, MemTotal) of this machine in MiB, from /proc/meminfo; None where it cannot be
    read (not Linux): then memory holds nothing back. A cgroup limit below the machine's memory is
    not seen (the H200 hosts have none: free shows the machine's 126 GiB)."""
    try:
        with open("/proc/meminfo") as f:
            info = {ln.split(":")[0]: int(ln.split()[1]) for ln in f if ln.split()[1:2] and ln.split()[1].isdigit()}
        return info["MemAvailable"] // 1024, info["MemTotal"] // 1024
    except (OSError, KeyError, ValueError, IndexError):
        return None


def host_peak_note(report: dict | None) -> str:
    """", host N.N GiB" from a report's meta.host_peak_mib (the check process's peak resident
    memory, kverify.check.host_peak_mib) and ", own GPU N.N GiB" from meta.gpu_peak_mib (its peak
    GPU memory, kverify.check.gpu_peak_mib) for the audit's log line, "" for what it lacks; and
    ", N memory wait(s)" where oracle or reference runs of the check ran again after running out of GPU memory
    (meta.memory_waits, kverify._internal.memory_wait)."""
    meta = (report or {}).get("meta") or {}
    note = "".join(f", {label} {meta[key] / 1024:.1f} GiB" for key, label in
                   (("host_peak_mib", "host"), ("gpu_peak_mib", "own GPU"))
                   if isinstance(meta.get(key), (int, float)) and meta[key] > 0)
    waits = meta.get("memory_waits") or {}
    n = (waits.get("oracle") or 0) if isinstance(waits, dict) else 0
    return note + (f", {n} memory wait(s)" if n else "")


def host_need_mib(kind: str, input_bytes: int = 0, param_bytes: int = 0, output_bytes: int = 0) -> int:
    """Expected host memory (MiB) of a ``kind`` ("build" or "check") process: HOST_BUILD_GIB for a
    build; for a check HOST_CHECK_GIB, plus HOST_OUTPUT_FACTOR x ``output_bytes`` up to
    HOST_OUTPUT_KNEE_GIB and HOST_LARGE_FACTOR x the output bytes beyond, plus HOST_INPUT_FACTOR x
    ``input_bytes`` + ``param_bytes`` (the sizes a build measures: Precompiled)."""
    if kind == "build":
        return int(HOST_BUILD_GIB * 1024)
    out = output_bytes / 2**20
    knee = HOST_OUTPUT_KNEE_GIB * 1024
    return int(HOST_CHECK_GIB * 1024 + HOST_OUTPUT_FACTOR * min(out, knee) + HOST_LARGE_FACTOR * max(out - knee, 0.0)
               + HOST_INPUT_FACTOR * (input_bytes + param_bytes) / 2**20)


def host_room(need: int, ramping: list[int], mem: tuple[int, int] | None) -> bool:
    """May a process expected to take ``need`` MiB of host memory start, with ``mem`` = (available,
    total) MiB now and ``ramping`` the expected needs of the processes started in the last
    HOST_RAMP_S seconds (not all taken yet)? True without a reading."""
    if mem is None:
        return True
    available, total = mem
    return available - sum(ramping) - need >= HOST_RESERVE * total


#: On several GPUs, a row booked for a whole GPU (EXCLUSIVE_SHARE) that has waited this long since
#: its build joins the rows that run alone: the GPU emptied for them takes it (not serially), and
#: so does any other GPU found with no check running, while the other GPUs go on. Before, such a
#: row waited next_fitting's patience and then held every GPU back until one emptied (H200 x2
#: audit, stop 22: both GPUs drained for 2-3 minutes, one for a row re-run alone and one for a row
#: booked whole, and the call ended before the latter started).
WHOLE_WAIT_S = 120.0


class TimeLimit:
    """An audit's time limit: which builds and checks may still start. A check may start while the
    time left is at least the estimated length of a check; a build while the rows already built
    or building are fewer than the checks the ``jobs`` check slots can still take after it
    (``jobs`` x (time left - a build) / a check, less half a slot per running check: on average
    half done). Estimates: the median of this run's finished builds and checks, else GUESS (the
    H200 audits' medians, stops 20-21: builds 33-63 s, checks 94-117 s wall). Until a check has
    finished, one row may start whatever the guess says while nothing of it is under way (a
    check: none running, ``idle``; a build: nothing built, building or checking) and at least
    MIN_ROW_S are left, so that a run on a faster machine, or with a short limit, still measures
    and makes progress.

    ``seconds``: the limit, from now; ``jobs``: checks at once; ``clock``: seconds, monotonic."""

    GUESS = {"build": 45.0, "check": 110.0}
    #: no row is started with less time left than this, however fast rows may be (a check's
    #: processes import torch: seconds each)
    MIN_ROW_S = 10.0

    def __init__(self, seconds: float, jobs: int, clock=time.monotonic):
        self.clock, self.jobs = clock, jobs
        self.end = clock() + seconds
        self.seen: dict[str, list[float]] = {"build": [], "check": []}

    def left(self) -> float:
        """Seconds to the limit (negative past it)."""
        return self.end - self.clock()

    def note(self, stage: str, seconds: float) -> None:
        """A finished build or check took ``seconds`` (wall)."""
        self.seen[stage].append(seconds)

    def estimate(self, stage: str) -> float:
        """Seconds a build or check is expected to take."""
        xs = sorted(self.seen[stage])
        return xs[len(xs) // 2] if xs else self.GUESS[stage]

    def _first(self) -> bool:
        """No check has finished yet and there is time for one row at all."""
        return not self.seen["check"] and self.left() >= self.MIN_ROW_S

    def may_check(self, idle: bool = False) -> bool:
        """``idle``: no check is running."""
        return (idle and self._first()) or self.left() >= self.estimate("check")

    def may_build(self, built_waiting: int, building: int, checking: int) -> bool:
        """``built_waiting``: rows built and waiting for a check; ``building``: builds running;
        ``checking``: checks running."""
        if built_waiting + building + checking == 0 and self._first():
            return True  # nothing to measure by yet: one row goes
        after = self.left() - self.estimate("build")
        if after < self.estimate("check"):
            return False
        return built_waiting + building < self.jobs * after / self.estimate("check") - checking / 2

    def may_drain(self) -> bool:
        """May a GPU be emptied for rows that run alone: time for its running checks to end (about
        a check) and then for one such row (a check)?"""
        return self.left() >= 2 * self.estimate("check")

    def over(self) -> bool:
        return self.left() <= 0

    def stop_line(self, rows_left: int) -> str:
        """The log line of an audit that stops early: none of its ``rows_left`` rows can end in time."""
        n = len(self.seen["check"])
        how = (f"this run's {n} check(s) took {self.estimate('check'):.0f} s at the median" if n
               else f"a check is guessed at {self.estimate('check'):.0f} s")
        return (f"time limit: {rows_left} row(s) left, none can end in the {max(self.left(), 0):.0f} s left "
                f"({how}); run the same command with more time to go on")


def _pipeline(corpus, todo, opts, jobs, compile_jobs, record, attempts: int = 2,
              gpus: list[str] | None = None, log=lambda msg: None, gpu_gib: float = 0.0,
              time_limit: TimeLimit | None = None, note_try=lambda row, what: None,
              capped_before: set[str] | frozenset = frozenset(),
              serial_before: set[str] | frozenset = frozenset()) -> None:
    """Each stage of each row in its own process: precompiles (``compile_jobs`` at once) feed the
    checks (``jobs`` at once); ``record`` is called here, in the parent. A process that dies
    without a result (e.g. killed for memory) is retried; after ``attempts`` deaths the row is
    UNJUDGED with the exit status. A check that ran out of GPU memory while other rows shared the
    GPU is not recorded but run again alone and serial (one worker at a time, see _task) as soon as
    a GPU is empty: one GPU (an idle one, else the one with the fewest processes) takes no new
    process until it is, then runs such rows one after another while the others go on; with one
    GPU (or no GPU list), where emptying it would stop every check, such rows and rows booked for
    a whole GPU wait until no other row is left to build or check, then run one at a time;
    only what runs out of memory so is recorded so. On several GPUs a row booked for a whole GPU
    that has waited WHOLE_WAIT_S since its build runs on the GPU emptied for these rows too, or on
    any other with no check running (not serially); with a time limit no GPU is emptied when a
    drain and a check would not end in time (TimeLimit.may_drain). With ``gpus`` and ``gpu_gib`` > 0 a
    check starts on a GPU only when it has room for it (gpu_with_room, with check_need_mib of the
    row's input and parameter bytes as measured by its build, a whole GPU when that is over
    EXCLUSIVE_SHARE of one; memory read with nvidia-smi at most every 2 s),
    so fewer run out of memory beside others; smaller rows may pass one that does not fit yet
    (next_fitting). Builds are spread over the GPUs (their warm-up call
    runs there). On a GPU audit (``opts["device"]`` "cuda") a build or check starts only when the
    host has the memory to expect for it (host_room, HOST_RESERVE) or nothing runs.
    Processes end with this one (lifeline). ``time_limit``: what may still start
    (TimeLimit); at the limit the rows in flight are ended and logged, as when interrupted.
    ``note_try(row, what)`` is called as a row's check starts, as a row is set aside to run
    alone (booked for a whole GPU), and with journal.OOM_TRY as one is set aside after running out of
    GPU memory beside other checks (Journal.note_try, through _run_journals), journal.OOM_CAP_TRY where it
    ran out over its own cap. With a booking (``gpus``, ``gpu_gib`` > 0) a check that shares its GPU
    has its own process capped at check_cap_mib of its booking (not a row that runs alone or booked
    whole); the rows of ``capped_before`` (earlier runs set them aside over their cap: Journal.capped)
    are booked for a whole GPU. A check that had a GPU to itself (booked whole, or run alone but not
    serially) and ran out of memory is noted journal.OOM_WHOLE_TRY and run again serially; the rows of
    ``serial_before`` (earlier runs noted them so: Journal.serial) are run serially from the start
    (with the rows run alone: on one GPU once no other row is left)."""
    from kverify.sandbox import describe_exit

    ctx = multiprocessing.get_context("spawn")
    tmp = Path(tempfile.mkdtemp(prefix="kverify-audit-"))
    waiting = {"build": deque(todo) if compile_jobs else deque(), "check": deque() if compile_jobs else deque(todo),
               "alone": deque()}
    for r in [r for r in waiting["check"] if r["id"] in serial_before]:  # no build step: serially from the start
        waiting["check"].remove(r)
        waiting["alone"].append(r)
    limit = {"build": compile_jobs, "check": jobs, "alone": 1}
    running: dict[int, tuple] = {}  # sentinel -> (process, stage, row, out file, gpu, start time, need MiB, host MiB)
    built: dict[str, float] = {}
    deaths: dict[tuple, int] = {}
    n = 0
    mem_at: list = [-1e9, None]  # (time of the last nvidia-smi reading, its result)
    drain: list = [None]  # the GPU reserved for rows that run alone ("*": all of them), None: none
    need_of: dict[str, int] = {}  # row id -> MiB of GPU memory to expect for its check (from its build)
    host_of: dict[str, int] = {}  # row id -> MiB of host memory to expect for its check (from its build)
    # host memory holds processes back on GPU audits only (HOST_RESERVE; where it was seen to run out)
    host_guard = opts.get("device") == "cuda"
    # host memory: the (kind, row id) last said to wait for it (said once until it starts), and
    # whether a check waits for it in this pass of the loop (then nothing else starts: the memory
    # that frees goes to it, not to the processes behind it)
    held: list = [None, False]
    queued: dict[str, float] = {r["id"]: time.monotonic() for r in waiting["check"]}  # when each row began to wait
    whole_alone: set[str] = set()  # rows booked whole in waiting["alone"]: they run there, but not serially
    cap_at: dict[str, int | None] = {}  # row id -> the GPU memory cap (MiB) its last check started with
    # rows whose running check had another check on its GPU at some time (a row booked at the smallest
    # GPU's memory leaves room beside it on a larger one: a review's find), so not "with the GPU to itself"
    shared_run: set[str] = set()

    def choose_gpu(stage: str, need: int) -> tuple[bool, str | None]:
        """(may a process of ``stage`` start now, the GPU id to give it or None: every GPU this
        process sees). Builds (one warm-up call each) are spread over the GPUs, never held back."""
        reserved = drain[0]  # emptied for (or running) a row that runs alone: nothing else starts there
        if reserved is not None and not gpus:
            return False, None
        usable = [g for g in gpus or [] if g != reserved]
        if gpus and not usable:
            return False, None
        if not gpus:
            return True, None
        if stage == "build":
            return True, pick_gpu(usable, [r[4] for r in running.values() if r[1] == "build"])
        if gpu_gib <= 0:
            return True, pick_gpu(usable, [r[4] for r in running.values() if r[1] != "build"])
        now = time.monotonic()
        if now - mem_at[0] >= 2.0:
            mem_at[:] = [now, gpu_memory_mib(gpus)]
        g = gpu_with_room(usable, [(r[4], r[5], r[6]) for r in running.values() if r[1] != "build"], mem_at[1],
                          need, now)
        return g is not None, g

    def gpu_total() -> int | None:
        """The smallest GPU's memory (MiB) in the last nvidia-smi reading; None without one."""
        return min(t for _, t in mem_at[1].values()) if mem_at[1] else None

    def booked(need: int, rid: str | None = None) -> int:
        """``need``, or a whole GPU's memory when it exceeds EXCLUSIVE_SHARE of one or the row
        ``rid`` is one of ``capped_before``: then gpu_with_room starts the row only on an idle GPU
        and lets no other check join it."""
        if not gpus or gpu_gib <= 0:
            return need
        if mem_at[1] is None:
            mem_at[:] = [time.monotonic(), gpu_memory_mib(gpus)]
        total = gpu_total()
        if total is None:
            return need
        return total if need > EXCLUSIVE_SHARE * total or rid in capped_before else need

    for rid in [r["id"] for r in todo if r["id"] in capped_before]:  # whole from the start (also without a build)
        if (whole_mib := booked(0, rid)) > 0:
            need_of[rid] = whole_mib
    # one GPU for all (or no GPU list: every process sees every GPU): emptying it for one row stops
    # every other check, and the CPUs wait with it (H200, stop 20: one row out of memory left 16
    # cores at load 2-5 for the last 3 minutes of a 5-minute call). There, rows that need the GPU
    # to themselves (re-runs alone, rows booked for a whole GPU) wait until no other row is left to
    # build or to check (_later); on several GPUs one GPU is emptied for them as the others go on.
    one_gpu = not gpus or len(gpus) == 1

    def whole(row: dict) -> bool:
        """Is ``row`` booked for a whole GPU (booked())?"""
        total = gpu_total()
        return total is not None and need_of.get(row["id"], 0) >= total

    def _later(row: dict | None = None) -> bool:
        """On one GPU: does a row that needs the GPU to itself (``row``, booked whole; None: a
        re-run alone) wait, because other rows are still to be built or checked?"""
        if not one_gpu:
            return False
        if waiting["build"] or any(r[1] == "build" for r in running.values()):
            return True  # (a build's warm-up call runs on the GPU too: builds of rows known to be booked whole
            # would share it as well; H100, stop 45: only such rows left, the GPU idle ~90 s of a 570 s call)
        return any(not whole(r) for r in waiting["check"]) if row is not None else bool(waiting["check"])
    def host_need(kind: str, row: dict) -> int:
        return host_need_mib("build") if kind == "build" else host_of.get(row["id"], host_need_mib("check"))

    def host_ok(kind: str, row: dict) -> bool:
        """May ``row``'s ``kind`` process start as far as host memory goes (host_room; always
        with nothing running or on a CPU audit)? A check that may not holds every other start
        back until the next pass (held[1]); said once per waiting row."""
        if not host_guard or not running:
            return True
        if held[1]:
            return False  # a check waits for memory: it goes first
        now = time.monotonic()
        mem = host_memory_mib()
        ramping = [r[7] for r in running.values() if now - r[5] < HOST_RAMP_S]
        if host_room(host_need(kind, row), ramping, mem):
            return True
        held[1] = kind != "build"
        if held[0] != (kind, row["id"]):
            held[0] = (kind, row["id"])
            log(f"host memory: {mem[0] / 1024:.0f} of {mem[1] / 1024:.0f} GiB available, {sum(ramping) / 1024:.0f} GiB "
                f"counted for processes just started; a {kind} expecting {host_need(kind, row) / 1024:.0f} GiB "
                f"waits (kverify.audit.HOST_RESERVE): {row['id']}")
        return False

    def cap_of(stage: str, need: int) -> int | None:
        """The GPU memory cap (MiB) of a check from queue ``stage`` booked ``need`` MiB: check_cap_mib
        for one that shares its GPU (queue "check", booked less than a whole GPU) on an audit
        that books memory; None otherwise."""
        total = gpu_total()
        if stage != "check" or not gpus or gpu_gib <= 0 or need <= 0 or total is None:
            return None
        return check_cap_mib(need, total) if need < total else None

    def start(stage: str, kind: str, row: dict, gpu: str | None, need: int, serial: bool) -> None:
        """Start ``row``'s ``kind`` ("build" or "check") in a process of its own on ``gpu``;
        ``stage``: the queue it came from ("build", "check", "alone": on the GPU emptied for it,
        "whole": booked whole, on a GPU found with no check running)."""
        nonlocal n
        n += 1
        out = str(tmp / f"{n}.json")
        cap = cap_of(stage, need) if kind == "check" else None
        if kind == "check":
            cap_at[row["id"]] = cap
            beside = [r[2]["id"] for r in running.values()
                      if r[1] != "build" and (gpu is None or r[4] is None or r[4] == gpu)]
            if beside:
                shared_run.update(beside + [row["id"]])
        p = ctx.Process(target=_task, args=(kind, corpus, row, opts, out, gpu, serial, cap), daemon=True)
        host = host_need(kind, row)
        if held[0] == (kind, row["id"]):
            held[0] = None

        def launch() -> None:
            p.start()
            running[p.sentinel] = (p, stage, row, out, gpu, time.monotonic(), need, host)
        start_whole(launch)  # Ctrl-C or SIGTERM cannot fall between the start and the registration
        if kind == "check":
            note_try(row, "check started" + ("" if stage == "check" else f" ({stage})"))

    def in_time(stage: str, ahead: int) -> bool:
        """May a process of ``stage`` start within the time limit (TimeLimit; ``ahead``: rows
        built and waiting for a check)?"""
        if time_limit is None:
            return True
        building = sum(r[1] == "build" for r in running.values())
        checking = len(running) - building
        if stage == "build":
            return time_limit.may_build(ahead, building, checking)
        return time_limit.may_check(idle=checking == 0)
    try:
        while any(waiting.values()) or running:
            held[1] = False  # no check waits for host memory yet in this pass
            if time_limit is not None and time_limit.over():
                log(f"time limit reached: {sum(map(len, waiting.values()))} row(s) not started; "
                    "the rows in flight are ended; run the same command to go on")
                break
            if not one_gpu:  # rows booked whole that found no idle GPU in time: the emptied GPU takes them
                now = time.monotonic()
                for r in [r for r in waiting["check"] if whole(r) and now - queued.get(r["id"], now) >= WHOLE_WAIT_S]:
                    waiting["check"].remove(r)
                    waiting["alone"].append(r)
                    whole_alone.add(r["id"])
                    log(f"booked for a whole GPU, {WHOLE_WAIT_S:.0f} s waited: to run on the next GPU emptied "
                        f"or found with no check: {r['id']}")
            alone_running = any(r[1] == "alone" for r in running.values())
            if drain[0] is not None and not waiting["alone"] and not alone_running:
                drain[0] = None  # no row left to run alone: the GPU takes others again
            if waiting["alone"] and not alone_running and not (drain[0] is None and _later()):  # reserve a GPU to empty for them
                # emptying a GPU costs the time its running checks take to end: not when the time
                # limit leaves no room for that and a row after it (an idle GPU costs nothing)
                may = time_limit is None or time_limit.may_drain()
                if not gpus:
                    if drain[0] is None and (may or not running):
                        drain[0] = "*"  # every process sees every GPU: all must empty
                else:  # an idle one if any (also when another was reserved), else the least busy
                    idle = [g for g in gpus if not any(r[4] == g for r in running.values())]
                    if idle and drain[0] not in idle:
                        drain[0] = idle[0]
                    elif drain[0] is None and may:
                        drain[0] = pick_gpu(gpus, [r[4] for r in running.values()])
            # rows booked whole among them also start on any other GPU with no check running
            for g in [] if one_gpu else gpus:
                row = next((r for r in waiting["alone"] if r["id"] in whole_alone), None)
                if row is None or not in_time("check", 0):
                    break
                if g != drain[0] and not any(r[4] == g and r[1] != "build" for r in running.values()):
                    if not host_ok("check", row):
                        break
                    waiting["alone"].remove(row)
                    start("whole", "check", row, g, need_of.get(row["id"], 0), serial=False)
            for stage in ("alone", "check", "build"):
                if stage == "alone":  # on the reserved GPU once nothing else runs there
                    if not waiting["alone"] or drain[0] is None or any(r[1] == "alone" for r in running.values()) or any(
                            drain[0] in ("*", r[4]) for r in running.values()):
                        continue
                while waiting[stage] and sum(r[1] == stage for r in running.values()) < limit[stage]:
                    # far enough ahead of the checks (not counting rows that wait for the others to
                    # be done, _later: holding builds back for them would leave nothing to run)
                    ahead = sum(not (one_gpu and whole(r)) for r in waiting["check"])
                    if stage == "build" and ahead + sum(r[1] == "build" for r in running.values()) >= 2 * jobs:
                        break
                    if not in_time(stage, ahead):
                        break  # it would not end within the time limit
                    kind = "check" if stage == "alone" else stage
                    q = waiting[stage]
                    if stage == "alone":
                        i, need, gpu = 0, 0, (None if drain[0] == "*" else drain[0])
                    elif kind == "check":  # the first queued row that has room (next_fitting)
                        now = time.monotonic()
                        ready = [k for k, r in enumerate(q) if not (whole(r) and _later(r))][:8]
                        needs = [(need_of.get(q[k]["id"], check_need_mib(gpu_gib, 0)), now - queued.get(q[k]["id"], now))
                                 for k in ready]
                        pick = next_fitting(needs, lambda need: choose_gpu("check", need))
                        if pick is None:
                            break  # no GPU has room now (or only rows that wait their turn): wait for a check to end
                        i, gpu = ready[pick[0]], pick[1]
                        need = needs[pick[0]][0]
                    else:
                        may, gpu = choose_gpu(kind, 0)
                        if not may:
                            break  # the only GPU is reserved for a row that runs alone
                        i, need = 0, 0
                    row = q[i]
                    if not host_ok(kind, row):
                        break  # wait for memory: a process to end (or the ones just started to settle)
                    del q[i]
                    start(stage, kind, row, gpu, need, serial=stage == "alone" and row["id"] not in whole_alone)
            if time_limit is not None and not running:  # with nothing running only the limit holds rows back
                log(time_limit.stop_line(sum(map(len, waiting.values()))))
                break  # nothing runs and nothing can start in time: end now, not at the limit
            for sentinel in mp_wait(list(running), timeout=1.0):
                p, stage, row, out, gpu_used, started, *_ = running.pop(sentinel)
                p.join()
                if time_limit is not None:
                    time_limit.note("build" if stage == "build" else "check", time.monotonic() - started)
                try:
                    with open(out) as f:
                        res = json.load(f)
                except (OSError, ValueError):
                    k = (stage, row["id"])
                    deaths[k] = deaths.get(k, 0) + 1
                    log(f"{stage} process of {row['id']} {describe_exit(p.exitcode)} (death {deaths[k]} of {attempts})")
                    if deaths[k] < attempts:
                        waiting["alone" if stage == "whole" else stage].append(row)
                    else:
                        record(row, None, "UNJUDGED", f"kverify's {stage} process for this row "
                                                      f"{describe_exit(p.exitcode)}, {attempts} times", 0.0)
                    continue
                if stage == "build":
                    status, error, seconds, input_bytes, param_bytes, output_bytes, cpu = res
                    # outputs held like inputs (each worker, the oracle's fp64 copies): counted with them
                    need_of[row["id"]] = booked(check_need_mib(gpu_gib, input_bytes + output_bytes, param_bytes), row["id"])
                    # outputs of 0 bytes: not counted (Problem.output_numel found none on meta
                    # tensors): as many as the inputs are expected, not none
                    host_of[row["id"]] = host_need_mib("check", input_bytes, param_bytes, output_bytes or input_bytes)
                    if status in ("compile_error", "fault"):  # fault: the machine's (kverify.build.failed_build)
                        record(row, None, "COMPILE_ERROR" if status == "compile_error" else "UNJUDGED", error, seconds)
                    else:
                        built[row["id"]] = seconds
                        if row["id"] in serial_before:  # ran out with a GPU to itself before: serially at once
                            waiting["alone"].append(row)
                        else:
                            waiting["check"].append(row)
                        queued[row["id"]] = time.monotonic()
                        if one_gpu and whole(row) and row["id"] not in serial_before:  # waits for the GPU to itself: until no other row is left
                            note_try(row, WHOLE_TRY)
                        log(f"built {status:<11} {seconds:7.1f}s cpu {cpu:6.1f}s inputs {input_bytes / 2**30:.2f} GiB "
                            f"params {param_bytes / 2**30:.2f} GiB outputs {output_bytes / 2**30:.2f} GiB need {need_of[row['id']] / 1024:.0f} GiB {row['id']}"
                            + (f"  {error[:160]}" if error else "")
                            + ("  (to run serially: it ran out of GPU memory with a GPU to itself before)"
                               if row["id"] in serial_before and status not in ("compile_error", "fault") else ""))
                else:
                    report, klass, reason, seconds, cpu, *more = res
                    status = more[0] if more and isinstance(more[0], dict) else {}  # _task: gpu_oom_status
                    where = oom_where(report, reason)
                    if not where and status.get("ooms"):  # caught by a gate that made something else of it
                        where = "caught in the check"
                    # alone, not serially: from the queue of rows run alone, or booked whole (on one GPU such rows
                    # start from "check"), and no other check ran on its GPU meanwhile (shared_run)
                    whole_run = ((stage in ("alone", "whole") and row["id"] in whole_alone)
                                 or (stage == "check" and whole(row))) and row["id"] not in shared_run
                    whole_alone.discard(row["id"])
                    shared_run.discard(row["id"])
                    if (stage == "check" and (jobs > 1 or compile_jobs) or whole_run) and where:
                        waiting["alone"].append(row)  # serially this time
                        capped = stage == "check" and bool(status.get("over_cap"))  # its own cap, not its neighbours
                        note_try(row, OOM_WHOLE_TRY if whole_run else OOM_CAP_TRY if capped else OOM_TRY)
                        on = f" on GPU {gpu_used}" if gpu_used is not None else ""
                        said = oom_detail(report, reason)  # the oracle's run or the candidate's
                        over = (f" over its own cap of {(cap_at.get(row['id']) or 0) / 1024:.0f} GiB "
                                f"(booked {need_of.get(row['id'], 0) / 1024:.0f} GiB; later runs book it a whole GPU)"
                                if capped else "")
                        log((f"out of GPU memory ({where}) with the GPU to itself{on}, to run again serially: {row['id']}"
                             if whole_run else f"out of GPU memory ({where}){over} beside other checks{on}, to run again "
                             f"alone once a GPU is empty: {row['id']}") + (f"  ({said})" if said else ""))
                        continue
                    record(row, report, klass, reason, built.pop(row["id"], 0.0) + seconds,
                           note=f"[check {seconds:.0f}s, cpu {cpu:.0f}s{host_peak_note(report)}"
                           + (f", GPU {gpu_used}]" if gpu_used is not None else "]"))
    finally:
        if running:  # interrupted: say what was in flight, and where (STACK_ENV), before ending it
            now = time.monotonic()
            log("in flight when the audit stopped: " + "; ".join(
                f"{r[2]['id']} ({r[1]} for {now - r[5]:.0f} s" + (f", GPU {r[4]})" if r[4] is not None else ")")
                for r in running.values()))
            if os.environ.get(STACK_ENV):
                for p, *_ in running.values():
                    if p.exitcode is not None:  # reaped already: its pid may be another process's now
                        continue
                    try:
                        os.kill(p.pid, signal.SIGUSR1)
                    except OSError:
                        pass
                time.sleep(2.0)  # faulthandler writes at once; leave it time under load
        for p, *_ in running.values():
            p.kill()
        reap_by = time.monotonic() + 5.0
        for p, *_ in running.values():  # reaped, so no zombie is left for a never-reaping PID 1
            p.join(timeout=max(0.0, reap_by - time.monotonic()))
        shutil.rmtree(tmp, ignore_errors=True)
