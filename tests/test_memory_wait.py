"""Waiting for GPU memory (kverify._internal.memory_wait): in an audit's check that runs out of GPU
memory beside other checks, the fp64 oracle's run pauses and runs again (the same models and
inputs; not where the failed try wrote into an input it shares), at most RERUNS times, within
the process's pausing time and only where the check's deadline leaves room; outside a GPU audit
(no KVERIFY_OOM_WAIT_S) nothing waits. CPU-only: the out-of-memory errors are raised by hand."""
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
        with pytest.raises(torch.OutOfMemoryError):
            fresh.retry(fn, deadline=time.monotonic() + left_s)
        assert len(calls) == 1, left_s
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
