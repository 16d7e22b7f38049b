// CUDA fused comparator. One pass over both tensors with a persistent grid; each thread keeps a
// CompareStats in registers, blocks reduce in shared memory in a fixed tree, block partials go to
// a workspace of gridDim entries (O(1) in the tensor size), and one block folds them in a fixed
// order: the result is identical run to run.
//
// Dense, 16-byte-aligned tensors are read 8 elements at a time with 16-byte streaming loads
// (ld.global.cs: each byte is read once); anything else takes the strided path.
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_check.cuh"

#include <cstdlib>

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

/// Element source over a chunk held in registers (the first pass of step_chunk_lean).
template <DType TC, DType TO>
struct RegisterSource {
  const uint4 (&qc)[kVecs<TC>];
  const uint4 (&qo)[kVecs<TO>];
  __device__ __forceinline__ uint64_t c(int e) const { return element_bits<TC>(qc, e); }
  __device__ __forceinline__ uint64_t o(int e) const { return element_bits<TO>(qo, e); }
};

/// Element source that loads chunk elements from memory again (the rare second pass): keeps the
/// chunk's registers free once the first pass is done.
template <DType TC, DType TO>
struct MemorySource {
  const void* cbase;
  const void* obase;
  int64_t first;
  __device__ __forceinline__ uint64_t c(int e) const { return bits::load_raw(cbase, first + e, type_bytes<TC>()); }
  __device__ __forceinline__ uint64_t o(int e) const { return bits::load_raw(obase, first + e, type_bytes<TO>()); }
};

template <DType TC, DType TO>
__device__ __forceinline__ void step_chunk(Running& r, const uint4 (&qc)[kVecs<TC>], const uint4 (&qo)[kVecs<TO>],
                                           const TensorView& c, const TensorView& o, int64_t k, const compare::Bound& b) {
  if constexpr (type_bytes<TC>() <= 4) {
    compare::step_chunk_lean<TC, TO>(r, RegisterSource<TC, TO>{qc, qo}, MemorySource<TC, TO>{c.data, o.data, k * kChunk},
                                     k * kChunk, b);
  } else {
    uint64_t cb[kChunk], ob[kChunk];
#pragma unroll
    for (int e = 0; e < kChunk; ++e) {
      cb[e] = element_bits<TC>(qc, e);
      ob[e] = element_bits<TO>(qo, e);
    }
    compare::step_chunk<TC, TO>(r, cb, ob, k * kChunk, b);
  }
}

/// Resident blocks per SM the compare kernel is compiled for (register budget 65536 / (256 x this)):
/// 16-bit pairs fit 3 (85 registers; ptxas -v: a 12-byte spill, outside the hot loop, for bf16);
/// wider pairs need more registers for their fp64 arithmetic and two chunks in flight without
/// spilling (fp32: none), so 2 (128).
template <DType TC, DType TO>
constexpr int kMinBlocks = (type_bytes<TC>() == 2 && type_bytes<TO>() == 2) ? 3 : 2;

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

/// Ask L2 to fetch the warp's chunks [k0, k0 + 32) of both tensors ahead of their loads (one
/// bulk prefetch per tensor, issued by lane 0; nothing past the last chunk). The loads then find
/// the data in L2, so more bytes are on their way from HBM than a thread's registers could hold.
template <DType TC, DType TO>
__device__ __forceinline__ void prefetch_l2(const TensorView& c, const TensorView& o, int64_t k0, int64_t chunks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if ((threadIdx.x & 31) != 0 || k0 >= chunks) return;
  const int64_t count = chunks - k0 < 32 ? chunks - k0 : 32;
  const char* pc = static_cast<const char*>(c.data) + k0 * kChunk * type_bytes<TC>();
  const char* po = static_cast<const char*>(o.data) + k0 * kChunk * type_bytes<TO>();
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(pc), "r"(static_cast<unsigned>(count * kChunk * type_bytes<TC>()))
               : "memory");
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(po), "r"(static_cast<unsigned>(count * kChunk * type_bytes<TO>()))
               : "memory");
#else
  (void)c, (void)o, (void)k0, (void)chunks;
#endif
}

template <DType TC, DType TO>
__global__ void __launch_bounds__(kThreads, kMinBlocks<TC, TO>) compare_kernel(TensorView c, TensorView o, compare::Bound b, bool vector_path,
                                                          int prefetch, CompareStats* partials) {
  KV_SHARED_STATS(sh);
  sh[threadIdx.x] = CompareStats{};  // this thread's class-mismatch counts live here
  Running r{&sh[threadIdx.x]};
  const int64_t n = c.numel();
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t start_scalar = 0;
  if (vector_path) {
    const int64_t chunks = n / kChunk;
    // Two chunks in flight in registers: the loads of chunk k + stride are issued before chunk k
    // is measured; with prefetch = D > 0, L2 is asked for chunk k + D * stride as well (each warp's
    // chunks are consecutive, so lane 0 of a warp prefetches for all 32 threads).
    uint4 ca[kVecs<TC>], oa[kVecs<TO>], cb[kVecs<TC>], ob[kVecs<TO>];
    int64_t k = tid;
    const int64_t ahead = static_cast<int64_t>(prefetch) * stride;
    if (prefetch > 0)
      for (int d = 1; d < prefetch; ++d) prefetch_l2<TC, TO>(c, o, k + d * stride, chunks);
    if (k < chunks) { load_chunk<TC>(c.data, k, ca); load_chunk<TO>(o.data, k, oa); }
    while (k < chunks) {
      int64_t next = k + stride;
      if (prefetch > 0) prefetch_l2<TC, TO>(c, o, k + ahead, chunks);
      if (next < chunks) { load_chunk<TC>(c.data, next, cb); load_chunk<TO>(o.data, next, ob); }
      step_chunk<TC, TO>(r, ca, oa, c, o, k, b);
      k = next;
      if (k >= chunks) break;
      next = k + stride;
      if (prefetch > 0) prefetch_l2<TC, TO>(c, o, k + ahead, chunks);
      if (next < chunks) { load_chunk<TC>(c.data, next, ca); load_chunk<TO>(o.data, next, oa); }
      step_chunk<TC, TO>(r, cb, ob, c, o, k, b);
      k = next;
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

/// L2 prefetch distance of the compare kernel in grid-stride steps: KVERIFY_COMPARE_PREFETCH
/// (a tuning knob for bench/compare.py --prefetch), default kDefaultPrefetch = 0, off: on the
/// H200, 2 GiB pairs, distances 2, 4 and 8 were all slower than none (fp32 3.30 vs 3.64 TB/s,
/// bf16 2.10 vs 2.33 TB/s; results/engine/bench_compare_h200.txt).
constexpr int kDefaultPrefetch = 0;
int prefetch_distance() {
  const char* v = std::getenv("KVERIFY_COMPARE_PREFETCH");
  if (v == nullptr || *v == '\0') return kDefaultPrefetch;
  const int d = std::atoi(v);
  return d < 0 ? 0 : (d > 64 ? 64 : d);
}

template <DType TC, DType TO>
CompareStats run(const TensorView& c, const TensorView& o, const compare::Bound& b, cudaStream_t s) {
  const int64_t n = c.numel();
  CompareStats result;
  if (n == 0) return result;
  const bool aligned = (reinterpret_cast<uintptr_t>(c.data) % 16 == 0) && (reinterpret_cast<uintptr_t>(o.data) % 16 == 0);
  const bool vector_path = aligned && c.is_contiguous() && o.is_contiguous();
  int resident = 0;  // blocks of this kernel that fit on one SM at once: one wave of a persistent grid
  KV_CUDA_CHECK("compare occupancy",
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, compare_kernel<TC, TO>, kThreads, 0));
  const int grid = grid_for(vector_path ? (n + kChunk - 1) / kChunk : n, resident < 1 ? 1 : (resident > 4 ? 4 : resident));
  CompareStats* ws = nullptr;
  KV_CUDA_CHECK("compare workspace", cudaMallocAsync(&ws, (grid + 1) * sizeof(CompareStats), s));
  compare_kernel<TC, TO><<<grid, kThreads, 0, s>>>(c, o, b, vector_path, prefetch_distance(), ws);
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
