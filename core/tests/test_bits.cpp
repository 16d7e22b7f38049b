#include <gtest/gtest.h>

#include <cmath>

#include "kverify/tensor/bits.hpp"
#include "kverify/tensor/view.hpp"

using namespace kverify;

TEST(Bits, HalfKnownValues) {
  EXPECT_EQ(bits::float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(bits::float_to_half(-2.0f), 0xC000);
  EXPECT_EQ(bits::float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(bits::float_to_half(65520.0f), 0x7C00);  // tie between 65504 and 65536: to even (Inf)
  EXPECT_EQ(bits::float_to_half(65519.0f), 0x7BFF);
  EXPECT_EQ(bits::float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(bits::float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(bits::float_to_half(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp rounds up
  EXPECT_EQ(bits::float_to_half(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(bits::float_to_half(INFINITY), 0x7C00);
  EXPECT_TRUE(std::isnan(bits::half_to_float(bits::float_to_half(NAN))));
}

TEST(Bits, HalfRoundTripAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bits::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bits::float_to_half(f), h) << "pattern " << h;
  }
}

TEST(Bits, HalfRoundsToNearest) {
  // every float between two adjacent halves goes to the nearer one
  for (uint32_t h = 0x3C00; h < 0x3C40; ++h) {
    const float lo = bits::half_to_float(static_cast<uint16_t>(h));
    const float hi = bits::half_to_float(static_cast<uint16_t>(h + 1));
    const float mid = 0.5f * (lo + hi);
    EXPECT_EQ(bits::float_to_half(std::nextafter(mid, lo)), h);
    EXPECT_EQ(bits::float_to_half(std::nextafter(mid, hi)), h + 1);
    EXPECT_EQ(bits::float_to_half(mid), (h & 1) ? h + 1 : h);
  }
}

TEST(Bits, Bf16) {
  EXPECT_EQ(bits::float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bits::bf16_to_float(0x3F80), 1.0f);
  // 1 + 2^-8 is the tie between 1 and 1 + 2^-7: to even (1)
  EXPECT_EQ(bits::float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(bits::float_to_bf16(1.0f + std::ldexp(3.0f, -9)), 0x3F81);
  EXPECT_TRUE(std::isnan(bits::bf16_to_float(bits::float_to_bf16(NAN))));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bits::bf16_to_float(static_cast<uint16_t>(b));
    if (!std::isnan(f)) ASSERT_EQ(bits::float_to_bf16(f), b);
  }
}

TEST(Bits, OrderedUlp) {
  EXPECT_EQ(bits::ordered(bits::f32_bits(0.0f), 4), bits::ordered(bits::f32_bits(-0.0f), 4));
  const float x = 1.0f;
  EXPECT_EQ(bits::ordered(bits::f32_bits(std::nextafter(x, 2.0f)), 4) - bits::ordered(bits::f32_bits(x), 4), 1);
  const float tiny = std::nextafter(0.0f, 1.0f);
  EXPECT_EQ(bits::ordered(bits::f32_bits(tiny), 4) - bits::ordered(bits::f32_bits(-tiny), 4), 2);
}

TEST(View, OffsetsAndContiguity) {
  float buf[6];
  auto c = contiguous_view(buf, DType::F32, {3, 2});
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.offset_of(5), 5);
  auto t = make_view(buf, DType::F32, Device::CPU, 0, {2, 3}, {1, 2});  // transpose
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.offset_of(4), 3);  // (1,1) -> 1*1 + 1*2
  EXPECT_EQ(t.numel(), 6);
  auto e = make_view(buf, DType::F32, Device::CPU, 0, {4, 3}, {0, 1});  // expanded rows
  EXPECT_EQ(e.offset_of(10), 1);
  EXPECT_THROW(make_view(buf, DType::F32, Device::CPU, 0, {2, 3}, {1}), Error);
  EXPECT_THROW(make_view(buf, DType::F32, Device::CPU, 0, {-1}, {1}), Error);
  EXPECT_THROW(dtype_from_dlpack(5, 64, 1), Error);  // complex
  EXPECT_EQ(dtype_from_dlpack(4, 16, 1), DType::BF16);
}
