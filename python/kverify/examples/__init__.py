"""Embedded example problems for `kverify demo`: each folder holds a KernelBench-style
reference.py, a correct candidate (correct.py) and candidates with one planted defect each,
named gNN_<defect>.py after the gate that must catch it (first line: a docstring saying how)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parent


def problems() -> list[Path]:
    """Folders of the example problems, sorted."""
    return sorted(p for p in ROOT.iterdir() if (p / "reference.py").is_file())


def candidates(problem: Path) -> list[tuple[Path, str | None]]:
    """(candidate file, gate that must catch it or None for the correct twin)."""
    out = []
    for f in sorted(problem.glob("*.py")):
        if f.name == "reference.py" or f.name.startswith("_"):
            continue
        out.append((f, None if f.stem == "correct" else f.stem.split("_")[0].upper()))
    return out


def corpus_rows() -> list[dict]:
    """The examples as corpus rows (kverify.corpus: ``id`` PROBLEM/CANDIDATE, ``reference``,
    ``candidate``, ``problem_name``, ``harness.allclose_tol`` 1e-2, and ``planted``: the gate that
    must catch the candidate, null for the correct twin), problems and candidates sorted: what
    ``kverify demo --write-corpus`` writes, a small corpus to try ``audit``, ``merge`` and
    ``report`` on."""
    rows = []
    for prob in problems():
        ref = (prob / "reference.py").read_text()
        for f, gate in candidates(prob):
            rows.append({"id": f"{prob.name}/{f.stem}", "reference": ref, "candidate": f.read_text(),
                         "problem_name": prob.name, "source_repo": "kverify/examples",
                         "harness": {"allclose_tol": 1e-2}, "planted": gate})
    return rows
