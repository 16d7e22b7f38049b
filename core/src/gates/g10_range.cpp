// G10 range: inputs scaled towards large and subnormal magnitudes while the oracle stays finite;
// the output stays finite and within the reference's own accuracy class at that scale.
#include "kverify/gates/rules.hpp"

namespace kverify::gates {

GateResult judge_g10(const json& m) { return judge_accuracy(m, "G10", "range"); }

}  // namespace kverify::gates
