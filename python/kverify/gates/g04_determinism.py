"""G04 determinism — tolerance-free.

Contract: the same inputs, copied to new addresses for each of several runs in one process, give
bitwise identical outputs (64-bit digests). N/A only when the reference itself is not
deterministic on this device.
Catches: atomics whose summation order varies, reads of uninitialised memory, races (a missing
__syncthreads), address-dependent paths (alignment-specialised code with different rounding).
Controls: examples/*/g04_*.py.
"""
from __future__ import annotations

import torch

from kverify import engine
from kverify.gates.base import Context
from kverify.problem import STATE_LOCK

GATE, NAME, TOLERANCE_FREE = "G04", "determinism", True
RUNS = 5


def applies(ctx: Context) -> str | None:
    return None


def plan(ctx: Context) -> list[dict]:
    return [ctx.job("determinism", "G04", runs=RUNS)]


@torch.no_grad()
def _reference_deterministic(ctx: Context, job: dict) -> bool:
    """Three runs of the low-precision reference at the job's binding give the same bits? Holds
    STATE_LOCK and binds the job's shape first: the reference may read its module's free
    dimensions, which another gate's planning (G05) may have left at another value. A run that
    runs out of GPU memory runs again (Oracle.retrying, fresh copies of the inputs)."""
    x = ctx.inputs_of(job)
    digests = set()
    with STATE_LOCK:
        ref, _ = ctx.oracle.models(job.get("binding"))
        ctx.problem.bind(job.get("binding"))
        for _ in range(3):
            ctx.oracle.check_budget()
            y = ctx.oracle.retrying(lambda: ref(*[t.clone() if isinstance(t, torch.Tensor) else t for t in x]))
            ys = y if isinstance(y, (list, tuple)) else [y]
            digests.add(tuple(engine.digest(o) for o in ys if isinstance(o, torch.Tensor)))
    return len(digests) == 1


def judge(ctx: Context, results: dict) -> dict:
    job = ctx.job("determinism", "G04", runs=RUNS)
    return engine.judge(GATE, {"runs": results["G04"]["runs"],
                               "reference_deterministic": _reference_deterministic(ctx, job)})
