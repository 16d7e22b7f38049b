// G05 shapes: every free dimension at adversarial sizes; each variant passes the contract and the
// accuracy rule or is UNSUPPORTED (a clear error); silently wrong is FAIL, reported with the
// smallest failing shape found by shrinking.
#include "kverify/gates/rules.hpp"

namespace kverify::gates {

GateResult judge_g05(const json& m) {
  if (m.contains("not_applicable"))
    return make_result("G05", "shapes", false, Verdict::NotApplicable, m.at("not_applicable").get<std::string>());
  int pass = 0, fail = 0, unsupported = 0, skipped = 0, over_budget = 0;
  double worst = 0.0;
  const json* first_fail = nullptr;
  for (const auto& v : m.at("variants")) {
    const std::string verdict = v.at("verdict").get<std::string>();
    if (verdict == "PASS") ++pass;
    else if (verdict == "UNSUPPORTED") ++unsupported;
    else if (verdict == "SKIPPED") {
      ++skipped;
      if (v.value("reason", "") == "over the memory budget") ++over_budget;
    }
    else {
      ++fail;
      worst = std::max(worst, v.value("bound_ratio", 1e300));
      if (!first_fail || v.at("elements").get<int64_t>() < first_fail->at("elements").get<int64_t>()) first_fail = &v;
    }
  }
  if (pass + fail + unsupported == 0)
    return make_result("G05", "shapes", false, Verdict::NotApplicable,
                       format("no variant the reference can run (%d skipped)", skipped), m);
  if (fail) {
    const json& sh = m.contains("shrunk") ? m.at("shrunk") : *first_fail;
    GateResult g = make_result("G05", "shapes", false, Verdict::Fail,
        format("%d of %d shape variants silently wrong; minimal failing shape %s (%lld input elements): %s", fail,
               pass + fail + unsupported, sh.at("binding").dump().c_str(), (long long)sh.at("elements").get<int64_t>(),
               sh.value("reason", first_fail->value("reason", "")).c_str()),
        m);
    g.bound_ratio = std::max(worst, 1.0);
    return g;
  }
  return make_result("G05", "shapes", false, Verdict::Pass,
                     format("%d variant(s) pass, %d unsupported (clear error), %d skipped (%d the reference cannot run, "
                            "%d over the memory budget)",
                            pass, unsupported, skipped, skipped - over_budget, over_budget),
                     m);
}

}  // namespace kverify::gates
