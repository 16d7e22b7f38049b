"""G11 memory-safety — tolerance-free.

Contract: (1) every tensor input placed inside a buffer with guard bands of sentinel values before
and after it: the call leaves the bands intact (no out-of-bounds write) and gives the same bits
when the bands hold other values (no out-of-bounds read reaches the output); CPU and GPU.
(2) On a GPU with compute-sanitizer: memcheck, racecheck, initcheck and synccheck, each in its own
child process with its own timeout (the four at once, and beside the check's main worker; failed
CUDA API calls not counted), report no error for the candidate's call at a small shape.
Without a GPU or sanitizer that part is N/A with the reason; the guard bands still run.
Catches: out-of-bounds reads past the last tile, writes past the end of an output or input,
missing __syncthreads (racecheck), reads of never-written global memory (initcheck; it does not track
shared memory: a shared-memory read before any write has no sanitizer and is left to G04 and G02).
Controls: controls/g11_*.
"""
from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kverify import engine
from kverify.gates.base import Context

GATE, NAME, TOLERANCE_FREE = "G11", "memory-safety", True
BAND = 4096  # elements on each side of every input
TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
SANITIZER_TIMEOUT = 300.0  # seconds per tool run (the worker is slow under a sanitizer)


def applies(ctx: Context) -> str | None:
    return None


def plan(ctx: Context) -> list[dict]:
    return [ctx.job("guard", "G11/guard", band=BAND)]


def _sanitized_worker(tool: str, exe: str) -> dict:
    """The Sandbox.run/prestart arguments of the worker of one sanitizer tool."""
    return {"tag": f"G11-{tool}", "env": SANITIZED_ENV,
            "wrapper": [exe, "--tool", tool, "--print-limit", "20", "--target-processes", "all",
                        "--report-api-errors", "no"]}


def prestart(sandbox, device: str) -> None:
    """Start the four sanitized workers at the beginning of the check (Sandbox.prestart), so
    they import torch and load the candidate under the sanitizer while the problem is prepared;
    start()'s runs then hand them their job. Nothing without a GPU or compute-sanitizer."""
    exe = shutil.which("compute-sanitizer")
    if device != "cuda" or not exe:
        return
    for tool in TOOLS:
        sandbox.prestart(**_sanitized_worker(tool, exe))


def start(ctx: Context):
    """The sanitizer runs need nothing from the other gates: check() calls this in its own thread
    before the main worker starts and runs the returned callable beside it (None: nothing to run).
    The job is built here, in the caller's thread (it may run the oracle); the callable only
    launches the four sanitized workers and parses their logs."""
    if ctx.device != "cuda":
        return lambda: {"not_applicable": "CPU run (compute-sanitizer needs a GPU)"}
    exe = shutil.which("compute-sanitizer")
    if not exe:
        return lambda: {"not_applicable": "compute-sanitizer not found on PATH"}
    b = ctx.small_binding()
    job = ctx.job_at("run", "G11/sanitized", b, ctx.specs_at(b))

    def one(tool: str) -> dict:
        o = ctx.sandbox.run([job], timeout=SANITIZER_TIMEOUT, **_sanitized_worker(tool, exe))[0]
        text = Path(o.log).read_text(errors="replace") if o.log else ""
        errors, first = parse_sanitizer(text)
        rec = {"tool": tool, "errors": errors, "first": first[:200], "binding": b}
        if o.status != "ok":
            rec.update(errors=max(errors, 1), first=f"{o.status}: {o.detail[:160]}")
        elif not re.search(r"(ERROR|RACECHECK) SUMMARY", text):
            rec.update(errors=max(errors, 1), first="compute-sanitizer printed no summary: " + text[-160:])
        elif errors and not first:  # counted but no finding line: show the log's end
            rec.update(first="(no finding line) " + text.strip()[-160:])
        return rec

    def run() -> dict:
        # the four tools are independent child processes: run them at once (each has its own folder)
        with ThreadPoolExecutor(len(TOOLS)) as pool:
            return {"tools": list(pool.map(one, TOOLS))}
    return run


#: every tensor its own cudaMalloc of its exact size: a read past the end of a tensor is then a read
#: past the end of an allocation, which memcheck sees (inside a caching-allocator block it cannot)
SANITIZED_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
#: a finding's first line (its detail lines are indented further)
_FINDING = re.compile(r"^========= (Invalid|Error|Race|Uninitialized|Barrier|Warning: Race)")


def parse_sanitizer(text: str) -> tuple[int, str]:
    """(errors, first finding) from compute-sanitizer output: the largest of "ERROR SUMMARY: N
    errors", racecheck's "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)" (E) and the
    number of finding lines; the first finding line."""
    counts = [int(m) for m in re.findall(r"ERROR SUMMARY:\s*(\d+)", text)]
    counts += [int(m) for m in re.findall(r"RACECHECK SUMMARY:.*?\((\d+) errors?", text)]
    findings = [ln.strip() for ln in text.splitlines() if _FINDING.match(ln)]
    return max([0, len(findings), *counts]), (findings[0] if findings else "")


def judge(ctx: Context, results: dict) -> dict:
    sanitizer = ctx.background_result(GATE, start)
    return engine.judge(GATE, {"guard": results["G11/guard"], "sanitizer": sanitizer})
