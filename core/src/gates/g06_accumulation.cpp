// G06 accumulation: inputs that separate fp16/bf16 from fp32 accumulation (large common offset,
// {0,1} patterns past 2048); error within the reference's own accuracy class.
#include "kverify/gates/rules.hpp"

namespace kverify::gates {

GateResult judge_g06(const json& m) { return judge_accuracy(m, "G06", "accumulation"); }

}  // namespace kverify::gates
