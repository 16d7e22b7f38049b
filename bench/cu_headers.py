"""Benchmark: nvcc time of one extension CUDA file as load_inline writes it (torch/types.h, which
kverify's fast build already uses instead of torch/extension.h) against a narrow header set
(ATen/core/Tensor.h + the per-operator headers the source calls), same kernel, same flags, same
run. A lead for the compile target of the audit issue (median build <= 15 s), not yet wired into
kverify's build: the narrow set only compiles sources whose torch:: functions it declares.

The kernel is a typical corpus candidate's: a ReLU kernel and a host function that calls
x.contiguous(), torch::empty_like, torch::zeros, TORCH_CHECK, data_ptr<float>() and launches it.
Needs nvcc and torch's headers (a CPU torch wheel has them); no GPU.

    python bench/cu_headers.py [--reps 2] [--arch 90]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BODY = r"""
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_cuda(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  auto z = torch::zeros({xc.size(0)}, xc.options());
  int64_t n = xc.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
# what load_inline writes at the top of every CUDA source, then the source's own include
STOCK_HEAD = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n#include <torch/types.h>\n"
NARROW_HEAD = """#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <cuda.h>
#include <cuda_runtime.h>
namespace torch { using namespace at; }
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--arch", default="90")
    a = ap.parse_args()
    nvcc = shutil.which("nvcc")
    if not nvcc:
        print("bench/cu_headers.py needs nvcc on PATH", file=sys.stderr)
        return 2
    import torch
    inc = Path(torch.__file__).parent / "include"
    flags = ["-std=c++17", f"-I{inc}", f"-I{inc / 'torch/csrc/api/include'}", "-D__CUDA_NO_HALF_OPERATORS__",
             "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
             "--expt-relaxed-constexpr", f"-gencode=arch=compute_{a.arch},code=sm_{a.arch}",
             "--compiler-options", "-fPIC", "-DTORCH_EXTENSION_NAME=bench",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}"]
    d = Path(tempfile.mkdtemp(prefix="kv-cuh-"))
    times: dict[str, list[float]] = {"torch/types.h": [], "narrow": []}
    for name, head in (("torch/types.h", STOCK_HEAD), ("narrow", NARROW_HEAD)):
        (d / f"{name.replace('/', '_')}.cu").write_text(head + BODY)
    for _ in range(a.reps):  # alternate, so load on the machine affects both alike
        for name in times:
            src = d / f"{name.replace('/', '_')}.cu"
            t = time.perf_counter()
            r = subprocess.run([nvcc, "-c", str(src), "-o", str(src.with_suffix(".o")), *flags],
                               capture_output=True, text=True)
            if r.returncode:
                print(f"{name}: nvcc failed:\n{r.stderr[-2000:]}", file=sys.stderr)
                return 1
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"nvcc {subprocess.run([nvcc, '--version'], capture_output=True, text=True).stdout.split()[-1]}, "
          f"torch {torch.__version__}, {os.cpu_count()} cores, sm_{a.arch}, {a.reps} rep(s) each")
    for k, v in times.items():
        print(f"  {k:14s} median {med[k]:6.1f} s   ({', '.join(f'{x:.1f}' for x in v)})")
    print(f"ratio torch/types.h / narrow: {med['torch/types.h'] / med['narrow']:.2f}x (baseline: load_inline's header)")
    shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
