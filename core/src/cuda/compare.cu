// CUDA fused comparator. One pass over both tensors with a persistent grid; each thread keeps a
// CompareStats in registers, blocks reduce in shared memory in a fixed tree, block partials go to
// a workspace of gridDim entries (O(1) in the tensor size), and one block folds them in a fixed
// order: the result is identical run to run.
//
// Dense, 16-byte-aligned tensors are read 8 elements at a time with 16-byte streaming loads
// (ld.global.cs: each byte is read once); anything else takes the strided path.
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_check.cuh"

namespace kverify::cuda {

namespace {

using compare::CompareStats;

constexpr int kChunk = 8;  ///< elements per vector step

/// Load elements [8k, 8k+8) of a dense tensor of type T as doubles with 16-byte loads.
template <DType T>
__device__ __forceinline__ void load_chunk(const void* base, int64_t k, double out[kChunk]) {
  constexpr int sz = T == DType::F64 ? 8 : (T == DType::F32 ? 4 : 2);
  constexpr int nvec = kChunk * sz / 16;
  const uint4* p = reinterpret_cast<const uint4*>(static_cast<const char*>(base) + k * kChunk * sz);
  uint4 raw[nvec];
#pragma unroll
  for (int v = 0; v < nvec; ++v) raw[v] = __ldcs(p + v);
  const char* bytes = reinterpret_cast<const char*>(raw);
#pragma unroll
  for (int e = 0; e < kChunk; ++e) out[e] = bits::load_f<T>(bytes, e);
}

__device__ void reduce_block(CompareStats& s) {
  // raw storage: __shared__ objects may not have constructors
  __shared__ alignas(CompareStats) unsigned char raw[kThreads * sizeof(CompareStats)];
  CompareStats* sh = reinterpret_cast<CompareStats*>(raw);
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) compare::merge(sh[threadIdx.x], sh[threadIdx.x + w]);
    __syncthreads();
  }
  s = sh[0];
}

template <DType TC, DType TO>
__global__ void __launch_bounds__(kThreads) compare_kernel(TensorView c, TensorView o, compare::Bound b, bool vector_path,
                                                          CompareStats* partials) {
  CompareStats s;
  double rn = 0.0, rd = 1.0;
  const int64_t n = c.numel();
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t start_scalar = 0;
  if (vector_path) {
    const int64_t chunks = n / kChunk;
    for (int64_t k = tid; k < chunks; k += stride) {
      double cv[kChunk], ov[kChunk];
      load_chunk<TC>(c.data, k, cv);
      load_chunk<TO>(o.data, k, ov);
#pragma unroll
      for (int e = 0; e < kChunk; ++e) compare::step<TC>(s, rn, rd, cv[e], ov[e], k * kChunk + e, b);
    }
    start_scalar = chunks * kChunk;
  }
  const bool dense = vector_path || (c.is_contiguous() && o.is_contiguous());
  for (int64_t i = start_scalar + tid; i < n; i += stride) {
    const double cv = bits::load_f<TC>(c.data, dense ? i : c.offset_of(i));
    const double ov = bits::load_f<TO>(o.data, dense ? i : o.offset_of(i));
    compare::step<TC>(s, rn, rd, cv, ov, i, b);
  }
  compare::finish_rel(s, rn, rd);
  reduce_block(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kThreads) fold_kernel(const CompareStats* partials, int count, CompareStats* out) {
  CompareStats s;
  for (int i = threadIdx.x; i < count; i += blockDim.x) compare::merge(s, partials[i]);
  reduce_block(s);
  if (threadIdx.x == 0) *out = s;
}

template <DType TC, DType TO>
CompareStats run(const TensorView& c, const TensorView& o, const compare::Bound& b, cudaStream_t s) {
  const int64_t n = c.numel();
  CompareStats result;
  if (n == 0) return result;
  const bool aligned = (reinterpret_cast<uintptr_t>(c.data) % 16 == 0) && (reinterpret_cast<uintptr_t>(o.data) % 16 == 0);
  const bool vector_path = aligned && c.is_contiguous() && o.is_contiguous();
  const int grid = grid_for(vector_path ? (n + kChunk - 1) / kChunk : n, 4);
  CompareStats* ws = nullptr;
  KV_CUDA_CHECK("compare workspace", cudaMallocAsync(&ws, (grid + 1) * sizeof(CompareStats), s));
  compare_kernel<TC, TO><<<grid, kThreads, 0, s>>>(c, o, b, vector_path, ws);
  KV_CUDA_CHECK("compare launch", cudaGetLastError());
  fold_kernel<<<1, kThreads, 0, s>>>(ws, grid, ws + grid);
  KV_CUDA_CHECK("compare fold launch", cudaGetLastError());
  KV_CUDA_CHECK("compare readback", cudaMemcpyAsync(&result, ws + grid, sizeof(CompareStats), cudaMemcpyDeviceToHost, s));
  KV_CUDA_CHECK("compare free", cudaFreeAsync(ws, s));
  KV_CUDA_CHECK("compare sync", cudaStreamSynchronize(s));
  return result;
}

template <DType TC>
CompareStats by_oracle(const TensorView& c, const TensorView& o, const compare::Bound& b, cudaStream_t s) {
  switch (o.dtype) {
    case DType::F64: return run<TC, DType::F64>(c, o, b, s);
    case DType::F32: return run<TC, DType::F32>(c, o, b, s);
    case DType::F16: return run<TC, DType::F16>(c, o, b, s);
    default: return run<TC, DType::BF16>(c, o, b, s);
  }
}

}  // namespace

size_t compare_workspace_bytes(int64_t numel) {
  return (static_cast<size_t>(grid_for((numel + kChunk - 1) / kChunk, 4)) + 1) * sizeof(CompareStats);
}

CompareStats compare(const TensorView& c, const TensorView& o, const compare::Bound& b, void* stream) {
  DeviceGuard g(c.device_id);
  auto s = static_cast<cudaStream_t>(stream);
  switch (c.dtype) {
    case DType::F64: return by_oracle<DType::F64>(c, o, b, s);
    case DType::F32: return by_oracle<DType::F32>(c, o, b, s);
    case DType::F16: return by_oracle<DType::F16>(c, o, b, s);
    default: return by_oracle<DType::BF16>(c, o, b, s);
  }
}

}  // namespace kverify::cuda
