"""`kverify demo`: check every embedded example candidate (kverify/examples) and print, per
problem, the matrix candidate x gate with the standard test beside it, then one line: planted
defects caught by their intended gate N/M, false alarms on the correct twins K.
Exit 0 only when N = M and K = 0."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from rich.console import Console
from rich.table import Table

from kverify.check import check, resolve_device
from kverify.examples import candidates, problems
from kverify.gates import GATES
from kverify.report import STYLE

FAILING = ("FAIL", "CRASH", "TIMEOUT", "ERROR")
SHORT = {"PASS": "ok", "FAIL": "F", "N/A": "-", "UNSUPPORTED": "U", "CRASH": "C", "TIMEOUT": "T", "ERROR": "E"}
LEGEND = "ok pass, F fail, - n/a, U unsupported, C crash, T timeout, E kverify error; underlined: the intended gate"


def cell(v: str, intended: bool = False) -> str:
    text = f"[{STYLE.get(v, '')}]{SHORT.get(v, v)}[/]"
    return f"[u]{text}[/u]" if intended else text


def matrix(title: str, rows: list[tuple[str, str | None, dict]], gate_ids: list[str]) -> Table:
    """Candidate x gate table: rows of (name, intended gate or None, report)."""
    t = Table(title=title, title_justify="left", pad_edge=False)
    t.add_column("candidate", overflow="fold")
    for g in gate_ids:
        t.add_column(g[1:], justify="center")
    t.add_column("std", justify="center")
    t.add_column("class")
    for name, gate, r in rows:
        verdicts = {g["gate"]: g["verdict"] for g in r["gates"]}
        t.add_row(name, *[cell(verdicts.get(g, "-"), g == gate) for g in gate_ids],
                  cell(r["standard"]["verdict"]), r["class"])
    return t


def _one(problem, cand, device, seed, timeout, gate_ids):
    ref = problem / "reference.py"
    return check(ref.read_text(), str(ref), cand.read_text(), str(cand), device=device, seed=seed, timeout=timeout,
                 gates=gate_ids)


def run_demo(device: str | None = None, seed: int = 0, timeout: float = 120.0, jobs: int = 2,
             gates: list[str] | None = None) -> int:
    """Check the examples with ``gates`` (default all); defects whose gate is not selected are shown
    but not counted."""
    device = resolve_device(device)
    gate_ids = gates or list(GATES)
    console = Console(width=max(120, Console().width))
    work = [(p, c, gate) for p in problems() for c, gate in candidates(p)]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        reports = list(pool.map(lambda w: _one(w[0], w[1], device, seed, timeout, gate_ids), work))
    caught = planted = false_alarms = 0
    missed: list[str] = []
    for p in problems():
        rows = [(c.stem, gate, r) for (pp, c, gate), r in zip(work, reports) if pp == p]
        console.print(matrix(f"{p.name}  [{device}]", rows, gate_ids))
        for name, gate, r in rows:
            verdicts = {g["gate"]: g["verdict"] for g in r["gates"]}
            if gate is None:
                false_alarms += sum(v in FAILING for v in verdicts.values())
            elif gate in gate_ids:
                planted += 1
                if verdicts.get(gate) == "FAIL":
                    caught += 1
                else:
                    missed.append(f"{p.name}/{name} ({gate}: {verdicts.get(gate)})")
    console.print(LEGEND, soft_wrap=True)
    std_pass = sum(r["standard"]["verdict"] == "PASS" for (_, _, g), r in zip(work, reports) if g)
    console.print(f"planted defects caught by their intended gate: {caught}/{planted}; "
                  f"false alarms on correct twins: {false_alarms}; "
                  f"defective candidates the standard test passed: {std_pass}/{planted}", soft_wrap=True)
    for m in missed:
        console.print(f"  missed: {m}", soft_wrap=True)
    return 0 if caught == planted and false_alarms == 0 else 1
