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
    """The core's G12 rule on the "G12" job's measurements, with the process-wide findings
    (patched functions, extra threads) of the other workers that ran gates' jobs (G05's, G09 and
    G10's "gates-b", kverify.check.worker_of) merged in, as each reported after its last job: a
    candidate that tampers only there (after many calls, or on extreme inputs) is seen too."""
    m = dict(results["G12"])
    if "patched" in m:
        from kverify.check import MAIN_WORKER, worker_of
        from kverify.gates import GATES

        others = {worker_of(g) for g in GATES} - {MAIN_WORKER}
        seen = getattr(ctx.sandbox, "tampering", {})
        where = {}
        for tag in sorted(others & set(seen)):
            t = seen[tag]
            m["patched"] = list(dict.fromkeys([*m["patched"], *t["patched"]]))
            m["threads_added"] = max(m.get("threads_added", 0), t["threads_added"])
            if t["patched"] or t["threads_added"]:
                where[tag] = t
        if where:
            m["other_workers"] = where
    return engine.judge(GATE, m)
