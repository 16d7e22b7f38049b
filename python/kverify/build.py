"""Compilation of candidates at scale: the content-addressed extension cache and the precompile step.

A candidate's extensions are built into ``cache_dir(source)`` = KVERIFY_CACHE/ext/<key>, key =
sha256 of the candidate's text, the toolchain (torch version and its CUDA, nvcc and host compiler
versions, Python version, TORCH_CUDA_ARCH_LIST) and kverify's build scheme. The candidate's text
holds everything it passes to load_inline (sources, flags), so equal keys mean equal builds; any
change of source, compiler, torch or flags gives a new folder. How a build is made (fast shim,
precompiled header, stock fallback) is kverify._internal.fastbuild.

``precompile`` loads a candidate in its own process (import and ModelNew()) and, only when that
built no extension, runs it once at the problem's own shape, so extensions built at import, in
ModelNew() or lazily in the first forward all land in the cache before the gates run, and GPU memory
is spent on a warm-up call only where it is needed; a failed build becomes the verdict
COMPILE_ERROR with the compiler's first error.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kverify.journal import FAULT_PREFIX

#: bump when the way extensions are built changes (invalidates every cached build)
SCHEME = 1


def cache_root() -> Path:
    """KVERIFY_CACHE, default ~/.cache/kverify."""
    return Path(os.environ.get("KVERIFY_CACHE", Path.home() / ".cache" / "kverify"))


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return "absent"
    return out[-1] if cmd[0].endswith("nvcc") and out else (out[0] if out else "absent")


@functools.lru_cache(maxsize=1)
def toolchain() -> str:
    """One line naming every tool whose version decides a build (cached per process)."""
    import torch

    from torch.utils.cpp_extension import CUDA_HOME

    nvcc = str(Path(CUDA_HOME) / "bin" / "nvcc") if CUDA_HOME else (shutil.which("nvcc") or "nvcc")
    parts = [f"torch {torch.__version__} cuda {torch.version.cuda}", f"python {sys.version.split()[0]}",
             f"nvcc {_first_line([nvcc, '--version'])}", f"cxx {_first_line([os.environ.get('CXX', 'c++'), '--version'])}",
             f"arch {os.environ.get('TORCH_CUDA_ARCH_LIST') or _gpu_arch()}", f"scheme {SCHEME}"]
    return " | ".join(parts)


def _gpu_arch() -> str:
    """What load_inline builds for without TORCH_CUDA_ARCH_LIST: the visible GPUs' capabilities."""
    import torch

    if not torch.cuda.is_available():
        return "no-gpu"
    return ",".join(sorted({"%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}))


def cache_dir(candidate_source: str) -> Path:
    """The candidate's TORCH_EXTENSIONS_DIR (see module doc for the key)."""
    key = hashlib.sha256((toolchain() + "\0" + candidate_source).encode()).hexdigest()[:24]
    return cache_root() / "ext" / key


def pch_dir() -> Path:
    """Shared folder of precompiled torch/extension.h headers of this toolchain (one subfolder
    per host flag set inside; a header from another compiler would be ignored by GCC)."""
    return cache_root() / "pch" / hashlib.sha256(toolchain().encode()).hexdigest()[:16]


def build_env(candidate_source: str) -> dict:
    """Environment entries every process of this candidate gets."""
    env = {"TORCH_EXTENSIONS_DIR": str(cache_dir(candidate_source))}
    # KVERIFY_PCH=0: no precompiled headers (main.cpp's ~0.8 GB per flag set; the CUDA file's, ~400 MB each)
    if os.environ.get("KVERIFY_PCH") != "0":
        env["KVERIFY_PCH_DIR"] = str(pch_dir())
    return env


@dataclass
class Precompiled:
    """Outcome of ``precompile``.

    status: "ok" (every extension built, or none asked for), "compile_error" (an extension failed
    to build, even if the candidate caught it), "fault" (an extension failed to build for the
    machine's reason, fastbuild.MACHINE_FAULT: a full disk, say; error starts with
    kverify.journal.FAULT_PREFIX), "load_error" (the candidate cannot be loaded for
    another reason), "crash" / "timeout" (its process died or hung in the warm-up call).
    error: one line for the journal (the compiler's first error for compile_error).
    seconds: wall time of the step; builds: kverify_build.json (per extension: mode, ok, seconds).
    input_bytes: bytes of the problem's tensor inputs at its own shape (the audit's GPU-memory
    estimate of a check, kverify.audit.check_need_mib).
    param_bytes: 4 bytes per element of the reference model's parameters and buffers
    (Problem.parameter_numel, on meta tensors; 0 when they cannot be counted): what input_bytes
    misses for a model with large weights (check_need_mib counts both).
    output_bytes: 4 bytes per element of the reference's outputs at its own shape
    (Problem.output_numel, on meta tensors; 0 when they cannot be counted): what input_bytes
    misses for a problem whose outputs are larger than its inputs (stop 28, H200: a Conv2d from 8
    to 64 channels, 0.06 GiB of inputs and 0.5 GiB of output, estimated at 9 GiB, ran out of
    GPU memory beside other checks in G05 in two calls of three).
    """

    status: str
    error: str
    seconds: float
    builds: dict
    input_bytes: int = 0
    param_bytes: int = 0
    output_bytes: int = 0


def precompile(reference_source: str, reference_path: str, candidate_source: str, candidate_path: str, *,
               device: str | None = None, seed: int = 0, timeout: float = 120.0,
               load_timeout: float = 900.0, tolerance: float = 1e-2) -> Precompiled:
    """Build the candidate's extensions into the cache (load + one call at the problem's own shape).

    Never raises for a bad candidate: every failure is in the returned status. Raises LoadError
    only when the reference itself cannot be loaded.
    """
    import math

    import torch

    from kverify._internal.fastbuild import read_state
    from kverify.check import resolve_device
    from kverify.errors import LoadError
    from kverify.problem import Problem
    from kverify.sandbox import Sandbox

    t0 = time.monotonic()
    device = resolve_device(device)
    problem = Problem(reference_source, reference_path, tolerance)
    specs = problem.input_specs(seed)
    job = {"kind": "warm", "id": "warm-up", "seed": seed, "binding": None, "inputs": [s.to_json() for s in specs]}
    box = Sandbox(reference_source=reference_source, reference_path=reference_path,
                  candidate_source=candidate_source, candidate_path=candidate_path, device=device, seed=seed,
                  timeout=timeout, load_timeout=load_timeout, tolerance=tolerance)
    status, error, raised = "ok", "", False
    try:
        outcome = box.run([job], tag="precompile")[0]
        if outcome.status != "ok":
            status, error = outcome.status, outcome.detail[:300]
        else:  # its warm-up call raised (an extension built lazily in forward that failed, say)
            raised = "exception" in outcome.result
    except LoadError as e:
        status, error = "load_error", e.reason
    finally:
        box.cleanup()
    builds = read_state(cache_dir(candidate_source))
    # it loaded and its warm-up call (if any ran) returned, although an extension failed: it caught that
    failed = failed_build(builds, caught=status == "ok" and not raised)
    if failed:
        status, error = ("fault" if failed.startswith(FAULT_PREFIX) else "compile_error"), failed
    input_bytes = sum(math.prod(sp.shape) * getattr(torch, sp.dtype).itemsize for sp in specs if sp.kind == "tensor")
    param_bytes = 4 * (problem.parameter_numel() or 0)
    output_bytes = 4 * (problem.output_numel() or 0)
    return Precompiled(status, error, round(time.monotonic() - t0, 3), builds, input_bytes, param_bytes, output_bytes)


#: in a COMPILE_ERROR reason: the candidate caught its build failure and loads (and, where it was
#: called, returns) without its extension, on PyTorch's own operators: what its harness accepted
#: was not its kernel
CAUGHT_MARK = "caught by the candidate, which loads without it"


def failed_build(builds: dict, caught: bool = False) -> str:
    """The reason to call a candidate COMPILE_ERROR from its recorded builds, or "": some extension
    failed to build and none built, so no kernel of the candidate ran (also when the candidate
    caught the failure and fell back to PyTorch: ``caught`` adds CAUGHT_MARK). A failed first try
    followed by another extension that built (a candidate's own second attempt) is not a compile
    error. Form: "extension NAME failed to build[ (CAUGHT_MARK)]: <the compiler's first error>";
    when a failed build was the machine's fault (fastbuild.MACHINE_FAULT), "FAULT_PREFIX: extension
    NAME could not be built on this machine (...): ..." instead (the row is UNJUDGED, not
    COMPILE_ERROR: kverify audit --redo-faults judges it again)."""
    failed = [(k, b) for k, b in sorted(builds.items()) if b.get("ok") is False]
    if not failed or any(b.get("ok") is True for b in builds.values()):
        return ""
    from kverify._internal.fastbuild import machine_fault

    faults = [(k, b, machine_fault(b.get("error", ""))) for k, b in failed]
    faults = [f for f in faults if f[2]]
    if faults:  # it might have built on a sound machine: not judged
        key, b, why = faults[0]
        return (f"{FAULT_PREFIX}: extension {key.rsplit('-', 1)[0]} could not be built on this machine "
                f"({why}): {b.get('error', '')}")[:500]
    key, b = failed[0]
    mark = f" ({CAUGHT_MARK})" if caught else ""
    return f"extension {key.rsplit('-', 1)[0]} failed to build{mark}: {b.get('error', '')}"[:500]
