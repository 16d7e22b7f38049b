// G04 determinism: identical inputs at different addresses, several runs: outputs bitwise
// identical. N/A only when the reference itself is not deterministic. Tolerance-free.
#include "kverify/gates/rules.hpp"

namespace kverify::gates {

GateResult judge_g04(const json& m) {
  if (!m.value("reference_deterministic", true))
    return make_result("G04", "determinism", true, Verdict::NotApplicable,
                       "the reference itself gives different bits run to run");
  const json& runs = m.at("runs");
  if (runs.size() < 2)
    return make_result("G04", "determinism", true, Verdict::Error, format("need at least 2 runs, got %zu", runs.size()));
  for (size_t k = 1; k < runs.size(); ++k) {
    for (size_t i = 0; i < runs[0].size(); ++i) {
      if (runs[k].at(i) != runs[0].at(i)) {
        json ev{{"run", k}, {"output", i}, {"digest_first", runs[0].at(i)}, {"digest_this", runs[k].at(i)},
                {"runs", runs.size()}};
        if (m.contains("differing")) ev["differing"] = m.at("differing");
        return make_result("G04", "determinism", true, Verdict::Fail,
            format("output %zu differs between run 0 and run %zu (digest %s vs %s)", i, k,
                   runs[0].at(i).get<std::string>().c_str(), runs[k].at(i).get<std::string>().c_str()), ev);
      }
    }
  }
  return make_result("G04", "determinism", true, Verdict::Pass,
                     format("%zu runs at different addresses bitwise identical", runs.size()), {{"runs", runs.size()}});
}

}  // namespace kverify::gates
