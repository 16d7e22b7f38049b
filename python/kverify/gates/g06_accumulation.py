"""G06 accumulation — tolerance-based (the accuracy rule, bound from the reference's own error).

Contract: on inputs built so that fp16/bf16 accumulation loses what fp32 keeps — positive values
with a large common offset (uniform [1000, 1001): sums pass fp16's range and bf16's precision) and
{0,1} patterns (partial sums pass 2048, where fp16 stops counting by ones) — the error stays within
the reference's own accuracy class. Runs where the reference itself leaves the oracle's class
(overflow) are skipped with the reason.
Catches: fp16/bf16 accumulators in reductions and matmuls, half-precision partial sums.
Controls: controls/g06_*.
"""
from __future__ import annotations

from dataclasses import replace

from kverify.engine import Dist
from kverify.gates.base import Context, judge_labelled_runs

GATE, NAME, TOLERANCE_FREE = "G06", "accumulation", False
RUNS = {"offset 1000": Dist("uniform", 1000.0, 1001.0), "binary {0,1}": Dist("uniform_int", 0.0, 1.0)}


def applies(ctx: Context) -> str | None:
    return None if ctx.float_inputs() else "no float inputs"


def _specs(ctx: Context, dist: Dist):
    return [replace(s, dist=dist) if s.kind == "tensor" and s.torch_dtype.is_floating_point else s for s in ctx.specs]


def _jobs(ctx: Context) -> list[tuple[str, dict]]:
    return [(label, ctx.job("run", f"G06/{label}", _specs(ctx, d))) for label, d in RUNS.items()]


def plan(ctx: Context) -> list[dict]:
    return [j for _, j in _jobs(ctx)]


def judge(ctx: Context, results: dict) -> dict:
    return judge_labelled_runs(ctx, results, _jobs(ctx), GATE)
