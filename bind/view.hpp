/// @file view.hpp
/// @brief Binding helper: a core TensorView from a nanobind ndarray (any DLPack producer).
#pragma once

#include <nanobind/ndarray.h>

#include <vector>

#include "kverify/tensor/view.hpp"

namespace kverify::bind {

namespace nb = nanobind;

/// View of a DLPack tensor. @throws kverify::Error for unsupported dtypes or devices.
inline TensorView view_of(const nb::ndarray<>& a) {
  const auto dt = a.dtype();
  const DType t = dtype_from_dlpack(dt.code, dt.bits, dt.lanes);
  Device dev;
  if (a.device_type() == nb::device::cpu::value) dev = Device::CPU;
  else if (a.device_type() == nb::device::cuda::value) dev = Device::CUDA;
  else KV_CHECK(false, "unsupported DLPack device type %d (only CPU and CUDA)", a.device_type());
  std::vector<int64_t> shape(a.ndim()), strides(a.ndim());
  for (size_t d = 0; d < a.ndim(); ++d) {
    shape[d] = static_cast<int64_t>(a.shape(d));
    strides[d] = static_cast<int64_t>(a.stride(d));
  }
  return make_view(const_cast<void*>(a.data()), t, dev, a.device_id(), shape, strides);
}

}  // namespace kverify::bind
