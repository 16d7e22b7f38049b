"""DEFECT (G09): correct only on the first call: row sums are added into a static accumulator that
is zeroed once, when it is allocated, so every later call returns the running total."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void rowsum(const float* __restrict__ x, float* __restrict__ acc, int64_t rows, int64_t cols) {
  int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double s = 0.0;  // double: the row sum itself is not the defect under test
  for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c];
  acc[r] += (float)s;  // the accumulator should be zeroed every call
}
torch::Tensor run(torch::Tensor x) {
  static torch::Tensor acc;
  if (!acc.defined() || acc.numel() != x.size(0)) acc = torch::zeros({x.size(0)}, x.options());
  int64_t rows = x.size(0), cols = x.size(1);
  rowsum<<<(rows + 127) / 128, 128, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), acc.data_ptr<float>(), rows, cols);
  return acc.clone();
}
"""
CPP = "torch::Tensor run(torch::Tensor x);"
ext = load_inline("kv_g09_first_call_only_cuda_defect", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x.contiguous())
