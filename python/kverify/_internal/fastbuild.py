"""Fast, remembered builds of a candidate's ``load_inline`` extensions (runs in the candidate's process).

kverify.sandbox starts every candidate process with TORCH_EXTENSIONS_DIR set to the candidate's
content-addressed folder (kverify.build.cache_dir) and KVERIFY_PCH_DIR set to a folder shared by
all candidates. ``install()`` wraps ``torch.utils.cpp_extension.load_inline`` before the candidate
is imported:

narrow build (CUDA sources only; opt-in, KVERIFY_NARROW_HEADERS=1; needs the parallel nvcc)
    The CUDA file finds a header made for its own source (kverify._internal.narrow) as both
    ``torch/types.h`` and ``torch/extension.h``: torch's Tensor class, the per-operator headers of
    the operators it calls, and little else. Sources naming torch API it does not serve skip
    this step; a compile error falls through to the next. A subset of torch's declarations can
    change what a source means without an error (kverify._internal.narrow), so kverify's nvcc
    checks every narrow build against the fast build's headers (kverify._internal.declset) and
    fails it on any difference for a name the source uses: the fast build runs next. Opt-in
    while the check is young (one adversarial review so far; its known blind spots are in
    declset's docstring).
fast build
    The CUDA sources find kverify's shim ``torch/extension.h`` (``-I``, a host include path; see
    shim/torch/extension.h) instead of the whole C++ frontend, and the generated ``main.cpp`` is
    compiled with ``-include`` of a GCC precompiled ``torch/extension.h`` when one exists for the
    same flag set (also in the narrow build). Neither changes a device-code flag: arch,
    optimisation and math flags the candidate asked for are passed on unchanged. (Local
    measurement, nvcc 13.0, 2 cores: the CUDA file of a small kernel took 65 s with
    torch/extension.h and 35 s with torch/types.h; GCC took 26 s for main.cpp without a
    precompiled header.)
parallel nvcc (narrow and fast builds; off with KVERIFY_PARALLEL_NVCC=0)
    torch's ninja file calls kverify._internal.pnvcc instead of nvcc (PYTORCH_NVCC): nvcc's own
    commands, with the host pass (cudafe++) and the device pass (cicc, ptxas) at once; the same
    object as nvcc's (see there). Local: 21 s instead of 33 s per CUDA file, same CPU seconds.
    Its last step compiles cudafe++'s output with a GCC precompiled header of the header code
    in it, kept in KVERIFY_PCH_DIR (kverify._internal.hostpch; off with KVERIFY_HOST_PCH=0).
    Each lane's preprocessing starts from a kept preprocessed prefix of the source's include
    block, checked against the real preprocessor's bytes (kverify._internal.ppcache, also in
    KVERIFY_PCH_DIR; off with KVERIFY_PP_CACHE=0).
stock build
    When the fast build fails, the same call is built again exactly as stock ``load_inline``
    builds it (in its own folder), so a kernel that needs more than the shim still loads.

Every outcome is written to TORCH_EXTENSIONS_DIR/kverify_build.json, one record per distinct call
(key NAME-<hash of its arguments>; its folders are KEY-narrow, KEY and KEY-stock): the mode that
built it, whether it built, the compiler's first error, the seconds, and the error and seconds of
each mode tried before it (narrow_error, fast_error, ...). Later processes of the same
candidate replay the recorded mode, so they find the extension built and never rebuild it, and an
audit sees a failed build even when the candidate caught the exception and fell back to PyTorch.
A build that failed with a compiler diagnostic is not tried again in later processes (the same
error is raised at once); one that failed without a diagnostic (a killed compiler) is.
Set KVERIFY_FAST_BUILD=0 for stock behaviour (the compile benchmark's baseline),
KVERIFY_NARROW_HEADERS=1 to try the (checked) narrow build first.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from kverify._internal import narrow
from kverify._internal import pnvcc as pnvcc_env

SHIM = Path(__file__).resolve().parent / "shim"
PNVCC = Path(__file__).resolve().parent / "pnvcc.py"
STATE_FILE = "kverify_build.json"
_BUILD_ERROR = "Error building extension"
_state_cache: dict | None = None


#: a build's first compiler error (first_compiler_error, not the echoed source around it) that says
#: the machine could not take its output: the machine's failure, not the candidate's (the H200
#: audit, stop 21: "catastrophic error: error while writing generated C++ file: No space left on
#: device", "fatal error: when writing output to /tmp/tmpxft_...: Invalid argument", both while the
#: disk was full). Never recorded as diagnosed nor replayed from the record, so a later run builds again.
MACHINE_FAULT = re.compile(r"No space left on device|Disk quota exceeded|error while writing|when writing output to")
_DIAGNOSTIC = re.compile(r"(:\d+(:\d+)?: (fatal )?error\b|\(\d+\): (catastrophic )?error\b|undefined reference|cannot find -l)")


def machine_fault(error: str) -> str:
    """The MACHINE_FAULT phrase in a recorded build error ("" when the error is the candidate's):
    one test for the record, its replay and kverify.build.failed_build (also records written
    before MACHINE_FAULT existed, and torch's own OSError, whose message holds the strerror)."""
    m = MACHINE_FAULT.search(error or "")
    return m.group(0) if m else ""


def _without(entry: dict, key: str) -> dict:
    """``entry`` less ``key`` (a build record's facts of an earlier attempt that no longer hold)."""
    return {k: v for k, v in entry.items() if k != key}


def first_compiler_error(text: str) -> str:
    """The first line of compiler output that states an error (file:line: error / nvcc's
    file(line): error / a link error), else the first line mentioning an error, else the first line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if _DIAGNOSTIC.search(ln):
            return ln[:300]
    for ln in lines:
        if re.search(r"\berror\b", ln, re.I) and not ln.startswith((_BUILD_ERROR, "FAILED:", "ninja:")):
            return ln[:300]
    return lines[0][:300] if lines else ""


def read_state(ext_dir: str | os.PathLike) -> dict:
    """{NAME-<hash>: {mode, ok, seconds, error?, diagnosed?, fast_error?, pch?}} recorded in ``ext_dir``."""
    try:
        return json.loads((Path(ext_dir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}


def _record(ext_dir: Path, name: str, entry: dict) -> None:
    """Set state[name] = entry (read-modify-write under an flock, replaced atomically)."""
    with open(ext_dir / (STATE_FILE + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = read_state(ext_dir)
        state[name] = entry
        tmp = ext_dir / (STATE_FILE + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
        os.replace(tmp, ext_dir / STATE_FILE)


def _pch_key(args: dict) -> str:
    """Everything that decides main.cpp's compile flags apart from the extension's name."""
    with_cuda = args.get("with_cuda")
    if with_cuda is None:
        with_cuda = bool(args.get("cuda_sources"))
    import torch

    parts = [torch.__version__, sys.version, os.environ.get("CXX", ""), list(args.get("extra_cflags") or []),
             list(args.get("extra_include_paths") or []), bool(with_cuda)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]


def _pch_header(args: dict) -> Path | None:
    root = os.environ.get("KVERIFY_PCH_DIR")
    if not root:
        return None
    h = Path(root) / _pch_key(args) / "kv_torch.h"
    return h if (h.parent / "kv_torch.h.gch").exists() else None


def _build_pch(args: dict, build_dir: Path) -> None:
    """Precompile torch/extension.h with the flags torch just used for main.cpp (read from the
    build.ninja it wrote), once per flag set; a build in progress elsewhere is left alone. GCC
    ignores a precompiled header whose flags differ, so a wrong guess costs time, never results."""
    root = os.environ.get("KVERIFY_PCH_DIR")
    if not root:
        return
    out = Path(root) / _pch_key(args)
    if (out / "kv_torch.h.gch").exists():
        return
    try:
        ninja = (build_dir / "build.ninja").read_text()
    except OSError:
        return
    var = dict(re.findall(r"^(cxx|cflags|post_cflags) = ?(.*)$", ninja, re.M))
    if "cflags" not in var:
        return
    flags = [f for f in shlex.split(var["cflags"]) if not f.startswith("-DTORCH_EXTENSION_NAME=")
             and f != "-include" and not f.endswith("kv_torch.h")]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # another process builds it
        if (out / "kv_torch.h.gch").exists():
            return  # built while this process waited for the lock
        (out / "kv_torch.h").write_text("#include <torch/extension.h>\n")
        tmp = out / f"kv_torch.h.gch.{os.getpid()}"
        cmd = [*shlex.split(var.get("cxx") or "c++"), *flags, "-x", "c++-header", str(out / "kv_torch.h"),
               "-o", str(tmp), *shlex.split(var.get("post_cflags", ""))]
        if subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
            os.replace(tmp, out / "kv_torch.h.gch")
        else:
            tmp.unlink(missing_ok=True)


class _BuildLock:
    """Exclusive flock on BUILD_DIR.kvlock while this process builds in BUILD_DIR. The kernel
    drops it when the holder dies, so once it is held any torch baton file (BUILD_DIR/lock) left
    there is stale — a build killed by a timeout — and is removed; otherwise torch would wait on
    it for ever and the candidate could never load again."""

    def __init__(self, build_dir: Path):
        self.build_dir = build_dir

    def __enter__(self):
        self.f = open(str(self.build_dir) + ".kvlock", "w")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        (self.build_dir / "lock").unlink(missing_ok=True)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def _tiers(args: dict, cpp) -> list[tuple[str, dict | None]]:
    """The build modes to try in order, each with its narrow headers (or None): "narrow"
    (with KVERIFY_NARROW_HEADERS=1, for CUDA sources that kverify._internal.narrow serves, when
    kverify's nvcc runs them: it checks the narrow headers),
    "fast" (the shim torch/extension.h), "stock" (load_inline unchanged)."""
    tiers: list[tuple[str, dict | None]] = [("fast", None), ("stock", None)]
    src = args.get("cuda_sources")
    # the narrow build needs kverify's nvcc (pnvcc), which checks it (KVERIFY_DECLSET_*)
    if src and os.environ.get("KVERIFY_NARROW_HEADERS") == "1" and _parallel_nvcc(cpp, enabled=True).on:
        text = src if isinstance(src, str) else "\n".join(src)
        files = narrow.narrow_files(text, cpp.include_paths()[0])
        if files is not None:
            tiers.insert(0, ("narrow", files))
    return tiers


class _checked_headers:
    """While a narrow build runs: kverify._internal.pnvcc compares every preprocessing step with
    the same step on the fast build's headers (kverify._internal.declset) and fails the build
    when a name the source uses may mean something else (the fast build is tried next)."""

    def __init__(self, include: Path | None):
        self.include = include

    def __enter__(self):
        if self.include is not None:
            cache = os.environ.get("KVERIFY_PCH_DIR") or str(self.include.parent)
            os.environ.update({pnvcc_env.CHECK_REDUCED: str(self.include), pnvcc_env.CHECK_FULL: str(SHIM),
                               pnvcc_env.CHECK_CACHE: str(Path(cache) / "declset")})
        return self

    def __exit__(self, *exc):
        for k in (pnvcc_env.CHECK_REDUCED, pnvcc_env.CHECK_FULL, pnvcc_env.CHECK_CACHE):
            os.environ.pop(k, None)


class _parallel_nvcc:
    """While a non-stock build runs: torch's ninja file calls kverify._internal.pnvcc (nvcc's
    own commands, host and device passes at once; see there) instead of nvcc, through torch's
    PYTORCH_NVCC. Off with KVERIFY_PARALLEL_NVCC=0, when PYTORCH_NVCC is already set, or without
    nvcc under CUDA_HOME."""

    def __init__(self, cpp, enabled: bool):
        home = getattr(cpp, "CUDA_HOME", None)
        nvcc = os.path.join(home, "bin", "nvcc") if home else ""
        self.on = (enabled and os.environ.get("KVERIFY_PARALLEL_NVCC", "1") != "0"
                   and "PYTORCH_NVCC" not in os.environ and bool(nvcc) and os.path.exists(nvcc))
        self.nvcc = nvcc

    def __enter__(self):
        if self.on:
            os.environ["PYTORCH_NVCC"] = f"{shlex.quote(sys.executable)} {shlex.quote(str(PNVCC))}"
            os.environ["KVERIFY_REAL_NVCC"] = self.nvcc
        return self

    def __exit__(self, *exc):
        if self.on:
            os.environ.pop("PYTORCH_NVCC", None)
            os.environ.pop("KVERIFY_REAL_NVCC", None)


def _unversioned(cpp, name: str) -> None:
    """Forget torch's in-process version of ``name``: every distinct call has its own folder
    here, so the module keeps its name (torch would call a changed second build NAME_v1, and a
    later process, which skips the failed first call, would then rebuild under the other name)."""
    cpp.JIT_EXTENSION_VERSIONER.entries.pop(name, None)


def install() -> None:
    """Wrap torch.utils.cpp_extension.load_inline for this process (idempotent). Does nothing
    without TORCH_EXTENSIONS_DIR or with KVERIFY_FAST_BUILD=0."""
    import torch.utils.cpp_extension as cpp

    if getattr(cpp.load_inline, "_kverify", False) or os.environ.get("KVERIFY_FAST_BUILD") == "0":
        return
    ext_root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not ext_root:
        return
    original = cpp.load_inline
    sig = inspect.signature(original)

    def load_inline(*a, **kw):
        args = dict(sig.bind(*a, **kw).arguments)
        if args.get("build_directory"):  # the candidate chose its own folder: stock behaviour
            return original(**args)
        name, root = args["name"], Path(ext_root)
        # one folder and one record per distinct call: a candidate may call load_inline twice
        # under one name (a second try with other sources after the first failed to build)
        key = f"{name}-{hashlib.sha256(json.dumps(args, sort_keys=True, default=repr).encode()).hexdigest()[:12]}"
        root.mkdir(parents=True, exist_ok=True)
        entry = read_state(root).get(key, {})
        if entry.get("ok") is False and entry.get("diagnosed") and not machine_fault(entry.get("error", "")):
            # a compiler diagnostic, not a killed build nor a full disk (records older than MACHINE_FAULT)
            raise RuntimeError(f"{_BUILD_ERROR} '{name}' (kverify: this build failed before): {entry['error']}")
        tiers = _tiers(args, cpp)
        modes = [m for m, _ in tiers]
        if entry.get("mode") in modes:  # replay the recorded mode: its folder holds the built extension
            tiers = tiers[modes.index(entry["mode"]):]
        pch = Path(entry["pch"]) if entry.get("pch") else (None if entry else _pch_header(args))
        for mode, files in tiers:
            last = mode == "stock"
            folder = root / (key if mode == "fast" else f"{key}-{mode}")
            # verbose=False: torch then keeps the compiler's output in the exception (with verbose
            # it goes to stdout and the error says only "Error building extension"); logging only
            call = dict(args, build_directory=str(folder), verbose=False)
            inc = None
            if not last:
                inc = narrow.write_shim(folder / "kv_include", files) if mode == "narrow" else SHIM
                call["extra_cuda_cflags"] = [*(args.get("extra_cuda_cflags") or []), f"-I{inc}"]
                if pch is not None:
                    call["extra_cflags"] = [*(args.get("extra_cflags") or []), "-include", str(pch)]
            folder.mkdir(exist_ok=True)
            t0 = time.monotonic()
            try:
                _unversioned(cpp, name)
                with _BuildLock(folder), _parallel_nvcc(cpp, enabled=not last), \
                        _checked_headers(inc if mode == "narrow" else None):
                    mod = original(**call)
            except OSError as e:  # torch's own writes (sources, build.ninja) on a full disk: the machine's
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    try:
                        _record(root, key, {**_without(entry, "machine_fault"), "mode": mode, "ok": False,
                                            # the strerror in the text: machine_fault finds it there
                                            "error": f"{type(e).__name__}: {os.strerror(e.errno)}: {e}",
                                            "diagnosed": False,
                                            "machine_fault": os.strerror(e.errno)})
                    except OSError:
                        pass  # nothing can be written: the row's check then fails to load, not judged
                raise
            except Exception as e:
                if _BUILD_ERROR not in str(e):
                    raise
                err = first_compiler_error(str(e))
                # the fast build without a precompiled header and CUDA sources is the stock build
                if last or (mode == "fast" and pch is None and not args.get("cuda_sources")):
                    fault = machine_fault(err)
                    _record(root, key, {**_without(entry, "machine_fault"), "mode": mode, "ok": False, "error": err,
                                        "diagnosed": bool(_DIAGNOSTIC.search(err)) and not fault,
                                        **({"machine_fault": fault} if fault else {}),
                                        "seconds": round(time.monotonic() - t0, 3)})
                    raise
                entry = {**entry, f"{mode}_error": err, f"{mode}_seconds": round(time.monotonic() - t0, 3)}
                continue
            if entry.get("ok") is not True:
                _record(root, key, {**entry, "mode": mode, "ok": True, "pch": str(pch) if pch and not last else None,
                                    "seconds": round(time.monotonic() - t0, 3)})
                if pch is None and not last:
                    _build_pch(args, folder)
            return mod
        raise AssertionError("unreachable: the stock tier returns or raises")

    load_inline._kverify = True
    load_inline.__doc__ = original.__doc__
    cpp.load_inline = load_inline
