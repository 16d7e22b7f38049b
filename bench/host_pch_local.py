"""Benchmark + check: the CUDA file of corpus candidates compiled three ways in one run, one
after the other on an idle machine, with the fast build's headers and flags as torch's ninja file
passes them (as bench/pnvcc_local.py):

    nvcc          the real nvcc (stock's compiler, fast build's headers)
    pnvcc         kverify's nvcc, host and device passes at once (kverify._internal.pnvcc),
                  without the precompiled prefix (KVERIFY_HOST_PCH=0)
    pnvcc+pch     the same with the precompiled prefix of cudafe++'s output (kverify._internal.hostpch)

The prefix header is made first, from the first source (its second build: a key is precompiled
the second time it is seen); that one-off cost is printed apart. Each source's three objects go
to the same folder from the same ``cuda.cu`` (the module id, and so device names, follows the
source's path), and pnvcc+pch's object must equal nvcc's as hostpch.comparable sees them.

    CORPUS=../shared/corpus/accepted_kernels.jsonl python bench/host_pch_local.py [--reps R] INDEX...
    (CORPUS defaults to .corpus/accepted_kernels.jsonl, the copy device runs carry)

INDEX: positions among the corpus's CUDA sources sorted by sha256 of the row id (as
bench/cu_headers.py orders them). Needs nvcc on PATH and torch's headers. Prints one line per
build, then medians and the ratios against nvcc and pnvcc measured in this run.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cu_headers as ch  # noqa: E402

from kverify._internal import hostpch, pnvcc  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index", type=int, nargs="+")
    ap.add_argument("--reps", type=int, default=1, help="builds of each kind per source (alternating)")
    a = ap.parse_args()
    srcs = ch.corpus_sources()
    flags = ch.fast_build_nvcc_flags()
    work = Path(tempfile.mkdtemp(prefix="kverify-hostpch-bench-"))
    root, trace = work / "pch", work / "trace.txt"
    ours = [sys.executable, pnvcc.__file__]

    def build(cmd, i, tag, extra=None):
        d = work / f"s{i}"
        d.mkdir(exist_ok=True)
        (d / "cuda.cu").write_text(ch.PREFIX + srcs[i])
        env = {**os.environ, "KVERIFY_PNVCC_TRACE": str(trace), "KVERIFY_PCH_DIR": str(root), **(extra or {})}
        trace.write_text("")
        t = time.perf_counter()
        r = subprocess.run([*cmd, "-c", str(d / "cuda.cu"), "-o", str(d / f"{tag}.o"), *flags], capture_output=True,
                           text=True, env=env)
        took = time.perf_counter() - t
        lines = trace.read_text().splitlines()
        how = [ln for ln in lines if ln.startswith("host pch")]
        if r.returncode != 0:
            sys.exit(f"source {i} {tag}: exit {r.returncode}: {r.stderr[-500:]}")
        steps = [ln.split()[1:] for ln in lines if ln.startswith("step ")]  # pnvcc's: [lane, tool, (-E,) seconds]
        if steps:  # where kverify's nvcc spent it (the host and device lanes' steps overlap in time)
            print(f"  {tag} steps: " + ", ".join(f"{w[0]}: " + " ".join(w[1:-1]) + f" {float(w[-1]):.1f}"
                                                 for w in steps), flush=True)
        return took, (how or ["-"])[0], d / f"{tag}.o"

    first = a.index[0]
    for tag in ("warm1", "warm2"):  # seen, then made
        took, how, _ = build(ours, first, tag)
        print(f"make the prefix header from source {first}: {tag} {took:.1f} s ({how})", flush=True)
    times: dict[str, list[float]] = {"nvcc": [], "pnvcc": [], "pnvcc+pch": []}
    same = []
    for i in a.index:
        for rep in range(a.reps):
            t_n, _, o_n = build(["nvcc"], i, f"nvcc{rep}")
            t_p, _, _ = build(ours, i, f"pnvcc{rep}", {"KVERIFY_HOST_PCH": "0"})
            t_h, how, o_h = build(ours, i, f"pch{rep}")
            eq = hostpch.comparable(str(o_h)) == hostpch.comparable(str(o_n))
            same.append(eq)
            times["nvcc"].append(t_n)
            times["pnvcc"].append(t_p)
            times["pnvcc+pch"].append(t_h)
            print(f"source {i} rep {rep}: nvcc {t_n:.1f} s  pnvcc {t_p:.1f} s  pnvcc+pch {t_h:.1f} s ({how})  "
                  f"object equal to nvcc's: {eq}", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n{len(times['nvcc'])} builds of each kind; median seconds: "
          + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    print(f"pnvcc+pch vs nvcc: {med['nvcc'] / med['pnvcc+pch']:.2f}x; vs pnvcc: {med['pnvcc'] / med['pnvcc+pch']:.2f}x; "
          f"objects equal to nvcc's: {sum(same)}/{len(same)}")
    shutil.rmtree(work, ignore_errors=True)  # its header alone is ~400 MB
    return 0 if all(same) else 1


if __name__ == "__main__":
    sys.exit(main())
