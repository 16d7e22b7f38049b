"""DEFECT (G12): launches with no stream argument, i.e. on the legacy default stream, which does not
wait for work queued on PyTorch's current (pool, non-blocking) stream: the kernel reads the inputs
before the copies still pending there have run. The most common form in the corpus. Before the
windows of rules 2026-12-01.4 (one 50 ms spin) this passed G12 whenever the process launched late."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void k(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] < 0.f ? 0.f : x[i];
}
torch::Tensor run(torch::Tensor x) {
  auto y = torch::empty_like(x);
  int64_t n = x.numel();
  k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);  // stream 0: the legacy stream
  return y;
}
"""
CPP = "torch::Tensor run(torch::Tensor x);"
ext = load_inline("kv_g12_legacy_stream_cuda_defect", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x.contiguous())
