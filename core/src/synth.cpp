#include "kverify/synth/synth.hpp"

#include <cmath>

#include "cuda/cuda_api.hpp"

namespace kverify::synth {

void validate(const Distribution& d) {
  KV_CHECK(std::isfinite(d.p0) && std::isfinite(d.p1), "distribution parameters must be finite: p0=%g p1=%g", d.p0, d.p1);
  if (d.kind == DistKind::Normal) KV_CHECK(d.p1 >= 0.0, "normal std must be >= 0, got %g", d.p1);
  if (d.kind == DistKind::Uniform) KV_CHECK(d.p1 >= d.p0, "uniform needs lo <= hi, got lo=%g hi=%g", d.p0, d.p1);
  if (d.kind == DistKind::UniformInt) {
    KV_CHECK(d.p1 >= d.p0 && d.p0 == std::floor(d.p0) && d.p1 == std::floor(d.p1),
             "uniform_int needs integral lo <= hi, got lo=%g hi=%g", d.p0, d.p1);
    KV_CHECK(d.p1 - d.p0 < 9.0e15, "uniform_int range too wide: %g", d.p1 - d.p0);
  }
  KV_CHECK(d.special_density >= 0.0 && d.special_density <= 1.0, "special_density must be in [0,1], got %g", d.special_density);
  KV_CHECK((d.special_mask & ~7u) == 0, "special_mask has unknown bits: 0x%x", d.special_mask);
}

void fill(const TensorView& v, uint64_t seed, const Distribution& d, void* stream) {
  validate(d);
  if (v.device == Device::CUDA) {
    KV_REQUIRE_CUDA("synth::fill");
#if defined(KVERIFY_WITH_CUDA)
    cuda::fill(v, seed, d, stream);
#endif
    return;
  }
  const int64_t n = v.numel();
  const bool contiguous = v.is_contiguous();
  for (int64_t i = 0; i < n; ++i) store_sample(v, contiguous ? i : v.offset_of(i), sample(seed, d, static_cast<uint64_t>(i)));
}

}  // namespace kverify::synth
