"""G08 fresh-output — tolerance-free.

Contract: (1) with the allocator's free memory poisoned by the sentinel NaN payload (exact sizes
of the reference's outputs, plus a large block), no output element carries the sentinel: every
element was written. (2) With the inputs rewritten in place (same address, same autograd version
counter, through the core's generator), the next call's output follows the oracle of the new
inputs: it is not bitwise the old output and is closer to the new oracle than to the old one.
Catches: `torch.empty` outputs written only partly (tails past the last tile), results cached by
data pointer or shape, CUDA-graph replay of a stale capture, returning a buffer from a previous call.
Controls: examples/*/g08_*.py.
"""
from __future__ import annotations

import math

import torch

from kverify import engine
from kverify.gates.base import Context, shape_problem

GATE, NAME, TOLERANCE_FREE = "G08", "fresh-output", True


def applies(ctx: Context) -> str | None:
    return None


def _job(ctx: Context) -> dict:
    key = "G08/layouts"
    if key not in ctx.cache:
        _, ref = ctx.expected(ctx.job("run", "G01"))
        ctx.cache[key] = [[list(y.shape), str(y.dtype).replace("torch.", "")] for y in ref if isinstance(y, torch.Tensor)]
    return ctx.job("fresh", "G08", output_layouts=ctx.cache[key], rewrite_seed=ctx.seed_for("G08/rewrite"))


def plan(ctx: Context) -> list[dict]:
    return [_job(ctx)]


def _dist(cands, oracles) -> float:
    err = ref = 0.0
    for c, o in zip(cands, oracles):
        s = engine.compare(c, o)
        err += float(s["sum_sq_err"]) if not isinstance(s["sum_sq_err"], str) else math.inf
        ref += float(s["sum_sq_ref"]) if not isinstance(s["sum_sq_ref"], str) else math.inf
        # class mismatches are infinitely far
        if s["nan_mismatch"] + s["posinf_mismatch"] + s["neginf_mismatch"]:
            err = math.inf
    return math.sqrt(err / ref) if ref > 0 else (0.0 if err == 0 else math.inf)


def judge(ctx: Context, results: dict) -> dict:
    job = _job(ctx)
    r = results["G08"]
    old, _ = ctx.expected(job)
    new, _ = ctx.expected(job, "rewrite_seed")
    cands = r["rewritten"]
    for i, (c, o) in enumerate(zip(cands, new)):
        why = shape_problem(c, o)
        if why:
            return engine.judge(GATE, {"incomparable": f"output {i}: {why}"})
    oracle_changed = any(engine.digest(a) != engine.digest(b) for a, b in zip(old, new))
    d_new, d_old = _dist(cands, new), _dist(cands, old)
    m = {"outputs": r["outputs"],
         "rewrite": {"oracle_changed": oracle_changed, "output_unchanged": r["unchanged"],
                     "dist_to_new": d_new if math.isfinite(d_new) else "inf",
                     "dist_to_old": d_old if math.isfinite(d_old) else "inf"}}
    return engine.judge(GATE, m)
