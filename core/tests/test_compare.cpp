#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <type_traits>
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

uint64_t mix(uint64_t x) {  // splitmix64 finaliser: deterministic pseudo-random bits
  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull; x ^= x >> 27; x *= 0x94d049bb133111ebull; return x ^ (x >> 31);
}

constexpr int kScenarios = 12;

/// Scenarios that drive the lean chunk step through each of its branches: errors growing with the
/// index (every chunk re-walked), many exact ties, zero oracles (infinite relative error), values
/// whose fp32 squares overflow or underflow (fp64 fallback for 16-bit pairs), signed zeros, errors
/// too small to square in fp32 beside exact large values, scattered NaN/Inf (8), random
/// magnitudes with few-ulp errors, so that absolute, relative and ULP maxima sit at different
/// elements (9), maxima only in element 15 of a 16-element step or element 8 (10), NaN/Inf only
/// at the end (11). Returns (candidate, oracle) values.
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
      case 9: {  // random magnitudes (2^-24 .. 2^24), signs and few-ulp errors; some zeros and sign flips
        const uint64_t h = mix(static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull + 12345);
        o[i] = std::ldexp(1.0 + (h & 0xff) / 256.0, static_cast<int>((h >> 8) % 49) - 24) * ((h >> 16) & 1 ? -1.0 : 1.0);
        const double ulps = static_cast<double>((h >> 20) % 7) - 3.0;  // -3 .. 3 (in ~2^-8 relative steps)
        c[i] = o[i] * (1.0 + ulps * std::ldexp(1.0, -8));
        if ((h >> 24) % 23 == 0) o[i] = 0.0;
        if ((h >> 24) % 29 == 1) c[i] = -c[i];
        if ((h >> 24) % 31 == 2) c[i] = o[i];
        break;
      }
      case 10:  // maxima only in the last element of each 16 or the first of its second chunk
        o[i] = 1.0 + (i % 3); c[i] = o[i];
        if (i % 16 == 15) c[i] = o[i] + 1e-3 * i;
        if (i % 16 == 8) { o[i] = 0.01 * (1 + i % 5); c[i] = o[i] * (1.0 + 1e-4 * i); }
        break;
      case 11:  // NaN / Inf only at the very end and in the last element of a 16-element step
        o[i] = base; c[i] = base + 0.01 * ((i * 13) % 7);
        if (i == n - 1) c[i] = NAN;
        if (i % 16 == 15 && i + 40 > n) o[i] = INFINITY;
        break;
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
    for (int k = 0; k < kScenarios; ++k) {
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

namespace {
/// The CUDA kernel's use of the 16-bit lean step, on the CPU: `threads` Running states; step s
/// (16 elements, two chunks) goes to thread s % threads, measured either as one two-chunk call
/// (the kernel's, two_chunk = true) or as two one-chunk calls (the CPU loop's); an odd last chunk
/// goes to thread steps % threads as one chunk; tail element i to thread (i - start) % threads;
/// the per-thread results are merged in thread order.
/// The CUDA kernel's share_thresholds (compare.cu) over `lanes`, emulated: once some lane
/// refreshed its lean 16-bit flag thresholds, every lane takes the largest of each.
void share_thresholds(std::vector<compare::Running>& lanes) {
  bool any = false;
  float amax = 0.0f, key = -1.0f, rn = 0.0f, rd = 1.0f;
  uint32_t u = 0;
  for (const auto& r : lanes) {
    any |= r.refreshed;
    amax = std::max(amax, r.f_amax);
    u = std::max(u, r.u2 & 0xffffu);
    if (r.f_rn / r.f_rd > key) { key = r.f_rn / r.f_rd; rn = r.f_rn; rd = r.f_rd; }  // the first lane of the largest
  }
  if (!any) return;
  for (auto& r : lanes) { r.f_amax = amax; r.f_rn = rn; r.f_rd = rd; r.u2 = u | (u << 16); r.refreshed = false; }
}

/// The CUDA kernel's cut of 16-bit pairs, on the CPU: step s (elements 16s..16s+15) to thread
/// s % threads, two chunks per call (two_chunk) or one; the odd last chunk and the tail as the
/// kernel measures them. share: the threads form one warp whose thresholds are shared after each
/// of its steps (share_thresholds), as the kernel does.
template <DType TC, DType TO>
CompareStats drive16(const TwoLayouts& c, const TwoLayouts& o, const Bound& b, int threads, bool two_chunk,
                     bool share = false) {
  using compare::kChunk;
  const int64_t n = static_cast<int64_t>(c.dense.size() / 2);
  auto bits_at = [](const TwoLayouts& t, int64_t i) { return bits::load_raw(t.dense.data(), i, 2); };
  std::vector<CompareStats> cold(threads);
  std::vector<compare::Running> r;
  for (int t = 0; t < threads; ++t) r.push_back(compare::Running{&cold[t]});
  const int64_t chunks = n / kChunk, steps = chunks / 2;
  for (int64_t s = 0; s < steps; ++s) {
    uint64_t cb[2 * kChunk], ob[2 * kChunk];
    for (int e = 0; e < 2 * kChunk; ++e) { cb[e] = bits_at(c, 16 * s + e); ob[e] = bits_at(o, 16 * s + e); }
    compare::Running& rt = r[s % threads];
    if (two_chunk) {
      const compare::ArraySource<2 * kChunk> src{cb, ob};
      compare::step_chunks_lean16<TC, TO, 2>(rt, src, src, 16 * s, b);
    } else {
      for (int h = 0; h < 2; ++h) {
        uint64_t c8[kChunk], o8[kChunk];
        for (int e = 0; e < kChunk; ++e) { c8[e] = cb[h * kChunk + e]; o8[e] = ob[h * kChunk + e]; }
        compare::step_chunk<TC, TO>(rt, c8, o8, 16 * s + h * kChunk, b);
      }
    }
    if (share && ((s + 1) % threads == 0 || s + 1 == steps)) share_thresholds(r);
  }
  if (chunks > 2 * steps) {
    uint64_t c8[kChunk], o8[kChunk];
    for (int e = 0; e < kChunk; ++e) { c8[e] = bits_at(c, 16 * steps + e); o8[e] = bits_at(o, 16 * steps + e); }
    compare::step_chunk<TC, TO>(r[steps % threads], c8, o8, 16 * steps, b);
  }
  for (int64_t i = chunks * kChunk; i < n; ++i)
    compare::step<TC, TO>(r[(i - chunks * kChunk) % threads], bits_at(c, i), bits_at(o, i), i, b);
  CompareStats out;
  for (int t = 0; t < threads; ++t) compare::merge(out, compare::finish(r[t]));
  out.n = n;
  return out;
}

void expect_bitwise_equal(const CompareStats& a, const CompareStats& b, const std::string& at) {
  expect_same_measurements(a, b, 0.0, at);
  EXPECT_EQ(a.max_abs_err, b.max_abs_err) << at;
  EXPECT_EQ(a.sum_sq_err, b.sum_sq_err) << at;  // the chunks' fp32 sums are added in the same order
  EXPECT_EQ(a.sum_sq_ref, b.sum_sq_ref) << at;
  EXPECT_EQ(a.n, b.n) << at;
}

template <DType TC, DType TO>
void check_two_chunk_steps(int n, int k, const std::string& at) {
  auto [cv, ov] = scenario(k, n);
  TwoLayouts c(TC, cv), o(TO, ov);
  const Bound b{1e-3, 2e-3};
  // one thread: the kernel's cut equals the CPU loop's bit for bit, and step()'s measurements
  const auto gpu1 = drive16<TC, TO>(c, o, b, 1, true);
  expect_bitwise_equal(gpu1, compare::compare(c.dense_view, o.dense_view, b), at + " 1 thread vs CPU loop");
  expect_same_measurements(gpu1, compare::compare(c.spread_view, o.spread_view, b), 1e-5, at + " 1 thread vs step()");
  // three threads (stale thresholds across interleaved steps): equal to one-chunk calls
  expect_bitwise_equal(drive16<TC, TO>(c, o, b, 3, true), drive16<TC, TO>(c, o, b, 3, false), at + " 3 threads");
  // thresholds shared across a warp of 3 or 32 (fewer re-walks): the same merged measurements
  for (int lanes : {3, 32})
    expect_bitwise_equal(drive16<TC, TO>(c, o, b, lanes, true, true), drive16<TC, TO>(c, o, b, lanes, true),
                         at + " " + std::to_string(lanes) + " threads sharing thresholds");
}
}  // namespace

TEST(Compare, LeanTwoChunkStepEqualsOneChunkSteps) {
  // The CUDA kernel measures 16-bit pairs two chunks (16 elements) per call; the CPU loop one
  // chunk per call. Lengths: whole steps only, an odd chunk count plus a short tail, shorter than
  // one chunk, one step less one element.
  for (int n : {16 * 21, 16 * 20 + 8 + 5, 8 * 41 + 5, 7, 15, 16 * 3 - 1}) {
    for (int k = 0; k < kScenarios; ++k) {
      const std::string at = "n " + std::to_string(n) + " scenario " + std::to_string(k);
      check_two_chunk_steps<DType::BF16, DType::BF16>(n, k, "bf16/bf16 " + at);
      check_two_chunk_steps<DType::F16, DType::BF16>(n, k, "f16/bf16 " + at);
      check_two_chunk_steps<DType::BF16, DType::F16>(n, k, "bf16/f16 " + at);
      if (k == 3 || k == 4 || k == 6 || k == 7) continue;  // out of fp16's range
      check_two_chunk_steps<DType::F16, DType::F16>(n, k, "f16/f16 " + at);
    }
  }
}

TEST(Compare, LeanFlagsCatchMaximaOfEachKind) {
  // bf16 pair. Elements 0..15 set the state: ULP 3 and relative error 3 * 2^-7 at element 2
  // (1 + 3 ulp vs 1), absolute error 1 at element 5 (129 vs 128). In elements 16..31 each maximum
  // moves at an element that beats the state in that one measure only, so only that part of the
  // flag can send the chunk to the exact re-walk:
  //   20: 4 ULPs at the top of a binade (1.9609375 vs 1.9921875): relative error 0.0157 < 0.0234;
  //   25: 4 ULPs at the bottom (1.03125 vs 1): relative error 0.03125, ULP tie (earlier index kept);
  //   31: absolute error 2 (258 vs 256): 1 ULP, relative error 0.0078.
  std::vector<double> c(32, 1.0), o(32, 1.0);
  c[2] = 1.0234375;
  c[5] = 129.0; o[5] = 128.0;
  c[20] = 1.9609375; o[20] = 1.9921875;
  c[25] = 1.03125;
  c[31] = 258.0; o[31] = 256.0;
  TwoLayouts cc(DType::BF16, c), oo(DType::BF16, o);
  for (bool two_chunk : {true, false}) {
    const auto a = drive16<DType::BF16, DType::BF16>(cc, oo, {}, 1, two_chunk);
    EXPECT_EQ(a.max_ulp, 4u);
    EXPECT_EQ(a.max_ulp_idx, 20);
    EXPECT_EQ(a.max_rel_idx, 25);
    EXPECT_EQ(a.max_rel_err, 0.03125);
    EXPECT_EQ(a.max_abs_idx, 31);
    EXPECT_EQ(a.max_abs_err, 2.0);
    expect_same_measurements(a, compare::compare(cc.spread_view, oo.spread_view, {}), 1e-6, "vs step()");
  }
}

namespace {
/// Element source over two arrays of 16-bit patterns (one two-chunk step) that records which of
/// its chunks were read (bit h of *read: chunk h): as `cold`, the reads the lean 16-bit step
/// makes from memory on the GPU (fallback, re-walk); as `hot`, the kernel's registers.
struct CountingSource16 {
  const uint16_t* cc;
  const uint16_t* oo;
  unsigned* read;
  uint64_t c(int e) const { *read |= 1u << (e / compare::kChunk); return cc[e]; }
  uint64_t o(int e) const { *read |= 1u << (e / compare::kChunk); return oo[e]; }
  uint32_t o_or(int h) const {
    uint32_t m = 0;
    for (int e = 0; e < compare::kChunk; ++e) m |= oo[h * compare::kChunk + e];
    return m;
  }
  uint32_t cw(int j) const { return cc[2 * j] | (static_cast<uint32_t>(cc[2 * j + 1]) << 16); }
  uint32_t ow(int j) const { return oo[2 * j] | (static_cast<uint32_t>(oo[2 * j + 1]) << 16); }
};

/// Fraction of 8-element chunks whose lean 16-bit step reads `cold` (the exact re-walk, the fp64
/// fallback, anything else that would re-read memory on the GPU) after a warm-up, on bench/compare.py's realistic pair: oracle normal(0, 1), candidate
/// o * (1 + u * eps) with u uniform in [-4, 4] and every operation rounded to the dtype (as torch
/// computes it: most elements a few ULPs off, many at exactly the running maximum ULP distance),
/// bound atol = rtol = 1e-2 (about a fifth of the elements past it). The kernel's cut: `threads`
/// Running states, two-chunk step s to thread s % threads, `per_thread` steps each.
template <DType T>
double rewalk_fraction(int threads, int per_thread, int warmup, bool share = false) {
  auto round16 = [](float x) -> uint16_t { return T == DType::BF16 ? bits::float_to_bf16(x) : bits::float_to_half(x); };
  auto value = [](uint16_t p) { return T == DType::BF16 ? bits::bf16_to_float(p) : bits::half_to_float(p); };
  const float eps = T == DType::BF16 ? 0x1p-7f : 0x1p-10f;
  const int64_t steps = static_cast<int64_t>(threads) * per_thread, n = 16 * steps;
  std::vector<uint16_t> c(n), o(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h1 = mix(static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull + 1), h2 = mix(h1), h3 = mix(h2);
    const double u1 = (static_cast<double>(h1 >> 11) + 0.5) * 0x1p-53, u2 = static_cast<double>(h2 >> 11) * 0x1p-53;
    o[i] = round16(static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2)));
    const float u = value(round16(static_cast<float>(static_cast<double>(h3 >> 11) * 0x1p-53 * 8.0 - 4.0)));
    c[i] = round16(value(round16(value(round16(u * eps)) + 1.0f)) * value(o[i]));
  }
  std::vector<CompareStats> cold(threads);
  std::vector<compare::Running> r;
  for (int t = 0; t < threads; ++t) r.push_back(compare::Running{&cold[t]});
  const Bound b{1e-2, 1e-2};
  int64_t counted = 0, slow = 0;
  unsigned hot_read = 0;
  for (int64_t s = 0; s < steps; ++s) {
    unsigned read = 0;
    const CountingSource16 hot{&c[16 * s], &o[16 * s], &hot_read}, mem{&c[16 * s], &o[16 * s], &read};
    compare::step_chunks_lean16<T, T, 2>(r[s % threads], hot, mem, 16 * s, b);
    if (share && (s + 1) % threads == 0) share_thresholds(r);
    if (s / threads < warmup) continue;
    counted += 2;
    slow += (read & 1u) + (read >> 1);
  }
  return static_cast<double>(slow) / static_cast<double>(counted);
}
}  // namespace

TEST(Compare, LeanSharedThresholdsAtManyStepsPerThread) {
  // check_two_chunk_steps shares thresholds over at most 21 steps: with 32 lanes that is one warp
  // step. Here 9 and 4 steps per lane (and a tail), every scenario, every 16-bit pair: thresholds
  // shared after each warp step give the same measurements as each lane's own.
  for (int n : {16 * 32 * 9 + 13, 16 * 32 * 4 + 3}) {
    for (int k = 0; k < kScenarios; ++k) {
      auto [cv, ov] = scenario(k, n);
      const Bound b{1e-3, 2e-3};
      const std::string at = "n " + std::to_string(n) + " scenario " + std::to_string(k);
      auto both = [&](auto tc, auto to, const std::string& pair) {
        constexpr DType TC = decltype(tc)::value, TO = decltype(to)::value;
        TwoLayouts c(TC, cv), o(TO, ov);
        expect_bitwise_equal(drive16<TC, TO>(c, o, b, 32, true, true), drive16<TC, TO>(c, o, b, 32, true), pair + " " + at);
      };
      both(std::integral_constant<DType, DType::BF16>{}, std::integral_constant<DType, DType::BF16>{}, "bf16/bf16");
      both(std::integral_constant<DType, DType::BF16>{}, std::integral_constant<DType, DType::F16>{}, "bf16/f16");
      both(std::integral_constant<DType, DType::F16>{}, std::integral_constant<DType, DType::BF16>{}, "f16/bf16");
      if (k == 3 || k == 4 || k == 6 || k == 7) continue;  // out of fp16's range
      both(std::integral_constant<DType, DType::F16>{}, std::integral_constant<DType, DType::F16>{}, "f16/f16");
    }
  }
}

TEST(Compare, LeanRewalkIsRareOnRealisticData) {
  // A speed property guarded on the CPU (CI has no GPU): each chunk that reads `cold` re-reads its
  // elements from memory on the GPU, so on realistic data that must be rare. The flag must not
  // fire on elements that merely tie the running maximum ULP distance (an inexact ULP test, e.g.
  // |d| > |o| * umax / (2^P + umax), spans a factor 2 of |d| per ULP and sent ~40% of bf16 chunks
  // to the re-walk here, halving H200 throughput), and elements past the bound must not need one
  // (their mask comes from the first pass), nor on elements whose relative error ties the
  // maximum's (an inexact relative test, |d| > fl(h |o|) with h a little below the largest ratio,
  // flagged 0.80% of bf16 chunks here, at equal ratios; the exact test 0.02%).
  const double bf16 = rewalk_fraction<DType::BF16>(32, 2048, 256);
  const double f16 = rewalk_fraction<DType::F16>(32, 2048, 256);
  EXPECT_LT(bf16, 0.002) << "bf16/bf16";
  EXPECT_LT(f16, 0.002) << "f16/f16";
  std::printf("lean 16-bit chunks re-walked after warm-up: bf16 %.3f%%, f16 %.3f%%\n", 100 * bf16, 100 * f16);
  // The CUDA kernel shares the thresholds across each warp of 32 threads: a chunk re-walks only
  // when it may beat the warp's maxima. On the GPU what costs is a warp step in which any lane
  // re-walks (the others wait): with per-lane thresholds about 1 - (1 - f)^64 of them.
  const double bf16_warp = rewalk_fraction<DType::BF16>(32, 2048, 256, true);
  const double f16_warp = rewalk_fraction<DType::F16>(32, 2048, 256, true);
  EXPECT_LT(bf16_warp, bf16 / 8) << "bf16/bf16, shared thresholds";
  EXPECT_LT(f16_warp, f16 / 8) << "f16/f16, shared thresholds";
  std::printf("with thresholds shared by 32 threads: bf16 %.3f%%, f16 %.3f%%\n", 100 * bf16_warp, 100 * f16_warp);
}

namespace {
/// Finite value of 16-bit dtype t from pattern bits (NaN/Inf patterns give NaN/Inf).
float value16(DType t, uint16_t p) { return t == DType::BF16 ? bits::bf16_to_float(p) : bits::half_to_float(p); }
}  // namespace

TEST(Compare, LeanRelativeFlagIsExact) {
  // The relative part of the lean 16-bit flag against the exact test err * rel_den > rel_num * ao
  // (products of floats: exact in fp64), over pairs drawn to hit its hard cases: equal ratios at
  // other exponents (frequent 16-bit ties), ratios a ULP apart, subnormal and large magnitudes,
  // zero oracles. A state whose pair is floats must give exactly the exact test (ties not
  // flagged); a state from fp64 arithmetic (not floats) must never miss step()'s fp64 test.
  for (DType t : {DType::BF16, DType::F16}) {
    const int mant = t == DType::BF16 ? 7 : 10, bias = t == DType::BF16 ? 127 : 15, emax = t == DType::BF16 ? 254 : 30;
    auto draw = [&](uint64_t h) -> uint16_t {  // finite, non-negative pattern; 1 in 8 subnormal or zero
      const int e = (h & 7) == 0 ? 0 : 1 + static_cast<int>((h >> 3) % static_cast<uint64_t>(emax));
      return static_cast<uint16_t>((e << mant) | ((h >> 20) & ((1u << mant) - 1)));
    };
    auto shift = [&](uint16_t p, int k) -> uint16_t {  // same mantissa, exponent moved by k (stays normal)
      const int e = (p >> mant) + k;
      return (p >> mant) == 0 || e < 1 || e > emax ? p : static_cast<uint16_t>((e << mant) | (p & ((1u << mant) - 1)));
    };
    int64_t exact_pairs = 0, ties = 0, flagged = 0, misses = 0, wrong = 0;
    for (uint64_t i = 0; i < 400000; ++i) {
      const uint64_t h1 = mix(i * 4 + 1), h2 = mix(h1), h3 = mix(h2), h4 = mix(h3);
      // a few ULPs off, or 1 in 4 anywhere (an error of up to 24 significant bits: the products
      // of the test are then not floats)
      const uint16_t o0 = draw(h1), c0 = (h2 & 3) == 0 ? draw(h2 >> 2) : static_cast<uint16_t>(o0 + (h2 >> 2) % 9);
      // the element: the state's pair moved to another exponent (equal ratio), maybe a ULP off
      const int k = static_cast<int>(h3 % 41) - 20;
      uint16_t o = shift(o0, k), c = shift(c0, k);
      if ((h3 >> 8) % 3 == 0) c = static_cast<uint16_t>(c + ((h3 >> 12) % 3) - 1);
      if ((h3 >> 16) % 7 == 0) { o = draw(h4); c = (h4 & 3) == 0 ? draw(h4 >> 2) : static_cast<uint16_t>(o + (h4 >> 40) % 5); }
      const float fc0 = value16(t, c0), fo0 = value16(t, o0), fc = value16(t, c), fo = value16(t, o);
      if (!std::isfinite(fc0) || !std::isfinite(fc) || fo0 >= 0x1p64f || fo >= 0x1p64f || fc >= 0x1p64f) continue;
      const float err0 = std::fabs(fc0 - fo0), err = std::fabs(fc - fo), ao = std::fabs(fo);
      compare::CompareStats cold;
      compare::Running r{&cold};
      r.rel_num = err0;
      r.rel_den = std::fabs(fo0);
      const bool exact = static_cast<double>(err) * r.rel_den > r.rel_num * static_cast<double>(ao);
      float rn = 0, rd = 0;
      compare::lean16_ratio<DType::BF16, DType::BF16>(r, rn, rd);
      const bool flag = compare::lean16_rel_flag(err, ao, rn, rd);
      const double ratio = r.rel_den > 0 ? r.rel_num / r.rel_den : INFINITY;
      if (ratio >= 0x1p-32 && ratio < 0x1p64) {  // lean16_ratio keeps the pair itself
        exact_pairs += 1;
        ties += static_cast<double>(err) * r.rel_den == r.rel_num * static_cast<double>(ao) && err > 0;
        wrong += flag != exact;
      } else {
        misses += exact && !flag;
      }
      flagged += flag;
      // the same state reached in fp64 (not a float pair): conservative, never misses
      r.rel_num = static_cast<double>(err0) * (1.0 + 0x1p-40);
      const bool fp64_test = static_cast<double>(err) * r.rel_den > r.rel_num * static_cast<double>(ao);
      compare::lean16_ratio<DType::BF16, DType::BF16>(r, rn, rd);
      misses += fp64_test && !compare::lean16_rel_flag(err, ao, rn, rd);
    }
    EXPECT_EQ(wrong, 0) << dtype_name(t);
    EXPECT_EQ(misses, 0) << dtype_name(t);
    EXPECT_GT(exact_pairs, 100000) << dtype_name(t);
    EXPECT_GT(ties, 10000) << dtype_name(t);  // the hard case is really drawn
    EXPECT_GT(flagged, 10000) << dtype_name(t);
    std::printf("%s: %lld exact pairs, %lld ties, %lld flagged\n", dtype_name(t), static_cast<long long>(exact_pairs),
                static_cast<long long>(ties), static_cast<long long>(flagged));
  }
}

TEST(Compare, LeanUlpFlagSeesSignDifferences) {
  // Element 0 sets the state: o = 0, c = 2^k (infinite relative error, absolute error 2^k, ULP
  // distance M(2^k), M the magnitude bits). Element 19 (second step, second chunk) has opposite
  // signs, c = 2^(k-1), o = -tiny: smaller absolute and relative errors, but a ULP distance
  // M(c) + M(o) one step of o's exponent past the state, so only the ULP part of the flag can
  // catch it; the same-sign lane distance of its patterns (0x8000 + M(o) - M(c)) stays below the
  // state, so the chunk's sign difference must send it to the exact distances.
  const std::pair<DType, std::array<double, 3>> cases[] = {{DType::BF16, {0x1p41, 0x1p40, -0x1p-125}},
                                                           {DType::F16, {0x1p15, 0x1p14, -0x1p-13}}};
  for (const auto& [t, v] : cases) {
    std::vector<double> c(32, 1.0), o(32, 1.0);
    c[0] = v[0]; o[0] = 0.0;
    c[19] = v[1]; o[19] = v[2];
    TwoLayouts cc(t, c), oo(t, o);
    const uint64_t expect_ulp = ((round_rt(t, v[1]) & 0x7fff) + (round_rt(t, v[2]) & 0x7fff));
    ASSERT_GT(expect_ulp, round_rt(t, v[0]) & 0x7fff);
    for (bool two_chunk : {true, false}) {
      const auto a = t == DType::BF16 ? drive16<DType::BF16, DType::BF16>(cc, oo, {}, 1, two_chunk)
                                      : drive16<DType::F16, DType::F16>(cc, oo, {}, 1, two_chunk);
      EXPECT_EQ(a.max_ulp, expect_ulp) << dtype_name(t);
      EXPECT_EQ(a.max_ulp_idx, 19) << dtype_name(t);
      expect_same_measurements(a, compare::compare(cc.spread_view, oo.spread_view, {}), 1e-6, dtype_name(t));
    }
  }
}

TEST(Compare, LeanSignedZerosNeedNoRewalk) {
  // Bitwise-equal values except the signs of zeros (-0 vs +0: 0 ULPs): the lean 16-bit step
  // reads no chunk again (a sign difference alone does not flag).
  std::vector<uint16_t> c(64 * 16), o(64 * 16);
  for (size_t i = 0; i < c.size(); ++i) {
    o[i] = (i % 3) ? 0x3f80 : 0x0000;   // bf16 1.0 or +0
    c[i] = (i % 3) ? 0x3f80 : 0x8000;   // -0 against +0
  }
  std::vector<CompareStats> cold(1);
  compare::Running r{&cold[0]};
  unsigned read = 0, hot_read = 0;
  for (int64_t s = 0; s < 64; ++s) {
    const CountingSource16 hot{&c[16 * s], &o[16 * s], &hot_read}, mem{&c[16 * s], &o[16 * s], &read};
    compare::step_chunks_lean16<DType::BF16, DType::BF16, 2>(r, hot, mem, 16 * s, {});
  }
  EXPECT_EQ(read, 0u);
  EXPECT_EQ(compare::finish(r).max_ulp, 0u);
}
