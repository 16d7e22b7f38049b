"""What every gate shares: the check context (problem, oracle, seeds) and small helpers.

A gate module defines GATE, NAME, TOLERANCE_FREE and three functions:
  applies(ctx) -> str | None       reason the gate does not apply (N/A), or None
  plan(ctx) -> list[dict]          jobs for the candidate's process (no expected outputs in them)
  judge(ctx, results) -> dict      measurements -> the core's verdict rule -> GateResult dict
Results of crashed/timed-out jobs and candidate exceptions are handled by kverify.check before
judge() is called.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from kverify.problem import InputSpec, Oracle, Problem, derive_seed, synthesize


@dataclass
class Context:
    """State of one check.

    problem: the reference; specs: input specs at the problem's own shape; device: "cpu"/"cuda";
    seed: base seed; oracle: fp64 oracle + low-precision reference runner (parent process only).
    """

    problem: Problem
    specs: list[InputSpec]
    device: str
    seed: int
    oracle: Oracle
    cache: dict = field(default_factory=dict)

    def seed_for(self, label: str) -> int:
        return derive_seed(self.seed, label)

    def job(self, kind: str, label: str, specs: list[InputSpec] | None = None, **extra) -> dict:
        """A job at the problem's own shape with inputs from seed_for(label)."""
        specs = self.specs if specs is None else specs
        return {"kind": kind, "id": label, "seed": self.seed_for(label), "binding": None,
                "inputs": [s.to_json() for s in specs], **extra}

    def inputs_of(self, job: dict, seed_key: str = "seed") -> list:
        """The job's inputs regenerated in the parent (same bits as in the worker)."""
        return synthesize([InputSpec.from_json(s) for s in job["inputs"]], job[seed_key], self.device)

    def expected(self, job: dict, seed_key: str = "seed") -> tuple[list, list]:
        """(oracle fp64 outputs, low-precision reference outputs) for the job's inputs (cached)."""
        key = (job["id"], seed_key)
        if key not in self.cache:
            self.cache[key] = self.oracle.run(self.inputs_of(job, seed_key), job.get("binding"))
        return self.cache[key]

    def float_inputs(self) -> bool:
        return any(s.kind == "tensor" and s.torch_dtype.is_floating_point for s in self.specs)


def value_at(t: torch.Tensor | None, idx: int):
    """Element ``idx`` (logical, row-major) of ``t`` as a Python float/str, or None."""
    if t is None or idx is None or idx < 0 or not isinstance(t, torch.Tensor) or idx >= t.numel():
        return None
    v = t.reshape(-1)[idx].item()
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if v != v else ("inf" if v > 0 else "-inf")
    return v


def values(idx: int, cand, oracle, ref) -> dict:
    """Evidence row: index, candidate, oracle and reference values at ``idx``."""
    return {"index": idx, "candidate": value_at(cand, idx), "oracle": value_at(oracle, idx),
            "reference": value_at(ref, idx)}


def shape_problem(cand, oracle) -> str | None:
    """Why ``cand`` cannot be compared with ``oracle`` (not a tensor, other shape), or None."""
    if not isinstance(cand, torch.Tensor):
        return f"output is a {type(cand).__name__}, not a tensor"
    if tuple(cand.shape) != tuple(oracle.shape):
        return f"output shape {list(cand.shape)} differs from the reference's {list(oracle.shape)}"
    return None


__all__ = ["Context", "values", "value_at", "shape_problem"]
