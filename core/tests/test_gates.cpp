#include <gtest/gtest.h>

#include <cmath>

#include "kverify/gates/rules.hpp"
#include "kverify/record/stats_json.hpp"

using namespace kverify;
using gates::json;
using gates::Verdict;

namespace {
json stats(double sum_sq_err, double sum_sq_ref, int64_t past = 0, int64_t nan_mm = 0, int64_t n = 100) {
  compare::CompareStats s;
  s.n = n;
  s.sum_sq_err = sum_sq_err;
  s.sum_sq_ref = sum_sq_ref;
  s.n_past_bound = past;
  s.first_past_bound = past ? 7 : -1;
  s.nan_mismatch = nan_mm;
  s.first_nan = nan_mm ? 3 : -1;
  return record::to_json(s);
}
json tensor(std::vector<int> shape, std::string dtype = "float32") {
  return json{{"kind", "tensor"}, {"shape", shape}, {"dtype", dtype}, {"device", "cpu"},
              {"plain", true}, {"dense", true}, {"has_storage", true}};
}
}  // namespace

TEST(G01, PassAndEachFailure) {
  json m{{"exception", nullptr}, {"reference", {tensor({2, 3})}}, {"candidate", {tensor({2, 3})}}};
  EXPECT_EQ(gates::judge_g01(m).verdict, Verdict::Pass);
  auto bad = m;
  bad["candidate"][0]["shape"] = {3, 2};
  auto r = gates::judge_g01(bad);
  EXPECT_EQ(r.verdict, Verdict::Fail);
  EXPECT_NE(r.summary.find("shape"), std::string::npos);
  bad = m;
  bad["candidate"][0]["dtype"] = "float64";
  EXPECT_EQ(gates::judge_g01(bad).verdict, Verdict::Fail);
  bad = m;
  bad["candidate"].push_back(tensor({1}));
  EXPECT_EQ(gates::judge_g01(bad).verdict, Verdict::Fail);
  bad = m;
  bad["candidate"][0]["dense"] = false;
  EXPECT_EQ(gates::judge_g01(bad).verdict, Verdict::Fail);
  bad = m;
  bad["reference_container"] = "tensor";
  bad["candidate_container"] = "tuple";
  EXPECT_NE(gates::judge_g01(bad).summary.find("tuple"), std::string::npos);
  EXPECT_EQ(gates::judge_g01(bad).verdict, Verdict::Fail);
  bad = m;
  bad["exception"] = "RuntimeError: boom";
  EXPECT_EQ(gates::judge_g01(bad).verdict, Verdict::Fail);
  EXPECT_TRUE(gates::judge_g01(m).tolerance_free);
}

TEST(G02, BoundCalibratedOnReference) {
  compare::CompareStats ref;
  ref.n = 4;
  ref.sum_sq_ref = 4.0;        // rms 1
  ref.sum_sq_err = 4.0e-10;    // normwise 1e-5
  ref.max_abs_err = 1e-5;
  auto b = gates::g02_bound(ref, DType::F32);
  EXPECT_NEAR(b["normwise"].get<double>(), 16e-5, 1e-12);
  EXPECT_NEAR(b["atol"].get<double>(), 16e-5, 1e-12);
  EXPECT_DOUBLE_EQ(b["rtol"].get<double>(), 1e-5);
  compare::CompareStats exact;  // exact reference: the dtype floor applies
  exact.n = 4;
  exact.sum_sq_ref = 4.0;
  EXPECT_DOUBLE_EQ(gates::g02_bound(exact, DType::BF16)["normwise"].get<double>(), 1.6e-2);
}

TEST(G02, VerdictAndRatio) {
  json bound{{"normwise", 1e-5}, {"atol", 1e-5}, {"rtol", 1e-5}};
  auto run = [&](json cand) {
    return json{{"runs", {{{"seed", 1}, {"outputs", {{{"index", 0}, {"candidate", cand}, {"reference", stats(0, 1)}, {"bound", bound}}}}}}}};
  };
  auto ok = gates::judge_g02(run(stats(1e-12, 1.0)));
  EXPECT_EQ(ok.verdict, Verdict::Pass);
  EXPECT_NEAR(ok.bound_ratio, 0.1, 1e-9);
  auto zeros = gates::judge_g02(run(stats(1.0, 1.0, 100)));  // returning zeros: normwise 1
  EXPECT_EQ(zeros.verdict, Verdict::Fail);
  EXPECT_GT(zeros.bound_ratio, 100.0);
  auto elem = gates::judge_g02(run(stats(1e-12, 1.0, 1)));  // one element past its bound
  EXPECT_EQ(elem.verdict, Verdict::Fail);
  auto nan = gates::judge_g02(run(stats(0, 1.0, 1, 1)));
  EXPECT_EQ(nan.verdict, Verdict::Fail);
  EXPECT_GT(nan.bound_ratio, 1e100);
}

TEST(G03, MismatchFailsAmbiguousSkipped) {
  auto m = [](json cand, json ref) {
    return json{{"runs", {{{"label", "NaN"}, {"seed", 2}, {"outputs", {{{"index", 0}, {"candidate", cand}, {"reference", ref}}}}}}}};
  };
  EXPECT_EQ(gates::judge_g03(m(stats(0, 1), stats(0, 1))).verdict, Verdict::Pass);
  auto f = gates::judge_g03(m(stats(0, 1, 1, 5), stats(0, 1)));
  EXPECT_EQ(f.verdict, Verdict::Fail);
  EXPECT_EQ(f.evidence["nan_mismatch"], 5);
  EXPECT_EQ(f.evidence["first_nan"], 3);
  EXPECT_EQ(gates::judge_g03(m(stats(0, 1, 1, 5), stats(0, 1, 1, 5))).verdict, Verdict::NotApplicable);
  EXPECT_EQ(gates::judge_g03(json{{"not_applicable", "no float inputs"}}).verdict, Verdict::NotApplicable);
}

// The judge is strict on the stats it gets: an oracle NaN met as ±Inf fails in every run; the
// measuring side (g03_nonfinite.py) replaces a NaN by its ±Inf limit before comparing and reports
// the count as "indeterminate", which the evidence sums.
TEST(G03, StrictOnStatsAndCountsIndeterminate) {
  compare::CompareStats nan_as_inf;
  nan_as_inf.n = 100;
  nan_as_inf.nan_mismatch = nan_as_inf.posinf_mismatch = nan_as_inf.nan_as_inf = 3;
  nan_as_inf.first_nan = nan_as_inf.first_posinf = nan_as_inf.first_nan_as_inf = 4;
  auto m = [](json c, int64_t indeterminate) {
    return json{{"runs", {{{"label", "+Inf"}, {"seed", 2},
                           {"outputs", {{{"index", 0}, {"candidate", c}, {"reference", stats(0, 1)},
                                         {"indeterminate", indeterminate}}}}}}}};
  };
  EXPECT_EQ(gates::judge_g03(m(record::to_json(nan_as_inf), 0)).verdict, Verdict::Fail);
  auto ok = gates::judge_g03(m(stats(0, 1), 7));
  EXPECT_EQ(ok.verdict, Verdict::Pass);
  EXPECT_EQ(ok.evidence["indeterminate"], 7);
}

TEST(G04, Determinism) {
  json row = json::array({"aa", "bb"});
  json same{{"runs", json::array({row, row, row})}, {"reference_deterministic", true}};
  EXPECT_EQ(gates::judge_g04(same).verdict, Verdict::Pass);
  json diff = same;
  diff["runs"][2][1] = "cc";
  auto r = gates::judge_g04(diff);
  EXPECT_EQ(r.verdict, Verdict::Fail);
  EXPECT_EQ(r.evidence["run"], 2);
  EXPECT_EQ(r.evidence["output"], 1);
  diff["reference_deterministic"] = false;
  EXPECT_EQ(gates::judge_g04(diff).verdict, Verdict::NotApplicable);
}

TEST(G07, Immutability) {
  json m{{"tensors", {{{"name", "input 0"}, {"before", "a"}, {"after", "a"}}}}};
  EXPECT_EQ(gates::judge_g07(m).verdict, Verdict::Pass);
  m["tensors"][0]["after"] = "b";
  m["tensors"][0]["changed"] = 3;
  auto r = gates::judge_g07(m);
  EXPECT_EQ(r.verdict, Verdict::Fail);
  EXPECT_NE(r.summary.find("input 0"), std::string::npos);
}

TEST(G08, FreshOutput) {
  json m{{"outputs", {{{"index", 0}, {"sentinels", 0}, {"first", -1}, {"numel", 10}}}},
         {"rewrite", {{"oracle_changed", true}, {"output_unchanged", false}, {"dist_to_new", 1e-7}, {"dist_to_old", 1.0}}}};
  EXPECT_EQ(gates::judge_g08(m).verdict, Verdict::Pass);
  auto s = m;
  s["outputs"][0]["sentinels"] = 4;
  EXPECT_EQ(gates::judge_g08(s).verdict, Verdict::Fail);
  auto c = m;
  c["rewrite"]["output_unchanged"] = true;
  EXPECT_EQ(gates::judge_g08(c).verdict, Verdict::Fail);
  c = m;
  c["rewrite"]["dist_to_new"] = 2.0;
  EXPECT_EQ(gates::judge_g08(c).verdict, Verdict::Fail);
  c["rewrite"]["oracle_changed"] = false;  // nothing to detect when the oracle does not move
  EXPECT_EQ(gates::judge_g08(c).verdict, Verdict::Pass);
}

TEST(Classify, Classes) {
  using gates::make_result;
  std::vector<gates::GateResult> rs{make_result("G01", "contract", true, Verdict::Pass, ""),
                                    make_result("G02", "accuracy", false, Verdict::Pass, "")};
  EXPECT_EQ(gates::classify(rs), "CLEAN");
  rs[1].verdict = Verdict::Fail;
  rs[1].bound_ratio = 3.0;
  EXPECT_EQ(gates::classify(rs), "VIOLATION");
  rs[1].bound_ratio = 300.0;
  EXPECT_EQ(gates::classify(rs), "BROKEN");
  rs[1].bound_ratio = 3.0;
  rs[0].verdict = Verdict::Fail;
  EXPECT_EQ(gates::classify(rs), "BROKEN");
  rs[0].verdict = Verdict::NotApplicable;
  rs[1].verdict = Verdict::Crash;
  EXPECT_EQ(gates::classify(rs), "BROKEN");
}

TEST(Incomparable, FailsWithReason) {
  json m{{"incomparable", "output 0 shape [3] differs from the reference's [4]"}, {"evidence", {{"output", 0}}}};
  for (auto f : {gates::judge_g02, gates::judge_g03, gates::judge_g08}) {
    auto r = f(m);
    EXPECT_EQ(r.verdict, Verdict::Fail);
    EXPECT_NE(r.summary.find("shape [3]"), std::string::npos);
  }
  EXPECT_GT(gates::judge_g02(m).bound_ratio, 100.0);
}

TEST(G05, ShrunkShapeInEvidence) {
  json m{{"variants", json::array({json{{"binding", {{"n", 7}}}, {"elements", 7}, {"verdict", "PASS"}},
                                   json{{"binding", {{"n", 129}}}, {"elements", 129}, {"verdict", "FAIL"}, {"reason", "normwise 1"}, {"bound_ratio", 1e6}},
                                   json{{"binding", {{"n", 1}}}, {"elements", 1}, {"verdict", "UNSUPPORTED"}}})},
         {"shrunk", {{"binding", {{"n", 9}}}, {"elements", 9}, {"from", {{"n", 129}}}, {"steps", 3}, {"reason", "normwise 1"}}}};
  auto r = gates::judge_g05(m);
  EXPECT_EQ(r.verdict, Verdict::Fail);
  EXPECT_NE(r.summary.find("{\"n\":9}"), std::string::npos) << r.summary;
  EXPECT_GT(r.bound_ratio, 100.0);
  m["variants"][1]["verdict"] = "PASS";
  EXPECT_EQ(gates::judge_g05(m).verdict, Verdict::Pass);
  json none{{"variants", json::array({json{{"binding", {{"n", 1}}}, {"elements", 1}, {"verdict", "SKIPPED"}}})}};
  EXPECT_EQ(gates::judge_g05(none).verdict, Verdict::NotApplicable);
}

TEST(G06G10, AccuracyRuleWithLabels) {
  json bound{{"normwise", 1e-5}, {"atol", 1e-5}, {"rtol", 1e-5}};
  json m{{"runs", {{{"seed", 1}, {"label", "offset 1000"}, {"outputs", {{{"index", 0}, {"candidate", stats(1e-4, 1.0)}, {"reference", stats(0, 1)}, {"bound", bound}}}}}}}};
  auto r = gates::judge_g06(m);
  EXPECT_EQ(r.verdict, Verdict::Fail);
  EXPECT_EQ(r.gate, "G06");
  EXPECT_NE(r.summary.find("offset 1000"), std::string::npos);
  EXPECT_EQ(gates::judge_g10(json{{"runs", json::array()}, {"skipped", {"x1e30: oracle not finite"}}}).verdict,
            Verdict::NotApplicable);
}

TEST(G09, Sensitivity) {
  json ok{{"perturbations", {{{"name", "input 0"}, {"reference_changed", 10}, {"ignored", 0}}}},
          {"sequence", {{"calls", 12}, {"inconsistent_call", -1}}}};
  EXPECT_EQ(gates::judge_g09(ok).verdict, Verdict::Pass);
  auto bad = ok;
  bad["perturbations"][0]["ignored"] = 4;
  EXPECT_EQ(gates::judge_g09(bad).verdict, Verdict::Fail);
  bad = ok;
  bad["sequence"]["inconsistent_call"] = 3;
  EXPECT_EQ(gates::judge_g09(bad).verdict, Verdict::Fail);
  bad = ok;
  bad["perturbations"].push_back(
      {{"name", "training mode"}, {"failed", "the candidate raised where the reference ran: RuntimeError"}});
  auto r = gates::judge_g09(bad);
  EXPECT_EQ(r.verdict, Verdict::Fail);
  EXPECT_NE(r.summary.find("training mode perturbed: the candidate raised"), std::string::npos) << r.summary;
  auto noted = ok;
  noted["left_out"] = "training mode (the reference's output there differs between two calls)";
  r = gates::judge_g09(noted);
  EXPECT_EQ(r.verdict, Verdict::Pass);
  EXPECT_NE(r.summary.find("left out: training mode"), std::string::npos) << r.summary;
}

TEST(G11, GuardAndSanitizer) {
  json ok{{"guard", {{"band_writes", 0}, {"output_depends_on_bands", false}}}, {"sanitizer", {{"not_applicable", "cpu"}}}};
  EXPECT_EQ(gates::judge_g11(ok).verdict, Verdict::Pass);
  auto bad = ok;
  bad["guard"]["band_writes"] = 2;
  EXPECT_EQ(gates::judge_g11(bad).verdict, Verdict::Fail);
  bad = ok;
  bad["guard"]["output_depends_on_bands"] = true;
  EXPECT_EQ(gates::judge_g11(bad).verdict, Verdict::Fail);
  bad = ok;
  bad["sanitizer"] = {{"tools", {{{"tool", "racecheck"}, {"errors", 3}, {"first", "hazard"}}}}};
  EXPECT_EQ(gates::judge_g11(bad).verdict, Verdict::Fail);
}

TEST(G11, UnfinishedToolIsNotAFindingAndNotAPass) {
  json clean{{"tool", "memcheck"}, {"errors", 0}, {"first", ""}};
  json slow{{"tool", "racecheck"}, {"errors", 0}, {"first", ""}, {"unfinished", "did not finish in 300 s"}};
  json none{{"tool", "synccheck"}, {"not_applicable", "no GPU kernel of the candidate's own"}};
  json m{{"guard", {{"band_writes", 0}, {"output_depends_on_bands", false}}},
         {"sanitizer", {{"tools", {clean, slow, none}}}}};
  auto r = gates::judge_g11(m);
  EXPECT_EQ(r.verdict, Verdict::Error);  // neither FAIL (no finding) nor PASS (not established)
  EXPECT_NE(r.summary.find("racecheck did not finish"), std::string::npos) << r.summary;
  EXPECT_NE(r.summary.find("1 sanitizer tool(s) clean"), std::string::npos) << r.summary;
  // a finding of another tool still fails, whatever is unfinished
  auto bad = m;
  bad["sanitizer"]["tools"][0]["errors"] = 1;
  EXPECT_EQ(gates::judge_g11(bad).verdict, Verdict::Fail);
  // a guard-band write fails before anything else
  bad = m;
  bad["guard"]["band_writes"] = 1;
  EXPECT_EQ(gates::judge_g11(bad).verdict, Verdict::Fail);
  // skipped tools (no own kernel) are neither clean nor missing: PASS with the others clean
  auto ok = m;
  ok["sanitizer"]["tools"] = {clean, none};
  r = gates::judge_g11(ok);
  EXPECT_EQ(r.verdict, Verdict::Pass);
  EXPECT_NE(r.summary.find("N/A (no kernel of its own): synccheck"), std::string::npos) << r.summary;
}

TEST(G12, Stream) {
  json ok{{"stream", {{"pending_writes_seen", true}, {"complete_after_stream_sync", true}}}, {"threads_added", 0}, {"patched", json::array()}};
  EXPECT_EQ(gates::judge_g12(ok).verdict, Verdict::Pass);
  for (auto key : {"pending_writes_seen", "complete_after_stream_sync"}) {
    auto bad = ok;
    bad["stream"][key] = false;
    EXPECT_EQ(gates::judge_g12(bad).verdict, Verdict::Fail) << key;
  }
  // a right output after the windows never held: passes, and says the order was not observable
  auto late = ok;
  late["stream"]["window_held"] = false;
  late["stream"]["attempts"] = 3;
  late["stream"]["sleep_cycles"] = 6e9;
  auto r = gates::judge_g12(late);
  EXPECT_EQ(r.verdict, Verdict::Pass);
  EXPECT_NE(r.summary.find("in each of 3 window(s) up to 6000000000 GPU cycles"), std::string::npos) << r.summary;
  EXPECT_NE(r.summary.find("not observable"), std::string::npos) << r.summary;
  // a wrong output fails whether or not the window held
  late["stream"]["pending_writes_seen"] = false;
  EXPECT_EQ(gates::judge_g12(late).verdict, Verdict::Fail);
  // an output two plain calls disagree on, or windows the harness missed: the stream part is
  // not established (ERROR), the rest still judged (a patch or a thread fails)
  json unsure{{"stream", {{"not_established", "two calls differ"}}}, {"threads_added", 0}, {"patched", json::array()}};
  r = gates::judge_g12(unsure);
  EXPECT_EQ(r.verdict, Verdict::Error);
  EXPECT_NE(r.summary.find("not established: two calls differ"), std::string::npos) << r.summary;
  unsure["threads_added"] = 2;
  EXPECT_EQ(gates::judge_g12(unsure).verdict, Verdict::Fail);
  auto bad = ok;
  bad["patched"] = {"torch.cuda.synchronize"};
  EXPECT_EQ(gates::judge_g12(bad).verdict, Verdict::Fail);
  bad = ok;
  bad["threads_added"] = 1;
  EXPECT_EQ(gates::judge_g12(bad).verdict, Verdict::Fail);
}
