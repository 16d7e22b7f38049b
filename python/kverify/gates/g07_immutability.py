"""G07 immutability — tolerance-free.

Contract: every input, parameter and buffer is bitwise unchanged after the call (digests before
and after, measured in the candidate's process; the count and first index of changed elements
are reported).
Catches: kernels that work in place on their input (ReLU written into x), that zero or scale the
inputs to hide a second call's result, that normalise weights in place.
Controls: examples/*/g07_*.py.
"""
from __future__ import annotations

from kverify import engine
from kverify.gates.base import Context

GATE, NAME, TOLERANCE_FREE = "G07", "immutability", True


def applies(ctx: Context) -> str | None:
    return None


def plan(ctx: Context) -> list[dict]:
    return [ctx.job("immutability", "G07")]


def judge(ctx: Context, results: dict) -> dict:
    return engine.judge(GATE, {"tensors": results["G07"]["tensors"]})
