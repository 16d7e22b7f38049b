"""Candidate isolation (DESIGN.md "Isolation"): the candidate runs in a child process that holds
no expected output; a crash, hang or exit of the candidate is a verdict, never a crash of kverify.

The parent writes the job list; the child (kverify._internal.worker) reports each finished job on
a status pipe. When the child dies during job k, job k is CRASH and a new child resumes at k+1;
when job k outlives its timeout the child's process group is killed, job k is TIMEOUT and a new
child resumes at k+1.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from kverify._internal import CUDNN_ENV
from kverify._internal.lifeline import start_whole
from kverify.build import build_env
from kverify.errors import LoadError
from kverify.journal import BUDGET_MARK

#: glibc, CPU runs (G08): every fresh allocation is filled with 0xA5 bytes (MALLOC_PERTURB_=0x5A;
#: glibc fills with the complement) and the per-thread cache, which skips that fill, is off.
CPU_MALLOC_ENV = {"MALLOC_PERTURB_": str(0x5A), "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}


@dataclass
class Outcome:
    """What became of one job: status "ok" (result holds the worker's dict), "crash" or
    "timeout" (detail says how: exit code or signal, and the tail of the candidate's output), or
    "budget" (the check's deadline came first: not run or not finished, no finding either way)."""

    status: str
    result: dict | None = None
    detail: str = ""
    log: str = ""  #: the worker's combined stdout/stderr file (sanitizer reports land here)
    seconds: float = 0.0  #: wall time of the job in the worker (from the previous report to this one)


@dataclass
class Sandbox:
    """Runs jobs against one candidate in isolated worker processes.

    Args:
        reference_source / reference_path: the problem file's text and its display name.
        candidate_source / candidate_path: the candidate's text and its display name.
        device: "cpu" or "cuda".
        seed: base seed (weights and inputs derive from it).
        timeout: seconds allowed per job (the candidate's calls in it).
        load_timeout: seconds allowed to import/compile the candidate.
        budget: seconds, from the sandbox's creation, within which every job must be done (None: no
            limit). A job the budget cuts short, and every job after it in the same run(), is
            "budget", not "timeout": the per-job timeout judges the candidate, the budget only
            bounds the check (kverify audit --row-budget).
    """

    reference_source: str
    reference_path: str
    candidate_source: str
    candidate_path: str
    device: str = "cpu"
    seed: int = 0
    timeout: float = 120.0
    load_timeout: float = 900.0
    tolerance: float = 1e-2
    budget: float | None = None
    #: under $KVERIFY_WORKDIR_ROOT when set (an audit's check and build processes: their audit
    #: removes that folder when it ends, so a process it killed leaves nothing behind), else TMPDIR
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(
        prefix="kverify-", dir=os.environ.get("KVERIFY_WORKDIR_ROOT") or None)))

    def __post_init__(self):
        self.deadline = None if self.budget is None else time.monotonic() + self.budget
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "reference.py").write_text(self.reference_source)
        (self.workdir / "candidate.py").write_text(self.candidate_source)
        self._launches = 0
        self.load_seconds: list[float] = []  #: time from each worker launch to "loaded" (import + compile)
        #: CPU seconds (user + system, with its waited-for children such as compilers) of each worker
        #: that ended normally, summed per tag; a sanitized worker's own process only (the
        #: compute-sanitizer front end around it is not counted)
        self.cpu_seconds: dict[str, float] = {}
        #: tag -> G12's process-wide findings ({"patched": [...], "threads_added": n}) of the last
        #: worker of that tag that ended normally, taken after all its jobs
        self.tampering: dict[str, dict] = {}
        self._live: set = set()  # running workers (run() may be called from several threads)
        self._lock = threading.Lock()
        self._cancelled = False
        self._prestarted: dict[str, tuple] = {}  # tag -> (worker, wrapper, env) loading ahead of its jobs

    def _env(self) -> dict:
        env = dict(os.environ)
        env.pop(CUDNN_ENV, None)  # only the runs that ask for it (G11's racecheck) go without cuDNN
        env.update(build_env(self.candidate_source))  # content-addressed extension cache (kverify.build)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONHASHSEED"] = "0"  # the same allocation sequence run to run (address-keyed defects)
        env["KVERIFY_PARENT_PID"] = str(os.getpid())  # the worker ends when this process is gone
        if self.device == "cpu":
            env.update(CPU_MALLOC_ENV)
        return env

    def cancel(self) -> None:
        """Kill every running worker and refuse new launches (run() then raises Cancelled);
        check() calls it on its way out so no background worker outlives the check."""
        with self._lock:
            self._cancelled = True
            live = list(self._live)
            unused = list(self._prestarted.values())
            self._prestarted.clear()
        for proc in live:
            self._kill(proc)
        for (_, reader, _, _), _, _ in unused:  # prestarted workers that never got jobs
            reader.close()

    def cleanup(self) -> None:
        """Remove the work folder (kept when KVERIFY_KEEP=1, for debugging)."""
        if not _keep():
            shutil.rmtree(self.workdir, ignore_errors=True)

    def prestart(self, tag: str = "gates", wrapper: list[str] | None = None, env: dict | None = None) -> None:
        """Start the worker of ``tag`` now, before its jobs are known: it imports torch and loads the
        candidate while the caller prepares the jobs; the next run() of ``tag`` with the same
        ``wrapper`` and ``env`` hands them to it (a run() with others kills it and starts its own). Cheap
        to waste: cancel() and the end of the check stop a prestarted worker that never got jobs."""
        jobdir = self.workdir / tag
        jobdir.mkdir(exist_ok=True)
        worker = self._spawn(jobdir, None, 0, wrapper or [], env or {})
        with self._lock:
            self._prestarted[tag] = (worker, wrapper or [], env or {})

    def run(self, jobs: list[dict], tag: str = "gates", wrapper: list[str] | None = None,
            timeout: float | None = None, env: dict | None = None,
            on_outcome: Callable[[int, Outcome], None] | None = None) -> list[Outcome]:
        """Run ``jobs`` in order; returns one Outcome per job. ``wrapper`` prefixes the worker's
        command (e.g. compute-sanitizer and its flags); ``timeout`` overrides the per-job timeout;
        ``env`` adds environment variables for the worker. A worker prestart()ed for ``tag`` takes
        the jobs; a worker started after a crash or timeout is started with its jobs.
        ``on_outcome(k, outcome)`` is called in this thread as soon as job k's outcome is known
        (once per job, in job order), while the worker goes on with the next jobs; it must return
        quickly (the worker's status lines are read here, and the per-job timeouts and the budget
        count while it runs): kverify.check hands the outcome to its judging thread, which judges
        a gate as soon as its last job is in and drops its outputs.

        Raises:
            LoadError: the candidate cannot be loaded (syntax, missing ModelNew, compile error,
                exit or crash while loading, load timeout).
        """
        jobdir = self.workdir / tag
        jobdir.mkdir(exist_ok=True)
        outcomes = _Outcomes(len(jobs), on_outcome)
        start = 0
        while start < len(jobs):
            if self._budget_left() <= 0:  # e.g. after a crash: no new worker past the deadline
                start = self._out_of_budget(outcomes, start, len(jobs), when="before this call began")
                break
            with self._lock:  # the prestarted worker, if it was started as this run would start one
                pre = self._prestarted.pop(tag, None)
            worker = None
            if pre is not None and pre[1] == (wrapper or []) and pre[2] == (env or {}):
                worker = pre[0]
            elif pre is not None:  # started otherwise: it must not read this run's spec in the same folder
                self._discard(pre[0])
            start = self._launch(jobs, start, jobdir, outcomes, wrapper or [], timeout or self.timeout, env or {},
                                 worker)
        return outcomes  # type: ignore[return-value]

    def _budget_left(self) -> float:
        """Seconds to the deadline (inf without one)."""
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def _out_of_budget(self, outcomes, start: int, end: int, log: str = "", when: str = "before this call finished") -> int:
        """Mark jobs start..end-1 "budget" (``log``: the worker's output so far, where a sanitizer
        may already have reported findings; ``when``: how far it got); returns end."""
        for k in range(start, end):
            outcomes[k] = Outcome("budget", detail=f"{BUDGET_MARK} ({self.budget:g} s) was spent {when}", log=log)
        return end

    def _discard(self, worker: tuple) -> None:
        """Kill a prestarted worker that will not be used and close its status pipe."""
        proc, reader, _, _ = worker
        self._kill(proc)
        reader.close()
        with self._lock:
            self._live.discard(proc)

    def _spawn(self, jobdir: Path, jobs: list[dict] | None, start: int, wrapper: list[str], env: dict) -> tuple:
        """Start a worker on ``jobs`` from ``start`` (None: it waits for jobs.json); returns
        (process, status reader, launch time, log path)."""
        spec = {"reference": {"file": str(self.workdir / "reference.py"), "path": self.reference_path},
                "candidate": {"file": str(self.workdir / "candidate.py"), "path": self.candidate_path},
                "device": self.device, "seed": self.seed, "tolerance": self.tolerance}
        if jobs is not None:
            spec.update(jobs=jobs, start=start)
        (jobdir / "jobs.json").unlink(missing_ok=True)
        (jobdir / "spec.json").write_text(json.dumps(spec))
        (jobdir / "load_error.json").unlink(missing_ok=True)
        rfd, wfd = os.pipe()
        started: dict = {}

        def start() -> None:
            with self._lock:
                if self._cancelled:
                    return
                self._launches += 1
                log_path = jobdir / f"worker_{self._launches}.log"
                with open(log_path, "wb") as log:
                    proc = subprocess.Popen([*wrapper, sys.executable, "-m", "kverify._internal.worker", str(jobdir),
                                             str(wfd)], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            pass_fds=(wfd,), env={**self._env(), **env}, start_new_session=True)
                self._live.add(proc)
                started.update(proc=proc, log=log_path)

        try:
            start_whole(start)  # an interrupt cannot come between the start and the registration in _live
        except BaseException:  # a started worker is in _live: cancel() kills it
            os.close(wfd), os.close(rfd)
            raise
        os.close(wfd)
        if "proc" not in started:
            os.close(rfd)
            raise Cancelled("the check was stopped")
        return started["proc"], _Lines(rfd), time.monotonic(), started["log"]

    def _launch(self, jobs, start, jobdir: Path, outcomes, wrapper: list[str], timeout: float, env: dict,
                prestarted: tuple | None = None) -> int:
        if prestarted is not None:  # hand the jobs to the worker already loading (atomic: it polls for the file)
            proc, reader, t0, log_path = prestarted
            if self._cancelled:
                reader.close()
                raise Cancelled("the check was stopped")
            tmp = jobdir / "jobs.json.tmp"
            tmp.write_text(json.dumps({"jobs": jobs, "start": start}))
            os.replace(tmp, jobdir / "jobs.json")
        else:
            proc, reader, t0, log_path = self._spawn(jobdir, jobs, start, wrapper, env)
        try:
            load_wait = min(self.load_timeout, max(self._budget_left(), 0.0))
            line = reader.next(load_wait)
            self.load_seconds.append(round(time.monotonic() - t0, 3))
            if line is None and load_wait < self.load_timeout:  # the deadline came during loading
                self._kill(proc)
                return self._out_of_budget(outcomes, start, len(jobs), str(log_path),
                                           "before this worker had loaded the candidate")
            if line != "loaded":
                self._kill(proc)
                self._raise_load_error(jobdir, proc, line, log_path)
            t_job = time.monotonic()
            for k in range(start, len(jobs)):
                wait = min(timeout, max(self._budget_left(), 0.0))
                line = reader.next(wait)
                if line is None and wait < timeout:  # the deadline, not the job's timeout
                    self._kill(proc)
                    return self._out_of_budget(outcomes, k, len(jobs), str(log_path))
                if line == f"done {k}" or (line or "").startswith(f"fault {k} "):
                    if line == f"done {k}":
                        result = jobdir / f"result_{k}.pt"
                        value = torch.load(result, weights_only=False)
                        if not _keep():  # in memory now: a check of large outputs must not fill the disk
                            result.unlink(missing_ok=True)
                    else:  # kverify's own failure in the worker: a kverify fault ("error", as for an
                        # exception of kverify's there), never a finding
                        value = {"error": json.loads(line[len(f"fault {k} "):])}
                    outcomes[k] = Outcome("ok", value, log=str(log_path), seconds=round(time.monotonic() - t_job, 3))
                    t_job = time.monotonic()
                    continue
                if line is None:  # timed out
                    self._kill(proc)
                    outcomes[k] = Outcome("timeout", detail=f"no result after {timeout:g} s; "
                                                            f"output tail: {_tail(log_path)}", log=str(log_path))
                else:  # EOF: the process ended during job k
                    rc = proc.wait()
                    outcomes[k] = Outcome("crash", detail=f"{describe_exit(rc)} during the call; "
                                                          f"output tail: {_tail(log_path)}", log=str(log_path))
                return k + 1
            self._read_end(jobdir.name, reader.next(min(30.0, max(self._budget_left(), 0.5))))
            try:
                proc.wait(timeout=min(120.0, max(self._budget_left(), 0.5)))
            except subprocess.TimeoutExpired:  # its results are in; whatever keeps it alive is not ours to wait for
                self._kill(proc)
            return len(jobs)
        finally:
            reader.close()
            if proc.poll() is None:
                self._kill(proc)
            with self._lock:
                self._live.discard(proc)

    def _read_end(self, tag: str, line) -> None:
        """Record the worker's last status line, "end {cpu, patched, threads_added}" (JSON); a
        missing or malformed line (the candidate shares the worker's process) is ignored."""
        if not line or not line.startswith("end "):
            return
        try:
            end = json.loads(line[4:])
            cpu = float(end["cpu"])
            tampering = {"patched": [str(p) for p in end["patched"]], "threads_added": int(end["threads_added"])}
        except (ValueError, KeyError, TypeError):
            return
        with self._lock:
            self.cpu_seconds[tag] = round(self.cpu_seconds.get(tag, 0.0) + cpu, 2)
            self.tampering[tag] = tampering

    def _raise_load_error(self, jobdir: Path, proc, line, log_path: Path):
        err = jobdir / "load_error.json"
        if err.exists():
            e = json.loads(err.read_text())
            raise LoadError(e["path"], e["reason"], e.get("detail", ""))
        if line is None:
            raise LoadError(self.candidate_path, f"loading/compiling took longer than {self.load_timeout:g} s")
        rc = proc.wait()
        raise LoadError(self.candidate_path, f"candidate {describe_exit(rc)} while loading; "
                                             f"output tail: {_tail(log_path)}")

    @staticmethod
    def _kill(proc) -> None:
        """SIGKILL the worker's whole session: its process group, and the processes that left
        it for their own group but stay in its session (ninja starts every compiler so)."""
        kill_session(proc.pid)
        proc.wait()


class _Outcomes(list):
    """Sandbox.run's list of outcomes (None until known) that hands each outcome to ``hook(k,
    outcome)`` as it is set: every path that sets one (a result, a crash, a timeout, the budget)
    reaches the hook without each having to call it."""

    def __init__(self, n: int, hook: Callable[[int, Outcome], None] | None):
        super().__init__([None] * n)
        self._hook = hook

    def __setitem__(self, k, outcome) -> None:
        super().__setitem__(k, outcome)
        if self._hook is not None:
            self._hook(k, outcome)


class Cancelled(Exception):
    """Sandbox.cancel() was called: no new worker is started."""


def kill_session(sid: int) -> None:
    """SIGKILL process group ``sid`` and every process whose session id is ``sid`` (Linux /proc;
    elsewhere the group only)."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # after "pid (comm)": state ppid pgrp session ...
                os.kill(int(e), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue


class _Lines:
    """Line reader over a pipe with per-line timeouts (None on timeout, "" on EOF)."""

    def __init__(self, fd: int):
        self.fd, self.buf = fd, b""

    def next(self, timeout: float):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            # past the deadline the pipe is still looked at once: a line already written counts
            # (a job that ended while the caller was busy is not cut by the budget)
            left = max(deadline - time.monotonic(), 0.0)
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.fd, 4096)
            if not chunk:
                return ""
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def close(self):
        os.close(self.fd)


def _keep() -> bool:
    """KVERIFY_KEEP=1: keep the work folder and the jobs' result files (debugging)."""
    return os.environ.get("KVERIFY_KEEP") == "1"


def describe_exit(rc: int) -> str:
    """"exited with code N" or "was killed by SIGNAME" for a Popen/Process exit status."""
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with code {rc}"


def _tail(path: Path, n: int = 300) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return "(no output)"
    return " | ".join(text[-n:].splitlines()[-4:]) or "(no output)"
