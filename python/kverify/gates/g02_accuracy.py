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
from kverify.errors import BudgetSpent
from kverify.gates.base import Context, accuracy_run, judge_partial

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
        try:
            oracle, ref = ctx.expected(job)
        except BudgetSpent as e:  # a seed already failing stands
            return judge_partial(GATE, {"runs": runs}, len(runs), SEEDS, e)
        run, bad = accuracy_run(job, results[job["id"]], oracle, ref)
        if bad:
            return engine.judge(GATE, {"incomparable": bad, "evidence": {"seed": job["seed"]}})
        runs.append(run)
    return engine.judge(GATE, {"runs": runs})
