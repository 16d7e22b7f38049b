"""check() runs the standard test (and G11's sanitizer runs) beside the main worker, each in its
own process, and leaves no worker behind when it stops early."""
import os
import time
from pathlib import Path

import pytest

from kverify.check import check
from kverify.errors import LoadError
from kverify.examples import ROOT

RELU = ROOT / "relu"
HEAD = "import os, sys, time\nimport torch\nimport torch.nn as nn\n"


def _check(tmp_path: Path, body: str, **kw):
    ref = (RELU / "reference.py").read_text()
    return check(ref, str(RELU / "reference.py"), HEAD + body, str(tmp_path / "cand.py"), device="cpu",
                 workdir=tmp_path / "work", **kw)


def _relu_box(tmp_path: Path, body: str, jobs: int = 1):
    """(a CPU Sandbox for the relu example whose candidate is HEAD + ``body``, ``jobs`` run jobs
    "t0", "t1", ... at its own shape)."""
    from kverify.problem import Problem
    from kverify.sandbox import Sandbox
    ref = (RELU / "reference.py").read_text()
    specs = Problem(ref, str(RELU / "reference.py"), 1e-2).input_specs(0)
    todo = [{"kind": "run", "id": f"t{k}", "seed": 1, "binding": None, "inputs": [s.to_json() for s in specs]}
            for k in range(jobs)]
    sb = Sandbox(reference_source=ref, reference_path=str(RELU / "reference.py"), candidate_source=HEAD + body,
                 candidate_path=str(tmp_path / "cand.py"), device="cpu", workdir=tmp_path / "work")
    return sb, todo


def test_standard_test_runs_beside_the_gates(tmp_path):
    """Handshake while loading: each worker (named by its job folder, "gates" or "standard") leaves
    a mark, then waits up to 30 s for the other's mark. Both see each other only when the two
    workers run at the same time (run one after the other, the first waits in vain)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    body = (f"marks = Path({str(marks)!r}); me = Path(sys.argv[1]).name\n"
            "(marks / me).touch()\n"
            "other = marks / ('standard' if me == 'gates' else 'gates')\n"
            "deadline = time.time() + 30\n"
            "while not other.exists() and time.time() < deadline:\n"
            "    time.sleep(0.05)\n"
            "(marks / (me + '.saw')).write_text(str(other.exists()))\n"
            "class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return torch.relu(x)\n")
    r = _check(tmp_path, "from pathlib import Path\n" + body, gates=["G01", "G07"])
    assert r["standard"]["verdict"] == "PASS" and r["class"] == "CLEAN", r
    saw = {p.name: p.read_text() for p in marks.glob("*.saw")}
    assert saw == {"gates.saw": "True", "standard.saw": "True"}, saw  # the two workers overlapped


def _workers_of(workdir: Path) -> list[int]:
    pids = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                cmd = Path(f"/proc/{e}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "kverify._internal.worker" in cmd and str(workdir) in cmd:
                pids.append(int(e))
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_a_load_error_stops_the_background_worker(tmp_path):
    """The gates' worker fails to load while the standard test's worker hangs in its load: check()
    raises the load error at once and kills the hanging worker (not after --load-timeout)."""
    body = ("if os.path.basename(sys.argv[1]) == 'standard':\n"
            "    time.sleep(600)\n"
            "raise RuntimeError('planted load failure')\n")
    t = time.monotonic()
    with pytest.raises(LoadError, match="planted load failure"):
        _check(tmp_path, body, gates=["G01"], load_timeout=300)
    assert time.monotonic() - t < 120
    time.sleep(0.5)
    assert _workers_of(tmp_path / "work") == []


def _slow_check(tmp_path: Path, **popen):
    """`kverify check` on a candidate that sleeps 60 s at import, with TMPDIR=tmp_path/tmp (which
    marks its workers); returns (process, tmp) once a worker has started."""
    import subprocess
    import sys

    cand = tmp_path / "slow.py"
    cand.write_text(HEAD + "time.sleep(60)\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                           "        return torch.relu(x)\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "kverify", "check", str(RELU / "reference.py"), str(cand),
                             "--device", "cpu"], env={**os.environ, "TMPDIR": str(tmp)}, **popen)
    deadline = time.monotonic() + 60
    while not _workers_of(tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _workers_of(tmp), "no worker started"
    return proc, tmp


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_sigkill_during_a_slow_load_leaves_no_worker(tmp_path):
    """kverify killed with SIGKILL while its workers are still loading a candidate (a long
    compile, here a sleep at import): the workers end within seconds, not when the load ends."""
    import signal
    import subprocess

    proc, tmp = _slow_check(tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # let the workers reach their import of the candidate
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while _workers_of(tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _workers_of(tmp) == []


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_sigterm_says_interrupted_and_leaves_no_worker(tmp_path):
    """SIGTERM (a batch runner's timeout) or Ctrl-C: exit 130, one line saying so, no worker left."""
    import signal
    import subprocess

    proc, tmp = _slow_check(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "interrupted" in err and "Traceback" not in err, err
    assert _workers_of(tmp) == []


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("handlers", ["python", "kverify"])
def test_an_interrupt_inside_a_workers_start_leaves_no_worker(tmp_path, monkeypatch, handlers):
    """Ctrl-C (or SIGTERM, which the CLI turns into KeyboardInterrupt) that lands while Popen is
    starting a worker: cancel() still kills that worker. The start is made slow and sends SIGINT
    to the main thread after the process exists, before Popen returns; with the start in the main
    thread the interrupt left the new worker unregistered and running (seen in CI as a worker
    outliving `kverify check` after SIGTERM). ``handlers``: Python's own SIGINT handler (kverify
    as a library: the start runs in a thread of its own) or the CLI's (the interrupt is held
    until the worker is registered)."""
    import signal
    import subprocess
    import threading

    from kverify import cli
    from kverify import sandbox as sandbox_mod

    real, main, in_main = subprocess.Popen, threading.main_thread().ident, []

    class SlowStart(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            if "kverify._internal.worker" in a[0]:  # not the compiler probes made meanwhile
                in_main.append(threading.get_ident() == main)
                signal.pthread_kill(main, signal.SIGINT)
                time.sleep(2.0)  # a fork/exec under load: the child runs, Popen has not returned

    monkeypatch.setattr(sandbox_mod.subprocess, "Popen", SlowStart)
    sb, _ = _relu_box(tmp_path, "time.sleep(60)\n")
    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    if handlers == "kverify":
        signal.signal(signal.SIGINT, cli._sigint)
        signal.signal(signal.SIGTERM, cli._terminate)
    try:
        with pytest.raises(KeyboardInterrupt):
            sb.prestart("gates")
            time.sleep(5)  # not reached: the interrupt comes out of the start
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])
        sb.cancel()
    assert in_main == [handlers == "kverify"]  # held in the main thread, or started in another
    assert _workers_of(tmp_path / "work") == []
    sb.cleanup()


@pytest.mark.parametrize("when", ["before the thread exists", "after the thread began"])
def test_an_interrupt_inside_thread_start_is_waited_out_or_raised(monkeypatch, when):
    """kverify as a library: start_whole's own thread start interrupted. Before the thread exists
    nothing was started: KeyboardInterrupt within seconds, start() never runs. After it began:
    start() finishes (the child is registered) before KeyboardInterrupt is raised."""
    import threading

    from kverify._internal.lifeline import start_whole

    real, ran = threading.Thread.start, []

    def interrupted_start(self):
        if when == "after the thread began":
            real(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        start_whole(lambda: (time.sleep(1.0), ran.append(1)))
    assert ran == ([1] if when == "after the thread began" else [])
    assert time.monotonic() - t < 30


def test_an_interrupt_held_during_a_failed_start_is_raised_once():
    """Under the CLI's handlers an interrupt during a start that then fails is not lost (it comes
    out as KeyboardInterrupt, the failure as its context) and is not raised again by a later
    start."""
    import signal
    import threading

    from kverify import cli
    from kverify._internal.lifeline import start_whole

    main = threading.main_thread().ident

    def failing():
        signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.2)  # the handler runs (and holds it) meanwhile
        raise OSError("planted start failure")

    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGINT, cli._sigint)
    signal.signal(signal.SIGTERM, cli._terminate)
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            start_whole(failing)
        assert isinstance(e.value.__context__, OSError)
        ran = []
        start_whole(lambda: ran.append(1))  # nothing held any more
        assert ran == [1]
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])


def _reference_waiting_for_a_load(marks: Path, wait_s: float) -> str:
    """The relu reference, plus module code that, in kverify's own process only (workers have
    KVERIFY_PARENT_PID), waits up to wait_s for a candidate worker's load mark, and records whether
    it came: the reference is executed while the check prepares the problem and its jobs."""
    return (RELU / "reference.py").read_text() + (
        "\nimport os as _os, time as _time\nfrom pathlib import Path as _P\n"
        f"_marks = _P({str(marks)!r})\n"
        "if 'KVERIFY_PARENT_PID' not in _os.environ and not (_marks / 'ref.saw').exists():\n"
        f"    _deadline = _time.time() + {wait_s}\n"
        "    while not (_marks / 'cand').exists() and _time.time() < _deadline:\n"
        "        _time.sleep(0.05)\n"
        "    (_marks / 'ref.saw').write_text(str((_marks / 'cand').exists()))\n")


@pytest.mark.parametrize("prestart,wait_s,expect", [("1", 120, "True"), ("0", 3, "False")])
def test_workers_load_while_the_problem_is_prepared(tmp_path, monkeypatch, prestart, wait_s, expect):
    """KVERIFY_PRESTART=1: the workers are started first, so a candidate worker has loaded while the
    reference is still being executed by the check; =0 (the control): none has been started yet."""
    monkeypatch.setenv("KVERIFY_PRESTART", prestart)
    marks = tmp_path / "marks"
    marks.mkdir()
    ref = _reference_waiting_for_a_load(marks, wait_s)
    cand = HEAD + (f"from pathlib import Path\n(Path({str(marks)!r}) / 'cand').touch()\n"
                   "class ModelNew(nn.Module):\n"
                   "    def forward(self, x):\n"
                   "        return torch.relu(x)\n")
    r = check(ref, str(tmp_path / "reference.py"), cand, str(tmp_path / "cand.py"), device="cpu",
              workdir=tmp_path / "work", gates=["G01", "G07"])
    assert r["standard"]["verdict"] == "PASS" and r["class"] == "CLEAN", r
    assert (marks / "ref.saw").read_text() == expect


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_prestarted_workers_stop_when_the_reference_fails(tmp_path, monkeypatch):
    """The reference raises at its own shape after the workers were prestarted: check() reports the
    reference's error, and no prestarted worker (that never got jobs) is left running."""
    monkeypatch.setenv("KVERIFY_PRESTART", "1")
    ref = (RELU / "reference.py").read_text().replace("def forward(self, x", "def forward(self, x, *_a")
    ref = ref.replace("return torch.relu(x)", "raise RuntimeError('planted reference failure')")
    assert "planted reference failure" in ref
    cand = HEAD + "time.sleep(3)\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    with pytest.raises(LoadError, match="planted reference failure"):
        check(ref, str(tmp_path / "reference.py"), cand, str(tmp_path / "cand.py"), device="cpu",
              workdir=tmp_path / "work")
    time.sleep(0.5)
    assert _workers_of(tmp_path / "work") == []


@pytest.mark.parametrize("prestart", ["1", "0"])
@pytest.mark.parametrize("gate,tag", [("G05", "G05"), ("G09", "gates-b"), ("G10", "gates-b")])
def test_split_gates_run_in_their_own_worker_beside_the_gates(tmp_path, monkeypatch, prestart, gate, tag):
    """With prestarting, G05 (whose planning runs the reference at every variant) and G09/G10 (the
    slowest of the rest) are planned in the background and run in a worker of their own beside the
    other gates' worker: a handshake between the workers named "gates" and ``tag`` succeeds. Without
    (the control), their jobs run in the gates' worker and no ``tag`` worker exists."""
    from kverify.check import worker_of
    assert worker_of(gate) == tag
    monkeypatch.setenv("KVERIFY_PRESTART", prestart)
    marks = tmp_path / "marks"
    marks.mkdir()
    body = (f"from pathlib import Path\nmarks = Path({str(marks)!r}); me = Path(sys.argv[1]).name\n"
            "(marks / me).touch()\n"
            f"if me in ('gates', {tag!r}):\n"
            f"    other = marks / ({tag!r} if me == 'gates' else 'gates')\n"
            "    deadline = time.time() + (60 if os.environ.get('KVERIFY_PRESTART') == '1' else 1)\n"
            "    while not other.exists() and time.time() < deadline:\n"
            "        time.sleep(0.05)\n"
            "    (marks / (me + '.saw')).write_text(str(other.exists()))\n"
            "class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return torch.relu(x)\n")
    r = _check(tmp_path, body, gates=["G01", gate])
    assert r["class"] == "CLEAN" and [g["verdict"] for g in r["gates"]] == ["PASS", "PASS"], r
    saw = {p.name: p.read_text() for p in marks.glob("*.saw")}
    if prestart == "1":
        assert saw == {"gates.saw": "True", f"{tag}.saw": "True"}, saw
    else:
        assert saw == {"gates.saw": "False"}, saw


@pytest.mark.parametrize("run_env,expect", [("pre", "pre"), ("other", "other")])
def test_a_prestarted_worker_takes_only_the_run_it_was_started_for(tmp_path, run_env, expect):
    """Sandbox.run hands its jobs to the worker prestarted for its tag only when that worker was
    started with the same wrapper and env; else it starts its own (the job sees the run's env)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    sb, jobs = _relu_box(tmp_path, "class ModelNew(nn.Module):\n"
                                   "    def forward(self, x):\n"
                                   f"        open({str(marks / 'ran')!r}, 'w').write(os.environ['KV_TEST_MARK'])\n"
                                   "        return torch.relu(x)\n")
    try:
        sb.prestart("t", env={"KV_TEST_MARK": "pre"})
        out = sb.run(jobs, tag="t", env={"KV_TEST_MARK": run_env})
        assert out[0].status == "ok", out[0]
        assert (marks / "ran").read_text() == expect
        assert len(list((tmp_path / "work" / "t").glob("worker_*.log"))) == (1 if run_env == "pre" else 2)
    finally:
        sb.cancel()
        sb.cleanup()


@pytest.mark.parametrize("where", ["gates-b", "G05", "nowhere"])
def test_g12_sees_tampering_in_the_other_gate_workers(tmp_path, monkeypatch, where):
    """A candidate that replaces a timer only in the worker running G09/G10 ("gates-b") or G05's
    worker is caught by G12, whose own job runs in the main worker: each worker reports G12's
    process-wide findings after its last job. "nowhere" is the correct twin."""
    monkeypatch.setenv("KVERIFY_PRESTART", "1")
    body = ("from pathlib import Path\n"
            "class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            f"        if Path(sys.argv[1]).name == {where!r}:\n"
            "            time.perf_counter = lambda: 0.0\n"
            "        return torch.relu(x)\n")
    r = _check(tmp_path, body, gates=["G01", "G05", "G09", "G12"])
    g12 = next(g for g in r["gates"] if g["gate"] == "G12")
    if where == "nowhere":
        assert g12["verdict"] == "PASS", g12
    else:
        assert g12["verdict"] == "FAIL" and "perf_counter" in g12["summary"], g12
        assert where in g12["evidence"]["other_workers"], g12


def test_a_worker_left_with_a_non_daemon_thread_still_ends(tmp_path, monkeypatch):
    """A candidate that leaves a non-daemon thread running does not keep its worker alive (the
    worker ends with os._exit after its last line): the check finishes and G12 reports the thread."""
    monkeypatch.setenv("KVERIFY_PRESTART", "0")
    body = ("import threading\n"
            "class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            "        threading.Thread(target=time.sleep, args=(600,), daemon=False).start()\n"
            "        return torch.relu(x)\n")
    t = time.monotonic()
    r = _check(tmp_path, body, gates=["G01", "G12"], standard=False)
    assert time.monotonic() - t < 90
    g12 = next(g for g in r["gates"] if g["gate"] == "G12")
    assert g12["verdict"] == "FAIL" and "thread" in g12["summary"], g12


@pytest.mark.parametrize("prestart", ["0", "1"])
def test_g04_runs_the_reference_at_its_own_shape_after_g05_planned_others(tmp_path, monkeypatch, prestart):
    """G05's planning binds the free dimensions to its variants; G04's judge then runs the
    reference and must bind the job's own shape first (a reference that reads N in forward would
    otherwise fail: G04 ERROR)."""
    monkeypatch.setenv("KVERIFY_PRESTART", prestart)
    ref = ("import torch\nimport torch.nn as nn\nN = 64\n"
           "class Model(nn.Module):\n"
           "    def forward(self, x):\n"
           "        return torch.relu(x.reshape(N, -1)).reshape(-1)\n"
           "def get_inputs():\n    return [torch.randn(N * 8)]\n"
           "def get_init_inputs():\n    return []\n")
    cand = ref.replace("class Model(", "class ModelNew(")
    r = check(ref, str(tmp_path / "reference.py"), cand, str(tmp_path / "cand.py"), device="cpu",
              workdir=tmp_path / "work", gates=["G04", "G05"], standard=False)
    assert [g["verdict"] for g in r["gates"]] == ["PASS", "PASS"], r["gates"]


def test_a_result_the_worker_cannot_write_is_a_kverify_fault_not_a_crash(tmp_path):
    """The worker saves each job's result to a file; when it cannot (a full disk on the H200 audit,
    stop 20: PyTorch's 'enforce fail at inline_container.cc' ended the worker, and three gates of
    two rows were CRASH/FAIL for it) it says so on its status pipe, the job is a kverify fault
    ("error": the gates' ERROR, G05's SKIPPED), and the next job runs in the same worker."""
    (tmp_path / "work" / "t" / "result_0.pt.tmp").mkdir(parents=True)  # where job 0's result goes first
    sb, jobs = _relu_box(tmp_path, "class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n",
                         jobs=2)
    try:
        out = sb.run(jobs, tag="t")
        workers = len(list((tmp_path / "work" / "t").glob("worker_*.log")))
    finally:
        sb.cancel()
        sb.cleanup()
    assert out[0].status == "ok" and "could not write the job's result" in out[0].result["error"], out[0]
    assert out[1].status == "ok" and "error" not in out[1].result, out[1]
    assert workers == 1  # one worker did both


@pytest.mark.parametrize("cudnn", ["0", None])
def test_a_worker_told_kverify_cudnn_0_runs_the_candidate_without_cudnn(tmp_path, cudnn):
    """KVERIFY_CUDNN=0 in a worker's environment (G11 gives it to its racecheck runs) turns
    PyTorch's cuDNN off before the candidate loads; without it the setting is PyTorch's own."""
    marks = tmp_path / "marks"
    marks.mkdir()
    sb, jobs = _relu_box(tmp_path, "class ModelNew(nn.Module):\n"
                                   "    def forward(self, x):\n"
                                   f"        open({str(marks / 'cudnn')!r}, 'w').write(str(torch.backends.cudnn.enabled))\n"
                                   "        return torch.relu(x)\n")
    try:
        out = sb.run(jobs, tag="t", env={"KVERIFY_CUDNN": cudnn} if cudnn else {})
    finally:
        sb.cancel()
        sb.cleanup()
    assert out[0].status == "ok", out[0]
    assert (marks / "cudnn").read_text() == ("False" if cudnn == "0" else "True")


@pytest.mark.parametrize("keep", [False, True])
def test_each_result_file_is_removed_once_read_unless_kept(tmp_path, monkeypatch, keep):
    """A job's result file goes as soon as the parent has read it (a check of large outputs kept
    them all until its end, and 7 such checks at once filled the H200's 64 GiB disk, stop 21:
    compilers and workers then failed to write); KVERIFY_KEEP=1 keeps them for debugging."""
    if keep:
        monkeypatch.setenv("KVERIFY_KEEP", "1")
    else:
        monkeypatch.delenv("KVERIFY_KEEP", raising=False)
    sb, jobs = _relu_box(tmp_path, "class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n",
                         jobs=2)
    try:
        out = sb.run(jobs, tag="t")
        left = sorted(p.name for p in (tmp_path / "work" / "t").glob("result_*"))
    finally:
        sb.cancel()
        if not keep:
            sb.cleanup()
    assert [o.status for o in out] == ["ok", "ok"] and all(o.result for o in out), out
    assert left == (["result_0.pt", "result_1.pt"] if keep else []), left
