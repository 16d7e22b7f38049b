"""Every planted defect of the embedded examples is caught by its intended gate, and the correct
twins pass every gate (CPU). This is the demo's own exit condition."""
import subprocess
import sys


def test_demo_catches_every_planted_defect():
    r = subprocess.run([sys.executable, "-m", "kverify", "demo", "--device", "cpu"], capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "caught by their intended gate: 24/24" in r.stdout
    assert "false alarms on correct twins: 0" in r.stdout
