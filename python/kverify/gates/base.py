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
import os
from dataclasses import dataclass, field

import torch

from kverify import engine
from kverify._internal import memory_wait
from kverify.errors import BudgetSpent
from kverify.problem import STATE_LOCK, InputSpec, Oracle, Problem, derive_seed, synthesize

#: inputs (elements) above which the gates look for a smaller shape (Context.small_binding)
SMALL_INPUTS = 1 << 16


def _give_back_gpu_cache() -> None:
    """In an audit (KVERIFY_EMPTY_CACHE=1, set for its check processes), return PyTorch's cached
    but unused GPU blocks to the driver, for the other checks sharing the GPU; otherwise nothing."""
    if os.environ.get("KVERIFY_EMPTY_CACHE") == "1" and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


@dataclass
class Context:
    """State of one check.

    problem: the reference; specs: input specs at the problem's own shape; device: "cpu"/"cuda";
    seed: base seed; oracle: fp64 oracle + low-precision reference runner (parent process only);
    binding: the free dimensions of the gates' small shape (None: the own shape), chosen by
    kverify.check._gate_shape (a smaller shape where the candidate is accurate); the gates whose
    jobs ask for it (job(small=True): kverify.check.SMALL_SHAPE_GATES) run there.
    """

    problem: Problem
    specs: list[InputSpec]
    device: str
    seed: int
    oracle: Oracle
    cache: dict = field(default_factory=dict)
    sandbox: object = None  # kverify.sandbox.Sandbox, for gates that need further rounds (G05)
    cpu0: float = 0.0  # the check process's CPU seconds when the check began (meta.seconds.cpu)
    timeout: float = 120.0
    #: gate id -> concurrent.futures.Future of the work a gate's start(ctx) put in the background
    background: dict = field(default_factory=dict)
    binding: dict | None = None
    #: {"binding", "why"}: the gates' shape and why (kverify.check._gate_shape; report meta.gate_shape)
    gate_shape: dict | None = None
    #: names the candidate reads from the reference's module (kverify.problem.borrowed_names; the
    #: worker loads it with them, as KernelBench's one namespace does; report meta.borrowed)
    borrowed: list[str] = field(default_factory=list)

    def background_result(self, gate: str, start) -> dict:
        """The result of gate's background work: the future check() started, or, when nothing was
        started (a caller other than check()), start(self)() run here. Re-raises its exception."""
        fut = self.background.get(gate)
        return fut.result() if fut is not None else start(self)()

    def seed_for(self, label: str) -> int:
        return derive_seed(self.seed, label)

    def job(self, kind: str, label: str, specs: list[InputSpec] | None = None, small: bool = False, **extra) -> dict:
        """A job at the problem's own shape (``small``: at the gates' small shape, ``binding``)
        with inputs from seed_for(label); ``specs`` default to those of that shape."""
        binding = self.binding if small else None
        if specs is None:
            specs = self.gate_specs() if small else self.specs
        return {"kind": kind, "id": label, "seed": self.seed_for(label), "binding": binding,
                "inputs": [s.to_json() for s in specs], **extra}

    def gate_specs(self) -> list[InputSpec]:
        """Input specs at the gates' shape (``binding``): the own shape's when it is None."""
        return self.specs if self.binding is None else self.specs_at(self.binding)

    def inputs_of(self, job: dict, seed_key: str = "seed") -> list:
        """The job's inputs regenerated in the parent (same bits as in the worker)."""
        return synthesize([InputSpec.from_json(s) for s in job["inputs"]], job[seed_key], self.device)

    def expected(self, job: dict, seed_key: str = "seed", host: bool = False) -> tuple[list, list]:
        """(oracle fp64 outputs, low-precision reference outputs) for the job's inputs, on the
        check's device; cached until the gate whose job it is has been judged (release()).
        ``host``: keep the cached copy in host memory, not on the GPU (G05 runs the reference at
        every variant while planning and compares at judging: dozens of outputs held at once).
        Every job's expected outputs held on the GPU until the end of the check filled a whole
        H200 (141 GB) in the check of one row with 1 GiB of inputs (scripts/device_memory.sh, stop 17)."""
        got = self.store_expected(job, seed_key, host)
        return _moved(got, self.device) if host else got

    def store_expected(self, job: dict, seed_key: str = "seed", host: bool = True) -> tuple[list, list]:
        """Compute and cache the job's expected outputs (expected()'s cache; ``host``: in host
        memory) and return the cached copy as it is (G05's planning: the reference must run at a
        variant, and its outputs wait there for the judging)."""
        key = (job["id"], seed_key)
        if key not in self.cache:
            out = self.oracle.run(self.inputs_of(job, seed_key), job.get("binding"))
            self.cache[key] = _moved(out, "cpu") if host else out
            if host:
                # G05's planning: a reference run per variant, each of another size (near the own size
                # when the gates stay there); PyTorch's cache of blocks would grow with every size
                del out
                _give_back_gpu_cache()
        return self.cache[key]

    def release(self, job_ids: list[str]) -> None:
        """Forget the expected outputs of these jobs (their gate has been judged; asked again, they
        are computed again), and in an audit (KVERIFY_EMPTY_CACHE=1) give PyTorch's cached GPU
        blocks back, as the workers do after each job, for the other checks sharing the GPU."""
        ids = set(job_ids)
        for key in [k for k in list(self.cache) if isinstance(k, tuple) and len(k) == 2 and k[0] in ids]:
            del self.cache[key]
        _give_back_gpu_cache()

    def job_at(self, kind: str, label: str, binding: dict | None, specs: list[InputSpec], **extra) -> dict:
        """A job at another binding of the free dimensions."""
        return {"kind": kind, "id": label, "seed": self.seed_for(label), "binding": binding,
                "inputs": [s.to_json() for s in specs], **extra}

    def specs_at(self, binding: dict | None) -> list[InputSpec]:
        """Input specs at ``binding`` (sampled once from get_inputs with the base seed)."""
        key = ("specs", repr(sorted((binding or {}).items())))
        if key not in self.cache:
            with STATE_LOCK:  # bind(None) outside it could reset a binding another thread runs the reference at
                self.cache[key] = self.problem.input_specs(self.seed, binding)
                self.problem.bind(None)
        return self.cache[key]

    def small_binding(self, limit: int = SMALL_INPUTS) -> dict | None:
        """A smaller binding of the free dimensions, when the inputs at the problem's own shape
        exceed ``limit`` elements: the smallest of shrink_bindings()'s shapes with at most half the
        own shape's inputs where the reference runs (tried from the smallest up), on the odd
        ladder first, then on those of 2, 4 and 8 x odd sizes (LADDERS); None (own shape) when
        the inputs are small already, the problem has no free dimension, or no such shape runs.
        Cached per limit.
        Raises BudgetSpent past the check's deadline (Oracle.limit), and a GPU out-of-memory error
        of a reference run (memory_wait.is_oom: the memory other checks hold decides nothing here)."""
        if spec_numel(self.specs) <= limit or not self.problem.dims:
            return None
        key = ("small_binding", limit)
        if key in self.cache:
            return self.cache[key]
        found = None
        for multiple in LADDERS:  # odd sizes first; a reference that needs even ones, 2, 4, 8 x odd
            tries = shrink_bindings(self.problem.dims, lambda b: self.problem.input_numel(self.seed, b), limit,
                                    own=spec_numel(self.specs), multiple=multiple)
            for t in reversed(tries):
                try:
                    self.oracle.run(synthesize(self.specs_at(t), self.seed, self.device), t)
                except Exception as e:  # noqa: BLE001 — the reference cannot run there: try a larger shape
                    if memory_wait.is_oom(e):  # the GPU's memory (other checks'), not the reference: the
                        raise  # probe fails with it (kverify.check._gate_shape), not a larger shape chosen
                    continue
                found = t
                break
            if found is not None:
                self.cache[("small_multiple", limit)] = multiple
                break
        self.cache[key] = found
        return found

    def size_multiple(self) -> int:
        """The factor of the ladder the gates' small shape came from (LADDERS; 1 when there is
        none): G05 then also tries that multiple of its sizes."""
        return self.cache.get(("small_multiple", SMALL_INPUTS), 1) if self.binding is not None else 1

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
        return f"output is of type {type(cand).__name__}, not a tensor"
    if tuple(cand.shape) != tuple(oracle.shape):
        return f"output shape {list(cand.shape)} differs from the reference's {list(oracle.shape)}"
    return None


__all__ = ["Context", "values", "value_at", "shape_problem"]


#: Ladders of small sizes, by the factor every size of a ladder is a multiple of: (first size for a
#: dimension above 64, smallest size). Factor 1 (odd sizes, 67 -> 33 -> 17 -> 9) first; a
#: reference that runs at no odd size (it pairs up or quarters a dimension) gets twice, four or
#: eight times an odd number: 66 -> 34 -> 18 -> 10, 68 -> 36 -> 20 -> 12, 72 -> 40 -> 24.
LADDERS = {1: (67, 9), 2: (66, 10), 4: (68, 12), 8: (72, 24)}


def shrink_bindings(dims: dict[str, int], numel_at, limit: int, own: int | None = None,
                    multiple: int = 1) -> list[dict[str, int]]:
    """The shapes small_binding tries, largest first, on the ladder of sizes ``multiple`` x odd
    (LADDERS): every free dimension above 64 lowered to the ladder's first size (67: odd, past a
    64-wide tile), then, while ``numel_at(binding)`` (input elements; it may raise: that shape
    cannot be built, and the shrinking stops before it) exceeds ``limit`` (or half of ``own``),
    the largest dimension above the ladder's smallest size (ties: by name) lowered one rung,
    multiple x (v / multiple / 2, made odd): 67 -> 33 -> 17 -> 9, an odd size past a power-of-two
    tile. Smaller dimensions (kernel sizes, strides, channels of 3) are never changed. Empty when
    even the first shape cannot be built. With ``own`` (the own shape's input elements), only
    shapes with at most half of them: a shape barely smaller saves too little for the probe and
    the extra oracle runs it costs."""
    top, floor = LADDERS[multiple]
    b = {k: (top if v > 64 else v) for k, v in dims.items()}
    tries = [dict(b)]
    sizes: list[int] = []  # numel_at of each try, measured once (each shape's inputs are built to count)
    while True:
        try:
            n = numel_at(b)
        except Exception:  # noqa: BLE001 — get_inputs cannot build this shape: stop before it
            tries.pop()
            break
        sizes.append(n)
        if n <= limit and (own is None or 2 * n <= own):
            break
        big = [k for k in sorted(b) if b[k] > floor]
        if not big:
            break
        k = max(big, key=lambda d: b[d])
        b[k] = max(floor, multiple * (((b[k] // multiple) // 2) | 1))
        tries.append(dict(b))
    return tries if own is None else [t for t, n in zip(tries, sizes) if 2 * n <= own]


def spec_numel(specs) -> int:
    """Total elements of the tensor inputs of ``specs``."""
    return sum(s.numel for s in specs if s.kind == "tensor")


def accuracy_output(cand, oracle, ref) -> dict:
    """One output's measurements for the core accuracy rule (bound calibrated on ``ref``). Integer
    and bool outputs (argmax indices, masks: the oracle keeps them integer) are compared as float64
    values (exact below 2^53), with the fp64 floors: any difference the reference itself does not
    make fails."""
    if not (oracle.is_floating_point() or ref.is_floating_point()):
        cand, oracle, ref = (t.to(torch.float64) for t in (cand, oracle, ref))
    rs = engine.compare(ref, oracle)
    b = engine.g02_bound(rs, ref.dtype if ref.is_floating_point() else oracle.dtype)
    cs = engine.compare(cand, oracle, b["atol"], b["rtol"])
    first = cs["first_past_bound"] if cs["first_past_bound"] >= 0 else cs["max_abs_idx"]
    return {"candidate": cs, "reference": rs, "bound": b, "values": values(first, cand, oracle, ref)}


def _moved(expected: tuple[list, list], device: str) -> tuple[list, list]:
    """(oracle outputs, reference outputs) with their tensors on ``device`` (others as they are)."""
    return tuple([x.to(device) if isinstance(x, torch.Tensor) else x for x in xs] for xs in expected)


def accuracy_run(job: dict, result: dict, oracle: list, ref: list, label: str = "") -> tuple[dict | None, str | None]:
    """({"seed","label","outputs"} for the accuracy rule, None) or (None, why not comparable)."""
    outs = []
    cands = result.get("outputs", [])
    for i, (o, r) in enumerate(zip(oracle, ref)):
        c = cands[i] if i < len(cands) else None
        why = shape_problem(c, o)
        if why:
            return None, f"output {i}: {why}"
        outs.append({"index": i, **accuracy_output(c, o, r)})
    if len(cands) != len(oracle):
        return None, f"{len(cands)} outputs, reference returns {len(oracle)}"
    return {"seed": job["seed"], "label": label, "outputs": outs}, None


def reference_consistent(oracle: list, ref: list) -> str | None:
    """Why the low-precision reference cannot calibrate a run (non-finite where the oracle is
    finite or the reverse), or None."""
    for i, (o, r) in enumerate(zip(oracle, ref)):
        if not isinstance(o, torch.Tensor) or not o.is_floating_point():
            continue
        s = engine.compare(r, o)
        if s["nan_mismatch"] + s["posinf_mismatch"] + s["neginf_mismatch"]:
            return f"the reference itself is non-finite where the oracle is not (output {i})"
        if s["oracle_nonfinite"]:
            return f"the oracle is not finite (output {i})"
    return None


def judge_partial(gate: str, m: dict, done: int, total: int, e: BudgetSpent) -> dict:
    """The verdict on the ``done`` of ``total`` runs judged before the check's budget refused an
    oracle (``m``: their measurements, as the gate's rule takes them): a finding (FAIL) stands,
    with the count in its summary; anything else re-raises ``e`` (the gate is not established)."""
    if done:
        r = engine.judge(gate, m)
        if r["verdict"] == "FAIL":
            r["summary"] += f" (judged on {done} of {total} runs: {e})"
            return r
    raise e


def judge_labelled_runs(ctx: Context, results: dict, labelled_jobs: list[tuple[str, dict]], gate: str) -> dict:
    """The accuracy rule over runs labelled by input class or scale (G06, G10): runs whose
    reference leaves the oracle's class are skipped with the reason. A finding made before the
    check's budget ran out stands (judge_partial)."""
    runs, skipped = [], []
    for label, job in labelled_jobs:
        try:
            oracle, ref = ctx.expected(job)
        except BudgetSpent as e:
            return judge_partial(gate, {"runs": runs, "skipped": skipped}, len(runs), len(labelled_jobs), e)
        why = reference_consistent(oracle, ref)
        if why:
            skipped.append(f"{label}: {why}")
            continue
        run, bad = accuracy_run(job, results[job["id"]], oracle, ref, label)
        if bad:
            return engine.judge(gate, {"incomparable": f"{label}: {bad}"})
        runs.append(run)
    return engine.judge(gate, {"runs": runs, "skipped": skipped})
