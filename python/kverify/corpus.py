"""The accepted-kernel corpus (JSONL, one row per accepted candidate; see the corpus README):
fields `id`, `reference`, `candidate`, `harness.allclose_tol`, `problem_name`, `level`, ..."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from kverify.errors import LoadError, UsageError

@dataclass
class CorpusRow:
    id: str
    reference: str
    candidate: str
    tolerance: float
    row: dict

    def paths(self, file: str) -> tuple[str, str]:
        """Display names of the reference and candidate: FILE#ID:reference / :candidate."""
        return f"{file}#{self.id}:reference", f"{file}#{self.id}:candidate"


def iter_rows(file: str):
    """Yield (line number, row dict). Raises LoadError naming the file, line and reason."""
    p = Path(file)
    if not p.is_file():
        raise LoadError(file, "not a file" if p.exists() else "no such corpus file")
    with p.open("rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise LoadError(f"{file}:{n}", f"not UTF-8 text: {e.reason} at byte {e.start}") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise LoadError(f"{file}:{n}", f"not valid JSON: {e.msg} (column {e.colno})") from None
            if not isinstance(row, dict):
                raise LoadError(f"{file}:{n}", "row is not a JSON object")
            _check_fields(f"{file}:{n}", row)
            yield n, row


def default_id(file: str, position: int) -> str:
    """The id of a corpus row that carries none (CUDA-L1's records): the corpus file's name (not the
    path as typed: ./c.jsonl and c.jsonl must resume the same journal) and the row's 0-based
    ``position`` among the file's rows (blank lines not counted)."""
    return f"{Path(file).name}:row{position}"


def identified_rows(file: str):
    """Yield (position, line number, row dict) for each row of ``file`` (iter_rows), its ``id`` set
    (default_id where it carries none): the journal's key. Raises LoadError as iter_rows does, and
    UsageError naming the file, the line and the earlier line for an id two rows share (a repeat
    would be skipped or collide in the journal)."""
    seen: dict = {}
    for p, (line, r) in enumerate(iter_rows(file)):
        r.setdefault("id", default_id(file, p))
        if r["id"] in seen:
            raise UsageError(f"{file}:{line}: field 'id': {r['id']!r} is also the id of line {seen[r['id']]}")
        seen[r["id"]] = line
        yield p, line, r


#: fields the journal and report keep (kverify.journal.Journal.record), with their JSON types;
#: each may be absent or null
TEXT_FIELDS = ("id", "source_repo", "problem_name", "problem_version", "backend")


def _check_fields(where: str, row: dict) -> None:
    """Raise LoadError naming ``where`` and the field when a field the journal keeps has the wrong
    type: the text fields TEXT_FIELDS and ``harness.gpu`` strings, ``level`` an integer."""
    for k in TEXT_FIELDS:
        if row.get(k) is not None and not isinstance(row[k], str):
            raise LoadError(where, f"field '{k}' must be a string, got {json.dumps(row[k])[:60]}")
    level = row.get("level")
    if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
        raise LoadError(where, f"field 'level' must be an integer, got {json.dumps(level)[:60]}")
    h = row.get("harness")
    if isinstance(h, dict) and h.get("gpu") is not None and not isinstance(h["gpu"], str):
        raise LoadError(where, f"field 'harness.gpu' must be a string, got {json.dumps(h['gpu'])[:60]}")
    _sources(where, row)  # the fields every reader needs: a row without them is a bad file, not a verdict


def row_digest(row: dict) -> str:
    """SHA-256 (hex) of what a check of the row judges: its ``id``, reference and candidate texts
    and standard-test tolerance (row_sources: CUDA-L1's ``ref_code``/``custom_code`` alike), as
    canonical JSON. The journal keeps it per record (kverify.journal.Journal.record), so that a
    resumed audit, ``merge`` or ``report --corpus`` refuses a corpus whose row of the same id would
    be judged differently; fields that only describe the row (source, level, GPU, notes) may
    change. A row whose sources do not load hashes as the whole row."""
    try:
        ref, cand, tol = _sources("", row)
        what = {"id": row.get("id"), "reference": ref, "candidate": cand, "tolerance": tol}
    except LoadError:
        what = row
    return hashlib.sha256(json.dumps(what, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def row_sources(file: str, row: dict, line: int | None = None) -> CorpusRow:
    """The reference, candidate and tolerance of one row: corpus rows (`reference`, `candidate`,
    `harness.allclose_tol`) or CUDA-L1 records (`ref_code`, `custom_code`; tolerance 1e-2, as in
    CUDA-L1's eval/eval_cuda.py). Raises LoadError naming the file, line and field."""
    where = f"{file}:{line}" if line else f"{file}#{row.get('id')}"
    ref, cand, tol = _sources(where, row)
    return CorpusRow(str(row.get("id")), ref, cand, tol, row)


def _sources(where: str, row: dict) -> tuple[str, str, float]:
    """(reference, candidate, tolerance) of ``row`` (row_sources); raises LoadError naming ``where``
    and the field."""
    ref = row.get("reference", row.get("ref_code"))
    cand = row.get("candidate", row.get("custom_code"))
    for k, v in (("reference", ref), ("candidate", cand)):
        if not isinstance(v, str):
            raise LoadError(where, f"field '{k}' (or CUDA-L1 '{'ref_code' if k == 'reference' else 'custom_code'}') "
                                   "missing or not a string")
    harness = row.get("harness", {})
    if not isinstance(harness, dict):
        raise LoadError(where, f"field 'harness' must be an object, got {type(harness).__name__}")
    tol = harness.get("allclose_tol", 1e-2)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol > 0:
        raise LoadError(where, f"field 'harness.allclose_tol' must be a positive number, got {tol!r}")
    return ref, cand, float(tol)


def load_row(file: str, row_id: str) -> CorpusRow:
    """The row with ``id == row_id`` (CUDA-L1 records without an id: default_id). The whole file
    is read and checked as an audit reads it (identified_rows), so ``check --corpus`` accepts only a
    corpus that ``audit`` accepts. Raises LoadError (file, line, field, reason) for a malformed
    line or when no row has the id; UsageError for an id two rows share."""
    found = None
    for _, n, row in identified_rows(file):
        if row["id"] == row_id:
            found = (n, row)
    if found is None:
        raise LoadError(file, f"no row with id '{row_id}'")
    return row_sources(file, found[1], found[0])
