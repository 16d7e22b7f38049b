"""Terminal and JSON views of check reports (JSON is the source of truth)."""
from __future__ import annotations

import json

from rich.console import Console
from rich.markup import escape
from rich.table import Table

STYLE = {"PASS": "green", "FAIL": "bold red", "CRASH": "bold red", "TIMEOUT": "bold red", "ERROR": "magenta",
         "UNSUPPORTED": "yellow", "N/A": "dim"}


def verdict_text(v: str) -> str:
    return f"[{STYLE.get(v, '')}]{v}[/]"


def gate_table(report: dict, verbose: bool = False) -> Table:
    """One row per gate (verdict, one-line evidence), then the standard test, then the class."""
    t = Table(title=f"candidate {report['candidate']}  (reference {report['reference']})  [{report['device']}]",
              title_justify="left")
    t.add_column("gate")
    t.add_column("name")
    t.add_column("verdict")
    t.add_column("evidence", overflow="fold")
    for g in report["gates"]:
        ev = g["summary"]
        vals = g.get("evidence", {}).get("values")
        if vals and g["verdict"] == "FAIL":
            ev += f"  [index {vals['index']}: candidate {vals['candidate']}, oracle {vals['oracle']}]"
        if verbose and g.get("evidence"):
            ev += "\n" + json.dumps(g["evidence"], default=str)[:2000]
        t.add_row(g["gate"], g["name"], verdict_text(g["verdict"]), escape(ev))
    s = report["standard"]
    t.add_row("std", "standard test", verdict_text(s["verdict"]), escape(s["summary"]), end_section=True)
    t.add_row("", "class", f"[bold]{report['class']}[/]", "")
    return t


def replay_command(report: dict) -> str | None:
    """A command that reruns the failing gates with the same seed, or None when nothing failed."""
    failed = [g["gate"] for g in report["gates"] if g["verdict"] in ("FAIL", "CRASH", "TIMEOUT", "ERROR")]
    if not failed:
        return None
    src = report.get("meta", {}).get("replay_source") or f"{report['reference']} {report['candidate']}"
    return f"kverify check {src} --device {report['device']} --seed {report['seed']} --gates {','.join(failed)} -v"


def gate_shape_line(report: dict) -> str | None:
    """Where the small-shape gates ran (meta.gate_shape), when that is worth a line: a small shape,
    or the own shape for a reason other than small inputs; None otherwise."""
    from kverify.check import SMALL_SHAPE_GATES

    shape = report.get("meta", {}).get("gate_shape") or {}
    ran = [g["gate"] for g in report.get("gates", []) if g["gate"] in SMALL_SHAPE_GATES and g["verdict"] != "N/A"]
    if shape.get("binding") and ran:
        dims = ", ".join(f"{k}={v}" for k, v in shape["binding"].items())
        small = [g for g in ran if g != "G05"]
        what = (", ".join(small) + " ran at " + dims if small else "the gates' small shape: " + dims) + \
            (" (G05 varied one dimension at a time around it)" if "G05" in ran else "")
        return f"{what}: {shape.get('why', '')}"
    why = shape.get("why") or ""
    if why and not why.startswith(("the inputs are small", "no gate of the check")):
        return f"every gate ran at the own shape: {why}"
    return None


def borrowed_line(report: dict) -> str | None:
    """The names the candidate reads from the reference's file (meta.borrowed), when any: legal in
    KernelBench's harness, which runs both files in one namespace, but the candidate does not stand
    alone (kverify.problem.borrowed_names)."""
    names = report.get("meta", {}).get("borrowed") or []
    if not names:
        return None
    return (f"the candidate reads {', '.join(names)} from the reference's file (loaded in its namespace, as "
            "KernelBench's harness does; where it reads them on a path that runs, it would raise NameError alone)")


def print_report(report: dict, verbose: bool = False, console: Console | None = None) -> None:
    console = console or Console()
    console.print(gate_table(report, verbose))
    for line in (gate_shape_line(report), borrowed_line(report)):
        if line:
            console.print(escape(line), highlight=False, soft_wrap=True)
    cmd = replay_command(report)
    if cmd:
        console.print(f"replay: {escape(cmd)}", highlight=False, soft_wrap=True)


def write_json(report: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
