// Shared by the CPU and GPU comparator tests: two comparisons of the same values measured the same.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kverify/compare/stats.hpp"

/// Every measurement of `a` equals `b`'s (counts, first indices, maxima and their positions, the
/// bound), except the two sums of squares, which agree to relative `sum_tol` (their rounding
/// depends on how the work was split). `at` names the case in failure messages.
inline void expect_same_measurements(const kverify::compare::CompareStats& a, const kverify::compare::CompareStats& b,
                                     double sum_tol, const std::string& at) {
  EXPECT_EQ(a.nan_mismatch, b.nan_mismatch) << at;
  EXPECT_EQ(a.posinf_mismatch, b.posinf_mismatch) << at;
  EXPECT_EQ(a.neginf_mismatch, b.neginf_mismatch) << at;
  EXPECT_EQ(a.first_nan, b.first_nan) << at;
  EXPECT_EQ(a.oracle_nonfinite, b.oracle_nonfinite) << at;
  EXPECT_EQ(a.candidate_nonfinite, b.candidate_nonfinite) << at;
  EXPECT_EQ(a.max_abs_err, b.max_abs_err) << at;
  EXPECT_EQ(a.max_abs_idx, b.max_abs_idx) << at;
  EXPECT_EQ(a.max_rel_err, b.max_rel_err) << at;
  EXPECT_EQ(a.max_rel_idx, b.max_rel_idx) << at;
  EXPECT_EQ(a.max_ulp, b.max_ulp) << at;
  EXPECT_EQ(a.max_ulp_idx, b.max_ulp_idx) << at;
  EXPECT_EQ(a.n_past_bound, b.n_past_bound) << at;
  EXPECT_EQ(a.first_past_bound, b.first_past_bound) << at;
  EXPECT_NEAR(a.sum_sq_err, b.sum_sq_err, sum_tol * b.sum_sq_err) << at;
  EXPECT_NEAR(a.sum_sq_ref, b.sum_sq_ref, sum_tol * b.sum_sq_ref) << at;
}
