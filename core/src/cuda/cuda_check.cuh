/// @file cuda_check.cuh
/// @brief Internal: CUDA error checks that name the stage and the CUDA error string, and the
/// launch geometry shared by the core's kernels.
#pragma once

#include <cuda_runtime.h>

#include "kverify/common/check.hpp"

#define KV_CUDA_CHECK(stage, call)                                                        \
  do {                                                                                    \
    cudaError_t kv_err_ = (call);                                                         \
    KV_CHECK(kv_err_ == cudaSuccess, "%s: %s", stage, cudaGetErrorString(kv_err_));       \
  } while (0)

namespace kverify::cuda {

constexpr int kThreads = 256;  ///< threads per block of every core kernel

/// A persistent grid: `per_sm` blocks per multiprocessor of the current device, capped by work.
inline int grid_for(int64_t work_items, int per_sm = 4) {
  int dev = 0, sms = 0;
  KV_CUDA_CHECK("cudaGetDevice", cudaGetDevice(&dev));
  KV_CUDA_CHECK("cudaDeviceGetAttribute", cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t need = (work_items + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(sms) * per_sm;
  return static_cast<int>(need < 1 ? 1 : (need < cap ? need : cap));
}

/// Make `device_id` current for the scope of a call.
struct DeviceGuard {
  int prev = 0;
  explicit DeviceGuard(int device_id) {
    KV_CUDA_CHECK("cudaGetDevice", cudaGetDevice(&prev));
    if (prev != device_id) KV_CUDA_CHECK("cudaSetDevice", cudaSetDevice(device_id));
  }
  ~DeviceGuard() { cudaSetDevice(prev); }
};

}  // namespace kverify::cuda
