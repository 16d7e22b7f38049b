// G09 sensitivity: each input, parameter and buffer perturbed alone changes the output wherever
// the reference's output changes; a long run of calls A, B, A, B, ... agrees with itself.
#include "kverify/gates/rules.hpp"

namespace kverify::gates {

GateResult judge_g09(const json& m) {
  for (const auto& p : m.value("perturbations", json::array())) {
    const int64_t ignored = p.at("ignored").get<int64_t>();
    if (ignored > 0)
      return make_result("G09", "sensitivity", true, Verdict::Fail,
          format("%s perturbed: %lld of %lld output elements that the reference changes did not change, first at %lld",
                 p.at("name").get<std::string>().c_str(), (long long)ignored,
                 (long long)p.at("reference_changed").get<int64_t>(), (long long)p.value("first", int64_t(-1))), p);
  }
  if (m.contains("sequence")) {
    const json& s = m.at("sequence");
    const int64_t bad = s.at("inconsistent_call").get<int64_t>();
    if (bad >= 0)
      return make_result("G09", "sensitivity", true, Verdict::Fail,
          format("call %lld of %lld (inputs %s) differs from the first call on the same inputs", (long long)bad,
                 (long long)s.at("calls").get<int64_t>(), s.value("label", "?").c_str()), s);
  }
  return make_result("G09", "sensitivity", true, Verdict::Pass,
                     format("%zu perturbation(s) followed; %lld alternating calls consistent",
                            m.value("perturbations", json::array()).size(),
                            (long long)m.value("sequence", json::object()).value("calls", int64_t(0))), m);
}

}  // namespace kverify::gates
