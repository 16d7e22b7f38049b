"""TWIN of g08_graph_replay_cuda: replays the captured graph after copying every call's input into
the graph's static input."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void k(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] < 0.f ? 0.f : x[i];
}
torch::Tensor run(torch::Tensor x) {
  int64_t n = x.numel();
  auto out = torch::empty_like(x);
  k<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}
"""
CPP = "torch::Tensor run(torch::Tensor x);"
ext = load_inline("kv_g08_graph_replay_cuda_twin", cpp_sources=CPP, cuda_sources=CUDA, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.graph = self.static_in = self.static_out = self.ptr = None

    def _capture(self, x):
        self.static_in = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture, as torch's graph docs do
            ext.run(self.static_in)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_out = ext.run(self.static_in)

    def forward(self, x):
        x = x.contiguous()
        if self.graph is None or self.static_in.shape != x.shape:
            self._capture(x)
        else:
            self.static_in.copy_(x)
        self.ptr = x.data_ptr()
        self.graph.replay()
        return self.static_out.clone()
