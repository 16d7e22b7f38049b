/// @file element.hpp
/// @brief The per-element step of the comparator, shared verbatim by the CPU loop and the CUDA
/// kernel so both measure exactly the same thing.
#pragma once

#include <cmath>

#include "kverify/compare/stats.hpp"
#include "kverify/tensor/bits.hpp"

namespace kverify::compare {

/// Elementwise bound |c - o| <= atol + rtol * |o|.
struct Bound {
  double atol = 0.0;
  double rtol = 0.0;
};

KV_HD bool is_nan(double x) { return x != x; }

/// Accumulate one element: candidate value c (already widened to double from dtype TC) against
/// oracle value o, at logical index i. The relative-error maximum is tracked without division:
/// rel(i) > rel(best) <=> err_i * |o_best| > err_best * |o_i| (both non-negative).
template <DType TC>
KV_HD void step(CompareStats& s, double& rel_num, double& rel_den, double c, double o, int64_t i,
                const Bound& b) {
  s.n += 1;
  const bool cn = is_nan(c), on = is_nan(o);
  const bool cf = !cn && c - c == 0.0, of = !on && o - o == 0.0;  // finite tests
  if (!of) s.oracle_nonfinite += 1;
  if (!cf) s.candidate_nonfinite += 1;
  if (cf && of) {
    const double err = fabs(c - o);
    const double ao = fabs(o);
    s.sum_sq_err += err * err;
    s.sum_sq_ref += o * o;
    merge_max(s.max_abs_err, s.max_abs_idx, err, i);
    // relative error: compare err/ao against rel_num/rel_den by cross-multiplication
    if (err > 0.0) {
      const bool better = s.max_rel_idx == kNoIndex || err * rel_den > rel_num * ao ||
                          (err * rel_den == rel_num * ao && i < s.max_rel_idx);
      if (better) { rel_num = err; rel_den = ao; s.max_rel_idx = i; }
    } else if (s.max_rel_idx == kNoIndex) {
      rel_num = 0.0; rel_den = 1.0; s.max_rel_idx = i;
    }
    const uint64_t ob = bits::round_bits<TC>(o);
    const uint64_t cb = bits::round_bits<TC>(c);
    const int sz = dtype_size(TC);
    const int64_t d = bits::ordered(cb, sz) - bits::ordered(ob, sz);
    merge_max_u(s.max_ulp, s.max_ulp_idx, static_cast<uint64_t>(d < 0 ? -d : d), i);
    if (err > b.atol + b.rtol * ao) {
      s.n_past_bound += 1;
      s.first_past_bound = min_index(s.first_past_bound, i);
    }
    return;
  }
  if (cf && of) return;
  // at least one non-finite: compare classes
  const bool cpi = !cn && !cf && c > 0, opi = !on && !of && o > 0;
  const bool cni = !cn && !cf && c < 0, oni = !on && !of && o < 0;
  bool mismatch = false;
  if (cn != on) { s.nan_mismatch += 1; s.first_nan = min_index(s.first_nan, i); mismatch = true; }
  if (cpi != opi) { s.posinf_mismatch += 1; s.first_posinf = min_index(s.first_posinf, i); mismatch = true; }
  if (cni != oni) { s.neginf_mismatch += 1; s.first_neginf = min_index(s.first_neginf, i); mismatch = true; }
  if (mismatch) {
    s.n_past_bound += 1;
    s.first_past_bound = min_index(s.first_past_bound, i);
  }
}

/// Turn the tracked (rel_num, rel_den) into max_rel_err after a partial reduction.
KV_HD void finish_rel(CompareStats& s, double rel_num, double rel_den) {
  if (s.max_rel_idx == kNoIndex) return;
  s.max_rel_err = rel_den > 0.0 ? rel_num / rel_den : (rel_num > 0.0 ? INFINITY : 0.0);
}

}  // namespace kverify::compare
