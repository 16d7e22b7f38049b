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
  /// fp32 bounds of max_abs_err and rel_num (rounded down) and rel_den (rounded up), kept by the
  /// lean chunk step of 16-bit pairs (step_chunk_lean), which refreshes them after each of its own
  /// updates. step() does not: callers run step() only after the last chunk (the tail), and stale
  /// bounds describe an earlier, smaller state, so they only make the flags more eager.
  float f_amax = 0.0f, f_rel_num = 0.0f, f_rel_den = 1.0f;
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

/// |ordered(a) - ordered(b)| for types of up to 4 bytes, in 32-bit arithmetic (both ordered
/// values lie in (-2^31, 2^31); their distance, below 2^32, is formed modulo 2^32). ordered(x) of
/// a sign-magnitude pattern is (mag ^ s) - s with s = 0 or -1 from the sign bit.
template <DType T>
KV_HD uint32_t ulp_distance32(uint32_t a, uint32_t b) {
  constexpr int kSignBit = type_bytes<T>() * 8 - 1;
  constexpr uint32_t kMag = (1u << kSignBit) - 1;
  const uint32_t sa = 0u - ((a >> kSignBit) & 1u), sb = 0u - ((b >> kSignBit) & 1u);
  const uint32_t oa = ((a & kMag) ^ sa) - sa, ob = ((b & kMag) ^ sb) - sb;  // two's complement patterns
  return static_cast<int32_t>(oa) >= static_cast<int32_t>(ob) ? oa - ob : ob - oa;
}

constexpr int kChunk = 8;  ///< elements per chunk step

/// Widen raw bits of a 16-bit float type to float (exact).
template <DType T>
KV_HD float widen16(uint64_t b) {
  if constexpr (T == DType::F16) return bits::half_to_float(static_cast<uint16_t>(b));
  else return bits::bf16_to_float(static_cast<uint16_t>(b));
}

/// Arithmetic of the lean chunk step: fp32 for 16-bit pairs, fp64 otherwise.
template <DType TC, DType TO>
using LeanT = std::conditional_t<type_bytes<TC>() == 2 && type_bytes<TO>() == 2, float, double>;

/// Widen raw bits of type T to the lean arithmetic type A (exact).
template <class A, DType T>
KV_HD A widen_as(uint64_t b) {
  if constexpr (std::is_same_v<A, float>) return widen16<T>(b);
  else return widen<T>(b);
}

KV_HD float fma_a(float a, float b, float c) { return fmaf(a, b, c); }
KV_HD double fma_a(double a, double b, double c) { return fma(a, b, c); }
KV_HD float abs_a(float a) { return fabsf(a); }
KV_HD double abs_a(double a) { return fabs(a); }

/// Largest float <= x, smallest float >= x (x >= 0; +Inf maps to +Inf).
KV_HD float float_down(double x) {
  float f = static_cast<float>(x);
  return static_cast<double>(f) > x ? nextafterf(f, 0.0f) : f;
}
KV_HD float float_up(double x) {
  float f = static_cast<float>(x);
  return static_cast<double>(f) < x ? nextafterf(f, INFINITY) : f;
}

/// ULP distance (candidate dtype) of finite candidate bits `cb` from the oracle rounded to TC.
template <DType TC, DType TO, class A>
KV_HD uint32_t lean_ulp(uint64_t cb, uint64_t ob, A o) {
  uint32_t orb;
  if constexpr (TC == TO) orb = static_cast<uint32_t>(ob);
  else orb = static_cast<uint32_t>(bits::round_bits<TC>(static_cast<double>(o)));
  return ulp_distance32<TC>(static_cast<uint32_t>(cb), orb);
}

/// lean_ulp(cb, ob, o) > umax, in fewer instructions for bf16 pairs: a bf16 pattern shifted left
/// by 16 is the fp32 pattern w of the same value (the shift widen16 does). Map w to
/// ordered(w) - [w < 0] = w ^ ((w >> 31) & 0x7fffffff) (arithmetic shift: one shift, one logic op),
/// an increasing map; two bf16 values D steps apart are then D * 2^16 apart, or D * 2^16 + 1 when
/// their signs differ, so D > umax exactly when the difference exceeds umax * 2^16 + 1. The
/// difference (below 2^32: 0xfefe bf16 steps at most) is max - min in unsigned arithmetic.
template <DType TC, DType TO, class A>
KV_HD bool ulp_exceeds(uint64_t cb, uint64_t ob, A o, uint32_t umax) {
  if constexpr (TC == DType::BF16 && TO == DType::BF16) {
    const int32_t wc = static_cast<int32_t>(static_cast<uint32_t>(cb) << 16);
    const int32_t wo = static_cast<int32_t>(static_cast<uint32_t>(ob) << 16);
    const int32_t kc = wc ^ ((wc >> 31) & 0x7fffffff);
    const int32_t ko = wo ^ ((wo >> 31) & 0x7fffffff);
    const uint32_t diff = static_cast<uint32_t>(kc > ko ? kc : ko) - static_cast<uint32_t>(kc > ko ? ko : kc);
    const uint32_t u16 = umax > 0xfefeu ? 0xfefeu : umax;
    return diff > (u16 << 16) + 1u;
  } else {
    return lean_ulp<TC, TO>(cb, ob, o) > umax;
  }
}

/// Element source of step_chunk_lean over two arrays of raw bits.
struct ArraySource {
  const uint64_t (&cb)[kChunk];
  const uint64_t (&ob)[kChunk];
  KV_HD uint64_t c(int e) const { return cb[e]; }
  KV_HD uint64_t o(int e) const { return ob[e]; }
};

/// Lean chunk step for candidates of up to 4 bytes: one pass computes what every element adds
/// (the two sums of squares, the bound mask) and a conservative flag "some element may beat a
/// running maximum" (absolute, relative or ULP error, compared against the state at chunk start);
/// only a flagged chunk is walked again, in index order, with the exact update rules of step().
/// Non-finite values need no test of their own: any NaN or Inf in c or o makes the chunk's sums
/// non-finite, and such chunks take step() element by element.
///
/// A = double (any pair with a 32- or 64-bit type): every measurement equals step()'s, except the
/// rounding of the two sums (chunk partial sums). A = float (16-bit pairs): measured in fp32
/// arithmetic, which is exact for |c - o| whenever c and o are within a factor 2^13 of each other
/// (both have at most 11 significant bits) and correctly rounded to fp32 otherwise; the bound is
/// evaluated as fmaf(float(rtol), |o|, float(atol)); chunk sums are formed in fp32 and added to the
/// fp64 running sums; a chunk whose fp32 squares could overflow or lose accuracy to
/// underflow (a non-finite sum, or a nonzero sum below 2^-100) is measured by step() in fp64. So
/// for 16-bit pairs two equal (c, o) pairs can measure differently by their 8-element chunk (fp32
/// vs fp64 error), which can move the reported index of a maximum between them; CPU and CUDA cut
/// the same chunks, so they agree. Relies on IEEE arithmetic: no fast-math, no flush-to-zero.
///
/// Why the flags are safe for A = float: the exact rules compare in fp64; amax and rel_num are
/// rounded down to float and rel_den up (Running::f_*), so an element that beats the state in fp64 also passes
/// the float comparison (rounding is monotone); an update needs err > 0.
///
/// `hot` and `cold` give the raw bits of element e (0..7) of the chunk as hot.c(e), hot.o(e): the
/// first pass reads `hot`, the rare second pass and the fallback read `cold` (the CUDA kernel
/// passes its registers as `hot` and a re-load from memory as `cold`, so no register has to stay
/// live past the first pass).
template <DType TC, DType TO, class HotSrc, class ColdSrc>
KV_HD void step_chunk_lean(Running& r, const HotSrc& hot, const ColdSrc& cold, int64_t base, const Bound& b) {
  using A = LeanT<TC, TO>;
  constexpr bool kFloat = std::is_same_v<A, float>;
  Hot& s = r.s;
  A amax, rn, rd;
  if constexpr (kFloat) {
    amax = r.f_amax; rn = r.f_rel_num; rd = r.f_rel_den;
  } else {
    amax = s.max_abs_err; rn = r.rel_num; rd = r.rel_den;
  }
  auto refresh = [&r]() {  // after any update of the running maxima (rare)
    if constexpr (kFloat) {
      r.f_amax = float_down(r.s.max_abs_err); r.f_rel_num = float_down(r.rel_num); r.f_rel_den = float_up(r.rel_den);
    }
  };
  const uint32_t umax = s.max_ulp > 0xffffffffull ? 0xffffffffu : static_cast<uint32_t>(s.max_ulp);
  const A atol = static_cast<A>(b.atol), rtol = static_cast<A>(b.rtol);
  A sse = 0, ssr = 0, emax = 0;
  uint32_t onz = 0;  // OR of the oracle patterns (A = float): nonzero magnitude somewhere?
  bool hit = false;
  unsigned past = 0;
#pragma unroll
  for (int e = 0; e < kChunk; ++e) {
    const uint64_t cb = hot.c(e), ob = hot.o(e);
    const A c = widen_as<A, TC>(cb), o = widen_as<A, TO>(ob);
    const A d = c - o;
    const A err = abs_a(d), ao = abs_a(o);
    sse = fma_a(d, d, sse);
    ssr = fma_a(o, o, ssr);
    if constexpr (kFloat) {
      emax = fmaxf(emax, err);
      onz |= static_cast<uint32_t>(ob);
      hit |= (err * rd >= rn * ao) & (err > 0.0f);
    } else {
      hit |= (err > amax) | (err * rd > rn * ao);
    }
    hit |= ulp_exceeds<TC, TO>(cb, ob, o, umax);
    past |= static_cast<unsigned>(err > fma_a(rtol, ao, atol)) << e;
  }
  bool fallback = !(sse + ssr < static_cast<A>(INFINITY));  // NaN or +Inf (both sums are >= 0)
  if constexpr (kFloat) {
    constexpr float kTiny = 7.8886091e-31f;  // 2^-100
    constexpr uint32_t kMag = (1u << (type_bytes<TO>() * 8 - 1)) - 1;
    fallback |= (sse < kTiny && emax > 0.0f) | (ssr < kTiny && (onz & kMag) != 0);
    hit |= emax > amax;
  }
  if (fallback) {
    for (int e = 0; e < kChunk; ++e) step<TC, TO>(r, cold.c(e), cold.o(e), base + e, b);
    refresh();
    return;
  }
  s.sum_sq_err += static_cast<double>(sse);
  s.sum_sq_ref += static_cast<double>(ssr);
  if (past) {
    s.n_past_bound += popcount8(past);
    if (s.first_past_bound == kNoIndex) s.first_past_bound = base + lowest_bit(past);
  }
  if (!hit) return;
  for (int e = 0; e < kChunk; ++e) {  // rare: some maximum may move; step()'s rules, in index order
    const uint64_t cb = cold.c(e), ob = cold.o(e);
    const A c = widen_as<A, TC>(cb), o = widen_as<A, TO>(ob);
    const A d = c - o;
    const double err = static_cast<double>(abs_a(d)), ao = static_cast<double>(abs_a(o));
    if (err > s.max_abs_err) { s.max_abs_err = err; s.max_abs_idx = base + e; }
    if (err * r.rel_den > r.rel_num * ao) { r.rel_num = err; r.rel_den = ao; s.max_rel_idx = base + e; }
    const uint32_t u = lean_ulp<TC, TO>(cb, ob, o);
    if (u > s.max_ulp) { s.max_ulp = u; s.max_ulp_idx = base + e; }
  }
  refresh();
}

/// Accumulate elements base..base+7 (all of one Running, after every smaller index). Same
/// results as eight step() calls except for the rounding of the two sums and, for finite 16-bit
/// pairs, fp32 arithmetic (step_chunk_lean); fp64 candidates take the generic chunk below:
/// maxima tracked with chunk-local positions and folded once, bound hits as a bit mask,
/// non-finite chunks through step().
template <DType TC, DType TO>
KV_HD void step_chunk(Running& r, const uint64_t (&cb)[kChunk], const uint64_t (&ob)[kChunk], int64_t base,
                      const Bound& b) {
  if constexpr (type_bytes<TC>() <= 4) {
    const ArraySource src{cb, ob};
    step_chunk_lean<TC, TO>(r, src, src, base, b);
    return;
  } else {
    bool special = false;
#pragma unroll
    for (int e = 0; e < kChunk; ++e)
      special |= ((cb[e] & exp_mask<TC>()) == exp_mask<TC>()) | ((ob[e] & exp_mask<TO>()) == exp_mask<TO>());
    if (special) {
      for (int e = 0; e < kChunk; ++e) step<TC, TO>(r, cb[e], ob[e], base + e, b);
      return;
    }
    Hot& s = r.s;
    double sse = 0.0, ssr = 0.0, amax = s.max_abs_err, rn = r.rel_num, rd = r.rel_den;
    int aidx = -1, ridx = -1, uidx = -1;
    unsigned past = 0;
    uint64_t umax = s.max_ulp;
#pragma unroll
    for (int e = 0; e < kChunk; ++e) {
      const double c = widen<TC>(cb[e]), o = widen<TO>(ob[e]);
      const double d = c - o;
      const double err = fabs(d), ao = fabs(o);
      sse = fma(d, d, sse);
      ssr = fma(o, o, ssr);
      if (err > amax) { amax = err; aidx = e; }
      if (err * rd > rn * ao) { rn = err; rd = ao; ridx = e; }
      const int64_t du = bits::ordered(cb[e], 8) - bits::ordered(bits::round_bits<TC>(o), 8);
      const uint64_t u = static_cast<uint64_t>(du < 0 ? -du : du);
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
