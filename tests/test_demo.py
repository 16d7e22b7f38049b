"""Positive controls: every planted defect (embedded examples and controls/) is caught by its
intended gate, and every correct twin passes all twelve gates (CPU). This is `kverify controls`'
own exit condition; `kverify demo` runs the examples alone."""
import subprocess
import sys


def test_controls_all_caught_no_false_alarms():
    r = subprocess.run([sys.executable, "-m", "kverify", "controls", "--device", "cpu"], capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    assert "caught by intended gate 41/41, false alarms on twins 0" in r.stdout


def test_demo_runs_examples():
    r = subprocess.run([sys.executable, "-m", "kverify", "demo", "--device", "cpu", "--gates", "G03"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "caught by their intended gate: 4/4" in r.stdout


def test_controls_can_be_selected_by_name():
    from kverify.controls import collect, select
    from kverify.errors import UsageError

    work = collect("cuda")  # the CUDA controls are listed (not run) without a GPU
    g11 = select(work, ["g11"])
    assert {w[0] for w in g11} >= {"cuda/g11_missing_syncthreads_cuda/defect", "cuda/g11_missing_syncthreads_cuda/twin"}
    assert all("g11" in w[0] for w in g11) and len(g11) < len(work)
    assert select(work, None) == work
    try:
        select(work, ["no_such_control"])
    except UsageError as e:
        assert "no_such_control" in str(e)
    else:
        raise AssertionError("an --only that matches nothing must be a usage error")


def test_an_empty_only_and_jobs_below_one_are_usage_errors():
    import subprocess
    import sys

    for args, words in ((["controls", "--only", ""], "--only"), (["controls", "--jobs", "0"], "--jobs"),
                        (["demo", "--jobs", "-1"], "--jobs")):
        r = subprocess.run([sys.executable, "-m", "kverify", *args, "--device", "cpu"], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
