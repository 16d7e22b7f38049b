#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kverify/compare/compare.hpp"
#include "kverify/synth/synth.hpp"
#include "expect_stats.hpp"

using namespace kverify;
using compare::Bound;
using compare::CompareStats;

namespace {
CompareStats cmp(std::vector<float> c, std::vector<double> o, Bound b = {}) {
  const int64_t n = static_cast<int64_t>(c.size());
  return compare::compare(contiguous_view(c.data(), DType::F32, {n}), contiguous_view(o.data(), DType::F64, {n}), b);
}
}  // namespace

TEST(Compare, ExactMatch) {
  auto s = cmp({1, 2, 3}, {1, 2, 3});
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.max_abs_err, 0.0);
  EXPECT_EQ(s.max_ulp, 0u);
  EXPECT_EQ(s.normwise_rel(), 0.0);
  EXPECT_EQ(s.n_past_bound, 0);
  EXPECT_EQ(s.nonfinite_mismatch(), 0);
}

TEST(Compare, NonFiniteKindsAndFirstIndex) {
  const float nan = NAN, inf = INFINITY;
  //            0    1    2     3     4    5    6
  auto s = cmp({0, nan, inf, -inf, nan, 5, inf}, {0, 1, inf, inf, NAN, NAN, -INFINITY});
  EXPECT_EQ(s.nan_mismatch, 2);     // 1 (c NaN, o 1), 5 (o NaN, c 5)
  EXPECT_EQ(s.first_nan, 1);
  EXPECT_EQ(s.posinf_mismatch, 2);  // 3 (o +Inf, c -Inf), 6 (c +Inf, o -Inf)
  EXPECT_EQ(s.first_posinf, 3);
  EXPECT_EQ(s.neginf_mismatch, 2);  // 3, 6
  EXPECT_EQ(s.first_neginf, 3);
  EXPECT_EQ(s.n_past_bound, 4);     // elements 1, 3, 5, 6
  EXPECT_EQ(s.first_past_bound, 1);
  EXPECT_EQ(s.oracle_nonfinite, 5);
  EXPECT_EQ(s.candidate_nonfinite, 5);
}

TEST(Compare, OracleNanMetAsInfIsCountedApart) {
  const float nan = NAN, inf = INFINITY;
  //            0    1     2    3    4
  auto s = cmp({inf, -inf, nan, 1, inf}, {NAN, NAN, INFINITY, NAN, NAN});
  EXPECT_EQ(s.nan_as_inf, 3);  // 0, 1, 4 (not 2: oracle +Inf, candidate NaN; not 3: finite)
  EXPECT_EQ(s.first_nan_as_inf, 0);
  EXPECT_EQ(s.nan_mismatch, 5);
  EXPECT_EQ(s.posinf_mismatch + s.neginf_mismatch, 4);
}

TEST(Compare, ErrorsAndBound) {
  auto s = cmp({1.0f, 2.5f, -4.0f, 0.0f}, {1.0, 2.0, -4.5, 0.0}, Bound{0.1, 0.1});
  EXPECT_DOUBLE_EQ(s.max_abs_err, 0.5);
  EXPECT_EQ(s.max_abs_idx, 1);  // tie 0.5 at 1 and 2: smaller index
  EXPECT_DOUBLE_EQ(s.max_rel_err, 0.25);
  EXPECT_EQ(s.max_rel_idx, 1);
  EXPECT_DOUBLE_EQ(s.sum_sq_err, 0.5);
  EXPECT_DOUBLE_EQ(s.sum_sq_ref, 1 + 4 + 20.25);
  EXPECT_NEAR(s.normwise_rel(), std::sqrt(0.5 / 25.25), 1e-15);
  // bound atol 0.1 + rtol 0.1*|o|: 0.3 at idx1 (err .5 past), 0.55 at idx2 (err .5 within)
  EXPECT_EQ(s.n_past_bound, 1);
  EXPECT_EQ(s.first_past_bound, 1);
}

TEST(Compare, UlpInCandidateDtype) {
  const float one_up = std::nextafter(1.0f, 2.0f);
  auto s = cmp({1.0f, one_up, 3.0f}, {1.0, 1.0, 3.0});
  EXPECT_EQ(s.max_ulp, 1u);
  EXPECT_EQ(s.max_ulp_idx, 1);
  // fp16 candidate: ulp counted in fp16
  std::vector<uint16_t> h = {bits::float_to_half(1.0f), static_cast<uint16_t>(bits::float_to_half(1.0f) + 3)};
  std::vector<double> o = {1.0, 1.0};
  auto t = compare::compare(contiguous_view(h.data(), DType::F16, {2}), contiguous_view(o.data(), DType::F64, {2}), {});
  EXPECT_EQ(t.max_ulp, 3u);
}

TEST(Compare, ZeroOracleRelativeError) {
  auto s = cmp({0.0f, 1e-3f}, {0.0, 0.0});
  EXPECT_TRUE(std::isinf(s.max_rel_err));
  EXPECT_TRUE(std::isinf(s.normwise_rel()));
  auto z = cmp({0.0f}, {0.0});
  EXPECT_EQ(z.normwise_rel(), 0.0);
}

TEST(Compare, StridedEqualsContiguous) {
  std::vector<float> c(12), ct(12);
  std::vector<double> o(12);
  for (int i = 0; i < 12; ++i) { c[i] = i * 1.5f + (i % 3 == 0 ? 0.25f : 0.0f); o[i] = i * 1.5; }
  // ct holds c transposed: logical (3,4) view over storage (4,3)
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) ct[j * 3 + i] = c[i * 4 + j];
  auto a = compare::compare(contiguous_view(c.data(), DType::F32, {3, 4}), contiguous_view(o.data(), DType::F64, {3, 4}), {});
  auto b = compare::compare(make_view(ct.data(), DType::F32, Device::CPU, 0, {3, 4}, {1, 3}),
                            contiguous_view(o.data(), DType::F64, {3, 4}), {});
  EXPECT_EQ(a.max_abs_idx, b.max_abs_idx);
  EXPECT_EQ(a.sum_sq_err, b.sum_sq_err);
  EXPECT_EQ(a.max_ulp, b.max_ulp);
}

TEST(Compare, RejectsMismatch) {
  std::vector<float> c(4);
  std::vector<double> o(6);
  EXPECT_THROW(compare::compare(contiguous_view(c.data(), DType::F32, {4}), contiguous_view(o.data(), DType::F64, {6}), {}), Error);
  std::vector<int32_t> iv(4);
  EXPECT_THROW(compare::compare(contiguous_view(iv.data(), DType::I32, {4}), contiguous_view(o.data(), DType::F64, {4}), {}), Error);
  EXPECT_THROW(compare::compare(contiguous_view(c.data(), DType::F32, {4}), contiguous_view(o.data(), DType::F64, {4}), {-1, 0}), Error);
}

TEST(Digest, LayoutFreeBitSensitive) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<float> at = {1, 4, 2, 5, 3, 6};  // transpose storage
  const auto d1 = compare::digest(contiguous_view(a.data(), DType::F32, {2, 3}));
  const auto d2 = compare::digest(make_view(at.data(), DType::F32, Device::CPU, 0, {2, 3}, {1, 2}));
  EXPECT_EQ(d1, d2);
  EXPECT_NE(d1, compare::digest(contiguous_view(a.data(), DType::F32, {3, 2})));  // shape matters
  EXPECT_NE(d1, compare::digest(contiguous_view(a.data(), DType::I32, {2, 3})));  // dtype matters
  std::vector<float> b = a;
  uint32_t u;
  memcpy(&u, &b[4], 4);
  u ^= 1u;  // flip the last mantissa bit
  memcpy(&b[4], &u, 4);
  EXPECT_NE(d1, compare::digest(contiguous_view(b.data(), DType::F32, {2, 3})));
  std::vector<float> sw = {2, 1, 3, 4, 5, 6};  // swapped elements: order matters
  EXPECT_NE(d1, compare::digest(contiguous_view(sw.data(), DType::F32, {2, 3})));
}

TEST(Compare, ChunkedPathEqualsScalarPath) {
  // contiguous tensors take the 8-element chunk path; a transposed view of the same values takes
  // the scalar path: every field must agree (sums to rounding)
  const int R = 37, C = 29;  // 1073 elements: chunks plus a tail
  std::vector<float> c(R * C), ct(R * C);
  std::vector<double> o(R * C), ot(R * C);
  synth::Distribution d;
  d.special_density = 0.02;
  d.special_mask = 7;
  synth::fill(contiguous_view(o.data(), DType::F64, {R, C}), 5, d);
  for (int i = 0; i < R * C; ++i) c[i] = static_cast<float>(o[i] * (1.0 + ((i * 37) % 11) * 1e-6));
  c[100] = NAN;
  c[200] = 0.0f;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) { ct[j * R + i] = c[i * C + j]; ot[j * R + i] = o[i * C + j]; }
  const Bound b{1e-7, 3e-6};
  auto a = compare::compare(contiguous_view(c.data(), DType::F32, {R, C}), contiguous_view(o.data(), DType::F64, {R, C}), b);
  auto s = compare::compare(make_view(ct.data(), DType::F32, Device::CPU, 0, {R, C}, {1, R}),
                            make_view(ot.data(), DType::F64, Device::CPU, 0, {R, C}, {1, R}), b);
  EXPECT_EQ(a.n, s.n);
  EXPECT_EQ(a.nan_mismatch, s.nan_mismatch);
  EXPECT_EQ(a.first_nan, s.first_nan);
  EXPECT_EQ(a.oracle_nonfinite, s.oracle_nonfinite);
  EXPECT_EQ(a.max_abs_err, s.max_abs_err);
  EXPECT_EQ(a.max_abs_idx, s.max_abs_idx);
  EXPECT_EQ(a.max_rel_err, s.max_rel_err);
  EXPECT_EQ(a.max_rel_idx, s.max_rel_idx);
  EXPECT_EQ(a.max_ulp, s.max_ulp);
  EXPECT_EQ(a.max_ulp_idx, s.max_ulp_idx);
  EXPECT_EQ(a.n_past_bound, s.n_past_bound);
  EXPECT_EQ(a.first_past_bound, s.first_past_bound);
  EXPECT_GT(a.n_past_bound, 0);
  EXPECT_NEAR(a.sum_sq_err, s.sum_sq_err, 1e-12 * s.sum_sq_err);
  EXPECT_NEAR(a.sum_sq_ref, s.sum_sq_ref, 1e-12 * s.sum_sq_ref);
}

TEST(Compare, HalfPairsChunkedAgreesWithScalar) {
  // 16-bit pairs take the fp32 chunk path when contiguous; a transposed view takes the fp64 scalar
  // path: counts and indices agree, values to fp32 rounding
  for (DType t : {DType::F16, DType::BF16}) {
    const int R = 33, C = 24;
    std::vector<uint16_t> c(R * C), o(R * C), ct(R * C), ot(R * C);
    synth::Distribution d;
    synth::fill(contiguous_view(o.data(), t, {R, C}), 8, d);
    synth::fill(contiguous_view(c.data(), t, {R, C}), 8, d);
    for (int i = 0; i < R * C; i += 7) c[i] = static_cast<uint16_t>(c[i] + (i % 3) + 1);  // a few ulps off
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < C; ++j) { ct[j * R + i] = c[i * C + j]; ot[j * R + i] = o[i * C + j]; }
    const Bound b{1e-3, 1e-3};
    auto a = compare::compare(contiguous_view(c.data(), t, {R, C}), contiguous_view(o.data(), t, {R, C}), b);
    auto s = compare::compare(make_view(ct.data(), t, Device::CPU, 0, {R, C}, {1, R}),
                              make_view(ot.data(), t, Device::CPU, 0, {R, C}, {1, R}), b);
    EXPECT_EQ(a.max_abs_idx, s.max_abs_idx) << dtype_name(t);
    EXPECT_EQ(a.max_ulp, s.max_ulp);
    EXPECT_EQ(a.max_ulp_idx, s.max_ulp_idx);
    EXPECT_EQ(a.max_rel_idx, s.max_rel_idx);
    EXPECT_EQ(a.n_past_bound, s.n_past_bound);
    EXPECT_EQ(a.first_past_bound, s.first_past_bound);
    EXPECT_DOUBLE_EQ(a.max_abs_err, s.max_abs_err);  // exact: values within 2^13 of each other
    EXPECT_NEAR(a.sum_sq_err, s.sum_sq_err, 1e-5 * s.sum_sq_err);
    EXPECT_GT(a.max_ulp, 0u);
  }
}

namespace {
/// Bits of v rounded to dtype t (runtime dtype).
uint64_t round_rt(DType t, double v) {
  switch (t) {
    case DType::F64: return bits::round_bits<DType::F64>(v);
    case DType::F32: return bits::round_bits<DType::F32>(v);
    case DType::F16: return bits::round_bits<DType::F16>(v);
    default: return bits::round_bits<DType::BF16>(v);
  }
}

/// The values as a contiguous tensor (chunk path) and as a stride-2 view (scalar step() path).
struct TwoLayouts {
  std::vector<uint8_t> dense, spread;
  TensorView dense_view, spread_view;
  TwoLayouts(DType t, const std::vector<double>& v) {
    const int sz = dtype_size(t);
    const int64_t n = static_cast<int64_t>(v.size());
    dense.assign(n * sz, 0);
    spread.assign(2 * n * sz, 0);
    for (int64_t i = 0; i < n; ++i) {
      bits::store_raw(dense.data(), i, sz, round_rt(t, v[i]));
      bits::store_raw(spread.data(), 2 * i, sz, round_rt(t, v[i]));
    }
    dense_view = contiguous_view(dense.data(), t, {n});
    spread_view = make_view(spread.data(), t, Device::CPU, 0, {n}, {2});
  }
};

/// Scenarios that drive the lean chunk step through each of its branches: errors growing with the
/// index (every chunk re-walked), many exact ties, zero oracles (infinite relative error), values
/// whose fp32 squares overflow or underflow (fp64 fallback for 16-bit pairs), signed zeros, errors
/// too small to square in fp32 beside exact large values, and
/// scattered NaN/Inf. Returns (candidate, oracle) values.
std::pair<std::vector<double>, std::vector<double>> scenario(int k, int n) {
  std::vector<double> c(n), o(n);
  for (int i = 0; i < n; ++i) {
    const double base = std::sin(0.37 * i + k) * 3.0 + (i % 5 == 0 ? 0.0 : 0.5);
    switch (k) {
      case 0: o[i] = base; c[i] = base * (1.0 + ((i * 37) % 11 - 5) * 2e-3); break;            // noise
      case 1: o[i] = 1.0 + (i % 3); c[i] = o[i] + 1e-3 * i; break;                               // growing
      case 2: o[i] = (i % 4) ? 2.0 : 0.0; c[i] = o[i] + ((i % 2) ? 0.25 : -0.25); break;        // ties, zero oracle
      case 3: o[i] = base * 1e30; c[i] = o[i] * (1.0 + (i % 7) * 1e-2); break;                  // fp32 squares overflow
      case 4: o[i] = base * 1e-36; c[i] = o[i] * (1.0 + (i % 7) * 1e-2); break;                 // fp32 squares underflow
      case 5: o[i] = (i % 2) ? 0.0 : -0.0; c[i] = (i % 3) ? -0.0 : 0.0; break;                  // signed zeros, equal
      case 6: o[i] = (i % 2) ? 1.0 : 1e-30; c[i] = (i % 2) ? 1.0 : 1.01e-30; break;           // only tiny errors
      case 7: o[i] = base * 1e-36; c[i] = o[i]; break;                                          // tiny, exact
      default: {  // 8
        o[i] = base; c[i] = base + 0.01 * ((i * 13) % 7);
        if (i % 29 == 3) c[i] = NAN;
        if (i % 31 == 7) o[i] = INFINITY;
        if (i % 37 == 11) { o[i] = -INFINITY; c[i] = -INFINITY; }
      }
    }
  }
  return {c, o};
}
}  // namespace

TEST(Compare, LeanChunkEqualsStepForEveryPairAndScenario) {
  // The contiguous layout takes step_chunk (the lean path for candidates of up to 4 bytes), the
  // stride-2 layout step() only. Pairs with a 32/64-bit type: every field equal, sums to rounding.
  // 16-bit pairs: fp32 arithmetic, exact here for the errors (values within 2^13 of each other),
  // so the same fields agree; the sums to fp32 rounding.
  const std::pair<DType, DType> pairs[] = {{DType::F32, DType::F32}, {DType::F32, DType::F64}, {DType::F32, DType::BF16},
                                           {DType::BF16, DType::F32}, {DType::BF16, DType::BF16}, {DType::F16, DType::F16},
                                           {DType::F16, DType::BF16}, {DType::F64, DType::F32}};
  const int n = 8 * 41 + 5;
  for (auto [tc, to] : pairs) {
    for (int k = 0; k < 9; ++k) {
      if (tc == DType::F16 && (k == 3 || k == 4 || k == 6 || k == 7)) continue;  // out of fp16's range: values change class
      auto [cv, ov] = scenario(k, n);
      TwoLayouts c(tc, cv), o(to, ov);
      const Bound b{1e-3, 2e-3};
      auto a = compare::compare(c.dense_view, o.dense_view, b);
      auto s = compare::compare(c.spread_view, o.spread_view, b);
      const std::string at = std::string(dtype_name(tc)) + "/" + dtype_name(to) + " scenario " + std::to_string(k);
      const bool half = dtype_size(tc) == 2 && dtype_size(to) == 2;
      expect_same_measurements(a, s, half ? 1e-5 : 1e-12, at);
      if (k == 1 && dtype_size(tc) >= 4) EXPECT_EQ(a.max_abs_idx, n - 1) << at;  // the growing error peaks last
      if (k == 2) EXPECT_TRUE(std::isinf(a.max_rel_err)) << at;
      if (k == 4 || k == 7) EXPECT_GT(a.sum_sq_ref, 0.0) << at;  // no underflow to zero
      if (k == 6) EXPECT_GT(a.sum_sq_err, 0.0) << at;
      if (k == 5) EXPECT_EQ(a.max_abs_idx, compare::kNoIndex) << at;
    }
  }
}

TEST(Compare, LeanChunkSeesMaximaSetInFp64) {
  // bf16 pair: chunk 0 holds a NaN, so step() measures it in fp64, where |1 - 2^-30| is not a
  // float; chunk 1 (fp32 arithmetic) has error exactly 1.0, larger (with smaller relative and ULP
  // errors, so only the absolute maximum can flag it): it must still be the maximum (the fp32
  // comparison uses the running maximum rounded down).
  std::vector<double> c(16, 0.5), o(16, 0.5);
  c[0] = NAN;
  c[1] = 1.0; o[1] = std::ldexp(1.0, -30);
  c[8] = 1.5; o[8] = 0.5;
  TwoLayouts cc(DType::BF16, c), oo(DType::BF16, o);
  auto a = compare::compare(cc.dense_view, oo.dense_view, {});
  EXPECT_EQ(a.max_abs_idx, 8);
  EXPECT_EQ(a.max_abs_err, 1.0);
}
