/// @file detmath.hpp
/// @brief Deterministic double-precision log and cos/sin built from IEEE-exact operations only
/// (+, -, *, /, sqrt and explicit fma), so host (glibc) and device (CUDA) give identical bits.
///
/// libm and CUDA's math library may differ in the last bit; the generator must not. Accuracy is
/// a few ulp of double, far beyond what input synthesis needs. Series: log(m) = 2 atanh(s),
/// s = (m-1)/(m+1) for m in [sqrt(1/2), sqrt(2)); Taylor series of sin/cos on [0, pi/2).
#pragma once

#include <cmath>
#include <cstdint>

#include "kverify/tensor/bits.hpp"

namespace kverify::synth {

constexpr double kLn2 = 0.6931471805599453094172321;
constexpr double kHalfPi = 1.5707963267948966192313217;
constexpr double kSqrtHalf = 0.7071067811865475244008444;

KV_HD double det_fma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// Natural log of a positive normal double.
KV_HD double det_log(double x) {
  uint64_t b = bits::f64_bits(x);
  int e = static_cast<int>((b >> 52) & 0x7ff) - 1023;
  double m = bits::f64_from((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);  // [1,2)
  if (m > 2.0 * kSqrtHalf) { m *= 0.5; ++e; }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  // 2*(s + s^3/3 + ... + s^23/23), |s| <= 0.1716
  double p = 1.0 / 23.0;
  p = det_fma(p, s2, 1.0 / 21.0);
  p = det_fma(p, s2, 1.0 / 19.0);
  p = det_fma(p, s2, 1.0 / 17.0);
  p = det_fma(p, s2, 1.0 / 15.0);
  p = det_fma(p, s2, 1.0 / 13.0);
  p = det_fma(p, s2, 1.0 / 11.0);
  p = det_fma(p, s2, 1.0 / 9.0);
  p = det_fma(p, s2, 1.0 / 7.0);
  p = det_fma(p, s2, 1.0 / 5.0);
  p = det_fma(p, s2, 1.0 / 3.0);
  p = det_fma(p, s2, 1.0);
  const double logm = 2.0 * s * p;
  return det_fma(static_cast<double>(e), kLn2, logm);
}

/// cos(2*pi*u) for u in [0, 1).
KV_HD double det_cos_2pi(double u) {
  const double t = u * 4.0;  // exact
  const int q = static_cast<int>(t);
  const double th = (t - q) * kHalfPi;  // [0, pi/2)
  const double t2 = th * th;
  // cos: sum (-1)^k t^(2k)/(2k)!, to k = 13; sin: t * sum (-1)^k t^(2k)/(2k+1)!, to k = 13
  double c = 0.0;
  double s = 0.0;
  const double cf[13] = {-1.0 / 2, 1.0 / 24, -1.0 / 720, 1.0 / 40320, -1.0 / 3628800,
                         1.0 / 479001600, -1.0 / 87178291200.0, 1.0 / 20922789888000.0,
                         -1.0 / 6402373705728000.0, 1.0 / 2432902008176640000.0,
                         -1.0 / 1124000727777607680000.0, 1.0 / 620448401733239439360000.0,
                         -1.0 / 403291461126605635584000000.0};
  const double sf[13] = {-1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880, -1.0 / 39916800,
                         1.0 / 6227020800.0, -1.0 / 1307674368000.0, 1.0 / 355687428096000.0,
                         -1.0 / 121645100408832000.0, 1.0 / 51090942171709440000.0,
                         -1.0 / 25852016738884976640000.0, 1.0 / 15511210043330985984000000.0,
                         -1.0 / 10888869450418352160768000000.0};
  for (int k = 12; k >= 0; --k) {
    c = det_fma(c, t2, cf[k]);
    s = det_fma(s, t2, sf[k]);
  }
  c = det_fma(c, t2, 1.0);
  s = det_fma(s, t2, 1.0) * th;
  switch (q & 3) {
    case 0: return c;
    case 1: return -s;
    case 2: return -c;
    default: return s;
  }
}

}  // namespace kverify::synth
