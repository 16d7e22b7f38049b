"""G11 memory-safety — tolerance-free.

Contract: (1) every tensor input placed inside a buffer with guard bands of sentinel values before
and after it: the call leaves the bands intact (no out-of-bounds write) and gives the same bits
when the bands hold other values (no out-of-bounds read reaches the output); CPU and GPU.
(2) On a GPU with compute-sanitizer: memcheck, racecheck and synccheck, each in its own child
process with its own timeout (at once, and beside the check's main worker; failed CUDA API calls
and the exit status of a process that finished its job not counted; a process that ended during
the call with no finding named, like a timeout, leaves the tool unfinished), report no error for the
candidate's call at the gates' shape (kverify.check._gate_shape: small where the candidate allows).
memcheck checks every kernel the call launches; racecheck and synccheck check the candidate's own
kernels only (the ``__global__`` functions and ``@triton.jit`` functions named in its source,
own_kernels), through compute-sanitizer's kernel-name filters:
PyTorch's kernels (cuDNN convolutions above all) made racecheck take up to 2000 CPU seconds and
time out at 300 s per row on the H200 audit (stop 13), while a race or barrier fault in them is not
the candidate's. A candidate without kernels of its own: those two N/A. Where kverify cannot be sure
it found every kernel of the candidate's (kernel_scope: macros, numba, NVRTC, ...) every tool checks
every kernel; racecheck's findings there that are all inside cuBLAS's Hopper GEMMs, known by their
kernels' names (library_findings), are kept in the evidence and not counted (not the candidate's
code; leaving those kernels unchecked makes racecheck fail: LIBRARY_KERNEL). A tool that does not
finish within SANITIZER_TIMEOUT is no finding: G11 is then ERROR (memory safety not established),
unless something else failed.
racecheck runs with PyTorch's cuDNN off (NO_CUDNN_TOOLS): on the H200 (stop 21) racecheck ended
with "Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception" inside cuDNN
convolutions (PyTorch's cudnn_convolution and cudnn_convolution_transpose), for the reference models
of 4 corpus rows alone, no candidate code at all, with a kernel filter that matched no kernel; with
cuDNN off all 4 ran clean, and so did G11 on 3 rows that had failed it through that error. cuDNN's
kernels are not the ones racecheck checks; the candidate's own kernels run unchanged. An internal
error of the tool that names no finding leaves the tool unfinished, never a finding (_INTERNAL).
cuBLAS's fp16 GEMMs on Hopper do the same when a filter leaves them unchecked (LIBRARY_KERNEL, stop
36); audit row cudal1/3090/L3/T11 (VGG16 under autocast, its own kernel filtered) was G11 ERROR by
that error, its fp16 GEMMs the likely cause (not shown). So a filtered racecheck run that fails
inside the tool with no finding runs once more on every kernel (RETRY_EVERY_KERNEL), where
library_findings applies.
initcheck is not run (DESIGN.md lists it; measured on the H200, stop 14): on every kernel, a bare
``nn.Conv2d`` call under it printed error reports (host backtrace in Conv2d.forward) and had not
finished after 75 s, so a candidate that keeps a PyTorch convolution would fail on cuDNN's reads;
filtered to the candidate's kernels it does not see the writes of the kernels it skips, so a
correct candidate reading what PyTorch wrote fails (both CUDA twins of controls/cuda/g11_* did).
Reads of never-written memory
that reach the output are G08's (fresh-output: sentinel-filled memory). KVERIFY_SANITIZE_ALL=1
runs all four tools on every kernel (the behaviour before stop 13), initcheck included.
Without a GPU or sanitizer that part is N/A with the reason; the guard bands still run.
KVERIFY_SANITIZER_CPUS=N confines each sanitizer run to N CPUs (cpu_cap; an audit sets 2): where
the tool's time goes, not what it finds.
Catches: out-of-bounds reads past the last tile, writes past the end of an output or input,
missing __syncthreads (racecheck), misuse of barriers (synccheck).
Controls: controls/g11_*.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kverify import engine
from kverify._internal import CUDNN_ENV
from kverify.gates.base import Context
from kverify.journal import BUDGET_MARK

GATE, NAME, TOLERANCE_FREE = "G11", "memory-safety", True
BAND = 4096  # elements on each side of every input
#: the tools G11 runs; initcheck only with KVERIFY_SANITIZE_ALL=1 (ALL_TOOLS): see the docstring
TOOLS = ("memcheck", "racecheck", "synccheck")
ALL_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
#: seconds per tool run (the worker is slow under a sanitizer); KVERIFY_SANITIZER_TIMEOUT overrides
SANITIZER_TIMEOUT = float(os.environ.get("KVERIFY_SANITIZER_TIMEOUT", "300"))


def applies(ctx: Context) -> str | None:
    return None


def plan(ctx: Context) -> list[dict]:
    return [ctx.job("guard", "G11/guard", small=True, band=BAND)]


#: tools that check only the candidate's own kernels (memcheck checks every kernel)
OWN_KERNELS_ONLY = ("racecheck", "synccheck")
#: a CUDA kernel definition or declaration: __global__ [qualifiers, __launch_bounds__(...)] void NAME(
#: (or ``void __global__ NAME(``); CUDA C++ requires __global__ functions to return void
_LB = r"__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)"
_QUAL = r'(?:static|inline|__inline__|__forceinline__|__noinline__|extern\s+"C"|__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\))'
_CUDA_KERNEL = re.compile(r"__global__\s+(?:(?:" + _LB + "|" + _QUAL + r")\s*)*void\s+(?:" + _LB + r"\s*)?(\w+)\s*\(")
_CUDA_KERNEL_VOID_FIRST = re.compile(r"\bvoid\s+(?:" + _LB + r"\s*)?__global__\s+(?:" + _LB + r"\s*)?(\w+)\s*\(")
#: a Triton kernel: @triton.jit (or @jit), other decorators, def NAME
_TRITON_KERNEL = re.compile(r"@(?:triton\.)?jit\b[^\n]*\n(?:[ \t]*@[^\n]*\n)*[ \t]*def\s+(\w+)")


def _cuda_kernels(source: str) -> set[str]:
    return set(_CUDA_KERNEL.findall(source)) | set(_CUDA_KERNEL_VOID_FIRST.findall(source))


def own_kernels(source: str) -> list[str]:
    """Names of the GPU kernels the candidate's source defines itself (sorted, unique): CUDA
    ``__global__`` functions in any string of the file (load_inline, CuPy RawKernel, ...) and
    ``@triton.jit`` functions. On the 929 rows of the audit corpus this finds every ``__global__``
    written (none missed); 4 CUDA rows (C++ that calls ATen only) and 174 PyTorch rows have none."""
    return sorted(_cuda_kernels(source) | set(_TRITON_KERNEL.findall(source)))


#: ways to make a GPU kernel whose name the source does not spell as a definition kverify parses
#: (the kernel DSLs whose kernels get generated names: TileLang, CuTe's Python DSL, NVIDIA Warp;
#: PyCUDA's SourceModule, NVIDIA's cuda.core / cuda.bindings and a bare cuLaunchKernel, which may
#: load code from anywhere; stop 36's review)
_OPAQUE = re.compile(r"(?<!@)\btriton\.jit\s*\(|\bnumba\b|\bcuda\.jit\b|ElementwiseKernel|ReductionKernel|"
                     r"\bjiterator\b|\bnvrtc|cuModuleLoad|cpp_extension\.load\s*\(|\bload\s*\(\s*name\s*=|"
                     r"\btilelang\b|@cute\.(?:kernel|jit)\b|\bcutlass\.cute\b|\bimport\s+warp\b|@wp\.kernel\b|"
                     r"\bSourceModule\b|\bcuda\.core\b|\bcuda\.bindings\b|\bfrom\s+cuda\s+import\b|\bcuLaunchKernel\b")


def kernel_scope(source: str) -> list[str] | None:
    """own_kernels(source) when kverify is sure they are all the GPU kernels the candidate
    defines, else None (then every tool checks every kernel, as before the filters): each
    ``__global__`` token must belong to a parsed definition, no kernel name may be a macro
    (``#define NAME``), Triton must appear only as ``@triton.jit`` definitions, and no other way of
    making kernels (_OPAQUE: numba, CuPy ElementwiseKernel, NVRTC, jiterator, cpp_extension.load of
    files, TileLang, CuTe DSL, Warp, PyCUDA, cuda.core) may appear. A filter naming a kernel that
    never launches would check nothing, silently."""
    names = own_kernels(source)
    defined = len(_CUDA_KERNEL.findall(source)) + len(_CUDA_KERNEL_VOID_FIRST.findall(source))
    if len(re.findall(r"\b__global__\b", source)) != defined or _OPAQUE.search(source):
        return None
    if any(re.search(rf"#\s*define\s+{re.escape(n)}\b", source) for n in names):
        return None
    if "triton" in source and not _TRITON_KERNEL.findall(source):
        return None
    return names


def kernel_filters(source: str) -> list[str]:
    """compute-sanitizer ``--kernel-name`` filters that match the candidate's own kernels: for a
    CUDA kernel NAME, ``kns=<len>NAME`` (the Itanium C++ ABI writes a function's name as its
    length and its identifier inside the mangled name, so a short name such as ``k`` does not match
    every kernel that merely contains the letter) and ``kne=NAME`` (an ``extern "C"`` kernel keeps
    its plain name); for a Triton kernel, ``kns=NAME`` (its compiled kernel carries the function's
    name). Matching a few kernels too many costs time, never a finding."""
    out = []
    for n in sorted(_cuda_kernels(source)):
        out += [f"kns={len(n)}{n}", f"kne={n}"]
    return out + [f"kns={n}" for n in sorted(set(_TRITON_KERNEL.findall(source)))]


def _sanitize_all() -> bool:
    return os.environ.get("KVERIFY_SANITIZE_ALL", "") == "1"


def _tool_set() -> tuple[str, ...]:
    """TOOLS, or ALL_TOOLS (initcheck too) with KVERIFY_SANITIZE_ALL=1."""
    return ALL_TOOLS if _sanitize_all() else TOOLS


def _tools(kernels: list[str] | None) -> list[str]:
    """The tools to run for a candidate with ``kernels`` of its own (kernel_scope; None: unknown):
    every tool of _tool_set() when it has some, when they are unknown, or with
    KVERIFY_SANITIZE_ALL=1; else those not in OWN_KERNELS_ONLY."""
    return [t for t in _tool_set() if kernels is None or kernels or t not in OWN_KERNELS_ONLY or _sanitize_all()]


#: the most findings a tool prints (its --print-limit): a tool with more prints this many
PRINT_LIMIT = 20
#: the same for racecheck where it checks every kernel (kernel_scope None, KVERIFY_SANITIZE_ALL=1, or
#: RETRY_EVERY_KERNEL's second run): library_findings must see every finding to say that all are the
#: library's. On the H200 (stop 37) such a run for audit row cudal1/3090/L3/T11 (VGG16 under autocast)
#: counted 103 races, the first inside an nvjet GEMM; with 20 printed nothing could be said of the rest
LIBRARY_PRINT_LIMIT = 1000


def print_limit(tool: str, every_kernel: bool) -> int:
    """``tool``'s --print-limit: LIBRARY_PRINT_LIMIT for racecheck checking every kernel, else PRINT_LIMIT."""
    return LIBRARY_PRINT_LIMIT if tool == "racecheck" and every_kernel else PRINT_LIMIT


def _filtered(tool: str, source: str) -> bool:
    """Does ``tool`` check only the own kernels (kernel_filters) of a candidate with ``source``:
    a tool of OWN_KERNELS_ONLY, kernel_scope known, KVERIFY_SANITIZE_ALL unset?"""
    return tool in OWN_KERNELS_ONLY and not _sanitize_all() and kernel_scope(source) is not None


def _sanitized_worker(tool: str, exe: str, source: str, every_kernel: bool = False) -> dict:
    """The Sandbox.run/prestart arguments of the worker of one sanitizer tool for a candidate with
    ``source``. The tools of OWN_KERNELS_ONLY get one ``--kernel-name`` option per filter of
    kernel_filters (compute-sanitizer user manual, "Specifying Filters": the option may be
    repeated and a kernel matching any filter is checked; kns = a substring of the mangled name,
    kne = the whole mangled name), unless ``every_kernel`` (start's second racecheck run after
    the filtered one failed inside the tool: every kernel checked, no filter)."""
    env = {**SANITIZED_ENV, **({CUDNN_ENV: "0"} if tool in NO_CUDNN_TOOLS else {})}
    filtered = _filtered(tool, source) and not every_kernel
    wrapper = [*cpu_cap(tool), exe, "--tool", tool, "--print-limit", str(print_limit(tool, not filtered)),
               "--target-processes", "all", "--report-api-errors", "no"]
    if filtered:
        for f in kernel_filters(source):
            wrapper += ["--kernel-name", f]
    return {"tag": f"G11-{tool}", "env": env, "wrapper": wrapper}


#: CPUs each sanitizer run may use (all when unset, 0 or negative). The audit sets it (kverify.audit._task):
#: racecheck's own analysis runs on many threads, and on the H200 audit (stop 20) two rows' racecheck
#: runs took ~12 of 16 cores for 240 s each until the row budget ended them, a third of the CPU of
#: that call, while the other checks and the compilers waited. Confined, such a run still ends at
#: the budget (not established); a run that finishes finds the same hazards, only later.
CPUS_ENV = "KVERIFY_SANITIZER_CPUS"
#: runs the rest of its command line confined to the CPUs named in its first argument (comma
#: separated), with an exec: the tool and the worker it starts inherit the set
_AFFINITY = ("import os, sys; os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(',')}); "
             "os.execvp(sys.argv[2], sys.argv[2:])")


def cpu_cap(tool: str) -> list[str]:
    """The command prefix that confines one sanitizer run to $KVERIFY_SANITIZER_CPUS of this
    process's CPUs ([] when unset, 0, at least as many as there are, or where Python cannot set an
    affinity). Which CPUs: a window of the allowed ones that starts where a hash of this process
    and ``tool`` says, so that the tools of one check and the checks of an audit spread over the
    machine, and the same call gives the same prefix (a prestarted worker is only used by a run
    with the same wrapper). Raises ValueError for a value that is not a whole number or is negative."""
    raw = os.environ.get(CPUS_ENV, "").strip()
    if not raw:
        return []
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"{CPUS_ENV} must be a whole number of CPUs, got {raw!r}") from None
    if n < 0:
        raise ValueError(f"{CPUS_ENV} must be a whole number of CPUs (0: no confinement), got {raw!r}")
    if not hasattr(os, "sched_getaffinity"):
        return []
    allowed = sorted(os.sched_getaffinity(0))
    if n <= 0 or n >= len(allowed):
        return []
    start = zlib.crc32(f"{os.getpid()}:{tool}".encode()) % len(allowed)
    cpus = [allowed[(start + k) % len(allowed)] for k in range(n)]
    return [sys.executable, "-c", _AFFINITY, ",".join(map(str, cpus))]


def prestart(sandbox, device: str) -> None:
    """Start the sanitized workers at the beginning of the check (Sandbox.prestart), so they
    import torch and load the candidate under the sanitizer while the problem is prepared;
    start()'s runs then hand them their job. Nothing without a GPU or compute-sanitizer."""
    exe = shutil.which("compute-sanitizer")
    if device != "cuda" or not exe:
        return
    kernels = kernel_scope(sandbox.candidate_source)
    for tool in _tools(kernels):
        sandbox.prestart(**_sanitized_worker(tool, exe, sandbox.candidate_source))


def start(ctx: Context):
    """The sanitizer runs need nothing from the other gates: check() calls this in its own thread
    before the main worker starts and runs the returned callable beside it (None: nothing to run).
    The job is built here, in the caller's thread (it may run the oracle); the callable only
    launches the sanitized workers and parses their logs."""
    if ctx.device != "cuda":
        return lambda: {"not_applicable": "CPU run (compute-sanitizer needs a GPU)"}
    exe = shutil.which("compute-sanitizer")
    if not exe:
        return lambda: {"not_applicable": "compute-sanitizer not found on PATH"}
    # the gates' shape (kverify.check._gate_shape): small where the candidate was probed accurate;
    # a candidate that raises at a smaller shape would launch nothing there for the tools to see
    b = ctx.binding
    job = ctx.job_at("run", "G11/sanitized", b, ctx.specs_at(b))
    kernels = kernel_scope(ctx.sandbox.candidate_source)

    def one(tool: str) -> dict:
        if tool not in _tools(kernels):
            return {"tool": tool, "not_applicable": "no GPU kernel of the candidate's own (only PyTorch's)"}
        source = ctx.sandbox.candidate_source
        t = time.monotonic()

        def sanitized(every_kernel: bool):
            o = ctx.sandbox.run([job], timeout=SANITIZER_TIMEOUT, **_sanitized_worker(tool, exe, source, every_kernel))[0]
            return o, Path(o.log).read_text(errors="replace") if o.log else ""
        o, text = sanitized(False)
        errors, first = parse_sanitizer(text)
        every_kernel, filtered_failed = not _filtered(tool, source), None
        # the filtered run failed inside the tool with no finding (RETRY_EVERY_KERNEL): once more, every kernel checked
        if (tool in RETRY_EVERY_KERNEL and not every_kernel and not errors and o.status not in ("timeout", "budget")
                and any(map(_is_internal, text.splitlines()))):
            filtered_failed = next(filter(_is_internal, text.splitlines())).removeprefix("========= ")[:160]
            o, text = sanitized(True)
            errors, first = parse_sanitizer(text)
            every_kernel = True
        seconds = round(time.monotonic() - t, 1)
        library = None  # racecheck's findings not counted: all inside LIBRARY_KERNEL kernels
        if tool == "racecheck" and every_kernel:
            n = library_findings(text, source)
            if n is not None and n == errors:
                library = {"findings": n, "first": first[:200]}
                errors, first = 0, ""
        others = None  # the second run's findings outside the candidate's own kernels (own_findings)
        if filtered_failed and errors and library is None:
            split = own_findings(text, source)
            if split and split[1] and split[0] + split[1] == errors:
                others = {"findings": split[1], "first": split[3][:200]}
                errors, first = split[0], split[2]
        exits = [ln.strip() for ln in text.splitlines() if _is_exit(ln)]
        internal = [ln.strip() for ln in text.splitlines() if _is_internal(ln)]
        rec = {"tool": tool, "errors": errors, "first": first[:200], "binding": b, "seconds": seconds}
        if tool in OWN_KERNELS_ONLY and not _sanitize_all():
            rec["kernels"] = ("every kernel (own kernels not known for sure)" if kernels is None else
                              "every kernel (the run filtered to its own failed inside the tool)" if filtered_failed
                              else kernels)
        if filtered_failed:
            rec["filtered_run"] = {"kernels": kernels, "unfinished": f"compute-sanitizer's own error, no finding: {filtered_failed}"}
        if tool in NO_CUDNN_TOOLS:
            rec["cudnn"] = "off"
        if library:
            rec["library_findings"] = library
        if others:
            rec["other_findings"] = others
        if others and not errors:  # races only in kernels the candidate's filter left out, not the library's
            rec.update(unfinished=f"{others['findings']} finding(s) in kernels neither the candidate's own nor all "
                                  "cuBLAS's GEMMs: not the candidate's, but unexplained, so not established")
        elif internal and not errors:  # the tool itself failed (_INTERNAL): what came after it is unchecked
            said = internal[0].removeprefix("========= ")[:160]
            rec.update(unfinished=f"compute-sanitizer's own error, no finding: {said}")
        elif o.status == "timeout" and not errors:  # slow under the tool: no finding, not judged
            rec.update(unfinished=f"did not finish in {SANITIZER_TIMEOUT:.0f} s")
        elif o.status == "budget" and not errors:  # the check's budget (Sandbox.budget) came first
            rec.update(unfinished=f"cut short by {BUDGET_MARK}")
        elif o.status == "crash" and not errors:
            # the process ended during the call under the tool and the tool named no finding: the
            # job ran to its end without the tool (its shape was probed, or is G01's), so nothing
            # points at a kernel (H200 audit, stop 16: racecheck "exited with code 6" in 6 of 30
            # rows whose memcheck and synccheck were clean) - not checked, not a finding
            rec.update(unfinished=f"the process ended under the tool ({o.detail[:120]}) with no finding")
        elif o.status != "ok":
            rec.update(errors=max(errors, 1), first=first[:200] or f"{o.status}: {o.detail[:160]}")
        elif ("exception" in o.result or "error" in o.result) and not errors:  # the call never ran to its end
            why = o.result.get("exception") or o.result["error"].strip().splitlines()[-1]
            rec.update(unfinished=f"the call raised under the tool ({why[:120]}): not checked")
        elif not re.search(r"(ERROR|RACECHECK) SUMMARY", text):
            rec.update(errors=max(errors, 1), first="compute-sanitizer printed no summary: " + text[-160:])
        elif errors and not first:  # counted but no finding line: show the log's end
            rec.update(first="(no finding line) " + text.strip()[-160:])
        if text and not first and (errors or o.status != "ok"):  # nothing named: keep what the tool said last
            rec["log_tail"] = text.strip()[-1000:]
        if exits and o.status == "ok":  # the worker finished its job and said so: not a kernel's fault
            rec["process_exit"] = exits[0][:200]
        return rec

    def run() -> dict:
        # the tools are independent child processes: run them at once (each has its own folder)
        tools = _tool_set()
        with ThreadPoolExecutor(len(tools)) as pool:
            return {"tools": list(pool.map(one, tools))}
    return run


#: tools run once more on every kernel (no filter) when the run filtered to the candidate's own
#: kernels fails inside the tool (_INTERNAL) with no finding, no timeout and no budget cut: on the H200
#: (stop 36) a filter that left cuBLAS's fp16 GEMMs unchecked always ended so (LIBRARY_KERNEL), while
#: the same GEMMs checked ran to the end, their races inside the library's kernels (library_findings).
#: The second run's record stands (its findings, its own failure, its timeout), with the first's
#: failure kept (rec["filtered_run"]); the two runs share SANITIZER_TIMEOUT each and the check's budget.
#: Of its findings, those all inside cuBLAS's GEMMs are the library's (library_findings); else only
#: those in the candidate's own kernels count (own_findings; the others kept as
#: rec["other_findings"], and G11 not established when none is the candidate's: rules 2026-12-04.9).
RETRY_EVERY_KERNEL = ("racecheck",)
#: tools whose worker runs with PyTorch's cuDNN off (CUDNN_ENV; the module docstring says why)
NO_CUDNN_TOOLS = ("racecheck",)
#: every tensor its own cudaMalloc of its exact size: a read past the end of a tensor is then a read
#: past the end of an allocation, which memcheck sees (inside a caching-allocator block it cannot)
SANITIZED_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
#: a finding's first line (its detail lines are indented further): memory access errors, races,
#: barrier misuse, and memcheck's reports of hardware exceptions (compute-sanitizer user manual,
#: memcheck "Hardware exception" errors: warp or lane illegal/misaligned/out-of-range addresses,
#: illegal instructions, stack overflows), named so that a count of them is never taken for the
#: process-exit lines the count may include
_FINDING = re.compile(r"^========= (Invalid|Error|Race|Uninitialized|Barrier|Warning: Race|Warp |Lane |Illegal |"
                      r"Misaligned |Out-of-range |Hardware )")


#: compute-sanitizer's errors for a target process (any process it follows) that ended with a
#: non-zero status (its --check-exit-code, on by default): a finding of the process, not of a
#: kernel. Not counted by parse_sanitizer; a worker that did not finish its job is a failure of the
#: run itself (start's status check). A process that ends with a status prints both lines (the
#: kept racecheck logs of 3 H200 audit rows, stop 21); whether memcheck's ERROR SUMMARY counts
#: one, both or neither is not known, so both are taken out of it (never below the finding lines)
_EXITS = ("process didn't terminate successfully", "Target application returned an error")
#: compute-sanitizer's own failure, printed as "========= Internal Sanitizer Error: ...": racecheck
#: counted it as an error hazard ("RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)",
#: no hazard line) when it failed inside cuDNN on the H200 (stop 21; 23 audit rows FAIL G11 for it,
#: the worker then aborting, "exited with code 6"). A fault of the tool, not of a kernel: taken out
#: of the counts; the run is unfinished unless a finding is named. For every tool, not racecheck
#: alone: a kernel's own hardware exception is a finding line memcheck names (_FINDING), and an
#: unfinished tool makes G11 ERROR (not established), never PASS.
_INTERNAL = "Internal Sanitizer Error"


def _is_exit(line: str) -> bool:
    """Is ``line`` one of compute-sanitizer's process-exit errors (_EXITS), as the tool prints
    them (its prefix; the worker's own output shares the log)?"""
    return line.startswith("========= ") and any(e in line for e in _EXITS)


def _is_internal(line: str) -> bool:
    """Is ``line`` compute-sanitizer's report of its own failure (_INTERNAL)?"""
    return line.startswith(f"========= {_INTERNAL}")


def parse_sanitizer(text: str) -> tuple[int, str]:
    """(errors, first finding) from compute-sanitizer output: the largest of "ERROR SUMMARY: N
    errors", racecheck's "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)" (E) and the
    number of finding lines; the first finding line. The tool's own failures (_INTERNAL) are taken
    out of both counts, and process-exit errors (_EXITS) out of the ERROR SUMMARY count and the
    finding lines (racecheck's summary counts hazards and internal errors only)."""
    lines = text.splitlines()
    exits, internal = sum(map(_is_exit, lines)), sum(map(_is_internal, lines))
    counts = [int(m) - exits - internal for m in re.findall(r"ERROR SUMMARY:\s*(\d+)", text)]
    counts += [int(m) - internal for m in re.findall(r"RACECHECK SUMMARY:.*?\((\d+) errors?", text)]
    findings = [ln.strip() for ln in lines if _FINDING.match(ln) and not _is_exit(ln)]
    return max([0, len(findings), *counts]), (findings[0] if findings else "")


#: cuBLAS's GEMM kernels on Hopper (plain, unmangled symbols such as
#: nvjet_sm90_hsh_192x192_64x4_2x1_v_bz_coopB_bias_TNN).
#: On the H200 (compute-sanitizer 2025.3.1, driver 580; stop 36, scripts/device_g11_probe.sh
#: GEMM_PROBE=1, results/audit/logs/h200_stop36/g11_gemm_probe.txt) racecheck checking every kernel
#: reported 4 races inside such kernels for PyTorch's fp16 GEMMs alone (scripts/g11_gemm_probe.py), as
#: the first of 3 it reported for audit row cudal1/a100/L3/T43 was (stop 34; the journal keeps only the
#: first), and leaving them unchecked is no way out: every
#: racecheck run of the same GEMMs with a kernel filter that skipped them (--kernel-name of another
#: kernel, or --kernel-name-exclude kns=nvjet_, with or without --racecheck-memcpy-async no) ended
#: with "Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception", as runs
#: that skipped cuDNN's kernels did in stop 21.
LIBRARY_KERNEL = re.compile(r"nvjet_sm\d+_\w+")
#: one access racecheck reports on a finding's line or its detail lines: "access at NAME+0xOFFSET",
#: NAME a plain symbol (no spaces)
_ACCESS_AT = re.compile(r"\baccess at (\S+)\+0x[0-9a-fA-F]+")


def library_findings(text: str, source: str) -> int | None:
    """The number of findings (_FINDING lines) in racecheck's output ``text`` when every one of them
    is inside cuBLAS's own kernels, else None (some finding is, or may be, the candidate's). All of:
    the candidate's ``source`` does not spell "nvjet" (any case: a kernel of that name would be its
    own); fewer than LIBRARY_PRINT_LIMIT findings were printed (more may be hidden: the caller's
    racecheck run printed at most that many, print_limit); at most one RACECHECK
    SUMMARY (one process's); each finding is a tool line ("========= Error: Race reported between
    Read access at NAME+0xOFF", then its detail lines "=========     and Write access at ...") whose
    every access names a LIBRARY_KERNEL symbol; and no other line speaks of a race or an access
    (the worker's own output shares the log: a line it broke or printed could hide a finding). The
    caller also asks that the count equal parse_sanitizer's, which catches a summary that counts
    findings not recognised here. For racecheck that checked every kernel (kernel_scope None or
    KVERIFY_SANITIZE_ALL=1): stop 34's audit row cudal1/a100/L3/T43 failed G11 by 3 races, the first
    (the only one its journal keeps) inside the cuBLAS GEMM of its fp16 nn.Linear
    (nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_bias_TNT). A library kernel
    is known by its name alone: a candidate that builds its own kernel's name "nvjet_sm..." from
    pieces, or prints racecheck's lines itself, is not caught (NOTES.md, stop 36)."""
    if re.search("nvjet", source, re.IGNORECASE) or len(re.findall(r"RACECHECK SUMMARY", text)) > 1:
        return None
    blocks = _finding_blocks(text)
    if not blocks or len(blocks) >= LIBRARY_PRINT_LIMIT:
        return None
    for ln in (ln for b in blocks for ln in b):
        names = _ACCESS_AT.findall(ln)
        if not names or len(names) != ln.count("access at") or not all(LIBRARY_KERNEL.fullmatch(n) for n in names):
            return None
    return len(blocks)


def _finding_blocks(text: str) -> list[list[str]] | None:
    """racecheck's findings in its output ``text``, each as its lines: the finding line (_FINDING),
    then its detail lines (indented tool lines that name an access, "=========     and Write access
    at ..."). None where a line outside them speaks of a race or an access: the worker's own output
    shares the log, and a line it broke could hide a finding."""
    lines = text.splitlines()
    blocks, seen = [], set()
    for i in (i for i, ln in enumerate(lines) if _FINDING.match(ln) and not _is_exit(ln)):
        j = i + 1
        while j < len(lines) and lines[j].startswith("=========  ") and "access at" in lines[j]:
            j += 1
        blocks.append(lines[i:j])
        seen.update(range(i, j))
    if any(k not in seen and ("access at" in ln or "Race reported" in ln) for k, ln in enumerate(lines)):
        return None
    return blocks


#: one access racecheck reports, its kernel named any way the tool does: "access at NAME+0xOFF",
#: NAME a plain symbol, a mangled one (_Z...) or a demangled signature with spaces
#: ("void k<c10::Half>(const T1 *, int)", as for audit row cudal1/a100/L3/T43 on the H200, stop 38)
_ACCESS_NAME = re.compile(r"\baccess at (.+?)\+0x[0-9a-fA-F]+")


#: a ``__device__`` function the source defines (its name before the parameter list): racecheck may
#: name an access by the function that holds the instruction, a helper the compiler did not inline
_DEVICE_FN = re.compile(r"__device__\b[^;{}()]*?\b([A-Za-z_]\w*)\s*\(")


def _is_own(name: str, own: set[str], triton: set[str]) -> bool:
    """Is the function racecheck names ``name`` (_ACCESS_NAME) the candidate's: one of its CUDA
    kernels or ``__device__`` functions (``own``) as an identifier of a demangled name (after a space
    or "::", before "<", "(" or the end: "void (anonymous namespace)::k<float>(float *)"), or its
    length-prefixed name inside a mangled one (not after another digit: "13add" is not "3add"); a
    Triton kernel (``triton``) by its name, alone or before "_" (Triton's older suffixes). A kernel of
    another's with the same identifier (PyTorch's ``elementwise_kernel`` for a candidate's own of that
    name) counts as the candidate's: never a missed finding, at worst one too many, as with the filters."""
    if name.startswith("_Z"):
        return any(re.search(rf"(?<!\d){len(n)}{re.escape(n)}", name) for n in own)
    return (any(re.search(rf"(?:^|[\s:]){re.escape(n)}(?:<|\(|$)", name) for n in own)
            or any(name == n or name.startswith(n + "_") for n in triton))


def own_findings(text: str, source: str) -> tuple[int, int, str, str] | None:
    """racecheck's findings in ``text`` split by whose they are: (the candidate's, the others', the
    first of the candidate's finding lines, the first of the others'). A finding is the candidate's
    when one of its accesses is in a kernel of the candidate's own (_is_own) or an access line does
    not parse (then it may be). None where the split cannot be trusted: a stray race line
    (_finding_blocks), or as many findings printed as the run's --print-limit (LIBRARY_PRINT_LIMIT:
    more may be hidden). For RETRY_EVERY_KERNEL's second run, which checks every kernel only because
    the run filtered to the candidate's own could not finish: the kernels that filter left out
    are not what G11 asks about (rules 2026-12-04.9)."""
    blocks = _finding_blocks(text)
    if blocks is None or len(blocks) >= LIBRARY_PRINT_LIMIT:
        return None
    mine, triton = _cuda_kernels(source) | set(_DEVICE_FN.findall(source)), set(_TRITON_KERNEL.findall(source))
    own, first_own, first_other = 0, "", ""
    for b in blocks:
        names = [n for ln in b for n in _ACCESS_NAME.findall(ln)]
        if (not names or len(names) != sum(ln.count("access at") for ln in b)
                or any(_is_own(n, mine, triton) for n in names)):
            own, first_own = own + 1, first_own or b[0].strip()
        else:
            first_other = first_other or b[0].strip()
    return own, len(blocks) - own, first_own, first_other


def judge_cut(ctx: Context, detail: str) -> dict | None:
    """The verdict when the check's budget cut the guard-band job short (kverify.check._judge_gate):
    FAIL when a sanitizer run already reported errors (its finding stands), else None (the caller
    records ERROR, not established). Waits for the sanitizer runs, which the same budget bounds."""
    sanitizer = ctx.background_result(GATE, start)
    if not any(t.get("errors") for t in sanitizer.get("tools", [])):
        return None
    guard = {"band_writes": 0, "output_depends_on_bands": False, "not_run": detail}
    return engine.judge(GATE, {"guard": guard, "sanitizer": sanitizer})


def judge(ctx: Context, results: dict) -> dict:
    sanitizer = ctx.background_result(GATE, start)
    return engine.judge(GATE, {"guard": results["G11/guard"], "sanitizer": sanitizer})
