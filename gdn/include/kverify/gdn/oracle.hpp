/// @file oracle.hpp
/// @brief The fp64 oracle of the gated delta rule (GDN): the token-by-token recurrence and its
///        hand-derived reverse pass, on the CPU. No torch, no CUDA.
///
/// Conventions are those of fla's `chunk_gated_delta_rule` (DESIGN.md, section GDN):
///   q, k  [B, T, H,  K]     v [B, T, HV, V]     g, beta [B, T, HV]     states [N, HV, K, V]
/// all contiguous row-major float64. Value head hv reads query/key head hv / (HV / H) (grouped
/// value heads, GVA). Per sequence and value head, with k̂, q̂ = k, q or their L2-normalised forms
/// (x / sqrt(xᵀx + eps)), scale s, g in log space:
///   S_t = e^{g_t} (I − β_t k̂_t k̂_tᵀ) S_{t−1} + β_t k̂_t v_tᵀ        (S is K×V, S_0 = h0 or 0)
///   o_t = S_tᵀ (s q̂_t)                                               final state ht = S_T
/// Sequences: without cu_seqlens, N = B and sequence b is batch row b; with cu_seqlens (B must be
/// 1), N = len(cu_seqlens) − 1 and sequence n is tokens [cu_seqlens[n], cu_seqlens[n+1]).
///
/// Reverse pass (derived for this file; P = S_{t−1}, u = Pᵀk̂, dS = ∂L/∂S_t after adding the
/// output's term s q̂ doᵀ):
///   dq̂ = s S_t do            dv = β dSᵀk̂            dβ = k̂ᵀ dS (v − e^{g} u)
///   dg = ⟨dS, S_t − β k̂ vᵀ⟩  dk̂ = β [dS (v − e^{g} u) − e^{g} P (dSᵀ k̂)]
///   ∂L/∂S_{t−1} = e^{g} (dS − β k̂ (k̂ᵀ dS)),  dh0 = ∂L/∂S_0
/// and through the L2 norm y = x r, r = (xᵀx + eps)^{−1/2}: dx = r (dy − y (yᵀ dy)).
/// Memory: states are checkpointed every kSegment tokens and recomputed per segment in the
/// reverse pass, so memory is O((T / kSegment + kSegment) · K · V) per head, not O(T · K · V).
/// Every exponential formed is e^{g_t} with g_t as given (≤ 0 for a decaying gate).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kverify::gdn {

/// Sizes of one call (fla layout, see file comment).
struct Shape {
  int64_t B = 1, T = 1, H = 1, HV = 1, K = 1, V = 1;
};

/// Options of one call.
struct Options {
  std::optional<double> scale;       ///< s; unset means K^{-1/2} (fla's default)
  bool l2norm_qk = false;            ///< L2-normalise q and k inside the op
  double l2_eps = 1e-6;              ///< eps of the L2 norm, as fla's l2norm
  std::vector<int64_t> cu_seqlens;   ///< empty: fixed length; else N+1 offsets, B must be 1
};

/// Inputs (float64, contiguous). h0 may be null (zero initial state).
struct Inputs {
  const double* q = nullptr;
  const double* k = nullptr;
  const double* v = nullptr;
  const double* g = nullptr;
  const double* beta = nullptr;
  const double* h0 = nullptr;
};

/// o [B,T,HV,V] and the final states ht [N,HV,K,V].
struct Forward {
  std::vector<double> o, ht;
};

/// Gradients with the shapes of their inputs; dh0 [N,HV,K,V] (also when h0 was null).
struct Grads {
  std::vector<double> dq, dk, dv, dg, dbeta, dh0;
};

/// Number of sequences N of a call. @throws kverify::Error for an invalid shape or cu_seqlens.
int64_t num_sequences(const Shape& s, const Options& opt);

/// Forward recurrence. @throws kverify::Error naming the field for invalid shapes, HV not a
/// multiple of H, bad cu_seqlens (not starting at 0, decreasing, not ending at T, B != 1) or a
/// null required input.
Forward forward(const Shape& s, const Options& opt, const Inputs& in);

/// Reverse pass for the loss L = Σ do·o + Σ dht·ht (do [B,T,HV,V]; dht [N,HV,K,V] or null).
/// @throws kverify::Error as forward, and for a null do.
Grads backward(const Shape& s, const Options& opt, const Inputs& in, const double* d_o, const double* dht);

}  // namespace kverify::gdn
