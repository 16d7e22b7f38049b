// The chunked GDN bodies (run serially on the CPU) against the fp64 oracle: forward o, ht and
// every gradient, over partial chunks, several chunks, varlen with an empty sequence, GVA,
// V tiles with a partial tile, strong decay, and the fp16/bf16 element paths.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kverify/gdn/chunk.hpp"
#include "kverify/gdn/oracle.hpp"
#include "kverify/tensor/bits.hpp"

namespace kverify::gdn {
namespace {

struct Case {
  int B, T, H, HV, K, V;
  std::vector<int64_t> cu;  // empty: fixed length
  double g_lo = -0.5;       // g ~ U(g_lo, 0)
  bool h0 = true, dht = true;
  std::vector<int64_t> reset = {};  // tokens whose g is −∞ (a full reset of the state)
};

double rel_l2(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

struct Data {
  std::vector<double> q, k, v, g, beta, h0, d_o, dht;
};

Data make(const Case& c, int64_t N, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd;
  std::uniform_real_distribution<double> ud(0, 1);
  const int64_t tok = int64_t(c.B) * c.T;
  Data d;
  auto fill = [&](std::vector<double>& x, size_t n) {
    x.resize(n);
    for (auto& e : x) e = nd(rng);
  };
  fill(d.q, tok * c.H * c.K);
  fill(d.k, tok * c.H * c.K);
  for (int64_t r = 0; r < tok * c.H; ++r) {  // unit keys: the delta rule's stable regime
    double s = 0;
    for (int e = 0; e < c.K; ++e) s += d.k[r * c.K + e] * d.k[r * c.K + e];
    for (int e = 0; e < c.K; ++e) d.k[r * c.K + e] /= std::sqrt(s);
  }
  fill(d.v, tok * c.HV * c.V);
  d.g.resize(tok * c.HV);
  d.beta.resize(tok * c.HV);
  for (auto& e : d.g) e = c.g_lo * ud(rng);
  for (int64_t t : c.reset)
    for (int hv = 0; hv < c.HV; ++hv) d.g[t * c.HV + hv] = -INFINITY;
  for (auto& e : d.beta) e = ud(rng);
  fill(d.h0, N * c.HV * c.K * c.V);
  fill(d.d_o, tok * c.HV * c.V);
  fill(d.dht, N * c.HV * c.K * c.V);
  return d;
}

/// Converts to the io element type and back (what the kernel sees), for a fair oracle input.
std::vector<uint16_t> narrow(const std::vector<double>& x, chunk::Dt t, std::vector<double>& seen) {
  std::vector<uint16_t> r(x.size());
  seen.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (t == chunk::Dt::BF16) {
      r[i] = bits::float_to_bf16(float(x[i]));
      seen[i] = bits::bf16_to_float(r[i]);
    } else {
      r[i] = bits::float_to_half(float(x[i]));
      seen[i] = bits::half_to_float(r[i]);
    }
  }
  return r;
}

std::vector<float> to_f(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }

std::vector<float> widen(const std::vector<uint16_t>& x, chunk::Dt t) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = t == chunk::Dt::BF16 ? bits::bf16_to_float(x[i]) : bits::half_to_float(x[i]);
  return r;
}

/// Runs the chunked CPU path and the oracle on one case; checks every output's relative L2 error.
void run_case(const Case& c, double tol, chunk::Dt io = chunk::Dt::F32, unsigned seed = 1) {
  Shape s{c.B, c.T, c.H, c.HV, c.K, c.V};
  Options opt;
  opt.cu_seqlens = c.cu;
  const int64_t N = num_sequences(s, opt);
  Data d = make(c, N, seed);
  const int64_t tok = int64_t(c.B) * c.T;

  // element type of the io tensors: narrow q, k, v, do and feed the oracle what the kernel sees
  std::vector<float> qf, kf, vf, df;
  std::vector<uint16_t> q16, k16, v16, d16;
  if (io == chunk::Dt::F32) {
    qf = to_f(d.q), kf = to_f(d.k), vf = to_f(d.v), df = to_f(d.d_o);
    for (auto* x : {&d.q, &d.k, &d.v, &d.d_o})
      for (auto& e : *x) e = float(e);
  } else {
    q16 = narrow(d.q, io, d.q), k16 = narrow(d.k, io, d.k), v16 = narrow(d.v, io, d.v), d16 = narrow(d.d_o, io, d.d_o);
  }
  for (auto* x : {&d.g, &d.beta, &d.h0, &d.dht})
    for (auto& e : *x) e = float(e);
  const std::vector<float> gf = to_f(d.g), bf = to_f(d.beta), h0f = to_f(d.h0), dhtf = to_f(d.dht);

  Inputs in{d.q.data(), d.k.data(), d.v.data(), d.g.data(), d.beta.data(), c.h0 ? d.h0.data() : nullptr};
  const Forward ref = forward(s, opt, in);
  const Grads gref = backward(s, opt, in, d.d_o.data(), c.dht ? d.dht.data() : nullptr);

  std::vector<int64_t> cu = c.cu;
  if (cu.empty())
    for (int b = 0; b <= c.B; ++b) cu.push_back(int64_t(b) * c.T);
  std::vector<int64_t> seq0(N + 1);
  const int64_t NT = chunk::chunk_table(cu.data(), int(N), seq0.data(), nullptr);
  std::vector<int64_t> chunks(2 * NT);
  chunk::chunk_table(cu.data(), int(N), seq0.data(), chunks.data());

  chunk::Args a;
  a.d = {tok, c.H, c.HV, c.K, c.V, int(N), NT, float(1.0 / std::sqrt(double(c.K)))};
  a.io = io;
  a.cu = cu.data(), a.seq_chunk0 = seq0.data(), a.chunks = chunks.data();
  const bool f32 = io == chunk::Dt::F32;
  a.q = {f32 ? (const void*)qf.data() : q16.data(), int64_t(c.H) * c.K, c.K};
  a.k = {f32 ? (const void*)kf.data() : k16.data(), int64_t(c.H) * c.K, c.K};
  a.v = {f32 ? (const void*)vf.data() : v16.data(), int64_t(c.HV) * c.V, c.V};
  a.d_o = {f32 ? (const void*)df.data() : d16.data(), int64_t(c.HV) * c.V, c.V};
  a.g = {gf.data(), c.HV, 1};
  a.beta = {bf.data(), c.HV, 1};
  a.h0 = c.h0 ? h0f.data() : nullptr;
  a.dht = c.dht ? dhtf.data() : nullptr;
  std::vector<float> ws(chunk::workspace_floats(a.d, true)), ht(N * c.HV * c.K * c.V), dh0(ht.size());
  std::vector<float> of(tok * c.HV * c.V), dqf(tok * c.H * c.K), dkf(dqf.size()), dvf(of.size());
  std::vector<uint16_t> o16(of.size()), dq16(dqf.size()), dk16(dqf.size()), dv16(of.size());
  std::vector<float> dg(tok * c.HV), db(dg.size());
  a.ws = ws.data();
  a.o = f32 ? (void*)of.data() : o16.data();
  a.ht = ht.data();
  chunk::forward_host(a);
  a.dq = f32 ? (void*)dqf.data() : dq16.data();
  a.dk = f32 ? (void*)dkf.data() : dk16.data();
  a.dv = f32 ? (void*)dvf.data() : dv16.data();
  a.dg = dg.data(), a.dbeta = db.data(), a.dh0 = dh0.data();
  chunk::backward_host(a);
  if (!f32) of = widen(o16, io), dqf = widen(dq16, io), dkf = widen(dk16, io), dvf = widen(dv16, io);

  EXPECT_LT(rel_l2(of, ref.o), tol) << "o";
  EXPECT_LT(rel_l2(ht, ref.ht), tol) << "ht";
  EXPECT_LT(rel_l2(dqf, gref.dq), tol) << "dq";
  EXPECT_LT(rel_l2(dkf, gref.dk), tol) << "dk";
  EXPECT_LT(rel_l2(dvf, gref.dv), tol) << "dv";
  EXPECT_LT(rel_l2(dg, gref.dg), tol) << "dg";
  EXPECT_LT(rel_l2(db, gref.dbeta), tol) << "dbeta";
  EXPECT_LT(rel_l2(dh0, gref.dh0), tol) << "dh0";
}

TEST(GdnChunk, OneToken) { run_case({1, 1, 1, 1, 8, 8, {}}, 1e-5); }
TEST(GdnChunk, PartialChunk) { run_case({2, 63, 1, 1, 16, 12, {}}, 1e-4); }
TEST(GdnChunk, ExactChunk) { run_case({1, 64, 1, 1, 16, 16, {}}, 1e-4); }
TEST(GdnChunk, ChunkPlusOne) { run_case({1, 65, 2, 2, 12, 16, {}}, 1e-4); }
TEST(GdnChunk, SeveralChunksGvaTiledV) { run_case({1, 150, 2, 4, 20, 40, {}}, 1e-4); }
TEST(GdnChunk, VarlenWithEmptyAndRaggedTails) { run_case({1, 200, 1, 2, 16, 33, {0, 1, 66, 66, 130, 200}}, 1e-4); }
TEST(GdnChunk, NoInitialStateNoFinalGradient) {
  Case c{2, 70, 1, 1, 16, 16, {}};
  c.h0 = c.dht = false;
  run_case(c, 1e-4);
}
TEST(GdnChunk, StrongDecay) {
  Case c{1, 130, 1, 1, 16, 16, {}};
  c.g_lo = -20.0;
  run_case(c, 1e-4);
}
TEST(GdnChunk, FullResetIsFinite) {
  // g = −∞ zeroes the state; the decays between later tokens of the same chunk stay finite (a
  // difference of cumulative sums would give (−∞) − (−∞) = NaN there; kverify's G03 found it).
  Case c{1, 150, 1, 2, 16, 16, {}};
  c.reset = {10, 64, 100};
  run_case(c, 1e-4);
}
TEST(GdnChunk, Bf16AndFp16Elements) {
  run_case({1, 70, 1, 2, 16, 16, {}}, 1e-2, chunk::Dt::BF16);
  run_case({1, 70, 1, 2, 16, 16, {}}, 2e-3, chunk::Dt::F16);
}

TEST(GdnChunk, ChunkTable) {
  const std::vector<int64_t> cu{0, 1, 65, 65, 200};
  std::vector<int64_t> seq0(5), ch(2 * 5);
  ASSERT_EQ(chunk::chunk_table(cu.data(), 4, seq0.data(), nullptr), 5);
  chunk::chunk_table(cu.data(), 4, seq0.data(), ch.data());
  EXPECT_EQ(seq0, (std::vector<int64_t>{0, 1, 2, 2, 5}));
  EXPECT_EQ(ch, (std::vector<int64_t>{0, 1, 1, 64, 65, 64, 129, 64, 193, 7}));
  const std::vector<int64_t> bad{0, 5, 3};
  EXPECT_THROW(chunk::chunk_table(bad.data(), 2, seq0.data(), nullptr), Error);
}

}  // namespace
}  // namespace kverify::gdn
