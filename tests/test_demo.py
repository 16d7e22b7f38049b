"""Positive controls: every planted defect (embedded examples and controls/) is caught by its
intended gate, and every correct twin passes all twelve gates (CPU). This is `kverify controls`'
own exit condition; `kverify demo` runs the examples alone."""
import subprocess
import sys


def test_controls_all_caught_no_false_alarms():
    r = subprocess.run([sys.executable, "-m", "kverify", "controls", "--device", "cpu"], capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    assert "caught by intended gate 40/40, false alarms on twins 0" in r.stdout


def test_demo_runs_examples():
    r = subprocess.run([sys.executable, "-m", "kverify", "demo", "--device", "cpu", "--gates", "G03"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "caught by their intended gate: 4/4" in r.stdout
