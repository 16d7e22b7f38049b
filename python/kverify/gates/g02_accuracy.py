"""G02 accuracy — tolerance-based, bound calibrated on the reference.

Contract: at the problem's own shape, for several fresh seeds, the normwise relative error
against the fp64 oracle is within max(dtype floor, 16 x the low-precision reference's own error)
and every element is within atol + rtol|oracle| (core: gates::g02_bound).
Catches: lower-precision accumulation, wrong formulas that pass a loose allclose on small
outputs, returning zeros/constants/a near-copy of the input (normwise error ~1 whatever the scale).
Controls: examples/*/g02_*.py.
"""
from __future__ import annotations

from kverify import engine
from kverify.gates.base import Context, shape_problem, values

GATE, NAME, TOLERANCE_FREE = "G02", "accuracy", False
SEEDS = 3


def applies(ctx: Context) -> str | None:
    return None


def plan(ctx: Context) -> list[dict]:
    return [ctx.job("run", f"G02/{k}") for k in range(SEEDS)]


def judge(ctx: Context, results: dict) -> dict:
    runs = []
    for k in range(SEEDS):
        job = ctx.job("run", f"G02/{k}")
        oracle, ref = ctx.expected(job)
        outs = []
        for i, (o, r) in enumerate(zip(oracle, ref)):
            cand = results[job["id"]]["outputs"][i] if i < len(results[job["id"]]["outputs"]) else None
            why = shape_problem(cand, o)
            if why:
                return engine.judge(GATE, {"incomparable": f"output {i}: {why}",
                                           "evidence": {"output": i, "seed": job["seed"]}})
            rs = engine.compare(r, o)
            b = engine.g02_bound(rs, r.dtype if r.is_floating_point() else o.dtype)
            cs = engine.compare(cand, o, b["atol"], b["rtol"])
            first = cs["first_past_bound"] if cs["first_past_bound"] >= 0 else cs["max_abs_idx"]
            outs.append({"index": i, "candidate": cs, "reference": rs, "bound": b,
                         "values": values(first, cand, o, r)})
        runs.append({"seed": job["seed"], "outputs": outs})
    return engine.judge(GATE, {"runs": runs})
