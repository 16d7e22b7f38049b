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
using compare::Running;
using compare::type_bytes;

using compare::kChunk;

/// 16-byte vectors holding elements [8k, 8k+8) of a dense tensor of type T.
template <DType T>
constexpr int kVecs = kChunk * type_bytes<T>() / 16;

/// Issue the streaming loads (ld.global.cs: each byte is read once) of chunk k.
template <DType T>
__device__ __forceinline__ void load_chunk(const void* base, int64_t k, uint4 (&q)[kVecs<T>]) {
  const uint4* p = reinterpret_cast<const uint4*>(static_cast<const char*>(base) + k * kChunk * type_bytes<T>());
#pragma unroll
  for (int v = 0; v < kVecs<T>; ++v) q[v] = __ldcs(p + v);
}

/// Raw bits of element e of a loaded chunk (constant indices after unrolling: registers only).
template <DType T>
__device__ __forceinline__ uint64_t element_bits(const uint4 (&q)[kVecs<T>], int e) {
  constexpr int sz = type_bytes<T>();
  auto word = [&](int w) -> uint32_t {
    const uint4& v = q[w / 4];
    const int c = w % 4;
    return c == 0 ? v.x : (c == 1 ? v.y : (c == 2 ? v.z : v.w));
  };
  if constexpr (sz == 8) return static_cast<uint64_t>(word(2 * e)) | (static_cast<uint64_t>(word(2 * e + 1)) << 32);
  else if constexpr (sz == 4) return word(e);
  else return (word(e / 2) >> (16 * (e % 2))) & 0xffffu;
}

template <DType TC, DType TO>
__device__ __forceinline__ void step_chunk(Running& r, const uint4 (&qc)[kVecs<TC>], const uint4 (&qo)[kVecs<TO>],
                                           int64_t k, const compare::Bound& b) {
  uint64_t cb[kChunk], ob[kChunk];
#pragma unroll
  for (int e = 0; e < kChunk; ++e) {
    cb[e] = element_bits<TC>(qc, e);
    ob[e] = element_bits<TO>(qo, e);
  }
  compare::step_chunk<TC, TO>(r, cb, ob, k * kChunk, b);
}

/// Shared array of kThreads CompareStats (raw storage: __shared__ objects may not have constructors).
#define KV_SHARED_STATS(name)                                                        \
  __shared__ alignas(CompareStats) unsigned char name##_raw[kThreads * sizeof(CompareStats)]; \
  CompareStats* name = reinterpret_cast<CompareStats*>(name##_raw)

/// Fold the block's per-thread stats (sh[threadIdx.x] = s) in a fixed tree; result in s.
__device__ void reduce_block(CompareStats* sh, CompareStats& s) {
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) compare::merge(sh[threadIdx.x], sh[threadIdx.x + w]);
    __syncthreads();
  }
  s = sh[0];
}

template <DType TC, DType TO>
__global__ void __launch_bounds__(kThreads, 3) compare_kernel(TensorView c, TensorView o, compare::Bound b, bool vector_path,
                                                          CompareStats* partials) {
  KV_SHARED_STATS(sh);
  sh[threadIdx.x] = CompareStats{};  // this thread's class-mismatch counts live here
  Running r{&sh[threadIdx.x]};
  const int64_t n = c.numel();
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t start_scalar = 0;
  if (vector_path) {
    const int64_t chunks = n / kChunk;
    for (int64_t k = tid; k < chunks; k += stride) {
      uint4 c0[kVecs<TC>], o0[kVecs<TO>];
      load_chunk<TC>(c.data, k, c0);
      load_chunk<TO>(o.data, k, o0);
      step_chunk<TC, TO>(r, c0, o0, k, b);
    }
    start_scalar = chunks * kChunk;
  }
  const bool dense = vector_path || (c.is_contiguous() && o.is_contiguous());
  for (int64_t i = start_scalar + tid; i < n; i += stride) {
    const uint64_t cv = bits::load_raw(c.data, dense ? i : c.offset_of(i), type_bytes<TC>());
    const uint64_t ov = bits::load_raw(o.data, dense ? i : o.offset_of(i), type_bytes<TO>());
    compare::step<TC, TO>(r, cv, ov, i, b);
  }
  CompareStats s = compare::finish(r);
  __syncthreads();
  reduce_block(sh, s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kThreads) fold_kernel(const CompareStats* partials, int count, CompareStats* out) {
  KV_SHARED_STATS(sh);
  CompareStats s;
  for (int i = threadIdx.x; i < count; i += blockDim.x) compare::merge(s, partials[i]);
  reduce_block(sh, s);
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
  result.n = n;
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
