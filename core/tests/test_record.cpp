#include <gtest/gtest.h>

#include <cmath>

#include "kverify/record/report.hpp"
#include "kverify/record/stats_json.hpp"

using namespace kverify;
using record::json;

TEST(Record, StatsRoundTripWithInf) {
  compare::CompareStats s;
  s.n = 5;
  s.max_rel_err = INFINITY;
  s.max_rel_idx = 2;
  s.max_ulp = 1ull << 40;
  s.sum_sq_err = 0.125;
  auto j = record::to_json(s);
  EXPECT_EQ(j["max_rel_err"], "inf");
  auto back = record::stats_from_json(json::parse(j.dump()));
  EXPECT_TRUE(std::isinf(back.max_rel_err));
  EXPECT_EQ(back.max_ulp, s.max_ulp);
  EXPECT_EQ(back.sum_sq_err, 0.125);
  json missing = j;
  missing.erase("n");
  EXPECT_THROW(record::stats_from_json(missing), nlohmann::json::exception);
}

TEST(Record, ReportRoundTripAndClass) {
  record::CheckReport r;
  r.reference = "ref.py";
  r.candidate = "cand.py";
  r.device = "cpu";
  r.seed = 42;
  r.gates.push_back(gates::make_result("G03", "nonfinite", true, gates::Verdict::Fail, "NaN lost", {{"first_nan", 3}}));
  r.standard.verdict = "PASS";
  r.standard.tolerance = 1e-2;
  r.standard.trials = 5;
  auto j = r.to_json();
  EXPECT_EQ(j["class"], "BROKEN");
  auto back = record::CheckReport::from_json(json::parse(j.dump()));
  EXPECT_EQ(back.gates.at(0).evidence["first_nan"], 3);
  EXPECT_EQ(back.standard.verdict, "PASS");
  EXPECT_EQ(back.to_json(), j);
}
