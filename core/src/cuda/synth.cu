// CUDA input synthesis. Built with --fmad=false so that no multiply-add is contracted: the bits
// must equal the CPU path's (core/src/synth.cpp), which is built with -ffp-contract=off.
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_check.cuh"

namespace kverify::cuda {

__global__ void __launch_bounds__(kThreads) fill_kernel(TensorView v, uint64_t seed, synth::Distribution d, bool contiguous) {
  const int64_t n = v.numel();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    synth::store_sample(v, contiguous ? i : v.offset_of(i), synth::sample(seed, d, static_cast<uint64_t>(i)));
  }
}

void fill(const TensorView& v, uint64_t seed, const synth::Distribution& d, void* stream) {
  if (v.numel() == 0) return;
  DeviceGuard g(v.device_id);
  fill_kernel<<<grid_for(v.numel(), 8), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(v, seed, d, v.is_contiguous());
  KV_CUDA_CHECK("synth::fill launch", cudaGetLastError());
}

}  // namespace kverify::cuda
