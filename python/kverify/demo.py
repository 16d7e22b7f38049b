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
from kverify.report import verdict_text

FAILING = ("FAIL", "CRASH", "TIMEOUT", "ERROR")


def _one(problem, cand, device, seed, timeout):
    ref = problem / "reference.py"
    return check(ref.read_text(), str(ref), cand.read_text(), str(cand), device=device, seed=seed, timeout=timeout)


def run_demo(device: str | None = None, seed: int = 0, timeout: float = 120.0, jobs: int = 2) -> int:
    device = resolve_device(device)
    console = Console()
    work = [(p, c, gate) for p in problems() for c, gate in candidates(p)]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        reports = list(pool.map(lambda w: _one(w[0], w[1], device, seed, timeout), work))
    caught = planted = false_alarms = 0
    missed: list[str] = []
    for p in problems():
        t = Table(title=f"{p.name}  [{device}]", title_justify="left")
        t.add_column("candidate")
        for g in GATES:
            t.add_column(g)
        t.add_column("standard")
        t.add_column("class")
        for (pp, c, gate), r in zip(work, reports):
            if pp != p:
                continue
            verdicts = {g["gate"]: g["verdict"] for g in r["gates"]}
            cells = []
            for g in GATES:
                v = verdicts.get(g, "-")
                cells.append(("[u]" + verdict_text(v) + "[/u]") if g == gate else verdict_text(v))
            t.add_row(c.stem, *cells, verdict_text(r["standard"]["verdict"]), r["class"])
            if gate is None:
                false_alarms += sum(v in FAILING for v in verdicts.values())
            else:
                planted += 1
                if verdicts.get(gate) == "FAIL":
                    caught += 1
                else:
                    missed.append(f"{p.name}/{c.name} ({gate}: {verdicts.get(gate)})")
        console.print(t)
    std_pass = sum(r["standard"]["verdict"] == "PASS" for (_, _, g), r in zip(work, reports) if g)
    console.print(f"planted defects caught by their intended gate: {caught}/{planted}; "
                  f"false alarms on correct twins: {false_alarms}; "
                  f"defective candidates the standard test passed: {std_pass}/{planted}", soft_wrap=True)
    for m in missed:
        console.print(f"  missed: {m}", soft_wrap=True)
    return 0 if caught == planted and false_alarms == 0 else 1
