// Control for bench/cu_headers.py (kverify narrow header, opt-in): the narrow header must show as
// DIFFERENT device code here. With the full headers, ADL on c10::Half also finds c10::load
// (c10/util/Load.h), which wins over this template; the narrow header lacks Load.h, so this one wins.
#include <torch/extension.h>
// a cache-hinted read-only load helper, a common kernel idiom
template <typename T> __device__ __forceinline__ T load(T* p) {
  if constexpr (sizeof(T) == 2) { unsigned short u = __ldg(reinterpret_cast<const unsigned short*>(p)); std::remove_const_t<T> r; memcpy(&r, &u, 2); return r; }
  else { return *p; }
}
__global__ void cast_kernel(const at::Half* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = static_cast<float>(load(x + i));   // ADL on c10::Half: full headers also see c10::load
}
torch::Tensor cast(torch::Tensor x) {
  auto y = torch::empty(x.sizes(), x.options().dtype(torch::kFloat));
  cast_kernel<<<(x.numel() + 255) / 256, 256>>>(reinterpret_cast<const at::Half*>(x.data_ptr()), y.data_ptr<float>(), x.numel());
  return y;
}
