"""How a kverify process's host threads wait for the GPU: spin, yield, or block.

CUDA's default (cudaDeviceScheduleAuto) makes a process with fewer CUDA contexts than CPUs spin
on a core while it waits for the GPU (CUDA Runtime API, cudaSetDeviceFlags). One check runs ~9
processes with a context each (its own, the gates' workers, the standard test's, G11's sanitized
runs); an audit runs several checks at once on one or two GPUs, which time-slice between all those
contexts, so most processes spend their time waiting -- and, spinning, take the CPU that the
others' work and the compilers need. ``KVERIFY_CUDA_SCHEDULE=block`` (the audit's default for its
check processes, kverify.audit._task) makes every kverify process and worker wait on an OS
primitive instead; ``spin`` / ``yield`` / ``auto`` are CUDA's other modes. Results are unchanged:
only the way the host waits differs.

The flags are set on each visible device's primary context through the driver API
(cuDevicePrimaryCtxSetFlags), before torch creates the context (kverify calls apply() first thing
in its workers and audit processes, and in check() when no CUDA context exists yet).
"""
from __future__ import annotations

import ctypes
import os

ENV = "KVERIFY_CUDA_SCHEDULE"
#: CUdevice primary-context scheduling flags (cuda.h: CU_CTX_SCHED_AUTO/SPIN/YIELD/BLOCKING_SYNC)
FLAGS = {"auto": 0x0, "spin": 0x1, "yield": 0x2, "block": 0x4}


def validate() -> str:
    """$KVERIFY_CUDA_SCHEDULE ("" when unset). Raises ValueError naming the variable and the modes
    for an unknown value (callers turn it into a usage error before starting any process)."""
    mode = os.environ.get(ENV, "")
    if mode and mode not in FLAGS:
        raise ValueError(f"{ENV} must be one of {', '.join(FLAGS)}, got {mode!r}")
    return mode


def apply(mode: str | None = None) -> str:
    """Set the scheduling ``mode`` (default: $KVERIFY_CUDA_SCHEDULE; unset or empty: nothing) on
    every visible device's primary context. Returns what happened: "" (nothing asked), the mode
    set, or "unavailable: <why>" (no CUDA driver, a driver error) -- never raises for a machine
    without a GPU. Raises ValueError for an unknown mode."""
    mode = os.environ.get(ENV, "") if mode is None else mode
    if not mode:
        return ""
    if mode not in FLAGS:
        raise ValueError(f"{ENV} must be one of {', '.join(FLAGS)}, got {mode!r}")
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return f"unavailable: {e}"
    if cuda.cuInit(0) != 0:
        return "unavailable: cuInit failed"
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return "unavailable: cuDeviceGetCount failed"
    set_flags = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or cuda.cuDevicePrimaryCtxSetFlags
    for i in range(count.value):
        dev = ctypes.c_int(0)
        if cuda.cuDeviceGet(ctypes.byref(dev), i) != 0 or set_flags(dev, ctypes.c_uint(FLAGS[mode])) != 0:
            return f"unavailable: setting the flags of device {i} failed"
    return mode


def primary_flags(ordinal: int = 0) -> int | None:
    """The scheduling flags of device ``ordinal``'s primary context (cuDevicePrimaryCtxGetState),
    or None without a CUDA driver. For tests."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if cuda.cuInit(0) != 0:
        return None
    dev, flags, active = ctypes.c_int(0), ctypes.c_uint(0), ctypes.c_int(0)
    if cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
        return None
    if cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) != 0:
        return None
    return flags.value & 0x7
