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
±Inf, G03 asks the oracle for the limit: it reruns the fp64 oracle with each injected ±Inf
replaced by ±M for M = 2^64, 2^65, 2^66 (injected NaNs kept); when the three outputs there are
finite, of the candidate's sign and growing (each at least 1.5x the one before), the limit is that
infinity and the candidate's value is accepted ("indeterminate", counted). Everything else still
fails: ±Inf where the limit is finite or undefined (a softmax row, a row sum of +Inf and -Inf),
±Inf where a NaN input reaches (the probes are NaN there), anything but NaN in the NaN-only run,
NaN where the oracle is ±Inf, finite where it is non-finite, +Inf vs -Inf.
Catches: NaN swallowed by fmaxf/fminf (ReLU as fmaxf(x, 0)), max-reductions that skip NaN,
softmax without NaN propagation, `nan_to_num` in the kernel, Inf clamped to FLT_MAX.
Source of the exploit class: llm.c dev/cuda validators skip non-finite references.
Controls: examples/*/g03_*.py.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from kverify import engine
from kverify.gates.base import Context, shape_problem, values

GATE, NAME, TOLERANCE_FREE = "G03", "nonfinite", True
RUNS = {"NaN": ("nan",), "+Inf": ("+inf",), "-Inf": ("-inf",), "mixed": ("nan", "+inf", "-inf")}
SPECIALS_PER_TENSOR = 4  # expected special values of each injected kind per input tensor in a run
LIMIT_PROBES = (2.0 ** 64, 2.0 ** 65, 2.0 ** 66)  # finite stand-ins for an injected ±Inf (fp64)
GROWTH = 1.5  # each probe's output at least this many times the previous one's magnitude


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


def limits(ctx: Context, job: dict) -> list | None:
    """Per output, the extended-real limit where the oracle is NaN: ±Inf where the fp64 oracle on
    the job's inputs with every ±Inf replaced by ±M (M in LIMIT_PROBES) is finite, of one sign and
    growing with M; NaN elsewhere (no limit found). None when the oracle cannot run on the probes."""
    key = ("G03-limits", job["id"])
    if key not in ctx.cache:
        inputs = ctx.inputs_of(job)
        try:
            probes = [ctx.oracle.run_fp64(inputs, job.get("binding"),
                                          lambda x, m=m: torch.where(torch.isinf(x), torch.sign(x) * m, x))
                      for m in LIMIT_PROBES]
        except Exception:  # noqa: BLE001 — no limit information: judged strictly
            ctx.cache[key] = None
            return None
        out = []
        for fs in zip(*probes):
            if not all(isinstance(f, torch.Tensor) and f.is_floating_point() for f in fs):
                out.append(None)
                continue
            s = torch.sign(fs[0])
            ok = (s != 0) & torch.isfinite(fs[0])
            for a, b in zip(fs, fs[1:]):
                ok &= torch.isfinite(b) & (torch.sign(b) == s) & (b.abs() >= GROWTH * a.abs())
            out.append(torch.where(ok, s * float("inf"), torch.full_like(fs[0], float("nan"))))
        ctx.cache[key] = out
    return ctx.cache[key]


def _target(ctx: Context, job: dict, i: int, cand, o, kinds) -> tuple[object, int]:
    """The oracle output to compare against and the count of its NaNs replaced by their limit:
    o itself, except (runs injecting ±Inf) where o is NaN, the candidate ±Inf and the limit (see
    limits) that same infinity. The probes keep injected NaNs, so a NaN that comes from an input
    is NaN in them too and never replaced."""
    if kinds == ("nan",) or not isinstance(cand, torch.Tensor) or not isinstance(o, torch.Tensor):
        return o, 0
    if not bool((torch.isnan(o) & torch.isinf(cand)).any()):
        return o, 0
    lim = limits(ctx, job)
    if lim is None or i >= len(lim) or lim[i] is None or lim[i].shape != o.shape:
        return o, 0
    c = cand.to(device=o.device, dtype=torch.float64)
    take = torch.isnan(o) & torch.isinf(c) & (lim[i] == c)
    n = int(take.sum())
    return (torch.where(take, c, o), n) if n else (o, 0)


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
            target, indeterminate = _target(ctx, job, i, cand, o, kinds)
            cs = engine.compare(cand, target)
            first = min([x for x in (cs["first_nan"], cs["first_posinf"], cs["first_neginf"]) if x >= 0], default=-1)
            outs.append({"index": i, "candidate": cs, "reference": engine.compare(r, o), "indeterminate": indeterminate,
                         "values": values(first, cand, o, r)})
        runs.append({"label": label, "seed": job["seed"], "outputs": outs})
    return engine.judge(GATE, {"runs": runs})
