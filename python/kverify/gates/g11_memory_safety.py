"""G11 memory-safety — tolerance-free.

Contract: (1) every tensor input placed inside a buffer with guard bands of sentinel values before
and after it: the call leaves the bands intact (no out-of-bounds write) and gives the same bits
when the bands hold other values (no out-of-bounds read reaches the output); CPU and GPU.
(2) On a GPU with compute-sanitizer: memcheck, racecheck, initcheck and synccheck, each in its own
child process with its own timeout, report no error for the candidate's call at a small shape.
Without a GPU or sanitizer that part is N/A with the reason; the guard bands still run.
Catches: out-of-bounds reads past the last tile, writes past the end of an output or input,
missing __syncthreads (racecheck), shared memory read before written (initcheck).
Controls: controls/g11_*.
"""
from __future__ import annotations

import re
import shutil
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


def _sanitizer(ctx: Context) -> dict:
    if ctx.device != "cuda":
        return {"not_applicable": "CPU run (compute-sanitizer needs a GPU)"}
    exe = shutil.which("compute-sanitizer")
    if not exe:
        return {"not_applicable": "compute-sanitizer not found on PATH"}
    b = ctx.small_binding()
    job = ctx.job_at("run", "G11/sanitized", b, ctx.specs_at(b))
    tools = []
    for tool in TOOLS:
        o = ctx.sandbox.run([job], tag=f"G11-{tool}", timeout=SANITIZER_TIMEOUT,
                            wrapper=[exe, "--tool", tool, "--print-limit", "20", "--target-processes", "all"])[0]
        text = Path(o.log).read_text(errors="replace") if o.log else ""
        m = re.search(r"ERROR SUMMARY:\s*(\d+)", text)
        errors = int(m.group(1)) if m else (0 if o.status == "ok" else -1)
        first = next((l.strip() for l in text.splitlines() if l.startswith("========= ") and
                      ("Invalid" in l or "Race" in l or "Uninitialized" in l or "hazard" in l.lower()
                       or "Barrier" in l)), "")
        rec = {"tool": tool, "errors": max(errors, 0), "first": first[:200], "binding": b}
        if o.status != "ok":
            rec.update(errors=max(errors, 1), first=f"{o.status}: {o.detail[:160]}")
        tools.append(rec)
    return {"tools": tools}


def judge(ctx: Context, results: dict) -> dict:
    return engine.judge(GATE, {"guard": results["G11/guard"], "sanitizer": _sanitizer(ctx)})
