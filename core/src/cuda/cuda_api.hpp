/// @file cuda_api.hpp
/// @brief Internal: CUDA implementations behind the core's device-agnostic entry points.
/// Defined in core/src/cuda/*.cu; present only when KVERIFY_WITH_CUDA is defined.
#pragma once

#include <cstdint>

#include "kverify/compare/compare.hpp"
#include "kverify/synth/synth.hpp"
#include "kverify/tensor/view.hpp"

namespace kverify::cuda {

void fill(const TensorView& v, uint64_t seed, const synth::Distribution& d, void* stream);
size_t compare_workspace_bytes(int64_t numel);
compare::CompareStats compare(const TensorView& c, const TensorView& o, const compare::Bound& b, void* stream);
uint64_t digest_sum(const TensorView& t, void* stream);
void fill_sentinel(const TensorView& t, void* stream);
int64_t count_bits(const TensorView& t, uint64_t pattern, int64_t* first, void* stream);

}  // namespace kverify::cuda

/// Throw unless this build has CUDA support.
#if defined(KVERIFY_WITH_CUDA)
#define KV_REQUIRE_CUDA(what) ((void)0)
#else
#define KV_REQUIRE_CUDA(what) \
  KV_CHECK(false, "%s: tensor is on CUDA but kverify was built without CUDA (nvcc not found)", what)
#endif
