"""check() judges each gate as soon as its last job is in, in a judging thread beside the
candidate's runs, and then drops its jobs' outputs (kverify.check._Judging): the check's process
no longer holds every job's outputs at once. Stop 27 on the H200: four of an audit's check
processes held up to 117 GiB of the host's 126 between them, and check processes were killed by
SIGKILL."""
import os
import time
from pathlib import Path

import pytest

import kverify.check as kc
from kverify.check import check
from kverify.examples import ROOT
from kverify.sandbox import Outcome, Sandbox, _Lines

RELU = ROOT / "relu"
CONTROLS = Path(__file__).resolve().parents[1] / "controls"
HEAD = "import time\nimport torch\nimport torch.nn as nn\n"
#: a relu candidate slow enough (0.2 s a call) that the judging thread keeps up with its worker
SLOW_RELU = HEAD + ("class ModelNew(nn.Module):\n"
                    "    def forward(self, x):\n"
                    "        time.sleep(0.2)\n"
                    "        return torch.relu(x)\n")


def _spy(monkeypatch) -> list:
    """Record at each gate's judging: (gate, its job ids, ids of every outcome in so far, ids
    whose results are still held)."""
    seen = []
    real = kc._judge_gate

    def spy(ctx, g, plan, outcomes, results):
        held = {k for k, o in outcomes.items() if o.result is not None}
        seen.append((g, [j["id"] for j in plan], set(outcomes), held))
        return real(ctx, g, plan, outcomes, results)

    monkeypatch.setattr(kc, "_judge_gate", spy)
    return seen


def _relu(tmp_path: Path, body: str, **kw) -> dict:
    ref = RELU / "reference.py"
    return check(ref.read_text(), str(ref), body, str(tmp_path / "cand.py"), device="cpu",
                 workdir=tmp_path / "work", **kw)


GATES_OF_MAIN = ["G01", "G02", "G03", "G04", "G07", "G08"]


def test_gates_are_judged_while_later_jobs_run_and_their_outputs_dropped(tmp_path, monkeypatch):
    """Every gate's jobs in the main worker (no prestart): the first gate is judged before the
    other gates' outcomes are in, and at every judging no job of a gate judged before still holds
    its results. Judged only after every run, as before stop 27, the first judging would see
    every outcome, and with the results kept every job would still hold them."""
    monkeypatch.setenv("KVERIFY_PRESTART", "0")
    monkeypatch.delenv("KVERIFY_SERIAL_CHECK", raising=False)
    seen = _spy(monkeypatch)
    r = _relu(tmp_path, SLOW_RELU, gates=GATES_OF_MAIN, standard=False)
    assert r["class"] == "CLEAN", [(g["gate"], g["verdict"], g["summary"]) for g in r["gates"]]
    assert [s[0] for s in seen] == GATES_OF_MAIN
    total = sum(len(s[1]) for s in seen)
    assert len(seen[0][2]) < total, seen[0]  # G01 judged before the other gates' outcomes had come in
    judged_before: set = set()
    for g, ids, _, held in seen:
        assert not (held & judged_before), (g, held & judged_before)  # nothing of an earlier gate held
        judged_before |= set(ids)
    peak = r["meta"]["host_peak_mib"]  # the check process's own peak, for the audit's host-memory guard
    assert isinstance(peak, int) and 10 < peak < 64 * 1024, peak
    assert r["meta"]["gpu_peak_mib"] == 0  # a CPU check (on the GPU: tests/test_gpu.py)


def test_serial_check_judges_after_every_run(tmp_path, monkeypatch):
    """KVERIFY_SERIAL_CHECK=1 (the baseline without concurrency) judges after the runs, as before."""
    monkeypatch.setenv("KVERIFY_SERIAL_CHECK", "1")
    seen = _spy(monkeypatch)
    r = _relu(tmp_path, (RELU / "correct.py").read_text(), gates=["G01", "G02", "G07"], standard=False)
    assert r["class"] == "CLEAN"
    total = sum(len(s[1]) for s in seen)
    assert [len(s[2]) for s in seen] == [total] * 3


def test_a_slow_judgement_does_not_cut_the_jobs_that_ended_meanwhile(tmp_path, monkeypatch):
    """A gate's judging that outlasts the check's budget (G11 waits so for its sanitizer runs)
    while the worker's later jobs end: those jobs are judged, not cut by the budget. (Judged inside
    Sandbox.run's reading loop, G12's job, already done, came out "budget": G12 ERROR.)"""
    from kverify.gates import GATES
    monkeypatch.setenv("KVERIFY_PRESTART", "0")
    g07 = GATES["G07"]
    real = g07.judge

    def slow(ctx, results):
        time.sleep(max(ctx.sandbox.deadline - time.monotonic(), 0.0) + 1.0)
        return real(ctx, results)

    monkeypatch.setattr(g07, "judge", slow)
    r = _relu(tmp_path, (RELU / "correct.py").read_text(), gates=["G01", "G07", "G12"], standard=False, budget=25)
    verdicts = {g["gate"]: (g["verdict"], g["summary"][:120]) for g in r["gates"]}
    assert verdicts["G12"][0] == "PASS" and verdicts["G07"][0] == "PASS", verdicts


def test_a_status_line_already_written_is_read_past_the_deadline():
    """_Lines.next(0) still reads a line that is in the pipe (the budget cuts a job only if its
    result is not there)."""
    r, w = os.pipe()
    lines = _Lines(r)
    try:
        assert lines.next(0.0) is None
        os.write(w, b"done 3\n")
        assert lines.next(0.0) == "done 3"
        assert lines.next(-5.0) is None
    finally:
        lines.close()
        os.close(w)


def test_findings_are_unchanged(tmp_path, monkeypatch):
    """A defect judged gate by gate as its jobs end is caught as before (G03: fmax maps NaN to a number)."""
    monkeypatch.setenv("KVERIFY_PRESTART", "0")
    r = _relu(tmp_path, (RELU / "g03_fmax.py").read_text(), gates=["G01", "G02", "G03"])
    verdicts = {g["gate"]: g["verdict"] for g in r["gates"]}
    assert verdicts["G03"] == "FAIL" and r["class"] == "BROKEN", r["gates"]


def test_sandbox_hands_every_outcome_to_the_hook_in_job_order(tmp_path):
    """Sandbox.run's on_outcome sees each job once, in order, results and crashes alike (a crash
    at job 1: a new worker resumes at job 2)."""
    from kverify.problem import Problem
    ref = (RELU / "reference.py").read_text()
    specs = Problem(ref, str(RELU / "reference.py"), 1e-2).input_specs(0)
    jobs = [{"kind": "run", "id": f"t{k}", "seed": 1, "binding": None, "inputs": [s.to_json() for s in specs]}
            for k in range(3)]
    body = ("import os, torch\nimport torch.nn as nn\nN = [0]\n"
            "class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            "        N[0] += 1\n"
            f"        if N[0] == 2 and not os.path.exists({str(tmp_path / 'crashed')!r}):\n"
            f"            open({str(tmp_path / 'crashed')!r}, 'w').close()\n"
            "            os._exit(3)\n"
            "        return torch.relu(x)\n")
    sb = Sandbox(reference_source=ref, reference_path=str(RELU / "reference.py"), candidate_source=body,
                 candidate_path=str(tmp_path / "cand.py"), device="cpu", workdir=tmp_path / "work")
    got = []
    try:
        outs = sb.run(jobs, on_outcome=lambda k, o: got.append((k, o.status)))
    finally:
        sb.cleanup()
    assert [k for k, _ in got] == [0, 1, 2]
    assert [s for _, s in got] == ["ok", "crash", "ok"] == [o.status for o in outs]
    assert all(isinstance(o, Outcome) for o in outs)


def test_audit_log_note_of_the_host_peak():
    from kverify.audit import host_peak_note
    assert host_peak_note({"meta": {"host_peak_mib": 3072}}) == ", host 3.0 GiB"
    assert host_peak_note({"meta": {"host_peak_mib": 3072, "gpu_peak_mib": 1536}}) == ", host 3.0 GiB, own GPU 1.5 GiB"
    assert host_peak_note({"meta": {"host_peak_mib": 3072, "gpu_peak_mib": 0}}) == ", host 3.0 GiB"
    assert host_peak_note({"meta": {}}) == host_peak_note(None) == host_peak_note({"meta": {"host_peak_mib": 0}}) == ""


def _control(tmp_path: Path, name: str, which: str, tag: str) -> dict:
    ref, cand = CONTROLS / name / "reference.py", CONTROLS / name / f"{which}.py"
    return check(ref.read_text(), str(ref), cand.read_text(), str(cand), device="cpu",
                 workdir=tmp_path / tag, gates=["G01", "G05"], standard=False)


def _g05(report: dict) -> dict:
    return next(g for g in report["gates"] if g["gate"] == "G05")


@pytest.mark.parametrize("prestart", ["0", "1"])
def test_g05_condenses_each_variant_as_it_arrives(tmp_path, monkeypatch, prestart):
    """G05's outcomes reach its judging as records of one variant each ({"G05": record}, made as
    each arrived: g05_shapes.condense), in G05's own worker (prestart) or the main one; a control
    and its twin are judged as when every variant's outputs were judged at the end, and so they
    are with KEEP_BYTES = 0 (every variant's expected outputs dropped after planning and computed
    again when its outcome arrives)."""
    import kverify.gates.g05_shapes as g05
    monkeypatch.setenv("KVERIFY_PRESTART", prestart)
    seen = []
    real = kc._judge_gate

    def spy(ctx, g, plan, outcomes, results):
        if g == "G05":
            seen.append([outcomes[j["id"]].result for j in plan])
        return real(ctx, g, plan, outcomes, results)

    monkeypatch.setattr(kc, "_judge_gate", spy)
    defect = _control(tmp_path, "g05_tail_dropped", "defect", "a")
    twin = _control(tmp_path, "g05_tail_dropped", "twin", "b")
    assert _g05(defect)["verdict"] == "FAIL" and _g05(twin)["verdict"] == "PASS", (_g05(defect), _g05(twin))
    assert seen and all(list(r) == ["G05"] for results in seen for r in results), seen[0][:2]
    monkeypatch.setattr(g05, "KEEP_BYTES", 0)
    recomputed = _control(tmp_path, "g05_tail_dropped", "defect", "c")
    monkeypatch.setattr(g05, "KEEP_BYTES", 1 << 30)
    monkeypatch.setattr(g05, "condense", lambda ctx, job, outcome: None)  # outputs judged at the end
    plain = _control(tmp_path, "g05_tail_dropped", "defect", "d")
    for r in (recomputed, plain):
        assert _g05(r)["verdict"] == "FAIL"
        assert _g05(r)["evidence"]["variants"] == _g05(defect)["evidence"]["variants"]


def test_a_gate_waiting_for_its_background_work_does_not_hold_the_others(tmp_path, monkeypatch):
    """G11's last job comes in while its background work (the sanitizer runs, here a 6 s sleep)
    still goes on: its judging waits for the end of the runs, and G05's variants are condensed
    as they arrive meanwhile, not after the background work (judged at once, G11 would block the
    judging thread and every G05 output would be held until then)."""
    import threading

    import kverify.gates.g05_shapes as g05
    import kverify.gates.g11_memory_safety as g11
    monkeypatch.setenv("KVERIFY_PRESTART", "1")
    done = threading.Event()

    def start(ctx):
        def run():
            time.sleep(6.0)
            done.set()
            return {"not_applicable": "simulated sanitizer runs"}
        return run

    monkeypatch.setattr(g11, "start", start)
    condensed_early = []
    real = g05.condense

    def condense(ctx, job, outcome):
        condensed_early.append(not done.is_set())
        return real(ctx, job, outcome)

    monkeypatch.setattr(g05, "condense", condense)
    r = _relu(tmp_path, (RELU / "correct.py").read_text(), gates=["G01", "G05", "G11"], standard=False)
    assert {g["gate"] for g in r["gates"]} == {"G01", "G05", "G11"}
    assert condensed_early and all(condensed_early), condensed_early
