/// @file compare.hpp
/// @brief Fused one-pass comparison of a candidate against an oracle, and the 64-bit digest.
///
/// compare(): one read of each tensor, O(1) extra memory (a fixed workspace of per-block
/// partials on CUDA, independent of the tensor size). The candidate and oracle may have any
/// float dtypes (fp64/fp32/fp16/bf16) and any strides, but must have the same shape and device.
#pragma once

#include <cstdint>

#include "kverify/compare/element.hpp"
#include "kverify/compare/stats.hpp"
#include "kverify/tensor/view.hpp"

namespace kverify::compare {

/// Compare candidate `c` with oracle `o` elementwise.
/// @pre c and o have equal shapes and the same device; both are float dtypes.
/// @throws kverify::Error on a shape, dtype or device mismatch.
/// Cost: one pass; on CUDA the work runs on `stream` and the call waits for that stream.
CompareStats compare(const TensorView& c, const TensorView& o, const Bound& bound, void* stream = nullptr);

/// Device workspace bytes compare() takes for `numel` elements on the current CUDA device: one
/// CompareStats per block of the persistent grid, plus one (0 without CUDA).
size_t workspace_bytes(int64_t numel);

/// 64-bit digest of a tensor's logical contents: bits of every element in logical order, its
/// dtype and its shape (not its strides or address). Two tensors have equal digests iff (barring
/// a 2^-64 collision) they are bitwise equal elementwise. Identical on CPU and CUDA.
/// Formula: splitmix64 finaliser (Steele, Lea, Flood 2014) of (bits + i * golden), summed mod
/// 2^64 over elements (order-free, so any parallel split agrees), then mixed with dtype/shape.
uint64_t digest(const TensorView& t, void* stream = nullptr);

/// splitmix64 finaliser.
KV_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

/// Contribution of element i with raw bits b to the digest sum.
KV_HD uint64_t digest_term(uint64_t b, int64_t i) { return mix64(b + static_cast<uint64_t>(i) * kGolden + 1ull); }

/// Final digest from the element sum, dtype and shape (host only).
uint64_t digest_finish(uint64_t sum, const TensorView& t);

}  // namespace kverify::compare
