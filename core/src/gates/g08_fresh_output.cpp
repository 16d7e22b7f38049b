// G08 fresh-output: with free memory poisoned by a sentinel NaN payload, no sentinel in any output;
// inputs rewritten in place (same address, same version counter) change the output as the oracle
// says (no pointer-keyed cache, no graph replay). Tolerance-free.
#include "kverify/gates/rules.hpp"
#include "kverify/record/stats_json.hpp"

namespace kverify::gates {

GateResult judge_g08(const json& m) {
  GateResult early;
  if (incomparable(m, "G08", "fresh-output", true, early)) return early;
  for (const auto& o : m.at("outputs")) {
    const int64_t n = o.at("sentinels").get<int64_t>();
    if (n > 0)
      return make_result("G08", "fresh-output", true, Verdict::Fail,
          format("output %d: %lld of %lld elements never written (sentinel found), first at %lld",
                 o.at("index").get<int>(), (long long)n, (long long)o.at("numel").get<int64_t>(),
                 (long long)o.at("first").get<int64_t>()), o);
  }
  if (m.contains("rewrite")) {
    const json& r = m.at("rewrite");
    if (r.at("oracle_changed").get<bool>()) {
      const double dn = record::number_from(r.at("dist_to_new"));
      const double dold = record::number_from(r.at("dist_to_old"));
      if (r.at("output_unchanged").get<bool>() || !(dn < dold))
        return make_result("G08", "fresh-output", true, Verdict::Fail,
            format("inputs rewritten in place: output %s (distance to new oracle %.3g, to old %.3g) — stale result",
                   r.at("output_unchanged").get<bool>() ? "bitwise unchanged" : "closer to the old inputs' oracle", dn, dold),
            r);
    }
  }
  return make_result("G08", "fresh-output", true, Verdict::Pass,
                     "no sentinel in outputs; in-place rewrite of inputs followed", m.value("rewrite", json::object()));
}

}  // namespace kverify::gates
