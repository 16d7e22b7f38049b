/// @file chunk_body.hpp
/// @brief The bodies of the chunked GDN kernels, written once for both executors: a CUDA thread
///        block (X = Block, tid = threadIdx.x, sync = __syncthreads) and the CPU (X = Serial,
///        one "thread" that runs every loop iteration; sync does nothing). Math and notation:
///        kverify/gdn/chunk.hpp. All arithmetic is fp32.
///
/// Work decomposition (one call of a body = one CUDA block):
///   prep       (chunk, hv)          γ, T = (I+A)^{-1}, w, u                → workspace
///   state_fwd  (seq, hv, V tile)    the forward state scan: h per chunk, v_new, ht
///   output     (chunk, hv)          o
///   state_bwd  (seq, hv, V tile)    the reverse state scan: dh per chunk, dv_new, dh0
///   chunk_bwd  (chunk, hv)          dq, dk (per value head), dv, dβ, dg
///   reduce_qk  (token, h)           dq, dk summed over the value heads of a group
/// Loops over elements are `for (i = x.tid; i < n; i += x.nth)`; a value read by another thread
/// is read only after x.sync(). Each output element has one writer and a fixed summation order.
#pragma once

#include <cmath>
#include <cstdint>

#include "kverify/common/check.hpp"
#include "kverify/gdn/chunk.hpp"
#include "kverify/tensor/bits.hpp"

#if defined(__CUDACC__)
#define KV_BODY __host__ __device__
#else
#define KV_BODY
#endif

namespace kverify::gdn::chunk::body {

constexpr int C = kChunk;

// ---- element types -----------------------------------------------------------------------
struct F32 {
  KV_HD static float ld(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
  KV_HD static void st(void* p, int64_t i, float v) { static_cast<float*>(p)[i] = v; }
};
struct F16 {
  KV_HD static float ld(const void* p, int64_t i) { return bits::half_to_float(static_cast<const uint16_t*>(p)[i]); }
  KV_HD static void st(void* p, int64_t i, float v) { static_cast<uint16_t*>(p)[i] = bits::float_to_half(v); }
};
struct BF16 {
  KV_HD static float ld(const void* p, int64_t i) { return bits::bf16_to_float(static_cast<const uint16_t*>(p)[i]); }
  KV_HD static void st(void* p, int64_t i, float v) { static_cast<uint16_t*>(p)[i] = bits::float_to_bf16(v); }
};

KV_HD float fexp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

/// The CPU executor: one thread that runs every iteration.
struct Serial {
  static constexpr int tid = 0, nth = 1;
  KV_HD void sync() const {}
};

// ---- workspace -----------------------------------------------------------------------------
/// Views into Args::ws (all float32, contiguous):
///   gcum [tokens, HV]  w [tokens, HV, K]  u, vnew [tokens, HV, V]  h [NT, HV, K, V]
///   backward: dh [NT, HV, K, V]  dvnew [tokens, HV, V]  dqh, dkh [tokens, HV, K]
struct Ws {
  float *gcum, *w, *u, *vnew, *h, *dh, *dvnew, *dqh, *dkh;
  size_t total_fwd, total_bwd;
};
KV_HD Ws carve(const Dims& d, float* base) {
  const size_t tHV = size_t(d.tokens) * d.HV, state = size_t(d.NT) * d.HV * d.K * d.V;
  Ws w{};
  size_t o = 0;
  w.gcum = base + o, o += tHV;
  w.w = base + o, o += tHV * d.K;
  w.u = base + o, o += tHV * d.V;
  w.vnew = base + o, o += tHV * d.V;
  w.h = base + o, o += state;
  w.total_fwd = o;
  w.dh = base + o, o += state;
  w.dvnew = base + o, o += tHV * d.V;
  w.dqh = base + o, o += tHV * d.K;
  w.dkh = base + o, o += tHV * d.K;
  w.total_bwd = o;
  return w;
}

/// Shared-memory floats of each body.
constexpr int kPrepSmem = 2 * C + 3 * C * C;
KV_HD int state_smem(int K) { return K * kTileV + C * kTileV + 2 * C * C + C; }
constexpr int kOutSmem = 2 * C * C + C;
KV_HD int bwd_smem(int K) { return 6 * C + 6 * C * C + C * K; }

// ---- accessors ----------------------------------------------------------------------------
template <class E>
KV_HD float at(const In& x, int64_t t, int h, int d) { return E::ld(x.p, t * x.st + h * x.sh + d); }

/// γ (cumulative log decay within the chunk) and β of chunk tokens [t0, t0+L) into gam, bet
/// (zero past L); also stored to gcum when non-null. One thread computes the scan.
template <class X, class TG>
KV_BODY void load_gates(const X& x, const Args& a, int64_t t0, int L, int hv, float* gam, float* bet, float* gcum) {
  if (x.tid == 0) {
    float run = 0.f;
    for (int t = 0; t < C; ++t) {
      if (t < L) {
        run += at<TG>(a.g, t0 + t, hv, 0);
        gam[t] = run;
        if (bet) bet[t] = at<TG>(a.beta, t0 + t, hv, 0);
        if (gcum) gcum[(t0 + t) * a.d.HV + hv] = run;
      } else {
        gam[t] = run;
        if (bet) bet[t] = 0.f;
      }
    }
  }
  x.sync();
}

/// Dec[t,s] = e^{g_{s+1} + … + g_t} for s ≤ t < L (0 elsewhere): the decay between two tokens of
/// the chunk, summed directly rather than as γ_t − γ_s. The difference of two cumulative sums
/// loses the small terms after a large one (fp32), can come out positive (e^{+} overflows), and
/// is (−∞) − (−∞) = NaN after a token with g = −∞ (a full reset) where the true decay is finite.
/// A sum of terms ≤ 0 is ≤ 0 in floating point, so every exponent formed here is ≤ 0.
template <class X, class TG>
KV_BODY void build_decay(const X& x, const Args& a, int64_t t0, int L, int hv, float* Dec) {
  for (int t = x.tid; t < C; t += x.nth) {
    float acc = 0.f;
    for (int s = C - 1; s > t; --s) Dec[t * C + s] = 0.f;
    if (t < L) {
      Dec[t * C + t] = 1.f;
      for (int s = t - 1; s >= 0; --s) {
        acc += at<TG>(a.g, t0 + s + 1, hv, 0);
        Dec[t * C + s] = fexp(acc);
      }
    } else {
      for (int s = t; s >= 0; --s) Dec[t * C + s] = 0.f;
    }
  }
}

/// KK[t,s] = k_t·k_s for s < t < L (0 elsewhere), then T = (I + A)^{-1} with
/// A[t,s] = β_t Dec[t,s] KK[t,s] (strictly lower), by forward substitution row by row:
/// T[i,j] = −Σ_{m=j}^{i−1} A[i,m] T[m,j]  (j < i), T[i,i] = 1. Rows past L are those of I.
template <class X, class TIO>
KV_BODY void build_T(const X& x, const Args& a, int64_t t0, int L, int h, const float* Dec, const float* bet,
                     float* KK, float* Tm) {
  const int K = a.d.K;
  for (int i = x.tid; i < C * C; i += x.nth) {
    const int t = i / C, s = i % C;
    float acc = 0.f;
    if (s < t && t < L)
      for (int e = 0; e < K; ++e) acc += at<TIO>(a.k, t0 + t, h, e) * at<TIO>(a.k, t0 + s, h, e);
    KK[i] = acc;
    Tm[i] = t == s ? 1.f : 0.f;
  }
  x.sync();
  for (int r = 1; r < L; ++r) {
    for (int j = x.tid; j < r; j += x.nth) {
      float acc = 0.f;
      for (int m = j; m < r; ++m) acc += bet[r] * Dec[r * C + m] * KK[r * C + m] * Tm[m * C + j];
      Tm[r * C + j] = -acc;
    }
    x.sync();
  }
}

/// Columns [0, nv) of a row-major [K, V] float32 state `src` (already offset to the tile's first
/// column) into `tile` (row stride kTileV); zeros when src is null.
template <class X>
KV_BODY void load_tile(const X& x, int K, int nv, int V, const float* src, float* tile) {
  for (int i = x.tid; i < K * nv; i += x.nth) {
    const int e = i / nv, j = i % nv;
    tile[e * kTileV + j] = src ? src[int64_t(e) * V + j] : 0.f;
  }
}

/// The inverse of load_tile: `tile` into columns [0, nv) of the [K, V] state at dst.
template <class X>
KV_BODY void store_tile(const X& x, int K, int nv, int V, const float* tile, float* dst) {
  for (int i = x.tid; i < K * nv; i += x.nth) {
    const int e = i / nv, j = i % nv;
    dst[int64_t(e) * V + j] = tile[e * kTileV + j];
  }
}

/// Offset of the state (n, hv) of an [N, HV, K, V] array, plus column v0.
KV_HD int64_t state_at(const Dims& d, int64_t n, int hv, int v0) { return (n * d.HV + hv) * int64_t(d.K) * d.V + v0; }

// ---- forward ------------------------------------------------------------------------------
/// prep (chunk c, value head hv): γ → gcum, w = T diag(β e^γ) K → ws.w, u = T diag(β) V → ws.u.
template <class X, class TIO, class TG>
KV_BODY void prep(const X& x, const Args& a, int64_t c, int hv, float* sm) {
  const Dims& d = a.d;
  const Ws ws = carve(d, a.ws);
  const int64_t t0 = a.chunks[2 * c];
  const int L = int(a.chunks[2 * c + 1]), h = hv / (d.HV / d.H), K = d.K, V = d.V;
  float *gam = sm, *bet = gam + C, *KK = bet + C, *Tm = KK + C * C, *Dec = Tm + C * C;
  build_decay<X, TG>(x, a, t0, L, hv, Dec);
  load_gates<X, TG>(x, a, t0, L, hv, gam, bet, ws.gcum);
  build_T<X, TIO>(x, a, t0, L, h, Dec, bet, KK, Tm);
  for (int i = x.tid; i < L * K; i += x.nth) {
    const int t = i / K, e = i % K;
    float acc = 0.f;
    for (int s = 0; s <= t; ++s) acc += Tm[t * C + s] * bet[s] * fexp(gam[s]) * at<TIO>(a.k, t0 + s, h, e);
    ws.w[((t0 + t) * d.HV + hv) * K + e] = acc;
  }
  for (int i = x.tid; i < L * V; i += x.nth) {
    const int t = i / V, e = i % V;
    float acc = 0.f;
    for (int s = 0; s <= t; ++s) acc += Tm[t * C + s] * bet[s] * at<TIO>(a.v, t0 + s, hv, e);
    ws.u[((t0 + t) * d.HV + hv) * V + e] = acc;
  }
}

/// state_fwd (sequence n, value head hv, columns [vt*kTileV, +kTileV) of the state): for each
/// chunk in order, h[c] = S; δ = u − w S → vnew; S ← e^{γ_L} S + Kᵀ diag(e^{γ_L−γ}) δ. ht = S.
template <class X, class TIO, class TG>
KV_BODY void state_fwd(const X& x, const Args& a, int n, int hv, int vt, float* sm) {
  const Dims& d = a.d;
  const Ws ws = carve(d, a.ws);
  const int K = d.K, V = d.V, h = hv / (d.HV / d.H), v0 = vt * kTileV;
  const int nv = V - v0 < kTileV ? V - v0 : kTileV;
  float *S = sm, *D = S + K * kTileV, *gam = D + C * kTileV, *Dec = gam + C;
  load_tile(x, K, nv, V, a.h0 ? a.h0 + state_at(d, n, hv, v0) : nullptr, S);
  x.sync();
  for (int64_t c = a.seq_chunk0[n]; c < a.seq_chunk0[n + 1]; ++c) {
    const int64_t t0 = a.chunks[2 * c];
    const int L = int(a.chunks[2 * c + 1]);
    for (int t = x.tid; t < L; t += x.nth) gam[t] = ws.gcum[(t0 + t) * d.HV + hv];
    build_decay<X, TG>(x, a, t0, L, hv, Dec);
    store_tile(x, K, nv, V, S, ws.h + state_at(d, c, hv, v0));
    for (int i = x.tid; i < L * nv; i += x.nth) {
      const int t = i / nv, j = i % nv;
      const int64_t row = (t0 + t) * d.HV + hv;
      float acc = ws.u[row * V + v0 + j];
      for (int e = 0; e < K; ++e) acc -= ws.w[row * K + e] * S[e * kTileV + j];
      D[t * kTileV + j] = acc;
      ws.vnew[row * V + v0 + j] = acc;
    }
    x.sync();
    const float eL = fexp(gam[L - 1]);
    for (int i = x.tid; i < K * nv; i += x.nth) {
      const int e = i / nv, j = i % nv;
      float acc = eL * S[e * kTileV + j];
      for (int t = 0; t < L; ++t) acc += Dec[(L - 1) * C + t] * at<TIO>(a.k, t0 + t, h, e) * D[t * kTileV + j];
      S[e * kTileV + j] = acc;
    }
    x.sync();
  }
  if (a.ht) store_tile(x, K, nv, V, S, a.ht + state_at(d, n, hv, v0));
}

/// P[t,s] = s·Dec[t,s] q_t·k_s for s ≤ t < L, 0 elsewhere (Dec built).
template <class X, class TIO>
KV_BODY void build_P(const X& x, const Args& a, int64_t t0, int L, int h, const float* Dec, float* P) {
  for (int i = x.tid; i < C * C; i += x.nth) {
    const int t = i / C, s = i % C;
    float acc = 0.f;
    if (s <= t && t < L) {
      for (int e = 0; e < a.d.K; ++e) acc += at<TIO>(a.q, t0 + t, h, e) * at<TIO>(a.k, t0 + s, h, e);
      acc *= a.d.scale * Dec[t * C + s];
    }
    P[i] = acc;
  }
}

/// output (chunk c, value head hv): o = s·diag(e^γ) Q h[c] + P v_new.
template <class X, class TIO, class TG>
KV_BODY void output(const X& x, const Args& a, int64_t c, int hv, float* sm) {
  const Dims& d = a.d;
  const Ws ws = carve(d, a.ws);
  const int64_t t0 = a.chunks[2 * c];
  const int L = int(a.chunks[2 * c + 1]), h = hv / (d.HV / d.H), K = d.K, V = d.V;
  float *P = sm, *Dec = P + C * C, *gam = Dec + C * C;
  for (int t = x.tid; t < L; t += x.nth) gam[t] = ws.gcum[(t0 + t) * d.HV + hv];
  build_decay<X, TG>(x, a, t0, L, hv, Dec);
  x.sync();
  build_P<X, TIO>(x, a, t0, L, h, Dec, P);
  x.sync();
  const float* H0 = ws.h + (c * d.HV + hv) * int64_t(K) * V;
  for (int i = x.tid; i < L * V; i += x.nth) {
    const int t = i / V, j = i % V;
    float inter = 0.f, intra = 0.f;
    for (int e = 0; e < K; ++e) inter += at<TIO>(a.q, t0 + t, h, e) * H0[e * V + j];
    for (int s = 0; s <= t; ++s) intra += P[t * C + s] * ws.vnew[((t0 + s) * d.HV + hv) * V + j];
    TIO::st(a.o, ((t0 + t) * d.HV + hv) * V + j, d.scale * fexp(gam[t]) * inter + intra);
  }
}

// ---- backward -----------------------------------------------------------------------------
/// state_bwd (sequence n, value head hv, state columns tile vt): for each chunk from the last,
/// dh[c] = dS; dδ = Pᵀ dO + diag(e^{γ_L−γ}) K dS → dvnew;
/// dS ← s·Qᵀ diag(e^γ) dO + e^{γ_L} dS − wᵀ dδ. dh0 = dS.
template <class X, class TIO, class TG>
KV_BODY void state_bwd(const X& x, const Args& a, int n, int hv, int vt, float* sm) {
  const Dims& d = a.d;
  const Ws ws = carve(d, a.ws);
  const int K = d.K, V = d.V, h = hv / (d.HV / d.H), v0 = vt * kTileV;
  const int nv = V - v0 < kTileV ? V - v0 : kTileV;
  float *dS = sm, *DD = dS + K * kTileV, *P = DD + C * kTileV, *Dec = P + C * C, *gam = Dec + C * C;
  load_tile(x, K, nv, V, a.dht ? a.dht + state_at(d, n, hv, v0) : nullptr, dS);
  x.sync();
  for (int64_t c = a.seq_chunk0[n + 1] - 1; c >= a.seq_chunk0[n]; --c) {
    const int64_t t0 = a.chunks[2 * c];
    const int L = int(a.chunks[2 * c + 1]);
    for (int t = x.tid; t < L; t += x.nth) gam[t] = ws.gcum[(t0 + t) * d.HV + hv];
    build_decay<X, TG>(x, a, t0, L, hv, Dec);
    store_tile(x, K, nv, V, dS, ws.dh + state_at(d, c, hv, v0));
    x.sync();
    build_P<X, TIO>(x, a, t0, L, h, Dec, P);
    x.sync();
    const float eL = fexp(gam[L - 1]);
    for (int i = x.tid; i < L * nv; i += x.nth) {
      const int s = i / nv, j = i % nv;
      float intra = 0.f, carry = 0.f;
      for (int t = s; t < L; ++t) intra += P[t * C + s] * at<TIO>(a.d_o, t0 + t, hv, v0 + j);
      for (int e = 0; e < K; ++e) carry += at<TIO>(a.k, t0 + s, h, e) * dS[e * kTileV + j];
      const float dd = intra + Dec[(L - 1) * C + s] * carry;
      DD[s * kTileV + j] = dd;
      ws.dvnew[((t0 + s) * d.HV + hv) * V + v0 + j] = dd;
    }
    x.sync();
    for (int i = x.tid; i < K * nv; i += x.nth) {
      const int e = i / nv, j = i % nv;
      float fromo = 0.f, fromw = 0.f;
      for (int t = 0; t < L; ++t) {
        fromo += at<TIO>(a.q, t0 + t, h, e) * fexp(gam[t]) * at<TIO>(a.d_o, t0 + t, hv, v0 + j);
        fromw += ws.w[((t0 + t) * d.HV + hv) * K + e] * DD[t * kTileV + j];
      }
      dS[e * kTileV + j] = d.scale * fromo + eL * dS[e * kTileV + j] - fromw;
    }
    x.sync();
  }
  if (a.dh0) store_tile(x, K, nv, V, dS, a.dh0 + state_at(d, n, hv, v0));
}

/// chunk_bwd (chunk c, value head hv): dq, dk of this value head → ws.dqh, ws.dkh; dv, dβ, dg.
/// With S0 = h[c], dS_L = dh[c], δ = vnew, dδ = dvnew (see chunk.hpp for the forward terms):
///   Dm[t,s] = s·e^{γ_t−γ_s} dO_t·δ_s (s ≤ t)      QK[t,s] = q_t·k_s
///   dW = −dδ S0ᵀ   dT[t,s] = β_s (dδ_t·v_s + e^{γ_s} dW_t·k_s) (s < t)
///   dA = −Tᵀ dT Tᵀ (strictly lower)    Bm[t,s] = dA[t,s] β_t e^{γ_t−γ_s}
///   dq = s·diag(e^γ) dO S0ᵀ + Dm K
///   dk = (Bm + Bmᵀ) K + Dmᵀ Q + diag(e^{γ_L−γ}) δ dS_Lᵀ + diag(β e^γ) Tᵀ dW
///   dv = diag(β) Tᵀ dδ
///   dβ_t = Σ_s dA[t,s] e^{γ_t−γ_s} KK[t,s] + e^{γ_t} k_t·(Tᵀ dW)_t + v_t·(Tᵀ dδ)_t
///   dγ_t = q_t·(s e^{γ_t} dO S0ᵀ)_t + Σ_s Z2[t,s] − Σ_s Z2[s,t] + Σ_s Z[t,s] − Σ_s Z[s,t]
///          + β_t e^{γ_t} k_t·(Tᵀ dW)_t − r_t  [+ Σ_s r_s + e^{γ_L}⟨S0, dS_L⟩ at t = L−1]
///   with Z2 = Dm ⊙ QK, Z = Bm ⊙ KK, r_t = e^{γ_L−γ_t} k_t·(dS_L δ_t); dg = reverse cumsum of dγ.
template <class X, class TIO, class TG>
KV_BODY void chunk_bwd(const X& x, const Args& a, int64_t c, int hv, float* sm) {
  const Dims& d = a.d;
  const Ws ws = carve(d, a.ws);
  const int64_t t0 = a.chunks[2 * c];
  const int L = int(a.chunks[2 * c + 1]), h = hv / (d.HV / d.H), K = d.K, V = d.V;
  float *gam = sm, *bet = gam + C, *dgam = bet + C, *dbet = dgam + C, *rr = dbet + C, *misc = rr + C;
  float *Tm = misc + C, *M1 = Tm + C * C, *M3 = M1 + C * C, *KK = M3 + C * C, *M2 = KK + C * C, *Dec = M2 + C * C;
  float* dW = Dec + C * C;
  const float* S0 = ws.h + (c * d.HV + hv) * int64_t(K) * V;
  const float* dSL = ws.dh + (c * d.HV + hv) * int64_t(K) * V;
  auto delta = [&](int t, int j) { return ws.vnew[((t0 + t) * d.HV + hv) * V + j]; };
  auto ddelta = [&](int t, int j) { return ws.dvnew[((t0 + t) * d.HV + hv) * V + j]; };

  build_decay<X, TG>(x, a, t0, L, hv, Dec);
  load_gates<X, TG>(x, a, t0, L, hv, gam, bet, nullptr);
  build_T<X, TIO>(x, a, t0, L, h, Dec, bet, KK, Tm);
  // M1 = Dm, M2 = QK, dW = −dδ S0ᵀ
  for (int i = x.tid; i < C * C; i += x.nth) {
    const int t = i / C, s = i % C;
    float dm = 0.f, qk = 0.f;
    if (s <= t && t < L) {
      for (int j = 0; j < V; ++j) dm += at<TIO>(a.d_o, t0 + t, hv, j) * delta(s, j);
      for (int e = 0; e < K; ++e) qk += at<TIO>(a.q, t0 + t, h, e) * at<TIO>(a.k, t0 + s, h, e);
      dm *= d.scale * Dec[t * C + s];
    }
    M1[i] = dm;
    M2[i] = qk;
  }
  for (int i = x.tid; i < C * K; i += x.nth) {
    const int t = i / K, e = i % K;
    float acc = 0.f;
    if (t < L)
      for (int j = 0; j < V; ++j) acc += ddelta(t, j) * S0[e * V + j];
    dW[i] = -acc;
  }
  x.sync();
  // dγ from the intra-chunk output term (Z2 = Dm ⊙ QK); M3 = dT
  for (int t = x.tid; t < C; t += x.nth) {
    float acc = 0.f;
    if (t < L) {
      for (int s = 0; s <= t; ++s) acc += M1[t * C + s] * M2[t * C + s];
      for (int u = t; u < L; ++u) acc -= M1[u * C + t] * M2[u * C + t];
    }
    dgam[t] = acc;
    dbet[t] = 0.f;
  }
  for (int i = x.tid; i < C * C; i += x.nth) {
    const int t = i / C, s = i % C;
    float acc = 0.f;
    if (s < t && t < L) {
      float dv_ = 0.f, dw_ = 0.f;
      for (int j = 0; j < V; ++j) dv_ += ddelta(t, j) * at<TIO>(a.v, t0 + s, hv, j);
      for (int e = 0; e < K; ++e) dw_ += dW[t * K + e] * at<TIO>(a.k, t0 + s, h, e);
      acc = bet[s] * (dv_ + fexp(gam[s]) * dw_);
    }
    M3[i] = acc;
  }
  x.sync();
  // M2 = X = dT Tᵀ: X[p,j] = Σ_{b<p, b≤j} dT[p,b] T[j,b]
  for (int i = x.tid; i < C * C; i += x.nth) {
    const int p = i / C, j = i % C;
    float acc = 0.f;
    const int bmax = p - 1 < j ? p - 1 : j;
    for (int b = 0; b <= bmax; ++b) acc += M3[p * C + b] * Tm[j * C + b];
    M2[i] = acc;
  }
  x.sync();
  // M3 = dA = −Tᵀ X, strictly lower: dA[r,j] = −Σ_{p≥r} T[p,r] X[p,j]
  for (int i = x.tid; i < C * C; i += x.nth) {
    const int r = i / C, j = i % C;
    float acc = 0.f;
    if (j < r && r < L)
      for (int p = r; p < L; ++p) acc += Tm[p * C + r] * M2[p * C + j];
    M3[i] = -acc;
  }
  x.sync();
  // dβ, dγ from A (Z = dA ⊙ A)
  for (int t = x.tid; t < L; t += x.nth) {
    float db = 0.f, dz = 0.f;
    for (int s = 0; s < t; ++s) {
      const float e = Dec[t * C + s] * KK[t * C + s] * M3[t * C + s];
      db += e;
      dz += bet[t] * e;
    }
    for (int u = t + 1; u < L; ++u) dz -= bet[u] * Dec[u * C + t] * KK[u * C + t] * M3[u * C + t];
    dbet[t] += db;
    dgam[t] += dz;
  }
  x.sync();
  // M3 = Bm = dA β_t e^{γ_t−γ_s}
  for (int i = x.tid; i < C * C; i += x.nth) {
    const int t = i / C, s = i % C;
    if (s < t && t < L) M3[i] *= bet[t] * Dec[t * C + s];
  }
  x.sync();
  // per-row terms: q·dQ1, k·(TᵀdW), v·(Tᵀdδ), r
  for (int t = x.tid; t < L; t += x.nth) {
    const float et = fexp(gam[t]);
    float q_dq1 = 0.f, k_yw = 0.f, k_sc = 0.f, v_yu = 0.f;
    for (int e = 0; e < K; ++e) {
      float dq1 = 0.f, sc = 0.f, yw = 0.f;
      for (int j = 0; j < V; ++j) {
        dq1 += at<TIO>(a.d_o, t0 + t, hv, j) * S0[e * V + j];
        sc += delta(t, j) * dSL[e * V + j];
      }
      for (int p = t; p < L; ++p) yw += Tm[p * C + t] * dW[p * K + e];
      const float ke = at<TIO>(a.k, t0 + t, h, e);
      q_dq1 += at<TIO>(a.q, t0 + t, h, e) * dq1;
      k_yw += ke * yw;
      k_sc += ke * sc;
    }
    for (int j = 0; j < V; ++j) {
      float yu = 0.f;
      for (int p = t; p < L; ++p) yu += Tm[p * C + t] * ddelta(p, j);
      v_yu += at<TIO>(a.v, t0 + t, hv, j) * yu;
    }
    rr[t] = Dec[(L - 1) * C + t] * k_sc;
    dgam[t] += d.scale * et * q_dq1 + bet[t] * et * k_yw - rr[t];
    dbet[t] += et * k_yw + v_yu;
  }
  x.sync();
  if (x.tid == 0) {
    const float gL = gam[L - 1];
    float fro = 0.f, rsum = 0.f;
    for (int i = 0; i < K * V; ++i) fro += S0[i] * dSL[i];
    for (int t = 0; t < L; ++t) rsum += rr[t];
    dgam[L - 1] += fexp(gL) * fro + rsum;
    float acc = 0.f;
    for (int t = L - 1; t >= 0; --t) {
      acc += dgam[t];
      TG::st(a.dg, (t0 + t) * d.HV + hv, acc);
      TG::st(a.dbeta, (t0 + t) * d.HV + hv, dbet[t]);
    }
  }
  // dq, dk of this value head
  for (int i = x.tid; i < L * K; i += x.nth) {
    const int t = i / K, e = i % K;
    float dq1 = 0.f, sc = 0.f, dq2 = 0.f, dkA = 0.f, dkO = 0.f, yw = 0.f;
    for (int j = 0; j < V; ++j) {
      dq1 += at<TIO>(a.d_o, t0 + t, hv, j) * S0[e * V + j];
      sc += delta(t, j) * dSL[e * V + j];
    }
    for (int s = 0; s < L; ++s) {
      const float ks = at<TIO>(a.k, t0 + s, h, e);
      if (s <= t) dq2 += M1[t * C + s] * ks;
      if (s >= t) dkO += M1[s * C + t] * at<TIO>(a.q, t0 + s, h, e);
      dkA += (M3[t * C + s] + M3[s * C + t]) * ks;
      if (s >= t) yw += Tm[s * C + t] * dW[s * K + e];
    }
    const int64_t row = (t0 + t) * d.HV + hv;
    ws.dqh[row * K + e] = d.scale * fexp(gam[t]) * dq1 + dq2;
    ws.dkh[row * K + e] = dkA + dkO + Dec[(L - 1) * C + t] * sc + bet[t] * fexp(gam[t]) * yw;
  }
  for (int i = x.tid; i < L * V; i += x.nth) {
    const int t = i / V, j = i % V;
    float yu = 0.f;
    for (int p = t; p < L; ++p) yu += Tm[p * C + t] * ddelta(p, j);
    TIO::st(a.dv, ((t0 + t) * d.HV + hv) * V + j, bet[t] * yu);
  }
}

/// reduce_qk (token t, query/key head h): dq[t,h] = Σ_{j<G} dqh[t, hG+j], same for dk; G = HV/H.
template <class X, class TIO>
KV_BODY void reduce_qk(const X& x, const Args& a, int64_t t, int h) {
  const Dims& d = a.d;
  const Ws ws = carve(d, a.ws);
  const int G = d.HV / d.H, K = d.K;
  for (int e = x.tid; e < K; e += x.nth) {
    float q = 0.f, k = 0.f;
    for (int j = 0; j < G; ++j) {
      const int64_t src = (t * d.HV + h * G + j) * K + e;
      q += ws.dqh[src];
      k += ws.dkh[src];
    }
    TIO::st(a.dq, (t * d.H + h) * K + e, q);
    TIO::st(a.dk, (t * d.H + h) * K + e, k);
  }
}

}  // namespace kverify::gdn::chunk::body
