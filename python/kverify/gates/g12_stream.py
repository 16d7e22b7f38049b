"""G12 stream — tolerance-free.

Contract: (CUDA) called on a non-default stream whose queue still holds writes to the inputs
(a spin, then the copies), the result reflects those writes and is complete once that stream
alone is synchronised (read on that stream, which waits for no other); (CPU and CUDA) the call
leaves no extra Python thread running and replaces no framework or timer function
(torch.cuda.synchronize, Event.elapsed_time, torch.allclose, time.perf_counter, ... compared by
identity before loading the candidate and after its calls).
Windows (rules 2026-12-01.4; kverify._internal.worker.stream_attempts): a right output counts
only if the call began and returned while the spin before the copies still had half its length
to run; else the spin grows (1e8, then 1e9 GPU cycles: ~50 ms, 0.5 s at the H200's clock). One
50 ms spin let a late (descheduled) process pass: on the H200 audit two rows judged twice failed
once and passed once. A call that begins inside every window and itself outlasts it (it waits
for the GPU) passes with "stream order not observable"; a call that began only after the spin
every time (the harness was late) and outputs two plain calls disagree on leave the stream part
not established (ERROR; G04 judges the latter). The functions the measurement
relies on (Event.query, _sleep, Stream, stream) are watched too.
Catches: kernels launched on the legacy default stream or a private stream without joining the
current one, work left running in a background thread, harness monkey-patching (timers made to
lie, allclose made to pass).
Controls: controls/g12_*, controls/cuda/g12_* (GPU: side stream, legacy stream).
"""
from __future__ import annotations

from kverify import engine
from kverify.gates.base import Context

GATE, NAME, TOLERANCE_FREE = "G12", "stream", True


def applies(ctx: Context) -> str | None:
    return None


#: judged after every worker has ended (kverify.check._Judging), not as soon as its job is in:
#: judge() merges the findings each worker reports after its last job (Sandbox.tampering)
JUDGE_AFTER_ALL_RUNS = True


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
