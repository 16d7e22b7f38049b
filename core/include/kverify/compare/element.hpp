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

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

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
  /// Flag thresholds of the lean step of 16-bit pairs (step_chunks_lean16), which refreshes them
  /// after each of its own updates (refresh_lean16): f_amax is max_abs_err rounded down to float,
  /// (f_rn, f_rd) the pair of its relative-error test |d| * f_rd > f_rn * |o| (lean16_ratio),
  /// u2 max_ulp clamped to 0xffff in both 16-bit halves (its ULP test). The defaults are those of
  /// the initial state. step() does not refresh them: callers run step() only after the last
  /// chunk (the tail), and stale thresholds describe an earlier, smaller state, so they only make
  /// the flags more eager (all grow with the state).
  float f_amax = 0.0f, f_rn = 0.0f, f_rd = 0x1p62f;
  uint32_t u2 = 0;
  /// Set by refresh_lean16; the CUDA kernel clears it when it shares the thresholds across a warp
  /// (compare.cu share_thresholds). Unused on the CPU.
  bool refreshed = false;
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

constexpr int kChunk = 8;  ///< elements per chunk step (the unit of every per-chunk decision)

/// Widen raw bits of a 16-bit float type to float (exact). On the GPU fp16 uses the hardware
/// conversion (one instruction; fp16 -> fp32 is exact, subnormals included), bf16 a shift.
template <DType T>
KV_HD float widen16(uint64_t b) {
  if constexpr (T == DType::F16) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
#else
    return bits::half_to_float(static_cast<uint16_t>(b));
#endif
  } else {
    return bits::bf16_to_float(static_cast<uint16_t>(b));
  }
}

/// Largest float <= x (x >= 0; +Inf maps to +Inf).
KV_HD float float_down(double x) {
  float f = static_cast<float>(x);
  return static_cast<double>(f) > x ? nextafterf(f, 0.0f) : f;
}

/// ULP distance (candidate dtype) of finite candidate bits `cb` of a 16-bit type from the 16-bit
/// oracle value `o` rounded to TC (its bits `ob` when TC == TO).
template <DType TC, DType TO>
KV_HD uint32_t lean_ulp16(uint64_t cb, uint64_t ob, float o) {
  uint32_t orb;
  if constexpr (TC == TO) orb = static_cast<uint32_t>(ob);
  else orb = static_cast<uint32_t>(bits::round_bits<TC>(static_cast<double>(o)));
  return ulp_distance32<TC>(static_cast<uint32_t>(cb), orb);
}

/// Element source over two arrays of raw bits, N elements (one or more chunks): c(e), o(e) give
/// the bits of element e; o_or(h) the OR of the oracle patterns of chunk h (elements 8h..8h+7);
/// cw(j), ow(j) (16-bit types) the words of elements 2j, 2j + 1.
template <int N>
struct ArraySource {
  const uint64_t (&cb)[N];
  const uint64_t (&ob)[N];
  KV_HD uint64_t c(int e) const { return cb[e]; }
  KV_HD uint64_t o(int e) const { return ob[e]; }
  KV_HD uint32_t o_or(int h) const {
    uint64_t m = 0;
    for (int e = 0; e < kChunk; ++e) m |= ob[h * kChunk + e];
    return static_cast<uint32_t>(m);
  }
  /// Words of two 16-bit patterns: elements 2j (low half) and 2j + 1 (high half).
  KV_HD uint32_t cw(int j) const { return static_cast<uint32_t>((cb[2 * j] & 0xffffu) | ((cb[2 * j + 1] & 0xffffu) << 16)); }
  KV_HD uint32_t ow(int j) const { return static_cast<uint32_t>((ob[2 * j] & 0xffffu) | ((ob[2 * j + 1] & 0xffffu) << 16)); }
};

/// Lean chunk step for pairs with a 32-bit type and no 64-bit candidate (A = fp64): one pass
/// computes what every element adds (the two sums of squares, the bound mask) and a conservative
/// flag "some element may beat a running maximum" (absolute, relative or ULP error, compared
/// against the state at chunk start); only a flagged chunk is walked again, in index order, with
/// the exact update rules of step(). Non-finite values need no test of their own: any NaN or Inf
/// in c or o makes the chunk's sums non-finite, and such chunks take step() element by element.
/// Every measurement equals step()'s, except the rounding of the two sums (chunk partial sums).
///
/// `hot` and `cold` give the raw bits of element e (0..7) of the chunk as hot.c(e), hot.o(e): the
/// first pass reads `hot`, the rare second pass and the fallback read `cold` (the CUDA kernel
/// passes its registers as `hot` and a re-load from memory as `cold`, so no register has to stay
/// live past the first pass).
template <DType TC, DType TO, class HotSrc, class ColdSrc>
KV_HD void step_chunk_lean(Running& r, const HotSrc& hot, const ColdSrc& cold, int64_t base, const Bound& b) {
  static_assert(type_bytes<TC>() <= 4 && (type_bytes<TC>() == 4 || type_bytes<TO>() >= 4), "16-bit pairs: step_chunks_lean16");
  Hot& s = r.s;
  const double amax = s.max_abs_err, rn = r.rel_num, rd = r.rel_den;
  const uint32_t umax = s.max_ulp > 0xffffffffull ? 0xffffffffu : static_cast<uint32_t>(s.max_ulp);
  double sse = 0, ssr = 0;
  bool hit = false;
  unsigned past = 0;
#pragma unroll
  for (int e = 0; e < kChunk; ++e) {
    const uint64_t cb = hot.c(e), ob = hot.o(e);
    const double c = widen<TC>(cb), o = widen<TO>(ob);
    const double d = c - o;
    const double err = fabs(d), ao = fabs(o);
    sse = fma(d, d, sse);
    ssr = fma(o, o, ssr);
    hit |= (err > amax) | (err * rd > rn * ao);
    uint32_t orb;
    if constexpr (TC == TO) orb = static_cast<uint32_t>(ob);
    else orb = static_cast<uint32_t>(bits::round_bits<TC>(o));
    hit |= ulp_distance32<TC>(static_cast<uint32_t>(cb), orb) > umax;
    past |= static_cast<unsigned>(err > fma(b.rtol, ao, b.atol)) << e;
  }
  if (!(sse + ssr < static_cast<double>(INFINITY))) {  // NaN or +Inf (both sums are >= 0)
    for (int e = 0; e < kChunk; ++e) step<TC, TO>(r, cold.c(e), cold.o(e), base + e, b);
    return;
  }
  s.sum_sq_err += sse;
  s.sum_sq_ref += ssr;
  if (past) {
    s.n_past_bound += popcount8(past);
    if (s.first_past_bound == kNoIndex) s.first_past_bound = base + lowest_bit(past);
  }
  if (!hit) return;
  for (int e = 0; e < kChunk; ++e) {  // rare: some maximum may move; step()'s rules, in index order
    const uint64_t cb = cold.c(e), ob = cold.o(e);
    const double c = widen<TC>(cb), o = widen<TO>(ob);
    const double err = fabs(c - o), ao = fabs(o);
    if (err > s.max_abs_err) { s.max_abs_err = err; s.max_abs_idx = base + e; }
    if (err * r.rel_den > r.rel_num * ao) { r.rel_num = err; r.rel_den = ao; s.max_rel_idx = base + e; }
    uint32_t orb;
    if constexpr (TC == TO) orb = static_cast<uint32_t>(ob);
    else orb = static_cast<uint32_t>(bits::round_bits<TC>(o));
    const uint32_t u = ulp_distance32<TC>(static_cast<uint32_t>(cb), orb);
    if (u > s.max_ulp) { s.max_ulp = u; s.max_ulp_idx = base + e; }
  }
}

/// Per-lane unsigned maximum / minimum of two words of two 16-bit lanes (one instruction each on
/// sm_90: VIMNMX.U16x2, VIMNMX3.U16x2).
KV_HD uint32_t vmax_u16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __vmaxu2(a, b);
#else
  const uint32_t lo = (a & 0xffffu) > (b & 0xffffu) ? (a & 0xffffu) : (b & 0xffffu);
  return ((a >> 16) > (b >> 16) ? (a & 0xffff0000u) : (b & 0xffff0000u)) | lo;
#endif
}
KV_HD uint32_t vmin_u16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __vminu2(a, b);
#else
  const uint32_t lo = (a & 0xffffu) < (b & 0xffffu) ? (a & 0xffffu) : (b & 0xffffu);
  return ((a >> 16) < (b >> 16) ? (a & 0xffff0000u) : (b & 0xffff0000u)) | lo;
#endif
}
KV_HD uint32_t vmax3_u16x2(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  return __vimax3_u16x2(a, b, c);
#else
  return vmax_u16x2(vmax_u16x2(a, b), c);
#endif
}

/// The pair (rn, rd) of the lean 16-bit relative-error flag |d| * rd > rn * |o| (step_chunks_lean16)
/// for the state in `r`, whose largest relative error is rel_num / rel_den (kept undivided), both
/// scaled by one power of two so that rd lies in [2^62, 2^63):
///  - rel_den = 0 (an infinite relative error, which nothing beats: step()'s test is then
///    0 > rel_num * |o|): rn = +Inf, which never flags (its products are +Inf or NaN);
///  - a ratio below 2^-32 (none yet, or nearly exact data): rn = 0, which flags every d != 0;
///  - rel_num and rel_den both floats after the scaling (the usual case: the lean step's own
///    errors and |o| are floats): that exact pair. The flag is then exactly step()'s test, ties
///    included (equal ratios are frequent in 16-bit data: equal mantissas at other exponents);
///  - otherwise (set by the fp64 fallback, or a ratio of 2^64 or more): rd = 2^62 and rn the
///    float rounded down from 2^62 * min(rel_num / rel_den * (1 - 2^-11), 2^64) (0 when that
///    factor is below 2^-32): never above the state, the margin covering the rounding of
///    step()'s fp64 products. So rn >= 2^30 whenever rn is neither 0 nor +Inf.
/// The bounds keep the flag's fp32 evaluation exact (see step_chunks_lean16).
template <DType TC, DType TO>
KV_HD void lean16_ratio(const Running& r, float& rn, float& rd) {
  constexpr double kMargin = 1.0 - 1.0 / 2048.0;
  rd = 0x1p62f;
  if (r.rel_den == 0.0) { rn = INFINITY; return; }
  const double ratio = r.rel_num / r.rel_den;
  if (!(ratio >= 0x1p-32)) { rn = 0.0f; return; }
  int e = 0;
  (void)frexp(r.rel_den, &e);  // rel_den = m 2^e, m in [0.5, 1)
  const double sn = ldexp(r.rel_num, 63 - e), sd = ldexp(r.rel_den, 63 - e);
  if (ratio < 0x1p64 && static_cast<double>(static_cast<float>(sn)) == sn && static_cast<double>(static_cast<float>(sd)) == sd) {
    rn = static_cast<float>(sn);
    rd = static_cast<float>(sd);
    return;
  }
  const double low = ratio * kMargin;
  if (!(low >= 0x1p-32)) { rn = 0.0f; return; }  // keeps rn >= 2^30, as the proof needs
  rn = float_down(0x1p62 * (low < 0x1p64 ? low : 0x1p64));
}

/// The relative part of the lean 16-bit flag: err * rd > rn * ao in exact arithmetic, for float
/// err = |d| and ao = |o| of 16-bit values (finite, below 2^64) and (rn, rd) from lean16_ratio.
/// Evaluated in fp32 as (err rd - pr) > (rn ao - pr), pr = fl(rn ao); the proof of exactness is
/// in step_chunks_lean16 (test Compare.LeanRelativeFlagIsExact).
KV_HD bool lean16_rel_flag(float err, float ao, float rn, float rd) {
  const float pr = rn * ao;
  return fmaf(err, rd, -pr) > fmaf(rn, ao, -pr);
}

/// Refresh the flag thresholds of the lean 16-bit step after the state changed.
template <DType TC, DType TO>
KV_HD void refresh_lean16(Running& r) {
  r.f_amax = float_down(r.s.max_abs_err);
  lean16_ratio<TC, TO>(r, r.f_rn, r.f_rd);
  const uint32_t u = r.s.max_ulp > 0xffffull ? 0xffffu : static_cast<uint32_t>(r.s.max_ulp);
  r.u2 = u | (u << 16);
  r.refreshed = true;
}

/// Rare part of step_chunks_lean16 (some chunk is a fallback or flagged): for each of
/// the kHalves chunks in index order, either the fp64 fallback (step() per element), or the sums,
/// the bound mask of the first pass and, when flagged, the re-walk with step()'s update rules.
template <DType TC, DType TO, int kHalves, class ColdSrc>
KV_HD void lean16_rare(Running& r, const ColdSrc& cold, int64_t base, const Bound& b, const float (&sse)[kHalves],
                       const float (&ssr)[kHalves], const bool (&fallback)[kHalves], const unsigned (&past)[kHalves],
                       const bool (&hit)[kHalves]) {
  Hot& s = r.s;
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {  // unrolled: the flag arrays stay in registers
    const int e0 = h * kChunk;
    const int64_t cbase = base + e0;
    if (fallback[h]) {
      for (int e = 0; e < kChunk; ++e) step<TC, TO>(r, cold.c(e0 + e), cold.o(e0 + e), cbase + e, b);
      refresh_lean16<TC, TO>(r);
      continue;
    }
    s.sum_sq_err += static_cast<double>(sse[h]);
    s.sum_sq_ref += static_cast<double>(ssr[h]);
    if (past[h]) {
      s.n_past_bound += popcount8(past[h]);
      if (s.first_past_bound == kNoIndex) s.first_past_bound = cbase + lowest_bit(past[h]);
    }
    if (!hit[h]) continue;
    for (int e = 0; e < kChunk; ++e) {  // some maximum may move: step()'s rules, in index order
      const uint64_t cb = cold.c(e0 + e), ob = cold.o(e0 + e);
      const float c = widen16<TC>(cb), o = widen16<TO>(ob);
      const double err = static_cast<double>(fabsf(c - o)), ao = static_cast<double>(fabsf(o));
      if (err > s.max_abs_err) { s.max_abs_err = err; s.max_abs_idx = cbase + e; }
      if (err * r.rel_den > r.rel_num * ao) { r.rel_num = err; r.rel_den = ao; s.max_rel_idx = cbase + e; }
      const uint32_t u = lean_ulp16<TC, TO>(cb, ob, o);
      if (u > s.max_ulp) { s.max_ulp = u; s.max_ulp_idx = cbase + e; }
    }
    refresh_lean16<TC, TO>(r);
  }
}

/// Lean step of 16-bit pairs over kHalves consecutive chunks of 8 elements (elements base ..
/// base + 8 * kHalves - 1; the CPU loop passes one chunk, the CUDA kernel two, read with two
/// 16-byte loads per tensor). Every decision is made per chunk of 8, exactly as for kHalves = 1,
/// so the two give identical results (sums included).
///
/// Semantics (fp32 arithmetic): c, o widened exactly to float; d = c - o in fp32, which is exact
/// for |c - o| whenever c and o are within a factor 2^13 of each other (both have at most 11
/// significant bits) and correctly rounded to fp32 otherwise; the bound is evaluated as
/// |d| > fmaf(float(rtol), |o|, float(atol)); each chunk's sums of squares are formed in fp32
/// (fmaf, in element order) and added to the fp64 running sums. A chunk is measured by step() in
/// fp64 instead (the fallback) when its fp32 squares could overflow or lose accuracy to underflow,
/// or it holds a NaN or Inf: a non-finite sse + ssr, or sse < 2^-100 with some d != 0, or
/// ssr < 2^-100 with some o != 0. So two equal (c, o) pairs can measure differently by their
/// 8-element chunk (fp32 vs fp64 error), which can move the reported index of a maximum between
/// them; CPU and CUDA cut the same chunks, so they agree. Relies on IEEE arithmetic: no fast-math,
/// no flush-to-zero.
///
/// First pass, per chunk: the two sums, the mask of elements past the bound, max |d| (emax), and
/// the flag "some element may beat a running maximum", which sends the chunk to the exact re-walk
/// (step()'s update rules, reading `cold`). Unless some chunk of the call is flagged or a
/// fallback, the call only adds the sums and counts the masks (no re-read, whatever the bound). The flag never misses an element that step()'s rules
/// would take as a new maximum, and on realistic data (most elements a few ULPs off) fires only
/// where an element beats or nearly beats a maximum, so the re-walk stays rare (test
/// Compare.LeanRewalkIsRareOnRealisticData). Its three parts:
///  - absolute: emax > Running::f_amax (max_abs_err rounded down): err > max_abs_err implies it.
///  - ULP, exact (no element at or below max_ulp sets it). Same dtypes: the 16-bit patterns are
///    read as words of two lanes (hot.cw, hot.ow); per lane max - min of the patterns is the ULP
///    distance when c and o have equal signs (sign-magnitude patterns of one sign are ordered
///    like their values, one step apart per ULP; NaN and Inf lanes do not matter: such chunks
///    are fallbacks); the chunk's per-lane maximum, started at
///    Running::u2 (max_ulp clamped to 0xffff, distances are below 0x8000), differs from u2
///    exactly when some distance exceeds max_ulp. In a chunk with a sign difference in some
///    element (the OR of c ^ o has a sign bit set; +0 vs -0 too) that lane means nothing: the
///    chunk's ULP part is then the exact distance of each element (lean_ulp16, from the
///    registers) against max_ulp instead. Mixed 16-bit pairs: lean_ulp16 > max_ulp per element.
///  - relative: err rd > rn ao in exact arithmetic, with (rn, rd) = (Running::f_rn, f_rd)
///    (lean16_ratio), err = |d| and ao = |o| floats; evaluated as q > pl with pr = fl(rn ao),
///    pl = fmaf(rn, ao, -pr) and q = fmaf(err, rd, -pr), i.e. (err rd - pr) > (rn ao - pr).
///    Exact: (1) pl = rn ao - pr exactly (the error of a float product is a float when the
///    exponents of its factors sum to -103 or more: rn >= 2^30, ao >= 2^-133, the smallest
///    nonzero 16-bit magnitude; ao = 0 gives pl = 0). (2) q > pl implies err rd - pr > pl by
///    monotone rounding. (3) Conversely let x = err rd - pr > pl and suppose fl(x) = pl: then
///    0 < x - pl = err rd - rn ao <= ulp(pl) / 2. x - pl is a multiple of the smaller of
///    ulp(err) ulp(rd) and ulp(rn) ulp(ao), each at least 2^(E - 47) (E the exponent of pr:
///    err rd and rn ao lie within one binade of pr) and at least 2^-149, while |pl| <= ulp(pr) / 2
///    gives ulp(pl) / 2 <= 2^(E - 48), or 2^-150 for subnormal pl (where pr was rounded up to a
///    power of two, |pl| <= 2^(E - 25) and both sides shrink by one binade): a contradiction.
///    (4) Overflow: err < 2^64 and ao < 2^64 outside fallbacks and rd < 2^63, so err rd is
///    finite; rn ao overflowing gives pr = +Inf, pl = q = -Inf: no flag, rightly. rn = +Inf
///    never flags (products +Inf or NaN). So with an exact pair the flag is step()'s test
///    itself, ties not flagged; with lean16_ratio's rounded pair it fires on a superset.
///    Elements with d = 0 never flag.
/// The thresholds are those at the start of the call; updates within it only raise them. A caller
/// may also raise them to the thresholds of other Runnings whose elements all precede this call's
/// (the CUDA kernel shares them across a warp): an element left unflagged is then at or below a
/// maximum at a smaller index (its exact ratio for the relative part, whose rounded quotient
/// keeps that order), so it is never the merged result's maximum (merge keeps the lower index on
/// ties), and the merged maxima and their indices do not change.
///
/// `hot` and `cold` give the raw bits of element e as c(e), o(e) (and hot.cw(j), hot.ow(j) the
/// words of elements 2j, 2j + 1, the lower index in the low half; hot.o_or(h), the OR of the
/// oracle patterns of chunk h): the first pass reads `hot`, the rare part `cold` (the CUDA kernel
/// passes its registers as `hot` and a re-load from memory as `cold`, so no register has to stay
/// live past the first pass).
template <DType TC, DType TO, int kHalves, class HotSrc, class ColdSrc>
KV_HD void step_chunks_lean16(Running& r, const HotSrc& hot, const ColdSrc& cold, int64_t base, const Bound& b) {
  static_assert(type_bytes<TC>() == 2 && type_bytes<TO>() == 2, "16-bit pairs only");
  constexpr float kTiny = 7.8886091e-31f;  // 2^-100
  constexpr uint32_t kMag = 0x7fff7fffu;   // magnitude bits of one or two packed 16-bit patterns
  constexpr uint32_t kSign = 0x80008000u;  // sign bits of two packed 16-bit patterns
  const float amax = r.f_amax, rn = r.f_rn, rd = r.f_rd;
  const float atol = static_cast<float>(b.atol), rtol = static_cast<float>(b.rtol);
  const uint32_t u2 = r.u2;
  const uint32_t umax = r.s.max_ulp > 0xffffffffull ? 0xffffffffu : static_cast<uint32_t>(r.s.max_ulp);
  float sse[kHalves], ssr[kHalves];
  bool fallback[kHalves], hit[kHalves];
  unsigned past[kHalves];
  bool any = false;
#pragma unroll
  for (int k = 0; k < kHalves; ++k) {
    float se = 0.0f, sr = 0.0f, emax = 0.0f;
    unsigned p = 0;
    bool f = false;
#pragma unroll
    for (int e = k * kChunk; e < (k + 1) * kChunk; ++e) {
      const uint64_t cb = hot.c(e), ob = hot.o(e);
      const float c = widen16<TC>(cb), o = widen16<TO>(ob);
      const float d = c - o;
      const float err = fabsf(d), ao = fabsf(o);
      se = fmaf(d, d, se);
      sr = fmaf(o, o, sr);
      emax = fmaxf(emax, err);
      f |= lean16_rel_flag(err, ao, rn, rd);
      if constexpr (TC != TO) f |= lean_ulp16<TC, TO>(cb, ob, o) > umax;
      p |= static_cast<unsigned>(err > fmaf(rtol, ao, atol)) << (e - k * kChunk);
    }
    if constexpr (TC == TO) {
      uint32_t signs = 0, um = u2;
#pragma unroll
      for (int j = k * kChunk / 2; j < (k + 1) * kChunk / 2; j += 2) {
        const uint32_t c0 = hot.cw(j), o0 = hot.ow(j), c1 = hot.cw(j + 1), o1 = hot.ow(j + 1);
        signs |= (c0 ^ o0) | (c1 ^ o1);
        um = vmax3_u16x2(um, vmax_u16x2(c0, o0) - vmin_u16x2(c0, o0), vmax_u16x2(c1, o1) - vmin_u16x2(c1, o1));
      }
      bool fu = um != u2;   // exact unless some element's signs differ (then its lane means nothing)
      if (signs & kSign) {  // rare: exact distances of the chunk's elements, from the registers
        fu = false;
#pragma unroll
        for (int e = k * kChunk; e < (k + 1) * kChunk; ++e) fu |= lean_ulp16<TC, TO>(hot.c(e), hot.o(e), 0.0f) > umax;
      }
      f |= fu;
    }
    sse[k] = se;
    ssr[k] = sr;
    fallback[k] = (!(se + sr < INFINITY)) | ((se < kTiny) & (emax > 0.0f)) | ((sr < kTiny) & ((hot.o_or(k) & kMag) != 0));
    past[k] = p;
    hit[k] = f | (emax > amax);
    any |= fallback[k] | hit[k];
  }
  if (!any) {  // common case: add the sums and count the elements past the bound, in chunk order
    unsigned mask = 0;  // bit 8k + e: element e of chunk k past the bound
#pragma unroll
    for (int k = 0; k < kHalves; ++k) {
      r.s.sum_sq_err += static_cast<double>(sse[k]);
      r.s.sum_sq_ref += static_cast<double>(ssr[k]);
      mask |= past[k] << (k * kChunk);
    }
    if (mask) {
      r.s.n_past_bound += popcount8(mask);
      if (r.s.first_past_bound == kNoIndex) r.s.first_past_bound = base + lowest_bit(mask);
    }
    return;
  }
  lean16_rare<TC, TO, kHalves>(r, cold, base, b, sse, ssr, fallback, past, hit);
}

/// Accumulate elements base..base+7 (all of one Running, after every smaller index). Same
/// results as eight step() calls except for the rounding of the two sums and, for finite 16-bit
/// pairs, fp32 arithmetic (step_chunks_lean16); fp64 candidates take the generic chunk below:
/// maxima tracked with chunk-local positions and folded once, bound hits as a bit mask,
/// non-finite chunks through step().
template <DType TC, DType TO>
KV_HD void step_chunk(Running& r, const uint64_t (&cb)[kChunk], const uint64_t (&ob)[kChunk], int64_t base,
                      const Bound& b) {
  if constexpr (type_bytes<TC>() == 2 && type_bytes<TO>() == 2) {
    const ArraySource<kChunk> src{cb, ob};
    step_chunks_lean16<TC, TO, 1>(r, src, src, base, b);
  } else if constexpr (type_bytes<TC>() <= 4) {
    const ArraySource<kChunk> src{cb, ob};
    step_chunk_lean<TC, TO>(r, src, src, base, b);
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
