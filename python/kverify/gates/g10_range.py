"""G10 range — tolerance-based (the accuracy rule at each scale).

Contract: with the float inputs scaled towards large magnitudes and towards tiny (subnormal)
ones, at every scale where the fp64 oracle and the low-precision reference stay finite, the
output stays finite and within the reference's own accuracy class at that scale.
Catches: exp without max-subtraction (softmax overflows at x1e3), intermediates that overflow
(x*x, sums of squares), flush-to-zero of subnormals (--use_fast_math), reciprocals of tiny values.
Controls: controls/g10_*.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from kverify.gates.base import Context, judge_labelled_runs

GATE, NAME, TOLERANCE_FREE = "G10", "range", False
#: With prestarting, G09 and G10 (the two slowest of the other gates) run in a second worker beside
#: the main one (kverify.check.worker_of).
WORKER = "gates-b"
SCALES = {torch.float32: (1e3, 1e6, 1e15, 1e30, 1e-6, 1e-20, 1e-40),
          torch.bfloat16: (1e3, 1e6, 1e15, 1e30, 1e-6, 1e-20, 1e-40),
          torch.float16: (1e2, 1e3, 1e-3, 1e-6),
          torch.float64: (1e100, 1e-300, 1e-310)}


def applies(ctx: Context) -> str | None:
    return None if ctx.float_inputs() else "no float inputs"


def _dtype(ctx: Context):
    return next(s.torch_dtype for s in ctx.specs if s.kind == "tensor" and s.torch_dtype.is_floating_point)


def _specs(ctx: Context, k: float):
    out = []
    for s in ctx.gate_specs():
        if s.kind == "tensor" and s.torch_dtype.is_floating_point:
            out.append(replace(s, dist=replace(s.dist, p0=s.dist.p0 * k, p1=s.dist.p1 * k)))
        else:
            out.append(s)
    return out


def _jobs(ctx: Context):
    return [(f"x{k:g}", ctx.job("run", f"G10/x{k:g}", _specs(ctx, k), small=True)) for k in SCALES.get(_dtype(ctx), ())]


def plan(ctx: Context) -> list[dict]:
    return [j for _, j in _jobs(ctx)]


def judge(ctx: Context, results: dict) -> dict:
    return judge_labelled_runs(ctx, results, _jobs(ctx), GATE)
