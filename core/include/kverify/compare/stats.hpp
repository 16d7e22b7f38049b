/// @file stats.hpp
/// @brief The measurements of one candidate-vs-oracle comparison and their merge rule.
///
/// Indices are logical (row-major) element indices; -1 means "none". Error figures cover the
/// elements where both values are finite; elements whose class (finite, NaN, +Inf, -Inf)
/// differs are counted by the oracle's/candidate's non-finite kind instead.
#pragma once

#include <cstdint>

#include "kverify/common/check.hpp"

namespace kverify::compare {

constexpr int64_t kNoIndex = -1;

/// Result of a fused one-pass comparison. Counts, first indices and the positions of the maxima
/// do not depend on how the work is split; the two sums of squares depend on the order of the
/// additions (the CUDA reduction order is fixed, so GPU results repeat bitwise). Maxima are exact
/// values of fp64 differences, except for finite 16-bit pairs, measured in fp32 (element.hpp).
struct CompareStats {
  int64_t n = 0;  ///< elements compared
  // Non-finite class mismatches, by kind: positions where (oracle is K) != (candidate is K).
  int64_t nan_mismatch = 0;     ///< NaN in exactly one of oracle / candidate
  int64_t posinf_mismatch = 0;  ///< +Inf in exactly one
  int64_t neginf_mismatch = 0;  ///< -Inf in exactly one
  int64_t first_nan = kNoIndex, first_posinf = kNoIndex, first_neginf = kNoIndex;
  /// Positions where the oracle is NaN and the candidate ±Inf (each is also counted once in
  /// nan_mismatch and once in posinf_/neginf_mismatch). Evidence only: G03 decides such
  /// positions by probing the oracle's limit (python/kverify/gates/g03_nonfinite.py).
  int64_t nan_as_inf = 0;
  int64_t first_nan_as_inf = kNoIndex;
  int64_t oracle_nonfinite = 0;     ///< oracle elements that are NaN or ±Inf
  int64_t candidate_nonfinite = 0;  ///< candidate elements that are NaN or ±Inf
  // Errors over elements finite in both.
  double max_abs_err = 0.0;   ///< max |c - o|
  int64_t max_abs_idx = kNoIndex;
  double max_rel_err = 0.0;   ///< max |c - o| / |o| (Inf when o == 0 != c)
  int64_t max_rel_idx = kNoIndex;
  double sum_sq_err = 0.0;    ///< sum (c - o)^2
  double sum_sq_ref = 0.0;    ///< sum o^2
  uint64_t max_ulp = 0;       ///< max distance in ulps of the candidate dtype from round(o)
  int64_t max_ulp_idx = kNoIndex;
  // Elementwise bound |c - o| <= atol + rtol |o|; class mismatches count as past the bound.
  int64_t n_past_bound = 0;
  int64_t first_past_bound = kNoIndex;

  /// Normwise relative error ||c - o||_2 / ||o||_2 (Inf when ||o|| = 0 < ||c - o||, 0 when both 0).
  double normwise_rel() const;
  /// Total count of class mismatches.
  int64_t nonfinite_mismatch() const { return nan_mismatch + posinf_mismatch + neginf_mismatch; }
};

KV_HD int64_t min_index(int64_t a, int64_t b) {
  if (a == kNoIndex) return b;
  if (b == kNoIndex) return a;
  return a < b ? a : b;
}

/// Keep the larger value; on a tie, the smaller index (so any reduction order gives one answer).
KV_HD void merge_max(double& v, int64_t& i, double v2, int64_t i2) {
  if (i2 == kNoIndex) return;
  if (i == kNoIndex || v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}

KV_HD void merge_max_u(uint64_t& v, int64_t& i, uint64_t v2, int64_t i2) {
  if (i2 == kNoIndex) return;
  if (i == kNoIndex || v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}

/// Fold `b` into `a`. Sums of squares are added in the order given; the CUDA reduction uses a
/// fixed tree so its result is deterministic run to run (it may differ from the CPU's in the
/// last bits of the two sums only).
KV_HD void merge(CompareStats& a, const CompareStats& b) {
  a.n += b.n;
  a.nan_mismatch += b.nan_mismatch;
  a.posinf_mismatch += b.posinf_mismatch;
  a.neginf_mismatch += b.neginf_mismatch;
  a.first_nan = min_index(a.first_nan, b.first_nan);
  a.first_posinf = min_index(a.first_posinf, b.first_posinf);
  a.first_neginf = min_index(a.first_neginf, b.first_neginf);
  a.nan_as_inf += b.nan_as_inf;
  a.first_nan_as_inf = min_index(a.first_nan_as_inf, b.first_nan_as_inf);
  a.oracle_nonfinite += b.oracle_nonfinite;
  a.candidate_nonfinite += b.candidate_nonfinite;
  merge_max(a.max_abs_err, a.max_abs_idx, b.max_abs_err, b.max_abs_idx);
  merge_max(a.max_rel_err, a.max_rel_idx, b.max_rel_err, b.max_rel_idx);
  a.sum_sq_err += b.sum_sq_err;
  a.sum_sq_ref += b.sum_sq_ref;
  merge_max_u(a.max_ulp, a.max_ulp_idx, b.max_ulp, b.max_ulp_idx);
  a.n_past_bound += b.n_past_bound;
  a.first_past_bound = min_index(a.first_past_bound, b.first_past_bound);
}

}  // namespace kverify::compare
