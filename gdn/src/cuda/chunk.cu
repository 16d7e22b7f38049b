// The chunked GDN on the GPU: one kernel per body of chunk_body.hpp, launched in stream order.
// Correctness first: fp32 CUDA-core arithmetic, no tensor cores yet (issue 5 leaves speed to
// the next one). Built for sm_90a (gdn/CMakeLists.txt).
#include <cuda_runtime.h>

#include <algorithm>

#include "../chunk_body.hpp"
#include "../chunk_dispatch.hpp"
#include "kverify/common/check.hpp"
#include "kverify/gdn/chunk.hpp"

namespace kverify::gdn::chunk {

namespace {

constexpr int kThreads = 256;

/// The GPU executor: the threads of one block.
struct Block {
  int tid, nth;
  KV_HD void sync() const {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
};

__device__ Block block() { return Block{int(threadIdx.x), int(blockDim.x)}; }

template <class TIO, class TG>
__global__ void __launch_bounds__(kThreads) k_prep(Args a) {
  extern __shared__ float sm[];
  body::prep<Block, TIO, TG>(block(), a, blockIdx.x, blockIdx.y, sm);
}
template <class TIO, class TG>
__global__ void __launch_bounds__(kThreads) k_state_fwd(Args a) {
  extern __shared__ float sm[];
  body::state_fwd<Block, TIO, TG>(block(), a, blockIdx.z, blockIdx.y, blockIdx.x, sm);
}
template <class TIO, class TG>
__global__ void __launch_bounds__(kThreads) k_output(Args a) {
  extern __shared__ float sm[];
  body::output<Block, TIO, TG>(block(), a, blockIdx.x, blockIdx.y, sm);
}
template <class TIO, class TG>
__global__ void __launch_bounds__(kThreads) k_state_bwd(Args a) {
  extern __shared__ float sm[];
  body::state_bwd<Block, TIO, TG>(block(), a, blockIdx.z, blockIdx.y, blockIdx.x, sm);
}
template <class TIO, class TG>
__global__ void __launch_bounds__(kThreads) k_chunk_bwd(Args a) {
  extern __shared__ float sm[];
  body::chunk_bwd<Block, TIO, TG>(block(), a, blockIdx.x, blockIdx.y, sm);
}
template <class TIO>
__global__ void __launch_bounds__(128) k_reduce_qk(Args a) {
  body::reduce_qk<Block, TIO>(block(), a, blockIdx.x, blockIdx.y);
}

void check_cuda(cudaError_t e, const char* what) {
  KV_CHECK(e == cudaSuccess, "GDN %s: %s", what, cudaGetErrorString(e));
}

/// Launch `kernel` with `floats` of dynamic shared memory (opting in above 48 KiB).
template <class Kernel>
void launch(Kernel kernel, dim3 grid, int threads, int floats, cudaStream_t s, const Args& a, const char* what) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  const int bytes = floats * int(sizeof(float));
  if (bytes > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), what);
  kernel<<<grid, threads, bytes, s>>>(a);
  check_cuda(cudaGetLastError(), what);
}

template <class TIO, class TG>
void forward_launch(const Args& a, cudaStream_t s) {
  const Dims& d = a.d;
  const unsigned tiles = (d.V + kTileV - 1) / kTileV;
  launch(k_prep<TIO, TG>, dim3(unsigned(d.NT), d.HV), kThreads, body::kPrepSmem, s, a, "prep");
  launch(k_state_fwd<TIO, TG>, dim3(tiles, d.HV, d.N), kThreads, body::state_smem(d.K), s, a, "state_fwd");
  if (a.o) launch(k_output<TIO, TG>, dim3(unsigned(d.NT), d.HV), kThreads, body::kOutSmem, s, a, "output");
}

template <class TIO, class TG>
void backward_launch(const Args& a, cudaStream_t s) {
  const Dims& d = a.d;
  Args f = a;  // recompute γ, w, u, h, v_new
  f.o = nullptr;
  f.ht = nullptr;
  forward_launch<TIO, TG>(f, s);
  const unsigned tiles = (d.V + kTileV - 1) / kTileV;
  launch(k_state_bwd<TIO, TG>, dim3(tiles, d.HV, d.N), kThreads, body::state_smem(d.K), s, a, "state_bwd");
  launch(k_chunk_bwd<TIO, TG>, dim3(unsigned(d.NT), d.HV), kThreads, body::bwd_smem(d.K), s, a, "chunk_bwd");
  launch(k_reduce_qk<TIO>, dim3(unsigned(d.tokens), d.H), 128, 0, s, a, "reduce_qk");
}

}  // namespace

void forward_cuda(const Args& a, void* stream) {
  validate(a, false);
  with_types(a.io, a.gate, [&](auto tio, auto tg) {
    forward_launch<decltype(tio), decltype(tg)>(a, static_cast<cudaStream_t>(stream));
  });
}

void backward_cuda(const Args& a, void* stream) {
  validate(a, true);
  with_types(a.io, a.gate, [&](auto tio, auto tg) {
    backward_launch<decltype(tio), decltype(tg)>(a, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace kverify::gdn::chunk
