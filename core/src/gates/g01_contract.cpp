// G01 contract: same number of outputs; shape, dtype and device equal to the reference's; plain
// dense tensors with real storage; no exception at the problem's own shape. Tolerance-free.
#include "kverify/gates/rules.hpp"

namespace kverify::gates {

GateResult judge_g01(const json& m) {
  auto result = [&](Verdict v, const std::string& s, json ev) {
    return make_result("G01", "contract", true, v, s, std::move(ev));
  };
  if (m.contains("exception") && !m.at("exception").is_null()) {
    const std::string e = m.at("exception").get<std::string>();
    return result(Verdict::Fail, "raised at the problem's own shape: " + e, {{"exception", e}});
  }
  const json& ref = m.at("reference");
  const json& cand = m.at("candidate");
  const std::string rc = m.value("reference_container", "tensor"), cc = m.value("candidate_container", "tensor");
  if (rc != cc)
    return result(Verdict::Fail, format("returned a %s where the reference returns a %s", cc.c_str(), rc.c_str()),
                  {{"reference_container", rc}, {"candidate_container", cc}});
  if (ref.size() != cand.size())
    return result(Verdict::Fail, format("returned %zu outputs, reference returns %zu", cand.size(), ref.size()),
                  {{"reference_outputs", ref.size()}, {"candidate_outputs", cand.size()}});
  for (size_t i = 0; i < ref.size(); ++i) {
    const json& r = ref[i];
    const json& c = cand[i];
    json ev{{"output", i}, {"reference", r}, {"candidate", c}};
    if (c.at("kind") != "tensor")
      return result(Verdict::Fail, format("output %zu is of type %s, not a tensor", i, c.at("kind").get<std::string>().c_str()), ev);
    if (c.at("shape") != r.at("shape"))
      return result(Verdict::Fail, format("output %zu shape %s, reference %s", i, c.at("shape").dump().c_str(), r.at("shape").dump().c_str()), ev);
    if (c.at("dtype") != r.at("dtype"))
      return result(Verdict::Fail, format("output %zu dtype %s, reference %s", i, c.at("dtype").get<std::string>().c_str(), r.at("dtype").get<std::string>().c_str()), ev);
    if (c.at("device") != r.at("device"))
      return result(Verdict::Fail, format("output %zu on %s, reference on %s", i, c.at("device").get<std::string>().c_str(), r.at("device").get<std::string>().c_str()), ev);
    if (!c.value("plain", true))
      return result(Verdict::Fail, format("output %zu is a tensor subclass, not a plain tensor", i), ev);
    if (!c.value("has_storage", true))
      return result(Verdict::Fail, format("output %zu has no real storage", i), ev);
    if (!c.value("dense", true))
      return result(Verdict::Fail, format("output %zu is not dense (overlapping or gapped strides)", i), ev);
  }
  return result(Verdict::Pass, format("%zu output(s): shape, dtype, device as the reference", ref.size()), {{"outputs", ref.size()}});
}

}  // namespace kverify::gates
