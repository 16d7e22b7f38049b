/// @file chunk.hpp
/// @brief The chunked gated delta rule (chunk 64, WY representation): forward and backward, as
///        CUDA kernels (gdn/src/cuda/chunk.cu) and as the same kernel bodies run serially on the
///        CPU (gdn/src/chunk_host.cpp). No torch: raw pointers, strides, a cudaStream_t.
///
/// Conventions are fla's `chunk_gated_delta_rule` (DESIGN.md, section GDN), with the batch folded
/// into the token axis: sequence n is tokens [cu[n], cu[n+1]) of q, k [tokens, H, K],
/// v [tokens, HV, V], g, beta [tokens, HV]; states [N, HV, K, V] float32. Value head hv reads
/// query/key head hv / (HV / H). g is the log decay per token and must be ≤ 0.
///
/// Math (per sequence, value head and chunk of L ≤ 64 tokens, state S0 at the chunk's start;
/// derived for this file from the recurrence S_t = e^{g_t}(I − β_t k_t k_tᵀ)S_{t−1} + β_t k_t v_tᵀ):
///   γ_t = Σ_{s≤t} g_s (within the chunk)           A[t,s] = β_t e^{γ_t−γ_s} k_t·k_s  (s < t)
///   T = (I + A)^{−1}   w = T diag(β e^{γ}) K   u = T diag(β) V   δ = u − w S0   ("v_new")
///   o = s·diag(e^{γ}) Q S0 + (s·QKᵀ ⊙ M) δ,   M[t,s] = e^{γ_t−γ_s} (s ≤ t)
///   S_L = e^{γ_L} S0 + Kᵀ diag(e^{γ_L−γ}) δ
/// The decays e^{γ_t−γ_s} (s ≤ t) are formed as e^{g_{s+1}+…+g_t}, summed directly (never as a
/// difference of cumulative sums, which cancels in fp32 and gives NaN after g = −∞); with e^{γ_t}
/// every exponent formed is a sum of g's, ≤ 0 when g ≤ 0.
/// Backward: recompute (γ, T, w, u, the state scan), then the reverse state scan
///   dδ = (s·QKᵀ ⊙ M)ᵀ dO + diag(e^{γ_L−γ}) K dS_L,   dS0 = s·Qᵀ diag(e^{γ}) dO + e^{γ_L} dS_L − wᵀ dδ,
/// then per chunk dq, dk, dv, dβ, dγ (through o, S_L, w, u and T: dA = −Tᵀ dT Tᵀ on the strictly
/// lower part) and dg = the reverse cumulative sum of dγ within the chunk. No atomics: every
/// output element has one writer and a fixed summation order, so results are bitwise
/// reproducible run to run.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kverify::gdn::chunk {

constexpr int kChunk = 64;    ///< tokens per chunk
constexpr int kTileV = 32;    ///< state columns per block of the state scans
constexpr int kMaxK = 128;    ///< largest K (shared-memory sizing); V is unbounded (tiled)

/// Element type of q, k, v, do, o, dq, dk, dv (io) or of g, beta, dg, dbeta (gate).
enum class Dt : uint8_t { F32, F16, BF16 };

/// A [tokens, heads, dim] (dim = 1 for g, beta) input: element (t, h, d) at p[t*st + h*sh + d].
struct In {
  const void* p = nullptr;
  int64_t st = 0, sh = 0;
};

/// Sizes of one call.
struct Dims {
  int64_t tokens = 0;         ///< total tokens (B·T, or cu_seqlens[-1])
  int H = 1, HV = 1, K = 64, V = 64;
  int N = 1;                  ///< sequences
  int64_t NT = 0;             ///< chunks over all sequences
  float scale = 0.125f;       ///< s
};

/// Everything one forward or backward call reads and writes. Pointers live where the call runs
/// (device memory for the CUDA path, host memory for the CPU path). Outputs are contiguous.
struct Args {
  Dims d;
  Dt io = Dt::F32, gate = Dt::F32;
  const int64_t* cu = nullptr;          ///< [N+1] token offsets of the sequences
  const int64_t* seq_chunk0 = nullptr;  ///< [N+1] first chunk of each sequence (chunk_table)
  const int64_t* chunks = nullptr;      ///< [NT, 2] (first token, length) of each chunk
  In q, k, v, g, beta;
  const float* h0 = nullptr;            ///< [N, HV, K, V] or null (zero)
  // forward outputs
  void* o = nullptr;                    ///< [tokens, HV, V] io (forward; may be null in backward)
  float* ht = nullptr;                  ///< [N, HV, K, V] or null
  // backward inputs and outputs
  In d_o;                               ///< like v
  const float* dht = nullptr;           ///< [N, HV, K, V] or null (zero)
  void *dq = nullptr, *dk = nullptr;    ///< [tokens, H, K] io
  void* dv = nullptr;                   ///< [tokens, HV, V] io
  void *dg = nullptr, *dbeta = nullptr; ///< [tokens, HV] gate
  float* dh0 = nullptr;                 ///< [N, HV, K, V] or null
  float* ws = nullptr;                  ///< workspace of workspace_floats(d, backward) floats
};

/// Floats of workspace a call needs (forward: γ, w, u, v_new, the chunk states; backward adds
/// the chunk state gradients, dv_new and per-value-head dq, dk).
size_t workspace_floats(const Dims& d, bool backward);

/// Number of chunks of the sequences cu[0..N] and the tables of Args: seq_chunk0 [N+1] and
/// chunks [NT*2]. @throws kverify::Error if cu does not start at 0 or decreases.
int64_t chunk_table(const int64_t* cu, int N, int64_t* seq_chunk0, int64_t* chunks);

/// Checks the sizes of `a` (K ≤ kMaxK, HV a multiple of H, non-null required pointers).
/// @throws kverify::Error naming the field.
void validate(const Args& a, bool backward);

/// Forward on the CPU (same kernel bodies as the GPU, run serially). Writes o, ht, workspace.
void forward_host(const Args& a);
/// Backward on the CPU: writes dq, dk, dv, dg, dbeta, dh0 (o is not needed).
void backward_host(const Args& a);

/// Forward on the GPU on `stream` (a cudaStream_t). @throws kverify::Error if kverify was built
/// without CUDA or a launch fails.
void forward_cuda(const Args& a, void* stream);
/// Backward on the GPU on `stream`. @throws kverify::Error as forward_cuda.
void backward_cuda(const Args& a, void* stream);

}  // namespace kverify::gdn::chunk
