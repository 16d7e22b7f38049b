/// @file report.hpp
/// @brief The record of one `kverify check`: gate results, the standard test, the class.
#pragma once

#include <string>
#include <vector>

#include "kverify/gates/verdict.hpp"

namespace kverify::record {

using gates::json;

/// The field's loose check (DESIGN.md "The standard test"), kept for comparison.
struct StandardTest {
  std::string verdict = "ERROR";  ///< PASS, FAIL, CRASH, TIMEOUT or ERROR
  std::string summary;
  double tolerance = 0.0;         ///< atol = rtol of the harness
  int trials = 0;
};

/// Everything `kverify check` found about one candidate.
struct CheckReport {
  std::string reference;   ///< path or corpus id of the reference
  std::string candidate;   ///< path or corpus id of the candidate
  std::string device;      ///< "cpu" or "cuda"
  uint64_t seed = 0;
  std::vector<gates::GateResult> gates;
  StandardTest standard;
  json meta = json::object();  ///< versions, free dimensions, timings

  /// BROKEN / VIOLATION / CLEAN (gates::classify).
  std::string kernel_class() const { return gates::classify(gates); }
  json to_json() const;
  /// @throws nlohmann::json::exception naming the missing field.
  static CheckReport from_json(const json& j);
};

}  // namespace kverify::record
