"""G03 nonfinite — tolerance-free.

Contract: with NaN, +Inf or -Inf injected into the float inputs (each kind alone, then mixed),
the positions of NaN, +Inf and -Inf in every output equal the fp64 oracle's exactly, and finite
oracle values stay finite. Runs where the low-precision reference itself disagrees with the
oracle are skipped as ambiguous (reported). In runs that inject ±Inf, ±Inf where the oracle is
NaN is accepted as an indeterminate form of the oracle's own evaluation order (counted; see
core/src/gates/g03_nonfinite.cpp: an algebraically restructured kernel, such as a chunked scan,
can return the exact limit where the literal-order oracle meets ∞ − ∞).
Catches: NaN swallowed by fmaxf/fminf (ReLU as fmaxf(x, 0)), max-reductions that skip NaN,
softmax without NaN propagation, `nan_to_num` in the kernel, Inf clamped to FLT_MAX.
Source of the exploit class: llm.c dev/cuda validators skip non-finite references.
Controls: examples/*/g03_*.py.
"""
from __future__ import annotations

from dataclasses import replace

from kverify import engine
from kverify.gates.base import Context, shape_problem, values

GATE, NAME, TOLERANCE_FREE = "G03", "nonfinite", True
RUNS = {"NaN": ("nan",), "+Inf": ("+inf",), "-Inf": ("-inf",), "mixed": ("nan", "+inf", "-inf")}
SPECIALS_PER_TENSOR = 4  # expected special values per input tensor in a run


def applies(ctx: Context) -> str | None:
    return None if ctx.float_inputs() else "no float inputs to inject non-finite values into"


def _specs(ctx: Context, kinds):
    out = []
    for s in ctx.specs:
        if s.kind == "tensor" and s.torch_dtype.is_floating_point:
            density = min(0.05, SPECIALS_PER_TENSOR / max(s.numel, 1))
            out.append(replace(s, dist=replace(s.dist, special_density=density, specials=kinds)))
        else:
            out.append(s)
    return out


def plan(ctx: Context) -> list[dict]:
    return [ctx.job("run", f"G03/{label}", _specs(ctx, kinds)) for label, kinds in RUNS.items()]


def judge(ctx: Context, results: dict) -> dict:
    runs = []
    for label, kinds in RUNS.items():
        job = ctx.job("run", f"G03/{label}", _specs(ctx, kinds))
        oracle, ref = ctx.expected(job)
        outs = []
        for i, (o, r) in enumerate(zip(oracle, ref)):
            cand_list = results[job["id"]]["outputs"]
            cand = cand_list[i] if i < len(cand_list) else None
            why = shape_problem(cand, o)
            if why:
                return engine.judge(GATE, {"incomparable": f"output {i}: {why}", "evidence": {"run": label}})
            cs = engine.compare(cand, o)
            first = min([x for x in (cs["first_nan"], cs["first_posinf"], cs["first_neginf"]) if x >= 0], default=-1)
            outs.append({"index": i, "candidate": cs, "reference": engine.compare(r, o),
                         "values": values(first, cand, o, r)})
        runs.append({"label": label, "injected": list(kinds), "seed": job["seed"], "outputs": outs})
    return engine.judge(GATE, {"runs": runs})
