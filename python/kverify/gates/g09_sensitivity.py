"""G09 sensitivity — tolerance-free on the candidate.

Contract: (1) each tensor input redrawn alone, each parameter/buffer that the candidate shares
(by name) with the reference transformed alone (x*1.0625 + 0.0625), and the mode (each model,
built anew for that run, in the modes its constructor left: training, as KernelBench's harness
runs it, where the other gates judge eval mode; set_built_modes) changes the candidate's output
(any bit) wherever it moves the fp64 oracle's output by more than MOVE_REL of the element plus
MOVE_RMS of the output's rms (for fp16/bf16 outputs 8 of their epsilons instead, _moved) -- far
above fp64 rounding and above the candidate dtype's resolution with margin -- plus SLACK times the
reference's own rounding error at that element in the two runs (rules 2026-12-01.5, _slack: where
the reference at its own dtype cannot resolve the move, as in the tail of an erf-based GELU, a
candidate computing what it computes is not asked to); an element past the
dtype's range in both runs asks nothing (it overflows either way). (Judged against the fp32
reference's bits before stop 22, a perturbation that the mathematics cancels -- a uniform bias
shift before a mean subtraction, a softmax or a LayerNorm; PyTorch's eval-mode fast path against
its training path -- changed the reference by rounding alone, and a correct candidate whose
rounding differs failed.) A candidate that raises
under the mode perturbation fails it; that perturbation is left out, and said so, when the
reference raises there (running out of GPU memory is no such reason: the gate is ERROR) or its
oracle's output differs between two such calls (dropout), or when the candidate cannot be built
a second time. Under any perturbation an output of another shape or
dtype than otherwise fails. Only a change is asked for: the mode run does not judge accuracy in
training mode (the standard test runs there).
(2) In one process, calls alternating A, B, A, B, ... (12, well past the standard test's 5)
give the same bits on the same inputs at every call.
Catches: kernels that ignore an input or a weight (bias never added, one operand cached), results
cached by shape, kernels correct only on the first call (stale state, one-time initialisation
that goes wrong on reuse), candidates that pin BatchNorm to eval mode (its running statistics)
where the reference normalises by the batch (CUDA-L1 L3 T25 on the H200, stop 22: CLEAN by the
eval-mode gates, max abs diff 6 in the training-mode standard test).
Controls: controls/g09_*.
"""
from __future__ import annotations

import gc

import torch

from kverify import engine
from kverify._internal import memory_wait
from kverify.gates.base import Context
from kverify.problem import MODE_RUN, STATE_LOCK, as_outputs, fp64_copy, set_built_modes, upcast

GATE, NAME, TOLERANCE_FREE = "G09", "sensitivity", True
#: With prestarting, G09 and G10 (the two slowest of the other gates) run in a second worker beside
#: the main one (kverify.check.worker_of).
WORKER = "gates-b"
CALLS = 12
#: A perturbation constrains the candidate where it moves the fp64 oracle's output element by more
#: than MOVE_REL of the element plus MOVE_RMS of the output's rms: far above fp64 rounding (2^-52),
#: 128 fp32 ulps, so that a candidate's own rounding cannot hide a real move; the perturbations
#: themselves move what depends on them by percents (x * 1.0625 + 0.0625, inputs redrawn).
MOVE_REL = 2.0 ** -16
MOVE_RMS = 2.0 ** -20
#: ... and by more than SLACK times the reference's own error there (both runs; rules
#: 2026-12-01.5): where the candidate's output does not change, its error in one of the two runs
#: is half the move or more, so it fails only where that is past the reference's own worst error
#: at that element by a factor SLACK / 2 (a candidate bitwise equal to the reference as the check
#: runs it cannot fail where the reference's outputs are finite: _moved gives no slack elsewhere).
SLACK = 4.0
#: Elements per piece of G09's elementwise judgement (_misses, _rms): about a dozen fp64
#: temporaries of this size at a time, on the oracle's device.
CHUNK = 1 << 22


def applies(ctx: Context) -> str | None:
    return None


def _shared_tensors(ctx: Context) -> list[str]:
    ref, _ = ctx.oracle.models(ctx.binding)  # the shape G09's jobs run at (a parameter list may depend on it)
    names = [n for n, t in list(ref.named_parameters()) + list(ref.named_buffers()) if t.is_floating_point()]
    return names


def plan(ctx: Context) -> list[dict]:
    alt = ctx.seed_for("G09/alt")
    return [ctx.job("perturb", "G09/perturb", small=True, alt_seed=alt, tensors=_shared_tensors(ctx), mode=True),
            ctx.job("sequence", "G09/sequence", small=True, alt_seed=alt, calls=CALLS)]


@torch.no_grad()
def _oracle_runs(ctx: Context, job: dict, left_out: list):
    """Yield (run name, (the fp64 oracle's outputs, the reference's at its own dtype or None where
    it raised: _reference_run)) for "base" first, then each input redrawn, each shared tensor
    transformed and the mode run, one run at a time (G09 judges each against "base" and drops it: at most two runs'
    outputs held, whatever their number); appends to ``left_out`` why the mode run is left out.
    The reference's outputs measure its own rounding error at each element in each run (_slack).
    The caller holds STATE_LOCK while it iterates: this binds the job's shape and changes the
    cached oracle's weights for a moment, while other threads of the check may run it. Each run
    that runs out of GPU memory runs again (Oracle.retrying; the perturbed weights stay as they
    are until it ends; a mode run builds its model anew), with STATE_LOCK held through the pause.
    Raises BudgetSpent past the check's deadline, and a GPU out-of-memory error that waiting did
    not mend (the gate is ERROR; kverify audit runs the row again alone)."""
    ref, ora = ctx.oracle.models(job.get("binding"))
    ctx.problem.bind(job.get("binding"))
    low = ctx.inputs_of(job)
    low_alt = ctx.inputs_of(job, "alt_seed")
    base = [upcast(x) for x in low]
    alt = [upcast(x) for x in low_alt]

    def both(oracle, reference, high: list, low_in: list) -> tuple:
        # reference None: no reference run (a weight only the fp64 copy has as a float)
        ctx.oracle.check_budget()
        o = ctx.oracle.retrying(lambda: as_outputs(oracle(*high)), high)  # out of GPU memory: again
        return o, None if reference is None else _reference_run(lambda: reference, low_in, ctx.oracle.retrying)

    yield "base", both(ora, ref, base, low)
    for i, x in enumerate(base):
        if isinstance(x, torch.Tensor):
            xs, ls = list(base), list(low)
            xs[i], ls[i] = alt[i], low_alt[i]
            yield f"input {i}", both(ora, ref, xs, ls)
    own = dict(ora.named_parameters())
    own.update(dict(ora.named_buffers()))
    own_ref = dict(ref.named_parameters())
    own_ref.update(dict(ref.named_buffers()))
    for name in job["tensors"]:
        t, tr = own.get(name), own_ref.get(name)
        if t is None or not t.is_floating_point():
            continue
        keep = t.detach().clone()
        keep_r = tr.detach().clone() if tr is not None and tr.is_floating_point() else None
        try:
            t.data.mul_(1.0625).add_(0.0625)
            if keep_r is not None:
                tr.data.mul_(1.0625).add_(0.0625)
            o, r = both(ora, ref if keep_r is not None else None, base, low)
        finally:  # the cached models serve the other gates
            t.data.copy_(keep)
            if keep_r is not None:
                tr.data.copy_(keep_r)
        yield f"tensor {name}", (o, r)  # the weights restored first
        o = r = None

    def mode_run(k: int) -> list:
        # a model built for each try (a training call changes its state); the last one may hold a
        # reference cycle (a function attribute closing over its module): one such model at a time
        gc.collect()
        anew = fp64_copy(set_built_modes(ctx.problem.reference_model(ctx.oracle.seed, ctx.oracle.device)))
        torch.manual_seed(ctx.seed_for(f"G09/mode/{k}"))  # building seeds the generator: draw anew
        return as_outputs(anew(*base))

    runs = []
    try:  # in the modes as built, twice
        for k in range(2):
            ctx.oracle.check_budget()
            runs.append(ctx.oracle.retrying(lambda: mode_run(k), base))  # out of GPU memory: again, built anew
    except Exception as e:  # noqa: BLE001 -- BudgetSpent is a BaseException: it goes on up
        if memory_wait.is_oom(e):  # the audit's neighbours, not the reference: not a reason to leave it out
            raise
        left_out.append(f"training mode (the reference raised there: {type(e).__name__}: {str(e)[:160]})")
        return
    if all(not isinstance(a, torch.Tensor) or a.shape != b.shape or not _any_moved(a, b) for a, b in zip(*runs)):
        def built():  # the reference itself in the modes as built, drawing as the first fp64 run did
            m = set_built_modes(ctx.problem.reference_model(ctx.oracle.seed, ctx.oracle.device))
            torch.manual_seed(ctx.seed_for("G09/mode/0"))
            return m
        # no budget check: one fp32 call (and its retries, which the deadline bounds)
        yield MODE_RUN, (runs[0], _reference_run(built, low, ctx.oracle.retrying))
    else:
        left_out.append("training mode (the reference's output there differs between two calls: dropout)")


def _reference_run(model, inputs: list, retrying=None) -> list | None:
    """The outputs of ``model()`` (the reference at its own dtype, or a function building it) on
    copies of ``inputs`` (a reference writing its inputs would change them for the next run),
    moved to the host at once (the GPU holds what it held before: the fp64 outputs); None where it
    raises: no measure of its rounding, the move alone decides there (_slack). Not for running out
    of GPU memory where waiting may mend it (memory_wait.is_oom; a size past the whole GPU still
    gives None): that is an audit's neighbours, not the reference, and a missing measure can make
    G09 FAIL where the reference's own rounding explains the move; the call runs again through
    ``retrying`` (Oracle.retrying: a pause, the same model, fresh copies) and, where it still runs
    out, the error is raised (the gate is ERROR; kverify audit runs such a row again alone)."""
    def once() -> list:
        m = model()
        ins = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        return [t.cpu() if isinstance(t, torch.Tensor) else t for t in as_outputs(m(*ins))]
    try:
        return once() if retrying is None else retrying(once)
    except Exception as e:  # noqa: BLE001
        if memory_wait.is_oom(e):
            raise
        return None


def _slack(ob: torch.Tensor, rb, op: torch.Tensor, rp) -> torch.Tensor | None:
    """Elementwise |rb - ob| + |rp - op|: the reference's own rounding error (at its dtype, on the
    check's device) against the fp64 oracle, in the base run and the perturbed one, flattened, in
    fp64 (complex128 for complex outputs) on ``ob``'s device; None where either reference output
    is missing or not a float tensor of the oracle's shape; NaN or +Inf where the reference is not
    finite (_moved then ignores it). An element the oracle moves by no more than SLACK times this
    asks nothing: the reference itself cannot resolve the move there (cancellation: LayerNorm's
    x - mean, erf-based GELU's 1 + erf(x) in its tail; technoabsurdist qwencoder L2/P3 on the H200,
    stop 25: the candidate is the reference's own PyTorch ops and failed on 3 of 33554170
    elements)."""
    if not _slack_applies(ob, rb, op, rp):
        return None
    dev = ob.device
    f = [t.detach().reshape(-1).to(dev, torch.complex128 if t.is_complex() else torch.float64)
         for t in (ob, rb, op, rp)]
    return (f[1] - f[0]).abs() + (f[3] - f[2]).abs()


def _slack_applies(ob: torch.Tensor, rb, op: torch.Tensor, rp) -> bool:
    """Whether both reference outputs ``rb``, ``rp`` are float (or complex) tensors of the
    oracle's shapes (_slack measures the reference's error only then)."""
    return all(isinstance(r, torch.Tensor) and r.shape == o.shape and (r.is_floating_point() or r.is_complex())
               for r, o in ((rb, ob), (rp, op)))


def _rms(a: torch.Tensor) -> float:
    """Root mean square of the finite elements of ``a`` (0.0 where none is, and for integer and
    bool tensors, which _moved compares by bits), summed in fp64 over CHUNK-element pieces on
    ``a``'s device (bounded memory at any output size). In fp64 whatever
    ``a``'s dtype since rules 2026-12-01.6: an oracle output the reference casts (to fp16, say)
    had its rms taken in that dtype before, where one element past 256 overflowed it to inf and
    G09 then asked nothing of that output."""
    if not (a.is_floating_point() or a.is_complex()):
        return 0.0
    a = a.detach().reshape(-1)
    total, count = 0.0, 0
    for s in range(0, a.numel(), CHUNK):
        x = a[s:s + CHUNK].to(torch.complex128 if a.is_complex() else torch.float64)
        fin = x.isfinite()
        total += float(x.abs().pow(2).masked_fill(~fin, 0).sum())
        count += int(fin.sum())
    return (total / count) ** 0.5 if count else 0.0


def _moved(base: torch.Tensor, pert: torch.Tensor, dtype: torch.dtype = torch.float32,
           slack: torch.Tensor | None = None, rms: float | None = None) -> torch.Tensor:
    """Elementwise mask (flat, on ``base``'s device) of the fp64 oracle's moves that a correct
    output of ``dtype`` (the candidate's) must show: |pert - base| > rel |base| + rel/16 rms(base)
    + SLACK * slack, rel = MOVE_REL or, for a coarser dtype, 8 of its epsilons (fp16 2^-7, bf16
    2^-4); rms over the finite elements of the whole output (``rms`` where ``base`` is a piece of
    it, _rms otherwise); ``slack`` (flat, _slack) the reference's own rounding error there. A NaN
    against a number, and an infinity against another value, moved; two NaNs did not; both values
    past ``dtype``'s largest finite number in magnitude (overflow there either way) did not.
    Integer and bool outputs: bits differ."""
    if base.dtype == torch.bool or not (base.is_floating_point() or base.is_complex()):
        return _changed(base, pert)
    a, b = base.detach().reshape(-1), pert.detach().reshape(-1).to(base.device)
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.finfo(torch.float32)
    rel = max(MOVE_REL, 8 * info.eps)
    if rms is None:
        rms = _rms(a)
    bound = rel * a.abs() + rel * (MOVE_RMS / MOVE_REL) * rms
    if slack is not None:
        # where the reference is not finite (NaN, or past its range) its error is not measured: the
        # move alone decides there, as before (else a candidate of NaNs passed where the reference
        # overflowed; past the dtype's range in both runs asks nothing anyway, below)
        bound = bound + SLACK * slack.to(a.device).nan_to_num(nan=0.0, posinf=0.0)
    moved = (b - a).abs() > bound
    moved |= a.isnan() ^ b.isnan()
    moved |= (a.isinf() | b.isinf()) & (a != b) & ~(a.isnan() | b.isnan())
    moved &= ~((a.abs() > info.max) & (b.abs() > info.max))
    return moved


def _any_moved(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether _moved finds any element of ``b`` (an fp64 oracle output) moved from ``a`` (one of
    the same shape), judged in CHUNK-element pieces on ``a``'s device."""
    a, b = a.detach().reshape(-1), b.detach().reshape(-1)
    rms = _rms(a)
    return any(bool(_moved(a[s:s + CHUNK], b[s:s + CHUNK], rms=rms).any()) for s in range(0, a.numel(), CHUNK))


def _misses(rb: torch.Tensor, rp: torch.Tensor, lb, lp, cb: torch.Tensor, cp: torch.Tensor,
            rms: float | None = None) -> tuple[int, int, int]:
    """One output under one perturbation: (elements the fp64 oracle moves past _moved's bound,
    those of them where the candidate's bits did not change, the flat index of the first such or
    -1). ``rb``, ``rp``: the oracle's outputs in the base and the perturbed run; ``lb``, ``lp``:
    the reference's at its own dtype (or None, _slack); ``cb``, ``cp``: the candidate's, of
    ``rb``'s shape; ``rms``: _rms(rb) when the caller has it (the same for every perturbation of
    this output: judge computes it once), else computed here. Computed in CHUNK-element pieces
    on the oracle's device (the GPU in an audit): at most a few hundred MiB at a time whatever
    the output's size (stop 28, H200: two rows with 130M- and 268M-element outputs, judged in
    fp64 on the host in one piece, spent their whole check budget and more in this judgement)."""
    dev = rb.device
    slack = _slack_applies(rb, lb, rp, lp)
    flat = [None if t is None else t.detach().reshape(-1) for t in (rb, rp, lb, lp, cb, cp)]
    if rms is None:
        rms = _rms(flat[0])
    changed = ignored = 0
    first = -1
    for s in range(0, flat[0].numel(), CHUNK):
        a, b, la, lb_, ca, cb_ = (None if t is None else t[s:s + CHUNK].to(dev) for t in flat)
        rc = _moved(a, b, cb.dtype, _slack(a, la, b, lb_) if slack else None, rms)
        miss = rc & ~_changed(ca, cb_)
        changed += int(rc.sum())
        n = int(miss.sum())
        if n and ignored == 0:
            first = s + int(torch.nonzero(miss)[0])
        ignored += n
    return changed, ignored, first


def _changed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise 'bits differ' mask, flat, on ``a``'s device (NaN payloads compared as bits)."""
    a, b = a.detach().contiguous(), b.detach().to(a.device).contiguous()
    if a.dtype == torch.bool:
        return (a != b).reshape(-1)
    iv = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[a.element_size()]
    return (a.view(iv) != b.view(iv)).reshape(-1)


def _judge_run(name: str, pair: tuple, ref_base: tuple, cand: dict, left_out: list,
               base_rms: dict | None = None) -> list[dict]:
    """G09's record of one perturbation run ``name`` (``pair``: the oracle's and the reference's
    outputs there, _oracle_runs; ``ref_base``: theirs in the base run; ``base_rms``: output index
    -> _rms of the oracle's base output, filled here as each is first needed and kept by the
    caller for the next runs; ``cand``: the candidate's
    outputs by run name, a run's a list of outputs or {"raised": ...} / {"left_out": why}): [] and
    a reason appended to ``left_out`` where the candidate's run is left out, else one record:
    {"name", "failed"} or {"name", "reference_changed", "ignored", "first"} (elements over all
    outputs, _misses)."""
    r_out, low_out = pair
    if isinstance(cand[name], dict):  # {"raised": ...}, or {"left_out": why} (not built again)
        if "raised" in cand[name]:
            return [{"name": name, "failed": "the candidate raised where the reference ran: " + cand[name]["raised"]}]
        left_out.append(f"{name} ({cand[name].get('left_out', '?')})")
        return []
    odd = [k for k, (cb, cp) in enumerate(zip(cand["base"], cand[name])) if isinstance(cb, torch.Tensor)
           and (not isinstance(cp, torch.Tensor) or cp.shape != cb.shape or cp.dtype != cb.dtype)]
    if odd or len(cand[name]) != len(cand["base"]):
        k = odd[0] if odd else min(len(cand[name]), len(cand["base"]))
        return [{"name": name, "failed": f"output {k} is not the tensor of the same shape and dtype "
                                         "that it is otherwise"}]
    ref_changed = ignored = 0
    first = -1
    low_base = ref_base[1]
    for k, (rb, rp, cb, cp) in enumerate(zip(ref_base[0], r_out, cand["base"], cand[name])):
        if not isinstance(rb, torch.Tensor) or not isinstance(cb, torch.Tensor) or cb.shape != rb.shape \
                or rp.shape != rb.shape:
            continue
        lb = low_base[k] if low_base is not None and k < len(low_base) else None
        lp = low_out[k] if low_out is not None and k < len(low_out) else None
        if base_rms is None:
            base_rms = {}
        if k not in base_rms:
            base_rms[k] = _rms(rb)
        moved, missed, at = _misses(rb, rp, lb, lp, cb, cp, base_rms[k])
        ref_changed += moved
        if missed and ignored == 0:
            first = at
        ignored += missed
    return [{"name": name, "reference_changed": ref_changed, "ignored": ignored, "first": first}]


def judge(ctx: Context, results: dict) -> dict:
    job = plan(ctx)[0]
    cand = results["G09/perturb"]["outputs"]
    perts, left_out, oracle_left_out = [], [], []
    with torch.no_grad(), STATE_LOCK:
        runs = _oracle_runs(ctx, job, oracle_left_out)
        ref_base = next(runs)[1]
        base_rms: dict[int, float] = {}  # the oracle's base outputs' rms, once each (_judge_run)
        for name, pair in runs:
            if name in cand:
                perts.extend(_judge_run(name, pair, ref_base, cand, left_out, base_rms))
            pair = None  # dropped before the next run is computed
    left_out = oracle_left_out + left_out
    seq = results["G09/sequence"]["digests"]
    firsts, bad, bad_label = {}, -1, None
    for k, (label, d) in enumerate(seq):
        if label not in firsts:
            firsts[label] = d
        elif d != firsts[label] and bad < 0:
            bad, bad_label = k, label
    m = {"perturbations": perts, "sequence": {"calls": len(seq), "inconsistent_call": bad, "label": bad_label or ""}}
    if left_out:
        m["left_out"] = "; ".join(left_out)
    return engine.judge(GATE, m)
