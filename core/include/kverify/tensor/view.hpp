/// @file view.hpp
/// @brief A non-owning view of a strided tensor (the fields of a DLPack DLTensor).
///
/// Strides are in elements, as in DLPack and PyTorch; zero strides (expanded dimensions) are
/// allowed; negative strides are not (PyTorch never makes them). The logical index of an element
/// is its row-major position over `shape`; every core routine reports indices in that order.
///
/// Example: a 2x3 float32 transpose of a contiguous 3x2 tensor has shape {2,3}, strides {1,2};
/// logical index 4 is element (1,1) at storage offset 1*1 + 1*2 = 3.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kverify/tensor/dtype.hpp"

namespace kverify {

constexpr int kMaxDims = 8;  ///< the most dimensions a view may have

struct TensorView {
  void* data = nullptr;        ///< address of element (0,...,0)
  DType dtype = DType::F32;    ///< element type
  Device device = Device::CPU; ///< memory space
  int device_id = 0;           ///< CUDA ordinal (0 on CPU)
  int ndim = 0;                ///< number of dimensions, 0..kMaxDims
  int64_t shape[kMaxDims] = {};    ///< extent of each dimension
  int64_t strides[kMaxDims] = {};  ///< stride of each dimension, in elements

  /// Number of logical elements (1 for a 0-d tensor).
  KV_HD int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }

  /// True when element i lives at offset i (row-major, dense).
  KV_HD bool is_contiguous() const {
    int64_t expect = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (shape[d] != 1 && strides[d] != expect) return false;
      expect *= shape[d];
    }
    return true;
  }

  /// Storage offset, in elements, of logical (row-major) index `linear`.
  KV_HD int64_t offset_of(int64_t linear) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t q = linear / shape[d];
      off += (linear - q * shape[d]) * strides[d];
      linear = q;
    }
    return off;
  }

  /// "float32[2, 3] cpu" — for error messages.
  std::string describe() const {
    std::string s = dtype_name(dtype);
    s += "[";
    for (int d = 0; d < ndim; ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
    s += device == Device::CPU ? "] cpu" : "] cuda:" + std::to_string(device_id);
    return s;
  }
};

/// Build a view from raw fields, validating them.
/// @throws kverify::Error if ndim > kMaxDims, a shape is negative or a stride is negative.
inline TensorView make_view(void* data, DType dtype, Device device, int device_id,
                            const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  KV_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "ndim %zu > %d", shape.size(), kMaxDims);
  KV_CHECK(shape.size() == strides.size(), "shape has %zu dims, strides %zu", shape.size(), strides.size());
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.device_id = device_id;
  v.ndim = static_cast<int>(shape.size());
  for (int d = 0; d < v.ndim; ++d) {
    KV_CHECK(shape[d] >= 0, "negative extent %lld in dim %d", (long long)shape[d], d);
    KV_CHECK(strides[d] >= 0, "negative stride %lld in dim %d", (long long)strides[d], d);
    v.shape[d] = shape[d];
    v.strides[d] = strides[d];
  }
  return v;
}

/// A contiguous view of `shape` at `data` (row-major strides).
inline TensorView contiguous_view(void* data, DType dtype, const std::vector<int64_t>& shape,
                                  Device device = Device::CPU, int device_id = 0) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
  return make_view(data, dtype, device, device_id, shape, strides);
}

}  // namespace kverify
