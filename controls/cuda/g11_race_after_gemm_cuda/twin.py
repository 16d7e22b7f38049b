"""TWIN of g11_race_after_gemm_cuda: an fp16 linear layer (a GEMM with bias of the BLAS library PyTorch
calls on a GPU), then a shared-memory tree reduction with __syncthreads() after every step, its
kernel named through a macro (kernel_scope None: racecheck checks every kernel). Must pass G11: on
the H200 (stop 36, results/audit/logs/h200_stop36/g11_gemm_probe.txt) racecheck reported races
inside the library's fp16 GEMM kernels (no code of ours); where every finding is inside them G11
does not count them (g11_memory_safety.library_findings). This docstring and the code spell no
library kernel name: a source that does keeps every finding counted."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#define ROW_SUM row_sum_kernel
__global__ void ROW_SUM(const float* __restrict__ x, float* __restrict__ y, int cols) {
  __shared__ float red[256];
  const float* xr = x + (int64_t)blockIdx.x * cols;
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
  red[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = red[0];
}
torch::Tensor run(torch::Tensor x) {
  auto y = torch::empty({x.size(0)}, x.options());
  ROW_SUM<<<x.size(0), 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)x.size(1));
  return y;
}
"""
CPP = "torch::Tensor run(torch::Tensor x);"
ext = load_inline("kv_g11_race_after_gemm_cuda_twin", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(768, 768).half()

    def forward(self, x):
        return ext.run(self.fc(x).float().contiguous())
