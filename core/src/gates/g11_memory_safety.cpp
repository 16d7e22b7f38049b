// G11 memory-safety: compute-sanitizer (memcheck, racecheck, synccheck; initcheck only when asked) clean at small
// shapes; inputs inside guard bands of sentinels: bands unchanged, output independent of them.
#include "kverify/gates/rules.hpp"

namespace kverify::gates {

GateResult judge_g11(const json& m) {
  const json& g = m.at("guard");
  if (g.at("band_writes").get<int64_t>() > 0)
    return make_result("G11", "memory-safety", true, Verdict::Fail,
        format("wrote %lld element(s) outside %s (guard band changed)", (long long)g.at("band_writes").get<int64_t>(),
               g.value("tensor", "an input").c_str()), m);
  if (g.at("output_depends_on_bands").get<bool>())
    return make_result("G11", "memory-safety", true, Verdict::Fail,
        "output changes with the contents of the guard bands around the inputs (out-of-bounds read)", m);
  const json& s = m.at("sanitizer");
  int clean = 0;
  std::string unfinished, skipped;
  if (!s.contains("not_applicable")) {
    for (const auto& t : s.at("tools")) {
      const std::string tool = t.at("tool").get<std::string>();
      if (t.contains("not_applicable")) {  // a tool that checks only the candidate's own kernels, and it has none
        skipped += (skipped.empty() ? "" : ", ") + tool;
        continue;
      }
      if (t.at("errors").get<int64_t>() > 0)
        return make_result("G11", "memory-safety", true, Verdict::Fail,
            format("compute-sanitizer %s: %lld error(s): %s", tool.c_str(),
                   (long long)t.at("errors").get<int64_t>(), t.value("first", "").c_str()), m);
      if (t.contains("unfinished")) {  // slow under the tool: no finding, and nothing established
        unfinished += (unfinished.empty() ? "" : ", ") + tool + " " + t.at("unfinished").get<std::string>();
        continue;
      }
      ++clean;
    }
  }
  std::string tail = skipped.empty() ? "" : "; N/A (no kernel of its own): " + skipped;
  if (!unfinished.empty())
    return make_result("G11", "memory-safety", true, Verdict::Error,
        format("guard bands intact and unread; %d sanitizer tool(s) clean; not established: %s",
               clean, unfinished.c_str()) + tail, m);
  if (s.contains("not_applicable"))
    return make_result("G11", "memory-safety", true, Verdict::Pass,
        "guard bands intact and unread; sanitizer N/A: " + s.at("not_applicable").get<std::string>(), m);
  return make_result("G11", "memory-safety", true, Verdict::Pass,
      format("guard bands intact and unread; %d sanitizer tool(s) clean", clean) + tail, m);
}

}  // namespace kverify::gates
