"""DEFECT (G11): a float4 load per thread reads up to 3 floats past the end of x in the last vector
(memcheck; x has 18477 elements, 1 past a multiple of 4)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void k(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * 4;
  if (i >= n) return;
  // one 16-byte load per thread: the last vector reads past n (a scalar load the compiler could
  // sink under the store's guard below, so the read would not exist in the binary; this one must)
  float4 q = reinterpret_cast<const float4*>(x)[i / 4];
  float v[4] = {q.x < 0.f ? 0.f : q.x, q.y < 0.f ? 0.f : q.y, q.z < 0.f ? 0.f : q.z, q.w < 0.f ? 0.f : q.w};
  for (int e = 0; e < 4 && i + e < n; ++e) y[i + e] = v[e];
}
torch::Tensor run(torch::Tensor x) {
  auto y = torch::empty_like(x);
  int64_t n = x.numel();
  int64_t vec = (n + 3) / 4;
  k<<<(vec + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
CPP = "torch::Tensor run(torch::Tensor x);"
ext = load_inline("kv_g11_oob_tail_read_cuda_defect", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x.contiguous())

