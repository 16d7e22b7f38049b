/// @file element.hpp
/// @brief The per-element step of the comparator, shared verbatim by the CPU loop and the CUDA
/// kernel so both measure exactly the same thing.
///
/// Hot path (both values finite): one subtraction, two fused multiply-adds for the sums of
/// squares, one multiply-add for the bound, a cross-multiplied comparison for the relative error
/// and integer arithmetic on the raw bits for the ULP distance. Class tests use the raw bits.
/// Callers feed elements of one thread in increasing index order, so a strict `>` keeps the
/// smallest index on ties; merges across threads break ties by index (stats.hpp).
#pragma once

#include <cmath>
#include <type_traits>

#include "kverify/compare/stats.hpp"
#include "kverify/tensor/bits.hpp"

namespace kverify::compare {

/// Elementwise bound |c - o| <= atol + rtol * |o|.
struct Bound {
  double atol = 0.0;
  double rtol = 0.0;
};

/// Exponent mask of float type T (all ones = Inf or NaN).
template <DType T>
KV_HD constexpr uint64_t exp_mask() {
  if constexpr (T == DType::F64) return 0x7ff0000000000000ull;
  else if constexpr (T == DType::F32) return 0x7f800000ull;
  else if constexpr (T == DType::F16) return 0x7c00ull;
  else return 0x7f80ull;
}

/// Mantissa mask of float type T.
template <DType T>
KV_HD constexpr uint64_t man_mask() {
  if constexpr (T == DType::F64) return 0x000fffffffffffffull;
  else if constexpr (T == DType::F32) return 0x007fffffull;
  else if constexpr (T == DType::F16) return 0x03ffull;
  else return 0x007full;
}

template <DType T>
KV_HD constexpr int type_bytes() {
  return T == DType::F64 ? 8 : (T == DType::F32 ? 4 : 2);
}

/// Widen raw bits of float type T to double (exact).
template <DType T>
KV_HD double widen(uint64_t b) {
  if constexpr (T == DType::F64) return bits::f64_from(b);
  else if constexpr (T == DType::F32) return static_cast<double>(bits::f32_from(static_cast<uint32_t>(b)));
  else if constexpr (T == DType::F16) return static_cast<double>(bits::half_to_float(static_cast<uint16_t>(b)));
  else return static_cast<double>(bits::bf16_to_float(static_cast<uint16_t>(b)));
}

/// Class of a value from its bits: 0 finite, 1 NaN, 2 +Inf, 3 -Inf.
template <DType T>
KV_HD int value_class(uint64_t b) {
  if ((b & exp_mask<T>()) != exp_mask<T>()) return 0;
  if (b & man_mask<T>()) return 1;
  return (b >> (type_bytes<T>() * 8 - 1)) ? 3 : 2;
}

/// The fields the finite-element path updates (kept in registers on the GPU).
struct Hot {
  double sum_sq_err = 0.0;
  double sum_sq_ref = 0.0;
  double max_abs_err = 0.0;
  int64_t max_abs_idx = kNoIndex;
  int64_t max_rel_idx = kNoIndex;
  uint64_t max_ulp = 0;
  int64_t max_ulp_idx = kNoIndex;
  int64_t n_past_bound = 0;
  int64_t first_past_bound = kNoIndex;
};

/// Running state of one thread: the hot fields, the (numerator, denominator) of the largest
/// relative error seen (kept undivided), and a pointer to the class-mismatch counts, which only
/// the rare non-finite path touches (the CUDA kernel keeps them in shared memory to save
/// registers). Construct as Running r{&cold} with a zero-initialised CompareStats cold.
struct Running {
  CompareStats* cold;
  Hot s;
  double rel_num = 0.0;
  double rel_den = 1.0;
};

/// Record a class mismatch or agreement between non-finite values (cold path).
template <DType TC, DType TO>
KV_HD void step_nonfinite(Running& r, uint64_t cb, uint64_t ob, int64_t i) {
  CompareStats& s = *r.cold;
  const int cc = value_class<TC>(cb), oc = value_class<TO>(ob);
  if (oc) s.oracle_nonfinite += 1;
  if (cc) s.candidate_nonfinite += 1;
  if (cc == oc) return;
  if ((cc == 1) != (oc == 1)) { s.nan_mismatch += 1; if (s.first_nan == kNoIndex) s.first_nan = i; }
  if ((cc == 2) != (oc == 2)) { s.posinf_mismatch += 1; if (s.first_posinf == kNoIndex) s.first_posinf = i; }
  if ((cc == 3) != (oc == 3)) { s.neginf_mismatch += 1; if (s.first_neginf == kNoIndex) s.first_neginf = i; }
  if (oc == 1 && cc >= 2) { s.nan_as_inf += 1; if (s.first_nan_as_inf == kNoIndex) s.first_nan_as_inf = i; }
  r.s.n_past_bound += 1;
  if (r.s.first_past_bound == kNoIndex) r.s.first_past_bound = i;
}

/// Accumulate one element: candidate bits `cb` of type TC against oracle bits `ob` of type TO at
/// logical index i (indices must increase within one Running).
template <DType TC, DType TO>
KV_HD void step(Running& r, uint64_t cb, uint64_t ob, int64_t i, const Bound& b) {
  if (((cb & exp_mask<TC>()) == exp_mask<TC>()) || ((ob & exp_mask<TO>()) == exp_mask<TO>())) {
    step_nonfinite<TC, TO>(r, cb, ob, i);
    return;
  }
  Hot& s = r.s;
  const double c = widen<TC>(cb), o = widen<TO>(ob);
  const double d = c - o;
  const double err = fabs(d);
  const double ao = fabs(o);
  s.sum_sq_err = fma(d, d, s.sum_sq_err);
  s.sum_sq_ref = fma(o, o, s.sum_sq_ref);
  if (err > s.max_abs_err) { s.max_abs_err = err; s.max_abs_idx = i; }
  if (err * r.rel_den > r.rel_num * ao) { r.rel_num = err; r.rel_den = ao; s.max_rel_idx = i; }
  uint64_t orb;
  if constexpr (TC == TO) orb = ob;
  else orb = bits::round_bits<TC>(o);
  const int64_t du = bits::ordered(cb, type_bytes<TC>()) - bits::ordered(orb, type_bytes<TC>());
  const uint64_t ulp = static_cast<uint64_t>(du < 0 ? -du : du);
  if (ulp > s.max_ulp) { s.max_ulp = ulp; s.max_ulp_idx = i; }
  if (err > fma(b.rtol, ao, b.atol)) {
    s.n_past_bound += 1;
    if (s.first_past_bound == kNoIndex) s.first_past_bound = i;
  }
}

KV_HD int popcount8(unsigned m) {
#if defined(__CUDA_ARCH__)
  return __popc(m);
#else
  return __builtin_popcount(m);
#endif
}

KV_HD int lowest_bit(unsigned m) {
#if defined(__CUDA_ARCH__)
  return __ffs(static_cast<int>(m)) - 1;
#else
  return __builtin_ctz(m);
#endif
}

/// |ordered(a) - ordered(b)| for types of up to 4 bytes, in 32-bit arithmetic (fits: both
/// ordered values lie in (-2^31, 2^31)).
template <DType T>
KV_HD uint32_t ulp_distance32(uint32_t a, uint32_t b) {
  constexpr uint32_t sign = 1u << (type_bytes<T>() * 8 - 1);
  const int32_t oa = (a & sign) ? -static_cast<int32_t>(a & (sign - 1)) : static_cast<int32_t>(a);
  const int32_t ob = (b & sign) ? -static_cast<int32_t>(b & (sign - 1)) : static_cast<int32_t>(b);
  return oa > ob ? static_cast<uint32_t>(oa) - static_cast<uint32_t>(ob) : static_cast<uint32_t>(ob) - static_cast<uint32_t>(oa);
}

constexpr int kChunk = 8;  ///< elements per chunk step

/// Widen raw bits of a 16-bit float type to float (exact).
template <DType T>
KV_HD float widen16(uint64_t b) {
  if constexpr (T == DType::F16) return bits::half_to_float(static_cast<uint16_t>(b));
  else return bits::bf16_to_float(static_cast<uint16_t>(b));
}

/// Finite chunk of a 16-bit pair (fp16/bf16 against fp16/bf16): the same measurements in fp32
/// arithmetic, which is exact for |c - o| whenever c and o are within a factor 2^13 of each other
/// (both have at most 11 significant bits) and correctly rounded to fp32 otherwise; the bound is
/// evaluated as fmaf(float(rtol), |o|, float(atol)); chunk sums are formed in fp32 and added to the
/// fp64 running sums.
template <DType TC, DType TO>
KV_HD void step_chunk16(Running& r, const uint64_t (&cb)[8], const uint64_t (&ob)[8], int64_t base, const Bound& b) {
  Hot& s = r.s;
  float sse = 0.0f, ssr = 0.0f;
  float amax = 0.0f, rn = 0.0f, rd = 1.0f;
  int aidx = -1, ridx = -1, uidx = -1;
  uint32_t umax = 0;
  unsigned past = 0;
  const float atol = static_cast<float>(b.atol), rtol = static_cast<float>(b.rtol);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float c = widen16<TC>(cb[e]), o = widen16<TO>(ob[e]);
    const float d = c - o;
    const float err = fabsf(d), ao = fabsf(o);
    sse = fmaf(d, d, sse);
    ssr = fmaf(o, o, ssr);
    if (err > amax) { amax = err; aidx = e; }
    if (err * rd > rn * ao) { rn = err; rd = ao; ridx = e; }
    uint32_t orb;
    if constexpr (TC == TO) orb = static_cast<uint32_t>(ob[e]);
    else orb = static_cast<uint32_t>(bits::round_bits<TC>(o));
    const uint32_t u = ulp_distance32<TC>(static_cast<uint32_t>(cb[e]), orb);
    if (u > umax) { umax = u; uidx = e; }
    past |= static_cast<unsigned>(err > fmaf(rtol, ao, atol)) << e;
  }
  s.sum_sq_err += static_cast<double>(sse);
  s.sum_sq_ref += static_cast<double>(ssr);
  if (aidx >= 0 && static_cast<double>(amax) > s.max_abs_err) { s.max_abs_err = amax; s.max_abs_idx = base + aidx; }
  if (ridx >= 0 && static_cast<double>(rn) * r.rel_den > r.rel_num * static_cast<double>(rd)) {
    r.rel_num = rn; r.rel_den = rd; s.max_rel_idx = base + ridx;
  }
  if (uidx >= 0 && umax > s.max_ulp) { s.max_ulp = umax; s.max_ulp_idx = base + uidx; }
  if (past) {
    s.n_past_bound += popcount8(past);
    if (s.first_past_bound == kNoIndex) s.first_past_bound = base + lowest_bit(past);
  }
}

/// Accumulate elements base..base+7 (all of one Running, after every smaller index). Same
/// results as eight step() calls except for the rounding of the two sums: maxima are tracked with
/// chunk-local 32-bit positions and folded once, bound hits as a bit mask, non-finite chunks take
/// the scalar path.
template <DType TC, DType TO>
KV_HD void step_chunk(Running& r, const uint64_t (&cb)[kChunk], const uint64_t (&ob)[kChunk], int64_t base,
                      const Bound& b) {
  bool special = false;
#pragma unroll
  for (int e = 0; e < kChunk; ++e)
    special |= ((cb[e] & exp_mask<TC>()) == exp_mask<TC>()) | ((ob[e] & exp_mask<TO>()) == exp_mask<TO>());
  if (special) {
    for (int e = 0; e < kChunk; ++e) step<TC, TO>(r, cb[e], ob[e], base + e, b);
    return;
  }
  if constexpr (type_bytes<TC>() == 2 && type_bytes<TO>() == 2) {
    step_chunk16<TC, TO>(r, cb, ob, base, b);
    return;
  }
  Hot& s = r.s;
  double sse = 0.0, ssr = 0.0, amax = s.max_abs_err, rn = r.rel_num, rd = r.rel_den;
  int aidx = -1, ridx = -1, uidx = -1;
  unsigned past = 0;
  using UlpT = std::conditional_t<TC == DType::F64, uint64_t, uint32_t>;
  UlpT umax = s.max_ulp > static_cast<uint64_t>(static_cast<UlpT>(~UlpT(0))) ? static_cast<UlpT>(~UlpT(0))
                                                                               : static_cast<UlpT>(s.max_ulp);
#pragma unroll
  for (int e = 0; e < kChunk; ++e) {
    const double c = widen<TC>(cb[e]), o = widen<TO>(ob[e]);
    const double d = c - o;
    const double err = fabs(d), ao = fabs(o);
    sse = fma(d, d, sse);
    ssr = fma(o, o, ssr);
    if (err > amax) { amax = err; aidx = e; }
    if (err * rd > rn * ao) { rn = err; rd = ao; ridx = e; }
    UlpT u;
    if constexpr (TC == DType::F64) {
      const int64_t du = bits::ordered(cb[e], 8) - bits::ordered(ob[e], 8);
      u = static_cast<uint64_t>(du < 0 ? -du : du);
    } else {
      uint32_t orb;
      if constexpr (TC == TO) orb = static_cast<uint32_t>(ob[e]);
      else orb = static_cast<uint32_t>(bits::round_bits<TC>(o));
      u = ulp_distance32<TC>(static_cast<uint32_t>(cb[e]), orb);
    }
    if (u > umax) { umax = u; uidx = e; }
    past |= static_cast<unsigned>(err > fma(b.rtol, ao, b.atol)) << e;
  }
  s.sum_sq_err += sse;
  s.sum_sq_ref += ssr;
  if (aidx >= 0) { s.max_abs_err = amax; s.max_abs_idx = base + aidx; }
  if (ridx >= 0) { r.rel_num = rn; r.rel_den = rd; s.max_rel_idx = base + ridx; }
  if (uidx >= 0) { s.max_ulp = umax; s.max_ulp_idx = base + uidx; }
  if (past) {
    s.n_past_bound += popcount8(past);
    if (s.first_past_bound == kNoIndex) s.first_past_bound = base + lowest_bit(past);
  }
}

/// Turn the tracked (rel_num, rel_den) into max_rel_err; call once per Running before merging.
KV_HD CompareStats finish(const Running& r) {
  CompareStats s = *r.cold;
  s.sum_sq_err = r.s.sum_sq_err;
  s.sum_sq_ref = r.s.sum_sq_ref;
  s.max_abs_err = r.s.max_abs_err;
  s.max_abs_idx = r.s.max_abs_idx;
  s.max_rel_idx = r.s.max_rel_idx;
  s.max_ulp = r.s.max_ulp;
  s.max_ulp_idx = r.s.max_ulp_idx;
  s.n_past_bound = r.s.n_past_bound;
  s.first_past_bound = r.s.first_past_bound;
  if (s.max_rel_idx != kNoIndex)
    s.max_rel_err = r.rel_den > 0.0 ? r.rel_num / r.rel_den : (r.rel_num > 0.0 ? INFINITY : 0.0);
  return s;
}

}  // namespace kverify::compare
