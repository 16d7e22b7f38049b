// The chunked GDN on the CPU: the kernel bodies of chunk_body.hpp run serially, block by block,
// in the order the GPU launches them. Also the shared helpers of chunk.hpp (tables, validation).
#include <algorithm>
#include <vector>

#include "chunk_body.hpp"
#include "chunk_dispatch.hpp"
#include "kverify/common/check.hpp"
#include "kverify/gdn/chunk.hpp"

namespace kverify::gdn::chunk {

size_t workspace_floats(const Dims& d, bool backward) {
  const body::Ws w = body::carve(d, nullptr);
  return backward ? w.total_bwd : w.total_fwd;
}

int64_t chunk_table(const int64_t* cu, int N, int64_t* seq_chunk0, int64_t* chunks) {
  KV_CHECK(N >= 1, "cu_seqlens: need at least one sequence (N = %d)", N);
  KV_CHECK(cu[0] == 0, "cu_seqlens[0] must be 0, got %lld", (long long)cu[0]);
  int64_t c = 0;
  for (int n = 0; n < N; ++n) {
    KV_CHECK(cu[n + 1] >= cu[n], "cu_seqlens must not decrease: cu_seqlens[%d] = %lld < cu_seqlens[%d] = %lld", n + 1,
             (long long)cu[n + 1], n, (long long)cu[n]);
    if (seq_chunk0) seq_chunk0[n] = c;
    for (int64_t t = cu[n]; t < cu[n + 1]; t += kChunk, ++c)
      if (chunks) {
        chunks[2 * c] = t;
        chunks[2 * c + 1] = cu[n + 1] - t < kChunk ? cu[n + 1] - t : kChunk;
      }
  }
  if (seq_chunk0) seq_chunk0[N] = c;
  return c;
}

void validate(const Args& a, bool backward) {
  const Dims& d = a.d;
  KV_CHECK(d.K >= 1 && d.K <= kMaxK, "K = %d: the chunked kernels support 1 <= K <= %d", d.K, kMaxK);
  KV_CHECK(d.V >= 1, "V = %d must be >= 1", d.V);
  KV_CHECK(d.H >= 1 && d.HV >= d.H && d.HV % d.H == 0, "HV = %d must be a multiple of H = %d", d.HV, d.H);
  KV_CHECK(d.N >= 1 && d.tokens >= 0 && d.NT >= 0, "need at least one sequence and no negative sizes; got N = %d sequences, %lld tokens, %lld chunks", d.N,
           (long long)d.tokens, (long long)d.NT);
  KV_CHECK(a.cu && a.seq_chunk0 && (a.chunks || d.NT == 0), "cu_seqlens and the chunk tables are required%s", "");
  KV_CHECK(a.q.p && a.k.p && a.v.p && a.g.p && a.beta.p, "q, k, v, g and beta are required%s", "");
  KV_CHECK(a.ws, "workspace is required%s", "");
  if (!backward) {
    KV_CHECK(a.o, "o (output) is required%s", "");
  } else {
    KV_CHECK(a.d_o.p, "do is required%s", "");
    KV_CHECK(a.dq && a.dk && a.dv && a.dg && a.dbeta, "dq, dk, dv, dg and dbeta are required%s", "");
  }
}

namespace {

template <class TIO, class TG>
void forward_serial(const Args& a) {
  const Dims& d = a.d;
  std::vector<float> sm(std::max<int>({body::kPrepSmem, body::state_smem(d.K), body::kOutSmem}));
  const body::Serial x;
  const int tiles = (d.V + kTileV - 1) / kTileV;
  for (int64_t c = 0; c < d.NT; ++c)
    for (int hv = 0; hv < d.HV; ++hv) body::prep<body::Serial, TIO, TG>(x, a, c, hv, sm.data());
  for (int n = 0; n < d.N; ++n)
    for (int hv = 0; hv < d.HV; ++hv)
      for (int vt = 0; vt < tiles; ++vt) body::state_fwd<body::Serial, TIO, TG>(x, a, n, hv, vt, sm.data());
  if (a.o)
    for (int64_t c = 0; c < d.NT; ++c)
      for (int hv = 0; hv < d.HV; ++hv) body::output<body::Serial, TIO, TG>(x, a, c, hv, sm.data());
}

template <class TIO, class TG>
void backward_serial(const Args& a) {
  const Dims& d = a.d;
  Args f = a;  // recompute: γ, w, u, h, v_new (no o, no ht)
  f.o = nullptr;
  f.ht = nullptr;
  forward_serial<TIO, TG>(f);
  std::vector<float> sm(std::max(body::state_smem(d.K), body::bwd_smem(d.K)));
  const body::Serial x;
  const int tiles = (d.V + kTileV - 1) / kTileV;
  for (int n = 0; n < d.N; ++n)
    for (int hv = 0; hv < d.HV; ++hv)
      for (int vt = 0; vt < tiles; ++vt) body::state_bwd<body::Serial, TIO, TG>(x, a, n, hv, vt, sm.data());
  for (int64_t c = 0; c < d.NT; ++c)
    for (int hv = 0; hv < d.HV; ++hv) body::chunk_bwd<body::Serial, TIO, TG>(x, a, c, hv, sm.data());
  for (int64_t t = 0; t < d.tokens; ++t)
    for (int h = 0; h < d.H; ++h) body::reduce_qk<body::Serial, TIO>(x, a, t, h);
}

}  // namespace

void forward_host(const Args& a) {
  validate(a, false);
  with_types(a.io, a.gate, [&](auto tio, auto tg) { forward_serial<decltype(tio), decltype(tg)>(a); });
}

void backward_host(const Args& a) {
  validate(a, true);
  with_types(a.io, a.gate, [&](auto tio, auto tg) { backward_serial<decltype(tio), decltype(tg)>(a); });
}

#if !defined(KVERIFY_GDN_CUDA)
void forward_cuda(const Args&, void*) { KV_CHECK(false, "kverify was built without CUDA: the GDN GPU kernels are absent%s", ""); }
void backward_cuda(const Args&, void*) { KV_CHECK(false, "kverify was built without CUDA: the GDN GPU kernels are absent%s", ""); }
#endif

}  // namespace kverify::gdn::chunk
