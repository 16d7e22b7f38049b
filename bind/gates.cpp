// Bindings of the gate rules: measurements in, GateResult out, both as JSON strings.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "kverify/gates/rules.hpp"
#include "kverify/record/report.hpp"
#include "kverify/record/stats_json.hpp"

namespace nb = nanobind;

namespace kverify::bind {

namespace {

using gates::json;

DType dtype_by_name(const std::string& n) {
  for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16})
    if (n == dtype_name(t)) return t;
  KV_CHECK(false, "not a float dtype: '%s'", n.c_str());
  return DType::F32;
}

std::string judge(const std::string& gate, const std::string& measurements) {
  json m;
  try {
    m = json::parse(measurements);
  } catch (const json::exception& e) {
    KV_CHECK(false, "%s measurements are not valid JSON: %s", gate.c_str(), e.what());
  }
  try {
    if (gate == "G01") return gates::judge_g01(m).to_json().dump();
    if (gate == "G02") return gates::judge_g02(m).to_json().dump();
    if (gate == "G03") return gates::judge_g03(m).to_json().dump();
    if (gate == "G04") return gates::judge_g04(m).to_json().dump();
    if (gate == "G07") return gates::judge_g07(m).to_json().dump();
    if (gate == "G05") return gates::judge_g05(m).to_json().dump();
    if (gate == "G06") return gates::judge_g06(m).to_json().dump();
    if (gate == "G08") return gates::judge_g08(m).to_json().dump();
    if (gate == "G09") return gates::judge_g09(m).to_json().dump();
    if (gate == "G10") return gates::judge_g10(m).to_json().dump();
    if (gate == "G11") return gates::judge_g11(m).to_json().dump();
    if (gate == "G12") return gates::judge_g12(m).to_json().dump();
    if (gate == "accuracy") return gates::judge_accuracy(m, "acc", "accuracy").to_json().dump();
  } catch (const json::exception& e) {
    KV_CHECK(false, "%s measurements malformed: %s", gate.c_str(), e.what());
  }
  KV_CHECK(false, "no rule for gate '%s'", gate.c_str());
  return {};
}

}  // namespace

void register_gates(nb::module_& m) {
  m.def("judge", &judge, nb::arg("gate"), nb::arg("measurements"),
        "Apply gate `gate`'s verdict rule (core/include/kverify/gates/rules.hpp documents each\n"
        "measurement schema) to JSON measurements; returns the GateResult as JSON.\n"
        "Raises ValueError for an unknown gate or malformed measurements.");
  m.def("g02_bound",
        [](const std::string& ref_stats, const std::string& dtype) {
          return gates::g02_bound(record::stats_from_json(json::parse(ref_stats)), dtype_by_name(dtype)).dump();
        },
        nb::arg("reference_stats"), nb::arg("dtype"),
        "G02 bounds {normwise, atol, rtol} from the reference's CompareStats against the oracle.");
  m.def("classify",
        [](const std::vector<std::string>& results) {
          std::vector<gates::GateResult> rs;
          for (const auto& r : results) rs.push_back(gates::GateResult::from_json(json::parse(r)));
          return gates::classify(rs);
        },
        nb::arg("results"), "BROKEN / VIOLATION / CLEAN from GateResult JSON strings.");
  m.def("report_json",
        [](const std::string& report) { return record::CheckReport::from_json(json::parse(report)).to_json().dump(2); },
        nb::arg("report"), "Validate a CheckReport JSON and return its canonical form (adds the class).");
}

}  // namespace kverify::bind
