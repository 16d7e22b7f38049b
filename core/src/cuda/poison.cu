// CUDA sentinel fill/count and the digest sum: grid-stride loops; counts and sums are
// order-free (integer adds, atomicMin of indices), so results are identical run to run.
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_check.cuh"
#include "kverify/poison/poison.hpp"

namespace kverify::cuda {

namespace {

__global__ void __launch_bounds__(kThreads) sentinel_fill_kernel(TensorView t, uint64_t s, int sz, bool contiguous) {
  const int64_t n = t.numel();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    bits::store_raw(t.data, contiguous ? i : t.offset_of(i), sz, s);
}

__device__ unsigned long long block_sum(unsigned long long v) {
  __shared__ unsigned long long warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  unsigned long long total = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  return total;  // valid in thread 0
}

__global__ void __launch_bounds__(kThreads) sentinel_count_kernel(TensorView t, uint64_t s, int sz, bool contiguous,
                                                                 unsigned long long* count, unsigned long long* first) {
  const int64_t n = t.numel();
  unsigned long long c = 0, f = ~0ull;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (bits::load_raw(t.data, contiguous ? i : t.offset_of(i), sz) == s) {
      ++c;
      if (static_cast<unsigned long long>(i) < f) f = static_cast<unsigned long long>(i);
    }
  }
  if (f != ~0ull) atomicMin(first, f);
  const unsigned long long total = block_sum(c);
  if (threadIdx.x == 0 && total) atomicAdd(count, total);
}

__global__ void __launch_bounds__(kThreads) digest_kernel(TensorView t, int sz, bool contiguous, unsigned long long* sum) {
  const int64_t n = t.numel();
  unsigned long long acc = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    acc += compare::digest_term(bits::load_raw(t.data, contiguous ? i : t.offset_of(i), sz), i);
  const unsigned long long total = block_sum(acc);
  if (threadIdx.x == 0) atomicAdd(sum, total);
}

/// Two device words, zeroed/initialised on `stream`, read back after the stream finishes.
struct Scratch {
  unsigned long long* d = nullptr;
  cudaStream_t s;
  explicit Scratch(cudaStream_t stream, unsigned long long init1) : s(stream) {
    KV_CUDA_CHECK("scratch alloc", cudaMallocAsync(&d, 2 * sizeof(unsigned long long), s));
    unsigned long long h[2] = {0ull, init1};
    KV_CUDA_CHECK("scratch init", cudaMemcpyAsync(d, h, sizeof(h), cudaMemcpyHostToDevice, s));
    KV_CUDA_CHECK("scratch init sync", cudaStreamSynchronize(s));
  }
  void read(unsigned long long out[2]) {
    KV_CUDA_CHECK("scratch read", cudaMemcpyAsync(out, d, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, s));
    KV_CUDA_CHECK("scratch sync", cudaStreamSynchronize(s));
  }
  ~Scratch() { cudaFreeAsync(d, s); }
};

}  // namespace

void fill_sentinel(const TensorView& t, void* stream) {
  if (t.numel() == 0) return;
  DeviceGuard g(t.device_id);
  sentinel_fill_kernel<<<grid_for(t.numel(), 8), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      t, poison::sentinel_bits(t.dtype), dtype_size(t.dtype), t.is_contiguous());
  KV_CUDA_CHECK("poison::fill_sentinel launch", cudaGetLastError());
}

int64_t count_bits(const TensorView& t, uint64_t pattern, int64_t* first, void* stream) {
  if (first) *first = compare::kNoIndex;
  if (t.numel() == 0) return 0;
  DeviceGuard g(t.device_id);
  auto s = static_cast<cudaStream_t>(stream);
  Scratch scratch(s, ~0ull);
  sentinel_count_kernel<<<grid_for(t.numel(), 8), kThreads, 0, s>>>(t, pattern, dtype_size(t.dtype),
                                                                    t.is_contiguous(), scratch.d, scratch.d + 1);
  KV_CUDA_CHECK("poison::count_bits launch", cudaGetLastError());
  unsigned long long h[2];
  scratch.read(h);
  if (first) *first = h[0] ? static_cast<int64_t>(h[1]) : compare::kNoIndex;
  return static_cast<int64_t>(h[0]);
}

uint64_t digest_sum(const TensorView& t, void* stream) {
  if (t.numel() == 0) return 0;
  DeviceGuard g(t.device_id);
  auto s = static_cast<cudaStream_t>(stream);
  Scratch scratch(s, 0ull);
  digest_kernel<<<grid_for(t.numel(), 8), kThreads, 0, s>>>(t, dtype_size(t.dtype), t.is_contiguous(), scratch.d);
  KV_CUDA_CHECK("compare::digest launch", cudaGetLastError());
  unsigned long long h[2];
  scratch.read(h);
  return h[0];
}

}  // namespace kverify::cuda
