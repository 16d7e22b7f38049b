"""Benchmark: a C++-only load_inline extension (main.cpp alone: torch/extension.h, the source,
the pybind11 module) built by stock ``load_inline`` against kverify's fast build, whose main.cpp
uses a GCC precompiled ``torch/extension.h`` (kverify/_internal/fastbuild.py), same machine, one
run. No GPU or nvcc needed (a CPU torch wheel builds it).

The first kverify build of a flag set has no precompiled header yet and makes one after it builds
(its time includes that); the next ones use it. Each build has a fresh name, so nothing is reused
from an earlier build; the precompiled header lives in a fresh folder of this run.

Prints each build's seconds (load_inline call: build and import) and the ratio stock / kverify
with the header (median of --reps builds each).

    python bench/pch_main.py [--reps 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

SRC = """
torch::Tensor scale_add_{i}(torch::Tensor x, torch::Tensor y, double a) {{
  TORCH_CHECK(x.sizes() == y.sizes(), "x and y differ in shape");
  return x * a + y.contiguous();
}}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2, help="builds of each kind after the first (default 2)")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="kv-pch-bench-")
    os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(root, "ext")  # kverify's build needs both
    os.environ["KVERIFY_PCH_DIR"] = os.path.join(root, "pch")
    import torch.utils.cpp_extension as cpp

    stock = cpp.load_inline
    from kverify._internal import fastbuild

    fastbuild.install()
    ours = cpp.load_inline
    n = iter(range(1, 10**6))

    def build(fn) -> float:
        i = next(n)
        t = time.monotonic()
        fn(name=f"pch_bench_{i}", cpp_sources=SRC.format(i=i), functions=[f"scale_add_{i}"], verbose=False)
        return time.monotonic() - t

    first = build(ours)
    print(f"kverify, first (makes the precompiled header after it builds) {first:6.1f} s", flush=True)
    with_pch, plain = [], []
    for _ in range(a.reps):  # alternating
        with_pch.append(build(ours))
        plain.append(build(stock))
        print(f"kverify with the precompiled header {with_pch[-1]:6.1f} s   stock load_inline {plain[-1]:6.1f} s", flush=True)
    mo, ms = statistics.median(with_pch), statistics.median(plain)
    print(f"median: kverify {mo:.1f} s, stock {ms:.1f} s; ratio stock / kverify {ms / mo:.2f}x "
          f"({os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
