"""TWIN of g12_legacy_stream_cuda: reads a value on the host first (``.item()``, which waits for the
current stream, pending writes included), then launches on the legacy default stream and waits
for the device (``cudaDeviceSynchronize``), so its output is right and complete when the call
returns. G12 must pass it: the call begins inside each window and itself outlasts it (it waits for
the GPU), so G12 says the stream order could not be observed. (A window the harness misses, the
call beginning only after the spin, is different: that is ERROR, not established.)"""
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
  k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  cudaDeviceSynchronize();  // the output is complete when run returns, whichever stream is synchronised
  return y;
}
"""
CPP = "torch::Tensor run(torch::Tensor x);"
ext = load_inline("kv_g12_legacy_stream_cuda_twin", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        x.view(-1)[0].item()  # waits for the current stream: the pending writes have run
        return ext.run(x)
