// G07 immutability: every input, parameter and buffer bitwise unchanged after the call.
// Tolerance-free.
#include "kverify/gates/rules.hpp"

namespace kverify::gates {

GateResult judge_g07(const json& m) {
  const json& ts = m.at("tensors");
  for (const auto& t : ts) {
    if (t.at("before") != t.at("after")) {
      return make_result("G07", "immutability", true, Verdict::Fail,
          format("%s modified: %lld of %lld elements changed, first at %lld", t.at("name").get<std::string>().c_str(),
                 (long long)t.value("changed", int64_t(-1)), (long long)t.value("numel", int64_t(-1)),
                 (long long)t.value("first_changed", int64_t(-1))), t);
    }
  }
  return make_result("G07", "immutability", true, Verdict::Pass,
                     format("%zu input/parameter/buffer tensor(s) bitwise unchanged", ts.size()), {{"tensors", ts.size()}});
}

}  // namespace kverify::gates
