"""`kverify controls`: every positive control through all twelve gates.

Controls are planted-defect candidates, each tagged with the gate that must catch it, and correct
twins that must pass every gate: the embedded examples (kverify/examples: defects for G01-G04,
G07, G08, one correct twin per problem) and the folders of controls/ (`gNN_<defect>/` with
reference.py, defect.py and twin.py; Python, runnable on CPU and GPU) and, on a GPU, those of
controls/cuda/ (CUDA kernels through load_inline). Prints the matrix control x gate, then
"caught by intended gate N/M, false alarms on twins K"; exit 0 only when N = M and K = 0.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console

from kverify.check import check, resolve_device
from kverify.demo import FAILING, LEGEND, matrix
from kverify.errors import UsageError
from kverify.examples import candidates, problems
from kverify.gates import GATES


def controls_root() -> Path:
    """The installed controls (kverify/controls), or the source tree's controls/ folder."""
    here = Path(__file__).resolve().parent
    for p in (here / "controls", here.parents[1] / "controls"):
        if p.is_dir():
            return p
    raise FileNotFoundError("controls folder not found (neither installed nor in the source tree)")


def collect(device: str = "cpu") -> list[tuple[str, Path, Path, str | None]]:
    """(name, reference, candidate, intended gate or None for a twin) of every control; the CUDA
    kernels of controls/cuda/ only when ``device`` is "cuda"."""
    out = []
    for p in problems():
        for c, gate in candidates(p):
            out.append((f"examples/{p.name}/{c.stem}", p / "reference.py", c, gate))
    roots = [controls_root()] + ([controls_root() / "cuda"] if device == "cuda" else [])
    for root in roots:
        prefix = "cuda/" if root.name == "cuda" else ""
        for d in sorted(x for x in root.iterdir() if (x / "reference.py").is_file()):
            gate = d.name.split("_")[0].upper()
            out.append((f"{prefix}{d.name}/defect", d / "reference.py", d / "defect.py", gate))
            out.append((f"{prefix}{d.name}/twin", d / "reference.py", d / "twin.py", None))
    return out


def select(work: list, only: list[str] | None) -> list:
    """The controls of ``work`` (collect) whose name contains any of ``only`` (all when None).
    Raises UsageError when ``only`` matches none."""
    if not only:
        return work
    picked = [w for w in work if any(o in w[0] for o in only)]
    if not picked:
        raise UsageError(f"--only {' '.join(only)}: no control's name contains it "
                         f"(names look like {work[0][0]!r}, 'cuda/g11_missing_syncthreads_cuda/defect')")
    return picked


def run_controls(device: str | None = None, seed: int = 0, timeout: float = 120.0, jobs: int = 2,
                 only: list[str] | None = None) -> int:
    """Check every control (or those ``only`` selects, select()) and print the controls x gates
    matrix; 0 when every planted defect is caught by its intended gate and no twin fails a gate."""
    device = resolve_device(device)
    console = Console(width=max(120, Console().width))
    work = select(collect(device), only)
    t0 = time.monotonic()
    progress = Console(stderr=True, width=console.width)
    done = [0]
    lock = threading.Lock()

    def one(w):
        name, ref, cand, gate = w
        r = check(ref.read_text(), str(ref), cand.read_text(), str(cand), device=device, seed=seed, timeout=timeout)
        failing = [g["gate"] for g in r["gates"] if g["verdict"] in FAILING]
        with lock:  # one line per finished check, so a run cut short still shows what it did
            done[0] += 1
            progress.print(f"[{done[0]}/{len(work)}] {name} ({gate or 'twin'}): failing {','.join(failing) or 'none'}"
                           f"  {time.monotonic() - t0:.0f} s", soft_wrap=True, highlight=False)
        return r

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        reports = list(pool.map(one, work))
    wall = time.monotonic() - t0
    gate_ids = list(GATES)
    console.print(matrix(f"controls x gates  [{device}]", [(n, g, r) for (n, _, _, g), r in zip(work, reports)],
                         gate_ids))
    console.print(LEGEND, soft_wrap=True)
    caught = planted = false_alarms = 0
    per_gate: dict[str, list[int]] = {g: [0, 0] for g in gate_ids}
    problems_seen = []
    for (name, _, _, gate), r in zip(work, reports):
        verdicts = {g["gate"]: g["verdict"] for g in r["gates"]}
        summaries = {g["gate"]: g.get("summary", "")[:300] for g in r["gates"]}
        if gate is None:
            bad = [g for g, v in verdicts.items() if v in FAILING]
            false_alarms += len(bad)
            problems_seen += [f"false alarm: {name} {g}: {verdicts[g]} — {summaries[g]}" for g in bad]
        else:
            planted += 1
            per_gate[gate][1] += 1
            if verdicts.get(gate) == "FAIL":
                caught += 1
                per_gate[gate][0] += 1
            else:
                problems_seen.append(f"missed: {name} ({gate}: {verdicts.get(gate)} — {summaries.get(gate, '')})")
    console.print("per gate (caught/planted): " + ", ".join(f"{g} {c}/{n}" for g, (c, n) in per_gate.items()),
                  soft_wrap=True)
    for p in problems_seen:
        console.print("  " + p, soft_wrap=True)
    console.print(f"caught by intended gate {caught}/{planted}, false alarms on twins {false_alarms} "
                  f"({len(work)} checks, {wall:.0f} s wall)", soft_wrap=True)
    return 0 if caught == planted and false_alarms == 0 else 1
