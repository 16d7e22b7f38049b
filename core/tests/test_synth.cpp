#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kverify/synth/synth.hpp"

using namespace kverify;
using synth::Distribution;
using synth::DistKind;

namespace {
std::vector<float> draw(uint64_t seed, const Distribution& d, int n) {
  std::vector<float> v(n);
  synth::fill(contiguous_view(v.data(), DType::F32, {n}), seed, d);
  return v;
}
}  // namespace

TEST(Synth, PhiloxKnownAnswer) {
  // Random123 known-answer test for philox4x32-10: counter 0, key 0.
  auto r = synth::philox4x32_10({{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
  // all-ones counter and key
  r = synth::philox4x32_10({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(r.v[0], 0x408f276du);
  EXPECT_EQ(r.v[1], 0x41c83b0eu);
  EXPECT_EQ(r.v[2], 0xa20bc7c6u);
  EXPECT_EQ(r.v[3], 0x6d5451fdu);
}

TEST(Synth, DetMathAccuracy) {
  for (double x : {1e-9, 0.001, 0.25, 0.5, 0.7, 0.999999, 1.0, 2.5, 1e6}) {
    EXPECT_NEAR(synth::det_log(x), std::log(x), 4e-16 * std::max(1.0, std::fabs(std::log(x)))) << x;
  }
  for (int k = 0; k < 1000; ++k) {
    const double u = k / 1000.0;
    EXPECT_NEAR(synth::det_cos_2pi(u), std::cos(2 * M_PI * u), 1e-14) << u;
  }
}

TEST(Synth, SameSeedSameBitsAnyLayout) {
  Distribution d;
  auto a = draw(7, d, 600);
  auto b = draw(7, d, 600);
  EXPECT_EQ(a, b);
  auto c = draw(8, d, 600);
  EXPECT_NE(a, c);
  // a transposed view gets the same logical values
  std::vector<float> t(600);
  synth::fill(make_view(t.data(), DType::F32, Device::CPU, 0, {20, 30}, {1, 20}), 7, d);
  for (int i = 0; i < 20; ++i)
    for (int j = 0; j < 30; ++j) ASSERT_EQ(t[i + 20 * j], a[i * 30 + j]);
}

TEST(Synth, Moments) {
  Distribution d;
  d.p0 = 1.0;
  d.p1 = 2.0;
  auto v = draw(1, d, 200000);
  double m = 0, s = 0;
  for (float x : v) m += x;
  m /= v.size();
  for (float x : v) s += (x - m) * (x - m);
  s = std::sqrt(s / v.size());
  EXPECT_NEAR(m, 1.0, 0.02);
  EXPECT_NEAR(s, 2.0, 0.02);
  d.kind = DistKind::Uniform;
  d.p0 = -3;
  d.p1 = 5;
  v = draw(2, d, 100000);
  for (float x : v) ASSERT_TRUE(x >= -3 && x <= 5);
  d.kind = DistKind::UniformInt;
  d.p0 = 2;
  d.p1 = 4;
  std::vector<int64_t> iv(30000);
  synth::fill(contiguous_view(iv.data(), DType::I64, {30000}), 3, d);
  int hist[3] = {0, 0, 0};
  for (auto x : iv) { ASSERT_TRUE(x >= 2 && x <= 4); hist[x - 2]++; }
  for (int h : hist) EXPECT_NEAR(h, 10000, 500);
}

TEST(Synth, SpecialInjection) {
  Distribution d;
  d.special_density = 0.01;
  d.special_mask = synth::kSpecialNaN | synth::kSpecialNegInf;
  auto v = draw(4, d, 100000);
  int nan = 0, pinf = 0, ninf = 0;
  for (float x : v) {
    if (std::isnan(x)) ++nan;
    else if (std::isinf(x)) (x > 0 ? pinf : ninf)++;
  }
  EXPECT_EQ(pinf, 0);
  EXPECT_NEAR(nan, 500, 100);
  EXPECT_NEAR(ninf, 500, 100);
}

TEST(Synth, HalfTypesAreRoundedFloats) {
  Distribution d;
  std::vector<float> f = draw(9, d, 256);
  std::vector<uint16_t> h(256), b(256);
  synth::fill(contiguous_view(h.data(), DType::F16, {256}), 9, d);
  synth::fill(contiguous_view(b.data(), DType::BF16, {256}), 9, d);
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(h[i], bits::float_to_half(f[i]));
    EXPECT_EQ(b[i], bits::float_to_bf16(f[i]));
  }
}

TEST(Synth, ValidationNamesTheField) {
  Distribution d;
  d.p1 = -1;
  try {
    synth::validate(d);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("std"), std::string::npos);
  }
  d = Distribution{};
  d.special_density = 2;
  EXPECT_THROW(synth::validate(d), Error);
  d = Distribution{};
  d.kind = DistKind::Uniform;
  d.p0 = 3;
  d.p1 = 1;
  EXPECT_THROW(synth::validate(d), Error);
}
