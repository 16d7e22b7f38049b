"""Waiting for GPU memory (kverify._internal.memory_wait): in an audit's check that runs out of GPU
memory beside other checks, a run of the fp64 oracle or the reference in the check's own process
(Oracle.run, run_fp64, G04's and G09's own runs: Oracle.retrying) pauses and runs again (the same
models and inputs; not where the failed try wrote into an input it shares), at most RERUNS times,
within the process's pausing time and only where the check's deadline leaves room; outside a GPU
audit (no KVERIFY_OOM_WAIT_S) nothing waits. CPU-only: the out-of-memory errors are raised by hand."""
import json
import time

import pytest
import torch

from kverify._internal import memory_wait
from kverify.examples import ROOT

RELU = ROOT / "relu"
OOM = "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 139.81 GiB of which 1.00 MiB is free."


@pytest.fixture
def fresh(monkeypatch):
    """memory_wait with nothing paused yet and short pauses."""
    monkeypatch.setattr(memory_wait, "_spent", [0.0])
    monkeypatch.setattr(memory_wait, "_beyond", [0])  # errors past the whole GPU that earlier tests raised
    monkeypatch.setattr(memory_wait, "_mended", [0])
    # no allocator watch unless a test fakes one (on a GPU host the real hook would attach)
    monkeypatch.setattr(memory_wait, "_watch", lambda: False)
    monkeypatch.setattr(memory_wait, "STEP_S", 0.05)
    return memory_wait


def _flaky(n_fail: int, exc=lambda: torch.OutOfMemoryError(OOM)):
    calls = []

    def fn():
        calls.append(time.monotonic())
        if len(calls) <= n_fail:
            raise exc()
        return "ran"
    return fn, calls


def test_an_audit_process_pauses_and_runs_again(fresh, monkeypatch):
    monkeypatch.setenv(memory_wait.ENV, "5")
    fn, calls = _flaky(2)
    counted = []
    assert fresh.retry(fn, on_oom=lambda: counted.append(1)) == "ran" and len(calls) == 3 and len(counted) == 2
    assert 2 * 0.5 * 0.05 - 1e-9 <= 5 - fresh.left() <= 2 * 1.5 * 0.05 + 1e-9  # two pauses, from the process's time
    assert calls[1] - calls[0] >= 0.5 * 0.05 - 1e-3


def test_a_try_that_changed_what_it_shares_is_not_run_again(fresh, monkeypatch):
    monkeypatch.setenv(memory_wait.ENV, "5")
    fn, calls = _flaky(1)
    with pytest.raises(torch.OutOfMemoryError):
        fresh.retry(fn, may_retry=lambda: False)
    assert len(calls) == 1


def test_outside_an_audit_the_error_stands_at_once(fresh, monkeypatch):
    monkeypatch.delenv(memory_wait.ENV, raising=False)
    fn, calls = _flaky(1)
    with pytest.raises(torch.OutOfMemoryError):
        fresh.retry(fn)
    assert len(calls) == 1


def test_at_most_reruns_tries_after_the_first(fresh, monkeypatch):
    monkeypatch.setenv(memory_wait.ENV, "60")
    fn, calls = _flaky(10 ** 6)
    with pytest.raises(torch.OutOfMemoryError):
        fresh.retry(fn)
    assert len(calls) == 1 + fresh.RERUNS


def test_other_errors_and_hopeless_sizes_are_not_waited_for(fresh, monkeypatch):
    monkeypatch.setenv(memory_wait.ENV, "5")
    fn, calls = _flaky(1, lambda: ValueError("bad shape"))
    with pytest.raises(ValueError):
        fresh.retry(fn)
    assert len(calls) == 1
    # a size past the whole GPU: no wait can help (a candidate that computes a huge size)
    assert fresh.hopeless("CUDA out of memory. Tried to allocate 900.00 GiB", total_bytes=140 << 30)
    assert not fresh.hopeless(OOM, total_bytes=140 << 30)  # the first size is the one asked for (2 MiB)
    assert not fresh.hopeless("CUDA error: out of memory", total_bytes=140 << 30)  # no size said: it may fit later
    assert not fresh.hopeless("tried to allocate . b", total_bytes=1)  # no number: not read as one
    assert fresh.hopeless("Tried to allocate 2000 bytes", total_bytes=1000)
    monkeypatch.setattr(fresh, "_device_total", lambda: 140 << 30)
    fn, calls = _flaky(1, lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 900.00 GiB"))
    with pytest.raises(torch.OutOfMemoryError):
        fresh.retry(fn)
    assert len(calls) == 1
    assert fresh.is_oom(RuntimeError("CUDA error: cudaErrorMemoryAllocation")) and not fresh.is_oom(RuntimeError("x"))
    assert fresh.is_oom(RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)"))
    # the host's allocator is not the GPU's
    assert not fresh.gpu_oom("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes")


class _Fixed:
    """A jitter stream that always draws ``u`` (times STEP_S: the pause)."""

    def __init__(self, u):
        self.u = u

    def uniform(self, a, b):
        assert a <= self.u <= b
        return self.u


@pytest.mark.parametrize("u, tries, left_after", [(1.5, 2, 0.0), (0.5, 3, 0.0), (0.7, 2, 0.005), (None, None, None)])
def test_the_process_s_pausing_time_is_shared_by_all_its_retries(fresh, monkeypatch, u, tries, left_after):
    """0.04 s of pausing, pauses of 0.025-0.075 s: the first takes all of it (u = 1.5), or leaves
    0.015 s, enough for one more (u = 0.5), or 0.005 s, too short for any (< STEP_S / 4: u = 0.7);
    then no later retry of the same process pauses. u = None: the module's own random jitter, for
    which only the bounds hold (CI, stop 29: ``left() == 0.0`` failed with 0.0009 s left)."""
    monkeypatch.setenv(memory_wait.ENV, "0.04")
    if u is not None:
        monkeypatch.setattr(fresh, "_jitter", _Fixed(u))
    fn, calls = _flaky(10 ** 6)
    with pytest.raises(torch.OutOfMemoryError):
        fresh.retry(fn)
    if u is None:
        assert fresh.left() < fresh.STEP_S / 4 and 2 <= len(calls) <= 3
    else:
        assert len(calls) == tries and fresh.left() == pytest.approx(left_after, abs=1e-9)
    fn2, calls2 = _flaky(1)
    with pytest.raises(torch.OutOfMemoryError):  # nothing left for a later part of the same process
        fresh.retry(fn2)
    assert len(calls2) == 1


def test_no_retry_where_the_deadline_would_not_hold_it(fresh, monkeypatch):
    """A retry that could only end in a spent budget would turn the out-of-memory error (which
    defers the row to run alone) into "not established": the error stands instead."""
    monkeypatch.setenv(memory_wait.ENV, "60")
    for left_s in (-1.0, 0.05, 0.05 + 0.05 / 8):  # past it; less than STEP_S (the margin); no room for a pause
        fn, calls = _flaky(10 ** 6)
        with pytest.raises(torch.OutOfMemoryError) as raised:
            fresh.retry(fn, deadline=time.monotonic() + left_s)
        assert len(calls) == 1, left_s
        assert raised.traceback[-1].name == "fn"  # the error as the try raised it, traceback and all
    fn, calls = _flaky(1)
    assert fresh.retry(fn, deadline=time.monotonic() + 60) == "ran" and len(calls) == 2


def _oracle(monkeypatch, forward):
    """An Oracle of the relu example whose fp64 model's forward is ``forward``."""
    from kverify.problem import Oracle, Problem
    p = Problem((RELU / "reference.py").read_text(), str(RELU / "reference.py"), 1e-2)
    o = Oracle(p, 0, "cpu")
    monkeypatch.setattr(o.models(None)[1], "forward", forward)
    return o, p


def test_the_oracle_runs_again_with_the_same_models(fresh, monkeypatch):
    """Oracle.run (G05's planning, where the stop-28 audit's rows ran out of memory) and
    run_fp64 (G03's probes) run again after a pause; the retries are counted."""
    from kverify.problem import synthesize
    monkeypatch.setenv(memory_wait.ENV, "5")
    n = [0]

    def forward(x):
        n[0] += 1
        if n[0] % 2 == 1:
            raise torch.OutOfMemoryError(OOM)
        return torch.relu(x)
    o, p = _oracle(monkeypatch, forward)
    x = synthesize(p.input_specs(0), 1, "cpu")
    ora = o.models(None)[1]
    high, low = o.run(x)
    assert n[0] == 2 and o.memory_waits == 1 and o.stage is None and o.models(None)[1] is ora
    assert torch.equal(high[0], torch.relu(x[0].double())) and torch.equal(low[0], torch.relu(x[0]))
    out = o.run_fp64(x)
    assert n[0] == 4 and o.memory_waits == 2 and torch.equal(out[0], high[0])
    from kverify.errors import BudgetSpent
    o.limit(time.monotonic() - 1.0, 1.0)
    with pytest.raises(BudgetSpent):  # past the check's deadline nothing runs, a retry neither
        o.run(x)
    assert o.memory_waits == 2


def test_an_oracle_try_that_wrote_into_a_shared_input_is_not_run_again(fresh, monkeypatch):
    """An fp64 input reaches the fp64 oracle as it is (upcast detaches it): a try that wrote
    into it before running out of memory would leave the next try another input, so the error
    stands; one that did not write is retried (nothing is copied for it)."""
    monkeypatch.setenv(memory_wait.ENV, "5")
    n = [0]

    def writes(t):
        n[0] += 1
        t.add_(100.0)
        raise torch.OutOfMemoryError(OOM)
    o, _ = _oracle(monkeypatch, writes)
    x = torch.linspace(-2, 2, 16, dtype=torch.float64)
    with pytest.raises(torch.OutOfMemoryError):
        o.run_fp64([x])
    assert n[0] == 1 and o.memory_waits == 0
    x32 = torch.linspace(-2, 2, 16)  # upcast makes the oracle a copy of an fp32 input: its write is its own
    with pytest.raises(torch.OutOfMemoryError):
        o.run_fp64([x32])
    assert n[0] == 2 + fresh.RERUNS and o.memory_waits == fresh.RERUNS
    with pytest.raises(torch.OutOfMemoryError):  # Oracle.run's fp64 copy sees an fp64 input as it is too
        o.run([torch.linspace(-2, 2, 16, dtype=torch.float64)])
    assert n[0] == 3 + fresh.RERUNS and o.memory_waits == fresh.RERUNS


def test_only_a_gpu_audit_s_checks_wait(tmp_path, monkeypatch):
    """kverify.audit._task gives its check processes pausing time on a GPU audit, not on a CPU
    audit and not for a row re-run alone (nothing would free memory for it)."""
    import os

    import kverify.audit as audit
    for var in ("KVERIFY_WORKDIR_ROOT", "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "KVERIFY_SERIAL_CHECK",
                audit.cuda_schedule.ENV, "KVERIFY_EMPTY_CACHE", memory_wait.ENV, "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "KVERIFY_SANITIZER_CPUS", audit.STACK_ENV):
        # _task sets them in this process. monkeypatch restores what it saw first: set each (so its
        # value now, or its absence, is what comes back after the test), then remove the ones that
        # were unset (a delenv alone of an unset variable records nothing, and what _task sets
        # would outlive the test)
        value = os.environ.get(var)
        monkeypatch.setenv(var, value if value is not None else "unset")
        if value is None or var == audit.STACK_ENV:
            monkeypatch.delenv(var)
    seen = {}

    def fake_check(*args):
        seen["wait"] = os.environ.get(memory_wait.ENV)
        return None, "CLEAN", "", 0.0
    monkeypatch.setattr(audit, "_timed_check", fake_check)
    monkeypatch.setattr(audit.cuda_schedule, "apply", lambda: None)
    monkeypatch.setattr("kverify._internal.lifeline.exit_with_parent", lambda: None)
    for device, serial, want in (("cuda", False, str(audit.OOM_WAIT_S)), ("cuda", True, None), ("cpu", False, None)):
        monkeypatch.delenv(memory_wait.ENV, raising=False)
        audit._task("check", "c.jsonl", {"id": "r"}, {"device": device}, str(tmp_path / "out.json"), None, serial)
        assert seen.pop("wait") == want, (device, serial)


def test_the_audit_log_line_counts_the_memory_waits():
    from kverify.audit import host_peak_note
    assert host_peak_note({"meta": {"memory_waits": {"oracle": 2}}}) == ", 2 memory wait(s)"
    assert host_peak_note({"meta": {"memory_waits": {"oracle": 0}}}) == ""


def test_an_inference_tensor_input_is_not_run_again(fresh, monkeypatch):
    """An inference tensor keeps no version counter, so whether the failed try wrote into it
    cannot be told: the error stands. (Before, every run()/run_fp64() with an fp64, integer or
    bool inference tensor among its inputs raised a RuntimeError reading that counter, before its
    first try; kverify itself makes no inference tensors.)"""
    monkeypatch.setenv(memory_wait.ENV, "5")
    n = [0]

    def forward(t):
        n[0] += 1
        raise torch.OutOfMemoryError(OOM)
    o, _ = _oracle(monkeypatch, forward)
    with torch.inference_mode():
        x = torch.linspace(-2, 2, 16, dtype=torch.float64)
    with pytest.raises(torch.OutOfMemoryError):
        o.run_fp64([x])
    assert n[0] == 1 and o.memory_waits == 0


def test_g09_s_reference_run_waits_and_never_turns_running_out_into_a_missing_measure(fresh, monkeypatch):
    """G09 measures the reference's own rounding with its run at the problem's dtype; where that
    run raises, the measure is missing and the oracle's move alone decides (a stricter judge).
    Running out of GPU memory is the audit's neighbours, not the reference: it runs again through
    Oracle.retrying, and where it still runs out the error goes up (the row is run again alone),
    never a missing measure. Any other error still gives None."""
    from kverify.gates.g09_sensitivity import _reference_run
    monkeypatch.setenv(memory_wait.ENV, "5")
    o, _ = _oracle(monkeypatch, torch.relu)
    x = torch.linspace(-2, 2, 16)

    def model(fails: int, error=lambda: torch.OutOfMemoryError(OOM)):
        """A builder of a reference that raises ``error()`` on its first ``fails`` calls."""
        calls = []

        def forward(t):
            calls.append(1)
            if len(calls) <= fails:
                raise error()
            return torch.relu(t)
        return lambda: forward
    ran = _reference_run(model(1), [x], o.retrying)
    assert torch.equal(ran[0], torch.relu(x)) and o.memory_waits == 1
    with pytest.raises(torch.OutOfMemoryError):
        _reference_run(model(10 ** 6), [x], o.retrying)
    assert o.memory_waits == 1 + fresh.RERUNS
    assert _reference_run(model(1, lambda: ValueError("bad")), [x], o.retrying) is None
    monkeypatch.setattr(fresh, "_device_total", lambda: 140 << 30)  # a size past the GPU: the reference's own
    huge = model(1, lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 900.00 GiB"))
    assert _reference_run(huge, [x], o.retrying) is None and o.memory_waits == 1 + fresh.RERUNS


def test_g04_s_reference_runs_wait(fresh, monkeypatch):
    """G04 asks whether the reference itself is deterministic (three runs in the check's own
    process); one that runs out of GPU memory runs again and the answer stands."""
    from kverify.gates.base import Context
    from kverify.gates.g04_determinism import _reference_deterministic
    from kverify.problem import Oracle, Problem
    monkeypatch.setenv(memory_wait.ENV, "5")
    p = Problem((RELU / "reference.py").read_text(), str(RELU / "reference.py"), 1e-2)
    o = Oracle(p, 0, "cpu")
    ref = o.models(None)[0]
    n = [0]
    plain = ref.forward

    def forward(x):
        n[0] += 1
        if n[0] == 2:
            raise torch.OutOfMemoryError(OOM)
        return plain(x)
    monkeypatch.setattr(ref, "forward", forward)
    ctx = Context(p, p.input_specs(0), "cpu", 0, o)
    assert _reference_deterministic(ctx, ctx.job("determinism", "G04", runs=3)) and n[0] == 4 and o.memory_waits == 1


def _always_oom(self, x):
    raise torch.OutOfMemoryError(OOM)


BN_REF = '''
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(8)

    def forward(self, x):
        return self.bn(self.lin(x))


def get_inputs():
    return [torch.randn(16, 8)]


def get_init_inputs():
    return []
'''


def _bn_check():
    """(the problem, its oracle, a check's context) of BN_REF on the CPU."""
    from kverify.gates.base import Context
    from kverify.problem import Oracle, Problem
    p = Problem(BN_REF, "bn_ref.py", 1e-2)
    o = Oracle(p, 0, "cpu")
    return p, o, Context(p, p.input_specs(0), "cpu", 0, o)


def _g09_runs(monkeypatch, every: int | None):
    """G09's oracle and reference runs (_oracle_runs, with the mode runs: BatchNorm) of BN_REF, every
    ``every``-th forward of any of its models raising a GPU out-of-memory error (None: none):
    (the runs, what was left out, the oracle, the cached models' weights after)."""
    from kverify.gates import g09_sensitivity as g09
    from kverify.problem import STATE_LOCK
    p, o, ctx = _bn_check()
    if every is not None:
        plain, n = p.module.Model.forward, [0]

        def forward(self, x):
            n[0] += 1
            if n[0] % every == 0:
                raise torch.OutOfMemoryError(OOM)
            return plain(self, x)
        monkeypatch.setattr(p.module.Model, "forward", forward)
    left_out = []
    with STATE_LOCK:
        runs = [(name, [t.clone() for t in o_], None if r is None else [t.clone() for t in r])
                for name, (o_, r) in g09._oracle_runs(ctx, g09.plan(ctx)[0], left_out)]
    weights = [t.clone() for m in o.models(None) for t in m.state_dict().values()]
    return runs, left_out, o, weights


def test_g09_s_runs_wait_with_the_weights_perturbed_and_the_mode_runs_built_anew(fresh, monkeypatch):
    """Every other forward of the reference, its fp64 copy and the models built for the mode runs
    runs out of GPU memory: G09's runs end with the same bits as without, every one waited for,
    the mode run not left out, the cached weights as they were (the retries of a perturbed run
    happen inside its try/finally)."""
    from kverify.problem import MODE_RUN
    monkeypatch.setenv(memory_wait.ENV, "60")
    clean, left_clean, o_clean, w_clean = _g09_runs(monkeypatch, None)
    assert o_clean.memory_waits == 0 and not left_clean and MODE_RUN in [name for name, *_ in clean]
    flaky, left, o, w = _g09_runs(monkeypatch, 2)
    assert [n for n, *_ in flaky] == [n for n, *_ in clean] and left == left_clean
    for (name, oa, ra), (_, ob, rb) in zip(clean, flaky):
        assert all(torch.equal(a, b) for a, b in zip(oa, ob)), name
        assert (ra is None) == (rb is None) and (ra is None or all(torch.equal(a, b) for a, b in zip(ra, rb))), name
    assert o.memory_waits >= len(clean) and all(torch.equal(a, b) for a, b in zip(w_clean, w))


def test_g09_s_lasting_out_of_memory_goes_up_with_the_weights_restored(fresh, monkeypatch):
    """Where waiting does not mend it (every forward runs out), the error goes up (the gate is
    ERROR, the row runs again alone) and the cached models' weights are as built."""
    monkeypatch.setenv(memory_wait.ENV, "60")
    _, _, _, w_clean = _g09_runs(monkeypatch, None)
    from kverify.gates import g09_sensitivity as g09
    from kverify.problem import STATE_LOCK
    p, o, ctx = _bn_check()
    job = g09.plan(ctx)[0]
    runs = g09._oracle_runs(ctx, job, [])
    with STATE_LOCK:
        next(runs)  # "base", before any weight changes
        next(runs)  # "input 0"
        monkeypatch.setattr(p.module.Model, "forward", _always_oom)
        with pytest.raises(torch.OutOfMemoryError):
            next(runs)  # the first weight perturbation
    assert o.memory_waits == fresh.RERUNS
    w = [t for m in o.models(None) for t in m.state_dict().values()]
    assert all(torch.equal(a, b) for a, b in zip(w_clean, w))


def test_a_gate_whose_judging_runs_out_of_memory_says_so():
    """The gate's ERROR names the cause: running out of GPU memory is not a kverify fault (and the
    audit finds its marks in the record, to run the row again alone)."""
    from kverify.audit import oom_where
    from kverify.check import _judging_error
    from kverify.gates import GATES
    rec = _judging_error(GATES["G09"], torch.OutOfMemoryError(OOM))
    assert rec["verdict"] == "ERROR" and rec["summary"].startswith("ran out of memory while judging: ")
    assert oom_where({"gates": [rec]}, "") == "G09"
    assert _judging_error(GATES["G09"], KeyError("x"))["summary"].startswith("kverify fault while judging: KeyError")
    assert _judging_error(GATES["G05"], torch.OutOfMemoryError(OOM), "planning")["summary"].startswith(
        "ran out of memory while planning: ")


def test_g09_s_mode_run_is_not_left_out_for_running_out_of_memory(fresh, monkeypatch):
    """A mode run that still runs out of GPU memory after waiting raises (before, the mode was
    left out, "the reference raised there", and G09 could pass without it)."""
    from kverify.gates import g09_sensitivity as g09
    from kverify.problem import MODE_RUN, STATE_LOCK
    monkeypatch.setenv(memory_wait.ENV, "60")
    p, o, ctx = _bn_check()
    left = []
    runs = g09._oracle_runs(ctx, g09.plan(ctx)[0], left)
    with STATE_LOCK:
        names = [next(runs)[0] for _ in range(1 + 1 + len(g09.plan(ctx)[0]["tensors"]))]  # base, input 0, tensors
        assert MODE_RUN not in names
        monkeypatch.setattr(p.module.Model, "forward", _always_oom)
        with pytest.raises(torch.OutOfMemoryError):
            next(runs)
    assert not left and o.memory_waits == fresh.RERUNS


def test_g09_s_oracle_run_that_wrote_into_its_inputs_is_not_run_again(fresh, monkeypatch):
    """G09's fp64 inputs serve every one of its runs: a try that wrote into them before running
    out of memory would leave the next try (and the later runs) other inputs, so the error stands."""
    from kverify.gates import g09_sensitivity as g09
    from kverify.problem import STATE_LOCK
    monkeypatch.setenv(memory_wait.ENV, "60")
    p, o, ctx = _bn_check()
    plain = p.module.Model.forward

    def forward(self, x):
        if x.dtype == torch.float64:
            x.mul_(2.0)
            raise torch.OutOfMemoryError(OOM)
        return plain(self, x)
    monkeypatch.setattr(p.module.Model, "forward", forward)
    with STATE_LOCK, pytest.raises(torch.OutOfMemoryError):
        next(g09._oracle_runs(ctx, g09.plan(ctx)[0], []))
    assert o.memory_waits == 0


# ---- a check's own cap on a shared GPU (cap_process; kverify.audit.check_cap_mib) ----

GIB = 2**30


@pytest.mark.parametrize("text,reserved,cap,over", [
    ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 ...", 7 * GIB, 8 * GIB, True),   # 7 + 2 > 8
    ("CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 ...", int(6.6 * GIB), 8 * GIB, True),  # 8.1 > 8
    ("CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 ...", 7 * GIB, 8 * GIB, False),  # 7.5 fits: the GPU was full
    ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 ...", 7 * GIB, None, False),  # no cap
    ("CUBLAS_STATUS_ALLOC_FAILED", int(7.5 * GIB), 8 * GIB, True),  # no size said: near the cap
    ("CUBLAS_STATUS_ALLOC_FAILED", 2 * GIB, 8 * GIB, False),
    ("RuntimeError: shapes do not match", 8 * GIB, 8 * GIB, False),  # not out of memory
])
def test_over_cap_tells_a_process_s_own_cap_from_a_full_gpu(text, reserved, cap, over):
    assert memory_wait.over_cap(text, reserved, cap) is over


def test_over_its_own_cap_the_error_stands_at_once_and_is_remembered(fresh, monkeypatch):
    """A retry cannot help a process over its own cap (no other check holds that memory): no
    pause, the error at once, and capped_out() says so for the report (meta.over_gpu_cap). Its
    twin under the cap (the GPU was full) waits and runs again as before."""
    monkeypatch.setenv(memory_wait.ENV, "5")
    monkeypatch.setattr(memory_wait, "_cap", [8 * GIB])
    monkeypatch.setattr(memory_wait, "_over", [False])
    monkeypatch.setattr(memory_wait, "_waited", [0])
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a, **k: 7 * GIB)
    _gpu_stats(monkeypatch, 0, 7 * GIB)
    assert not fresh.capped_out()  # 7 of 8 GiB at most, nothing ran out over it yet
    big = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB"
    fn, calls = _flaky(1, lambda: torch.OutOfMemoryError(big))
    with pytest.raises(torch.OutOfMemoryError):
        fresh.retry(fn)
    assert len(calls) == 1 and fresh.left() == 5 and fresh.capped_out() and fresh.cap_mib() == 8 * 1024
    monkeypatch.setattr(memory_wait, "_over", [False])
    fn, calls = _flaky(1)  # 2 MiB asked: under the cap, the GPU was full
    assert fresh.retry(fn) == "ran" and len(calls) == 2 and not fresh.capped_out()


def _gpu_stats(monkeypatch, ooms: int, peak: int) -> None:
    """This process as if CUDA ran here: ``ooms`` errors raised by the caching allocator so far,
    ``peak`` bytes reserved at most."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda *a, **k: {"num_ooms": ooms})
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a, **k: peak)


def test_capped_out_needs_an_error_of_its_own_near_the_cap(fresh, monkeypatch):
    """An error no retry took (unmended_ooms) with a peak within 10% of the cap counts as over it
    (raised outside the retried runs: its size is not known); a peak near the cap without an error
    of its own does not (a review's find: a neighbour's error would have booked it whole), nor an
    error far below the cap, nor anything without a cap."""
    monkeypatch.setattr(memory_wait, "_over", [False])
    monkeypatch.setattr(memory_wait, "_waited", [0])
    monkeypatch.setattr(memory_wait, "_cap", [8 * GIB])
    _gpu_stats(monkeypatch, 1, int(7.3 * GIB))
    assert fresh.capped_out() and fresh.gpu_oom_status() == {"ooms": 1, "over_cap": True}
    _gpu_stats(monkeypatch, 0, int(7.3 * GIB))
    assert not fresh.capped_out() and fresh.gpu_oom_status() == {"ooms": 0, "over_cap": False}
    _gpu_stats(monkeypatch, 1, 7 * GIB)
    assert not fresh.capped_out() and fresh.gpu_oom_status() == {"ooms": 1, "over_cap": False}
    monkeypatch.setattr(memory_wait, "_cap", [None])
    _gpu_stats(monkeypatch, 1, int(7.3 * GIB))
    assert not fresh.capped_out() and fresh.cap_mib() is None


def test_errors_a_retry_took_are_not_unmended(fresh, monkeypatch):
    """unmended_ooms: the allocator's count less the errors retry() ran again after a pause."""
    monkeypatch.setenv(memory_wait.ENV, "5")
    monkeypatch.setattr(memory_wait, "_waited", [0])
    fn, calls = _flaky(2)
    assert fresh.retry(fn) == "ran" and len(calls) == 3
    _gpu_stats(monkeypatch, 2, GIB)
    assert fresh.unmended_ooms() == 0
    _gpu_stats(monkeypatch, 3, GIB)  # one more, raised where no retry took it
    assert fresh.unmended_ooms() == 1
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert fresh.unmended_ooms() == 0  # CUDA never started here


def test_an_error_asking_more_than_the_whole_gpu_is_not_unmended(fresh, monkeypatch):
    """An error that asked for more than the whole GPU has (beyond_gpu) stands at once and is not
    in unmended_ooms (alone, the row would raise it again: H200 audit, stop 40, a G05 shape of ~1 TB
    sent rows to run alone twice), counted once through nested retries; an error that ran short and
    stood after every retry still is; the host's allocator is not the GPU's."""
    monkeypatch.setenv(memory_wait.ENV, "5")
    monkeypatch.setattr(memory_wait, "_waited", [0])
    monkeypatch.setattr(fresh, "_device_total", lambda: 140 << 30)
    huge = "CUDA out of memory. Tried to allocate 976.00 GiB. GPU 0 has a total capacity of 139.81 GiB"
    fn, calls = _flaky(1, lambda: torch.OutOfMemoryError(huge))
    with pytest.raises(torch.OutOfMemoryError):
        fresh.retry(lambda: fresh.retry(fn))
    assert len(calls) == 1
    _gpu_stats(monkeypatch, 1, GIB)
    assert fresh.unmended_ooms() == 0 and fresh.gpu_oom_status() == {"ooms": 0, "over_cap": False}
    fn, calls = _flaky(1 + fresh.RERUNS)  # 2 MiB asked at every try: the last error stands
    with pytest.raises(torch.OutOfMemoryError):
        fresh.retry(fn)
    _gpu_stats(monkeypatch, 2 + fresh.RERUNS, GIB)  # the allocator counted each try's error and the huge one
    assert fresh.unmended_ooms() == 1
    assert fresh.beyond_gpu(RuntimeError(huge)) and not fresh.beyond_gpu(torch.OutOfMemoryError(OOM))
    assert not fresh.beyond_gpu(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to "
                                             "allocate 9000000000000000 bytes"))


class _Allocator:
    """A stand-in for PyTorch's caching allocator on a CPU-only host: ``fail()`` does what a failed
    allocation does (num_ooms + 1, the out-of-memory observer called in the failing thread, then
    torch.OutOfMemoryError raised)."""

    def __init__(self, monkeypatch, watched: bool = True):
        self.ooms = 0
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "memory_stats", lambda *a, **k: {"num_ooms": self.ooms})
        monkeypatch.setattr(memory_wait, "_watch", lambda: watched)
        monkeypatch.setattr(memory_wait, "_waited", [0])

    def fail(self, text: str = OOM):
        self.ooms += 1
        memory_wait._observe(0, 2 << 20, 0, 0)
        raise torch.OutOfMemoryError(text)

    def caught(self, n: int = 1) -> None:
        for _ in range(n):
            try:
                self.fail()
            except torch.OutOfMemoryError:
                pass


def test_errors_caught_inside_a_run_that_ended_well_are_not_unmended(fresh, monkeypatch):
    """PyTorch's cuDNN convolutions try each algorithm's workspace and take a smaller one when the
    allocation fails; the allocator counts each failure (num_ooms) though the run ends well (likely
    why a ConvTranspose2d row of the H200 audit, stop 47, was sent to run alone, then serially).
    With the allocator watched, errors raised and caught inside a retry() run that ended well are
    not unmended; an error caught outside any run (a gate's broad except), or
    in another thread meanwhile, or a run's error that stands still is; without the watch, every
    error is, as before."""
    monkeypatch.setenv(memory_wait.ENV, "5")
    a = _Allocator(monkeypatch)

    def well():
        a.caught(3)
        return "ran"
    assert fresh.retry(well) == "ran" and a.ooms == 3
    assert fresh.unmended_ooms() == 0
    a.caught()  # outside any run: no one knows it was mended
    assert fresh.unmended_ooms() == 1

    def stands():
        a.caught(2)
        a.fail()
    with pytest.raises(torch.OutOfMemoryError):
        fresh.retry(stands, may_retry=lambda: False)
    assert a.ooms == 7 and fresh.unmended_ooms() == 2  # its own error stands; the 2 it caught do not

    def elsewhere():  # an error another thread catches while this run goes on
        import threading
        t = threading.Thread(target=a.caught)
        t.start()
        t.join()
        return "ran"
    assert fresh.retry(elsewhere) == "ran" and fresh.unmended_ooms() == 3

    fn, calls = _flaky(2, lambda: a.fail())  # retried twice, then ends well
    assert fresh.retry(fn) == "ran" and len(calls) == 3
    assert fresh.unmended_ooms() == 3 and memory_wait._waited == [0]
    fn, calls = _flaky(2, lambda: a.fail())  # the same inside a nested retry
    assert fresh.retry(lambda: fresh.retry(fn)) == "ran" and len(calls) == 3
    assert fresh.unmended_ooms() == 3 and memory_wait._waited == [0]

    def caught_from_a_nested_run():  # a nested run's error stands and the outer run's code catches it
        a.caught()  # mended: caught inside a run that ends well
        try:
            fresh.retry(a.fail, may_retry=lambda: False)
        except torch.OutOfMemoryError:
            pass
        return "ran"
    assert fresh.retry(caught_from_a_nested_run) == "ran" and fresh.unmended_ooms() == 4

    monkeypatch.setattr(fresh, "_device_total", lambda: 140 << 30)
    huge = "CUDA out of memory. Tried to allocate 976.00 GiB. GPU 0 has a total capacity of 139.81 GiB"
    with pytest.raises(torch.OutOfMemoryError):  # past the whole GPU: stands, and is not unmended
        fresh.retry(lambda: a.fail(huge))
    assert fresh.unmended_ooms() == 4 and fresh.gpu_oom_status() == {"ooms": 4, "over_cap": False}


def test_without_the_watch_every_error_no_retry_took_is_unmended(fresh, monkeypatch):
    """The twin of the test above without the allocator's observer (a torch without the hook, or a
    run that started before CUDA did): errors caught inside a run count, as they did before."""
    monkeypatch.setenv(memory_wait.ENV, "5")
    a = _Allocator(monkeypatch, watched=False)

    def well():
        a.caught(3)
        return "ran"
    assert fresh.retry(well) == "ran" and fresh.unmended_ooms() == 3
    fn, calls = _flaky(1, lambda: a.fail())
    assert fresh.retry(fn) == "ran" and fresh.unmended_ooms() == 3 and memory_wait._waited == [1]


def test_the_watch_attaches_once_after_cuda_starts(monkeypatch):
    """_watch attaches the observer to PyTorch's allocator once, and only once CUDA has started (the
    allocator of a device is made then); without the hook (a CPU-only torch) it reports False."""
    monkeypatch.setattr(memory_wait, "_watching", [False])
    attached = []
    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", attached.append, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert not memory_wait._watch() and attached == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert memory_wait._watch() and memory_wait._watch() and attached == [memory_wait._observe]
    monkeypatch.setattr(memory_wait, "_watching", [False])
    monkeypatch.delattr(torch._C, "_cuda_attach_out_of_memory_observer")
    assert not memory_wait._watch()


def test_an_error_past_the_whole_gpu_wrapped_between_retries_is_counted_once(fresh, monkeypatch):
    """A review's find: a retry() around code that re-raises the inner retry's error in a new
    exception (same words, ``raise ... from``) counted the one allocator error twice, which would hide
    a real shortage; the mark is now looked for along __cause__/__context__. An exception whose
    __setattr__ raises is not replaced by that error."""
    monkeypatch.setattr(memory_wait, "_waited", [0])
    monkeypatch.setattr(fresh, "_device_total", lambda: 140 << 30)
    huge = "CUDA out of memory. Tried to allocate 976.00 GiB. GPU 0 has a total capacity of 139.81 GiB"

    def inner():
        raise torch.OutOfMemoryError(huge)

    def wrapped():
        try:
            fresh.retry(inner)
        except torch.OutOfMemoryError as e:
            raise RuntimeError(f"reference failed: {e}") from e
    with pytest.raises(RuntimeError):
        fresh.retry(wrapped)
    _gpu_stats(monkeypatch, 2, GIB)  # the huge error and a real shortage a gate caught outside retry
    assert fresh.unmended_ooms() == 1

    class Frozen(torch.OutOfMemoryError):
        def __setattr__(self, name, value):
            raise TypeError("frozen")
    with pytest.raises(Frozen):
        fresh.retry(lambda: (_ for _ in ()).throw(Frozen(huge)))


def test_an_error_over_the_cap_on_the_last_try_is_remembered(fresh, monkeypatch):
    """A review's find: the last try's error stood before hit_cap was asked, so a run whose last
    try went over the cap (the earlier ones ran out beside others) was not known to have."""
    monkeypatch.setenv(memory_wait.ENV, "60")
    monkeypatch.setattr(memory_wait, "_cap", [8 * GIB])
    monkeypatch.setattr(memory_wait, "_over", [False])
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a, **k: 7 * GIB)
    big = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB"
    calls = []

    def fn():
        calls.append(1)
        raise torch.OutOfMemoryError(big if len(calls) == 1 + fresh.RERUNS else OOM)
    with pytest.raises(torch.OutOfMemoryError):
        fresh.retry(fn)
    assert len(calls) == 1 + fresh.RERUNS and fresh._over[0]


def test_an_audit_caps_only_checks_that_share_a_gpu(tmp_path, monkeypatch):
    """kverify.audit._task caps the check's own process where the scheduler gave it a cap, on a
    GPU audit, and never a build."""
    import kverify.audit as audit
    for var in ("KVERIFY_WORKDIR_ROOT", "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "KVERIFY_SERIAL_CHECK",
                audit.cuda_schedule.ENV, "KVERIFY_EMPTY_CACHE", memory_wait.ENV, "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "KVERIFY_SANITIZER_CPUS"):
        monkeypatch.setenv(var, "unset")  # restored after the test (see test_only_a_gpu_audit_s_checks_wait)
    monkeypatch.delenv(audit.STACK_ENV, raising=False)
    capped = []
    monkeypatch.setattr(memory_wait, "cap_process", lambda mib: capped.append(mib) or True)
    monkeypatch.setattr(audit, "_timed_check", lambda *a: (None, "CLEAN", "", 0.0))
    monkeypatch.setattr(audit, "precompile_row", lambda *a: ("ok", "", 0.0, 0, 0, 0))
    monkeypatch.setattr(audit.cuda_schedule, "apply", lambda: None)
    monkeypatch.setattr("kverify._internal.lifeline.exit_with_parent", lambda: None)
    out = str(tmp_path / "out.json")
    monkeypatch.setattr(memory_wait, "gpu_oom_status", lambda: {"ooms": 2, "over_cap": True})
    for stage, device, cap, want in (("check", "cuda", 36864, [36864]), ("check", "cuda", None, []),
                                     ("check", "cpu", 36864, []), ("build", "cuda", 36864, [])):
        audit._task(stage, "c.jsonl", {"id": "r"}, {"device": device}, out, None, False, cap)
        assert capped == want, (stage, device, cap)
        capped.clear()
        # a GPU check's result ends with its process's own out-of-memory account, whatever its record
        with open(out) as f:
            res = json.load(f)
        assert (res[-1] == {"ooms": 2, "over_cap": True}) == (stage == "check" and device == "cuda"), (stage, device)


@pytest.mark.gpu
def test_a_capped_process_runs_out_at_its_cap_on_the_gpu(tmp_path):
    """On a real GPU: a process capped at 1 GiB (cap_process) that asks for 2 GiB gets
    torch.OutOfMemoryError with GPU memory to spare; retry() does not wait for it (hit_cap) and
    capped_out() says so; an error over the cap that no retry saw is in unmended_ooms() (PyTorch's
    num_ooms), one asking more than the whole GPU has is not; an uncapped twin process allocates
    the same 2 GiB, then 3 GiB, with none."""
    import subprocess
    import sys
    prog = """
import os, sys, time, torch
from kverify._internal import memory_wait as mw
os.environ[mw.ENV] = "30"
if sys.argv[1] == "cap":
    assert mw.cap_process(1024)
t = time.monotonic()
try:
    mw.retry(lambda: torch.empty(2 << 30, dtype=torch.uint8, device="cuda"))
    print("allocated", mw.capped_out())
except torch.OutOfMemoryError:
    print("oom", mw.capped_out(), round(time.monotonic() - t, 1), mw.cap_mib())
try:  # caught where no retry sees it (a gate's broad except): the allocator's count still has it
    torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError:
    pass
print(mw.unmended_ooms())
try:  # more than the whole GPU (beyond_gpu): the allocator counts it, unmended_ooms does not
    mw.retry(lambda: torch.empty(1 << 40, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    pass
print(mw.unmended_ooms())
"""
    got = {}
    for mode in ("cap", "free"):
        r = subprocess.run([sys.executable, "-c", prog, mode], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        got[mode] = r.stdout.split()
    assert got["cap"][:2] == ["oom", "True"] and float(got["cap"][2]) < 1.0 and got["cap"][3] == "1024", got
    assert got["cap"][4:] == ["2", "2"], got  # the retried run's error and the caught one; not the 1 TiB one
    assert got["free"] == ["allocated", "False", "0", "0"], got


@pytest.mark.gpu
def test_an_error_caught_inside_a_run_that_ended_well_is_not_unmended_on_the_gpu():
    """On a real GPU, with the allocator's observer attached (_watch): a run of retry() that catches
    its own out-of-memory error (as PyTorch's cuDNN convolutions do when a workspace does not fit)
    and ends well leaves unmended_ooms() at 0 though the allocator counted the error; one caught
    outside any run counts."""
    import subprocess
    import sys
    prog = """
import torch
from kverify._internal import memory_wait as mw
assert mw.cap_process(1024)
def run():
    try:
        torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        pass
    return torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
mw.retry(run)
print(mw._watching[0], torch.cuda.memory_stats()["num_ooms"], mw.unmended_ooms())
try:
    torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError:
    pass
print(mw.unmended_ooms())
"""
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "1", "0", "1"], r.stdout


def test_the_trace_names_each_error_s_thread_run_and_stack_and_the_counts(fresh, monkeypatch, tmp_path):
    """KVERIFY_OOM_TRACE (memory_wait.TRACE_ENV): each error the allocator's observer sees is written
    with its thread, its retry() depth, whether it counts as caught inside a watched run, and the
    Python stack that asked; gpu_oom_status writes the counts it comes from. Unset, or a file that
    cannot be written: nothing is written and nothing fails."""
    monkeypatch.setenv(memory_wait.ENV, "5")
    a = _Allocator(monkeypatch)
    monkeypatch.setattr(memory_wait, "_watching", [True])

    def well():
        a.caught(2)
        return "ran"
    fresh.retry(well)  # untraced: no file
    trace = tmp_path / "oom.txt"
    assert not trace.exists()
    monkeypatch.setenv(memory_wait.TRACE_ENV, str(trace))
    assert fresh.retry(well) == "ran"

    def a_gate_s_broad_except():
        a.caught()
    a_gate_s_broad_except()
    assert fresh.gpu_oom_status() == {"ooms": 1, "over_cap": False}
    text = trace.read_text()
    heads = [ln for ln in text.splitlines() if ln.startswith("oom ")]
    assert len(heads) == 3
    assert all("thread=MainThread" in h and "asked_mib=2.0" in h for h in heads)
    assert [("depth=1" in h, "in_watched_run=True" in h) for h in heads] == [(True, True)] * 2 + [(False, False)]
    blocks = text.split("oom pid=")[1:]
    assert "in well" in blocks[0] and "in a_gate_s_broad_except" in blocks[2] and "in well" not in blocks[2]
    assert "in fail" in blocks[0] and "in _observe" not in text  # it ends at the allocation, not in the tracer
    status = [ln for ln in text.splitlines() if ln.startswith("status ")]
    assert len(status) == 1 and "num_ooms=5 waited=0" in status[0] and "mended=4" in status[0]
    assert status[0].endswith("{'ooms': 1, 'over_cap': False}")
    monkeypatch.setenv(memory_wait.TRACE_ENV, str(tmp_path / "no" / "such" / "dir.txt"))
    a_gate_s_broad_except()  # cannot be written: ignored
    assert fresh.gpu_oom_status()["ooms"] == 2
    import os
    import threading
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setenv(memory_wait.TRACE_ENV, str(fifo))
    t = threading.Thread(target=a_gate_s_broad_except, daemon=True)  # no reader: not waited for
    t.start()
    t.join(10)
    assert not t.is_alive() and fresh.unmended_ooms() == 3
