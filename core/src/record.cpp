#include <cmath>

#include "kverify/record/report.hpp"
#include "kverify/record/stats_json.hpp"

namespace kverify::record {

json number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

double number_from(const json& j) {
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    KV_CHECK(s == "nan", "expected a number or inf/-inf/nan, got '%s'", s.c_str());
    return NAN;
  }
  return j.get<double>();
}

json to_json(const compare::CompareStats& s) {
  return json{{"n", s.n},
              {"nan_mismatch", s.nan_mismatch}, {"posinf_mismatch", s.posinf_mismatch},
              {"neginf_mismatch", s.neginf_mismatch}, {"first_nan", s.first_nan},
              {"first_posinf", s.first_posinf}, {"first_neginf", s.first_neginf},
              {"nan_as_inf", s.nan_as_inf}, {"first_nan_as_inf", s.first_nan_as_inf},
              {"oracle_nonfinite", s.oracle_nonfinite}, {"candidate_nonfinite", s.candidate_nonfinite},
              {"max_abs_err", number(s.max_abs_err)}, {"max_abs_idx", s.max_abs_idx},
              {"max_rel_err", number(s.max_rel_err)}, {"max_rel_idx", s.max_rel_idx},
              {"sum_sq_err", number(s.sum_sq_err)}, {"sum_sq_ref", number(s.sum_sq_ref)},
              {"normwise_rel", number(s.normwise_rel())},
              {"max_ulp", s.max_ulp}, {"max_ulp_idx", s.max_ulp_idx},
              {"n_past_bound", s.n_past_bound}, {"first_past_bound", s.first_past_bound}};
}

compare::CompareStats stats_from_json(const json& j) {
  compare::CompareStats s;
  s.n = j.at("n").get<int64_t>();
  s.nan_mismatch = j.at("nan_mismatch").get<int64_t>();
  s.posinf_mismatch = j.at("posinf_mismatch").get<int64_t>();
  s.neginf_mismatch = j.at("neginf_mismatch").get<int64_t>();
  s.first_nan = j.at("first_nan").get<int64_t>();
  s.first_posinf = j.at("first_posinf").get<int64_t>();
  s.first_neginf = j.at("first_neginf").get<int64_t>();
  s.nan_as_inf = j.value("nan_as_inf", int64_t{0});  // absent in journals written before it existed
  s.first_nan_as_inf = j.value("first_nan_as_inf", compare::kNoIndex);
  s.oracle_nonfinite = j.at("oracle_nonfinite").get<int64_t>();
  s.candidate_nonfinite = j.at("candidate_nonfinite").get<int64_t>();
  s.max_abs_err = number_from(j.at("max_abs_err"));
  s.max_abs_idx = j.at("max_abs_idx").get<int64_t>();
  s.max_rel_err = number_from(j.at("max_rel_err"));
  s.max_rel_idx = j.at("max_rel_idx").get<int64_t>();
  s.sum_sq_err = number_from(j.at("sum_sq_err"));
  s.sum_sq_ref = number_from(j.at("sum_sq_ref"));
  s.max_ulp = j.at("max_ulp").get<uint64_t>();
  s.max_ulp_idx = j.at("max_ulp_idx").get<int64_t>();
  s.n_past_bound = j.at("n_past_bound").get<int64_t>();
  s.first_past_bound = j.at("first_past_bound").get<int64_t>();
  return s;
}

json CheckReport::to_json() const {
  json g = json::array();
  for (const auto& r : gates) g.push_back(r.to_json());
  return json{{"reference", reference}, {"candidate", candidate}, {"device", device}, {"seed", seed},
              {"gates", g}, {"class", kernel_class()},
              {"standard", {{"verdict", standard.verdict}, {"summary", standard.summary},
                            {"tolerance", standard.tolerance}, {"trials", standard.trials}}},
              {"meta", meta}};
}

CheckReport CheckReport::from_json(const json& j) {
  CheckReport r;
  r.reference = j.at("reference").get<std::string>();
  r.candidate = j.at("candidate").get<std::string>();
  r.device = j.at("device").get<std::string>();
  r.seed = j.at("seed").get<uint64_t>();
  for (const auto& g : j.at("gates")) r.gates.push_back(gates::GateResult::from_json(g));
  const auto& st = j.at("standard");
  r.standard.verdict = st.at("verdict").get<std::string>();
  r.standard.summary = st.value("summary", "");
  r.standard.tolerance = st.value("tolerance", 0.0);
  r.standard.trials = st.value("trials", 0);
  r.meta = j.value("meta", json::object());
  return r;
}

}  // namespace kverify::record
