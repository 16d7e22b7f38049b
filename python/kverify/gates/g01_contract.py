"""G01 contract — tolerance-free.

Contract: the candidate returns as many outputs as the reference, each with the reference's
shape, dtype and device, as plain dense tensors with real storage, and raises nothing at the
problem's own shape.
Catches: outputs of the wrong dtype (fp16 result for an fp32 problem), shape broadcasting slips,
tensor subclasses or fake/meta tensors that satisfy a loose `allclose` by accident, exceptions.
Controls: examples/*/g01_*.py.
"""
from __future__ import annotations

from kverify import engine
from kverify.gates.base import Context

GATE, NAME, TOLERANCE_FREE = "G01", "contract", True


def applies(ctx: Context) -> str | None:
    return None


def plan(ctx: Context) -> list[dict]:
    return [ctx.job("run", "G01")]


def _ref_meta(y) -> dict:
    return {"kind": "tensor", "shape": list(y.shape), "dtype": str(y.dtype).replace("torch.", ""),
            "device": y.device.type} if hasattr(y, "shape") else {"kind": type(y).__name__}


def judge(ctx: Context, results: dict) -> dict:
    r = results["G01"]
    _, ref = ctx.expected(ctx.job("run", "G01"))
    m = {"exception": r.get("exception"), "reference": [_ref_meta(y) for y in ref], "candidate": r.get("meta", []),
         "reference_container": ctx.oracle.container, "candidate_container": r.get("container", "tensor")}
    return engine.judge(GATE, m)
