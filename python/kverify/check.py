"""`kverify check`: run the gates and the standard test on one candidate and build its report.

Flow: load the problem (parent) -> input specs at the problem's own shape -> each gate plans
jobs -> the candidate's process runs all jobs (kverify.sandbox) -> each gate judges its
measurements against the fp64 oracle computed here. Work that needs no other gate's result runs
beside the main worker, each in its own process started from a thread: the standard test and
the background part of gates that have a `start(ctx)` hook (G11's sanitizer runs), so a
check takes about as long as its longest part rather than their sum. KVERIFY_SERIAL_CHECK=1
runs them one after another instead (the baseline of bench/check_time.py; also for debugging).
"""
from __future__ import annotations

import json
import os
import queue
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import torch

from kverify import _core, engine
from kverify._internal import cpu_seconds, cuda_schedule, memory_wait
from kverify.errors import BudgetSpent, LoadError, UsageError
from kverify.gates import GATES
from kverify.gates.base import SMALL_INPUTS, Context, accuracy_run, spec_numel
from kverify.gates.g05_shapes import PROBE as G05_PROBE
from kverify.problem import Oracle, Problem, borrowed_names
from kverify.sandbox import Sandbox

STANDARD_TRIALS = 5


def _result(gate_mod, verdict: str, summary: str, evidence: dict | None = None) -> dict:
    return {"gate": gate_mod.GATE, "name": gate_mod.NAME, "tolerance_free": gate_mod.TOLERANCE_FREE,
            "verdict": verdict, "summary": summary, "evidence": evidence or {}, "bound_ratio": 0.0}


def resolve_device(device: str | None) -> str:
    """"cuda" when available and not asked otherwise. Raises UsageError for cuda without a GPU."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise UsageError(f"--device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU is visible to torch")
    return device


def resolve_gates(spec: str | None) -> list[str]:
    """Gate ids from "G01,G03" (all implemented gates when None). Raises UsageError for an unknown
    id, and for a spec that names none ("", ","): leaving --gates out is how to ask for all."""
    if spec is None:
        return list(GATES)
    ids = [g.strip().upper() for g in spec.split(",") if g.strip()]
    if not ids:
        raise UsageError(f"--gates {spec!r}: no gate id given; leave --gates out for all gates")
    bad = [g for g in ids if g not in GATES]
    if bad:
        raise UsageError(f"unknown gate(s) {', '.join(bad)}; available: {', '.join(GATES)}")
    return [g for g in GATES if g in ids]



def _not_established(mod, detail: str) -> dict:
    """ERROR record of a gate the check's budget left unestablished (``detail`` names the budget)."""
    return _result(mod, "ERROR", "not established: " + detail, {"detail": detail})


def _judging_error(mod, e: Exception, stage: str = "judging") -> dict:
    """ERROR record of a gate whose ``stage`` ("judging" or "planning") in this process raised
    ``e``, with the traceback: "ran out of memory while ..." where ``e`` says so
    (memory_wait.says_oom: on the GPU, other checks held the memory and waiting did not mend it,
    or the problem needs more than the device has; kverify audit runs such a row again alone, and
    kverify audit --redo-if-needed, device_audit.sh's REDO, picks such records: Journal.needs_redo),
    else "kverify fault while ..."."""
    what = f"{type(e).__name__}: {e}"
    head = "ran out of memory" if memory_wait.says_oom(what) else "kverify fault"
    return _result(mod, "ERROR", f"{head} while {stage}: {what}", {"traceback": traceback.format_exc()[-2000:]})


def _judge_gate(ctx, g: str, plan: list[dict], outcomes: dict, results: dict) -> None:
    """Judge gate ``g`` from its jobs' outcomes into results[g]: CRASH / TIMEOUT / ERROR /
    UNSUPPORTED from the outcomes, else the gate's own rule; a kverify fault is ERROR, and so is a
    job the check's budget cut short (a gate with judge_outcomes judges those itself) or an oracle
    run the budget refused (BudgetSpent, Oracle.limit)."""
    try:
        _judge_outcomes(ctx, g, plan, outcomes, results)
    except BudgetSpent as e:
        results[g] = _not_established(GATES[g], str(e))


def _judge_outcomes(ctx, g: str, plan: list[dict], outcomes: dict, results: dict) -> None:
    """_judge_gate's body (BudgetSpent passes through)."""
    mod = GATES[g]
    mine = {j["id"]: outcomes[j["id"]] for j in plan}
    budget = next((o for o in mine.values() if o.status == "budget"), None)
    if budget is not None and not getattr(mod, "judge_outcomes", None):
        bad = next((o for o in mine.values() if o.status in ("crash", "timeout")), None)
        if bad is not None:  # a finding made before the cut (a hang often spends the budget itself)
            results[g] = _result(mod, "CRASH" if bad.status == "crash" else "TIMEOUT", bad.detail[:300],
                                 {"detail": bad.detail})
            return
        cut = getattr(mod, "judge_cut", None)  # a gate with background work may hold findings (G11)
        try:
            results[g] = cut(ctx, budget.detail) if cut else None
        except Exception as e:  # noqa: BLE001
            results[g] = _judging_error(mod, e)
        if results[g] is None:
            results[g] = _not_established(mod, budget.detail)
        return
    if getattr(mod, "judge_outcomes", None):  # the gate judges crashes per job itself (G05)
        try:
            results[g] = mod.judge_outcomes(ctx, mine)
        except Exception as e:  # noqa: BLE001
            results[g] = _judging_error(mod, e)
        return
    bad = next((o for o in mine.values() if o.status != "ok"), None)
    if bad is not None:
        verdict = "CRASH" if bad.status == "crash" else "TIMEOUT"
        results[g] = _result(mod, verdict, bad.detail[:300], {"detail": bad.detail})
        return
    errors = [o.result["error"] for o in mine.values() if "error" in o.result]
    if errors:
        results[g] = _result(mod, "ERROR", "kverify fault in the worker: " + errors[0].strip().splitlines()[-1],
                             {"traceback": errors[0]})
        return
    exc = next((o.result["exception"] for o in mine.values() if "exception" in o.result), None)
    if exc and g != "G01":
        results[g] = _result(mod, "UNSUPPORTED", f"candidate raised {exc}", {"exception": exc})
        return
    try:
        results[g] = mod.judge(ctx, {k: o.result for k, o in mine.items()})
    except Exception as e:  # noqa: BLE001 — kverify's own fault, reported as ERROR
        results[g] = _judging_error(mod, e)


def check(reference_source: str, reference_path: str, candidate_source: str, candidate_path: str, *,
          device: str | None = None, gates: list[str] | None = None, seed: int = 0, timeout: float = 120.0,
          tolerance: float = 1e-2, standard: bool = True, workdir=None, load_timeout: float = 900.0,
          budget: float | None = None) -> dict:
    """Run the gates and the standard test; returns the CheckReport as a dict (core JSON form).
    ``budget``: seconds for all of the candidate's calls (Sandbox.budget; None: no limit) and for
    starting the parent's oracle runs (Oracle.limit: one started before the deadline runs to its
    end); a gate whose calls it cut short, or whose oracle it refused, is ERROR (not established),
    never a finding against the candidate.

    Raises:
        LoadError: the reference or the candidate cannot be loaded (names the file and reason).
        UsageError: bad device or gate ids.
    """
    t0, cpu0 = time.monotonic(), cpu_seconds(children=False)
    device = resolve_device(device)
    gate_ids = gates or list(GATES)
    if not (tolerance > 0 and tolerance == tolerance):
        raise UsageError(f"tolerance must be a positive number, got {tolerance!r}")
    if not timeout > 0:
        raise UsageError(f"timeout must be positive, got {timeout!r}")
    if budget is not None and not budget > 0:
        raise UsageError(f"budget must be positive, got {budget!r}")
    try:  # the workers apply it; so does this process when it has no CUDA context yet
        if cuda_schedule.validate() and device == "cuda" and not torch.cuda.is_initialized():
            cuda_schedule.apply()
        GATES["G11"].cpu_cap("")  # KVERIFY_SANITIZER_CPUS, checked before any worker starts
    except ValueError as e:
        raise UsageError(str(e)) from None
    kw = dict(reference_source=reference_source, reference_path=reference_path,
              candidate_source=candidate_source, candidate_path=candidate_path,
              device=device, seed=seed, timeout=timeout, tolerance=tolerance, load_timeout=load_timeout,
              budget=budget)
    if workdir is not None:
        kw["workdir"] = workdir
    sandbox = Sandbox(**kw)
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kverify-check")
    prestart = _prestart()
    try:
        if prestart:
            # the workers import torch and load the candidate while the problem and the gates' jobs
            # are prepared here (a few seconds each, otherwise paid after the preparation)
            sandbox.prestart("gates")
            if standard:
                sandbox.prestart("standard")
            for g in gate_ids:  # workers of gates' background work (G11's sanitizer runs)
                early = getattr(GATES[g], "prestart", None)
                if early is not None:
                    early(sandbox, device)
            for tag in _split_workers(gate_ids):  # the other workers of gates' jobs (G05's, "gates-b")
                sandbox.prestart(tag)
        problem = Problem(reference_source, reference_path, tolerance)
        specs = problem.input_specs(seed)
        ctx = Context(problem, specs, device, seed, Oracle(problem, seed, device), timeout=timeout)
        try:  # the reference itself must run at its own shape, or nothing can be judged
            ctx.expected(ctx.job("run", "G01"))
        except Exception as e:  # noqa: BLE001
            if ctx.oracle.stage == "oracle":  # the reference ran; its fp64 copy did not
                raise LoadError(reference_path, f"the reference ran at its own shape but its float64 copy (the "
                                                f"oracle) raised {type(e).__name__}: {e}") from None
            raise LoadError(reference_path, f"the reference raised {type(e).__name__} at its own shape: {e}") from None
        ctx.sandbox = sandbox
        ctx.cpu0 = cpu0
        ctx.borrowed = borrowed_names(candidate_source, candidate_path, problem.module)
        ctx.oracle.limit(sandbox.deadline, budget)  # the budget bounds the parent's oracle runs too
        ctx.gate_shape = _gate_shape(ctx, sandbox, gate_ids)
        return _run(ctx, sandbox, pool, gate_ids, standard, tolerance, t0, reference_path, candidate_path,
                    split=prestart)
    finally:  # on any exit (a load error, Ctrl-C): stop what still runs in the background
        sandbox.cancel()
        pool.shutdown(wait=True)
        sandbox.cleanup()


#: The judging rules' revision, in every report (meta.rules): changed whenever a change can make
#: an earlier report of the same kernel differ (free dimensions found, shapes tried, gate
#: contracts), so that an audit report can say which journalled rows were judged by older rules
#: (kverify report; `kverify audit --redo ID,...` judges them again).
RULES = "2026-12-04.11"  # .11: the candidate is loaded with the reference file's names (Problem.namespace; the file loads under a fixed seed), as KernelBench's harness runs both files in one namespace, and the free dimensions it reads, never binds and the reference's model reads too follow each binding (Problem.share): 3 corpus rows raised NameError loaded alone (meta.borrowed; 3 more read such names only in their own get_inputs, which no check calls); .10: G05 takes the check's small-shape probe, where the candidate was silently wrong (not accurate by the G02 rule), as a failing variant, and past 1000x its bound searches no further, shrinking from it (g05_shapes.PROBE, SETTLED_RATIO): every row so far with that probe result failed G05 (56) or had G05 cut by the row budget (14), its search being around the own shape; .9: racecheck checking every kernel prints up to 1000 findings (g11_memory_safety.LIBRARY_PRINT_LIMIT; 20 before), so that library_findings can see them all, and .8's second run counts only findings in the candidate's own kernels (own_findings; added in stop 38: no .9 row took that run); .8: G11 runs racecheck once more on every kernel when its run filtered to the candidate's own kernels failed inside the tool with no finding (g11_memory_safety.RETRY_EVERY_KERNEL); .7: G11 does not count racecheck's findings that are all inside cuBLAS's Hopper GEMMs (nvjet_sm*) where it checked every kernel (g11_memory_safety.library_findings), and takes kernels of TileLang, the CuTe DSL, Warp, PyCUDA and cuda.core as not known for sure (kernel_scope None: no corpus row changes); .6: G09's rms of an oracle output in fp64 whatever its dtype (an fp16 output past 256 made it inf: nothing asked); .5: G09 asks a change only where the oracle's move is past the reference's own rounding error there; .4: G12 windows until the call returns with the writes pending, read on the stream; .3: G09 against the fp64 oracle's moves, and in the modes as built; .2: G11 racecheck without cuDNN

#: gates whose jobs run at the gates' small shape (Context.binding) when _gate_shape found one: the
#: costly ones - G09 (an oracle run per input and parameter, the candidate's outputs compared bit by bit), G10
#: (an fp64 oracle per scale) and G11 (each sanitizer tool is a worker run of its own, ~30 s on the
#: H200 even for a small row; one filtered racecheck at an own shape ran past 5 min); G05 varies
#: one dimension at a time around it (an fp64 oracle run per variant). Every other gate
#: sees the shape the harness accepted: a defect behind a size-dependent code path (a fast path for
#: large inputs that maps NaN to 0, say) shows only there. G01, G02 and the standard test run at
#: the own shape (DESIGN.md), G06 needs long sums ({0,1} patterns past
#: 2048), G04's nondeterminism (split-K atomics) shows with many blocks.
SMALL_SHAPE_GATES = ("G05", "G09", "G10", "G11")


def _gate_shape(ctx: Context, sandbox: Sandbox, gate_ids: list[str]) -> dict:
    """Choose the small shape SMALL_SHAPE_GATES run at (sets ctx.binding) and say why: {"binding":
    {...} | None, "why": str}. DESIGN.md: gates run at small, odd shapes by default. When the
    problem's inputs exceed gates.base.SMALL_INPUTS elements and the reference runs at a binding
    with at most half of them (Context.small_binding), the candidate is probed there once, in its
    own worker: only if it returns outputs that pass G02's accuracy rule there do those gates use
    that shape. A candidate made for the own shape alone (it raises, or computes something else,
    at other sizes) keeps them at the own shape, where it was accepted; its shape limits are
    G05's to judge, and one silently wrong there (the accuracy rule FAILs) has a failing variant of
    G05's already (ctx.cache[G05_PROBE]; g05_shapes.plan: past SETTLED_RATIO no further search).
    The probe counts towards the check's budget; a budget spent before it ends, or any failure of
    kverify's own, keeps the own shape too."""
    if not any(g in SMALL_SHAPE_GATES for g in gate_ids):
        return {"binding": None, "why": "no gate of the check runs at a small shape"}
    if spec_numel(ctx.specs) <= SMALL_INPUTS:
        return {"binding": None, "why": f"the inputs are small already ({spec_numel(ctx.specs)} elements)"}
    if not ctx.problem.dims:
        return {"binding": None, "why": "the problem has no free dimension"}
    try:
        b = ctx.small_binding()
        if b is None:
            return {"binding": None, "why": "the reference runs at no smaller shape"}
        job = ctx.job_at("run", "probe", b, ctx.specs_at(b))
        o = sandbox.run([job], tag="probe")[0]
        if o.status != "ok":
            return {"binding": None, "why": f"probe at {b}: {o.status}: {o.detail[:200]}"}
        if "error" in o.result or "exception" in o.result:
            what = o.result.get("exception") or o.result["error"].strip().splitlines()[-1]
            return {"binding": None, "why": f"probe at {b}: the candidate raised {what[:200]}"}
        oracle, ref = ctx.expected(job)
        run, bad = accuracy_run(job, o.result, oracle, ref)
        g02 = engine.judge("G02", {"runs": [run]}) if run is not None else None
        verdict = g02["verdict"] if g02 is not None else "FAIL"
        if bad or verdict == "FAIL":  # silently wrong at a shape the reference runs: G05's finding (G05_PROBE)
            ctx.cache[G05_PROBE] = {"binding": b, "elements": spec_numel(ctx.specs_at(b)), "verdict": "FAIL",
                                    "reason": f"the check's probe at the gates' small shape: {bad or g02['summary']}"[:300],
                                    "bound_ratio": 1e300 if bad or g02 is None else g02["bound_ratio"]}
        if bad or verdict != "PASS":
            return {"binding": None, "why": f"probe at {b}: not accurate there ({bad or 'G02 rule: ' + verdict})"}
    except BudgetSpent as e:
        return {"binding": None, "why": f"probe not finished: {e}"}
    except Exception as e:  # noqa: BLE001 — kverify's own fault: the own shape is always safe
        return {"binding": None, "why": f"probe failed in kverify: {type(e).__name__}: {e}"[:300]}
    finally:
        ctx.release(["probe"])
    ctx.binding = b
    return {"binding": b, "why": f"the candidate is accurate there (G02's rule); inputs "
                                 f"{spec_numel(ctx.specs_at(b))} elements instead of {spec_numel(ctx.specs)}"}


MAIN_WORKER = "gates"


def worker_of(g: str) -> str:
    """The worker that runs gate ``g``'s jobs when check() prestarts workers: the gate module's
    WORKER, else the main one ("gates"). Without prestarting every gate runs in the main worker."""
    return getattr(GATES[g], "WORKER", MAIN_WORKER)


def _split_workers(gate_ids: list[str]) -> dict[str, list[str]]:
    """{worker tag: its gates} for the workers other than the main one, in gate order."""
    groups: dict[str, list[str]] = {}
    for g in gate_ids:
        if worker_of(g) != MAIN_WORKER:
            groups.setdefault(worker_of(g), []).append(g)
    return groups


def _prestart() -> bool:
    """Start the workers (the gates', the standard test's, G11's sanitized ones, and those of the
    gates with a WORKER of their own: G05's, G09 and G10's "gates-b") before the problem is
    prepared, and plan those gates in the background (check, _run's split)? Not in
    KVERIFY_SERIAL_CHECK=1 runs; else KVERIFY_PRESTART=1/0 when set; else only with 4 or more CPUs
    (on 2 cores the workers' imports slow the preparation they would overlap: measured 2.9 s ->
    3.4 s for the matmul example)."""
    if os.environ.get("KVERIFY_SERIAL_CHECK") == "1":
        return False
    forced = os.environ.get("KVERIFY_PRESTART")
    if forced in ("0", "1"):
        return forced == "1"
    return (os.cpu_count() or 1) >= 4


def _not_run(tolerance: float) -> dict:
    """The standard test's record before (or without) a run."""
    return {"verdict": "N/A", "summary": "not run", "tolerance": tolerance, "trials": STANDARD_TRIALS}


def _standard(sandbox: Sandbox, tolerance: float) -> dict:
    """The standard test in its own worker: {"verdict", "summary", "tolerance", "trials", "seconds"}."""
    t = time.monotonic()
    std = _not_run(tolerance)
    job = {"kind": "standard", "id": "standard", "tolerance": tolerance, "trials": STANDARD_TRIALS}
    o = sandbox.run([job], tag="standard")[0]
    if o.status == "ok" and "error" not in o.result:
        std.update(verdict=o.result["verdict"], summary=o.result["summary"])
    elif o.status == "ok":
        std.update(verdict="ERROR", summary=o.result["error"].strip().splitlines()[-1])
    elif o.status == "budget":
        std.update(verdict="ERROR", summary="not run to the end: " + o.detail)
    else:
        std.update(verdict="CRASH" if o.status == "crash" else "TIMEOUT", summary=o.detail[:300])
    std["seconds"] = round(time.monotonic() - t, 3)
    return std


class _Judging:
    """Judges each gate as soon as the outcomes of all its jobs are in, then drops their outputs
    and the gate's expected outputs: the check's process holds the outputs of the gates not yet
    judged, not of every job of the check (stop 27, H200: four of an audit's check processes held
    up to 117 GiB of the host's 126 between them, and the kernel killed some). ``arrived`` (Sandbox.run's on_outcome, in the thread that runs a worker) only records
    the outcome and queues it; one judging thread takes the queue in order, beside the
    candidate's runs, so a slow judgement (G11 waiting for its sanitizer runs, G05 shrinking)
    never delays the reading of the workers' results. A gate module with ``condense(ctx, job,
    outcome)`` gets each of its jobs' outcomes there first and may replace the outputs by a record
    of its own (G05 judges each shape variant so). A gate module with JUDGE_AFTER_ALL_RUNS = True
    (G12: it reads what every worker reported at its end) is judged by ``rest`` after every worker
    has ended, as are gates without jobs and gates whose background work (G11's sanitizer runs)
    was still going when their last job came in. With KVERIFY_SERIAL_CHECK=1 (no concurrency) the
    queue is taken only at ``finish``, after the runs, and every gate is judged in gate order
    after it, as before stop 27.

    ``results``: gate id -> result dict, filled here; ``gate_seconds``: gate id -> seconds of its
    calls in the worker plus its judging here (shrinking, waiting on background work)."""

    def __init__(self, ctx: Context, results: dict, gate_seconds: dict, background: bool = True):
        self.ctx, self.results, self.gate_seconds = ctx, results, gate_seconds
        self.plans: dict[str, list[dict]] = {}
        self.gate_of: dict[str, str] = {}
        self.outcomes: dict[str, object] = {}
        self.judged: set[str] = set()
        self.lock = threading.Lock()
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.error: BaseException | None = None
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, name="kverify-judge", daemon=True) if background else None
        if self.thread is not None:
            self.thread.start()

    def expect(self, plans: dict[str, list[dict]]) -> None:
        """Register gates' jobs (before they run)."""
        with self.lock:
            for g, plan in plans.items():
                self.plans[g] = plan
                for j in plan:
                    self.gate_of[j["id"]] = g

    def arrived(self, job_id: str, outcome) -> None:
        """Job ``job_id``'s outcome is in: record it and queue it (and its gate, if it was the
        gate's last job) for the judging thread. Returns at once."""
        with self.lock:
            self.outcomes[job_id] = outcome
            g = self.gate_of.get(job_id)
            last = g is not None and all(j["id"] in self.outcomes for j in self.plans[g])
        if g is not None:
            self.queue.put((g, job_id, last))

    def _take(self, item, judge: bool = True) -> None:
        """Condense the job's outcome (if its gate does that) and, ``judge``, judge its gate if
        this was its last job -- unless the gate is judged after all runs or its background work
        (G11's sanitizer runs) is still going: waiting for it here would hold every later outcome
        (G05's variants) unjudged, so ``rest`` judges such a gate."""
        g, job_id, last = item
        condense = getattr(GATES[g], "condense", None)
        if condense is not None:  # the gate keeps a record of the job instead of its outputs (G05)
            try:
                condense(self.ctx, next(j for j in self.plans[g] if j["id"] == job_id), self.outcomes[job_id])
            except Exception:  # noqa: BLE001 — kverify's own: the gate's judging meets it again and reports it
                pass
        if not (judge and last) or getattr(GATES[g], "JUDGE_AFTER_ALL_RUNS", False):
            return
        background = self.ctx.background.get(g)
        if background is not None and not background.done():
            return
        self.judge(g)

    def _loop(self) -> None:
        while True:
            item = self.queue.get()
            if item is None or self.stopped:
                return
            try:
                self._take(item)
            except BaseException as e:  # noqa: BLE001 — kverify's own; finish() raises it in check()'s thread
                self.error = e
                return

    def finish(self) -> None:
        """Every worker has ended: wait until the judging thread has taken everything queued
        (KVERIFY_SERIAL_CHECK=1: condense it here; ``rest`` then judges every gate in gate order).
        Raises what the judging raised."""
        if self.thread is None:
            while not self.queue.empty():
                item = self.queue.get()
                if item is not None:
                    self._take(item, judge=False)
            return
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """The check is ending early (a load error, Ctrl-C): the judging thread takes nothing more."""
        self.stopped = True
        self.queue.put(None)

    def rest(self, gate_ids: list[str]) -> None:
        """After finish(): judge, in gate order, the planned gates not judged yet (those judged
        after all runs, those without jobs)."""
        for g in gate_ids:
            if g in self.plans:
                self.judge(g)

    def judge(self, g: str) -> None:
        """Judge gate ``g`` once (its jobs' outcomes are all in, or it has none), record its
        seconds, release its expected outputs and drop its jobs' results."""
        with self.lock:
            if g in self.judged:
                return
            self.judged.add(g)
        plan = self.plans[g]
        t_judge = time.monotonic()
        try:
            _judge_gate(self.ctx, g, plan, self.outcomes, self.results)
        finally:
            self.gate_seconds[g] = round(sum(self.outcomes[j["id"]].seconds for j in plan)
                                         + time.monotonic() - t_judge, 3)
            self.ctx.release([j["id"] for j in plan])  # its expected outputs are not needed any more
            for j in plan:  # nor its outputs: judged, only the seconds stay
                self.outcomes[j["id"]].result = None


def _plan(ctx: Context, g: str, plans: dict, results: dict) -> None:
    """plans[g] = gate g's jobs, or results[g] = N/A (does not apply) / ERROR (planning raised)."""
    mod = GATES[g]
    try:
        reason = mod.applies(ctx)
        if reason:
            results[g] = _result(mod, "N/A", reason)
        else:
            plans[g] = mod.plan(ctx)
    except BudgetSpent as e:  # the check's budget ran out before planning was done (an oracle run)
        results[g] = _not_established(mod, str(e))
    except Exception as e:  # noqa: BLE001 — kverify's own fault (or out of memory), reported as ERROR
        results[g] = _judging_error(mod, e, "planning")


def _run(ctx: Context, sandbox: Sandbox, pool: ThreadPoolExecutor, gate_ids: list[str], standard: bool,
         tolerance: float, t0: float, reference_path: str, candidate_path: str, split: bool = False) -> dict:
    plans: dict[str, list[dict]] = {}
    results: dict[str, dict] = {}
    # gates with a WORKER of their own (G05, whose planning runs the reference at every variant;
    # G09 and G10): split, planned in the background and run in that worker; else planned and run
    # in the main worker after the other gates' jobs, so that their planning cannot spend the
    # check's budget before any other gate ran
    groups = _split_workers(gate_ids)
    own, later = (groups, {}) if split else ({}, groups)
    for g in gate_ids:
        if worker_of(g) not in groups:
            _plan(ctx, g, plans, results)
    serial = os.environ.get("KVERIFY_SERIAL_CHECK") == "1"
    std_future = pool.submit(_standard, sandbox, tolerance) if standard and not serial else None
    bg_seconds: dict[str, float] = {}  # seconds each gate's background work ran

    def timed(g: str, fn):
        def run():
            t = time.monotonic()
            try:
                return fn()
            finally:
                bg_seconds[g] = round(time.monotonic() - t, 3)
        return run

    for g in ([] if serial else plans):  # background work of gates (built here, run beside the main worker)
        start = getattr(GATES[g], "start", None)
        if start is not None:
            try:
                ctx.background[g] = pool.submit(timed(g, start(ctx)))
            except (Exception, BudgetSpent):  # noqa: BLE001 — the gate's judge runs start() again and reports it
                pass

    gate_seconds = {g: 0.0 for g in gate_ids}
    judging = _Judging(ctx, results, gate_seconds, background=not serial)
    try:  # on any early end (a load error, Ctrl-C) the judging thread takes nothing more
        def plan_and_run(tag: str, gs: list[str]) -> dict:
            # after the background starts above, which build their jobs in this thread (they may run the oracle)
            own_plans: dict[str, list[dict]] = {}
            for g in gs:
                _plan(ctx, g, own_plans, results)
            own_jobs = [j for g in gs for j in own_plans.get(g, [])]
            judging.expect(own_plans)
            if own_jobs:
                sandbox.run(own_jobs, tag=tag, on_outcome=lambda k, o: judging.arrived(own_jobs[k]["id"], o))
            return own_plans

        own_futures = [pool.submit(plan_and_run, tag, gs) for tag, gs in own.items()]
        jobs = [j for g in plans for j in plans[g]]
        judging.expect(plans)
        t_setup = time.monotonic()
        if jobs:  # each gate judged as soon as its last job is in (_Judging), while the worker goes on
            sandbox.run(jobs, on_outcome=lambda k, o: judging.arrived(jobs[k]["id"], o))
        done = [f.result() for f in own_futures]  # a load error there propagates like the main worker's
        done += [plan_and_run(MAIN_WORKER, gs) for gs in later.values()]  # in the main worker, after its jobs
        for own_plans in done:
            plans.update(own_plans)
        if "G01" not in gate_ids:  # the load's run of the reference at its own shape: planning is over
            ctx.release(["G01"])
        t_run = time.monotonic()
        judging.finish()  # what the judging thread still has queued
        judging.rest(gate_ids)  # G12 (after all runs) and gates without jobs, in gate order

        std = _not_run(tolerance)
        if std_future is not None:
            std = std_future.result()
        elif standard:
            std = _standard(sandbox, tolerance)
        std_seconds = std.pop("seconds", 0.0)
        report = {"reference": reference_path, "candidate": candidate_path, "device": ctx.device, "seed": ctx.seed,
                  "gates": [results[g] for g in gate_ids], "standard": std,
                  "meta": {"free_dimensions": ctx.problem.dims, "torch": torch.__version__, "rules": RULES,
                           "judged_on": judged_on(ctx.device),
                           "gate_shape": ctx.gate_shape or {"binding": None, "why": ""},
                           # the reference's names the candidate reads (KernelBench's one namespace)
                           "borrowed": ctx.borrowed,
                           "host_peak_mib": host_peak_mib(), "gpu_peak_mib": gpu_peak_mib(ctx.device),
                           # runs of the oracle or the reference (G04, G09) run again after running out of
                           # GPU memory (Oracle.retrying); the key is "oracle" for all of them
                           "memory_waits": {"oracle": ctx.oracle.memory_waits},
                           # this process's GPU memory cap on a GPU that checks share (kverify.audit
                           # check_cap_mib; only where set) and whether it ran out over it
                           **({"gpu_cap_mib": memory_wait.cap_mib(), "over_gpu_cap": memory_wait.capped_out()}
                              if memory_wait.cap_mib() is not None else {}),
                           "inputs": [s.to_json() for s in ctx.specs],
                           "seconds": {"setup": round(t_setup - t0, 3),
                                       "candidate_runs": round(t_run - t0, 3), "total": round(time.monotonic() - t0, 3),
                                       "first_load": sandbox.load_seconds[0] if sandbox.load_seconds else 0.0,
                                       "loads": sandbox.load_seconds, "gates": gate_seconds,
                                       "standard": std_seconds, "background": bg_seconds,
                                       "cpu": {**sandbox.cpu_seconds, "kverify": round(cpu_seconds(children=False) - ctx.cpu0, 2)}}}}
        return json.loads(_core.report_json(json.dumps(report)))
    except BaseException:
        judging.stop()
        raise


def gpu_peak_mib(device: str) -> int:
    """Most GPU memory PyTorch's caching allocator reserved in this process so far on ``device``,
    MiB (torch.cuda.max_memory_reserved): in an audit each check has a process of its own, so its
    report's meta.gpu_peak_mib is what kverify's own side of the check (fp64 oracle, reference
    runs, expected outputs; not the candidate's workers) held at most on the GPU. Stop 28 on the
    H200: six such processes held 117 GiB together, against 8-20 GiB estimated per check
    (kverify.audit.check_need_mib). 0 on the CPU or where CUDA was never used here."""
    if not str(device).startswith("cuda") or not torch.cuda.is_initialized():
        return 0
    return int(torch.cuda.max_memory_reserved(device) // 2**20)


def host_peak_mib() -> int:
    """Peak resident memory of this process so far, MiB (getrusage ru_maxrss, KiB on Linux): in an
    audit each check has a process of its own, so its report's meta.host_peak_mib is what that
    check held at most (the workers not counted) - the figure kverify.audit's host-memory guard
    (HOST_CHECK_GIB, HOST_OUTPUT_FACTOR, HOST_INPUT_FACTOR, ...) is calibrated against. In a process that runs several
    checks (``kverify controls``, ``kverify demo``) it is that process's peak so far, not the
    check's. 0 where getrusage is missing."""
    try:
        import resource
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
    except (ImportError, OSError):
        return 0


def judged_on(device: str) -> str:
    """The machine a check ran on, for its report (meta.judged_on): the GPU's name for CUDA runs
    (torch.cuda.get_device_name of the current device, e.g. "NVIDIA H200"), "cpu" otherwise."""
    if device == "cuda":
        try:
            return torch.cuda.get_device_name()
        except Exception:  # noqa: BLE001 — a name is a label, never a reason to lose a report
            return "cuda"
    return "cpu"


def exit_code(report: dict) -> int:
    """0 when every gate passed (or was N/A / UNSUPPORTED), 1 on any FAIL, CRASH, TIMEOUT or ERROR."""
    return 1 if any(g["verdict"] in ("FAIL", "CRASH", "TIMEOUT", "ERROR") for g in report["gates"]) else 0
