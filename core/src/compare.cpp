#include "kverify/compare/compare.hpp"

#include <cmath>

#include "cuda/cuda_api.hpp"

namespace kverify::compare {

double CompareStats::normwise_rel() const {
  if (sum_sq_ref > 0.0) return std::sqrt(sum_sq_err / sum_sq_ref);
  return sum_sq_err > 0.0 ? INFINITY : 0.0;
}

namespace {

template <DType TC, DType TO>
CompareStats compare_cpu(const TensorView& c, const TensorView& o, const Bound& b) {
  CompareStats cold;
  Running r{&cold};
  const int64_t n = c.numel();
  const bool dense = c.is_contiguous() && o.is_contiguous();
  int64_t i = 0;
  if (dense) {  // the chunked path the CUDA kernel uses, so CI exercises it
    for (; i + kChunk <= n; i += kChunk) {
      uint64_t cb[kChunk], ob[kChunk];
      for (int e = 0; e < kChunk; ++e) {
        cb[e] = bits::load_raw(c.data, i + e, type_bytes<TC>());
        ob[e] = bits::load_raw(o.data, i + e, type_bytes<TO>());
      }
      step_chunk<TC, TO>(r, cb, ob, i, b);
    }
  }
  for (; i < n; ++i) {
    const int64_t oc = dense ? i : c.offset_of(i);
    const int64_t oo = dense ? i : o.offset_of(i);
    step<TC, TO>(r, bits::load_raw(c.data, oc, type_bytes<TC>()), bits::load_raw(o.data, oo, type_bytes<TO>()), i, b);
  }
  CompareStats s = finish(r);
  s.n = n;
  return s;
}

template <DType TC>
CompareStats dispatch_oracle(const TensorView& c, const TensorView& o, const Bound& b) {
  switch (o.dtype) {
    case DType::F64: return compare_cpu<TC, DType::F64>(c, o, b);
    case DType::F32: return compare_cpu<TC, DType::F32>(c, o, b);
    case DType::F16: return compare_cpu<TC, DType::F16>(c, o, b);
    default: return compare_cpu<TC, DType::BF16>(c, o, b);
  }
}

}  // namespace

CompareStats compare(const TensorView& c, const TensorView& o, const Bound& b, void* stream) {
  KV_CHECK(is_float(c.dtype) && is_float(o.dtype), "compare needs float tensors, got candidate %s and oracle %s",
           c.describe().c_str(), o.describe().c_str());
  KV_CHECK(c.ndim == o.ndim, "candidate %s and oracle %s differ in rank", c.describe().c_str(), o.describe().c_str());
  for (int d = 0; d < c.ndim; ++d)
    KV_CHECK(c.shape[d] == o.shape[d], "candidate %s and oracle %s differ in dim %d", c.describe().c_str(), o.describe().c_str(), d);
  KV_CHECK(c.device == o.device && c.device_id == o.device_id, "candidate %s and oracle %s are on different devices",
           c.describe().c_str(), o.describe().c_str());
  KV_CHECK(b.atol >= 0.0 && b.rtol >= 0.0, "bound must be non-negative, got atol=%g rtol=%g", b.atol, b.rtol);
  if (c.device == Device::CUDA) {
    KV_REQUIRE_CUDA("compare::compare");
#if defined(KVERIFY_WITH_CUDA)
    return cuda::compare(c, o, b, stream);
#endif
  }
  switch (c.dtype) {
    case DType::F64: return dispatch_oracle<DType::F64>(c, o, b);
    case DType::F32: return dispatch_oracle<DType::F32>(c, o, b);
    case DType::F16: return dispatch_oracle<DType::F16>(c, o, b);
    default: return dispatch_oracle<DType::BF16>(c, o, b);
  }
}

size_t workspace_bytes(int64_t numel) {
#if defined(KVERIFY_WITH_CUDA)
  return cuda::compare_workspace_bytes(numel);
#else
  (void)numel;
  return 0;
#endif
}

uint64_t digest_finish(uint64_t sum, const TensorView& t) {
  uint64_t h = mix64(sum ^ (static_cast<uint64_t>(t.dtype) + 0x51ull));
  h = mix64(h + static_cast<uint64_t>(t.ndim));
  for (int d = 0; d < t.ndim; ++d) h = mix64(h + static_cast<uint64_t>(t.shape[d]) * kGolden);
  return h;
}

uint64_t digest(const TensorView& t, void* stream) {
  uint64_t sum = 0;
  if (t.device == Device::CUDA) {
    KV_REQUIRE_CUDA("compare::digest");
#if defined(KVERIFY_WITH_CUDA)
    sum = cuda::digest_sum(t, stream);
#endif
  } else {
    const int64_t n = t.numel();
    const int sz = dtype_size(t.dtype);
    const bool dense = t.is_contiguous();
    for (int64_t i = 0; i < n; ++i) sum += digest_term(bits::load_raw(t.data, dense ? i : t.offset_of(i), sz), i);
  }
  return digest_finish(sum, t);
}

}  // namespace kverify::compare
