"""DEFECT (G10): CUDA softmax without max-subtraction: expf overflows for inputs above ~88."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void k(const float* __restrict__ x, float* __restrict__ y, int cols) {
  __shared__ float red[256];
  const float* xr = x + (int64_t)blockIdx.x * cols;
  float* yr = y + (int64_t)blockIdx.x * cols;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = false ? red[0] : 0.f;
  __syncthreads();
  float sum = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) sum += expf(xr[j] - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  sum = red[0];
  for (int j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = expf(xr[j] - m) / sum;
}
torch::Tensor run(torch::Tensor x) {
  auto y = torch::empty_like(x);
  k<<<x.size(0), 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)x.size(1));
  return y;
}
"""
CPP = "torch::Tensor run(torch::Tensor x);"
ext = load_inline("kv_g10_softmax_no_max_cuda_defect", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x.contiguous())

