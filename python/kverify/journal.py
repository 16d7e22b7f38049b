"""The audit journal: an append-only SQLite database (WAL mode, synchronous=FULL); records leave
it only when asked (Journal.forget, ``kverify audit --redo``), into its ``forgotten`` table.

One row per kernel (`kernels`) and one per (kernel, gate) (`gates`), written in one transaction
when the kernel's check ends, so a kill at any moment loses at most the kernel in flight and a
restart neither loses nor duplicates a record (the kernel id is the primary key).

A kernel's report is stored once: ``kernels.report`` holds it without the gates' evidence, which
is in ``gates.evidence`` (the evidence is most of a report's size: G05's per-variant records
above all); Journal.report puts the two together again. Journals written before this split keep
the evidence in both places and read the same.
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from kverify.errors import UsageError

#: a kernel's class: three from the gates (kverify.report), then the two that were not judged
CLASSES = ("BROKEN", "VIOLATION", "CLEAN", "COMPILE_ERROR", "UNJUDGED")

SCHEMA = """
CREATE TABLE IF NOT EXISTS kernels (
  id TEXT PRIMARY KEY, source TEXT, level INTEGER, problem TEXT, version TEXT, backend TEXT, gpu TEXT,
  class TEXT NOT NULL, standard TEXT, reason TEXT, seconds REAL, report TEXT);
CREATE TABLE IF NOT EXISTS gates (
  kernel_id TEXT NOT NULL REFERENCES kernels(id), gate TEXT NOT NULL, verdict TEXT NOT NULL, summary TEXT,
  bound_ratio REAL, tolerance_free INTEGER, evidence TEXT, PRIMARY KEY (kernel_id, gate));
CREATE TABLE IF NOT EXISTS forgotten (
  id TEXT NOT NULL, class TEXT, reason TEXT, report TEXT, why TEXT, at REAL);
CREATE TABLE IF NOT EXISTS runs (at REAL NOT NULL, options TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tries (id TEXT NOT NULL, at REAL NOT NULL, what TEXT);
CREATE TABLE IF NOT EXISTS digests (id TEXT PRIMARY KEY, sha256 TEXT NOT NULL);
"""
#: the columns of the kernels table, in order (SCHEMA)
KERNEL_COLUMNS = ["id", "source", "level", "problem", "version", "backend", "gpu", "class", "standard", "reason",
                  "seconds", "report"]
#: the run options every run of one journal must share (Journal.begin_run): rows judged on another
#: device, from another seed or by other gates would not be comparable
FIXED_OPTIONS = ("device", "seed", "gates")
#: the words every gate or standard-test summary of a call a check budget cut short carries
#: (kverify.sandbox.Sandbox.budget writes them into the Outcome's detail, the gates pass it on)
BUDGET_MARK = "the check's time budget"


#: the ``tries`` note of a row set aside after running out of GPU memory beside other checks (it
#: runs again alone): kept so that `kverify report --corpus` can say why a row is not journalled;
#: not a try of its own (Journal.tries: its check's start counted already)
OOM_TRY = "out of GPU memory beside other checks: to run alone"
#: the same, where the check ran out over its own process's cap (kverify.audit.check_cap_mib): later runs
#: book the row for a whole GPU (Journal.capped)
OOM_CAP_TRY = "out of GPU memory over its cap beside other checks: booked whole from now on"
#: the same, where the check had a GPU to itself (booked whole, or run alone, not serially) and still ran
#: out: later runs start the row serially at once (Journal.serial), not whole first (H200, stop 40: three
#: rows ran ~150 s whole, ran out in G05 again and waited to run serially when the call ended)
OOM_WHOLE_TRY = "out of GPU memory with the GPU to itself: serially from now on"
#: the notes that say why a row was set aside, not a try of their own (Journal.tries)
OOM_NOTES = (OOM_TRY, OOM_CAP_TRY, OOM_WHOLE_TRY)
#: the notes Journal.capped and Journal.serial read whenever they were written, also before the row
#: was last taken out to be judged again (--redo and its kin), so that such a row is booked whole or
#: run serially from its first try again: how much GPU memory a check needs is mostly the row's, not
#: its record's (stop 51, H200: two rows that had run serially before, taken out by --redo-elsewhere,
#: ran out over their cap beside others, then each with the GPU to itself, 160-240 s a try, and the
#: session's device time ended before they ran serially). Where that does not hold (a row whose
#: corpus text was edited and then taken out, a later kverify that needs less, or a note from before
#: stop 47's out-of-memory count, which took errors PyTorch caught for errors) the cost is the
#: schedule only: the row runs alone or serially, later and slower, judged by the same gates.
MEMORY_NOTES_KEPT = (OOM_CAP_TRY, OOM_WHOLE_TRY)
#: the ``tries`` note of a row booked for the whole of the only GPU after its build (a try of its own;
#: kverify report --corpus: "booked for a whole GPU")
WHOLE_TRY = "booked whole: waits for the GPU to itself"


def _judged_by_other_rules(meta: dict, rules: str) -> bool:
    """Was the report with this ``meta`` judged by other rules than ``rules`` (meta.rules; a report
    without it predates them)? The one rule behind Journal.stale and Journal.needs_redo."""
    return meta.get("rules") != rules


def cut_by_budget(verdict: str, summary: str | None) -> bool:
    """Was this gate (or standard-test) record ERROR because a check budget cut its calls short?"""
    return verdict == "ERROR" and BUDGET_MARK in (summary or "")


#: the reason a row was journalled with when kverify itself failed on it (kverify.audit.check_row)
FAULT_PREFIX = "kverify fault"
#: what a gate record's summary says when kverify or the GPU failed in it, not the row
#: (kverify.check: "ran out of memory while ..."; Journal.needs_redo)
GATE_FAULT_MARKS = (FAULT_PREFIX, "ran out of memory while")


class Journal:
    """Open (creating if needed, in a folder that must exist) a journal file; ``readonly``: open an
    existing one for reading only (report, merge inputs: the file is not touched, and may be
    read-only). Raises UsageError if it is not a kverify journal (read only: without a ``kernels``
    table of kverify's columns and a ``gates`` table), is a directory, or its folder does not exist."""

    def __init__(self, path: str | Path, readonly: bool = False):
        self.path = Path(path)
        if self.path.is_dir():
            raise UsageError(f"{self.path}: is a directory, not a journal file")
        if not readonly and not self.path.parent.is_dir():  # a typo must not leave a tree of folders behind
            raise UsageError(f"{self.path}: folder {self.path.parent} does not exist")
        existed = self.path.exists()
        try:
            if readonly:
                # immutable (no lock, no -shm beside it: a read-only folder or file works) unless a
                # -wal file holds records not yet copied into the database (a killed audit's)
                wal = Path(str(self.path) + "-wal")
                flags = "mode=ro" + ("" if wal.exists() and wal.stat().st_size else "&immutable=1")
                self.db = sqlite3.connect(f"{self.path.resolve().as_uri()}?{flags}", uri=True, isolation_level=None)
            else:
                self.db = sqlite3.connect(self.path, isolation_level=None)
            self.tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = [r[1] for r in self.db.execute("PRAGMA table_info(kernels)")]
            if (self.tables or readonly) and columns != KERNEL_COLUMNS:  # another program's database
                self.db.close()
                raise UsageError(f"{self.path}: not a kverify journal (an SQLite database with the table(s) "
                                 f"{', '.join(sorted(self.tables)) or '(none)'}"
                                 + (f"; its 'kernels' has the columns {', '.join(columns)}" if columns
                                    else " and no 'kernels'") + ")")
            if readonly and "gates" not in self.tables:  # kernels alone: another program's, or a damaged copy
                self.db.close()
                raise UsageError(f"{self.path}: not a kverify journal (its 'kernels' table has no 'gates' table "
                                 "beside it: every journal has both)")
            if not readonly:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=FULL")
                self.db.executescript(SCHEMA)
                self.tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            if not existed and not readonly:  # nothing there to be a journal or not: it could not be made
                raise UsageError(f"{self.path}: cannot create a journal there ({e})") from None
            raise UsageError(f"{self.path}: not a kverify journal ({e})") from None

    def select(self, table: str) -> list[tuple]:
        """Every record of ``table`` ([] when this journal predates it: ``runs``, ``forgotten``)."""
        return self.db.execute(f"SELECT * FROM {table}").fetchall() if table in self.tables else []

    def begin_run(self, options: dict) -> None:
        """Record the options of an audit run (JSON-able dict) in the ``runs`` table. Raises
        UsageError, naming the journal and the option, when one of FIXED_OPTIONS differs from the
        journal's first recorded run (resume with the same ones, or use another journal); the
        others (timeouts, budget, shard, jobs) may change from run to run and are kept as given."""
        self.check_options(options)
        self.db.execute("INSERT INTO runs VALUES (?, ?)", (time.time(), json.dumps(options, sort_keys=True)))

    def check_options(self, options: dict) -> None:
        """begin_run's check alone, writing nothing (several journals are checked before any is
        written). Raises UsageError as begin_run does."""
        was = _fixed(self)
        if was is not None:
            for k in FIXED_OPTIONS:
                if k in was and was[k] != options.get(k):
                    raise UsageError(f"{self.path}: field '{k}': this journal was begun with {k} = {was[k]!r}, "
                                     f"this run has {options.get(k)!r}; resume with the same {k} or use a new journal")

    def done(self) -> set[str]:
        """Ids of kernels already recorded."""
        return {r[0] for r in self.db.execute("SELECT id FROM kernels")}

    def pending(self) -> set[str]:
        """Ids forgotten (``--redo``) and not recorded again yet: a run that stopped before them."""
        return {r[0] for r in self.db.execute("SELECT id FROM forgotten")} - self.done()

    def note_try(self, kernel_id: str, what: str) -> None:
        """Record (durably, in the ``tries`` table) that an audit run started the check of
        ``kernel_id`` or set it aside to run alone (``what`` says which), before its kernel
        record exists. A later run checks the rows that earlier runs tried and did not finish
        after the others (Journal.tries; kverify.audit): a row whose check outlasts the runs (a
        device call's time limit) cannot hold every run's first places (stop 28, H200: the same 12
        rows built in each of three calls, all 12 first in the third, none finished; 6 rows
        journalled in two calls)."""
        self.db.execute("INSERT INTO tries VALUES (?, ?, ?)", (kernel_id, time.time(), what))

    def tries(self) -> dict[str, int]:
        """{kernel id: number of note_try records since it was last taken out (``forgotten``,
        --redo)} for the rows not journalled (yet), OOM_NOTES not counted: a row
        that was tried, finished and is now checked again starts from none."""
        if "tries" not in self.tables:
            return {}
        done = self.done()
        marks = ", ".join("?" * len(OOM_NOTES))
        return {k: n for k, n in self.db.execute(
                    f"SELECT t.id, COUNT(*) FROM tries t WHERE COALESCE(t.what, '') NOT IN ({marks}){self._since()} "
                    "GROUP BY t.id",
                    OOM_NOTES)
                if k not in done}

    def capped(self) -> set[str]:
        """Ids of the rows not journalled (yet) that a run ever set aside after they ran out of GPU
        memory over their own cap (OOM_CAP_TRY), before a --redo too (MEMORY_NOTES_KEPT):
        kverify.audit books them for a whole GPU."""
        return self._noted(OOM_CAP_TRY)

    def serial(self) -> set[str]:
        """Ids of the rows not journalled (yet) that ever ran out of GPU memory with a GPU to
        themselves (OOM_WHOLE_TRY), before a --redo too (MEMORY_NOTES_KEPT): kverify.audit runs
        them serially from the start."""
        return self._noted(OOM_WHOLE_TRY)

    def _noted(self, what: str) -> set[str]:
        """Ids of the rows not journalled (yet) with a ``tries`` note ``what`` (one of
        MEMORY_NOTES_KEPT), whenever written."""
        if what not in MEMORY_NOTES_KEPT:
            raise ValueError(f"not a note kept across --redo: {what!r}")
        if "tries" not in self.tables:
            return set()
        return {r[0] for r in self.db.execute("SELECT t.id FROM tries t WHERE t.what = ?", (what,))} - self.done()

    def _since(self) -> str:
        """SQL condition on ``tries t``: the try came after the row was last taken out (--redo)."""
        return (" AND t.at > COALESCE((SELECT MAX(f.at) FROM forgotten f WHERE f.id = t.id), 0)"
                if "forgotten" in self.tables else "")

    def record(self, row: dict, report: dict | None, klass: str, reason: str = "", seconds: float = 0.0) -> None:
        """Write one kernel and its gates atomically, with the row's digest (kverify.corpus.row_digest,
        in ``digests``). ``row`` is the corpus row (id, source_repo, level, problem_name,
        problem_version, backend, harness.gpu)."""
        from kverify.corpus import row_digest

        h = row.get("harness") if isinstance(row.get("harness"), dict) else {}
        std = report["standard"]["verdict"] if report else None
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute("INSERT OR REPLACE INTO digests VALUES (?, ?)", (row["id"], row_digest(row)))
            self.db.execute("INSERT INTO kernels VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                            (row["id"], row.get("source_repo"), row.get("level"), row.get("problem_name"),
                             row.get("problem_version"), row.get("backend"), h.get("gpu"), klass, std, reason,
                             seconds, json.dumps(stored_report(report)) if report else None))
            for g in (report or {}).get("gates", []):
                self.db.execute("INSERT INTO gates VALUES (?,?,?,?,?,?,?)",
                                (row["id"], g["gate"], g["verdict"], g["summary"], g.get("bound_ratio", 0.0),
                                 int(bool(g.get("tolerance_free"))), json.dumps(g.get("evidence", {}))))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def digests(self) -> dict[str, str]:
        """{kernel id: SHA-256 of the corpus row it was judged from} for the journalled rows whose
        record has one (rows journalled before the ``digests`` table have none)."""
        return dict(self.select("digests"))

    def changed(self, rows: dict[str, str]) -> list[str]:
        """Ids of ``rows`` ({id: digest of the corpus row now}) journalled from a row with another
        digest: the corpus says something else for that id than what this journal judged."""
        was = self.digests()
        done = self.done()
        return sorted(i for i, d in rows.items() if i in done and i in was and was[i] != d)

    def report(self, kernel_id: str) -> dict | None:
        """The full report journalled for ``kernel_id`` (kernels.report with each gate's evidence
        from the gates table), or None when the row has none (COMPILE_ERROR, UNJUDGED without a
        check) or is not in the journal."""
        got = self.db.execute("SELECT report FROM kernels WHERE id = ?", (kernel_id,)).fetchone()
        if not got or not got[0]:
            return None
        report = json.loads(got[0])
        evidence = {g: json.loads(ev or "{}") for g, ev in
                    self.db.execute("SELECT gate, evidence FROM gates WHERE kernel_id = ?", (kernel_id,))}
        for g in report.get("gates", []):
            if g["gate"] in evidence:
                g["evidence"] = evidence[g["gate"]]
        return report

    def faults(self) -> list[str]:
        """Ids of rows journalled UNJUDGED because kverify itself failed on them (not the row)."""
        return [r[0] for r in self.db.execute("SELECT id FROM kernels WHERE class = 'UNJUDGED' AND reason LIKE ?",
                                              (FAULT_PREFIX + "%",))]

    def budget_cut(self) -> list[str]:
        """Ids of rows with a gate that a row budget cut short (ERROR, "... time budget ...";
        kverify.sandbox.Sandbox.budget), to judge again in a longer run (``--redo-budget``)."""
        return [r[0] for r in self.db.execute("SELECT DISTINCT kernel_id FROM gates WHERE verdict = 'ERROR' "
                                              "AND instr(summary, ?) > 0 ORDER BY kernel_id", (BUDGET_MARK,))]

    def stale(self, rules: str) -> list[str]:
        """Ids of rows whose report was judged by other rules than ``rules`` (report meta.rules,
        kverify.check.RULES; a report without it predates them), to judge again
        (``--redo-stale``). Rows journalled without a report (COMPILE_ERROR, a reference that does
        not load) are not stale: no gate judged them."""
        return [kid for kid, meta in self._metas() if _judged_by_other_rules(meta, rules)]

    def judged_elsewhere(self, gpu: str) -> list[str]:
        """Ids of rows whose report was judged on another machine than ``gpu`` (report
        meta.judged_on, kverify.check.judged_on: a GPU's name, e.g. "NVIDIA H200", or "cpu"), to
        judge again on ``gpu`` (``--redo-elsewhere``). Rows whose report does not record it
        (journalled before it was) and rows without a report (no gate judged them) are not."""
        return [kid for kid, meta in self._metas() if meta.get("judged_on") not in (None, gpu)]

    def needs_redo(self, ids: list[str], rules: str) -> tuple[list[str], dict[str, str]]:
        """Of ``ids``, the journalled rows that judging again could change (``kverify audit
        --redo-if-needed``): rows with no report (COMPILE_ERROR, UNJUDGED: no gate judged them),
        rows judged by other rules than ``rules`` (kverify.check.RULES; Journal.stale), and rows
        with a gate record that is kverify's failure or the GPU's, not the row's (GATE_FAULT_MARKS
        in its summary). Returns (those, in the order given; {id: why it is left as it is} for
        the other journalled ones: where a row budget cut a gate short, Journal.budget_cut, the
        why says that a longer run, ``--redo-budget``, judges it again). Ids not journalled are in
        neither: the caller names them."""
        done = self.done()
        faulty = {r[0] for mark in GATE_FAULT_MARKS for r in self.db.execute(
            "SELECT DISTINCT kernel_id FROM gates WHERE instr(summary, ?) > 0", (mark,))}
        metas = dict(self._metas())
        cut = set(self.budget_cut())
        kept, left = [], {}
        for i in dict.fromkeys(ids):
            if i not in done:
                continue
            if i not in metas or _judged_by_other_rules(metas[i], rules) or i in faulty:
                kept.append(i)
            else:
                left[i] = (f"judged by these rules already on {metas[i].get('judged_on') or 'a machine not recorded'},"
                           " with no kverify fault" + (", but a row budget cut a gate short (--redo-budget judges "
                                                       "such rows again, in a longer run)" if i in cut else ""))
        return kept, left

    def _metas(self):
        """(id, report ``meta`` dict) of each row journalled with a report, by id; a report that is
        not JSON or has no meta dict gives {}."""
        for kid, report in self.db.execute("SELECT id, report FROM kernels WHERE report IS NOT NULL AND report != '' "
                                           "ORDER BY id"):
            try:
                meta = json.loads(report).get("meta")
            except (ValueError, AttributeError):
                meta = None
            yield kid, meta if isinstance(meta, dict) else {}

    def forget(self, ids: list[str], why: str) -> None:
        """Take the records of ``ids`` out of the journal, so the next audit checks them again, in
        one transaction; their kernel records are kept in the ``forgotten`` table with ``why``. The
        journal is otherwise append-only: this runs only when asked (``kverify audit --redo``).
        A forgotten record keeps the whole report (Journal.report: with the gates' evidence).
        Raises UsageError naming the ids that are not in the journal (nothing is changed then)."""
        missing = sorted(set(ids) - self.done())
        if missing:
            raise UsageError(f"{self.path}: no journalled row has the id(s) {', '.join(missing)}")
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for i in ids:  # the whole report, its gates' evidence included (their records go now)
                full = self.report(i)
                self.db.execute("INSERT INTO forgotten SELECT id, class, reason, ?, ?, ? FROM kernels WHERE id = ?",
                                (json.dumps(full) if full else None, why, time.time(), i))
                self.db.execute("DELETE FROM gates WHERE kernel_id = ?", (i,))
                self.db.execute("DELETE FROM kernels WHERE id = ?", (i,))
                self.db.execute("DELETE FROM digests WHERE id = ?", (i,))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def counts(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT class, COUNT(*) FROM kernels GROUP BY class").fetchall())

    def rows(self) -> list[tuple]:
        """(id, class, standard, reason, [(gate, verdict), ...]) sorted by id — the comparable content."""
        gates: dict[str, list] = {}
        for kid, gate, verdict in self.db.execute("SELECT kernel_id, gate, verdict FROM gates ORDER BY kernel_id, gate"):
            gates.setdefault(kid, []).append((gate, verdict))
        return [(k, c, s, r, gates.get(k, [])) for k, c, s, r in
                self.db.execute("SELECT id, class, standard, reason FROM kernels ORDER BY id")]

    def close(self) -> None:
        self.db.close()


def stored_report(report: dict) -> dict:
    """What ``kernels.report`` keeps of a check's report: all of it but each gate's "evidence"
    (stored in ``gates.evidence``; Journal.report joins them again)."""
    return {**report, "gates": [{k: v for k, v in g.items() if k != "evidence"} for g in report.get("gates", [])]}


def merge(out: str | Path, inputs: list[str | Path], stats: dict | None = None) -> int:
    """Copy every kernel of ``inputs`` into ``out``; a kernel present in two inputs with different
    content raises UsageError naming both files. Returns the number of kernels in ``out``;
    ``stats`` (a dict, if given) gets "copied" (kernels added to ``out``) and "already" (records
    of kernels ``out`` or an earlier input held already, with the same content: kept once).
    Every input is looked for, and its run options (FIXED_OPTIONS) and kernels compared, before
    ``out`` is written; inputs are opened read-only. An ``out`` this call created is removed again
    when the merge fails."""
    missing = [str(p) for p in inputs if not Path(p).is_file()]
    if missing:
        raise UsageError(f"{', '.join(missing)}: no such journal" + (" (a directory)" if any(Path(m).is_dir() for m in missing)
                                                                    else ""))
    created = not Path(out).exists()
    dst = Journal(out)
    try:
        copied, already = _copy_into(dst, out, inputs)
    except BaseException:
        dst.close()
        if created:
            for suffix in ("", "-wal", "-shm"):
                Path(str(out) + suffix).unlink(missing_ok=True)
        raise
    n = len(dst.done())
    dst.close()
    if stats is not None:
        stats.update(copied=copied, already=already)
    return n


def _fixed(j: "Journal") -> dict | None:
    """FIXED_OPTIONS of the journal's first recorded run (None: no run recorded, e.g. a journal
    from before the runs table: nothing to compare)."""
    runs = sorted(j.select("runs"))
    return None if not runs else {k: v for k, v in json.loads(runs[0][1]).items() if k in FIXED_OPTIONS}


def not_the_row(where: str, changed: list[str], journal, inside: str, after: str) -> str:
    """The refusal for corpus rows ``changed`` (Journal.changed, non-empty) that ``journal`` judged
    from other text: "WHERE: row 'ID' (and N more) is not the row JOURNAL judged (its reference,
    candidate or tolerance differs{inside}){after}" -- ``inside`` says why in the parenthesis,
    ``after`` what to do. Used by the audit (kverify.audit) and the report (kverify.audit_report)."""
    more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
    return (f"{where}: row {changed[0]!r}{more} is not the row {journal} judged "
            f"(its reference, candidate or tolerance differs{inside}){after}")


def unlike_runs(path, mine: dict | None, fixed: tuple[str, dict] | None, why: str) -> tuple[str, dict] | None:
    """Compare a journal's fixed options ``mine`` (``_fixed``) with ``fixed``, the (journal, options)
    of the first journal read that had any. Raises UsageError naming ``path``, the first differing
    field of FIXED_OPTIONS, both values and ``why`` (what unlike runs may not do). Returns the
    (journal, options) to compare the next journal with."""
    if mine is not None and fixed is not None and mine != fixed[1]:
        field = next(k for k in FIXED_OPTIONS if mine.get(k) != fixed[1].get(k))
        raise UsageError(f"{path}: field '{field}': its runs had {field} = {mine.get(field)!r}, "
                         f"{fixed[0]}'s had {fixed[1].get(field)!r}; {why}")
    return fixed if fixed is not None or mine is None else (str(path), mine)


def _copy_into(dst: "Journal", out, inputs) -> tuple[int, int]:
    # first every input's run options and kernels, with nothing written: a refused merge copies nothing
    mine = _fixed(dst)
    fixed = (str(out), mine) if mine is not None else None  # (where from, options); None: no run recorded
    first: dict[str, tuple[str, tuple]] = {r[0]: (str(out), r) for r in dst.rows()}
    digest_of: dict[str, tuple[str, str]] = {k: (str(out), d) for k, d in dst.digests().items()}
    for src_path in inputs:
        src = Journal(src_path, readonly=True)
        try:
            fixed = unlike_runs(src_path, _fixed(src), fixed, "journals of different runs do not merge")
            sums = src.digests()
            for r in src.rows():
                if r[0] in first and first[r[0]][1] != r:
                    raise UsageError(f"kernel {r[0]} differs between {first[r[0]][0]} and {src_path}")
                if r[0] in sums and digest_of.setdefault(r[0], (str(src_path), sums[r[0]]))[1] != sums[r[0]]:
                    raise UsageError(f"kernel {r[0]} was judged from different corpus rows in {digest_of[r[0]][0]} "
                                     f"and {src_path} (their digests differ)")
                first.setdefault(r[0], (str(src_path), r))
        finally:
            src.close()
    seen = {r[0] for r in dst.rows()}
    copied = already = 0
    for src_path in inputs:
        src = Journal(src_path, readonly=True)
        src.db.execute("BEGIN")  # one read transaction: its kernels and gates as of one moment
        sums = src.digests()
        for r in src.rows():
            if r[0] in seen:  # the same content (checked above); its digest kept if it had none yet
                already += 1
                if r[0] in sums:
                    dst.db.execute("INSERT OR IGNORE INTO digests VALUES (?, ?)", (r[0], sums[r[0]]))
                continue
            copied += 1
            seen.add(r[0])
            k = src.db.execute("SELECT * FROM kernels WHERE id = ?", (r[0],)).fetchone()
            g = src.db.execute("SELECT * FROM gates WHERE kernel_id = ?", (r[0],)).fetchall()
            dst.db.execute("BEGIN IMMEDIATE")
            dst.db.execute("INSERT INTO kernels VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", k)
            dst.db.executemany("INSERT INTO gates VALUES (?,?,?,?,?,?,?)", g)
            if r[0] in sums:
                dst.db.execute("INSERT OR REPLACE INTO digests VALUES (?, ?)", (r[0], sums[r[0]]))
            dst.db.execute("COMMIT")
        # the side tables: what --redo took out, the runs' options, the rows tried (each record once)
        dst.db.execute("BEGIN IMMEDIATE")
        for rec in src.select("forgotten"):
            if dst.db.execute("SELECT 1 FROM forgotten WHERE id = ? AND at IS ?", (rec[0], rec[5])).fetchone() is None:
                dst.db.execute("INSERT INTO forgotten VALUES (?,?,?,?,?,?)", rec)
        for rec in src.select("runs"):
            if dst.db.execute("SELECT 1 FROM runs WHERE at = ? AND options = ?", rec).fetchone() is None:
                dst.db.execute("INSERT INTO runs VALUES (?,?)", rec)
        for rec in src.select("tries"):
            if dst.db.execute("SELECT 1 FROM tries WHERE id = ? AND at = ? AND what IS ?", rec).fetchone() is None:
                dst.db.execute("INSERT INTO tries VALUES (?,?,?)", rec)
        dst.db.execute("COMMIT")
        src.close()
    return copied, already
