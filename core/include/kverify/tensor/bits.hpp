/// @file bits.hpp
/// @brief Bit-exact conversions and element access shared by CPU and CUDA code.
///
/// fp16/bf16 are handled as raw 16-bit patterns so that host and device produce identical bits.
/// Rounding is IEEE 754 round-to-nearest-even; NaN stays NaN (quiet bit set on narrowing).
#pragma once

#include <cstdint>
#include <cstring>

#include "kverify/common/check.hpp"
#include "kverify/tensor/dtype.hpp"

namespace kverify::bits {

KV_HD uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
KV_HD float f32_from(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
KV_HD uint64_t f64_bits(double f) { uint64_t u; memcpy(&u, &f, 8); return u; }
KV_HD double f64_from(uint64_t u) { double f; memcpy(&f, &u, 8); return f; }

/// IEEE binary16 pattern -> float (exact).
KV_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return f32_from(sign | 0x7f800000u | (man << 13));  // Inf / NaN, payload kept
  if (exp == 0) {
    if (man == 0) return f32_from(sign);
    // subnormal: normalise
    int e = -1;
    do { man <<= 1; ++e; } while ((man & 0x400u) == 0);
    man &= 0x3ffu;
    return f32_from(sign | (static_cast<uint32_t>(112 - e) << 23) | (man << 13));
  }
  return f32_from(sign | ((exp + 112) << 23) | (man << 13));
}

/// float -> IEEE binary16 pattern, round to nearest even, overflow to Inf.
KV_HD uint16_t float_to_half(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t exp = (u >> 23) & 0xffu;
  uint32_t man = u & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man ? (0x200u | (man >> 13)) : 0u));
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return sign;  // rounds to zero
    man |= 0x800000u;
    const int shift = 14 - e;  // 14..24
    uint32_t h = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (man >> 13);
  const uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
  return static_cast<uint16_t>(sign | h);
}

/// bfloat16 pattern -> float (exact).
KV_HD float bf16_to_float(uint16_t b) { return f32_from(static_cast<uint32_t>(b) << 16); }

/// float -> bfloat16 pattern, round to nearest even; NaN kept quiet.
KV_HD uint16_t float_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

/// Store a double into a float tensor element with round-to-nearest-even. For fp16/bf16 the
/// value is first rounded to float (double rounding; identical on host and device).
template <DType T>
KV_HD void store_f(void* p, int64_t off, double v) {
  if constexpr (T == DType::F64) static_cast<double*>(p)[off] = v;
  else if constexpr (T == DType::F32) static_cast<float*>(p)[off] = static_cast<float>(v);
  else if constexpr (T == DType::F16) static_cast<uint16_t*>(p)[off] = float_to_half(static_cast<float>(v));
  else static_cast<uint16_t*>(p)[off] = float_to_bf16(static_cast<float>(v));
}

/// Raw bits of an element of any dtype, zero-extended to 64 bits.
KV_HD uint64_t load_raw(const void* p, int64_t off, int size) {
  switch (size) {
    case 8: return static_cast<const uint64_t*>(p)[off];
    case 4: return static_cast<const uint32_t*>(p)[off];
    case 2: return static_cast<const uint16_t*>(p)[off];
    default: return static_cast<const uint8_t*>(p)[off];
  }
}

KV_HD void store_raw(void* p, int64_t off, int size, uint64_t v) {
  switch (size) {
    case 8: static_cast<uint64_t*>(p)[off] = v; break;
    case 4: static_cast<uint32_t*>(p)[off] = static_cast<uint32_t>(v); break;
    case 2: static_cast<uint16_t*>(p)[off] = static_cast<uint16_t>(v); break;
    default: static_cast<uint8_t*>(p)[off] = static_cast<uint8_t>(v); break;
  }
}

/// Map the bits of a value of width `size` bytes (a float type) to an integer whose order is
/// the order of the floats (-0 and +0 map to the same point). Used for ULP distances.
KV_HD int64_t ordered(uint64_t b, int size) {
  const int nbits = size * 8;
  const uint64_t sign = 1ull << (nbits - 1);
  const uint64_t mag = b & (sign - 1);
  return (b & sign) ? -static_cast<int64_t>(mag) : static_cast<int64_t>(mag);
}

/// Round a double to float type T and return its raw bits (for ULP distance in T).
template <DType T>
KV_HD uint64_t round_bits(double v) {
  if constexpr (T == DType::F64) return f64_bits(v);
  else if constexpr (T == DType::F32) return f32_bits(static_cast<float>(v));
  else if constexpr (T == DType::F16) return float_to_half(static_cast<float>(v));
  else return float_to_bf16(static_cast<float>(v));
}

}  // namespace kverify::bits
