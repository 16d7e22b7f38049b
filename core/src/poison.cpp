#include "kverify/poison/poison.hpp"

#include "cuda/cuda_api.hpp"
#include "kverify/compare/stats.hpp"
#include "kverify/tensor/bits.hpp"

namespace kverify::poison {

void fill_sentinel(const TensorView& t, void* stream) {
  if (t.device == Device::CUDA) {
    KV_REQUIRE_CUDA("poison::fill_sentinel");
#if defined(KVERIFY_WITH_CUDA)
    cuda::fill_sentinel(t, stream);
#endif
    return;
  }
  const uint64_t s = sentinel_bits(t.dtype);
  const int sz = dtype_size(t.dtype);
  const int64_t n = t.numel();
  const bool dense = t.is_contiguous();
  for (int64_t i = 0; i < n; ++i) bits::store_raw(t.data, dense ? i : t.offset_of(i), sz, s);
}

int64_t count_sentinel(const TensorView& t, int64_t* first, void* stream) {
  return count_bits(t, sentinel_bits(t.dtype), first, stream);
}

int64_t count_bits(const TensorView& t, uint64_t s, int64_t* first, void* stream) {
  if (t.device == Device::CUDA) {
    KV_REQUIRE_CUDA("poison::count_bits");
#if defined(KVERIFY_WITH_CUDA)
    return cuda::count_bits(t, s, first, stream);
#endif
  }
  const int sz = dtype_size(t.dtype);
  const int64_t n = t.numel();
  const bool dense = t.is_contiguous();
  int64_t count = 0, f = compare::kNoIndex;
  for (int64_t i = 0; i < n; ++i) {
    if (bits::load_raw(t.data, dense ? i : t.offset_of(i), sz) == s) {
      if (count == 0) f = i;
      ++count;
    }
  }
  if (first) *first = f;
  return count;
}

}  // namespace kverify::poison
