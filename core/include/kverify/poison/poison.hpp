/// @file poison.hpp
/// @brief Sentinel fill and count: a NaN payload that ordinary arithmetic never produces.
///
/// The sentinels are *signalling* NaNs (quiet bit clear) with a fixed payload: any arithmetic on
/// a signalling NaN yields a quiet NaN (IEEE 754-2008 §6.2), and hardware default NaNs are quiet
/// (x86: 0xFFC00000, CUDA: 0x7FFFFFFF), so a sentinel in an output means an element was copied
/// from poisoned memory without being computed — it was never written.
///   fp64 0x7FF5A5A5A5A5A5A5, fp32 0x7FA5A5A5, fp16 0x7D5A, bf16 0x7FA5,
///   integer types: the byte 0xA5 repeated (a legal value; counts there are only indicative).
#pragma once

#include <cstdint>

#include "kverify/tensor/view.hpp"

namespace kverify::poison {

/// Sentinel bit pattern for dtype `t`, zero-extended to 64 bits.
KV_HD uint64_t sentinel_bits(DType t) {
  switch (t) {
    case DType::F64: return 0x7FF5A5A5A5A5A5A5ull;
    case DType::F32: return 0x7FA5A5A5ull;
    case DType::F16: return 0x7D5Aull;
    case DType::BF16: return 0x7FA5ull;
    case DType::I64: return 0xA5A5A5A5A5A5A5A5ull;
    case DType::I32: return 0xA5A5A5A5ull;
    case DType::I16: return 0xA5A5ull;
    default: return 0xA5ull;
  }
}

/// Bits of a fresh glibc allocation under MALLOC_PERTURB_=0x5A (every byte 0xA5): what an
/// unwritten CPU output holds when the worker runs with that setting (kverify.sandbox). Only
/// counted for 4- and 8-byte types, where the value (fp32 -2.9e-16, fp64 -1.3e-106) is implausible.
KV_HD uint64_t fresh_bits(DType t) {
  switch (dtype_size(t)) {
    case 8: return 0xA5A5A5A5A5A5A5A5ull;
    case 4: return 0xA5A5A5A5ull;
    case 2: return 0xA5A5ull;
    default: return 0xA5ull;
  }
}

/// Write the sentinel into every element of `t` (CUDA: on `stream`, asynchronously).
void fill_sentinel(const TensorView& t, void* stream = nullptr);

/// Count elements of `t` whose bits equal the sentinel; `first` receives the smallest logical
/// index found or -1. CUDA: waits for `stream`.
int64_t count_sentinel(const TensorView& t, int64_t* first = nullptr, void* stream = nullptr);

/// Count elements of `t` whose raw bits equal `pattern` (zero-extended); `first` as above.
int64_t count_bits(const TensorView& t, uint64_t pattern, int64_t* first = nullptr, void* stream = nullptr);

}  // namespace kverify::poison
