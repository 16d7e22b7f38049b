"""Benchmark + check: nvcc's own tools run as nvcc runs them against the same commands with glibc's
malloc asked to back its heap with transparent huge pages (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``,
glibc >= 2.35; the kernel must allow THP on request: ``madvise`` or ``always``).

EDG's front ends (cudafe++ and cicc) parse the ~390,000 lines of torch's header code in every
candidate's CUDA file (peak resident set ~1.25 GB for cudafe++, ~1.46 GB for cicc on corpus
source 0, by /usr/bin/time on the developers' machine); this asks whether fewer TLB misses make
them faster on the machine at hand. The tunable changes where the heap's pages come from, not what
the program computes: each run's output files are hashed and must equal the first run's.

For each source (positions among the corpus's CUDA sources sorted by sha256 of the row id, as
bench/cu_headers.py orders them), nvcc builds it once with ``-keep`` (the fast build's headers and
flags, as torch's ninja file passes them); then each of five steps of nvcc's chain -- the host
preprocessor, cudafe++, the device preprocessor, cicc and the final host compile (ptxas and
fatbinary take ~0.1 s) -- runs again on the kept files, ``--reps``
times per mode, modes alternating (ABBA order), one process at a time on an otherwise idle machine.
Printed: the machine's THP mode and glibc, seconds per run, then per step the median of each mode,
their ratio (stock/tunable), and whether every output of those steps equalled the first run's
(a failed run counts as different; printed after each source, so that a time limit keeps the
sources done). Exit status 1 if any differed, 2 if no source was timed. "stock" is nvcc's environment
without any ``glibc.malloc.hugetlb`` setting of the user's. With ``--whole``, kverify's nvcc (pnvcc) builds the whole
CUDA file instead, after two builds that make its kept preprocessed prefix and host header (as in an
audit's steady state): ``KVERIFY_THP=0`` ("stock") against its default (the tunable), objects compared
with nvcc's temporary names made one; each run prints what kverify's nvcc reused (both modes should
read the same kept prefix and host header: "pp+pch").

    python bench/tool_env.py [--reps 3] [--whole] INDEX...   (CORPUS=path/to/accepted_kernels.jsonl, default .corpus/)

Needs nvcc on PATH, torch's headers and kverify installed (the shim folder of the fast build).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cu_headers as ch  # noqa: E402

from kverify._internal import pnvcc  # noqa: E402

from compile import from_trace  # noqa: E402  (what kverify's nvcc reused, from its trace)

#: the setting under test, added to any GLIBC_TUNABLES already set (pnvcc.tool_env's)
TUNABLE = pnvcc.HUGE_PAGES


def _thp() -> str:
    try:
        return Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return "unknown"


def _outputs(cmd: str) -> list[str]:
    """The files a step writes: ``-o`` and the cudafe++/cicc output options named in ``cmd``."""
    w = shlex.split(cmd)
    names = ("-o", "--gen_c_file_name", "--stub_file_name", "--gen_device_file_name", "--module_id_file_name")
    return [w[i + 1] for i, x in enumerate(w[:-1]) if x in names]


def _digest(files: list[str], folder: Path, normalise: bool = False) -> str:
    """sha256 of the files' bytes (relative names under ``folder``); with ``normalise``, nvcc's
    temporary file names (``tmpxft_<pid>_<n>``, different in every build) made one name first."""
    h = hashlib.sha256()
    for f in files:
        p = Path(f) if os.path.isabs(f) else folder / f
        b = p.read_bytes() if p.exists() else b"<missing>"
        h.update(pnvcc.normalised(b) if normalise else b)
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index", type=int, nargs="+",
                    help="positions among the corpus's CUDA sources sorted by sha256 of the row id ($CORPUS, "
                         "default .corpus/accepted_kernels.jsonl)")
    ap.add_argument("--reps", type=int, default=3, help="runs of each step per mode and source (default 3)")
    ap.add_argument("--whole", action="store_true",
                    help="time kverify's nvcc on the whole CUDA file (KVERIFY_THP=0 against its default, the "
                         "tunable) instead of nvcc's steps one by one")
    a = ap.parse_args()
    srcs = ch.corpus_sources(os.environ.get("CORPUS") or ".corpus/accepted_kernels.jsonl")
    bad = [i for i in a.index if not 0 <= i < len(srcs)]
    if bad or a.reps < 1:
        ap.error(f"INDEX must be 0..{len(srcs) - 1} (the corpus's CUDA sources), --reps at least 1; got "
                 f"{bad or a.reps}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout`: the finally blocks still clean up
    flags = ch.fast_build_nvcc_flags()
    print(f"THP: {_thp()}; glibc {platform.libc_ver()[1]}; {os.cpu_count()} CPUs; tunable {TUNABLE}", flush=True)
    times: dict[str, dict[str, list[float]]] = {}
    equal: dict[str, bool] = {}
    done: list[int] = []
    for i in a.index:
        d = Path(tempfile.mkdtemp(prefix="kverify-tool-env-"))
        try:
            if not run_source(i, srcs[i], d, flags, a.reps, times, equal, a.whole):
                continue
        finally:
            shutil.rmtree(d, ignore_errors=True)  # nvcc's kept files, ~45 MB a source
        done.append(i)
        summary(times, equal, a.reps, done)  # after each source: a time limit keeps what ran
    if not done:
        print("no source was timed", flush=True)
        return 2
    return 0 if all(equal.values()) else 1


def run_source(i: int, src: str, d: Path, flags: list[str], reps: int, times: dict, equal: dict,
               whole: bool = False) -> bool:
    """Build source ``i`` once with ``nvcc -keep`` in ``d``, then time each step of its chain
    ``reps`` times per mode (ABBA), adding to ``times`` and ``equal``; with ``whole``, kverify's
    nvcc on the whole file instead, KVERIFY_THP=0 against its default; False if nvcc could not build
    it or list its steps (printed)."""
    (d / "cuda.cu").write_text(ch.PREFIX + src)
    args = ["-keep", "-keep-dir", str(d), "-c", str(d / "cuda.cu"), "-o", str(d / "cuda.o"), *flags]
    dry = subprocess.run(["nvcc", "-dryrun", *args], capture_output=True, text=True, cwd=d)
    env, cmds = pnvcc.plan(dry.stderr, dict(os.environ))
    split = pnvcc.lanes(cmds) if dry.returncode == 0 and cmds else None
    built = subprocess.run(["nvcc", *args], capture_output=True, text=True, cwd=d) if split else None
    if split is None or built.returncode != 0:
        why = (f"-dryrun failed (exit {dry.returncode}): {dry.stderr[-300:]}" if dry.returncode != 0
               else "-dryrun listed no chain of the shape kverify's nvcc knows" if split is None
               else f"failed (exit {built.returncode}): {built.stderr[-300:]}")
        print(f"source {i}: nvcc {why}", flush=True)
        return False
    host, _, as_nvcc, last = split  # nvcc's own device lane: its cicc reads cudafe++'s module id
    steps = {"host gcc -E": host[0], "cudafe++": host[1], "device gcc -E": as_nvcc[0], "cicc": as_nvcc[1],
             "final gcc": last}
    # nvcc's own environment: no huge-page setting of the user's (pnvcc leaves such a setting alone)
    env["GLIBC_TUNABLES"] = ":".join(t for t in env.get("GLIBC_TUNABLES", "").split(":")
                                     if t and t.split("=")[0] != "glibc.malloc.hugetlb")
    trace = d / "trace.txt"
    if whole:  # kverify's nvcc on the whole file, its kept prefix and host header made by two builds first
        cmd = shlex.join([sys.executable, pnvcc.__file__, "-c", str(d / "cuda.cu"), "-o", str(d / "ours.o"), *flags])
        env = {**os.environ, "GLIBC_TUNABLES": env["GLIBC_TUNABLES"], "KVERIFY_PCH_DIR": str(d / "pch"),
               "KVERIFY_PNVCC_TRACE": str(trace)}
        for _ in range(2):  # seen, then made (ppcache and hostpch keep a key the second time)
            subprocess.run(["/bin/sh", "-c", cmd], env=env, cwd=d, capture_output=True)
        trace.unlink(missing_ok=True)  # the warm-up builds' lines; each timed run starts its own trace
        steps = {"kverify's nvcc": cmd}
    for name, cmd in steps.items():
        outs = ["ours.o"] if whole else _outputs(cmd)
        first = None
        for rep in range(reps):
            for mode in (("stock", "tunable") if rep % 2 == 0 else ("tunable", "stock")):
                e = dict(env)
                if whole:  # pnvcc adds the tunable itself unless told not to
                    e["KVERIFY_THP"] = "1" if mode == "tunable" else "0"
                elif mode == "tunable":  # as kverify's nvcc runs its tools
                    e = pnvcc.tool_env({**e, "KVERIFY_THP": "1"})
                if whole:  # this run's trace only (pnvcc appends; a failed run's lines are not read)
                    trace.unlink(missing_ok=True)
                t = time.perf_counter()
                r = subprocess.run(["/bin/sh", "-c", cmd], env=e, cwd=d, capture_output=True, text=True)
                took = time.perf_counter() - t
                if r.returncode != 0:  # a failed step is never "the same output"
                    equal[name] = False
                    print(f"source {i} {name:13} {mode:8} exit {r.returncode}: {r.stderr[-300:]}", flush=True)
                    continue
                got = _digest(outs, d, normalise=whole)
                first = first or got
                equal[name] = equal.get(name, True) and got == first
                times.setdefault(name, {}).setdefault(mode, []).append(took)
                # what kverify's nvcc reused (a like-for-like comparison: both modes from the same kept files)
                used = ""
                if whole:
                    reused = from_trace(str(trace))["reused"]
                    used = "  reused " + {"-": "nothing", "": "? (no trace)"}.get(reused, reused)
                print(f"source {i} {name:13} {mode:8} {took:6.2f} s  output {'same' if got == first else 'DIFFERS'}{used}",
                      flush=True)
    return True


def summary(times: dict, equal: dict, reps: int, sources: list[int]) -> None:
    """Print each step's median seconds per mode, their ratio and whether all outputs were equal."""
    print(f"\nmedian seconds per step, {reps} runs per mode and source, sources {sources}:")
    for name, m in times.items():
        if not (m.get("stock") and m.get("tunable")):
            print(f"  {name:13} not timed in both modes; outputs equal: {equal.get(name)}")
            continue
        s, u = statistics.median(m["stock"]), statistics.median(m["tunable"])
        print(f"  {name:13} stock {s:6.2f}  {TUNABLE} {u:6.2f}  ratio {s / u:4.2f}x  outputs equal: {equal[name]}",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
