"""kverify._internal.lifeline: a worker ends when the kverify process that started it is gone, a
zombie included (the stop-25 orphan: a racecheck worker whose SIGKILLed origin was never reaped)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kverify._internal.lifeline import alive

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _zombie() -> subprocess.Popen:
    """A child killed and not reaped: a zombie until the caller waits for it."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    os.kill(p.pid, signal.SIGKILL)
    for _ in range(200):
        with open(f"/proc/{p.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return p
        time.sleep(0.05)
    raise AssertionError("the killed child never became a zombie")


def test_this_process_is_alive_and_a_reaped_one_is_not():
    assert alive(os.getpid())
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert not alive(p.pid)


@needs_proc
def test_a_zombie_is_not_alive():
    p = _zombie()
    try:
        os.kill(p.pid, 0)  # what the lifeline used to ask: a zombie answers
        assert not alive(p.pid)
    finally:
        p.wait()


@needs_proc
def test_a_worker_ends_when_its_origin_is_a_zombie():
    """The worker's parent lives on (as compute-sanitizer does), only its origin died, unreaped."""
    origin = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    code = ("import sys, time; from kverify._internal.lifeline import exit_with_parent; "
            "exit_with_parent(code=70, period=0.05, origin=sys.argv[1]); print('watching', flush=True); time.sleep(60)")
    w = subprocess.Popen([sys.executable, "-c", code, str(origin.pid)], stdout=subprocess.PIPE, text=True)
    try:
        assert w.stdout.readline().strip() == "watching"  # the origin was alive when the lifeline began
        os.kill(origin.pid, signal.SIGKILL)  # not reaped until the end: a zombie meanwhile
        assert w.wait(timeout=20) == 70
    finally:
        w.kill()
        w.wait()
        origin.wait()
