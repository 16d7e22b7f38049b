"""Waiting for GPU memory that other processes hold, instead of failing at once.

An audit runs several checks on one GPU (kverify.audit), each of ~9 processes. A check that runs
out of GPU memory beside the others is deferred whole, to run again alone at the end of the
audit, and its work so far is lost (H200 audit, stop 28: 12 deferrals in 3 calls, 9 of them
in G05, where the check's own process runs the fp64 oracle at shape variants near the problem's
own shape; most never ran again before the call ended). Memory another check holds is given
back when that check's gate or job ends (KVERIFY_EMPTY_CACHE), so waiting a few seconds and
trying again usually succeeds.

What waits: the reference's runs in the check's own process (kverify.problem.Oracle.retrying:
Oracle.run and run_fp64, and G04's and G09's own runs of the reference and its fp64 copy): the
reference alone runs there, never the candidate, so no candidate can bring a retry about. The same
models run again on the same inputs (G09's training-mode runs on a model built anew; a try that
wrote into an input it shares with the caller is not retried); at most RERUNS retries per run, each
after a pause of 0.5-1.5 x STEP_S, only while the check's deadline leaves room for the pause and
twice the failed try's time, and within the process's pausing time: KVERIFY_OOM_WAIT_S seconds over
all its retries (kverify.audit sets it for its checks on a shared GPU; unset or 0: no waiting, as
outside an audit and in an audit's serial re-run of a row alone). A size past the whole GPU is
never waited for (hopeless). The candidate's workers do not wait: a retry in a new worker would
drop what the failed one saw (G12's tampering findings, a sanitizer's log) and let a candidate
reset its call history by raising an out-of-memory error (stop 29's review); their out-of-memory
errors defer the row as before."""
from __future__ import annotations

import gc
import os
import random
import re
import threading
import time

ENV = "KVERIFY_OOM_WAIT_S"

#: How PyTorch, CUDA and its libraries say a GPU ran out of memory, lower case. "tried to
#: allocate" alone: a summary that keeps the last line of PyTorch's message can start after "CUDA
#: out of" (H200 audit, stop 17: a standard test journalled ERROR "memory. Tried to allocate 498.00
#: MiB ..."); cuBLAS and cuDNN report their workspace allocations failing under their own names.
MARKS = ("out of memory", "outofmemoryerror", "cudaerrormemoryallocation", "tried to allocate",
         "cublas_status_alloc_failed", "cudnn_status_alloc_failed")

#: seconds between tries, on average (each pause is 0.5-1.5 times it: checks that ran out of
#: memory together do not try again together)
STEP_S = 3.0
#: retries after the first try, at most, per run (Oracle.retrying)
RERUNS = 3

#: GPU memory (bytes) this process's caching allocator may hold (cap_process), None: no cap;
#: and whether a run here has run out of memory over that cap (capped_out)
_cap: list = [None]
_over = [False]
#: out-of-memory errors retry() took and ran again after a pause (the rest ended as errors: gpu_oom_status)
_waited = [0]
#: out-of-memory errors retry() let stand that asked for more than the whole GPU has (beyond_gpu):
#: neither a wait nor the GPU to itself mends them, so they are not unmended_ooms
_beyond = [0]
#: out-of-memory errors PyTorch's caching allocator raised inside a run retry() watched (_watch) that
#: no one needs to hear of: caught inside the run itself, which then ended well (PyTorch's cuDNN
#: convolutions try each algorithm's workspace and take a smaller one when the allocation fails;
#: the allocator counts every such failure in num_ooms), or the errors of tries retry() ran again,
#: or an error past the whole GPU (beyond_gpu). With the watch on, _waited and _beyond count only
#: what unwatched runs saw.
_mended = [0]
#: whether _observe is attached to PyTorch's caching allocator (once per process, after CUDA starts)
_watching = [False]
#: per thread: how deep in retry() calls it is, whether the outermost one watches, how many
#: allocator errors the outermost one's current try has seen (_observe), and how many errors
#: nested retry() calls let stand in that try (the try's code may have caught them: unmended)
_here = threading.local()

_lock = threading.Lock()
#: a file (KVERIFY_OOM_TRACE) to which each out-of-memory error the allocator's observer sees is
#: appended (_observe: the thread, its retry() depth, whether that error counts as caught inside a
#: watched run, the size asked, the Python stack), and each gpu_oom_status its process's counters:
#: to find where a check's unmended errors come from (stop 51, H200: the ConvTranspose2d row
#: gemini_level2_run/L2/P36 set aside "caught in the check" with the GPU to itself again, as in stop
#: 47, with the watch on). Unset: nothing is written. A file that cannot be written is ignored.
TRACE_ENV = "KVERIFY_OOM_TRACE"
_trace_lock = threading.Lock()  # its own: _observe may run in a thread that holds _lock
_spent = [0.0]  # seconds this process has paused so far
_jitter = random.Random()  # its own stream: a reference that seeds ``random`` changes nothing here


def says_oom(text: str) -> bool:
    """Whether ``text`` (an error message, a summary) says a GPU ran out of memory (MARKS)."""
    low = text.lower()
    return any(m in low for m in MARKS)


_ASKED = re.compile(r"tried to allocate ([0-9]+(?:\.[0-9]*)?) (b|bytes|kib|mib|gib|tib)\b", re.IGNORECASE)
_UNIT = {"b": 1, "bytes": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def _device_total() -> int | None:
    """Bytes of memory of this process's current GPU, None where CUDA is not started."""
    try:
        import torch
        return torch.cuda.mem_get_info()[1] if torch.cuda.is_initialized() else None
    except Exception:  # noqa: BLE001
        return None


def hopeless(text: str, total_bytes: int | None = None) -> bool:
    """Whether the out-of-memory message ``text`` asked for more than the whole GPU has
    (PyTorch's "Tried to allocate N GiB", its first such size, past ``total_bytes``, by default
    the current device's memory; False where either is unknown): no wait can help, the error
    stands at once."""
    m = _ASKED.search(text)
    if not m:
        return False
    if total_bytes is None:
        total_bytes = _device_total()
        if total_bytes is None:
            return False
    return float(m.group(1)) * _UNIT[m.group(2).lower()] > total_bytes


def _gpu_says_oom(text: str) -> bool:
    """says_oom, and not of the host's allocator (PyTorch's "DefaultCPUAllocator: ... you tried to
    allocate")."""
    return says_oom(text) and "cpuallocator" not in text.lower()


def gpu_oom(text: str) -> bool:
    """Whether ``text`` reports a GPU out-of-memory error that waiting may mend: _gpu_says_oom, not
    hopeless."""
    return _gpu_says_oom(text) and not hopeless(text)


def beyond_gpu(e: BaseException) -> bool:
    """Whether ``e`` is a GPU out-of-memory error (_gpu_says_oom) that asked for
    more than the whole GPU has (hopeless): the same error on every run on this GPU, alone or
    beside others (H200 audit, stop 40: a ConvTranspose2d with stride 257, one of G05's shapes,
    asks the fp64 oracle for ~1 TB; read as a shortage, it sent the row to run alone twice)."""
    text = f"{type(e).__name__}: {e}"
    return _gpu_says_oom(text) and hopeless(text)


def is_oom(e: BaseException) -> bool:
    """Whether the exception ``e`` is a GPU out-of-memory error that waiting may mend
    (torch.OutOfMemoryError, or an error whose message says so: gpu_oom)."""
    text = f"{type(e).__name__}: {e}"
    try:
        import torch
        typed = isinstance(e, torch.OutOfMemoryError)
    except (ImportError, AttributeError):
        typed = False
    return (typed and not hopeless(text)) or gpu_oom(text)


def cap_process(cap_mib: int) -> bool:
    """Let PyTorch's caching allocator in this process hold at most ``cap_mib`` MiB of the current
    GPU (torch.cuda.set_per_process_memory_fraction: past it an allocation raises
    torch.OutOfMemoryError, as on a full GPU). kverify.audit caps a check's own process so on a GPU
    that several checks share (kverify.audit.check_cap_mib): one row whose fp64 oracle grows far
    past its estimate no longer takes the memory its neighbours were booked (H200 audit, stop 39:
    kbleaderboard/deepseek-coder/L2/P96, estimated 8 GiB, held 129.6 GiB in G05's planning, and 12
    neighbours ran out of memory in 3 calls and were set aside). Starts CUDA here (after
    kverify._internal.cuda_schedule.apply). Returns False, capping nothing, where the cap is not
    below the GPU's memory."""
    import torch
    total = torch.cuda.mem_get_info()[1]
    cap = int(cap_mib) * 2**20
    if cap >= total:
        return False
    torch.cuda.set_per_process_memory_fraction(cap / total)
    _cap[0] = cap
    return True


def cap_mib() -> int | None:
    """This process's cap (cap_process) in MiB, None where it has none."""
    return None if _cap[0] is None else _cap[0] // 2**20


def over_cap(text: str, reserved: int, cap: int | None) -> bool:
    """Whether the out-of-memory message ``text`` (says_oom) came from a process's own cap ``cap``
    (bytes; None: no cap, False) with ``reserved`` bytes held by its caching allocator: what it
    asked for (PyTorch's "Tried to allocate N GiB"; 0 where the message does not say) on top of what
    it holds passes the cap, or, where the size is not said, it holds 90% of the cap already. Then no
    wait for other checks can help: the check needs more than its booking, and runs again alone."""
    if cap is None or not says_oom(text):
        return False
    m = _ASKED.search(text)
    if m is None:
        return reserved >= 0.9 * cap
    return reserved + float(m.group(1)) * _UNIT[m.group(2).lower()] > cap


def hit_cap(e: BaseException) -> bool:
    """over_cap for the exception ``e`` in this process (its cap, torch.cuda.memory_reserved);
    where so, remembered for capped_out()."""
    if _cap[0] is None:
        return False
    try:
        import torch
        reserved = torch.cuda.memory_reserved()
    except Exception:  # noqa: BLE001
        return False
    if over_cap(f"{type(e).__name__}: {e}", reserved, _cap[0]):
        _over[0] = True
        return True
    return False


def unmended_ooms() -> int:
    """GPU out-of-memory errors PyTorch's caching allocator raised in this process
    (torch.cuda.memory_stats "num_ooms") that retry() did not take and run again: each ended as an
    error somewhere, in a record that says so or caught by a gate that made something else of it
    (a review found G03's limit probe reading one as "nothing certified": a wrong FAIL), less those
    it let stand that asked for more than the whole GPU has (beyond_gpu: running alone mends
    nothing) and those raised and caught inside a run of retry() that ended well (_mended: PyTorch's
    cuDNN convolutions, which try a smaller workspace when one fails: the likely reason why a
    ConvTranspose2d row of the H200 audit, stop 47, gemini_level2_run/L2/P36, ran out of memory "with
    the GPU to itself" with no gate saying so; seen only where the allocator's observer was attached
    before the run began, _watch).
    0 where CUDA was not started here."""
    try:
        import torch
        if not torch.cuda.is_initialized():
            return 0
        return max(0, int(torch.cuda.memory_stats().get("num_ooms", 0)) - _waited[0] - _beyond[0] - _mended[0])
    except Exception:  # noqa: BLE001
        return 0


def _observe(device, alloc, device_allocated, device_free) -> None:
    """PyTorch's caching allocator calls this in the thread whose allocation failed, just before it
    raises torch.OutOfMemoryError (as it adds one to num_ooms); counted for that thread's outermost
    watched retry() try, if any (the others stay in unmended_ooms). Traced (TRACE_ENV) either way."""
    counted = bool(getattr(_here, "depth", 0) and getattr(_here, "watched", False))
    if counted:
        _here.seen += 1
    if os.environ.get(TRACE_ENV):
        import traceback
        _trace(f"oom pid={os.getpid()} thread={threading.current_thread().name} depth={getattr(_here, 'depth', 0)} "
               f"in_watched_run={counted} asked_mib={alloc / 2**20:.1f} free_mib={device_free / 2**20:.1f}\n"
               + "".join("  " + ln for ln in traceback.format_stack()[-16:-1]))


def _trace(text: str) -> None:
    """Append ``text`` (ending in a newline) to the TRACE_ENV file, if set; errors ignored, and a
    file that would block (a FIFO no one reads: a fresh user's try) is not waited for."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    try:
        with _trace_lock:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
            with os.fdopen(fd, "a") as f:
                f.write(text if text.endswith("\n") else text + "\n")
    except OSError:
        pass


def _watch() -> bool:
    """Attach _observe to PyTorch's caching allocator once CUDA has started in this process
    (torch._C._cuda_attach_out_of_memory_observer; attaching would start CUDA itself, which a
    retry() must not do before its run does). False where it is not attached: no CUDA yet, or a
    torch without that hook; then unmended_ooms counts as before (every error no retry took), as
    it does for a run of retry() that started before CUDA did."""
    if _watching[0]:
        return True
    try:
        import torch
        if not torch.cuda.is_initialized():
            return False
        with _lock:
            if not _watching[0]:
                torch._C._cuda_attach_out_of_memory_observer(_observe)
                _watching[0] = True
    except Exception:  # noqa: BLE001 — no watch: the allocator's count stands as it is
        return False
    return True


def _mend(n: int) -> None:
    if n > 0:
        with _lock:
            _mended[0] += n


def capped_out() -> bool:
    """Whether this process, under a cap (cap_process), ran out of GPU memory over it: hit_cap saw
    it in the reference's runs, or an error no retry took (unmended_ooms) came with a peak within
    10% of the cap (torch.cuda.max_memory_reserved: raised outside those runs, where its size is not
    known here). In the check's report as meta.over_gpu_cap (evidence); kverify.audit reads it
    from gpu_oom_status and books such a row for a whole GPU in later runs."""
    if _cap[0] is None:
        return False
    if _over[0]:
        return True
    if not unmended_ooms():
        return False  # no error of its own: a peak near the cap alone is not running out
    try:
        import torch
        return torch.cuda.max_memory_reserved() >= 0.9 * _cap[0]
    except Exception:  # noqa: BLE001
        return False


def gpu_oom_status() -> dict:
    """What kverify.audit reads of a check's process when it ends (kverify.audit._task): {"ooms":
    unmended_ooms(), "over_cap": capped_out()}; a shared check with either is run again alone,
    whatever its record says (an error a gate caught leaves no mark in it). Traced (TRACE_ENV) with
    the counts it comes from."""
    status = {"ooms": unmended_ooms(), "over_cap": capped_out()}
    if os.environ.get(TRACE_ENV):
        try:
            import torch
            total = int(torch.cuda.memory_stats().get("num_ooms", 0)) if torch.cuda.is_initialized() else 0
        except Exception:  # noqa: BLE001
            total = -1
        _trace(f"status pid={os.getpid()} num_ooms={total} waited={_waited[0]} beyond={_beyond[0]} "
               f"mended={_mended[0]} watching={_watching[0]} -> {status}")
    return status


def left() -> float:
    """Seconds of pausing this process has left (KVERIFY_OOM_WAIT_S less what it paused)."""
    try:
        total = float(os.environ.get(ENV, "0") or 0)
    except ValueError:
        total = 0.0
    with _lock:
        return max(0.0, total - _spent[0])


def _pause(seconds: float) -> None:
    """Give this process's cached GPU blocks back and sleep ``seconds``, counted against its
    pausing time."""
    with _lock:
        _spent[0] += seconds
    gc.collect()  # the failed try's tensors, held by its frames until now
    try:
        import torch
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 — the wait helps without it
        pass
    time.sleep(seconds)


def _counted(e: BaseException) -> bool:
    """Whether the error ``e`` was counted in _beyond already, by an inner retry() that let it, or an
    error it was raised from or while handling (__cause__, __context__: a wrapper with the same
    words), stand; marks ``e`` counted (an exception that refuses the mark is counted each time)."""
    seen, todo = set(), [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if getattr(x, "_kverify_beyond", False):
            return True
        todo += [x.__cause__, x.__context__]
    try:
        e._kverify_beyond = True
    except Exception:  # noqa: BLE001 — a __setattr__ of its own must not replace the error
        pass
    return False


def retry(fn, deadline: float | None = None, on_oom=None, may_retry=None):
    """``fn()``; when it raises an out-of-memory error (is_oom) and ``may_retry()`` (None: always)
    says the try left nothing behind, ``on_oom()`` (to count it), a pause and ``fn()`` again, at
    most RERUNS times; then the error stands, at once where the try went over this process's own
    cap (hit_cap: no other check's memory is in the way). A pause is 0.5-1.5 x STEP_S, cut to the process's
    pausing time left and, with a ``deadline`` (time.monotonic() seconds), to the time to it less
    twice the failed try's time and STEP_S (a retry that could only end in a spent budget would
    turn the error, which defers the row to run alone, into "not established"); one shorter than
    STEP_S / 4 is not taken: the error stands (raised with its traceback). Each retry starts at
    least twice the failed try's time and STEP_S before the ``deadline``, so a caller may check
    its budget once, before the first try (Oracle.check_budget)."""
    outer = not getattr(_here, "depth", 0)
    if outer:
        _here.watched = _watch()  # the allocator's errors of this run are told apart from the rest
    watched = _here.watched
    _here.depth = getattr(_here, "depth", 0) + 1
    try:
        for k in range(RERUNS + 1):
            if outer:
                _here.seen = _here.stood = 0
            t = time.monotonic()
            try:
                out = fn()
            except Exception as e:  # noqa: BLE001 — re-raised unless it is a wait for memory
                took = time.monotonic() - t
                over = is_oom(e) and hit_cap(e)  # over this process's own cap: no wait for others helps
                stands = k == RERUNS or not is_oom(e) or over or (may_retry is not None and not may_retry())
                if not stands:
                    seconds = min(STEP_S * _jitter.uniform(0.5, 1.5), left())
                    if deadline is not None:
                        seconds = min(seconds, deadline - time.monotonic() - 2 * took - STEP_S)
                    stands = seconds < STEP_S / 4
                if stands:
                    if outer and watched:  # one error stands for the run (none past the whole GPU),
                        # and each a nested retry() let stand in it
                        _mend(_here.seen - (_here.stood if beyond_gpu(e) else max(_here.stood, 1)))
                    elif watched and not beyond_gpu(e):  # nested: the outer try's code may catch it
                        _here.stood += 1
                    elif not watched and beyond_gpu(e) and not _counted(e):  # once per allocator error,
                        with _lock:                                          # through nested retries
                            _beyond[0] += 1
                    raise
            else:
                if outer and watched:  # ended well: what it raised inside, it caught, except what
                    _mend(_here.seen - _here.stood)  # nested retries let stand (a gate's except, say)
                return out
            # past the except block Python drops ``e``: the failed try's frames and tensors are let go
            if outer and watched:  # run again, and what nested retries let stand kept (at worst
                _mend(_here.seen - _here.stood)  # counted once too often: the row runs alone)
            elif not watched:
                with _lock:
                    _waited[0] += 1
            if on_oom is not None:
                on_oom()
            _pause(seconds)
    finally:
        _here.depth -= 1
