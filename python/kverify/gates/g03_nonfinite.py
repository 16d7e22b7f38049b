"""G03 nonfinite — tolerance-free.

Contract: with NaN, +Inf or -Inf injected into the float inputs (each kind alone, then mixed),
the positions of NaN, +Inf and -Inf in every output equal the fp64 oracle's exactly, and finite
oracle values stay finite. Runs where the low-precision reference itself disagrees with the
oracle are skipped as ambiguous (reported).

One refinement, learnt from the chunked GDN: an oracle NaN in a run that injects ±Inf can be an
indeterminate form (Inf - Inf, 0 * Inf) met in the oracle's own evaluation order although the
exact answer exists. GDN's output is linear in v, so with v[t, j] = +Inf the limit of o[s, j] is
±Inf wherever its coefficient is non-zero; the token-by-token recurrence meets Inf - Inf on the way
and gives NaN, a chunked kernel returns the limit. So where the oracle is NaN and the candidate
±Inf, G03 asks the oracle for the limit: it reruns the fp64 oracle with each injected ±Inf x
replaced by ±M*r_x (injected NaNs kept) — M = 2^40.37 ... 2^301.29 (five irregular steps) and
per-element rates r_x = 2^u, u uniform in [-8, 8], eight independent draws — and accepts the
candidate's infinity where every probe is finite, of its sign and growing at least like M^0.25
("indeterminate", counted). Everything else still fails: ±Inf where the limit is finite
(saturation within 2^301), oscillates in sign (x tan x), or depends on how fast independent
infinities grow (a row sum of +Inf and -Inf, x W with mixed-sign weights); ±Inf where a NaN input
reaches (the probes are NaN there); anything but NaN in the NaN-only run; NaN where the oracle is
±Inf; finite where it is non-finite; +Inf vs -Inf. Known limits of a sampled limit: growth times a
bounded factor that touches zero (x sin^2 x) looks divergent; a reference that maps ±Inf to NaN by
an explicit test (where(isfinite(x), ..., nan)) is not seen by finite probes.
Catches: NaN swallowed by fmaxf/fminf (ReLU as fmaxf(x, 0)), max-reductions that skip NaN,
softmax without NaN propagation, `nan_to_num` in the kernel, Inf clamped to FLT_MAX.
Source of the exploit class: llm.c dev/cuda validators skip non-finite references.
Controls: examples/*/g03_*.py, controls/g03_* (the limit rule's boundary).
"""
from __future__ import annotations

from dataclasses import replace

import torch

from kverify import engine
from kverify._internal import memory_wait
from kverify.errors import BudgetSpent
from kverify.gates.base import Context, judge_partial, shape_problem, values
from kverify.problem import upcast

GATE, NAME, TOLERANCE_FREE = "G03", "nonfinite", True
RUNS = {"NaN": ("nan",), "+Inf": ("+inf",), "-Inf": ("-inf",), "mixed": ("nan", "+inf", "-inf")}
SPECIALS_PER_TENSOR = 4  # expected special values of each injected kind per input tensor in a run
# G03's limit probe (_certified): finite stand-ins ±M*r for each injected ±Inf
EXPONENTS = (40.37, 97.11, 163.59, 229.83, 301.29)  # M = 2^e: wide, irregular, x*x still finite in fp64
RATE_DRAWS = 8  # independent draws of the per-element rates r = 2^u, u in [-8, 8]
GROWTH_POWER = 0.25  # |f| must grow at least like M^0.25 from one M to the next


def applies(ctx: Context) -> str | None:
    return None if ctx.float_inputs() else "no float inputs to inject non-finite values into"


def _specs(ctx: Context, kinds):
    out = []
    for s in ctx.specs:
        if s.kind == "tensor" and s.torch_dtype.is_floating_point:
            density = min(0.05, SPECIALS_PER_TENSOR * len(kinds) / max(s.numel, 1))  # ~4 of each kind
            out.append(replace(s, dist=replace(s.dist, special_density=density, specials=kinds)))
        else:
            out.append(s)
    return out


def plan(ctx: Context) -> list[dict]:
    return [ctx.job("run", f"G03/{label}", _specs(ctx, kinds)) for label, kinds in RUNS.items()]


def _certified(ctx: Context, job: dict, i: int, want) -> object:
    """Bool mask over output i: where ``want`` (float64; ±Inf at the positions to certify, NaN
    elsewhere) is the limit of the fp64 oracle as every injected ±Inf grows. Probe: each injected
    ±Inf x becomes ±M * r_x, with its own rate r_x = 2^u, u uniform in [-8, 8] (RATE_DRAWS draws,
    seeded from the job) and M = 2^e for e in EXPONENTS; a position stays certified while every
    probe there is finite, has want's sign and grows from one M to the next by at least
    (M ratio)^GROWTH_POWER. Independent rates reject sums of opposite infinities (no limit);
    the wide, irregular M range rejects oscillation (x tan x) and saturation (x / (1 + |x|/2^80))."""
    inputs = ctx.inputs_of(job)
    gen = torch.Generator().manual_seed(int(job["seed"]) % (2 ** 63) ^ 0x6703)
    ok = torch.isinf(want)
    sign = torch.sign(torch.nan_to_num(want, nan=0.0))
    for _ in range(RATE_DRAWS):
        xs = [upcast(x) for x in inputs]
        rates = [2.0 ** (torch.rand(x.shape, generator=gen, dtype=torch.float64) * 16 - 8).to(x.device)
                 if isinstance(x, torch.Tensor) and x.is_floating_point() else None for x in xs]
        prev, prev_e = None, None
        for e in EXPONENTS:
            probe = [torch.where(torch.isinf(x), torch.sign(x) * r * 2.0 ** e, x) if r is not None else x
                     for x, r in zip(xs, rates)]
            try:
                f = ctx.oracle.run_fp64(probe, job.get("binding"))[i]
            except Exception as e:  # noqa: BLE001 — the oracle cannot run there: nothing certified
                if memory_wait.is_oom(e):  # the GPU's memory, not the reference: no verdict from it
                    raise  # (a review, stop 39: read as "nothing certified" it FAILed a correct candidate)
                return torch.zeros_like(ok)
            if not isinstance(f, torch.Tensor) or f.shape != want.shape:
                return torch.zeros_like(ok)
            f = f.to(want.device, torch.float64)
            ok &= torch.isfinite(f) & (torch.sign(f) == sign)
            if prev is not None:
                ok &= f.abs() >= prev.abs() * 2.0 ** ((e - prev_e) * GROWTH_POWER)
            if not bool(ok.any()):
                return ok
            prev, prev_e = f, e
    return ok


def _target(ctx: Context, job: dict, i: int, cand, o, kinds) -> tuple[object, int]:
    """The oracle output to compare against and the count of its NaNs replaced by their limit:
    o itself, except (runs injecting ±Inf) where o is NaN, the candidate ±Inf and that infinity
    certified as the oracle's limit (_certified). The probes keep injected NaNs, so a NaN that
    comes from an input is NaN in them too and never replaced. judge() calls it only where the
    comparator counted such positions (nan_as_inf > 0)."""
    if kinds == ("nan",) or not isinstance(cand, torch.Tensor) or not isinstance(o, torch.Tensor):
        return o, 0
    c = cand.to(device=o.device, dtype=torch.float64)
    candidates = torch.isnan(o) & torch.isinf(c)
    if not bool(candidates.any()):
        return o, 0
    take = candidates & _certified(ctx, job, i, torch.where(candidates, c, torch.full_like(c, float("nan"))))
    n = int(take.sum())
    return (torch.where(take, c, o), n) if n else (o, 0)


def judge(ctx: Context, results: dict) -> dict:
    runs = []
    for label, kinds in RUNS.items():
        job = ctx.job("run", f"G03/{label}", _specs(ctx, kinds))
        try:
            run = _judge_run(ctx, results, label, kinds, job)
        except BudgetSpent as e:  # a run already failing stands
            return judge_partial(GATE, {"runs": runs}, len(runs), len(RUNS), e)
        if "incomparable" in run:
            return engine.judge(GATE, run)
        runs.append(run)
    return engine.judge(GATE, {"runs": runs})


def _judge_run(ctx: Context, results: dict, label: str, kinds, job: dict) -> dict:
    """One run's measurements ({"label", "seed", "outputs"}), or {"incomparable", "evidence"}."""
    oracle, ref = ctx.expected(job)
    outs = []
    for i, (o, r) in enumerate(zip(oracle, ref)):
        cand_list = results[job["id"]]["outputs"]
        cand = cand_list[i] if i < len(cand_list) else None
        why = shape_problem(cand, o)
        if why:
            return {"incomparable": f"output {i}: {why}", "evidence": {"run": label}}
        cs = engine.compare(cand, o)
        indeterminate = 0
        if cs["nan_as_inf"]:  # the comparator counted oracle-NaN/candidate-±Inf: try their limits
            target, indeterminate = _target(ctx, job, i, cand, o, kinds)
            if indeterminate:
                cs = engine.compare(cand, target)
        first = min([x for x in (cs["first_nan"], cs["first_posinf"], cs["first_neginf"]) if x >= 0], default=-1)
        outs.append({"index": i, "candidate": cs, "reference": engine.compare(r, o), "indeterminate": indeterminate,
                     "values": values(first, cand, o, r)})
    return {"label": label, "seed": job["seed"], "outputs": outs}
