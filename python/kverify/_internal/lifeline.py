"""Processes that end when the process that started them dies (no orphans after a `kill -9`)."""
from __future__ import annotations

import os
import signal
import threading
import time


def exit_with_parent(code: int = 70, period: float = 0.5, origin: str | int | None = None) -> None:
    """Start a daemon thread that ends this process with ``code`` once its parent has gone (the
    parent pid changes when the parent dies and the process is re-parented) or, when ``origin``
    names a pid (the kverify process that started a chain such as compute-sanitizer -> worker),
    once that process is gone. Both are checked once at once: a parent that died before this
    call (e.g. while the worker was still starting Python) ends it immediately."""
    parent = os.getppid()
    origin_pid = int(origin) if origin else None

    def gone() -> bool:
        return os.getppid() != parent or (origin_pid is not None and not alive(origin_pid))

    if gone():
        os._exit(code)

    def watch():
        while True:
            if gone():
                os._exit(code)
            time.sleep(period)

    threading.Thread(target=watch, daemon=True, name="kverify-parent-watch").start()


def alive(pid: int) -> bool:
    """Is process ``pid`` running? A zombie (dead, not yet reaped) is not: kill(pid, 0) still
    succeeds on one, and a parent that never reaps (a container's PID 1, or a killed audit whose
    row processes were re-parented there) keeps it so for good. On the H200 that kept a G11
    racecheck worker (compute-sanitizer -> worker: its parent lives on, only its origin, the
    SIGKILLed row process, had died) busy on two cores and the GPU for the whole next device call
    (stop 25). Linux /proc gives the state; without /proc, kill(pid, 0) alone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]  # field 3, after the (command) that may hold spaces
    except FileNotFoundError:
        return not os.path.isdir("/proc/self")  # gone since the kill(), unless there is no /proc at all
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


#: > 0 while the main thread is inside start_whole: interrupt() then holds Ctrl-C / SIGTERM
_deferring = [0]
#: signals interrupt() held meanwhile; start_whole raises KeyboardInterrupt for them afterwards
_held: list[int] = []


def interrupt(signum: int) -> None:
    """Body of kverify's SIGINT and SIGTERM handlers (kverify.cli installs them): raise
    KeyboardInterrupt, unless the main thread is starting a process in start_whole -- then the
    interrupt is held and raised there once the process is registered."""
    if _deferring[0]:
        _held.append(signum)
        return
    raise KeyboardInterrupt


def defers(handler) -> bool:
    """Is ``handler`` (as signal.getsignal gives it) one that holds interrupts (calls interrupt())?"""
    return bool(getattr(handler, "kverify_defers", False))


def start_whole(start) -> None:
    """Call ``start()`` -- a process start and its registration (in the set of processes that
    are killed when the caller stops) -- so that Ctrl-C or SIGTERM cannot fall between the two.
    Raised inside ``Popen`` after the fork, KeyboardInterrupt would leave a child nobody kills
    (it lives on until its lifeline notices this process gone, and a prestarted worker of a
    long-lived process not even then). Only the main thread receives KeyboardInterrupt:

    - where kverify's handlers are installed (the CLI: SIGINT's and SIGTERM's call interrupt(),
      or the signal is ignored), the main thread runs ``start()`` with interrupts held, and
      raises KeyboardInterrupt after it if one came meanwhile (also when ``start()`` failed);
    - otherwise (kverify used as a library, Python's own SIGINT handler) ``start()`` runs in a
      thread of its own and the main thread waits for it, past further interrupts, before raising
      the first. Left: an interrupt at the very instant an earlier one is being kept.

    Exceptions of ``start()`` are raised here."""
    if threading.current_thread() is not threading.main_thread():
        start()  # no KeyboardInterrupt is raised in this thread
        return
    held = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    if all(defers(h) or h == signal.SIG_IGN for h in held):
        if not _deferring[0]:
            _held.clear()  # raised already (a second signal while an earlier start ended)
        _deferring[0] += 1
        try:
            start()
        finally:
            _deferring[0] -= 1
            if _held and not _deferring[0]:
                _held.clear()
                raise KeyboardInterrupt  # noqa: B012 -- the interrupt is not lost to start()'s error
        return
    failed: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            start()
        except BaseException as e:  # noqa: BLE001 -- raised in the caller's thread
            failed.append(e)
        finally:
            done.set()

    thread = threading.Thread(target=run, name="kverify-start", daemon=True)
    first: BaseException | None = None
    gone_by = None
    while True:  # the start and the wait inside one try (a loop's backward jump also runs handlers)
        try:
            if gone_by is None:
                gone_by = time.monotonic() + 5.0
                thread.start()
            while not done.wait(0.5):  # an Event: CPython 3.11 marks a thread whose join was
                if first is not None and not thread.is_alive() and time.monotonic() > gone_by:
                    break  # interrupted as ended. Here: interrupted before the thread existed
            break
        except BaseException as e:
            first = first or e
            if gone_by is None or (not done.is_set() and not thread.is_alive() and time.monotonic() > gone_by):
                break  # (interrupts every < 0.5 s must not keep it waiting for a thread that never began)
    if first is not None:
        raise first
    if failed:
        raise failed[0]
