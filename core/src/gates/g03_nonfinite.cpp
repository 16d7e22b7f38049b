// G03 nonfinite: with NaN/+Inf/-Inf injected into the inputs, the positions of NaN, +Inf and -Inf
// in the output equal the oracle's exactly. Tolerance-free.
//
// One refinement of DESIGN.md's contract, learnt from the chunked GDN, is made where the oracle is
// formed (python/kverify/gates/g03_nonfinite.py): in a run that injects ±Inf (alone or mixed), an
// oracle NaN whose extended-real limit is ±Inf (probed with finite stand-ins for the infinities)
// is replaced by that limit before the comparison; each output reports how many such positions the
// candidate matched ("indeterminate"). This rule stays strict on what it is given.
#include "kverify/gates/rules.hpp"
#include "kverify/record/stats_json.hpp"

namespace kverify::gates {

GateResult judge_g03(const json& m) {
  GateResult early;
  if (incomparable(m, "G03", "nonfinite", true, early)) return early;
  if (m.contains("not_applicable"))
    return make_result("G03", "nonfinite", true, Verdict::NotApplicable, m.at("not_applicable").get<std::string>());
  int judged = 0, skipped = 0;
  int64_t oracle_nonfinite = 0, indeterminate = 0;
  for (const auto& run : m.at("runs")) {
    for (const auto& out : run.at("outputs")) {
      const auto c = record::stats_from_json(out.at("candidate"));
      const auto r = record::stats_from_json(out.at("reference"));
      if (r.nonfinite_mismatch() > 0) { ++skipped; continue; }
      ++judged;
      oracle_nonfinite += c.oracle_nonfinite;
      indeterminate += out.value("indeterminate", int64_t{0});
      if (c.nonfinite_mismatch() == 0) continue;
      json ev{{"run", run.at("label")}, {"seed", run.at("seed")}, {"output", out.at("index")},
              {"nan_mismatch", c.nan_mismatch}, {"posinf_mismatch", c.posinf_mismatch},
              {"neginf_mismatch", c.neginf_mismatch}, {"first_nan", c.first_nan},
              {"first_posinf", c.first_posinf}, {"first_neginf", c.first_neginf},
              {"nan_as_inf", c.nan_as_inf}, {"first_nan_as_inf", c.first_nan_as_inf},
              {"oracle_nonfinite", c.oracle_nonfinite}, {"candidate_nonfinite", c.candidate_nonfinite}, {"n", c.n}};
      if (out.contains("values")) ev["values"] = out.at("values");
      const int64_t first = compare::min_index(c.first_nan, compare::min_index(c.first_posinf, c.first_neginf));
      return make_result("G03", "nonfinite", true, Verdict::Fail,
          format("%s injection: %lld NaN, %lld +Inf, %lld -Inf position mismatches among %lld elements, first at %lld",
                 run.at("label").get<std::string>().c_str(), (long long)c.nan_mismatch, (long long)c.posinf_mismatch,
                 (long long)c.neginf_mismatch, (long long)c.n, (long long)first), ev);
    }
  }
  if (judged == 0)
    return make_result("G03", "nonfinite", true, Verdict::NotApplicable,
                       format("the reference itself disagrees with the oracle's non-finite pattern in all %d runs", skipped));
  return make_result("G03", "nonfinite", true, Verdict::Pass,
      format("%d run(s): non-finite positions equal the oracle's (%lld non-finite expected)%s%s", judged,
             (long long)oracle_nonfinite,
             indeterminate ? format("; %lld oracle NaN(s) whose limit is ±Inf met as that limit", (long long)indeterminate).c_str() : "",
             skipped ? format(", %d ambiguous skipped", skipped).c_str() : ""),
      {{"judged", judged}, {"skipped", skipped}, {"oracle_nonfinite", oracle_nonfinite}, {"indeterminate", indeterminate}});
}

}  // namespace kverify::gates
