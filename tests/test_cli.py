"""`kverify check` end to end on the CPU: exit codes, clear errors, CRASH and TIMEOUT verdicts."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kverify.check import check as check_fn
from kverify.errors import UsageError
from kverify.examples import ROOT

RELU = ROOT / "relu"


def run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "kverify", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def cand(tmp_path: Path, body: str, name="cand.py") -> Path:
    p = tmp_path / name
    p.write_text("import torch\nimport torch.nn as nn\n" + body)
    return p


def test_correct_candidate_passes_and_writes_json(tmp_path):
    out = tmp_path / "r.json"
    r = run("check", RELU / "reference.py", RELU / "correct.py", "--device", "cpu", "--json", out)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(out.read_text())
    assert rep["class"] == "CLEAN" and rep["standard"]["verdict"] == "PASS"
    assert [g["gate"] for g in rep["gates"]] == [f"G{i:02d}" for i in range(1, 13)]
    secs = rep["meta"]["seconds"]  # where the time goes: per gate and the standard test
    assert sorted(secs["gates"]) == [f"G{i:02d}" for i in range(1, 13)]
    assert all(v >= 0 for v in secs["gates"].values()) and sum(secs["gates"].values()) > 0
    assert 0 < secs["standard"] < secs["total"]


def test_nan_to_zero_fails_g03_while_standard_passes(tmp_path):
    out = tmp_path / "r.json"
    r = run("check", RELU / "reference.py", RELU / "g03_fmax.py", "--device", "cpu", "--json", out)
    assert r.returncode == 1
    rep = json.loads(out.read_text())
    g03 = next(g for g in rep["gates"] if g["gate"] == "G03")
    assert g03["verdict"] == "FAIL" and g03["evidence"]["nan_mismatch"] > 0
    assert g03["evidence"]["values"]["oracle"] == "nan" and g03["evidence"]["values"]["candidate"] == 0.0
    assert rep["standard"]["verdict"] == "PASS"
    assert "replay: kverify check" in r.stdout


@pytest.mark.parametrize("setup,needle", [
    (lambda t: (t / "missing.py", RELU / "correct.py"), "reference file not found"),
    (lambda t: (RELU / "reference.py", cand(t, "class ModelNew(:\n")), "not valid Python"),
    (lambda t: (RELU / "reference.py", cand(t, "class Other(nn.Module): pass\n")), "no ModelNew"),
    (lambda t: (RELU / "reference.py", cand(t, "import sys\nsys.exit(4)\n")), "exit(4)"),
    (lambda t: (RELU / "reference.py", cand(t, "import os\nos._exit(7)\n")), "exited with code 7"),
    (lambda t: (RELU / "reference.py", cand(t, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")),
     "SIGSEGV"),
    (lambda t: (RELU / "reference.py", cand(t, "raise ImportError('nvcc failed: error: x')\n")), "nvcc failed"),
])
def test_bad_input_is_exit_2_with_file_and_reason(tmp_path, setup, needle):
    ref, c = setup(tmp_path)
    r = run("check", ref, c, "--device", "cpu")
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert str(c.name if "missing" not in str(ref) else ref.name) in r.stderr


def test_crash_and_timeout_are_verdicts(tmp_path):
    body = ("class ModelNew(nn.Module):\n"
            "    calls = 0\n"
            "    def forward(self, x):\n"
            "        ModelNew.calls += 1\n"
            "        if x.isnan().any():\n"
            "            import os; os._exit(9)\n"
            "        if x.isinf().any():\n"
            "            import time; time.sleep(60)\n"
            "        return torch.relu(x)\n")
    out = tmp_path / "r.json"
    r = run("check", RELU / "reference.py", cand(tmp_path, body), "--device", "cpu", "--gates", "G01,G03,G04",
            "--timeout", "5", "--json", out)
    assert r.returncode == 1
    rep = {g["gate"]: g for g in json.loads(out.read_text())["gates"]}
    assert rep["G01"]["verdict"] == "PASS" and rep["G04"]["verdict"] == "PASS"
    assert rep["G03"]["verdict"] == "CRASH" and "exited with code 9" in rep["G03"]["summary"]


def test_timeout_verdict(tmp_path):
    body = ("class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            "        import time; time.sleep(60)\n")
    out = tmp_path / "r.json"
    r = run("check", RELU / "reference.py", cand(tmp_path, body), "--device", "cpu", "--gates", "G01",
            "--timeout", "3", "--json", out)
    assert r.returncode == 1
    g = json.loads(out.read_text())["gates"][0]
    assert g["verdict"] == "TIMEOUT"


def test_usage_errors():
    assert run("check", RELU / "reference.py", RELU / "correct.py", "--gates", "G99").returncode == 2
    r = run("check", "--corpus", "/nonexistent.jsonl", "--id", "x")
    assert r.returncode == 2 and "no such corpus file" in r.stderr
    r = run("check", RELU / "reference.py", RELU)
    assert r.returncode == 2 and "is a directory, not the candidate file" in r.stderr, r.stderr


@pytest.mark.parametrize("ref_body,needle", [
    ("class Model(nn.Module):\n    def forward(self, x):\n        raise ValueError('ref boom')\n"
     "def get_inputs(): return [torch.randn(3)]\ndef get_init_inputs(): return []\n", "ref boom"),
    ("class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
     "def get_inputs(): return torch.randn(3)\ndef get_init_inputs(): return []\n", "must return a list"),
])
def test_bad_reference_is_exit_2(tmp_path, ref_body, needle):
    ref = cand(tmp_path, ref_body, "ref.py")
    r = run("check", ref, RELU / "correct.py", "--device", "cpu")
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("args,needle", [
    (["--tol", "nan"], "tolerance must be"), (["--tol", "-1"], "tolerance must be"), (["--timeout", "0"], "--timeout"),
    (["--json", "/nonexistent/d/r.json"], "does not exist"), (["--json", "/"], "is a folder"),
    (["--json", "/proc/kverify-test.json"], "cannot write there"), (["--gates", ","], "no gate id given"),
    (["--gates", ""], "no gate id given")])
def test_bad_options_are_usage_errors(args, needle):
    """Each refused before the check runs (an output that cannot be written too), in one line."""
    r = run("check", RELU / "reference.py", RELU / "correct.py", "--device", "cpu", "--gates", "G01", *args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "G01" not in r.stdout  # no report: nothing ran


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (a folder no file can be made in)")
def test_outputs_that_cannot_be_made_are_named(tmp_path):
    from kverify.journal import Journal

    j = tmp_path / "j.sqlite"
    Journal(j).close()
    r = run("merge", "/proc/kverify-test.sqlite", j)
    assert r.returncode == 2 and "/proc/kverify-test.sqlite: cannot create a journal there" in r.stderr, r.stderr
    r = run("report", j, "--out", "/proc/kverify-test-report")
    assert r.returncode == 2 and "--out /proc/kverify-test-report: cannot write the report there" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_tuple_for_tensor_fails_g01(tmp_path):
    c = cand(tmp_path, "class ModelNew(nn.Module):\n    def forward(self, x):\n        return (torch.relu(x),)\n")
    out = tmp_path / "r.json"
    r = run("check", RELU / "reference.py", c, "--device", "cpu", "--gates", "G01", "--json", out)
    g = json.loads(out.read_text())["gates"][0]
    assert r.returncode == 1 and g["verdict"] == "FAIL" and "tuple" in g["summary"]


def test_corpus_field_errors(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_text(json.dumps({"id": "h", "reference": "x", "candidate": "y", "harness": "strict"}) + "\n")
    r = run("check", "--corpus", f, "--id", "h")
    assert r.returncode == 2 and "harness" in r.stderr and "Traceback" not in r.stderr
    f.write_bytes(b"\xff\xfe{}\n")
    r = run("check", "--corpus", f, "--id", "h")
    assert r.returncode == 2 and "UTF-8" in r.stderr and "Traceback" not in r.stderr


def test_a_check_budget_cut_is_error_not_a_finding(tmp_path):
    """check(budget=S) (kverify audit --row-budget): calls still running when S seconds have
    passed are cut short; their gates and the standard test are ERROR (not established), not
    TIMEOUT, whose per-job timeout (60 s here) judges the candidate."""
    from kverify.check import check
    from kverify.errors import UsageError

    body = ("class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            "        import time; time.sleep(4)\n"
            "        return torch.relu(x)\n")
    ref = (RELU / "reference.py").read_text()
    c = cand(tmp_path, body)
    t = __import__("time").monotonic()
    rep = check(ref, "reference.py", c.read_text(), str(c), device="cpu", gates=["G01", "G04"], timeout=60.0,
                budget=3.0)
    assert __import__("time").monotonic() - t < 40  # G04 alone would call it many times (4 s each)
    by = {g["gate"]: g for g in rep["gates"]}
    for g in ("G01", "G04"):
        assert by[g]["verdict"] == "ERROR" and "time budget (3 s)" in by[g]["summary"], by[g]
    assert rep["standard"]["verdict"] == "ERROR" and "time budget" in rep["standard"]["summary"]
    with pytest.raises(UsageError):
        check(ref, "reference.py", c.read_text(), str(c), device="cpu", gates=["G01"], budget=0.0)


def test_the_budget_bounds_the_parents_oracle_runs(monkeypatch):
    """The budget also bounds the parent's work: an oracle run that would start after the deadline
    is refused (Oracle.limit raises BudgetSpent, a BaseException no `except Exception` around
    foreign code takes for a failure of the reference), and the gate that needed it is ERROR "not
    established" naming the budget, never judged and never a crash of the check; a gate that needs
    no reference run in the parent (G07) is judged as usual, while G04's reference runs are refused too. The deadline is made to pass right after the check's
    first oracle run (the candidate's own budget, 300 s, is far off), so nothing depends on timing."""
    import time

    from kverify import problem
    from kverify.check import check
    from kverify.errors import BudgetSpent
    from kverify.journal import cut_by_budget

    ref = (RELU / "reference.py").read_text()
    p = problem.Problem(ref, "reference.py", 1e-2)
    o = problem.Oracle(p, 0, "cpu")
    x = [torch.ones(3)]
    o.limit(time.monotonic() + 60, 60.0)
    o.run(x)  # before the deadline: runs
    o.limit(time.monotonic() - 1, 7.0)
    with pytest.raises(BudgetSpent, match=r"time budget \(7 s\)"):
        o.run(x)
    with pytest.raises(BudgetSpent):
        o.run_fp64(x)

    real_limit = problem.Oracle.limit
    monkeypatch.setattr(problem.Oracle, "limit", lambda self, deadline, budget: real_limit(self, time.monotonic(), budget))
    c = RELU / "correct.py"
    rep = check(ref, "reference.py", c.read_text(), str(c), device="cpu", gates=["G02", "G04", "G07"], budget=300.0,
                standard=False)
    by = {g["gate"]: g for g in rep["gates"]}
    for g in ("G02", "G04"):
        assert by[g]["verdict"] == "ERROR" and "oracle" in by[g]["summary"], by[g]
        assert cut_by_budget(by[g]["verdict"], by[g]["summary"]) and "(300 s)" in by[g]["summary"]
    assert by["G07"]["verdict"] == "PASS", by["G07"]


def test_a_finding_made_before_the_budget_ran_out_stands():
    """A gate whose first call hung until its timeout (a finding) and whose next call the budget
    then cut is TIMEOUT, not ERROR; with only cut calls it is ERROR."""
    from types import SimpleNamespace

    from kverify.check import _judge_gate
    from kverify.sandbox import Outcome

    plan = [{"id": "a"}, {"id": "b"}]
    cut = Outcome("budget", detail="the check's time budget (3 s) was spent before this call finished")
    for first, verdict in ((Outcome("timeout", detail="no result after 120 s"), "TIMEOUT"), (cut, "ERROR")):
        results = {}
        _judge_gate(SimpleNamespace(), "G04", plan, {"a": first, "b": cut}, results)
        assert results["G04"]["verdict"] == verdict, results


@pytest.mark.parametrize("body,verdict", [("        return torch.relu(x) * 0.5\n", "FAIL"),
                                          ("        return torch.relu(x)\n", "ERROR")])
def test_a_finding_made_before_the_oracle_was_refused_stands(tmp_path, monkeypatch, body, verdict):
    """G02 judges seed by seed; when the budget refuses the second seed's oracle, a first seed that
    already fails is the verdict (with the count of runs judged), otherwise the gate is ERROR, not
    established (gates.base.judge_partial; also G03, G06, G10, and G05's variants and shrinking)."""
    import time

    from kverify import problem

    real, calls = problem.Oracle.run, []

    def run(self, *a, **k):  # the check's first oracle run, then G02's first seed; then the deadline passes
        out = real(self, *a, **k)
        calls.append(1)
        if len(calls) == 2:
            self.deadline, self.budget = time.monotonic() - 1, 300.0
        return out
    monkeypatch.setattr(problem.Oracle, "run", run)
    ref = (RELU / "reference.py").read_text()
    c = cand(tmp_path, "class ModelNew(nn.Module):\n    def forward(self, x):\n" + body)
    rep = check_fn(ref, "reference.py", c.read_text(), str(c), device="cpu", gates=["G02"], standard=False)
    g = rep["gates"][0]
    assert g["verdict"] == verdict, g
    assert ("judged on 1 of 3 runs" in g["summary"]) == (verdict == "FAIL"), g["summary"]
    assert ("not established" in g["summary"]) == (verdict == "ERROR"), g["summary"]


@pytest.mark.parametrize("sigint", ["python", "ignored"])
def test_main_gives_the_callers_signal_handlers_back(tmp_path, sigint):
    """main() holds Ctrl-C and SIGTERM while it starts processes (its own handlers); called
    in-process it gives the caller's handlers back, and a Ctrl-C ignored at its start (`kverify
    ... &` from a script) stays ignored."""
    import signal

    from kverify import cli

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    mine = signal.default_int_handler if sigint == "python" else signal.SIG_IGN
    signal.signal(signal.SIGINT, mine)
    try:
        assert cli.main(["report", str(tmp_path / "missing.sqlite"), "--out", str(tmp_path / "r")]) == 2
        assert signal.getsignal(signal.SIGINT) == mine
        assert signal.getsignal(signal.SIGTERM) == before[1]
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


def test_demo_writes_the_examples_as_a_corpus_an_audit_reads(tmp_path):
    from kverify.corpus import identified_rows, row_sources
    from kverify.examples import candidates, problems

    out = tmp_path / "ex.jsonl"
    r = run("demo", "--write-corpus", out)
    assert r.returncode == 0 and f"{out}: " in r.stdout, r.stderr
    rows = [row for _, _, row in identified_rows(str(out))]
    want = {f"{p.name}/{f.stem}": gate for p in problems() for f, gate in candidates(p)}
    assert {row["id"]: row["planted"] for row in rows} == want and len(rows) == len(want) > 20
    for row in rows:
        src = row_sources(str(out), row)
        problem, name = row["id"].split("/")
        assert src.candidate == (problems()[0].parent / problem / f"{name}.py").read_text()
    assert run("demo", "--write-corpus", tmp_path).returncode == 2  # a folder: refused


def test_audit_gates_naming_none_is_refused_before_a_journal(tmp_path):
    corpus, j = tmp_path / "ex.jsonl", tmp_path / "j.sqlite"
    assert run("demo", "--write-corpus", corpus).returncode == 0
    for gates in (",", ""):
        r = run("audit", corpus, "--journal", j, "--device", "cpu", "--gates", gates)
        assert r.returncode == 2 and "no gate id given" in r.stderr and not j.exists(), (gates, r.stderr)


def test_an_output_is_probed_without_making_or_removing_it(tmp_path):
    from kverify.cli import _writable

    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "gone" / "r.json")  # dangling, into a folder that does not exist
    with pytest.raises(UsageError, match="does not exist"):
        _writable(str(link), "--json")
    (tmp_path / "gone").mkdir()
    _writable(str(link), "--json")
    assert link.is_symlink() and not (tmp_path / "gone" / "r.json").exists() and list((tmp_path / "gone").iterdir()) == []
    kept = tmp_path / "kept.json"
    kept.write_text("old")
    _writable(str(kept), "--json")
    assert kept.read_text() == "old"
