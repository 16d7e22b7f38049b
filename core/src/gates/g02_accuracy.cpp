// G02 accuracy: at the problem's own shape, several seeds, normwise and elementwise error against
// the fp64 oracle within a bound calibrated on the reference's own error (floor per dtype).
#include <cmath>

#include "kverify/gates/rules.hpp"
#include "kverify/record/stats_json.hpp"

namespace kverify::gates {

double floor_norm(DType t) {
  switch (t) {
    case DType::F64: return 1e-13;
    case DType::F32: return 1e-6;
    case DType::F16: return 2e-3;
    default: return 1.6e-2;
  }
}

double floor_elem(DType t) {
  switch (t) {
    case DType::F64: return 1e-11;
    case DType::F32: return 1e-5;
    case DType::F16: return 1e-2;
    default: return 6e-2;
  }
}

json g02_bound(const compare::CompareStats& ref, DType dtype) {
  const double ref_norm = ref.normwise_rel();
  const double rms = ref.n > 0 ? std::sqrt(ref.sum_sq_ref / static_cast<double>(ref.n)) : 0.0;
  const double normwise = std::max(floor_norm(dtype), kRefFactor * (std::isfinite(ref_norm) ? ref_norm : 0.0));
  const double atol = std::max(kRefFactor * ref.max_abs_err, floor_elem(dtype) * rms);
  return json{{"normwise", normwise}, {"atol", atol}, {"rtol", floor_elem(dtype)}};
}

GateResult judge_accuracy(const json& m, const char* gate, const char* name) {
  GateResult early;
  if (incomparable(m, gate, name, false, early)) return early;
  double worst = 0.0;
  json worst_ev;
  int checked = 0;
  for (const auto& run : m.at("runs")) {
    for (const auto& out : run.at("outputs")) {
      const auto c = record::stats_from_json(out.at("candidate"));
      const auto r = record::stats_from_json(out.at("reference"));
      const double nb = out.at("bound").at("normwise").get<double>();
      ++checked;
      double ratio = c.normwise_rel() / nb;
      // class mismatches the reference itself does not make are failures beyond any bound
      if (c.nonfinite_mismatch() > r.nonfinite_mismatch()) ratio = INFINITY;
      const bool elem_fail = c.n_past_bound > 0;
      const bool fail = ratio > 1.0 || elem_fail;
      if (fail && (worst_ev.is_null() || ratio > worst)) {
        worst = std::max(worst, ratio);
        worst_ev = json{{"seed", run.at("seed")}, {"run", run.value("label", "")}, {"output", out.at("index")},
                        {"normwise", record::number(c.normwise_rel())}, {"bound", out.at("bound")},
                        {"reference_normwise", record::number(r.normwise_rel())},
                        {"past_bound", c.n_past_bound}, {"n", c.n}, {"first_index", c.first_past_bound},
                        {"max_abs_err", record::number(c.max_abs_err)}, {"max_abs_idx", c.max_abs_idx},
                        {"nonfinite_mismatch", c.nonfinite_mismatch()}};
        if (out.contains("values")) worst_ev["values"] = out.at("values");
      } else if (!fail) {
        worst = std::max(worst, ratio);
      }
    }
  }
  const json skipped = m.value("skipped", json::array());
  if (checked == 0)
    return make_result(gate, name, false, Verdict::NotApplicable,
                       skipped.empty() ? std::string("no float outputs to compare")
                                       : "every run skipped: " + skipped.at(0).get<std::string>(),
                       {{"skipped", skipped}});
  if (!worst_ev.is_null()) {
    const double nw = record::number_from(worst_ev.at("normwise"));
    const std::string label = worst_ev.at("run").get<std::string>();
    const int64_t nonfinite = worst_ev.at("nonfinite_mismatch").get<int64_t>();
    const std::string what =
        nonfinite > 0
            ? format("%lld element(s) differ from the oracle in class (NaN/Inf vs finite), first at %lld; "
                     "finite elements: normwise err %.3g vs bound %.3g",
                     (long long)nonfinite, (long long)worst_ev.at("first_index").get<int64_t>(), nw,
                     worst_ev.at("bound").at("normwise").get<double>())
            : format("normwise err %.3g vs bound %.3g; %lld/%lld elements past bound, first at %lld", nw,
                     worst_ev.at("bound").at("normwise").get<double>(),
                     (long long)worst_ev.at("past_bound").get<int64_t>(), (long long)worst_ev.at("n").get<int64_t>(),
                     (long long)worst_ev.at("first_index").get<int64_t>());
    GateResult g = make_result(gate, name, false, Verdict::Fail,
                               format("%s%s%s (seed %s)", label.c_str(), label.empty() ? "" : ": ", what.c_str(),
                                      worst_ev.at("seed").dump().c_str()),
                               worst_ev);
    g.bound_ratio = std::isfinite(worst) ? std::max(worst, 1.0) : 1e300;
    return g;
  }
  GateResult g = make_result(gate, name, false, Verdict::Pass,
                             format("%d output-run(s) within bound; worst normwise/bound %.3g%s", checked, worst,
                                    skipped.empty() ? "" : format("; %zu run(s) skipped", skipped.size()).c_str()),
                             {{"skipped", skipped}});
  g.bound_ratio = worst;
  return g;
}

GateResult judge_g02(const json& m) { return judge_accuracy(m, "G02", "accuracy"); }

}  // namespace kverify::gates
