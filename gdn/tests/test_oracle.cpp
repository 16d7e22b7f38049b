// The fp64 GDN oracle against a closed form (one token) and its reverse pass against central
// finite differences of L = Σ do·o + Σ dht·ht, for every input, at tiny sizes: fixed length, grouped
// value heads, L2 norm, h0, variable length with an empty sequence, and a sequence longer than
// the reverse pass's checkpoint segment.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kverify/common/check.hpp"
#include "kverify/gdn/oracle.hpp"

namespace kverify::gdn {
namespace {

struct Case {
  Shape s;
  Options opt;
  bool h0 = true;
  std::vector<double> q, k, v, g, beta, h0v, d_o, dht;
};

Case make(Shape s, Options opt, bool h0, unsigned seed) {
  Case c{s, opt, h0};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  const int64_t N = num_sequences(s, opt);
  auto fill = [&](std::vector<double>& x, size_t n, auto gen) {
    x.resize(n);
    for (auto& e : x) e = gen();
  };
  fill(c.q, s.B * s.T * s.H * s.K, [&] { return nd(rng); });
  fill(c.k, s.B * s.T * s.H * s.K, [&] { return nd(rng) * 0.5; });
  fill(c.v, s.B * s.T * s.HV * s.V, [&] { return nd(rng); });
  fill(c.g, s.B * s.T * s.HV, [&] { return -3.0 * ud(rng); });
  fill(c.beta, s.B * s.T * s.HV, [&] { return 0.05 + 0.9 * ud(rng); });
  fill(c.h0v, N * s.HV * s.K * s.V, [&] { return nd(rng); });
  fill(c.d_o, s.B * s.T * s.HV * s.V, [&] { return nd(rng); });
  fill(c.dht, N * s.HV * s.K * s.V, [&] { return nd(rng); });
  return c;
}

Inputs inputs(const Case& c) {
  return {c.q.data(), c.k.data(), c.v.data(), c.g.data(), c.beta.data(), c.h0 ? c.h0v.data() : nullptr};
}

double loss(const Case& c) {
  const Forward f = forward(c.s, c.opt, inputs(c));
  double L = 0.0;
  for (size_t i = 0; i < f.o.size(); ++i) L += c.d_o[i] * f.o[i];
  for (size_t i = 0; i < f.ht.size(); ++i) L += c.dht[i] * f.ht[i];
  return L;
}

/// Compare analytic gradients with central differences at up to `per_tensor` elements of each input.
void check_gradients(Case c, int per_tensor = 1 << 30) {
  const Grads gr = backward(c.s, c.opt, inputs(c), c.d_o.data(), c.dht.data());
  const double eps = 1e-6;
  struct Item {
    const char* name;
    std::vector<double>* x;
    const std::vector<double>* d;
  };
  std::vector<Item> items{{"q", &c.q, &gr.dq}, {"k", &c.k, &gr.dk}, {"v", &c.v, &gr.dv},
                          {"g", &c.g, &gr.dg}, {"beta", &c.beta, &gr.dbeta}};
  if (c.h0) items.push_back({"h0", &c.h0v, &gr.dh0});
  for (const auto& it : items) {
    ASSERT_EQ(it.x->size(), it.d->size()) << it.name;
    const size_t n = it.x->size();
    const size_t stride = std::max<size_t>(1, n / std::min<size_t>(n, per_tensor));
    for (size_t i = 0; i < n; i += stride) {
      const double keep = (*it.x)[i];
      (*it.x)[i] = keep + eps;
      const double up = loss(c);
      (*it.x)[i] = keep - eps;
      const double down = loss(c);
      (*it.x)[i] = keep;
      const double num = (up - down) / (2 * eps), ana = (*it.d)[i];
      EXPECT_NEAR(ana, num, 1e-6 * (1.0 + std::abs(num))) << it.name << "[" << i << "]";
    }
  }
}

TEST(GdnOracle, OneTokenMatchesClosedForm) {
  Shape s{1, 1, 1, 1, 2, 3};
  Options opt;
  opt.scale = 0.7;
  Case c = make(s, opt, true, 1);
  const Forward f = forward(s, opt, inputs(c));
  const double a = std::exp(c.g[0]), b = c.beta[0];
  const double kk[2] = {c.k[0], c.k[1]};
  for (int j = 0; j < 3; ++j) {
    double S[2];
    for (int i = 0; i < 2; ++i) {
      const double ktP = kk[0] * c.h0v[0 * 3 + j] + kk[1] * c.h0v[1 * 3 + j];
      S[i] = a * (c.h0v[i * 3 + j] - b * kk[i] * ktP) + b * kk[i] * c.v[j];
      EXPECT_NEAR(f.ht[i * 3 + j], S[i], 1e-15);
    }
    EXPECT_NEAR(f.o[j], 0.7 * (c.q[0] * S[0] + c.q[1] * S[1]), 1e-14);
  }
}

TEST(GdnOracle, GradientsFixedLengthGroupedHeads) {
  Shape s{2, 5, 1, 2, 3, 2};
  check_gradients(make(s, Options{}, true, 2));
}

TEST(GdnOracle, GradientsL2NormNoInitialState) {
  Shape s{1, 6, 2, 4, 3, 2};
  Options opt;
  opt.l2norm_qk = true;
  check_gradients(make(s, opt, false, 3));
}

TEST(GdnOracle, GradientsVariableLengthWithEmptySequence) {
  Shape s{1, 7, 1, 2, 2, 3};
  Options opt;
  opt.cu_seqlens = {0, 3, 3, 7};
  opt.l2norm_qk = true;
  Case c = make(s, opt, true, 4);
  check_gradients(c);
  const Forward f = forward(s, opt, inputs(c));  // the empty sequence passes h0 through
  for (int64_t i = 0; i < s.HV * s.K * s.V; ++i) EXPECT_EQ(f.ht[1 * s.HV * s.K * s.V + i], c.h0v[1 * s.HV * s.K * s.V + i]);
}

TEST(GdnOracle, GradientsAcrossCheckpointSegments) {
  Shape s{1, 150, 1, 1, 2, 2};  // 64-token segments: 3 of them, the last partial
  Options opt;
  opt.l2norm_qk = true;
  check_gradients(make(s, opt, true, 5), 40);
}

TEST(GdnOracle, StrongDecayStaysFinite) {
  Shape s{1, 40, 1, 1, 2, 2};
  Case c = make(s, Options{}, true, 6);
  for (auto& g : c.g) g = -20.0;
  const Forward f = forward(s, c.opt, inputs(c));
  for (double x : f.o) EXPECT_TRUE(std::isfinite(x));
  const Grads gr = backward(s, c.opt, inputs(c), c.d_o.data(), nullptr);
  for (double x : gr.dg) EXPECT_TRUE(std::isfinite(x));
}

TEST(GdnOracle, InvalidArgumentsNameTheField) {
  Case c = make(Shape{1, 4, 1, 1, 2, 2}, Options{}, true, 7);
  EXPECT_THROW(forward(Shape{1, 4, 2, 3, 2, 2}, Options{}, inputs(c)), kverify::Error);  // HV % H
  Options bad;
  bad.cu_seqlens = {0, 3};  // does not end at T
  try {
    forward(Shape{1, 4, 1, 1, 2, 2}, bad, inputs(c));
    FAIL() << "no error";
  } catch (const kverify::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cu_seqlens"), std::string::npos) << e.what();
  }
  Inputs none = inputs(c);
  none.v = nullptr;
  EXPECT_THROW(forward(Shape{1, 4, 1, 1, 2, 2}, Options{}, none), kverify::Error);
}

}  // namespace
}  // namespace kverify::gdn
