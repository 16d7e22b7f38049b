// CPU/GPU parity of synthesis, comparison, digest and sentinels (CTest label `gpu`; skipped when
// no CUDA device is present).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kverify/compare/compare.hpp"
#include "kverify/compare/element.hpp"
#include "kverify/poison/poison.hpp"
#include "kverify/synth/synth.hpp"
#include "../expect_stats.hpp"

using namespace kverify;

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes;
  explicit DeviceBuffer(size_t b) : bytes(b) { EXPECT_EQ(cudaMalloc(&p, b), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<unsigned char> host() const {
    std::vector<unsigned char> h(bytes);
    EXPECT_EQ(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  void upload(const void* src) { EXPECT_EQ(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), cudaSuccess); }
};

/// Element i of a float buffer of dtype t, as a double (exact).
double value_at(const std::vector<unsigned char>& buf, int64_t i, DType t) {
  const uint64_t raw = bits::load_raw(buf.data(), i, dtype_size(t));
  switch (t) {
    case DType::F64: return compare::widen<DType::F64>(raw);
    case DType::F32: return compare::widen<DType::F32>(raw);
    case DType::F16: return compare::widen<DType::F16>(raw);
    default: return compare::widen<DType::BF16>(raw);
  }
}

}  // namespace

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

TEST(CudaParity, SynthBitwiseIdentical) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 100003;
  for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    for (synth::DistKind k : {synth::DistKind::Normal, synth::DistKind::Uniform, synth::DistKind::UniformInt}) {
      synth::Distribution d;
      d.kind = k;
      d.p0 = k == synth::DistKind::Normal ? 0.5 : -7;
      d.p1 = k == synth::DistKind::Normal ? 3.0 : 9;
      d.special_density = is_float(t) ? 0.01 : 0.0;
      d.special_mask = 7;
      d.stream = 5;
      const size_t bytes = n * dtype_size(t);
      std::vector<unsigned char> h(bytes);
      synth::fill(contiguous_view(h.data(), t, {n}), 1234567, d);
      DeviceBuffer g(bytes);
      synth::fill(contiguous_view(g.p, t, {n}, Device::CUDA), 1234567, d);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(g.host(), h) << dtype_name(t) << " dist " << int(k);
    }
  }
}

TEST(CudaParity, CompareDigestSentinel) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1 << 20;
  std::vector<float> c(n + 5);
  std::vector<double> o(n + 5);
  synth::Distribution d;
  d.special_density = 0.001;
  d.special_mask = 7;
  synth::fill(contiguous_view(o.data(), DType::F64, {n + 5}), 1, d);
  for (int64_t i = 0; i < n + 5; ++i) c[i] = static_cast<float>(o[i] * (1.0 + 1e-6 * ((i * 7919) % 13)));
  c[77] = NAN;
  c[1000] = 0.0f;
  for (int64_t len : {n + 5, int64_t(1), int64_t(7), int64_t(8), n - 3}) {
    DeviceBuffer gc(len * 4), go(len * 8);
    gc.upload(c.data());
    go.upload(o.data());
    const compare::Bound b{1e-7, 2e-6};
    auto hs = compare::compare(contiguous_view(c.data(), DType::F32, {len}), contiguous_view(o.data(), DType::F64, {len}), b);
    auto gs = compare::compare(contiguous_view(gc.p, DType::F32, {len}, Device::CUDA),
                               contiguous_view(go.p, DType::F64, {len}, Device::CUDA), b);
    EXPECT_EQ(gs.n, hs.n);
    EXPECT_EQ(gs.first_neginf, hs.first_neginf);
    expect_same_measurements(gs, hs, 1e-12, "length " + std::to_string(len));
    // deterministic run to run
    auto gs2 = compare::compare(contiguous_view(gc.p, DType::F32, {len}, Device::CUDA),
                                contiguous_view(go.p, DType::F64, {len}, Device::CUDA), b);
    EXPECT_EQ(std::memcmp(&gs, &gs2, sizeof(gs)), 0);
    EXPECT_EQ(compare::digest(contiguous_view(gc.p, DType::F32, {len}, Device::CUDA)),
              compare::digest(contiguous_view(c.data(), DType::F32, {len})));
  }
  // strided (transposed) view on the GPU
  DeviceBuffer gc(12 * 4);
  gc.upload(c.data());
  EXPECT_EQ(compare::digest(make_view(gc.p, DType::F32, Device::CUDA, 0, {3, 4}, {1, 3})),
            compare::digest(make_view(c.data(), DType::F32, Device::CPU, 0, {3, 4}, {1, 3})));
  // sentinels
  DeviceBuffer s(1000 * 2);
  auto sv = contiguous_view(s.p, DType::BF16, {1000}, Device::CUDA);
  poison::fill_sentinel(sv);
  ASSERT_EQ(cudaMemset(static_cast<char*>(s.p) + 20, 0, 10), cudaSuccess);  // elements 10..14
  int64_t first = -2;
  EXPECT_EQ(poison::count_sentinel(sv, &first), 995);
  EXPECT_EQ(first, 0);
  ASSERT_EQ(cudaMemset(s.p, 0, 8), cudaSuccess);  // elements 0..3
  EXPECT_EQ(poison::count_sentinel(sv, &first), 991);
  EXPECT_EQ(first, 4);
}

TEST(CudaParity, LeanComparePairsEqualCpu) {
  // The lean chunk step (candidates of up to 4 bytes) runs on the GPU from registers with two
  // chunks in flight per thread and re-reads memory for its rare second pass; the CPU runs it from
  // arrays. Same fields (sums to rounding) for each pair, on data whose running maxima move often
  // (errors growing along the tensor) and with scattered NaN/Inf, at lengths with a scalar tail.
  SKIP_WITHOUT_GPU();
  const std::pair<DType, DType> pairs[] = {{DType::F32, DType::F32}, {DType::BF16, DType::BF16}, {DType::F16, DType::F16},
                                           {DType::F32, DType::F64}, {DType::BF16, DType::F32}};
  const int64_t n = (1 << 20) + 13;
  for (auto [tc, to] : pairs) {
    for (int variant = 0; variant < 2; ++variant) {
      std::vector<unsigned char> hc(n * dtype_size(tc)), ho(n * dtype_size(to));
      synth::Distribution d;
      d.special_density = variant ? 0.0005 : 0.0;
      d.special_mask = 7;
      synth::fill(contiguous_view(ho.data(), to, {n}), 3, d);
      synth::Distribution noise;
      synth::fill(contiguous_view(hc.data(), tc, {n}), 4, noise);
      for (int64_t i = 0; i < n; ++i) {  // candidate = oracle + error growing with i (+ noise)
        const double ov = value_at(ho, i, to);
        const double cv = ov + (variant ? 1e-3 : 1e-9 * static_cast<double>(i)) * value_at(hc, i, tc);
        bits::store_raw(hc.data(), i, dtype_size(tc), tc == DType::F32 ? bits::round_bits<DType::F32>(cv)
                                                         : tc == DType::F16 ? bits::round_bits<DType::F16>(cv)
                                                                            : bits::round_bits<DType::BF16>(cv));
      }
      DeviceBuffer gc(hc.size()), go(ho.size());
      gc.upload(hc.data());
      go.upload(ho.data());
      const compare::Bound b{1e-3, 1e-3};
      auto hs = compare::compare(contiguous_view(hc.data(), tc, {n}), contiguous_view(ho.data(), to, {n}), b);
      auto gs = compare::compare(contiguous_view(gc.p, tc, {n}, Device::CUDA), contiguous_view(go.p, to, {n}, Device::CUDA), b);
      const std::string at = std::string(dtype_name(tc)) + "/" + dtype_name(to) + " variant " + std::to_string(variant);
      expect_same_measurements(gs, hs, 1e-6, at);
      EXPECT_GT(hs.max_ulp, 0u) << at;
    }
  }
}

TEST(CudaParity, LeanSharedThresholdsManyStepsPerThread) {
  // The kernel shares the 16-bit flag thresholds across each warp after every step (compare.cu
  // share_thresholds): that matters only when a thread takes many steps. 2^24 + 13 elements are
  // ~2^20 two-chunk steps, about 15 per thread on an H200 (one wave of resident blocks). Data with
  // many exact ties of the relative error (c = o (1 + k eps), few distinct k) and data whose
  // maxima move along the tensor; GPU and CPU must measure the same.
  SKIP_WITHOUT_GPU();
  const int64_t n = (int64_t{1} << 24) + 13;
  for (DType t : {DType::BF16, DType::F16}) {
    for (int variant = 0; variant < 2; ++variant) {
      std::vector<unsigned char> hc(n * 2), ho(n * 2);
      synth::Distribution d;
      synth::fill(contiguous_view(ho.data(), t, {n}), 5, d);
      const double eps = t == DType::BF16 ? 0x1p-7 : 0x1p-10;
      for (int64_t i = 0; i < n; ++i) {
        const double ov = value_at(ho, i, t);
        const double k = static_cast<double>(static_cast<int64_t>((i * 2654435761ll) >> 7) % 5) - 2.0;  // -2..2
        const double cv = variant ? ov + 1e-9 * static_cast<double>(i) : ov * (1.0 + k * eps);
        bits::store_raw(hc.data(), i, 2, t == DType::F16 ? bits::round_bits<DType::F16>(cv) : bits::round_bits<DType::BF16>(cv));
      }
      DeviceBuffer gc(hc.size()), go(ho.size());
      gc.upload(hc.data());
      go.upload(ho.data());
      const compare::Bound b{1e-2, 1e-2};
      auto hs = compare::compare(contiguous_view(hc.data(), t, {n}), contiguous_view(ho.data(), t, {n}), b);
      auto gs = compare::compare(contiguous_view(gc.p, t, {n}, Device::CUDA), contiguous_view(go.p, t, {n}, Device::CUDA), b);
      const std::string at = std::string(dtype_name(t)) + " variant " + std::to_string(variant);
      expect_same_measurements(gs, hs, 1e-6, at);
      EXPECT_GT(hs.max_rel_err, 0.0) << at;
    }
  }
}
