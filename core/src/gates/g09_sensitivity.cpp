// G09 sensitivity: each input, parameter and buffer perturbed alone (and the models' mode) changes
// the output wherever it moves the fp64 oracle's output (kverify.gates.g09_sensitivity._moved),
// and a candidate that raises, or gives an output of another shape or dtype, under a perturbation
// the reference ran fails it; a long run of calls A, B, A, B, ... agrees with itself.
#include "kverify/gates/rules.hpp"

namespace kverify::gates {

GateResult judge_g09(const json& m) {
  for (const auto& p : m.value("perturbations", json::array())) {
    if (p.contains("failed"))  // the candidate raised, or gave another output, where the reference ran
      return make_result("G09", "sensitivity", true, Verdict::Fail,
          format("%s perturbed: %s", p.at("name").get<std::string>().c_str(),
                 p.at("failed").get<std::string>().c_str()), p);
    const int64_t ignored = p.at("ignored").get<int64_t>();
    if (ignored > 0)
      return make_result("G09", "sensitivity", true, Verdict::Fail,
          format("%s perturbed: %lld of %lld output elements that the fp64 oracle moves did not change, first at %lld",
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
  const std::string left_out = m.value("left_out", std::string());  // a perturbation not made, and why
  return make_result("G09", "sensitivity", true, Verdict::Pass,
                     format("%zu perturbation(s) followed; %lld alternating calls consistent%s%s",
                            m.value("perturbations", json::array()).size(),
                            (long long)m.value("sequence", json::object()).value("calls", int64_t(0)),
                            left_out.empty() ? "" : "; left out: ", left_out.c_str()), m);
}

}  // namespace kverify::gates
