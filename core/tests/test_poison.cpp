#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kverify/poison/poison.hpp"
#include "kverify/tensor/bits.hpp"

using namespace kverify;

TEST(Poison, FillAndCount) {
  std::vector<float> v(10, 1.0f);
  auto t = contiguous_view(v.data(), DType::F32, {10});
  poison::fill_sentinel(t);
  int64_t first = -2;
  EXPECT_EQ(poison::count_sentinel(t, &first), 10);
  EXPECT_EQ(first, 0);
  v[0] = 0.0f;
  v[3] = 2.0f;
  EXPECT_EQ(poison::count_sentinel(t, &first), 8);
  EXPECT_EQ(first, 1);
  for (auto& x : v) x = 3.0f;
  EXPECT_EQ(poison::count_sentinel(t, &first), 0);
  EXPECT_EQ(first, -1);
}

TEST(Poison, SentinelIsASignallingNaNThatArithmeticQuiets) {
  std::vector<float> v(1);
  poison::fill_sentinel(contiguous_view(v.data(), DType::F32, {1}));
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(bits::f32_bits(v[0]) & 0x00400000u, 0u);  // quiet bit clear
  volatile float one = 1.0f;
  const float r = v[0] * one;  // arithmetic on it
  EXPECT_TRUE(std::isnan(r));
  EXPECT_NE(bits::f32_bits(r), static_cast<uint32_t>(poison::sentinel_bits(DType::F32)));
  // generic NaNs are not sentinels
  std::vector<float> w = {NAN, -NAN, std::nanf("1")};
  EXPECT_EQ(poison::count_sentinel(contiguous_view(w.data(), DType::F32, {3})), 0);
}

TEST(Poison, AllDtypes) {
  for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I8, DType::I32, DType::I64}) {
    std::vector<uint64_t> buf(8, 0);
    auto v = contiguous_view(buf.data(), t, {5});
    poison::fill_sentinel(v);
    EXPECT_EQ(poison::count_sentinel(v), 5) << dtype_name(t);
  }
  // fp16 / bf16 sentinels are NaN with the quiet bit clear
  EXPECT_TRUE(std::isnan(bits::half_to_float(poison::sentinel_bits(DType::F16))));
  EXPECT_EQ(poison::sentinel_bits(DType::F16) & 0x200u, 0u);
  EXPECT_TRUE(std::isnan(bits::bf16_to_float(poison::sentinel_bits(DType::BF16))));
  EXPECT_EQ(poison::sentinel_bits(DType::BF16) & 0x40u, 0u);
}
