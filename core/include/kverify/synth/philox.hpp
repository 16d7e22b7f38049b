/// @file philox.hpp
/// @brief Philox4x32-10 counter-based generator (Salmon et al., "Parallel random numbers: as easy
/// as 1, 2, 3", SC'11; constants from that paper / Random123).
///
/// A pure function of (counter, key): element i of a synthesised tensor uses counter
/// {lo(i), hi(i), stream, 0} and key {lo(seed), hi(seed)}, so any element can be produced in any
/// order by any thread on CPU or GPU with identical bits.
#pragma once

#include <cstdint>

#include "kverify/common/check.hpp"

namespace kverify::synth {

struct U32x4 { uint32_t v[4]; };

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  ///< round multiplier 0
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;  ///< round multiplier 1
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  ///< key schedule increment 0 (golden ratio)
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  ///< key schedule increment 1 (sqrt(3)-1)
constexpr int kPhiloxRounds = 10;

KV_HD void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

/// Philox4x32-10 block: 4 random 32-bit words from a 128-bit counter and a 64-bit key.
KV_HD U32x4 philox4x32_10(U32x4 ctr, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < kPhiloxRounds; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kPhiloxM0, ctr.v[0], hi0, lo0);
    mulhilo(kPhiloxM1, ctr.v[2], hi1, lo1);
    U32x4 next;
    next.v[0] = hi1 ^ ctr.v[1] ^ k0;
    next.v[1] = lo1;
    next.v[2] = hi0 ^ ctr.v[3] ^ k1;
    next.v[3] = lo0;
    ctr = next;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return ctr;
}

}  // namespace kverify::synth
