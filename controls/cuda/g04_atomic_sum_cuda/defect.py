"""DEFECT (G04): row sums by atomicAdd from every thread: the summation order, and the bits, vary run to run."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void k(const float* __restrict__ x, float* __restrict__ y, int cols) {
  int row = blockIdx.y;
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < cols) atomicAdd(&y[row], x[(int64_t)row * cols + j]);  // order of the adds varies
}
torch::Tensor run(torch::Tensor x) {
  auto y = torch::zeros({x.size(0)}, x.options());
  int cols = (int)x.size(1);
  dim3 grid((cols + 255) / 256, x.size(0));
  k<<<grid, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols);
  return y;
}
"""
CPP = "torch::Tensor run(torch::Tensor x);"
ext = load_inline("kv_g04_atomic_sum_cuda_defect", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x.contiguous())

