"""G05 shapes — tolerance-based (the accuracy rule per variant).

Contract: every free dimension at adversarial sizes — 1, small primes, tile sizes +-1 (31/33,
63/65, 127/129, 255/257), the default +-1 and one size above the default within a memory budget
— alone, and two combinations (every dimension above 9 at 13; all of them at default-1): each
variant that the reference can run passes the contract and the accuracy rule, or raises a clear
error (UNSUPPORTED). "Alone": the other dimensions at the gates' small shape when the check found
one (kverify.check._gate_shape; the dimension varied also at its small size +-1 there), else at
their defaults. With large inputs each variant at the defaults costs an fp64 oracle run near the
own shape in kverify's process (the H200 audit spent ~200 CPU s per such row planning G05). When
the small shape is made of multiples of m (a reference that runs at no odd size: gates.base.
LADDERS), every size is also tried times m, and the default and the small size +-m. Variants whose inputs,
parameters and outputs exceed twice the own shape's are skipped (counted on meta tensors, before
anything is built). A silently wrong variant fails, and is shrunk to the smallest failing shape found
(passes: dimension -> 1, -> nearest smaller small prime, halve, minus one; Hypothesis-style).
Catches: sizes hard-coded with #define, missing bounds checks on the last tile, vectorised loads
that assume divisibility by 4/8, grid sizes computed for the default shape only.
When the check's probe (kverify.check._gate_shape) found the candidate silently wrong at the gates'
small shape (the accuracy rule FAILs there), that shape is one of G05's failing variants (PROBE):
a binding of the free dimensions the reference runs at, as every variant here is. When it fails by
more than SETTLED_RATIO times its bound (or breaks the contract), no other variant is tried: none
could change the row's class or its place in the audit's tolerance sweep; the failure is shrunk
from it. Otherwise the search runs as well, and a row budget that cuts it leaves G05 FAIL, not
ERROR. Audit evidence (stop 38, 929-row corpus, rules before 2026-12-04.10): of the 70 rows with
that probe result, 56 failed G05 by its own search around the own shape and 14 had it cut by the
row budget; none passed it.
Controls: controls/g05_*.
"""
from __future__ import annotations

from collections import Counter

from kverify import engine
from kverify._internal import memory_wait
from kverify.errors import BudgetSpent
from kverify.gates.base import Context, accuracy_run, spec_numel


GATE, NAME, TOLERANCE_FREE = "G05", "shapes", False
#: Planning runs the reference at every variant (seconds): when check() prestarts workers, G05 is
#: planned in a background thread and its jobs run in a worker of their own ("G05"), beside the
#: other gates' worker, instead of delaying it (kverify.check.worker_of).
WORKER = "G05"
SIZES = (1, 2, 3, 7, 13, 31, 33, 63, 65, 127, 129, 255, 257)
SMALL_PRIMES = (1, 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31)
MIN_BUDGET = 1 << 22       # elements of all inputs together, at least
BUDGET_FACTOR = 2          # or this many times the default shape's inputs
SHRINK_ROUNDS = 6
#: bytes of expected outputs (fp64 oracle + reference, host memory) that planning keeps for the
#: judging; past it a variant's are dropped once its reference has run and computed again when
#: its outcome is judged (stop 27, H200: keeping every variant's near the own shape held ~28 GiB
#: per check process for rows of 1-2 GiB of inputs, while four checks shared 126 GiB)
KEEP_BYTES = 1 << 30


def applies(ctx: Context) -> str | None:
    return None if ctx.problem.dims else "the problem has no free dimensions"


def _key(b: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(b.items()))


def _budget(ctx: Context) -> int:
    return max(MIN_BUDGET, BUDGET_FACTOR * spec_numel(ctx.specs))


def variants(ctx: Context) -> list[dict]:
    """The bindings G05 checks (module docstring), in a fixed order without repeats."""
    dims = ctx.problem.dims
    base = {**dims, **(ctx.binding or {})}  # the other dimensions' sizes while one is varied
    m = ctx.size_multiple()  # the small shape is m x odd sizes: the reference wants multiples of m
    out: list[dict] = []
    for d, v in dims.items():
        sizes = set(SIZES) | {v - 1, v + 1, v + v // 2 + 1}
        if base[d] != v:
            sizes |= {v, base[d] - 1, base[d] + 1}
        if m > 1:
            sizes |= {m * s for s in SIZES} | {v - m, v + m, base[d] - m, base[d] + m}
        for s in sorted(sizes):
            if s >= 1 and s != base[d] and {**base, d: s} != dims:  # the own shape is G02's
                out.append({**base, d: s})
    # the combinations change the sizes above 9 only: kernel sizes, strides and paddings moved
    # together (all 13, or all one less: stride 1 beside an output_padding of 1) make most
    # references raise, and the combination then tests nothing
    sizes_dims = [d for d, v in dims.items() if v > 9]
    if len(sizes_dims) > 1:
        out.append({**base, **{d: 13 * m for d in sizes_dims}})
        out.append({**dims, **{d: max(1, dims[d] - m) for d in sizes_dims}})
    seen, uniq = set(), []
    for b in out:
        if _key(b) not in seen:
            seen.add(_key(b))
            uniq.append(b)
    return uniq


def _footprint(ctx: Context, b: dict | None) -> int | None:
    key = ("G05/footprint", _key(b or {}))
    if key not in ctx.cache:
        ctx.cache[key] = ctx.problem.footprint(b)
    return ctx.cache[key]


def _valid(ctx: Context, b: dict, capped: bool = True) -> str | None:
    """Why the reference cannot be run at ``b`` (error, over budget), or None. Caches its outputs
    (``capped``, planning: while the kept ones stay within KEEP_BYTES; the shrinking keeps each
    round's candidates and releases them after the round).
    Over budget: inputs past _budget, or inputs + parameters + outputs (Problem.footprint, on meta
    tensors, checked first: building a huge model for real took minutes on the H200 audit) past
    BUDGET_FACTOR times the own shape's, at least MIN_BUDGET; or the reference's run there asks for
    more GPU memory at once than the whole GPU has (memory_wait.beyond_gpu: its intermediates, which
    the footprint does not count; said without memory_wait.MARKS, so the audit does not take the
    row for one that ran short beside others)."""
    own, here = _footprint(ctx, None), _footprint(ctx, b)
    if own is not None and here is not None and here > max(MIN_BUDGET, BUDGET_FACTOR * own):
        return "over the memory budget"
    try:
        specs = ctx.specs_at(b)
    except Exception as e:  # noqa: BLE001
        return f"get_inputs fails: {type(e).__name__}"
    if spec_numel(specs) > _budget(ctx):
        return "over the memory budget"
    job = _job(ctx, b)
    try:
        kept = ctx.store_expected(job)
    except Exception as e:  # noqa: BLE001
        if memory_wait.beyond_gpu(e):  # the same alone or shared: not a shortage (words free of memory_wait.MARKS)
            return "over the memory budget: the reference's run asks more at once than the whole GPU has"
        return f"reference raises {type(e).__name__}"
    finally:
        _forget_models(ctx, [b])  # its outputs are kept (or computed again from a new pair): not the pair
    if capped:
        so_far, size = ctx.cache.get("G05/kept_bytes", 0), _bytes(kept)
        if so_far + size > KEEP_BYTES:
            ctx.release([job["id"]])  # computed again when its outcome is judged (_verdict)
        else:
            ctx.cache["G05/kept_bytes"] = so_far + size
    return None


def _bytes(expected: tuple[list, list]) -> int:
    """Bytes of the tensors in (oracle outputs, reference outputs)."""
    return sum(x.numel() * x.element_size() for xs in expected for x in xs if hasattr(x, "element_size"))


def _job(ctx: Context, b: dict) -> dict:
    """The candidate's run at variant ``b``; "transient": the worker keeps its model only until the
    next variant's (kverify._internal.worker.Runner.model)."""
    return ctx.job_at("run", f"G05/{_key(b)}", b, ctx.specs_at(b), transient=True)


#: ctx.cache key of the check's probe record when the candidate was silently wrong at the gates'
#: small shape (kverify.check._gate_shape writes it): a variant record, verdict FAIL
PROBE = "G05/probe"
#: a probe failure past this many times its bound settles G05 (module docstring): above DESIGN.md's
#: 100x that makes a row BROKEN, and at the largest factor of the audit report's tolerance sweep
#: (kverify.audit_report.SWEEP), so no further failing variant could change either
SETTLED_RATIO = 1000.0


def plan(ctx: Context) -> list[dict]:
    probe = ctx.cache.get(PROBE)
    if probe is not None and probe["bound_ratio"] > SETTLED_RATIO:  # settled (module docstring): no search
        ctx.cache["G05/variants"] = []
        return []
    ctx.cache["G05/variants"] = [(b, _valid(ctx, b)) for b in variants(ctx)]
    return [_job(ctx, b) for b, why in ctx.cache["G05/variants"] if why is None]


def _size(ctx: Context, b: dict) -> tuple:
    """How small a failing shape is, for shrinking: (input elements, inputs + parameters + outputs
    (Problem.footprint; the inputs when it cannot be counted), the binding's key): a channel
    count moves the second only."""
    fp = _footprint(ctx, b)
    return _elements(ctx, b), fp if fp is not None else _elements(ctx, b), _key(b)


def _elements(ctx: Context, b: dict) -> int:
    return spec_numel(ctx.specs_at(b))


def condense(ctx: Context, job: dict, outcome) -> None:
    """Judge one variant as soon as its outcome is in (kverify.check._Judging calls this in its
    judging thread, beside G05's worker) and keep only its record: outcome.result becomes {"G05":
    record}, and the variant's expected outputs are released, so the check's process holds
    neither every variant's outputs nor their expected outputs at once. A fault here leaves the
    outcome as it was (judge_outcomes judges it again and reports what it raises)."""
    if outcome.status != "ok" or not isinstance(outcome.result, dict) or "G05" in outcome.result:
        return
    b = next((b for b, why in ctx.cache.get("G05/variants", []) if why is None and _job(ctx, b)["id"] == job["id"]),
             None)
    if b is None:
        return
    try:
        rec = _record(ctx, b, outcome)
    except Exception:  # noqa: BLE001 — judged again (and reported) by judge_outcomes
        return
    finally:
        _forget_models(ctx, [b])  # a pair built again for outputs released while planning (_valid)
    outcome.result = {"G05": rec}
    ctx.release([job["id"]])


def _record(ctx: Context, b: dict, outcome) -> dict:
    """_verdict, or the SKIPPED record of a variant whose oracle run the check's budget refused."""
    if isinstance(outcome.result, dict) and "G05" in outcome.result:
        return outcome.result["G05"]
    try:
        return _verdict(ctx, b, outcome)
    except BudgetSpent as e:  # its oracle was refused: judged as a variant the budget cut
        return {"binding": b, "elements": 0, "verdict": "SKIPPED", "reason": str(e), "budget": True}


def _verdict(ctx: Context, b: dict, outcome) -> dict:
    rec = {"binding": b, "elements": _elements(ctx, b)}
    if outcome.status == "budget":  # not run to the end: no finding (judge_outcomes: ERROR unless a FAIL)
        return {**rec, "verdict": "SKIPPED", "reason": outcome.detail[:160], "budget": True}
    if outcome.status != "ok":
        return {**rec, "verdict": "FAIL", "reason": f"{outcome.status}: {outcome.detail[:160]}", "bound_ratio": 1e300}
    r = outcome.result
    if "error" in r:
        return {**rec, "verdict": "SKIPPED", "reason": "kverify fault: " + r["error"].strip().splitlines()[-1]}
    if "exception" in r:
        return {**rec, "verdict": "UNSUPPORTED", "reason": r["exception"][:160]}
    job = _job(ctx, b)
    oracle, ref = ctx.expected(job, host=True)
    run, why = accuracy_run(job, r, oracle, ref)
    if why:
        return {**rec, "verdict": "FAIL", "reason": why, "bound_ratio": 1e300}
    g = engine.judge("accuracy", {"runs": [run]})
    return {**rec, "verdict": g["verdict"], "reason": g["summary"][:200], "bound_ratio": g["bound_ratio"]}


def _shrink_steps(v: int) -> list[int]:
    primes = [p for p in SMALL_PRIMES if p < v]
    return sorted({s for s in (1, primes[-1] if primes else 1, v // 2, v - 1) if 1 <= s < v}, reverse=True)


def _shrink(ctx: Context, failing: dict) -> dict:
    best, steps = failing, 0
    for _ in range(SHRINK_ROUNDS):
        cands = []
        for d, v in best["binding"].items():
            for s in _shrink_steps(v):
                b = {**best["binding"], d: s}
                if _valid(ctx, b, capped=False) is None and _size(ctx, b) < _size(ctx, best["binding"]):
                    cands.append(b)
        if not cands:
            break
        outs = ctx.sandbox.run([_job(ctx, b) for b in cands], tag="G05-shrink")
        fails = [v for v in (_verdict(ctx, b, o) for b, o in zip(cands, outs)) if v["verdict"] == "FAIL"]
        ctx.release([_job(ctx, b)["id"] for b in cands])  # their expected outputs (host memory)
        _forget_models(ctx, cands)  # and their models (GPU)
        if not fails:
            break
        best = min(fails, key=lambda v: _size(ctx, v["binding"]))
        steps += 1
    return {"binding": best["binding"], "elements": best["elements"], "from": failing["binding"], "steps": steps,
            "reason": best["reason"]}


def judge_outcomes(ctx: Context, outcomes: dict) -> dict:
    """Judge from the jobs' outcomes: a crash or timeout at one variant is that variant's FAIL.
    The reference models built for the variants are dropped afterwards (Oracle.forget)."""
    try:
        return _judge_outcomes(ctx, outcomes)
    finally:
        _forget_models(ctx, [b for b, _ in ctx.cache.get("G05/variants", [])])


def _forget_models(ctx: Context, bindings: list[dict]) -> None:
    """Drop the oracle's models of these variant bindings, not those the other gates use (the own
    shape, the gates' small shape). Called after each variant's reference run while planning and
    after each variant is judged: a pair (reference and its fp64 copy, on the GPU) kept per variant
    until the end of the gate holds 24 GiB a variant for a reference with 8 GiB of fp32 parameters
    (and their fp64 copy): the likely cause, not confirmed on a GPU, of audit row
    technoabsurdist/opus4_level3_20250903_035524/L3/P2 running out of memory with an H200 to
    itself (stop 41)."""
    for b in bindings:
        if b and b != ctx.binding:
            ctx.oracle.forget(b)


def _judge_outcomes(ctx: Context, outcomes: dict) -> dict:
    recs = [ctx.cache[PROBE]] if PROBE in ctx.cache else []
    for b, why in ctx.cache["G05/variants"]:
        if why is not None:
            recs.append({"binding": b, "elements": 0, "verdict": "SKIPPED", "reason": why})
            continue
        job_id = _job(ctx, b)["id"]
        recs.append(_record(ctx, b, outcomes[job_id]))
        ctx.release([job_id])  # its expected outputs (host memory), one variant at a time
    m = {"variants": recs}
    fails = [r for r in recs if r["verdict"] == "FAIL"]
    if fails:
        try:
            m["shrunk"] = _shrink(ctx, min(fails, key=lambda v: _size(ctx, v["binding"])))
        except BudgetSpent:  # the failing variants stand; only the smallest failing shape is not known
            pass
    result = engine.judge(GATE, m)
    cut = [r for r in recs if r.get("budget")]
    if cut and result["verdict"] not in ("FAIL", "CRASH", "TIMEOUT"):  # what ran passed; the rest is unknown
        n = Counter(r["verdict"] for r in recs if not r.get("budget"))
        result.update(verdict="ERROR", summary=f"not established: {len(cut)} of {len(recs)} shape variant(s) cut "
                                               f"short ({cut[0]['reason']}); of the others {n['PASS']} pass, "
                                               f"{n['UNSUPPORTED']} unsupported, {n['SKIPPED']} skipped")
    return result
