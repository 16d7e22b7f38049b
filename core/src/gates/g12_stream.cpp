// G12 stream: on a non-default stream with pending writes to the inputs the result reflects them
// and is complete after syncing only that stream; no extra threads, no patched framework or timer
// functions.
#include "kverify/gates/rules.hpp"

namespace kverify::gates {

GateResult judge_g12(const json& m) {
  const json patched = m.value("patched", json::array());
  if (!patched.empty())
    return make_result("G12", "stream", true, Verdict::Fail,
                       "replaced framework/timer functions: " + patched.dump(), m);
  if (m.value("threads_added", 0) > 0)
    return make_result("G12", "stream", true, Verdict::Fail,
                       format("left %d extra thread(s) running after the call", m.at("threads_added").get<int>()), m);
  const json& s = m.at("stream");
  if (s.contains("not_applicable"))
    return make_result("G12", "stream", true, Verdict::Pass,
                       "no extra threads, nothing patched; stream part N/A: " + s.at("not_applicable").get<std::string>(), m);
  if (s.contains("not_established"))  // the measurement could not show which stream the call followed
    return make_result("G12", "stream", true, Verdict::Error,
                       "no extra threads, nothing patched; stream part not established: " +
                           s.at("not_established").get<std::string>(), m);
  if (!s.at("pending_writes_seen").get<bool>())
    return make_result("G12", "stream", true, Verdict::Fail,
                       "ignored writes still pending on the current stream (ran on another stream)", m);
  if (!s.at("complete_after_stream_sync").get<bool>())
    return make_result("G12", "stream", true, Verdict::Fail,
                       "output incomplete after synchronising only the current stream", m);
  // window_held absent: a measurement from before the windows (rules < 2026-12-01.4), one run.
  // Missed windows the harness caused (the call began late) arrive as not_established.
  if (!s.value("window_held", true))
    return make_result("G12", "stream", true, Verdict::Pass,
                       format("the call itself outlasted the spin before the pending writes, in each of %d "
                              "window(s) up to %.0f GPU cycles (it waits for the GPU): right output, stream "
                              "order not observable; no extra threads, nothing patched",
                              s.value("attempts", 1), s.value("sleep_cycles", 0.0)), m);
  return make_result("G12", "stream", true, Verdict::Pass,
                     "follows the current stream; no extra threads, nothing patched", m);
}

}  // namespace kverify::gates
