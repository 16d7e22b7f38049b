/// @file verdict.hpp
/// @brief Verdicts, gate results and the class rule shared by all gates.
///
/// A gate's rule is a pure function from measurements (a JSON object whose fields each gate
/// header documents) to a GateResult. Measurements are produced by the orchestration layer; the
/// rules never touch tensors.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kverify/common/check.hpp"

namespace kverify::gates {

using json = nlohmann::json;

/// Outcome of one gate (DESIGN.md "The twelve gates").
enum class Verdict { Pass, Fail, Unsupported, NotApplicable, Crash, Timeout, Error };

inline const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Pass: return "PASS";
    case Verdict::Fail: return "FAIL";
    case Verdict::Unsupported: return "UNSUPPORTED";
    case Verdict::NotApplicable: return "N/A";
    case Verdict::Crash: return "CRASH";
    case Verdict::Timeout: return "TIMEOUT";
    case Verdict::Error: return "ERROR";
  }
  return "?";
}

/// @throws kverify::Error for an unknown name.
inline Verdict verdict_from_name(const std::string& s) {
  for (Verdict v : {Verdict::Pass, Verdict::Fail, Verdict::Unsupported, Verdict::NotApplicable,
                    Verdict::Crash, Verdict::Timeout, Verdict::Error})
    if (s == verdict_name(v)) return v;
  KV_CHECK(false, "unknown verdict '%s'", s.c_str());
  return Verdict::Error;
}

/// One gate's verdict with a one-line summary and structured evidence (enough to replay).
struct GateResult {
  std::string gate;          ///< "G03"
  std::string name;          ///< "nonfinite"
  bool tolerance_free = false;
  Verdict verdict = Verdict::Error;
  std::string summary;       ///< one line, leads with what was found
  json evidence = json::object();
  double bound_ratio = 0.0;  ///< accuracy-type gates: measured error / bound (0 when n/a)

  json to_json() const {
    return json{{"gate", gate}, {"name", name}, {"tolerance_free", tolerance_free},
                {"verdict", verdict_name(verdict)}, {"summary", summary},
                {"evidence", evidence}, {"bound_ratio", bound_ratio}};
  }
  static GateResult from_json(const json& j) {
    GateResult r;
    r.gate = j.at("gate").get<std::string>();
    r.name = j.at("name").get<std::string>();
    r.tolerance_free = j.value("tolerance_free", false);
    r.verdict = verdict_from_name(j.at("verdict").get<std::string>());
    r.summary = j.value("summary", "");
    r.evidence = j.value("evidence", json::object());
    r.bound_ratio = j.value("bound_ratio", 0.0);
    return r;
  }
};

/// Kernel classes (DESIGN.md): BROKEN fails a tolerance-free gate or an accuracy-type gate by
/// more than kBrokenFactor times its bound; VIOLATION fails any gate; CLEAN passes all that apply.
/// CRASH and TIMEOUT count as failures of a tolerance-free kind (the kernel did not run).
constexpr double kBrokenFactor = 100.0;

inline std::string classify(const std::vector<GateResult>& results) {
  bool broken = false, violation = false;
  for (const auto& r : results) {
    const bool failed = r.verdict == Verdict::Fail || r.verdict == Verdict::Crash || r.verdict == Verdict::Timeout;
    if (!failed) continue;
    violation = true;
    if (r.tolerance_free || r.verdict != Verdict::Fail || r.bound_ratio > kBrokenFactor) broken = true;
  }
  return broken ? "BROKEN" : (violation ? "VIOLATION" : "CLEAN");
}

/// A result with a verdict and summary only (CRASH/TIMEOUT/N/A/ERROR from orchestration).
inline GateResult make_result(const std::string& gate, const std::string& name, bool tolerance_free,
                              Verdict v, const std::string& summary, json evidence = json::object()) {
  GateResult r;
  r.gate = gate;
  r.name = name;
  r.tolerance_free = tolerance_free;
  r.verdict = v;
  r.summary = summary;
  r.evidence = std::move(evidence);
  return r;
}

/// Measurements may carry {"incomparable": "why", "evidence": {...}} when an output cannot be
/// compared at all (not a tensor, wrong shape): the gate fails with that reason. Returns true and
/// sets `out` in that case.
inline bool incomparable(const json& m, const std::string& gate, const std::string& name, bool tolerance_free,
                         GateResult& out) {
  if (!m.contains("incomparable")) return false;
  out = make_result(gate, name, tolerance_free, Verdict::Fail,
                    "output not comparable: " + m.at("incomparable").get<std::string>(),
                    m.value("evidence", json::object()));
  out.bound_ratio = tolerance_free ? 0.0 : 1e300;
  return true;
}

/// printf into a std::string (summaries).
std::string format(const char* fmt, ...);

}  // namespace kverify::gates
