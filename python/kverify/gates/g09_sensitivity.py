"""G09 sensitivity — tolerance-free.

Contract: (1) each tensor input redrawn alone, and each parameter/buffer that the candidate
shares (by name) with the reference transformed alone (x*1.0625 + 0.0625), changes the
candidate's output wherever it changes the low-precision reference's output (bitwise, at the
same dtype); (2) in one process, calls alternating A, B, A, B, ... (12, well past the standard
test's 5) give the same bits on the same inputs at every call.
Catches: kernels that ignore an input or a weight (bias never added, one operand cached), results
cached by shape, kernels correct only on the first call (stale state, one-time initialisation
that goes wrong on reuse).
Controls: controls/g09_*.
"""
from __future__ import annotations

import torch

from kverify import engine
from kverify.gates.base import Context
from kverify.problem import STATE_LOCK, as_outputs

GATE, NAME, TOLERANCE_FREE = "G09", "sensitivity", True
#: With prestarting, G09 and G10 (the two slowest of the other gates) run in a second worker beside
#: the main one (kverify.check.worker_of).
WORKER = "gates-b"
CALLS = 12


def applies(ctx: Context) -> str | None:
    return None


def _shared_tensors(ctx: Context) -> list[str]:
    ref, _ = ctx.oracle.models(ctx.binding)  # the shape G09's jobs run at (a parameter list may depend on it)
    names = [n for n, t in list(ref.named_parameters()) + list(ref.named_buffers()) if t.is_floating_point()]
    return names


def plan(ctx: Context) -> list[dict]:
    alt = ctx.seed_for("G09/alt")
    return [ctx.job("perturb", "G09/perturb", small=True, alt_seed=alt, tensors=_shared_tensors(ctx)),
            ctx.job("sequence", "G09/sequence", small=True, alt_seed=alt, calls=CALLS)]


@torch.no_grad()
def _reference_outputs(ctx: Context, job: dict) -> dict:
    """The low-precision reference under the same perturbations, in the parent (holding
    STATE_LOCK: it binds the job's shape and changes the cached reference's weights for a moment,
    while other threads of the check may run the reference)."""
    with STATE_LOCK:
        return _reference_outputs_locked(ctx, job)


def _reference_outputs_locked(ctx: Context, job: dict) -> dict:
    ref, _ = ctx.oracle.models(job.get("binding"))
    ctx.problem.bind(job.get("binding"))
    base = ctx.inputs_of(job)
    alt = ctx.inputs_of(job, "alt_seed")
    ctx.oracle.check_budget()
    out = {"base": as_outputs(ref(*base))}
    for i, x in enumerate(base):
        if isinstance(x, torch.Tensor):
            ctx.oracle.check_budget()
            xs = list(base)
            xs[i] = alt[i]
            out[f"input {i}"] = as_outputs(ref(*xs))
    own = dict(ref.named_parameters())
    own.update(dict(ref.named_buffers()))
    for name in job["tensors"]:
        ctx.oracle.check_budget()
        t = own[name]
        keep = t.detach().clone()
        t.data.mul_(1.0625).add_(0.0625)
        out[f"tensor {name}"] = as_outputs(ref(*base))
        t.data.copy_(keep)
    return out


def _changed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise 'bits differ' mask (NaN payloads compared as bits)."""
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    if a.dtype == torch.bool:
        return (a != b).reshape(-1)
    iv = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[a.element_size()]
    return (a.view(iv) != b.view(iv)).reshape(-1)


def judge(ctx: Context, results: dict) -> dict:
    job = plan(ctx)[0]
    cand = results["G09/perturb"]["outputs"]
    ref = _reference_outputs(ctx, job)
    perts = []
    for name, r_out in ref.items():
        if name == "base" or name not in cand:
            continue
        ref_changed = ignored = 0
        first = -1
        for rb, rp, cb, cp in zip(ref["base"], r_out, cand["base"], cand[name]):
            if not isinstance(rb, torch.Tensor) or not isinstance(cb, torch.Tensor) or cb.shape != rb.shape \
                    or cp.shape != rb.shape or cb.dtype != rb.dtype:
                continue
            rc = _changed(rb, rp)
            miss = rc & ~_changed(cb, cp)
            ref_changed += int(rc.sum())
            if miss.any() and ignored == 0:
                first = int(torch.nonzero(miss)[0])
            ignored += int(miss.sum())
        perts.append({"name": name, "reference_changed": ref_changed, "ignored": ignored, "first": first})
    seq = results["G09/sequence"]["digests"]
    firsts, bad, bad_label = {}, -1, None
    for k, (label, d) in enumerate(seq):
        if label not in firsts:
            firsts[label] = d
        elif d != firsts[label] and bad < 0:
            bad, bad_label = k, label
    m = {"perturbations": perts, "sequence": {"calls": len(seq), "inconsistent_call": bad, "label": bad_label or ""}}
    return engine.judge(GATE, m)
