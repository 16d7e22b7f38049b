// CUDA fused comparator. One pass over both tensors with a persistent grid; each thread keeps a
// CompareStats in registers, blocks reduce in shared memory in a fixed tree, block partials go to
// a workspace of gridDim entries (O(1) in the tensor size), and one block folds them in a fixed
// order: the result is identical run to run.
//
// Dense, 16-byte-aligned tensors are read one step at a time with 16-byte streaming loads
// (ld.global.cs: each byte is read once): 16 elements (two 8-element chunks, two loads per tensor)
// for 16-bit pairs, 8 elements (one chunk) otherwise; anything else takes the strided path.
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_check.cuh"

#include <cstdlib>

namespace kverify::cuda {

namespace {

using compare::CompareStats;
using compare::Running;
using compare::type_bytes;

using compare::kChunk;

template <DType TC, DType TO>
constexpr bool kPair16 = type_bytes<TC>() == 2 && type_bytes<TO>() == 2;

/// Chunks per step of the vector loop: 2 for 16-bit pairs (16 elements: the per-step work of the
/// loop and the flag tests is shared by twice as many elements), 1 otherwise (wider pairs would
/// need more registers to keep two steps in flight).
template <DType TC, DType TO>
constexpr int kHalves = kPair16<TC, TO> ? 2 : 1;

/// 16-byte vectors holding the `halves` chunks of one step of a dense tensor of type T.
template <DType T, int halves>
constexpr int kVecs = halves * kChunk * type_bytes<T>() / 16;

/// Issue the streaming loads (ld.global.cs: each byte is read once) of step k (elements
/// [k * 8 * halves, (k + 1) * 8 * halves)).
template <DType T, int halves>
__device__ __forceinline__ void load_step(const void* base, int64_t k, uint4 (&q)[kVecs<T, halves>]) {
  const uint4* p = reinterpret_cast<const uint4*>(static_cast<const char*>(base) + k * halves * kChunk * type_bytes<T>());
#pragma unroll
  for (int v = 0; v < kVecs<T, halves>; ++v) q[v] = __ldcs(p + v);
}

/// Raw bits of element e of a loaded step (constant indices after unrolling: registers only).
template <DType T, int N>
__device__ __forceinline__ uint64_t element_bits(const uint4 (&q)[N], int e) {
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

/// Word w of a loaded step (constant indices after unrolling: registers only).
template <int N>
__device__ __forceinline__ uint32_t word(const uint4 (&q)[N], int w) {
  const uint4& v = q[w / 4];
  const int c = w % 4;
  return c == 0 ? v.x : (c == 1 ? v.y : (c == 2 ? v.z : v.w));
}

/// Element source over a step held in registers (the first pass of the lean chunk steps);
/// o_or(h): OR of the oracle words of chunk h (16-bit oracles: one 16-byte vector per chunk).
template <DType TC, DType TO, int halves>
struct RegisterSource {
  const uint4 (&qc)[kVecs<TC, halves>];
  const uint4 (&qo)[kVecs<TO, halves>];
  __device__ __forceinline__ uint64_t c(int e) const { return element_bits<TC>(qc, e); }
  __device__ __forceinline__ uint64_t o(int e) const { return element_bits<TO>(qo, e); }
  __device__ __forceinline__ uint32_t o_or(int h) const {
    static_assert(type_bytes<TO>() == 2, "o_or: 16-bit oracles");
    return qo[h].x | qo[h].y | qo[h].z | qo[h].w;
  }
  /// Word j (elements 2j, 2j + 1 of 16-bit tensors, the lower index in the low half).
  __device__ __forceinline__ uint32_t cw(int j) const { return word(qc, j); }
  __device__ __forceinline__ uint32_t ow(int j) const { return word(qo, j); }
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

/// Measure step k (`halves` chunks from element k * 8 * halves) held in qc, qo.
template <DType TC, DType TO, int halves>
__device__ __forceinline__ void step_chunks(Running& r, const uint4 (&qc)[kVecs<TC, halves>], const uint4 (&qo)[kVecs<TO, halves>],
                                            const TensorView& c, const TensorView& o, int64_t k, const compare::Bound& b) {
  const int64_t first = k * halves * kChunk;
  if constexpr (kPair16<TC, TO>) {
    compare::step_chunks_lean16<TC, TO, halves>(r, RegisterSource<TC, TO, halves>{qc, qo},
                                                MemorySource<TC, TO>{c.data, o.data, first}, first, b);
  } else if constexpr (type_bytes<TC>() <= 4) {
    static_assert(halves == 1, "one chunk per step");
    compare::step_chunk_lean<TC, TO>(r, RegisterSource<TC, TO, 1>{qc, qo}, MemorySource<TC, TO>{c.data, o.data, first}, first, b);
  } else {
    static_assert(halves == 1, "one chunk per step");
    uint64_t cb[kChunk], ob[kChunk];
#pragma unroll
    for (int e = 0; e < kChunk; ++e) {
      cb[e] = element_bits<TC>(qc, e);
      ob[e] = element_bits<TO>(qo, e);
    }
    compare::step_chunk<TC, TO>(r, cb, ob, first, b);
  }
}

/// Resident blocks per SM the compare kernel is compiled for (register budget 65536 / (256 x this)):
/// 2 (128 registers) for every pair. A step of a 16-bit pair reads 64 bytes per thread and tensor
/// pair, like a step of an fp32 pair, and fits the 128 registers with no spill (ptxas -v, sm_90:
/// 128 for bf16/bf16 and f16/f16); at 3 blocks (85 registers) ptxas spilled the in-flight step
/// around the rare path, inside the hot loop. Wider pairs need the registers for their fp64 arithmetic and two chunks in flight (fp32: no spill).
template <DType TC, DType TO>
constexpr int kMinBlocks = 2;

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

/// Ask L2 to fetch the warp's steps [k0, k0 + 32) of both tensors ahead of their loads (one
/// bulk prefetch per tensor, issued by lane 0; nothing past the last step). The loads then find
/// the data in L2, so more bytes are on their way from HBM than a thread's registers could hold.
template <DType TC, DType TO>
__device__ __forceinline__ void prefetch_l2(const TensorView& c, const TensorView& o, int64_t k0, int64_t steps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kStep = kHalves<TC, TO> * kChunk;  // elements per step
  if ((threadIdx.x & 31) != 0 || k0 >= steps) return;
  const int64_t count = steps - k0 < 32 ? steps - k0 : 32;
  const char* pc = static_cast<const char*>(c.data) + k0 * kStep * type_bytes<TC>();
  const char* po = static_cast<const char*>(o.data) + k0 * kStep * type_bytes<TO>();
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(pc), "r"(static_cast<unsigned>(count * kStep * type_bytes<TC>()))
               : "memory");
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(po), "r"(static_cast<unsigned>(count * kStep * type_bytes<TO>()))
               : "memory");
#else
  (void)c, (void)o, (void)k0, (void)steps;
#endif
}

/// Raise the lean 16-bit flag thresholds of every lane of the warp to the warp's largest, once some
/// lane refreshed its own (after a re-walk). Called by all 32 lanes after the same step of the
/// vector loop: every element measured so far by any lane precedes every element of the warp's
/// next step, which is what step_chunks_lean16 asks of shared thresholds. A chunk is then flagged
/// only when it may beat the warp's maxima, not its lane's, and any flagged lane makes the whole
/// warp wait on its re-walk (CPU emulation, Compare.LeanRewalkIsRareOnRealisticData: 0.02% of
/// chunks re-walked with each lane's own thresholds, 0.000% with the warp's).
/// Non-negative floats (+Inf included) order like their bit patterns.
template <DType TC, DType TO>
__device__ __forceinline__ void share_thresholds(Running& r) {
  if constexpr (kPair16<TC, TO>) {
    constexpr unsigned kAll = 0xffffffffu;
    if (!__any_sync(kAll, r.refreshed)) return;
    r.refreshed = false;
    r.f_amax = __uint_as_float(__reduce_max_sync(kAll, __float_as_uint(r.f_amax)));
    // the relative pair of the first lane whose ratio (rounded: any lane's pair is valid) is largest
    const uint32_t key = __float_as_uint(__fdiv_rn(r.f_rn, r.f_rd));
    const int src = __ffs(__ballot_sync(kAll, key == __reduce_max_sync(kAll, key))) - 1;
    r.f_rn = __shfl_sync(kAll, r.f_rn, src);
    r.f_rd = __shfl_sync(kAll, r.f_rd, src);
    const uint32_t u = __reduce_max_sync(kAll, r.u2 & 0xffffu);
    r.u2 = u | (u << 16);
  } else {
    (void)r;
  }
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
    constexpr int H = kHalves<TC, TO>;
    const int64_t chunks = n / kChunk, steps = chunks / H;
    // Two steps in flight in registers: the loads of step k + stride are issued before step k
    // is measured; with prefetch = D > 0, L2 is asked for step k + D * stride as well (each warp's
    // steps are consecutive, so lane 0 of a warp prefetches for all 32 threads).
    uint4 ca[kVecs<TC, H>], oa[kVecs<TO, H>], cb[kVecs<TC, H>], ob[kVecs<TO, H>];
    // The loop runs while the warp's first lane has a step (warp-uniform: stride is a multiple
    // of 32 and a warp's steps are consecutive), so all 32 lanes reach share_thresholds together.
    int64_t k = tid;
    const int64_t lane = threadIdx.x & 31;
    const int64_t ahead = static_cast<int64_t>(prefetch) * stride;
    if (prefetch > 0)
      for (int d = 1; d < prefetch; ++d) prefetch_l2<TC, TO>(c, o, k + d * stride, steps);
    if (k < steps) { load_step<TC, H>(c.data, k, ca); load_step<TO, H>(o.data, k, oa); }
    while (k - lane < steps) {
      int64_t next = k + stride;
      if (prefetch > 0) prefetch_l2<TC, TO>(c, o, k + ahead, steps);
      if (next < steps) { load_step<TC, H>(c.data, next, cb); load_step<TO, H>(o.data, next, ob); }
      if (k < steps) step_chunks<TC, TO, H>(r, ca, oa, c, o, k, b);
      share_thresholds<TC, TO>(r);
      k = next;
      if (k - lane >= steps) break;
      next = k + stride;
      if (prefetch > 0) prefetch_l2<TC, TO>(c, o, k + ahead, steps);
      if (next < steps) { load_step<TC, H>(c.data, next, ca); load_step<TO, H>(o.data, next, oa); }
      if (k < steps) step_chunks<TC, TO, H>(r, cb, ob, c, o, k, b);
      share_thresholds<TC, TO>(r);
      k = next;
    }
    if constexpr (H == 2) {
      // An odd chunk count leaves chunk 2 * steps: measured as one chunk (the cut the CPU loop
      // makes too), by one thread, after all its steps and before its scalar tail (indices increase).
      if (chunks > 2 * steps && tid == steps % stride) {
        uint4 qc[kVecs<TC, 1>], qo[kVecs<TO, 1>];
        load_step<TC, 1>(c.data, chunks - 1, qc);
        load_step<TO, 1>(o.data, chunks - 1, qo);
        step_chunks<TC, TO, 1>(r, qc, qo, c, o, chunks - 1, b);
      }
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
  constexpr int kStep = kHalves<TC, TO> * kChunk;  // elements per step of the vector loop
  const int grid = grid_for(vector_path ? (n + kStep - 1) / kStep : n, resident < 1 ? 1 : (resident > 4 ? 4 : resident));
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
