"""G12 stream — tolerance-free.

Contract: (CUDA) called on a non-default stream whose queue still holds writes to the inputs
(a ~50 ms spin, then the copies), the result reflects those writes and is complete once that
stream alone is synchronised; (CPU and CUDA) the call leaves no extra Python thread running and
replaces no framework or timer function (torch.cuda.synchronize, Event.elapsed_time,
torch.allclose, time.perf_counter, ... compared by identity before loading the candidate and
after its calls).
Catches: kernels launched on the legacy default stream or a private stream without joining the
current one, work left running in a background thread, harness monkey-patching (timers made to
lie, allclose made to pass).
Controls: controls/g12_*.
"""
from __future__ import annotations

from kverify import engine
from kverify.gates.base import Context

GATE, NAME, TOLERANCE_FREE = "G12", "stream", True


def applies(ctx: Context) -> str | None:
    return None


def plan(ctx: Context) -> list[dict]:
    return [ctx.job("stream", "G12")]


def judge(ctx: Context, results: dict) -> dict:
    return engine.judge(GATE, results["G12"])
