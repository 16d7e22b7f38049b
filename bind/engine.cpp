// Bindings of the tensor engine: synthesis, comparison, digest, sentinels.
// Tensors arrive through DLPack; CUDA work runs on the stream passed as an integer handle.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/pair.h>

#include "kverify/compare/compare.hpp"
#include "kverify/poison/poison.hpp"
#include "kverify/record/stats_json.hpp"
#include "kverify/synth/synth.hpp"
#include "view.hpp"

namespace nb = nanobind;

namespace kverify::bind {

namespace {

synth::DistKind dist_kind(const std::string& k) {
  if (k == "normal") return synth::DistKind::Normal;
  if (k == "uniform") return synth::DistKind::Uniform;
  KV_CHECK(k == "uniform_int", "unknown distribution '%s' (normal, uniform, uniform_int)", k.c_str());
  return synth::DistKind::UniformInt;
}

void* as_stream(uintptr_t s) { return reinterpret_cast<void*>(s); }

}  // namespace

void register_engine(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const kverify::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.def("fill",
        [](nb::ndarray<> t, uint64_t seed, const std::string& kind, double p0, double p1, double density,
           uint32_t mask, uint32_t stream_id, uintptr_t cuda_stream) {
          synth::Distribution d;
          d.kind = dist_kind(kind);
          d.p0 = p0;
          d.p1 = p1;
          d.special_density = density;
          d.special_mask = mask;
          d.stream = stream_id;
          const TensorView v = view_of(t);
          nb::gil_scoped_release nogil;
          synth::fill(v, seed, d, as_stream(cuda_stream));
        },
        nb::arg("tensor"), nb::arg("seed"), nb::arg("kind") = "normal", nb::arg("p0") = 0.0, nb::arg("p1") = 1.0,
        nb::arg("special_density") = 0.0, nb::arg("special_mask") = 0u, nb::arg("stream_id") = 0u,
        nb::arg("cuda_stream") = 0,
        "Fill `tensor` in place from (seed, distribution) with Philox4x32-10; bitwise identical on CPU and CUDA.\n"
        "kind: 'normal' (p0=mean, p1=std), 'uniform' [p0, p1), 'uniform_int' [p0, p1].\n"
        "special_mask bits: 1 NaN, 2 +Inf, 4 -Inf, injected with probability special_density.\n"
        "Raises ValueError for bad parameters or unsupported dtypes.");

  m.def("compare",
        [](nb::ndarray<> c, nb::ndarray<> o, double atol, double rtol, uintptr_t cuda_stream) {
          const TensorView cv = view_of(c), ov = view_of(o);
          compare::CompareStats s;
          {
            nb::gil_scoped_release nogil;
            s = compare::compare(cv, ov, compare::Bound{atol, rtol}, as_stream(cuda_stream));
          }
          return record::to_json(s).dump();
        },
        nb::arg("candidate"), nb::arg("oracle"), nb::arg("atol") = 0.0, nb::arg("rtol") = 0.0,
        nb::arg("cuda_stream") = 0,
        "One-pass comparison of candidate against oracle (same shape and device, any float dtypes).\n"
        "Returns the CompareStats as a JSON string. Raises ValueError on mismatched shapes/devices.");

  m.def("digest",
        [](nb::ndarray<> t, uintptr_t cuda_stream) {
          const TensorView v = view_of(t);
          nb::gil_scoped_release nogil;
          return compare::digest(v, as_stream(cuda_stream));
        },
        nb::arg("tensor"), nb::arg("cuda_stream") = 0,
        "64-bit digest of the logical contents (bits, dtype, shape); identical on CPU and CUDA.");

  m.def("fill_sentinel",
        [](nb::ndarray<> t, uintptr_t cuda_stream) {
          const TensorView v = view_of(t);
          nb::gil_scoped_release nogil;
          poison::fill_sentinel(v, as_stream(cuda_stream));
        },
        nb::arg("tensor"), nb::arg("cuda_stream") = 0, "Write the sentinel NaN payload into every element.");

  m.def("count_sentinel",
        [](nb::ndarray<> t, uintptr_t cuda_stream) {
          const TensorView v = view_of(t);
          int64_t first = -1, n = 0;
          {
            nb::gil_scoped_release nogil;
            n = poison::count_sentinel(v, &first, as_stream(cuda_stream));
          }
          return std::make_pair(n, first);
        },
        nb::arg("tensor"), nb::arg("cuda_stream") = 0,
        "(count, first index or -1) of elements equal to the sentinel bit pattern.");

  m.def("count_fresh",
        [](nb::ndarray<> t, uintptr_t cuda_stream) {
          const TensorView v = view_of(t);
          int64_t first = -1, n = 0;
          {
            nb::gil_scoped_release nogil;
            n = poison::count_bits(v, poison::fresh_bits(v.dtype), &first, as_stream(cuda_stream));
          }
          return std::make_pair(n, first);
        },
        nb::arg("tensor"), nb::arg("cuda_stream") = 0,
        "(count, first index or -1) of elements holding the fresh-allocation pattern 0xA5.. (CPU, MALLOC_PERTURB_).");

  m.def("compare_workspace_bytes", [](int64_t n) { return compare::workspace_bytes(n); }, nb::arg("numel"),
        "Device bytes compare() allocates for a tensor of `numel` elements (0 on CPU builds): fixed by the\n"
        "grid size, not by `numel` beyond the first few blocks.");

  m.def("sentinel_bits", [](nb::ndarray<> t) { return poison::sentinel_bits(view_of(t).dtype); }, nb::arg("tensor"),
        "The sentinel bit pattern for the tensor's dtype.");
}

}  // namespace kverify::bind
