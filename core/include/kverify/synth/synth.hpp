/// @file synth.hpp
/// @brief Input synthesis: fill a tensor view from (seed, distribution) with Philox4x32-10.
///
/// Element with logical (row-major) index i draws r = philox(ctr = {lo(i), hi(i), stream, 0},
/// key = {lo(seed), hi(seed)}). The value depends only on (seed, stream, distribution, i, dtype):
/// same arguments give bitwise identical tensors on CPU and GPU, whatever the strides.
///   - Normal(mean, std): Box-Muller, z = sqrt(-2 ln u1) cos(2 pi u2), u1 = (r0 + 1) 2^-32,
///     u2 = r1 2^-32 (Box & Muller 1958), with the deterministic log/cos of detmath.hpp.
///   - Uniform(lo, hi): lo + (hi - lo) (r0 2^-32 + r1 2^-64), in [lo, hi).
///   - UniformInt(lo, hi): lo + ((r1 << 32 | r0) mod (hi - lo + 1)), in [lo, hi] (float or int).
///   - Special values: with probability `special_density` (r2 < density 2^32) the element is
///     replaced by one of the kinds enabled in `special_mask` (bit 0 NaN, bit 1 +Inf, bit 2 -Inf),
///     chosen by r3. Ignored for integer dtypes.
#pragma once

#include <cmath>
#include <cstdint>

#include "kverify/synth/detmath.hpp"
#include "kverify/synth/philox.hpp"
#include "kverify/tensor/view.hpp"

namespace kverify::synth {

enum class DistKind : uint8_t { Normal, Uniform, UniformInt };

constexpr uint32_t kSpecialNaN = 1u;
constexpr uint32_t kSpecialPosInf = 2u;
constexpr uint32_t kSpecialNegInf = 4u;

/// A distribution of element values. p0/p1 are (mean, std) for Normal, (lo, hi) for the others.
struct Distribution {
  DistKind kind = DistKind::Normal;
  double p0 = 0.0;
  double p1 = 1.0;
  double special_density = 0.0;  ///< in [0, 1]
  uint32_t special_mask = 0;     ///< kSpecial* bits
  uint32_t stream = 0;           ///< separates tensors drawn from one seed
};

/// Value of element i as a double (integer distributions give integral doubles), and whether
/// it is a special value (then `value` already holds NaN/±Inf).
KV_HD double sample(uint64_t seed, const Distribution& d, uint64_t i) {
  U32x4 c{{static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), d.stream, 0u}};
  const U32x4 r = philox4x32_10(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  double v;
  switch (d.kind) {
    case DistKind::Normal: {
      const double u1 = (static_cast<double>(r.v[0]) + 1.0) * 0x1p-32;  // (0, 1]
      const double u2 = static_cast<double>(r.v[1]) * 0x1p-32;          // [0, 1)
      v = d.p0 + d.p1 * (sqrt(-2.0 * det_log(u1)) * det_cos_2pi(u2));
      break;
    }
    case DistKind::Uniform: {
      const double u = det_fma(static_cast<double>(r.v[1]), 0x1p-64, static_cast<double>(r.v[0]) * 0x1p-32);
      v = d.p0 + (d.p1 - d.p0) * u;
      break;
    }
    default: {
      const uint64_t span = static_cast<uint64_t>(d.p1 - d.p0) + 1ull;
      const uint64_t w = (static_cast<uint64_t>(r.v[1]) << 32) | r.v[0];
      v = d.p0 + static_cast<double>(w % span);
      break;
    }
  }
  if (d.special_mask != 0 && d.special_density > 0.0) {
    const double thr = d.special_density * 4294967296.0;
    if (static_cast<double>(r.v[2]) < thr) {
      uint32_t kinds[3];
      int n = 0;
      if (d.special_mask & kSpecialNaN) kinds[n++] = kSpecialNaN;
      if (d.special_mask & kSpecialPosInf) kinds[n++] = kSpecialPosInf;
      if (d.special_mask & kSpecialNegInf) kinds[n++] = kSpecialNegInf;
      const uint32_t k = kinds[r.v[3] % static_cast<uint32_t>(n)];
      const double inf = bits::f64_from(0x7ff0000000000000ull);
      v = k == kSpecialNaN ? bits::f64_from(0x7ff8000000000000ull) : (k == kSpecialPosInf ? inf : -inf);
    }
  }
  return v;
}

/// Store a sampled double into element `off` of `v` (float: round to nearest even; integer:
/// truncation of an integral value; special values are skipped for integer dtypes).
KV_HD void store_sample(const TensorView& v, int64_t off, double x) {
  switch (v.dtype) {
    case DType::F64: bits::store_f<DType::F64>(v.data, off, x); break;
    case DType::F32: bits::store_f<DType::F32>(v.data, off, x); break;
    case DType::F16: bits::store_f<DType::F16>(v.data, off, x); break;
    case DType::BF16: bits::store_f<DType::BF16>(v.data, off, x); break;
    case DType::Bool: static_cast<uint8_t*>(v.data)[off] = (x == x && x != 0.0) ? 1 : 0; break;
    default: {
      const int64_t iv = (x == x && x < 9.2e18 && x > -9.2e18) ? static_cast<int64_t>(x) : 0;
      bits::store_raw(v.data, off, dtype_size(v.dtype), static_cast<uint64_t>(iv));
    }
  }
}

/// Fill every element of `v` (CPU or CUDA; CUDA work goes to `stream`, a cudaStream_t or null).
/// @throws kverify::Error for an invalid distribution or a CUDA view in a build without CUDA.
void fill(const TensorView& v, uint64_t seed, const Distribution& d, void* stream = nullptr);

/// Check a distribution's parameters. @throws kverify::Error naming the bad field.
void validate(const Distribution& d);

}  // namespace kverify::synth
