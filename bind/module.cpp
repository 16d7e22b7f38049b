// kverify._core: the core engine exposed to Python. One register_<area> per area.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

namespace kverify::bind {
void register_engine(nb::module_& m);
void register_gates(nb::module_& m);
void register_gdn(nb::module_& m);
void register_gdn_chunk(nb::module_& m);
}  // namespace kverify::bind

NB_MODULE(_core, m) {
  m.doc() = "kverify core engine: synthesis, comparison, digest, poisoning, gate rules; the fp64 GDN oracle and the chunked GDN";
  kverify::bind::register_engine(m);
  kverify::bind::register_gates(m);
  kverify::bind::register_gdn(m);
  kverify::bind::register_gdn_chunk(m);
#if defined(KVERIFY_WITH_CUDA)
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
}
